#![doc = include_str!("../README.md")]

pub use gpu_scope_macros::{gpu_scope, scope, Tensors};
pub use gpu_scope_runtime::{
    empty_cache, human_bytes, keep, last_report, memory_stats, operator_attribution, reset_peak,
    scope, set_operator_attribution, DeviceId, Error, Escape, EscapePolicy, Finish, MemoryStats,
    ReleasePolicy, Scope, ScopeFuture, ScopeOptions, ScopeReport, StorageSet, Tensors,
    ESCAPE_POLICY_ENV, OPERATORS_ENV,
};

/// Everything generated code needs, under paths the user cannot shadow. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use gpu_scope_runtime::__private::*;
    pub use gpu_scope_runtime::{
        EscapePolicy, Finish, ReleasePolicy, Scope, ScopeFuture, ScopeOptions, StorageSet, Tensors,
    };
}
