//! Closing a frame: each live entry judged (kept, held or escaped) and handed on to the
//! enclosing frame, or out of tracking.
use super::{discharge, index, lock_shard, open_frames, shard, shard_of, tidy, untrack_entry};
use super::{untrack_in_place, Chain, Entry, Frame, Held, Key, Owned, Stats};
use super::{BLIND, GRAPH, MISSED, PARKED, SHARDS};
use crate::device::DeviceId;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::hash_map;
use std::panic::Location;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How `close` treats an entry still alive when its frame ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Owned by what the scope hands back: moves on to the enclosing frame.
    Kept,
    /// Kept by `keep`'s marks only: moves on to the enclosing frame as an escape does (an
    /// async scope's output goes to fewer of them), as every scope around judges it again.
    Marked,
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

/// Memory held on purpose: what holds it, on which device, its bytes and allocations.
pub(crate) type HeldLine = (Held, DeviceId, u64, u64);

/// What became of a frame.
#[derive(Debug, Default)]
pub(crate) struct Closed {
    /// Where the scopes it ended first were opened (parked in it and still open).
    pub ended_inside: Vec<&'static Location<'static>>,
    pub stats: Stats,
    /// Bytes handed on as kept, for all devices and per device.
    pub kept: Stats,
    pub held: Vec<HeldLine>,
    pub escaped: Vec<(Key, Entry)>,
    /// Autograd's backward pass allocated in the frame (or in one closed into it).
    pub backward: bool,
    /// An enclosing scope ended it earlier ([`end_unchecked`]): this is what that end found,
    /// kept for the scope's own late exit, which releases nothing.
    pub ended_earlier: bool,
}

/// Ends `frame` unchecked for a scope that ends it from outside (it was still open inside),
/// handing what is alive to `enclosing`; what the end found is kept for the frame's own late
/// exit, whose report then has its numbers. Returns where the scopes it ended were opened.
pub(crate) fn end_unchecked(
    frame: &Arc<Frame>,
    enclosing: &Chain,
) -> Vec<&'static Location<'static>> {
    let mut closed = close(frame, Some(enclosing), &KeepAll);
    let ended = closed.ended_inside.clone();
    closed.ended_earlier = true;
    frame.lock().ended = Some(Box::new(closed));
    ended
}

/// The live entries of a frame, when the check must look at them before closing it: some
/// were made during a backward pass or on an accelerator. Otherwise none. Also the sizes of
/// the gradients freed after their backward pass and of a kept optimizer's variables
/// (`FrameState::gradients`, and `variables` where a backward pass ran).
pub(crate) fn entries_to_inspect(frame: &Frame) -> (Vec<Key>, FxHashSet<(DeviceId, u64)>) {
    let state = frame.lock();
    let accelerator = state.stats.devices.iter().any(|(d, _)| !d.is_cpu());
    let keys = match state.saw_backward || accelerator {
        true => state.keys.iter().map(|(_, key)| key).collect(),
        false => Vec::new(),
    };
    let mut sizes = state.gradients.clone();
    if state.saw_backward {
        sizes.extend(state.variables.iter().copied());
    }
    (keys, sizes)
}

/// Ends `frame`: each live entry is judged and moves to the innermost frame of `enclosing`
/// (or leaves tracking when there is none); escaped ones are also returned. `enclosing` is
/// the chain the frame closes inside.
pub(crate) fn close(frame: &Arc<Frame>, enclosing: Option<&Chain>, judge: &dyn Judge) -> Closed {
    close_keeping_in(frame, enclosing, enclosing, judge)
}

