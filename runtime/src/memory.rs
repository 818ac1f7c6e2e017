//! Bindings that tch lacks: the caching allocator's statistics, `emptyCache`, the library
//! workspaces, and what this process's libtorch has.
use crate::device::DeviceId;
use crate::error::Error;
use crate::{ffi, ledger};
use serde::Serialize;
use std::ffi::c_int;
use std::sync::OnceLock;

/// Memory of one device, in bytes.
///
/// On an accelerator these are the caching allocator's own counters (blocks), zeros before
/// the device's first allocation. The CPU has no caching allocator and libtorch counts nothing
/// there, so for [`tch::Device::Cpu`] gpu-scope reports what it can see: the CPU blocks that
/// were allocated inside scopes and are still alive, after those scopes ended too (handed
/// back, escaped or given to [`keep_forever`](crate::keep_forever()): until freed;
/// `allocated == reserved`, exact), and their
/// peak, counted in sixteen counters, one per allocating thread by its number modulo 16 (so
/// that threads seldom share one): exact when every such block alive since the last
/// [`reset_peak`] was allocated by one thread (a counter starts at what it held then),
/// otherwise the sum of each counter's highest since then, also of threads that allocated one
/// after the other in different counters (those sharing a counter count together; never below
/// the true peak; a scope's report has its own exact peak).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    /// Bytes in live allocations.
    pub allocated: u64,
    /// Bytes held from the device, live or cached.
    pub reserved: u64,
    /// Highest `allocated` since the last [`reset_peak`].
    pub peak: u64,
    /// Reserved bytes that [`empty_cache`] would give back now: cached segments nothing in
    /// them is using (free space inside partly used segments stays reserved). 0 on the CPU.
    /// Under `expandable_segments:True` an upper bound: libtorch counts an expandable
    /// segment's every unused byte, and `empty_cache` gives back only its whole free pages.
    /// A block freed while another stream still uses it (`record_stream`) is left out until
    /// that stream's work is done.
    pub releasable: u64,
}

/// What this process's libtorch offers for devices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceInfo {
    /// The device backend gpu-scope was built with: `"cuda"`, `"fake-cuda"` (gpu-scope's own
    /// tests), `"cuda (built without CUDA headers)"`, or `""` for a CPU-only libtorch.
    pub backend: &'static str,
    /// Whether `libtorch_cuda` is loaded in this process.
    pub libtorch_cuda_loaded: bool,
    /// The accelerator libtorch found (`cuda:0` names the kind), if any device exists.
    pub accelerator: Option<DeviceId>,
    /// How many devices of that kind.
    pub devices: usize,
}

/// Describes the process: which backend, whether CUDA's library is loaded, how many devices.
pub fn device_info() -> DeviceInfo {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    DeviceInfo {
        backend: ffi::backend_name(),
        libtorch_cuda_loaded: maps.contains("/libtorch_cuda.so"),
        accelerator: accelerator().map(|(kind, _)| DeviceId::from_raw(kind, 0)),
        devices: accelerator().map_or(0, |(_, n)| n as usize),
    }
}

/// The process's accelerator: its libtorch device type number and how many there are (only
/// when there is at least one). Asked once: libtorch does not let the set of devices change.
pub(crate) fn accelerator() -> Option<(i32, i32)> {
    static ACCELERATOR: OnceLock<Option<(i32, i32)>> = OnceLock::new();
    *ACCELERATOR.get_or_init(|| {
        let (mut kind, mut count) = (-1, 0);
        // SAFETY: plain out-pointers.
        let status = unsafe { ffi::gs_accelerator(&mut kind, &mut count) };
        (ffi::check(status).is_ok() && kind >= 0 && count > 0).then_some((kind, count))
    })
}

/// Whether the accelerator's allocator has been initialized (its first allocation happened).
pub(crate) fn accelerator_initialized() -> bool {
    let mut initialized: c_int = 0;
    // SAFETY: a plain out-pointer.
    accelerator().is_some()
        && ffi::check(unsafe { ffi::gs_accelerator_initialized(&mut initialized) }).is_ok()
        && initialized != 0
}

