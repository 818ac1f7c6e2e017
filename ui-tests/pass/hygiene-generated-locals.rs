// The expansion's locals have mixed-site hygiene: the user's code cannot name them. Here the
// user's own bindings have the same names (parameters, outer locals, locals in the body) and
// every use of those names reaches the user's binding, not the expansion's guard, kept set or
// handles, which are in scope where the user's code runs.
use gpu_scope::{gpu_scope, scope};
use std::pin::Pin;
use std::sync::Arc;

#[gpu_scope]
fn parameters(__gpu_scope_exit: u32, __gpu_scope_shared0: u32, __gpu_scope_ret: u32) -> u32 {
    __gpu_scope_exit + __gpu_scope_shared0 + __gpu_scope_ret
}

#[gpu_scope(on_escape = error)]
fn error_policy(
    __gpu_scope_shared0: Arc<u32>,
    __gpu_scope_exit: u32,
) -> Result<u32, gpu_scope::Error> {
    Ok(*__gpu_scope_shared0 + __gpu_scope_exit)
}

#[gpu_scope(on_escape = error)]
async fn asynchronous(
    __gpu_scope_kept: u32,
    __gpu_scope_exit: u32,
) -> Result<u32, gpu_scope::Error> {
    Ok(__gpu_scope_kept + __gpu_scope_exit)
}

struct Pinned(u32);

impl Pinned {
    #[gpu_scope]
    fn pinned(self: Pin<&mut Self>, __gpu_scope_self: u32) -> u32 {
        self.0 + __gpu_scope_self
    }
}

fn blocks() -> u32 {
    let __gpu_scope_exit = 1;
    let __gpu_scope_error = 2;
    let a = scope!({ __gpu_scope_exit + 10 });
    let b = scope!(on_escape = error, { __gpu_scope_exit + __gpu_scope_error }).unwrap();
    a + b
}

#[gpu_scope]
fn own_locals() -> u32 {
    let __gpu_scope_ret = 1000u32;
    let __gpu_scope_exit = "not the guard";
    let __gpu_scope_kept = 7u8;
    __gpu_scope_ret + __gpu_scope_exit.len() as u32 + u32::from(__gpu_scope_kept)
}

fn main() {
    assert_eq!(parameters(1, 2, 4), 7);
    assert_eq!(error_policy(Arc::new(1), 2).unwrap(), 3);
    let mut pinned = Pinned(1);
    assert_eq!(Pin::new(&mut pinned).pinned(2), 3);
    assert_eq!(blocks(), 11 + 3);
    assert_eq!(own_locals(), 1000 + 13 + 7);
    let mut task = std::pin::pin!(asynchronous(1, 2));
    let waker = std::task::Waker::noop();
    let poll = task
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker));
    assert!(matches!(poll, std::task::Poll::Ready(Ok(3))));
}

use std::future::Future as _;
