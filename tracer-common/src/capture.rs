//! The capture file ("captured rings").
//!
//! ```text
//! file   := FileHeader chunk*
//! FileHeader (16 bytes) := magic "EFTCAP\0\0" | format version u32 | reserved u32
//! chunk  := ChunkHeader (24 bytes) payload
//! ChunkHeader := magic "CHNK" | kind u32 | seq u32 | len u32 | crc32(payload) u32 | reserved u32
//! ```
//! A `records` chunk holds raw ring-buffer records back to back (see
//! [`crate::record`]); a `meta` chunk holds one JSON [`Meta`] item. The first
//! chunk is always `Meta::Header`. Metadata learned while recording (processes,
//! symbol tables, loss counters) is written as it is learned, so a recorder
//! killed with SIGKILL leaves a file that reads up to its last complete chunk.
//! All integers are little-endian.

use std::{
    collections::BTreeMap,
    io::{self, Read, Write},
};

use serde::{Deserialize, Serialize};

use crate::record::{Header, Pod as _};

/// First 8 bytes of every capture file.
pub const FILE_MAGIC: [u8; 8] = *b"EFTCAP\0\0";
/// Version of the capture format this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// First 4 bytes of every chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"CHNK";
/// Size of the file header in bytes.
pub const FILE_HEADER_LEN: u64 = 16;
/// Size of a chunk header in bytes.
pub const CHUNK_HEADER_LEN: usize = 24;
/// Largest payload a reader accepts (guards against a corrupt length field).
pub const MAX_CHUNK_LEN: u32 = 256 << 20;
/// Payload bytes a reader reserves before reading them; beyond this the
/// buffer grows with the bytes actually read.
const PREALLOCATE: usize = 1 << 20;

/// Kind of a chunk's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkKind {
    /// Raw records, back to back.
    Records,
    /// One JSON [`Meta`] item.
    Meta,
}

impl ChunkKind {
    const fn code(self) -> u32 {
        match self {
            Self::Records => 1,
            Self::Meta => 2,
        }
    }
}

/// Errors reading or writing a capture.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// An I/O error.
    #[error("i/o error at byte offset {offset}")]
    Io {
        /// Byte offset in the file where the operation started.
        offset: u64,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file does not start with the capture magic.
    #[error("not a capture file (bad magic at offset 0); captures are written by `tracer record`")]
    BadMagic,
    /// The file's format version is not one this build reads.
    #[error(
        "capture format version {found} is not supported (this build reads version {FORMAT_VERSION})"
    )]
    UnsupportedVersion {
        /// The version in the file.
        found: u32,
    },
    /// The file ends inside a chunk: typically a recorder that was killed.
    #[error(
        "capture ends inside a chunk at byte offset {offset} ({complete_chunks} complete chunks before it)"
    )]
    Truncated {
        /// Offset of the incomplete chunk's header.
        offset: u64,
        /// Chunks read successfully before it.
        complete_chunks: u64,
    },
    /// A chunk header or payload is damaged.
    #[error("corrupt chunk at byte offset {offset}: {what}")]
    Corrupt {
        /// Offset of the chunk's header.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// A metadata chunk does not hold valid JSON metadata.
    #[error("bad metadata in the chunk at byte offset {offset}")]
    BadMeta {
        /// Offset of the chunk's header.
        offset: u64,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Clock reference: one reading of `CLOCK_MONOTONIC` and `CLOCK_REALTIME` taken
/// together, so record times convert to wall-clock time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockRef {
    /// `CLOCK_MONOTONIC`, ns.
    pub monotonic_ns: u64,
    /// `CLOCK_REALTIME`, ns since the Unix epoch.
    pub realtime_ns: u64,
}

impl ClockRef {
    /// Wall-clock ns since the epoch of a `CLOCK_MONOTONIC` time.
    pub fn to_realtime(&self, monotonic_ns: u64) -> u64 {
        let delta = i128::from(monotonic_ns) - i128::from(self.monotonic_ns);
        u64::try_from(i128::from(self.realtime_ns) + delta).unwrap_or(0)
    }
}

/// What was asked of the recorder.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordSettings {
    /// Function patterns given with `-f`.
    pub function_patterns: Vec<String>,
    /// Socket system calls traced.
    pub syscalls: bool,
    /// File I/O system calls counted (`FileIo` records); absent in older
    /// captures.
    #[serde(default)]
    pub file_io: bool,
    /// Block requests counted (`BlockIo` records).
    #[serde(default)]
    pub block_io: bool,
    /// Network namespace counters read (`NetDev`, `NetSnmp` records).
    #[serde(default)]
    pub net_stats: bool,
    /// Interval of the counters above, ms (0 when none is recorded).
    #[serde(default)]
    pub stats_interval_ms: u64,
    /// What this kernel could not give although it was asked for (no BTF
    /// field, no tracepoint), one line each.
    #[serde(default)]
    pub unavailable: Vec<String>,
    /// Sampling frequency in Hz, 0 when off.
    pub sample_hz: u64,
    /// Every process on the node sampled, not only traced ones.
    pub sample_all: bool,
    /// Children of traced processes followed.
    pub follow_children: bool,
    /// Ring buffer size in bytes.
    pub ring_bytes: u64,
}

