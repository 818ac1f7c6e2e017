// A syntax error in the function: rustc's own error, and nothing of the macro's beside it.
#[gpu_scope::gpu_scope]
fn missing_semicolon() -> u32 {
    let x = 1 x
}

fn main() {
    let _ = missing_semicolon();
}
