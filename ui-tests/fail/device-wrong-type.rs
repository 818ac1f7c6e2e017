#[gpu_scope::gpu_scope(device = d)]
fn named(d: &str) {
    let _ = d;
}

fn main() {
    named("cuda");
}
