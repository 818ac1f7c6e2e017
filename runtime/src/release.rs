//! The release policy: when a closing scope asks the caching allocator to give unused blocks
//! back (`emptyCache`). The escape check reads only the allocator's host-side bookkeeping and
//! never synchronizes a device; a release that gives segments back does, through `cudaFree`.
use crate::device::DeviceId;
use crate::memory::{self, accelerator};
use crate::options::ReleasePolicy;

/// What a release did: whether `emptyCache` ran, and the bytes each device got back (every
/// device: libtorch empties them all at once, the ones the scope did not use included).
#[derive(Debug, Default)]
pub(crate) struct Released {
    pub ran: bool,
    pub per_device: Vec<(DeviceId, u64)>,
}

/// Applies `policy` at the checked exit of a scope that allocated on `used` (accelerator
/// devices, none for a CPU-only scope); `outermost` says whether no scope encloses it on this
/// thread; `blind`, that it could not see its accelerator allocations (a profiler held the
/// reporting slot, or the allocator reports nothing): it may have used any device.
#[inline]
pub(crate) fn run(
    policy: ReleasePolicy,
    outermost: bool,
    used: &[DeviceId],
    blind: bool,
) -> Released {
    // The default looks at the cache only after an outermost scope that allocated on a device:
    // any other scope costs nothing here. `always` and `"<size>"` also act after a scope that
    // only freed (one unloading a model gives the cache something back).
    let looks = match policy {
        ReleasePolicy::Never => false,
        ReleasePolicy::Outermost => outermost && (!used.is_empty() || blind),
        ReleasePolicy::Always | ReleasePolicy::Above(_) => true,
    };
    if looks {
        look(policy, used, blind)
    } else {
        Released::default()
    }
}

/// [`run`] once it looks at the caches.
#[inline(never)]
fn look(policy: ReleasePolicy, used: &[DeviceId], blind: bool) -> Released {
    let Some((kind, count)) = accelerator() else {
        return Released::default();
    };
    // Nothing was ever allocated on an accelerator: nothing is cached.
    if used.is_empty() && !memory::accelerator_initialized() {
        return Released::default();
    }
    let all: Vec<DeviceId> = (0..count).map(|i| DeviceId::from_raw(kind, i)).collect();
    let stats = |d: &DeviceId| memory::device_stats(d.index()).unwrap_or_default();
    let releasable = |d: &DeviceId| stats(d).releasable;
    let run = match policy {
        ReleasePolicy::Never => false,
        ReleasePolicy::Always => true,
        // Only what the scope's own devices can give back: `emptyCache` empties every device,
        // and another device's cache may be kept warm on purpose (a thread serving there with
        // `release = never`). A model unloaded elsewhere is what `always` and a size are for.
        ReleasePolicy::Outermost if blind => all.iter().any(|d| releasable(d) > 0),
        ReleasePolicy::Outermost => used.iter().any(|d| releasable(d) > 0),
        ReleasePolicy::Above(limit) => all.iter().any(|d| releasable(d) > limit),
    };
    if !run {
        return Released::default();
    }
    let before: Vec<u64> = all.iter().map(|d| stats(d).reserved).collect();
    // SAFETY: no arguments.
    let ran = crate::ffi::check(unsafe { crate::ffi::gs_empty_cache() }).is_ok();
    let per_device = all
        .iter()
        .zip(before)
        .map(|(d, before)| (*d, before.saturating_sub(stats(d).reserved)))
        .filter(|(d, bytes)| *bytes > 0 || used.contains(d))
        .collect();
    Released { ran, per_device }
}
