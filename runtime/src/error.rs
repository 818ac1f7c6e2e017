//! The one error type of gpu-scope.
use crate::report::ScopeReport;
use std::fmt;

/// What can go wrong when entering or leaving a scope.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The scope or memory call named a device that this process does not have.
    NoSuchDevice {
        /// The device asked for, e.g. `cuda:3`.
        device: String,
        /// What this process has instead.
        available: String,
    },
    /// Allocations made inside the scope were still alive after it, owned by nothing kept.
    Escaped(Box<ScopeReport>),
    /// The scope's peak of live bytes went over its `max_peak` budget.
    OverBudget(Box<ScopeReport>),
    /// libtorch raised an error inside the shim; the message is libtorch's.
    Torch(String),
}

impl Error {
    /// The scope's report, for the escape and budget errors.
    pub fn report(&self) -> Option<&ScopeReport> {
        match self {
            Error::Escaped(r) | Error::OverBudget(r) => Some(r),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSuchDevice { device, available } => write!(
                f,
                "gpu-scope: device `{device}` does not exist in this process ({available}); \
                 pick an existing device or check `tch::Cuda::device_count()`"
            ),
            Error::Escaped(r) => write!(
                f,
                "gpu-scope: {} allocation(s) escaped scope `{}` ({})\n{r}",
                r.escaped.len(),
                r.name,
                crate::report::human_bytes(r.escaped_bytes)
            ),
            Error::OverBudget(r) => write!(
                f,
                "gpu-scope: scope `{}` peaked at {}, over its budget of {}\n{r}",
                r.name,
                crate::report::human_bytes(r.peak),
                crate::report::human_bytes(r.max_peak.unwrap_or(0))
            ),
            Error::Torch(msg) => write!(f, "gpu-scope: libtorch error: {msg}"),
        }
    }
}

impl std::error::Error for Error {}
