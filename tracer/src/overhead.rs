//! The overhead budget of function probes (`tracer record --overhead PCT`,
//! the agent's `[trace] overhead`).
//!
//! A uprobe hit costs microseconds (a trap into the kernel and back), so
//! what function tracing costs a process is set by how often its probes
//! fire, which nobody can guess from a pattern. So:
//!
//! 1. At start, [`calibrate`] measures this machine's cost of one recorded
//!    call. What an entry probe costs depends on the probed function's first
//!    instruction: the kernel emulates `push reg` and NOPs, and
//!    single-steps anything else (a second trap, ten times the cost on
//!    x86-64 Linux 6.18). So functions of the recorder's own, one per
//!    [`EntryClass`] (written in assembly: exactly that first instruction),
//!    are each called N times without a probe and N times with the entry
//!    program attached there (doing all its work; the record is
//!    discarded), and the push one with the return program too (the
//!    return's cost does not depend on the first instruction).
//! 2. Each probe's class is read from its function's first bytes when it
//!    is resolved ([`classify`]; unknown bytes are the dearest class). The
//!    programs count each probe's recorded calls in the kernel (a
//!    per-CPU array by function id). After a first interval, [`plan`]
//!    weighs them: a probe's cost is its calls times its class's
//!    calibrated cost, plus the recorder's own CPU for each record a call
//!    writes (two with the return probe, one entry-only): the recorder's
//!    CPU time over the records of every kind it wrote in the latest
//!    interval that wrote at least 5,000, taken again at every look (the
//!    calibration discards its records, so it does not see this; on
//!    GlusterFS's brick daemons it read 0.1-2 us a record, up to half
//!    again the traps' cost, taken from the same busy cores). Not the
//!    first interval's alone: with every probe firing the recorder drains
//!    many records a wake-up, and they read cheaper than the kept probes'
//!    records cost once the hottest are gone. Its fixed work is charged to
//!    the records too, which errs on the safe side; over an interval of a
//!    few hundred records (a server still idle) it read 6-215 us and the
//!    budget kept fewer probes than fit, so such an interval does not set
//!    it. The cost measured at the end charges the records at the
//!    recorder's CPU per record over the same span.
//!    Over the traced processes' CPU time (from `/proc/PID/task/*/schedstat`)
//!    it is the slowdown of a process busy on the CPU (the probes kept are
//!    weighed against that CPU less the dropped probes', [`Interval::without`]), and of each request
//!    while it is being served (the latency figure). Processes that mostly
//!    wait (for a peer, a client, a timer, the disk) lose far less of their
//!    throughput: the estimate scales that share by their demand, the
//!    share of the interval they ran or were runnable (run-queue wait
//!    counts as demand, so a busy process on a loaded machine is not
//!    mistaken for one that waits), capped at 1, and at least the share of
//!    the host's CPUs that were busy (on a saturated host the probes' CPU
//!    is taken from work, whoever waits). That is exact for one
//!    process that runs and waits in turn, and for processes that hand
//!    work to each other in a chain (a token ring: probe time over elapsed
//!    time); for busy servers (demand at least one core) it is the CPU
//!    share as before; for servers waiting on untraced clients it errs on
//!    the safe side. MPI ranks (a probe on an `MPI_*` function) are the
//!    exception the demand cannot see: they busy-poll while they wait for
//!    each other, so they look busy, and a probe's time on one rank delays
//!    the ranks waiting for its message. They are weighed as a chain, the
//!    probes' time over the elapsed time, when that is more ([`chained`]).
//! 3. With a budget, the probes that fit are kept, the hottest (most
//!    costly) dropped first. Functions that delimit execution units (an
//!    event loop, a request handler) are called once per unit, far less than
//!    the helpers under them, so they are the last to go; the socket, file
//!    and block signals come from tracepoints and are never dropped.
//!    Without a budget nothing is dropped, and probes estimated to cost more
//!    than [`WARN_CORE_PERCENT`] of a core are warned about.
//!
//! What was dropped, the estimate, and the cost measured from the kept
//! probes' calls until the end go into the capture ([`Overhead`]) so the
//! analysis knows which functions are missing on purpose.

use std::{collections::BTreeSet, hint::black_box, path::PathBuf};

use tracer_common::capture::{DroppedProbe, EntryClass, Overhead, Probe, ProbeCosts};

use crate::loader::{LoadError, Loaded};

/// Probes estimated to cost more than this percent of one core are warned
/// about when no budget is given.
pub const WARN_CORE_PERCENT: f64 = 20.0;

/// Calls per calibration round, and rounds (the median is kept).
const CALIBRATION_CALLS: u64 = 2000;
const CALIBRATION_ROUNDS: usize = 3;

// The functions the calibration probes are attached at, one per
// [`EntryClass`], each with exactly the first instruction of its class (the
// compiler would choose a Rust function's): `x * 3` by another route each.
// Global (hidden) so that the Rust code in other codegen units links to
// them; typed and sized like compiled functions.
core::arch::global_asm!(
    ".pushsection .text.eftrace_calibration,\"ax\",@progbits",
    ".p2align 4",
    ".globl eftrace_calibration_push",
    ".hidden eftrace_calibration_push",
    ".type eftrace_calibration_push,@function",
    "eftrace_calibration_push:",
    "push rbp",
    "lea rax, [rdi + rdi * 2]",
    "pop rbp",
    "ret",
    ".size eftrace_calibration_push, . - eftrace_calibration_push",
    ".p2align 4",
    ".globl eftrace_calibration_nop",
    ".hidden eftrace_calibration_nop",
    ".type eftrace_calibration_nop,@function",
    "eftrace_calibration_nop:",
    "nop",
    "lea rax, [rdi + rdi * 2]",
    "ret",
    ".size eftrace_calibration_nop, . - eftrace_calibration_nop",
    ".p2align 4",
    ".globl eftrace_calibration_stepped",
    ".hidden eftrace_calibration_stepped",
    ".type eftrace_calibration_stepped,@function",
    "eftrace_calibration_stepped:",
    "mov rax, rdi",
    "lea rax, [rax + rax * 2]",
    "ret",
    ".size eftrace_calibration_stepped, . - eftrace_calibration_stepped",
    ".popsection",
);

unsafe extern "C" {
    fn eftrace_calibration_push(x: u64) -> u64;
    fn eftrace_calibration_nop(x: u64) -> u64;
    fn eftrace_calibration_stepped(x: u64) -> u64;
}

/// The calibration function of `class`.
fn calibration_function(class: EntryClass) -> unsafe extern "C" fn(u64) -> u64 {
    match class {
        EntryClass::Push => eftrace_calibration_push,
        EntryClass::Nop => eftrace_calibration_nop,
        EntryClass::Stepped => eftrace_calibration_stepped,
    }
}

