//! Helpers shared by the behaviour tests.
#![allow(dead_code)]
use gpu_scope::{Error, EscapePolicy, ScopeOptions, ScopeReport};
use tch::{Device, Kind, Tensor};

/// Serialises the tests of one test binary that count the process-wide ledger.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A CPU tensor of `n` floats: exactly one allocation of `4 * n` bytes.
pub fn floats(n: i64) -> Tensor {
    Tensor::zeros([n], (Kind::Float, Device::Cpu))
}

/// Options that return escapes as errors instead of panicking.
#[track_caller]
pub fn strict(name: &'static str) -> ScopeOptions {
    ScopeOptions::new(name).on_escape(EscapePolicy::Error)
}

/// The report of a scope that must have escaped.
pub fn escaped<T: std::fmt::Debug>(result: Result<T, Error>) -> ScopeReport {
    match result {
        Err(Error::Escaped(report)) => *report,
        other => panic!("expected an escape, got {other:?}"),
    }
}

/// Asserts that `report` lists exactly one escaped CPU allocation of `n` floats.
pub fn assert_one_escape(report: &ScopeReport, n: i64) {
    assert_eq!(report.escaped.len(), 1, "{report}");
    let e = &report.escaped[0];
    assert_eq!(e.bytes, 4 * n as u64, "{report}");
    assert_eq!(report.escaped_bytes, 4 * n as u64);
    assert!(e.device.is_cpu());
    assert_eq!(e.shape.as_deref(), Some(&[n][..]), "{report}");
    assert_eq!(e.dtype, Some("Float"));
}

/// Set in a child process started by [`child`].
pub const CHILD: &str = "GPU_SCOPE_TEST_CHILD";

/// Whether this process is a child started by [`child`].
pub fn in_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs the test `name` of this test binary again in a child process with `envs` set (and
/// [`CHILD`]), for what must be seen from outside: stderr, environment variables, a fresh
/// process. The test itself does its work when [`in_child`].
pub fn child(name: &str, envs: &[(&str, &str)]) -> std::process::Output {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    for (k, v) in envs {
        command.env(k, v);
    }
    command.output().unwrap()
}
