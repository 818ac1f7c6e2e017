//! Work handed to other threads and tasks: a scope carried there with `current()` sees what
//! is allocated and leaked there; an async scope polled under different enclosing scopes
//! keeps exact, never underflowing accounts.
mod common;

use common::{adds_up, block, escaped, floats, on, strict};
use gpu_scope::{scope, Scope};
use std::future::Future;
use std::sync::Mutex;
use std::task::{Context, Poll};
use tch::Tensor;

static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[test]
fn a_scope_carried_to_a_thread_sees_its_leak() {
    let _serial = common::serial();
    let report = escaped(scope(strict("carried"), || {
        let here = gpu_scope::current().expect("inside a scope");
        std::thread::spawn(move || {
            here.in_scope(|| {
                drop(floats(100));
                SINK.lock().unwrap().push(floats(7));
            })
        })
        .join()
        .unwrap();
    }));
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert_eq!(report.escaped_bytes, block(28));
    assert_eq!(
        on(&report).freed,
        block(400),
        "what the thread freed counts too"
    );
    SINK.lock().unwrap().clear();
}

/// A scope opened in carried work and still open when that work returns leaves the thread with
/// it: what runs after that is not its to see, and its report says so (never clean), on the
/// thread the work ran on and on the scope's own.
#[test]
fn a_scope_left_open_in_carried_work_is_not_tracked_after_it() {
    let _serial = common::serial();
    let outer = Scope::enter(strict("carrier")).unwrap();
    let here = gpu_scope::current().unwrap();
    let inner = std::thread::spawn(move || {
        let guard = here.in_scope(|| Scope::enter(strict("left-open")).unwrap());
        SINK.lock().unwrap().push(floats(100));
        guard.exit(&()).unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(inner.status(), "not tracked", "{inner}");
    assert!(
        inner.to_string().contains("exit a scope inside the work"),
        "{inner}"
    );
    let here = gpu_scope::current().unwrap();
    let guard = here.in_scope(|| Scope::enter(strict("left-open-here")).unwrap());
    let report = guard.exit(&()).unwrap();
    assert_eq!(report.status(), "not tracked", "{report}");
    drop(outer.exit(&()));
    SINK.lock().unwrap().clear();
}

/// A scope that carried work to a thread and exits while a scope opened in that work is still
/// open there (bad input: scopes end innermost first) shows the other's live block as held by
/// another scope, not freed.
#[test]
fn a_scope_ending_before_one_opened_in_its_carried_work_shows_its_blocks_held() {
    let _serial = common::serial();
    let outer = Scope::enter(strict("carrier")).unwrap();
    let here = gpu_scope::current().unwrap();
    let (opened, wait_opened) = std::sync::mpsc::channel();
    let (go_on, wait_go_on) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        here.in_scope(|| {
            let inner = Scope::enter(strict("opened-in-work")).unwrap();
            let t = floats(6);
            opened.send(()).unwrap();
            wait_go_on.recv().unwrap();
            let _ = inner.exit(&t);
            t
        })
    });
    wait_opened.recv().unwrap();
    let report = outer.exit(&()).unwrap();
    go_on.send(()).unwrap();
    let t = worker.join().unwrap();
    let row = on(&report);
    assert_eq!((row.freed, row.held), (0, block(24)), "{report}");
    assert_eq!(
        report.held_by(gpu_scope::HeldBy::OtherScope),
        block(24),
        "{report}"
    );
    drop(t);
}

