//! One scope's life, from entry to report: the only code that opens, carries and closes a
//! frame. [`Scope`](crate::Scope), the async form and the macros are thin wrappers over
//! [`OpenScope`].
//!
//! ```text
//! enter ──► placed on a thread (stack push, autograd off)
//!             │   allocations and frees reach the ledger through hooks.rs
//!             ├─► suspend ◄─► resume        (async: once per poll, on any thread)
//!             ▼
//! close ──► inner scopes still open end first ─► judge each live allocation (check.rs)
//!       ──► ledger::close ─► release policy ─► ScopeReport ─► escape policy (policy.rs)
//! ```
use crate::check::Check;
use crate::config::{attribution, Attribution};
use crate::device::DeviceId;
use crate::ledger::{self, Chain, Closed, Frame, KeepAll};
use crate::memory::{self, check_device};
use crate::options::{EscapePolicy, ScopeOptions};
use crate::release::{self, Released};
use crate::report::{self, DeviceReport, Escape, Held, HeldBy, ScopeReport, Untracked};
use crate::tensors::StorageSet;
use crate::thread::{self, Token};
use crate::{ffi, grad, policy, sites, Error};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

/// When the first scope was entered (or refused on entry), which reads the environment's
/// configuration.
static EPOCH: LazyLock<Instant> = LazyLock::new(|| {
    crate::config::read_all();
    Instant::now()
});

/// Where an open scope is while it runs on a thread.
#[derive(Debug)]
struct Placed {
    token: Token,
}

/// An open scope. Dropping it without [`close`](OpenScope::close) ends it unchecked.
#[derive(Debug)]
pub(crate) struct OpenScope {
    frame: Arc<Frame>,
    opts: ScopeOptions,
    started: Instant,
    placed: Option<Placed>,
    /// It ran with operators and shapes attributed throughout.
    attributed: bool,
    /// It was taken off its thread between polls (an async scope) at least once.
    suspended: bool,
    /// The thread it was entered on and that thread's count of autograd nodes then, kept when
    /// it is first taken off (a later placement's count is not its start).
    since: Option<(u64, u64)>,
    /// The frames it was placed in when last taken off (an async scope between polls): what
    /// it was charged with goes there when it ends off any thread's stack (a cancelled future,
    /// dropped wherever that happens), not to the scopes open where it is dropped.
    polled_in: Option<Chain>,
    /// The frames open at an async scope's first poll, where it opens (kept when it is first
    /// taken off): its output goes only to those of them that are also around it where it
    /// finishes. A spawned task's output is its join handle's, not that of the scope it
    /// happens to finish in.
    made_in: Option<Chain>,
    closed: bool,
    /// Checked where it was dropped unfinished (a cancelled future no scope takes in).
    cancelled: bool,
    /// A poll of its future panicked: dropped afterwards, it ends as a scope a panic ends,
    /// not as a cancelled future.
    panicked: bool,
}

impl OpenScope {
    /// Opens a scope on this thread, inside the innermost scope open here.
    pub(crate) fn enter(opts: ScopeOptions) -> Result<OpenScope, Error> {
        // First: a scope refused on entry reads the environment's configuration too.
        LazyLock::force(&EPOCH);
        if let Some(bytes) = opts.negative_budget {
            let scope = opts.name.clone();
            let bytes = bytes.get();
            return Err(Error::NegativeBudget { scope, bytes });
        }
        if let Some(device) = opts.device {
            check_device(device)?;
        }
        if !thread::alive() {
            return Err(Error::ThreadEnding);
        }
        ffi::attach_tracker();
        let mut scope = OpenScope {
            frame: Frame::open_at(Some(opts.location)),
            started: Instant::now(),
            opts,
            placed: None,
            attributed: true,
            suspended: false,
            since: None,
            polled_in: None,
            made_in: None,
            closed: false,
            cancelled: false,
            panicked: false,
        };
        if let Err(error) = scope.place(true) {
            // Never opened for the user: no report, no exit event.
            scope.closed = true;
            ledger::close(&scope.frame, None, &KeepAll);
            return Err(error);
        }
        Ok(scope)
    }

