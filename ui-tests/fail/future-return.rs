use std::future::Future;

#[gpu_scope::gpu_scope]
fn forward(n: i64) -> impl Future<Output = i64> {
    async move { n }
}

fn main() {
    let _ = forward(1);
}
