//! Per-thread state: the stack of frames this thread's allocations are charged to, and the
//! shim's hooks, installed while the stack is not empty.
//!
//! A frame is on a thread's stack either because the scope was opened here (owned) or because
//! it was carried here (an async scope being polled, or a [`ScopeHandle`](crate::ScopeHandle)
//! running a closure): borrowed. Only the scope that owns a frame closes it.
use crate::ledger::{self, Chain, Frame, BLIND, CARRIED, GRAPH};
use crate::{ffi, Error};
use std::cell::{Cell, RefCell};
use std::ffi::c_int;
use std::sync::{Arc, Mutex};

/// What a thread's allocations are charged to right now. The shim's reporter for the thread
/// holds one (as a raw `Arc`), so that libtorch's threads that inherit the reporter with its
/// thread-local state (autograd's, `at::launch`'s) charge the same frame.
#[derive(Debug, Default)]
pub(crate) struct Owner {
    current: Mutex<Option<Chain>>,
}

impl Owner {
    /// The frames on the owning thread's stack, innermost first: what an allocation made for
    /// that thread is charged to. Without a lock on the owning thread itself.
    #[inline]
    pub(crate) fn current(&self) -> Option<Chain> {
        let own = THREAD.try_with(|t| {
            if !std::ptr::eq(Arc::as_ptr(&t.owner), self) {
                return None;
            }
            let stack = t.stack.try_borrow().ok()?;
            Some(stack.last().map(|l| l.chain.clone()))
        });
        match own {
            Ok(Some(chain)) => chain,
            _ => self
                .current
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

/// Publishes `chain` to the thread's owner, for libtorch's worker threads (the thread itself
/// reads its stack).
fn publish(t: &ThreadState, chain: Option<Chain>) {
    *t.owner.current.lock().unwrap_or_else(|e| e.into_inner()) = chain;
}

/// `head` then the frames of `below` not in it: each frame once (a frame below may be in the
/// head already, as an async scope polled in work carried into a scope opened inside it).
fn joined(head: &[Arc<Frame>], below: &[Arc<Frame>]) -> Chain {
    let rest = below
        .iter()
        .filter(|f| !head.iter().any(|h| Arc::ptr_eq(h, f)));
    head.iter().chain(rest).cloned().collect()
}

/// A frame's place on a thread's stack, given back to take it off again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token(u64);

struct Level {
    token: Token,
    frame: Arc<Frame>,
    owned: bool,
    /// The frames from this level down, innermost first: what the thread is charged to while
    /// this level is on top (kept here, so that popping back to it allocates nothing).
    chain: Chain,
    /// For a scope carried here through its handle: the frames it is open in where it was
    /// opened (the head of `chain`). Otherwise all of `chain`.
    origin: Option<Chain>,
    /// The thread's count of autograd graph nodes when the level was pushed.
    nodes: u64,
    /// The autograd mode to give the thread when this level (work carried in) leaves, handed
    /// up by a scope below it that ended first (see [`hand_mode_up`]).
    handed: Option<c_int>,
}

/// Tells the frames of `levels` whether autograd graph nodes were made since they were pushed.
fn note_graphs(levels: &[Level]) {
    let now = ffi::graph_nodes();
    for level in levels.iter().filter(|l| l.nodes != now) {
        level.frame.note(GRAPH);
    }
}

struct ThreadState {
    owner: Arc<Owner>,
    stack: RefCell<Vec<Level>>,
    next: Cell<u64>,
    /// What the shim installed while the stack is not empty.
    hooks: Cell<Option<ffi::ThreadHooks>>,
    /// The operator callback of attribution, and the level that installed it.
    ops: Cell<Option<(u64, Token)>>,
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        // The thread is ending with scopes still open (forgotten guards): end them unchecked
        // so that nothing stays behind. libtorch's own thread state may be gone: no shim calls
        // (the shim took its reporter out of libtorch's debug info as its own thread-locals
        // went, just before this). libtorch's threads that inherited the reporter charge
        // nothing from now on.
        publish(self, None);
        let stack = std::mem::take(self.stack.get_mut());
        for level in stack.into_iter().rev().filter(|l| l.owned) {
            crate::ledger::close(&level.frame, None, &crate::ledger::KeepAll);
        }
    }
}

thread_local! {
    static THREAD: ThreadState = ThreadState {
        owner: Arc::default(),
        stack: RefCell::default(),
        next: Cell::new(0),
        hooks: Cell::new(None),
        ops: Cell::new(None),
    };
}

/// `f` on this thread's state; the default while the thread ends (called from a thread-local's
/// destructor after this thread's state is gone: no scope is open here then).
fn with_thread<R: Default>(f: impl FnOnce(&ThreadState) -> R) -> R {
    THREAD.try_with(f).unwrap_or_default()
}

/// Puts `frame` on top of this thread's stack; installs the hooks if it was empty, and the
/// operator callback if `operators` and it is not installed yet.
pub(crate) fn push(frame: Arc<Frame>, owned: bool, operators: bool) -> Result<Token, Error> {
    push_level(frame, owned, operators, None)
}

/// Puts a scope carried here through its handle on top of this thread's stack: `origin` is
/// the scope's frame and those it is open in, all charged with what runs here, and then the
/// frames open here (which show it as another scope's).
pub(crate) fn push_carried(origin: Chain, operators: bool) -> Result<Token, Error> {
    push_level(origin[0].clone(), false, operators, Some(origin))
}

fn push_level(
    frame: Arc<Frame>,
    owned: bool,
    operators: bool,
    origin: Option<Chain>,
) -> Result<Token, Error> {
    let pushed = THREAD.try_with(|t| {
        // Before anything changes (at most one level more than the longest chain below).
        // Every level's chain holds its own frame: 0 only on an empty stack.
        let below = t.stack.borrow().last().map_or(0, |l| l.chain.len());
        if below + origin.as_ref().map_or(1, |o| o.len()) > ledger::MAX_DEPTH {
            return Err(Error::TooDeep {
                limit: ledger::MAX_DEPTH,
            });
        }
        if below == 0 {
            t.hooks.set(Some(ffi::thread_enter(&t.owner)?));
        }
        let token = Token(t.next.get());
        t.next.set(token.0 + 1);
        if operators && t.ops.get().is_none() {
            t.ops
                .set(ffi::ops_begin().map(|callback| (callback, token)));
        }
        let mut stack = t.stack.borrow_mut();
        // Already on this thread's stack (its future polled here): charged as it is there, and
        // once. Carried here through its handle, it is charged as carried work is (below): the
        // scopes opened inside it here are charged too, as another scope's work.
        let on_stack = match origin {
            None => stack.iter().rev().find(|l| Arc::ptr_eq(&l.frame, &frame)),
            Some(_) => None,
        };
        let (carried_head, placed_already) = (origin.as_ref().map(|o| o.len()), on_stack.is_some());
        let (chain, origin) = match on_stack {
            Some(level) => (level.chain.clone(), level.origin.clone()),
            None => {
                let below = stack.last();
                let below_chain = below.map_or(&[][..], |l| &l.chain[..]);
                match below.and_then(|l| l.origin.as_deref()) {
                    // Usually nothing carried below: every frame there is a level's own, and
                    // `frame` (looked for above) is not among them.
                    None if origin.is_none() => {
                        let chain = std::iter::once(&frame).chain(below_chain);
                        (chain.cloned().collect(), None)
                    }
                    carried_below => {
                        let head = origin.as_deref().unwrap_or(std::slice::from_ref(&frame));
                        let chain = joined(head, below_chain);
                        // Opened in carried work: where its scope is open is the head and the
                        // carried scope's own frames, not this thread's.
                        let opened_in = match &origin {
                            None => carried_below.map(|o| joined(head, o)),
                            Some(_) => None,
                        };
                        (chain, opened_in.or(origin))
                    }
                }
            }
        };
        // The frames open here below a scope that is not theirs (work carried in through its
        // handle, or an async scope polled here), or below one opened in carried work (its
        // level has an origin), are charged for allocations it owns.
        let foreign = match (carried_head, owned) {
            _ if placed_already => 0,
            (Some(head), _) => head,
            (None, false) => 1,
            (None, true) if origin.is_some() => 1,
            (None, true) => 0,
        };
        for frame in chain.iter().skip(foreign).filter(|_| foreign > 0) {
            if !frame.noted(CARRIED) {
                frame.note(CARRIED);
            }
        }
        if t.hooks.get().is_some_and(|h| h.stepped_aside) {
            // Accelerator allocations made here are not seen: by any scope of the chain.
            chain.iter().for_each(|f| f.note(BLIND));
        }
        publish(t, Some(chain.clone()));
        stack.push(Level {
            token,
            frame,
            owned,
            chain,
            origin,
            nodes: ffi::graph_nodes(),
            handed: None,
        });
        Ok(token)
    });
    pushed.unwrap_or(Err(Error::ThreadEnding))
}

/// Where the levels that leave the stack with the one at `at` end: work carried in above it
/// (through a handle, or an async scope polled here) is not its to end, nor what was opened in
/// that work; it stays, charged as before (a scope exited inside such work: bad input).
#[inline]
fn ending_with(stack: &[Level], at: usize) -> usize {
    // Usually on top: nothing above it.
    let above = &stack[at + 1..];
    above
        .iter()
        .position(|l| !l.owned)
        .map_or(stack.len(), |i| at + 1 + i)
}

/// The frames above `token` that end with it (innermost first), the chain below it, and
/// whether work carried in above it stays when it ends (see [`hand_mode_up`]); `None` if
/// `token` is not on this thread's stack.
pub(crate) fn around(token: Token) -> Option<(Vec<Arc<Frame>>, Option<Chain>, bool)> {
    with_thread(|t| {
        let stack = t.stack.borrow();
        let at = stack.iter().rposition(|l| l.token == token)?;
        let end = ending_with(&stack, at);
        // Usually on top: nothing above it to collect.
        let above = match &stack[at + 1..end] {
            [] => Vec::new(),
            above => above
                .iter()
                .rev()
                .filter(|l| l.owned)
                .map(|l| l.frame.clone())
                .collect(),
        };
        let below = at.checked_sub(1).map(|i| stack[i].chain.clone());
        Some((above, below, end < stack.len()))
    })
}

/// A scope whose level at `token` ends while work carried in above it stays (a scope exited
/// inside work carried onto its thread: bad input, see `ending_with`): that work keeps the
/// autograd mode it runs with, and `previous`, the mode the scope found, is the thread's
/// again when the work leaves. Returns false (the caller gives the mode back now) if no such
/// work is above it.
pub(crate) fn hand_mode_up(token: Token, previous: c_int) -> bool {
    with_thread(|t| {
        let mut stack = t.stack.borrow_mut();
        let Some(at) = stack.iter().rposition(|l| l.token == token) else {
            return false;
        };
        let end = ending_with(&stack, at);
        let Some(above) = stack.get_mut(end) else {
            return false;
        };
        // A scope further down that ends later found an earlier mode: it overwrites this.
        above.handed = Some(previous);
        true
    })
}

/// Takes `token` and what ends with it (`ending_with`) off this thread's stack; removes the
/// hooks when the stack is empty. Does nothing if `token` is not on this thread's stack.
/// Returns the autograd mode a scope that ended below the level handed up to it, if any
/// ([`hand_mode_up`]): the caller gives the thread that mode rather than its own.
pub(crate) fn pop(token: Token) -> Option<c_int> {
    with_thread(|t| {
        let mut stack = t.stack.borrow_mut();
        let at = stack.iter().rposition(|l| l.token == token)?;
        let end = ending_with(&stack, at);
        let handed = stack[at].handed;
        let mut ops_ended = t
            .ops
            .get()
            .filter(|(_, level)| stack[at..end].iter().any(|l| l.token == *level));
        // Work carried in above stays: it keeps attributing, the callback is its level's now.
        if let (Some((callback, _)), Some(above)) = (ops_ended, stack.get(end)) {
            t.ops.set(Some((callback, above.token)));
            ops_ended = None;
        }
        note_graphs(&stack[at..end]);
        // Scopes opened above it and still open (a guard held across an `.await` of the async
        // scope at `token`) leave the stack with it; each remembers the frames it was opened
        // in, for its own end.
        let mut parked = Vec::new();
        for pair in stack[at..end].windows(2).filter(|pair| pair[1].owned) {
            pair[1].frame.lock().parked_in = Some(pair[0].chain.clone());
            pair[0].frame.park(&pair[1].frame);
            parked.push(pair[1].frame.clone());
        }
        // Dropping the levels drops frames and chains only: nothing here touches this state.
        match end == stack.len() {
            true => stack.truncate(at),
            false => drop(stack.drain(at..end)),
        }
        publish(t, stack.last().map(|l| l.chain.clone()));
        let empty = stack.is_empty();
        drop(stack);
        // Parked scopes leave the thread its autograd mode, innermost first, as their ends
        // would have (those ends then leave the mode of wherever they run as it is).
        for frame in parked.iter().rev() {
            if let (Some(previous), Some(at)) = (frame.take_grad(), frame.location()) {
                crate::grad::restore(previous, at);
            }
        }
        if let Some((callback, _)) = ops_ended {
            ffi::ops_end(callback);
            t.ops.set(None);
        }
        if empty && t.hooks.take().is_some() {
            ffi::thread_leave();
        }
        handed
    })
}

/// Where graphs made since `token` was pushed begin: this thread (as autograd's nodes record
/// it) and its count of autograd graph nodes then.
pub(crate) fn graphs_since(token: Token) -> Option<(u64, u64)> {
    let nodes = with_thread(|t| {
        let stack = t.stack.borrow();
        stack.iter().rfind(|l| l.token == token).map(|l| l.nodes)
    })?;
    Some((ffi::thread_id(), nodes))
}

/// Tells the frames of `token` and the levels above it whether autograd graph nodes were made
/// since they were pushed (before they are checked; popping them tells them too).
pub(crate) fn settle_graphs(token: Token) {
    with_thread(|t| {
        let stack = t.stack.borrow();
        if let Some(at) = stack.iter().rposition(|l| l.token == token) {
            note_graphs(&stack[at..]);
        }
    })
}

/// The innermost frame on this thread and the frames it is open in, innermost first: where
/// it was opened, for a scope carried here.
pub(crate) fn innermost() -> Option<Chain> {
    with_thread(|t| {
        let stack = t.stack.borrow();
        let top = stack.last()?;
        Some(top.origin.as_ref().unwrap_or(&top.chain).clone())
    })
}

/// The frames on this thread's stack, innermost first.
pub(crate) fn chain() -> Option<Chain> {
    with_thread(|t| t.stack.borrow().last().map(|l| l.chain.clone()))
}

/// Whether operators are attributed on this thread now.
pub(crate) fn attributing() -> bool {
    with_thread(|t| t.ops.get().is_some())
}

/// Whether this thread's state is still there (not while the thread ends).
pub(crate) fn alive() -> bool {
    THREAD.try_with(|_| ()).is_ok()
}

/// How many frames are on this thread's stack.
pub(crate) fn depth() -> usize {
    with_thread(|t| t.stack.borrow().len())
}
