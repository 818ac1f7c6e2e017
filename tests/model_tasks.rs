//! Property test: async scope futures (`__private::ScopeFuture`, as model_check.rs drives them,
//! by hand with a no-op waker) made on one worker thread and polled, finished (`Finish`) and
//! dropped on any of three, each poll under whatever scopes are open on that thread then, beside
//! each thread's own sync scopes (strict `error`, lenient `ignore` / `warn`), allocations, drops
//! on any thread, keeps and returns. The test thread hands one step at a time to one worker and
//! waits for its reply (model_threads.rs's scheme), so each run is one repeatable interleaving.
//! Futures, `Finish`es and tensors move between threads inside the commands.
//!
//! The model (README "Threads and tasks", "The runtime API"; the ledger's rules as
//! model_check.rs states them):
//! - A thread's allocation is owned by its innermost scope and charged to every scope open on
//!   it; a task's poll's, owned by the task's scope and charged to it and to the scopes open on
//!   the polling thread. A free, on any thread, leaves the open scopes it was charged to.
//! - `keep` marks what the innermost scope on the calling thread owns (a task's `keep`, in a
//!   poll: its own scope), unless a scope open around it there marked it already.
//! - A checked end keeps what is handed back and what the scope, or one it ends inside, marked;
//!   the rest it owns escaped. All it owns moves to the innermost scope it ends into (charging
//!   those not charged yet), or out of tracking. A sync scope and a finished task end into the
//!   scopes open on the thread that exits them; a task's output goes only to those of them that
//!   were open where it was made (`ScopeFuture::enter` opens it there). Strict: `Err(Escaped)`
//!   exactly when something escaped; lenient: `Ok`. Every report's lines add up.
//! - A task dropped (cancelled, or its `Finish` dropped) ends unchecked into the scopes its last
//!   poll ran in (those still open, whichever thread drops it; never polled: where it was made),
//!   keeping all it owns. When none is open it is checked with nothing handed back and reports
//!   `cancelled`.
//!
//!   The scopes open on the thread that drops it did not run it and take nothing in.
//!
//! Left out: handles (`current()`, `in_scope`, `instrument`; model_threads.rs), the
//! `#[gpu_scope] async fn` macro (whose scope opens at the first poll), panics in polls,
//! `Scope::keep` on outer scopes, autograd. Tensors are on the test device (`.ci/fake-cuda`
//! runs this on the fake CUDA device too, whose caching allocator reuses addresses at once).
mod common;

use common::model::{fail, ledger_left_empty, Workers};
use common::{float_block, floats, serial};
use gpu_scope::__introspect::ledger_state;
use gpu_scope::__private::{Finish, ScopeFuture};
use gpu_scope::{Error, EscapePolicy, Scope, ScopeOptions, ScopeReport, StorageSet};
use proptest::prelude::*;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tch::Tensor;

const THREADS: usize = 3;
/// Sync scopes a thread may have open at once.
const MAX_LEVELS: usize = 4;
const MAX_TASKS: usize = 3;
const POLICIES: [EscapePolicy; 3] = [
    EscapePolicy::Error,
    EscapePolicy::Ignore,
    EscapePolicy::Warn,
];