/// Calls `f` `n` times.
fn run_calls(f: unsafe extern "C" fn(u64) -> u64, n: u64) {
    let f = black_box(f);
    let mut acc = 0u64;
    for i in 0..n {
        // SAFETY: the calibration functions above read only their argument
        // register and keep the C ABI (callee-saved registers and the stack
        // restored).
        acc ^= unsafe { f(i) };
    }
    black_box(acc);
}

/// The class of a function by its first bytes (read from the object at the
/// probe's file offset; fewer when the file ends): which of them the
/// kernel emulates when an entry probe fires there (x86-64). What is not
/// recognized is [`EntryClass::Stepped`], the dearest, so a probe is never
/// weighed cheaper than it is. Branches (`jmp`, `call`, `jcc`), emulated
/// too, are left there: functions hardly start with one.
pub fn classify(bytes: &[u8]) -> EntryClass {
    match bytes {
        // push r64; with REX.B only (41): r8-r15. The kernel takes no other
        // prefix (48 55 is stepped).
        [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..] => EntryClass::Push,
        // nop; xchg ax,ax (66 90); nopl/nopw r/m (0f 1f /0, with or without 66).
        [0x90, ..] | [0x66, 0x90, ..] => EntryClass::Nop,
        [0x0f, 0x1f, modrm, ..] | [0x66, 0x0f, 0x1f, modrm, ..] if modrm & 0x38 == 0 => {
            EntryClass::Nop
        }
        _ => EntryClass::Stepped,
    }
}

/// `endbr64`, the landing pad `-fcf-protection` builds (Ubuntu, Fedora,
/// RHEL) put first in every function that may be called indirectly. The
/// kernel single-steps it under a probe (~10 us a hit here, against ~0.8 us
/// on the `push` after it).
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Bytes of a function read to place and classify its entry probe: an
/// `endbr64` and the first instruction after it, opcode and ModRM.
pub const ENTRY_BYTES: usize = 8;

/// Where to attach the entry probe of a function whose first bytes are
/// `bytes`, as an offset from its start, and the [`classify`] class of the
/// instruction there: past an `endbr64` (4), as it changes no register,
/// flag or memory, so the entry sees the same arguments and return address
/// (and the return probe takes the same one), for a tenth of the cost;
/// otherwise at the start (0).
pub fn entry_site(bytes: &[u8]) -> (u64, EntryClass) {
    match bytes.strip_prefix(&ENDBR64[..]) {
        Some(rest) => (ENDBR64.len() as u64, classify(rest)),
        None => (0, classify(bytes)),
    }
}

/// The [`entry_site`] of each function (by file offset) in `object`, read
/// with one open file: at the start and [`EntryClass::Stepped`] for what
/// cannot be read.
pub fn entry_sites_in(object: &std::path::Path, offsets: &[u64]) -> Vec<(u64, EntryClass)> {
    use std::os::unix::fs::FileExt as _;
    let Ok(file) = std::fs::File::open(object) else {
        return vec![(0, EntryClass::Stepped); offsets.len()];
    };
    offsets
        .iter()
        .map(|&offset| {
            let mut buf = [0u8; ENTRY_BYTES];
            let mut len = 0;
            while len < buf.len() {
                match file.read_at(&mut buf[len..], offset + len as u64) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => len += n,
                }
            }
            entry_site(&buf[..len])
        })
        .collect()
}

/// This machine's cost of one recorded call, by the probed function's
/// first instruction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Costs {
    /// Entry probe by class, and the return probe.
    pub probe: ProbeCosts,
}

impl Costs {
    /// The cost of one call of `probe`: its class's entry, and the return
    /// unless it is entry-only.
    pub fn of(&self, probe: &Probe) -> f64 {
        self.probe.call_ns(probe.entry_class, probe.entry_only)
    }

    /// An entry and return probe on a single-stepped function (the dearest,
    /// and what every probe was weighed at before the classes).
    pub fn call_ns(&self) -> f64 {
        self.probe.call_ns(EntryClass::Stepped, false)
    }

    /// An entry-only probe on a single-stepped function.
    pub fn entry_ns(&self) -> f64 {
        self.probe.entry_ns(EntryClass::Stepped)
    }
}

/// Where a function of this executable is: the file and its offset there.
fn calibration_site(addr: u64) -> Result<(PathBuf, u64), LoadError> {
    let not_found = || {
        LoadError::Calibration(format!(
            "the calibration function at {addr:#x} is in no file mapping of /proc/self/maps"
        ))
    };
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| LoadError::Calibration(format!("reading /proc/self/maps: {e}")))?;
    let entry = crate::procfs::parse_maps(&maps)
        .into_iter()
        .find(|m| m.start <= addr && addr < m.end && m.path.starts_with('/'))
        .ok_or_else(not_found)?;
    Ok((
        PathBuf::from(&entry.path),
        addr - entry.start + entry.offset,
    ))
}

/// The costs measured by this process: the agent's sessions measure once.
static MEASURED: std::sync::OnceLock<Costs> = std::sync::OnceLock::new();

/// Measures [`Costs`] on this machine with `loaded`'s programs (once per
/// process).
pub fn calibrate(loaded: &mut Loaded) -> Result<Costs, LoadError> {
    if let Some(costs) = MEASURED.get() {
        return Ok(*costs);
    }
    let costs = measure(loaded)?;
    Ok(*MEASURED.get_or_init(|| costs))
}

/// The entry probe on each class's function; the return probe once, on the
/// push function (the return trampoline does not depend on the first
/// instruction, and that entry's cost is the least noisy to subtract).
fn measure(loaded: &mut Loaded) -> Result<Costs, LoadError> {
    let mut probe = ProbeCosts::default();
    for class in EntryClass::ALL {
        let f = calibration_function(class);
        let (object, offset) = calibration_site(f as *const () as u64)?;
        let mut run = |n| run_calls(f, n);
        // A first untimed pass: the page is faulted in and the branch predictors warm.
        run(CALIBRATION_CALLS);
        let with_return = class == EntryClass::Push;
        let (entry, pair) = loaded.calibrate(
            &object,
            offset,
            CALIBRATION_CALLS,
            CALIBRATION_ROUNDS,
            with_return,
            &mut run,
        )?;
        match class {
            EntryClass::Push => probe.push_entry_ns = entry,
            EntryClass::Nop => probe.nop_entry_ns = entry,
            EntryClass::Stepped => probe.stepped_entry_ns = entry,
        }
        if let Some(pair) = pair {
            probe.return_ns = (pair - entry).max(0.0);
        }
    }
    Ok(Costs { probe })
}

/// Largest model file `--like` (and the agent's budget) reads: the
/// agent's bound on what it hands its analysis process.
pub const MAX_MODEL_BYTES: u64 = 256 << 20;

