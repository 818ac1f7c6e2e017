// `device` written without its value: the error is at the option and shows it written out.
#[gpu_scope::gpu_scope(device)]
fn no_equals() {}

#[gpu_scope::gpu_scope(device =)]
fn nothing_after() {}

fn main() {
    no_equals();
    nothing_after();
    let _ = gpu_scope::scope!(device =, { 1 });
}
