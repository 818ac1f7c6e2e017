//! Compile-time misuse (trybuild). Regenerate expectations with `TRYBUILD=overwrite`.
#[test]
fn ui() {
    // The passing cases run, and their binaries need libtorch like ours do.
    std::env::set_var("LD_LIBRARY_PATH", env!("GPU_SCOPE_LIBTORCH_LIB"));
    let t = trybuild::TestCases::new();
    t.compile_fail("ui-tests/fail/*.rs");
    t.pass("ui-tests/pass/*.rs");
}
