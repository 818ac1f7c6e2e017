//! Kept values of every kind are inspected, or said not to be: locks held elsewhere are waited
//! for or reported as not inspected (never guessed empty), tensors of every layout are kept by
//! what they own, tch's own types and the std containers implement `Tensors`, and
//! `keep_forever` takes memory out of every scope.
mod common;

use common::{adds_up, block, escaped, floats, on, strict};
use gpu_scope::{keep_forever, scope, HeldBy};
use std::collections::LinkedList;
use std::sync::{Arc, Mutex, RwLock};
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

#[test]
fn a_mutex_held_briefly_by_another_thread_is_waited_for() {
    let cache = Arc::new(Mutex::new(Vec::new()));
    let holder = cache.clone();
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let mut other = None;
    let (_, report) = scope(strict("briefly-locked"), || {
        cache.lock().unwrap().push(floats(10));
        other = Some(std::thread::spawn(move || {
            let _guard = holder.lock().unwrap();
            locked_tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }));
        locked_rx.recv().unwrap();
        cache.clone()
    })
    .unwrap();
    other.unwrap().join().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(on(&report).kept, block(40));
}

#[test]
fn a_mutex_the_exiting_thread_holds_is_not_called_escaped() {
    let cache = Mutex::new(Vec::new());
    let scope = gpu_scope::Scope::enter(strict("held-at-exit")).unwrap();
    let mut guard = cache.lock().unwrap();
    guard.push(floats(20));
    let report = scope.exit(&cache).unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), block(80), "{report}");
    assert_eq!(report.status(), "not inspected");
    assert!(!report.is_clean());
    assert_eq!(report.uninspected_kept.len(), 1, "{report}");
    assert!(report.uninspected_kept[0].contains("Mutex"), "{report}");
    assert!(
        report.to_string().contains("could not be looked into"),
        "{report}"
    );
    drop(guard);
}

#[test]
fn a_write_locked_rwlock_is_not_called_escaped() {
    let cache = RwLock::new(Vec::new());
    let scope = gpu_scope::Scope::enter(strict("rwlock")).unwrap();
    let mut guard = cache.write().unwrap();
    guard.push(floats(5));
    let report = scope.exit(&cache).unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), block(20));
    drop(guard);
}

