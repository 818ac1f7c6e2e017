// `scope!` given a `loop`, `match`, `for`, `if` or `while` without braces of its own, and
// options written after the block: each error says what to write.
fn main() {
    let v = 1;
    let _ = gpu_scope::scope!(loop {
        break 1;
    });
    let _ = gpu_scope::scope!(name = "m", match v {
        _ => 1,
    });
    let _ = gpu_scope::scope!({ v + 1 }, name = "late");
}
