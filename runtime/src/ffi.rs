//! Declarations of the C++ shim (`shim/shim.h`), the one place its status codes become errors,
//! and safe wrappers for the calls made from more than one module.
use crate::thread::Owner;
use crate::Error;
use std::ffi::{c_char, c_int, c_void, CStr};

pub(crate) type Deleter = Option<unsafe extern "C" fn(*mut c_void)>;

/// What a tracked CPU block whose libtorch deleter was null is freed with: nothing.
pub(crate) unsafe extern "C" fn no_deleter(_: *mut c_void) {}

/// A storage a tensor owns, as the shim reports it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Storage {
    pub ptr: *const c_void,
    pub dev_type: c_int,
    pub dev_index: c_int,
}

pub(crate) const MADE_GRAD_OFF: c_int = 1;
pub(crate) const MADE_IN_BACKWARD: c_int = 2;
pub(crate) const TENSOR_HAS_GRAPH: c_int = 2;

pub(crate) type WorkspaceVisitor = unsafe extern "C" fn(
    ctx: *mut c_void,
    ptr: *const c_void,
    dev_index: c_int,
    kind: *const c_char,
);

extern "C" {
    fn gs_last_error(message: *mut *const c_char, len: *mut usize);
    pub(crate) fn gs_install() -> c_int;
    fn gs_thread_enter(owner: *const c_void, stepped_aside: *mut c_int) -> c_int;
    fn gs_ops_begin(callback: *mut u64) -> c_int;
    fn gs_ops_end(callback: u64) -> c_int;
    fn gs_thread_leave() -> c_int;
    fn gs_await_inherited(max_ms: c_int);
    fn gs_attach_tracker(attached: *mut c_int) -> c_int;
    pub(crate) fn gs_set_grad_enabled(enabled: c_int, previous: *mut c_int) -> c_int;
    pub(crate) fn gs_grad_enabled() -> c_int;
    fn gs_in_backward() -> c_int;
    fn gs_graph_nodes() -> u64;
    fn gs_thread_id() -> u64;
    fn gs_tensor_graph(tensor: *const c_void, thread: *mut u64, node: *mut u64) -> c_int;
    pub(crate) fn gs_tensor_storages(
        tensors: *const *const c_void,
        count: usize,
        out: *mut Storage,
        cap: usize,
        n: *mut usize,
        flags: *mut c_int,
    ) -> c_int;
    pub(crate) fn gs_tensor_weak(tensor: *const c_void, weak: *mut *mut c_void) -> c_int;
    pub(crate) fn gs_tensor_weak_lock(
        weak: *mut c_void,
        tensor: *mut *mut c_void,
        storage_tensor: *mut *mut c_void,
    ) -> c_int;
    pub(crate) fn gs_tensor_weak_free(weak: *mut c_void);
    pub(crate) fn gs_accelerator(dev_type: *mut c_int, count: *mut c_int) -> c_int;
    pub(crate) fn gs_accelerator_initialized(initialized: *mut c_int) -> c_int;
    pub(crate) fn gs_empty_cache() -> c_int;
    pub(crate) fn gs_device_stats(
        dev_index: c_int,
        allocated: *mut i64,
        reserved: *mut i64,
        peak: *mut i64,
        releasable: *mut i64,
    ) -> c_int;
    pub(crate) fn gs_device_stats_unchecked(
        dev_index: c_int,
        allocated: *mut i64,
        reserved: *mut i64,
        peak: *mut i64,
        releasable: *mut i64,
    ) -> c_int;
    pub(crate) fn gs_reset_peak(dev_index: c_int) -> c_int;
    pub(crate) fn gs_memory_info(dev_index: c_int, free: *mut u64, total: *mut u64) -> c_int;
    pub(crate) fn gs_workspaces(visit: WorkspaceVisitor, ctx: *mut c_void) -> c_int;
    pub(crate) fn gs_clear_workspaces() -> c_int;
    fn gs_autocast_clear(cleared: *mut c_int) -> c_int;
    pub(crate) fn gs_probe_reports(reported: *mut c_int) -> c_int;
    pub(crate) fn gs_backend_name() -> *const c_char;
    fn gs_build_option(key: *const c_char, value: *mut *const c_char) -> c_int;
    pub(crate) fn gs_empty_cache_calls() -> u64;
}

/// Turns a shim status into a `Result`, taking the C++ exception's message on failure. The
/// message is read with its length: libtorch messages can contain NUL bytes (a device index
/// printed as a character), which are shown as `\0` rather than cutting the text short.
pub(crate) fn check(status: c_int) -> Result<(), String> {
    if status == 0 {
        return Ok(());
    }
    let (mut ptr, mut len) = (std::ptr::null(), 0);
    // SAFETY: out-pointers; the shim points them at a thread-local std::string that stays
    // valid until the next failing call on this thread, and is read right away.
    let bytes = unsafe {
        gs_last_error(&mut ptr, &mut len);
        if ptr.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(ptr.cast::<u8>(), len)
        }
    };
    Err(String::from_utf8_lossy(bytes).replace('\0', "\\0"))
}

/// [`check`], as a libtorch error.
pub(crate) fn torch(status: c_int) -> Result<(), Error> {
    check(status).map_err(Error::Torch)
}

/// What `thread_enter` installed on a thread.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThreadHooks {
    /// A libtorch profiler held the reporting slot: accelerator allocations on this thread
    /// are not seen while it does.
    pub stepped_aside: bool,
}

