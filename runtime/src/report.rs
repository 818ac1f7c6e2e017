//! The report every scope exit produces: a table for people, JSON for machines, and the
//! thread's last one.
//!
//! Byte counts are the allocator's blocks: on the CPU what was asked for, on CUDA the caching
//! allocator's rounded block (at least 512 B, a multiple of 512 B, sometimes a whole larger
//! block). `requested` fields are what the tensors asked for, where the allocator said; the
//! totals count a block whose request is unknown (the first CUDA allocation of a process) at
//! its block size.
use crate::device::DeviceId;
use serde::Serialize;
use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::panic::Location;
use std::time::Duration;

/// A scope's name as the report's text shows it: control characters (a newline, a tab), line
/// and paragraph separators and bidirectional overrides escaped, so that a name can neither
/// break nor reorder the report's lines or a log line.
pub(crate) struct Name<'a>(pub(crate) &'a str);

impl fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() || matches!(c, '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                write!(f, "{}", c.escape_default())?;
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        Ok(())
    }
}

/// A byte count that prints with a binary unit: `Bytes(1536)` prints `1.50 KiB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        // Past the unit when the value would print as 1024.00 of it (1 MiB less a byte).
        while unit + 1 < UNITS.len() && (value >= 1024.0 || unit > 0 && value >= 1023.995) {
            value /= 1024.0;
            unit += 1;
        }
        let text = if unit == 0 {
            format!("{} B", self.0)
        } else {
            format!("{value:.2} {}", UNITS[unit])
        };
        f.pad(&text)
    }
}

/// One allocation that outlived its scope without being kept.
#[derive(Clone, Debug, Serialize)]
pub struct Escape {
    /// Size of the block, as the allocator handed it out.
    pub bytes: u64,
    /// What the tensor asked for, where the allocator said (on the CPU, `bytes`).
    pub requested: Option<u64>,
    /// Where it lives.
    pub device: DeviceId,
    /// Its address (useful to match against allocator snapshots).
    pub address: usize,
    /// The outermost libtorch operator that was running when it was allocated.
    pub operator: Option<&'static str>,
    /// Shape of the tensor that the operator returned in it.
    pub shape: Option<Vec<i64>>,
    /// Element type of that tensor, by libtorch's name (`"Float"`, `"Long"` for
    /// `Kind::Int64`, `"Half"`, `"BFloat16"`, ...).
    pub dtype: Option<&'static str>,
    /// Where it was allocated, user code first, with `GPU_SCOPE_BACKTRACE=on`.
    pub backtrace: Option<String>,
}

/// Why memory that outlived a scope is not an escape. Serialised as the table's words
/// (`"gradients"`, `"cuBLAS workspace"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HeldBy {
    /// A library keeps it on purpose for the thread and stream (`"cuBLAS workspace"`,
    /// `"cuBLASLt workspace"`); libtorch frees it only when asked to
    /// (`at::cuda::clearCublasWorkspaces`, see [`clear_workspaces`](crate::clear_workspaces)).
    Workspace(&'static str),
    /// autocast's cache of lower-precision weight copies; the scope cleared the cache on exit,
    /// which freed them: shown on their own line, counted in `freed` and not in a device's
    /// `held` (memory still alive).
    AutocastCache,
    /// Gradients that autograd's backward pass stored in tensors from outside the scope (any
    /// block made during a backward pass: see the README's Limits).
    Gradient,
    /// State that an optimizer made lazily for parameters from outside the scope (made with
    /// autograd off, the size of a gradient made in the scope that outlived its backward pass,
    /// freed since or not, or of a kept optimizer's variable).
    OptimizerState,
    /// Not visible: a kept tensor has an autograd graph, made while the scope ran, whose saved
    /// tensors cannot be listed.
    AutogradGraph,
    /// Not judged: a kept value could not be inspected (a lock held elsewhere, a `RefCell`
    /// borrowed mutably, a tch type that keeps its tensors private, a `&mut` argument the
    /// returned borrow holds; named in `uninspected_kept`). An enclosing scope, if any, judges
    /// it again.
    Uninspected,
    /// Taken out of every scope for good by [`keep_forever`](crate::keep_forever) while the
    /// scope was open (alive then; its later free is not counted).
    KeptForever,
    /// Owned and judged by another scope: work carried into that scope (through its
    /// [`ScopeHandle`](crate::ScopeHandle)) on a thread where this scope was open is charged
    /// to both, as is an async scope's work where it was polled. Alive at the exit, or taken
    /// out of tracking by that scope's own end. (In such a scope, also blocks of its own that
    /// another thread freed while it was ending; elsewhere those count as freed.)
    OtherScope,
}

impl Serialize for HeldBy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for HeldBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            HeldBy::Workspace(kind) => kind,
            HeldBy::AutocastCache => "autocast cache",
            HeldBy::Gradient => "gradients",
            HeldBy::OptimizerState => "optimizer state",
            HeldBy::AutogradGraph => "autograd graph",
            HeldBy::Uninspected => "not inspected",
            HeldBy::KeptForever => "kept forever",
            HeldBy::OtherScope => "another scope",
        };
        f.pad(text)
    }
}

