fn main() {
    let _ = gpu_scope::scope!(name = "x", async { 5 });
    let _ = gpu_scope::scope!(name = "y", unsafe { 5 });
}