#[test]
fn work_on_a_thread_without_the_handle_is_not_charged() {
    let _serial = common::serial();
    let (_, report) = scope(strict("not-carried"), || {
        std::thread::spawn(|| SINK.lock().unwrap().push(floats(9)))
            .join()
            .unwrap();
    })
    .unwrap();
    assert_eq!(report.allocated, 0, "{report}");
    SINK.lock().unwrap().clear();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_carried_into_spawned_tasks_sees_their_leaks() {
    // A sink of its own: other tests clear theirs while this one awaits.
    static TASK_SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
    let scope = Scope::enter(strict("tasks")).unwrap();
    let here = gpu_scope::current().unwrap();
    let blocking = here.clone();
    tokio::task::spawn_blocking(move || {
        blocking.in_scope(|| TASK_SINK.lock().unwrap().push(floats(3)))
    })
    .await
    .unwrap();
    tokio::spawn(here.instrument(async {
        tokio::task::yield_now().await;
        TASK_SINK.lock().unwrap().push(floats(5));
    }))
    .await
    .unwrap();
    let report = escaped(scope.exit(&()));
    let mut sizes: Vec<u64> = report.escaped.iter().map(|e| e.bytes).collect();
    sizes.sort();
    assert_eq!(sizes, [block(12), block(20)], "{report}");
    TASK_SINK.lock().unwrap().clear();
}

#[test]
fn a_handle_outliving_its_scope_tracks_nothing() {
    let (handle, _) = scope(strict("short"), || gpu_scope::current().unwrap()).unwrap();
    assert!(!handle.is_open());
    let t = handle.in_scope(|| floats(4));
    assert_eq!(t.size(), [4]);
}

/// A handle whose scope has ended hides nothing from the scope open where it is used.
#[test]
fn a_stale_handle_hides_no_leak_from_the_scope_open_here() {
    let _serial = common::serial();
    let (stale, _) = scope(strict("gone"), || gpu_scope::current().unwrap()).unwrap();
    let report = escaped(
        scope(strict("open"), || {
            stale.in_scope(|| SINK.lock().unwrap().push(floats(111)));
        })
        .map(|(_, r)| r),
    );
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert_eq!(report.escaped_bytes, block(444), "{report}");
    SINK.lock().unwrap().clear();
}

fn noop_context() -> Context<'static> {
    Context::from_waker(std::task::Waker::noop())
}

/// A task that allocates on each poll, keeping only its latest tensor.
struct Task {
    polls: usize,
    last: Option<Tensor>,
}