/// Memory that outlived the scope on purpose, grouped by what holds it and by device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Held {
    /// What holds it.
    pub by: HeldBy,
    /// Where.
    pub device: DeviceId,
    /// Total bytes.
    pub bytes: u64,
    /// Number of allocations.
    pub count: u64,
}

/// A device on which a scope could not see allocations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Untracked {
    /// The device, or `None` for every accelerator device (and the CPU too where `reason`
    /// says so).
    pub device: Option<DeviceId>,
    /// Why.
    pub reason: &'static str,
}

/// One device's part of a [`ScopeReport`]. Byte counts are blocks (see [`ScopeReport`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceReport {
    /// The device: always `Some` in a scope's report (`None` only in
    /// `DeviceReport::default()`).
    pub device: Option<DeviceId>,
    /// Allocations made on it inside the scope, nested scopes included.
    pub allocations: u64,
    /// Bytes allocated.
    pub allocated: u64,
    /// Bytes the tensors asked for (a block whose request is unknown at its block size).
    pub requested: u64,
    /// Bytes freed before the check.
    pub freed: u64,
    /// Highest live bytes (memory given to `keep_forever` alive to the scope's end).
    pub peak: u64,
    /// Bytes alive and owned by what the scope handed back.
    pub kept: u64,
    /// Bytes alive and owned by nothing kept.
    pub escaped: u64,
    /// Bytes held on purpose (see [`ScopeReport::held`]): alive at the end, but for those given
    /// to `keep_forever`, alive when given (their later free is not seen).
    pub held: u64,
    /// Bytes the caching allocator gave back to this device on exit.
    pub cache_released: u64,
}

/// What one scope did, produced on every exit. Serialised (by [`to_json`](ScopeReport::to_json)
/// or any serde serializer), it carries its status and the versions of gpu-scope, tch and
/// libtorch beside its fields.
///
/// Byte counts are the allocator's blocks: on the CPU exactly what was asked for; on CUDA the
/// caching allocator's block, rounded up to a multiple of 512 bytes (sometimes a larger block).
/// The `requested` fields say what the tensors asked for.
#[derive(Clone, Debug)]
pub struct ScopeReport {
    /// The scope's name: the `name` option, else the function's path for the attribute (a
    /// method's with its type) and `file:line` for `scope!`.
    pub name: Cow<'static, str>,
    /// Where the scope is in the source; serialised as `file:line`.
    pub location: &'static Location<'static>,
    /// Per device, for each device the scope allocated on, and each whose cache its release
    /// emptied (a row with only `cache_released`), in device order.
    pub devices: Vec<DeviceReport>,
    /// Number of allocations made inside, nested scopes included.
    pub allocations: u64,
    /// Bytes allocated inside (blocks).
    pub allocated: u64,
    /// Bytes the tensors allocated inside asked for (a block whose request is unknown, the
    /// first CUDA allocation of a process, at its block size).
    pub requested: u64,
    /// Bytes of those that were freed before the check.
    pub freed: u64,
    /// Highest live bytes of the scope's own allocations (nested scopes included); memory
    /// given to `keep_forever` counts as alive from then to the scope's end.
    pub peak: u64,
    /// Bytes still alive and owned by what the scope handed back; in a report that was not
    /// checked, every byte still alive at its end (handed to the enclosing scope unchecked).
    pub kept: u64,
    /// Bytes still alive, owned by nothing kept (blocks); what escaped from nested scopes
    /// and is still alive escaped from this one too.
    pub escaped_bytes: u64,
    /// What the escaped tensors asked for; an escape whose request is unknown
    /// (`Escape::requested` is `None`) counts its block.
    pub escaped_requested: u64,
    /// One entry per escaped allocation, largest first.
    pub escaped: Vec<Escape>,
    /// Memory still alive that is not an escape: library workspaces, autocast's cache,
    /// gradients and optimizer state of tensors from outside the scope, autograd graphs,
    /// memory given to `keep_forever`.
    pub held: Vec<Held>,
    /// Kept arguments whose type does not implement `Tensors` (seen as holding no tensors).
    pub opaque_kept: Vec<&'static str>,
    /// Kept values gpu-scope could not look into (a lock held elsewhere, a `RefCell` borrowed
    /// mutably, a tch type that keeps its tensors private, a `&mut` passed for an owned generic
    /// argument): memory nothing else keeps was counted as `not inspected`.
    pub uninspected_kept: Vec<&'static str>,
    /// Owned arguments of a `#[gpu_scope]` function whose type borrows from the caller (`ctx:
    /// Ctx<'_>`, `cells: Vec<&RefCell<T>>`, `guard: RefMut<T>`) or may (a closure, `sink: impl
    /// FnMut(Tensor)`): the body consumed them, so what it stored through a `&mut` or a cell
    /// in them could not be searched and is called escaped. A report with escapes names them
    /// in a hint.
    pub lending_args: Vec<&'static str>,
    /// Devices on which allocations could not be seen: the report is "not tracked" there
    /// rather than clean.
    pub untracked: Vec<Untracked>,
    /// Bytes the caching allocator gave back on exit, all devices.
    pub cache_released: u64,
    /// Whether `emptyCache` ran on exit.
    pub released: bool,
    /// The peak budget, if any.
    pub max_peak: Option<u64>,
    /// Whether the exit was checked (false after a panic or an early exit of the block form).
    pub checked: bool,
    /// Where scopes still open inside this one were opened, which its exit ended, unchecked,
    /// handing their allocations to it (scopes should end innermost first); serialised as
    /// `file:line` each.
    pub ended_inside: Vec<&'static Location<'static>>,
    /// Whether allocations were attributed to operators and shapes (see
    /// [`Attribution`](crate::Attribution)).
    pub attributed: bool,
    /// Whether autograd's backward pass ran inside (it allocated there): a training step. A
    /// report with escapes then says how an optimizer's state is kept.
    pub backward: bool,
    /// Whether a scope that keeps autograd on (`keep_grad`) had an escape made with autograd
    /// off, as an optimizer's step makes its state (a step after gradient accumulation whose
    /// optimizer is not kept). A report with escapes then says how an optimizer's state is
    /// kept, as after a backward pass.
    pub escaped_without_grad: bool,
    /// An async scope whose future was dropped before it finished (cancelled), checked where
    /// it was dropped, with nothing handed back: no scope it ran in was still open to judge
    /// what it left (not one dropped after a poll panicked, or while a panic unwinds).
    pub cancelled: bool,
    /// Time since the process's first scope (entered, or refused on entry) when this one
    /// started (in JSON: microseconds).
    pub started: Duration,
    /// Time from entry to the end of the check (in JSON: microseconds).
    pub elapsed: Duration,
}

