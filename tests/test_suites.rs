//! README "In a test suite": `#[gpu_scope]` on tests, under `#[test]` and `#[tokio::test]` in
//! either order, fails a test that leaves memory behind, naming the allocation.
use gpu_scope::gpu_scope;
use tch::{Device, Kind, Tensor};

fn standardise(x: &Tensor) -> Tensor {
    (x - x.mean(Kind::Float)) / x.std(true)
}

#[test]
#[gpu_scope]
fn standardise_leaves_nothing_behind() {
    let x = Tensor::randn([64], (Kind::Float, Device::Cpu));
    assert_eq!(standardise(&x).size(), [64]);
}

#[gpu_scope]
#[test]
fn the_attributes_in_the_other_order() {
    let x = Tensor::randn([64], (Kind::Float, Device::Cpu));
    assert_eq!(standardise(&x).size(), [64]);
}

#[tokio::test]
#[gpu_scope]
async fn a_task_leaves_nothing_behind() {
    let x = Tensor::randn([64], (Kind::Float, Device::Cpu));
    tokio::task::yield_now().await;
    assert_eq!(standardise(&x).size(), [64]);
}

#[gpu_scope]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_on_a_multi_threaded_runtime() {
    let x = Tensor::randn([64], (Kind::Float, Device::Cpu));
    tokio::task::yield_now().await;
    assert_eq!(standardise(&x).size(), [64]);
}

// The leaking tests write `on_escape = panic`, as the README says for tests that run in
// release builds too (the default there is `warn`); the default itself is tested below.
#[test]
#[should_panic(expected = "escaped")]
#[gpu_scope(on_escape = panic)]
fn a_leak_fails_the_test() {
    std::mem::forget(Tensor::ones([4], (Kind::Float, Device::Cpu)));
}

#[tokio::test]
#[should_panic(expected = "escaped")]
#[gpu_scope(on_escape = panic)]
async fn a_leak_after_an_await_fails_the_test() {
    let t = Tensor::ones([4], (Kind::Float, Device::Cpu));
    tokio::task::yield_now().await;
    std::mem::forget(t);
}

#[test]
#[gpu_scope(on_escape = error)]
fn a_test_returning_the_escape() -> Result<(), gpu_scope::Error> {
    let x = Tensor::randn([64], (Kind::Float, Device::Cpu));
    assert_eq!(standardise(&x).size(), [64]);
    Ok(())
}

/// Bare, the attribute takes the build's default policy: `panic` with debug assertions (a
/// leak fails the test), `warn` without.
#[test]
fn a_bare_attribute_takes_the_builds_default_policy() {
    #[gpu_scope]
    fn leaks() {
        std::mem::forget(Tensor::ones([4], (Kind::Float, Device::Cpu)));
    }
    if std::env::var_os("GPU_SCOPE_ON_ESCAPE").is_some() {
        return; // the environment chose another default
    }
    let failed = std::thread::spawn(leaks).join().is_err();
    assert_eq!(
        failed,
        cfg!(debug_assertions),
        "panics only in a debug build"
    );
}

/// The failing test's message is the report: it names the allocation that escaped.
#[test]
fn the_failure_names_the_allocation() {
    // Named by shape at once, as in a debug build (a release build's default, on-leak, names a
    // place's first escape by size and address only).
    gpu_scope::set_attribution(gpu_scope::Attribution::Always);
    #[gpu_scope(on_escape = panic)]
    fn leaks() {
        std::mem::forget(Tensor::ones([4, 2], (Kind::Float, Device::Cpu)));
    }
    let message = std::thread::spawn(leaks)
        .join()
        .expect_err("the leak panics");
    let message = message.downcast_ref::<String>().expect("a formatted panic");
    assert!(message.contains("escaped"), "{message}");
    assert!(
        message.contains("32 B") && message.contains("[4, 2]"),
        "{message}"
    );
}

