//! The benchmarks, each returning its rows of the table.
use crate::measure::{from_pairs, interleave, median_ns, quantile, time};
use crate::{models, Row};
use gpu_scope::{EscapePolicy, Scope, ScopeOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

type Bench = fn() -> Vec<Row>;

pub const ALL: &[(&str, Bench)] = &[
    ("mlp", mlp),
    ("threads", threads),
    ("empty scope", empty_scope),
    ("exit cost", exit_cost),
    ("threads after a leak", threads_after_leak),
    ("model switch", model_switch),
    ("outside", outside),
    ("pytorch", pytorch),
    ("gpu", gpu),
];

/// Three `width`-wide linear layers with ReLU between them.
fn mlp_of(p: &nn::Path, width: i64) -> nn::Sequential {
    let c = Default::default();
    nn::seq()
        .add(nn::linear(p / "l1", width, width, c))
        .add_fn(|x| x.relu())
        .add(nn::linear(p / "l2", width, width, c))
        .add_fn(|x| x.relu())
        .add(nn::linear(p / "l3", width, width, c))
}

fn mlp512(p: &nn::Path) -> nn::Sequential {
    mlp_of(p, 512)
}

/// Options located at the caller: a scope that leaks on purpose (the exit rows' error path)
/// turns attribution on for its own call site only, not for every later row's scopes.
#[track_caller]
fn opts(name: &'static str) -> ScopeOptions {
    ScopeOptions::new(name).on_escape(EscapePolicy::Error)
}

/// Runs `body` in a scope of its own that must leave nothing behind.
fn scoped<T: gpu_scope::Tensors>(body: impl FnOnce() -> T) -> T {
    gpu_scope::scope(opts("bench"), body)
        .expect("nothing escapes")
        .0
}

/// Scope per forward pass against none, for each attribution mode. `on-leak` is the default of
/// release builds: a clean scope is not attributed, so it costs what `off` costs.
fn mlp() -> Vec<Row> {
    use gpu_scope::Attribution::{Always, Off, OnLeak};
    let _no_grad = tch::no_grad_guard();
    let mut rows = vec![];
    for (width, target) in [(512, 1.03), (256, 1.05)] {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = mlp_of(&vs.root(), width);
        let x = Tensor::randn([1, width], (Kind::Float, Device::Cpu));
        let modes = [
            ("default (on-leak), clean", OnLeak, Some(target)),
            ("attribution always", Always, None),
            ("sizes only", Off, (width == 512).then_some(1.01)),
        ];
        for (what, mode, target) in modes {
            gpu_scope::set_attribution(mode);
            let r = interleave(
                801,
                20,
                || drop(model.forward(&x)),
                || drop(scoped(|| model.forward(&x))),
            );
            let name = format!("MLP 3x{width} batch 1, scope per pass: {what}");
            rows.push(Row::ratio(&name, r, target));
        }
    }
    gpu_scope::set_attribution(OnLeak);
    rows
}

/// `n` threads each running `pass` `iters` times (its own model), scoped or not: seconds from
/// the first worker's start to the last one's end. The workers read the clock themselves: with
/// as many workers as cores, a main thread woken by a barrier waits for a core and would start
/// its clock late.
fn threads_time(n: usize, iters: u32, scoped_pass: bool, width: i64) -> f64 {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                tch::set_num_threads(1);
                let _no_grad = tch::no_grad_guard();
                let vs = nn::VarStore::new(Device::Cpu);
                // Width 0: a scope around one small operator instead of the model.
                let model = (width > 0).then(|| mlp_of(&vs.root(), width));
                let x = Tensor::randn([1, width.max(16)], (Kind::Float, Device::Cpu));
                barrier.wait();
                let start = Instant::now();
                for _ in 0..iters {
                    let pass = || match &model {
                        Some(model) => model.forward(&x),
                        None => x.relu(),
                    };
                    drop(if scoped_pass { scoped(pass) } else { pass() });
                }
                (start, Instant::now())
            })
        })
        .collect();
    let spans: Vec<(Instant, Instant)> = handles
        .into_iter()
        .map(|h| h.join().expect("worker"))
        .collect();
    let first = spans.iter().map(|s| s.0).min().expect("n > 0");
    let last = spans.iter().map(|s| s.1).max().expect("n > 0");
    (last - first).as_secs_f64()
}