/// `text` with the standard library's types in it named without their module paths:
/// `std::sync::poison::mutex::Mutex<alloc::vec::Vec<tch::Tensor>>` reads
/// `Mutex<Vec<tch::Tensor>>`. Other paths stay whole, so that another crate's `Mutex` or a
/// closure's function stays told apart (the JSON keeps every name whole).
fn short_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // Where the path segment being written began, whether it is its path's first, and whether
    // that path is the standard library's.
    let (mut word, mut first, mut standard) = (0, true, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') && out.len() > word {
            chars.next();
            if first {
                standard = matches!(&out[word..], "std" | "core" | "alloc");
                first = false;
            }
            if standard {
                out.truncate(word);
            } else {
                out.push_str("::");
                word = out.len();
            }
            continue;
        }
        out.push(c);
        if !(c.is_alphanumeric() || c == '_') {
            (word, first, standard) = (out.len(), true, false);
        }
    }
    out
}

/// `file:line`.
pub(crate) fn place(l: &Location) -> String {
    format!("{}:{}", l.file(), l.line())
}

impl ScopeReport {
    /// Whether the scope ended clean: it was checked (not left early, dropped or ended by its
    /// enclosing scope), nothing escaped, the budget held, every device's allocations could be
    /// seen, and no memory was left unjudged because a kept value could not be inspected (such
    /// values are named in `uninspected_kept` either way).
    pub fn is_clean(&self) -> bool {
        self.checked
            && !self.failed()
            && self.untracked.is_empty()
            && self.held_by(HeldBy::Uninspected) == 0
    }

    /// Whether the escape policy applies: something escaped or the budget was exceeded.
    pub fn failed(&self) -> bool {
        !self.escaped.is_empty() || self.over_budget()
    }

    /// Whether the peak went over `max_peak`.
    pub fn over_budget(&self) -> bool {
        self.max_peak.is_some_and(|b| self.peak > b)
    }

    /// Bytes held by `by`, on every device.
    pub fn held_by(&self, by: HeldBy) -> u64 {
        self.held
            .iter()
            .filter(|h| h.by == by)
            .map(|h| h.bytes)
            .sum()
    }

    /// One word for the outcome: `clean`, `escaped`, `over budget`, `escaped, over budget`,
    /// `not tracked`, `not inspected` or `not checked`.
    pub fn status(&self) -> &'static str {
        match (self.checked, self.escaped.is_empty(), self.over_budget()) {
            (false, ..) => "not checked",
            (true, false, true) => "escaped, over budget",
            (true, false, false) => "escaped",
            (true, true, true) => "over budget",
            _ if !self.untracked.is_empty() => "not tracked",
            _ if self.held_by(HeldBy::Uninspected) > 0 => "not inspected",
            _ => "clean",
        }
    }

    /// The report as JSON: its fields, its [`status`](Self::status) under `"status"`, and
    /// under `"versions"` those of gpu-scope, tch and the running libtorch
    /// ([`versions`](crate::versions())), which a bug report needs. Bytes are
    /// integers, addresses decimal integers (the table writes them in hex), places
    /// `"file:line"`, and `started` and `elapsed` whole microseconds.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report always serialises")
    }
}

/// `serialize_struct` with its fields, their number taken from the list.
macro_rules! serialize_fields {
    ($serializer:expr, $name:literal, { $($field:literal => $value:expr),* $(,)? }) => {{
        let mut s = $serializer.serialize_struct($name, [$($field),*].len())?;
        $(s.serialize_field($field, $value)?;)*
        s.end()
    }};
}

