//! The demo's logic: a model-switching inference service, then the same with a planted leak.
//! `main.rs` drives it from the command line; `tests/demo.rs` runs it on the CPU.
use super::models::{self, Kind};
use gpu_scope::{
    attribution, memory_stats, Attribution, Bytes, EscapePolicy, HeldBy, MemoryStats, ScopeOptions,
    ScopeReport,
};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tch::nn;
use tch::{Device, Tensor};

pub type DemoResult<T> = Result<T, Box<dyn std::error::Error>>;

pub struct Config {
    pub device: Device,
    pub rounds: usize,
    pub batch: i64,
    pub trace: Option<PathBuf>,
    pub weights: PathBuf,
    pub progress: bool,
}

/// What the run measured; `ok` says whether everything behaved as the demo expects (the
/// other fields are read by `tests/demo.rs`).
#[allow(dead_code)]
pub struct Outcome {
    pub baseline: MemoryStats,
    pub after_switching: MemoryStats,
    pub leak: Option<ScopeReport>,
    pub expected_leak: u64,
    pub while_cached: MemoryStats,
    pub after_cleanup: MemoryStats,
    pub reports: Vec<ScopeReport>,
    pub ok: bool,
}

/// One line if `device` is missing, said before the run rather than as a libtorch dispatcher
/// dump later.
pub fn check_device(device: Device) -> Result<(), String> {
    let bare = |e: gpu_scope::Error| e.to_string().trim_start_matches("gpu-scope: ").to_owned();
    memory_stats(device)
        .map(drop)
        .map_err(|e| format!("--device: {}", bare(e)))
}

fn weights(dir: &Path, kind: Kind) -> PathBuf {
    dir.join(format!("{}.safetensors", kind.name()))
}

/// Saves each model's weights once, as a service's model registry would hold them.
fn save_models(cfg: &Config) -> DemoResult<()> {
    std::fs::create_dir_all(&cfg.weights).map_err(|e| {
        let dir = cfg.weights.display();
        format!(
            "cannot make the folder for the models' weights, {dir}: {e} (set TMPDIR to a \
             writable folder)"
        )
    })?;
    for kind in models::ALL {
        let vs = nn::VarStore::new(cfg.device);
        let _model = kind.build(&vs.root());
        vs.save(weights(&cfg.weights, kind))?;
    }
    Ok(())
}

/// Loads a model into a fresh VarStore and runs one batch; only the output is returned.
fn infer(
    cfg: &Config,
    kind: Kind,
    cache: Option<&Mutex<Vec<nn::VarStore>>>,
) -> DemoResult<(Tensor, ScopeReport)> {
    let opts = ScopeOptions::new(kind.name())
        .device(cfg.device)
        .on_escape(EscapePolicy::Error);
    let (output, report) = match gpu_scope::scope(opts, || -> Result<Tensor, tch::TchError> {
        let mut vs = nn::VarStore::new(cfg.device);
        let model = kind.build(&vs.root());
        vs.load(weights(&cfg.weights, kind))?;
        let y = model.forward(&kind.input(cfg.batch, cfg.device));
        if let Some(cache) = cache {
            // The planted mistake: a "helper" keeps every model it loaded, just in case.
            cache.lock().unwrap().push(vs);
        }
        Ok(y)
    }) {
        Ok((output, report)) => (output?, report),
        Err(gpu_scope::Error::Escaped(report)) => (Tensor::new(), *report),
        Err(e) => return Err(e.into()),
    };
    Ok((output, report))
}

fn header(out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>5}  {:<12} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>10}",
        "round", "model", "allocated", "peak", "kept", "escaped", "released", "reserved", "time"
    )
}

/// One scope's row; `reserved` is the device's reserved memory after the scope.
fn row(out: &mut dyn Write, round: usize, r: &ScopeReport, reserved: u64) -> std::io::Result<()> {
    writeln!(
        out,
        "{round:>5}  {:<12} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>8.2}ms",
        r.name,
        Bytes(r.allocated),
        Bytes(r.peak),
        Bytes(r.kept),
        Bytes(r.escaped_bytes),
        Bytes(r.cache_released),
        Bytes(reserved),
        r.elapsed.as_secs_f64() * 1e3
    )
}

/// Bytes of the library workspaces (cuBLAS) that the reports saw libtorch keep on purpose.
fn workspaces(reports: &[ScopeReport]) -> u64 {
    let mut held: Vec<_> = reports
        .iter()
        .flat_map(|r| &r.held)
        .filter(|h| matches!(h.by, HeldBy::Workspace(_)))
        .collect();
    held.sort_by_key(|h| (h.device, h.bytes));
    held.dedup();
    held.iter().map(|h| h.bytes).sum()
}

