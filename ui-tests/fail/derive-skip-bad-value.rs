#[derive(gpu_scope::Tensors)]
struct Model {
    weights: tch::Tensor,
    #[tensors(skip = 1)]
    steps: usize,
}

fn main() {}
