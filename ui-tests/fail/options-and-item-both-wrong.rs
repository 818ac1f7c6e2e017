#[gpu_scope::gpu_scope(verbose)]
struct Model;

fn main() {}
