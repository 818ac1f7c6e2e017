// Functions returning `!` compile: the expansion never names the type. So do blocks that
// always panic.
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

// A block whose every branch panics compiles whatever its type, as one ending in a panic.
fn undecided(flag: bool) -> u32 {
    gpu_scope::scope!({
        if flag {
            panic!("not yet")
        } else {
            todo!()
        }
    })
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    assert!(std::panic::catch_unwind(|| fail("stop")).is_err());
    let _never_polled = forever();
    assert!(std::panic::catch_unwind(|| undecided(true)).is_err());
}
