// Functions returning `!` compile: the expansion never names the type.
use gpu_scope::gpu_scope;

#[gpu_scope]
fn fail(message: &str) -> ! {
    panic!("{message}")
}

#[gpu_scope(on_escape = warn)]
async fn forever() -> ! {
    loop {
        std::future::pending::<()>().await;
    }
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    assert!(std::panic::catch_unwind(|| fail("stop")).is_err());
    let _never_polled = forever();
}
