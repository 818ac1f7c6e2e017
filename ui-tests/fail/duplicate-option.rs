#[gpu_scope::gpu_scope(name = "a", name = "b")]
fn run() {}

fn main() {
    run();
}
