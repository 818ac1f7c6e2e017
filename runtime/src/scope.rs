//! The RAII scope guard, its closure form, and `keep`.
use crate::ledger::{self, FrameId};
use crate::memory::{self, accelerator, check_device};
use crate::options::{EscapePolicy, ReleasePolicy, ScopeOptions};
use crate::report::{Escape, ScopeReport};
use crate::tensors::{StorageSet, Tensors};
use crate::{thread, Error};
use std::marker::PhantomData;
use std::sync::LazyLock;
use std::time::Instant;

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

thread_local! {
    static LAST: std::cell::RefCell<Option<ScopeReport>> = const { std::cell::RefCell::new(None) };
}

/// The report of the last scope that exited on this thread (checked or not).
pub fn last_report() -> Option<ScopeReport> {
    LAST.with(|l| l.borrow().clone())
}

/// An open scope on this thread. Leave it with [`Scope::exit`]; dropping it instead (a panic,
/// an early return) ends it without a check and hands its live allocations to the enclosing
/// scope. Not `Send`: a scope belongs to the thread that opened it.
#[must_use = "a scope is checked when you call `exit`; dropping it skips the check"]
#[derive(Debug)]
pub struct Scope {
    state: Option<Open>,
    _not_send: PhantomData<*const ()>,
}

#[derive(Debug)]
pub(crate) struct Open {
    pub(crate) frame: FrameId,
    pub(crate) owner: u64,
    pub(crate) opts: ScopeOptions,
    pub(crate) started: Instant,
    pub(crate) grad: Option<GradGuard>,
}

/// Autograd off on this thread for as long as it lives; the caller's mode comes back after.
#[derive(Debug)]
pub(crate) struct GradGuard {
    previous: std::ffi::c_int,
    _not_send: PhantomData<*const ()>,
}

impl Drop for GradGuard {
    fn drop(&mut self) {
        // SAFETY: sets a thread-local flag; cannot fail.
        unsafe { crate::ffi::gs_set_grad_enabled(self.previous) };
    }
}

/// A [`GradGuard`], unless the options keep the caller's grad mode.
pub(crate) fn grad_guard(opts: &ScopeOptions) -> Option<GradGuard> {
    (!opts.keep_grad_mode).then(|| GradGuard {
        // SAFETY: sets a thread-local flag; cannot fail.
        previous: unsafe { crate::ffi::gs_set_grad_enabled(0) },
        _not_send: PhantomData,
    })
}

impl Open {
    /// Opens a new frame on this thread.
    pub(crate) fn new(opts: ScopeOptions) -> Result<Open, Error> {
        if let Some(device) = opts.device {
            check_device(device)?;
        }
        let started = Instant::now();
        LazyLock::force(&EPOCH);
        let owner = thread::attach()?;
        let frame = ledger::open(owner, None);
        let grad = grad_guard(&opts);
        Ok(Open {
            frame,
            owner,
            opts,
            started,
            grad,
        })
    }

    /// Ends the frame, checked or not, and builds its report. The frame must be on this thread.
    pub(crate) fn close(mut self, kept: StorageSet, check: bool) -> ScopeReport {
        self.grad = None;
        let accelerators: Vec<i32> = match accelerator() {
            Some(_) => ledger::devices(self.frame)
                .iter()
                .filter(|d| !d.is_cpu())
                .map(|d| d.index())
                .collect(),
            None => vec![],
        };
        if check {
            // Kernels may still be writing into blocks the check is about.
            for &i in &accelerators {
                let _ = memory::synchronize(i);
            }
        }
        let closed = ledger::close(
            self.owner,
            self.frame,
            &kept.keys,
            kept.autograd_graph,
            check,
        );
        let outermost = thread::detach() == 0;
        let (released, cache_released) = if check {
            release(self.opts.release, outermost, &accelerators)
        } else {
            (false, 0)
        };
        let mut escaped: Vec<Escape> = closed
            .escaped
            .into_iter()
            .map(|((address, device), e)| Escape {
                bytes: e.bytes,
                device,
                address,
                operator: e.op,
                shape: e.tensor.as_ref().map(|(s, _)| s.to_vec()),
                dtype: e.tensor.as_ref().map(|(_, d)| *d),
                backtrace: e.backtrace.map(|b| b.to_string()),
            })
            .collect();
        escaped.sort_unstable_by_key(|e| (std::cmp::Reverse(e.bytes), e.address));
        let f = closed.frame;
        let report = ScopeReport {
            name: std::mem::take(&mut self.opts.name),
            location: self.opts.location,
            devices: f.devices.iter().copied().collect(),
            allocations: f.allocations,
            allocated: f.allocated,
            freed: f.freed,
            peak: f.peak,
            kept: closed.kept,
            escaped_bytes: escaped.iter().map(|e| e.bytes).sum(),
            escaped,
            held_by_autograd: closed.graph_held,
            opaque_kept: kept.opaque,
            cache_released,
            released,
            max_peak: self.opts.max_peak,
            checked: check,
            started: self.started.saturating_duration_since(*EPOCH),
            elapsed: self.started.elapsed(),
        };
        LAST.with(|l| *l.borrow_mut() = Some(report.clone()));
        report
    }

