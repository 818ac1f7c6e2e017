//! The one error type of gpu-scope.
use crate::report::{Bytes, HeldBy, Name, ScopeReport};
use std::fmt;

/// What can go wrong when entering or leaving a scope.
///
/// Its `Debug` prints what its `Display` does (a leak's report as a table), so that a test or
/// `main` returning `Result<_, gpu_scope::Error>` (or a `Box<dyn Error>` made from one) shows
/// the report when it fails; [`Error::report`] gives the report itself.
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
    /// The scope was exited after an enclosing scope had already ended (scopes end innermost
    /// first); the enclosing scope ended it, unchecked, and took over its allocations.
    EndedByEnclosing {
        /// The scope's name.
        scope: std::borrow::Cow<'static, str>,
    },
    /// The scope's `max_peak`, computed at run time, is negative; the scope was not opened.
    NegativeBudget {
        /// The scope's name.
        scope: std::borrow::Cow<'static, str>,
        /// The budget it was given (`i64::MIN` for any below it).
        bytes: i64,
    },
    /// More scopes would be nested on one thread than gpu-scope tracks (counting those carried
    /// in with handles); the scope was not opened.
    TooDeep {
        /// The most scopes that may be nested.
        limit: usize,
    },
    /// The scope was entered while its thread was ending (in a thread-local's destructor),
    /// after gpu-scope's state for the thread was gone; the scope was not opened.
    ThreadEnding,
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
                 name a device it has"
            ),
            Error::Escaped(r) => {
                write!(
                    f,
                    "gpu-scope: {} allocation(s) escaped scope `{}` ({})",
                    r.escaped.len(),
                    Name(&r.name),
                    Bytes(r.escaped_bytes)
                )?;
                if r.over_budget() {
                    write!(f, ", and it went over its budget")?;
                }
                write!(f, "\n{r}")
            }
            Error::OverBudget(r) => {
                let budget = r.max_peak.unwrap_or(0);
                // A cuBLAS workspace made in the scope counts toward its peak.
                let workspace = match r.held.iter().any(|h| matches!(h.by, HeldBy::Workspace(_))) {
                    true => {
                        "; a library workspace made here counts too: run one product before \
                             the scope, so that it is made there"
                    }
                    false => "",
                };
                write!(
                    f,
                    "gpu-scope: scope `{}` peaked at {}, {} over its budget of {} (to fix: free \
                     tensors earlier in the scope, work on less at a time, or raise \
                     `max_peak`{workspace})\n{r}",
                    Name(&r.name),
                    Bytes(r.peak),
                    Bytes(r.peak.saturating_sub(budget)),
                    Bytes(budget),
                )
            }
            Error::Torch(msg) => write!(
                f,
                "gpu-scope: libtorch error: {msg} (raised by libtorch in a call gpu-scope made; \
                 where the message does not say what to change, report it with \
                 `gpu_scope::versions()`)"
            ),
            Error::EndedByEnclosing { scope } => write!(
                f,
                "gpu-scope: scope `{}` was exited after a scope enclosing it had ended; \
                 the enclosing scope ended it unchecked and took over its allocations. Exit \
                 scopes innermost first",
                Name(scope)
            ),
            Error::NegativeBudget { scope, bytes } => write!(
                f,
                "gpu-scope: scope `{}` was given `max_peak` = {bytes} bytes, which no peak \
                 can meet; give a budget of 0 bytes or more (or no `max_peak` for no limit)",
                Name(scope)
            ),
            Error::TooDeep { limit } => write!(
                f,
                "gpu-scope: more than {limit} scopes would be nested on this thread; open the \
                 scope around a recursion rather than inside it, and end each scope opened \
                 here (a guard given to `mem::forget` or leaked stays open until its thread \
                 ends)"
            ),
            Error::ThreadEnding => write!(
                f,
                "gpu-scope: a scope was entered while its thread was ending (in a thread-local's \
                 destructor), after gpu-scope's state for the thread was gone: it cannot track \
                 anything there and was not opened. Do that work before the thread ends"
            ),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {}
