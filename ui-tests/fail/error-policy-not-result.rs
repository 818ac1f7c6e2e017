#[gpu_scope::gpu_scope(on_escape = error)]
fn run() -> u32 {
    1
}

fn main() {
    let _ = run();
}
