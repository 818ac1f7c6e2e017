//! Helpers shared by the behaviour tests.
#![allow(dead_code)]
use gpu_scope::{DeviceReport, Error, EscapePolicy, ScopeOptions, ScopeReport};
use tch::{Device, Kind, Tensor};

pub mod model;

/// The device the engine tests run on: `GPU_SCOPE_TEST_DEVICE` (`cpu`, `cuda`, `cuda:N`);
/// by default `cuda:0` in a `--features fake-cuda` build, else the CPU.
pub fn device() -> Device {
    static DEVICE: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    *DEVICE.get_or_init(|| {
        let default = if cfg!(feature = "fake-cuda") {
            "cuda"
        } else {
            "cpu"
        };
        let name = std::env::var("GPU_SCOPE_TEST_DEVICE").unwrap_or_else(|_| default.to_owned());
        let device = match name.as_str() {
            "cpu" => Device::Cpu,
            "cuda" => Device::Cuda(0),
            other => match other.strip_prefix("cuda:").and_then(|i| i.parse().ok()) {
                Some(i) => Device::Cuda(i),
                None => panic!("GPU_SCOPE_TEST_DEVICE={other:?}: write cpu, cuda or cuda:N"),
            },
        };
        // Initialise the device first, as a program would have before its scopes: the
        // allocator's tracker (which says what each block was requested for) attaches at
        // the first allocation (tests/gpu_fresh.rs covers a first use inside a scope). On a
        // thread of its own: the first call may come from inside a scope.
        // A scope's entry then attaches the tracker, which attaches only to a started
        // allocator: without it, the first allocation a scope sees has no requested size.
        std::thread::spawn(move || {
            drop(Tensor::zeros([1], (Kind::Float, device)));
            drop(gpu_scope::Scope::enter(ScopeOptions::new("warm-up")).map(|s| s.abandon()));
        })
        .join()
        .unwrap();
        device
    })
}

/// The block that the test device's allocator hands out for a request of `bytes`: the
/// request itself on the CPU; at least 512 B and a multiple of 512 B from the CUDA caching
/// allocator (for requests up to 1 MiB).
pub fn block(bytes: u64) -> u64 {
    match device() {
        Device::Cpu => bytes,
        _ => bytes.max(1).div_ceil(512) * 512,
    }
}

/// The report's row for the test device (zeros if the scope did not allocate there). On the
/// fake CUDA device operators also make CPU temporaries, so tests compare this row.
pub fn on(report: &ScopeReport) -> DeviceReport {
    let wanted = gpu_scope::DeviceId::from(device());
    report
        .devices
        .iter()
        .find(|d| d.device == Some(wanted))
        .cloned()
        .unwrap_or_default()
}

/// Asserts that `report`'s lines add up to what it allocated, on the test device.
pub fn adds_up(report: &ScopeReport) {
    let d = on(report);
    assert_eq!(
        d.allocated,
        d.freed + d.kept + d.escaped + d.held,
        "lines of {report}"
    );
}

/// Serialises the tests of one test binary that count the process-wide ledger.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A tensor of `n` floats on the test device: exactly one allocation there, of `4 * n` bytes
/// requested ([`block`] of it).
pub fn floats(n: i64) -> Tensor {
    Tensor::zeros([n], (Kind::Float, device()))
}

/// The bytes the test device's allocator gives [`floats`]`(n)`: exactly `4 * n` on the CPU; on
/// CUDA (real or fake) the caching allocator's block, rounded up to a multiple of 512 bytes.
pub fn float_block(n: i64) -> u64 {
    let bytes = 4 * n as u64;
    match device() {
        Device::Cpu => bytes,
        _ => bytes.max(1).div_ceil(512) * 512,
    }
}

/// A CPU tensor of `n` floats whatever the test device: exactly one allocation of `4 * n`
/// bytes, for tests of byte-exact report contents.
pub fn cpu_floats(n: i64) -> Tensor {
    Tensor::zeros([n], (Kind::Float, Device::Cpu))
}

/// Options that return escapes as errors instead of panicking. (Also initialises the test
/// device, before the scope opens.)
#[track_caller]
pub fn strict(name: &'static str) -> ScopeOptions {
    device();
    ScopeOptions::new(name).on_escape(EscapePolicy::Error)
}

/// The report of a scope that must have escaped.
pub fn escaped<T: std::fmt::Debug>(result: Result<T, Error>) -> ScopeReport {
    match result {
        Err(Error::Escaped(report)) => *report,
        other => panic!("expected an escape, got {other:?}"),
    }
}

/// Asserts that `report` lists exactly one escaped allocation of `n` floats, on the test
/// device, with its block and requested sizes, and its shape when the scope was attributed.
pub fn assert_one_escape(report: &ScopeReport, n: i64) {
    let bytes = 4 * n as u64;
    assert_eq!(report.escaped.len(), 1, "{report}");
    let e = &report.escaped[0];
    assert_eq!(
        (e.bytes, e.requested),
        (block(bytes), Some(bytes)),
        "{report}"
    );
    assert_eq!(report.escaped_bytes, block(bytes));
    assert_eq!(report.escaped_requested, bytes);
    assert_eq!(e.device, gpu_scope::DeviceId::from(device()));
    // Operator, shape and dtype come with attribution (always in debug builds; from a place's
    // first leak on under the release default).
    assert_eq!(
        e.shape.as_deref(),
        report.attributed.then_some(&[n][..]),
        "{report}"
    );
    assert_eq!(e.dtype, report.attributed.then_some("Float"), "{report}");
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

/// [`child`], which must succeed: otherwise its exit status, stdout and stderr are shown.
pub fn child_ok(name: &str, envs: &[(&str, &str)]) -> std::process::Output {
    let out = child(name, envs);
    assert!(
        out.status.success(),
        "child `{name}` {envs:?}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
