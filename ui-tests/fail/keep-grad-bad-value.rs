#[gpu_scope::gpu_scope(keep_grad = "yes")]
fn run() {}

fn main() {
    run();
}
