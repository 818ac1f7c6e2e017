#[derive(gpu_scope::Tensors)]
#[tensors(skip)]
struct Config {
    layers: usize,
}

fn main() {
    let _ = Config { layers: 1 }.layers;
}
