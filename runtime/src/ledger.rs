//! The ledger: every live allocation made inside a scope, and the frames (open scopes) they are
//! charged to. Plain Rust, no libtorch: `hooks.rs` feeds it from the C++ shim and
//! `lifecycle.rs` opens and closes frames.
//!
//! Accounting cannot go wrong by construction: an allocation is charged to the chain of frames
//! it was made under (the innermost open scope and the scopes enclosing it at that moment),
//! and the entry remembers that chain. Whatever happens to the entry later (freed, handed on,
//! untracked) is taken off exactly the frames it was charged to, so a frame's `live` bytes are
//! always the sum of the live entries charged to it, and its peak is exact. A frame that later
//! receives an entry it was not charged for (an async scope closing under a different
//! enclosing scope than it was polled in) is charged then, and joins the entry's chain.
//!
//! Entries live in a map keyed by address and device, sharded (CPU blocks by address region,
//! accelerator blocks by address) so that threads do not contend: an allocation takes one
//! shard's lock and the locks of its chain's frames.
use crate::device::DeviceId;
use crate::report::HeldBy as Held;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::collections::hash_map;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

mod close;
mod frame;
pub(crate) mod spare;

pub(crate) use close::{
    close, close_keeping_in, end_unchecked, entries_to_inspect, open_chain, Closed, Fate, HeldLine,
    Judge, KeepAll,
};
use frame::Owned;
pub(crate) use frame::{Frame, BLIND, BLIND_KEPT, CARRIED, GRAPH, MISSED, PARKED};

/// An allocation's identity: its base address and device.
pub(crate) type Key = (usize, DeviceId);

/// The frames open on a thread, innermost first: what an allocation made there is charged to.
pub(crate) type Chain = Arc<[Arc<Frame>]>;

/// A CPU block whose deleter the shim replaced: how libtorch would have freed it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CpuOrigin {
    /// The original context pointer, as a number (it is only handed back to the shim).
    pub ctx: usize,
    /// Never null: a block libtorch frees with no deleter gets [`crate::ffi::no_deleter`]
    /// (the pointer's niche keeps `Option<CpuOrigin>`, and so the entry, small).
    pub deleter: unsafe extern "C" fn(*mut std::ffi::c_void),
}

/// How an allocation came about: what libtorch was doing when it was made, and whether a
/// scope it outlived already found it escaped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Made {
    /// Autograd was off on the allocating thread.
    pub grad_off: bool,
    /// During a backward pass (autograd's engine running a node).
    pub backward: bool,
    /// A scope it outlived judged it escaped: so do the scopes around that one, unless they
    /// keep it (the optimizer-state rule, which goes by size, does not apply to it).
    pub escaped: bool,
}

/// One live allocation.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Every frame its bytes are charged to; `None` once no scope tracks it (it escaped, or
    /// was kept for good) while the shim still needs `cpu` to free it.
    pub chain: Option<Chain>,
    /// Which frame of `chain` owns it (judges it at close). A `u16` keeps the entry at 80
    /// bytes (96 with its key: a map's bucket); `thread::push` refuses chains longer than
    /// [`MAX_DEPTH`].
    pub owner: u16,
    /// Where its key is in its owner's list (`Owned`).
    pub slot: u32,
    /// The frame (by id, never 0) that `keep` let it outlive.
    pub kept_past: Option<NonZeroU64>,
    pub bytes: u64,
    /// What the tensor asked for, when the allocator said (0: unknown).
    pub requested: u64,
    pub made: Made,
    /// What attribution learned; `None` when it is off (boxed, so that the entry stays small
    /// and moves cheaply in and out of the ledger's maps).
    pub about: Option<Box<About>>,
    pub cpu: Option<CpuOrigin>,
    /// For a CPU block, the slot of `CPU_BYTES` its bytes are counted in (its allocating
    /// thread's).
    pub counter: u8,
}

// A map's bucket (key and entry) in one and a half cache lines: a large frame's close walks them.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<(Key, Entry)>() == 96);