    /// `keep`: what this scope owns among `kept`'s storages, or what scopes opened inside it
    /// and still open on this thread own, may outlive it; a kept optimizer's state made here
    /// is held on purpose.
    pub(crate) fn mark(&self, kept: &StorageSet) {
        let around = self.placed.as_ref().and_then(|p| thread::around(p.token));
        let (inside, outside, _) = around.unwrap_or_default();
        self.frame
            .mark(kept, &inside, outside.as_deref().unwrap_or(&[]));
    }

    #[inline]
    fn place(&mut self, owned: bool) -> Result<(), Error> {
        let operators = sites::attributed(self.opts.location);
        let token = thread::push(self.frame.clone(), owned, operators)?;
        self.attributed &= thread::attributing();
        if !self.opts.keep_grad_mode {
            self.frame.set_grad(grad::off(self.opts.location));
        }
        self.placed = Some(Placed { token });
        Ok(())
    }

    /// Takes the scope off its thread after a poll that panicked: dropped later, unfinished, it
    /// is not taken for a cancelled future (an executor drops a panicked task after catching
    /// the panic).
    pub(crate) fn suspend_panicked(&mut self) {
        self.panicked = true;
        self.suspend();
    }

    /// Takes the scope off its thread without ending it (an async scope between polls).
    pub(crate) fn suspend(&mut self) {
        if let Some(placed) = self.placed.take() {
            // Not at its close, which takes it off for good.
            if !self.closed {
                self.polled_in = thread::around(placed.token).and_then(|(_, below, _)| below);
                if !self.suspended {
                    self.since = thread::graphs_since(placed.token);
                    self.made_in = self.polled_in.clone();
                }
            }
            self.suspended = true;
            // Scopes still open inside it leave first, giving back their modes.
            let handed = thread::pop(placed.token);
            if let Some(previous) = self.frame.take_grad() {
                grad::restore(previous, self.opts.location);
            }
            // A scope of this thread exited inside this poll: the mode it found is the
            // thread's now.
            if let Some(handed) = handed {
                grad::set(handed);
            }
        }
    }

    /// Puts a suspended scope on this thread again. If it cannot be, what runs until the
    /// next placement is not seen, and the report says so.
    pub(crate) fn resume(&mut self) -> Result<(), Error> {
        match self.placed {
            Some(_) => Ok(()),
            None => self
                .place(false)
                .inspect_err(|_| self.frame.note(ledger::MISSED)),
        }
    }

    /// Closes with a check, then applies the escape policy. Ending after the enclosing scope
    /// ended is `Err(EndedByEnclosing)`; with `police` (the macros' scopes, whose callers see
    /// no `Result` unless the policy is `error`) the escape policy acts on it as on a failed
    /// entry: a panic, a warning, or the error.
    #[inline]
    #[track_caller]
    pub(crate) fn finish(&mut self, kept: &StorageSet, police: bool) -> Result<ScopeReport, Error> {
        let policy = self.opts.policy();
        if !self.frame.is_open() {
            let report = self.close(&StorageSet::new(), false);
            let error = Error::EndedByEnclosing {
                scope: self.opts.name.clone(),
            };
            return match police {
                true => policy::bad_input(&self.opts, error).map(|()| report),
                false => Err(error),
            };
        }
        let report = self.close(kept, true);
        policy::act(policy, report)
    }

