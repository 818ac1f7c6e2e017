//! The gpu-scope demo: a model-switching inference run that proves memory returns to baseline,
//! then the same run with a planted leak that gpu-scope catches and names.
mod cli;
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
  -h, --help        this text

--FLAG=VALUE works too.

Exit status: 0 when memory came back to baseline and the planted leak was caught, 1 when
not, 2 for bad input or an error (such as a batch too large for the device's memory).";

fn parse() -> Result<run::Config, String> {
    let mut cfg = run::Config {
        device: tch::Device::cuda_if_available(),
        rounds: 20,
        batch: 32,
        trace: None,
        weights: std::env::temp_dir().join(format!("gpu-scope-demo-{}", std::process::id())),
        progress: std::io::stdout().is_terminal(),
    };
    let mut args = cli::split_values(std::env::args().skip(1)).into_iter();
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
            "--rounds" => cfg.rounds = cli::count("--rounds", &value("--rounds")?)?,
            "--batch" => cfg.batch = cli::count("--batch", &value("--batch")?)? as i64,
            "--trace" => cfg.trace = Some(PathBuf::from(value("--trace")?)),
            other => return Err(format!("unknown argument `{other}`; see --help")),
        }
    }
    run::check_device(cfg.device)?;
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
        // Other reasons (no permission, an empty name) show when the file is made; one made
        // here only to try is removed again (a failed run leaves no empty trace).
        let problem = problem.or_else(|| {
            let existed = trace.exists();
            let made = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(trace);
            if made.is_ok() && !existed {
                let _ = std::fs::remove_file(trace);
            }
            made.err().map(|e| format!("cannot write it ({e})"))
        });
        if let Some(problem) = problem {
            return Err(format!("--trace `{}`: {problem}", trace.display()));
        }
    }
    cfg.progress &= cfg.rounds > 5;
    Ok(cfg)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    let text = payload.downcast_ref::<String>().map(String::as_str);
    text.or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("")
}

/// Says what went wrong, as one line without gpu-scope's own prefix, and exits with 2.
fn fail(message: &str) -> ! {
    eprintln!("error: {}", message.trim_start_matches("gpu-scope: "));
    std::process::exit(2);
}

fn main() {
    let cfg = parse().unwrap_or_else(|e| fail(&e));
    // Running out of memory (a batch too large) is one line, not libtorch's dump.
    let (batch, device) = (cfg.batch, gpu_scope::DeviceId::from(cfg.device));
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        match cli::out_of_memory(panic_message(info.payload())) {
            Some(said) => eprintln!(
                "error: --batch {batch} does not fit in the memory of {device}; try a smaller \
                 --batch (libtorch: {said})"
            ),
            None => default_hook(info),
        }
    }));
    let out = &mut std::io::stdout();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run::run(&cfg, out)));
    let _ = std::fs::remove_dir_all(&cfg.weights);
    match result {
        Ok(Ok(outcome)) if outcome.ok => {}
        Ok(Ok(_)) => std::process::exit(1),
        Ok(Err(e)) => {
            // Output piped into a reader that stopped (`| head`): nothing to say to it.
            let closed = e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe);
            if closed {
                std::process::exit(2);
            }
            fail(&e.to_string())
        }
        // The hook said what it was.
        Err(_) => std::process::exit(2),
    }
}
