//! Bindings that tch lacks: the caching allocator's statistics and `emptyCache`.
use crate::device::DeviceId;
use crate::error::Error;
use crate::{ffi, ledger};
use serde::Serialize;

/// Memory of one device, in bytes.
///
/// On an accelerator these are the caching allocator's own counters. The CPU has no caching
/// allocator and libtorch counts nothing there, so for [`tch::Device::Cpu`] gpu-scope reports
/// what it can see exactly: the CPU blocks allocated inside scopes that are still alive
/// (`allocated == reserved`), and their peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    /// Bytes in live allocations.
    pub allocated: u64,
    /// Bytes held from the device, live or cached.
    pub reserved: u64,
    /// Highest `allocated` since the last [`reset_peak`].
    pub peak: u64,
}

/// The process's accelerator: its libtorch device type number and how many there are.
/// Asked once: libtorch does not let the set of devices change while a process runs.
pub(crate) fn accelerator() -> Option<(i32, i32)> {
    // SAFETY: returns a static string.
    let _ = unsafe { ffi::gs_backend_name() };
    static ACCELERATOR: std::sync::OnceLock<Option<(i32, i32)>> = std::sync::OnceLock::new();
    *ACCELERATOR.get_or_init(|| {
        let (mut kind, mut count) = (-1, 0);
        // SAFETY: plain out-pointers.
        let status = unsafe { ffi::gs_accelerator(&mut kind, &mut count) };
        (ffi::check(status).is_ok() && kind >= 0).then_some((kind, count))
    })
}

/// Checks that `device` exists; returns its accelerator index (`None` for the CPU).
pub(crate) fn check_device(device: tch::Device) -> Result<Option<i32>, Error> {
    let wanted = DeviceId::from(device);
    if wanted.is_cpu() {
        return Ok(None);
    }
    match accelerator() {
        Some((kind, count)) if DeviceId::from_raw(kind, wanted.index()) == wanted => {
            if wanted.index() < count {
                return Ok(Some(wanted.index()));
            }
            Err(Error::NoSuchDevice {
                device: wanted.to_string(),
                available: format!("{count} device(s) of that kind"),
            })
        }
        Some((kind, count)) => Err(Error::NoSuchDevice {
            device: wanted.to_string(),
            available: format!("{count} × {}", DeviceId::from_raw(kind, 0)),
        }),
        None => Err(Error::NoSuchDevice {
            device: wanted.to_string(),
            available: "no accelerator, only the CPU".to_owned(),
        }),
    }
}

fn torch(status: i32) -> Result<(), Error> {
    ffi::check(status).map_err(Error::Torch)
}

/// Statistics of one device; see [`MemoryStats`] for what the CPU reports.
pub fn memory_stats(device: tch::Device) -> Result<MemoryStats, Error> {
    let Some(index) = check_device(device)? else {
        let (live, peak) = ledger::cpu_scoped_bytes();
        return Ok(MemoryStats {
            allocated: live,
            reserved: live,
            peak,
        });
    };
    let (mut allocated, mut reserved, mut peak) = (0, 0, 0);
    // SAFETY: plain out-pointers.
    torch(unsafe { ffi::gs_device_stats(index, &mut allocated, &mut reserved, &mut peak) })?;
    Ok(MemoryStats {
        allocated: allocated.max(0) as u64,
        reserved: reserved.max(0) as u64,
        peak: peak.max(0) as u64,
    })
}

/// Gives the caching allocator's unused blocks back to the device (`emptyCache`).
/// A no-op on the CPU.
pub fn empty_cache(device: tch::Device) -> Result<(), Error> {
    match check_device(device)? {
        // SAFETY: no arguments.
        Some(_) => torch(unsafe { ffi::gs_empty_cache() }),
        None => Ok(()),
    }
}

/// Starts a new peak measurement for `device`.
pub fn reset_peak(device: tch::Device) -> Result<(), Error> {
    match check_device(device)? {
        // SAFETY: a checked device index.
        Some(index) => torch(unsafe { ffi::gs_reset_peak(index) }),
        None => {
            ledger::reset_cpu_peak();
            Ok(())
        }
    }
}

/// Waits for the work queued on an accelerator device.
pub(crate) fn synchronize(index: i32) -> Result<(), Error> {
    // SAFETY: an index of a device that allocated.
    torch(unsafe { ffi::gs_synchronize(index) })
}