/// Where an allocation came from, when attribution or backtraces are on.
#[derive(Clone, Debug, Default)]
pub(crate) struct About {
    pub op: Option<&'static str>,
    /// Shape and dtype of the tensor made in it (inline up to 4 dims).
    pub tensor: Option<(SmallVec<[i64; 4]>, &'static str)>,
    pub backtrace: Option<backtrace::Backtrace>,
}

impl Entry {
    /// Whether it is charged to `frame` (it was made, or handed on, while `frame` was open).
    pub(crate) fn charged_to_frame(&self, frame: &Frame) -> bool {
        self.chain
            .iter()
            .flat_map(|c| c.iter())
            .any(|f| std::ptr::eq(Arc::as_ptr(f), frame))
    }

    /// What the report of an escape needs, for one that stays tracked.
    #[cold]
    fn copy(&self) -> Entry {
        Entry {
            chain: None,
            kept_past: None,
            about: self.about.clone(),
            cpu: None,
            ..*self
        }
    }

    /// The frame that owns it.
    fn frame(&self) -> Option<&Arc<Frame>> {
        self.chain.as_ref().map(|c| &c[self.owner as usize])
    }

    /// What was asked for; where the allocator does not say, the block.
    pub(crate) fn asked(&self) -> u64 {
        if self.requested == 0 {
            self.bytes
        } else {
            self.requested
        }
    }
}

/// Byte counters of a frame, for all devices together or for one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Blocks allocated (for a close's kept bytes: blocks kept).
    pub allocations: u64,
    pub allocated: u64,
    pub requested: u64,
    pub freed: u64,
    /// Blocks freed.
    pub frees: u64,
    pub live: u64,
    pub peak: u64,
    /// Bytes given to `keep_forever` while the frame was open: out of `live`, but alive as far
    /// as the frame can tell, so in its peak.
    pub forever: u64,
}

impl Counters {
    fn alloc(&mut self, bytes: u64, requested: u64) {
        self.allocations += 1;
        self.allocated += bytes;
        self.requested += requested;
        self.gain(bytes);
    }

    /// Live bytes that arrive (a new block, or one handed back by an inner frame).
    fn gain(&mut self, bytes: u64) {
        self.live += bytes;
        self.peak = self.peak.max(self.live + self.forever);
    }

    /// Live bytes that leave. An entry subtracts what it added; saturating only so that a bug
    /// could never panic inside a callback from C++.
    fn lose(&mut self, bytes: u64) {
        debug_assert!(self.live >= bytes, "frame accounting underflow");
        self.live = self.live.saturating_sub(bytes);
    }
}

/// Counters for all devices and for each device.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    pub total: Counters,
    pub devices: SmallVec<[(DeviceId, Counters); 1]>,
}

impl Stats {
    #[inline]
    pub(crate) fn device(&mut self, device: DeviceId) -> &mut Counters {
        let at = match self.devices.iter().position(|(d, _)| *d == device) {
            Some(at) => at,
            None => {
                let at = self.devices.partition_point(|(d, _)| *d < device);
                self.devices.insert(at, (device, Counters::default()));
                at
            }
        };
        &mut self.devices[at].1
    }

    #[inline(always)]
    fn both(&mut self, device: DeviceId, f: impl Fn(&mut Counters)) {
        f(&mut self.total);
        f(self.device(device));
    }
}

pub(crate) const SHARDS: usize = 64;

/// Each shard in cache lines of its own: threads locking neighbouring shards do not fight.
type Shard = CachePadded<Mutex<FxHashMap<Key, Entry>>>;

static REGISTRY: [Shard; SHARDS] = [const {
    CachePadded(Mutex::new(FxHashMap::with_hasher(
        rustc_hash::FxBuildHasher,
    )))
}; SHARDS];
/// Entries on accelerators: frees reported for other blocks return at once while it is 0.
static ACCELERATOR_ENTRIES: AtomicUsize = AtomicUsize::new(0);
/// Open frames, counted per thread in cache lines of their own (threads opening and closing
/// scopes at a high rate would fight over one counter); summed by `counts`.
static OPEN_FRAMES: [CachePadded<AtomicIsize>; 16] =
    [const { CachePadded(AtomicIsize::new(0)) }; 16];

#[derive(Default)]
#[repr(align(128))]
struct CachePadded<T>(T);

thread_local! {
    /// This thread's number, for its slot in the per-thread counters.
    static THREAD_IDS: u64 = {
        static NEXT_THREAD: AtomicU64 = AtomicU64::new(0);
        NEXT_THREAD.fetch_add(1, Ordering::Relaxed)
    };
}

