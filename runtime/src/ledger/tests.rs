//! The ledger on its own, driven with made-up accelerator blocks (no libtorch involved).
use super::close::{charged_to, BY_SHARD_FROM};
use super::*;
use crate::tensors::StorageSet;
use rustc_hash::FxHashSet;

const DEVICE: DeviceId = DeviceId::from_raw(1, 0);

fn entry(bytes: u64) -> Entry {
    Entry {
        owner: 0,
        slot: 0,
        chain: None,
        kept_past: None,
        bytes,
        requested: 0,
        made: Made::default(),
        about: None,
        cpu: None,
        counter: 0,
    }
}

fn chain(frames: &[&Arc<Frame>]) -> Chain {
    frames.iter().map(|f| (*f).clone()).collect()
}

/// Addresses unique to each test (tests share the process-wide registry).
fn key(test: usize, n: usize) -> Key {
    (0x7000_0000 + test * 0x10_0000 + n * 0x1000, DEVICE)
}

struct Escapes;

impl Judge for Escapes {
    fn fate(&self, _: Key, _: &Entry, marked: bool) -> Fate {
        if marked {
            Fate::Kept
        } else {
            Fate::Escaped
        }
    }
}

/// Regression (found by tests/model_check.rs): a `keep` mark outlived the block it was for,
/// so a new block at the same address counted as kept instead of escaped.
#[test]
fn a_keep_mark_dies_with_its_block() {
    let frame = Frame::open();
    let c = chain(&[&frame]);
    assert!(record_alloc(c.clone(), key(0, 0), entry(64)));
    let mut kept = StorageSet::new();
    kept.keys.insert(key(0, 0));
    frame.mark(&kept, &[], &[]);
    record_free(key(0, 0));
    assert!(record_alloc(c.clone(), key(0, 0), entry(64)));
    let closed = close(&frame, None, &Escapes);
    assert_eq!(closed.escaped.len(), 1, "the second block was never kept");
    assert_eq!(closed.kept.total.live, 0);
}

/// The enclosing scope's peak is exact when an inner scope frees one of its blocks first.
#[test]
fn peaks_are_exact_across_nesting() {
    let outer = Frame::open();
    let (o, k) = (chain(&[&outer]), |n| key(1, n));
    record_alloc(o.clone(), k(0), entry(4));
    record_alloc(o.clone(), k(1), entry(4));
    let inner = Frame::open();
    let i = chain(&[&inner, &outer]);
    record_free(k(0));
    record_alloc(i.clone(), k(2), entry(4));
    record_alloc(i.clone(), k(3), entry(4));
    let closed_inner = close(&inner, Some(&o), &KeepAll);
    assert_eq!(closed_inner.stats.total.peak, 8);
    let closed = close(&outer, None, &KeepAll);
    assert_eq!(
        closed.stats.total.peak, 12,
        "4 of its own + 8 of the inner scope"
    );
    assert_eq!(closed.stats.total.allocated, 16);
    assert_eq!(closed.stats.total.freed, 4);
    assert_eq!(closed.kept.total.live, 12);
    for n in 1..4 {
        record_free(k(n));
    }
}

/// An async scope allocates while polled inside `x`, and closes inside `y`: `x` loses the
/// bytes when the block is freed (it was charged), `y` gains them when it takes the block
/// over; nothing underflows.
#[test]
fn a_suspended_scope_closing_elsewhere_cannot_underflow() {
    let (x, y, task) = (Frame::open(), Frame::open(), Frame::open());
    let k = |n| key(2, n);
    record_alloc(chain(&[&task, &x]), k(0), entry(100));
    record_alloc(chain(&[&task, &y]), k(1), entry(10));
    close(&task, Some(&chain(&[&y])), &KeepAll);
    assert_eq!(x.lock().stats.total.live, 100);
    assert_eq!(
        y.lock().stats.total.live,
        110,
        "the block made under x joined y"
    );
    record_free(k(0));
    assert_eq!(x.lock().stats.total.live, 0);
    assert_eq!(y.lock().stats.total.live, 10);
    let closed_x = close(&x, None, &KeepAll);
    assert_eq!(closed_x.stats.total.freed, 100);
    record_free(k(1));
    let closed_y = close(&y, None, &KeepAll);
    assert_eq!(
        (closed_y.stats.total.live, closed_y.stats.total.freed),
        (0, 110)
    );
}

/// An escape is reported and handed on: the enclosing frame, which was charged with it, owns
/// it and judges it again; the outermost frame lets it leave tracking.
#[test]
fn an_escape_moves_on_to_the_enclosing_frame() {
    let (outer, inner) = (Frame::open(), Frame::open());
    record_alloc(chain(&[&inner, &outer]), key(3, 0), entry(32));
    let closed = close(&inner, Some(&chain(&[&outer])), &Escapes);
    assert_eq!(closed.escaped.len(), 1);
    assert_eq!(outer.lock().stats.total.live, 32);
    let closed = close(&outer, None, &Escapes);
    assert_eq!(closed.escaped.len(), 1, "escaped from the outer frame too");
    assert_eq!(closed.escaped[0].1.bytes, 32);
    assert!(record_free(key(3, 0)).is_none(), "no longer tracked");
}

