//! gpu-scope's own bookkeeping, for tests that check it stays consistent. Re-exported as
//! `gpu_scope::__introspect`; not public API.

/// A snapshot of gpu-scope's own bookkeeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerState {
    /// Scopes on this thread's stack (its own and carried ones).
    pub depth: usize,
    /// Tracked allocations, on all threads.
    pub entries: usize,
    /// Open scopes, on all threads (suspended async scopes included).
    pub frames: usize,
    /// CPU blocks whose deleter gpu-scope wrapped and that are still alive.
    pub wrapped: usize,
    /// Callbacks from C++ that failed (and were stopped at the boundary).
    pub callback_failures: u64,
}

/// The ledger's state now.
pub fn ledger_state() -> LedgerState {
    let (entries, frames, wrapped) = crate::ledger::counts();
    LedgerState {
        depth: crate::thread::depth(),
        entries,
        frames,
        wrapped,
        callback_failures: crate::hooks::failures(),
    }
}

/// How many times gpu-scope called the caching allocator's `emptyCache` in this process.
pub fn empty_cache_calls() -> u64 {
    // SAFETY: reads a counter.
    unsafe { crate::ffi::gs_empty_cache_calls() }
}

/// A libtorch error message as gpu-scope reads it from the shim: the full text, NUL bytes
/// shown as `\0` (for the test that no message is ever cut short).
pub fn accelerator_stats_error(dev_index: i32) -> Option<String> {
    let (mut a, mut r, mut p, mut f) = (0, 0, 0, 0);
    // SAFETY: plain out-pointers.
    crate::ffi::check(unsafe {
        crate::ffi::gs_device_stats_unchecked(dev_index, &mut a, &mut r, &mut p, &mut f)
    })
    .err()
}

/// The driver's (free, total) memory of accelerator device `index`.
pub fn device_memory(index: i32) -> Result<(u64, u64), crate::Error> {
    let (mut free, mut total) = (0, 0);
    // SAFETY: plain out-pointers.
    crate::ffi::torch(unsafe { crate::ffi::gs_memory_info(index, &mut free, &mut total) })?;
    Ok((free, total))
}
