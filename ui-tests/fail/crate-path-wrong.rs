// `crate = ...` names a path that is not gpu-scope (here tch), or that does not exist: the
// error points at the path the user wrote.
#[gpu_scope::gpu_scope(crate = tch)]
fn not_gpu_scope() {}

// With a borrowed argument the path is also where its sharing rules are looked up.
#[gpu_scope::gpu_scope(crate = tch)]
fn with_argument(x: &tch::Tensor) -> tch::Tensor {
    x + 1
}

#[gpu_scope::gpu_scope(crate = no_such_crate)]
fn missing() {}

fn main() {
    not_gpu_scope();
    let _ = with_argument(&tch::Tensor::from(1.0));
    missing();
    let _ = gpu_scope::scope!(crate = tch, { 1 });
}

#[derive(gpu_scope::Tensors)]
#[tensors(crate = tch)]
struct Outputs {
    logits: tch::Tensor,
}
