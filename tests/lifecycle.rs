//! Nesting, threads, panics, budgets, the error policy and the report's forms.
mod common;
use common::{block, cpu_floats, escaped, floats, on, strict};
use gpu_scope::{scope, Error, EscapePolicy, Scope, ScopeOptions};
use std::sync::Mutex;
use tch::Tensor;

#[test]
fn nesting_three_deep_hands_kept_blocks_outwards() {
    let (_t, outer) = scope(strict("outer"), || {
        let (t, middle) = scope(strict("middle"), || {
            let (t, inner) = scope(strict("inner"), || floats(10)).unwrap();
            assert_eq!(on(&inner).kept, block(40));
            let _temp = floats(5);
            t
        })
        .unwrap();
        assert_eq!(on(&middle).kept, block(40));
        assert_eq!(on(&middle).allocated, block(40) + block(20));
        t
    })
    .unwrap();
    let (kept, allocated, peak) = (on(&outer).kept, on(&outer).allocated, on(&outer).peak);
    assert_eq!(kept, block(40));
    assert_eq!(
        allocated,
        block(40) + block(20),
        "the outer report counts inner work"
    );
    assert_eq!(peak, block(40) + block(20));
}

/// What escaped from an inner scope escaped from the scopes around it too, unless one hands
/// it back: a helper's scope under `warn` or `ignore` cannot hide a leak from a strict scope
/// around it (a test's), and the outer report's bytes add up.
#[test]
fn an_inner_escape_is_judged_again_by_the_enclosing_scopes() {
    static CACHE: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
    let quiet = |name| ScopeOptions::new(name).on_escape(EscapePolicy::Ignore);
    let outer = escaped(scope(strict("outer"), || {
        let (_, helper) = scope(quiet("helper"), || CACHE.lock().unwrap().push(floats(7))).unwrap();
        assert_eq!(helper.escaped_bytes, block(28));
        let leaked = escaped(scope(strict("inner"), || std::mem::forget(floats(5))));
        assert_eq!(leaked.escaped_bytes, block(20));
    }));
    assert_eq!(outer.escaped.len(), 2, "{outer}");
    assert_eq!(outer.escaped_bytes, block(28) + block(20), "{outer}");
    assert_eq!(on(&outer).allocated, on(&outer).escaped, "{outer}");
    CACHE.lock().unwrap().clear();

    // Handed back by the outer scope: kept there, and freed when its caller drops it.
    let mut local = Vec::new();
    let outer = scope(strict("outer"), || {
        let (_, inner) = scope(quiet("inner"), || local.push(floats(6))).unwrap();
        assert_eq!(inner.escaped_bytes, block(24));
        &local
    })
    .unwrap()
    .1;
    assert_eq!((outer.kept, outer.escaped_bytes), (block(24), 0), "{outer}");
    drop(local);
}

