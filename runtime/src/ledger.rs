//! The process-wide ledger of live allocations made inside scopes, and the callbacks through
//! which the C++ shim reports allocations and frees into it.
//!
//! One mutex guards everything: allocations and frees may arrive from any thread (a tensor made
//! in a scope can be freed elsewhere), and frames are only ever touched briefly.
use crate::device::DeviceId;
use crate::ffi::Deleter;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;
use std::backtrace::Backtrace;
use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

/// An allocation's identity: its base address and device.
pub(crate) type Key = (usize, DeviceId);
pub(crate) type FrameId = u64;

pub(crate) struct Entry {
    pub frame: FrameId,
    pub bytes: u64,
    pub op: Option<&'static str>,
    /// Shape and dtype of the tensor made in it; inline up to 4 dims, so that tracking
    /// makes no heap allocation of its own per block.
    pub tensor: Option<(SmallVec<[i64; 4]>, &'static str)>,
    pub backtrace: Option<Box<Backtrace>>,
}

#[derive(Default)]
pub(crate) struct Frame {
    parent: Option<FrameId>,
    pub allocated: u64,
    pub freed: u64,
    pub allocations: u64,
    live: u64,
    pub peak: u64,
    pub devices: BTreeSet<DeviceId>,
    keys: HashSet<Key>,
    marked: HashSet<Key>,
}

/// The original owner of a CPU block whose deleter the shim replaced.
struct Wrapped {
    ctx: usize,
    deleter: Deleter,
    bytes: u64,
}

#[derive(Default)]
struct Ledger {
    entries: HashMap<Key, Entry>,
    frames: HashMap<FrameId, Frame>,
    innermost: HashMap<u64, FrameId>,
    cpu: HashMap<usize, Wrapped>,
    names: HashSet<&'static str>,
    /// Operator names by the address the shim passed them at (libtorch's names are static).
    names_at: HashMap<usize, &'static str>,
    next_frame: FrameId,
}

static LEDGER: LazyLock<Mutex<Ledger>> = LazyLock::new(Default::default);
static CPU_LIVE: AtomicU64 = AtomicU64::new(0);
static CPU_PEAK: AtomicU64 = AtomicU64::new(0);

fn ledger() -> MutexGuard<'static, Ledger> {
    // A panic never happens while the lock is held, but never let poisoning cascade.
    LEDGER.lock().unwrap_or_else(|e| e.into_inner())
}

fn backtraces_enabled() -> bool {
    static ON: LazyLock<bool> =
        LazyLock::new(|| std::env::var("GPU_SCOPE_BACKTRACE").is_ok_and(|v| v == "1"));
    *ON
}

/// Bytes of CPU blocks made inside scopes that are still alive, and their peak.
pub(crate) fn cpu_scoped_bytes() -> (u64, u64) {
    (
        CPU_LIVE.load(Ordering::Relaxed),
        CPU_PEAK.load(Ordering::Relaxed),
    )
}

