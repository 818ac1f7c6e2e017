async fn ready() -> u32 {
    1
}

async fn run() -> usize {
    gpu_scope::scope!({ vec![ready().await, 2].len() })
}

fn main() {
    let _ = run();
}