static PLANTED: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[test]
fn eight_threads_exact_counts() {
    let handles: Vec<_> = (0..8)
        .map(|thread| {
            std::thread::spawn(move || {
                let mut escapes = 0;
                for i in 0..50 {
                    let plant = thread % 2 == 0 && i % 10 == 3;
                    let result = scope(strict("worker"), || {
                        let t = floats(4 + thread as i64);
                        if plant {
                            PLANTED.lock().unwrap().push(floats(3));
                        }
                        t
                    });
                    match result {
                        Ok(_) => assert!(!plant),
                        Err(Error::Escaped(r)) => {
                            assert!(plant);
                            assert_eq!(r.escaped.len(), 1);
                            assert_eq!(r.escaped_bytes, block(12));
                            escapes += 1;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                escapes
            })
        })
        .collect();
    let counts: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(counts, vec![5, 0, 5, 0, 5, 0, 5, 0]);
    PLANTED.lock().unwrap().clear();
}

#[test]
fn panic_unwinds_without_check_then_clean_scope() {
    let result = std::panic::catch_unwind(|| {
        let _ = scope(strict("panics"), || -> () {
            std::mem::forget(floats(9));
            panic!("boom");
        });
    });
    assert!(result.is_err());
    let (_t, report) = scope(strict("after"), || floats(2)).unwrap();
    assert!(report.is_clean());
    assert_eq!(
        on(&report).allocated,
        block(8),
        "nothing from the panicked scope leaks into this one"
    );
}

#[test]
fn panic_policy_panics_with_the_report() {
    let result = std::panic::catch_unwind(|| {
        let _ = scope(
            ScopeOptions::new("loud").on_escape(EscapePolicy::Panic),
            || std::mem::forget(floats(11)),
        );
    });
    let message = *result.unwrap_err().downcast::<String>().unwrap();
    assert!(message.contains("escaped scope `loud`"), "{message}");
    assert!(message.contains("44 B"), "{message}");
}

#[test]
fn budget_exceeded_and_respected() {
    let over = scope(strict("tight").max_peak(100), || drop(cpu_floats(50)));
    match over {
        Err(e @ Error::OverBudget(_)) => {
            assert_eq!(e.report().unwrap().peak, 200);
            assert!(e.to_string().contains("or raise `max_peak`"), "{e}");
        }
        other => panic!("expected over budget, got {other:?}"),
    }
    let (_, ok) = scope(strict("roomy").max_peak(200), || drop(cpu_floats(50))).unwrap();
    assert_eq!(ok.peak, 200);
}

#[test]
fn error_policy_returns_typed_error() {
    let err = scope(strict("typed"), || std::mem::forget(floats(3))).unwrap_err();
    assert!(matches!(err, Error::Escaped(_)));
    assert_eq!(err.report().unwrap().escaped_bytes, block(12));
}

#[test]
fn ignore_policy_still_reports() {
    let opts = ScopeOptions::new("quiet").on_escape(EscapePolicy::Ignore);
    let (_, report) = scope(opts, || std::mem::forget(floats(3))).unwrap();
    assert_eq!(report.escaped_bytes, block(12));
}

#[test]
fn dropped_guard_ends_without_check() {
    let outer = Scope::enter(strict("outer")).unwrap();
    let inner = Scope::enter(strict("inner")).unwrap();
    let t = floats(6);
    drop(inner);
    let report = outer.exit(&t).unwrap();
    assert_eq!(
        on(&report).kept,
        block(24),
        "the inner scope handed its live block outwards"
    );
}

#[test]
fn missing_device_is_an_error() {
    let err = Scope::enter(ScopeOptions::new("gpu").device(tch::Device::Cuda(7))).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { .. }));
    assert!(err.to_string().contains("cuda:7"), "{err}");
}

#[test]
fn report_table_and_json() {
    let report = escaped(scope(strict("known"), || {
        drop(cpu_floats(256));
        std::mem::forget(cpu_floats(1024));
        cpu_floats(16)
    }));
    let table = report.to_string();
    assert!(
        table.contains("scope `known` at tests/lifecycle.rs:"),
        "{table}"
    );
    let row = |label: &str, value: &str| {
        table.lines().any(|l| {
            l.split_whitespace().collect::<Vec<_>>().join(" ") == format!("{label} {value}")
        })
    };
    assert!(row("allocated", "5.06 KiB"), "{table}");
    assert!(row("kept", "64 B"), "{table}");
    assert!(row("escaped", "4.00 KiB"), "{table}");
    if report.attributed {
        assert!(table.contains("aten::zeros"), "{table}");
        assert!(table.contains("[1024] Float"), "{table}");
    } else {
        assert!(table.contains("found without attribution"), "{table}");
    }
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["name"], "known");
    assert_eq!(json["allocated"], 4 * (256 + 1024 + 16));
    assert_eq!(json["freed"], 1024);
    assert_eq!(json["kept"], 64);
    assert_eq!(json["escaped"][0]["bytes"], 4096);
    assert_eq!(json["escaped"][0]["device"], "cpu");
    if report.attributed {
        assert_eq!(json["escaped"][0]["shape"][0], 1024);
    }
    assert!(json["elapsed"].is_u64());
}

#[test]
fn grad_off_inside_unless_kept() {
    let (off, _) = scope(strict("nograd"), || {
        let w = floats(3).set_requires_grad(true);
        (&w * 2).requires_grad()
    })
    .unwrap();
    assert!(!off);
}

#[test]
fn an_out_of_range_device_index_is_named_not_truncated() {
    let err =
        Scope::enter(ScopeOptions::new("huge").device(tch::Device::Cuda(1 << 32))).unwrap_err();
    assert!(err.to_string().contains("cuda:4294967296"), "{err}");
}

#[test]
fn a_leak_over_budget_says_both_in_its_headline() {
    let err = scope(strict("both").max_peak(10), || std::mem::forget(floats(8))).unwrap_err();
    let headline = err.to_string().lines().next().unwrap().to_owned();
    assert!(
        headline.contains("escaped") && headline.contains("budget"),
        "{headline}"
    );
    assert_eq!(err.report().unwrap().status(), "escaped, over budget");
}