/// A CPU block that escapes stays known to the ledger, so that the shim can still free it
/// the way libtorch would.
#[test]
fn an_escaped_cpu_block_keeps_its_original_deleter() {
    let frame = Frame::open();
    let cpu_key = (0x7fff_0000, DeviceId::CPU);
    let mut e = entry(16);
    e.cpu = Some(CpuOrigin {
        ctx: 42,
        deleter: crate::ffi::no_deleter,
    });
    assert!(record_alloc(chain(&[&frame]), cpu_key, e));
    let closed = close(&frame, None, &Escapes);
    assert_eq!(closed.escaped.len(), 1);
    let origin = record_free(cpu_key).expect("the shim gets its deleter back");
    assert_eq!(origin.ctx, 42);
}

/// Allocations charged to a frame that has closed are refused.
#[test]
fn a_closed_frame_takes_no_allocation() {
    let frame = Frame::open();
    close(&frame, None, &KeepAll);
    assert!(!record_alloc(chain(&[&frame]), key(5, 0), entry(8)));
}

/// A set given back (a frame's, or the storages an exit collected) comes back empty: a frame
/// judges only what it was charged with.
#[test]
fn a_spare_key_set_is_taken_empty() {
    let mut set = rustc_hash::FxHashSet::default();
    set.insert(key(7, 0));
    spare::give(set);
    let mut taken = rustc_hash::FxHashSet::default();
    spare::refill(&mut taken);
    assert!(taken.is_empty());
    assert!(taken.capacity() > 0, "the set was reused");
}

/// A frame's list of owned keys reuses the slots of freed blocks: a scope that allocates and
/// frees in a loop keeps a list as long as the most blocks it held at once, and judges each
/// live block once at its close (also a block at an address freed and reused meanwhile).
#[test]
fn a_frame_reuses_the_slots_of_freed_blocks() {
    let frame = Frame::open();
    let c = chain(&[&frame]);
    let k = |n| key(8, n);
    for round in 0..1000 {
        for n in 0..3 {
            assert!(record_alloc(c.clone(), k(n), entry(8)));
        }
        // Freed in an order that changes each round.
        for n in (0..3).filter(|n| (n + round) % 3 != 0) {
            record_free(k(n));
        }
        record_free(k((3 - round % 3) % 3));
    }
    assert!(frame.lock().keys.slots() <= 3, "slots were reused");
    record_alloc(c.clone(), k(0), entry(8));
    record_alloc(c.clone(), k(1), entry(8));
    record_free(k(0));
    record_alloc(c.clone(), k(0), entry(16));
    let closed = close(&frame, None, &Escapes);
    let mut escaped: Vec<(Key, u64)> = closed.escaped.iter().map(|(k, e)| (*k, e.bytes)).collect();
    escaped.sort();
    assert_eq!(escaped, [(k(0), 16), (k(1), 8)], "each live block once");
    assert_eq!(closed.stats.total.live, 24);
}

/// A block handed on to the enclosing frame takes a slot there, and is removed from it when
/// freed: the enclosing frame's close judges only what is still alive.
#[test]
fn a_block_handed_on_is_owned_by_the_enclosing_frame() {
    let (outer, inner) = (Frame::open(), Frame::open());
    let o = chain(&[&outer]);
    record_alloc(o.clone(), key(9, 0), entry(4));
    record_alloc(chain(&[&inner, &outer]), key(9, 1), entry(4));
    record_alloc(chain(&[&inner, &outer]), key(9, 2), entry(4));
    close(&inner, Some(&o), &KeepAll);
    assert_eq!(outer.lock().keys.len(), 3);
    record_free(key(9, 1));
    assert_eq!(outer.lock().keys.len(), 2);
    let closed = close(&outer, None, &Escapes);
    let mut escaped: Vec<Key> = closed.escaped.iter().map(|(k, _)| *k).collect();
    escaped.sort();
    assert_eq!(escaped, [key(9, 0), key(9, 2)]);
}

/// Block `n` of a large frame's test, at `base` (far from the other tests' addresses).
fn big(base: usize, n: usize) -> Key {
    (base + n * 0x200, DEVICE)
}

/// One large frame's test at a time: how a shard is walked depends on what else is in it.
fn one_large() -> MutexGuard<'static, ()> {
    static LARGE: Mutex<()> = Mutex::new(());
    LARGE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A frame with `n` live blocks of 8 bytes, `big(base, 0..n)`.