impl Future for Task {
    type Output = Tensor;
    fn poll(mut self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Tensor> {
        self.polls -= 1;
        self.last = Some(floats(16));
        if self.polls == 0 {
            Poll::Ready(self.last.take().unwrap())
        } else {
            Poll::Pending
        }
    }
}

/// Regression: a frame loop (one scope per frame) polls a task whose own scope was thus
/// re-entered under a different enclosing scope each time; the enclosing scopes' live bytes
/// underflowed (a debug build aborted in the allocator callback; a release build reported a
/// peak near 2^64 and a false over-budget error).
#[test]
fn an_async_scope_polled_under_a_new_frame_each_time_keeps_exact_accounts() {
    let opts = strict("task");
    let mut task = Box::pin(gpu_scope::__private::ScopeFuture::enter(
        opts,
        Task {
            polls: 5,
            last: None,
        },
    ));
    let mut done = None;
    for frame in 0..5 {
        let (_, report) = scope(strict("frame").max_peak(1 << 20), || {
            drop(floats(4));
            if let Poll::Ready(output) = task.as_mut().poll(&mut noop_context()) {
                done = Some(output);
            }
        })
        .unwrap_or_else(|e| panic!("frame {frame}: {e}"));
        assert!(report.peak < 1 << 20, "frame {frame}: {report}");
        assert!(report.is_clean(), "frame {frame}: {report}");
    }
    let (value, finish) = done.expect("the task finished");
    let mut kept = gpu_scope::StorageSet::new();
    kept.add_tensor(&value);
    finish.exit(kept);
    let report = gpu_scope::last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(
        (on(&report).allocated, on(&report).kept),
        (5 * block(64), block(64)),
        "{report}"
    );
}

/// A handle used on the thread where its scope is open charges each allocation once.
#[test]
fn a_handle_used_where_its_scope_is_open_charges_once() {
    let scope = Scope::enter(strict("same-thread")).unwrap();
    let here = gpu_scope::current().unwrap();
    let t = here.in_scope(|| {
        drop(floats(8));
        floats(16)
    });
    let r = scope.exit(&t).unwrap();
    assert_eq!(on(&r).allocations, 2, "{r}");
    assert_eq!(on(&r).allocated, block(32) + block(64), "{r}");
    assert_eq!(on(&r).peak, block(64).max(block(32)), "{r}");
    assert_eq!(on(&r).kept, block(64), "{r}");
}

/// The enclosing scope's handle used inside an inner scope: the work is the enclosing scope's
/// (charged to it once, judged by it) and, as any carried work, also charged to the scope open
/// where it ran, which shows it as another scope's (its figures and `max_peak` see it).
#[test]
fn an_enclosing_handle_used_inside_an_inner_scope_shows_on_it_as_another_scopes() {
    let outer = Scope::enter(strict("outer")).unwrap();
    let here = gpu_scope::current().unwrap();
    let inner = Scope::enter(strict("inner")).unwrap();
    let t = here.in_scope(|| floats(16));
    let inner_report = inner.exit(&()).unwrap();
    assert!(inner_report.peak >= block(64), "{inner_report}");
    assert!(inner_report.is_clean(), "{inner_report}");
    assert_eq!(on(&inner_report).allocated, block(64), "{inner_report}");
    let held: Vec<_> = (inner_report.held.iter())
        .map(|h| (h.by, h.bytes, h.count))
        .collect();
    assert_eq!(held, [(gpu_scope::HeldBy::OtherScope, block(64), 1)]);
    let inner = Scope::enter(strict("inner").max_peak(inner_report.peak - 1)).unwrap();
    drop(here.in_scope(|| floats(16)));
    let err = inner.exit(&()).unwrap_err();
    assert!(matches!(err, gpu_scope::Error::OverBudget(_)), "{err}");
    let r = outer.exit(&t).unwrap();
    assert_eq!(
        (on(&r).allocations, on(&r).allocated),
        (2, 2 * block(64)),
        "{r}"
    );
    assert_eq!(on(&r).kept, block(64), "{r}");
}

/// A future carried into the scope it is polled in, on the same thread.
#[test]
fn a_future_instrumented_where_its_scope_is_open_charges_once() {
    let scope = Scope::enter(strict("same-thread-future")).unwrap();
    let here = gpu_scope::current().unwrap();
    let mut future = std::pin::pin!(here.instrument(async { floats(16) }));
    let Poll::Ready(t) = future.as_mut().poll(&mut noop_context()) else {
        panic!("ready at once")
    };
    let r = scope.exit(&t).unwrap();
    assert_eq!(
        (on(&r).allocations, on(&r).allocated),
        (1, block(64)),
        "{r}"
    );
}

/// Work carried on through the handle of a scope that has ended inside another one is charged
/// to that one, which took over the ended scope's allocations: a leak there is still found.
#[test]
fn a_handle_of_an_ended_inner_scope_charges_the_enclosing_one() {
    let _serial = common::serial();
    let report = escaped(
        scope(strict("request"), || {
            let (inner, _) = scope(strict("step"), || gpu_scope::current().unwrap()).unwrap();
            assert!(!inner.is_open());
            std::thread::spawn(move || inner.in_scope(|| SINK.lock().unwrap().push(floats(13))))
                .join()
                .unwrap();
        })
        .map(|(_, r)| r),
    );
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert_eq!(report.escaped_bytes, block(52), "{report}");
    SINK.lock().unwrap().clear();
}

/// A scope opened in carried work whose enclosing scope ended meanwhile (on the thread that
/// owned it) hands what it leaves behind to the scope that one ended inside: its escape is
/// judged again there, not dropped from view.
#[test]
fn a_scope_ending_after_its_enclosing_one_hands_on_to_where_that_one_ended() {
    let _serial = common::serial();
    let (opened, is_open) = std::sync::mpsc::channel();
    let (ended, has_ended) = std::sync::mpsc::channel();
    let report = escaped(
        scope(strict("request"), move || {
            let step = Scope::enter(strict("step")).unwrap();
            let handle = gpu_scope::current().unwrap();
            let worker = std::thread::spawn(move || {
                handle.in_scope(|| {
                    let task = Scope::enter(strict("task")).unwrap();
                    SINK.lock().unwrap().push(floats(11));
                    opened.send(()).unwrap();
                    has_ended.recv().unwrap();
                    escaped(task.exit(&()))
                })
            });
            is_open.recv().unwrap();
            let step = step.exit(&()).unwrap();
            assert!(
                step.is_clean(),
                "the task's scope still owned the block: {step}"
            );
            ended.send(()).unwrap();
            let task = worker.join().unwrap();
            assert_eq!(task.escaped_bytes, block(44), "{task}");
        })
        .map(|(_, r)| r),
    );
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert_eq!(report.escaped_bytes, block(44), "{report}");
    SINK.lock().unwrap().clear();
}

/// Carried work is attributed as the scope's own is (always, in debug builds).
#[test]
fn carried_work_is_attributed_like_the_scope() {
    let _serial = common::serial();
    // Every scope attributed, as in a debug build (a release build's default is on-leak).
    gpu_scope::set_attribution(gpu_scope::Attribution::Always);
    let report = escaped(scope(strict("carried-named"), || {
        let here = gpu_scope::current().unwrap();
        std::thread::spawn(move || here.in_scope(|| SINK.lock().unwrap().push(floats(17))))
            .join()
            .unwrap();
    }));
    assert!(report.attributed, "{report}");
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert!(report.escaped[0].operator.is_some(), "{report}");
    assert_eq!(
        report.escaped[0].shape.as_deref(),
        Some(&[17][..]),
        "{report}"
    );
    SINK.lock().unwrap().clear();
}

/// Work already running through a handle when its scope ends is charged from then on to the
/// scope it ended inside: a leak made after the end is that scope's.
#[test]
fn work_running_through_a_handle_when_its_scope_ends_is_charged_onwards() {
    let _serial = common::serial();
    let request = Scope::enter(strict("request")).unwrap();
    let step = Scope::enter(strict("step")).unwrap();
    let handle = gpu_scope::current().unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (in_tx, in_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        handle.in_scope(|| {
            in_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            SINK.lock().unwrap().push(floats(13));
        })
    });
    in_rx.recv().unwrap();
    step.exit(&()).unwrap();
    go_tx.send(()).unwrap();
    worker.join().unwrap();
    let report = escaped(request.exit(&()));
    assert_eq!(on(&report).escaped, block(52), "{report}");
    SINK.lock().unwrap().clear();
}

