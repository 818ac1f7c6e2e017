// `.await` inside an async closure or block in a macro's input is not the block scope's.
async fn ready() -> u32 {
    1
}

fn run() -> usize {
    gpu_scope::scope!({
        let closures = vec![async move || ready().await + 1];
        let blocks = vec![async { ready().await }];
        closures.len() + blocks.len()
    })
}

fn main() {
    assert_eq!(run(), 2);
}
