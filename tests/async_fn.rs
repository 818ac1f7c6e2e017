//! `#[gpu_scope]` on `async fn`: re-entered on every poll, on whichever thread polls.
mod common;
use common::{block, floats, on, strict};
use gpu_scope::{gpu_scope, Error};
use std::sync::{Arc, Mutex};
use tch::{Device, Kind, Tensor};

static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[gpu_scope(on_escape = error)]
async fn hop(steps: usize, leak_at: Option<usize>) -> Result<Tensor, Error> {
    let mut acc = floats(8);
    for i in 0..steps {
        // Yield to the runtime so that the next poll may run on another worker thread.
        tokio::task::yield_now().await;
        acc = &acc + &floats(8);
        if leak_at == Some(i) {
            SINK.lock().unwrap().push(floats(5));
        }
    }
    Ok(acc)
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn polls_hop_threads_and_attribution_is_exact() {
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let leak_at = (i % 2 == 0).then_some(7);
            tokio::spawn(async move {
                let result = assert_send(hop(20, leak_at)).await;
                (result, gpu_scope::last_report().unwrap())
            })
        })
        .collect();
    let mut escapes = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        let (result, report) = t.await.unwrap();
        match result {
            Ok(acc) => {
                assert_eq!(i % 2, 1);
                assert_eq!(acc.size(), [8]);
                let row = on(&report);
                assert_eq!(
                    (row.kept, row.allocated),
                    (block(32), 41 * block(32)),
                    "{report}"
                );
            }
            Err(e) => {
                assert_eq!(i % 2, 0);
                let r = e.report().unwrap();
                let row = on(r);
                assert_eq!(
                    (r.escaped_bytes, row.escaped),
                    (block(20), block(20)),
                    "{r}"
                );
                assert_eq!(row.allocated, 41 * block(32) + block(20), "{r}");
                escapes += 1;
            }
        }
    }
    assert_eq!(escapes, 4);
    SINK.lock().unwrap().clear();
}