#[test]
fn sparse_and_mkldnn_tensors_are_kept_by_what_they_own() {
    let (_coo, report) = scope(strict("coo"), || {
        Tensor::eye(64, (Kind::Float, Device::Cpu)).to_sparse_sparse_dim(2)
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(report.kept > 0);
    let (_csr, report) = scope(strict("csr"), || {
        Tensor::eye(64, (Kind::Float, Device::Cpu)).to_sparse_csr(None)
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    let (_mkldnn, report) = scope(strict("mkldnn"), || {
        Tensor::ones([64, 64], (Kind::Float, Device::Cpu)).to_mkldnn()
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(report.kept >= 64 * 64 * 4, "{report}");
    // A sparse tensor's `values()` keeps the sparse tensor alive, indices included.
    let (_values, report) = scope(strict("coo-values"), || {
        Tensor::eye(4, (Kind::Float, Device::Cpu))
            .to_sparse_sparse_dim(2)
            .values()
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, 16 + 64, "{report}");
    let (_values, report) = scope(strict("csr-values"), || {
        Tensor::eye(4, (Kind::Float, Device::Cpu))
            .to_sparse_csr(None)
            .values()
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    // A per-channel quantized tensor's quantizer holds its scales and zero points.
    let (_q, report) = scope(strict("per-channel"), || {
        let x = Tensor::ones([4, 8], (Kind::Float, Device::Cpu));
        let scales = Tensor::ones([4], (Kind::Double, Device::Cpu));
        let zero_points = Tensor::zeros([4], (Kind::Int64, Device::Cpu));
        x.quantize_per_channel(&scales, &zero_points, 0, Kind::QInt8)
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, 32 + 32 + 32, "{report}");
}

/// A nested tensor owns its buffer and the tensors of its components' sizes, strides and
/// offsets: kept, all are; left behind, all are escaped, by its operator (whose outputs'
/// shapes attribution notes: a nested tensor has none, and is left without one).
#[test]
fn nested_tensors_are_kept_by_what_they_own() {
    let shapes = Tensor::from_slice2(&[[2i64, 4], [3, 4]]);
    let padded = Tensor::ones([2, 3, 4], (Kind::Float, Device::Cpu));
    let nested = || Tensor::internal_nested_from_padded(&padded, &shapes, false);
    let (kept, report) = scope(strict("nested"), nested).unwrap();
    assert!(report.is_clean(), "{report}");
    // The buffer (2 x 4 and 3 x 4 floats), its strides (2 x 2) and offsets (2); its sizes
    // are `shapes`, made outside.
    assert_eq!(report.kept, (8 + 12) * 4 + 32 + 16, "{report}");
    drop(kept);
    // A view of one (its components, one of them) keeps it whole.
    let views: [fn(Tensor) -> Tensor; 2] = [|n| n.transpose(1, 2), |n| n.select(0, 1)];
    for view in views {
        let (_view, report) = scope(strict("nested view"), || view(nested())).unwrap();
        assert!(report.is_clean(), "{report}");
        // The base's, and a transpose's own sizes, strides and offsets.
        assert!(report.kept >= (8 + 12) * 4 + 32 + 16, "{report}");
    }
    let (_parts, report) = scope(strict("nested parts"), || nested().unbind(0)).unwrap();
    assert!(report.is_clean(), "{report}");
    static SINK: std::sync::Mutex<Vec<Tensor>> = std::sync::Mutex::new(Vec::new());
    // The leak named by operator at once, as in a debug build (a release build's default,
    // on-leak, names a place's first escape by size and address only).
    gpu_scope::set_attribution(gpu_scope::Attribution::Always);
    let report = escaped(scope(strict("nested-leak"), || {
        SINK.lock().unwrap().push(nested())
    }));
    SINK.lock().unwrap().clear();
    assert_eq!(report.escaped_bytes, (8 + 12) * 4 + 32 + 16, "{report}");
    let operator = Some("aten::_nested_from_padded");
    assert!(
        report.escaped.iter().all(|e| e.operator == operator),
        "{report}"
    );
}

#[test]
fn std_containers_and_tch_types_are_kept() {
    let (_list, report) = scope(strict("list"), || {
        let mut list = LinkedList::new();
        list.push_back(floats(3));
        list
    })
    .unwrap();
    assert_eq!(on(&report).kept, block(12));
    let ((vs, seq), report) = scope(strict("seq"), || {
        let vs = nn::VarStore::new(Device::Cpu);
        let seq = nn::seq().add(nn::linear(vs.root() / "l", 8, 2, Default::default()));
        let _ = seq.forward(&Tensor::ones([1, 8], (Kind::Float, Device::Cpu)));
        (vs, seq)
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, 4 * (8 * 2 + 2));
    drop((vs, seq));
    let (_norms, report) = scope(strict("norms"), || {
        let vs = nn::VarStore::new(Device::Cpu);
        let gn = nn::group_norm(vs.root() / "g", 2, 4, Default::default());
        let ct = nn::conv_transpose2d(vs.root() / "c", 4, 4, 3, Default::default());
        (gn, ct)
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
}

/// tch keeps a Sequential's tensors private: returned without its VarStore, its memory is
/// not judged rather than called escaped.
#[test]
fn a_sequential_without_its_var_store_is_not_inspected_rather_than_escaped() {
    let (seq, report) = scope(strict("seq-alone"), || {
        let vs = nn::VarStore::new(Device::Cpu);
        nn::seq().add(nn::linear(vs.root(), 8, 2, Default::default()))
    })
    .unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), 4 * (8 * 2 + 2));
    drop(seq);
}

static LIBRARY_CACHE: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

fn cached_embedding() -> Tensor {
    let mut cache = LIBRARY_CACHE.lock().unwrap();
    if cache.is_empty() {
        let t = floats(64);
        keep_forever(&t);
        cache.push(t);
    }
    cache[0].shallow_clone()
}

#[test]
fn keep_forever_leaves_every_enclosing_scope() {
    let _serial = common::serial();
    let (_, outer) = scope(strict("outer"), || {
        let (_, inner) = scope(strict("inner"), || drop(cached_embedding())).unwrap();
        assert!(inner.is_clean(), "{inner}");
    })
    .unwrap();
    assert!(outer.is_clean(), "{outer}");
    assert_eq!(
        on(&outer).allocated,
        block(256),
        "still counted as work done in the scope"
    );
    // Shown on a line of its own, in every scope it leaves, and the totals add up.
    assert_eq!(outer.held_by(HeldBy::KeptForever), block(256), "{outer}");
    assert!(outer.to_string().contains("kept forever"), "{outer}");
    adds_up(&outer);
}

#[test]
fn keep_forever_inside_a_nested_scope_shows_in_both() {
    let _serial = common::serial();
    let (_, outer) = scope(strict("outer"), || {
        let (_, inner) = scope(strict("inner"), || {
            let t = floats(8);
            keep_forever(&t);
            FOREVER.lock().unwrap().push(t);
        })
        .unwrap();
        assert_eq!(inner.held_by(HeldBy::KeptForever), block(32), "{inner}");
    })
    .unwrap();
    assert!(outer.is_clean(), "{outer}");
    assert_eq!(outer.held_by(HeldBy::KeptForever), block(32), "{outer}");
    assert_eq!(on(&outer).held, block(32), "{outer}");
}

static FOREVER: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

/// Memory given to `keep_forever` stays alive as far as the scopes around it can tell: their
/// peak (and `max_peak`) count it until they end, here and in the scope around.
#[test]
fn keep_forever_counts_in_the_peak() {
    let _serial = common::serial();
    let (_, outer) = scope(strict("outer"), || {
        let budget = 5 * block(400);
        let inner = scope(strict("inner").max_peak(budget), || {
            for _ in 0..10 {
                let t = floats(100);
                keep_forever(&t);
                FOREVER.lock().unwrap().push(t);
            }
        })
        .unwrap_err()
        .report()
        .cloned()
        .expect("over its budget");
        assert_eq!(on(&inner).peak, 10 * block(400), "{inner}");
        assert!(inner.over_budget(), "{inner}");
        let _ = floats(100);
    })
    .unwrap();
    assert_eq!(on(&outer).peak, 11 * block(400), "{outer}");
    FOREVER.lock().unwrap().clear();
}

/// An open scope counts what `keep_forever` took out of it per device (its line's bytes and
/// allocations), not a record per call: a long-lived scope calling it in a loop grows nothing.
#[test]
fn keep_forever_in_a_loop_is_counted_per_device() {
    let _serial = common::serial();
    let (_, outer) = scope(strict("epoch"), || {
        for _ in 0..1000 {
            let t = floats(2);
            keep_forever(&t);
        }
    })
    .unwrap();
    assert!(outer.is_clean(), "{outer}");
    let line = outer.held.iter().find(|h| h.by == HeldBy::KeptForever);
    let line = line.expect("a kept-forever line");
    assert_eq!((line.bytes, line.count), (1000 * block(8), 1000), "{outer}");
    adds_up(&outer);
}

#[test]
fn keep_hands_a_value_to_the_enclosing_scope_only() {
    let _serial = common::serial();
    let err = scope(strict("outer"), || {
        let (_, inner) = scope(strict("inner"), || {
            let t = floats(8);
            gpu_scope::keep(&t);
            LIBRARY_CACHE.lock().unwrap().push(t);
        })
        .unwrap();
        assert!(inner.is_clean(), "{inner}");
    })
    .unwrap_err();
    assert_eq!(
        err.report().unwrap().escaped_bytes,
        block(32),
        "the outer scope checks it"
    );
    LIBRARY_CACHE.lock().unwrap().pop();
}

/// Another thread takes `cache`'s lock and holds it until the sender is used; returns once
/// the lock is taken.
fn held_elsewhere(
    cache: &Arc<Mutex<Vec<Tensor>>>,
) -> (std::thread::JoinHandle<()>, std::sync::mpsc::Sender<()>) {
    let holder = cache.clone();
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        let _guard = holder.lock().unwrap();
        locked_tx.send(()).unwrap();
        release_rx.recv().unwrap();
    });
    locked_rx.recv().unwrap();
    (other, release_tx)
}

/// A kept mutex another thread holds past the wait: the report names it even when every
/// allocation could be judged without it (all freed here), and the table says so.
#[test]
fn a_mutex_held_elsewhere_is_named_even_when_nothing_is_left_to_judge() {
    let cache: Arc<Mutex<Vec<Tensor>>> = Arc::default();
    let (other, release) = held_elsewhere(&cache);
    let (_, report) = scope(strict("locked-clean"), || {
        drop(floats(10));
        cache.clone()
    })
    .unwrap();
    release.send(()).unwrap();
    other.join().unwrap();
    assert_eq!(report.held_by(HeldBy::Uninspected), 0, "{report}");
    assert_eq!(
        report.status(),
        "clean",
        "nothing was left unjudged: {report}"
    );
    assert_eq!(report.uninspected_kept.len(), 1, "{report}");
    assert!(
        report.to_string().contains("could not be looked into"),
        "{report}"
    );
}

/// A value given to `keep`, `Scope::keep` or `keep_forever` that cannot be looked into (a
/// lock held elsewhere, a Sequential kept alone) is named as not inspected, and memory nothing
/// else keeps is `not inspected`, as when such a value is handed back: never called escaped.
#[test]
fn a_value_given_to_keep_that_cannot_be_looked_into_is_not_called_escaped() {
    let cache: Arc<Mutex<Vec<Tensor>>> = Arc::default();
    // Another thread holds the lock past the wait.
    let (_, report) = scope(strict("keep-locked"), || {
        cache.lock().unwrap().push(floats(3));
        let (other, release) = held_elsewhere(&cache);
        gpu_scope::keep(&*cache);
        release.send(()).unwrap();
        other.join().unwrap();
    })
    .unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), block(12), "{report}");
    assert_eq!(report.uninspected_kept.len(), 1, "{report}");
    assert!(report.uninspected_kept[0].contains("Mutex"), "{report}");
    cache.lock().unwrap().clear();

    // `Scope::keep` on a lock the thread itself holds.
    let outer = gpu_scope::Scope::enter(strict("scope-keep-locked")).unwrap();
    let mut guard = cache.lock().unwrap();
    guard.push(floats(5));
    outer.keep(&*cache);
    let report = outer.exit(&()).unwrap();
    drop(guard);
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), block(20), "{report}");
    assert!(report.uninspected_kept[0].contains("Mutex"), "{report}");

    // `keep_forever` on a locked value: what it holds cannot be taken out of tracking, and is
    // not called escaped either.
    let (_, report) = scope(strict("forever-locked"), || {
        let mut held = cache.lock().unwrap();
        held.push(floats(7));
        keep_forever(&*cache);
    })
    .unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), block(28), "{report}");
    assert!(report.uninspected_kept[0].contains("Mutex"), "{report}");
    cache.lock().unwrap().clear();

    // A Sequential kept alone (tch keeps its tensors private).
    let (seq, report) = scope(strict("keep-seq"), || {
        let vs = nn::VarStore::new(Device::Cpu);
        let seq = nn::seq().add(nn::linear(vs.root(), 8, 2, Default::default()));
        gpu_scope::keep(&seq);
        seq
    })
    .unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), 4 * (8 * 2 + 2));
    drop(seq);
}