/// One step, on thread `.0` (of [`THREADS`]). Other indices pick among what exists, modulo.
#[derive(Clone, Debug)]
enum Op {
    Alloc(usize, i64),
    /// Drops a pool tensor (made anywhere, by a thread or a task).
    Drop(usize, usize),
    /// `gpu_scope::keep` of a pool tensor.
    Keep(usize, usize),
    /// Hands a pool tensor back at the exit of the thread's innermost scope.
    Return(usize, usize),
    /// Opens a scope: policy 0 strict (`error`), 1 `ignore`, 2 `warn`.
    Nest(usize, u8),
    Exit(usize),
    Abandon(usize),
    /// Makes a task's future (at most [`MAX_TASKS`] alive), its scope opened there, suspended.
    TaskStart(usize, u8),
    /// Polls a task that has not returned: it allocates `floats`, then does `then` to the
    /// tensor it holds at `pick`.
    TaskPoll(usize, usize, i64, Then, usize),
    /// `Finish::try_exit` of a task that returned, keeping its output.
    TaskExit(usize, usize),
    /// Drops a task (its future, and its `Finish` if it returned).
    TaskCancel(usize, usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    Hold,
    Drop,
    Keep,
    Return,
}

fn op() -> impl Strategy<Value = Op> {
    let t = || 0..THREADS;
    let then = prop_oneof![3 => Just(Then::Hold), 2 => Just(Then::Drop), 1 => Just(Then::Keep),
        1 => Just(Then::Return)];
    let poll = (t(), any::<usize>(), 1i64..64, then, any::<usize>())
        .prop_map(|(t, k, n, then, pick)| Op::TaskPoll(t, k, n, then, pick));
    prop_oneof![
        6 => (t(), 1i64..64).prop_map(|(t, n)| Op::Alloc(t, n)),
        4 => (t(), any::<usize>()).prop_map(|(t, k)| Op::Drop(t, k)),
        2 => (t(), any::<usize>()).prop_map(|(t, k)| Op::Keep(t, k)),
        2 => (t(), any::<usize>()).prop_map(|(t, k)| Op::Return(t, k)),
        3 => (t(), 0u8..3).prop_map(|(t, p)| Op::Nest(t, p)),
        3 => t().prop_map(Op::Exit),
        1 => t().prop_map(Op::Abandon),
        3 => (t(), 0u8..3).prop_map(|(t, p)| Op::TaskStart(t, p)),
        9 => poll,
        3 => (t(), any::<usize>()).prop_map(|(t, k)| Op::TaskExit(t, k)),
        2 => (t(), any::<usize>()).prop_map(|(t, k)| Op::TaskCancel(t, k)),
    ]
}

/// A task's state. `order`: what its next poll does (id and floats of its allocation, then
/// `then` to the tensor it holds at the last index), set by the test thread before the poll.
#[derive(Default)]
struct Shared {
    order: Option<(usize, i64, Then, usize)>,
    held: Vec<(usize, Tensor)>,
    address: usize,
}

/// A future that carries out one order per poll, on whichever thread polls it.
struct Task(Arc<Mutex<Shared>>);

impl Future for Task {
    type Output = (usize, Tensor);

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<(usize, Tensor)> {
        let mut shared = self.0.lock().unwrap();
        let (id, n, then, pick) = shared.order.take().expect("every poll is ordered");
        let t = floats(n);
        shared.address = t.data_ptr() as usize;
        shared.held.push((id, t));
        let at = pick % shared.held.len();
        match then {
            Then::Hold => {}
            Then::Drop => drop(shared.held.remove(at)),
            Then::Keep => gpu_scope::keep(&shared.held[at].1),
            Then::Return => return Poll::Ready(shared.held.remove(at)),
        }
        Poll::Pending
    }
}

type Fut = Pin<Box<ScopeFuture<Task>>>;
type Output = ((usize, Tensor), Finish);

enum Cmd {
    Alloc(usize, i64),
    Drop(usize),
    Keep(usize),
    Nest(EscapePolicy),
    /// Exits the innermost scope handing back these pool tensors; `None`: abandons it.
    Exit(Option<Vec<usize>>),
    Start(EscapePolicy, String, Task),
    Poll(Fut),
    Finish(Finish, Vec<usize>),
    /// Drops a task; the reply's result is the thread's last report (a drop has no `Result`).
    Cancel(Fut, Option<Finish>),
}

#[derive(Default)]
struct Reply {
    address: usize,
    result: Option<Result<ScopeReport, Error>>,
    future: Option<Fut>,
    output: Option<Output>,
}

type Pool = Arc<Mutex<HashMap<usize, Tensor>>>;

fn serve(rx: Receiver<Cmd>, tx: Sender<Reply>, pool: Pool) {
    let mut scopes: Vec<Scope> = Vec::new();
    let last = || Some(Ok(gpu_scope::last_report().expect("the task reported")));
    while let Ok(cmd) = rx.recv() {
        let mut reply = Reply::default();
        match cmd {
            Cmd::Alloc(id, n) => {
                let t = floats(n);
                reply.address = t.data_ptr() as usize;
                pool.lock().unwrap().insert(id, t);
            }
            Cmd::Drop(id) => drop(pool.lock().unwrap().remove(&id)),
            Cmd::Keep(id) => gpu_scope::keep(&pool.lock().unwrap()[&id]),
            Cmd::Nest(policy) => {
                let opts = ScopeOptions::new("model").on_escape(policy);
                scopes.push(Scope::enter(opts).unwrap());
            }
            Cmd::Exit(None) => reply.result = Some(Ok(scopes.pop().unwrap().abandon())),
            Cmd::Exit(Some(ids)) => {
                let pool = pool.lock().unwrap();
                let kept: Vec<&Tensor> = ids.iter().filter_map(|id| pool.get(id)).collect();
                reply.result = Some(scopes.pop().unwrap().exit(&kept));
            }
            Cmd::Start(policy, name, task) => {
                let opts = ScopeOptions::new(name).on_escape(policy);
                reply.future = Some(Box::pin(ScopeFuture::enter(opts, task)));
            }
            Cmd::Poll(mut future) => {
                let mut cx = Context::from_waker(Waker::noop());
                if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                    reply.output = Some(output);
                }
                reply.future = Some(future);
            }
            Cmd::Finish(finish, ids) => {
                let mut kept = StorageSet::new();
                let held = pool.lock().unwrap();
                ids.iter()
                    .filter_map(|id| held.get(id))
                    .for_each(|t| kept.add_tensor(t));
                drop(held);
                reply.result = match finish.try_exit(kept) {
                    Ok(()) => last(),
                    Err(e) => Some(Err(e)),
                };
            }
            Cmd::Cancel(future, finish) => {
                drop((future, finish));
                reply.result = last();
            }
        }
        if tx.send(reply).is_err() {
            return;
        }
    }
}