#[gpu_scope(on_escape = error)]
async fn slow() -> Result<Tensor, Error> {
    let t = floats(4);
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    Ok(t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_future_ends_without_check() {
    let cancelled = tokio::time::timeout(std::time::Duration::from_millis(20), slow()).await;
    assert!(cancelled.is_err());
    // A clean scope on this task afterwards sees nothing of the cancelled one.
    let (_, report) = gpu_scope::scope(common::strict("after"), || floats(1)).unwrap();
    assert_eq!(on(&report).allocated, block(4), "{report}");
}

#[gpu_scope(on_escape = error)]
async fn fill_shared(cache: Arc<Mutex<Vec<Tensor>>>) -> Result<(), Error> {
    tokio::task::yield_now().await;
    cache.lock().unwrap().push(floats(4));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_argument_is_kept_across_polls() {
    let cache = Arc::new(Mutex::new(Vec::new()));
    let (result, report) = tokio::spawn(assert_send(async move {
        let result = fill_shared(Arc::clone(&cache)).await;
        (
            result.map(|()| cache.lock().unwrap().len()),
            gpu_scope::last_report().unwrap(),
        )
    }))
    .await
    .unwrap();
    assert_eq!(result.unwrap(), 1);
    assert!(report.is_clean(), "{report}");
}

static KEPT_BY_GUARD: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

/// A scope guard held across an `.await` of an async scope leaves the thread's stack with it
/// at each suspension; at its exit, what it keeps still goes to the async scope. Its own
/// report says it did not see what ran after that (not tracked), never clean.
#[gpu_scope(on_escape = error)]
async fn guard_across_await() -> Result<(), Error> {
    let opts = gpu_scope::ScopeOptions::new("guard").on_escape(gpu_scope::EscapePolicy::Error);
    let guard = gpu_scope::Scope::enter(opts).unwrap();
    let kept = floats(3);
    tokio::task::yield_now().await;
    let report = guard.exit(&kept).unwrap();
    assert_eq!(report.status(), "not tracked", "{report}");
    assert!(
        report.to_string().contains("left its thread, still open"),
        "{report}"
    );
    KEPT_BY_GUARD.lock().unwrap().push(kept);
    Ok(())
}

#[tokio::test]
async fn a_guard_held_across_an_await_hands_what_it_keeps_to_the_async_scope() {
    let report = match guard_across_await().await {
        Err(Error::Escaped(report)) => report,
        other => panic!("the guard's kept tensor leaked from the async scope: {other:?}"),
    };
    assert_eq!(report.escaped_bytes, block(12), "{report}");
    KEPT_BY_GUARD.lock().unwrap().clear();
}

#[derive(gpu_scope::Tensors, Default)]
struct Memo {
    cache: Vec<Tensor>,
}

impl Memo {
    /// The returned borrow holds `self`: what the body stored there is not inspected, not
    /// escaped.
    #[gpu_scope(on_escape = panic)]
    async fn last(&mut self) -> &Tensor {
        tokio::task::yield_now().await;
        self.cache.push(floats(2));
        self.cache.push(floats(4));
        &self.cache[1]
    }
}

#[tokio::test]
async fn an_async_method_returning_a_borrow_of_self_names_self_not_inspected() {
    let mut memo = Memo::default();
    assert_eq!(memo.last().await.size(), [4]);
    let report = gpu_scope::last_report().unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.status(), "not inspected", "{report}");
    assert_eq!(report.uninspected_kept.len(), 1, "{report}");
}

#[gpu_scope(on_escape = error)]
async fn fill_destructured(Memo { cache }: &mut Memo) -> Result<(), Error> {
    tokio::task::yield_now().await;
    cache.push(floats(2));
    Ok(())
}

#[tokio::test]
async fn an_async_argument_destructured_in_the_signature_is_kept() {
    let mut memo = Memo::default();
    fill_destructured(&mut memo).await.unwrap();
    let report = gpu_scope::last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(memo.cache.len(), 1);
}

#[gpu_scope(keep_grad, on_escape = ignore)]
async fn a_guard_across_a_suspension() {
    let guard = gpu_scope::Scope::enter(common::strict("guard")).unwrap();
    tokio::task::yield_now().await;
    let _ = guard.exit(&());
}

/// A guard that leaves the thread with its async scope at a suspension gives the thread back
/// the autograd mode it found: between polls, other work there has autograd as before.
#[test]
fn a_guard_parked_at_a_suspension_gives_back_the_autograd_mode() {
    use std::future::Future;
    common::device();
    let grad_on = || {
        let w = Tensor::ones([1], (tch::Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        (&w * 2).requires_grad()
    };
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut keeps_grad = Box::pin(a_guard_across_a_suspension());
    assert!(keeps_grad.as_mut().poll(&mut cx).is_pending());
    assert!(grad_on(), "after a keep_grad scope's poll");
    let mut plain = Box::pin(guard_across_await());
    assert!(plain.as_mut().poll(&mut cx).is_pending());
    assert!(grad_on(), "after a scope's poll");
    // The same through a handle: a carried future's poll.
    let outer = gpu_scope::Scope::enter(common::strict("outer").keep_grad_mode(true)).unwrap();
    let mut carried = Box::pin(gpu_scope::current().unwrap().instrument(async {
        let guard = gpu_scope::Scope::enter(common::strict("guard")).unwrap();
        tokio::task::yield_now().await;
        let _ = guard.exit(&());
    }));
    assert!(carried.as_mut().poll(&mut cx).is_pending());
    assert!(grad_on(), "after a carried future's poll");
    while keeps_grad.as_mut().poll(&mut cx).is_pending() {}
    while carried.as_mut().poll(&mut cx).is_pending() {}
    drop(plain);
    assert!(grad_on(), "after the polls ended");
    let _ = outer.exit(&());
}

#[gpu_scope(on_escape = ignore)]
async fn spawns_carried_work() {
    let here = gpu_scope::current().unwrap();
    tokio::spawn(here.instrument(async { drop(floats(100)) }))
        .await
        .unwrap();
}

#[gpu_scope(on_escape = error)]
async fn awaits_a_scope_that_spawns() -> Result<(), Error> {
    spawns_carried_work().await;
    Ok(())
}

/// Work an async scope carries into a spawned task counts in the async scopes around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carried_work_counts_in_the_async_scopes_around() {
    awaits_a_scope_that_spawns().await.unwrap();
    let report = gpu_scope::last_report().unwrap();
    assert_eq!(
        &*report.name, "async_fn::awaits_a_scope_that_spawns",
        "{report}"
    );
    assert_eq!(on(&report).allocated, block(400), "{report}");
}

#[gpu_scope(keep_grad, on_escape = error)]
async fn graph_across_a_suspension(w: &Tensor) -> Result<Tensor, Error> {
    // tanh saves its output for backward, in the first poll.
    let t = (w * 2.0).tanh();
    tokio::task::yield_now().await;
    Ok(t.sum(tch::Kind::Float))
}

static HEAD_LEAK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[gpu_scope(keep_grad, on_escape = error)]
async fn head_step(w: &Tensor, feats: &Tensor, leak: bool) -> Result<Tensor, Error> {
    let loss = feats.matmul(w).tanh().sum(tch::Kind::Float);
    loss.backward();
    drop(loss);
    if leak {
        HEAD_LEAK.lock().unwrap().push(floats(32));
    }
    tokio::task::yield_now().await;
    // The features are the caller's: handed back, with their graph.
    Ok(feats.shallow_clone())
}

/// An async step handed features whose graph was made before it (an encoder run outside):
/// that graph saved nothing the step made, so a leak beside it is an escape, though the scope
/// was taken off its thread between polls.
#[test]
fn a_graph_made_before_an_async_step_hides_no_leak_in_it() {
    use std::future::Future;
    let device = common::device();
    let w = Tensor::randn([8, 8], (tch::Kind::Float, device)).set_requires_grad(true);
    let encoder = Tensor::randn([8, 8], (tch::Kind::Float, device)).set_requires_grad(true);
    let x = Tensor::ones([4, 8], (tch::Kind::Float, device));
    let run = |leak: bool| {
        let feats = x.matmul(&encoder).tanh();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut f = Box::pin(head_step(&w, &feats, leak));
        loop {
            if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                break out;
            }
        }
    };
    let clean = run(false).unwrap();
    let report = gpu_scope::last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    drop(clean);
    let report = match run(true) {
        Err(Error::Escaped(report)) => report,
        other => panic!("expected an escape, got {other:?}"),
    };
    assert_eq!(report.escaped_bytes, block(128), "{report}");
    assert_eq!(
        report.held_by(gpu_scope::HeldBy::AutogradGraph),
        0,
        "{report}"
    );
    HEAD_LEAK.lock().unwrap().clear();
}

/// An async scope's graph made in an earlier poll still holds what it saved: its graphs begin
/// at its entry (autograd's node numbers at its later polls are past the graph's).
#[test]
fn a_graph_made_before_a_suspension_holds_what_it_saved() {
    use std::future::Future;
    common::device();
    let w = Tensor::randn([8, 8], (tch::Kind::Float, common::device())).set_requires_grad(true);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut f = Box::pin(graph_across_a_suspension(&w));
    let out = loop {
        if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            break out.unwrap();
        }
    };
    let report = gpu_scope::last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(
        report.held_by(gpu_scope::HeldBy::AutogradGraph) >= block(8 * 8 * 4),
        "{report}"
    );
    drop(out);
}

#[gpu_scope(on_escape = ignore)]
async fn leaks_then_waits() {
    CANCELLED.lock().unwrap().push(floats(11));
    tokio::task::yield_now().await;
}

/// A cancelled async scope ends where it was last polled, whichever thread drops it: the scope
/// around that poll finds its leak, and a scope open where it is dropped is not charged.
#[test]
fn a_future_cancelled_on_another_thread_ends_where_it_was_polled() {
    use std::future::Future;
    common::device();
    let _serial = common::serial();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for elsewhere_in_a_scope in [false, true] {
        let outer = gpu_scope::Scope::enter(common::strict("polled-in")).unwrap();
        let mut future = Box::pin(leaks_then_waits());
        assert!(future.as_mut().poll(&mut cx).is_pending());
        let dropped_in = std::thread::spawn(move || match elsewhere_in_a_scope {
            false => {
                drop(future);
                None
            }
            true => Some(
                gpu_scope::scope(common::strict("dropped-in"), move || drop(future))
                    .unwrap()
                    .1,
            ),
        })
        .join()
        .unwrap();
        if let Some(report) = dropped_in {
            assert!(report.is_clean(), "{report}");
            assert_eq!(report.allocated, 0, "{report}");
        }
        let err = outer.exit(&()).unwrap_err();
        let report = err.report().unwrap();
        assert_eq!(report.escaped_bytes, block(44), "{report}");
        assert_eq!(report.escaped.len(), 1, "{report}");
        CANCELLED.lock().unwrap().clear();
    }
}

static CANCELLED: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[gpu_scope(name = "cancelled alone", on_escape = error)]
async fn leaks_then_waits_strict() -> Result<(), Error> {
    CANCELLED.lock().unwrap().push(floats(11));
    tokio::task::yield_now().await;
    Ok(())
}

#[gpu_scope(name = "cancelled loudly", on_escape = panic)]
async fn leaks_then_waits_loudly() {
    CANCELLED.lock().unwrap().push(floats(11));
    tokio::task::yield_now().await;
}

/// A cancelled async scope that no open scope takes in (the scopes its last poll ran in have
/// ended, having shown its memory as another scope's, or it ran in none) is checked where it
/// is dropped, under its policy (`error`, which a drop cannot return, warns): its leak is
/// not lost.
#[test]
fn a_cancelled_future_no_open_scope_takes_in_is_checked_where_dropped() {
    use std::future::Future;
    let _serial = common::serial();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for polled_in_a_scope in [false, true] {
        let outer =
            polled_in_a_scope.then(|| gpu_scope::Scope::enter(strict("polled-in")).unwrap());
        let mut future = Box::pin(leaks_then_waits_strict());
        assert!(future.as_mut().poll(&mut cx).is_pending());
        if let Some(outer) = outer {
            let report = outer.exit(&()).unwrap();
            assert_eq!(
                report.held_by(gpu_scope::HeldBy::OtherScope),
                block(44),
                "{report}"
            );
        }
        drop(future);
        let report = gpu_scope::last_report().unwrap();
        assert_eq!(report.name, "cancelled alone", "{report}");
        assert_eq!(report.escaped_bytes, block(44), "{report}");
        assert!(report.cancelled, "{report}");
        assert!(report.to_string().contains("dropped before it finished"));
        CANCELLED.lock().unwrap().clear();
    }
    let mut future = Box::pin(leaks_then_waits_loudly());
    assert!(future.as_mut().poll(&mut cx).is_pending());
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(future)));
    let message = *panic.unwrap_err().downcast::<String>().unwrap();
    assert!(message.contains("cancelled loudly"), "{message}");
    assert!(message.contains("dropped before it finished"), "{message}");
    CANCELLED.lock().unwrap().clear();
}

