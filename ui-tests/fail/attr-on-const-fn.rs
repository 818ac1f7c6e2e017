#[gpu_scope::gpu_scope]
const fn width() -> usize {
    4
}

fn main() {
    let _ = width();
}