/// A scope opened in carried work after the carried scope ended, whose leak it lets through
/// (`ignore`), hands it to the strict scope open on the thread it ran on, which judges it.
#[test]
fn a_leak_let_through_in_carried_work_whose_scope_ended_is_judged_by_the_threads_own_scope() {
    let _serial = common::serial();
    let carried = Scope::enter(strict("carried")).unwrap();
    let handle = gpu_scope::current().unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (in_tx, in_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let own = Scope::enter(strict("own")).unwrap();
        let lenient = handle.in_scope(|| {
            in_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let opts =
                gpu_scope::ScopeOptions::new("lenient").on_escape(gpu_scope::EscapePolicy::Ignore);
            let lenient = Scope::enter(opts).unwrap();
            SINK.lock().unwrap().push(floats(17));
            lenient.exit(&()).unwrap()
        });
        (lenient, own.exit(&()))
    });
    in_rx.recv().unwrap();
    assert!(carried.exit(&()).unwrap().is_clean());
    go_tx.send(()).unwrap();
    let (lenient, own) = worker.join().unwrap();
    assert_eq!(on(&lenient).escaped, block(68), "{lenient}");
    let own = escaped(own);
    assert_eq!(on(&own).escaped, block(68), "{own}");
    SINK.lock().unwrap().clear();
}

#[gpu_scope::gpu_scope(on_escape = ignore)]
async fn leaks_then_waits(started: std::sync::mpsc::Sender<()>) {
    SINK.lock().unwrap().push(floats(13));
    started.send(()).unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
}

/// An async scope carried into a scope with `instrument` and cancelled there hands what it
/// leaves behind to that scope.
#[test]
fn a_cancelled_instrumented_async_scope_hands_its_leak_to_the_carrying_scope() {
    let _serial = common::serial();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let request = Scope::enter(strict("request")).unwrap();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let task = gpu_scope::current()
        .unwrap()
        .instrument(leaks_then_waits(started_tx));
    let join = runtime.spawn(task);
    started_rx.recv().unwrap();
    join.abort();
    assert!(runtime.block_on(join).unwrap_err().is_cancelled());
    let report = escaped(request.exit(&()));
    assert_eq!(on(&report).escaped, block(52), "{report}");
    SINK.lock().unwrap().clear();
}

/// A scope opened in carried work and never ended (forgotten) is ended, unchecked, by the
/// scope the work was carried into, as a scope left open on one thread is: its leak is found
/// there, and the report says where it was opened.
#[test]
fn a_scope_forgotten_in_carried_work_is_ended_by_the_carrying_scope() {
    let _serial = common::serial();
    let request = Scope::enter(strict("request")).unwrap();
    let here = gpu_scope::current().unwrap();
    std::thread::spawn(move || {
        here.in_scope(|| {
            let task = Scope::enter(strict("task")).unwrap();
            SINK.lock().unwrap().push(floats(13));
            std::mem::forget(task);
        })
    })
    .join()
    .unwrap();
    let report = escaped(request.exit(&()));
    assert_eq!(on(&report).escaped, block(52), "{report}");
    assert_eq!(report.ended_inside.len(), 1, "{report}");
    SINK.lock().unwrap().clear();
}