fn large_frame(base: usize, n: usize) -> Arc<Frame> {
    let frame = Frame::open();
    let c = chain(&[&frame]);
    for i in 0..n {
        assert!(record_alloc(c.clone(), big(base, i), entry(8)));
    }
    frame
}

/// No block `big(base, 0..n)` is tracked any more.
fn assert_left_tracking(base: usize, n: usize) {
    for i in 0..n {
        assert!(
            with_entry(big(base, i), |_| ()).is_none(),
            "block {i} left tracking"
        );
    }
}

/// A frame with more live blocks than [`BY_SHARD_FROM`], most of its shards' entries, is
/// settled shard by shard, walking the shards' tables: it judges exactly the blocks alive in
/// it, each once, and lets every block leave tracking.
#[test]
fn a_large_frame_is_settled_as_a_small_one_is() {
    let _one = one_large();
    let base = 0x1_0000_0000;
    let k = |n| big(base, n);
    let n = 2 * BY_SHARD_FROM;
    let frame = large_frame(base, n);
    let c = chain(&[&frame]);
    // Freed blocks leave slots that later ones take: the list's order is not the keys'.
    for i in (0..n).step_by(3) {
        record_free(k(i));
    }
    for i in n..n + 100 {
        record_alloc(c.clone(), k(i), entry(16));
    }
    let mut kept = StorageSet::new();
    for i in (1..n).step_by(3) {
        kept.keys.insert(k(i));
    }
    frame.mark(&kept, &[], &[]);
    let order: Vec<Key> = frame.lock().keys.iter().map(|(_, key)| key).collect();
    assert!(order.len() >= BY_SHARD_FROM);
    let closed = close(&frame, None, &Escapes);
    let mut escaped: Vec<Key> = closed.escaped.iter().map(|(key, _)| *key).collect();
    let mut expected: Vec<Key> = order
        .iter()
        .copied()
        .filter(|key| !kept.keys.contains(key))
        .collect();
    escaped.sort();
    expected.sort();
    assert_eq!(escaped.len(), n / 3 + 100);
    assert!(escaped == expected, "each unkept block once");
    let kept_blocks = (1..n).step_by(3).count() as u64;
    assert_eq!(closed.kept.total.allocations, kept_blocks);
    assert_eq!(closed.kept.total.live, 8 * kept_blocks);
    assert_left_tracking(base, n + 100);
}

/// A large inner frame whose blocks share their shards with more of the enclosing frame's
/// (so that most shards are looked up key by key) hands every block on: the enclosing frame
/// owns and judges them all.
#[test]
fn a_large_frame_among_more_blocks_hands_every_one_on() {
    let _one = one_large();
    let (outer, inner) = (Frame::open(), Frame::open());
    let o = chain(&[&outer]);
    let i = chain(&[&inner, &outer]);
    let k = |n| big(0x2_0000_0000, n);
    let n = BY_SHARD_FROM + 100;
    for at in 0..5 * n {
        let c = if at % 5 == 0 { &i } else { &o };
        assert!(record_alloc(c.clone(), k(at), entry(4)));
    }
    let closed = close(&inner, Some(&o), &Escapes);
    let mut escaped: Vec<Key> = closed.escaped.iter().map(|(key, _)| *key).collect();
    escaped.sort();
    let made: Vec<Key> = (0..5 * n).step_by(5).map(k).collect();
    assert!(escaped == made, "each inner block once");
    assert_eq!(outer.lock().keys.len(), 5 * n);
    assert_eq!(outer.lock().stats.total.live, 4 * 5 * n as u64);
    let closed = close(&outer, None, &Escapes);
    assert_eq!(
        closed.escaped.len(),
        5 * n,
        "escaped from the outer frame too"
    );
    assert!(record_free(k(0)).is_none(), "no longer tracked");
}

/// Blocks of a large closing frame freed on another thread meanwhile: no block is reported
/// twice, every block left alive is, and none stays tracked.
#[test]
fn a_large_frame_closing_while_its_blocks_are_freed_elsewhere() {
    let _one = one_large();
    let base = 0x3_0000_0000;
    let k = move |n| big(base, n);
    let n = 4 * BY_SHARD_FROM;
    let frame = large_frame(base, n);
    let freeing = std::thread::spawn(move || {
        for i in (0..n).step_by(2) {
            record_free(k(i));
        }
    });
    let closed = close(&frame, None, &Escapes);
    freeing.join().unwrap();
    let escaped: FxHashSet<Key> = closed.escaped.iter().map(|(key, _)| *key).collect();
    assert_eq!(
        escaped.len(),
        closed.escaped.len(),
        "each block reported once"
    );
    assert!(
        (1..n).step_by(2).all(|i| escaped.contains(&k(i))),
        "every unfreed block"
    );
    // A block freed before the walk reached it is not reported; one freed after was alive
    // when judged.
    assert!(closed.stats.total.freed + 8 * escaped.len() as u64 <= 8 * n as u64);
    assert_left_tracking(base, n);
}