    /// Ends the scope and builds its report; `checked` judges what is still alive against
    /// `kept`, else everything alive is handed to the enclosing scope unchecked.
    pub(crate) fn close(&mut self, kept: &StorageSet, checked: bool) -> ScopeReport {
        self.closed = true;
        let mut taken_off = false;
        let (above, enclosing, carried_above) = match &self.placed {
            Some(p) => {
                // Only a kept tensor's graph can hold memory: ask about graphs only then.
                if kept.autograd_graph {
                    thread::settle_graphs(p.token);
                }
                // Off the stack: taken off with the work it was opened in (an async scope's
                // poll, work carried in with a handle), which ended before it.
                thread::around(p.token).unwrap_or_else(|| {
                    taken_off = true;
                    (vec![], self.frame.lock().parked_in.take(), false)
                })
            }
            // Off every stack: it ends where it was last placed.
            None => (vec![], self.polled_in.take(), false),
        };
        // Work carried in above it that stays (its exit inside that work) keeps its mode: the
        // modes of the scopes ending here are that work's to give back when it leaves.
        let hand_up = self
            .placed
            .as_ref()
            .map(|p| p.token)
            .filter(|_| carried_above);
        // Scopes still open inside it end first, unchecked (bad input: scopes end innermost
        // first); the report says where they were opened.
        let mut ended_inside = Vec::new();
        if !above.is_empty() {
            ended_inside = above.iter().filter_map(|f| f.location()).collect();
            close_inner(
                &self.frame,
                &above,
                enclosing.as_ref(),
                hand_up,
                &mut ended_inside,
            );
        }
        // Its own mode after theirs. An enclosing scope that ended it gave back its mode.
        match self.frame.take_grad() {
            Some(previous) => give_back_mode(previous, self.opts.location, hand_up),
            None if !self.opts.keep_grad_mode => grad::forget(self.opts.location),
            None => {}
        }
        // A checked end comes from `finish`, which found the frame open; only this scope
        // closes it.
        let (mut untracked, mut uninspected) = (Vec::new(), Vec::new());
        let mut closed = if checked {
            ffi::await_inherited();
            let mut check = Check::prepare(&self.frame, kept, self.graph_since(kept));
            // An async scope finishing where it runs hands its output only to the scopes that
            // were also open at its first poll; what it leaves alive goes to all around it.
            let narrowed = (self.suspended && !taken_off && self.placed.is_some())
                .then(|| made_and_finished_in(enclosing.clone(), self.made_in.as_ref()));
            let kept_in = narrowed.as_ref().map_or(enclosing.as_ref(), Option::as_ref);
            let enclosing = enclosing.as_ref();
            let mut closed = ledger::close_keeping_in(&self.frame, enclosing, kept_in, &check);
            closed.held.extend(check.autocast_freed());
            untracked = self.untracked(&closed, taken_off);
            uninspected = std::mem::take(&mut check.uninspected);
            closed
        } else {
            ledger::close(&self.frame, enclosing.as_ref(), &KeepAll)
        };
        self.suspend();
        let accelerators = || {
            closed
                .stats
                .devices
                .iter()
                .map(|(d, _)| *d)
                .filter(|d| !d.is_cpu())
        };
        // Unchecked ends too (a panic, an early return): the cache is released all the same;
        // not at a late exit, after the end that an enclosing scope gave it.
        let used: smallvec::SmallVec<[DeviceId; 2]> = match closed.ended_earlier {
            true => Default::default(),
            false => accelerators().collect(),
        };
        let outermost = enclosing.is_none();
        let blind = outermost && used.is_empty() && self.blind_to_accelerators();
        let released = release::run(self.opts.release, outermost, &used, blind);
        let mut report = self.report(&mut closed, kept, untracked, uninspected, released, checked);
        if !closed.ended_inside.is_empty() {
            ended_inside.append(&mut closed.ended_inside);
        }
        report.ended_inside = ended_inside;
        if !report.escaped.is_empty() && !self.attributed && attribution() == Attribution::OnLeak {
            sites::leaked(self.opts.location);
        }
        // Every exit, checked or not (a panic, a dropped guard, `abandon`, an exit after the
        // enclosing scope ended it); the copy first, should a subscriber panic.
        report::set_last(&report);
        tracing::debug!(target: "gpu_scope", report = %report.to_json(), "scope `{}` exited", report::Name(&report.name));
        report
    }

    /// Where the scope's own graphs begin, for a kept tensor's graph: the thread it was
    /// entered on and that thread's count of autograd nodes then (graphs made on other threads
    /// may be its own: carried work, later polls).
    fn graph_since(&self, kept: &StorageSet) -> Option<(u64, u64)> {
        match &self.placed {
            _ if !kept.autograd_graph => None,
            _ if self.suspended => self.since,
            Some(p) => thread::graphs_since(p.token),
            None => None,
        }
    }

    /// Whether the scope could not see accelerator allocations: a profiler held the reporting
    /// slot, or the allocator reports nothing (asked off the thread's stack: it never probes).
    fn blind_to_accelerators(&self) -> bool {
        self.frame.noted(ledger::BLIND) || memory::allocator_reports_nothing()
    }

