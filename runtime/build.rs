//! Compiles the small C++ shim against the libtorch that torch-sys found, with the device backend
//! that libtorch supports (see `shim/backend.h`), and passes that libtorch's `lib` folder on to
//! dependents (`DEP_GPU_SCOPE_SHIM_LIBTORCH_LIB`).
use std::env;
use std::path::{Path, PathBuf};

/// Every variable the build reads goes through here, so cargo reruns when it changes.
fn env_var(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    env::var(name).ok()
}

/// Folders holding the CUDA runtime headers, if they can be found: `CUDA_HOME`,
/// `CUDA_PATH`, `/usr/local/cuda`, or the `nvidia-*` wheels installed beside PyPI's torch.
fn cuda_includes(torch_root: &Path) -> Option<Vec<PathBuf>> {
    let has = |dirs: &[PathBuf], file: &str| dirs.iter().any(|d| d.join(file).exists());
    let complete = |dirs: Vec<PathBuf>| {
        // PyPI's cu13 runtime wheel lacks crt/: it comes in the nvidia-cuda-crt wheel.
        let needed = ["cuda_runtime_api.h", "crt/host_defines.h"];
        needed.iter().all(|f| has(&dirs, f)).then_some(dirs)
    };
    let toolkits = ["CUDA_HOME", "CUDA_PATH"]
        .into_iter()
        .filter_map(env_var)
        .chain(["/usr/local/cuda".to_owned()]);
    for toolkit in toolkits {
        if let Some(dirs) = complete(vec![PathBuf::from(toolkit).join("include")]) {
            return Some(dirs);
        }
    }
    let wheels = torch_root.parent()?.join("nvidia");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(wheels)
        .ok()?
        .filter_map(|e| Some(e.ok()?.path().join("include")))
        .filter(|d| d.is_dir())
        .collect();
    dirs.sort();
    complete(dirs)
}

/// The files in `dir` whose name ends with `ext`, sorted.
fn sources(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(ext))
        .collect();
    files.sort();
    files
}

fn main() {
    // Documentation builds (docs.rs, or `--features doc-only` anywhere) have no libtorch:
    // torch-sys then skips its C++, and so does this, while rustdoc still reads the Rust.
    if env::var_os("CARGO_FEATURE_DOC_ONLY").is_some() || env_var("DOCS_RS").is_some() {
        return;
    }
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
        .unwrap_or_else(|| root.clone());
    let abi = env_var("LIBTORCH_CXX11_ABI").unwrap_or_else(|| "1".to_owned());

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(include.join("include"))
        .include(include.join("include/torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .file("shim/shim.cpp");

    // The fake device must never share a process with the real libtorch_cuda (same registry
    // names, same kernels), so it replaces the CUDA backend rather than joining it.
    let fake = env::var_os("CARGO_FEATURE_FAKE_CUDA").is_some();
    let libtorch_cuda = lib.join("libtorch_cuda.so").exists();
    let backend = match (fake, libtorch_cuda) {
        (true, _) => "shim/fake_cuda",
        (false, true) => match cuda_includes(&root) {
            Some(dirs) => {
                build.includes(dirs);
                println!("cargo:rustc-link-lib=dylib=c10_cuda");
                "shim/cuda_backend.cpp"
            }
            None => "shim/cuda_load.cpp",
        },
        (false, false) => "shim/no_backend.cpp",
    };
    if backend.ends_with(".cpp") {
        build.file(backend);
    } else {
        build.files(sources(backend, "cpp"));
    }
    for dir in ["shim", "shim/fake_cuda"] {
        println!("cargo:rerun-if-changed={dir}");
        for file in sources(dir, "") {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
    build.compile("gpu_scope_shim");
    if libtorch_cuda && !fake {
        println!("cargo:rustc-link-lib=dylib=torch_cuda");
    }

    println!("cargo:libtorch_lib={}", lib.display());
    // The runtime's own unit tests load libtorch too.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
