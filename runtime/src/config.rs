//! Configuration from the environment: every variable gpu-scope reads is read here, once per
//! process, by one rule: surrounding space and case are ignored, an empty value is the same as
//! none; a value outside the accepted words is reported once (on stderr and as a `tracing`
//! warning), naming the variable and the words, and the default applies.
//!
//! | variable | accepts | default |
//! |---|---|---|
//! | [`ESCAPE_POLICY_ENV`] | `panic`, `warn`, `ignore` | `panic` with debug assertions, else `warn` |
//! | [`OPERATORS_ENV`] | `on`, `on-leak`, `off` (or `1`/`0`, `true`/`false`, `yes`/`no`) | `on` with debug assertions, else `on-leak` |
//! | [`BACKTRACE_ENV`] | `on`/`off` (same words) | `off` |
use crate::options::EscapePolicy;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{LazyLock, Mutex};

/// Overrides the default escape policy at deploy time: `panic`, `warn` or `ignore` (default
/// `panic` with debug assertions, else `warn`). (`error` changes what a function returns, so it
/// can only be chosen in code: `on_escape = error`.) Read once, as every gpu-scope variable:
/// case and surrounding space ignored, empty as unset, another word reported once on stderr
/// (the default then applies).
pub const ESCAPE_POLICY_ENV: &str = "GPU_SCOPE_ON_ESCAPE";
/// Sets the default [`Attribution`]: `on`, `on-leak` or `off` (also `1`/`0`, `true`/`false`,
/// `yes`/`no`; default `on` with debug assertions, else `on-leak`). Read once, by the rule of
/// [`ESCAPE_POLICY_ENV`].
pub const OPERATORS_ENV: &str = "GPU_SCOPE_OPERATORS";
/// `on` records the Rust backtrace of every allocation made inside a scope (slow); `off` (the
/// default) or the same other words as [`OPERATORS_ENV`]. Read once, by the rule of
/// [`ESCAPE_POLICY_ENV`].
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

/// The variable's value, if set to one of `accepted` (compared without case or space); an
/// empty value is no value.
fn word(name: &str, accepted: &[&'static str]) -> Option<&'static str> {
    // A value that is not UTF-8 is no accepted word either: reported, not silently ignored.
    let value = std::env::var_os(name)?.to_string_lossy().into_owned();
    let wanted = value.trim().to_ascii_lowercase();
    if wanted.is_empty() {
        // Set to nothing (`GPU_SCOPE_ON_ESCAPE= cargo run`): the same as not set.
        return None;
    }
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

/// Reads every variable now (the first scope's entry), so that a bad value is reported even
/// where nothing would read it later (a policy named in code, a scope that allocates nothing).
pub(crate) fn read_all() {
    escape_policy();
    LazyLock::force(&ATTRIBUTION);
    backtraces();
}

/// Whether [`BACKTRACE_ENV`] is on.
pub(crate) fn backtraces() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| switch(BACKTRACE_ENV, false));
    *ON
}

/// Whether scopes name the operator behind each allocation and the shape and dtype of its
/// tensor. Attribution costs libtorch's record-function path on every operator run inside an
/// attributed scope (see BENCHMARKS.md); without it, reports still list every escaped
/// allocation with its size, device and address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attribution {
    /// Every scope is attributed (the default with debug assertions: tests and debugging).
    Always,
    /// A scope is attributed once a scope at the same place in the code has leaked: the first
    /// escape there is reported by size, device and address, the next ones by operator and
    /// shape too; clean code pays nothing (the default without debug assertions).
    OnLeak,
    /// No scope is attributed.
    Off,
}

static ATTRIBUTION: LazyLock<AtomicU8> = LazyLock::new(|| {
    let words = [
        "on", "on-leak", "off", "1", "0", "true", "false", "yes", "no",
    ];
    let mode = match word(OPERATORS_ENV, &words) {
        Some("on-leak") => Attribution::OnLeak,
        Some(w) if ON.contains(&w) => Attribution::Always,
        Some(_) => Attribution::Off,
        None if cfg!(debug_assertions) => Attribution::Always,
        None => Attribution::OnLeak,
    };
    AtomicU8::new(mode as u8)
});

/// Sets how scopes attribute allocations (default from [`OPERATORS_ENV`], else `Always` with
/// debug assertions and `OnLeak` without). Takes effect for scopes opened after the call.
pub fn set_attribution(mode: Attribution) {
    ATTRIBUTION.store(mode as u8, Ordering::Relaxed);
}

/// See [`set_attribution`].
pub fn attribution() -> Attribution {
    match ATTRIBUTION.load(Ordering::Relaxed) {
        0 => Attribution::Always,
        1 => Attribution::OnLeak,
        _ => Attribution::Off,
    }
}

/// `set_attribution(Always)` or `set_attribution(Off)`.
pub fn set_operator_attribution(on: bool) {
    set_attribution(if on {
        Attribution::Always
    } else {
        Attribution::Off
    });
}

/// Whether scopes opened now are attributed without having leaked first (`Always`).
pub fn operator_attribution() -> bool {
    attribution() == Attribution::Always
}
