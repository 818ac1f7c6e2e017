//! The callbacks through which the C++ shim reports to Rust (declared in `shim/shim.h`).
//!
//! Each is an `unsafe extern "C" fn` that never unwinds: its body runs under
//! [`std::panic::catch_unwind`]; a panic is recorded (see [`failures`]) and becomes a status
//! of -1, which the shim treats as "not tracked". Everything else happens in `ledger.rs`.
use crate::device::DeviceId;
use crate::ffi::{self, Deleter};
use crate::ledger::{self, About, CpuOrigin, Entry, Made};
use crate::thread::Owner;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

static FAILURES: AtomicU64 = AtomicU64::new(0);

/// How many callbacks from C++ have failed (panicked and were stopped at the boundary).
pub(crate) fn failures() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// Runs `f`, turning a panic into the status -1 (as cxx's `prevent_unwind` does).
fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        FAILURES.fetch_add(1, Ordering::Relaxed);
        -1
    })
}

/// An operator name or dtype from libtorch: the shim passes static strings, so they are
/// interned once and remembered by address on each thread. None (the usual case: nothing
/// attributed) is answered where it is asked.
#[inline(always)]
fn intern(name: *const c_char) -> Option<&'static str> {
    match name.is_null() {
        true => None,
        false => intern_name(name),
    }
}

fn intern_name(name: *const c_char) -> Option<&'static str> {
    thread_local! {
        static BY_ADDRESS: RefCell<FxHashMap<usize, &'static str>> = RefCell::default();
    }
    static NAMES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Default::default);
    // SAFETY: the shim passes NUL-terminated strings that libtorch keeps for the process.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    let interned = || {
        let text = String::from_utf8_lossy(bytes);
        let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        match names.get(text.as_ref()) {
            Some(&found) => found,
            None => {
                let leaked: &'static str = Box::leak(text.into_owned().into_boxed_str());
                names.insert(leaked);
                leaked
            }
        }
    };
    let cached = BY_ADDRESS.try_with(|known| {
        if let Some(&found) = known.borrow().get(&(name as usize)) {
            if found.as_bytes() == bytes {
                return found;
            }
        }
        let found = interned();
        known.borrow_mut().insert(name as usize, found);
        found
    });
    // While the thread ends, after its cache is gone: the shared set alone.
    Some(cached.unwrap_or_else(|_| interned()))
}

/// What attribution records of a new allocation: its operator, and its backtrace when they
/// are on; nothing (no heap allocation) when neither is.
fn about(op: Option<&'static str>) -> Option<Box<About>> {
    let backtrace = crate::config::backtraces().then(backtrace::Backtrace::new_unresolved);
    (op.is_some() || backtrace.is_some()).then(|| {
        Box::new(About {
            op,
            tensor: None,
            backtrace,
        })
    })
}

/// An allocation on a thread (or on a libtorch worker thread acting for one) whose owner has a
/// scope open. `*tracked` says whether a CPU block is now tracked, in which case the shim
/// replaces its deleter and `orig_ctx` / `orig_deleter` are how to free it.
///
/// # Safety
/// `owner` is null or a pointer from [`gs_rust_owner_retain`]'s caller that is still retained;
/// `op` is null or a NUL-terminated string that lives for the process; `tracked` is valid for
/// writes.
#[no_mangle]
pub unsafe extern "C" fn gs_rust_on_alloc(
    owner: *const c_void,
    ptr: *mut c_void,
    bytes: usize,
    requested: usize,
    dev_type: c_int,
    dev_index: c_int,
    op: *const c_char,
    flags: c_int,
    orig_ctx: *mut c_void,
    orig_deleter: Deleter,
    tracked: *mut c_int,
) -> c_int {
    guarded(|| {
        // SAFETY: see the function's contract.
        unsafe { *tracked = 0 };
        if owner.is_null() {
            return 0;
        }
        // SAFETY: a retained `Arc<Owner>` (see the contract).
        let owner = unsafe { &*owner.cast::<Owner>() };
        let Some(chain) = owner.current() else {
            return 0;
        };
        let device = DeviceId::from_raw(dev_type, dev_index);
        let entry = Entry {
            owner: 0,
            slot: 0,
            chain: None,
            kept_past: None,
            bytes: bytes as u64,
            requested: requested as u64,
            made: Made {
                grad_off: flags & ffi::MADE_GRAD_OFF != 0,
                backward: flags & ffi::MADE_IN_BACKWARD != 0,
                escaped: false,
            },
            about: about(intern(op)),
            cpu: device.is_cpu().then_some(CpuOrigin {
                ctx: orig_ctx as usize,
                deleter: orig_deleter.unwrap_or(ffi::no_deleter),
            }),
            counter: 0,
        };
        if ledger::record_alloc(chain, (ptr as usize, device), entry) && device.is_cpu() {
            // SAFETY: see the function's contract.
            unsafe { *tracked = 1 };
        }
        0
    })
}

