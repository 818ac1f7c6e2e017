#[gpu_scope::gpu_scope(on_escape = error)]
fn run() -> Result<u32, String> {
    Ok(1)
}

fn main() {
    let _ = run();
}
