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
    ("empty scope", empty_scope),
    ("exit cost", exit_cost),
    ("model switch", model_switch),
    ("outside", outside),
    ("pytorch", pytorch),
];

/// Three 512-wide linear layers with ReLU between them.
fn mlp512(p: &nn::Path) -> nn::Sequential {
    let c = Default::default();
    nn::seq()
        .add(nn::linear(p / "l1", 512, 512, c))
        .add_fn(|x| x.relu())
        .add(nn::linear(p / "l2", 512, 512, c))
        .add_fn(|x| x.relu())
        .add(nn::linear(p / "l3", 512, 512, c))
}

fn opts(name: &'static str) -> ScopeOptions {
    ScopeOptions::new(name).on_escape(EscapePolicy::Error)
}

/// Runs `body` in a scope of its own that must leave nothing behind.
fn scoped<T: gpu_scope::Tensors>(body: impl FnOnce() -> T) -> T {
    gpu_scope::scope(opts("bench"), body)
        .expect("nothing escapes")
        .0
}

fn mlp() -> Vec<Row> {
    let _no_grad = tch::no_grad_guard();
    let vs = nn::VarStore::new(Device::Cpu);
    let model = mlp512(&vs.root());
    let x = Tensor::randn([1, 512], (Kind::Float, Device::Cpu));
    let mut rows = vec![];
    for (what, operators) in [("full attribution", true), ("sizes only", false)] {
        gpu_scope::set_operator_attribution(operators);
        let r = interleave(
            801,
            20,
            || drop(model.forward(&x)),
            || drop(scoped(|| model.forward(&x))),
        );
        let name = format!("MLP 3x512 batch 1: unscoped vs scope per pass, {what}");
        rows.push(Row::ratio(&name, r, Some(1.03)));
    }
    gpu_scope::set_operator_attribution(true);
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
        ("outermost", outermost),
        ("nested in an open scope", nested),
    ]
    .into_iter()
    .map(|(what, ns)| {
        Row::figure(
            &format!("empty scope enter + exit, {what}"),
            ns,
            time(ns),
            Some((1000.0, "≤ 1 µs")),
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

fn model_switch() -> Vec<Row> {
    let _no_grad = tch::no_grad_guard();
    let dir = std::env::temp_dir().join(format!("gpu-scope-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = |k: models::Kind| dir.join(format!("{}.safetensors", k.name()));
    for kind in models::ALL {
        let vs = nn::VarStore::new(Device::Cpu);
        let _m = kind.build(&vs.root());
        vs.save(file(kind)).expect("weights saved");
    }
    let round = |kind: models::Kind| {
        let mut vs = nn::VarStore::new(Device::Cpu);
        let m = kind.build(&vs.root());
        vs.load(file(kind)).expect("weights load");
        m.forward(&kind.input(8, Device::Cpu))
    };
    let all = |scope: bool| {
        for kind in models::ALL {
            drop(if scope {
                scoped(|| round(kind))
            } else {
                round(kind)
            });
        }
    };
    let r = interleave(21, 5, || all(false), || all(true));
    let _ = std::fs::remove_dir_all(&dir);
    vec![Row::ratio(
        "model switch (load, run batch 8, drop; 3 models): unscoped vs scoped",
        r,
        None,
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
