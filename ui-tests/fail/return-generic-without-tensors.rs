// A generic return type must be searchable for tensors: the bound is asked for at compile time.
use gpu_scope::gpu_scope;
use tch::Tensor;

#[gpu_scope]
fn build<T>(make: impl FnOnce() -> T) -> T {
    make()
}

fn main() {
    let _ = build(|| Tensor::zeros([2], tch::kind::FLOAT_CPU));
}
