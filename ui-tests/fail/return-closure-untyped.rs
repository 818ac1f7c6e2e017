// A closure returned as `impl Fn(&Tensor)` needs its argument types written inside the scope.
use tch::Tensor;

#[gpu_scope::gpu_scope]
fn doubler() -> impl Fn(&Tensor) -> Tensor {
    |x| x * 2
}

fn main() {
    let _ = doubler()(&Tensor::from(1.0));
}
