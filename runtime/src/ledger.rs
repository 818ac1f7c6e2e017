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
use crate::tensors::StorageSet;
use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};
use std::collections::hash_map;
use std::num::NonZeroU64;
use std::panic::Location;
use std::sync::atomic::{AtomicI32, AtomicIsize, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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

/// What libtorch was doing when an allocation was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Made {
    /// Autograd was off on the allocating thread.
    pub grad_off: bool,
    /// During a backward pass (autograd's engine running a node).
    pub backward: bool,
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
        self.peak = self.peak.max(self.live);
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

    #[inline]
    fn both(&mut self, device: DeviceId, f: impl Fn(&mut Counters)) {
        f(&mut self.total);
        f(self.device(device));
    }
}

/// The keys of the entries a frame owns, each at the slot its entry remembers. A slot given
/// up is chained into a free list and reused, so the list never outgrows the most entries the
/// frame owned at once; adding and removing a key are a store, not a hash.
#[derive(Debug)]
struct Owned {
    keys: Vec<Key>,
    /// The first free slot; each free slot holds the next (`NO_SLOT` ends the list).
    free: u32,
    len: usize,
}

/// Marks a free slot (no block lives on it) and ends the free list.
const FREE: DeviceId = DeviceId::from_raw(i32::MIN, 0);
const NO_SLOT: u32 = u32::MAX;

impl Default for Owned {
    fn default() -> Owned {
        Owned {
            keys: Vec::new(),
            free: NO_SLOT,
            len: 0,
        }
    }
}

impl Owned {
    /// Adds `key`; returns its slot.
    #[inline]
    fn add(&mut self, key: Key) -> u32 {
        self.len += 1;
        if self.free == NO_SLOT {
            spare::refill(&mut self.keys);
            self.keys.push(key);
            return u32::try_from(self.keys.len() - 1).unwrap_or(NO_SLOT);
        }
        let at = self.free;
        self.free = self.keys[at as usize].0 as u32;
        self.keys[at as usize] = key;
        at
    }

    /// Removes `key` from `slot` (nothing if it is not there: the list was taken by a close).
    #[inline]
    fn remove(&mut self, slot: u32, key: Key) {
        if let Some(place) = self.keys.get_mut(slot as usize).filter(|k| **k == key) {
            *place = (self.free as usize, FREE);
            self.free = slot;
            self.len -= 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The keys with their slots.
    fn iter(&self) -> impl Iterator<Item = (u32, Key)> + '_ {
        (0u32..)
            .zip(self.keys.iter().copied())
            .filter(|(_, key)| key.1 != FREE)
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        spare::give(std::mem::take(&mut self.keys));
    }
}

/// An open scope's bookkeeping. Shared (`Arc`) by the scope, the entries charged to it and any
/// thread it is carried to.
#[derive(Debug, Default)]
pub(crate) struct Frame {
    id: u64,
    /// Where its scope was opened, for the report of an enclosing scope that ends it.
    location: Option<&'static Location<'static>>,
    state: Mutex<FrameState>,
    /// What happened while it was on some thread's stack, or was done to it (`GRAPH`,
    /// `BLIND`, `PARKED`, `BLIND_KEPT`); a closing frame passes the first two on to the
    /// enclosing one.
    flags: AtomicU8,
    /// The autograd mode of the thread it is placed on before its scope turned autograd off
    /// (`NO_GRAD`: untouched), given back by whoever ends it there.
    grad: AtomicI32,
}

const NO_GRAD: i32 = i32::MIN;

/// Autograd graph nodes were made: a graph that could hold the frame's allocations exists.
pub(crate) const GRAPH: u8 = 1;
/// A thread it ran on could not install its reporter (a libtorch profiler held the slot):
/// accelerator allocations made there meanwhile were not seen.
pub(crate) const BLIND: u8 = 2;
/// Scopes opened inside it left a thread's stack with it while still open (`park`).
pub(crate) const PARKED: u8 = 4;
/// A value given to `keep` or `keep_forever` while it was open could not be looked into
/// (`FrameState::blind_kept`).
pub(crate) const BLIND_KEPT: u8 = 8;

#[derive(Debug, Default)]
pub(crate) struct FrameState {
    pub open: bool,
    pub stats: Stats,
    /// Entries this frame owns.
    keys: Owned,
    /// Some allocation was made during a backward pass (the check then looks for gradients).
    pub saw_backward: bool,
    /// The requested sizes of the gradients it owned that outlived their backward pass (a
    /// parameter's `.grad`) and were freed since, by `zero_grad`, and those of the frames that
    /// closed into it: an optimizer's state, made beside them, has their sizes. Also the sizes
    /// of the variables of an optimizer given to `keep` (a step whose backward ran in other
    /// scopes). (The live gradients are looked at by the check.)
    pub gradients: FxHashSet<(DeviceId, u64)>,
    /// Blocks charged to it that `keep_forever` took out of tracking while it was open.
    forever: Vec<(DeviceId, u64)>,
    /// Values given to `keep` or `keep_forever` while it was open that could not be looked
    /// into: its check counts what nothing kept as not inspected, as for such a value handed
    /// back.
    blind_kept: Vec<&'static str>,
    /// The frames it was opened in, kept when its level was taken off the thread's stack by
    /// the scope below it (an async scope suspended with this one still open in it): where
    /// its live allocations go when it ends off the stack.
    pub parked_in: Option<Chain>,
    /// The frames it closed inside: where work carried on through its handle is charged.
    closed_into: Option<Chain>,
    /// Frames opened inside it that left a thread's stack with it, still open: it ends
    /// those still open when it ends.
    parked: Vec<Arc<Frame>>,
}

impl Drop for Frame {
    fn drop(&mut self) {
        // A frame nobody closed (its scope was forgotten on a thread that ended).
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if state.open {
            open_frames(-1);
        }
    }
}

impl Frame {
    /// A new open frame (the ledger's tests).
    #[cfg(test)]
    pub(crate) fn open() -> Arc<Frame> {
        Frame::open_at(None)
    }

