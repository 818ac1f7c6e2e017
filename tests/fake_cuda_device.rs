#![cfg(feature = "fake-cuda")]
//! The fake CUDA device of `--features fake-cuda` (`runtime/shim/fake_cuda`): tch sees CUDA
//! devices on host memory, and their allocator behaves like libtorch's CUDA caching allocator.
//! What tch cannot reach is checked by the C++ self-test `gs_fake_cuda_selftest`, run in a fresh
//! process of this binary because it starts with the state before CUDA's lazy init.
use std::ffi::{c_char, c_int, CStr};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, PoisonError};

use gpu_scope as _; // links the runtime's shim, which holds the fake device
use tch::{nn, nn::Module, Cuda, Device, Kind, Tensor};

extern "C" {
    fn gs_fake_cuda_selftest(message: *mut c_char, len: usize) -> c_int;
}

const SETTINGS: [&str; 3] = [
    "GPU_SCOPE_FAKE_CUDA_DEVICES",
    "GPU_SCOPE_FAKE_CUDA_REPORTS",
    "GPU_SCOPE_FAKE_CUDA_WORKSPACE",
];
/// Set in the child processes that run `fake_cuda_child`.
const CHILD: &str = "GPU_SCOPE_FAKE_CUDA_TEST_CHILD";

/// The device count this process should see.
fn expected_devices() -> i64 {
    std::env::var("GPU_SCOPE_FAKE_CUDA_DEVICES").map_or(2, |n| n.parse().unwrap())
}

/// Serialises the tests that seed and draw from libtorch's global generator.
fn seeded() -> MutexGuard<'static, ()> {
    static SEEDED: Mutex<()> = Mutex::new(());
    SEEDED.lock().unwrap_or_else(PoisonError::into_inner)
}

fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.size(), want.size(), "{what}: shape");
    let got = got.to(Device::Cpu);
    assert!(
        got.allclose(want, 1e-5, 1e-6, false),
        "{what}: {got} vs {want}"
    );
}

#[test]
fn cuda_is_available_with_two_devices() {
    assert!(Cuda::is_available());
    assert_eq!(Cuda::device_count(), expected_devices());
    assert_eq!(Device::cuda_if_available(), Device::Cuda(0));
    assert!(!Cuda::cudnn_is_available(), "the fake has no cuDNN");
    let t = Tensor::zeros([3], (Kind::Float, Device::Cuda(1)));
    assert_eq!(t.device(), Device::Cuda(1));
}

#[test]
fn ops_match_the_cpu_on_both_devices() {
    let _seeded = seeded();
    for device in [Device::Cuda(0), Device::Cuda(1)] {
        tch::manual_seed(7);
        let x_cpu = Tensor::randn([2, 3, 8, 8], (Kind::Float, Device::Cpu));
        tch::manual_seed(7);
        let x = Tensor::randn([2, 3, 8, 8], (Kind::Float, device));
        assert_eq!(x.device(), device);
        assert!(x.to(Device::Cpu).equal(&x_cpu), "randn on {device:?}");

        let w_cpu = Tensor::randn([4, 3, 3, 3], (Kind::Float, Device::Cpu));
        let b_cpu = Tensor::randn([4], (Kind::Float, Device::Cpu));
        let (w, b) = (w_cpu.to(device), b_cpu.to(device));
        let y = x.conv2d(&w, Some(&b), [1, 1], [1, 1], [1, 1], 1).relu();
        assert_eq!(y.device(), device);
        let y_cpu = x_cpu
            .conv2d(&w_cpu, Some(&b_cpu), [1, 1], [1, 1], [1, 1], 1)
            .relu();
        assert_close(&y, &y_cpu, "conv2d + relu");
        assert!(y_cpu.min().double_value(&[]) >= 0.0);

        let a_cpu = Tensor::randn([5, 7], (Kind::Float, Device::Cpu));
        let m_cpu = Tensor::randn([7, 3], (Kind::Float, Device::Cpu));
        let am = a_cpu.to(device).matmul(&m_cpu.to(device));
        assert_eq!(am.device(), device);
        assert_close(&am, &a_cpu.matmul(&m_cpu), "matmul");

        let lhs_cpu = Tensor::randn([2, 5, 7], (Kind::Float, Device::Cpu));
        let rhs_cpu = Tensor::randn([2, 7, 3], (Kind::Float, Device::Cpu));
        let bm = lhs_cpu.to(device).matmul(&rhs_cpu.to(device));
        assert_close(&bm, &lhs_cpu.matmul(&rhs_cpu), "batched matmul");

        // A view operator: a view of device memory, not a copy made on the CPU.
        let windows = x.unfold(3, 3, 2);
        assert_close(&windows, &x_cpu.unfold(3, 3, 2), "unfold");
        assert_eq!(windows.data_ptr(), x.data_ptr());
    }
}

