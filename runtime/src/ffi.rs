//! Declarations of the C++ shim (`shim/shim.h`) and the one place its status codes become errors.
use std::ffi::{c_char, c_int, c_void, CStr};

pub(crate) type Deleter = Option<unsafe extern "C" fn(*mut c_void)>;

extern "C" {
    fn gs_last_error() -> *const c_char;
    pub(crate) fn gs_install_cpu_allocator() -> c_int;
    pub(crate) fn gs_thread_begin(owner: u64, operators: c_int, callback: *mut u64) -> c_int;
    pub(crate) fn gs_thread_end(callback: u64) -> c_int;
    pub(crate) fn gs_set_grad_enabled(enabled: c_int) -> c_int;
    pub(crate) fn gs_tensor_info(
        tensor: *const c_void,
        storage: *mut *mut c_void,
        nbytes: *mut usize,
        dev_type: *mut c_int,
        dev_index: *mut c_int,
        flags: *mut c_int,
    ) -> c_int;
    pub(crate) fn gs_accelerator(dev_type: *mut c_int, count: *mut c_int) -> c_int;
    pub(crate) fn gs_empty_cache() -> c_int;
    pub(crate) fn gs_device_stats(
        dev_index: c_int,
        allocated: *mut i64,
        reserved: *mut i64,
        peak: *mut i64,
    ) -> c_int;
    pub(crate) fn gs_reset_peak(dev_index: c_int) -> c_int;
    pub(crate) fn gs_synchronize(dev_index: c_int) -> c_int;
}

/// Turns a shim status into a `Result`, taking the C++ exception's message on failure.
pub(crate) fn check(status: c_int) -> Result<(), String> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: the shim returns a pointer into a thread-local std::string that stays valid
    // until the next failing call on this thread.
    let msg = unsafe { CStr::from_ptr(gs_last_error()) };
    Err(msg.to_string_lossy().into_owned())
}

extern "C" {
    pub(crate) fn gs_backend_name() -> *const c_char;
}