/// This thread's slot in the per-thread counters.
fn thread_slot() -> usize {
    THREAD_IDS.try_with(|t| *t as usize % 16).unwrap_or(0)
}

fn open_frames(delta: isize) {
    OPEN_FRAMES[thread_slot()]
        .0
        .fetch_add(delta, Ordering::Relaxed);
}

/// Bytes of the CPU blocks whose deleter the shim replaced that are alive now, and their
/// peak (the CPU's `memory_stats`), counted per allocating thread (by its number modulo 16,
/// in cache lines of their own: threads allocating at a high rate would fight over one
/// counter) and summed when asked. A block's free takes its bytes off its allocating
/// thread's slot.
static CPU_BYTES: [CachePadded<CpuBytes>; 16] = [const {
    CachePadded(CpuBytes {
        live: AtomicU64::new(0),
        peak: AtomicU64::new(0),
    })
}; 16];

struct CpuBytes {
    live: AtomicU64,
    /// The highest `live` of this slot since the last reset.
    peak: AtomicU64,
}

/// A CPU block's shard is that of the 64 KiB region that holds it: a thread's CPU blocks mostly
/// come from its own allocator arena, so two threads seldom share a shard and the cache lines
/// behind it. An accelerator's caching allocator serves every thread from the same segments, so
/// its blocks are spread by address.
#[inline]
fn shard(key: Key) -> MutexGuard<'static, FxHashMap<Key, Entry>> {
    lock_shard(shard_of(key))
}

#[inline]
pub(crate) fn shard_of(key: Key) -> usize {
    let unit = if key.1.is_cpu() { 16 } else { 6 };
    let mixed = ((key.0 >> unit) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 58) as usize % SHARDS
}

#[inline]
fn lock_shard(at: usize) -> MutexGuard<'static, FxHashMap<Key, Entry>> {
    REGISTRY[at].0.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps count of accelerator entries (CPU blocks are counted in bytes by `CPU_BYTES`).
#[inline]
fn counted(key: Key, delta: isize) {
    if key.1.is_cpu() {
        return;
    }
    if delta > 0 {
        ACCELERATOR_ENTRIES.fetch_add(1, Ordering::Relaxed);
    } else {
        ACCELERATOR_ENTRIES.fetch_sub(1, Ordering::Relaxed);
    }
}

#[inline]
fn remove(key: Key) -> Option<Entry> {
    let mut map = shard(key);
    let old = map.remove(&key);
    if old.is_some() {
        counted(key, -1);
        tidy(&mut map);
    }
    old
}

/// A shard's table that has become mostly empty (after a burst of live blocks) gives back its
/// memory: gpu-scope's host memory follows the blocks alive now, not the most ever alive.
#[inline]
fn tidy(map: &mut FxHashMap<Key, Entry>) {
    if map.capacity() > 512 && map.len() < map.capacity() / 8 {
        shrink(map);
    }
}

#[cold]
#[inline(never)]
fn shrink(map: &mut FxHashMap<Key, Entry>) {
    map.shrink_to(map.len() * 2);
}

/// Charges a new allocation to the open frames of `chain`, owned by the innermost of them (a
/// frame that has closed, such as that of a handle used after its scope ended, charges nothing
/// and hides nothing from the frames enclosing it). Returns false (nothing recorded) if none
/// is open.
#[inline(always)]
pub(crate) fn record_alloc(chain: Chain, key: Key, mut entry: Entry) -> bool {
    let (bytes, requested) = (entry.bytes, entry.asked());
    // Its shard stays locked until the entry is in it: a close of its frame on another thread,
    // which takes the frame's list and then looks each key up, waits for it and finds it.
    let mut map = shard(key);
    let mut owner = None;
    for (at, frame) in chain.iter().enumerate() {
        let mut state = frame.lock();
        if !state.open {
            if at == 0 && state.closed_into.is_some() {
                drop((state, map));
                return record_for_successor(&chain, key, entry);
            }
            continue;
        }
        if owner.is_none() {
            owner = Some(at);
            entry.slot = state.keys.add(key);
            state.saw_backward |= entry.made.backward;
        }
        state.stats.both(key.1, |c| c.alloc(bytes, requested));
    }
    let Some(owner) = owner else {
        return false;
    };
    entry.chain = Some(chain);
    entry.owner = index(owner);
    if entry.cpu.is_some() {
        entry.counter = thread_slot() as u8;
        let counter = &CPU_BYTES[entry.counter as usize].0;
        let live = counter.live.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if live > counter.peak.load(Ordering::Relaxed) {
            counter.peak.fetch_max(live, Ordering::Relaxed);
        }
    }
    counted(key, 1);
    let stale = map.insert(key, entry);
    drop(map);
    // A stale entry at this address means its free was never reported (an accelerator block
    // freed on a thread gpu-scope could not see): it is gone now.
    if let Some(stale) = stale {
        counted(key, -1);
        release(key, stale, true);
    }
    true
}

