use gpu_scope::{EscapePolicy, Scope, ScopeOptions};
use tch::{Device, Kind, Tensor};

#[test]
fn tensor_value_through_tch() {
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0]) * 2;
    assert_eq!(Vec::<f32>::try_from(&t).unwrap(), vec![2.0, 4.0, 6.0]);
}

#[test]
fn smoke() {
    let scope = Scope::enter(ScopeOptions::new("s").on_escape(EscapePolicy::Error)).unwrap();
    let a = Tensor::zeros([256, 256], (Kind::Float, Device::Cpu));
    let b = &a + 1;
    drop(a);
    let r = scope.exit(&b).unwrap();
    println!("{r}");
    assert_eq!(r.kept, 256 * 256 * 4);
    assert_eq!(r.freed, 256 * 256 * 4 + 12, "{r}");
}

/// A binary built here loads `libtorch_cuda.so` whenever the libtorch it links has one (the
/// shim references a symbol of it, so `--as-needed` cannot drop it), with no build script of
/// its own; the fake device's build never loads it (the two would register the same names).
#[test]
fn libtorch_cuda_loaded_whenever_libtorch_has_it() {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let cpu = maps
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .find(|path| path.ends_with("/libtorch_cpu.so"))
        .expect("libtorch_cpu.so is mapped");
    let has_cuda = std::path::Path::new(cpu)
        .with_file_name("libtorch_cuda.so")
        .exists();
    let info = gpu_scope::device_info();
    let expected = has_cuda && info.backend != "fake-cuda";
    assert_eq!(
        info.libtorch_cuda_loaded, expected,
        "libtorch at {cpu} (libtorch_cuda.so there: {has_cuda}), backend `{}`",
        info.backend
    );
    println!("libtorch_cuda loaded: {}", info.libtorch_cuda_loaded);
}
