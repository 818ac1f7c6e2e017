//! Support for generated code, re-exported as `gpu_scope::__private`. Not public API: the
//! macros' expansions call only what is here.
use crate::lifecycle::OpenScope;
use crate::options::ScopeOptions;
use crate::tensors::{StorageSet, Tensors};
use crate::{policy, Error};

pub use crate::future::{Finish, ScopeFuture};
pub use crate::options::{EscapePolicy, ReleasePolicy};
pub use crate::tensors::StorageSet as Storages;

/// The scope of `#[gpu_scope]` and `scope!`. It decides, from the scope's options, what a
/// failure to enter and an escape do; generated code only routes the `Err` of the `try_`
/// calls, which only `on_escape = error` returns.
#[derive(Debug)]
pub struct Guard {
    scope: Option<OpenScope>,
}

impl Guard {
    /// Enters; if that fails, panics or warns (per the policy) and runs the code unscoped.
    pub fn enter(opts: ScopeOptions) -> Guard {
        match OpenScope::enter(opts.clone()) {
            Ok(scope) => Guard { scope: Some(scope) },
            Err(e) => {
                let _ = policy::entry_failed(&opts, e);
                Guard { scope: None }
            }
        }
    }

    /// Enters; `Err` if that fails under `on_escape = error`.
    pub fn try_enter(opts: ScopeOptions) -> Result<Guard, Error> {
        match OpenScope::enter(opts.clone()) {
            Ok(scope) => Ok(Guard { scope: Some(scope) }),
            Err(e) => policy::entry_failed(&opts, e).map(|()| Guard { scope: None }),
        }
    }

    /// Checks the scope and applies its escape policy (panic, warn, ignore).
    pub fn exit(self, kept: StorageSet) {
        let _ = self.try_exit(kept);
    }

    /// Checks the scope; `Err` on an escape under `on_escape = error`.
    pub fn try_exit(mut self, kept: StorageSet) -> Result<(), Error> {
        match self.scope.take() {
            Some(scope) => scope.finish(kept).map(drop),
            None => Ok(()),
        }
    }
}

/// A value handed back by a scope, wrapped for autoref specialisation: arguments of a type
/// without [`Tensors`] are skipped (and named in the report) instead of refused.
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

/// Adds a value that a scope hands back (a return value, a block value, a `keep` entry) to
/// `set`; its type must implement [`Tensors`].
pub fn keep<T: Tensors + ?Sized>(set: &mut StorageSet, value: &T) {
    value.visit(set)
}

/// A return type that `on_escape = error` can turn an escape into.
#[diagnostic::on_unimplemented(
    message = "`on_escape = error` needs the function to return `Result<_, E>` with `E: From<gpu_scope::Error>`, not `{Self}`",
    label = "this return type cannot carry a `gpu_scope::Error`",
    note = "return `Result<_, gpu_scope::Error>`, implement `From<gpu_scope::Error>` for the error type, or choose `on_escape = panic | warn | ignore`"
)]
pub trait EscapeResult {
    fn from_escape(error: Error) -> Self;
}

#[diagnostic::do_not_recommend]
impl<T, E: From<Error>> EscapeResult for Result<T, E> {
    fn from_escape(error: Error) -> Self {
        Err(E::from(error))
    }
}
