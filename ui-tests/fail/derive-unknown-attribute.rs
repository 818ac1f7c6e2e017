#[derive(gpu_scope::Tensors)]
enum Layer {
    #[tensors(bogus = 1)]
    Dense(tch::Tensor),
    Identity,
}

fn main() {
    let _ = Layer::Identity;
}
