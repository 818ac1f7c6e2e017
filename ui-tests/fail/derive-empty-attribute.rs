// An empty `#[tensors()]` says nothing: refused at the attribute, not silently ignored.
#[derive(gpu_scope::Tensors)]
struct Cache {
    #[tensors()]
    values: tch::Tensor,
}

fn main() {
    let _ = Cache {
        values: tch::Tensor::from(1.0),
    };
}
