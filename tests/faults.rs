//! Faults inside scopes: panics caught with `catch_unwind`, libtorch errors, and a device that
//! does not exist leave the thread's scope depth and the ledger as they were.
//! (On CPU tensors whatever the test device: the byte counts are exact ones.)
mod common;

use common::{child_ok, cpu_floats, in_child, serial, strict};
use gpu_scope::__introspect::{ledger_state, LedgerState};
use gpu_scope::{gpu_scope, Error, Scope, ScopeOptions};
use std::cell::RefCell;
use std::panic::catch_unwind;
use tch::{Device, TchError, Tensor};

/// Runs `f` with the panic message printer off (10 000 of them would flood the output).
fn quietly<R>(f: impl FnOnce() -> R) -> R {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = f();
    std::panic::set_hook(hook);
    r
}

#[gpu_scope(on_escape = error)]
fn nested_panic(depth: u32, at: u32) -> Result<Tensor, Error> {
    let kept = cpu_floats(3);
    let _live = cpu_floats(5);
    if depth == at {
        panic!("planted panic at depth {depth}");
    }
    let inner = nested_panic(depth + 1, at)?;
    Ok(kept + inner)
}

#[test]
fn ten_thousand_panics_leave_depth_and_ledger_as_before() {
    let _serial = serial();
    let before = ledger_state();
    let outer = Scope::enter(strict("outer")).unwrap();
    let caught = quietly(|| {
        (0..10_000u32)
            .filter(|i| catch_unwind(|| nested_panic(0, i % 4)).is_err())
            .count()
    });
    assert_eq!(caught, 10_000);
    assert_eq!(ledger_state().depth, 1, "only the outer scope is open");
    // Everything the panicking scopes made was dropped while unwinding: nothing escapes.
    let report = outer.exit(&()).expect("no escape from unwound scopes");
    assert_eq!(report.allocated, report.freed, "{report}");
    // Scope i allocates two tensors at each of its (i % 4) + 1 levels: 10 000 / 4 × (2+4+6+8).
    assert_eq!(report.allocations, 50_000, "{report}");
    assert_eq!(ledger_state(), before);
}

#[test]
fn a_shape_mismatch_propagates_as_a_tch_error_and_leaves_the_scope_consistent() {
    let _serial = serial();
    let before = ledger_state();

    #[gpu_scope(on_escape = panic)]
    fn mismatched() -> Result<Tensor, TchError> {
        let a = cpu_floats(6).view([2, 3]);
        let b = cpu_floats(6).view([2, 3]);
        a.f_matmul(&b)
    }
    let err = mismatched().unwrap_err();
    assert!(
        err.to_string().contains("shapes cannot be multiplied"),
        "{err}"
    );
    assert_eq!(ledger_state(), before);

    // The panicking form: tch panics with libtorch's message; the scope unwinds cleanly.
    #[gpu_scope(on_escape = error)]
    fn mismatched_panics() -> Result<Tensor, Error> {
        let a = cpu_floats(6).view([2, 3]);
        Ok(a.matmul(&cpu_floats(6).view([2, 3])))
    }
    let panic = quietly(|| catch_unwind(mismatched_panics)).unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("shapes cannot be multiplied"), "{message}");
    assert_eq!(ledger_state(), before);

    // And scopes work as before afterwards.
    let (t, report) = gpu_scope::scope(strict("after"), || cpu_floats(2)).unwrap();
    assert_eq!((report.kept, t.numel()), (8, 2));
}

#[test]
fn a_scope_on_a_missing_device_is_an_error_and_changes_nothing() {
    let _serial = serial();
    let outer = Scope::enter(strict("outer")).unwrap();
    let before: LedgerState = ledger_state();
    let err = Scope::enter(ScopeOptions::new("gpu").device(Device::Cuda(7))).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { .. }), "{err}");
    assert!(err.to_string().contains("cuda:7"), "{err}");
    // What exists instead, by name (on a CPU-only machine: the CPU alone).
    let has = err.to_string();
    assert!(
        has.contains("(it has the CPU") || has.contains("(it has only the CPU: "),
        "{has}"
    );
    assert!(has.ends_with("; name a device it has"), "{has}");
    assert!(!has.contains(" × "), "{has}");
    assert_eq!(ledger_state(), before);
    assert_eq!(before.depth, 1);
    outer.exit(&()).unwrap();
}