    /// A new open frame for a scope opened at `location`: a spare one of this thread's if it
    /// has one (see [`Frame::recycle`]).
    pub(crate) fn open_at(location: Option<&'static Location<'static>>) -> Arc<Frame> {
        open_frames(1);
        let id = next_frame_id();
        let spare = SPARE_FRAMES.try_with(|s| s.borrow_mut().pop());
        if let Ok(Some(mut spare)) = spare {
            if let Some(frame) = Arc::get_mut(&mut spare) {
                frame.id = id;
                frame.location = location;
                frame
                    .state
                    .get_mut()
                    .unwrap_or_else(|e| e.into_inner())
                    .open = true;
                return spare;
            }
        }
        Arc::new(Frame {
            id,
            location,
            state: Mutex::new(FrameState {
                open: true,
                ..Default::default()
            }),
            flags: AtomicU8::new(0),
            grad: AtomicI32::new(NO_GRAD),
        })
    }

    /// Keeps `frame` for this thread's next scope if its scope has ended and `frame` is the
    /// only reference to it left (nothing charged to it is alive, no handle or thread holds
    /// it): opening a scope then allocates nothing. Called with the scope's own reference,
    /// which it clones; the spare is reset here, so it holds on to nothing.
    pub(crate) fn recycle(frame: &mut Arc<Frame>) {
        let Some(inner) = Arc::get_mut(frame) else {
            return;
        };
        let state = inner.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if state.open {
            return;
        }
        // Its close took its counters, keys and parked frames already.
        debug_assert!(state.keys.is_empty() && state.parked.is_empty());
        state.stats.total = Counters::default();
        state.stats.devices.clear();
        state.saw_backward = false;
        state.gradients.clear();
        state.blind_kept.clear();
        state.parked_in = None;
        state.closed_into = None;
        *inner.flags.get_mut() = 0;
        *inner.grad.get_mut() = NO_GRAD;
        let _ = SPARE_FRAMES.try_with(|s| {
            let mut spare = s.borrow_mut();
            if spare.len() < SPARE_FRAMES_KEPT {
                spare.push(frame.clone());
            }
        });
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, FrameState> {
        // Nothing panics while a frame is locked; never let poisoning cascade anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn location(&self) -> Option<&'static Location<'static>> {
        self.location
    }

    pub(crate) fn is_open(&self) -> bool {
        self.lock().open
    }

    /// This frame while it is open; once closed, the open frame it closed into (its live
    /// allocations went there), if any.
    pub(crate) fn open_successor(self: &Arc<Frame>) -> Option<Arc<Frame>> {
        let closed_into = {
            let state = self.lock();
            if state.open {
                return Some(self.clone());
            }
            state.closed_into.clone()?
        };
        Some(open_chain(&closed_into)?[0].clone())
    }

    /// Records that `inner`, opened inside this frame, left the thread's stack with it while
    /// still open (an async scope suspended with it, carried work that forgot it), for this
    /// frame to end it if it still is when this one ends. Once this frame has closed, the
    /// open frame it closed into takes it; with none, it ends now.
    pub(crate) fn park(self: &Arc<Frame>, inner: &Arc<Frame>) {
        if !inner.is_open() {
            return;
        }
        let mut at = self.clone();
        loop {
            // Those parked before and ended since go (a long-lived async scope parks a guard
            // at every suspension); one frame locked at a time.
            let mut parked = at.take_parked_open();
            parked.push(inner.clone());
            let mut state = at.lock();
            if state.open {
                state.parked.extend(parked);
                at.note(PARKED);
                return;
            }
            drop(state);
            match at.open_successor() {
                Some(next) => at = next,
                None => {
                    close(inner, None, &KeepAll);
                    return;
                }
            }
        }
    }

    /// The frames parked in it that are still open (the list is emptied).
    fn take_parked_open(&self) -> Vec<Arc<Frame>> {
        let parked = std::mem::take(&mut self.lock().parked);
        parked.into_iter().filter(|f| f.is_open()).collect()
    }

    /// Keeps the autograd mode its scope found on the thread it is placed on.
    pub(crate) fn set_grad(&self, previous: i32) {
        self.grad.store(previous, Ordering::Relaxed);
    }

    /// The autograd mode to give back, once.
    pub(crate) fn take_grad(&self) -> Option<i32> {
        Some(self.grad.swap(NO_GRAD, Ordering::Relaxed)).filter(|g| *g != NO_GRAD)
    }

    /// Records `flag` (`GRAPH`, `BLIND`, `PARKED`) for the frame.
    pub(crate) fn note(&self, flag: u8) {
        self.flags.fetch_or(flag, Ordering::Relaxed);
    }

    /// Whether `flag` was noted for the frame, or for one that closed into it.
    pub(crate) fn noted(&self, flag: u8) -> bool {
        self.flags.load(Ordering::Relaxed) & flag != 0
    }

    /// Lets the storages in `kept` that this frame owns, or that `inside` own (frames
    /// opened inside it, still open on this thread), outlive it (`keep`), and so the scopes
    /// in between. The mark is on the allocation, so it dies with it; one of a frame in
    /// `outside` (those this one is open in) stands, as it covers this frame too.
    pub(crate) fn mark(&self, kept: &StorageSet, inside: &[Arc<Frame>], outside: &[Arc<Frame>]) {
        if !kept.optimized.is_empty() {
            // A kept optimizer: the state its step makes here has its variables' sizes, as
            // when the scope hands it back (gradient accumulation).
            self.lock().gradients.extend(kept.optimized.iter().copied());
        }
        let owned = |f: &Arc<Frame>| f.id == self.id || inside.iter().any(|i| Arc::ptr_eq(i, f));
        for &key in kept.keys.iter() {
            if let Some(entry) = shard(key).get_mut(&key) {
                let further_out = entry
                    .kept_past
                    .is_some_and(|id| outside.iter().any(|f| f.id == id.get()));
                if entry.frame().is_some_and(owned) && !further_out {
                    entry.kept_past = NonZeroU64::new(self.id);
                }
            }
        }
        self.note_blind(kept);
        inside.iter().for_each(|f| f.note_blind(kept));
    }

    /// Remembers the values of `kept` (given to `keep` or `keep_forever`) that could not be
    /// looked into; see `FrameState::blind_kept`.
    pub(crate) fn note_blind(&self, kept: &StorageSet) {
        let charged = |key| with_entry(key, |e| e.charged_to_frame(self)).unwrap_or(false);
        let names = kept.blind_to(charged);
        if !names.is_empty() {
            let mut state = self.lock();
            for name in names {
                if !state.blind_kept.contains(&name) {
                    state.blind_kept.push(name);
                }
            }
            self.note(BLIND_KEPT);
        }
    }

    /// The values `note_blind` remembered (noted `BLIND_KEPT`).
    #[cold]
    pub(crate) fn blind_kept(&self) -> Vec<&'static str> {
        self.lock().blind_kept.clone()
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
    /// This thread's number (for its counter slot and frame ids) and its next frame number.
    static THREAD_IDS: (u64, Cell<u64>) = {
        static NEXT_THREAD: AtomicU64 = AtomicU64::new(0);
        (NEXT_THREAD.fetch_add(1, Ordering::Relaxed), Cell::new(0))
    };
}

/// This thread's slot in the per-thread counters.
fn thread_slot() -> usize {
    THREAD_IDS.try_with(|t| t.0 as usize % 16).unwrap_or(0)
}

fn open_frames(delta: isize) {
    OPEN_FRAMES[thread_slot()]
        .0
        .fetch_add(delta, Ordering::Relaxed);
}

/// Spare frames kept per thread (scopes nest a few deep).
const SPARE_FRAMES_KEPT: usize = 4;

thread_local! {
    /// Frames of ended scopes that nothing else holds, reset, for the next scopes opened here.
    static SPARE_FRAMES: RefCell<Vec<Arc<Frame>>> = const { RefCell::new(Vec::new()) };
}

/// A process-unique frame id without a shared counter: the thread's number and its own count
/// (from 1: never 0).
fn next_frame_id() -> u64 {
    THREAD_IDS.with(|(thread, next)| {
        next.set(next.get() + 1);
        (thread << 40) | next.get()
    })
}

/// Emptied key buffers (of closed frames, of the storages an exit collected), kept per thread
/// for the next ones: a scope that allocates then neither allocates its buffers nor grows them
/// again.
pub(crate) mod spare {
    use super::Key;
    use rustc_hash::FxHashSet;
    use std::cell::RefCell;
    use std::thread::LocalKey;