/// Throughput of N threads, scoped against unscoped, interleaved in rounds (A B, B A, ...):
/// the ratio at N = 2 must be no worse than at N = 1 (this machine has 2 cores, so N = 4 is
/// oversubscribed and only reported).
fn threads() -> Vec<Row> {
    // Each timing runs about 50 ms per thread, ten scheduler slices and more: a slice lost by
    // one variant moves a round's ratio by a few percent, not by several times.
    let mut rows = thread_rows(256, "MLP 3x256", 2000, &[1, 2, 4]);
    rows.extend(thread_rows(0, "one-operator scope", 70_000, &[1, 2, 4]));
    rows
}

/// The one-operator rows again once some other place has leaked, as in a long-running release
/// process: whether a place is attributed is then asked at every scope, on every thread.
fn threads_after_leak() -> Vec<Row> {
    let leak = Scope::enter(opts("leak").on_escape(EscapePolicy::Ignore)).expect("cpu exists");
    let escaping = Tensor::zeros([4], (Kind::Float, Device::Cpu));
    let report = leak.exit(&()).expect("ignored");
    assert_eq!(report.escaped.len(), 1, "{report}");
    drop(escaping);
    thread_rows(
        0,
        "one-operator scope after a leak elsewhere",
        70_000,
        &[1, 2],
    )
}

fn thread_rows(width: i64, what: &str, iters: u32, ns: &[usize]) -> Vec<Row> {
    let mut rows = vec![];
    let mut at_one = 0.0;
    for &n in ns {
        let pairs: Vec<(f64, f64)> = (0..21)
            .map(|round| {
                let (a, b) = (
                    || threads_time(n, iters, false, width),
                    || threads_time(n, iters, true, width),
                );
                if round % 2 == 0 {
                    let ta = a();
                    (ta, b())
                } else {
                    let tb = b();
                    (a(), tb)
                }
            })
            .map(|(a, b)| {
                // Time per pass of the N threads together: throughput.
                let passes = f64::from(iters) * n as f64;
                (a * 1e9 / passes, b * 1e9 / passes)
            })
            .collect();
        let r = from_pairs(&pairs);
        let name = format!("{what}, {n} thread(s): unscoped vs scoped, per pass");
        let mut row = Row::ratio(&name, r, None);
        match n {
            1 => at_one = r.median,
            2 => {
                row.target = format!("≤ N=1 ({at_one:.3}) + 0.02");
                row.met = Some(r.median <= at_one + 0.02);
            }
            _ => row.target = "oversubscribed".to_owned(),
        }
        rows.push(row);
    }
    rows
}

fn empty_scope() -> Vec<Row> {
    let enter_exit = || {
        let s = Scope::enter(opts("empty")).expect("cpu exists");
        s.exit(&()).expect("nothing escapes");
    };
    let outermost = median_ns(21, 20_000, enter_exit);
    let outer = Scope::enter(opts("outer")).expect("cpu exists");
    let nested = median_ns(21, 20_000, enter_exit);
    outer.exit(&()).expect("nothing escapes");
    [
        ("outermost", outermost, (250.0, "≤ 250 ns")),
        ("nested in an open scope", nested, (100.0, "≤ 100 ns")),
    ]
    .into_iter()
    .map(|(what, ns, target)| {
        Row::figure(
            &format!("empty scope enter + exit, {what}"),
            ns,
            time(ns),
            Some(target),
        )
    })
    .collect()
}

