// Several errors of one `scope!` in expression position: each shows, and nothing else.
async fn ready() -> u32 {
    1
}

async fn run() -> u32 {
    let n = gpu_scope::scope!({ ready().await + ready().await });
    n
}

fn main() {
    let _ = run();
}
