#[gpu_scope::gpu_scope(on_escape = panic)]
pub extern "C" fn run() {}

fn main() {
    run();
}
