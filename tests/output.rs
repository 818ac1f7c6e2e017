//! What users see without asking: escapes under `warn` reach stderr when no `tracing`
//! subscriber is installed (without flooding), bad environment values are reported once, no
//! libtorch warning is caused by tracking, and backtraces start at the user's code. Each test
//! runs in a child process to see its stderr and environment.
mod common;

use common::{child, child_ok, floats, in_child, strict};
use gpu_scope::{scope, Error, EscapePolicy, Scope, ScopeOptions};
use std::sync::Mutex;
use tch::{Device, Kind, Tensor};

static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

/// Operators named from the first escape, as in a debug build (the default there; a release
/// build's is `on-leak`), for tests of what stderr shows in full and when.
const ATTRIBUTED: &[(&str, &str)] = &[("GPU_SCOPE_OPERATORS", "on")];

fn leak_once(policy: Option<EscapePolicy>) {
    let mut opts = ScopeOptions::new("leaky");
    if let Some(p) = policy {
        opts = opts.on_escape(p);
    }
    let _ = scope(opts, || SINK.lock().unwrap().push(floats(8)));
}

#[test]
fn warn_without_a_subscriber_writes_stderr_without_flooding() {
    if in_child() {
        for _ in 0..9 {
            leak_once(Some(EscapePolicy::Warn));
        }
        return;
    }
    let out = child(
        "warn_without_a_subscriber_writes_stderr_without_flooding",
        ATTRIBUTED,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("escaped scope `leaky`").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("[8] Float"),
        "the first report is in full: {stderr}"
    );
    let again: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("failed its check again"))
        .collect();
    assert_eq!(again.len(), 3, "at the 2nd, 4th and 8th leak: {stderr}");
    assert!(again[2].contains("8 times"), "{stderr}");
}

/// A place that fails by turns over its budget and by an escape shows each kind in full once,
/// then counts its failures of either kind.
#[test]
fn warn_counts_every_failure_of_a_place() {
    if in_child() {
        for i in 0..8 {
            let opts = ScopeOptions::new("by turns").on_escape(EscapePolicy::Warn);
            let _ = scope(opts.max_peak(16), || match i % 2 {
                0 => SINK.lock().unwrap().push(floats(1)),
                _ => drop(floats(64)),
            });
        }
        return;
    }
    let out = child("warn_counts_every_failure_of_a_place", ATTRIBUTED);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("escaped scope `by turns`").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("scope `by turns` peaked at").count(),
        1,
        "{stderr}"
    );
    let again: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("failed its check again"))
        .collect();
    assert_eq!(again.len(), 2, "at the 4th and 8th failure: {stderr}");
    assert!(
        again[0].contains("(4 times") && again[1].contains("(8 times"),
        "{stderr}"
    );
}

/// A place whose scope cannot be entered (a device that does not exist) is counted too; its
/// repeat lines say it failed, not that it failed a check, and point at a message.
#[test]
fn warn_counts_entries_that_fail_without_calling_them_checks() {
    if in_child() {
        for _ in 0..4 {
            scope!(on_escape = warn, device = Device::Cuda(63), {
                drop(floats(4))
            });
        }
        return;
    }
    let out = child(
        "warn_counts_entries_that_fail_without_calling_them_checks",
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("does not exist").count(), 1, "{stderr}");
    let again: Vec<&str> = stderr.lines().filter(|l| l.contains("again")).collect();
    assert_eq!(again.len(), 2, "at the 2nd and 4th failure: {stderr}");
    for line in &again {
        assert!(line.contains("failed again"), "{stderr}");
        assert!(line.contains("the first message above"), "{stderr}");
    }
}

