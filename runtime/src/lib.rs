//! The scope engine behind `gpu-scope`: allocation ledger, escape check, cache release and
//! reports. Use it through the `gpu-scope` crate, which re-exports everything public here.
mod device;
mod error;
mod ffi;
mod future;
mod ledger;
mod memory;
mod options;
#[doc(hidden)]
pub mod __private {
    pub use crate::private::*;
}
mod private;
mod report;
mod scope;
mod tensors;
mod thread;

pub use device::DeviceId;
pub use error::Error;
pub use future::{Finish, ScopeFuture};
pub use memory::{empty_cache, memory_stats, reset_peak, MemoryStats};
pub use options::{EscapePolicy, ReleasePolicy, ScopeOptions, ESCAPE_POLICY_ENV};
pub use report::{human_bytes, Escape, ScopeReport};
pub use scope::{keep, last_report, scope, Scope};
pub use tensors::{StorageSet, Tensors};
pub use thread::{operator_attribution, set_operator_attribution, OPERATORS_ENV};