#[derive(Default)]
struct Frame {
    open: bool,
    strict: bool,
    allocated: u64,
    freed: u64,
    allocations: u64,
    live: u64,
    peak: u64,
    /// What its end is given to keep (a task's: its output).
    returned: Vec<usize>,
}

/// One allocation: its owner (which judges it), the frames charged with it, and the frame
/// whose `keep` marked it.
struct Info {
    bytes: u64,
    address: usize,
    owner: Option<usize>,
    chain: Vec<usize>,
    kept_past: Option<usize>,
}

struct TaskRun {
    future: Option<Fut>,
    shared: Arc<Mutex<Shared>>,
    frame: usize,
    finish: Option<Finish>,
    /// The scopes open at its last poll (never polled: where it was made), and where made.
    polled_in: Vec<usize>,
    made_in: Vec<usize>,
}

#[derive(Default)]
struct Run {
    workers: Option<Workers<Cmd, Reply>>,
    pool: Pool,
    frames: Vec<Frame>,
    info: Vec<Info>,
    /// Each thread's open scopes, outermost first.
    stacks: Vec<Vec<usize>>,
    /// Ids of the pool's tensors.
    live: Vec<usize>,
    tasks: Vec<TaskRun>,
}

type Outcome = Result<(), TestCaseError>;

impl Run {
    fn new() -> Run {
        let pool = Pool::default();
        let serving = pool.clone();
        Run {
            workers: Some(Workers::start(THREADS, move |rx, tx| {
                serve(rx, tx, serving.clone())
            })),
            pool,
            stacks: vec![Vec::new(); THREADS],
            ..Run::default()
        }
    }

    fn ask(&self, t: usize, cmd: Cmd) -> Result<Reply, TestCaseError> {
        self.workers.as_ref().unwrap().ask(t, cmd)
    }

    fn new_frame(&mut self, strict: bool) -> usize {
        let mut frame = Frame::default();
        (frame.open, frame.strict) = (true, strict);
        self.frames.push(frame);
        self.frames.len() - 1
    }

    /// A new allocation charged to `chain`, owned by its last (innermost) frame.
    fn record(&mut self, address: usize, n: i64, chain: Vec<usize>) -> usize {
        let bytes = float_block(n);
        for &f in &chain {
            self.charge(f, bytes);
        }
        let (owner, kept_past) = (chain.last().copied(), None);
        let info = Info {
            bytes,
            address,
            owner,
            chain,
            kept_past,
        };
        self.info.push(info);
        self.info.len() - 1
    }

    fn charge(&mut self, f: usize, bytes: u64) {
        let frame = &mut self.frames[f];
        (frame.allocated, frame.allocations) = (frame.allocated + bytes, frame.allocations + 1);
        frame.live += bytes;
        frame.peak = frame.peak.max(frame.live);
    }

    /// No scope tracks `id` any more (freed, or out of every scope): it leaves the open frames
    /// charged with it.
    fn discharge(&mut self, id: usize, freed: bool) {
        let info = &mut self.info[id];
        info.owner = None;
        for f in std::mem::take(&mut info.chain) {
            let frame = &mut self.frames[f];
            if frame.open {
                frame.live -= info.bytes;
                frame.freed += if freed { info.bytes } else { 0 };
            }
        }
    }