/// The status and the versions, then the fields, places as `file:line` and durations in
/// microseconds.
impl Serialize for ScopeReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        // Every field, named: a field added to the struct and not here does not compile.
        let ScopeReport {
            name,
            location,
            devices,
            allocations,
            allocated,
            requested,
            freed,
            peak,
            kept,
            escaped_bytes,
            escaped_requested,
            escaped,
            held,
            opaque_kept,
            uninspected_kept,
            lending_args,
            untracked,
            cache_released,
            released,
            max_peak,
            checked,
            ended_inside,
            attributed,
            backward,
            escaped_without_grad,
            cancelled,
            started,
            elapsed,
        } = self;
        let micros = |d: &Duration| d.as_micros() as u64;
        let ended_inside: Vec<String> = ended_inside.iter().map(|l| place(l)).collect();
        // The fields counted from the list itself: the length hint formats such as CBOR write
        // ahead of the fields cannot fall out of step with them.
        serialize_fields!(serializer, "ScopeReport", {
            "versions" => &crate::versions(),
            "status" => self.status(),
            "name" => name,
            "location" => &place(location),
            "devices" => devices,
            "allocations" => allocations,
            "allocated" => allocated,
            "requested" => requested,
            "freed" => freed,
            "peak" => peak,
            "kept" => kept,
            "escaped_bytes" => escaped_bytes,
            "escaped_requested" => escaped_requested,
            "escaped" => escaped,
            "held" => held,
            "opaque_kept" => opaque_kept,
            "uninspected_kept" => uninspected_kept,
            "lending_args" => lending_args,
            "untracked" => untracked,
            "cache_released" => cache_released,
            "released" => released,
            "max_peak" => max_peak,
            "checked" => checked,
            "ended_inside" => &ended_inside,
            "attributed" => attributed,
            "backward" => backward,
            "escaped_without_grad" => escaped_without_grad,
            "cancelled" => cancelled,
            "started" => &micros(started),
            "elapsed" => &micros(elapsed),
        })
    }
}

thread_local! {
    static LAST: RefCell<Option<ScopeReport>> = const { RefCell::new(None) };
}

/// The report of the last scope that exited on this thread (checked or not).
pub fn last_report() -> Option<ScopeReport> {
    // None while the thread ends, once the copy is gone.
    LAST.try_with(|l| l.borrow().clone()).ok().flatten()
}

pub(crate) fn set_last(report: &ScopeReport) {
    // Not during the thread's end, when the copy may be gone already.
    let _ = LAST.try_with(|l| match &mut *l.borrow_mut() {
        Some(last) => overwrite(last, report),
        empty => *empty = Some(report.clone()),
    });
}

/// `last.clone_from(report)` field by field, reusing `last`'s buffers: no allocation and no
/// move of the whole report at a clean exit. The pattern names every field, so a new field
/// does not compile until it is copied here too.
fn overwrite(last: &mut ScopeReport, report: &ScopeReport) {
    let ScopeReport {
        name,
        location,
        devices,
        allocations,
        allocated,
        requested,
        freed,
        peak,
        kept,
        escaped_bytes,
        escaped_requested,
        escaped,
        held,
        opaque_kept,
        uninspected_kept,
        lending_args,
        untracked,
        cache_released,
        released,
        max_peak,
        checked,
        ended_inside,
        attributed,
        backward,
        escaped_without_grad,
        cancelled,
        started,
        elapsed,
    } = report;
    // The usual name, a literal, is copied; an owned one reuses the last one's buffer.
    if let (Cow::Borrowed(_), Cow::Borrowed(_)) = (&last.name, name) {
        last.name = name.clone();
    } else {
        last.name.clone_from(name);
    }
    last.devices.clone_from(devices);
    // A clean scope's lists are empty, and usually were at the last exit too.
    copy_list(&mut last.escaped, escaped);
    copy_list(&mut last.held, held);
    copy_list(&mut last.opaque_kept, opaque_kept);
    copy_list(&mut last.uninspected_kept, uninspected_kept);
    copy_list(&mut last.lending_args, lending_args);
    copy_list(&mut last.untracked, untracked);
    copy_list(&mut last.ended_inside, ended_inside);
    last.location = location;
    (last.allocations, last.allocated, last.requested, last.freed) =
        (*allocations, *allocated, *requested, *freed);
    (
        last.peak,
        last.kept,
        last.escaped_bytes,
        last.escaped_requested,
    ) = (*peak, *kept, *escaped_bytes, *escaped_requested);
    (last.cache_released, last.released, last.max_peak) = (*cache_released, *released, *max_peak);
    (last.checked, last.attributed) = (*checked, *attributed);
    (last.backward, last.cancelled) = (*backward, *cancelled);
    last.escaped_without_grad = *escaped_without_grad;
    (last.started, last.elapsed) = (*started, *elapsed);
}

#[inline]
fn copy_list<T: Clone>(last: &mut Vec<T>, list: &[T]) {
    if !(last.is_empty() && list.is_empty()) {
        copy_list_slow(last, list);
    }
}

#[inline(never)]
fn copy_list_slow<T: Clone>(last: &mut Vec<T>, list: &[T]) {
    last.clear();
    // The buffer of a report with many escapes is not kept for the thread's life.
    if last.capacity() > 64 && list.len() < last.capacity() / 4 {
        last.shrink_to(list.len());
    }
    last.extend_from_slice(list);
}

