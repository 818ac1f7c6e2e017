#[gpu_scope::gpu_scope(on_escape = error)]
fn parse(text: &str) -> Result<u32, gpu_scope::Error> {
    let n: u32 = text.parse()?;
    Ok(n)
}

fn main() {
    let _ = parse("1");
}
