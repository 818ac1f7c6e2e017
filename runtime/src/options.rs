//! What a scope does on exit: escape policy, cache release policy, budget, grad mode.
use serde::Serialize;
use std::borrow::Cow;
use std::panic::Location;

/// What happens when allocations escape a scope or its budget is exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EscapePolicy {
    /// Panic with the report (default with debug assertions).
    Panic,
    /// Emit a `tracing` WARN event with the report, or, when the program has no `tracing`
    /// subscriber, write it on stderr: in full the first time a scope's location leaks (and
    /// the first time there with operators and shapes named), then a one-line count at its
    /// 2nd, 4th, 8th, ... leak (default without debug assertions).
    Warn,
    /// Return [`Error::Escaped`](crate::Error::Escaped) or [`Error::OverBudget`](crate::Error::OverBudget).
    Error,
    /// Only record it in the report. A scope that cannot be entered (a device that does not
    /// exist) or ends out of order is not an escape: the runtime API returns that error
    /// whatever the policy, and the macros, whose function has no such error to return, warn.
    Ignore,
}

impl EscapePolicy {
    /// The default when a scope names none: [`ESCAPE_POLICY_ENV`](crate::ESCAPE_POLICY_ENV) if
    /// set (read once per process), else `panic` with debug assertions and `warn` without.
    pub fn default_policy() -> Self {
        crate::config::escape_policy().unwrap_or(if cfg!(debug_assertions) {
            Self::Panic
        } else {
            Self::Warn
        })
    }
}

/// When a scope asks the accelerator's caching allocator to give unused blocks back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReleasePolicy {
    /// When the outermost scope of the thread ends, if the cache of a device it allocated on
    /// holds segments nothing uses (default); `emptyCache` then empties every device. A scope
    /// that allocated nothing on a device costs nothing here, and no `emptyCache` runs when it
    /// would give nothing back.
    Outermost,
    /// Whenever this scope ends (once a device has been used in the process), also when it
    /// only freed device memory (a scope that unloads a model). `emptyCache` is slow: avoid on
    /// hot inner scopes.
    Always,
    /// Never.
    Never,
    /// When the scope ends and the releasable cached bytes (see
    /// [`MemoryStats::releasable`](crate::MemoryStats::releasable)) of some device exceed this
    /// many, also after a scope that only freed device memory.
    Above(u64),
}

/// How to run a scope. Built with [`ScopeOptions::new`] and the methods below.
#[derive(Clone, Debug)]
pub struct ScopeOptions {
    pub(crate) name: Cow<'static, str>,
    pub(crate) location: &'static Location<'static>,
    pub(crate) on_escape: Option<EscapePolicy>,
    pub(crate) release: ReleasePolicy,
    pub(crate) max_peak: Option<u64>,
    /// A negative `max_peak` given at run time (below `i64::MIN` as `i64::MIN`), refused on
    /// entry.
    pub(crate) negative_budget: Option<std::num::NonZeroI64>,
    pub(crate) keep_grad_mode: bool,
    pub(crate) device: Option<tch::Device>,
    pub(crate) can_unwind: bool,
}

impl ScopeOptions {
    /// Options for a scope called `name`, located at the caller. The location names the scope
    /// in reports and is the place that on-leak attribution remembers: a helper that builds
    /// options for several scopes should be `#[track_caller]` too, or all its scopes are one
    /// place (one leak among them then attributes them all).
    #[track_caller]
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        ScopeOptions {
            name: name.into(),
            location: Location::caller(),
            on_escape: None,
            release: ReleasePolicy::Outermost,
            max_peak: None,
            negative_budget: None,
            keep_grad_mode: false,
            device: None,
            can_unwind: true,
        }
    }

    /// Sets the source location shown in reports.
    pub fn location(mut self, location: &'static Location<'static>) -> Self {
        self.location = location;
        self
    }

    /// Sets the escape policy (default: [`EscapePolicy::default_policy`]).
    pub fn on_escape(mut self, policy: EscapePolicy) -> Self {
        self.on_escape = Some(policy);
        self
    }

    /// Sets the cache release policy (default: [`ReleasePolicy::Outermost`]).
    pub fn release(mut self, policy: ReleasePolicy) -> Self {
        self.release = policy;
        self
    }

    /// Fails the scope like an escape if its peak of live bytes (the report's `peak`: the CPU
    /// and every device together) goes over `bytes`;
    /// `u64::MAX` is no limit (the report's `max_peak` is then `None`).
    pub fn max_peak(mut self, bytes: u64) -> Self {
        self.max_peak = (bytes != u64::MAX).then_some(bytes);
        self
    }

    /// `max_peak = <expr>` of the macros: [`max_peak`](Self::max_peak), or a negative budget
    /// that entering the scope refuses.
    #[doc(hidden)]
    pub fn max_peak_budget(mut self, bytes: Result<u64, i128>) -> Self {
        match bytes {
            Ok(bytes) => self.max_peak(bytes),
            Err(negative) => {
                let negative = i64::try_from(negative).unwrap_or(i64::MIN);
                self.negative_budget = std::num::NonZeroI64::new(negative);
                self
            }
        }
    }

    /// Keeps the caller's autograd mode instead of turning gradients off inside the scope.
    pub fn keep_grad_mode(mut self, keep: bool) -> Self {
        self.keep_grad_mode = keep;
        self
    }

    /// The device whose memory the scope is about: checked to exist on entry.
    pub fn device(mut self, device: tch::Device) -> Self {
        self.device = Some(device);
        self
    }

    /// For code that must not unwind (an `extern "C"` function): where the policy says
    /// `panic`, gpu-scope warns instead.
    #[doc(hidden)]
    pub fn cannot_unwind(mut self) -> Self {
        self.can_unwind = false;
        self
    }

    /// The escape policy this scope applies: its own, else the default; never `panic` for
    /// code that cannot unwind.
    pub(crate) fn policy(&self) -> EscapePolicy {
        match self.on_escape.unwrap_or_else(EscapePolicy::default_policy) {
            EscapePolicy::Panic if !self.can_unwind => EscapePolicy::Warn,
            policy => policy,
        }
    }
}
