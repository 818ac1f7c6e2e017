async fn ready() -> u32 {
    1
}

async fn run() -> u32 {
    gpu_scope::scope!({ ready().await })
}

fn main() {
    let _ = run();
}
