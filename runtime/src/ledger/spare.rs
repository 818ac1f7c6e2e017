//! Emptied key buffers (of closed frames, of the storages an exit collected), kept per thread
//! for the next ones: a scope that allocates then neither allocates its buffers nor grows them
//! again.
use super::Key;
use rustc_hash::FxHashSet;
use std::cell::RefCell;
use std::thread::LocalKey;

/// Buffers kept per thread, and the largest capacity worth keeping (a large scope's buffer
/// goes back to the allocator instead of staying with the thread).
const KEPT: usize = 4;
const MAX_CAPACITY: usize = 256;

type Pool<T> = LocalKey<RefCell<Vec<T>>>;

pub(crate) trait Buffer: Default + Sized + 'static {
    fn capacity(&self) -> usize;
    fn clear(&mut self);
    fn pool() -> &'static Pool<Self>;
}

thread_local! {
    static SETS: RefCell<Vec<FxHashSet<Key>>> = const { RefCell::new(Vec::new()) };
    static LISTS: RefCell<Vec<Vec<Key>>> = const { RefCell::new(Vec::new()) };
}

impl Buffer for FxHashSet<Key> {
    fn capacity(&self) -> usize {
        self.capacity()
    }
    fn clear(&mut self) {
        self.clear();
    }
    fn pool() -> &'static Pool<Self> {
        &SETS
    }
}

impl Buffer for Vec<Key> {
    fn capacity(&self) -> usize {
        self.capacity()
    }
    fn clear(&mut self) {
        self.clear();
    }
    fn pool() -> &'static Pool<Self> {
        &LISTS
    }
}

/// Gives `buffer` a spare one's memory if it has none yet (about to be filled).
#[inline]
pub(crate) fn refill<T: Buffer>(buffer: &mut T) {
    if buffer.capacity() == 0 {
        take(buffer);
    }
}

#[cold]
fn take<T: Buffer>(buffer: &mut T) {
    if let Ok(Some(spare)) = T::pool().try_with(|s| s.borrow_mut().pop()) {
        *buffer = spare;
    }
}

/// Keeps `buffer` (emptied) for a later frame or exit on this thread.
pub(crate) fn give<T: Buffer>(mut buffer: T) {
    if buffer.capacity() == 0 || buffer.capacity() > MAX_CAPACITY {
        return;
    }
    buffer.clear();
    let _ = T::pool().try_with(|s| {
        let mut spare = s.borrow_mut();
        if spare.len() < KEPT {
            spare.push(buffer);
        }
    });
}
