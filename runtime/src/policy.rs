//! What a scope does about its verdict: the escape policy, decided here and nowhere else.
use crate::options::{EscapePolicy, ScopeOptions};
use crate::report::ScopeReport;
use crate::Error;
use std::collections::HashMap;
use std::mem::Discriminant;
use std::panic::Location;
use std::sync::{LazyLock, Mutex};

/// Applies `policy` to a checked report: `Ok` when clean, or when the policy is to panic (a
/// panic then, unless one is already unwinding), warn or ignore; `Err` under `error`.
#[inline]
#[track_caller]
pub(crate) fn act(policy: EscapePolicy, report: ScopeReport) -> Result<ScopeReport, Error> {
    if !report.failed() {
        return Ok(report);
    }
    failed(policy, report)
}

/// [`act`] on a failed report.
#[cold]
#[track_caller]
fn failed(policy: EscapePolicy, report: ScopeReport) -> Result<ScopeReport, Error> {
    let error = if report.escaped.is_empty() {
        Error::OverBudget(Box::new(report))
    } else {
        Error::Escaped(Box::new(report))
    };
    match policy {
        EscapePolicy::Panic if !std::thread::panicking() => panic!("{error}"),
        EscapePolicy::Panic | EscapePolicy::Warn => {
            let location = error.report().map(|r| r.location);
            warn(location.unwrap_or(Location::caller()), &error);
        }
        EscapePolicy::Error => return Err(error),
        EscapePolicy::Ignore => {}
    }
    match error {
        Error::Escaped(r) | Error::OverBudget(r) => Ok(*r),
        _ => unreachable!("only escape and budget errors are built here"),
    }
}

/// A scope could not be entered, or was ended by its enclosing scope before its own exit:
/// under `error` the caller gets the error; otherwise, after a panic (`panic`: unless one is
/// unwinding) or a warning, the code goes on (unscoped, when entering failed). `ignore` is
/// about escapes: bad input still warns, as code that runs unscoped is checked by nobody.
/// A thread that is ending only warns: a panic in a thread-local's destructor aborts.
#[track_caller]
pub(crate) fn bad_input(opts: &ScopeOptions, error: Error) -> Result<(), Error> {
    let ending = matches!(error, Error::ThreadEnding);
    match opts.policy() {
        EscapePolicy::Error => return Err(error),
        EscapePolicy::Panic if !std::thread::panicking() && !ending => panic!("{error}"),
        EscapePolicy::Panic | EscapePolicy::Warn | EscapePolicy::Ignore => {
            warn(opts.location, &error)
        }
    }
    Ok(())
}

/// A `tracing` WARN event; where no subscriber takes it (none, or one whose filter leaves
/// it out), stderr, without flooding: the full text the first time a location warns (and
/// the first time it names operators and shapes), then one line at its 2nd, 4th, 8th, ...
/// warning.
fn warn(location: &'static Location<'static>, error: &Error) {
    if tracing::enabled!(target: "gpu_scope", tracing::Level::WARN) {
        tracing::warn!(target: "gpu_scope", "{error}");
        return;
    }
    // Counted per place: the full text the first time each kind of failure happens there (an
    // escape is shown in full even where the budget was exceeded before), and the first time
    // an escape is found with operators and shapes (a report found without them promised
    // it: "the next scope here names operators and shapes"); the count says how many failures
    // of any kind the place had.
    #[derive(Default)]
    struct Seen {
        count: u64,
        kinds: Vec<Discriminant<Error>>,
        shown_attributed: bool,
    }
    type Places = HashMap<(&'static str, u32, u32), Seen>;
    static SEEN: LazyLock<Mutex<Places>> = LazyLock::new(Default::default);
    let key = (location.file(), location.line(), location.column());
    let attributed = error
        .report()
        .is_some_and(|r| r.attributed && !r.escaped.is_empty());
    // Printed under the lock, so that threads failing at one place print their lines in
    // the order they counted them.
    let mut places = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let (count, full) = {
        let seen = places.entry(key).or_default();
        seen.count += 1;
        let kind = std::mem::discriminant(error);
        let new_kind = !seen.kinds.contains(&kind);
        if new_kind {
            seen.kinds.push(kind);
        }
        let first_attributed = attributed && !seen.shown_attributed;
        seen.shown_attributed |= attributed;
        (seen.count, new_kind || first_attributed)
    };
    if full {
        // Formatted first and written whole: stderr is unbuffered, and a report written piece
        // by piece (each padded figure, each escape's row) makes a system call per piece.
        // (`eprint!`, which a test harness captures.)
        let mut text = match error.report() {
            // Messages without a report name no scope, or only its name: where it was opened.
            None => format!(
                "{error} (the scope at {}:{})",
                location.file(),
                location.line()
            ),
            Some(_) => error.to_string(),
        };
        text.push('\n');
        eprint!("{text}");
    } else if count.is_power_of_two() {
        // A scope that could not be entered (or was ended by its enclosing scope) was not
        // checked: its line says so, and points at a message rather than a report.
        let (what, first) = match error.report() {
            Some(_) => ("failed its check again", "report"),
            None => ("failed again", "message"),
        };
        eprintln!(
            "gpu-scope: the scope at {}:{} {what} ({count} times so far; the first {first} \
             above)",
            location.file(),
            location.line()
        );
    }
    drop(places);
}