/// Median time of `exit` with `n` tracked allocations alive, kept or (with `escape`) not.
fn exit_time(n: usize, escape: bool) -> f64 {
    let reps = (1_000_000 / n.max(1)).clamp(7, 301);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let o = opts("exit").on_escape(EscapePolicy::Ignore);
        let s = Scope::enter(o).expect("cpu exists");
        let live: Vec<Tensor> = (0..n)
            .map(|_| Tensor::empty([1], (Kind::Float, Device::Cpu)))
            .collect();
        let kept: &[Tensor] = if escape { &[] } else { &live };
        let t = Instant::now();
        let report = s.exit(kept).expect("policy is ignore");
        times.push(t.elapsed().as_nanos() as f64);
        assert_eq!(report.escaped.len(), if escape { n } else { 0 });
    }
    quantile(&times, 0.5)
}

fn exit_cost() -> Vec<Row> {
    let base = exit_time(0, false);
    let cases = [(10, false), (1_000, false), (100_000, false), (1_000, true)];
    cases
        .into_iter()
        .map(|(n, escape)| {
            let t = exit_time(n, escape);
            let per = (t - base).max(0.0) / n as f64;
            // All escaped is the error path (a report entry per allocation): shown, no target.
            let (what, target) = match escape {
                false => ("kept", Some((100.0, "≤ 100 ns/alloc"))),
                true => ("all escaped (error path)", None),
            };
            Row::figure(
                &format!("scope exit with {n} live allocations, {what}"),
                per,
                format!("{} = {per:.0} ns/alloc", time(t)),
                target,
            )
        })
        .collect()
}

