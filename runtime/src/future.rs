//! Scopes around futures: the scope is put on the polling thread for each poll, on whichever
//! thread polls, and taken off after. Used by `#[gpu_scope] async fn`.
use crate::lifecycle::OpenScope;
use crate::options::ScopeOptions;
use crate::tensors::StorageSet;
use crate::{policy, Error};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Runs a future inside a scope. Its output comes with a [`Finish`] that checks the scope;
/// dropped before that (cancelled), the scope ends without a check into the scopes its last
/// poll ran in, or, when none of them is open, is checked with nothing handed back (the
/// policy `error` warning). Dropped after a poll that panicked, or while a panic unwinds, it
/// is not cancelled: its scope ends unchecked, as at a panic.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ScopeFuture<F> {
    inner: Pin<Box<F>>,
    scope: Option<OpenScope>,
}

impl<F: Future> ScopeFuture<F> {
    /// Wraps `inner` in a scope opened now. If it cannot be opened, the escape policy decides
    /// (panic, or a warning and an unscoped future).
    #[track_caller]
    pub fn enter(opts: ScopeOptions, inner: F) -> Self {
        match Self::open(opts, inner) {
            Ok(future) => future,
            Err((opts, inner, e)) => {
                let _ = policy::bad_input(&opts, e);
                ScopeFuture {
                    inner: Box::pin(inner),
                    scope: None,
                }
            }
        }
    }

    /// Like [`ScopeFuture::enter`], returning the error under `on_escape = error`.
    #[track_caller]
    pub fn try_enter(opts: ScopeOptions, inner: F) -> Result<Self, Error> {
        match Self::open(opts, inner) {
            Ok(future) => Ok(future),
            Err((opts, inner, e)) => {
                policy::bad_input(&opts, e)?;
                Ok(ScopeFuture {
                    inner: Box::pin(inner),
                    scope: None,
                })
            }
        }
    }

    #[allow(clippy::result_large_err)]
    fn open(opts: ScopeOptions, inner: F) -> Result<Self, (ScopeOptions, F, Error)> {
        match OpenScope::enter(opts.clone()) {
            Ok(mut scope) => {
                scope.suspend();
                Ok(ScopeFuture {
                    inner: Box::pin(inner),
                    scope: Some(scope),
                })
            }
            Err(e) => Err((opts, inner, e)),
        }
    }
}

/// Takes the scope off the polling thread again, even if the poll panics (then `returned` is
/// still false).
struct Polling<'a> {
    scope: &'a mut OpenScope,
    returned: bool,
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        match self.returned {
            true => self.scope.suspend(),
            false => self.scope.suspend_panicked(),
        }
    }
}

impl<F: Future> Future for ScopeFuture<F> {
    type Output = (F::Output, Finish);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut polling = match this.scope.as_mut() {
            Some(scope) => scope.resume().is_ok().then_some(Polling {
                scope,
                returned: false,
            }),
            None => None,
        };
        let poll = this.inner.as_mut().poll(cx);
        if let Some(polling) = &mut polling {
            polling.returned = true;
        }
        drop(polling);
        poll.map(|value| {
            (
                value,
                Finish {
                    scope: this.scope.take(),
                },
            )
        })
    }
}

/// The end of a future's scope: check it with what the future handed back. Dropped by a
/// panic instead (one between the future's end and the check, such as in a
/// `Tensors::visit`), the scope ends unchecked where the panic is, as a [`Scope`](crate::Scope)
/// does: it is not taken for a cancelled future (checked where no scope takes it in). Dropped
/// otherwise, it ends as a cancelled future does.
#[derive(Debug)]
pub struct Finish {
    scope: Option<OpenScope>,
}

impl Drop for Finish {
    fn drop(&mut self) {
        if let (Some(mut scope), true) = (self.scope.take(), std::thread::panicking()) {
            // On this thread's stack, it ends into the scopes open here (or into none).
            let _ = scope.resume();
        }
    }
}

impl Finish {
    /// Checks the scope on this thread and applies the escape policy (not `error`).
    #[track_caller]
    pub fn exit(self, kept: StorageSet) {
        let _ = self.try_exit(kept);
    }

    /// Checks the scope on this thread; `Err` under `on_escape = error`.
    #[track_caller]
    pub fn try_exit(mut self, kept: StorageSet) -> Result<(), Error> {
        let Some(mut scope) = self.scope.take() else {
            return Ok(());
        };
        // Where it cannot be put on this thread (a thread-local's destructor, scopes nested too
        // deep), the future's last poll ran unscoped: it ends off every stack, into the scopes
        // of its last placement, and its report says "not tracked" (the output is not lost).
        let _ = scope.resume();
        scope.finish(&kept, true).map(drop)
    }
}