/// Ends the scope it is polled in from inside its own body, while a tensor it made is alive.
#[gpu_scope::gpu_scope(name = "polled inside")]
async fn ends_where_it_is_polled(
    outer: std::rc::Rc<std::cell::RefCell<Option<gpu_scope::Scope>>>,
) -> gpu_scope::ScopeReport {
    let made = floats(100);
    let scope = outer.borrow_mut().take().expect("the outer scope");
    let report = scope.exit(&()).expect("nothing escaped from it");
    drop(made);
    report
}

/// A scope that an async scope is polled in is charged for what that scope owns: alive at its
/// end, it is another scope's (that scope judges it), never counted as freed.
#[tokio::test(flavor = "current_thread")]
async fn what_an_async_scope_polled_inside_owns_is_another_scopes() {
    let outer = std::rc::Rc::new(std::cell::RefCell::new(None));
    let future = ends_where_it_is_polled(outer.clone());
    *outer.borrow_mut() = Some(gpu_scope::Scope::enter(strict("outer")).unwrap());
    let report = future.await;
    assert_eq!(
        report.held_by(gpu_scope::HeldBy::OtherScope),
        block(400),
        "{report}"
    );
    assert_eq!(on(&report).freed, 0, "{report}");
}

thread_local! {
    static PARKED_FUTURE: std::cell::RefCell<Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>>> =
        const { std::cell::RefCell::new(None) };
}