fn grad_enabled() -> bool {
    Tensor::ones([1], (tch::Kind::Float, tch::Device::Cpu))
        .set_requires_grad(true)
        .g_mul_scalar(2)
        .requires_grad()
}

/// Scopes ended out of order (an inner one ended by its enclosing scope, then exited or
/// dropped) leave the thread's autograd mode as it was before them.
#[test]
fn scopes_ended_out_of_order_give_autograd_back() {
    assert!(grad_enabled());
    let outer = Scope::enter(strict("outer")).unwrap();
    let inner = Scope::enter(strict("inner")).unwrap();
    outer.exit(&()).unwrap();
    assert!(grad_enabled());
    assert!(matches!(
        inner.exit(&()),
        Err(Error::EndedByEnclosing { .. })
    ));
    assert!(grad_enabled(), "autograd back on with no scope open");
    let outer = Scope::enter(strict("outer")).unwrap();
    let inner = Scope::enter(strict("inner")).unwrap();
    outer.exit(&()).unwrap();
    drop(inner);
    assert!(grad_enabled(), "autograd back on with no scope open");
    // An enclosing scope that keeps the caller's mode ends the inner one, which gives its
    // mode back.
    let outer = Scope::enter(strict("outer").keep_grad_mode(true)).unwrap();
    let inner = Scope::enter(strict("inner")).unwrap();
    assert!(!grad_enabled());
    outer.exit(&()).unwrap();
    assert!(
        grad_enabled(),
        "autograd back on once the outer scope ended"
    );
    drop(inner);
    assert!(grad_enabled(), "autograd back on with no scope open");
}

thread_local! {
    static HELD: std::cell::RefCell<Option<Scope>> = const { std::cell::RefCell::new(None) };
}

/// A scope kept in a thread-local ends, unchecked, when its thread does.
#[test]
fn a_scope_kept_in_a_thread_local_ends_with_its_thread() {
    let thread = std::thread::spawn(|| {
        HELD.with(|h| *h.borrow_mut() = Some(Scope::enter(strict("in-tls")).unwrap()));
        drop(floats(4));
    });
    assert!(thread.join().is_ok());
}

#[gpu_scope::gpu_scope(name = "cleanup")]
fn scoped_cleanup(t: &Tensor) -> i64 {
    t.size()[0]
}

/// Runs scoped code from its destructor, after the thread's gpu-scope state is gone (the
/// thread-local is first used before any scope, so it is destroyed after gpu-scope's).
struct Cleanup(Tensor, std::sync::mpsc::Sender<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        // The attribute's scope (default policy: panic) runs the body unscoped and warns.
        let size = scoped_cleanup(&self.0);
        let entered = Scope::enter(strict("late")).map(|s| s.exit(&()));
        let said = match entered {
            Err(e @ Error::ThreadEnding) => e.to_string(),
            other => format!("unexpected: {other:?}"),
        };
        gpu_scope::keep(&self.0);
        let last = gpu_scope::last_report().map(|r| r.name);
        let _ = self.1.send(format!("{size} {last:?} {}", said));
    }
}

thread_local! {
    static CLEANUP: std::cell::RefCell<Option<Cleanup>> = const { std::cell::RefCell::new(None) };
}

/// Scoped code in a thread-local's destructor neither aborts nor panics: a scope cannot be
/// opened there, and the error says why; the warning says where the scope is (in a child
/// process, whose stderr is read).
#[test]
fn scopes_entered_while_the_thread_ends_are_refused_without_aborting() {
    if !common::in_child() {
        let name = "scopes_entered_while_the_thread_ends_are_refused_without_aborting";
        let out = common::child(name, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let warned = "thread was ending (in a thread-local's destructor)";
        let at =
            "not opened. Do that work before the thread ends (the scope at tests/lifecycle.rs:";
        assert!(stderr.contains(warned) && stderr.contains(at), "{stderr}");
        return;
    }
    let (send, said) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let t = floats(4);
        CLEANUP.with(|c| *c.borrow_mut() = Some(Cleanup(t, send)));
        // The thread's first scope, after the thread-local was made.
        assert_eq!(scoped_cleanup(&floats(2)), 2);
    });
    assert!(thread.join().is_ok());
    let said = said.recv().expect("the destructor ran");
    assert!(
        said.starts_with("4 None gpu-scope: a scope was entered while its thread was ending"),
        "{said}"
    );
}

