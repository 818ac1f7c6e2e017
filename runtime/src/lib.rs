//! The scope engine behind `gpu-scope`: allocation ledger, escape check, cache release and
//! reports. Use it through the `gpu-scope` crate, which re-exports everything public here.
//!
//! Reading order: `lifecycle.rs` (a scope from entry to report), `ledger.rs` (the
//! bookkeeping; `ledger/frame.rs` a scope's frame, `ledger/close.rs` its end), `hooks.rs` (how libtorch reports into it), `check.rs` (the verdict).
#![warn(missing_docs)]
mod carry;
mod check;
mod config;
mod device;
mod error;
mod ffi;
mod fn_name;
mod future;
mod grad;
mod hooks;
mod ledger;
mod lifecycle;
mod memory;
mod options;
mod policy;
mod release;
mod report;
mod scope;
mod sites;
mod tensors;
mod thread;
mod trace;
mod versions;

#[doc(hidden)]
pub mod __introspect;
#[doc(hidden)]
pub mod __private;

pub use carry::{current, Carried, ScopeHandle};
pub use config::{
    attribution, operator_attribution, set_attribution, set_operator_attribution, Attribution,
    BACKTRACE_ENV, ESCAPE_POLICY_ENV, OPERATORS_ENV,
};
pub use device::DeviceId;
pub use error::Error;
pub use memory::{
    clear_workspaces, device_info, empty_cache, memory_stats, reset_peak, DeviceInfo, MemoryStats,
};
pub use options::{EscapePolicy, ReleasePolicy, ScopeOptions};
pub use report::{last_report, Bytes, DeviceReport, Escape, Held, HeldBy, ScopeReport, Untracked};
pub use scope::{keep, keep_forever, scope, Scope};
pub use tensors::{StorageSet, Tensors};
pub use versions::{versions, Versions};
