//! Compiles the small C++ shim against the libtorch that torch-sys found, and passes that
//! libtorch's `lib` folder on to dependents (`DEP_GPU_SCOPE_SHIM_LIBTORCH_LIB`).
use std::env;
use std::path::PathBuf;

/// Every variable the build reads goes through here, so cargo reruns when it changes.
fn env_var(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    env::var(name).ok()
}

fn main() {
    let lib = env_var("DEP_TCH_LIBTORCH_LIB")
        .map(PathBuf::from)
        .expect("torch-sys did not report its libtorch lib folder (DEP_TCH_LIBTORCH_LIB)");
    // libtorch finds its CUDA libraries through `$ORIGIN`: the RUNPATH must be the real path.
    let lib = lib.canonicalize().unwrap_or(lib);
    let root = lib
        .parent()
        .expect("libtorch lib folder has a parent")
        .to_path_buf();
    let include = env_var("LIBTORCH_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or(root);
    let abi = env_var("LIBTORCH_CXX11_ABI").unwrap_or_else(|| "1".to_owned());

    for file in ["shim/shim.cpp", "shim/shim.h"] {
        println!("cargo:rerun-if-changed={file}");
    }
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(include.join("include"))
        .include(include.join("include/torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .file("shim/shim.cpp")
        .compile("gpu_scope_shim");

    println!("cargo:libtorch_lib={}", lib.display());
    // The runtime's own unit tests load libtorch too.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