/// Installs the reporter and operator callbacks for `owner`'s thread.
pub(crate) fn thread_enter(owner: &std::sync::Arc<Owner>) -> Result<ThreadHooks, Error> {
    static INSTALL: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    // SAFETY: no arguments; wraps the CPU allocator once per process.
    INSTALL
        .get_or_init(|| check(unsafe { gs_install() }))
        .clone()
        .map_err(Error::Torch)?;
    let mut aside = 0;
    // SAFETY: `owner` outlives the hooks (the thread's state holds it, and the reporter takes
    // its own reference); the out-pointer is valid.
    torch(unsafe { gs_thread_enter(std::sync::Arc::as_ptr(owner).cast(), &mut aside) })?;
    let hooks = ThreadHooks {
        stepped_aside: aside != 0,
    };
    if hooks.stepped_aside {
        crate::config::warn_once(
            "gpu-scope: a libtorch profiler holds this thread's memory-reporting slot; \
             accelerator allocations made while it runs are not tracked (reports say so); to \
             have scopes check them, start the profiler after they end or profile in another \
             run",
        );
    }
    Ok(hooks)
}

/// Removes what `thread_enter` installed.
pub(crate) fn thread_leave() {
    // SAFETY: no arguments. Removing only fails if libtorch is broken, and then nothing better
    // than leaving the reporter in place can be done.
    let _ = check(unsafe { gs_thread_leave() });
}

/// Waits (100 ms at most) for libtorch's threads that inherited this thread's scope with its
/// thread-local state (`at::launch` tasks such as TorchScript's `fork`, autograd's threads) to
/// let go of their task, and so of what it still held: a task hands its result over before it
/// drops its own reference to it.
pub(crate) fn await_inherited() {
    // SAFETY: no pointers; it throws nothing.
    unsafe { gs_await_inherited(100) }
}

/// Installs the operator callback of attribution on this thread; its handle, or `None`.
pub(crate) fn ops_begin() -> Option<u64> {
    let mut callback = 0;
    // SAFETY: a plain out-pointer.
    check(unsafe { gs_ops_begin(&mut callback) })
        .ok()
        .map(|()| callback)
}

/// Clears autocast's cache (one for the whole process, every thread's casts) if autocast is on
/// on this thread (the cached casts nothing else uses are freed); whether it did.
pub(crate) fn autocast_clear() -> bool {
    let mut cleared: c_int = 0;
    // SAFETY: a plain out-pointer.
    check(unsafe { gs_autocast_clear(&mut cleared) }).is_ok() && cleared != 0
}

/// How many autograd graph nodes this thread has made so far.
pub(crate) fn graph_nodes() -> u64 {
    // SAFETY: no arguments; reads a thread-local counter.
    unsafe { gs_graph_nodes() }
}

/// Whether autograd's engine runs a backward pass on this thread.
pub(crate) fn in_backward() -> bool {
    // SAFETY: no arguments; reads a thread-local id.
    unsafe { gs_in_backward() != 0 }
}

/// This thread's id as autograd's nodes record it.
pub(crate) fn thread_id() -> u64 {
    // SAFETY: no arguments; reads a thread-local id.
    unsafe { gs_thread_id() }
}

/// The thread that made `tensor`'s autograd node and the node's number there (`graph_nodes`
/// on that thread when it was made); `None` if it could not be read.
pub(crate) fn tensor_graph(tensor: &tch::Tensor) -> Option<(u64, u64)> {
    let (mut thread, mut node) = (0, 0);
    // SAFETY: `as_ptr` points at the live `at::Tensor` that `tensor` owns; the shim only
    // reads it.
    let status = unsafe { gs_tensor_graph(tensor.as_ptr().cast(), &mut thread, &mut node) };
    check(status).ok().map(|()| (thread, node))
}

/// Removes what `ops_begin` installed.
pub(crate) fn ops_end(callback: u64) {
    // SAFETY: a handle from `ops_begin`.
    let _ = check(unsafe { gs_ops_end(callback) });
}

/// Attaches the allocator tracker (which sees every free, and says what each block was
/// requested for) as soon as the accelerator is initialized; a no-op once attached.
pub(crate) fn attach_tracker() {
    static ATTACHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if ATTACHED.load(std::sync::atomic::Ordering::Relaxed) || crate::memory::accelerator().is_none()
    {
        return;
    }
    let mut attached: c_int = 0;
    // SAFETY: a plain out-pointer.
    if check(unsafe { gs_attach_tracker(&mut attached) }).is_ok() && attached != 0 {
        ATTACHED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The device backend linked into this build: "cuda", "fake-cuda", ... or "" for none.
pub(crate) fn backend_name() -> &'static str {
    // SAFETY: returns a pointer to a static NUL-terminated string.
    unsafe { CStr::from_ptr(gs_backend_name()) }
        .to_str()
        .unwrap_or("?")
}

/// The running libtorch's build option `key` (`TORCH_VERSION`, `CUDA_VERSION`, ...), if it has
/// one. The text lives as long as the process (libtorch keeps it in a static map).
pub(crate) fn build_option(key: &CStr) -> Option<&'static str> {
    let mut value = std::ptr::null();
    // SAFETY: a NUL-terminated key and a plain out-pointer; on success `value` is null or
    // points to a NUL-terminated string that libtorch never frees.
    check(unsafe { gs_build_option(key.as_ptr(), &mut value) }).ok()?;
    if value.is_null() {
        return None;
    }
    // SAFETY: see above.
    unsafe { CStr::from_ptr(value) }.to_str().ok()
}
