//! Compile-time misuse (trybuild). Regenerate expectations with `TRYBUILD=overwrite`.
#[test]
fn ui() {
    // The passing cases run, and their binaries need libtorch like ours do.
    std::env::set_var("LD_LIBRARY_PATH", env!("GPU_SCOPE_LIBTORCH_LIB"));
    let t = trybuild::TestCases::new();
    t.compile_fail("ui-tests/fail/*.rs");
    t.pass("ui-tests/pass/*.rs");
}

/// No expected error names what the macros generate: `__private` paths or `__gpu_scope` names.
/// (But where `crate = path` names a path that is not gpu-scope: rustc says what the path lacks,
/// at the path, as for serde's and tokio's `crate` options.)
#[test]
fn errors_name_only_what_the_user_wrote() {
    let mut named = Vec::new();
    for entry in std::fs::read_dir("ui-tests/fail").expect("the ui cases") {
        let path = entry.expect("a ui case").path();
        if path.extension().is_some_and(|e| e == "stderr") {
            let mut text = std::fs::read_to_string(&path).expect("readable");
            if path.ends_with("crate-path-wrong.stderr") {
                text = text.replace("`__private` in `tch`", "");
            }
            if text.contains("__private") || text.contains("__gpu_scope") {
                named.push(path.display().to_string());
            }
        }
    }
    assert!(named.is_empty(), "generated names in {named:?}");
}
