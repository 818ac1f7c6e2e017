// A lifetime named like async-trait's on a function that returns no future is the user's own:
// only a function that returns a future and has it is refused as an `#[async_trait]` method.
#[gpu_scope::gpu_scope]
fn first<'async_trait>(x: &'async_trait [tch::Tensor]) -> &'async_trait tch::Tensor {
    &x[0]
}

fn main() {
    let v = vec![tch::Tensor::from(1.0)];
    assert_eq!(first(&v).double_value(&[]), 1.0);
}