    /// Devices on which the scope could not see allocations; `taken_off`: it ends off its
    /// thread's stack, taken off with the work it was opened in.
    fn untracked(&self, closed: &Closed, taken_off: bool) -> Vec<Untracked> {
        let mut untracked = Vec::new();
        if taken_off {
            untracked.push(Untracked {
                device: None,
                reason: "it left its thread, still open, when the work it was opened in ended \
                         (work carried in with a handle's `in_scope`, or an async scope's poll \
                         while it was held across an `.await`); what ran after that, on the \
                         CPU too, was not seen: exit a scope inside the work it was opened in",
            });
        }
        let blind = self.frame.noted(ledger::BLIND);
        if blind {
            untracked.push(Untracked {
                device: None,
                reason: "a libtorch profiler held the memory-reporting slot of a thread the \
                         scope's work ran on; accelerator allocations made meanwhile were not \
                         seen (to have scopes check them, start the profiler after they end or profile \
                         in another run)",
            });
        }
        if self.frame.noted(ledger::MISSED) {
            untracked.push(Untracked {
                device: None,
                reason: "some of its work (an async scope's poll, work carried in through a \
                         handle) ran on a thread where the scope could not be put (the thread \
                         was ending, scopes were nested too deep there, or libtorch failed); \
                         what that work allocated, on the CPU too, was not seen (end the \
                         scopes a thread leaves open, and carry work to a thread before it \
                         ends)",
            });
        }
        let saw_accelerator = closed.stats.devices.iter().any(|(d, _)| !d.is_cpu());
        if !saw_accelerator && !blind && memory::allocator_reports() == Some(false) {
            untracked.push(Untracked {
                device: None,
                reason: "the accelerator's allocator reports nothing (the cudaMallocAsync \
                         backend, or PYTORCH_NO_CUDA_MEMORY_CACHING=1), so its allocations \
                         cannot be seen (to check them, run with the native caching allocator)",
            });
        }
        untracked
    }

    fn report(
        &mut self,
        closed: &mut Closed,
        kept: &StorageSet,
        untracked: Vec<Untracked>,
        uninspected: Vec<&'static str>,
        released: Released,
        checked: bool,
    ) -> ScopeReport {
        // What a clean scope does not have is built out of line: its exit stays short.
        let (escaped, escaped_without_grad) = if closed.escaped.is_empty() {
            (Vec::new(), false)
        } else {
            // Not what a scope inside found escaped (made with autograd off by default).
            let without_grad = self.opts.keep_grad_mode
                && (closed.escaped.iter()).any(|(_, e)| e.made.grad_off && !e.made.escaped);
            (escapes(std::mem::take(&mut closed.escaped)), without_grad)
        };
        let mut held = if closed.held.is_empty() {
            Vec::new()
        } else {
            group_held(&closed.held)
        };
        let mut devices: Vec<DeviceReport> = closed
            .stats
            .devices
            .iter()
            .map(|(device, c)| DeviceReport {
                device: Some(*device),
                allocations: c.allocations,
                allocated: c.allocated,
                requested: c.requested,
                freed: c.freed,
                peak: c.peak,
                kept: closed
                    .kept
                    .devices
                    .iter()
                    .find(|(d, _)| d == device)
                    .map_or(0, |(_, k)| k.live),
                escaped: escaped
                    .iter()
                    .filter(|e| e.device == *device)
                    .map(|e| e.bytes)
                    .sum(),
                // autocast's cleared cache was freed: counted in `freed`, not alive.
                held: held
                    .iter()
                    .filter(|h| h.device == *device && h.by != HeldBy::AutocastCache)
                    .map(|h| h.bytes)
                    .sum(),
                cache_released: released
                    .per_device
                    .iter()
                    .find(|(d, _)| d == device)
                    .map_or(0, |(_, b)| *b),
            })
            .collect();
        // What the scope was charged for and did not judge: another scope's (see
        // `HeldBy::OtherScope`), where work carried in through a handle ran; otherwise its
        // own blocks that another thread freed while it was ending, too late to be counted:
        // freed.
        let carried = self.frame.noted(ledger::CARRIED);
        let (mut others, mut freed_late) = (Vec::new(), 0);
        for d in &mut devices {
            let judged = d.freed + d.kept + d.escaped + d.held;
            if let (Some(device), true) = (d.device, d.allocated > judged) {
                let bytes = d.allocated - judged;
                if !carried {
                    d.freed += bytes;
                    freed_late += bytes;
                    continue;
                }
                others.push(other_scope(
                    closed,
                    device,
                    d.allocations,
                    bytes,
                    &escaped,
                    &held,
                ));
                d.held += bytes;
            }
        }
        if !others.is_empty() {
            held.append(&mut others);
            held.sort_by_key(|h| (h.by, h.device));
        }
        // A device the scope did not use whose cache the release emptied too.
        for (device, bytes) in &released.per_device {
            if !devices.iter().any(|d| d.device == Some(*device)) {
                devices.push(DeviceReport {
                    device: Some(*device),
                    cache_released: *bytes,
                    ..DeviceReport::default()
                });
            }
        }
        devices.sort_by_key(|d| d.device);
        let total = &closed.stats.total;
        ScopeReport {
            name: self.opts.name.clone(),
            location: self.opts.location,
            devices,
            allocations: total.allocations,
            allocated: total.allocated,
            requested: total.requested,
            freed: total.freed + freed_late,
            peak: total.peak,
            kept: closed.kept.total.live,
            escaped_bytes: escaped.iter().map(|e| e.bytes).sum(),
            escaped_requested: escaped.iter().map(|e| e.requested.unwrap_or(e.bytes)).sum(),
            escaped,
            held,
            opaque_kept: kept.opaque.clone(),
            lending_args: kept.lending.clone(),
            uninspected_kept: uninspected,
            untracked,
            cache_released: released.per_device.iter().map(|(_, b)| b).sum(),
            released: released.ran,
            max_peak: self.opts.max_peak,
            checked,
            ended_inside: Vec::new(),
            attributed: self.attributed,
            backward: closed.backward,
            escaped_without_grad,
            cancelled: self.cancelled,
            started: self.started.saturating_duration_since(*EPOCH),
            elapsed: self.started.elapsed(),
        }
    }
}

