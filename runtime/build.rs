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

/// The libtorch each tch feature is built against (torch-sys checks only some layouts itself:
/// not PyPI's `site-packages/torch`), as `(feature, major.minor)`.
const TCH_LIBTORCH: [(&str, &str); 3] = [
    ("tch-0-24", "2.11"),
    ("tch-0-25", "2.12"),
    ("tch-0-26", "2.13"),
];

/// The `major.minor` version of the libtorch headers under `include`, if they say.
fn libtorch_version(include: &Path) -> Option<String> {
    let headers = [
        "torch/headeronly/version.h",
        "torch/csrc/api/include/torch/version.h",
    ];
    let text = headers
        .iter()
        .find_map(|h| std::fs::read_to_string(include.join("include").join(h)).ok())?;
    let number = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.trim().parse::<u32>().ok())
    };
    let (major, minor) = (
        number("#define TORCH_VERSION_MAJOR")?,
        number("#define TORCH_VERSION_MINOR")?,
    );
    Some(format!("{major}.{minor}"))
}

/// The tch feature that is on, with its libtorch; stops the build unless exactly one is.
fn tch_feature() -> (&'static str, &'static str) {
    let on: Vec<_> = TCH_LIBTORCH
        .into_iter()
        .filter(|(feature, _)| env::var_os(feature_var(feature)).is_some())
        .collect();
    // What to write, shown whenever the features are wrong.
    let write = "write, in your Cargo.toml, `gpu-scope = \"0.1\"` for tch 0.26 (the default), or \
                 `gpu-scope = { version = \"0.1\", default-features = false, features = \
                 [\"tch-0-24\"] }` for tch 0.24 (`tch-0-25` for tch 0.25), and the same tch in \
                 your `tch` requirement";
    match on[..] {
        [one] => one,
        [] => panic!("gpu-scope: no tch feature is on: {write}"),
        _ => panic!(
            "gpu-scope: several tch features are on ({}), and exactly one must be: {write}",
            on.iter()
                .map(|(feature, _)| format!("`{feature}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Stops the build, with what to do, when the libtorch is not the one the tch feature needs.
fn check_libtorch_version(include: &Path, (feature, wanted): (&str, &str)) {
    if env_var("LIBTORCH_BYPASS_VERSION_CHECK").is_some() {
        return;
    }
    let found = libtorch_version(include);
    if found.as_deref() == Some(wanted) {
        return;
    }
    // The libtorch is most often the one the crate's own tch needs, and the feature is wrong.
    let other = TCH_LIBTORCH
        .into_iter()
        .find(|(_, libtorch)| found.as_deref() == Some(*libtorch))
        .map_or(String::new(), |(other, _)| {
            format!(
                "If your crate depends on the tch of that libtorch, select gpu-scope's feature \
                 `{other}` instead of `{feature}` (`default-features = false, features = \
                 [\"{other}\"]`, or no features for the default `tch-0-26`). "
            )
        });
    panic!(
        "gpu-scope: feature `{feature}` needs libtorch {wanted}, but the libtorch at {} is {}. \
         {other}To build with `{feature}`, point LIBTORCH at a libtorch {wanted} (in this \
         repository: `bash setup.sh`, with the tch version for a feature other than the \
         default). The feature and your `tch` requirement must name the same tch (README: \
         Versions); LIBTORCH_BYPASS_VERSION_CHECK=1 skips this check.",
        include.display(),
        found.unwrap_or_else(|| "of unknown version".to_owned()),
    )
}

/// The variable cargo sets for `feature`.
fn feature_var(feature: &str) -> String {
    format!("CARGO_FEATURE_{}", feature.to_uppercase().replace('-', "_"))
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
    let tch = tch_feature();
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
    check_libtorch_version(&include, tch);

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
