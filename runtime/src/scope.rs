//! The RAII scope guard, its closure form, and `keep`.
use crate::lifecycle::OpenScope;
use crate::options::ScopeOptions;
use crate::report::ScopeReport;
use crate::tensors::{StorageSet, Tensors};
use crate::{ledger, thread, Error};
use std::marker::PhantomData;

/// An open scope on this thread. Leave it with [`Scope::exit`]; dropping it instead (a panic,
/// an early return) ends it without a check and hands its live allocations to the enclosing
/// scope (its release policy still applies). Not `Send`: a scope belongs to the thread that opened it (carry it to other threads
/// with [`current`](crate::current) and [`ScopeHandle`](crate::ScopeHandle)).
#[must_use = "a scope is checked when you call `exit`; dropping it skips the check"]
#[derive(Debug)]
pub struct Scope {
    open: OpenScope,
    _not_send: PhantomData<*const ScopeStaysOnItsThreadUseGpuScopeCurrent>,
}

/// Makes [`Scope`] not `Send`, with a name that says what to do in the compiler's error when a
/// scope is moved to another thread ("`*const ScopeStaysOnItsThreadUseGpuScopeCurrent` cannot
/// be sent between threads safely"): carry it with [`current`](crate::current).
#[derive(Debug)]
enum ScopeStaysOnItsThreadUseGpuScopeCurrent {}

/// The same for a `scope!` block's guard, when the block stays open across an `.await` it
/// could not see (one a macro makes): make the async code a `#[gpu_scope] async fn`.
#[derive(Debug)]
pub(crate) enum ScopeBlockOpenAcrossAwaitUseGpuScopeAsyncFn {}

impl Scope {
    /// Opens a scope on this thread. Fails if the options name a device that does not exist
    /// or a negative `max_peak` (an expression given to the macros), if the scope would be
    /// nested deeper than gpu-scope tracks ([`Error::TooDeep`]), or if the thread is ending
    /// ([`Error::ThreadEnding`]).
    pub fn enter(opts: ScopeOptions) -> Result<Scope, Error> {
        Ok(Scope {
            open: OpenScope::enter(opts)?,
            _not_send: PhantomData,
        })
    }

    /// Marks a value as kept: the storages it has now may outlive this scope (into the
    /// enclosing one), those made in a scope opened inside this one on this thread and still
    /// open included (they may outlive that scope too; not those an async scope or carried
    /// work owns). The state a kept optimizer's step makes in this scope is held on purpose,
    /// as for an optimizer handed back (see the README's Training steps). A value that cannot
    /// be looked into (a lock held elsewhere) is named in the report as not inspected, and
    /// memory nothing keeps is then `not inspected`, not escaped, as for one handed back.
    pub fn keep<T: Tensors + ?Sized>(&self, value: &T) {
        self.open.mark(&storages(value));
    }

    /// Ends the scope: everything still alive that `kept` does not own has escaped. Returns
    /// the report, or applies the escape policy (panic, warn, or `Err` for `error`). Exiting a
    /// scope after its enclosing scope ended is [`Error::EndedByEnclosing`].
    #[track_caller]
    pub fn exit<T: Tensors + ?Sized>(self, kept: &T) -> Result<ScopeReport, Error> {
        self.exit_with(storages(kept))
    }

    /// Like [`Scope::exit`], with the kept storages already collected.
    #[inline]
    #[track_caller]
    pub fn exit_with(mut self, kept: StorageSet) -> Result<ScopeReport, Error> {
        self.open.finish(&kept, false)
    }

    /// Ends the scope without a check, handing its live allocations to the enclosing scope.
    pub fn abandon(mut self) -> ScopeReport {
        self.open.close(&StorageSet::new(), false)
    }
}

fn storages<T: Tensors + ?Sized>(value: &T) -> StorageSet {
    let mut set = StorageSet::new();
    value.visit(&mut set);
    set
}

/// Runs `body` in a scope and checks what it leaves behind; its result is kept.
#[track_caller]
pub fn scope<R: Tensors>(
    opts: ScopeOptions,
    body: impl FnOnce() -> R,
) -> Result<(R, ScopeReport), Error> {
    let scope = Scope::enter(opts)?;
    let value = body();
    let report = scope.exit(&value)?;
    Ok((value, report))
}

/// Lets `value` outlive the innermost scope of this thread on purpose: it is handed to the
/// enclosing scope, which checks it in turn. What it keeps are the storages `value` has at the
/// call (a tensor resized or a container grown afterwards has storages it does not cover: keep
/// it after the last change, or hand it back); the state a kept optimizer's step makes in
/// the scope is held on purpose. A value that cannot be looked into is reported as not
/// inspected, as by [`Scope::keep`]. Outside scopes it does nothing. See
/// [`keep_forever`] for memory that should leave every scope.
pub fn keep<T: Tensors + ?Sized>(value: &T) {
    if let Some(chain) = thread::chain() {
        chain[0].mark(&storages(value), &[], &chain[1..]);
    }
}

/// Takes `value`'s storages out of every scope for good: neither this scope nor any enclosing
/// one will check them (a library's deliberate cache; TensorFlow.js's `tf.keep`). The reports
/// of the open scopes that count a storage among their allocations (the one that made it and
/// those around that one) show its bytes as held, `kept forever`
/// ([`HeldBy::KeptForever`](crate::HeldBy::KeptForever)); a scope opened after it was made
/// never counted it, so its report does not. Memory allocated after this call is
/// tracked as usual. What a value that cannot be looked into (a lock held elsewhere) holds
/// stays tracked: the scopes open here name the value as not inspected and do not call what
/// nothing keeps escaped.
pub fn keep_forever<T: Tensors + ?Sized>(value: &T) {
    let kept = storages(value);
    // What could not be looked into stays tracked: the scopes open here do not call it
    // escaped.
    for frame in thread::chain().iter().flat_map(|c| c.iter()) {
        frame.note_blind(&kept);
    }
    ledger::untrack(kept.keys.iter().copied());
}
