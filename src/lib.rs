#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
// The README shows `#[test]` functions (left out of doctests; tests/test_suites.rs runs them).
#![allow(clippy::test_attr_in_doctest)]

// The macros carry their own docs (`macros/doc/`). Their examples run here, where
// `gpu_scope` and libtorch exist; under `cfg(doctest)` only, so the published crate does not
// need the files.
pub use gpu_scope_macros::{gpu_scope, scope, Tensors};

#[cfg(doctest)]
#[doc = include_str!("../macros/doc/gpu_scope.md")]
struct GpuScopeExamples;

#[cfg(doctest)]
#[doc = include_str!("../macros/doc/scope.md")]
struct ScopeExamples;

#[cfg(doctest)]
#[doc = include_str!("../macros/doc/tensors.md")]
struct TensorsExamples;

pub use gpu_scope_runtime::{
    attribution, clear_workspaces, current, device_info, empty_cache, keep, keep_forever,
    last_report, memory_stats, operator_attribution, reset_peak, scope, set_attribution,
    set_operator_attribution, versions, Attribution, Bytes, Carried, DeviceId, DeviceInfo,
    DeviceReport, Error, Escape, EscapePolicy, Held, HeldBy, MemoryStats, ReleasePolicy, Scope,
    ScopeHandle, ScopeOptions, ScopeReport, StorageSet, Tensors, Untracked, Versions,
    BACKTRACE_ENV, ESCAPE_POLICY_ENV, OPERATORS_ENV,
};

/// Everything generated code needs, under paths the user cannot shadow. Not public API.
#[doc(hidden)]
pub use gpu_scope_runtime::__private;

// What the compiler names when the macros' input is wrong (an option's type, a return type, a
// value held across an `.await`): named here, rustc says `MaxPeak`, not a path into
// `__private`. Not public API either.
#[doc(hidden)]
pub use gpu_scope_runtime::__private::{
    ErrorReturn, EscapeInto, MaxPeak, ScopeGuard, ScopeName, SharedArc, SharedRc,
};

/// gpu-scope's own bookkeeping, for its tests. Not public API.
#[doc(hidden)]
pub use gpu_scope_runtime::__introspect;
