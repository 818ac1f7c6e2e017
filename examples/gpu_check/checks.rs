//! The checks, each on `cuda:0` (and `cuda:1` when there is one): `Ok` with the figures that
//! show it held, or `Err` saying what did not.
use crate::{measure, run};
use gpu_scope::{
    memory_stats, Attribution, Bytes, Error, EscapePolicy, HeldBy, ScopeOptions, ScopeReport,
};
use std::sync::Mutex;
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

type Check = fn(bool) -> Result<String, String>;

pub const ALL: &[(&str, Check)] = &[
    ("planted cuda:0 escape, with its block size", planted_escape),
    (
        "cuBLAS workspace held on purpose, leak beside it found",
        workspace,
    ),
    (
        "release brings reserved memory back to its baseline",
        release,
    ),
    ("50-round model switch back to baseline", model_switch),
    ("memory_stats agree with the driver", stats),
    (
        "async scopes across threads, cross-thread frees",
        async_scopes,
    ),
    ("emptyCache calls per 1000 scopes", release_calls),
    ("overhead on a 4096-wide batch-64 MLP", overhead),
];

const CUDA: Device = Device::Cuda(0);
static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

fn strict(name: &'static str) -> ScopeOptions {
    ScopeOptions::new(name).on_escape(EscapePolicy::Error)
}

fn floats(n: i64, device: Device) -> Tensor {
    Tensor::zeros([n], (Kind::Float, device))
}

fn escape_report<T>(result: Result<T, Error>) -> Result<ScopeReport, String> {
    match result {
        Err(Error::Escaped(r)) => Ok(*r),
        Err(e) => Err(format!("expected an escape, got {e}")),
        Ok(_) => Err("expected an escape, the scope was clean".to_owned()),
    }
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

/// Under the release default (attribution on leak): the first escape at a place is named by
/// its block, the next one there by operator and shape too.
fn planted_escape(_: bool) -> Result<String, String> {
    let before = gpu_scope::attribution();
    gpu_scope::set_attribution(Attribution::OnLeak);
    let reports: Result<Vec<ScopeReport>, String> = (0..2)
        .map(|_| {
            let r = escape_report(gpu_scope::scope(strict("planted"), || {
                SINK.lock().unwrap().push(floats(1000, CUDA))
            }));
            SINK.lock().unwrap().clear();
            r
        })
        .collect();
    gpu_scope::set_attribution(before);
    let reports = reports?;
    for (i, r) in reports.iter().enumerate() {
        let e = r.escaped.first().ok_or("no escape listed")?;
        ensure(r.escaped.len() == 1, || {
            format!("{} escapes: {r}", r.escaped.len())
        })?;
        ensure(e.bytes == 4096 && e.requested == Some(4000), || {
            format!(
                "block {} requested {:?}, expected 4096 and 4000: {r}",
                e.bytes, e.requested
            )
        })?;
        let shape = (i == 1).then_some(&[1000][..]);
        ensure(
            e.device.to_string() == "cuda:0" && e.shape.as_deref() == shape,
            || format!("escape {i}: device {} shape {:?}: {r}", e.device, e.shape),
        )?;
    }
    Ok(format!(
        "1 escape of {} block for {} requested on cuda:0; shape [1000] named the second time",
        Bytes(4096),
        Bytes(4000),
    ))
}

/// On a thread of its own, so that its first matrix product makes a fresh workspace.
fn workspace(_: bool) -> Result<String, String> {
    std::thread::spawn(|| {
        let a = Tensor::ones([64, 64], (Kind::Float, CUDA));
        let (_, r) = gpu_scope::scope(strict("first-matmul"), || drop(a.matmul(&a)))
            .map_err(|e| e.to_string())?;
        let workspaces: u64 = r
            .held
            .iter()
            .filter(|h| matches!(h.by, HeldBy::Workspace(_)))
            .map(|h| h.bytes)
            .sum();
        ensure(r.is_clean() && workspaces > 0, || {
            format!("no workspace line: {r}")
        })?;
        let leak = escape_report(gpu_scope::scope(strict("matmul-and-leak"), || {
            SINK.lock().unwrap().push(a.matmul(&a))
        }))?;
        SINK.lock().unwrap().clear();
        ensure(leak.escaped.len() == 1, || {
            format!("leak beside it: {leak}")
        })?;
        Ok(format!(
            "{} of workspaces held, the leak beside them found",
            Bytes(workspaces)
        ))
    })
    .join()
    .map_err(|_| "the check panicked".to_owned())?
}

fn release(_: bool) -> Result<String, String> {
    // What earlier checks left cached goes first, so that the baseline is memory in use.
    gpu_scope::empty_cache(CUDA).map_err(|e| e.to_string())?;
    let baseline = memory_stats(CUDA).map_err(|e| e.to_string())?;
    let (_, r) = gpu_scope::scope(strict("big-temporaries"), || {
        for _ in 0..4 {
            drop(floats(64 << 20, CUDA));
        }
    })
    .map_err(|e| e.to_string())?;
    let after = memory_stats(CUDA).map_err(|e| e.to_string())?;
    ensure(r.released && r.cache_released >= 256 << 20, || {
        format!("released: {r}")
    })?;
    ensure(after.reserved == baseline.reserved, || {
        format!(
            "reserved {} after, {} at baseline",
            Bytes(after.reserved),
            Bytes(baseline.reserved)
        )
    })?;
    Ok(format!(
        "{} released, reserved back to {}",
        Bytes(r.cache_released),
        Bytes(after.reserved)
    ))
}

fn model_switch(fake: bool) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("gpu-check-{}", std::process::id()));
    let cfg = run::Config {
        device: CUDA,
        rounds: if fake { 5 } else { 50 },
        batch: 64,
        trace: None,
        weights: dir.clone(),
        progress: false,
    };
    let mut out = Vec::new();
    let outcome = run::run(&cfg, &mut out).map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    let outcome = outcome?;
    let text = String::from_utf8_lossy(&out);
    ensure(outcome.ok, || {
        format!("the demo's own checks failed:\n{text}")
    })?;
    Ok(format!(
        "{} scopes, allocated back to {} after, planted leak of {} caught",
        outcome.reports.len(),
        Bytes(outcome.after_cleanup.allocated),
        Bytes(outcome.expected_leak)
    ))
}