    /// Buffers kept per thread, and the largest capacity worth keeping (a large scope's buffer
    /// goes back to the allocator instead of staying with the thread).
    const KEPT: usize = 4;
    const MAX_CAPACITY: usize = 256;

    type Pool<T> = LocalKey<RefCell<Vec<T>>>;

    pub(crate) trait Buffer: Default + Sized + 'static {
        fn capacity(&self) -> usize;
        fn clear(&mut self);
        fn pool() -> &'static Pool<Self>;
    }

    thread_local! {
        static SETS: RefCell<Vec<FxHashSet<Key>>> = const { RefCell::new(Vec::new()) };
        static LISTS: RefCell<Vec<Vec<Key>>> = const { RefCell::new(Vec::new()) };
    }

    impl Buffer for FxHashSet<Key> {
        fn capacity(&self) -> usize {
            self.capacity()
        }
        fn clear(&mut self) {
            self.clear();
        }
        fn pool() -> &'static Pool<Self> {
            &SETS
        }
    }

    impl Buffer for Vec<Key> {
        fn capacity(&self) -> usize {
            self.capacity()
        }
        fn clear(&mut self) {
            self.clear();
        }
        fn pool() -> &'static Pool<Self> {
            &LISTS
        }
    }

    /// Gives `buffer` a spare one's memory if it has none yet (about to be filled).
    #[inline]
    pub(crate) fn refill<T: Buffer>(buffer: &mut T) {
        if buffer.capacity() == 0 {
            take(buffer);
        }
    }

    #[cold]
    fn take<T: Buffer>(buffer: &mut T) {
        if let Ok(Some(spare)) = T::pool().try_with(|s| s.borrow_mut().pop()) {
            *buffer = spare;
        }
    }

    /// Keeps `buffer` (emptied) for a later frame or exit on this thread.
    pub(crate) fn give<T: Buffer>(mut buffer: T) {
        if buffer.capacity() == 0 || buffer.capacity() > MAX_CAPACITY {
            return;
        }
        buffer.clear();
        let _ = T::pool().try_with(|s| {
            let mut spare = s.borrow_mut();
            if spare.len() < KEPT {
                spare.push(buffer);
            }
        });
    }
}