/// Under the release default (`on-leak`) the first report is found without attribution and
/// says the next one names operators and shapes: that next one is shown in full too.
#[test]
fn warn_shows_the_first_attributed_report_in_full() {
    if in_child() {
        for _ in 0..4 {
            leak_once(Some(EscapePolicy::Warn));
        }
        return;
    }
    let name = "warn_shows_the_first_attributed_report_in_full";
    let out = child(name, &[("GPU_SCOPE_OPERATORS", "on-leak")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let reports: Vec<&str> = stderr.split("escaped scope `leaky`").skip(1).collect();
    assert_eq!(reports.len(), 2, "{stderr}");
    assert!(reports[0].contains("found without attribution"), "{stderr}");
    assert!(
        !reports[1].contains("found without attribution"),
        "{stderr}"
    );
    assert!(reports[1].contains("[8] Float"), "{stderr}");
    let again = stderr.matches("failed its check again").count();
    assert_eq!(again, 1, "at the 4th leak only: {stderr}");
}

/// A panic under `panic` is raised where the user's code ended the scope, not in gpu-scope.
#[test]
fn an_escape_panics_at_the_users_exit() {
    if in_child() {
        let opts = || ScopeOptions::new("p").on_escape(EscapePolicy::Panic);
        let r = std::panic::catch_unwind(|| {
            let s = gpu_scope::Scope::enter(opts()).unwrap();
            SINK.lock().unwrap().push(floats(8));
            println!("exit at line {}", line!() + 1);
            let _ = s.exit(&());
        });
        assert!(r.is_err());
        gpu_scope::scope!(on_escape = panic, {
            SINK.lock().unwrap().push(floats(8));
        });
        return;
    }
    let out = child("an_escape_panics_at_the_users_exit", &[]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let line = stdout
        .split("exit at line ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{stdout}"));
    let at: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split("panicked at ").nth(1))
        .collect();
    assert_eq!(at.len(), 2, "{stderr}");
    assert!(
        at[0].starts_with(&format!("tests/output.rs:{line}:")),
        "{stderr}"
    );
    assert!(at[1].starts_with("tests/output.rs:"), "{stderr}");
}

#[gpu_scope::gpu_scope(device = Device::Cuda(7), on_escape = ignore)]
fn on_a_missing_device() -> i32 {
    7
}

/// `ignore` is about escapes: a scope that cannot be entered still says so, and its code runs
/// unscoped.
#[test]
fn ignore_still_warns_that_a_scope_could_not_be_entered() {
    if in_child() {
        assert_eq!(on_a_missing_device(), 7);
        let value = gpu_scope::scope!(device = Device::Cuda(7), on_escape = ignore, { 8 });
        assert_eq!(value, 8);
        return;
    }
    let out = child("ignore_still_warns_that_a_scope_could_not_be_entered", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("does not exist").count(), 2, "{stderr}");
    // Each says where the scope is, as a service with many scopes needs to find it.
    let mut missing = stderr.lines().filter(|l| l.contains("does not exist"));
    assert!(
        missing.all(|l| l.contains("(the scope at tests/output.rs:")),
        "{stderr}"
    );
}

#[test]
fn the_policy_variable_is_honoured_and_a_bad_value_is_reported_once() {
    if in_child() {
        leak_once(None);
        leak_once(None);
        return;
    }
    let name = "the_policy_variable_is_honoured_and_a_bad_value_is_reported_once";
    let out = child(name, &[("GPU_SCOPE_ON_ESCAPE", "ignore")]);
    assert!(
        out.status.success(),
        "ignore: no panic even in a debug build"
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("escaped"));

    let out = child(name, &[("GPU_SCOPE_ON_ESCAPE", "garbage")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("GPU_SCOPE_ON_ESCAPE=\"garbage\"").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("panic, warn, ignore"), "{stderr}");
    assert_eq!(
        out.status.success(),
        !cfg!(debug_assertions),
        "the default (panic in a debug build, else warn) applies"
    );

    let out = child(name, &[("GPU_SCOPE_ON_ESCAPE", "error")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("on_escape = error"),
        "says how to get it: {stderr}"
    );

    let out = child(name, &[("GPU_SCOPE_OPERATORS", "maybe")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("GPU_SCOPE_OPERATORS=\"maybe\""), "{stderr}");
}

/// A bad value is reported at the first scope, whatever the scopes do: ones that name their
/// policy and allocate nothing still read all three variables.
#[test]
fn bad_values_are_reported_at_the_first_scope() {
    if in_child() {
        for _ in 0..2 {
            let opts = ScopeOptions::new("quiet").on_escape(EscapePolicy::Ignore);
            scope(opts, || ()).unwrap();
        }
        return;
    }
    let names = [
        "GPU_SCOPE_ON_ESCAPE",
        "GPU_SCOPE_OPERATORS",
        "GPU_SCOPE_BACKTRACE",
    ];
    let vars = names.map(|name| (name, "bogus"));
    let out = child("bad_values_are_reported_at_the_first_scope", &vars);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for name in names {
        let said = format!("{name}=\"bogus\" is not one of");
        assert_eq!(stderr.matches(&said).count(), 1, "{stderr}");
    }
    // A value that is not UTF-8 is no accepted word: reported, not ignored in silence.
    use std::os::unix::ffi::OsStrExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "bad_values_are_reported_at_the_first_scope",
            "--nocapture",
        ])
        .env(common::CHILD, "1")
        .env(
            "GPU_SCOPE_BACKTRACE",
            std::ffi::OsStr::from_bytes(b"on\xff"),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let said = "GPU_SCOPE_BACKTRACE=\"on\u{fffd}\" is not one of";
    assert_eq!(stderr.matches(said).count(), 1, "{stderr}");
    // Set to nothing (`GPU_SCOPE_ON_ESCAPE= cargo run`): the same as not set, not a bad value.
    let vars = names.map(|name| (name, " "));
    let out = child("bad_values_are_reported_at_the_first_scope", &vars);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("is not one of"), "{stderr}");
}

/// A first scope refused on entry (a device that does not exist) reads the variables too: a bad value
/// is reported there, before anything after it runs.
#[test]
fn a_first_scope_refused_on_entry_reads_the_variables() {
    if in_child() {
        let opts = ScopeOptions::new("refused").device(Device::Cuda(64));
        assert!(Scope::enter(opts).is_err());
        eprintln!("after the first scope");
        return;
    }
    let names = ["GPU_SCOPE_OPERATORS", "GPU_SCOPE_BACKTRACE"];
    let out = child(
        "a_first_scope_refused_on_entry_reads_the_variables",
        &names.map(|name| (name, "bogus")),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let after = stderr.find("after the first scope").expect("the child ran");
    for name in names {
        let said = stderr.find(&format!("{name}=\"bogus\" is not one of"));
        assert!(said.is_some_and(|at| at < after), "{name}: {stderr}");
    }
}

/// Keeping a tensor that has an autograd graph used to read `.grad` of non-leaf tensors,
/// which makes libtorch warn on stderr at every exit.
#[test]
fn keeping_a_tensor_with_a_graph_is_silent() {
    if in_child() {
        let w = Tensor::ones([4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        for _ in 0..3 {
            let (y, report) = scope(strict("graph").keep_grad_mode(true), || &w * 2).unwrap();
            assert!(y.requires_grad());
            assert!(report.is_clean(), "{report}");
        }
        return;
    }
    let out = child("keeping_a_tensor_with_a_graph_is_silent", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains(".grad attribute"), "{stderr}");
    assert!(!stderr.contains("[W"), "{stderr}");
}

#[inline(never)]
fn allocate_here() -> Tensor {
    floats(12)
}

/// A report's first backtrace line, naming where the first escape was made.
fn allocated_in(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with("allocated in"))
        .unwrap_or_else(|| panic!("no backtrace: {stdout}"))
}

#[inline(never)]
fn load_here(path: &std::path::Path) -> Tensor {
    Tensor::load(path).unwrap()
}

/// A tensor read from a file is made outside any operator: the report says why its row names
/// none, and its backtrace starts at the user's code, not in libtorch's reader.
#[test]
fn loaded_tensors_say_why_no_operator_and_where_they_were_made() {
    if in_child() {
        let path = std::env::temp_dir().join(format!("gpu-scope-load-{}.ot", std::process::id()));
        common::cpu_floats(12).save(&path).unwrap();
        let report = common::escaped(scope(strict("loaded"), || {
            SINK.lock().unwrap().push(load_here(&path))
        }));
        std::fs::remove_file(&path).unwrap();
        println!("{report}");
        return;
    }
    let out = child(
        "loaded_tensors_say_why_no_operator_and_where_they_were_made",
        &[("GPU_SCOPE_BACKTRACE", "1"), ("GPU_SCOPE_OPERATORS", "on")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("(operator `-`: no libtorch operator was running when it was made"),
        "{stdout}"
    );
    let first = allocated_in(&stdout);
    assert!(first.contains("output::load_here"), "{stdout}");
}

#[test]
fn backtraces_start_at_the_users_code() {
    if in_child() {
        let report = common::escaped(scope(strict("traced"), || {
            SINK.lock().unwrap().push(allocate_here())
        }));
        println!("{report}");
        return;
    }
    let out = child(
        "backtraces_start_at_the_users_code",
        &[("GPU_SCOPE_BACKTRACE", "1")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = allocated_in(&stdout);
    assert!(
        first.contains("output::"),
        "the user's frame first: {stdout}"
    );
    let top = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("0:"))
        .unwrap();
    // libtorch's (on the fake CUDA device, maybe code inlined from its headers).
    let ours = [
        "gpu_scope_runtime",
        "gs_rust_",
        "runtime/shim/",
        "backtrace::",
    ];
    assert!(
        !ours.iter().any(|o| top.contains(o)),
        "gpu-scope's own frames dropped: {stdout}"
    );
    assert!(!stdout.contains("_ZN"), "C++ names demangled: {stdout}");
    // Nor below the user's code: the scope that ran the closure, the runtime's start.
    for below in [
        "gpu_scope_runtime",
        "__rust_begin_short_backtrace",
        "lang_start",
    ] {
        assert!(!stdout.contains(below), "no `{below}` frame: {stdout}");
    }
}

/// With a `tracing` subscriber, a `warn` escape is a WARN event for it and nothing on stderr.
#[test]
fn warn_with_a_subscriber_is_a_tracing_event() {
    if in_child() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stdout)
            .with_ansi(false)
            .init();
        leak_once(Some(EscapePolicy::Warn));
        leak_once(Some(EscapePolicy::Warn));
        return;
    }
    let out = child("warn_with_a_subscriber_is_a_tracing_event", &[]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let events: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("escaped scope `leaky`"))
        .collect();
    assert_eq!(events.len(), 2, "one event per escape: {stdout}");
    assert!(!stderr.contains("escaped scope"), "{stderr}");
}

/// A subscriber whose filter leaves out gpu-scope's WARN events does not swallow an escape
/// under `warn`: stderr gets it, as with no subscriber.
#[test]
fn warn_filtered_out_by_a_subscriber_reaches_stderr() {
    if in_child() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stdout)
            .with_max_level(tracing::Level::ERROR)
            .init();
        leak_once(Some(EscapePolicy::Warn));
        return;
    }
    let out = child("warn_filtered_out_by_a_subscriber_reaches_stderr", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("escaped scope `leaky`"), "{stderr}");
}

/// Every exit is a DEBUG event with the report's JSON, checked or not (a scope that its
/// enclosing scope ended too, unchecked: that report is the thread's last).
#[test]
fn every_exit_is_a_debug_event() {
    if in_child() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stdout)
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .init();
        let _ = scope(ScopeOptions::new("checked"), || drop(floats(2)));
        let _ = Scope::enter(ScopeOptions::new("abandoned"))
            .unwrap()
            .abandon();
        drop(Scope::enter(ScopeOptions::new("dropped")).unwrap());
        let _ = std::panic::catch_unwind(|| {
            scope(ScopeOptions::new("panicked"), || -> () {
                panic!("in the body")
            })
        });
        let outer = Scope::enter(ScopeOptions::new("outer")).unwrap();
        let inner = Scope::enter(ScopeOptions::new("inner")).unwrap();
        outer.exit(&()).unwrap();
        assert!(matches!(
            inner.exit(&()),
            Err(Error::EndedByEnclosing { .. })
        ));
        println!("last: {}", gpu_scope::last_report().unwrap().name);
        return;
    }
    let out = child_ok("every_exit_is_a_debug_event", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let exited: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("DEBUG") && l.contains("exited"))
        .filter_map(|l| l.split('`').nth(1))
        .filter(|name| *name != "warm-up")
        .collect();
    let expected = [
        "checked",
        "abandoned",
        "dropped",
        "panicked",
        "outer",
        "inner",
    ];
    assert_eq!(exited, expected, "{stdout}");
    let checked = stdout
        .lines()
        .find(|l| l.contains("scope `checked` exited"));
    let json = checked
        .and_then(|l| l.split_once("report="))
        .map(|(_, j)| j);
    let json: serde_json::Value = serde_json::from_str(json.unwrap_or("")).expect("JSON");
    // What the body made was freed in it (a device's rows may add a CPU temporary).
    assert_eq!(json["name"], "checked");
    assert_eq!(json["freed"], json["allocated"]);
    assert!(json["freed"].as_u64() >= Some(common::block(8)), "{json}");
    assert!(stdout.contains("last: inner"), "{stdout}");
}