fn stats(_: bool) -> Result<String, String> {
    let before = memory_stats(CUDA).map_err(|e| e.to_string())?;
    let (free0, total) = gpu_scope::__introspect::device_memory(0).map_err(|e| e.to_string())?;
    let t = floats(128 << 20, CUDA);
    let during = memory_stats(CUDA).map_err(|e| e.to_string())?;
    let (free1, _) = gpu_scope::__introspect::device_memory(0).map_err(|e| e.to_string())?;
    drop(t);
    let grew = during.allocated - before.allocated;
    ensure(grew == 512 << 20, || {
        format!("allocated grew by {}", Bytes(grew))
    })?;
    ensure(
        during.allocated <= during.reserved && during.peak >= during.allocated,
        || format!("{during:?}"),
    )?;
    let used = total - free1;
    ensure(during.reserved <= used && free0 >= free1, || {
        format!(
            "reserved {} but the driver says {} used",
            Bytes(during.reserved),
            Bytes(used)
        )
    })?;
    Ok(format!(
        "512 MiB tensor: allocated +{}, reserved {}, driver used {} of {}",
        Bytes(grew),
        Bytes(during.reserved),
        Bytes(used),
        Bytes(total)
    ))
}

#[gpu_scope::gpu_scope(on_escape = error)]
async fn hop(leak: bool) -> Result<Tensor, Error> {
    let mut acc = floats(256, CUDA);
    for _ in 0..10 {
        tokio::task::yield_now().await;
        acc = &acc + &floats(256, CUDA);
    }
    if leak {
        SINK.lock().unwrap().push(floats(300, CUDA));
    }
    Ok(acc)
}

