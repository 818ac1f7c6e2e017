//! What the model tests (`model_check.rs`, `model_threads.rs`, `model_tasks.rs`) share: worker
//! threads driven one step at a time, and the check that a case left the ledger empty.
use gpu_scope::__introspect::ledger_state;
use proptest::prelude::*;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

/// A failed case, saying why.
pub fn fail(why: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(why.to_string())
}

/// Worker threads that each run one command when the test thread hands it one and waits for
/// the reply, so that only one thread runs at a time and a run's interleaving is its program's
/// (a failure replays from its seed). Dropped, it closes the workers' channels and joins them
/// (a failed case leaves them mid-program).
pub struct Workers<C, R> {
    to: Vec<Sender<C>>,
    from: Receiver<R>,
    threads: Vec<JoinHandle<()>>,
}

impl<C: Send + 'static, R: Send + 'static> Workers<C, R> {
    /// `n` threads, each running `serve` with its own commands and the shared replies.
    pub fn start(
        n: usize,
        serve: impl Fn(Receiver<C>, Sender<R>) + Clone + Send + 'static,
    ) -> Self {
        let (tx, from) = channel();
        let mut workers = Workers {
            to: Vec::new(),
            from,
            threads: Vec::new(),
        };
        for _ in 0..n {
            let (send, rx) = channel();
            let (tx, serve) = (tx.clone(), serve.clone());
            workers
                .threads
                .push(std::thread::spawn(move || serve(rx, tx)));
            workers.to.push(send);
        }
        workers
    }

    /// Hands the token to worker `t` for one command and waits for its reply.
    pub fn ask(&self, t: usize, cmd: C) -> Result<R, TestCaseError> {
        self.to[t].send(cmd).map_err(|_| fail("worker gone"))?;
        self.from.recv().map_err(|_| fail("worker died"))
    }
}

impl<C, R> Drop for Workers<C, R> {
    fn drop(&mut self) {
        self.to.clear();
        self.threads.drain(..).for_each(|t| drop(t.join()));
    }
}

/// After a case: the ledger holds nothing (no scope open, no entry, no frame, no wrapped CPU
/// block), and no allocator callback failed since `failures` (`callback_failures` before the
/// case: an accounting error inside a callback is stopped there, and counted).
pub fn ledger_left_empty(failures: u64) -> Result<(), TestCaseError> {
    let state = ledger_state();
    prop_assert_eq!(
        (state.depth, state.entries, state.frames, state.wrapped),
        (0, 0, 0, 0)
    );
    prop_assert_eq!(state.callback_failures, failures);
    Ok(())
}