/// The environment's words, in any case and with spaces around them.
#[test]
fn environment_values_are_read_by_one_rule() {
    if in_child() {
        leak_once(None);
        let r = gpu_scope::last_report().unwrap();
        println!(
            "attributed={} operator={:?}",
            r.attributed, r.escaped[0].operator
        );
        SINK.lock().unwrap().clear();
        return;
    }
    let name = "environment_values_are_read_by_one_rule";
    let run = |vars: &[(&str, &str)]| {
        let out = child(name, vars);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.success(),
            text,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = run(&[
        ("GPU_SCOPE_ON_ESCAPE", " Warn "),
        ("GPU_SCOPE_OPERATORS", "OFF"),
    ]);
    assert!(ok, "warn: no panic in a debug build: {stderr}");
    assert!(stderr.contains("escaped scope `leaky`"), "{stderr}");
    assert!(
        stdout.contains("attributed=false operator=None"),
        "{stdout}"
    );
    for on in ["on", "1", " TRUE "] {
        let (ok, stdout, stderr) = run(&[
            ("GPU_SCOPE_ON_ESCAPE", "ignore"),
            ("GPU_SCOPE_OPERATORS", on),
        ]);
        assert!(ok && stderr.is_empty(), "{on:?}: {stderr}");
        assert!(
            stdout.contains("attributed=true operator=Some(\"aten::zeros\")"),
            "{on:?}: {stdout}"
        );
    }
    let (ok, stdout, _) = run(&[
        ("GPU_SCOPE_ON_ESCAPE", "IGNORE"),
        ("GPU_SCOPE_OPERATORS", "on-leak"),
    ]);
    assert!(ok);
    assert!(
        stdout.contains("attributed=false operator=None"),
        "first leak here: {stdout}"
    );
    let (ok, _, stderr) = run(&[("GPU_SCOPE_ON_ESCAPE", "Panic")]);
    assert!(!ok && stderr.contains("escaped scope `leaky`"), "{stderr}");
}

/// Under `warn`, each kind of failure at a place is shown in full the first time: an escape
/// after over-budget exits there still names what escaped.
#[test]
fn warn_shows_each_kind_of_failure_in_full_once() {
    if in_child() {
        for leak in [false, false, false, true] {
            let opts = ScopeOptions::new("budget then leak")
                .on_escape(EscapePolicy::Warn)
                .max_peak(16);
            let _ = scope(opts, || {
                let t = floats(64);
                if leak {
                    SINK.lock().unwrap().push(t);
                }
            });
        }
        return;
    }
    let out = child("warn_shows_each_kind_of_failure_in_full_once", ATTRIBUTED);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("over its budget").count(), 2, "{stderr}");
    assert!(
        stderr.contains("escaped scope `budget then leak`") && stderr.contains("[64] Float"),
        "the first escape is in full: {stderr}"
    );
}

