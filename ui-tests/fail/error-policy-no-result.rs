#[gpu_scope::gpu_scope(on_escape = error)]
fn run() {}

fn main() {
    run();
}
