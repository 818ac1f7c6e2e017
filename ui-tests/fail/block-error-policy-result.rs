// Under `on_escape = error` the block form evaluates to a `Result`.
fn count() -> usize {
    gpu_scope::scope!(on_escape = error, { 1 + 1 })
}

fn main() {
    let _ = count();
}
