// `on_escape` written without its value: the error is at the option and lists the policies.
#[gpu_scope::gpu_scope(on_escape)]
fn no_equals() {}

#[gpu_scope::gpu_scope(on_escape =)]
fn nothing_after() {}

fn main() {
    no_equals();
    nothing_after();
    let _ = gpu_scope::scope!(on_escape, { 1 });
    let _ = gpu_scope::scope!(on_escape = , { 1 });
}
