//! Soak: a long run of scopes nested up to 4 deep that return, keep, drop and (at known
//! iterations) leak tensors. After warm-up the process's resident memory must stay flat, every
//! planted escape must be reported exactly, nothing else may be, and gpu-scope's bookkeeping
//! must be empty at the end.
//!
//! Scopes: `GPU_SCOPE_SOAK` (default 100 000 in release, 10 000 in a debug build). The full run:
//! `GPU_SCOPE_SOAK=1000000 cargo test --release --test soak -- --nocapture`. Under valgrind
//! (`.ci/memcheck`) `GPU_SCOPE_SOAK_RSS=0` turns off the resident-memory check only: there
//! the heap is valgrind's.
mod common;

use common::floats;
use gpu_scope::__introspect::ledger_state;
use gpu_scope::{memory_stats, Error, EscapePolicy, Scope, ScopeOptions};
use std::sync::Mutex;
use tch::{Device, Tensor};

/// Where planted escapes go: a global the scopes do not own.
static LEAKED: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

fn scopes() -> u64 {
    let default = if cfg!(debug_assertions) {
        10_000
    } else {
        100_000
    };
    std::env::var("GPU_SCOPE_SOAK").map_or(default, |v| v.parse().expect("a number of scopes"))
}

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[derive(Default)]
struct Tally {
    scopes: u64,
    planted: u64,
    reported: u64,
    /// Escapes reported without operator and shape (attribution on leak: the first one).
    unattributed: u64,
}

/// One scope at `depth` (1..=4), shaped by `i`; returns the tensor it hands back and how many
/// escapes were planted in it and the scopes inside it (each escapes from all of them).
fn run(i: u64, depth: u64, tally: &mut Tally) -> (Tensor, u64) {
    let scope = Scope::enter(ScopeOptions::new("soak").on_escape(EscapePolicy::Error)).unwrap();
    tally.scopes += 1;
    let returned = floats(depth as i64 + 4);
    drop(floats(16));
    let kept = floats(2);
    gpu_scope::keep(&kept);
    let plant = (i + depth).is_multiple_of(97);
    if plant {
        LEAKED.lock().unwrap().push(floats(3));
        tally.planted += 1;
    }
    let (nested, inside) = match depth < 1 + i % 4 {
        true => {
            let (t, planted) = run(i, depth + 1, tally);
            (Some(t), planted)
        }
        false => (None, 0),
    };
    let planted = u64::from(plant) + inside;
    match scope.exit(&(&returned, &nested)) {
        Ok(report) => assert_eq!(planted, 0, "planted escape not reported: {report}"),
        Err(Error::Escaped(report)) => {
            assert!(planted > 0, "false escape at scope {i}/{depth}: {report}");
            assert_eq!(report.escaped.len() as u64, planted, "{report}");
            for escape in &report.escaped {
                assert_eq!(escape.bytes, 12, "{report}");
                if report.attributed {
                    assert_eq!(escape.shape.as_deref(), Some(&[3][..]), "{report}");
                }
            }
            if plant {
                // Its own escape is attributed exactly when the scope was.
                let shapes = report.escaped.iter().filter(|e| e.shape.is_some()).count();
                assert!(report.attributed || shapes as u64 <= inside, "{report}");
                tally.unattributed += u64::from(!report.attributed);
                tally.reported += 1;
            }
        }
        Err(other) => panic!("scope {i}/{depth} failed: {other}"),
    }
    drop((kept, nested));
    (returned, planted)
}

#[test]
fn soak_scopes_hold_memory_flat_and_report_exactly_the_planted_escapes() {
    let n = scopes();
    let warm_up = n / 10;
    let baseline = memory_stats(Device::Cpu).unwrap();
    let mut tally = Tally::default();
    let mut rss_after_warm_up = None;
    let mut i = 0;
    while tally.scopes < n {
        if tally.scopes >= warm_up && rss_after_warm_up.is_none() {
            rss_after_warm_up = Some(rss());
        }
        drop(run(i, 1, &mut tally).0);
        if i % 100 == 0 {
            LEAKED.lock().unwrap().clear();
        }
        i += 1;
    }
    LEAKED.lock().unwrap().clear();
    let growth = rss().saturating_sub(rss_after_warm_up.expect("more scopes than the warm-up"));
    println!(
        "soak: {i} iterations, {} scopes, {} planted escapes, {} reported; RSS growth after \
         warm-up {growth} B",
        tally.scopes, tally.planted, tally.reported
    );
    assert!(tally.planted > 0);
    assert_eq!(tally.reported, tally.planted);
    // All scopes open at one place: attributed always (debug builds), or from its first leak on.
    let unattributed = match gpu_scope::attribution() {
        gpu_scope::Attribution::Always => 0,
        gpu_scope::Attribution::OnLeak => 1,
        gpu_scope::Attribution::Off => tally.planted,
    };
    assert_eq!(tally.unattributed, unattributed);
    if std::env::var("GPU_SCOPE_SOAK_RSS").as_deref() == Ok("0") {
        println!("soak: RSS check off (GPU_SCOPE_SOAK_RSS=0: a memory checker owns the heap)");
    } else {
        assert!(growth < 1 << 20, "resident memory grew by {growth} bytes");
    }
    assert_eq!(
        memory_stats(Device::Cpu).unwrap().allocated,
        baseline.allocated
    );
    let state = ledger_state();
    assert_eq!(
        (state.depth, state.entries, state.frames, state.wrapped),
        (0, 0, 0, 0)
    );
}
