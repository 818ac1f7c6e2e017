//! Places in the code whose scopes have leaked. Under [`Attribution::OnLeak`] a scope is
//! attributed (operators and shapes named) once a scope at the same place has leaked.
use crate::config::{attribution, Attribution};
use rustc_hash::FxHashSet;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, RwLock};

type Site = (&'static str, u32, u32);

static LEAKY: LazyLock<RwLock<FxHashSet<Site>>> = LazyLock::new(Default::default);
/// Whether any place has leaked: until then the set is not even read.
static ANY: AtomicBool = AtomicBool::new(false);

fn site(at: &'static Location<'static>) -> Site {
    (at.file(), at.line(), at.column())
}

/// Whether a scope opened at `at` names operators and shapes.
pub(crate) fn attributed(at: &'static Location<'static>) -> bool {
    match attribution() {
        Attribution::Always => true,
        Attribution::Off => false,
        Attribution::OnLeak => {
            ANY.load(Ordering::Relaxed)
                && LEAKY
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&site(at))
        }
    }
}

/// A scope opened at `at` leaked.
pub(crate) fn leaked(at: &'static Location<'static>) {
    LEAKY
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(site(at));
    ANY.store(true, Ordering::Relaxed);
}
