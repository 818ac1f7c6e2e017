#[gpu_scope::gpu_scope(name = "outer")]
#[gpu_scope::gpu_scope(name = "inner")]
fn run() {}

fn main() {
    run();
}
