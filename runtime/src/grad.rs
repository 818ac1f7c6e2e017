//! Autograd off inside scopes (the default), and the hint that names `keep_grad` when that is
//! why training code fails.
use crate::ffi;
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::Once;

thread_local! {
    /// Scopes on this thread's stack that turned autograd off.
    static OFF: Cell<usize> = const { Cell::new(0) };
}

/// Turns autograd off on this thread; returns the mode to give back to [`restore`].
pub(crate) fn off() -> c_int {
    install_hint();
    OFF.with(|n| n.set(n.get() + 1));
    set(0)
}

/// Gives the thread back the autograd mode [`off`] returned.
pub(crate) fn restore(previous: c_int) {
    OFF.with(|n| n.set(n.get().saturating_sub(1)));
    set(previous);
}

fn set(enabled: c_int) -> c_int {
    let mut previous = 1;
    // SAFETY: a thread-local flag and a plain out-pointer.
    let _ = ffi::check(unsafe { ffi::gs_set_grad_enabled(enabled, &mut previous) });
    previous
}

/// What libtorch says when backward runs on a tensor computed with autograd off.
const SIGNS: [&str; 2] = ["does not require grad", "does not have a grad_fn"];

/// A panic hook (installed once, wrapping the one in place) that adds a line when a panic
/// says a tensor does not require grad while a scope on the thread has turned autograd off.
fn install_hint() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if OFF.with(Cell::get) > 0 && SIGNS.iter().any(|s| message.contains(s)) {
                eprintln!("{}", hint());
            }
        }));
    });
}

/// The line added to such errors.
pub(crate) fn hint() -> &'static str {
    "gpu-scope: this ran inside a scope, and scopes turn autograd off by default (inference); \
     for training code give the scope the `keep_grad` option (`#[gpu_scope(keep_grad)]`, \
     `scope!(keep_grad, { .. })` or `ScopeOptions::keep_grad_mode(true)`)"
}
