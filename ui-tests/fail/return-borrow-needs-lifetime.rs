// A returned borrow of an argument whose type does not say it lives long enough: shown at
// the returned expression, as without the attribute.
use gpu_scope::gpu_scope;
use tch::Tensor;

#[gpu_scope]
fn pick<'a>(a: &'a Tensor, b: &Tensor) -> &'a Tensor {
    let _ = a;
    b
}

fn main() {}