/// The functions a model of normal runs was learned with (`tracer record
/// --like MODEL`): a budget drops every other probe before one of them, so
/// that the capture compares with the model (the analysis cannot judge
/// units whose learned trees call a function the capture lacks).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Keep {
    /// Functions (symbol names) in the model's call trees and process
    /// signatures.
    pub model: BTreeSet<String>,
    /// Functions the model was learned without (its `left_out`): the first
    /// to drop, as the model cannot use them anyway.
    pub left_out: BTreeSet<String>,
}

impl Keep {
    /// The functions of a model file (`analyzer model learn`'s JSON),
    /// read without the analyzer: its trees' nodes' callees (system calls
    /// aside), the frames of its process signatures, and its `left_out`.
    pub fn from_model_file(path: &std::path::Path) -> Result<Self, String> {
        // A model file is input to a root process: bounded before it is read.
        let len = std::fs::metadata(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .len();
        if len > MAX_MODEL_BYTES {
            return Err(format!(
                "{} is {len} bytes, more than the {MAX_MODEL_BYTES} a model may take",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::from_model_json(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// [`Keep::from_model_file`] of a model's text.
    pub fn from_model_json(text: &str) -> Result<Self, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let groups = v
            .get("groups")
            .and_then(|g| g.as_array())
            .ok_or("no `groups`: not a model of `analyzer model learn`")?;
        let mut keep = Keep::default();
        let frame_function = |frame: &str| {
            frame
                .split_once('@')
                .map_or(frame, |(callee, _)| callee)
                .to_string()
        };
        for g in groups {
            for path in g
                .get("signature")
                .and_then(|s| s.as_array())
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str())
            {
                keep.model.extend(
                    path.split(" > ")
                        .map(frame_function)
                        .filter(|f| !f.is_empty() && !f.starts_with("sys:")),
                );
            }
            for kind in [
                "initializer",
                "finalizer",
                "pre_process",
                "post_process",
                "handlers",
            ] {
                let trees = g.get(kind).and_then(|t| t.as_object());
                for tree in trees.into_iter().flat_map(|t| t.values()) {
                    let nodes = tree.get("nodes").and_then(|n| n.as_array());
                    for callee in nodes
                        .into_iter()
                        .flatten()
                        .filter_map(|n| n.get("callee")?.as_str())
                    {
                        if !callee.starts_with("sys:") {
                            keep.model.insert(callee.to_string());
                        }
                    }
                }
            }
        }
        keep.left_out = v
            .get("left_out")
            .and_then(|l| l.as_array())
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect();
        if keep.model.is_empty() {
            return Err("the model has no function: nothing to keep".into());
        }
        Ok(keep)
    }

    /// In which order a probe of `symbol` goes: 0 what the model was
    /// learned without, 1 what it does not have, 2 what it has.
    fn tier(&self, symbol: &str) -> u8 {
        if self.left_out.contains(symbol) {
            0
        } else if self.model.contains(symbol) {
            2
        } else {
            1
        }
    }

    /// Whether the model was learned with `symbol`.
    pub fn has(&self, symbol: &str) -> bool {
        self.tier(symbol) == 2
    }
}

/// What an interval saw.
#[derive(Clone, Copy, Debug)]
pub struct Interval {
    /// Its length, ns.
    pub ns: u64,
    /// CPU time of the traced processes over it, ns (probes included).
    pub traced_cpu_ns: u64,
    /// Time the traced processes were runnable but waited for a CPU, ns.
    pub traced_wait_ns: u64,
    /// The share of the host's CPUs that were busy over it (0 to 1; 0 when
    /// unknown).
    pub host_busy: f64,
}

impl Interval {
    /// The traced processes' demand for the CPU: the time they ran or were
    /// runnable over the interval's length, at most 1 (processes that
    /// together keep a core busy are weighed as busy ones). They ran at
    /// least the `cost_ns` of their probes, whatever the CPU meter read (a
    /// process gone before it was read). On a host whose CPUs are busy,
    /// CPU the probes take is taken from work (theirs, or what they wait
    /// for), however much they wait: the host's busy share is the least.
    pub fn demand(&self, cost_ns: f64) -> f64 {
        let ran = (self.traced_cpu_ns as f64).max(cost_ns);
        let own = (ran + self.traced_wait_ns as f64) / self.ns.max(1) as f64;
        own.max(self.host_busy).min(1.0)
    }

    /// The interval as the traced processes would have run it without
    /// `dropped_ns` of probes: their CPU time less those probes' (the work
    /// they did is the same). What the probes kept cost is weighed against
    /// that, not against CPU the dropped ones took: at GlusterFS's bricks
    /// the first look's probes took 30-50% of the bricks' CPU, and the
    /// kept ones, weighed at 4.7-5.0% against it, cost 7.5-10% at the next
    /// look, where the bricks did 1.5 times the work in 0.84 times the CPU
    /// (58 recorders: the kept probes' cost over the bricks' CPU less the
    /// dropped probes' read 8.9% in the first window, 8.5% at the next).
    ///
    /// Their demand stays what it was with the dropped probes (their time
    /// counts as runnable): a busy process fills the freed CPU with work,
    /// as the bricks did; one paced by its clients would wait instead and
    /// lose less, which is not assumed (the safe side).
    ///
    /// At most half their CPU is taken off: the dropped probes' cost is
    /// their calls times a calibrated cost, and where it reads most of the
    /// processes' CPU (a loop around one probed function; the calibration
    /// ran on a loaded host and read high) what is left is within its
    /// error, and weighed against it the kept probes would all go, which
    /// no later look could undo. The next look weighs the kept ones against
    /// what the processes use without the dropped ones (a GlusterFS brick
    /// at the first look: 28-75% of its CPU was in the dropped probes,
    /// median 46%, over half in 13 of 58).
    pub fn without(&self, dropped_ns: f64) -> Interval {
        let dropped = (dropped_ns.max(0.0) as u64).min(self.traced_cpu_ns / 2);
        Interval {
            traced_cpu_ns: self.traced_cpu_ns - dropped,
            traced_wait_ns: self.traced_wait_ns.saturating_add(dropped),
            ..*self
        }
    }
}

/// The share, percent, of `cpu_ns` of the traced processes' CPU time that
/// `cost_ns` of probes took: the time a request served on the CPU loses
/// to them. A calibration that overestimates cannot make it exceed 100.
fn share(cost_ns: f64, cpu_ns: u64) -> f64 {
    100.0 * cost_ns / (cpu_ns as f64).max(cost_ns).max(1.0)
}

/// The throughput the traced processes lose to `cost_ns` of probes over
/// `interval`, percent: their CPU share scaled by their demand (see the
/// module's documentation); for a `chain`, at least the probes' time over
/// the elapsed time.
fn slowdown(cost_ns: f64, interval: Interval, chain: bool) -> f64 {
    let own = share(cost_ns, interval.traced_cpu_ns) * interval.demand(cost_ns);
    if chain {
        own.max((100.0 * cost_ns / interval.ns.max(1) as f64).min(100.0))
    } else {
        own
    }
}

/// Whether `probes` trace the ranks of an MPI job (a probe on an `MPI_*`
/// function): ranks wait for each other inside MPI calls, busy-polling,
/// so their demand reads 100% and their CPU share understates what the
/// job loses. Measured on the wavefront (2 ranks, 16k MPI calls/s each):
/// the probes' traps alone slowed it 6.4-6.9% while they took ~3% of the
/// ranks' CPU; their time over the elapsed time was 5-7% (a pipeline
/// passes each rank's delay on to the next). Symmetric exchanges lose
/// less than that sum, so this errs on the safe side.
fn chained(probes: &[Probe]) -> bool {
    probes.iter().any(|p| p.symbol.starts_with("MPI_"))
}

/// Each probe's cost over an interval, ns: its calls times its cost.
fn costs_of(probes: &[Probe], calls: &[u64], costs: Costs) -> Vec<f64> {
    probes
        .iter()
        .enumerate()
        .map(|(i, p)| calls.get(i).copied().unwrap_or(0) as f64 * costs.of(p))
        .collect()
}

/// Weighs the `calls` each probe made over `interval` (both indexed like
/// `probes`; probes already dropped made none) and, with a `budget`
/// (percent), chooses which to drop: the costliest first, until the rest
/// fit; with `keep`, the functions its model was learned without first,
/// then those it does not have, its own last (each costliest first).
/// Returns the slowdown estimated with every probe still attached, with
/// those kept, and the indexes of those to drop, in the order dropped.
pub fn plan(
    probes: &[Probe],
    calls: &[u64],
    costs: Costs,
    interval: Interval,
    budget: Option<f64>,
    keep: Option<&Keep>,
) -> Plan {
    let cost = costs_of(probes, calls, costs);
    let total: f64 = cost.iter().sum();
    let chain = chained(probes);
    let slowdown = |cost_ns: f64| slowdown(cost_ns, interval, chain);
    // The probes kept, weighed against the processes' CPU without the
    // dropped ones' (see [`Interval::without`]).
    let kept_slowdown =
        |kept_ns: f64| self::slowdown(kept_ns, interval.without(total - kept_ns), chain);
    let mut order: Vec<usize> = (0..probes.len()).filter(|i| cost[*i] > 0.0).collect();
    // Costliest first; equal costs in probe order, so a plan is repeatable.
    let tier = |i: usize| keep.map_or(0, |k| k.tier(&probes[i].symbol));
    order.sort_by(|a, b| {
        tier(*a)
            .cmp(&tier(*b))
            .then(cost[*b].total_cmp(&cost[*a]))
            .then(a.cmp(b))
    });
    let mut kept = total;
    let mut drop = Vec::new();
    if let Some(budget) = budget {
        for i in order {
            if kept_slowdown(kept) <= budget {
                break;
            }
            kept -= cost[i];
            drop.push(i);
        }
    }
    let secs = (interval.ns as f64 / 1e9).max(1e-9);
    Plan {
        core_percent: 100.0 * total / interval.ns.max(1) as f64,
        traced_cpu_percent: 100.0 * interval.traced_cpu_ns as f64 / interval.ns.max(1) as f64,
        demand_percent: 100.0 * interval.demand(total),
        latency_percent: share(total, interval.traced_cpu_ns),
        estimated_percent: slowdown(total),
        kept_percent: kept_slowdown(kept.max(0.0)),
        dropped: drop
            .iter()
            .map(|&i| DroppedProbe {
                func_id: probes[i].func_id,
                symbol: probes[i].symbol.clone(),
                object: probes[i].object.clone(),
                calls_per_s: calls.get(i).copied().unwrap_or(0) as f64 / secs,
                percent: slowdown(cost[i]),
                entry_class: probes[i].entry_class,
                at_ns: 0,
            })
            .collect(),
        drop,
    }
}

/// What the traced processes did over a window, for the in-place cost of
/// the traps: their CPU time and the bytes their sockets moved (the work
/// done, whatever the probes cost).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    /// The window's length, ns.
    pub ns: u64,
    /// CPU time, ns.
    pub cpu_ns: u64,
    /// Bytes read and written on their sockets.
    pub bytes: u64,
}

/// The fewest socket bytes each side of a decision must have moved for
/// their CPU per byte to be compared (the first window is 250 ms; a brick
/// serving a copy moves tens of MB in it).
pub const IN_SITU_MIN_BYTES: u64 = 1 << 20;

/// The least share of the traced processes' CPU before a decision the
/// dropped probes must have cost at the calibrated figures: below it, the
/// change of CPU per byte is the work's own spread (phases of reads and
/// writes), not the probes'.
pub const IN_SITU_MIN_SHARE: f64 = 0.1;

/// The least CPU the traced processes must have used on each side of a
/// decision, as a share of the window: a nearly idle process's CPU per
/// byte is its fixed work's (timers, polls), not its bytes' (MooseFS's
/// chunkservers at 1-2% of a core read 3-5x where the cost was 12% of
/// their CPU, and 1.0x as often).
pub const IN_SITU_MIN_BUSY: f64 = 0.05;

/// The largest multiple of the calibrated trap costs taken from one
/// decision (stop 40 read ~4 on GlusterFS's bricks); more is read as the
/// work changing under the decision.
pub const IN_SITU_MAX: f64 = 5.0;

/// What a trap cost the traced processes in place, as a multiple of its
/// calibrated cost, from one decision: `before` (every probe then
/// attached) and `after` (the probes kept) are the windows on either side,
/// and `dropped_trap_ns` what the dropped probes' calls in `before` cost at
/// the calibrated figures (traps only: the records cost the recorder, not
/// the traced processes). The CPU per byte fell by what the dropped probes
/// cost a byte in place; over `before`'s bytes that is their cost then.
///
/// `None` when it cannot be told: either side moved fewer than
/// [`IN_SITU_MIN_BYTES`] or used less CPU than [`IN_SITU_MIN_BUSY`] of
/// its length, or the dropped probes cost less than
/// [`IN_SITU_MIN_SHARE`] of `before`'s CPU. At least 1 (a fall smaller
/// than the calibration says is the work's spread; a trap is never cheaper
/// in place than in a hot loop), at most [`IN_SITU_MAX`].
pub fn in_situ_factor(before: Work, after: Work, dropped_trap_ns: f64) -> Option<f64> {
    let busy = |w: Work| w.cpu_ns as f64 >= IN_SITU_MIN_BUSY * w.ns as f64;
    if before.bytes < IN_SITU_MIN_BYTES
        || after.bytes < IN_SITU_MIN_BYTES
        || before.cpu_ns == 0
        || !busy(before)
        || !busy(after)
        || dropped_trap_ns < IN_SITU_MIN_SHARE * before.cpu_ns as f64
    {
        return None;
    }
    let per_byte = |w: Work| w.cpu_ns as f64 / w.bytes as f64;
    let saved_ns = (per_byte(before) - per_byte(after)) * before.bytes as f64;
    Some((saved_ns / dropped_trap_ns).clamp(1.0, IN_SITU_MAX))
}

/// The calibrated traps of `calls` of each probe (indexed like `probes`)
/// whose index is in `which`, ns: what [`in_situ_factor`] compares against.
pub fn trap_ns_of(probes: &[Probe], calls: &[u64], which: &[usize], costs: Costs) -> f64 {
    which
        .iter()
        .filter_map(|&i| Some((probes.get(i)?, calls.get(i).copied().unwrap_or(0))))
        .map(|(p, n)| n as f64 * costs.probe.trap_ns(p.entry_class, p.entry_only))
        .sum()
}

/// What [`plan`] decided.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The probes' CPU over the interval, percent of one core.
    pub core_percent: f64,
    /// The traced processes' CPU, percent of one core.
    pub traced_cpu_percent: f64,
    /// Their demand for the CPU, percent ([`Interval::demand`]).
    pub demand_percent: f64,
    /// The probes' share of the traced processes' CPU: what a request
    /// served on the CPU loses, percent.
    pub latency_percent: f64,
    /// Slowdown (throughput) with every probe that made calls.
    pub estimated_percent: f64,
    /// Slowdown with the probes kept.
    pub kept_percent: f64,
    /// Indexes of the probes to drop.
    pub drop: Vec<usize>,
    /// The same, for the capture.
    pub dropped: Vec<DroppedProbe>,
}

/// The capture's first item: the costs and the first interval's plan.
pub fn first_item(costs: Costs, interval: Interval, budget: Option<f64>, plan: &Plan) -> Overhead {
    Overhead {
        budget_percent: budget,
        call_cost_ns: costs.call_ns(),
        entry_cost_ns: costs.entry_ns(),
        probe_costs: Some(costs.probe),
        decided_ns: 0,
        interval_ms: interval.ns / 1_000_000,
        traced_cpu_percent: plan.traced_cpu_percent,
        demand_percent: Some(plan.demand_percent),
        latency_percent: Some(plan.latency_percent),
        probes_core_percent: plan.core_percent,
        estimated_percent: plan.estimated_percent,
        kept_percent: plan.kept_percent,
        measured_percent: None,
        measured_ms: 0,
        measured_record_ns: None,
        kernel_ms_per_s: None,
        dropped: plan.dropped.clone(),
    }
}

/// The slowdown, percent, measured from `calls` of the probes (indexed like
/// `probes`) over `interval`; `None` when the traced processes used no CPU
/// to weigh it against.
pub fn measured(probes: &[Probe], calls: &[u64], costs: Costs, interval: Interval) -> Option<f64> {
    if interval.traced_cpu_ns == 0 {
        return None;
    }
    let cost: f64 = costs_of(probes, calls, costs).iter().sum();
    Some(slowdown(cost, interval, chained(probes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(id: u32, name: &str) -> Probe {
        Probe {
            func_id: id,
            symbol: name.into(),
            object: "/bin/x".into(),
            ..Probe::default()
        }
    }

    /// A stepped probe (the test probes' class) costs 10 us with its return,
    /// 5 us entry only; a push-first one a tenth of that.
    const COSTS: Costs = Costs {
        probe: ProbeCosts {
            push_entry_ns: 500.0,
            nop_entry_ns: 400.0,
            stepped_entry_ns: 5_000.0,
            return_ns: 5_000.0,
            record_ns: 0.0,
            in_situ: 0.0,
        },
    };

    const SECOND: Interval = Interval {
        ns: 1_000_000_000,
        traced_cpu_ns: 1_000_000_000,
        traced_wait_ns: 0,
        host_busy: 0.0,
    };

    #[test]
    fn the_in_place_cost_is_the_fall_of_cpu_per_byte_over_the_calibrated() {
        let mib = 1u64 << 20;
        // 100 MiB in 1 s of CPU with every probe; 0.6 s per 100 MiB without
        // those dropped, which the calibration put at 0.1 s: 4x in place.
        let second = 1_000_000_000;
        let before = Work {
            ns: second,
            cpu_ns: 1_000_000_000,
            bytes: 100 * mib,
        };
        let after = Work {
            ns: second,
            cpu_ns: 900_000_000,
            bytes: 150 * mib,
        };
        let f = in_situ_factor(before, after, 100_000_000.0).expect("told");
        assert!((f - 4.0).abs() < 1e-9, "{f}");
        let tenth = in_situ_factor(before, after, 100_000_000.0 / 3.0);
        assert_eq!(tenth, None, "under a tenth of the CPU: not told");
        let f = in_situ_factor(before, after, 150_000_000.0).expect("told");
        assert!((f - 400.0 / 150.0).abs() < 1e-9, "{f}");
        let f = in_situ_factor(before, after, 200_000_000.0).expect("told");
        assert!((f - 2.0).abs() < 1e-9, "{f}");
        // The CPU per byte rose (the work changed): never below calibrated.
        let dearer = Work {
            cpu_ns: 1_200_000_000,
            ..before
        };
        assert_eq!(in_situ_factor(before, dearer, 200_000_000.0), Some(1.0));
        // Too few bytes on either side, or none before: not told.
        let few = Work {
            bytes: mib / 2,
            ..before
        };
        assert_eq!(in_situ_factor(few, after, 200_000_000.0), None);
        assert_eq!(in_situ_factor(before, few, 200_000_000.0), None);
        // A side nearly idle (2% of its window on the CPU): its CPU per
        // byte is its fixed work's.
        let idle = Work {
            cpu_ns: 20_000_000,
            ..after
        };
        assert_eq!(in_situ_factor(before, idle, 200_000_000.0), None);
        let idle_before = Work {
            cpu_ns: 20_000_000,
            ..before
        };
        assert_eq!(in_situ_factor(idle_before, after, 10_000_000.0), None);
        assert_eq!(in_situ_factor(Work::default(), after, 1.0), None);
        // Capped: more is the work changing under the decision (and a
        // crafted fall cannot run away).
        let cheap = Work {
            cpu_ns: 100_000_000,
            ..before
        };
        assert_eq!(
            in_situ_factor(before, cheap, 100_000_000.0),
            Some(IN_SITU_MAX)
        );
    }

    #[test]
    fn an_in_place_factor_weighs_the_traps_not_the_records() {
        let probes = [probe(0, "hot"), probe(1, "warm")];
        let calls = [1_000, 100];
        // The calibrated traps of the hot probe alone: 1000 x 10 us.
        let traps = trap_ns_of(&probes, &calls, &[0, 7], COSTS);
        assert!((traps - 10_000_000.0).abs() < 1e-6, "{traps}");
        let mut costs = COSTS;
        costs.probe.record_ns = 1_000.0;
        costs.probe.in_situ = 2.0;
        // 2 x 10 us of traps and 2 x 1 us of records a call.
        assert!((costs.of(&probes[0]) - 22_000.0).abs() < 1e-6);
        // At twice the cost the warm one no longer fits where it did.
        let interval = Interval {
            traced_cpu_ns: 100_000_000,
            traced_wait_ns: 900_000_000,
            ..SECOND
        };
        let calibrated = plan(&probes, &calls, COSTS, interval, Some(1.5), None);
        assert_eq!(calibrated.drop, [0], "{calibrated:?}");
        let in_place = plan(&probes, &calls, costs, interval, Some(1.5), None);
        assert_eq!(in_place.drop, [0, 1], "{in_place:?}");
    }

    #[test]
    fn drops_the_costliest_until_the_rest_fits() {
        let probes = [probe(0, "loop"), probe(1, "hot"), probe(2, "warm")];
        // 1 s of one core: 0.1 s in hot, 0.01 s in warm, 0.1 ms in loop.
        let calls = [10, 10_000, 1_000];
        let plan5 = plan(&probes, &calls, COSTS, SECOND, Some(5.0), None);
        assert_eq!(plan5.drop, [1]);
        assert_eq!(plan5.dropped[0].symbol, "hot");
        assert!((plan5.estimated_percent - 11.01).abs() < 1e-6);
        // The rest over the CPU without the hot one's 0.1 s.
        assert!((plan5.kept_percent - 1.01 / 0.9).abs() < 1e-6);
        // A tighter budget takes the warm one too, never the loop that fits.
        assert_eq!(
            plan(&probes, &calls, COSTS, SECOND, Some(0.5), None).drop,
            [1, 2]
        );
        // A loose one drops nothing.
        assert!(
            plan(&probes, &calls, COSTS, SECOND, Some(20.0), None)
                .drop
                .is_empty()
        );
    }

    #[test]
    fn without_a_budget_nothing_is_dropped_but_the_cost_is_told() {
        // Busy all along: 0.6 s on the CPU, 0.4 s waiting for one.
        let interval = Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 600_000_000,
            traced_wait_ns: 400_000_000,
            host_busy: 0.0,
        };
        let p = plan(&[probe(0, "hot")], &[30_000], COSTS, interval, None, None);
        assert!(p.drop.is_empty());
        assert!((p.core_percent - 30.0).abs() < 1e-9);
        assert!((p.demand_percent - 100.0).abs() < 1e-9);
        assert!((p.estimated_percent - 50.0).abs() < 1e-9);
        assert!((p.latency_percent - 50.0).abs() < 1e-9);
    }

    /// A token ring's daemons mostly wait for each other: probes costing
    /// half their CPU cost them 5% of the elapsed time, which is what the
    /// ring's throughput loses; each message's handling still takes twice
    /// as long (the latency figure). A tight budget still drops them.
    #[test]
    fn processes_that_mostly_wait_lose_their_demand_share() {
        let ring = Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 100_000_000,
            traced_wait_ns: 0,
            host_busy: 0.0,
        };
        let p = plan(
            &[probe(0, "handle")],
            &[5_000],
            COSTS,
            ring,
            Some(10.0),
            None,
        );
        assert!(p.drop.is_empty(), "{p:?}");
        assert!((p.demand_percent - 10.0).abs() < 1e-9);
        assert!((p.estimated_percent - 5.0).abs() < 1e-9);
        assert!((p.latency_percent - 50.0).abs() < 1e-9);
        assert_eq!(
            plan(
                &[probe(0, "handle")],
                &[5_000],
                COSTS,
                ring,
                Some(2.0),
                None
            )
            .drop,
            [0]
        );
    }

    /// Two MPI ranks busy-poll both cores while they wait for each other
    /// (the wavefront): their demand reads 100% and the probes take 3.5% of
    /// their CPU, but the job loses the probes' time over the elapsed time,
    /// 6%. The same numbers for daemons without MPI probes stay 3.5%.
    #[test]
    fn mpi_ranks_are_weighed_as_a_chain() {
        let ranks = Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 1_700_000_000,
            traced_wait_ns: 0,
            host_busy: 1.0,
        };
        // 60 ms of probes: 6,000 calls at 10 us (stepped entry and return).
        let mpi = [probe(0, "MPI_Send"), probe(1, "MPI_Recv")];
        let p = plan(&mpi, &[3_000, 3_000], COSTS, ranks, Some(5.0), None);
        assert!((p.estimated_percent - 6.0).abs() < 1e-9, "{p:?}");
        assert_eq!(p.drop.len(), 1, "{p:?}");
        assert!((p.kept_percent - 3.0).abs() < 1e-9, "{p:?}");
        assert_eq!(measured(&mpi, &[3_000, 3_000], COSTS, ranks), Some(6.0));
        let daemons = [probe(0, "handle"), probe(1, "reply")];
        let p = plan(&daemons, &[3_000, 3_000], COSTS, ranks, Some(5.0), None);
        assert!(
            (p.estimated_percent - 100.0 * 0.06 / 1.7).abs() < 1e-9,
            "{p:?}"
        );
        assert!(p.drop.is_empty(), "{p:?}");
    }

    /// One GlusterFS brick daemon of four under a 5% budget (stop 36): a
    /// quarter of a core of its own, the host 90% busy, 3,400 calls/s
    /// left on push-first functions (1.2 us entry, 2.0 us return). Their
    /// traps alone take 4.4% of its CPU: 3.9% slowdown, within the budget;
    /// but the recorder decoded and wrote their 6,800 records/s for
    /// 0.9 us each (its CPU rose 6 ms/s with them), taken from the same
    /// two busy cores: 5.0 us a call, 6.1%, over. Charged, the hottest goes.
    #[test]
    fn the_recorders_cpu_per_record_is_charged_to_each_call() {
        let brick = Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 250_000_000,
            traced_wait_ns: 0,
            host_busy: 0.9,
        };
        let traps = Costs {
            probe: ProbeCosts {
                push_entry_ns: 1_200.0,
                nop_entry_ns: 1_200.0,
                stepped_entry_ns: 12_000.0,
                return_ns: 2_000.0,
                record_ns: 0.0,
                in_situ: 0.0,
            },
        };
        let mut probes = [probe(0, "dict_getn"), probe(1, "inode_ref")];
        for p in &mut probes {
            p.entry_class = EntryClass::Push;
        }
        let calls = [2_400, 1_000];
        let p = plan(&probes, &calls, traps, brick, Some(5.0), None);
        assert!(p.drop.is_empty(), "{p:?}");
        assert!((p.estimated_percent - 3.9168).abs() < 1e-3, "{p:?}");
        let mut charged = traps;
        charged.probe.record_ns = 900.0;
        let p = plan(&probes, &calls, charged, brick, Some(5.0), None);
        assert!((p.estimated_percent - 6.12).abs() < 1e-3, "{p:?}");
        assert_eq!(p.drop, [0], "{p:?}");
        assert!(p.kept_percent <= 5.0, "{p:?}");
        // An entry-only probe writes one record a call.
        let mut marker = probe(2, "marker");
        marker.entry_class = EntryClass::Push;
        marker.entry_only = true;
        assert_eq!(charged.of(&marker), 2_100.0);
        assert_eq!(charged.of(&probes[0]), 5_000.0);
    }

    /// A GlusterFS brick at the first look (stop 37's logs): its probes
    /// take a third of its CPU. Dropping the hot one frees that CPU, and
    /// the brick does more work with what it has: the kept probes are
    /// weighed against the CPU it needs without the dropped ones, which is
    /// what the next look measures, more work or not. Weighed against the
    /// CPU that included the dropped probe, the two warm ones read 5.0%
    /// (fits) and cost 7.5% at the next look.
    #[test]
    fn the_kept_probes_are_weighed_against_the_cpu_without_the_dropped_ones() {
        let brick = Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 300_000_000,
            traced_wait_ns: 0,
            host_busy: 1.0,
        };
        let probes = [probe(0, "hot"), probe(1, "warm"), probe(2, "mild")];
        // 100 ms, 8 ms and 7 ms of probes at 10 us a call.
        let calls = [10_000, 800, 700];
        let p = plan(&probes, &calls, COSTS, brick, Some(5.0), None);
        assert_eq!(p.drop, [0, 1], "{p:?}");
        assert!((p.kept_percent - 100.0 * 7.0 / 192.0).abs() < 1e-9, "{p:?}");
        // The next look: the dropped probes' CPU gone; the same work, then
        // half again as much.
        for more in [1.0, 1.5] {
            let next = Interval {
                traced_cpu_ns: (192_000_000.0 * more) as u64,
                ..brick
            };
            let kept_calls = [0, 0, (700.0 * more) as u64];
            let at_next = measured(&probes, &kept_calls, COSTS, next).expect("the brick used CPU");
            assert!((at_next - p.kept_percent).abs() < 1e-6, "{at_next} {p:?}");
            assert!(at_next <= 5.0, "{at_next}");
        }
    }

