//! Carrying a scope to other threads and tasks, the way `tracing` carries a span: allocations
//! made there while the handle is entered are charged to the scope (frees are seen on every
//! thread anyway).
use crate::ledger::{Chain, MISSED};
use crate::thread::{self, Token};
use crate::{ffi, grad, sites};
use std::ffi::c_int;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A handle on an open scope, to run work for it on another thread or task. Cheap to clone;
/// `Send` and `Sync`. Once the scope has ended, work run through the handle is charged to the
/// scope it ended inside (which took over its allocations), or, once that one has ended too,
/// to the innermost scope still open among those around it; with none open, to nothing (the
/// scopes open where it runs still see that work).
#[derive(Clone, Debug)]
pub struct ScopeHandle {
    /// The scope's frame and the frames it is open in (charged with its work too).
    chain: Chain,
    /// The autograd mode where the handle was taken: carried work runs with it.
    grad: c_int,
    /// Where the scopes that turned autograd off there were opened, for the hint that names
    /// `keep_grad` when carried work panics for want of it.
    off: Option<Arc<[grad::Place]>>,
}

/// The innermost scope open on this thread, as a handle to carry elsewhere.
///
/// ```no_run
/// # use gpu_scope_runtime as gpu_scope;
/// # fn work() {}
/// let scope = gpu_scope::current().expect("called inside a scope");
/// std::thread::spawn(move || scope.in_scope(work)).join().unwrap();
/// ```
pub fn current() -> Option<ScopeHandle> {
    thread::innermost().map(|chain| ScopeHandle {
        chain,
        grad: grad::mode(),
        off: grad::places_off(),
    })
}

/// Takes a carried scope off the thread again and gives the thread back its autograd mode
/// (if the scope set one), even if the work panics.
struct Entered {
    token: Option<Token>,
    grad: Option<c_int>,
    /// How many places of scopes that turned autograd off the handle added to the thread's
    /// list.
    off: Option<usize>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut handed = None;
        if let Some(token) = self.token {
            // Casts that autocast cached for the work would outlive the scope: the cache is
            // cleared here (it is the process's, as at a scope's own exit), where autocast is on.
            ffi::autocast_clear();
            handed = thread::pop(token);
        }
        if let Some(added) = self.off {
            grad::uncarry(added);
        }
        // The mode of a scope of this thread that the work exited is the thread's own.
        if let Some(previous) = handed.or(self.grad) {
            grad::set(previous);
        }
    }
}

impl ScopeHandle {
    /// Runs `f` on this thread as part of the scope: what it allocates (and what libtorch's
    /// worker threads allocate for it) is charged to the scope; scopes opened inside nest in
    /// it. While the scope is open, `f` runs with the autograd mode of the place that called
    /// [`current`] (off in a scope without `keep_grad`), as libtorch's own tasks inherit it
    /// (call `tch::with_grad` inside `f` to change it), and the thread gets its own mode back
    /// when `f` returns; once the scope has ended, the thread's mode is left as it is.
    /// Operators are attributed as in the scope itself. Inside an autocast region, autocast's
    /// cache (libtorch keeps one for the process) is cleared when `f` returns, so that the
    /// casts `f` cached do not outlive the scope.
    pub fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let _entered = self.enter(None);
        let result = f();
        // The scope may end as soon as this returns: the tasks `f` launched (TorchScript's
        // `fork`) let go of what they hold first, as at a scope's own end.
        ffi::await_inherited();
        result
    }

    /// Puts the scope on this thread, with autograd in the mode of work that `carried` ran
    /// with before (a future between polls) or else, while the scope is open, the handle's.
    fn enter(&self, carried: Option<c_int>) -> Entered {
        let chain = self.open();
        let own = chain
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(&c[0], &self.chain[0]));
        let token = chain.and_then(|chain| {
            let operators = chain[0].location().is_some_and(sites::attributed);
            let pushed = thread::push_carried(chain.clone(), operators);
            // Not seen by the scope, nor by those it is open in: their reports say so.
            pushed
                .inspect_err(|_| chain.iter().for_each(|f| f.note(MISSED)))
                .ok()
        });
        let mode = carried.or(own.then_some(self.grad));
        // Autograd off as the scope turned it off: panics for want of it name those scopes.
        let off = match (&self.off, mode) {
            (Some(places), Some(0)) => grad::carry(places),
            _ => None,
        };
        Entered {
            token,
            grad: mode.map(grad::set),
            off,
        }
    }

    /// The scope and those it is open in; once it has ended, the scope it ended inside (with
    /// those around it, when it is one of them).
    fn open(&self) -> Option<Chain> {
        let frame = self.chain[0].open_successor()?;
        Some(
            match self.chain.iter().position(|f| Arc::ptr_eq(f, &frame)) {
                Some(0) => self.chain.clone(),
                Some(at) => Arc::from(&self.chain[at..]),
                None => Arc::from([frame]),
            },
        )
    }

    /// Wraps a future so that each of its polls runs [`in_scope`](Self::in_scope). Once a
    /// poll ran with the scope's autograd mode, the next starts with the mode the last one
    /// ended with, after the scope ended too: a task keeps its thread-local state.
    pub fn instrument<F: Future>(&self, future: F) -> Carried<F> {
        Carried {
            inner: Some(Box::pin(future)),
            scope: self.clone(),
            grad: None,
        }
    }

    /// Whether the scope is still open.
    pub fn is_open(&self) -> bool {
        self.chain[0].is_open()
    }
}

/// A future carried into a scope by [`ScopeHandle::instrument`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct Carried<F> {
    /// `None` only while it is dropped.
    inner: Option<Pin<Box<F>>>,
    scope: ScopeHandle,
    /// The autograd mode its last poll ended with, once a poll ran with one (the handle's,
    /// while the scope was open): the next poll starts with it, whether the scope is open
    /// or not, as a task keeps its own thread-local state between polls.
    grad: Option<c_int>,
}

impl<F: Future> Future for Carried<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let inner = this.inner.as_mut().expect("polled after it was dropped");
        let entered = this.scope.enter(this.grad);
        let poll = inner.as_mut().poll(cx);
        if entered.grad.is_some() {
            this.grad = Some(grad::mode());
        }
        poll
    }
}

impl<F> Drop for Carried<F> {
    fn drop(&mut self) {
        // Dropped in the scope too: a cancelled async scope inside hands what it leaves
        // behind to the scope it was carried into, not to nothing.
        if let Some(inner) = self.inner.take() {
            let _entered = self.scope.enter(self.grad);
            drop(inner);
        }
    }
}
