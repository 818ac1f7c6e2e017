// `crate = ...` names a path that is not gpu-scope (here tch), or that does not exist: the
// error points at the path the user wrote.
#[gpu_scope::gpu_scope(crate = tch)]
fn not_gpu_scope() {}

#[gpu_scope::gpu_scope(crate = no_such_crate)]
fn missing() {}

fn main() {
    not_gpu_scope();
    missing();
    let _ = gpu_scope::scope!(crate = tch, { 1 });
}

#[derive(gpu_scope::Tensors)]
#[tensors(crate = tch)]
struct Outputs {
    logits: tch::Tensor,
}
