//! Property test: random programs of allocate / drop / keep / return / nest / exit run under
//! real scopes, and every report is compared with a small model of what it must say.
mod common;

use common::floats;
use gpu_scope::__introspect::ledger_state;
use gpu_scope::{EscapePolicy, Scope, ScopeOptions};
use proptest::prelude::*;
use std::collections::HashSet;
use tch::Tensor;

#[derive(Clone, Debug)]
enum Op {
    Alloc(i64),
    Drop(usize),
    Keep(usize),
    Return(usize),
    Nest,
    Exit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..64).prop_map(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::Keep),
        1 => any::<usize>().prop_map(Op::Return),
        1 => Just(Op::Nest),
        1 => Just(Op::Exit),
    ]
}

/// What the model expects of one open scope.
#[derive(Default)]
struct Frame {
    allocated: u64,
    freed: u64,
    allocations: u64,
    live: u64,
    peak: u64,
    marked: HashSet<usize>,
    returned: Vec<usize>,
}

/// One allocation: its size, address, and the level of the scope that tracks it (if any).
struct Info {
    bytes: u64,
    address: usize,
    owner: Option<usize>,
}

#[derive(Default)]
struct Run {
    scopes: Vec<Scope>,
    frames: Vec<Frame>,
    live: Vec<(usize, Tensor)>,
    info: Vec<Info>,
}

fn options() -> ScopeOptions {
    ScopeOptions::new("model").on_escape(EscapePolicy::Ignore)
}

impl Run {
    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let pick = |k: usize, n: usize| (n > 0).then(|| k % n);
        match *op {
            Op::Alloc(n) => {
                let t = floats(n);
                let bytes = 4 * n as u64;
                let owner = self.frames.len() - 1;
                self.info.push(Info {
                    bytes,
                    address: t.data_ptr() as usize,
                    owner: Some(owner),
                });
                self.live.push((self.info.len() - 1, t));
                for f in &mut self.frames {
                    f.allocated += bytes;
                    f.allocations += 1;
                    f.live += bytes;
                    f.peak = f.peak.max(f.live);
                }
            }
            Op::Drop(k) => {
                let Some(i) = pick(k, self.live.len()) else {
                    return Ok(());
                };
                let (id, t) = self.live.remove(i);
                drop(t);
                let info = &mut self.info[id];
                if let Some(owner) = info.owner.take() {
                    for f in &mut self.frames[..=owner] {
                        f.live -= info.bytes;
                        f.freed += info.bytes;
                    }
                }
                for f in &mut self.frames {
                    f.returned.retain(|&r| r != id);
                }
            }
            Op::Keep(k) => {
                let Some(i) = pick(k, self.live.len()) else {
                    return Ok(());
                };
                gpu_scope::keep(&self.live[i].1);
                self.frames
                    .last_mut()
                    .unwrap()
                    .marked
                    .insert(self.live[i].0);
            }
            Op::Return(k) => {
                let Some(i) = pick(k, self.live.len()) else {
                    return Ok(());
                };
                let returned = &mut self.frames.last_mut().unwrap().returned;
                if !returned.contains(&self.live[i].0) {
                    returned.push(self.live[i].0);
                }
            }
            Op::Nest if self.frames.len() < 4 => {
                self.scopes.push(Scope::enter(options()).unwrap());
                self.frames.push(Frame::default());
            }
            Op::Exit if self.frames.len() > 1 => self.exit()?,
            Op::Nest | Op::Exit => {}
        }
        Ok(())
    }

    /// Exits the innermost scope and checks its report against the model.
    fn exit(&mut self) -> Result<(), TestCaseError> {
        let scope = self.scopes.pop().unwrap();
        let frame = self.frames.pop().unwrap();
        let level = self.frames.len();
        let returned: Vec<&Tensor> = (self.live.iter())
            .filter(|(id, _)| frame.returned.contains(id))
            .map(|(_, t)| t)
            .collect();
        let report = scope.exit(&returned).expect("policy is ignore");
        let (mut kept, mut escapes) = (0, vec![]);
        for (id, info) in self.info.iter_mut().enumerate() {
            if info.owner != Some(level) {
                continue;
            }
            if frame.returned.contains(&id) || frame.marked.contains(&id) {
                kept += info.bytes;
                info.owner = level.checked_sub(1);
            } else {
                escapes.push((info.address, info.bytes));
                info.owner = None;
                for f in &mut self.frames {
                    f.live -= info.bytes;
                }
            }
        }
        let mut reported: Vec<(usize, u64)> = report
            .escaped
            .iter()
            .map(|e| (e.address, e.bytes))
            .collect();
        reported.sort_unstable();
        escapes.sort_unstable();
        prop_assert_eq!(reported, escapes, "escapes of {}", report);
        let expected = (
            frame.allocated,
            frame.freed,
            frame.allocations,
            frame.peak,
            kept,
        );
        let got = (
            report.allocated,
            report.freed,
            report.allocations,
            report.peak,
            report.kept,
        );
        prop_assert_eq!(
            got,
            expected,
            "(allocated, freed, allocations, peak, kept) of {}",
            report
        );
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn reports_match_the_model(program in prop::collection::vec(op(), 0..60)) {
        let mut run = Run::default();
        run.scopes.push(Scope::enter(options()).unwrap());
        run.frames.push(Frame::default());
        for op in &program {
            run.apply(op)?;
        }
        while !run.frames.is_empty() {
            run.exit()?;
        }
        drop(run);
        let state = ledger_state();
        prop_assert_eq!((state.depth, state.entries, state.frames, state.wrapped), (0, 0, 0, 0));
    }
}
