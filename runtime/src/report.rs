//! The report every scope exit produces: a table for people, JSON for machines.
use crate::device::DeviceId;
use serde::Serialize;
use std::borrow::Cow;
use std::fmt;
use std::panic::Location;
use std::time::Duration;

/// One allocation that outlived its scope without being kept.
#[derive(Clone, Debug, Serialize)]
pub struct Escape {
    /// Size of the block, as the allocator handed it out.
    pub bytes: u64,
    /// Where it lives.
    pub device: DeviceId,
    /// Its address (useful to match against allocator snapshots).
    pub address: usize,
    /// The outermost libtorch operator that was running when it was allocated.
    pub operator: Option<&'static str>,
    /// Shape of the tensor that the operator returned in it.
    pub shape: Option<Vec<i64>>,
    /// Element type of that tensor.
    pub dtype: Option<&'static str>,
    /// Rust backtrace of the allocation, with `GPU_SCOPE_BACKTRACE=1`.
    pub backtrace: Option<String>,
}

/// What one scope did, produced on every exit.
#[derive(Clone, Debug, Serialize)]
pub struct ScopeReport {
    /// The scope's name (the function path for the attribute).
    pub name: Cow<'static, str>,
    /// Where the scope is in the source; serialised as `file:line`.
    #[serde(serialize_with = "file_line")]
    pub location: &'static Location<'static>,
    /// Devices that the scope allocated on.
    pub devices: Vec<DeviceId>,
    /// Number of allocations made inside, nested scopes included.
    pub allocations: u64,
    /// Bytes allocated inside.
    pub allocated: u64,
    /// Bytes of those that were freed before the check.
    pub freed: u64,
    /// Highest live bytes of the scope's own allocations.
    pub peak: u64,
    /// Bytes still alive and owned by what the scope handed back.
    pub kept: u64,
    /// Bytes still alive, owned by nothing kept.
    pub escaped_bytes: u64,
    /// One entry per escaped allocation.
    pub escaped: Vec<Escape>,
    /// Bytes not attributed because a kept tensor carries an autograd graph whose saved tensors
    /// gpu-scope cannot list; counted as kept, not as escaped.
    pub held_by_autograd: u64,
    /// Kept values whose type does not implement `Tensors` (seen as holding no tensors).
    pub opaque_kept: Vec<&'static str>,
    /// Bytes the caching allocator gave back to the device on exit.
    pub cache_released: u64,
    /// Whether `emptyCache` ran on exit.
    pub released: bool,
    /// The peak budget, if any.
    pub max_peak: Option<u64>,
    /// Whether the exit was checked (false after a panic or an early exit of the block form).
    pub checked: bool,
    /// Time since the process's first scope when this one started.
    #[serde(serialize_with = "micros")]
    pub started: Duration,
    /// Time from entry to the end of the check.
    #[serde(serialize_with = "micros")]
    pub elapsed: Duration,
}

fn file_line<S: serde::Serializer>(l: &&Location, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{}:{}", l.file(), l.line()))
}

fn micros<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_micros() as u64)
}

impl ScopeReport {
    /// Whether the scope ended clean: nothing escaped and the budget held.
    pub fn is_clean(&self) -> bool {
        self.escaped.is_empty() && !self.over_budget()
    }

    /// Whether the peak went over `max_peak`.
    pub fn over_budget(&self) -> bool {
        self.max_peak.is_some_and(|b| self.peak > b)
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report always serialises")
    }
}

/// `1536` → `1.50 KiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

fn human_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    match us {
        us if us < 1e3 => format!("{us:.1} µs"),
        us if us < 1e6 => format!("{:.2} ms", us / 1e3),
        us => format!("{:.2} s", us / 1e6),
    }
}

impl fmt::Display for ScopeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let devices: Vec<String> = self.devices.iter().map(|d| d.to_string()).collect();
        let devices = if devices.is_empty() {
            "-".to_owned()
        } else {
            devices.join(", ")
        };
        let at = self.location;
        writeln!(
            f,
            "scope `{}` at {}:{} [{devices}]",
            self.name,
            at.file(),
            at.line()
        )?;
        let row = |f: &mut fmt::Formatter<'_>, label: &str, value: String| {
            writeln!(f, "  {label:<16} {value:>12}")
        };
        row(f, "allocated", human_bytes(self.allocated))?;
        row(f, "allocations", self.allocations.to_string())?;
        row(f, "freed", human_bytes(self.freed))?;
        row(f, "peak", human_bytes(self.peak))?;
        if let Some(budget) = self.max_peak {
            row(f, "budget", human_bytes(budget))?;
        }
        row(f, "kept", human_bytes(self.kept))?;
        if self.held_by_autograd > 0 {
            row(f, "autograd graph", human_bytes(self.held_by_autograd))?;
        }
        row(f, "escaped", human_bytes(self.escaped_bytes))?;
        row(f, "cache released", human_bytes(self.cache_released))?;
        row(f, "elapsed", human_duration(self.elapsed))?;
        if !self.checked {
            writeln!(f, "  (not checked: the scope ended early)")?;
        }
        if self.held_by_autograd > 0 {
            writeln!(
                f,
                "  note: a kept tensor has an autograd graph; its saved tensors cannot be \
                 listed, so unkept memory was counted under `autograd graph`, not as escaped"
            )?;
        }
        if !self.escaped.is_empty() {
            writeln!(f, "  escaped allocations:")?;
            writeln!(
                f,
                "  {:>4}  {:>12}  {:<8}  {:<22}  tensor",
                "#", "bytes", "device", "operator"
            )?;
            for (i, e) in self.escaped.iter().enumerate() {
                let tensor = match (&e.shape, &e.dtype) {
                    (Some(shape), Some(dtype)) => format!("{shape:?} {dtype}"),
                    _ => "-".to_owned(),
                };
                let op = e.operator.unwrap_or("-");
                writeln!(
                    f,
                    "  {:>4}  {:>12}  {:<8}  {op:<22}  {tensor}",
                    i + 1,
                    human_bytes(e.bytes),
                    e.device.to_string()
                )?;
                if let Some(bt) = &e.backtrace {
                    for line in bt.lines() {
                        writeln!(f, "        {line}")?;
                    }
                }
            }
            if !self.opaque_kept.is_empty() {
                writeln!(
                    f,
                    "  hint: kept value(s) of type {} do not implement `gpu_scope::Tensors`, so \
                     gpu-scope saw no tensors in them; if they hold tensors, add \
                     `#[derive(gpu_scope::Tensors)]` to the type",
                    self.opaque_kept.join(", ")
                )?;
            }
        }
        Ok(())
    }
}
