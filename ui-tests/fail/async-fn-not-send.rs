// An async scoped function whose future is not `Send` is refused by a `Send` bound, as without
// the attribute: the notes point at the user's code (the value and its `.await`, or the
// argument held across the function's run).
use std::rc::Rc;

#[gpu_scope::gpu_scope]
async fn step(n: u32) -> u32 {
    let shared = Rc::new(n);
    std::future::ready(()).await;
    *shared + 1
}

#[gpu_scope::gpu_scope]
async fn shared_argument(n: Rc<u32>) -> u32 {
    std::future::ready(()).await;
    *n + 1
}

fn spawn<F: std::future::Future + Send>(_: F) {}

fn main() {
    spawn(step(1));
    spawn(shared_argument(Rc::new(1)));
}
