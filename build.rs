//! Lets this package's tests, examples and benches find libtorch at run time (RUNPATH), and
//! tells the trybuild harness where it is.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_GPU_SCOPE_SHIM_LIBTORCH_LIB");
    let lib = std::env::var("DEP_GPU_SCOPE_SHIM_LIBTORCH_LIB")
        .expect("gpu-scope-runtime reports the libtorch lib folder");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-env=GPU_SCOPE_LIBTORCH_LIB={lib}");
}