    /// Closes with a check, emits the report and applies the escape policy.
    pub(crate) fn finish(self, kept: StorageSet) -> Result<ScopeReport, Error> {
        let policy = self
            .opts
            .on_escape
            .unwrap_or_else(EscapePolicy::default_policy);
        let report = self.close(kept, true);
        tracing::debug!(target: "gpu_scope", report = %report.to_json(), "scope `{}` exited", report.name);
        if report.is_clean() {
            return Ok(report);
        }
        let error = if report.escaped.is_empty() {
            Error::OverBudget(Box::new(report))
        } else {
            Error::Escaped(Box::new(report))
        };
        match policy {
            EscapePolicy::Panic if !std::thread::panicking() => panic!("{error}"),
            EscapePolicy::Panic | EscapePolicy::Warn => {
                tracing::warn!(target: "gpu_scope", "{error}");
            }
            EscapePolicy::Error => return Err(error),
            EscapePolicy::Ignore => {}
        }
        match error {
            Error::Escaped(r) | Error::OverBudget(r) => Ok(*r),
            _ => unreachable!("only escape and budget errors are built here"),
        }
    }
}

/// Runs `emptyCache` if the policy says so; returns whether it ran and the bytes it gave back.
fn release(policy: ReleasePolicy, outermost: bool, used: &[i32]) -> (bool, u64) {
    if accelerator().is_none() {
        return (false, 0);
    }
    let stats = |i: i32| memory::memory_stats(tch::Device::Cuda(i as usize)).unwrap_or_default();
    let run = match policy {
        ReleasePolicy::Never => false,
        ReleasePolicy::Always => true,
        ReleasePolicy::Outermost => outermost && !used.is_empty(),
        ReleasePolicy::Above(limit) => used.iter().any(|&i| {
            let s = stats(i);
            s.reserved.saturating_sub(s.allocated) > limit
        }),
    };
    if !run {
        return (false, 0);
    }
    let before: u64 = used.iter().map(|&i| stats(i).reserved).sum();
    // SAFETY: no arguments.
    let ok = crate::ffi::check(unsafe { crate::ffi::gs_empty_cache() }).is_ok();
    let after: u64 = used.iter().map(|&i| stats(i).reserved).sum();
    (ok, before.saturating_sub(after))
}

impl Scope {
    /// Opens a scope on this thread. Fails if the options name a device that does not exist.
    pub fn enter(opts: ScopeOptions) -> Result<Scope, Error> {
        Ok(Scope {
            state: Some(Open::new(opts)?),
            _not_send: PhantomData,
        })
    }

    /// Marks a value as kept: its storages may outlive this scope.
    pub fn keep<T: Tensors + ?Sized>(&self, value: &T) {
        if let Some(open) = &self.state {
            let mut set = StorageSet::new();
            value.visit(&mut set);
            ledger::mark_kept(open.frame, set.keys);
        }
    }

    /// Ends the scope: everything still alive that `kept` does not own has escaped. Returns
    /// the report, or applies the escape policy (panic, warn, or `Err` for `error`).
    pub fn exit<T: Tensors + ?Sized>(self, kept: &T) -> Result<ScopeReport, Error> {
        let mut set = StorageSet::new();
        kept.visit(&mut set);
        self.exit_with(set)
    }

    /// Like [`Scope::exit`], with the kept storages already collected.
    pub fn exit_with(mut self, kept: StorageSet) -> Result<ScopeReport, Error> {
        let open = self.state.take().expect("a scope is exited once");
        open.finish(kept)
    }

    /// Ends the scope without a check, handing its live allocations to the enclosing scope.
    pub fn abandon(mut self) -> ScopeReport {
        let open = self.state.take().expect("a scope is exited once");
        open.close(StorageSet::new(), false)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(open) = self.state.take() {
            open.close(StorageSet::new(), false);
        }
    }
}

/// Runs `body` in a scope and checks what it leaves behind; its result is kept.
pub fn scope<R: Tensors>(
    opts: ScopeOptions,
    body: impl FnOnce() -> R,
) -> Result<(R, ScopeReport), Error> {
    let scope = Scope::enter(opts)?;
    let value = body();
    let report = scope.exit(&value)?;
    Ok((value, report))
}

/// Lets `value` outlive the innermost scope of this thread on purpose. Outside scopes it does
/// nothing.
pub fn keep<T: Tensors + ?Sized>(value: &T) {
    if thread::depth() == 0 {
        return;
    }
    let mut set = StorageSet::new();
    value.visit(&mut set);
    ledger::mark_kept_innermost(thread::owner(), set.keys);
}
