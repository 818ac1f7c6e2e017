//! What tracking costs: scoped against unscoped code, and against PyTorch's own tools.
//!
//! `bash setup.sh && cargo bench --bench overhead` prints one table. Each comparison is a ratio
//! measured in this run with the variants interleaved; `-- --only NAME` runs the rows whose name
//! contains NAME (for profiling one of them, e.g. under callgrind).
mod measure;
#[allow(dead_code)]
#[path = "../../examples/demo/models.rs"]
mod models;
mod rows;

use measure::{time, Ratio};

/// One line of the results table: a comparison (A, B and their ratio) or a single figure.
#[derive(Debug)]
pub struct Row {
    pub name: String,
    pub a: String,
    pub b: String,
    pub result: String,
    pub target: String,
    pub met: Option<bool>,
}

impl Row {
    /// A comparison row: `b` is the variant whose cost is measured.
    pub fn ratio(name: &str, r: Ratio, target: Option<f64>) -> Row {
        Row {
            name: name.to_owned(),
            a: time(r.a_ns),
            b: time(r.b_ns),
            result: format!("{:.3} [{:.3}, {:.3}]", r.median, r.q1, r.q3),
            target: target.map_or(String::new(), |t| format!("ratio ≤ {t:.2}")),
            met: target.map(|t| r.median <= t),
        }
    }

    /// A single figure, e.g. a time, against an upper bound in the same unit.
    pub fn figure(name: &str, value: f64, shown: String, target: Option<(f64, &str)>) -> Row {
        Row {
            name: name.to_owned(),
            a: String::new(),
            b: String::new(),
            result: shown,
            target: target.map_or(String::new(), |t| t.1.to_owned()),
            met: target.map(|t| value <= t.0),
        }
    }
}

const USAGE: &str = "usage: overhead [--only NAME[,NAME..]] | --repeat WHAT N [WIDTH] | --help
  --only NAME      the rows whose benchmark name contains NAME (mlp, threads, empty scope,
                   exit cost, threads after a leak, model switch, outside, pytorch, gpu)
  --repeat WHAT N  one workload N times in one function, for callgrind: unscoped, scoped,
                   empty, nested, exit, switch-unscoped or switch-scoped; WIDTH: the MLP's";

/// Says what was wrong with the command line, and how it goes; exits with 2.
fn usage(problem: &str) -> ! {
    eprintln!("overhead: {problem}\n{USAGE}");
    std::process::exit(2)
}

/// The argument at `i`, a whole number (`what` names it in the message).
fn value<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    match args.get(i).map(|a| a.parse()) {
        Some(Ok(v)) => v,
        Some(Err(_)) => usage(&format!("{what} must be a whole number, not `{}`", args[i])),
        None => usage(&format!("{what} is missing")),
    }
}

fn main() {
    // `cargo bench` adds `--bench`, which runs the table as without it.
    let args: Vec<String> = std::env::args().filter(|a| a != "--bench").collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--child") {
        rows::child(&args[i + 1]);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--repeat") {
        let what = args
            .get(i + 1)
            .unwrap_or_else(|| usage("--repeat needs WHAT and N"));
        let n = value(&args, i + 2, "--repeat's N");
        let width = match args.get(i + 3) {
            Some(_) => value(&args, i + 3, "--repeat's WIDTH"),
            None => 256,
        };
        rows::repeat(what, n, width);
        return;
    }
    let only = match args.iter().position(|a| a == "--only") {
        Some(i) => match args.get(i + 1) {
            Some(o) => Some(o.clone()),
            None => usage("--only needs a NAME"),
        },
        None => None,
    };
    // Only `--only NAME` is left for the table: anything else (`-- mlp`) is a mistake.
    let only_value = |i: usize| args[i - 1] == "--only" && args[i] != "--only";
    if let Some(i) = (1..args.len()).find(|&i| args[i] != "--only" && !only_value(i)) {
        usage(&format!("unknown argument `{}`", args[i]));
    }
    let chosen = |name: &str| {
        only.as_ref()
            .is_none_or(|o| o.split(',').any(|o| name.contains(o)))
    };
    if !rows::ALL.iter().any(|(name, _)| chosen(name)) {
        usage(&format!(
            "no benchmark's name contains `{}`",
            only.unwrap_or_default()
        ));
    }
    // A worker thread that panics would leave the others waiting at a barrier forever.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(101);
    }));
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let mut table = vec![];
    for (name, bench) in rows::ALL {
        if !chosen(name) {
            continue;
        }
        eprintln!("running {name} ...");
        table.extend(bench());
    }
    print(&table);
    if table.iter().any(|r| r.met == Some(false)) {
        println!("\nsome targets were missed: see BENCHMARKS.md for the explanation");
    }
}

fn print(table: &[Row]) {
    println!("{}", machine());
    println!(
        "{:<62} {:>10} {:>10} {:>22}  {:<16} met",
        "benchmark (A vs B)", "A", "B", "B/A median [q1, q3]", "target"
    );
    for r in table {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "",
        };
        println!(
            "{:<62} {:>10} {:>10} {:>22}  {:<16} {met}",
            r.name, r.a, r.b, r.result, r.target
        );
    }
}

/// The CPU model, core count and libtorch build this run used.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("machine: {cpu}, {cores} cores; 1 intra-op thread\n")
}