/// Bytes of the CPU blocks whose deleter the shim replaced that are alive now, and their
/// peak (the CPU's `memory_stats`), counted per allocating thread (by its number, in cache
/// lines of their own: threads allocating at a high rate would fight over one counter) and
/// summed when asked. A block's free takes its bytes off its allocating thread's slot.
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
    let old = shard(key).remove(&key);
    if old.is_some() {
        counted(key, -1);
    }
    old
}

/// Charges a new allocation to the open frames of `chain`, owned by the innermost of them (a
/// frame that has closed, such as that of a handle used after its scope ended, charges nothing
/// and hides nothing from the frames enclosing it). Returns false (nothing recorded) if none
/// is open.
#[inline]
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

/// Scopes opened inside `frame` that left a thread's stack with it and are still open end
/// first, unchecked, into it, innermost first; their places go to `ended`. (The thread they
/// ran on may be another: their autograd mode is not given back here.)
#[cold]
#[inline(never)]
fn end_parked(
    frame: &Arc<Frame>,
    enclosing: Option<&Chain>,
    ended: &mut Vec<&'static Location<'static>>,
) {
    let chain: Chain = std::iter::once(frame)
        .chain(enclosing.into_iter().flat_map(|c| c.iter()))
        .cloned()
        .collect();
    for inner in frame.take_parked_open() {
        inner.take_grad();
        let inner_closed = close(&inner, Some(&chain), &KeepAll);
        ended.extend(inner_closed.ended_inside);
        ended.extend(inner.location());
    }
}