/// A CPU block whose deleter the shim replaced (or, `raw`, any block freed through the CPU
/// allocator's raw deleter) dies, on whichever thread. If gpu-scope tracked it, `*found` is 1
/// and the original context and deleter are handed back for the shim to free it.
///
/// # Safety
/// The three out-pointers are valid for writes.
#[no_mangle]
pub unsafe extern "C" fn gs_rust_on_cpu_free(
    ptr: *mut c_void,
    raw: c_int,
    orig_ctx: *mut *mut c_void,
    orig_deleter: *mut Deleter,
    found: *mut c_int,
) -> c_int {
    guarded(|| {
        // Raw blocks are looked up only while tracked CPU blocks exist.
        let tracked = raw == 0 || ledger::cpu_tracked();
        let origin = tracked
            .then(|| ledger::record_free((ptr as usize, DeviceId::CPU)))
            .flatten();
        // SAFETY: see the function's contract.
        unsafe {
            *found = c_int::from(origin.is_some());
            if let Some(origin) = origin {
                *orig_ctx = origin.ctx as *mut c_void;
                *orig_deleter = Some(origin.deleter);
            }
        }
        0
    })
}

/// An accelerator block was freed (reported by the allocator on the freeing thread, or by the
/// backend's tracker on any thread).
///
/// # Safety
/// None beyond the C ABI: the pointer is only used as a number.
#[no_mangle]
pub unsafe extern "C" fn gs_rust_on_free(
    ptr: *mut c_void,
    dev_type: c_int,
    dev_index: c_int,
) -> c_int {
    guarded(|| {
        ledger::record_free((ptr as usize, DeviceId::from_raw(dev_type, dev_index)));
        0
    })
}

/// After an operator that allocated: the shape and dtype of a tensor it returned.
///
/// # Safety
/// `dims` points at `ndim` readable values; `dtype` is a NUL-terminated string that lives for
/// the process.
#[no_mangle]
pub unsafe extern "C" fn gs_rust_note_tensor(
    ptr: *mut c_void,
    dev_type: c_int,
    dev_index: c_int,
    dims: *const i64,
    ndim: usize,
    dtype: *const c_char,
) -> c_int {
    guarded(|| {
        let shape = if ndim == 0 {
            &[][..]
        } else {
            // SAFETY: see the function's contract.
            unsafe { std::slice::from_raw_parts(dims, ndim) }
        };
        let key = (ptr as usize, DeviceId::from_raw(dev_type, dev_index));
        ledger::note_tensor(key, shape, intern(dtype).unwrap_or("?"));
        0
    })
}

/// The shim's reporter for a thread takes a reference to the thread's owner.
///
/// # Safety
/// `owner` is null or points at an `Owner` inside a live `Arc`.
#[no_mangle]
pub unsafe extern "C" fn gs_rust_owner_retain(owner: *const c_void) {
    if !owner.is_null() {
        // SAFETY: see the function's contract.
        unsafe { Arc::increment_strong_count(owner.cast::<Owner>()) };
    }
}

/// The reporter holding `owner` died.
///
/// # Safety
/// `owner` is null or was passed to [`gs_rust_owner_retain`] before, once per release.
#[no_mangle]
pub unsafe extern "C" fn gs_rust_owner_release(owner: *const c_void) {
    if !owner.is_null() {
        // Dropping an `Owner` cannot panic (its frame's drop only counts).
        // SAFETY: see the function's contract.
        unsafe { Arc::decrement_strong_count(owner.cast::<Owner>()) };
    }
}

/// One workspace block, for `check.rs`'s list of them.
///
/// # Safety
/// `ctx` is the `FxHashMap<Key, &'static str>` that `check.rs` passed with the call, alive and
/// not otherwise borrowed during it; `kind` is a NUL-terminated string.
pub(crate) unsafe extern "C" fn gs_rust_visit_workspace(
    ctx: *mut c_void,
    ptr: *const c_void,
    dev_index: c_int,
    kind: *const c_char,
) {
    let _ = guarded(|| {
        // SAFETY: see the function's contract.
        let (found, kind) = unsafe {
            (
                &mut *ctx.cast::<FxHashMap<ledger::Key, &'static str>>(),
                CStr::from_ptr(kind).to_bytes(),
            )
        };
        let kind = match kind {
            b"cuBLAS workspace" => "cuBLAS workspace",
            b"cuBLASLt workspace" => "cuBLASLt workspace",
            _ => "library workspace",
        };
        // Both backends (the real one and the fake) are CUDA: device type 1.
        found.insert((ptr as usize, DeviceId::from_raw(1, dev_index)), kind);
        0
    });
}