/// The same when the scope the work was carried into ends first, while the work still runs:
/// the scope it ended inside ends the forgotten one, also when that scope is itself ended by
/// its enclosing one.
#[test]
fn a_scope_forgotten_in_carried_work_after_its_carrier_ended_is_still_ended() {
    let _serial = common::serial();
    let outer = Scope::enter(strict("outer")).unwrap();
    let middle = Scope::enter(strict("middle")).unwrap();
    let request = Scope::enter(strict("request")).unwrap();
    let here = gpu_scope::current().unwrap();
    let (opened_tx, opened_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        here.in_scope(|| {
            let task = Scope::enter(strict("task")).unwrap();
            SINK.lock().unwrap().push(floats(13));
            opened_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            std::mem::forget(task);
        })
    });
    opened_rx.recv().unwrap();
    let report = request.exit(&()).unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    go_tx.send(()).unwrap();
    worker.join().unwrap();
    // `outer` ends `middle` first (still open), which ends the forgotten scope.
    let report = escaped(outer.exit(&()));
    assert_eq!(on(&report).escaped, block(52), "{report}");
    assert_eq!(report.ended_inside.len(), 2, "{report}");
    drop(middle);
    SINK.lock().unwrap().clear();
}

/// Work carried into a scope on a thread where another scope is open is charged to both; the
/// carried scope owns and judges it, and the other one shows it as another scope's, so that its
/// lines still add up (while that scope is open, and after it ended and took it out of
/// tracking).
#[test]
fn carried_work_shows_on_the_scope_open_where_it_ran_as_another_scopes() {
    let _serial = common::serial();
    let lenient = |name| strict(name).on_escape(gpu_scope::EscapePolicy::Ignore);
    for carried_ends_first in [false, true] {
        let mut carried = Some(Scope::enter(lenient("carried")).unwrap());
        let here = gpu_scope::current().unwrap();
        let (ran_tx, ran_rx) = std::sync::mpsc::channel::<()>();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            let local = Scope::enter(strict("local")).unwrap();
            here.in_scope(|| {
                drop(floats(3));
                SINK.lock().unwrap().push(floats(25));
            });
            drop(floats(2));
            ran_tx.send(()).unwrap();
            end_rx.recv().unwrap();
            local.exit(&()).unwrap()
        });
        ran_rx.recv().unwrap();
        let mut end_carried = || carried.take().map(|s| s.exit(&()).unwrap());
        let carried_report = if carried_ends_first {
            end_carried()
        } else {
            None
        };
        end_tx.send(()).unwrap();
        let local = worker.join().unwrap();
        assert!(local.is_clean(), "{local}");
        adds_up(&local);
        assert_eq!(on(&local).allocated, block(100) + block(12) + block(8));
        let other: Vec<_> = local
            .held
            .iter()
            .map(|h| (h.by, h.bytes, h.count))
            .collect();
        assert_eq!(
            other,
            [(gpu_scope::HeldBy::OtherScope, block(100), 1)],
            "{local}"
        );
        let carried_report = carried_report.or_else(end_carried).unwrap();
        assert_eq!(carried_report.escaped_bytes, block(100), "{carried_report}");
        adds_up(&carried_report);
        SINK.lock().unwrap().clear();
    }
}

/// Work carried into an inner scope counts in the scopes it is open in, as the inner scope's
/// own work does: an outer scope's totals and its `max_peak` see it.
#[test]
fn carried_work_counts_in_the_scopes_around_the_carried_one() {
    let outer = Scope::enter(strict("outer").max_peak(1000)).unwrap();
    let inner = Scope::enter(strict("inner")).unwrap();
    let here = gpu_scope::current().unwrap();
    std::thread::spawn(move || here.in_scope(|| drop(floats(1000))))
        .join()
        .unwrap();
    let inner = inner.exit(&()).unwrap();
    assert_eq!(on(&inner).freed, block(4000), "{inner}");
    let err = outer.exit(&()).unwrap_err();
    let outer = err.report().unwrap();
    assert!(matches!(err, gpu_scope::Error::OverBudget(_)), "{err}");
    assert_eq!(
        (on(outer).allocated, on(outer).freed, on(outer).peak),
        (block(4000), block(4000), block(4000)),
        "{outer}"
    );
}

