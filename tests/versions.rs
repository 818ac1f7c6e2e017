//! The versions reports carry: gpu-scope's own, the tch in Cargo.lock, and the running libtorch
//! (the one that tch's torch-sys expects).
use gpu_scope::ScopeOptions;

/// The version Cargo.lock resolved for package `name`.
fn locked(name: &str) -> String {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap();
    let entry = format!("name = \"{name}\"");
    let versions: Vec<&str> = lock
        .split("[[package]]")
        .filter(|package| package.lines().any(|l| l == entry))
        .filter_map(|package| package.lines().find_map(|l| l.strip_prefix("version = ")))
        .collect();
    assert_eq!(versions.len(), 1, "one {name} in Cargo.lock: {versions:?}");
    versions[0].trim_matches('"').to_owned()
}

#[test]
fn versions_name_what_was_built_and_what_runs() {
    let v = gpu_scope::versions();
    assert_eq!(v.gpu_scope, env!("CARGO_PKG_VERSION"));
    // The feature's tch is the one Cargo resolved.
    let tch = locked("tch");
    assert!(
        tch.starts_with(&format!("{}.", v.tch)),
        "{v:?}, tch {tch} in Cargo.lock"
    );
    // Each tch series binds one libtorch minor version.
    let libtorch = match v.tch {
        "0.24" => "2.11.",
        "0.25" => "2.12.",
        "0.26" => "2.13.",
        other => panic!("no libtorch known for tch {other}"),
    };
    assert!(v.libtorch.starts_with(libtorch), "{v:?}");
    let text = v.to_string();
    assert!(
        text.starts_with(&format!(
            "gpu-scope {}, tch {}, libtorch {}",
            v.gpu_scope, v.tch, v.libtorch
        )),
        "{text}"
    );
}

#[test]
fn report_json_carries_the_versions() {
    let (_, report) = gpu_scope::scope(ScopeOptions::new("versions"), || ()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let v = gpu_scope::versions();
    assert_eq!(json["versions"]["gpu_scope"], v.gpu_scope);
    assert_eq!(json["versions"]["tch"], v.tch);
    assert_eq!(json["versions"]["libtorch"], v.libtorch);
    assert_eq!(json["versions"]["cuda"], serde_json::json!(v.cuda));
    // The report's own fields are still there, beside it.
    assert_eq!(json["name"], "versions");
    assert_eq!(json["escaped_bytes"], 0);
}
