#![doc = include_str!("../README.md")]

pub use gpu_scope_macros::{gpu_scope, scope, Tensors};
pub use gpu_scope_runtime::{
    clear_workspaces, current, device_info, empty_cache, keep, keep_forever, last_report,
    memory_stats, operator_attribution, reset_peak, scope, set_operator_attribution, Bytes,
    Carried, DeviceId, DeviceInfo, DeviceReport, Error, Escape, EscapePolicy, Held, HeldBy,
    MemoryStats, ReleasePolicy, Scope, ScopeHandle, ScopeOptions, ScopeReport, StorageSet, Tensors,
    Untracked, BACKTRACE_ENV, ESCAPE_POLICY_ENV, OPERATORS_ENV,
};

/// Everything generated code needs, under paths the user cannot shadow. Not public API.
#[doc(hidden)]
pub use gpu_scope_runtime::__private;

/// gpu-scope's own bookkeeping, for its tests. Not public API.
#[doc(hidden)]
pub use gpu_scope_runtime::__introspect;