/// Prints how `now` compares with `baseline`, apart from `workspaces` (what libtorch keeps on
/// purpose); returns whether memory is back at it.
fn at_baseline(
    out: &mut dyn Write,
    when: &str,
    now: &MemoryStats,
    baseline: &MemoryStats,
    workspaces: u64,
) -> std::io::Result<bool> {
    let back = now.allocated == baseline.allocated + workspaces;
    let verdict = if back {
        "back to baseline"
    } else {
        "NOT back to baseline"
    };
    let kept = if workspaces > 0 {
        format!(
            " + {} of cuBLAS workspaces libtorch keeps",
            Bytes(workspaces)
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "{when}: {} allocated, {} reserved ({} at baseline{kept}) -> {verdict}",
        Bytes(now.allocated),
        Bytes(now.reserved),
        Bytes(baseline.allocated)
    )?;
    Ok(back)
}

static MODEL_CACHE: Mutex<Vec<nn::VarStore>> = Mutex::new(Vec::new());

pub fn run(cfg: &Config, out: &mut dyn Write) -> DemoResult<Outcome> {
    save_models(cfg)?;
    let baseline = memory_stats(cfg.device)?;
    let info = gpu_scope::device_info();
    let cuda = match (info.backend, info.libtorch_cuda_loaded) {
        ("fake-cuda", _) => format!(
            "fake CUDA device of gpu-scope's tests, {} devices",
            info.devices
        ),
        (_, true) => format!("libtorch_cuda loaded, {} devices", info.devices),
        ("", _) => "libtorch built without CUDA".to_owned(),
        (backend, false) => format!("{backend}, libtorch_cuda not loaded"),
    };
    // What a bug report needs first: which gpu-scope, tch and libtorch ran.
    writeln!(out, "{}", gpu_scope::versions())?;
    writeln!(out, "cuda: {cuda}")?;
    writeln!(
        out,
        "gpu-scope demo on {}: {} rounds x {} models, batch {}",
        gpu_scope::DeviceId::from(cfg.device),
        cfg.rounds,
        models::ALL.len(),
        cfg.batch
    )?;
    writeln!(
        out,
        "baseline: {} allocated, {} reserved\n",
        Bytes(baseline.allocated),
        Bytes(baseline.reserved)
    )?;
    writeln!(
        out,
        "phase 1: load each model from disk inside a scope, run a batch, keep only the output"
    )?;
    header(out)?;
    let mut reports = Vec::new();
    for round in 1..=cfg.rounds {
        let show = !cfg.progress || round == 1 || round == cfg.rounds;
        if cfg.progress && show && round > 1 {
            // The last round's rows replace the bar on the terminal's line.
            eprint!("\r{:42}\r", "");
        }
        for kind in models::ALL {
            let (output, report) = infer(cfg, kind, None)?;
            if show {
                row(out, round, &report, memory_stats(cfg.device)?.reserved)?;
            }
            if !report.escaped.is_empty() {
                writeln!(out, "{report}")?;
            }
            drop(output);
            reports.push(report);
        }
        if cfg.progress && round < cfg.rounds {
            let done = round * 30 / cfg.rounds;
            eprint!(
                "\r[{}{}] {round}/{}",
                "#".repeat(done),
                " ".repeat(30 - done),
                cfg.rounds
            );
        }
    }
    let after_switching = memory_stats(cfg.device)?;
    let workspaces = workspaces(&reports);
    let back = at_baseline(
        out,
        "after phase 1",
        &after_switching,
        &baseline,
        workspaces,
    )?;
    writeln!(out)?;

    writeln!(
        out,
        "phase 2: the same service with a helper that caches every model in a global"
    )?;
    let expected_leak = {
        let vs = nn::VarStore::new(Device::Cpu);
        let _m = Kind::Mlp.build(&vs.root());
        vs.variables().values().map(|t| t.numel() as u64 * 4).sum()
    };
    // Under the release default (`Attribution::OnLeak`) the first escape at a place is found by
    // size and address only; the next request at the same place names operators and shapes.
    let mut caught = true;
    let leak = loop {
        let (_, leak) = infer(cfg, Kind::Mlp, Some(&MODEL_CACHE))?;
        reports.push(leak.clone());
        writeln!(out, "{leak}")?;
        // On a GPU each escape is a caching-allocator block, rounded up from what was requested.
        caught &= leak.escaped_requested == expected_leak
            && leak.escaped_bytes >= expected_leak
            && !leak.escaped.is_empty();
        if leak.attributed || attribution() == Attribution::Off || !caught {
            break leak;
        }
        writeln!(
            out,
            "the next request, at the same place in the code, names operators and shapes:"
        )?;
    };
    let while_cached = memory_stats(cfg.device)?;
    writeln!(
        out,
        "while the cache holds the models: {} allocated",
        Bytes(while_cached.allocated)
    )?;
    MODEL_CACHE.lock().unwrap().clear();
    let after_cleanup = memory_stats(cfg.device)?;
    let clean = at_baseline(
        out,
        "after dropping the cache",
        &after_cleanup,
        &baseline,
        workspaces,
    )?;
    if let Some(path) = &cfg.trace {
        std::fs::write(path, chrome_trace(&reports))
            .map_err(|e| format!("cannot write the trace to {}: {e}", path.display()))?;
        writeln!(
            out,
            "trace written to {} (open it in https://ui.perfetto.dev)",
            path.display()
        )?;
    }
    let ok = back && caught && clean;
    writeln!(out, "\n{}", if ok { "demo: OK" } else { "demo: FAILED" })?;
    Ok(Outcome {
        baseline,
        after_switching,
        leak: Some(leak),
        expected_leak,
        while_cached,
        after_cleanup,
        reports,
        ok,
    })
}

/// Chrome trace-event JSON: one slice per scope, and a counter track per scope name (`<name>
/// bytes`) with the scope's peak, kept and escaped bytes while it runs, zeros after it.
pub fn chrome_trace(reports: &[ScopeReport]) -> String {
    let mut events = Vec::new();
    for r in reports {
        let ts = r.started.as_micros() as u64;
        let dur = (r.elapsed.as_micros() as u64).max(1);
        let track = format!("{} bytes", r.name);
        events.push(serde_json::json!({
            "name": r.name, "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": { "allocated": r.allocated, "peak": r.peak, "kept": r.kept, "escaped": r.escaped_bytes },
        }));
        events.push(serde_json::json!({
            "name": track, "ph": "C", "ts": ts, "pid": 1,
            "args": { "peak": r.peak, "kept": r.kept, "escaped": r.escaped_bytes },
        }));
        events.push(serde_json::json!({
            "name": track, "ph": "C", "ts": ts + dur, "pid": 1,
            "args": { "peak": 0, "kept": 0, "escaped": 0 },
        }));
    }
    serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" }).to_string()
}