/// A handle taken in a scope opened inside carried work carries that scope and the carried
/// one, not the scopes of the thread the work ran on: a third thread's work through it is not
/// charged to them (a worker's own budget is not spent by work elsewhere).
#[test]
fn a_handle_taken_inside_carried_work_does_not_carry_the_threads_own_scopes() {
    let carried = Scope::enter(strict("carried")).unwrap();
    let here = gpu_scope::current().unwrap();
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let own = Scope::enter(strict("own").max_peak(1000)).unwrap();
        here.in_scope(|| {
            let inner = Scope::enter(strict("inner")).unwrap();
            handle_tx.send(gpu_scope::current().unwrap()).unwrap();
            done_rx.recv().unwrap();
            let inner = inner.exit(&()).unwrap();
            assert_eq!(on(&inner).allocated, block(4000), "{inner}");
        });
        own.exit(&())
    });
    let inner = handle_rx.recv().unwrap();
    std::thread::spawn(move || inner.in_scope(|| drop(floats(1000))))
        .join()
        .unwrap();
    done_tx.send(()).unwrap();
    let own = worker.join().unwrap().unwrap();
    assert_eq!(on(&own).allocated, 0, "{own}");
    let carried = carried.exit(&()).unwrap();
    assert_eq!(on(&carried).allocated, block(4000), "{carried}");
}

static GUARD_HANDLE: Mutex<Option<gpu_scope::ScopeHandle>> = Mutex::new(None);

#[gpu_scope::gpu_scope(on_escape = ignore)]
async fn hands_out_its_guards_handle() {
    let guard = Scope::enter(strict("guard")).unwrap();
    *GUARD_HANDLE.lock().unwrap() = gpu_scope::current();
    tokio::task::yield_now().await;
    drop(floats(100));
    let _ = guard.exit(&());
}

/// An async scope resumed inside work carried into a scope opened in it (the frames then
/// close into each other) is charged once, and its carried future ends.
#[test]
fn an_async_scope_resumed_in_its_own_guards_handle_is_charged_once() {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut task = Box::pin(hands_out_its_guards_handle());
    assert!(task.as_mut().poll(&mut cx).is_pending());
    let handle = GUARD_HANDLE.lock().unwrap().take().unwrap();
    let mut carried = Box::pin(handle.instrument(task));
    while carried.as_mut().poll(&mut cx).is_pending() {}
    let report = gpu_scope::last_report().unwrap();
    assert_eq!(on(&report).allocated, block(400), "{report}");
    drop(carried);
}

/// Carried work runs with the autograd mode of the place that took the handle: in a scope
/// without `keep_grad`, a model run on a worker makes no graph, so the output it hands back
/// holds nothing, and a leak beside it is an escape (not `autograd graph`); in a `keep_grad`
/// scope it makes a graph, as on the scope's own thread. The worker gets its mode back.
#[test]
fn carried_work_runs_with_the_autograd_mode_of_its_scope() {
    let _serial = common::serial();
    let w = floats(64).reshape([8, 8]).set_requires_grad(true);
    let run = |keep_grad: bool| {
        let w = w.shallow_clone();
        let opts = strict("carried model").keep_grad_mode(keep_grad);
        scope(opts, move || {
            let here = gpu_scope::current().expect("inside a scope");
            let (out, mode_after) = std::thread::spawn(move || {
                let out = here.in_scope(|| w.matmul(&w).tanh());
                (
                    out,
                    tch::Tensor::ones([1], (tch::Kind::Float, tch::Device::Cpu))
                        .set_requires_grad(true)
                        .g_mul_scalar(2)
                        .requires_grad(),
                )
            })
            .join()
            .unwrap();
            assert!(mode_after, "the worker's own autograd mode is given back");
            SINK.lock().unwrap().push(floats(7));
            out
        })
    };
    let report = escaped(run(false).map(|(_, r)| r));
    assert_eq!(report.escaped_bytes, block(28), "{report}");
    assert_eq!(
        report.held_by(gpu_scope::HeldBy::AutogradGraph),
        0,
        "{report}"
    );
    SINK.lock().unwrap().clear();
    let report = match run(true) {
        Ok((out, r)) => {
            assert!(out.requires_grad(), "keep_grad: the worker made a graph");
            r
        }
        Err(e) => panic!("{e}"),
    };
    assert!(
        report.held_by(gpu_scope::HeldBy::AutogradGraph) > 0,
        "{report}"
    );
    SINK.lock().unwrap().clear();
}