/// First metadata item of every capture.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureHeader {
    /// Same as the file header's version.
    pub format_version: u32,
    /// Name and version of the program that wrote the file.
    pub tool: String,
    /// Host name of the traced machine.
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id`: monotonic times compare only within one boot.
    pub boot_id: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Clock reference taken when recording started.
    pub clock: ClockRef,
    /// Command line of the recorder.
    pub argv: Vec<String>,
    /// What was recorded.
    pub settings: RecordSettings,
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapEntry {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
    /// Path of the mapped file, or a pseudo name like `[stack]`, or empty.
    pub path: String,
}

/// A process as seen by the recorder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// When this snapshot was taken, `CLOCK_MONOTONIC` ns.
    pub seen_ns: u64,
    /// Whether the process was traced (named by the user or followed), as
    /// opposed to only seen in system-wide samples.
    pub traced: bool,
    /// Command name.
    pub comm: String,
    /// Path of the executable.
    pub exe: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// Environment variables that identify a process's role (MPI rank and size).
    pub env: BTreeMap<String, String>,
    /// Executable mappings (the ones addresses are symbolized against).
    pub maps: Vec<MapEntry>,
    /// TCP sockets open when the snapshot was taken: connections and
    /// listeners established before recording began (absent in older captures).
    #[serde(default)]
    pub sockets: Vec<SocketEntry>,
    /// Inode number of its network namespace (`/proc/PID/ns/net`), as the
    /// kernel's network records name it; 0 when unknown (older captures).
    #[serde(default)]
    pub netns: u64,
    /// When its function probes were attached, `CLOCK_MONOTONIC` ns, for a
    /// process forked by one traced by pid: probes fire in the traced
    /// processes only, and a child gets its own once the recorder reads its
    /// fork, so its calls before then are not recorded. `None`: probed from
    /// its start (or from the recording's), or no function probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes_from_ns: Option<u64>,
}

/// A TCP socket of a process, from `/proc/PID/fd` and `/proc/PID/net/tcp{,6}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketEntry {
    /// Descriptor number.
    pub fd: i32,
    /// Local address, `ip:port` (`[ip6]:port` for IPv6).
    pub local: String,
    /// Remote address; empty for a listener.
    pub remote: String,
    /// `listen`, `established`, or the kernel's state number for others.
    pub state: String,
}

/// A loadable segment of an ELF object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Virtual address in the object.
    pub vaddr: u64,
    /// File offset.
    pub offset: u64,
    /// Size in the file.
    pub filesz: u64,
}

/// A function symbol.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Symbol {
    /// Virtual address in the object (or the kernel address).
    pub addr: u64,
    /// Size in bytes (0 when unknown).
    pub size: u64,
    /// Name (not demangled).
    pub name: String,
}

/// The symbol table of one object file, enough to symbolize offline.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectSymbols {
    /// Path of the object as mapped.
    pub path: String,
    /// GNU build id, hex, when the object has one.
    pub build_id: Option<String>,
    /// Loadable segments, to convert file offsets to virtual addresses.
    pub segments: Vec<Segment>,
    /// Function symbols sorted by address: all of them for an object a
    /// traced process maps; for one only sampled processes ran
    /// (`--sample-all`), those its samples fell in, each with a size.
    pub symbols: Vec<Symbol>,
    /// The object's `.gnu_debuglink`, so an analysis elsewhere can find its
    /// debug file by name (absent in older captures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_link: Option<crate::debugfile::DebugLink>,
    /// The separate debug file whose symbol table was merged into
    /// `symbols` at record time (the object itself was stripped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_file: Option<String>,
}

/// One attached function probe: what a record's `func_id` means.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// Id carried by the records (the attach cookie).
    pub func_id: u32,
    /// Path of the object the function is in.
    pub object: String,
    /// Symbol name (the first one matching the pattern).
    pub symbol: String,
    /// Other names at the same address (e.g. `PMPI_Send` for `MPI_Send`).
    pub aliases: Vec<String>,
    /// Virtual address of the function in the object.
    pub vaddr: u64,
    /// File offset the uprobe is attached at: the function's start, or
    /// past the `endbr64` a CET build starts it with (4 bytes further).
    pub file_offset: u64,
    /// Entry records carry the six argument registers.
    pub args: bool,
    /// Only the entry is probed (no return probe, so no return records):
    /// a marker of where a call came from, at half the cost (the MPI
    /// preset's Fortran wrappers, whose callers are the program's call
    /// sites).
    #[serde(default)]
    pub entry_only: bool,
    /// What the kernel does with the function's first instruction when
    /// its entry probe fires, which sets the probe's cost (see
    /// [`EntryClass`]). Captures before it was read say
    /// [`EntryClass::Stepped`], the cost they were weighed at.
    #[serde(default)]
    pub entry_class: EntryClass,
}

/// How the kernel runs the instruction a function's entry probe replaced
/// (its first, or the one after a CET build's `endbr64`, which the probe
/// is placed past): x86-64 Linux emulates `push reg` (since 6.x) and NOPs
/// (since 6.12; a 5-byte NOP is optimized further on 6.18), and executes
/// anything else out of line, single-stepped (a second trap): about ten
/// times the cost here. What each class costs is calibrated at start on
/// the machine ([`ProbeCosts`]), so a kernel that emulates less is
/// weighed as what it does.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum EntryClass {
    /// `push reg` (`50+r`, `41 50+r`): emulated.
    Push,
    /// A NOP (`90`, `66 90`, `0f 1f /0`, `66 0f 1f /0`): emulated.
    Nop,
    /// Anything else (`endbr64`, `mov`, `sub rsp`, `lea`, bytes not read):
    /// single-stepped, the dearest; what an unknown first instruction is
    /// weighed as.
    #[default]
    Stepped,
}

impl EntryClass {
    /// Every class, cheapest first as measured here.
    pub const ALL: [EntryClass; 3] = [EntryClass::Push, EntryClass::Nop, EntryClass::Stepped];

