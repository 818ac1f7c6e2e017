//! The demo's logic on the CPU with a few rounds: memory back to baseline, the planted escape
//! found with the right byte count, and a trace whose counters match the reports.
#[path = "../examples/demo/cli.rs"]
mod cli;
#[allow(dead_code)]
#[path = "../examples/demo/models.rs"]
mod models;
#[allow(dead_code)]
#[path = "../examples/demo/run.rs"]
mod run;

#[test]
fn demo_on_cpu() {
    let dir = std::env::temp_dir().join(format!("gpu-scope-demo-test-{}", std::process::id()));
    let trace = dir.join("trace.json");
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = run::Config {
        device: tch::Device::Cpu,
        rounds: 3,
        batch: 4,
        trace: Some(trace.clone()),
        weights: dir.clone(),
        progress: false,
    };
    // Every scope attributed (a debug build's default; pinned, as a release build's is
    // on-leak): the one planted leak is named at once.
    gpu_scope::set_attribution(gpu_scope::Attribution::Always);
    let (outcome, text) = demo(&cfg, 1);

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let slices: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    let counters: Vec<_> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert_eq!(slices.len(), outcome.reports.len());
    assert_eq!(counters.len(), 2 * outcome.reports.len());
    for ((slice, report), pair) in slices.iter().zip(&outcome.reports).zip(counters.chunks(2)) {
        assert_eq!(slice["name"], &*report.name);
        assert_eq!(slice["args"]["peak"], report.peak);
        // Each scope's own counter track: its bytes while it runs, zeros at its end.
        let track = format!("{} bytes", report.name);
        assert!(pair.iter().all(|c| c["name"] == *track), "{pair:?}");
        assert_eq!(pair[0]["args"]["peak"], report.peak);
        assert_eq!(pair[0]["args"]["kept"], report.kept);
        assert_eq!(
            pair[1]["ts"],
            slice["ts"].as_u64().unwrap() + slice["dur"].as_u64().unwrap()
        );
    }
    let last = counters[counters.len() - 2];
    assert_eq!(last["args"]["escaped"], outcome.expected_leak);
    assert!(!text.contains("found without attribution"), "{text}");

    // The release default: the first leak is found by size and address, the next request at
    // the same place names operators and shapes (what the README's demo output shows).
    gpu_scope::set_attribution(gpu_scope::Attribution::OnLeak);
    cfg.trace = None;
    let (outcome, text) = demo(&cfg, 2);
    assert!(
        outcome.reports[9]
            .escaped
            .iter()
            .all(|e| e.operator.is_none()),
        "{text}"
    );
    assert!(text.contains("found without attribution"), "{text}");
    assert!(text.contains("names operators and shapes:"), "{text}");
    assert!(text.contains("aten::"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs the demo, checks what holds in every mode, and returns the outcome and the output.
/// `leaks`: how many requests leak before one is named by operator and shape.
fn demo(cfg: &run::Config, leaks: usize) -> (run::Outcome, String) {
    let mut out = Vec::new();
    let outcome = run::run(cfg, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(outcome.ok, "{text}");
    assert_eq!(
        outcome.after_switching.allocated, outcome.baseline.allocated,
        "{text}"
    );
    assert_eq!(outcome.after_cleanup.allocated, outcome.baseline.allocated);
    let leak = outcome.leak.as_ref().unwrap();
    assert!(leak.attributed, "{text}");
    assert_eq!(leak.escaped_bytes, outcome.expected_leak);
    assert_eq!(
        leak.escaped.len(),
        6,
        "three linear layers: weights and biases"
    );
    assert!(leak
        .escaped
        .iter()
        .any(|e| e.shape.as_deref() == Some(&[512, 512][..])));
    assert_eq!(
        outcome.while_cached.allocated - outcome.baseline.allocated,
        outcome.expected_leak * leaks as u64
    );
    assert_eq!(outcome.reports.len(), 3 * 3 + leaks);
    assert!(text.contains("demo: OK"));
    let versions = gpu_scope::versions().to_string();
    assert!(
        text.starts_with(&versions),
        "the header names the versions: {text}"
    );
    (outcome, text)
}

/// The command line's numbers are whole and at least 1, and running out of memory is told in
/// libtorch's one line, without the C++ frames tch's error carries.
#[test]
fn the_command_line_says_what_is_wrong() {
    assert_eq!(cli::count("--rounds", "3"), Ok(3));
    let args = ["--rounds=2", "--batch", "4", "--trace=a=b.json", "-h"].map(String::from);
    assert_eq!(
        cli::split_values(args),
        ["--rounds", "2", "--batch", "4", "--trace", "a=b.json", "-h"]
    );
    for huge in ["18446744073709551615", "99999999999999999999999"] {
        let error = cli::count("--batch", huge).unwrap_err();
        assert!(error.contains("too large"), "{error}");
    }
    for bad in ["0", "-3", "abc", " 2", "-99999999999999999999999"] {
        let error = cli::count("--batch", bad).unwrap_err();
        assert!(error.contains("whole number of at least 1"), "{error}");
    }
    let panic = r#"called `Result::unwrap()` on an `Err` value: Torch("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 50176000000 bytes. Error code 12 (Cannot allocate memory)\nframe #0: c10::ThrowEnforceNotMet")"#;
    assert_eq!(
        cli::out_of_memory(panic),
        Some("can't allocate memory: you tried to allocate 50176000000 bytes. Error code 12 (Cannot allocate memory)")
    );
    let panic = r#"called `Result::unwrap()` on an `Err` value: Torch("Storage size calculation overflowed with sizes=[100000000000000000, 256]\nException raised from computeStorageNbytesContiguous at EmptyTensor.cpp:73")"#;
    assert_eq!(
        cli::out_of_memory(panic),
        Some("Storage size calculation overflowed with sizes=[100000000000000000, 256]")
    );
    assert_eq!(cli::out_of_memory("index out of range"), None);
}

/// A device that is not there is one line naming `--device`, without gpu-scope's prefix.
#[test]
fn a_missing_device_is_named_before_the_run() {
    assert_eq!(run::check_device(tch::Device::Cpu), Ok(()));
    let error = run::check_device(tch::Device::Cuda(63)).unwrap_err();
    assert!(error.starts_with("--device: "), "{error}");
    assert!(
        !error.contains("gpu-scope:") && !error.contains('\n'),
        "{error}"
    );
}