fn async_scopes(_: bool) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .map_err(|e| e.to_string())?;
    let escapes = runtime.block_on(async {
        let tasks: Vec<_> = (0..8).map(|i| tokio::spawn(hop(i % 2 == 0))).collect();
        let mut escapes = Vec::new();
        for t in tasks {
            if let Err(e) = t.await.unwrap() {
                escapes.push(e.report().map(|r| r.escaped_bytes).unwrap_or(0));
            }
        }
        escapes
    });
    SINK.lock().unwrap().clear();
    ensure(escapes == [1536; 4], || {
        format!("escapes: {escapes:?}, expected 4 x 1536 B")
    })?;
    // A tensor made in a scope and dropped by a thread that is in no scope is freed, not
    // escaped (the allocator's tracker sees every free).
    let (_, r) = gpu_scope::scope(strict("dropped-elsewhere"), || {
        let t = floats(1000, CUDA);
        std::thread::spawn(move || drop(t)).join().unwrap();
    })
    .map_err(|e| e.to_string())?;
    ensure(r.is_clean() && r.freed >= 4096, || format!("{r}"))?;
    Ok(
        "4 of 8 hopping tasks leaked 1.50 KiB blocks, found exactly; a cross-thread free seen"
            .into(),
    )
}

fn release_calls(_: bool) -> Result<String, String> {
    let calls = gpu_scope::__introspect::empty_cache_calls;
    let count = |f: &mut dyn FnMut()| {
        let before = calls();
        f();
        calls() - before
    };
    let nothing = count(&mut || {
        for _ in 0..1000 {
            gpu_scope::scope(strict("cpu-only"), || drop(floats(16, Device::Cpu))).unwrap();
        }
    });
    let nested = count(&mut || {
        gpu_scope::scope(strict("outer"), || {
            for _ in 0..1000 {
                gpu_scope::scope(strict("inner"), || drop(floats(1024, CUDA))).unwrap();
            }
        })
        .unwrap();
    });
    let outermost = count(&mut || {
        for _ in 0..1000 {
            gpu_scope::scope(strict("request"), || drop(floats(1024, CUDA))).unwrap();
        }
    });
    ensure(nothing == 0 && nested <= 1, || {
        format!("{nothing} / {nested}")
    })?;
    Ok(format!(
        "per 1000 scopes: {nothing} (no device allocation), {nested} (nested in one outer \
         scope), {outermost} (outermost, each allocating)"
    ))
}

fn mlp(p: &nn::Path, width: i64) -> nn::Sequential {
    let c = Default::default();
    nn::seq()
        .add(nn::linear(p / "l1", width, width, c))
        .add_fn(|x| x.relu())
        .add(nn::linear(p / "l2", width, width, c))
        .add_fn(|x| x.relu())
        .add(nn::linear(p / "l3", width, width, c))
}

/// Scoped against unscoped forward passes, interleaved; the fake device computes on the CPU,
/// so it runs a 512-wide model there.
fn overhead(fake: bool) -> Result<String, String> {
    let _no_grad = tch::no_grad_guard();
    let width = if fake { 512 } else { 4096 };
    let vs = nn::VarStore::new(CUDA);
    let model = mlp(&vs.root(), width);
    let x = Tensor::randn([64, width], (Kind::Float, CUDA));
    let pass = |scoped: bool| {
        if scoped {
            gpu_scope::scope(strict("pass"), || drop(model.forward(&x))).unwrap();
        } else {
            drop(model.forward(&x));
        }
        tch::Cuda::synchronize(0);
    };
    let (rounds, iters) = if fake { (11, 2) } else { (101, 10) };
    let r = measure::interleave(rounds, iters, || pass(false), || pass(true));
    Ok(format!(
        "{width}-wide batch 64: unscoped {} vs scoped {} per pass, ratio {:.3} [{:.3}, {:.3}]",
        measure::time(r.a_ns),
        measure::time(r.b_ns),
        r.median,
        r.q1,
        r.q3
    ))
}
