//! Configuration from the environment: every variable gpu-scope reads is read here, once per
//! process, by one rule: surrounding space and case are ignored; a value outside the accepted
//! words is reported once (on stderr and as a `tracing` warning), naming the variable and the
//! words, and the default applies.
//!
//! | variable | accepts | default |
//! |---|---|---|
//! | [`ESCAPE_POLICY_ENV`] | `panic`, `warn`, `ignore` | `panic` with debug assertions, else `warn` |
//! | [`OPERATORS_ENV`] | `on`/`off` (or `1`/`0`, `true`/`false`, `yes`/`no`) | `on` |
//! | [`BACKTRACE_ENV`] | `on`/`off` (same words) | `off` |
use crate::options::EscapePolicy;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};

/// Overrides the default escape policy at deploy time: `panic`, `warn` or `ignore`. (`error`
/// changes what a function returns, so it can only be chosen in code: `on_escape = error`.)
pub const ESCAPE_POLICY_ENV: &str = "GPU_SCOPE_ON_ESCAPE";
/// `off` turns operator attribution off by default (see [`set_operator_attribution`]).
pub const OPERATORS_ENV: &str = "GPU_SCOPE_OPERATORS";
/// `on` records the Rust backtrace of every allocation made inside a scope (slow).
pub const BACKTRACE_ENV: &str = "GPU_SCOPE_BACKTRACE";

const ON: [&str; 4] = ["on", "1", "true", "yes"];
const OFF: [&str; 4] = ["off", "0", "false", "no"];

/// Reports `message` on stderr and as a `tracing` warning, the first time only.
pub(crate) fn warn_once(message: &str) {
    static SAID: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);
    let first = SAID
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(message.to_owned());
    if first {
        tracing::warn!(target: "gpu_scope", "{message}");
        eprintln!("{message}");
    }
}

/// The variable's value, if set to one of `accepted` (compared without case or space).
fn word(name: &str, accepted: &[&'static str]) -> Option<&'static str> {
    let value = std::env::var(name).ok()?;
    let wanted = value.trim().to_ascii_lowercase();
    let found = accepted.iter().copied().find(|w| *w == wanted);
    if found.is_none() {
        warn_once(&format!(
            "gpu-scope: {name}={value:?} is not one of {}; using the default",
            accepted.join(", ")
        ));
    }
    found
}

fn switch(name: &str, default: bool) -> bool {
    let words: Vec<&'static str> = ON.iter().chain(OFF.iter()).copied().collect();
    word(name, &words).map_or(default, |w| ON.contains(&w))
}

/// The escape policy that [`ESCAPE_POLICY_ENV`] asks for, if it is set.
pub(crate) fn escape_policy() -> Option<EscapePolicy> {
    static POLICY: LazyLock<Option<EscapePolicy>> = LazyLock::new(|| {
        if std::env::var(ESCAPE_POLICY_ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("error")) {
            warn_once(&format!(
                "gpu-scope: {ESCAPE_POLICY_ENV}=error cannot be chosen at deploy time (it \
                 changes what functions return); write `on_escape = error` in code. Accepted: \
                 panic, warn, ignore; using the default"
            ));
            return None;
        }
        Some(
            match word(ESCAPE_POLICY_ENV, &["panic", "warn", "ignore"])? {
                "panic" => EscapePolicy::Panic,
                "warn" => EscapePolicy::Warn,
                _ => EscapePolicy::Ignore,
            },
        )
    });
    *POLICY
}

/// Whether [`BACKTRACE_ENV`] is on.
pub(crate) fn backtraces() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| switch(BACKTRACE_ENV, false));
    *ON
}

static OPERATORS: LazyLock<AtomicBool> =
    LazyLock::new(|| AtomicBool::new(switch(OPERATORS_ENV, true)));

/// Whether scopes record, for each allocation, the operator that made it and the shape and
/// dtype of its tensor (on by default; [`OPERATORS_ENV`] sets the default). Attribution costs a
/// libtorch record function per operator run inside a scope (see BENCHMARKS.md); without it,
/// reports still list every escaped allocation with its size, device and address.
/// Takes effect for threads that open their outermost scope after the call.
pub fn set_operator_attribution(on: bool) {
    OPERATORS.store(on, Ordering::Relaxed);
}

/// See [`set_operator_attribution`].
pub fn operator_attribution() -> bool {
    OPERATORS.load(Ordering::Relaxed)
}