    /// Its name in the recorder's output.
    pub fn name(self) -> &'static str {
        match self {
            EntryClass::Push => "push",
            EntryClass::Nop => "nop",
            EntryClass::Stepped => "stepped",
        }
    }
}

/// This machine's cost of one recorded call of a function probe, ns,
/// calibrated at start: the entry probe's by [`EntryClass`] of the
/// function's first instruction, and the return probe's, which does not
/// depend on it (the return trampoline is the same for every function).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeCosts {
    /// Entry probe on a `push reg`-first function.
    pub push_entry_ns: f64,
    /// Entry probe on a NOP-first function.
    pub nop_entry_ns: f64,
    /// Entry probe on a function whose first instruction is single-stepped.
    pub stepped_entry_ns: f64,
    /// The return probe (added to the entry's unless the probe is entry-only).
    pub return_ns: f64,
    /// The recorder's own CPU per record it reads from the ring, decodes
    /// and writes (an entry-only call is one record, an entry and return
    /// two), measured over the first interval: its CPU time over the
    /// records of every kind it handled then, fixed costs included. On a
    /// host whose CPUs are busy it is taken from the traced processes'
    /// work like the traps are. 0 when not measured (captures before it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub record_ns: f64,
    /// What a trap costs the traced processes in place, as a multiple of
    /// the calibrated entry and return costs above: the calibration's hot
    /// loop keeps the trap path in cache, a server's work does not (on
    /// GlusterFS's bricks the kept probes' hits cost ~4 times the calibrated
    /// figure). Measured from the traced processes' CPU per byte on their
    /// sockets before and after a decision dropped probes; at least 1 when
    /// measured, 0 when not (no decision, no socket traffic, too little
    /// dropped to tell, captures before it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub in_situ: f64,
}

/// Whether `x` is 0 (a field left out of the JSON).
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl ProbeCosts {
    /// For a person: `entry 0.9 us (push-first), 0.8 us (nop-first),
    /// 10.5 us (other, single-stepped), return +0.7 us`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "entry {:.1} us (push-first function), {:.1} us (nop-first), {:.1} us (other first instructions, single-stepped), return +{:.1} us",
            self.push_entry_ns / 1e3,
            self.nop_entry_ns / 1e3,
            self.stepped_entry_ns / 1e3,
            self.return_ns / 1e3
        );
        if self.in_situ > 0.0 {
            s.push_str(&format!(
                ", in the traced processes {:.1}x those trap costs (measured in place)",
                self.in_situ
            ));
        }
        if self.record_ns > 0.0 {
            s.push_str(&format!(
                ", the recorder's CPU +{:.1} us per record (two a call with its return)",
                self.record_ns / 1e3
            ));
        }
        s
    }

    /// The multiple of the calibrated trap costs a trap costs in place:
    /// [`Self::in_situ`], 1 when not measured.
    pub fn in_situ_factor(&self) -> f64 {
        self.in_situ.max(1.0)
    }

    /// The calibrated traps of one call of a probe on a function of
    /// `class`: its entry, and its return unless `entry_only`; neither the
    /// in-place factor nor the records.
    pub fn trap_ns(&self, class: EntryClass, entry_only: bool) -> f64 {
        let ret = if entry_only { 0.0 } else { self.return_ns };
        self.entry_ns(class) + ret
    }

    /// The entry probe's cost on a function of `class`.
    pub fn entry_ns(&self, class: EntryClass) -> f64 {
        match class {
            EntryClass::Push => self.push_entry_ns,
            EntryClass::Nop => self.nop_entry_ns,
            EntryClass::Stepped => self.stepped_entry_ns,
        }
    }

    /// The cost of one call of a probe on a function of `class`, with its
    /// return probe unless `entry_only`.
    pub fn call_ns(&self, class: EntryClass, entry_only: bool) -> f64 {
        let records = if entry_only { 1.0 } else { 2.0 };
        self.trap_ns(class, entry_only) * self.in_situ_factor() + records * self.record_ns
    }
}

/// One attached USDT probe site: what a [`crate::record::UsdtHit`]'s
/// `probe_id` means. Written only by recordings that attach USDT probes, so
/// captures without them stay readable by builds that predate this item.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsdtProbe {
    /// Id carried by the records (the attach cookie).
    pub probe_id: u32,
    /// Path of the object holding the probe.
    pub object: String,
    /// Provider (`python`).
    pub provider: String,
    /// Probe name (`function__entry`).
    pub name: String,
    /// Virtual address of the probe site in the object.
    pub vaddr: u64,
    /// File offset the uprobe is attached at.
    pub file_offset: u64,
    /// File offset of the probe's semaphore (raised while attached), or 0.
    pub semaphore_offset: u64,
    /// Argument specs as written in the note (`8@%rbp 8@%r12 -4@%eax`).
    pub args: String,
    /// Indexes of the arguments that point to strings; their text comes in
    /// `UsdtString` records before the first hit that carries the pointer.
    #[serde(default)]
    pub string_args: Vec<u32>,
    /// Attached only to hold the probe's semaphore raised (at another,
    /// never-reached site): no hits are recorded for it.
    #[serde(default)]
    pub semaphore_only: bool,
}

/// Loss and health counters, cumulative since the start of recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// When the counters were read, `CLOCK_MONOTONIC` ns.
    pub at_ns: u64,
    /// eBPF-side counters by name (see [`crate::stats::STAT_NAMES`]), summed over CPUs.
    pub counters: BTreeMap<String, u64>,
    /// Records written to the capture so far.
    pub records_written: u64,
}