/// An async scope suspended in a thread-local ends when its thread does, after gpu-scope's own
/// state for the thread is gone: its frame and what it made leave tracking all the same.
#[test]
fn a_suspended_async_scope_in_a_thread_local_ends_with_its_thread() {
    use std::future::Future;
    if common::in_child() {
        std::thread::spawn(|| {
            // The thread-local first: destroyed after gpu-scope's state.
            PARKED_FUTURE.with(|_| ());
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let mut future: std::pin::Pin<Box<dyn Future<Output = ()>>> =
                Box::pin(leaks_then_waits());
            assert!(future.as_mut().poll(&mut cx).is_pending());
            PARKED_FUTURE.with(|f| *f.borrow_mut() = Some(future));
        })
        .join()
        .unwrap();
        // What it made and leaked is still alive, and tracked by nothing any more.
        let state = gpu_scope::__introspect::ledger_state();
        let untracked = state.entries == state.wrapped;
        println!("frames={} untracked={untracked}", state.frames);
        CANCELLED.lock().unwrap().clear();
        return;
    }
    let out = common::child(
        "a_suspended_async_scope_in_a_thread_local_ends_with_its_thread",
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Entries left are CPU blocks kept only for how libtorch frees them.
    assert!(stdout.contains("frames=0 untracked=true"), "{stdout}");
}

type Pinned<O> = std::pin::Pin<Box<dyn std::future::Future<Output = O> + Send>>;

/// Runs its closure from its destructor: in a thread-local, after gpu-scope's state for the
/// thread is gone when the thread-local is first used before the thread's first scope (see
/// [`poll_late`]).
struct RunsLate(Option<Box<dyn FnOnce()>>);

impl Drop for RunsLate {
    fn drop(&mut self) {
        if let Some(late) = self.0.take() {
            late();
        }
    }
}

thread_local! {
    static RUNS_LATE: std::cell::RefCell<RunsLate> = const { std::cell::RefCell::new(RunsLate(None)) };
}

/// On a new thread: `first` on `future` (which may open scopes, and so makes gpu-scope's state
/// for the thread after [`RUNS_LATE`]: destroyed first), then `future` is polled in that
/// thread-local's destructor. Returns the future and what that poll gave.
fn poll_late<O: Send + 'static>(
    mut future: Pinned<O>,
    first: impl FnOnce(&mut Pinned<O>) + Send + 'static,
) -> (Pinned<O>, std::task::Poll<O>) {
    let (send, polled) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        RUNS_LATE.with(|_| ());
        first(&mut future);
        let late = move || {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let polled = future.as_mut().poll(&mut cx);
            let _ = send.send((future, polled));
        };
        RUNS_LATE.with(|r| r.borrow_mut().0 = Some(Box::new(late)));
    })
    .join()
    .unwrap();
    polled.recv().expect("polled in the destructor")
}

