async fn ready() -> u32 {
    1
}

async fn run() -> u32 {
    // The async block's own `.await`s are its own; the one after it is the scope's.
    gpu_scope::scope!({ dbg!(async { ready().await }.await + 1) })
}

fn main() {
    let _ = run();
}
