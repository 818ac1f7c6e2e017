//! Per-thread state: an owner token, how many scopes are open here, and the shim's handle to
//! the reporter and operator callback installed while any is.
use crate::{ffi, Error};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

struct ThreadState {
    owner: u64,
    depth: Cell<usize>,
    handle: Cell<*mut c_void>,
}

thread_local! {
    static THREAD: ThreadState = {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ThreadState {
            owner: NEXT.fetch_add(1, Ordering::Relaxed),
            depth: Cell::new(0),
            handle: Cell::new(std::ptr::null_mut()),
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
            let mut handle = std::ptr::null_mut();
            // SAFETY: `handle` is an out-pointer; it is given back in `detach`.
            ffi::check(unsafe { ffi::gs_thread_begin(t.owner, &mut handle) })
                .map_err(Error::Torch)?;
            t.handle.set(handle);
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
            let handle = t.handle.replace(std::ptr::null_mut());
            // SAFETY: the handle from `attach`; removing only fails if libtorch is broken, and
            // then nothing better than leaving the hooks in place can be done.
            let _ = ffi::check(unsafe { ffi::gs_thread_end(handle) });
        }
        depth
    })
}
