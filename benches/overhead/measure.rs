//! Side-by-side measurement: two variants run alternately in one process, and the statistics
//! of their per-round ratio.
use std::time::Instant;

/// Per-iteration times of two variants and the spread of their ratio `b / a` over the rounds.
#[derive(Clone, Copy, Debug)]
pub struct Ratio {
    pub a_ns: f64,
    pub b_ns: f64,
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
}

/// The `p`-quantile (0..=1) of `v`, by nearest rank.
pub fn quantile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * p).round() as usize]
}

/// Nanoseconds per iteration of `iters` calls of `f`.
pub fn time_per_iter(iters: u32, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(iters)
}

/// Median ns per call of `f` over rounds of `iters` calls, after one untimed round.
pub fn median_ns(rounds: usize, iters: u32, mut f: impl FnMut()) -> f64 {
    time_per_iter(iters, &mut f);
    let v: Vec<f64> = (0..rounds).map(|_| time_per_iter(iters, &mut f)).collect();
    quantile(&v, 0.5)
}

/// Runs `a` and `b` in `rounds` rounds of `iters` iterations each, alternating which goes
/// first (A B, B A, ...), after one untimed warm-up round of each.
/// `GPU_SCOPE_BENCH_ROUNDS` overrides `rounds` (few rounds, for a run under a profiler).
pub fn interleave(rounds: usize, iters: u32, mut a: impl FnMut(), mut b: impl FnMut()) -> Ratio {
    let rounds = std::env::var("GPU_SCOPE_BENCH_ROUNDS").map_or(rounds, |r| r.parse().unwrap());
    time_per_iter(iters, &mut a);
    time_per_iter(iters, &mut b);
    let mut pairs = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let (ta, tb) = if round % 2 == 0 {
            let ta = time_per_iter(iters, &mut a);
            (ta, time_per_iter(iters, &mut b))
        } else {
            let tb = time_per_iter(iters, &mut b);
            (time_per_iter(iters, &mut a), tb)
        };
        pairs.push((ta, tb));
    }
    from_pairs(&pairs)
}

/// Statistics of `(a, b)` timings taken in pairs.
pub fn from_pairs(pairs: &[(f64, f64)]) -> Ratio {
    let a: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    let b: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let r: Vec<f64> = pairs.iter().map(|p| p.1 / p.0).collect();
    Ratio {
        a_ns: quantile(&a, 0.5),
        b_ns: quantile(&b, 0.5),
        median: quantile(&r, 0.5),
        q1: quantile(&r, 0.25),
        q3: quantile(&r, 0.75),
    }
}

/// A duration in ns, printed with a unit that keeps it short.
pub fn time(ns: f64) -> String {
    match ns {
        n if n >= 1e6 => format!("{:.2} ms", n / 1e6),
        n if n >= 1e3 => format!("{:.2} µs", n / 1e3),
        n => format!("{n:.0} ns"),
    }
}