/// Last metadata item of a capture that was closed properly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// When recording stopped, `CLOCK_MONOTONIC` ns.
    pub stop_ns: u64,
    /// When recording began, `CLOCK_MONOTONIC` ns: every program and probe
    /// attached, which can be seconds after the header's clock on a busy
    /// host (0 in older captures: read the header's clock). Windows over
    /// the records start here, so the attaching is not counted as quiet.
    #[serde(default)]
    pub started_ns: u64,
    /// Why it stopped (`signal`, `duration`, `targets exited`).
    pub reason: String,
    /// The traced processes still alive when recording stopped, with their
    /// scheduler state then (absent in older captures): a hang analysis
    /// tells a stopped rank from one that is running or waiting.
    #[serde(default)]
    pub processes: Vec<ProcessState>,
}

/// A traced process's state when recording stopped (`/proc/PID/stat`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessState {
    /// Process id.
    pub pid: u32,
    /// The state letter of its main thread: `R` running, `S` sleeping,
    /// `D` uninterruptible, `T` stopped by a signal, `t` stopped by a
    /// tracer, `Z` zombie.
    pub state: String,
}

/// What the function probes cost the traced processes, and what the
/// overhead budget (`tracer record --overhead`) left out because of it.
/// Written after the first interval of a recording with function probes,
/// and again at its end with the measured cost; the last one holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    /// The budget, percent slowdown of the traced processes; `None` when
    /// none was given (the probes were only counted).
    pub budget_percent: Option<f64>,
    /// This machine's cost of one recorded call of an entry and return
    /// probe on a function whose first instruction is single-stepped (the
    /// dearest class), ns (measured at start on a function of the
    /// recorder's own). Captures before [`Overhead::probe_costs`] weighed
    /// every probe at this cost.
    pub call_cost_ns: f64,
    /// The same for an entry-only probe, ns.
    pub entry_cost_ns: f64,
    /// The costs by the probed function's first instruction, which the
    /// probes were weighed with. `None` in captures before they were told
    /// apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_costs: Option<ProbeCosts>,
    /// When the first interval ended and the probe set was decided,
    /// `CLOCK_MONOTONIC` ns: the dropped functions have no records after it.
    pub decided_ns: u64,
    /// Length of the first interval, ms.
    pub interval_ms: u64,
    /// CPU time of the traced processes over the first interval, percent of
    /// one core (probes included).
    pub traced_cpu_percent: f64,
    /// Estimated CPU of every probe over the first interval (calls times
    /// cost), percent of one core.
    pub probes_core_percent: f64,
    /// The traced processes' demand for the CPU over the first interval:
    /// the share of it they ran or were runnable, percent (at most 100).
    /// `None` in captures before it was weighed.
    #[serde(default)]
    pub demand_percent: Option<f64>,
    /// The probes' share of the traced processes' CPU, percent: what a
    /// request served on the CPU loses to them. `None` in older captures.
    #[serde(default)]
    pub latency_percent: Option<f64>,
    /// Estimated slowdown (throughput) with every probe: their share of
    /// the traced processes' CPU scaled by the processes' demand for it
    /// (one that mostly waits loses less), percent. Captures before
    /// `demand_percent` existed did not scale it.
    pub estimated_percent: f64,
    /// Estimated slowdown with the probes kept, percent.
    pub kept_percent: f64,
    /// Slowdown measured from the calls the kept probes recorded after the
    /// decision (calls times cost over the traced processes' CPU, scaled by
    /// their demand as `estimated_percent` is), percent;
    /// `None` until the recording ends, or when there was no CPU to weigh.
    #[serde(default)]
    pub measured_percent: Option<f64>,
    /// The span `measured_percent` covers, ms.
    #[serde(default)]
    pub measured_ms: u64,
    /// The recorder's own CPU per record over that span, ns: its CPU time
    /// over the records it wrote then, which `measured_percent` charges
    /// for each record the kept probes wrote (the cost per record in
    /// `probe_costs` is what the decisions were weighed with). `None` when
    /// the span wrote too few records to tell it from the recorder's fixed
    /// work (`probe_costs`' figure is charged then), and in older captures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_record_ns: Option<f64>,
    /// CPU the programs on tracepoints and perf events (system calls, file
    /// and block I/O, lifecycle, samples) used over the whole recording,
    /// ms per second, measured by the kernel's run-time statistics, on
    /// every process of the node: a cost the function-probe budget does
    /// not cover (those signals are never dropped). `None` when it was not
    /// measured.
    #[serde(default)]
    pub kernel_ms_per_s: Option<f64>,
    /// The probes left out, hottest first.
    pub dropped: Vec<DroppedProbe>,
}

impl Overhead {
    /// What one recorded call cost on the recording's machine: by class
    /// where the capture has them, else the one cost older captures
    /// weighed every probe at.
    pub fn per_call_cost(&self) -> String {
        match &self.probe_costs {
            Some(c) => c.describe(),
            None => format!(
                "{:.1} us per call (entry only {:.1} us)",
                self.call_cost_ns / 1e3,
                self.entry_cost_ns / 1e3
            ),
        }
    }

