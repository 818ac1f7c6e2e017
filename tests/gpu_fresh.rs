//! A fresh process's first CUDA use inside a scope: statistics before any allocation are
//! zeros (libtorch itself throws "did you call init?", a message the shim never cuts short),
//! and the allocator's tracker, attached once the device is initialized inside the scope,
//! already sees a free on a thread that is in no scope. One test: it needs the fresh process.
mod common;

use gpu_scope::{memory_stats, reset_peak, scope, MemoryStats};
use tch::{Device, Kind, Tensor};

#[test]
fn first_use_of_the_device_inside_a_scope() {
    let info = gpu_scope::device_info();
    if info.devices == 0 {
        println!(
            "skipped: no CUDA device in this process (backend `{}`)",
            info.backend
        );
        return;
    }
    let error = gpu_scope::__introspect::accelerator_stats_error(0).expect("libtorch throws");
    assert!(
        error.contains("did you call init?"),
        "not cut short at the NUL: {error}"
    );
    assert!(error.contains("\\0"), "the NUL byte is shown: {error}");
    assert_eq!(
        memory_stats(Device::Cuda(0)).unwrap(),
        MemoryStats::default()
    );
    reset_peak(Device::Cuda(0)).unwrap();

    let (_, report) = scope(common::strict("first-use"), || {
        let t = Tensor::zeros([1000], (Kind::Float, Device::Cuda(0)));
        std::thread::spawn(move || drop(t)).join().unwrap();
    })
    .unwrap();
    assert!(
        report.is_clean(),
        "the free on the other thread was seen: {report}"
    );
    let cuda = report
        .devices
        .iter()
        .find(|d| d.device.is_some_and(|d| !d.is_cpu()))
        .unwrap();
    assert_eq!((cuda.allocated, cuda.freed), (4096, 4096), "{report}");
}