/// Of the frames around an async scope where it finishes (innermost first), those that were
/// also open where it was made (its first poll), and all above them.
fn made_and_finished_in(finished_in: Option<Chain>, made_in: Option<&Chain>) -> Option<Chain> {
    let (finished_in, made_in) = (finished_in?, made_in?);
    let at = finished_in
        .iter()
        .position(|f| made_in.iter().any(|m| Arc::ptr_eq(f, m)))?;
    Some(match at {
        0 => finished_in,
        at => finished_in[at..].into(),
    })
}

/// Scopes opened inside `frame` and still open end first, unchecked, into it (innermost
/// first, each into the next); where the scopes they ended in turn were opened goes to `ended`.
/// `hand_up`: `frame`'s level, below work carried in that stays (see `thread::hand_mode_up`).
#[cold]
#[inline(never)]
fn close_inner(
    frame: &Arc<Frame>,
    above: &[Arc<Frame>],
    enclosing: Option<&Chain>,
    hand_up: Option<Token>,
    ended: &mut Vec<&'static std::panic::Location<'static>>,
) {
    let mut chain: Vec<Arc<Frame>> = enclosing.iter().flat_map(|c| c.iter().cloned()).collect();
    chain.insert(0, frame.clone());
    for inner in above.iter().rev() {
        chain.insert(0, inner.clone());
    }
    for _ in 0..above.len() {
        let inner = chain.remove(0);
        // Each gives back the autograd mode it found, as its own exit would have (the
        // outermost's last).
        if let (Some(previous), Some(at)) = (inner.take_grad(), inner.location()) {
            give_back_mode(previous, at, hand_up);
        }
        ended.extend(ledger::end_unchecked(&inner, &Arc::from(chain.clone())));
    }
}

/// Gives the thread back `previous`, the autograd mode the scope opened at `at` found; with
/// work carried in above the level `hand_up` that stays, hands it to that work instead, which
/// gives it back when it leaves (`thread::hand_mode_up`).
fn give_back_mode(previous: i32, at: grad::Place, hand_up: Option<Token>) {
    if hand_up.is_some_and(|t| thread::hand_mode_up(t, previous)) {
        grad::forget(at)
    } else {
        grad::restore(previous, at)
    }
}