#[test]
fn varstore_on_cuda0_saves_and_loads() {
    let device = Device::Cuda(0);
    let vs = nn::VarStore::new(device);
    let linear = nn::linear(vs.root() / "fc", 4, 3, nn::LinearConfig::default());
    let variables = vs.variables();
    assert_eq!(variables.len(), 2);
    assert!(variables.values().all(|v| v.device() == device));

    let x = Tensor::randn([2, 4], (Kind::Float, device));
    let y = linear.forward(&x);
    assert_eq!(y.device(), device);
    let w = linear.ws.to(Device::Cpu);
    let b = linear.bs.as_ref().unwrap().to(Device::Cpu);
    assert_close(&y, &(x.to(Device::Cpu).matmul(&w.tr()) + &b), "linear");

    let path = std::env::temp_dir().join(format!(
        "gpu-scope-fake-cuda-{}-{:?}.ot",
        std::process::id(),
        std::thread::current().id()
    ));
    vs.save(&path).unwrap();
    let mut loaded = nn::VarStore::new(device);
    let linear2 = nn::linear(loaded.root() / "fc", 4, 3, nn::LinearConfig::default());
    assert!(
        !linear2.ws.to(Device::Cpu).equal(&w),
        "a fresh layer starts elsewhere"
    );
    let result = loaded.load(&path);
    std::fs::remove_file(&path).unwrap();
    result.unwrap();
    assert_eq!(linear2.ws.device(), device);
    assert!(linear2.ws.to(Device::Cpu).equal(&w));
    assert!(linear2.bs.as_ref().unwrap().to(Device::Cpu).equal(&b));
    assert_close(&linear2.forward(&x), &y.to(Device::Cpu), "loaded linear");
}

#[test]
fn backward_on_cuda1_matches_the_cpu() {
    let a_cpu = Tensor::randn([5, 7], (Kind::Float, Device::Cpu));
    let b_cpu = Tensor::randn([7, 3], (Kind::Float, Device::Cpu));
    let grads = |device: Device| {
        let a = a_cpu.to(device).set_requires_grad(true);
        let b = b_cpu.to(device).set_requires_grad(true);
        a.matmul(&b).relu().sum(Kind::Float).backward();
        (a.grad(), b.grad())
    };
    let (ga, gb) = grads(Device::Cuda(1));
    let (ga_cpu, gb_cpu) = grads(Device::Cpu);
    assert_eq!(ga.device(), Device::Cuda(1));
    assert_close(&ga, &ga_cpu, "grad of a");
    assert_close(&gb, &gb_cpu, "grad of b");
    assert!(ga_cpu.abs().sum(Kind::Float).double_value(&[]) > 0.0);
}

#[test]
fn to_cpu_round_trips() {
    let cpu = Tensor::arange(24, (Kind::Int64, Device::Cpu)).view([2, 3, 4]);
    for device in [Device::Cuda(0), Device::Cuda(1)] {
        let on = cpu.to(device);
        assert_eq!(on.device(), device);
        assert!(on.to(Device::Cpu).equal(&cpu));
        assert_eq!(on.sum(Kind::Int64).int64_value(&[]), 276);
        let strided = cpu.transpose(0, 2);
        assert!(strided.to(device).to(Device::Cpu).equal(&strided));
        let floats = on.to_kind(Kind::Double);
        assert_eq!(floats.device(), device);
        assert!(floats.to(Device::Cpu).equal(&cpu.to_kind(Kind::Double)));
    }
    let hop = cpu.to(Device::Cuda(1)).to(Device::Cuda(0));
    assert_eq!(hop.device(), Device::Cuda(0));
    assert!(hop.to(Device::Cpu).equal(&cpu));
    let empty = Tensor::zeros([0, 3], (Kind::Float, Device::Cuda(0)));
    assert_eq!(empty.to(Device::Cpu).size(), [0, 3]);
}

/// Runs `fake_cuda_child` in a fresh process of this test binary with these settings (and no
/// others inherited), and checks that it passed without writing anything on stderr.
fn run_child(settings: &[(&str, &str)]) -> Output {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args([
        "fake_cuda_child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for name in SETTINGS {
        child.env_remove(name);
    }
    child.envs(settings.iter().copied()).env(CHILD, "1");
    let out = child.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child {settings:?} failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "child {settings:?} ran no test:\n{stdout}"
    );
    assert!(
        stderr.is_empty(),
        "child {settings:?} wrote on stderr:\n{stderr}"
    );
    out
}

#[test]
fn allocator_self_test() {
    let out = run_child(&[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("self-test: ok"));
}

#[test]
fn allocator_self_test_with_reports_off() {
    let out = run_child(&[("GPU_SCOPE_FAKE_CUDA_REPORTS", "0")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("self-test: ok"));
}

#[test]
fn allocator_self_test_with_three_devices_and_odd_workspace() {
    let out = run_child(&[
        ("GPU_SCOPE_FAKE_CUDA_DEVICES", "3"),
        ("GPU_SCOPE_FAKE_CUDA_WORKSPACE", "1048577"),
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("devices: 3"));
}

#[test]
#[ignore = "run in a fresh process by the allocator_self_test* tests"]
fn fake_cuda_child() {
    if std::env::var_os(CHILD).is_none() {
        // Run by hand (or with --include-ignored): the self-test needs a fresh process.
        run_child(&[]);
        return;
    }
    // Neither of these initializes CUDA.
    assert!(Cuda::is_available());
    assert_eq!(Cuda::device_count(), expected_devices());
    println!("devices: {}", Cuda::device_count());

    let mut message: [c_char; 4096] = [0; 4096];
    // SAFETY: the buffer is writable for its whole length; the self-test NUL-terminates it.
    let status = unsafe { gs_fake_cuda_selftest(message.as_mut_ptr(), message.len()) };
    // SAFETY: NUL-terminated by the self-test.
    let message = unsafe { CStr::from_ptr(message.as_ptr()) }.to_string_lossy();
    assert_eq!(status, 0, "{message}");
    assert_eq!(message, "ok");
    println!("self-test: {message}");

    // Some ordinary work after it, so that stderr is checked for that too.
    let x = Tensor::randn([16, 16], (Kind::Float, Device::Cuda(1)));
    let y = x.matmul(&x).relu().sum(Kind::Float);
    assert!(y.double_value(&[]).is_finite());
}