pub(crate) fn reset_cpu_peak() {
    CPU_PEAK.store(CPU_LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

impl Ledger {
    /// Applies `f` to `start` and each of its enclosing frames.
    fn walk(&mut self, start: Option<FrameId>, mut f: impl FnMut(&mut Frame)) {
        let mut at = start;
        while let Some(frame) = at.and_then(|id| self.frames.get_mut(&id)) {
            f(frame);
            at = frame.parent;
        }
    }

    /// Removes an entry; `freed` says whether the memory went away or only left tracking.
    fn remove(&mut self, key: Key, freed: bool) {
        let Some(entry) = self.entries.remove(&key) else {
            return;
        };
        if let Some(frame) = self.frames.get_mut(&entry.frame) {
            frame.keys.remove(&key);
        }
        self.walk(Some(entry.frame), |f| {
            f.live -= entry.bytes;
            if freed {
                f.freed += entry.bytes;
            }
        });
    }

    fn intern(&mut self, name: *const c_char) -> Option<&'static str> {
        if name.is_null() {
            return None;
        }
        // SAFETY: the shim passes the running operator's NUL-terminated name.
        let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
        if let Some(&known) = self.names_at.get(&(name as usize)) {
            if known.as_bytes() == bytes {
                return Some(known);
            }
        }
        let text = String::from_utf8_lossy(bytes);
        let known = match self.names.get(text.as_ref()) {
            Some(&known) => known,
            None => {
                let leaked: &'static str = Box::leak(text.into_owned().into_boxed_str());
                self.names.insert(leaked);
                leaked
            }
        };
        self.names_at.insert(name as usize, known);
        Some(known)
    }
}

/// Called by the shim for every allocation on a thread (or intra-op worker) inside a scope.
/// Returns 1 when a CPU block is now tracked and its deleter must be replaced.
#[no_mangle]
extern "C" fn gs_rust_on_alloc(
    owner: u64,
    ptr: *mut c_void,
    nbytes: usize,
    dev_type: c_int,
    dev_index: c_int,
    op: *const c_char,
    orig_ctx: *mut c_void,
    orig_deleter: Deleter,
) -> c_int {
    let device = DeviceId::from_raw(dev_type, dev_index);
    let key = (ptr as usize, device);
    let bytes = nbytes as u64;
    let backtrace = backtraces_enabled().then(|| Box::new(Backtrace::force_capture()));
    let mut l = ledger();
    let Some(&frame) = l.innermost.get(&owner) else {
        return 0;
    };
    // A stale entry at this address means its free was never reported (a thread outside
    // any scope freed an accelerator block): it is gone now.
    l.remove(key, true);
    let op = l.intern(op);
    l.entries.insert(
        key,
        Entry {
            frame,
            bytes,
            op,
            tensor: None,
            backtrace,
        },
    );
    l.walk(Some(frame), |f| {
        f.allocated += bytes;
        f.allocations += 1;
        f.live += bytes;
        f.peak = f.peak.max(f.live);
        f.devices.insert(device);
        // A `keep` mark at this address was for a block that is gone.
        f.marked.remove(&key);
    });
    if let Some(f) = l.frames.get_mut(&frame) {
        f.keys.insert(key);
    }
    if !device.is_cpu() {
        return 0;
    }
    l.cpu.insert(
        key.0,
        Wrapped {
            ctx: orig_ctx as usize,
            deleter: orig_deleter,
            bytes,
        },
    );
    let live = CPU_LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    CPU_PEAK.fetch_max(live, Ordering::Relaxed);
    1
}

/// Called when a tracked CPU block dies, on whichever thread drops it. Hands back the original
/// deleter and context so that the shim frees the block the way libtorch would have.
#[no_mangle]
extern "C" fn gs_rust_on_cpu_free(ptr: *mut c_void, deleter: *mut Deleter) -> *mut c_void {
    let mut l = ledger();
    let Some(w) = l.cpu.remove(&(ptr as usize)) else {
        return std::ptr::null_mut();
    };
    CPU_LIVE.fetch_sub(w.bytes, Ordering::Relaxed);
    l.remove((ptr as usize, DeviceId::CPU), true);
    // SAFETY: the shim passes a valid out-pointer.
    unsafe { *deleter = w.deleter };
    w.ctx as *mut c_void
}

/// Called when the accelerator's caching allocator frees a block on a thread inside a scope.
#[no_mangle]
extern "C" fn gs_rust_on_free(ptr: *mut c_void, dev_type: c_int, dev_index: c_int) {
    let key = (ptr as usize, DeviceId::from_raw(dev_type, dev_index));
    ledger().remove(key, true);
}

/// Called after an operator that allocated: remembers the shape and dtype of its outputs.
#[no_mangle]
extern "C" fn gs_rust_note_tensor(
    ptr: *mut c_void,
    dev_type: c_int,
    dev_index: c_int,
    dims: *const i64,
    ndim: usize,
    dtype: *const c_char,
) {
    let key = (ptr as usize, DeviceId::from_raw(dev_type, dev_index));
    let mut l = ledger();
    let Some(entry) = l.entries.get(&key) else {
        return;
    };
    if entry.tensor.is_some() {
        return;
    }
    // SAFETY: the shim passes `ndim` sizes and a NUL-terminated dtype name.
    let shape = SmallVec::from_slice(unsafe { std::slice::from_raw_parts(dims, ndim) });
    let dtype = l.intern(dtype).unwrap_or("?");
    if let Some(entry) = l.entries.get_mut(&key) {
        entry.tensor = Some((shape, dtype));
    }
}

/// Opens a frame as the innermost on `owner`'s thread (or re-opens a suspended one).
pub(crate) fn open(owner: u64, resume: Option<FrameId>) -> FrameId {
    let mut l = ledger();
    let parent = l.innermost.get(&owner).copied();
    let id = resume.unwrap_or_else(|| {
        l.next_frame += 1;
        l.next_frame
    });
    l.frames.entry(id).or_default().parent = parent;
    l.innermost.insert(owner, id);
    id
}

/// Takes a frame off `owner`'s thread without ending it (an async scope between polls).
pub(crate) fn suspend(owner: u64, id: FrameId) {
    let mut l = ledger();
    let parent = l.frames.get_mut(&id).and_then(|f| f.parent.take());
    match parent {
        Some(p) => l.innermost.insert(owner, p),
        None => l.innermost.remove(&owner),
    };
}

pub(crate) fn mark_kept(id: FrameId, keys: impl IntoIterator<Item = Key>) {
    if let Some(f) = ledger().frames.get_mut(&id) {
        f.marked.extend(keys);
    }
}

/// Marks storages as kept by the innermost frame open on `owner`'s thread.
pub(crate) fn mark_kept_innermost(owner: u64, keys: impl IntoIterator<Item = Key>) {
    let mut l = ledger();
    if let Some(id) = l.innermost.get(&owner).copied() {
        if let Some(f) = l.frames.get_mut(&id) {
            f.marked.extend(keys);
        }
    }
}

pub(crate) fn devices(id: FrameId) -> BTreeSet<DeviceId> {
    ledger()
        .frames
        .get(&id)
        .map(|f| f.devices.clone())
        .unwrap_or_default()
}

/// What became of a frame's live allocations when it closed.
pub(crate) struct Closed {
    pub frame: Frame,
    pub kept: u64,
    pub graph_held: u64,
    pub escaped: Vec<(Key, Entry)>,
}

/// Ends a frame. Live allocations in `kept` (or marked with `keep`) move to the enclosing
/// frame; with `check`, the others are escapes (or, when `graph` says a kept tensor has an
/// autograd graph we cannot see into, held by that graph); without it, all move on unchecked.
pub(crate) fn close(
    owner: u64,
    id: FrameId,
    kept: &HashSet<Key>,
    graph: bool,
    check: bool,
) -> Closed {
    let mut l = ledger();
    let mut frame = l.frames.remove(&id).unwrap_or_default();
    let parent = frame.parent;
    if l.innermost.get(&owner) == Some(&id) {
        match parent {
            Some(p) => l.innermost.insert(owner, p),
            None => l.innermost.remove(&owner),
        };
    }
    let mut closed = Closed {
        frame: Frame::default(),
        kept: 0,
        graph_held: 0,
        escaped: vec![],
    };
    let parent = parent.filter(|p| l.frames.contains_key(p));
    for key in std::mem::take(&mut frame.keys) {
        let Some(bytes) = l.entries.get(&key).map(|e| e.bytes) else {
            continue;
        };
        let keep = !check || kept.contains(&key) || frame.marked.contains(&key);
        if keep {
            closed.kept += bytes;
        } else if graph {
            closed.graph_held += bytes;
        }
        if let (true, Some(p)) = (keep || graph, parent) {
            l.entries.get_mut(&key).expect("entry present").frame = p;
            l.frames
                .get_mut(&p)
                .expect("parent present")
                .keys
                .insert(key);
            continue;
        }
        let entry = l.entries.remove(&key).expect("entry present");
        l.walk(parent, |f| f.live -= entry.bytes);
        if !keep && !graph {
            closed.escaped.push((key, entry));
        }
    }
    closed.frame = frame;
    closed
}

/// Tracked entries, open frames, threads with an open frame, wrapped CPU blocks.
pub(crate) fn counts() -> (usize, usize, usize, usize) {
    let l = ledger();
    (
        l.entries.len(),
        l.frames.len(),
        l.innermost.len(),
        l.cpu.len(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (found by tests/model_check.rs): a `keep` mark outlived the block it was for,
    /// so a new block at the same address counted as kept instead of escaped. The allocator
    /// does not reuse addresses on demand, so this drives the ledger with a made-up device block.
    #[test]
    fn a_keep_mark_dies_with_its_block() {
        let owner = u64::MAX;
        let (address, cuda) = (0x7000_0000_usize, 1);
        let key = (address, DeviceId::from_raw(cuda, 0));
        let alloc = || {
            let null = std::ptr::null_mut();
            gs_rust_on_alloc(
                owner,
                address as *mut c_void,
                64,
                cuda,
                0,
                std::ptr::null(),
                null,
                None,
            )
        };
        let frame = open(owner, None);
        alloc();
        mark_kept(frame, [key]);
        gs_rust_on_free(address as *mut c_void, cuda, 0);
        alloc();
        let closed = close(owner, frame, &HashSet::default(), false, true);
        assert_eq!(closed.escaped.len(), 1, "the second block was never kept");
        assert_eq!(closed.kept, 0);
    }
}