/// `charged_to` answers the same whether the chain follows the entry's owner (one pass), is
/// short, or is long and in another order (a set).
#[test]
fn charged_to_finds_every_frame_of_a_chain_in_any_order() {
    let frames: Vec<Arc<Frame>> = (0..12).map(|_| Frame::open()).collect();
    let all: Vec<&Arc<Frame>> = frames.iter().collect();
    let mut e = entry(8);
    e.chain = Some(chain(&all));
    e.owner = 1;
    let of = |range: std::ops::Range<usize>, reversed: bool| -> Chain {
        let mut picked: Vec<&Arc<Frame>> = frames[range].iter().collect();
        if reversed {
            picked.reverse();
        }
        chain(&picked)
    };
    assert!(charged_to(&e, &of(2..12, false)), "what follows the owner");
    assert!(charged_to(&e, &of(2..6, false)), "a part of it");
    assert!(charged_to(&e, &of(0..5, true)), "short, another order");
    assert!(charged_to(&e, &of(0..12, true)), "long, another order");
    let stranger = Frame::open();
    for long in [false, true] {
        let mut with: Vec<&Arc<Frame>> = frames[..if long { 11 } else { 3 }].iter().collect();
        with.insert(1, &stranger);
        assert!(
            !charged_to(&e, &chain(&with)),
            "a frame it is not charged to"
        );
    }
    for f in frames.iter().chain([&stranger]) {
        close(f, None, &KeepAll);
    }
}

/// After a burst of live blocks, freed, the shards' tables give their memory back (host
/// memory in step with the blocks alive now, not the most ever alive).
#[test]
fn the_ledger_gives_memory_back_after_a_burst() {
    let _one = one_large();
    let capacity = || -> usize { (0..SHARDS).map(|at| lock_shard(at).capacity()).sum() };
    let (base, n) = (0x5800_0000_0000, 100_000);
    let frame = large_frame(base, n);
    let grown = capacity();
    assert!(grown >= n, "{grown}");
    for i in 0..n {
        assert!(record_free(big(base, i)).is_none());
    }
    let shrunk = capacity();
    assert!(shrunk <= SHARDS * 512, "{grown} -> {shrunk}");
    close(&frame, None, &KeepAll);
}

/// Frame ids are unique across threads, each taking them from the process-wide counter in
/// blocks (here more than one block each), and never 0.
#[test]
fn frame_ids_are_unique_across_threads() {
    let threads: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(|| (0..70_000).map(|_| frame::next_frame_id()).collect()))
        .collect();
    let ids: Vec<Vec<u64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let all: FxHashSet<u64> = ids.iter().flatten().copied().collect();
    assert_eq!(all.len(), 3 * 70_000);
    assert!(!all.contains(&0));
}

/// Where a chain's innermost scopes closed into nothing (a scope carried in with its handle
/// that ended), what is left goes on down the chain: to the thread's own open scope.
#[test]
fn open_chain_follows_closes_then_the_rest_of_the_chain() {
    let (carried, own) = (Frame::open(), Frame::open());
    close(&carried, None, &KeepAll);
    let found = open_chain(&chain(&[&carried, &own])).unwrap();
    assert!(found.len() == 1 && Arc::ptr_eq(&found[0], &own));
    // Closed into a scope still open: that one, not the rest of the chain.
    let (inner, around) = (Frame::open(), Frame::open());
    close(&inner, Some(&chain(&[&around])), &KeepAll);
    let found = open_chain(&chain(&[&inner, &own])).unwrap();
    assert!(Arc::ptr_eq(&found[0], &around));
    // Two frames closed into each other (a ring), above an open one.
    let (a, b) = (Frame::open(), Frame::open());
    close(&a, Some(&chain(&[&b])), &KeepAll);
    close(&b, Some(&chain(&[&a])), &KeepAll);
    let found = open_chain(&chain(&[&a, &b, &own])).unwrap();
    assert!(Arc::ptr_eq(&found[0], &own));
    assert!(open_chain(&chain(&[&a, &b])).is_none());
    // The ring's `Arc`s, given back.
    a.lock().closed_into = None;
    // A deep chain, each frame closed into the rest and the last into nothing: none open.
    let deep: Vec<Arc<Frame>> = (0..2000).map(|_| Frame::open()).collect();
    for at in 0..deep.len() {
        let rest: Chain = deep[at + 1..].iter().cloned().collect();
        close(&deep[at], (!rest.is_empty()).then_some(&rest), &KeepAll);
    }
    assert!(open_chain(&deep.iter().cloned().collect()).is_none());
}