/// A macro's scope exited after its enclosing scope ended says so under `warn` and `panic`
/// (its caller sees no `Result` to carry `Error::EndedByEnclosing`).
#[test]
fn a_macro_scope_ended_by_its_enclosing_one_says_so() {
    if in_child() {
        let mut outer = Some(gpu_scope::Scope::enter(ScopeOptions::new("outer")).unwrap());
        gpu_scope::scope!(name = "inner", on_escape = warn, {
            outer.take().unwrap().exit(&()).unwrap();
        });
        let mut outer = Some(gpu_scope::Scope::enter(ScopeOptions::new("outer")).unwrap());
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gpu_scope::scope!(name = "inner", on_escape = panic, {
                outer.take().unwrap().exit(&()).unwrap();
            })
        }));
        assert!(panicked.is_err(), "exiting `inner` panics");
        return;
    }
    let out = child("a_macro_scope_ended_by_its_enclosing_one_says_so", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr
            .matches("scope `inner` was exited after a scope enclosing it had ended")
            .count(),
        2,
        "once warned, once in the panic: {stderr}"
    );
    assert_eq!(
        stderr
            .matches("innermost first (the scope at tests/output.rs:")
            .count(),
        1,
        "the warning says where the scope is: {stderr}"
    );
}

trait Cache {
    fn put(&mut self, t: Tensor);
}

