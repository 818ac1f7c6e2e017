//! Backtraces of allocations (`GPU_SCOPE_BACKTRACE=on`), printed for people: C++ names
//! demangled, gpu-scope's own frames dropped, the user's code first.
use std::fmt::Write;

/// Frames from these crates and libraries are not where the user allocated.
const NOT_USER: [&str; 14] = [
    "backtrace::",
    "caffe2::",
    "gpu_scope_runtime::",
    "gs_",
    "std::",
    "core::",
    "alloc::",
    "tch::",
    "torch_sys::",
    "at::",
    "c10::",
    "torch::",
    "(anonymous namespace)::",
    "__rust",
];

/// Files of libtorch's and the C++ library's headers: code inlined from them (a kernel
/// wrapper's `operator()`) is not the user's either, whatever its name; nor is torch-sys's C
/// wrapper (`at_load`).
const NOT_USER_FILES: [&str; 5] = [
    "/ATen/",
    "/c10/",
    "/torch/csrc/",
    "/include/c++/",
    "/libtch/",
];

/// Marks of gpu-scope's own frames: the capture, then (the allocation's path, from the
/// second on) the hook that took it and the shim's allocator wrapper or reporter that called
/// the hook.
const OURS: [&str; 5] = [
    "gpu_scope_runtime::",
    "gs_rust_",
    "TrackingAllocator",
    "Reporter::reportMemoryUsage",
    "runtime/shim/",
];

/// Where the Rust runtime calls `main` or a spawned thread's closure: the frames from there
/// on are the runtime's.
const RUNTIME: [&str; 1] = ["__rust_begin_short_backtrace"];

/// Whether a symbol (or, for `<T as Trait>::f`, its type; for a C++ template function,
/// what follows its return type: `void torch::load<..>(..)`) starts with one of `prefixes`.
fn starts_with_any(name: &str, prefixes: &[&str]) -> bool {
    let name = match name.split_once(' ') {
        Some((word, rest)) if !word.contains([':', '<', '(']) => rest,
        _ => name,
    };
    let name = name.trim_start_matches('<');
    prefixes.iter().any(|p| name.starts_with(p))
}

pub(crate) fn format(mut bt: backtrace::Backtrace) -> String {
    bt.resolve();
    let mut frames: Vec<(String, String)> = Vec::new();
    for frame in bt.frames() {
        for symbol in frame.symbols() {
            let name = symbol
                .name()
                .map_or_else(|| format!("{:?}", frame.ip()), |n| format!("{n:#}"));
            let at = match (symbol.filename(), symbol.lineno()) {
                (Some(file), Some(line)) => format!("{}:{line}", file.display()),
                _ => String::new(),
            };
            frames.push((name, at));
        }
    }
    // Everything up to the shim's allocator wrapper (or reporter) is gpu-scope's own; not
    // its frames below the user's code (the scope that ran the closure), which a shallow
    // stack also has among its first frames.
    let marked = |marks: &[&str], (name, at): &(String, String)| {
        marks.iter().any(|m| name.contains(m) || at.contains(m))
    };
    let ours = |frame: &(String, String)| marked(&OURS, frame);
    let start = (frames.iter().take(32))
        .rposition(|frame| marked(&OURS[1..], frame))
        .map_or(0, |i| i + 1);
    // Below the user's code: gpu-scope's own frames (the scope that ran the closure) and the
    // runtime that started the thread or `main`.
    let end = frames
        .iter()
        .position(|(name, _)| RUNTIME.iter().any(|r| name.contains(r)))
        .unwrap_or(frames.len())
        .max(start);
    let frames: Vec<_> = frames[start..end].iter().filter(|f| !ours(f)).collect();
    let mut out = String::new();
    // torch-sys's C wrapper (`at_load`, `atg_add`, `ato_step`): a Rust symbol has a path.
    let tch_c = |name: &str| name.starts_with("at") && !name.contains("::");
    let users = |(name, at): &&(String, String)| {
        !starts_with_any(name, &NOT_USER)
            && !tch_c(name)
            && !NOT_USER_FILES.iter().any(|f| at.contains(f))
    };
    if let Some((name, at)) = frames.iter().copied().find(users) {
        let _ = writeln!(out, "allocated in {name} {at}");
    }
    for (i, (name, at)) in frames.iter().enumerate() {
        let _ = writeln!(out, "{i:>4}: {name} {at}");
    }
    out
}
