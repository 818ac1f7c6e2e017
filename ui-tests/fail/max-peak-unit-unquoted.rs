#[gpu_scope::gpu_scope(max_peak = 1 KiB)]
fn run() {}

fn main() {
    run();
}
