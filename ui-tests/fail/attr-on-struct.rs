#[gpu_scope::gpu_scope]
struct Model {
    layers: usize,
}

fn main() {
    let _ = Model { layers: 1 }.layers;
}
