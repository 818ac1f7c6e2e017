//! Tracking causes no output from libtorch, and runs in a child process to prove it.
mod common;
use common::{floats, strict};
use std::process::Command;

const CHILD: &str = "GPU_SCOPE_QUIET_CHILD";

/// Frees, inside scopes, many CPU blocks allocated outside them: the case in which libtorch's
/// own CPU memory reporter would print "Memory block of unknown size ...".
fn workload() {
    let outside: Vec<_> = (0..2000).map(|_| floats(64)).collect();
    let (_, report) = gpu_scope::scope(strict("frees-outer"), move || {
        drop(outside);
        let inside = floats(32);
        drop(inside);
    })
    .unwrap();
    assert_eq!(report.freed, 128);
    let kept = gpu_scope::scope(strict("kept"), || floats(8)).unwrap().0;
    drop(kept); // freed outside any scope
}

#[test]
fn no_stderr_from_libtorch() {
    if std::env::var_os(CHILD).is_some() {
        workload();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "no_stderr_from_libtorch",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stderr}");
    assert!(
        !stderr.contains("unknown size"),
        "libtorch printed: {stderr}"
    );
    assert!(!stderr.contains("[W "), "libtorch printed: {stderr}");
}
