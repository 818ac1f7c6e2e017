struct Tokenizer;

#[derive(gpu_scope::Tensors)]
struct Model {
    weights: tch::Tensor,
    tokenizer: Tokenizer,
}

fn main() {}