/// Once its scope has ended, a handle leaves the autograd mode of the thread it runs on as it
/// is: an inference scope's handle does not turn autograd off for work that runs unscoped.
#[test]
fn a_handle_whose_scope_ended_leaves_the_autograd_mode_as_it_is() {
    let w = floats(64).reshape([8, 8]).set_requires_grad(true);
    let scope = Scope::enter(strict("ended")).unwrap();
    let handle = gpu_scope::current().unwrap();
    scope.exit(&()).unwrap();
    let made_graph = std::thread::spawn(move || handle.in_scope(|| w.matmul(&w).requires_grad()))
        .join()
        .unwrap();
    assert!(made_graph, "the worker's own mode (on) was changed");
}

/// An instrumented future keeps the autograd mode its own code set between polls (a
/// `no_grad_guard` held across an `.await`), as a task keeps its thread-local state.
#[test]
fn an_instrumented_future_keeps_its_own_autograd_mode_between_polls() {
    let w = floats(64).reshape([8, 8]).set_requires_grad(true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let ((first, second), _) = scope(strict("carried async").keep_grad_mode(true), || {
        let handle = gpu_scope::current().unwrap();
        runtime.block_on(handle.instrument(async move {
            let _off = tch::no_grad_guard();
            let first = w.matmul(&w).requires_grad();
            tokio::task::yield_now().await;
            (first, w.matmul(&w).requires_grad())
        }))
    })
    .unwrap();
    assert_eq!(
        (first, second),
        (false, false),
        "the guard held across the await"
    );
}

/// Pending once, then ready.
#[derive(Default)]
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        match std::mem::replace(&mut self.0, true) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }
}

/// A future that first ran while its scope was open keeps its own autograd mode in the polls
/// after the scope ended, and gives the thread its mode back after each (a guard it dropped
/// there turned autograd off for the thread for good).
#[test]
fn an_instrumented_future_keeps_its_mode_after_its_scope_ended() {
    let w = floats(64).reshape([8, 8]).set_requires_grad(true);
    let scope = Scope::enter(strict("ended between polls")).unwrap();
    let handle = gpu_scope::current().unwrap();
    let mut future = Box::pin(handle.instrument(async move {
        let _off = tch::no_grad_guard();
        YieldOnce::default().await;
        w.matmul(&w).requires_grad()
    }));
    assert!(future.as_mut().poll(&mut noop_context()).is_pending());
    scope.exit(&()).unwrap();
    let Poll::Ready(made_graph) = future.as_mut().poll(&mut noop_context()) else {
        panic!("ready on the second poll");
    };
    assert!(!made_graph, "the guard held across the await");
    let w = floats(64).reshape([8, 8]).set_requires_grad(true);
    assert!(
        w.matmul(&w).requires_grad(),
        "the thread's own mode (on) was left changed"
    );
}

/// A scope exited inside work carried in above it (bad input: scopes end innermost first)
/// ends alone: the carried work, and a scope opened in it, stay charged as before, and what
/// they leak afterwards is found.
#[test]
fn a_scope_exited_inside_carried_work_leaves_that_work_charged() {
    let _serial = common::serial();
    let carrier = Scope::enter(strict("carrier")).unwrap();
    let handle = gpu_scope::current().unwrap();
    std::thread::spawn(move || {
        let local = Scope::enter(strict("local")).unwrap();
        handle.in_scope(move || {
            // A scope opened in the carried work stays open, and judges its own leak.
            let task = Scope::enter(strict("task")).unwrap();
            let r = local.exit(&()).unwrap();
            assert!(r.is_clean() && r.ended_inside.is_empty(), "{r}");
            assert!(gpu_scope::current().is_some(), "still in the carried scope");
            SINK.lock().unwrap().push(floats(7));
            let report = escaped(task.exit(&()));
            assert_eq!(report.escaped_bytes, block(28), "{report}");
        });
    })
    .join()
    .unwrap();
    let report = escaped(carrier.exit(&()));
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert_eq!(report.escaped_bytes, block(28), "{report}");
    adds_up(&report);
    SINK.lock().unwrap().clear();
}

