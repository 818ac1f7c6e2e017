//! Lets this package's tests, examples and benches find libtorch at run time (RUNPATH), and
//! tells the trybuild harness where it is.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_GPU_SCOPE_SHIM_LIBTORCH_LIB");
    let lib = match std::env::var("DEP_GPU_SCOPE_SHIM_LIBTORCH_LIB") {
        Ok(lib) => lib,
        // A documentation build (feature `doc-only`): no libtorch, nothing to link.
        Err(_) if std::env::var_os("CARGO_FEATURE_DOC_ONLY").is_some() => return,
        Err(_) => panic!("gpu-scope-runtime reports the libtorch lib folder"),
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-env=GPU_SCOPE_LIBTORCH_LIB={lib}");
}