#[cold]
fn late_parked(late: Vec<Arc<Frame>>, enclosing: Option<&Chain>) {
    for inner in late {
        inner.take_grad();
        close(&inner, enclosing, &KeepAll);
    }
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
                state.forever.push((key.1, entry.bytes));
            }
        }
        release(key, entry, false);
    }
}

/// How `close` treats an entry still alive when its frame ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Owned by what the scope hands back: moves on to the enclosing frame.
    Kept,
    /// Held on purpose: by a library (a workspace), or by tensors the scope cannot see
    /// (gradients, optimizer state, an autograd graph). Moves on to the enclosing frame, which
    /// judges it again (it may have been freed meanwhile).
    Held(Held),
    /// Owned by nothing the scope hands back. Reported, and moves on to the enclosing frame
    /// too: it escaped from that scope as well unless that one hands it back.
    Escaped,
}

/// What a closing frame needs to know about each live entry.
pub(crate) trait Judge {
    fn fate(&self, key: Key, entry: &Entry, marked: bool) -> Fate;
}

/// Judges every entry kept: an unchecked close.
pub(crate) struct KeepAll;

impl Judge for KeepAll {
    fn fate(&self, _: Key, _: &Entry, _: bool) -> Fate {
        Fate::Kept
    }
}

/// What became of a frame.
#[derive(Debug, Default)]
pub(crate) struct Closed {
    /// Where the scopes it ended first were opened (parked in it and still open).
    pub ended_inside: Vec<&'static Location<'static>>,
    pub stats: Stats,
    /// Bytes handed on as kept, for all devices and per device.
    pub kept: Stats,
    pub held: Vec<(Held, DeviceId, u64)>,
    pub escaped: Vec<(Key, Entry)>,
}

/// The live entries of a frame, when the check must look at them before closing it: some
/// were made during a backward pass or on an accelerator. Otherwise none. Also the sizes of
/// the gradients freed after their backward pass and of a kept optimizer's variables
/// (`FrameState::gradients`).
pub(crate) fn entries_to_inspect(frame: &Frame) -> (Vec<Key>, FxHashSet<(DeviceId, u64)>) {
    let state = frame.lock();
    let accelerator = state.stats.devices.iter().any(|(d, _)| !d.is_cpu());
    let keys = match state.saw_backward || accelerator {
        true => state.keys.iter().map(|(_, key)| key).collect(),
        false => Vec::new(),
    };
    (keys, state.gradients.clone())
}