    /// One line per fact, for a person (the recorder's output and
    /// `analyzer summary`).
    pub fn describe(&self) -> Vec<String> {
        let o = self;
        let per_call = o.per_call_cost();
        let mut lines = vec![match (o.demand_percent, o.latency_percent) {
            (Some(demand), Some(latency)) => format!(
                "function probes: {per_call} on this machine; over the first {} ms they cost {:.1}% of a core, the traced processes used {:.1}% and ran or waited for a CPU {demand:.0}% of the time: estimated slowdown {:.1}% (a request served on the CPU: up to {latency:.1}%)",
                o.interval_ms, o.probes_core_percent, o.traced_cpu_percent, o.estimated_percent
            ),
            _ => format!(
                "function probes: {per_call} on this machine; over the first {} ms they cost {:.1}% of a core, the traced processes used {:.1}%: estimated slowdown {:.1}%",
                o.interval_ms, o.probes_core_percent, o.traced_cpu_percent, o.estimated_percent
            ),
        }];
        if let Some(budget) = o.budget_percent {
            if o.decided_ns == 0 {
                lines.push(format!(
                    "overhead budget {budget}%: not applied (the recording ended within the first interval)"
                ));
            } else if o.dropped.is_empty() {
                lines.push(format!(
                    "overhead budget {budget}%: every probe fits, none dropped"
                ));
            } else {
                lines.push(format!(
                    "overhead budget {budget}%: dropped {} probe(s) after the first {} ms (missing on purpose from then on), estimated slowdown with the rest {:.1}%",
                    o.dropped.len(),
                    o.interval_ms,
                    o.kept_percent
                ));
                for d in o.dropped.iter().take(20) {
                    // Older captures did not tell the classes apart.
                    let class = if o.probe_costs.is_some() {
                        format!(", {}", d.entry_class.name())
                    } else {
                        String::new()
                    };
                    lines.push(format!(
                        "  dropped {} ({:.0} calls/s, {:.1}%{class})",
                        d.symbol, d.calls_per_s, d.percent
                    ));
                }
                if o.dropped.len() > 20 {
                    lines.push(format!("  ... and {} more", o.dropped.len() - 20));
                }
            }
        }
        if let Some(m) = o.measured_percent {
            let records = o.measured_record_ns.map_or(String::new(), |r| {
                format!(
                    ", the recorder's CPU per record measured over that span: {:.1} us",
                    r / 1e3
                )
            });
            lines.push(format!(
                "measured after the decision ({} ms): {m:.1}% slowdown from the probes kept (their calls times the cost per call above{records})",
                o.measured_ms
            ));
        }
        if let Some(k) = o.kernel_ms_per_s {
            lines.push(format!(
                "kernel programs (system calls, file and block I/O, lifecycle, samples): {k:.1} ms of CPU per second ({:.1}% of one core), on every process of the node; not part of the function-probe budget",
                k / 10.0
            ));
        }
        lines
    }
}

/// A function probe the overhead budget detached.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DroppedProbe {
    /// Its id in the probe table (its records before the decision carry it).
    pub func_id: u32,
    /// Symbol name.
    pub symbol: String,
    /// Object path.
    pub object: String,
    /// Calls per second over the first interval.
    pub calls_per_s: f64,
    /// Its estimated share of the slowdown, percent.
    pub percent: f64,
    /// Its function's first instruction's class, which its cost per call
    /// was weighed with (captures before it was read: stepped).
    #[serde(default)]
    pub entry_class: EntryClass,
    /// When it was detached, `CLOCK_MONOTONIC` ns: it has no records after.
    #[serde(default)]
    pub at_ns: u64,
}

/// A metadata item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Meta {
    /// The capture header.
    Header(CaptureHeader),
    /// A process snapshot (a process may appear again after exec).
    Process(ProcessInfo),
    /// Symbols of one object file.
    Object(ObjectSymbols),
    /// Attached function probes.
    Probes {
        /// The probes.
        probes: Vec<Probe>,
    },
    /// Attached USDT probe sites.
    UsdtProbes {
        /// The sites.
        probes: Vec<UsdtProbe>,
    },
    /// Kernel symbols for the kernel addresses seen in samples.
    KernelSymbols {
        /// The symbols.
        symbols: Vec<Symbol>,
    },
    /// Loss and health counters.
    Stats(Stats),
    /// The function probes' cost and what the overhead budget dropped.
    /// Written only by recordings with function probes, so captures
    /// without them stay readable by builds that predate this item.
    Overhead(Overhead),
    /// The capture was closed properly.
    End(End),
}

/// A chunk as read from a file.
#[derive(Clone, Debug, PartialEq)]
pub enum Chunk {
    /// Raw records.
    Records {
        /// Byte offset of the chunk's header in the file.
        offset: u64,
        /// The records, back to back.
        bytes: Vec<u8>,
    },
    /// A metadata item.
    Meta {
        /// Byte offset of the chunk's header in the file.
        offset: u64,
        /// The item.
        meta: Box<Meta>,
    },
}

/// Writes a capture.
#[derive(Debug)]
pub struct CaptureWriter<W: Write> {
    out: W,
    offset: u64,
    seq: u32,
}

impl<W: Write> CaptureWriter<W> {
    /// Writes the file header and the `Meta::Header` chunk.
    pub fn new(mut out: W, header: &CaptureHeader) -> Result<Self, CaptureError> {
        let mut file_header = [0u8; FILE_HEADER_LEN as usize];
        file_header[..8].copy_from_slice(&FILE_MAGIC);
        file_header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.write_all(&file_header)
            .map_err(|source| CaptureError::Io { offset: 0, source })?;
        let mut writer = Self {
            out,
            offset: FILE_HEADER_LEN,
            seq: 0,
        };
        writer.write_meta(&Meta::Header(header.clone()))?;
        Ok(writer)
    }

    /// Writes a chunk of raw records. `records` must be whole records.
    pub fn write_records(&mut self, records: &[u8]) -> Result<(), CaptureError> {
        if records.is_empty() {
            return Ok(());
        }
        self.write_chunk(ChunkKind::Records, records)
    }

    /// Writes one metadata item as its own chunk.
    pub fn write_meta(&mut self, meta: &Meta) -> Result<(), CaptureError> {
        let json = serde_json::to_vec(meta).map_err(|source| CaptureError::BadMeta {
            offset: self.offset,
            source,
        })?;
        self.write_chunk(ChunkKind::Meta, &json)
    }

