//! Scopes around futures: the frame is re-entered on every poll, on whichever thread polls.
use crate::ledger::{self, FrameId};
use crate::options::ScopeOptions;
use crate::report::ScopeReport;
use crate::scope::{grad_guard, Open};
use crate::tensors::{StorageSet, Tensors};
use crate::{thread, Error};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// A frame that is not on any thread right now.
#[derive(Debug)]
struct Parked {
    frame: FrameId,
    opts: ScopeOptions,
    started: Instant,
}

impl Parked {
    fn open(opts: ScopeOptions) -> Result<Parked, Error> {
        let open = Open::new(opts)?;
        let parked = Parked {
            frame: open.frame,
            opts: open.opts.clone(),
            started: open.started,
        };
        ledger::suspend(open.owner, open.frame);
        drop(open.grad);
        thread::detach();
        Ok(parked)
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        // Cancelled, or finished without `exit`: end without a check.
        ledger::close(0, self.frame, &Default::default(), false, false);
    }
}

/// Runs a future inside a scope. Its output comes with a [`Finish`] that checks the scope.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ScopeFuture<F> {
    inner: Pin<Box<F>>,
    parked: Option<Parked>,
}

impl<F: Future> ScopeFuture<F> {
    /// Wraps `inner` in a scope opened now (and checked by [`Finish::exit`]).
    pub fn new(opts: ScopeOptions, inner: F) -> Result<Self, Error> {
        Ok(ScopeFuture {
            inner: Box::pin(inner),
            parked: Some(Parked::open(opts)?),
        })
    }
}

/// Takes the frame off the polling thread again, even if the poll panics.
struct Resumed {
    owner: u64,
    frame: FrameId,
}

impl Drop for Resumed {
    fn drop(&mut self) {
        ledger::suspend(self.owner, self.frame);
        thread::detach();
    }
}

impl<F: Future> Future for ScopeFuture<F> {
    type Output = (F::Output, Finish);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let parked = this
            .parked
            .as_ref()
            .expect("ScopeFuture polled after completion");
        let resumed = thread::attach().ok().map(|owner| Resumed {
            owner,
            frame: ledger::open(owner, Some(parked.frame)),
        });
        let grad = grad_guard(&parked.opts);
        let poll = this.inner.as_mut().poll(cx);
        drop(grad);
        drop(resumed);
        match poll {
            Poll::Ready(value) => Poll::Ready((
                value,
                Finish {
                    parked: this.parked.take(),
                },
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The end of a future's scope: check it with what the future handed back.
#[derive(Debug)]
pub struct Finish {
    parked: Option<Parked>,
}

impl Finish {
    /// Checks the scope on this thread; see [`Scope::exit`](crate::Scope::exit).
    pub fn exit<T: Tensors + ?Sized>(self, kept: &T) -> Result<ScopeReport, Error> {
        let mut set = StorageSet::new();
        kept.visit(&mut set);
        self.exit_with(set)
    }

    /// Like [`Finish::exit`], with the kept storages already collected.
    pub fn exit_with(mut self, kept: StorageSet) -> Result<ScopeReport, Error> {
        let parked = self.parked.take().expect("finished once");
        let owner = thread::attach()?;
        let frame = ledger::open(owner, Some(parked.frame));
        let open = Open {
            frame,
            owner,
            opts: parked.opts.clone(),
            started: parked.started,
            grad: None,
        };
        std::mem::forget(parked);
        open.finish(kept)
    }
}