/// Reads one entry.
pub(crate) fn with_entry<R>(key: Key, f: impl FnOnce(&Entry) -> R) -> Option<R> {
    shard(key).get(&key).map(f)
}

/// Ends `frame`: each live entry is judged and moves to the innermost frame of `enclosing`
/// (or leaves tracking when there is none); escaped ones are also returned. `enclosing` is
/// the chain the frame closes inside.
pub(crate) fn close(frame: &Arc<Frame>, enclosing: Option<&Chain>, judge: &dyn Judge) -> Closed {
    // Filled in place: the result is large, and moving it costs more than closing a clean frame.
    let mut closed = Closed::default();
    if frame.noted(PARKED) {
        end_parked(frame, enclosing, &mut closed.ended_inside);
    }
    let (keys, saw_backward, gradients, late) = {
        let mut state = frame.lock();
        if !state.open {
            return closed;
        }
        state.open = false;
        state.closed_into = enclosing.cloned();
        open_frames(-1);
        std::mem::swap(&mut closed.stats, &mut state.stats);
        if !state.forever.is_empty() {
            let forever = std::mem::take(&mut state.forever);
            closed.held = forever
                .into_iter()
                .map(|(device, bytes)| (Held::KeptForever, device, bytes))
                .collect();
        }
        let late = match state.parked.is_empty() {
            true => Vec::new(),
            false => std::mem::take(&mut state.parked),
        };
        let gradients = match state.gradients.is_empty() {
            true => None,
            false => Some(std::mem::take(&mut state.gradients)),
        };
        (
            std::mem::take(&mut state.keys),
            state.saw_backward,
            gradients,
            late,
        )
    };
    if !late.is_empty() {
        // Parked while `end_parked` above ran (on another thread): they end into where this
        // frame ends.
        late_parked(late, enclosing);
    }
    let flags = frame.flags.load(Ordering::Relaxed) & (GRAPH | BLIND);
    if flags != 0 {
        if let Some(enclosing) = enclosing.and_then(|c| c.first()) {
            enclosing.note(flags);
        }
    }
    if saw_backward {
        // The enclosing scope's check looks for gradients too (handed on or freed), whether
        // this frame's blocks are alive or not.
        if let Some(chain) = enclosing.and_then(open_chain) {
            let mut state = chain[0].lock();
            state.saw_backward = true;
            state.gradients.extend(gradients.into_iter().flatten());
        }
    }
    if keys.is_empty() {
        // Nothing alive (a clean scope whose blocks were all freed): nothing to hand on.
        return closed;
    }
    let open = enclosing.and_then(open_chain);
    let mut closing = Closing {
        frame,
        inside: enclosing,
        enclosing: open.as_ref(),
        judge,
        closed: &mut closed,
        charged_later: Vec::new(),
    };
    if keys.len < BY_SHARD_FROM {
        for (at, key) in keys.iter() {
            closing.look_up(&mut shard(key), at, key);
        }
    } else {
        closing.by_shard(&keys);
    }
    let charged_later = std::mem::take(&mut closing.charged_later);
    let enclosing = open.as_ref();
    drop(keys);
    if let Some(chain) = enclosing {
        for key in charged_later {
            let mut map = shard(key);
            let hash_map::Entry::Occupied(mut slot) = map.entry(key) else {
                continue;
            };
            let entry = slot.get_mut();
            // Freed, and its address reused by another frame's block, meanwhile.
            if entry.frame().is_none_or(|f| !Arc::ptr_eq(f, frame)) {
                continue;
            }
            if !hand_on(key, entry, chain) {
                // Every scope it could go to has ended: it leaves tracking.
                let entry = untrack_entry(slot);
                drop(map);
                discharge(key, &entry, false, Some(frame));
            }
        }
    }
    closed
}

/// From how many live entries a closing frame is settled shard by shard (see
/// [`Closing::by_shard`]).
const BY_SHARD_FROM: usize = 4096;