/// A scope exited inside work carried in above it leaves that work the autograd mode and the
/// operator attribution it runs with, and gives the thread the mode it found once the work
/// leaves (it gave the work its own mode back, and the work's end left autograd off).
#[test]
fn a_scope_exited_inside_carried_work_leaves_its_modes_in_place() {
    let _serial = common::serial();
    let carrier = Scope::enter(strict("carrier")).unwrap();
    let handle = gpu_scope::current().unwrap();
    let (inside, after) = std::thread::spawn(move || {
        let local = Scope::enter(strict("local")).unwrap();
        let inside = handle.in_scope(move || {
            local.exit(&()).unwrap();
            SINK.lock().unwrap().push(floats(7));
            grad_on()
        });
        (inside, grad_on())
    })
    .join()
    .unwrap();
    assert!(!inside, "the carried work runs with its scope's mode (off)");
    assert!(after, "the thread's own mode (on) once the work left");
    let report = escaped(carrier.exit(&()));
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert_eq!(report.escaped[0].operator, Some("aten::zeros"), "{report}");
    SINK.lock().unwrap().clear();
    // A scope still open inside the exited one (below the work) ends with it: its mode too is
    // the work's to give back, the outermost's last.
    let carrier = Scope::enter(strict("carrier")).unwrap();
    let handle = gpu_scope::current().unwrap();
    let (inside, after) = std::thread::spawn(move || {
        let local = Scope::enter(strict("local").keep_grad_mode(true)).unwrap();
        let _inner = Scope::enter(strict("inner")).unwrap();
        let inside = handle.in_scope(move || {
            let _ = local.exit(&());
            grad_on()
        });
        (inside, grad_on())
    })
    .join()
    .unwrap();
    assert_eq!((inside, after), (false, true));
    carrier.exit(&()).unwrap();
}

/// Whether the thread makes autograd graphs now.
fn grad_on() -> bool {
    floats(1)
        .set_requires_grad(true)
        .g_mul_scalar(2)
        .requires_grad()
}

/// After a scope exited inside work carried onto its thread, the thread names no scope that
/// turned autograd off once the work left: a panic for want of autograd there gets no hint.
#[test]
fn a_scope_exited_inside_carried_work_leaves_no_hint_behind() {
    if common::in_child() {
        let carrier = Scope::enter(strict("carrier")).unwrap();
        let handle = gpu_scope::current().unwrap();
        std::thread::spawn(move || {
            let local = Scope::enter(strict("local")).unwrap();
            handle.in_scope(move || drop(local.exit(&())));
            let x = floats(1);
            let panicked = std::panic::catch_unwind(|| x.sum(tch::Kind::Float).backward());
            assert!(panicked.is_err(), "backward of a tensor that needs no grad");
        })
        .join()
        .unwrap();
        carrier.exit(&()).unwrap();
        return;
    }
    let out = common::child(
        "a_scope_exited_inside_carried_work_leaves_no_hint_behind",
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("does not require grad"), "{stderr}");
    assert!(!stderr.contains("gpu-scope: "), "{stderr}");
}

#[gpu_scope::gpu_scope(on_escape = ignore)]
async fn exits_a_scope_of_its_thread(own: Scope, grad_on: fn() -> bool) -> (bool, bool) {
    YieldOnce::default().await;
    // Polled again above `own`: its exit leaves this poll the async scope's mode.
    let _ = own.exit(&());
    let inside = grad_on();
    YieldOnce::default().await;
    (inside, grad_on())
}

/// The same where the work above is an async scope's later poll: the thread gets the mode
/// the exited scope found after that poll, and the async scope keeps its own in the next.
#[test]
fn a_scope_exited_inside_an_async_scopes_poll_gives_the_thread_its_mode_after_it() {
    let own = Scope::enter(strict("own")).unwrap();
    let mut future = Box::pin(exits_a_scope_of_its_thread(own, grad_on));
    assert!(future.as_mut().poll(&mut noop_context()).is_pending());
    assert!(future.as_mut().poll(&mut noop_context()).is_pending());
    assert!(grad_on(), "the mode `own` found (on), after the poll");
    let Poll::Ready((inside, next)) = future.as_mut().poll(&mut noop_context()) else {
        panic!("ready on the third poll");
    };
    assert_eq!(
        (inside, next),
        (false, false),
        "the async scope's mode (off)"
    );
    assert!(grad_on(), "the thread's own mode (on) once it ended");
}
