//! Every way memory can leave a scope unkept is caught, with the right bytes.
mod common;
use common::{assert_one_escape, escaped, floats, strict};
use gpu_scope::{scope, Error, ScopeHandle};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::sync::Mutex;
use tch::Tensor;

static GLOBAL: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

thread_local! {
    static LOCAL: RefCell<Vec<Tensor>> = const { RefCell::new(Vec::new()) };
}

#[test]
fn global_static() {
    let report = escaped(scope(strict("global"), || {
        GLOBAL.lock().unwrap().push(floats(100))
    }));
    assert_one_escape(&report, 100);
    GLOBAL.lock().unwrap().clear();
}

#[test]
fn thread_local_collection() {
    let report = escaped(scope(strict("tls"), || {
        LOCAL.with(|l| l.borrow_mut().push(floats(30)))
    }));
    assert_one_escape(&report, 30);
}

#[test]
fn leaked_box() {
    let report = escaped(scope(strict("leak"), || {
        Box::leak(Box::new(floats(40)));
    }));
    assert_one_escape(&report, 40);
}

#[test]
fn forgotten() {
    let report = escaped(scope(strict("forget"), || std::mem::forget(floats(50))));
    assert_one_escape(&report, 50);
}

#[test]
fn rc_cycle() {
    struct Node {
        _t: Tensor,
        next: RefCell<Option<Rc<Node>>>,
    }
    let report = escaped(scope(strict("cycle"), || {
        let a = Rc::new(Node {
            _t: floats(60),
            next: RefCell::new(None),
        });
        *a.next.borrow_mut() = Some(a.clone());
    }));
    assert_one_escape(&report, 60);
}

#[test]
fn outer_vec_captured_by_closure() {
    let mut outer = Vec::new();
    let report = escaped(scope(strict("captured"), || outer.push(floats(70))));
    assert_one_escape(&report, 70);
    assert_eq!(outer.len(), 1, "the scope never frees what escaped");
}

#[test]
fn sent_to_a_thread_that_keeps_it() {
    let (tx, rx) = std::sync::mpsc::channel::<Tensor>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let keeper = std::thread::spawn(move || {
        let kept: Vec<Tensor> = rx.iter().collect();
        done_rx.recv().unwrap();
        kept.len()
    });
    let report = escaped(scope(strict("channel"), || tx.send(floats(80)).unwrap()));
    assert_one_escape(&report, 80);
    drop(tx);
    done_tx.send(()).unwrap();
    assert_eq!(keeper.join().unwrap(), 1);
}

type Cache = std::sync::Arc<Mutex<Vec<Tensor>>>;

static STASH: Mutex<Vec<Cache>> = Mutex::new(Vec::new());

#[gpu_scope::gpu_scope(on_escape = error)]
fn stash(cache: Cache) -> Result<(), gpu_scope::Error> {
    cache.lock().unwrap().push(floats(25));
    STASH.lock().unwrap().push(cache);
    Ok(())
}

/// An owned `Arc` argument is searched for what the caller still holds through it: when the
/// caller passed its only handle, the body's global stash holds what it filled.
#[test]
fn an_arc_the_caller_gave_away_and_the_body_stashed() {
    let _serial = common::serial();
    let report = escaped(stash(Cache::default()));
    assert_one_escape(&report, 25);
    STASH.lock().unwrap().clear();
    let cache = Cache::default();
    stash(std::sync::Arc::clone(&cache)).unwrap();
    assert_eq!(cache.lock().unwrap().len(), 1);
    STASH.lock().unwrap().clear();
}