/// The escaped allocations, largest first.
#[cold]
#[inline(never)]
fn escapes(closed: Vec<(ledger::Key, ledger::Entry)>) -> Vec<Escape> {
    let mut escaped: Vec<Escape> = closed
        .into_iter()
        .map(|((address, device), e)| {
            let about = e.about.map(|a| *a).unwrap_or_default();
            Escape {
                bytes: e.bytes,
                requested: (e.requested > 0).then_some(e.requested),
                device,
                address,
                operator: about.op,
                shape: about.tensor.as_ref().map(|(s, _)| s.to_vec()),
                dtype: about.tensor.as_ref().map(|(_, d)| *d),
                backtrace: about.backtrace.map(crate::trace::format),
            }
        })
        .collect();
    escaped.sort_unstable_by_key(|e| (std::cmp::Reverse(e.bytes), e.address));
    escaped
}

/// The line for `bytes` that `device`'s row of a report was charged for and did not judge:
/// allocations another scope owns (work carried in through its handle while this scope was
/// open on the thread that ran it), which that scope judges.
#[cold]
#[inline(never)]
fn other_scope(
    closed: &Closed,
    device: DeviceId,
    allocations: u64,
    bytes: u64,
    escaped: &[Escape],
    held: &[Held],
) -> Held {
    let on = |d: DeviceId| d == device;
    let counted = |stats: &ledger::Stats, f: fn(&ledger::Counters) -> u64| {
        stats
            .devices
            .iter()
            .find(|(d, _)| on(*d))
            .map_or(0, |(_, c)| f(c))
    };
    let judged = counted(&closed.stats, |c| c.frees)
        + counted(&closed.kept, |c| c.allocations)
        + escaped.iter().filter(|e| on(e.device)).count() as u64
        + (held.iter())
            .filter(|h| on(h.device) && h.by != HeldBy::AutocastCache)
            .map(|h| h.count)
            .sum::<u64>();
    Held {
        by: HeldBy::OtherScope,
        device,
        bytes,
        count: allocations.saturating_sub(judged),
    }
}

/// Sums the held allocations by what holds them and by device.
#[inline(never)]
fn group_held(held: &[ledger::HeldLine]) -> Vec<Held> {
    let mut groups: Vec<Held> = Vec::new();
    for &(by, device, bytes, count) in held {
        match groups.iter_mut().find(|h| h.by == by && h.device == device) {
            Some(h) => {
                h.bytes += bytes;
                h.count += count;
            }
            None => groups.push(Held {
                by,
                device,
                bytes,
                count,
            }),
        }
    }
    groups.sort_by_key(|h| (h.by, h.device));
    groups
}

impl Drop for OpenScope {
    fn drop(&mut self) {
        if !self.closed {
            self.end_unclosed();
        }
        Frame::recycle(&mut self.frame);
    }
}

impl OpenScope {
    /// Ends a scope dropped without a close: a panic, an early return, a cancelled future.
    fn end_unclosed(&mut self) {
        if !thread::alive() {
            // The thread itself ends (a scope kept in a thread-local) and its state has ended
            // the scope's levels already. Off every stack (an async scope kept in a
            // thread-local): its frame ends, into where it was last polled, with nothing that
            // calls into libtorch, whose own thread state may be gone.
            ledger::close(&self.frame, self.polled_in.as_ref(), &KeepAll);
        } else if self.judged_by_nobody() && !self.panicked && !std::thread::panicking() {
            // A cancelled future that no open scope takes in: checked here, with nothing
            // handed back. A drop cannot return an error: `error` warns.
            self.cancelled = true;
            let report = self.close(&StorageSet::new(), true);
            let policy = match self.opts.policy() {
                EscapePolicy::Error => EscapePolicy::Warn,
                policy => policy,
            };
            let _ = policy::act(policy, report);
        } else {
            // Ended without a check, into the scopes around it, which judge what it left.
            drop(self.close(&StorageSet::new(), false));
        }
    }

    /// An async scope off every stack (a cancelled future) whose last poll's scopes have all
    /// ended, or that ran in none: ended unchecked, what it left alive would go to nobody.
    fn judged_by_nobody(&self) -> bool {
        self.suspended
            && self.placed.is_none()
            && self
                .polled_in
                .as_ref()
                .and_then(ledger::open_chain)
                .is_none()
    }
}
