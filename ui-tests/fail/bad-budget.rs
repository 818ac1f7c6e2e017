#[gpu_scope::gpu_scope(max_peak = "2 gigs")]
fn run() {}

fn main() {
    run();
}