/// libtorch's intra-op workers (OpenMP's, under `parallel_for`) do not inherit a scope (they
/// carry no thread-local state), and by libtorch's rule make no tensors: operators that split
/// their work across them make the same blocks, all seen, with one intra-op thread or two (a
/// block made on a worker would be missing from the second count), and what one of them
/// leaves behind is caught. (Operators that take another path for two threads, such as
/// `masked_select`, `upsample_bilinear2d` and `sum`, whose per-thread buffers the calling
/// thread makes, are left out: their counts differ by design.)
#[test]
fn intra_op_threads_hide_nothing() {
    let _serial = common::serial();
    let f = (tch::Kind::Float, tch::Device::Cpu);
    let long = (tch::Kind::Int64, tch::Device::Cpu);
    let images = Tensor::randn([32, 3, 64, 64], f);
    let filters = Tensor::randn([16, 3, 3, 3], f);
    let m = Tensor::randn([512, 512], f);
    let v = Tensor::randn([1 << 20], f);
    let idx = Tensor::randint(1000, [100_000], long);
    let ops: [(&str, &dyn Fn() -> Tensor); 9] = [
        ("conv2d", &|| {
            images.conv2d(&filters, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1)
        }),
        ("max_pool2d", &|| {
            images.max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false)
        }),
        ("sort", &|| m.sort(1, false).0),
        ("topk", &|| m.topk(10, 1, true, true).0),
        ("index_select", &|| v.index_select(0, &idx)),
        ("group_norm", &|| {
            images.group_norm(3, None::<Tensor>, None::<Tensor>, 1e-5, false)
        }),
        ("softmax", &|| m.softmax(1, tch::Kind::Float)),
        ("cdist", &|| Tensor::cdist(&m, &m, 2.0, None)),
        ("matmul", &|| m.matmul(&m)),
    ];
    // libtorch's thread count is the process's: given back as found, even after a panic.
    struct Threads(i32);
    impl Drop for Threads {
        fn drop(&mut self) {
            tch::set_num_threads(self.0);
        }
    }
    let _found = Threads(tch::get_num_threads());
    let seen = |threads: i32| -> Vec<(u64, u64)> {
        tch::set_num_threads(threads);
        let counts = ops.iter().map(|(name, op)| {
            let (_, report) = scope(strict(name), op).unwrap();
            (report.allocations, report.allocated)
        });
        counts.collect()
    };
    let (one, two) = (seen(1), seen(2));
    let leaked = escaped(scope(strict("leak"), || {
        GLOBAL.lock().unwrap().push(m.softmax(1, tch::Kind::Float))
    }));
    GLOBAL.lock().unwrap().clear();
    for (((name, _), one), two) in ops.iter().zip(&one).zip(&two) {
        assert!(one.0 > 0, "{name}: nothing seen");
        assert_eq!(
            one, two,
            "{name}: (allocations, bytes) with 1 and 2 intra-op threads"
        );
    }
    assert_eq!(leaked.escaped.len(), 1, "{leaked}");
    assert_eq!(leaked.escaped[0].bytes, 512 * 512 * 4, "{leaked}");
}

/// A leak under hundreds of nested scopes that ignore it (deeper than 256, where a frame's
/// place in the chain once wrapped to the innermost) is still an escape of the scope around
/// them all.
#[test]
fn a_leak_under_300_lenient_nested_scopes() {
    static DEEP: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
    fn nest(depth: usize) {
        let lenient = strict("lenient").on_escape(gpu_scope::EscapePolicy::Ignore);
        let (_, report) = scope(lenient, || match depth {
            0 => DEEP.lock().unwrap().push(floats(70)),
            _ => nest(depth - 1),
        })
        .unwrap();
        assert_eq!(report.escaped.len(), 1, "depth {depth}: {report}");
    }
    let deep = std::thread::Builder::new().stack_size(64 << 20);
    let report = deep
        .spawn(|| escaped(scope(strict("around"), || nest(300))))
        .unwrap()
        .join()
        .unwrap();
    assert_one_escape(&report, 70);
    DEEP.lock().unwrap().clear();
}

/// tests/fixtures/fork.pt, its graphs optimized at their first call, outside scopes (README,
/// Limits), and an input.
fn forking_model() -> (&'static tch::CModule, Tensor) {
    static MODEL: std::sync::OnceLock<tch::CModule> = std::sync::OnceLock::new();
    let x = common::cpu_floats(64);
    let model = MODEL.get_or_init(|| {
        // torch.jit.script of a module whose `forward(x)` is `wait(fork(twice, x))`, `twice(x)`
        // being `x * 2`, and whose `remember(x)` stores `wait(fork(twice, x))` in a buffer
        // and returns `x` (made by tests/fixtures/fork.py).
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fork.pt");
        let model = tch::CModule::load(path).unwrap();
        drop(model.forward_ts(&[&x]).unwrap());
        drop(model.method_ts("remember", &[&x]).unwrap());
        model
    });
    (model, x)
}