static LATE: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[gpu_scope(name = "polled-late")]
async fn leaks_on_its_second_poll() -> Tensor {
    tokio::task::yield_now().await;
    LATE.lock().unwrap().push(floats(13));
    tokio::task::yield_now().await;
    floats(3)
}

/// A poll that cannot put its scope on the thread (a thread-local's destructor) runs
/// unscoped: what it leaked was not seen, and the report says "not tracked", never clean.
#[test]
fn a_poll_where_the_scope_cannot_be_placed_leaves_it_not_tracked() {
    let future: Pinned<Tensor> = Box::pin(leaks_on_its_second_poll());
    let (mut future, polled) = poll_late(future, |future| {
        // The first poll opens the scope, on the thread.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_pending());
    });
    assert!(polled.is_pending(), "the second poll waits");
    assert_eq!(LATE.lock().unwrap().len(), 1, "the second poll ran");
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let kept = loop {
        if let std::task::Poll::Ready(t) = future.as_mut().poll(&mut cx) {
            break t;
        }
    };
    let report = gpu_scope::last_report().expect("it ended here");
    assert_eq!(report.name, "polled-late");
    assert_eq!(report.status(), "not tracked", "{report}");
    assert!(report.escaped.is_empty() && !report.is_clean(), "{report}");
    assert!(report.to_string().contains("could not be put"), "{report}");
    drop((kept, LATE.lock().unwrap().pop()));
}

