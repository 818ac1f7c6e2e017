#[gpu_scope::gpu_scope(release = sometimes)]
fn run() {}

fn main() {
    run();
}
