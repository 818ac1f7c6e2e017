//! The GPU checks: what gpu-scope promises on a CUDA device, checked on the one this process
//! has, a real GPU or, in a `--features fake-cuda` build, gpu-scope's fake device. One line per
//! check; the exit status is 1 if any failed. Without a CUDA device it says why and exits 0.
//! `bash .ci/gpu-check` builds and runs it (see the README).
#[allow(dead_code)]
#[path = "../../benches/overhead/measure.rs"]
mod measure;
#[allow(dead_code)]
#[path = "../demo/models.rs"]
mod models;
#[allow(dead_code)]
#[path = "../demo/run.rs"]
mod run;

mod checks;

fn main() {
    let info = gpu_scope::device_info();
    println!(
        "gpu-check: backend `{}`, libtorch_cuda loaded: {}, {} CUDA device(s), tch sees CUDA: {}",
        info.backend,
        info.libtorch_cuda_loaded,
        info.devices,
        tch::Cuda::is_available()
    );
    if info.devices == 0 || !tch::Cuda::is_available() {
        let why = match (info.backend, info.libtorch_cuda_loaded) {
            ("", _) => "this libtorch has no CUDA",
            (_, false) => "libtorch_cuda is not loaded",
            _ => "no CUDA device is visible (no GPU, or no driver)",
        };
        println!("gpu-check: skipped: {why}");
        return;
    }
    let fake = info.backend == "fake-cuda";
    // Initialise CUDA first, as a program that loads its models before its scopes would: the
    // allocator's tracker attaches at the first allocation.
    drop(tch::Tensor::zeros(
        [1],
        (tch::Kind::Float, tch::Device::Cuda(0)),
    ));
    let mut failed = 0;
    for (name, check) in checks::ALL {
        let started = std::time::Instant::now();
        let result = check(fake);
        let secs = started.elapsed().as_secs_f64();
        match result {
            Ok(detail) => println!("PASS {name} ({secs:.1} s): {detail}"),
            Err(why) => {
                failed += 1;
                println!("FAIL {name} ({secs:.1} s): {why}");
            }
        }
    }
    println!(
        "gpu-check: {} of {} checks passed",
        checks::ALL.len() - failed,
        checks::ALL.len()
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