#[test]
fn an_error_inside_a_nested_scope_hands_its_live_tensors_to_the_outer_one() {
    let _serial = serial();
    let outer = Scope::enter(strict("outer")).unwrap();
    let result: Result<(), TchError> = (|| {
        let _inner = Scope::enter(strict("inner")).unwrap();
        let t = cpu_floats(4);
        let bad = t.f_view([3])?; // 4 elements cannot be viewed as 3
        gpu_scope::keep(&bad);
        Ok(())
    })();
    assert!(result.is_err());
    assert_eq!(ledger_state().depth, 1);
    let report = outer.exit(&()).unwrap();
    assert_eq!((report.allocated, report.freed), (16, 16));
}

#[test]
fn exiting_an_outer_scope_first_ends_the_inner_one_into_it() {
    let _serial = serial();
    let before = ledger_state();
    let outer = Scope::enter(strict("outer")).unwrap();
    let inner = Scope::enter(strict("inner")).unwrap();
    let t = cpu_floats(3);
    let report = outer.exit(&t).unwrap();
    assert_eq!(
        report.kept, 12,
        "the inner scope's block was handed to the outer one"
    );
    assert_eq!(report.ended_inside.len(), 1, "{report}");
    assert_eq!(report.ended_inside[0].file(), file!());
    assert!(
        report
            .to_string()
            .contains("unchecked, and took over their allocations (opened at tests/faults.rs:"),
        "{report}"
    );
    assert!(
        report.to_string().contains("exit scopes innermost first"),
        "{report}"
    );
    assert!(report
        .to_json()
        .contains("\"ended_inside\":[\"tests/faults.rs:"));
    match inner.exit(&()) {
        Err(Error::EndedByEnclosing { scope }) => assert_eq!(scope, "inner"),
        other => panic!("expected EndedByEnclosing, got {other:?}"),
    }
    let last = gpu_scope::last_report().unwrap();
    assert!(
        !last.checked && !last.is_clean(),
        "unchecked is not clean: {last}"
    );
    // Its own numbers, from the end the outer scope gave it: what it allocated, alive then.
    assert_eq!(last.name, "inner");
    assert_eq!(
        (last.allocations, last.allocated, last.kept),
        (1, 12, 12),
        "{last}"
    );
    drop(t);
    assert_eq!(ledger_state(), before);
}

#[test]
fn a_scope_forgotten_on_a_thread_that_ends_leaves_nothing_behind() {
    let _serial = serial();
    let before = ledger_state();
    std::thread::spawn(|| {
        let scope = Scope::enter(strict("forgotten")).unwrap();
        drop(cpu_floats(4));
        std::mem::forget(scope);
    })
    .join()
    .unwrap();
    assert_eq!(ledger_state(), before);
}

/// Makes a tensor when its thread ends (a per-thread buffer written out at the end).
struct AllocatesOnDrop;

impl Drop for AllocatesOnDrop {
    fn drop(&mut self) {
        assert_eq!(cpu_floats(1000).numel(), 1000);
    }
}

thread_local! {
    static AT_END: RefCell<Option<AllocatesOnDrop>> = const { RefCell::new(None) };
    static GUARD: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// A thread that ends with a scope open (forgotten, or kept in a thread-local) and then runs
/// the destructor of a thread-local made before its first scope, which allocates: the
/// allocation is not charged to the ended scope, and nothing freed is used (this crashed).
#[test]
fn a_thread_ending_with_a_scope_open_can_still_allocate_in_a_destructor() {
    if !in_child() {
        child_ok(
            "a_thread_ending_with_a_scope_open_can_still_allocate_in_a_destructor",
            &[],
        );
        return;
    }
    let before = ledger_state();
    let forgotten = std::thread::spawn(|| {
        AT_END.with(|s| *s.borrow_mut() = Some(AllocatesOnDrop));
        std::mem::forget(Scope::enter(strict("forgotten")).unwrap());
        drop(cpu_floats(4));
    });
    forgotten.join().unwrap();
    let kept_in_a_thread_local = std::thread::spawn(|| {
        AT_END.with(|s| *s.borrow_mut() = Some(AllocatesOnDrop));
        GUARD.with(|_| ());
        let scope = Scope::enter(strict("held")).unwrap();
        GUARD.with(|g| *g.borrow_mut() = Some(scope));
    });
    kept_in_a_thread_local.join().unwrap();
    // The shim's thread-locals made before libtorch's debug info (a handle to an ended scope
    // used first): the leave at the thread's end still goes before the debug info.
    let ended = {
        let scope = Scope::enter(strict("ended")).unwrap();
        let handle = gpu_scope::current().unwrap();
        scope.exit(&()).unwrap();
        handle
    };
    let shim_first = std::thread::spawn(move || {
        AT_END.with(|s| *s.borrow_mut() = Some(AllocatesOnDrop));
        ended.in_scope(|| ());
        std::mem::forget(Scope::enter(strict("forgotten")).unwrap());
    });
    shim_first.join().unwrap();
    assert_eq!(ledger_state(), before);
}