    /// Gives `id` to the innermost of `into` (none: out of tracking), charging the frames of
    /// `into` not charged with it yet.
    fn hand_on(&mut self, id: usize, into: &[usize]) {
        let Some(&innermost) = into.last() else {
            return self.discharge(id, false);
        };
        self.info[id].owner = Some(innermost);
        for &f in into {
            if !self.info[id].chain.contains(&f) {
                self.charge(f, self.info[id].bytes);
                self.info[id].chain.push(f);
            }
        }
    }

    fn add_live(&mut self, id: usize, t: Tensor) {
        self.pool.lock().unwrap().insert(id, t);
        self.live.push(id);
    }

    /// The task `k` picks, if `fits` it.
    fn task(&self, k: usize, fits: impl Fn(&TaskRun) -> bool) -> Option<usize> {
        let i = k % self.tasks.len().max(1);
        (i < self.tasks.len() && fits(&self.tasks[i])).then_some(i)
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        let n_live = self.live.len().max(1);
        match *op {
            Op::Alloc(t, n) => {
                let address = self.ask(t, Cmd::Alloc(self.info.len(), n))?.address;
                let id = self.record(address, n, self.stacks[t].clone());
                self.live.push(id);
            }
            Op::Drop(t, k) if !self.live.is_empty() => {
                let id = self.live.remove(k % n_live);
                self.ask(t, Cmd::Drop(id))?;
                self.discharge(id, true);
                (self.frames.iter_mut()).for_each(|f| f.returned.retain(|&r| r != id));
            }
            Op::Keep(t, k) if !self.live.is_empty() => {
                let id = self.live[k % n_live];
                self.ask(t, Cmd::Keep(id))?;
                // Marks for the thread's innermost scope, if it owns it, unless a scope
                // around it there marked it already.
                if let Some((&head, outside)) = self.stacks[t].split_last() {
                    let info = &mut self.info[id];
                    let further_out = info.kept_past.is_some_and(|m| outside.contains(&m));
                    if info.owner == Some(head) && !further_out {
                        info.kept_past = Some(head);
                    }
                }
            }
            Op::Return(t, k) if !self.live.is_empty() => {
                let id = self.live[k % n_live];
                if let Some(&f) = self.stacks[t].last() {
                    if !self.frames[f].returned.contains(&id) {
                        self.frames[f].returned.push(id);
                    }
                }
            }
            Op::Nest(t, p) if self.stacks[t].len() < MAX_LEVELS => {
                self.ask(t, Cmd::Nest(POLICIES[p as usize]))?;
                let f = self.new_frame(p == 0);
                self.stacks[t].push(f);
            }
            Op::Exit(t) if !self.stacks[t].is_empty() => self.exit(t, true)?,
            Op::Abandon(t) if !self.stacks[t].is_empty() => self.exit(t, false)?,
            Op::TaskStart(t, p) if self.tasks.len() < MAX_TASKS => {
                let shared = Arc::new(Mutex::new(Shared::default()));
                let (task, frame) = (Task(shared.clone()), self.new_frame(p == 0));
                let cmd = Cmd::Start(POLICIES[p as usize], format!("task{frame}"), task);
                let future = self.ask(t, cmd)?.future;
                let (polled_in, made_in) = (self.stacks[t].clone(), self.stacks[t].clone());
                let finish = None;
                let task = TaskRun {
                    future,
                    shared,
                    frame,
                    finish,
                    polled_in,
                    made_in,
                };
                self.tasks.push(task);
            }
            Op::TaskPoll(t, k, n, then, at) => {
                if let Some(i) = self.task(k, |task| task.finish.is_none()) {
                    self.poll_task(t, i, (n, then, at))?;
                }
            }
            Op::TaskExit(t, k) => {
                if let Some(i) = self.task(k, |task| task.finish.is_some()) {
                    self.end_task(t, i, true)?;
                }
            }
            Op::TaskCancel(t, k) => {
                if let Some(i) = self.task(k, |_| true) {
                    self.end_task(t, i, false)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Polls task `i` on thread `t`: its allocation is owned by its scope and charged to it
    /// and to the scopes open on `t`.
    fn poll_task(&mut self, t: usize, i: usize, order: (i64, Then, usize)) -> Outcome {
        let (n, then, at) = order;
        let (frame, shared) = (self.tasks[i].frame, self.tasks[i].shared.clone());
        let id = self.info.len();
        let mut held: Vec<usize> = shared.lock().unwrap().held.iter().map(|h| h.0).collect();
        held.push(id);
        let target = held[at % held.len()];
        shared.lock().unwrap().order = Some((id, n, then, at));
        let future = self.tasks[i].future.take().unwrap();
        let reply = self.ask(t, Cmd::Poll(future))?;
        self.tasks[i].future = reply.future;
        self.tasks[i].polled_in = self.stacks[t].clone();
        let chain = [&self.stacks[t][..], &[frame]].concat();
        let address = shared.lock().unwrap().address;
        self.record(address, n, chain);
        match (then, reply.output) {
            (Then::Hold, None) => {}
            (Then::Drop, None) => self.discharge(target, true),
            (Then::Keep, None) => {
                let info = &mut self.info[target];
                if !info.kept_past.is_some_and(|m| self.stacks[t].contains(&m)) {
                    info.kept_past = Some(frame);
                }
            }
            (Then::Return, Some(((id, tensor), finish))) => {
                prop_assert_eq!(id, target);
                self.frames[frame].returned.push(id);
                self.add_live(id, tensor);
                self.tasks[i].finish = Some(finish);
            }
            (then, output) => prop_assert!(false, "{:?} gave ready: {}", then, output.is_some()),
        }
        Ok(())
    }

    /// Ends task `i` on thread `t`: `exit`, a returned task's check there, keeping its output
    /// if still alive; else a drop, unchecked into its last poll's scopes still open or, when
    /// none is, checked with nothing handed back (`t`'s scopes take nothing in).
    fn end_task(&mut self, t: usize, i: usize, exit: bool) -> Outcome {
        let task = &self.tasks[i];
        let stack = self.stacks[t].clone();
        let open = |f: &usize| self.frames[*f].open;
        let last_poll: Vec<usize> = task.polled_in.iter().copied().filter(open).collect();
        let cancelled = !exit && last_poll.is_empty();
        let mut task = self.tasks.remove(i);
        let returned = &self.frames[task.frame].returned;
        let ids = self.live.iter().copied().filter(|id| returned.contains(id));
        let cmd = match (exit, task.future.take().unwrap()) {
            (true, _) => Cmd::Finish(task.finish.take().unwrap(), ids.collect()),
            (false, future) => Cmd::Cancel(future, task.finish.take()),
        };
        self.take_held(&task);
        let result = self.ask(t, cmd)?.result.unwrap();
        let ends = match exit {
            true => {
                let common = stack.iter().rposition(|f| task.made_in.contains(f));
                let kept_into = stack[..common.map_or(0, |at| at + 1)].to_vec();
                (true, false, stack, kept_into)
            }
            false => {
                if cancelled {
                    self.frames[task.frame].returned.clear();
                }
                (cancelled, cancelled, last_poll.clone(), last_poll)
            }
        };
        self.judge(task.frame, &format!("task{}", task.frame), result, ends)
    }

    /// The program takes the tensors a task still holds.
    fn take_held(&mut self, task: &TaskRun) {
        let held = std::mem::take(&mut task.shared.lock().unwrap().held);
        held.into_iter().for_each(|(id, t)| self.add_live(id, t));
    }

    /// Exits (`checked`) or abandons thread `t`'s innermost scope.
    fn exit(&mut self, t: usize, checked: bool) -> Outcome {
        let f = self.stacks[t].pop().unwrap();
        let returned = checked.then(|| self.frames[f].returned.clone());
        let reply = self.ask(t, Cmd::Exit(returned))?;
        let into = self.stacks[t].clone();
        let ends = (checked, false, into.clone(), into);
        self.judge(f, "model", reply.result.unwrap(), ends)
    }

    /// Closes frame `f` (`ends`: checked, cancelled, ended into `into`, its output into
    /// `kept_into`) and compares its end's result with the model.
    fn judge(
        &mut self,
        f: usize,
        name: &str,
        result: Result<ScopeReport, Error>,
        ends: (bool, bool, Vec<usize>, Vec<usize>),
    ) -> Outcome {
        let (checked, cancelled, into, kept_into) = ends;
        self.frames[f].open = false;
        let returned = std::mem::take(&mut self.frames[f].returned);
        let (kept, escaped): (Vec<usize>, Vec<usize>) = (0..self.info.len())
            .filter(|&id| self.info[id].owner == Some(f))
            .partition(|&id| {
                // Marked by this frame or by one it ends inside.
                let marked = (self.info[id].kept_past).is_some_and(|m| m == f || into.contains(&m));
                !checked || returned.contains(&id) || marked
            });
        let mut escapes: Vec<(usize, u64)> = escaped
            .iter()
            .map(|&id| (self.info[id].address, self.info[id].bytes))
            .collect();
        let kept_bytes: u64 = kept.iter().map(|&id| self.info[id].bytes).sum();
        // All it owns moves on, its output to `kept_into`, first: in one close, what leaves
        // tracking leaves before the rest is charged (a peak in between would depend on order).
        let (outputs, rest): (Vec<usize>, Vec<usize>) = (kept.iter().chain(&escaped))
            .partition(|&id| returned.contains(id) && kept.contains(id));
        outputs
            .into_iter()
            .for_each(|id| self.hand_on(id, &kept_into));
        rest.into_iter().for_each(|id| self.hand_on(id, &into));
        // Strict: `Err(Escaped)` exactly when something escaped (a dropped task has no result).
        let strict = self.frames[f].strict && !cancelled;
        let r = match result {
            Ok(r) if !strict || escapes.is_empty() => r,
            Err(Error::Escaped(r)) if strict && !escapes.is_empty() => *r,
            other => return Err(fail(format!("end of {name} gave {other:?}"))),
        };
        let what = (&*r.name, r.checked, r.cancelled);
        prop_assert_eq!(what, (name, checked, cancelled));
        let mut reported: Vec<(usize, u64)> =
            r.escaped.iter().map(|e| (e.address, e.bytes)).collect();
        reported.sort_unstable();
        escapes.sort_unstable();
        prop_assert_eq!(reported, escapes.clone(), "escapes of {}", r);
        let got = [r.allocated, r.freed, r.allocations, r.peak, r.kept];
        let fr = &self.frames[f];
        let expected = [fr.allocated, fr.freed, fr.allocations, fr.peak, kept_bytes];
        prop_assert_eq!(
            got,
            expected,
            "allocated, freed, allocations, peak, kept of {}",
            r
        );
        let held: u64 = r.held.iter().map(|h| h.bytes).sum();
        let lines = r.freed + r.kept + r.escaped_bytes + held;
        prop_assert_eq!(r.allocated, lines, "lines of {}", r);
        let status = match (checked, escapes.is_empty()) {
            (false, _) => "not checked",
            (true, true) => "clean",
            (true, false) => "escaped",
        };
        prop_assert_eq!(r.status(), status, "status of {}", r);
        Ok(())
    }

    /// Ends what is left: each task (a last poll that returns, on thread 0, then its check
    /// there), then every thread's scopes, innermost first.
    fn finish(&mut self) -> Outcome {
        while !self.tasks.is_empty() {
            self.apply(&Op::TaskPoll(0, 0, 1, Then::Return, 0))?;
            self.end_task(0, 0, true)?;
        }
        for t in 0..THREADS {
            while !self.stacks[t].is_empty() {
                self.exit(t, true)?;
            }
        }
        Ok(())
    }
}

/// Runs `program` (each worker starts inside one strict scope), ends what it left, and checks
/// every report, then that the ledger is empty.
fn check(program: &[Op]) -> Outcome {
    let failures = ledger_state().callback_failures;
    let mut run = Run::new();
    for t in 0..THREADS {
        run.apply(&Op::Nest(t, 0))?;
    }
    for op in program {
        run.apply(op)?;
    }
    run.finish()?;
    run.pool.lock().unwrap().clear();
    drop(run);
    ledger_left_empty(failures)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn tasks_across_threads_match_the_model(program in prop::collection::vec(op(), 0..80)) {
        // The ledger's counts are process-wide.
        let _serial = serial();
        check(&program)?;
    }
}

/// A task made on thread 0 holds a tensor made in a poll under thread 2's scope, returns it in
/// a poll on thread 0 and is checked on thread 2: in that one close its output leaves tracking
/// (it was made elsewhere: the output is the caller's) and its other tensor, escaped, moves
/// into thread 2's scope, whose peak counts one of the two.
#[test]
fn an_output_leaving_and_an_escape_arriving_in_one_close_give_one_peak() {
    let program = [
        Op::TaskStart(0, 0),
        Op::TaskPoll(2, 0, 1, Then::Hold, 0),
        Op::TaskPoll(0, 0, 1, Then::Return, 0),
        Op::TaskExit(2, 0),
    ];
    let _serial = serial();
    check(&program).unwrap();
}