/// [`close`], with the entries neither escaped nor only marked by `keep` (those kept by what
/// the scope hands back, and what they hold) moving to `kept_in` (a part of `enclosing`, or
/// none) instead: an async scope's output goes only to the scopes that were open at its first
/// poll too.
pub(crate) fn close_keeping_in(
    frame: &Arc<Frame>,
    enclosing: Option<&Chain>,
    kept_in: Option<&Chain>,
    judge: &dyn Judge,
) -> Closed {
    // Filled in place: the result is large, and moving it costs more than closing a clean frame.
    let mut closed = Closed::default();
    if frame.noted(PARKED) {
        end_parked(frame, enclosing, &mut closed.ended_inside);
    }
    let (keys, saw_backward, sizes, late) = {
        let mut state = frame.lock();
        if !state.open {
            return state.ended.take().map_or(closed, |ended| *ended);
        }
        state.open = false;
        state.closed_into = enclosing.cloned();
        open_frames(-1);
        std::mem::swap(&mut closed.stats, &mut state.stats);
        if !state.forever.is_empty() {
            let forever = std::mem::take(&mut state.forever);
            closed.held = forever
                .into_iter()
                .map(|(device, bytes, count)| (Held::KeptForever, device, bytes, count))
                .collect();
        }
        let late = match state.parked.is_empty() {
            true => Vec::new(),
            false => std::mem::take(&mut state.parked),
        };
        // The optimizer-state sizes it knew (`FrameState::gradients` and `variables`).
        let sizes = match state.gradients.is_empty() && state.variables.is_empty() {
            true => None,
            false => Some((
                std::mem::take(&mut state.gradients),
                std::mem::take(&mut state.variables),
            )),
        };
        (
            std::mem::take(&mut state.keys),
            state.saw_backward,
            sizes,
            late,
        )
    };
    if !late.is_empty() {
        // Parked while `end_parked` above ran (on another thread): they end into where this
        // frame ends.
        late_parked(late, enclosing);
    }
    let flags = frame.flags.load(Ordering::Relaxed) & (GRAPH | BLIND | MISSED);
    if flags != 0 {
        if let Some(open) = enclosing.and_then(open_chain) {
            open[0].note(flags);
        }
    }
    closed.backward = saw_backward;
    if saw_backward || sizes.is_some() {
        // The enclosing scope's check looks for gradients too (handed on or freed), whether
        // this frame's blocks are alive or not, and knows optimizer state by the sizes this
        // frame knew it by.
        if let Some(chain) = enclosing.and_then(open_chain) {
            let mut state = chain[0].lock();
            state.saw_backward |= saw_backward;
            if let Some((gradients, variables)) = sizes {
                state.gradients.extend(gradients);
                state.variables.extend(variables);
            }
        }
    }
    if keys.is_empty() {
        // Nothing alive (a clean scope whose blocks were all freed): nothing to hand on.
        return closed;
    }
    let open = enclosing.and_then(open_chain);
    // Usually where the others go.
    let narrowed = match (kept_in, enclosing) {
        (Some(k), Some(e)) if Arc::ptr_eq(k, e) => None,
        (k, _) => Some(k.and_then(open_chain)),
    };
    let kept_open = narrowed.as_ref().map_or(open.as_ref(), Option::as_ref);
    let mut closing = Closing {
        frame,
        inside: enclosing,
        enclosing: open.as_ref(),
        kept_in: kept_open,
        judge,
        closed: &mut closed,
        charged_later: Vec::new(),
    };
    if keys.len() < BY_SHARD_FROM {
        for (at, key) in keys.iter() {
            closing.look_up(&mut shard(key), at, key);
        }
    } else {
        closing.by_shard(&keys);
    }
    let charged_later = std::mem::take(&mut closing.charged_later);
    drop(keys);
    for (key, kept) in charged_later {
        let chain = match kept {
            true => kept_open,
            false => open.as_ref(),
        };
        if let Some(chain) = chain {
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
pub(super) const BY_SHARD_FROM: usize = 4096;

/// A closing frame's walk over its live entries.
struct Closing<'a> {
    frame: &'a Arc<Frame>,
    /// The chain it closes inside, as given: `keep`'s marks of these frames let an entry
    /// outlive it.
    inside: Option<&'a Chain>,
    /// Where its live entries go: the open part of `inside`.
    enclosing: Option<&'a Chain>,
    /// Where its entries kept by what it hands back, and those they hold, go: `enclosing`, or
    /// the open part of a part of it.
    kept_in: Option<&'a Chain>,
    judge: &'a dyn Judge,
    closed: &'a mut Closed,
    /// Entries not charged to all of where they go (an async scope closing elsewhere than it
    /// ran), handed on after the walk; true for one going to `kept_in`.
    charged_later: Vec<(Key, bool)>,
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
            Fate::Kept | Fate::Marked => closed.kept.both(key.1, |c| {
                c.allocations += 1;
                c.gain(bytes)
            }),
            Fate::Held(held) => closed.held.push((held, key.1, bytes, 1)),
            Fate::Escaped if self.enclosing.is_some() => {
                entry.made.escaped = true;
                closed.escaped.push((key, entry.copy()));
            }
            Fate::Escaped => {}
        }
        let kept = !matches!(fate, Fate::Escaped | Fate::Marked);
        match if kept { self.kept_in } else { self.enclosing } {
            Some(chain) if charged_to(entry, chain) => match adopt(&chain[0], key) {
                Some(slot) => {
                    entry.owner = position(entry, &chain[0]);
                    entry.slot = slot;
                }
                // It closed meanwhile, on another thread.
                None => self.charged_later.push((key, kept)),
            },
            Some(_) => self.charged_later.push((key, kept)),
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
                tidy(&mut map);
                continue;
            }
            for (slot, key) in keys.iter().filter(|&(_, key)| shard_of(key) == at) {
                self.look_up(&mut map, slot, key);
            }
        }
    }
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
        ended.extend(end_unchecked(&inner, &chain));
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
pub(super) fn charged_to(entry: &Entry, chain: &Chain) -> bool {
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
/// what a scope leaves behind goes. Where that ends in no open scope, the same for the rest of
/// `chain`: a chain running through work carried in with a handle goes on with the frames of
/// the thread it ran on, which see that work once its scope has ended. `None` when every scope
/// it could go to has ended, or when the frames closed into each other in a ring (an async
/// scope resumed inside work carried into a scope opened inside it, both ended): nothing is
/// open there.
pub(crate) fn open_chain(chain: &Chain) -> Option<Chain> {
    // Usually its innermost frame is open.
    if chain.first()?.is_open() {
        return Some(chain.clone());
    }
    open_chain_slow(chain)
}

#[cold]
fn open_chain_slow(chain: &Chain) -> Option<Chain> {
    // Where a closed frame's successors lead depends on that frame alone: each is followed
    // once (a ring ends there too).
    let mut seen: FxHashSet<*const Frame> = FxHashSet::default();
    for (at, first) in chain.iter().enumerate() {
        let mut next = first.clone();
        let mut rest = None;
        loop {
            if !seen.insert(Arc::as_ptr(&next)) {
                break;
            }
            let closed_into = {
                let state = next.lock();
                if state.open {
                    let open = rest.unwrap_or_else(|| Chain::from(&chain[at..]));
                    return Some(open);
                }
                state.closed_into.clone()
            };
            let Some(into) = closed_into else { break };
            let Some(head) = into.first() else { break };
            next = head.clone();
            rest = Some(into);
        }
    }
    None
}