#[gpu_scope(name = "finishes-late", on_escape = error)]
async fn finishes_on_its_second_poll() -> Result<Tensor, gpu_scope::Error> {
    tokio::task::yield_now().await;
    Ok(floats(3))
}

/// An async scope whose last poll runs where it cannot be placed (a thread-local's destructor)
/// still ends: the body's output is returned, not an error, and the scope it was first polled
/// in says "not tracked".
#[test]
fn an_async_scope_finishing_where_it_cannot_be_placed_returns_its_output() {
    let outer = gpu_scope::Scope::enter(strict("outer")).unwrap();
    let mut future: Pinned<Result<Tensor, gpu_scope::Error>> =
        Box::pin(finishes_on_its_second_poll());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(future.as_mut().poll(&mut cx).is_pending());
    let (_, polled) = poll_late(future, |_| {
        drop(gpu_scope::scope(strict("on the thread"), || ()).unwrap());
    });
    let std::task::Poll::Ready(Ok(out)) = polled else {
        panic!("the output, not an error: {polled:?}");
    };
    let report = outer.exit(&out).unwrap();
    assert_eq!(report.status(), "not tracked", "{report}");
}

#[gpu_scope::gpu_scope(name = "background")]
async fn background(steps: usize, keep_too: bool) -> Tensor {
    let mut acc = floats(16);
    for _ in 0..steps {
        tokio::task::yield_now().await;
        acc = &acc + 1;
    }
    if keep_too {
        gpu_scope::keep(&acc);
    }
    acc
}

/// A frame loop advancing a task spawned outside its frames: the task's output is its join
/// handle's, not the frame's it finished in. Spawned inside a scope still open where it
/// finishes, that scope judges the output.
#[test]
fn a_spawned_tasks_output_goes_to_the_scopes_it_was_made_in() {
    let rt = current_thread();
    let frames = |n: usize| {
        for frame in 0..n {
            let (_, report) = gpu_scope::scope(strict("frame"), || {
                drop(floats(4));
                rt.block_on(tokio::task::yield_now())
            })
            .unwrap_or_else(|e| panic!("frame {frame}: {e}"));
            assert!(report.is_clean(), "{report}");
        }
    };
    for keep_too in [false, true] {
        let task = rt.spawn(background(3, keep_too));
        frames(6);
        assert!(task.is_finished());
        assert_eq!(rt.block_on(task).unwrap().size(), [16]);
    }

    let outer = gpu_scope::Scope::enter(strict("outer")).unwrap();
    let task = rt.spawn(background(2, false));
    frames(4);
    let stash = vec![rt.block_on(task).unwrap()];
    let Err(Error::Escaped(report)) = outer.exit(&()) else {
        panic!("the output outlived the scope it was made in");
    };
    assert_eq!(report.escaped_bytes, block(64), "{report}");
    drop(stash);
}