/// Checks that `device` exists; returns its accelerator index (`None` for the CPU).
pub(crate) fn check_device(device: tch::Device) -> Result<Option<i32>, Error> {
    let (name, kind, index) = match device {
        tch::Device::Cpu => return Ok(None),
        tch::Device::Cuda(i) => (format!("cuda:{i}"), 1, i),
        tch::Device::Mps => ("mps".to_owned(), 13, 0),
        tch::Device::Vulkan => ("vulkan".to_owned(), 10, 0),
    };
    let missing = |available: String| Error::NoSuchDevice {
        device: name.clone(),
        available,
    };
    match accelerator() {
        // libtorch numbers devices with an i8.
        Some((k, count)) if k == kind && index < count as usize => Ok(Some(index as i32)),
        Some((k, count)) => {
            let first = DeviceId::from_raw(k, 0);
            Err(missing(match count {
                1 => format!("it has the CPU and {first}"),
                _ => format!(
                    "it has the CPU and {first} to {}",
                    DeviceId::from_raw(k, count - 1)
                ),
            }))
        }
        None => Err(missing(
            "it has only the CPU: its libtorch sees no accelerator".to_owned(),
        )),
    }
}

/// The caching allocator's counters of accelerator device `index` (zeros before first use).
pub(crate) fn device_stats(index: i32) -> Result<MemoryStats, Error> {
    let (mut allocated, mut reserved, mut peak, mut releasable) = (0, 0, 0, 0);
    // SAFETY: plain out-pointers.
    ffi::torch(unsafe {
        ffi::gs_device_stats(
            index,
            &mut allocated,
            &mut reserved,
            &mut peak,
            &mut releasable,
        )
    })?;
    Ok(MemoryStats {
        allocated: allocated.max(0) as u64,
        reserved: reserved.max(0) as u64,
        peak: peak.max(0) as u64,
        releasable: releasable.max(0) as u64,
    })
}

/// Statistics of one device; see [`MemoryStats`] for what the CPU reports. Zeros for an
/// accelerator device that has not allocated yet.
pub fn memory_stats(device: tch::Device) -> Result<MemoryStats, Error> {
    match check_device(device)? {
        Some(index) => device_stats(index),
        None => {
            let (live, peak) = ledger::cpu_scoped_bytes();
            Ok(MemoryStats {
                allocated: live,
                reserved: live,
                peak,
                releasable: 0,
            })
        }
    }
}

/// Gives the caching allocator's unused blocks back to the device (`emptyCache`).
/// libtorch empties the caches of every device of the accelerator at once: `device` is
/// checked to exist and says which kind. A no-op on the CPU, and before the first allocation.
pub fn empty_cache(device: tch::Device) -> Result<(), Error> {
    match check_device(device)? {
        // SAFETY: no arguments.
        Some(_) => ffi::torch(unsafe { ffi::gs_empty_cache() }),
        None => Ok(()),
    }
}

/// Starts a new peak measurement for `device`.
pub fn reset_peak(device: tch::Device) -> Result<(), Error> {
    match check_device(device)? {
        // SAFETY: a checked device index.
        Some(index) => ffi::torch(unsafe { ffi::gs_reset_peak(index) }),
        None => {
            ledger::reset_cpu_peak();
            Ok(())
        }
    }
}

/// Frees the workspaces that cuBLAS and cuBLASLt keep per thread and stream
/// (`at::cuda::clearCublasWorkspaces`), as PyTorch's own leak check does before comparing
/// memory. The next matrix product allocates them again. A no-op without CUDA.
pub fn clear_workspaces() -> Result<(), Error> {
    // SAFETY: no arguments.
    ffi::torch(unsafe { ffi::gs_clear_workspaces() })
}

static REPORTS: OnceLock<bool> = OnceLock::new();

/// That the accelerator's allocator reports nothing, if a scope found out already (see
/// [`allocator_reports`]); never probes, so it may be asked outside a scope.
pub(crate) fn allocator_reports_nothing() -> bool {
    REPORTS.get() == Some(&false)
}

/// Whether the accelerator's allocator reports its allocations (the native caching allocator
/// does; `cudaMallocAsync` and `PYTORCH_NO_CUDA_MEMORY_CACHING=1` do not). Found out once per
/// process by a one-byte probe on a device the process works on (never one it has not used:
/// that would reserve memory and make a context there), which must run inside a scope whose
/// reporter is installed; `None` until the allocator is initialized, a device is in use and
/// has room for the probe (on a full device the allocator would empty its cache first).
pub(crate) fn allocator_reports() -> Option<bool> {
    if let Some(&known) = REPORTS.get() {
        return Some(known);
    }
    if !accelerator_initialized() {
        return None;
    }
    let mut reported: c_int = -1;
    // SAFETY: a plain out-pointer.
    ffi::check(unsafe { ffi::gs_probe_reports(&mut reported) }).ok()?;
    (reported >= 0).then(|| *REPORTS.get_or_init(|| reported != 0))
}