    /// Writes a chunk read from another capture with
    /// [`CaptureReader::next_raw_chunk`], unchanged.
    pub fn write_raw(&mut self, chunk: &RawChunk) -> Result<(), CaptureError> {
        self.write_chunk(chunk.kind, &chunk.payload)
    }

    fn write_chunk(&mut self, kind: ChunkKind, payload: &[u8]) -> Result<(), CaptureError> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| *len <= MAX_CHUNK_LEN)
            .ok_or_else(|| CaptureError::Corrupt {
                offset: self.offset,
                what: format!(
                    "chunk of {} bytes is larger than the format allows",
                    payload.len()
                ),
            })?;
        let mut header = [0u8; CHUNK_HEADER_LEN];
        header[0..4].copy_from_slice(&CHUNK_MAGIC);
        header[4..8].copy_from_slice(&kind.code().to_le_bytes());
        header[8..12].copy_from_slice(&self.seq.to_le_bytes());
        header[12..16].copy_from_slice(&len.to_le_bytes());
        header[16..20].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
        let offset = self.offset;
        self.out
            .write_all(&header)
            .and_then(|()| self.out.write_all(payload))
            .map_err(|source| CaptureError::Io { offset, source })?;
        self.offset += (CHUNK_HEADER_LEN + payload.len()) as u64;
        self.seq = self.seq.wrapping_add(1);
        Ok(())
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> Result<(), CaptureError> {
        let offset = self.offset;
        self.out
            .flush()
            .map_err(|source| CaptureError::Io { offset, source })
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Returns the underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Reads a capture chunk by chunk from any reader (a file, a pipe, memory).
#[derive(Debug)]
pub struct CaptureReader<R: Read> {
    input: R,
    offset: u64,
    chunks: u64,
    done: bool,
}

impl<R: Read> CaptureReader<R> {
    /// Reads and checks the file header.
    pub fn new(mut input: R) -> Result<Self, CaptureError> {
        let mut file_header = [0u8; FILE_HEADER_LEN as usize];
        let got = read_full(&mut input, &mut file_header)
            .map_err(|source| CaptureError::Io { offset: 0, source })?;
        if got < 8 || file_header[..8] != FILE_MAGIC {
            return Err(CaptureError::BadMagic);
        }
        if got < file_header.len() {
            return Err(CaptureError::Truncated {
                offset: 0,
                complete_chunks: 0,
            });
        }
        let version = u32::from_le_bytes([
            file_header[8],
            file_header[9],
            file_header[10],
            file_header[11],
        ]);
        if version != FORMAT_VERSION {
            return Err(CaptureError::UnsupportedVersion { found: version });
        }
        Ok(Self {
            input,
            offset: FILE_HEADER_LEN,
            chunks: 0,
            done: false,
        })
    }

    /// Chunks read so far.
    pub fn chunks_read(&self) -> u64 {
        self.chunks
    }

    /// Reads the next chunk; `Ok(None)` at a clean end of file.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, CaptureError> {
        let Some(raw) = self.next_raw_chunk()? else {
            return Ok(None);
        };
        let offset = raw.offset;
        Ok(Some(match raw.kind {
            ChunkKind::Records => Chunk::Records {
                offset,
                bytes: raw.payload,
            },
            ChunkKind::Meta => {
                let meta = serde_json::from_slice(&raw.payload).map_err(|source| {
                    self.done = true;
                    CaptureError::BadMeta { offset, source }
                })?;
                Chunk::Meta {
                    offset,
                    meta: Box::new(meta),
                }
            }
        }))
    }

    /// Reads the next chunk, checked but not parsed (copying chunks between
    /// captures without decoding their metadata); `Ok(None)` at a clean end.
    pub fn next_raw_chunk(&mut self) -> Result<Option<RawChunk>, CaptureError> {
        if self.done {
            return Ok(None);
        }
        let offset = self.offset;
        let result = self.read_chunk(offset);
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn read_chunk(&mut self, offset: u64) -> Result<Option<RawChunk>, CaptureError> {
        let io_err = |source| CaptureError::Io { offset, source };
        let truncated = CaptureError::Truncated {
            offset,
            complete_chunks: self.chunks,
        };
        let mut header = [0u8; CHUNK_HEADER_LEN];
        let got = read_full(&mut self.input, &mut header).map_err(io_err)?;
        if got == 0 {
            return Ok(None);
        }
        if got < CHUNK_HEADER_LEN {
            return Err(truncated);
        }
        let corrupt = |what: String| CaptureError::Corrupt { offset, what };
        if header[0..4] != CHUNK_MAGIC {
            return Err(corrupt("bad chunk magic".into()));
        }
        let word =
            |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let (kind, len, crc) = (word(4), word(12), word(16));
        let kind = match kind {
            1 => ChunkKind::Records,
            2 => ChunkKind::Meta,
            other => return Err(corrupt(format!("unknown chunk kind {other}"))),
        };
        if len > MAX_CHUNK_LEN {
            return Err(corrupt(format!(
                "chunk length {len} exceeds the maximum {MAX_CHUNK_LEN}"
            )));
        }
        // Grow the buffer with the data that is really there: a length
        // field (checked against the maximum above) must not allocate
        // before the file shows it holds that much.
        let mut payload = Vec::with_capacity((len as usize).min(PREALLOCATE));
        (&mut self.input)
            .take(u64::from(len))
            .read_to_end(&mut payload)
            .map_err(io_err)?;
        if payload.len() < len as usize {
            return Err(truncated);
        }
        if crc32fast::hash(&payload) != crc {
            return Err(corrupt("checksum mismatch".into()));
        }
        self.offset += (CHUNK_HEADER_LEN + payload.len()) as u64;
        self.chunks += 1;
        Ok(Some(RawChunk {
            kind,
            offset,
            crc,
            payload,
        }))
    }
}

/// A chunk as stored: kind, checksum and undecoded payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawChunk {
    /// Records or metadata.
    pub kind: ChunkKind,
    /// Byte offset of the chunk's header in its file.
    pub offset: u64,
    /// CRC-32 of the payload (equal payloads have equal checksums).
    pub crc: u32,
    /// The payload: records back to back, or one JSON [`Meta`].
    pub payload: Vec<u8>,
}

