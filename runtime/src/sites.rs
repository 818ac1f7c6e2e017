//! Places in the code whose scopes have leaked. Under [`Attribution::OnLeak`] a scope is
//! attributed (operators and shapes named) once a scope at the same place has leaked.
//!
//! The set of places is process-wide; each thread remembers its answers by place and asks the
//! set again only after another place has leaked, so that scopes on many threads do not take
//! its lock (or write its cache line) once some place has leaked.
use crate::config::{attribution, Attribution};
use rustc_hash::{FxHashMap, FxHashSet};
use std::cell::RefCell;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, RwLock};

type Site = (&'static str, u32, u32);

static LEAKY: LazyLock<RwLock<FxHashSet<Site>>> = LazyLock::new(Default::default);
/// How many places have leaked: until one has, the set is not even read; a thread's answers
/// are stale once the count moves.
static LEAKED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's answers, by the address of a place's `Location`, and the count of leaked
    /// places they were read at.
    static KNOWN: RefCell<(u64, FxHashMap<usize, bool>)> = RefCell::default();
}

fn site(at: &'static Location<'static>) -> Site {
    (at.file(), at.line(), at.column())
}

fn has_leaked(at: &'static Location<'static>) -> bool {
    LEAKY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&site(at))
}

/// Whether a scope opened at `at` names operators and shapes.
pub(crate) fn attributed(at: &'static Location<'static>) -> bool {
    match attribution() {
        Attribution::Always => true,
        Attribution::Off => false,
        Attribution::OnLeak => {
            let leaked = LEAKED.load(Ordering::Acquire);
            if leaked == 0 {
                return false;
            }
            KNOWN
                .try_with(|known| {
                    let (read_at, answers) = &mut *known.borrow_mut();
                    if *read_at != leaked {
                        answers.clear();
                        *read_at = leaked;
                    }
                    let key = std::ptr::from_ref(at) as usize;
                    *answers.entry(key).or_insert_with(|| has_leaked(at))
                })
                .unwrap_or_else(|_| has_leaked(at))
        }
    }
}

/// A scope opened at `at` leaked.
pub(crate) fn leaked(at: &'static Location<'static>) {
    let new = LEAKY
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(site(at));
    if new {
        // After the insertion: a thread that sees the new count finds the place in the set.
        LEAKED.fetch_add(1, Ordering::Release);
    }
}
