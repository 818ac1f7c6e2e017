//! A frame: an open scope's bookkeeping, and the list of the entries it owns.
use super::{close, open_chain, open_frames, shard, spare, with_entry, Chain, Counters, KeepAll};
use super::{Key, Stats};
use crate::device::DeviceId;
use crate::tensors::StorageSet;
use rustc_hash::FxHashSet;
use std::cell::{Cell, RefCell};
use std::num::NonZeroU64;
use std::panic::Location;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The keys of the entries a frame owns, each at the slot its entry remembers. A slot given
/// up is chained into a free list and reused, so the list never outgrows the most entries the
/// frame owned at once; adding and removing a key are a store, not a hash.
#[derive(Debug)]
pub(super) struct Owned {
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
    pub(super) fn add(&mut self, key: Key) -> u32 {
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
    pub(super) fn remove(&mut self, slot: u32, key: Key) {
        if let Some(place) = self.keys.get_mut(slot as usize).filter(|k| **k == key) {
            *place = (self.free as usize, FREE);
            self.free = slot;
            self.len -= 1;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Slots in use or free: the most keys it held at once.
    #[cfg(test)]
    pub(super) fn slots(&self) -> usize {
        self.keys.len()
    }

    /// The keys with their slots.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, Key)> + '_ {
        (0u32..)
            .zip(self.keys.iter().copied())
            .filter(|(_, key)| key.1 != FREE)
    }
}

impl Drop for Owned {
    #[inline]
    fn drop(&mut self) {
        spare::give(std::mem::take(&mut self.keys));
    }
}

/// An open scope's bookkeeping. Shared (`Arc`) by the scope, the entries charged to it and any
/// thread it is carried to.
#[derive(Debug, Default)]
pub(crate) struct Frame {
    pub(super) id: u64,
    /// Where its scope was opened, for the report of an enclosing scope that ends it.
    pub(super) location: Option<&'static Location<'static>>,
    pub(super) state: Mutex<FrameState>,
    /// What happened while it was on some thread's stack, or was done to it (`GRAPH`,
    /// `BLIND`, `PARKED`, `BLIND_KEPT`, `CARRIED`, `MISSED`); a closing frame passes `GRAPH`,
    /// `BLIND` and `MISSED` on to the enclosing one.
    pub(super) flags: AtomicU8,
    /// The autograd mode of the thread it is placed on before its scope turned autograd off
    /// (`NO_GRAD`: untouched), given back by whoever ends it there.
    pub(super) grad: AtomicI32,
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
/// It was charged for allocations that another scope owns and judges: work carried in through
/// that scope's handle, or an async scope resumed, was pushed on a thread where it was open.
pub(crate) const CARRIED: u8 = 16;
/// Its work ran where it could not be placed (an async scope's poll, or work carried in
/// through its handle, on a thread that was ending or nested too deep, or where libtorch
/// failed): what that work allocated was not seen.
pub(crate) const MISSED: u8 = 32;

#[derive(Debug, Default)]
pub(crate) struct FrameState {
    pub open: bool,
    pub stats: Stats,
    /// Entries this frame owns.
    pub(super) keys: Owned,
    /// Some allocation was made during a backward pass (the check then looks for gradients).
    pub saw_backward: bool,
    /// The requested sizes of the gradients it owned that outlived their backward pass (a
    /// parameter's `.grad`) and were freed since, by `zero_grad`, and those of the frames that
    /// closed into it: an optimizer's state, made beside them, has their sizes. Also the sizes
    /// of the variables of an optimizer given to `keep` that were made before it or have a
    /// gradient (a step whose backward ran in other scopes, or handed back); the others are
    /// in `variables`. (The live gradients are looked at by the check.)
    pub gradients: FxHashSet<(DeviceId, u64)>,
    /// The sizes of the variables of an optimizer given to `keep` that were made in it (or in
    /// a frame closed into it) and had no gradient then: its state's only where a backward
    /// pass ran here after all (a model built and trained here, with parameters fused by
    /// `Tensor::cat`, kept before its backward); otherwise they would only hide the buffers
    /// made beside them (`BatchNorm`'s running statistics).
    pub variables: FxHashSet<(DeviceId, u64)>,
    /// Blocks charged to it that `keep_forever` took out of tracking while it was open: bytes
    /// and count per device (a total: an open scope calling it in a loop grows nothing).
    pub(super) forever: Vec<(DeviceId, u64, u64)>,
    /// Values given to `keep` or `keep_forever` while it was open that could not be looked
    /// into: its check counts what nothing kept as not inspected, as for such a value handed
    /// back.
    pub(super) blind_kept: Vec<&'static str>,
    /// The frames it was opened in, kept when its level was taken off the thread's stack by
    /// the scope below it (an async scope suspended with this one still open in it): where
    /// its live allocations go when it ends off the stack.
    pub parked_in: Option<Chain>,
    /// The frames it closed inside: where work carried on through its handle is charged.
    pub(super) closed_into: Option<Chain>,
    /// Frames opened inside it that left a thread's stack with it, still open: it ends
    /// those still open when it ends.
    pub(super) parked: Vec<Arc<Frame>>,
    /// What its end by an enclosing scope found, for its own late exit's report.
    pub(super) ended: Option<Box<super::close::Closed>>,
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
        state.variables.clear();
        state.blind_kept.clear();
        state.parked_in = None;
        state.closed_into = None;
        state.ended = None;
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
                    // Into the scopes open below where it left the thread, if any.
                    let parked_in = inner.lock().parked_in.take();
                    close(inner, parked_in.as_ref(), &KeepAll);
                    return;
                }
            }
        }
    }

    /// The frames parked in it that are still open (the list is emptied).
    pub(super) fn take_parked_open(&self) -> Vec<Arc<Frame>> {
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

    /// Records `flag` (`GRAPH`, `BLIND`, `PARKED`, ...) for the frame.
    pub(crate) fn note(&self, flag: u8) {
        self.flags.fetch_or(flag, Ordering::Relaxed);
    }

    /// Whether `flag` was noted for the frame, or for one that closed into it.
    pub(crate) fn noted(&self, flag: u8) -> bool {
        self.flags.load(Ordering::Relaxed) & flag != 0
    }

    /// The optimizers in `kept`: the state their steps make here has their variables' sizes
    /// (a step whose backward ran in other scopes: gradient accumulation), which the frames
    /// this one closes into know too (what it held as such state stays held there). Those
    /// of variables made here without a gradient yet count only where a backward pass ran
    /// (`FrameState::variables`).
    pub(crate) fn know_optimizers(&self, kept: &StorageSet) {
        if kept.optimized.is_empty() {
            return;
        }
        let (untrained, trained): (Vec<_>, Vec<_>) =
            kept.optimized.iter().partition(|&&(key, _, grad)| {
                !grad && with_entry(key, |e| e.charged_to_frame(self)).unwrap_or(false)
            });
        let mut state = self.lock();
        let size = |&(key, bytes, _): &(Key, u64, bool)| (key.1, bytes);
        state.gradients.extend(trained.iter().map(size));
        state.variables.extend(untrained.iter().map(size));
    }

    /// Lets the storages in `kept` that this frame owns, or that `inside` own (frames
    /// opened inside it, still open on this thread), outlive it (`keep`), and so the scopes
    /// in between. The mark is on the allocation, so it dies with it; one of a frame in
    /// `outside` (those this one is open in) stands, as it covers this frame too.
    pub(crate) fn mark(&self, kept: &StorageSet, inside: &[Arc<Frame>], outside: &[Arc<Frame>]) {
        self.know_optimizers(kept);
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

/// Spare frames kept per thread (scopes nest a few deep).
const SPARE_FRAMES_KEPT: usize = 4;

thread_local! {
    /// Frames of ended scopes that nothing else holds, reset, for the next scopes opened here.
    static SPARE_FRAMES: RefCell<Vec<Arc<Frame>>> = const { RefCell::new(Vec::new()) };
}

/// Frame ids a thread takes from the process-wide counter at a time.
const IDS_TAKEN: u64 = 1 << 16;

thread_local! {
    /// This thread's next frame id and the end of the ids it took (a thread-local without a
    /// destructor: there even while the thread ends).
    static FRAME_IDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// A process-unique frame id (never 0), from ids each thread takes from one counter in
/// blocks: a shared cache line touched once per 65 536 scopes, and no id met twice however
/// many threads come and go.
pub(super) fn next_frame_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    FRAME_IDS.with(|ids| {
        let (mut next, mut end) = ids.get();
        if next == end {
            next = NEXT.fetch_add(IDS_TAKEN, Ordering::Relaxed);
            end = next + IDS_TAKEN;
        }
        ids.set((next + 1, end));
        next
    })
}