#[derive(gpu_scope::Tensors, Default)]
struct VecCache(Vec<Tensor>);

impl Cache for VecCache {
    fn put(&mut self, t: Tensor) {
        self.0.push(t)
    }
}

#[gpu_scope::gpu_scope(on_escape = ignore)]
fn fill<C: Cache>(cache: &mut C) {
    cache.put(floats(100));
}

#[gpu_scope::gpu_scope(on_escape = ignore)]
fn fill_bounded<C: Cache + gpu_scope::Tensors>(cache: &mut C) {
    cache.put(floats(100));
}

/// In a generic function the search is chosen from the bounds: without `Tensors` among them
/// the argument is not searched, and the hint says which bound to add.
#[test]
fn a_generic_argument_without_the_bound_is_named_with_the_fix() {
    let mut cache = VecCache::default();
    fill(&mut cache);
    let report = gpu_scope::last_report().unwrap();
    assert_eq!(report.opaque_kept.len(), 1, "{report}");
    assert!(
        report
            .to_string()
            .contains("the bound `T: gpu_scope::Tensors`"),
        "{report}"
    );
    fill_bounded(&mut cache);
    let report = gpu_scope::last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(cache.0.len(), 2);
}

/// An escape whose requested size is not known (the first CUDA allocation after the device's
/// first use) shows `?`, and the footnote says what it means, even where every count is a
/// block (the unknown request is counted at its block).
#[test]
fn an_unknown_request_is_explained() {
    let mut report = common::escaped(scope(strict("unknown"), || {
        SINK.lock().unwrap().push(floats(3))
    }));
    SINK.lock().unwrap().clear();
    let text = report.to_string();
    assert!(!text.contains("not known yet"), "{text}");
    report.escaped[0].requested = None;
    for device in &mut report.devices {
        device.requested = device.allocated;
    }
    report.requested = report.allocated;
    let text = report.to_string();
    assert!(text.contains("`?`: not known yet"), "{text}");
}
