//! The gpu-scope demo: a model-switching inference run that proves memory returns to baseline,
//! then the same run with a planted leak that gpu-scope catches and names.
mod models;
mod run;

use std::io::IsTerminal;
use std::path::PathBuf;

const HELP: &str = "gpu-scope demo

USAGE: cargo run --release --example demo -- [OPTIONS]

OPTIONS:
  --device DEVICE   cpu, cuda or cuda:N (default: cuda if available, else cpu)
  --rounds N        model-switching rounds (default: 20)
  --batch N         batch size (default: 32)
  --trace FILE      write a Chrome trace-event JSON (open it in https://ui.perfetto.dev)
  -h, --help        this text";

fn parse() -> Result<run::Config, String> {
    let mut cfg = run::Config {
        device: tch::Device::cuda_if_available(),
        rounds: 20,
        batch: 32,
        trace: None,
        weights: std::env::temp_dir().join(format!("gpu-scope-demo-{}", std::process::id())),
        progress: std::io::stdout().is_terminal(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            "--device" => {
                cfg.device = match value("--device")?.as_str() {
                    "cpu" => tch::Device::Cpu,
                    "cuda" => tch::Device::Cuda(0),
                    d => match d.strip_prefix("cuda:").and_then(|i| i.parse().ok()) {
                        Some(i) => tch::Device::Cuda(i),
                        None => {
                            return Err(format!("unknown device `{d}`; use cpu, cuda or cuda:N"))
                        }
                    },
                }
            }
            "--rounds" => {
                cfg.rounds = value("--rounds")?
                    .parse()
                    .map_err(|e| format!("--rounds: {e}"))?
            }
            "--batch" => {
                cfg.batch = value("--batch")?
                    .parse()
                    .map_err(|e| format!("--batch: {e}"))?
            }
            "--trace" => cfg.trace = Some(PathBuf::from(value("--trace")?)),
            other => return Err(format!("unknown argument `{other}`; see --help")),
        }
    }
    if cfg.rounds == 0 || cfg.batch <= 0 {
        return Err("--rounds and --batch must be at least 1".to_owned());
    }
    // A missing device is one clear line here, not a libtorch dispatcher dump later.
    gpu_scope::memory_stats(cfg.device).map_err(|e| e.to_string())?;
    // A path the trace cannot be written to is one line now, not after the whole run.
    if let Some(trace) = &cfg.trace {
        let dir = trace.parent().filter(|d| !d.as_os_str().is_empty());
        let problem = match dir {
            _ if trace.is_dir() => Some("is a folder: name a file in it".to_owned()),
            Some(d) if d.exists() && !d.is_dir() => {
                Some(format!("{} is not a folder", d.display()))
            }
            Some(d) if !d.exists() => Some(format!("the folder {} does not exist", d.display())),
            _ => None,
        };
        if let Some(problem) = problem {
            return Err(format!("--trace {}: {problem}", trace.display()));
        }
    }
    cfg.progress &= cfg.rounds > 5;
    Ok(cfg)
}

fn main() {
    let cfg = parse().unwrap_or_else(|e| {
        eprintln!("error: {}", e.trim_start_matches("gpu-scope: "));
        std::process::exit(2);
    });
    let result = run::run(&cfg, &mut std::io::stdout());
    let _ = std::fs::remove_dir_all(&cfg.weights);
    match result {
        Ok(outcome) if outcome.ok => {}
        Ok(_) => std::process::exit(1),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