impl RawChunk {
    /// The `type` tag of a metadata chunk (`"header"`, `"process"`, `"end"`…)
    /// without parsing the JSON: serde writes the tag first.
    pub fn meta_type(&self) -> Option<&str> {
        if self.kind != ChunkKind::Meta {
            return None;
        }
        let rest = self.payload.strip_prefix(b"{\"type\":\"")?;
        let end = rest.iter().position(|b| *b == b'"')?;
        std::str::from_utf8(&rest[..end]).ok()
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A malformed record inside a records chunk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed record at byte {at} of the records chunk: {what}")]
pub struct RecordError {
    /// Byte position inside the chunk's payload.
    pub at: usize,
    /// What is wrong.
    pub what: &'static str,
}

/// Iterates over the raw records of a records chunk: yields each record's
/// header and its bytes (header included).
#[derive(Debug, Clone)]
pub struct RawRecords<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> RawRecords<'a> {
    /// Records in `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }
}

impl<'a> Iterator for RawRecords<'a> {
    type Item = Result<(Header, &'a [u8]), RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.bytes.get(self.at..).filter(|rest| !rest.is_empty())?;
        let at = self.at;
        let Some(header) = Header::read_from(rest) else {
            self.at = self.bytes.len();
            return Some(Err(RecordError {
                at,
                what: "record shorter than its header",
            }));
        };
        let size = usize::from(header.size);
        if size < size_of::<Header>() || size > rest.len() || size % 8 != 0 {
            self.at = self.bytes.len();
            return Some(Err(RecordError {
                at,
                what: "record size field out of range",
            }));
        }
        self.at += size;
        Some(Ok((header, &rest[..size])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FuncReturn, kind};

    /// A capture written before the classes reads with every probe stepped
    /// (the one cost it was weighed at) and is described as before; a new
    /// one tells the costs per class and each dropped probe's class.
    #[test]
    fn overhead_costs_by_class_read_and_describe() {
        let old = r#"{"budget_percent":5.0,"call_cost_ns":10000.0,"entry_cost_ns":9000.0,
            "decided_ns":7,"interval_ms":250,"traced_cpu_percent":90.0,"probes_core_percent":20.0,
            "estimated_percent":22.0,"kept_percent":4.0,
            "dropped":[{"func_id":1,"symbol":"leaf","object":"/bin/x","calls_per_s":1000.0,"percent":18.0}]}"#;
        let o: Overhead = serde_json::from_str(old).expect("an old overhead item");
        assert_eq!(o.probe_costs, None);
        assert_eq!(o.dropped[0].entry_class, EntryClass::Stepped);
        let lines = o.describe();
        assert!(
            lines[0].starts_with("function probes: 10.0 us per call (entry only 9.0 us)"),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"  dropped leaf (1000 calls/s, 18.0%)".to_string()),
            "{lines:?}"
        );
        let probe: Probe = serde_json::from_str(
            r#"{"func_id":0,"object":"/bin/x","symbol":"leaf","aliases":[],"vaddr":16,"file_offset":16,"args":false}"#,
        )
        .expect("an old probe");
        assert_eq!(probe.entry_class, EntryClass::Stepped);

        let costs = ProbeCosts {
            push_entry_ns: 900.0,
            nop_entry_ns: 800.0,
            stepped_entry_ns: 10_000.0,
            return_ns: 1_000.0,
            record_ns: 0.0,
            in_situ: 0.0,
        };
        assert_eq!(costs.call_ns(EntryClass::Push, false), 1_900.0);
        assert_eq!(costs.call_ns(EntryClass::Stepped, true), 10_000.0);
        // The recorder's CPU per record: two a call, one entry only; told
        // when measured, and read as 0 from captures before it.
        let charged = ProbeCosts {
            record_ns: 500.0,
            ..costs
        };
        assert_eq!(charged.call_ns(EntryClass::Push, false), 2_900.0);
        assert_eq!(charged.call_ns(EntryClass::Stepped, true), 10_500.0);
        let says = |c: &ProbeCosts, text: &str| {
            assert!(c.describe().contains(text), "{}", c.describe());
        };
        says(
            &charged,
            "the recorder's CPU +0.5 us per record (two a call with its return)",
        );
        assert!(!costs.describe().contains("recorder"));
        // Measured in place: the traps (not the records) cost that multiple.
        let in_place = ProbeCosts {
            in_situ: 3.0,
            ..charged
        };
        assert_eq!(
            in_place.call_ns(EntryClass::Push, false),
            3.0 * 1_900.0 + 1_000.0
        );
        assert_eq!(in_place.call_ns(EntryClass::Stepped, true), 30_500.0);
        says(
            &in_place,
            ", in the traced processes 3.0x those trap costs (measured in place)",
        );
        assert!(!costs.describe().contains("in place"));
        let old: ProbeCosts = serde_json::from_str(
            r#"{"push_entry_ns":900.0,"nop_entry_ns":800.0,"stepped_entry_ns":10000.0,"return_ns":1000.0}"#,
        )
        .expect("old costs");
        assert_eq!(old, costs);
        let mut new = o.clone();
        new.probe_costs = Some(costs);
        new.dropped[0].entry_class = EntryClass::Push;
        let back: Overhead =
            serde_json::from_str(&serde_json::to_string(&new).expect("json")).expect("read back");
        assert_eq!(back, new);
        let lines = back.describe();
        assert!(
            lines[0].starts_with("function probes: entry 0.9 us (push-first function), 0.8 us (nop-first), 10.0 us (other first instructions, single-stepped), return +1.0 us on this machine"),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"  dropped leaf (1000 calls/s, 18.0%, push)".to_string()),
            "{lines:?}"
        );
    }