static LATE: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

/// Opens a leaking scope from its destructor, while the thread ends.
struct LateLeak(std::sync::mpsc::Sender<(usize, u64)>);

impl Drop for LateLeak {
    fn drop(&mut self) {
        let opts = strict("late leak").on_escape(EscapePolicy::Ignore);
        let (_, r) = scope(opts, || LATE.lock().unwrap().push(floats(3) + 1)).unwrap();
        let failures = gpu_scope::__introspect::ledger_state().callback_failures;
        let _ = self.0.send((r.escaped.len(), failures));
    }
}

thread_local! {
    static LATE_LEAK: std::cell::RefCell<Option<LateLeak>> = const { std::cell::RefCell::new(None) };
}

/// A scope opened in a thread-local's destructor while gpu-scope's state for the thread is
/// still there, after some of its caches are gone (made after the thread-local), still sees
/// what it makes: its leak is found, with no callback failing.
#[test]
fn a_scope_in_a_destructor_after_gpu_scopes_caches_went_sees_its_leak() {
    let (send, said) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        // gpu-scope's thread state first, then the thread-local, then the caches an operator
        // run in a scope makes (destroyed first).
        scope(strict("first"), || ()).unwrap();
        LATE_LEAK.with(|l| *l.borrow_mut() = Some(LateLeak(send)));
        let (_, r) = scope(strict("operator"), || drop(floats(2) + 1)).unwrap();
        assert!(r.is_clean(), "{r}");
    });
    assert!(thread.join().is_ok());
    let (escaped, failures) = said.recv().expect("the destructor ran");
    assert_eq!(
        (escaped, failures),
        (1, 0),
        "its leak found, no callback failed"
    );
    LATE.lock().unwrap().clear();
}

static CARRIED_LATE: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

/// Runs work through a handle from its destructor, after gpu-scope's state for the thread is
/// gone (the thread-local is first used before the thread's first scope).
struct CarriesLate(gpu_scope::ScopeHandle, std::sync::mpsc::Sender<()>);

impl Drop for CarriesLate {
    fn drop(&mut self) {
        self.0
            .in_scope(|| CARRIED_LATE.lock().unwrap().push(floats(7)));
        let _ = self.1.send(());
    }
}

thread_local! {
    static CARRIES_LATE: std::cell::RefCell<Option<CarriesLate>> =
        const { std::cell::RefCell::new(None) };
}

/// Work carried in through a handle where the scope cannot be put (a thread-local's
/// destructor) runs unscoped: the scope and those around it say "not tracked", never clean.
#[test]
fn work_carried_where_the_scope_cannot_be_placed_leaves_it_not_tracked() {
    let (send, ran) = std::sync::mpsc::channel();
    let outer = Scope::enter(strict("around")).unwrap();
    let inner = Scope::enter(strict("carried-late")).unwrap();
    let handle = gpu_scope::current().unwrap();
    std::thread::spawn(move || {
        CARRIES_LATE.with(|_| ());
        // The thread's first scope, after the thread-local was made.
        scope(strict("first"), || ()).unwrap();
        CARRIES_LATE.with(|c| *c.borrow_mut() = Some(CarriesLate(handle, send)));
    })
    .join()
    .unwrap();
    ran.recv().expect("the destructor ran");
    assert_eq!(CARRIED_LATE.lock().unwrap().len(), 1, "the work ran");
    for report in [inner.exit(&()).unwrap(), outer.exit(&()).unwrap()] {
        assert_eq!(report.status(), "not tracked", "{report}");
        assert!(report.to_string().contains("could not be put"), "{report}");
    }
    CARRIED_LATE.lock().unwrap().clear();
}

/// Opens, fills and checks a scope from its destructor (with no test helper, which may have
/// opened a scope already).
struct ScopedCleanup(std::sync::mpsc::Sender<u64>);

impl Drop for ScopedCleanup {
    fn drop(&mut self) {
        let opts = ScopeOptions::new("cleanup").on_escape(EscapePolicy::Error);
        let ones = || Tensor::ones([2], (tch::Kind::Float, tch::Device::Cpu)) + 1;
        let (t, report) = scope(opts, ones).unwrap();
        assert!(report.is_clean() && t.numel() == 2, "{report}");
        let _ = self.0.send(report.kept);
    }
}

