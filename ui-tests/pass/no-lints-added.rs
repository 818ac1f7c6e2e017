// The expansion adds no lint of its own to the user's code: a one-expression body (which
// wrapped in a block of ours would be `unused_braces`), under `deny(warnings)`.
#![deny(warnings)]
use gpu_scope::gpu_scope;
use tch::Tensor;

#[gpu_scope]
fn one(x: &Tensor) -> Tensor {
    x * 2
}

#[gpu_scope(on_escape = error)]
fn fallible(x: &Tensor) -> Result<Tensor, gpu_scope::Error> {
    Ok(x + 1)
}

#[gpu_scope]
async fn later(x: f64) -> f64 {
    x * 2.0
}

#[gpu_scope]
fn unit(x: &Tensor) {
    drop(x * 2)
}

#[gpu_scope]
fn stop(message: &str) -> ! {
    panic!("{message}")
}

fn main() {
    let t = Tensor::from(1.0);
    let _ = (one(&t), fallible(&t).unwrap());
    drop(later(1.0));
    unit(&t);
    let _ = stop as fn(&str) -> !;
}
