//! Per-thread state: an owner token, how many scopes are open here, and the shim's handle to
//! the reporter and operator callback installed while any is.
use crate::{ffi, Error};
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Once};

/// The environment variable that sets the default of [`set_operator_attribution`]:
/// `GPU_SCOPE_OPERATORS=0` turns operator attribution off.
pub const OPERATORS_ENV: &str = "GPU_SCOPE_OPERATORS";

static OPERATORS: LazyLock<AtomicBool> =
    LazyLock::new(|| AtomicBool::new(std::env::var(OPERATORS_ENV).map_or(true, |v| v != "0")));

/// Whether scopes record, for each allocation, the operator that made it and the shape and
/// dtype of its tensor (on by default). Attribution costs a libtorch record function per
/// operator run inside a scope (see BENCHMARKS.md); without it, reports still list every
/// escaped allocation with its size, device and (with `GPU_SCOPE_BACKTRACE=1`) backtrace.
/// Takes effect for threads that open their outermost scope after the call.
pub fn set_operator_attribution(on: bool) {
    OPERATORS.store(on, Ordering::Relaxed);
}

/// See [`set_operator_attribution`].
pub fn operator_attribution() -> bool {
    OPERATORS.load(Ordering::Relaxed)
}

struct ThreadState {
    owner: u64,
    depth: Cell<usize>,
    /// The shim's operator callback while a scope is open here (0: none).
    callback: Cell<u64>,
}

thread_local! {
    static THREAD: ThreadState = {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ThreadState {
            owner: NEXT.fetch_add(1, Ordering::Relaxed),
            depth: Cell::new(0),
            callback: Cell::new(0),
        }
    };
}

/// This thread's owner token.
pub(crate) fn owner() -> u64 {
    THREAD.with(|t| t.owner)
}

/// How many scopes are open on this thread.
pub(crate) fn depth() -> usize {
    THREAD.with(|t| t.depth.get())
}

/// Opens one more scope level on this thread, installing the hooks at the first.
pub(crate) fn attach() -> Result<u64, Error> {
    static INSTALL: Once = Once::new();
    // SAFETY: no arguments; installs the CPU allocator wrapper once per process.
    INSTALL.call_once(|| ffi::check(unsafe { ffi::gs_install_cpu_allocator() }).expect("install"));
    THREAD.with(|t| {
        if t.depth.get() == 0 {
            let mut callback = 0;
            let operators = c_int::from(operator_attribution());
            // SAFETY: `callback` is an out-pointer; it is given back in `detach`.
            ffi::check(unsafe { ffi::gs_thread_begin(t.owner, operators, &mut callback) })
                .map_err(Error::Torch)?;
            t.callback.set(callback);
        }
        t.depth.set(t.depth.get() + 1);
        Ok(t.owner)
    })
}

/// Closes one scope level; removes the hooks after the last. Returns the new depth.
pub(crate) fn detach() -> usize {
    THREAD.with(|t| {
        let depth = t.depth.get().saturating_sub(1);
        t.depth.set(depth);
        if depth == 0 {
            // SAFETY: the callback from `attach`; removing only fails if libtorch is broken,
            // and then nothing better than leaving the hooks in place can be done.
            let _ = ffi::check(unsafe { ffi::gs_thread_end(t.callback.replace(0)) });
        }
        depth
    })
}
