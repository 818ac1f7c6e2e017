// An option written without its value (the other options than `device` and `on_escape`, which
// have their own cases): the error is at the option and shows it written out.
#[gpu_scope::gpu_scope(name)]
fn name_alone() {}

#[gpu_scope::gpu_scope(release =)]
fn release_with_nothing_after() {}

#[gpu_scope::gpu_scope(max_peak =, name = "x")]
fn max_peak_before_another() {}

#[gpu_scope::gpu_scope(keep_grad =)]
fn keep_grad_with_nothing_after() {}

fn main() {
    name_alone();
    release_with_nothing_after();
    max_peak_before_another();
    keep_grad_with_nothing_after();
    let _ = gpu_scope::scope!(name =, { 1 });
    let _ = gpu_scope::scope!(keep =, { 1 });
}