/// The demo's three models saved in a temporary directory, and a switch through all three
/// (each loaded into a fresh VarStore, run on a batch of 8, dropped), scoped or not.
fn switching() -> (std::path::PathBuf, impl Fn(bool)) {
    let dir = std::env::temp_dir().join(format!("gpu-scope-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let weights = dir.clone();
    let file = move |k: models::Kind| weights.join(format!("{}.safetensors", k.name()));
    for kind in models::ALL {
        let vs = nn::VarStore::new(Device::Cpu);
        let _m = kind.build(&vs.root());
        vs.save(file(kind)).expect("weights saved");
    }
    let round = move |kind: models::Kind| {
        let mut vs = nn::VarStore::new(Device::Cpu);
        let m = kind.build(&vs.root());
        vs.load(file(kind)).expect("weights load");
        m.forward(&kind.input(8, Device::Cpu))
    };
    let all = move |scope: bool| {
        for kind in models::ALL {
            drop(if scope {
                scoped(|| round(kind))
            } else {
                round(kind)
            });
        }
    };
    (dir, all)
}

fn model_switch() -> Vec<Row> {
    let _no_grad = tch::no_grad_guard();
    let (dir, all) = switching();
    let r = interleave(21, 5, || all(false), || all(true));
    let _ = std::fs::remove_dir_all(&dir);
    vec![Row::ratio(
        "model switch (load, run batch 8, drop; 3 models): unscoped vs scoped",
        r,
        Some(1.02),
    )]
}

/// The unscoped MLP forward time of a fresh process, with or without scopes run before.
pub fn child(mode: &str) {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let _no_grad = tch::no_grad_guard();
    let vs = nn::VarStore::new(Device::Cpu);
    let model = mlp512(&vs.root());
    let x = Tensor::randn([1, 512], (Kind::Float, Device::Cpu));
    if mode == "after" {
        for _ in 0..1000 {
            drop(scoped(|| scoped(|| model.forward(&x))));
        }
    }
    println!("{}", median_ns(15, 300, || drop(model.forward(&x))));
}

/// `n` repetitions of one workload and nothing else, for instruction counts under callgrind
/// (`--repeat WHAT N [WIDTH]`, BENCHMARKS.md): the MLP pass (3x256 unless WIDTH says)
/// `unscoped` or `scoped`, or an `empty` scope, outermost or `nested` in an open one, or
/// the `exit` row at 100 000 live allocations (for `perf`).
pub fn repeat(what: &str, n: usize, width: i64) {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let _no_grad = tch::no_grad_guard();
    let vs = nn::VarStore::new(Device::Cpu);
    let model = mlp_of(&vs.root(), width);
    let x = Tensor::randn([1, width], (Kind::Float, Device::Cpu));
    let empty = || drop(Scope::enter(opts("empty")).unwrap().exit(&()).unwrap());
    // Only the switch rows build their models: the others count a heap that nothing else used.
    let switch = what.starts_with("switch-").then(switching);
    let mut f: Box<dyn FnMut()> = match (what, &switch) {
        ("unscoped", _) => Box::new(|| drop(model.forward(&x))),
        ("scoped", _) => Box::new(|| drop(scoped(|| model.forward(&x)))),
        ("empty" | "nested", _) => Box::new(empty),
        ("exit", _) => Box::new(|| {
            exit_time(100_000, false);
        }),
        ("switch-unscoped" | "switch-scoped", Some((_, all))) => {
            let scope = what == "switch-scoped";
            Box::new(move || all(scope))
        }
        _ => crate::usage(&format!("--repeat has no workload `{what}`")),
    };
    let outer = (what == "nested").then(|| Scope::enter(opts("outer")).unwrap());
    // Warm: the exit row's one run makes a million tensors.
    for _ in 0..if what == "exit" { 1 } else { 50 } {
        f();
    }
    run(n, &mut f);
    if let Some(outer) = outer {
        outer.exit(&()).unwrap();
    }
    if let Some((dir, _)) = &switch {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// What callgrind counts (`--toggle-collect=overhead::rows::run`).
#[inline(never)]
fn run(n: usize, f: &mut dyn FnMut()) {
    for _ in 0..n {
        f();
    }
}

fn outside() -> Vec<Row> {
    let exe = std::env::current_exe().expect("own path");
    let run = |mode: &str| -> f64 {
        let out = Command::new(&exe).args(["--child", mode]).output();
        let out = out.expect("child runs");
        assert!(out.status.success(), "child failed: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a time")
    };
    let pairs: Vec<(f64, f64)> = (0..16)
        .map(|i| {
            if i % 2 == 0 {
                let a = run("never");
                (a, run("after"))
            } else {
                let b = run("after");
                (run("never"), b)
            }
        })
        .collect();
    let r = from_pairs(&pairs);
    let mut row = Row::ratio(
        "MLP outside scopes: never-scoped process vs after 1000",
        r,
        None,
    );
    row.target = "1.00 within noise".to_owned();
    row.met = Some(r.q1 <= 1.0 && 1.0 <= r.q3 || (r.median - 1.0).abs() <= 0.02);
    vec![row]
}

/// The Python with torch that `setup.sh` installed, or the one `GPU_SCOPE_PYTHON` names.
fn python() -> PathBuf {
    std::env::var_os("GPU_SCOPE_PYTHON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"),
        PathBuf::from,
    )
}

fn pytorch() -> Vec<Row> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/overhead/peer.py");
    let out = Command::new(python()).arg(&script).output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        other => {
            let why = match other {
                Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
                Err(e) => e.to_string(),
            };
            let why = why.lines().last().unwrap_or("").to_owned();
            let shown = format!("skipped: {} ({why})", python().display());
            return vec![Row::figure("PyTorch peer", 0.0, shown, None)];
        }
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let n: Vec<f64> = f
                .get(1..6)?
                .iter()
                .map(|v| v.parse().ok())
                .collect::<Option<_>>()?;
            let r = crate::measure::Ratio {
                a_ns: n[0],
                b_ns: n[1],
                median: n[2],
                q1: n[3],
                q3: n[4],
            };
            Some(Row::ratio(f[0], r, None))
        })
        .collect()
}