/// A value whose search panics.
struct Boom(#[allow(dead_code)] Tensor);

impl gpu_scope::Tensors for Boom {
    fn visit(&self, _: &mut gpu_scope::StorageSet) {
        panic!("boom");
    }
}

#[gpu_scope(name = "boom", on_escape = warn)]
async fn returns_boom() -> Boom {
    Boom(floats(3))
}

/// A panic in the search of an async scope's output ends the scope unchecked, as it ends a
/// sync scope: the future ran to its end, so it is not taken for a cancelled one (checked,
/// with its output called escaped).
#[test]
fn a_panic_searching_an_async_scopes_output_ends_it_unchecked() {
    let runtime = current_thread();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async { drop(returns_boom().await) })
    }));
    assert!(panicked.is_err());
    let report = gpu_scope::last_report().unwrap();
    assert_eq!(report.name, "boom", "{report}");
    assert!(!report.checked && report.escaped.is_empty(), "{report}");
}

/// Rust's own `async fn` in traits (what the refusal of `#[async_trait]` methods advises): a
/// scoped method in an impl and a scoped default method each scope the whole future.
#[test]
fn async_fn_in_traits() {
    trait Model {
        fn weight(&self) -> &Tensor;
        async fn forward(&self, x: &Tensor) -> Tensor;
        #[gpu_scope(on_escape = error)]
        async fn twice(&self, x: &Tensor) -> Result<Tensor, gpu_scope::Error> {
            tokio::task::yield_now().await;
            Ok(self.forward(&self.forward(x).await).await)
        }
        #[gpu_scope(on_escape = error)]
        async fn stash(&self, x: &Tensor) -> Result<(), gpu_scope::Error> {
            tokio::task::yield_now().await;
            STASHED.lock().unwrap().push(x * self.weight());
            Ok(())
        }
    }
    static STASHED: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
    struct Scale(Tensor);
    impl Model for Scale {
        fn weight(&self) -> &Tensor {
            &self.0
        }
        #[gpu_scope(on_escape = panic)]
        async fn forward(&self, x: &Tensor) -> Tensor {
            tokio::task::yield_now().await;
            let scratch = x * 3;
            drop(scratch);
            x * self.weight()
        }
    }
    let model = Scale(Tensor::from(2.0f32));
    let x = Tensor::ones([4], (Kind::Float, Device::Cpu));
    let rt = current_thread();
    let y = rt.block_on(model.twice(&x)).unwrap();
    let report = gpu_scope::last_report().unwrap();
    assert!(report.is_clean() && report.kept == 16, "{report}");
    assert_eq!(y.sum(Kind::Float).double_value(&[]), 16.0);
    // Made after an `.await`, and caught.
    let stashed = rt.block_on(model.stash(&x));
    STASHED.lock().unwrap().clear();
    assert!(
        matches!(&stashed, Err(Error::Escaped(r)) if r.escaped_bytes == 16),
        "{stashed:?}"
    );
}

static PANICKED_KEPT: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[gpu_scope(on_escape = error)]
async fn panics_on_its_second_poll() -> Result<(), Error> {
    let t = Tensor::ones([3], (Kind::Float, Device::Cpu));
    tokio::task::yield_now().await;
    PANICKED_KEPT.lock().unwrap().push(t);
    panic!("the step failed");
}

/// A panicked task, dropped by its executor after it caught the panic, in no scope: its scope
/// ends unchecked, as a panic ends one, and is not called a cancelled future (no warning of
/// one on top of the panic).
#[test]
fn a_task_that_panicked_is_not_cancelled() {
    let joined =
        current_thread().block_on(async { tokio::spawn(panics_on_its_second_poll()).await });
    assert!(joined.unwrap_err().is_panic());
    let report = gpu_scope::last_report().expect("a report");
    assert!(!report.cancelled, "{report}");
    assert!(!report.checked, "{report}");
    PANICKED_KEPT.lock().unwrap().clear();
}

/// The same with the panic unwinding through the poll (a plain `block_on` in a
/// `catch_unwind`): the scope ends unchecked where the unwinding drops it.
#[test]
fn a_future_dropped_by_its_panic_is_not_cancelled() {
    let rt = current_thread();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(panics_on_its_second_poll())
    }));
    assert!(caught.is_err());
    let report = gpu_scope::last_report().expect("a report");
    assert!(!report.cancelled && !report.checked, "{report}");
    PANICKED_KEPT.lock().unwrap().clear();
}

/// A runtime on this thread, as `#[tokio::test]` makes.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}