/// A closing frame's walk over its live entries.
struct Closing<'a> {
    frame: &'a Arc<Frame>,
    /// The chain it closes inside, as given: `keep`'s marks of these frames let an entry
    /// outlive it.
    inside: Option<&'a Chain>,
    /// Where its live entries go: the open part of `inside`.
    enclosing: Option<&'a Chain>,
    judge: &'a dyn Judge,
    closed: &'a mut Closed,
    /// Entries not charged to all of `enclosing` (an async scope closing elsewhere than it
    /// ran), handed on after the walk.
    charged_later: Vec<Key>,
}

impl Closing<'_> {
    /// Judges `entry`, one of the frame's live ones, and hands it on to the enclosing frame
    /// (or out of tracking when there is none). True when it leaves the ledger's map.
    #[inline(always)]
    fn settle(&mut self, key: Key, entry: &mut Entry) -> bool {
        let marked = entry.kept_past.is_some_and(|id| {
            let id = id.get();
            id == self.frame.id || self.inside.is_some_and(|c| c.iter().any(|f| f.id == id))
        });
        let bytes = entry.bytes;
        let fate = self.judge.fate(key, entry, marked);
        let closed = &mut *self.closed;
        match fate {
            Fate::Kept => closed.kept.both(key.1, |c| {
                c.allocations += 1;
                c.gain(bytes)
            }),
            Fate::Held(held) => closed.held.push((held, key.1, bytes)),
            Fate::Escaped if self.enclosing.is_some() => closed.escaped.push((key, entry.copy())),
            Fate::Escaped => {}
        }
        match self.enclosing {
            Some(chain) if charged_to(entry, chain) => match adopt(&chain[0], key) {
                Some(slot) => {
                    entry.owner = position(entry, &chain[0]);
                    entry.slot = slot;
                }
                // It closed meanwhile, on another thread.
                None => self.charged_later.push(key),
            },
            Some(_) => self.charged_later.push(key),
            None => {
                let (entry, gone) = untrack_in_place(key, entry);
                discharge(key, &entry, false, Some(self.frame));
                if fate == Fate::Escaped {
                    self.closed.escaped.push((key, entry));
                }
                return gone;
            }
        }
        false
    }

    /// Settles the entry at `key`, on the frame's list at `slot`, in its shard's `map`.
    #[inline(always)]
    fn look_up(&mut self, map: &mut FxHashMap<Key, Entry>, slot: u32, key: Key) {
        let hash_map::Entry::Occupied(mut place) = map.entry(key) else {
            // Freed on another thread after the frame was locked: nothing to judge.
            return;
        };
        let entry = place.get_mut();
        if entry.slot != slot || entry.frame().is_none_or(|f| !Arc::ptr_eq(f, self.frame)) {
            // Its address was freed and reused for a block of another frame meanwhile.
            return;
        }
        if self.settle(key, entry) {
            place.remove();
        }
    }

    /// Settles a large frame's entries one shard at a time, each shard under one lock. Where
    /// the frame owns a good part of a shard, the shard's whole table is walked in its own
    /// order, which the processor reads ahead: looking each entry up by its key is a cache
    /// miss apiece once the ledger outgrows the cache. (The escapes come in the shards'
    /// order; the report sorts them by size and address.)
    fn by_shard(&mut self, keys: &Owned) {
        let mut counts = [0usize; SHARDS];
        for (_, key) in keys.iter() {
            counts[shard_of(key)] += 1;
        }
        for (at, &count) in counts.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let mut map = lock_shard(at);
            if count * 4 >= map.len() {
                // An entry the frame owns is on its list: no block joins a closed frame.
                map.retain(|&key, entry| {
                    let owned = entry.frame().is_some_and(|f| Arc::ptr_eq(f, self.frame));
                    !(owned && self.settle(key, entry))
                });
                continue;
            }
            for (slot, key) in keys.iter().filter(|&(_, key)| shard_of(key) == at) {
                self.look_up(&mut map, slot, key);
            }
        }
    }
}

/// The most frames a chain may have (scopes nested on a thread, with those carried in).
pub(crate) const MAX_DEPTH: usize = u16::MAX as usize + 1;