fn human_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    match us {
        // A unit's bound less what rounds up to it: 999.96 µs is 1.00 ms, not 1000.0 µs.
        us if us < 999.95 => format!("{us:.1} µs"),
        us if us < 999_995.0 => format!("{:.2} ms", us / 1e3),
        us => format!("{:.2} s", us / 1e6),
    }
}

impl fmt::Display for ScopeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let devices: Vec<String> = self
            .devices
            .iter()
            .filter_map(|d| d.device.map(|d| d.to_string()))
            .collect();
        let devices = if devices.is_empty() {
            "-".to_owned()
        } else {
            devices.join(", ")
        };
        let at = self.location;
        writeln!(
            f,
            "scope `{}` at {}:{} [{devices}]",
            Name(&self.name),
            at.file(),
            at.line()
        )?;
        // Values right-aligned in one column, as wide as the longest status needs.
        let status = self.status();
        let width = status.len().max(12);
        let row = |f: &mut fmt::Formatter<'_>, label: &str, value: String| {
            writeln!(f, "  {label:<18} {value:>width$}")
        };
        row(f, "status", status.to_owned())?;
        row(f, "allocated", Bytes(self.allocated).to_string())?;
        if self.requested != self.allocated {
            row(f, "  requested", Bytes(self.requested).to_string())?;
        }
        row(f, "allocations", self.allocations.to_string())?;
        row(f, "freed", Bytes(self.freed).to_string())?;
        row(f, "peak", Bytes(self.peak).to_string())?;
        if let Some(budget) = self.max_peak {
            row(f, "budget", Bytes(budget).to_string())?;
            // Exact: the two may round to the same figure.
            if self.peak > budget {
                row(f, "  over by", Bytes(self.peak - budget).to_string())?;
            }
        }
        row(f, "kept", Bytes(self.kept).to_string())?;
        for by in self.held_kinds() {
            row(f, &by.to_string(), Bytes(self.held_by(by)).to_string())?;
        }
        row(f, "escaped", Bytes(self.escaped_bytes).to_string())?;
        if self.escaped_requested != self.escaped_bytes {
            row(f, "  requested", Bytes(self.escaped_requested).to_string())?;
        }
        row(f, "cache released", Bytes(self.cache_released).to_string())?;
        row(f, "elapsed", human_duration(self.elapsed))?;
        if self.devices.len() > 1
            || self
                .devices
                .iter()
                .any(|d| d.device.is_some_and(|d| !d.is_cpu()))
        {
            self.device_table(f)?;
        }
        let unknown = self.escaped.iter().any(|e| e.requested.is_none());
        if unknown || self.devices.iter().any(|d| d.allocated != d.requested) {
            let not_known = match unknown {
                true => "; `?`: not known yet, counted at its block",
                false => "",
            };
            writeln!(
                f,
                "  (bytes are allocator blocks; `requested` is what the tensors asked for{not_known})"
            )?;
        }
        // Without a device, the reason says which devices (every accelerator; the CPU too).
        for u in &self.untracked {
            match u.device {
                Some(device) => writeln!(f, "  not tracked on {device}: {}", u.reason)?,
                None => writeln!(f, "  not tracked: {}", u.reason)?,
            }
        }
        if !self.checked {
            writeln!(
                f,
                "  (not checked: it ended without `exit`, which is what checks it: by a panic, \
                 an early exit of the block form, a guard dropped or `abandon`ed, its future \
                 dropped before it finished, or the end of the scope around it; what it left \
                 alive went to the enclosing scope, if any, which judges it)"
            )?;
        }
        if self.cancelled {
            writeln!(
                f,
                "  note: its future was dropped before it finished (cancelled), where no scope \
                 it ran in was open: what it left alive was checked there, with nothing \
                 handed back"
            )?;
        }
        if !self.ended_inside.is_empty() {
            let places: Vec<String> = self.ended_inside.iter().map(|l| place(l)).collect();
            writeln!(
                f,
                "  note: its exit ended {} scope(s) still open inside it, unchecked, and took \
                 over their allocations (opened at {}): exit scopes innermost first",
                places.len(),
                places.join(", ")
            )?;
        }
        if self.held_by(HeldBy::Gradient) + self.held_by(HeldBy::OptimizerState) > 0 {
            writeln!(
                f,
                "  note: `gradients` and `optimizer state` are what a backward pass and an \
                 optimizer's step stored for tensors from outside the scope or for a kept \
                 optimizer: held on purpose, not escaped"
            )?;
        }
        if self.held_by(HeldBy::AutogradGraph) > 0 {
            writeln!(
                f,
                "  note: a kept tensor has an autograd graph made in this scope; its saved \
                 tensors cannot be listed, so unkept memory was counted under `autograd graph`, \
                 not as escaped (hand back `.detach()`ed tensors, such as the loss, to check it; \
                 a TorchScript method first called with autograd on makes one even in a scope: \
                 call it first under `tch::no_grad`)"
            )?;
        }
        // Memory counted as not inspected always comes with the values that made it so.
        if !self.uninspected_kept.is_empty() {
            writeln!(
                f,
                "  note: kept {} could not be looked into (a lock held elsewhere, a `RefCell` \
                 borrowed mutably as the scope ended, a tch type that keeps its tensors \
                 private, an argument the returned borrow holds, or a `&mut` passed for an \
                 owned generic argument); \
                 memory nothing else keeps was not judged (`not inspected`), not called \
                 escaped (an enclosing scope, if any, judges it); to have it judged here, hand \
                 back values gpu-scope can look into, with no lock or borrow held at the \
                 scope's end (pass a tch data iterator's tensors and build the iterator inside \
                 the scope)",
                short_paths(&self.uninspected_kept.join(", "))
            )?;
        }
        if !self.escaped.is_empty() {
            self.escape_table(f)?;
            if self.backward || self.escaped_without_grad {
                let why = if self.backward {
                    "a backward pass ran here"
                } else {
                    "what escaped was made with autograd off in a `keep_grad` scope, as an \
                     optimizer's step makes its state"
                };
                writeln!(
                    f,
                    "  hint: {why}: if what escaped is an optimizer's state \
                     (made at its first step after a backward that added into gradients made \
                     before the scope, as in gradient accumulation, or for parameters whose \
                     gradients are views of one buffer, as after `Tensor::cat` or `stack` of \
                     parameters, or a cuDNN RNN), keep the optimizer: `keep = [opt]`, or take \
                     it as an argument (a `tch::COptimizer` cannot be looked into: scope the \
                     whole step, from `zero_grad` to `step`, or take its first step before the \
                     scopes); an optimizer kept already keeps its trainable variables only: \
                     keep its `VarStore` for the buffers (`BatchNorm`'s running statistics); \
                     what a scope inside this one found escaped stays escaped here: keep the \
                     optimizer in the scope its step runs in"
                )?;
            }
            if !self.lending_args.is_empty() {
                writeln!(
                    f,
                    "  hint: owned argument(s) {} may borrow from the caller and died in the \
                     body unsearched: tensors the body stored through a `&mut` or a cell in \
                     them (a closure's captures too) are called escaped here; take such an \
                     argument by reference (`ctx: &mut Ctx`), which is searched after the body, \
                     or pass what a closure stores into as an argument of its own (`out: &mut \
                     Vec<Tensor>`)",
                    self.lending_args.join(", ")
                )?;
            }
        }
        // Also on a clean scope: what was not searched may have held tensors it should not.
        if !self.opaque_kept.is_empty() {
            writeln!(
                f,
                "  hint: kept value(s) of type {} (an argument, or an `impl Trait` return) were \
                 not searched as `gpu_scope::Tensors`, \
                 so gpu-scope saw no tensors in them; if they hold tensors: in a generic \
                 function or a trait's default method, add the bound `T: gpu_scope::Tensors` \
                 (`Self: gpu_scope::Tensors` for a receiver; the search is chosen where the \
                 function is written, so a type that derives it is not enough there); else \
                 add `#[derive(gpu_scope::Tensors)]` to the type, and to the types it is generic \
                 over (a derived `Wrap<T>` has it only where `T` has; for another crate's type, \
                 such as a channel or a closure, pass a type of yours that holds the tensors \
                 and derives it){}",
                short_paths(&self.opaque_kept.join(", ")),
                match self.opaque_kept.iter().any(|t| t.contains("dyn ")) {
                    // Deriving it on the type behind the object changes nothing.
                    true =>
                        "; a trait object (`dyn Trait`) is searched only where \
                             `gpu_scope::Tensors` is a supertrait of its trait: for another \
                             crate's trait (tch's `Module`), take `model: &M` with the bound \
                             `M: Module + gpu_scope::Tensors` instead",
                    false => "",
                }
            )?;
        }
        Ok(())
    }
}