/// An allocation made through a handle whose scope ended meanwhile (work already running
/// when it ended): charged to the open chain that scope closed into, then the frames below it
/// that are open (once).
#[cold]
#[inline(never)]
fn record_for_successor(chain: &Chain, key: Key, entry: Entry) -> bool {
    let mut frames: Vec<Arc<Frame>> = open_chain(chain).map_or_else(Vec::new, |c| c.to_vec());
    for frame in &chain[1..] {
        if frame.is_open() && !frames.iter().any(|f| Arc::ptr_eq(f, frame)) {
            frames.push(frame.clone());
        }
    }
    record_alloc(Arc::from(frames), key, entry)
}

/// Takes an entry's bytes off the frames it is charged to, as freed or (escaped, untracked)
/// as merely gone from view, and the entry off its owner; `except` is a frame being closed,
/// whose counters are final.
fn discharge(key: Key, entry: &Entry, freed: bool, except: Option<&Arc<Frame>>) {
    let owner = entry.frame();
    // A gradient freed after its backward pass (by `zero_grad`): its owner remembers its size.
    let gradient = freed && entry.made.backward && !crate::ffi::in_backward();
    // A closing frame has given up its keys already.
    let mut owner_seen = owner.is_some_and(|o| except.is_some_and(|e| Arc::ptr_eq(o, e)));
    for frame in entry.chain.iter().flat_map(|c| c.iter()) {
        if except.is_some_and(|e| Arc::ptr_eq(e, frame)) {
            continue;
        }
        let mut state = frame.lock();
        if owner.is_some_and(|o| Arc::ptr_eq(o, frame)) {
            state.keys.remove(entry.slot, key);
            owner_seen = true;
            if gradient && state.open {
                state.gradients.insert((key.1, entry.asked()));
            }
        }
        if state.open {
            state.stats.both(key.1, |c| {
                c.lose(entry.bytes);
                if freed {
                    c.freed += entry.bytes;
                    c.frees += 1;
                }
            });
        }
    }
    if let (Some(owner), false) = (owner, owner_seen) {
        owner.lock().keys.remove(entry.slot, key);
    }
}

/// An entry is gone: freed, or (`freed` false) no longer tracked.
#[inline]
fn release(key: Key, entry: Entry, freed: bool) {
    if freed && entry.cpu.is_some() {
        let counter = &CPU_BYTES[entry.counter as usize].0;
        counter.live.fetch_sub(entry.bytes, Ordering::Relaxed);
    }
    discharge(key, &entry, freed, None);
}

/// A block was freed. Returns how libtorch frees it if the shim replaced its CPU deleter.
#[inline]
pub(crate) fn record_free(key: Key) -> Option<CpuOrigin> {
    // A CPU block freed through a deleter the shim replaced was tracked (raw frees ask
    // `cpu_tracked` first).
    if !key.1.is_cpu() && ACCELERATOR_ENTRIES.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let entry = remove(key)?;
    let cpu = entry.cpu;
    release(key, entry, true);
    cpu
}

/// Attaches what an operator returned (shape, dtype) to the entry at `key`, if it has none.
pub(crate) fn note_tensor(key: Key, shape: &[i64], dtype: &'static str) {
    if let Some(entry) = shard(key).get_mut(&key) {
        let about = entry.about.get_or_insert_with(Box::default);
        if about.tensor.is_none() {
            about.tensor = Some((SmallVec::from_slice(shape), dtype));
        }
    }
}

