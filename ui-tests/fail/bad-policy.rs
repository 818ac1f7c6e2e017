#[gpu_scope::gpu_scope(on_escape = explode)]
fn run() {}

fn main() {
    run();
}
