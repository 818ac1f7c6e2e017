use tch::Tensor;

#[gpu_scope::gpu_scope(on_escape = error)]
fn optional() -> Option<Tensor> {
    None
}

fn main() {
    let _ = optional();
}