/// An occupied place in a shard of the ledger.
type Slot<'a> = hash_map::OccupiedEntry<'a, Key, Entry>;

/// Takes the entry in `slot` out of tracking and returns what it knew. A CPU block whose deleter
/// the shim replaced stays, bare, in the map: the shim needs it to free the block the way
/// libtorch would.
fn untrack_entry(mut slot: Slot<'_>) -> Entry {
    if slot.get().cpu.is_none() {
        counted(*slot.key(), -1);
        return slot.remove();
    }
    untrack_in_place(*slot.key(), slot.get_mut()).0
}

/// [`untrack_entry`] on an entry in the map: what it knew, and whether the caller must take
/// it out of the map (it is not a CPU block the shim needs).
fn untrack_in_place(key: Key, entry: &mut Entry) -> (Entry, bool) {
    let gone = entry.cpu.is_none();
    if gone {
        counted(key, -1);
    }
    let known = Entry {
        owner: entry.owner,
        slot: entry.slot,
        chain: entry.chain.take(),
        kept_past: entry.kept_past.take(),
        bytes: entry.bytes,
        requested: entry.requested,
        made: entry.made,
        about: entry.about.take(),
        cpu: None,
        counter: entry.counter,
    };
    (known, gone)
}

/// Drops storages from every scope's tracking for good (`keep_forever`).
pub(crate) fn untrack(keys: impl IntoIterator<Item = Key>) {
    for key in keys {
        let entry = match shard(key).entry(key) {
            hash_map::Entry::Occupied(slot) => untrack_entry(slot),
            hash_map::Entry::Vacant(_) => continue,
        };
        // Each open scope it was charged to shows it on a line of its own.
        for frame in entry.chain.iter().flat_map(|c| c.iter()) {
            let mut state = frame.lock();
            if state.open {
                state.stats.both(key.1, |c| c.forever += entry.bytes);
                match state.forever.iter_mut().find(|(d, ..)| *d == key.1) {
                    Some((_, bytes, count)) => {
                        (*bytes, *count) = (*bytes + entry.bytes, *count + 1)
                    }
                    None => state.forever.push((key.1, entry.bytes, 1)),
                }
            }
        }
        release(key, entry, false);
    }
}

/// Reads one entry.
pub(crate) fn with_entry<R>(key: Key, f: impl FnOnce(&Entry) -> R) -> Option<R> {
    shard(key).get(&key).map(f)
}

/// The most frames a chain may have (scopes nested on a thread, with those carried in). Each
/// level holds its chain, so nesting costs the square of its depth: 67 MB at this one.
pub(crate) const MAX_DEPTH: usize = 4096;

/// A frame's place in a chain (under [`MAX_DEPTH`]: `thread::push` sees to it).
fn index(at: usize) -> u16 {
    u16::try_from(at).expect("chains are shorter than MAX_DEPTH")
}

/// Tracked entries, open frames, CPU blocks with a replaced deleter.
pub(crate) fn counts() -> (usize, usize, usize) {
    let (mut entries, mut cpu) = (0, 0);
    for shard in REGISTRY.iter() {
        let map = shard.0.lock().unwrap_or_else(|e| e.into_inner());
        entries += map.len();
        cpu += map.values().filter(|e| e.cpu.is_some()).count();
    }
    let open: isize = OPEN_FRAMES
        .iter()
        .map(|c| c.0.load(Ordering::Relaxed))
        .sum();
    (entries, open.max(0) as usize, cpu)
}

/// Bytes of CPU blocks made inside scopes that are still alive, and their peak.
pub(crate) fn cpu_scoped_bytes() -> (u64, u64) {
    CPU_BYTES.iter().fold((0, 0), |(live, peak), c| {
        let this = c.0.live.load(Ordering::Relaxed);
        (
            live + this,
            peak + c.0.peak.load(Ordering::Relaxed).max(this),
        )
    })
}

/// Whether some CPU block whose deleter the shim replaced is alive (its bytes counted).
pub(crate) fn cpu_tracked() -> bool {
    CPU_BYTES
        .iter()
        .any(|c| c.0.live.load(Ordering::Relaxed) != 0)
}

pub(crate) fn reset_cpu_peak() {
    for c in &CPU_BYTES {
        c.0.peak
            .store(c.0.live.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
