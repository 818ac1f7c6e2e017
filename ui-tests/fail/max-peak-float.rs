#[gpu_scope::gpu_scope(max_peak = 1.5)]
fn run() {}

fn main() {
    run();
}
