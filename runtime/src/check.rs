//! The escape check: what each allocation still alive at a scope's exit is. Kept, held on
//! purpose by a library or by tensors the scope cannot see, or escaped.
use crate::device::DeviceId;
use crate::ffi;
use crate::ledger::{self, Entry, Fate, Frame, Judge, Key};
use crate::report::HeldBy;
use crate::tensors::StorageSet;
use rustc_hash::{FxHashMap, FxHashSet};

/// What the check needs to know, gathered before the frame closes.
pub(crate) struct Check<'a> {
    kept: &'a StorageSet,
    /// Blocks libraries keep on purpose, by what keeps them.
    workspaces: FxHashMap<Key, &'static str>,
    /// Requested sizes that optimizer state has: those of the gradients made in the scope,
    /// and of a kept optimizer's variables (`StorageSet::optimized`, or given to `keep`).
    gradients: FxHashSet<(DeviceId, u64)>,
    /// autocast's cached casts that clearing its cache freed.
    autocast: Vec<ledger::HeldLine>,
    /// Autograd graph nodes were made while the scope ran, and a kept tensor has a graph not
    /// made before the scope: it may hold some of its allocations. Otherwise no graph can.
    graph: bool,
    /// Kept values that could not be looked into: unkept memory must not be called escaped.
    pub uninspected: Vec<&'static str>,
}

impl<'a> Check<'a> {
    /// Looks at the frame's live allocations before it closes. Only when some accelerator
    /// allocation is not kept does it ask libtorch for its workspaces and clear autocast's
    /// cache (whose casts would otherwise outlive the scope).
    /// `since`: the thread the scope was entered on and its count of autograd nodes then.
    pub(crate) fn prepare(
        frame: &Frame,
        kept: &'a StorageSet,
        since: Option<(u64, u64)>,
    ) -> Check<'a> {
        let mut check = Check {
            kept,
            workspaces: FxHashMap::default(),
            gradients: FxHashSet::default(),
            autocast: Vec::new(),
            graph: frame.noted(ledger::GRAPH) && kept.graph_since(since),
            uninspected: kept.blind_to(|key| {
                ledger::with_entry(key, |e| e.charged_to_frame(frame)).unwrap_or(false)
            }),
        };
        let mut candidates: Vec<(Key, u64)> = Vec::new();
        if frame.noted(ledger::BLIND_KEPT) {
            for name in frame.blind_kept() {
                if !check.uninspected.contains(&name) {
                    check.uninspected.push(name);
                }
            }
        }
        frame.know_optimizers(kept);
        let (keys, gradients) = ledger::entries_to_inspect(frame);
        check.gradients = gradients;
        for key in keys {
            let Some((bytes, asked, made)) =
                ledger::with_entry(key, |e| (e.bytes, e.asked(), e.made))
            else {
                continue;
            };
            // By what the tensor asked for: on CUDA any request up to 512 B gets a 512-byte
            // block, so blocks would match any small leak to any small gradient.
            if made.backward {
                check.gradients.insert((key.1, asked));
            }
            if !key.1.is_cpu() && !kept.keys.contains(&key) {
                candidates.push((key, bytes));
            }
        }
        if candidates.is_empty() {
            return check;
        }
        check.workspaces = workspaces();
        if ffi::autocast_clear() {
            check.autocast = candidates
                .iter()
                .filter(|(key, _)| ledger::with_entry(*key, |_| ()).is_none())
                .map(|&(key, bytes)| (HeldBy::AutocastCache, key.1, bytes, 1))
                .collect();
        }
        check
    }

    /// The cached casts freed by clearing autocast's cache, to report on their own line.
    pub(crate) fn autocast_freed(&self) -> Vec<ledger::HeldLine> {
        self.autocast.clone()
    }
}

impl Judge for Check<'_> {
    fn fate(&self, key: Key, entry: &Entry, marked: bool) -> Fate {
        if self.kept.keys.contains(&key) {
            Fate::Kept
        } else if marked {
            Fate::Marked
        } else if let Some(&kind) = self.workspaces.get(&key) {
            Fate::Held(HeldBy::Workspace(kind))
        } else if entry.made.backward {
            Fate::Held(HeldBy::Gradient)
        } else if entry.made.grad_off
            && !entry.made.escaped
            && self.gradients.contains(&(key.1, entry.asked()))
        {
            // The size of a gradient made here, or of a kept optimizer's variable (see
            // `FrameState::variables`); not what a scope inside this one found escaped (a
            // helper's leak under `warn`).
            Fate::Held(HeldBy::OptimizerState)
        } else if self.graph {
            Fate::Held(HeldBy::AutogradGraph)
        } else if !self.uninspected.is_empty() {
            Fate::Held(HeldBy::Uninspected)
        } else {
            Fate::Escaped
        }
    }
}

/// The blocks that libraries keep allocated on purpose (cuBLAS and cuBLASLt workspaces).
fn workspaces() -> FxHashMap<Key, &'static str> {
    let mut found = FxHashMap::default();
    // SAFETY: the visitor matches the shim's type and gets `found` back, alive for the call.
    let _ = ffi::check(unsafe {
        ffi::gs_workspaces(
            crate::hooks::gs_rust_visit_workspace,
            (&mut found as *mut FxHashMap<Key, &'static str>).cast(),
        )
    });
    found
}
