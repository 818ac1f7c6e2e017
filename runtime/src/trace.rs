//! Backtraces of allocations (`GPU_SCOPE_BACKTRACE=on`), printed for people: C++ names
//! demangled, gpu-scope's own frames dropped, the user's code first.
use std::fmt::Write;

/// Frames from these crates and libraries are not where the user allocated.
const NOT_USER: [&str; 14] = [
    "backtrace::",
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
    "atg_",
];

/// gpu-scope's own frames (the Rust runtime and the shim's allocator wrapper and reporter),
/// dropped from the listing.
const OURS: [&str; 6] = [
    "backtrace::",
    "gpu_scope_runtime::",
    "gs_",
    "(anonymous namespace)::TrackingAllocator",
    "(anonymous namespace)::Reporter",
    "(anonymous namespace)::on_trace",
];

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
            if !OURS.iter().any(|p| name.starts_with(p)) {
                frames.push((name, at));
            }
        }
    }
    let user = frames
        .iter()
        .position(|(name, _)| !NOT_USER.iter().any(|p| name.starts_with(p)));
    let mut out = String::new();
    if let Some(i) = user {
        let (name, at) = &frames[i];
        let _ = writeln!(out, "allocated in {name} {at}");
    }
    for (i, (name, at)) in frames.iter().enumerate() {
        let _ = writeln!(out, "{i:>4}: {name} {at}");
    }
    out
}
