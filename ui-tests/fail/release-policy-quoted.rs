#[gpu_scope::gpu_scope(release = "never")]
fn quoted() {}

#[gpu_scope::gpu_scope(on_escape = EscapePolicy::Warn)]
fn path() {}

fn main() {
    quoted();
    path();
}