/// TorchScript's `fork` runs its function on an inter-op thread that inherits the scope
/// (`at::launch`). That thread lets go of its task, and of the result the task still holds,
/// just after `wait` has handed the result over: a result the body dropped is freed, not
/// escaped, however the threads are scheduled; one the model stores for later is caught.
#[test]
fn a_torchscript_fork_result_dropped_in_the_scope_is_freed_not_escaped() {
    let _serial = common::serial();
    let (model, x) = forking_model();
    std::thread::scope(|threads| {
        for _ in 0..4 {
            let x = x.shallow_clone();
            threads.spawn(move || {
                for _ in 0..50 {
                    let run = || drop(model.forward_ts(&[&x]).unwrap());
                    let ((), report) = scope(strict("fork"), run).unwrap();
                    assert_eq!(report.freed, report.allocated, "{report}");
                }
            });
        }
    });
    // The stored result named by operator at once, as in a debug build (a release build's
    // default, on-leak, names a place's first escape by size and address only).
    gpu_scope::set_attribution(gpu_scope::Attribution::Always);
    let report = escaped(scope(strict("fork-stored"), || {
        model.method_ts("remember", &[&x]).unwrap()
    }));
    assert_eq!(report.escaped_bytes, 256, "{report}");
    assert_eq!(report.escaped[0].operator, Some("aten::mul"), "{report}");
}

/// Takes the model from where a service would keep it, not as an argument (searching one
/// takes long enough to hide the race).
#[gpu_scope::gpu_scope(on_escape = error)]
async fn fork_and_drop(x: Tensor, suspend: bool) -> Result<(), Error> {
    if suspend {
        tokio::task::yield_now().await;
    }
    drop(forking_model().0.forward_ts(&[x]).unwrap());
    Ok(())
}

/// The same in `async fn` scopes, each of which ends where its last poll ran (on three threads
/// at once, as a busy service runs them).
#[test]
fn a_torchscript_fork_result_dropped_in_an_async_scope_is_freed_not_escaped() {
    let _serial = common::serial();
    let x = forking_model().1;
    std::thread::scope(|threads| {
        for _ in 0..3 {
            let x = x.shallow_clone();
            threads.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                for i in 0..200 {
                    let run = fork_and_drop(x.shallow_clone(), i % 2 == 1);
                    runtime.block_on(run).unwrap();
                }
            });
        }
    });
}

/// The same in work carried to other threads with a handle: the scope may end as soon as the
/// work has returned.
#[test]
fn a_torchscript_fork_result_dropped_in_carried_work_is_freed_not_escaped() {
    let _serial = common::serial();
    let (model, x) = forking_model();
    std::thread::scope(|threads| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (work, rx) = std::sync::mpsc::channel::<(ScopeHandle, Sender<()>)>();
                let x = x.shallow_clone();
                threads.spawn(move || {
                    for (handle, done) in rx {
                        handle.in_scope(|| drop(model.forward_ts(&[&x]).unwrap()));
                        done.send(()).unwrap();
                    }
                });
                work
            })
            .collect();
        for _ in 0..200 {
            let ((), report) = scope(strict("carried fork"), || {
                let (done, finished) = std::sync::mpsc::channel();
                for work in &workers {
                    let handle = gpu_scope::current().unwrap();
                    work.send((handle, done.clone())).unwrap();
                }
                finished.iter().take(workers.len()).for_each(drop);
            })
            .unwrap();
            assert_eq!(report.freed, report.allocated, "{report}");
        }
    });
}

/// A test or `main` returning `Result<(), Box<dyn Error>>` prints its error's `Debug` when it
/// fails: that is the report's table, as its `Display` shows it.
#[test]
fn an_escape_printed_with_debug_shows_its_report() {
    static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
    let err = scope(strict("debug-printed"), || {
        SINK.lock().unwrap().push(floats(3))
    });
    SINK.lock().unwrap().clear();
    let boxed: Box<dyn std::error::Error> = err.unwrap_err().into();
    let debug = format!("{boxed:?}");
    assert_eq!(debug, boxed.to_string());
    assert!(debug.contains("escaped allocations"), "{debug}");
}
