mod text {
    pub type Result<T> = std::result::Result<T, String>;
}

#[gpu_scope::gpu_scope(on_escape = error)]
fn run() -> Result<u32, String> {
    Ok(1)
}

// Shown at `Result`, not at `text`.
#[gpu_scope::gpu_scope(on_escape = error)]
fn read() -> text::Result<u32> {
    Ok(1)
}

fn main() {
    let _ = run();
    let _ = read();
}
