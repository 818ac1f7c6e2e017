fn main() {
    let _ = gpu_scope::scope!(name = "x");
}
