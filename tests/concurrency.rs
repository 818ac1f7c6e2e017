//! Scopes on many threads at once: each thread's reports are exact, whatever the others do,
//! and tensors freed on another thread than their scope's are seen as freed.
mod common;

use common::{block, floats, on, serial, strict};
use gpu_scope::__introspect::ledger_state;
use gpu_scope::{Error, Scope};
use std::sync::mpsc;
use tch::Tensor;

const THREADS: u64 = 8;

fn scopes_per_thread() -> u64 {
    if cfg!(debug_assertions) {
        2_000
    } else {
        10_000
    }
}

/// Thread `t` leaks a tensor of `t + 1` floats at iterations `t, t + 97, t + 194, ...` and
/// must see exactly those escapes, with that size.
fn worker(t: u64, n: u64) -> (u64, u64) {
    let mut leaked = Vec::new();
    let (mut planted, mut reported) = (0, 0);
    for i in 0..n {
        let plant = i % 97 == t;
        let scope = Scope::enter(strict("worker")).unwrap();
        let kept = floats(8);
        drop(floats(32));
        if plant {
            leaked.push(floats(t as i64 + 1));
            planted += 1;
        }
        match scope.exit(&kept) {
            Ok(r) => assert!(
                !plant && on(&r).kept == block(32),
                "thread {t} iteration {i}: {r}"
            ),
            Err(Error::Escaped(r)) => {
                assert!(plant, "false escape on thread {t} at {i}: {r}");
                assert_eq!(r.escaped.len(), 1, "{r}");
                assert_eq!(r.escaped[0].bytes, block(4 * (t + 1)), "{r}");
                reported += 1;
            }
            Err(e) => panic!("thread {t}: {e}"),
        }
        if leaked.len() > 10 {
            leaked.clear();
        }
    }
    (planted, reported)
}

#[test]
fn eight_threads_report_exactly_their_own_planted_escapes() {
    let _serial = serial();
    let n = scopes_per_thread();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| std::thread::spawn(move || worker(t, n)))
        .collect();
    let mut total = 0;
    for (t, h) in handles.into_iter().enumerate() {
        let (planted, reported) = h.join().expect("worker panicked");
        let expected = (0..n).filter(|i| i % 97 == t as u64).count() as u64;
        assert_eq!((planted, reported), (expected, expected), "thread {t}");
        total += reported;
    }
    println!(
        "concurrency: {THREADS} threads x {n} scopes, {total} planted escapes reported exactly"
    );
    let state = ledger_state();
    assert_eq!(
        (state.entries, state.frames, state.callback_failures),
        (0, 0, 0)
    );
}

#[test]
fn tensors_freed_on_another_thread_count_as_freed() {
    let _serial = serial();
    let (to_dropper, inbox) = mpsc::channel::<Vec<Tensor>>();
    let (done, freed) = mpsc::channel::<()>();
    let dropper = std::thread::spawn(move || {
        for batch in inbox {
            drop(batch);
            done.send(()).unwrap();
        }
    });
    let scope = Scope::enter(strict("handoff")).unwrap();
    let kept = floats(4);
    to_dropper
        .send((0..10).map(|_| floats(100)).collect())
        .unwrap();
    freed.recv().unwrap();
    let report = scope
        .exit(&kept)
        .expect("nothing escaped: the other thread freed them");
    let r = on(&report);
    assert_eq!(r.allocated, block(16) + 10 * block(400));
    assert_eq!(r.freed, 10 * block(400));
    assert_eq!(r.kept, block(16));

    // A tensor kept out of its scope and dropped later on another thread leaves no trace.
    to_dropper.send(vec![kept]).unwrap();
    freed.recv().unwrap();
    let after = ledger_state();
    assert_eq!((after.entries, after.wrapped), (0, 0));
    drop(to_dropper);
    dropper.join().unwrap();
}

/// Blocks that a consumer thread frees while their producer's scope is ending count as freed
/// (or, still alive when judged, as escaped): never as another scope's, its own handle used
/// elsewhere or not.
#[test]
fn blocks_freed_on_another_thread_while_their_scope_ends_count_as_freed() {
    let _serial = serial();
    for round in 0..300 {
        let (send, received) = mpsc::channel::<Tensor>();
        let consumer = std::thread::spawn(move || received.iter().for_each(drop));
        let opts = strict("producer").on_escape(gpu_scope::EscapePolicy::Ignore);
        let (_, r) = gpu_scope::scope(opts, || {
            // Its own handle used on another thread charges it with nothing of another scope.
            let handle = gpu_scope::current().unwrap();
            std::thread::scope(|s| s.spawn(|| handle.in_scope(|| ())).join().unwrap());
            for _ in 0..50 {
                send.send(floats(7)).unwrap();
            }
        })
        .unwrap();
        drop(send);
        consumer.join().unwrap();
        assert_eq!(
            r.held_by(gpu_scope::HeldBy::OtherScope),
            0,
            "round {round}: {r}"
        );
        let d = on(&r);
        assert_eq!(d.freed + d.escaped, d.allocated, "round {round}: {r}");
        assert_eq!(r.freed + r.escaped_bytes, r.allocated, "round {round}: {r}");
    }
}