/// A program's first scope opened while a panic unwinds (in a destructor) opens and is checked
/// (a fresh child process, where no scope ran before: the first scope installs gpu-scope's
/// panic hook, which std refuses from a panicking thread, an abort in a destructor).
#[test]
fn a_first_scope_opened_while_a_panic_unwinds_works() {
    if !common::in_child() {
        let out = common::child("a_first_scope_opened_while_a_panic_unwinds_works", &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        return;
    }
    let (send, kept) = std::sync::mpsc::channel();
    let unwound = std::panic::catch_unwind(move || {
        let _cleanup = ScopedCleanup(send);
        panic!("the work failed");
    });
    assert!(unwound.is_err());
    assert_eq!(kept.recv().unwrap(), 8);
    // The scopes after it run as usual.
    let (_, report) = scope(strict("after"), || floats(1) + 1).unwrap();
    assert!(report.is_clean(), "{report}");
}

/// A program may end (`main` returns, `exit` runs the static destructors) while threads it
/// left running still allocate, in scopes, in work carried with a handle into a scope still
/// open, or outside scopes: it exits normally. (Outside scopes too: every CPU allocation goes
/// through gpu-scope's wrapper of libtorch's CPU allocator, which must outlive them. The
/// accelerator's allocator, which a scope's entry asks about, is destroyed at exit only in a
/// libtorch with CUDA: the fake device's is never destroyed.)
#[test]
fn a_program_ends_normally_while_its_threads_still_run_scopes() {
    if common::in_child() {
        let ignore = |name| ScopeOptions::new(name).on_escape(EscapePolicy::Ignore);
        // Paced: libtorch's own operators are not safe while its exit unregisters them, so a
        // worker caught in the middle of one could crash in libtorch, whatever gpu-scope does.
        // Between operators, the next allocation after the exit has begun is gpu-scope's to
        // survive.
        let work = || {
            drop(cpu_floats(1000));
            std::thread::sleep(std::time::Duration::from_micros(300));
        };
        match std::env::var("WORKER").unwrap().as_str() {
            "plain" => drop(std::thread::spawn(move || loop {
                work()
            })),
            "scoped" => drop(std::thread::spawn(move || loop {
                let _ = scope(ignore("worker"), work);
            })),
            _ => {
                // Open until the process ends (on a thread that never does): the worker's
                // work stays carried into it.
                let (send, handle) = std::sync::mpsc::channel();
                drop(std::thread::spawn(move || {
                    let _request = Scope::enter(ignore("request")).unwrap();
                    send.send(gpu_scope::current().unwrap()).unwrap();
                    loop {
                        std::thread::park();
                    }
                }));
                let here = handle.recv().unwrap();
                drop(std::thread::spawn(move || loop {
                    if !here.is_open() {
                        eprintln!("the request's scope ended: nothing was carried");
                        std::process::exit(3);
                    }
                    here.in_scope(work)
                }));
            }
        }
        // Running when the test returns and the harness ends the process.
        std::thread::sleep(std::time::Duration::from_millis(50));
        return;
    }
    for mode in ["plain", "scoped", "carried"] {
        for _ in 0..2 {
            let name = "a_program_ends_normally_while_its_threads_still_run_scopes";
            let out = common::child(name, &[("WORKER", mode)]);
            assert!(
                out.status.success(),
                "{mode}: {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Scopes nest up to the limit the README names; one more is refused with `TooDeep`, and the
/// scopes that were open end in order, their reports intact.
#[test]
fn a_scope_nested_past_the_limit_is_refused() {
    let opts = || ScopeOptions::new("deep").on_escape(EscapePolicy::Error);
    let outer = Scope::enter(opts()).unwrap();
    let kept = cpu_floats(3);
    let mut open: Vec<Scope> = (1..4096).map(|_| Scope::enter(opts()).unwrap()).collect();
    match Scope::enter(opts()) {
        Err(e @ Error::TooDeep { limit: 4096 }) => {
            assert!(
                e.to_string().contains("open the scope around a recursion")
                    && e.to_string().contains("`mem::forget`"),
                "{e}"
            )
        }
        other => panic!("expected TooDeep, got {other:?}"),
    }
    while let Some(scope) = open.pop() {
        assert!(scope.exit(&()).unwrap().is_clean());
    }
    let r = outer.exit(&kept).unwrap();
    assert_eq!(r.kept, 3 * 4, "{r}");
}