/// Under `#[tokio::test]` written above it (tokio's attribute expands first, into a function
/// that builds a runtime and blocks on the body), the scope is still the `async fn`'s, entered
/// at each of its polls: a task it spawns but does not carry the scope to is not its own.
#[tokio::test]
#[gpu_scope(on_escape = panic)]
async fn a_spawned_task_is_not_the_tests() {
    let task = tokio::spawn(async {
        let t = Tensor::ones([99], (Kind::Float, Device::Cpu));
        tokio::task::yield_now().await;
        // The task's leak (its own business), not one of the test's scope.
        std::mem::forget(t);
        // Nor does the task run with the scope's autograd off.
        let x = Tensor::ones([1], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        (&x * 2).requires_grad()
    });
    tokio::task::yield_now().await;
    assert!(task.await.unwrap(), "the task ran with autograd off");
}

/// The same under `#[tokio::main]` above the attribute: the report is the function's, named
/// after it, and counts what its body made, not what a task it spawned made.
#[test]
fn tokio_main_above_the_attribute_scopes_the_body() {
    #[tokio::main(flavor = "current_thread")]
    #[gpu_scope(on_escape = panic)]
    async fn serve() -> (Tensor, Tensor) {
        let made = tokio::spawn(async { Tensor::ones([99], (Kind::Float, Device::Cpu)) });
        let x = Tensor::ones([8], (Kind::Float, Device::Cpu));
        (made.await.unwrap(), x)
    }
    let out = serve();
    let report = gpu_scope::last_report().expect("a report");
    assert!(report.name.ends_with("::serve"), "{}", report.name);
    assert_eq!((out.0.size(), out.1.size()), (vec![99], vec![8]));
    assert_eq!(report.allocations, 1, "only the body's ones([8]): {report}");
}

/// A `#[tokio::main]` function other than `main` may take arguments: they are the scope's
/// arguments as in the other order (a borrowed one kept, an owned one dropped inside).
#[test]
fn tokio_main_above_the_attribute_with_arguments() {
    #[tokio::main(flavor = "current_thread")]
    #[gpu_scope(on_escape = panic)]
    async fn serve(x: &Tensor, y: Tensor) -> Tensor {
        let made = tokio::spawn(async { Tensor::ones([99], (Kind::Float, Device::Cpu)) });
        let grad = tokio::spawn(async {
            let w = Tensor::ones([1], (Kind::Float, Device::Cpu)).set_requires_grad(true);
            (&w * 2).requires_grad()
        });
        assert!(grad.await.unwrap(), "the task ran with autograd off");
        drop(made.await.unwrap());
        x + y
    }
    let x = Tensor::ones([8], (Kind::Float, Device::Cpu));
    let out = serve(&x, x.ones_like());
    let report = gpu_scope::last_report().expect("a report");
    assert!(report.name.ends_with("::serve"), "{}", report.name);
    assert_eq!(out.size(), [8]);
    assert_eq!(report.allocations, 1, "only the body's sum: {report}");
}

/// Arguments the attribute rewrites (a destructured one, an `Option<&mut _>`) keep working
/// under tokio's attribute written above it.
#[test]
fn tokio_main_above_the_attribute_with_argument_patterns() {
    struct Wrap(Tensor);
    #[tokio::main(flavor = "current_thread")]
    #[gpu_scope(on_escape = panic)]
    async fn patterns(Wrap(t): Wrap, o: Option<&mut Vec<Tensor>>) -> Tensor {
        tokio::task::yield_now().await;
        if let Some(o) = o {
            o.push(t.ones_like());
        }
        t * 2
    }
    let mut cache = Vec::new();
    let x = Tensor::ones([4], (Kind::Float, Device::Cpu));
    let out = patterns(Wrap(x), Some(&mut cache));
    assert_eq!((out.size(), cache.len()), (vec![4], 1));
    let report = gpu_scope::last_report().expect("a report");
    assert!(report.escaped.is_empty(), "{report}");
}

/// A function that opens the same way by hand (`let body = async {..};`) but does something
/// else with the future's value is not tokio's: it is scoped whole, as written.
#[test]
fn a_hand_written_runtime_is_scoped_whole() {
    #[gpu_scope(on_escape = panic)]
    fn own_runtime() -> String {
        let body = async { Tensor::ones([3], (Kind::Float, Device::Cpu)).size()[0] };
        let rt = tokio::runtime::Builder::new_current_thread().build();
        rt.unwrap().block_on(body).to_string()
    }
    assert_eq!(own_runtime(), "3");
    let report = gpu_scope::last_report().expect("a report");
    assert_eq!(report.allocations, 1, "{report}");
}

#[tokio::test]
#[gpu_scope(on_escape = error)]
async fn an_async_test_returning_the_escape() -> Result<(), gpu_scope::Error> {
    let x = Tensor::randn([64], (Kind::Float, Device::Cpu));
    tokio::task::yield_now().await;
    assert_eq!(standardise(&x).size(), [64]);
    Ok(())
}
