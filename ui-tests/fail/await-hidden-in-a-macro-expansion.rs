// A macro that awaits in its own expansion: `scope!` cannot see the `.await`, and the scope
// held across it makes the task's future not `Send`.
macro_rules! wait {
    ($future:expr) => {
        $future.await
    };
}

fn spawn<F: std::future::Future + Send>(_: F) {}

fn main() {
    spawn(async { gpu_scope::scope!({ wait!(std::future::ready(1)) + 1 }) });
}
