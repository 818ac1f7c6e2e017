//! Generated locals: prefixed `__gpu_scope_`, with mixed-site hygiene, so that the user's code
//! can neither name them nor be shadowed by them.
use proc_macro2::{Ident, Span};

pub(crate) const RET: &str = "__gpu_scope_ret";
pub(crate) const EXIT: &str = "__gpu_scope_exit";
pub(crate) const KEPT: &str = "__gpu_scope_kept";
pub(crate) const ERROR: &str = "__gpu_scope_error";
pub(crate) const SELF: &str = "__gpu_scope_self";
pub(crate) const SHARED: &str = "__gpu_scope_shared";
pub(crate) const COPY: &str = "__gpu_scope_copy";
pub(crate) const VALUE: &str = "__gpu_scope_value";
pub(crate) const RESULT: &str = "__gpu_scope_result";
pub(crate) const ARG: &str = "__gpu_scope_arg";

/// Generated code's span: mixed-site hygiene, shown at `at` in diagnostics.
pub(crate) fn at(at: Span) -> Span {
    Span::mixed_site().located_at(at)
}

/// A generated local, shown at `at` in diagnostics.
pub(crate) fn local(name: &str, at: Span) -> Ident {
    Ident::new(name, self::at(at))
}

/// The `n`th generated argument binding (`__gpu_scope_argN`): an argument bound whole under a
/// name of its own, or moved into the body under one.
pub(crate) fn arg(n: usize) -> Ident {
    quote::format_ident!("{}{}", ARG, n, span = Span::mixed_site())
}