    /// The same ring on a host whose CPUs are all busy: the probes' CPU is
    /// taken from work, so it is weighed as the CPU share.
    #[test]
    fn on_a_saturated_host_waiting_processes_are_weighed_as_busy() {
        let ring = Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 100_000_000,
            traced_wait_ns: 0,
            host_busy: 1.0,
        };
        let p = plan(
            &[probe(0, "handle")],
            &[5_000],
            COSTS,
            ring,
            Some(10.0),
            None,
        );
        assert!((p.estimated_percent - 50.0).abs() < 1e-9);
        assert_eq!(p.drop, [0]);
    }

    /// On a loaded machine a busy process waits for a CPU, not for work:
    /// run-queue wait is demand, so it is weighed as the busy process it is.
    #[test]
    fn a_busy_process_waiting_for_a_cpu_is_weighed_as_busy() {
        let starved = Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 200_000_000,
            traced_wait_ns: 800_000_000,
            host_busy: 0.0,
        };
        let p = plan(
            &[probe(0, "hot")],
            &[10_000],
            COSTS,
            starved,
            Some(5.0),
            None,
        );
        assert!((p.estimated_percent - 50.0).abs() < 1e-9);
        assert_eq!(p.drop, [0]);
    }

    #[test]
    fn entry_only_probes_cost_their_own_calibration() {
        let mut marker = probe(0, "marker");
        marker.entry_only = true;
        let p = plan(&[marker], &[20_000], COSTS, SECOND, None, None);
        assert!((p.core_percent - 10.0).abs() < 1e-9);
    }

    #[test]
    fn a_process_that_only_ran_probes_is_at_most_fully_slowed() {
        // The calibration said more than the process ran: 100%, not more.
        let interval = Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 500_000,
            traced_wait_ns: 999_000_000,
            host_busy: 0.0,
        };
        let p = plan(&[probe(0, "f")], &[100], COSTS, interval, Some(5.0), None);
        assert_eq!(p.estimated_percent, 100.0);
        assert_eq!(p.drop, [0]);
        let idle = Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 0,
            traced_wait_ns: 0,
            host_busy: 0.0,
        };
        assert_eq!(measured(&[probe(0, "f")], &[1], COSTS, idle), None);
    }

    /// Each calibration function is found in this executable, and starts
    /// with its class's instruction as [`classify`] reads it from the file
    /// (what the probes on traced functions are weighed by).
    #[test]
    fn each_calibration_function_starts_with_its_class() {
        for class in EntryClass::ALL {
            let f = calibration_function(class);
            let (object, offset) = calibration_site(f as *const () as u64).expect("site");
            assert!(object.is_absolute());
            assert!(offset > 0);
            assert_eq!(
                entry_sites_in(&object, &[offset]),
                [(0, class)],
                "{class:?}"
            );
            // It computes what it should (it returns to its caller).
            run_calls(f, 3);
            // SAFETY: as in run_calls.
            assert_eq!(unsafe { f(7) }, 21, "{class:?}");
        }
    }

    /// Real first instructions (as gcc, clang and rustc emit them) by what
    /// the x86-64 kernel does with them; anything else is stepped.
    #[test]
    fn the_first_bytes_give_the_class() {
        let cases: &[(&[u8], EntryClass)] = &[
            // push %rbp; mov %rsp,%rbp (frame-pointer prologue, libmpich)
            (&[0x55, 0x48, 0x89, 0xe5], EntryClass::Push),
            // push %rbx; push %r15 (41 57); push %r12 (41 54)
            (&[0x53, 0x48, 0x83, 0xec], EntryClass::Push),
            (&[0x41, 0x57, 0x41, 0x56], EntryClass::Push),
            (&[0x41, 0x54], EntryClass::Push),
            // rex.W push %rbp: the kernel steps it
            (&[0x48, 0x55, 0x48, 0x89], EntryClass::Stepped),
            // push $imm: stepped
            (&[0x6a, 0x01, 0x59, 0xc3], EntryClass::Stepped),
            // endbr64 (CET builds): stepped (`entry_site` goes past it)
            (&[0xf3, 0x0f, 0x1e, 0xfa], EntryClass::Stepped),
            // nop; xchg %ax,%ax; nopl (%rax); nopl 0x0(%rax,%rax,1) (nop5);
            // nopw 0x0(%rax,%rax,1)
            (&[0x90, 0x55], EntryClass::Nop),
            (&[0x66, 0x90], EntryClass::Nop),
            (&[0x0f, 0x1f, 0x00], EntryClass::Nop),
            (&[0x0f, 0x1f, 0x44, 0x00], EntryClass::Nop),
            (&[0x66, 0x0f, 0x1f, 0x44], EntryClass::Nop),
            // 0f 1f with a reg field other than 0 is no NOP
            (&[0x0f, 0x1f, 0x48, 0x00], EntryClass::Stepped),
            // sub $0x18,%rsp; mov %edi,%eax; lea (%rdi,%rdi,1),%eax;
            // xor %eax,%eax; mov %rdi,%rax; jmp rel8
            (&[0x48, 0x83, 0xec, 0x18], EntryClass::Stepped),
            (&[0x89, 0xf8, 0xc3], EntryClass::Stepped),
            (&[0x8d, 0x04, 0x3f, 0xc3], EntryClass::Stepped),
            (&[0x31, 0xc0, 0xc3], EntryClass::Stepped),
            (&[0x48, 0x89, 0xf8, 0xc3], EntryClass::Stepped),
            (&[0xeb, 0x00, 0x89, 0xf8], EntryClass::Stepped),
            // garbage, cut short, nothing read
            (&[0xff, 0xff, 0xff, 0xff], EntryClass::Stepped),
            (&[0x41], EntryClass::Stepped),
            (&[0x0f, 0x1f], EntryClass::Stepped),
            (&[], EntryClass::Stepped),
        ];
        for (bytes, class) in cases {
            assert_eq!(classify(bytes), *class, "{bytes:02x?}");
        }
    }

    /// CET builds start functions with `endbr64`: the probe goes past it,
    /// and is weighed by what follows; an `endbr64` alone (a function cut
    /// short) is stepped there; anything else stays at the start.
    #[test]
    fn the_entry_probe_goes_past_an_endbr64() {
        // endbr64; push %rbp; mov %rsp,%rbp
        let cet = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5];
        assert_eq!(entry_site(&cet), (4, EntryClass::Push));
        // endbr64; sub $0x18,%rsp
        assert_eq!(
            entry_site(&[0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x18]),
            (4, EntryClass::Stepped)
        );
        assert_eq!(entry_site(&ENDBR64), (4, EntryClass::Stepped));
        // endbr32 (f3 0f 1e fb) is no endbr64; push %rbp stays at 0.
        assert_eq!(
            entry_site(&[0xf3, 0x0f, 0x1e, 0xfb, 0x55]),
            (0, EntryClass::Stepped)
        );
        assert_eq!(entry_site(&[0x55, 0x48, 0x89, 0xe5]), (0, EntryClass::Push));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, cet).expect("write");
        assert_eq!(
            entry_sites_in(&path, &[0, 4]),
            [(4, EntryClass::Push), (0, EntryClass::Push)]
        );
    }

    /// A file that cannot be read, or ends before the offset: stepped.
    #[test]
    fn unreadable_first_bytes_are_stepped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, [0x55, 0x90, 0x41]).expect("write");
        let classes: Vec<EntryClass> = entry_sites_in(&path, &[0, 1, 2, 3, 100])
            .into_iter()
            .map(|(at, class)| {
                assert_eq!(at, 0);
                class
            })
            .collect();
        assert_eq!(
            classes,
            [
                EntryClass::Push,
                EntryClass::Nop,
                EntryClass::Stepped,
                EntryClass::Stepped,
                EntryClass::Stepped
            ]
        );
        assert_eq!(
            entry_sites_in(&dir.path().join("missing"), &[0]),
            [(0, EntryClass::Stepped)]
        );
    }

    /// Two functions called as often: the stepped one costs ten times the
    /// push-first one, so a budget that cannot keep both drops it and keeps
    /// the cheap one, which a single calibrated cost could not tell apart.
    #[test]
    fn a_stepped_function_goes_before_an_equally_hot_push_first_one() {
        let mut push = probe(0, "push_first");
        push.entry_class = EntryClass::Push;
        let mov = probe(1, "mov_first");
        let calls = [10_000, 10_000];
        // 5.5% and 10% of the CPU.
        let p = plan(
            &[push.clone(), mov.clone()],
            &calls,
            COSTS,
            SECOND,
            Some(8.0),
            None,
        );
        assert_eq!(p.drop, [1], "{p:?}");
        assert_eq!(p.dropped[0].entry_class, EntryClass::Stepped);
        assert!((p.estimated_percent - 15.5).abs() < 1e-6, "{p:?}");
        // Over the CPU without the dropped one's 0.1 s.
        assert!((p.kept_percent - 5.5 / 0.9).abs() < 1e-6, "{p:?}");
        // Listed the other way round, the same.
        assert_eq!(
            plan(&[mov, push], &calls, COSTS, SECOND, Some(8.0), None).drop,
            [0]
        );
    }

    /// `--like MODEL`: the functions the model was learned without go
    /// first, then those it lacks, its own only when the rest cannot fit.
    #[test]
    fn like_a_model_keeps_its_functions_while_others_can_go() {
        let probes = [probe(0, "hot"), probe(1, "warm"), probe(2, "old")];
        let calls = [10_000, 5_000, 1_000];
        let keep = Keep {
            model: ["hot".to_string()].into(),
            left_out: ["old".to_string()].into(),
        };
        // 10%, 5% and 1%: at 11%, without the model, hot goes.
        assert_eq!(
            plan(&probes, &calls, COSTS, SECOND, Some(11.0), None).drop,
            [0]
        );
        // Like the model: old, then warm, and hot stays.
        let p = plan(&probes, &calls, COSTS, SECOND, Some(11.0), Some(&keep));
        assert_eq!(p.drop, [2, 1]);
        let p = plan(&probes, &calls, COSTS, SECOND, Some(5.0), Some(&keep));
        assert_eq!(p.drop, [2, 1, 0], "the model's own go last");
        assert!(keep.has("hot") && !keep.has("warm") && !keep.has("old"));
    }

    #[test]
    fn a_model_file_gives_its_functions() {
        let json = r#"{"version":6,"variant":"000","sources":[],"left_out":["old"],
            "groups":[{"signature":["main@_start+0x1 > listen_on@main+0x2 > sys:listen"],
            "processes":1,"examples":[],"initializer":{},"finalizer":{},"pre_process":{},"post_process":{},
            "handlers":{"k":{"nodes":[{"parent":null,"site":"loop+0x1","callee":"serve","p_sum":1.0},
            {"parent":0,"site":"serve+0x2","callee":"sys:recvfrom","p_sum":1.0}]}}}]}"#;
        let keep = Keep::from_model_json(json).expect("a model");
        let model: Vec<&str> = keep.model.iter().map(String::as_str).collect();
        assert_eq!(model, ["listen_on", "main", "serve"]);
        assert!(keep.left_out.contains("old"));
        assert!(Keep::from_model_json("{}").is_err());
        assert!(Keep::from_model_json("not json").is_err());
    }
}
