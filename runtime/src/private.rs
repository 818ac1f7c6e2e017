//! Support for generated code (re-exported under `gpu_scope::__private`). Not public API.
use crate::{Error, StorageSet, Tensors};

/// A value handed back by a scope, wrapped for autoref specialisation.
#[allow(missing_debug_implementations)]
pub struct Root<'a, T: ?Sized>(pub &'a T);

/// Chosen when the value implements [`Tensors`].
pub trait ViaTensors {
    fn __gpu_scope_visit(&self, set: &mut StorageSet);
}

impl<T: Tensors + ?Sized> ViaTensors for Root<'_, T> {
    fn __gpu_scope_visit(&self, set: &mut StorageSet) {
        self.0.visit(set)
    }
}

/// Chosen otherwise: the value is taken to hold no tensors, and the report names its type.
pub trait ViaOpaque {
    fn __gpu_scope_visit(&self, set: &mut StorageSet);
}

impl<T: ?Sized> ViaOpaque for &Root<'_, T> {
    fn __gpu_scope_visit(&self, set: &mut StorageSet) {
        set.add_opaque(std::any::type_name::<T>())
    }
}

/// A return type that `on_escape = error` can turn an escape into.
#[diagnostic::on_unimplemented(
    message = "`on_escape = error` needs the function to return `Result<_, E>` with `E: From<gpu_scope::Error>`, not `{Self}`",
    label = "this return type cannot carry a `gpu_scope::Error`",
    note = "implement `From<gpu_scope::Error>` for the error type, return `Result<_, gpu_scope::Error>`, or choose `on_escape = panic | warn | ignore`"
)]
pub trait EscapeResult {
    fn from_error(error: Error) -> Self;
}

impl<T, E: From<Error>> EscapeResult for Result<T, E> {
    fn from_error(error: Error) -> Self {
        Err(E::from(error))
    }
}

/// A snapshot of gpu-scope's own bookkeeping, for tests that check it stays consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerState {
    /// Scopes open on this thread.
    pub depth: usize,
    /// Tracked allocations, on all threads.
    pub entries: usize,
    /// Open scopes, on all threads (suspended async scopes included).
    pub frames: usize,
    /// Threads with an open scope.
    pub threads: usize,
    /// CPU blocks whose deleter gpu-scope wrapped and that are still alive.
    pub wrapped: usize,
}

pub fn ledger_state() -> LedgerState {
    let (entries, frames, threads, wrapped) = crate::ledger::counts();
    LedgerState {
        depth: crate::thread::depth(),
        entries,
        frames,
        threads,
        wrapped,
    }
}
