// The code without braces: the error is at the code, and says to put it in braces.
fn main() {
    let x = 1;
    let _ = gpu_scope::scope!(name = "a", x + 1);
}
