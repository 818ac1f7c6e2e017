//! Autograd off inside scopes (the default), and the hint that names `keep_grad` when that is
//! why training code fails.
use crate::ffi;
use std::cell::{Cell, RefCell};
use std::ffi::c_int;
use std::panic::Location;
use std::sync::Arc;
use std::sync::Once;

pub(crate) type Place = &'static Location<'static>;

thread_local! {
    /// Where the scopes on this thread's stack that turned autograd off were opened.
    static OFF: RefCell<Vec<Place>> = const { RefCell::new(Vec::new()) };
    /// The hint was printed since the outermost of them was opened: an error returned through
    /// several scopes, or returned and then unwrapped, gets it once.
    static HINTED: Cell<bool> = const { Cell::new(false) };
}

/// Turns autograd off on this thread for the scope opened at `at`; returns the mode to give
/// back to [`restore`].
pub(crate) fn off(at: Place) -> c_int {
    install_hint();
    // Not during the thread's end, when the list may be gone already (the hint then names
    // fewer places).
    let _ = OFF.try_with(|o| o.borrow_mut().push(at));
    set(0)
}

/// Gives the thread back the autograd mode [`off`] returned for the scope opened at `at`.
pub(crate) fn restore(previous: c_int, at: Place) {
    forget(at);
    set(previous);
}

/// The scope opened at `at` no longer keeps autograd off, and leaves the mode as it is (an
/// enclosing scope that ended it gave the thread back its own mode).
pub(crate) fn forget(at: Place) {
    // Not during the thread's end, when the list may be gone already.
    let _ = OFF.try_with(|o| {
        let mut off = o.borrow_mut();
        // The same scope's place, by address (the last one but after an async suspension).
        if let Some(i) = off.iter().rposition(|l| std::ptr::eq(*l, at)) {
            off.remove(i);
        }
        if off.is_empty() {
            let _ = HINTED.try_with(|h| h.set(false));
        }
    });
}

/// Where the scopes that turned autograd off on this thread were opened, outermost first, if
/// any did: a handle carries them to its work, whose panics get the hint too.
pub(crate) fn places_off() -> Option<Arc<[Place]>> {
    OFF.try_with(|o| {
        let off = o.borrow();
        (!off.is_empty()).then(|| Arc::from(off.as_slice()))
    })
    .ok()
    .flatten()
}

/// Adds carried work's `places` (from [`places_off`]) to this thread's; returns how many, to
/// give back to [`uncarry`] when the work leaves (none during the thread's end, when the list
/// may be gone already: a carried future dropped then).
pub(crate) fn carry(places: &[Place]) -> Option<usize> {
    OFF.try_with(|o| o.borrow_mut().extend_from_slice(places))
        .ok()
        .map(|()| places.len())
}

/// Takes carried work's `added` places off the end of this thread's list again (see
/// [`carry`]): the scopes opened in the work have left, and one of the thread's own that the
/// work exited took its place out from below them.
pub(crate) fn uncarry(added: usize) {
    let _ = OFF.try_with(|o| {
        let mut off = o.borrow_mut();
        let len = off.len().saturating_sub(added);
        off.truncate(len);
        if len == 0 {
            let _ = HINTED.try_with(|h| h.set(false));
        }
    });
}

/// This thread's autograd mode, for [`set`].
pub(crate) fn mode() -> c_int {
    // SAFETY: reads a thread-local flag.
    unsafe { ffi::gs_grad_enabled() }
}

/// Sets this thread's autograd mode; returns the one it had.
pub(crate) fn set(enabled: c_int) -> c_int {
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
    // The panic hook cannot be changed from a panicking thread (std panics, and in a
    // destructor that aborts): a scope opened while a panic unwinds leaves it to a later one.
    if std::thread::panicking() {
        return;
    }
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
            print_hint(message);
        }));
    });
}

/// A scope's body returned `error` (a `#[gpu_scope]` function's or a `scope!` block's `Err`,
/// such as `f_backward()?`'s): the line a panic gets, where it says a tensor does not require
/// grad.
pub(crate) fn returned_error(error: &dyn std::fmt::Display) {
    // Formatted only where a scope turned autograd off.
    if OFF.try_with(|o| !o.borrow().is_empty()).unwrap_or(false) {
        // `{:#}`: anyhow's error shows its whole chain (`f_backward().context(..)?`).
        print_hint(&format!("{error:#}"));
    }
}

/// Prints the hint after `message` where it says a tensor does not require grad and a scope on
/// the thread turned autograd off.
fn print_hint(message: &str) {
    let off = OFF.try_with(|o| o.borrow().clone()).unwrap_or_default();
    if !off.is_empty()
        && SIGNS.iter().any(|s| message.contains(s))
        && !HINTED.try_with(|h| h.replace(true)).unwrap_or(true)
    {
        // Turned on again inside (`tch::with_grad`): the tensor may have been computed there,
        // or before, with it off.
        eprintln!("{}", hint(&off, mode() != 0));
    }
}

/// The line added to such errors: which scopes turned autograd off (`off`, outermost first),
/// and whether it is on again where the error happened (`on_here`).
fn hint(off: &[Place], on_here: bool) -> String {
    // Each once: work carried in with a handle on a thread where its scope is open adds the
    // scope's place again.
    let mut places: Vec<String> = Vec::new();
    for place in off.iter().map(|l| crate::report::place(l)) {
        if !places.contains(&place) {
            places.push(place);
        }
    }
    let ran = match on_here {
        false => "this ran with autograd off, turned off by",
        true => "autograd is on here, but was turned off around it by",
    };
    let cause = match on_here {
        false => "",
        true => "if the tensor was computed while it was off, ",
    };
    format!(
        "gpu-scope: {ran} the scope(s) opened at {} (scopes turn autograd off by default, for \
         inference); {cause}for training code give each of them the \
         `keep_grad` option (`#[gpu_scope(keep_grad)]`, `scope!(keep_grad, {{ .. }})` or \
         `ScopeOptions::keep_grad_mode(true)`): a `keep_grad` scope inside one of them keeps \
         autograd off",
        places.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work carried in with a handle on a thread where its scope is open adds the scope's
    /// place a second time: the hint names it once.
    #[test]
    fn the_hint_names_each_place_once() {
        let a = Location::caller();
        let b = Location::caller();
        let line = |l: Place| format!("{}:{}", l.file(), l.line());
        let text = hint(&[a, b, a], false);
        assert_eq!(text.matches(&line(a)).count(), 1, "{text}");
        assert_eq!(text.matches(&line(b)).count(), 1, "{text}");
        assert!(
            text.contains(&format!("{}, {}", line(a), line(b))),
            "{text}"
        );
    }
}
