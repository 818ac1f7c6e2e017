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