/// On a CUDA device (skipped without one): emptyCache calls (and, on the fake device, device
/// synchronizes) per 1000 scopes of each kind, and on a real GPU the scoped overhead of a
/// 4096-wide batch-64 MLP (default release policy and `never`).
fn gpu() -> Vec<Row> {
    let info = gpu_scope::device_info();
    if info.devices == 0 {
        let why = format!("skipped: no CUDA device (backend `{}`)", info.backend);
        return vec![Row::figure("GPU rows", 0.0, why, None)];
    }
    let cuda = Device::Cuda(0);
    drop(Tensor::zeros([1], (Kind::Float, cuda)));
    let calls = gpu_scope::__introspect::empty_cache_calls;
    let mut rows = vec![];
    // The default release empties the cache after an outermost scope that allocated on the
    // device (here the only segment, freed whole each time); `never` keeps it warm.
    let never = Some(gpu_scope::ReleasePolicy::Never);
    for (what, device, nested, release) in [
        ("no device allocation", Device::Cpu, false, None),
        ("nested in one scope", cuda, true, None),
        ("outermost, allocating", cuda, false, None),
        ("outermost, allocating, never", cuda, false, never),
    ] {
        let (calls0, syncs0) = (calls(), synchronizes());
        let run = || {
            for _ in 0..1000 {
                let zeros = || drop(Tensor::zeros([1024], (Kind::Float, device)));
                gpu_scope::scope(gpu_opts(release), zeros).expect("nothing escapes");
            }
        };
        if nested {
            scoped(run);
        } else {
            run();
        }
        let n = calls() - calls0;
        let syncs = match (synchronizes(), syncs0) {
            (Some(now), Some(before)) => format!("{} synchronize", now - before),
            _ => "synchronize not counted".to_owned(),
        };
        let name = format!("GPU calls per 1000 scopes: {what}");
        rows.push(Row::figure(
            &name,
            n as f64,
            format!("{n} emptyCache, {syncs}"),
            None,
        ));
    }
    if cfg!(feature = "fake-cuda") {
        let why = "skipped: the fake device computes on the CPU (needs a real GPU)".to_owned();
        rows.push(Row::figure("MLP 3x4096 batch 64 on cuda:0", 0.0, why, None));
        return rows;
    }
    let _no_grad = tch::no_grad_guard();
    let vs = nn::VarStore::new(cuda);
    let model = mlp_of(&vs.root(), 4096);
    let x = Tensor::randn([64, 4096], (Kind::Float, cuda));
    for (what, release) in [
        ("default release", None),
        ("release = never", Some(gpu_scope::ReleasePolicy::Never)),
    ] {
        let pass = |scope: bool| {
            if scope {
                gpu_scope::scope(gpu_opts(release), || drop(model.forward(&x))).expect("clean");
            } else {
                drop(model.forward(&x));
            }
            tch::Cuda::synchronize(0);
        };
        let r = interleave(101, 10, || pass(false), || pass(true));
        let name = format!("MLP 3x4096 batch 64 on cuda:0, scope per pass, {what}");
        rows.push(Row::ratio(&name, r, None));
    }
    rows
}

/// A GPU row's scope: strict, with `release` when given (else the default).
fn gpu_opts(release: Option<gpu_scope::ReleasePolicy>) -> ScopeOptions {
    release.map_or(opts("gpu"), |r| opts("gpu").release(r))
}

/// Device and stream synchronizes so far, counted by the fake CUDA device only (a real device
/// has no such counter; gpu-scope itself calls none: only a release's `cudaFree` does).
fn synchronizes() -> Option<u64> {
    #[cfg(feature = "fake-cuda")]
    {
        extern "C" {
            fn gs_fake_cuda_synchronizations() -> u64;
        }
        // SAFETY: reads a counter.
        Some(unsafe { gs_fake_cuda_synchronizations() })
    }
    #[cfg(not(feature = "fake-cuda"))]
    None
}
