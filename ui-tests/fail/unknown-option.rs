#[gpu_scope::gpu_scope(name = "x", verbose = true)]
fn run() {}

fn main() {
    run();
}