    fn header() -> CaptureHeader {
        CaptureHeader {
            format_version: FORMAT_VERSION,
            host: "h".into(),
            ..Default::default()
        }
    }

    fn ret_record(ts: u64) -> FuncReturn {
        FuncReturn {
            header: Header {
                ts_ns: ts,
                pid: 1,
                tid: 1,
                kind: kind::FUNC_RETURN,
                size: 40,
                cpu: 0,
            },
            func_id: 3,
            _pad: 0,
            ret: 5,
        }
    }

    fn sample_file() -> Vec<u8> {
        let mut w = CaptureWriter::new(Vec::new(), &header()).expect("write header");
        let mut recs = Vec::new();
        for ts in 0..10 {
            recs.extend_from_slice(ret_record(ts).as_bytes());
        }
        w.write_records(&recs).expect("records");
        w.write_meta(&Meta::End(End {
            stop_ns: 9,
            reason: "test".into(),
            ..Default::default()
        }))
        .expect("end");
        w.into_inner()
    }

    fn read_all(bytes: &[u8]) -> (Vec<Chunk>, Option<CaptureError>) {
        let mut r = match CaptureReader::new(bytes) {
            Ok(r) => r,
            Err(e) => return (Vec::new(), Some(e)),
        };
        let mut chunks = Vec::new();
        loop {
            match r.next_chunk() {
                Ok(Some(c)) => chunks.push(c),
                Ok(None) => return (chunks, None),
                Err(e) => return (chunks, Some(e)),
            }
        }
    }

    #[test]
    fn round_trip() {
        let (chunks, err) = read_all(&sample_file());
        assert!(err.is_none(), "{err:?}");
        assert_eq!(chunks.len(), 3);
        assert!(
            matches!(&chunks[0], Chunk::Meta { meta, .. } if matches!(**meta, Meta::Header(_)))
        );
        let Chunk::Records { bytes, .. } = &chunks[1] else {
            panic!("records expected")
        };
        let recs: Vec<_> = RawRecords::new(bytes)
            .collect::<Result<_, _>>()
            .expect("valid records");
        assert_eq!(recs.len(), 10);
        assert_eq!(FuncReturn::read_from(recs[9].1), Some(ret_record(9)));
    }

    #[test]
    fn raw_chunks_copy_a_capture_byte_for_byte() {
        let file = sample_file();
        let mut r = CaptureReader::new(&file[..]).expect("file header");
        let first = r.next_raw_chunk().expect("read").expect("header chunk");
        assert_eq!(first.meta_type(), Some("header"));
        let mut w = CaptureWriter::new(Vec::new(), &header()).expect("write header");
        let mut types = Vec::new();
        while let Some(c) = r.next_raw_chunk().expect("read") {
            types.push(c.meta_type().map(str::to_string));
            w.write_raw(&c).expect("copy");
        }
        assert_eq!(types, vec![None, Some("end".to_string())]);
        assert_eq!(w.into_inner(), file);
    }

    #[test]
    fn every_truncation_reads_the_complete_prefix() {
        let file = sample_file();
        for cut in 0..file.len() {
            let (chunks, err) = read_all(&file[..cut]);
            match err {
                None => assert!(cut == FILE_HEADER_LEN as usize || !chunks.is_empty()),
                Some(CaptureError::Truncated {
                    complete_chunks, ..
                }) => {
                    assert_eq!(complete_chunks as usize, chunks.len());
                }
                Some(CaptureError::BadMagic) => assert!(cut < 8),
                Some(other) => panic!("cut {cut}: unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn a_flipped_byte_is_reported_with_its_chunk_offset() {
        let clean = sample_file();
        let (chunks, _) = read_all(&clean);
        let Chunk::Records { offset, .. } = chunks[1] else {
            panic!("records expected")
        };
        let mut file = clean;
        let victim = offset as usize + CHUNK_HEADER_LEN + 30;
        file[victim] ^= 0x40;
        let (chunks, err) = read_all(&file);
        assert_eq!(chunks.len(), 1);
        assert!(matches!(err, Some(CaptureError::Corrupt { offset: o, .. }) if o == offset));
    }

    #[test]
    fn wrong_magic_and_version_are_rejected() {
        assert!(matches!(
            read_all(b"hello world, not a capture").1,
            Some(CaptureError::BadMagic)
        ));
        let mut file = sample_file();
        file[8] = 99;
        assert!(matches!(
            read_all(&file).1,
            Some(CaptureError::UnsupportedVersion { found: 99 })
        ));
    }

    #[test]
    fn malformed_record_sizes_are_errors() {
        let mut rec = ret_record(1);
        rec.header.size = 12;
        let err = RawRecords::new(rec.as_bytes()).next().expect("one item");
        assert_eq!(
            err,
            Err(RecordError {
                at: 0,
                what: "record size field out of range"
            })
        );
    }
}