impl ScopeReport {
    fn held_kinds(&self) -> Vec<HeldBy> {
        let mut kinds: Vec<HeldBy> = self.held.iter().map(|h| h.by).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }

    fn device_table(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  {:<10} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
            "device", "allocated", "freed", "peak", "kept", "held", "escaped", "released"
        )?;
        for d in &self.devices {
            let name = d.device.map_or("-".to_owned(), |d| d.to_string());
            writeln!(
                f,
                "  {name:<10} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
                Bytes(d.allocated),
                Bytes(d.freed),
                Bytes(d.peak),
                Bytes(d.kept),
                Bytes(d.held),
                Bytes(d.escaped),
                Bytes(d.cache_released)
            )?;
        }
        Ok(())
    }

    fn escape_table(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "  escaped allocations:")?;
        writeln!(
            f,
            "  {:>4}  {:>12}  {:>12}  {:<8}  {:<22}  tensor",
            "#", "bytes", "requested", "device", "operator"
        )?;
        for (i, e) in self.escaped.iter().enumerate() {
            let tensor = match (&e.shape, &e.dtype) {
                (Some(shape), Some(dtype)) => format!("{shape:?} {dtype}"),
                _ => format!("- (at {:#x})", e.address),
            };
            let requested = e.requested.map_or("?".to_owned(), |r| Bytes(r).to_string());
            writeln!(
                f,
                "  {:>4}  {:>12}  {requested:>12}  {:<8}  {:<22}  {tensor}",
                i + 1,
                Bytes(e.bytes),
                e.device.to_string(),
                e.operator.unwrap_or("-"),
            )?;
            if let Some(bt) = &e.backtrace {
                for line in bt.lines() {
                    writeln!(f, "        {line}")?;
                }
            }
        }
        if !self.attributed {
            let next = match crate::config::attribution() {
                crate::config::Attribution::Off => {
                    "attribution is off (GPU_SCOPE_OPERATORS=off, or `set_attribution`): \
                     =on-leak names operators and shapes from a place's second leak on, =on \
                     always"
                }
                _ => {
                    "under GPU_SCOPE_OPERATORS=on-leak the next scope here names operators \
                     and shapes; =on names them always"
                }
            };
            writeln!(f, "  (found without attribution: {next})")?;
        } else if self.escaped.iter().any(|e| e.operator.is_none()) {
            writeln!(
                f,
                "  (operator `-`: no libtorch operator was running when it was made, so none \
                 and no shape was recorded, as for a file loader's tensors (`Tensor::load`, \
                 `Tensor::load_multi`))"
            )?;
        }
        let traced = self.escaped.iter().any(|e| e.backtrace.is_some());
        writeln!(
            f,
            "  (to fix: drop it before the scope ends, hand it back (return it, `keep = [..]`, \
             `gpu_scope::keep`), or keep it for good with `gpu_scope::keep_forever`{})",
            if traced {
                ""
            } else {
                "; GPU_SCOPE_BACKTRACE=on shows where each was made"
            }
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_are_shown_without_their_module_paths() {
        let cases = [
            (
                "std::sync::poison::mutex::Mutex<alloc::vec::Vec<tch::wrappers::tensor::Tensor>>",
                "Mutex<Vec<tch::wrappers::tensor::Tensor>>",
            ),
            (
                "tokio::sync::mutex::Mutex<alloc::vec::Vec<f32>>",
                "tokio::sync::mutex::Mutex<Vec<f32>>",
            ),
            ("my::caller::f::{{closure}}", "my::caller::f::{{closure}}"),
            ("[core::option::Option<my::T>; 3]", "[Option<my::T>; 3]"),
            (
                "tch::Tensor (libtorch raised an error reading it)",
                "tch::Tensor (libtorch raised an error reading it)",
            ),
            (
                "`cache: &mut my::Cache`, (alloc::string::String, c::D)",
                "`cache: &mut my::Cache`, (String, c::D)",
            ),
            ("<T as core::ops::Deref>::Target", "<T as Deref>::Target"),
            ("dyn core::any::Any + core::marker::Send", "dyn Any + Send"),
        ];
        for (full, short) in cases {
            assert_eq!(short_paths(full), short, "{full}");
        }
    }

    fn report(name: &'static str, escapes: usize) -> ScopeReport {
        let escape = Escape {
            bytes: 64,
            requested: Some(60),
            device: DeviceId::CPU,
            address: 0x1000,
            operator: Some("aten::ones"),
            shape: Some(vec![4, 4]),
            dtype: Some("Float"),
            backtrace: None,
        };
        ScopeReport {
            name: Cow::Owned(name.to_owned()),
            location: Location::caller(),
            devices: vec![DeviceReport::default(); escapes + 1],
            allocations: escapes as u64,
            allocated: 64 * escapes as u64,
            requested: 60,
            freed: 1,
            peak: 2,
            kept: 3,
            escaped_bytes: 64 * escapes as u64,
            escaped_requested: 60 * escapes as u64,
            escaped: vec![escape; escapes],
            held: vec![],
            opaque_kept: vec!["Opaque"; escapes],
            uninspected_kept: vec![],
            lending_args: vec![],
            untracked: vec![],
            cache_released: 5,
            released: escapes > 0,
            max_peak: (escapes > 0).then_some(7),
            checked: escapes > 0,
            ended_inside: vec![],
            attributed: escapes == 0,
            backward: false,
            escaped_without_grad: false,
            cancelled: false,
            started: Duration::from_micros(escapes as u64),
            elapsed: Duration::from_micros(9),
        }
    }

    /// Each count in the largest unit it is 1 or more of, once rounded.
    #[test]
    fn byte_counts_print_in_their_unit() {
        let cases = [
            (1023, "1023 B"),
            (1536, "1.50 KiB"),
            ((1 << 20) - 1, "1.00 MiB"),
            ((1 << 20) - 6000, "1018.14 KiB"),
            ((1 << 30) - 1, "1.00 GiB"),
            (u64::MAX, "16777216.00 TiB"),
        ];
        for (bytes, text) in cases {
            assert_eq!(Bytes(bytes).to_string(), text);
        }
    }

    /// The table's values end in one column, a long status too.
    #[test]
    fn a_long_status_keeps_the_values_in_one_column() {
        let mut r = report("over", 1);
        r.peak = 8;
        assert_eq!(r.status(), "escaped, over budget");
        let text = r.to_string();
        let ends: Vec<usize> = ["status", "peak", "escaped", "elapsed"]
            .iter()
            .map(|label| {
                let line = text.lines().find(|l| l.trim_start().starts_with(label));
                line.unwrap_or_else(|| panic!("no {label} row in {text}"))
                    .chars()
                    .count()
            })
            .collect();
        assert!(ends.iter().all(|&e| e == ends[0]), "{ends:?} in\n{text}");
    }

    /// A name with a newline or a tab keeps the report's header, and an error's first line,
    /// on one line; the report itself keeps the name as given.
    #[test]
    fn control_characters_in_a_name_are_escaped_in_the_text() {
        let r = report("step\n\t2\u{202e}", 1);
        let text = r.to_string();
        assert!(
            text.starts_with("scope `step\\n\\t2\\u{202e}` at "),
            "{text}"
        );
        assert_eq!(r.name, "step\n\t2\u{202e}");
        let message = crate::Error::Escaped(Box::new(r)).to_string();
        let first = message.lines().next().unwrap();
        assert!(
            first.ends_with("escaped scope `step\\n\\t2\\u{202e}` (64 B)"),
            "{first}"
        );
    }

    /// A line on what was not seen names its device, or lets its reason say which.
    #[test]
    fn not_tracked_lines_name_a_device_or_let_the_reason_say() {
        let mut r = report("blind", 0);
        let reason = "it ran where nothing was seen, on the CPU too";
        r.untracked = vec![
            Untracked {
                device: None,
                reason,
            },
            Untracked {
                device: Some(DeviceId::CPU),
                reason,
            },
        ];
        let text = r.to_string();
        assert!(
            text.contains(&format!("\n  not tracked: {reason}\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("\n  not tracked on cpu: {reason}\n")),
            "{text}"
        );
    }

    /// A peak over the budget by less than the rounding of both says by how much.
    #[test]
    fn a_budget_exceeded_by_a_little_says_by_how_much() {
        let mut r = report("tight", 0);
        (r.peak, r.max_peak) = (1028, Some(1024));
        let text = r.to_string();
        assert!(text.contains("over by"), "{text}");
        let message = crate::Error::OverBudget(Box::new(r)).to_string();
        assert!(
            message.contains("peaked at 1.00 KiB, 4 B over its budget of 1.00 KiB"),
            "{message}"
        );
        assert!(!report("clean", 0).to_string().contains("over by"));
    }

    /// Each duration in the largest unit it is 1 or more of, once rounded.
    #[test]
    fn durations_print_in_their_unit() {
        let cases = [
            (999_940, "999.9 µs"),
            (999_960, "1.00 ms"),
            (999_994_000, "999.99 ms"),
            (999_996_000, "1.00 s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(human_duration(Duration::from_nanos(nanos)), text);
        }
    }

    /// The JSON says the report's status, as the table's first row does.
    #[test]
    fn the_json_has_the_status() {
        for (escapes, status) in [(0, "\"status\":\"clean\""), (1, "\"status\":\"escaped\"")] {
            let mut r = report("json", escapes);
            r.checked = true;
            let json = r.to_json();
            assert!(json.contains(status), "{json}");
        }
    }

    /// What holds memory is one string in the JSON, the table's words, whatever the kind.
    #[test]
    fn held_by_serialises_as_the_table_s_words() {
        let json =
            serde_json::to_string(&[HeldBy::Workspace("cuBLAS workspace"), HeldBy::Gradient])
                .unwrap();
        assert_eq!(json, r#"["cuBLAS workspace","gradients"]"#);
    }

    /// A report serialised by serde anywhere (in a list, in a struct of the user's) has the
    /// same shape as `to_json`'s: the status and the versions beside its fields.
    #[test]
    fn serde_anywhere_gives_to_json_s_shape() {
        let r = report("json", 1);
        let alone: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(alone["status"], "escaped");
        assert_eq!(alone["versions"]["gpu_scope"], env!("CARGO_PKG_VERSION"));
        assert_eq!(alone["name"], "json");
        assert_eq!(
            alone.as_object().unwrap().len(),
            30,
            "every field, the status, the versions"
        );
        let list = serde_json::to_value([&r, &r]).unwrap();
        assert_eq!(list[1], alone);
    }

    /// An escaped report says how to fix it, and how to find where each allocation was made
    /// when backtraces were not recorded; a clean one says nothing of the kind.
    #[test]
    fn an_escape_says_how_to_fix_it() {
        let text = report("leaky", 2).to_string();
        assert!(
            text.contains("(to fix: drop it before the scope ends"),
            "{text}"
        );
        assert!(text.contains("GPU_SCOPE_BACKTRACE=on"), "{text}");
        let mut traced = report("traced", 1);
        traced.escaped[0].backtrace = Some("0: main".into());
        let text = traced.to_string();
        assert!(
            text.contains("to fix:") && !text.contains("GPU_SCOPE_BACKTRACE"),
            "{text}"
        );
        assert!(!report("clean", 0).to_string().contains("to fix:"));
    }

    /// The thread's last report is overwritten in place: nothing of the one before stays.
    #[test]
    fn the_last_report_is_the_last_one_only() {
        for (name, escapes) in [("first", 3), ("second", 0), ("third", 1), ("fourth", 2)] {
            let r = report(name, escapes);
            set_last(&r);
            assert_eq!(format!("{:?}", last_report().unwrap()), format!("{r:?}"));
        }
    }

    /// The thread's copy for `last_report` does not keep the buffer of a report with many
    /// escapes once shorter reports follow.
    #[test]
    fn the_last_reports_buffer_follows_the_report() {
        let mut last = Vec::new();
        copy_list_slow(&mut last, &[7u8; 10_000]);
        copy_list_slow(&mut last, &[1, 2]);
        assert_eq!(last, [1, 2]);
        assert!(last.capacity() < 64, "{}", last.capacity());
    }
}