/// A frame's place in a chain (under [`MAX_DEPTH`]: `thread::push` sees to it).
fn index(at: usize) -> u16 {
    u16::try_from(at).expect("chains are shorter than MAX_DEPTH")
}

/// Where `frame` is in `entry`'s chain (it is there).
fn position(entry: &Entry, frame: &Arc<Frame>) -> u16 {
    let charged = entry.chain.as_deref().unwrap_or(&[]);
    let at = charged
        .iter()
        .position(|c| Arc::ptr_eq(c, frame))
        .unwrap_or(0);
    index(at)
}

/// Whether `entry` is charged to every frame of `chain`. Usually `chain` is what follows its
/// owner in its own chain (it was made in the scope closing inside `chain`), found in one
/// pass; otherwise each frame is looked for, by address in a set past a few (so that closing
/// deep nesting stays linear in its depth per live block).
fn charged_to(entry: &Entry, chain: &Chain) -> bool {
    let charged = entry.chain.as_deref().unwrap_or(&[]);
    let after_owner = charged.get(entry.owner as usize + 1..).unwrap_or(&[]);
    let same = |(a, b): (&Arc<Frame>, &Arc<Frame>)| Arc::ptr_eq(a, b);
    if after_owner.len() >= chain.len() && after_owner.iter().zip(chain.iter()).all(same) {
        return true;
    }
    if chain.len() <= 8 {
        return chain.iter().all(|f| entry.charged_to_frame(f));
    }
    let frames: FxHashSet<*const Frame> = charged.iter().map(Arc::as_ptr).collect();
    chain.iter().all(|f| frames.contains(&Arc::as_ptr(f)))
}

/// Gives `entry` to the innermost frame of `chain`. Frames of `chain` it was not charged to
/// (an async scope closing elsewhere than it was polled) are charged now and join its chain.
fn hand_on(key: Key, entry: &mut Entry, chain: &Chain) -> bool {
    // The innermost frame still open, following those that closed into others meanwhile
    // (again if one closes before it takes the key).
    let mut chain = chain.clone();
    entry.slot = loop {
        let Some(open) = open_chain(&chain) else {
            return false;
        };
        chain = open;
        if let Some(slot) = adopt(&chain[0], key) {
            break slot;
        }
    };
    let owner = &chain[0];
    let new: Vec<&Arc<Frame>> = chain
        .iter()
        .filter(|f| !entry.charged_to_frame(f))
        .collect();
    if new.is_empty() {
        entry.owner = position(entry, owner);
        return true;
    }
    for frame in &new {
        let mut state = frame.lock();
        if state.open {
            state
                .stats
                .both(key.1, |c| c.alloc(entry.bytes, entry.asked()));
        }
    }
    let merged: Vec<Arc<Frame>> = entry
        .chain
        .iter()
        .flat_map(|c| c.iter())
        .chain(new)
        .cloned()
        .collect();
    entry.chain = Some(Arc::from(merged));
    entry.owner = position(entry, owner);
    true
}

/// Adds `key` to `frame`'s list if the frame is still open (one closing on another thread has
/// taken its list); returns the slot.
fn adopt(frame: &Frame, key: Key) -> Option<u32> {
    let mut state = frame.lock();
    state.open.then(|| state.keys.add(key))
}

/// `chain`, or if its innermost frame has closed, the chain it closed into (and so on): where
/// what a scope leaves behind goes. `None` when every scope it could go to has ended, or
/// when the frames closed into each other in a ring (an async scope resumed inside work
/// carried into a scope opened inside it, both ended): nothing is open there.
fn open_chain(chain: &Chain) -> Option<Chain> {
    let mut chain = chain.clone();
    for _ in 0..OPEN_CHAIN_STEPS {
        let next = {
            let state = chain.first()?.lock();
            if state.open {
                None
            } else {
                Some(state.closed_into.clone()?)
            }
        };
        match next {
            Some(next) => chain = next,
            None => return Some(chain),
        }
    }
    None
}

/// More scopes closed one into the next than any program nests.
const OPEN_CHAIN_STEPS: usize = 10_000;

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
