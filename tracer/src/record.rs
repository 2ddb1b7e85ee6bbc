//! `tracer record`: one [`Session`] from attach to a stop condition (Ctrl-C,
//! SIGTERM, a duration, the targets' exit).

use std::{collections::BTreeMap, ffi::OsString, path::PathBuf, time::Duration};

use tokio::signal::unix::{SignalKind, signal};
use tracer_common::record::kind;

pub use crate::session::monotonic_ns;
use crate::{
    elf::ElfError,
    loader::LoadError,
    procfs::ProcError,
    session::{Activity, Session},
    sink::SinkError,
    targets::{FunctionPattern, MPI_PATTERN, TargetError},
    tracefs::TracefsError,
    usdt::{PYTHON_PROBES, PYTHON_SEMAPHORE, UsdtError, UsdtPattern},
};

/// What to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A running process (all its threads).
    Pid(u32),
    /// Every process running this executable, now or later.
    Exe(PathBuf),
    /// A command to start and trace from its first instruction.
    Command(Vec<OsString>),
}

/// [`RecordConfig::object_tables_after`] of `tracer record`.
pub const OBJECT_TABLES_AFTER: Duration = Duration::from_secs(5);

/// Settings of a recording.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// What to trace.
    pub targets: Vec<Target>,
    /// Function patterns.
    pub functions: Vec<FunctionPattern>,
    /// Functions left out although a pattern matches them (symbol names;
    /// the agent's load shedding).
    pub exclude_functions: Vec<String>,
    /// Functions that get empty probes (benchmarks: the bare uprobe cost).
    pub empty_probes: Vec<FunctionPattern>,
    /// Empty programs on the system-call tracepoints instead of the real
    /// ones (benchmarks: the bare raw tracepoint cost).
    pub empty_syscalls: bool,
    /// Skip the per-call blocked-thread entry (benchmarks: what it costs;
    /// no blocked threads are then recorded).
    pub bench_no_blocked: bool,
    /// USDT probes (`PROVIDER:NAME` globs) to attach in the targets' objects.
    pub usdt: Vec<UsdtPattern>,
    /// USDT probes whose semaphores are raised without recording their hits.
    pub usdt_semaphores: Vec<UsdtPattern>,
    /// USDT probes attached at their own sites with semaphores raised,
    /// recording nothing (benchmarks: the bare USDT uprobe cost).
    pub usdt_empty: Vec<UsdtPattern>,
    /// Attach function probes with uprobe_multi links where the kernel has
    /// them (fast attach and detach), else one perf link per probe.
    pub uprobe_multi: bool,
    /// Trace socket system calls (and TCP retransmissions).
    pub syscalls: bool,
    /// Count file I/O system calls of the traced processes.
    pub file_io: bool,
    /// Count the node's block requests per device and submitter.
    pub block_io: bool,
    /// Read the traced processes' network namespace counters.
    pub net_stats: bool,
    /// How often file, block and network counters are written.
    pub stats_interval: Duration,
    /// Record each traced process's CPU times every flush interval.
    pub cpu_times: bool,
    /// Record each traced process's CPU times every stats interval (when
    /// not every flush interval already).
    pub cpu_stats: bool,
    /// Sampling frequency (0: off).
    pub sample_hz: u64,
    /// Sample every process on the node.
    pub sample_all: bool,
    /// Follow children of traced processes.
    pub follow: bool,
    /// Function probes in every process of their objects, also with pid
    /// targets only (see [`crate::loader::Loaded::scope_probes`]).
    pub probe_everywhere: bool,
    /// Ring buffer size, bytes.
    pub ring_bytes: u32,
    /// Pending ring bytes that force a wakeup.
    pub wakeup_bytes: u64,
    /// Record batch size per capture chunk, bytes.
    pub chunk_bytes: usize,
    /// Period of draining and flushing when no wakeup came.
    pub flush_interval: Duration,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Capture file.
    pub output: PathBuf,
    /// Recorder command line, stored in the header.
    pub argv: Vec<String>,
    /// Skip a target that cannot be resolved (no function matches in it, an
    /// unreadable executable) and record the others (the agent); otherwise
    /// such a target is an error (`tracer record`).
    pub skip_unusable: bool,
    /// Replace an existing output file (`--force`); otherwise one is an
    /// error. Never through a symbolic link either way.
    pub overwrite: bool,
    /// Directories searched for the separate debug files of stripped
    /// objects before `$EFTRACE_DEBUG_DIRS` and `/usr/lib/debug`.
    pub debug_dirs: Vec<PathBuf>,
    /// The function probes' overhead budget, percent slowdown of the
    /// traced processes (`--overhead`); `None`: probes are only weighed,
    /// and warned about above [`crate::overhead::WARN_CORE_PERCENT`] of a core.
    pub overhead_percent: Option<f64>,
    /// How long function probes are counted before they are weighed.
    pub overhead_interval: Duration,
    /// The functions a model was learned with (`--like MODEL`): the budget
    /// drops every other probe before one of them.
    pub overhead_keep: Option<crate::overhead::Keep>,
    /// How long a traced process's object waits before its symbol table is
    /// read and written (at the stop at the latest). `tracer record` waits
    /// (a launched job's processes map dozens of objects as they start, when
    /// they want every core); the agent, whose live analysis reads the
    /// tables from files it rotates every few seconds, does not.
    pub object_tables_after: Duration,
}

impl Default for RecordConfig {
    fn default() -> Self {
        Self {
            targets: Vec::new(),
            functions: Vec::new(),
            exclude_functions: Vec::new(),
            empty_probes: Vec::new(),
            empty_syscalls: false,
            bench_no_blocked: false,
            usdt: Vec::new(),
            usdt_semaphores: Vec::new(),
            usdt_empty: Vec::new(),
            uprobe_multi: true,
            syscalls: true,
            file_io: true,
            block_io: true,
            net_stats: true,
            stats_interval: Duration::from_millis(250),
            cpu_times: false,
            cpu_stats: true,
            sample_hz: 0,
            sample_all: false,
            follow: true,
            probe_everywhere: false,
            ring_bytes: 8 << 20,
            wakeup_bytes: 512 << 10,
            chunk_bytes: 1 << 20,
            flush_interval: Duration::from_millis(100),
            duration: None,
            output: PathBuf::from("trace.capture"),
            argv: Vec::new(),
            skip_unusable: false,
            overwrite: false,
            debug_dirs: Vec::new(),
            overhead_percent: None,
            overhead_interval: Duration::from_secs(2),
            overhead_keep: None,
            object_tables_after: Duration::ZERO,
        }
    }
}

/// What to probe, as a person writes it (`tracer record` flags, the agent's
/// `[trace]` section), with the MPI and Python presets expanded.
#[derive(Debug, Clone, Default)]
pub struct ProbeChoice<'a> {
    /// `[OBJECT:]GLOB` function patterns.
    pub functions: &'a [String],
    /// Patterns whose calls also record ten integer arguments.
    pub args: &'a [String],
    /// Patterns probed at entry only.
    pub entries: &'a [String],
    /// The MPI library's `MPI_*` with arguments.
    pub mpi: bool,
    /// USDT probes to record.
    pub usdt: &'a [String],
    /// USDT probes whose semaphores are only raised.
    pub usdt_semaphores: &'a [String],
    /// CPython's function probes.
    pub python: bool,
}

/// [`ProbeChoice`] parsed: function patterns, USDT probes, USDT semaphores.
pub type ParsedProbes = (Vec<FunctionPattern>, Vec<UsdtPattern>, Vec<UsdtPattern>);

impl ProbeChoice<'_> {
    /// Parses every pattern and expands the presets.
    pub fn parse(&self) -> Result<ParsedProbes, RecordError> {
        let mut functions = Vec::new();
        for p in self.functions {
            functions.push(FunctionPattern::parse(p, false)?);
        }
        for p in self.args {
            functions.push(FunctionPattern::parse(p, true)?);
        }
        for p in self.entries {
            functions.push(FunctionPattern::parse_entries(p)?);
        }
        if self.mpi {
            // Only the C functions: a call through a language binding
            // (Fortran's `mpi_send_`) is seen at the C function it makes,
            // whose entry record then keeps the top of the stack, where the
            // binding's return address into the program is (one trap pair
            // per call, not a third trap at the binding's entry).
            functions.push(FunctionPattern::parse(MPI_PATTERN, true)?);
        }
        let mut usdt = Vec::new();
        for p in self.usdt {
            usdt.push(UsdtPattern::parse(p)?);
        }
        let mut semaphores = Vec::new();
        for p in self.usdt_semaphores {
            semaphores.push(UsdtPattern::parse(p)?);
        }
        if self.python {
            for p in PYTHON_PROBES {
                usdt.push(UsdtPattern::parse(p)?);
            }
            semaphores.push(UsdtPattern::parse(PYTHON_SEMAPHORE)?);
        }
        Ok((functions, usdt, semaphores))
    }
}

/// Errors of a recording.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not running as root.
    #[error("the tracer needs root to load eBPF programs and attach probes (run it with sudo)")]
    NotRoot,
    /// No target was given.
    #[error("nothing to trace: give -p PID, --exe PATH or -- COMMAND")]
    NoTarget,
    /// `--exe` names no executable file.
    #[error("executable {path} does not exist")]
    NoExecutable {
        /// The path.
        path: PathBuf,
    },
    /// The command could not be started.
    #[error("cannot start {command}")]
    Spawn {
        /// The command.
        command: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Every target was skipped.
    #[error("no target can be traced: {reasons}")]
    NothingUsable {
        /// Each target and why it was skipped.
        reasons: String,
    },
    /// The ring size is invalid.
    #[error("ring buffer size {0} is not a power of two of at least 4096 bytes")]
    RingSize(u32),
    /// A sub-step failed.
    #[error(transparent)]
    Proc(#[from] ProcError),
    /// Resolving functions failed.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// Reading an object failed.
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// tracefs could not be mounted.
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    /// Loading or attaching failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Reading or selecting USDT probes failed.
    #[error(transparent)]
    Usdt(#[from] UsdtError),
    /// Writing the capture failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// An I/O error with the event loop.
    #[error("event loop i/o")]
    Io(#[from] std::io::Error),
}

/// What a recording did, printed at the end and returned to callers.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Why it stopped.
    pub reason: String,
    /// Wall time recorded.
    pub elapsed: Duration,
    /// Records written by kind name.
    pub records: BTreeMap<&'static str, u64>,
    /// Loss counters by name (non-zero ones matter).
    pub losses: BTreeMap<String, u64>,
    /// Processes traced (pid, comm).
    pub processes: Vec<(u32, String)>,
    /// Function probes attached.
    pub probes: usize,
    /// USDT probe sites attached.
    pub usdt_probes: usize,
    /// Capture size in bytes.
    pub bytes: u64,
    /// Capture path.
    pub output: PathBuf,
    /// Exit status of a command target.
    pub command_status: Option<std::process::ExitStatus>,
}

impl Summary {
    /// Records lost in total.
    pub fn lost(&self) -> u64 {
        self.losses.get("ring_full").copied().unwrap_or(0)
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total: u64 = self.records.values().sum();
        writeln!(
            f,
            "recorded {total} events in {:.2} s into {} ({} bytes); stopped: {}",
            self.elapsed.as_secs_f64(),
            self.output.display(),
            self.bytes,
            self.reason
        )?;
        let by_kind: Vec<String> = self
            .records
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(
            f,
            "  events: {}",
            if by_kind.is_empty() {
                "none".to_string()
            } else {
                by_kind.join(", ")
            }
        )?;
        // Each counter with its own meaning and advice: samples kept
        // without a user frame are not losses, and growing the ring only
        // helps when the ring was full.
        let lines =
            tracer_common::stats::summary_lines(self.losses.iter().map(|(k, n)| (k.as_str(), *n)));
        if !lines.iter().any(|l| l.starts_with("LOSSES:")) {
            writeln!(f, "  losses: none")?;
        }
        for l in lines {
            writeln!(f, "  {l}")?;
        }
        let procs: Vec<String> = self
            .processes
            .iter()
            .take(12)
            .map(|(p, c)| format!("{c}[{p}]"))
            .collect();
        let more = self.processes.len().saturating_sub(12);
        write!(
            f,
            "  processes: {}",
            if procs.is_empty() {
                "none".to_string()
            } else {
                procs.join(" ")
            }
        )?;
        if more > 0 {
            write!(f, " and {more} more")?;
        }
        write!(f, "; function probes: {}", self.probes)?;
        if self.usdt_probes > 0 {
            write!(f, ", USDT probes: {}", self.usdt_probes)?;
        }
        writeln!(f)
    }
}

/// How a recording is going, once a second (the live line on a terminal).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Since recording started.
    pub elapsed: Duration,
    /// Records written so far.
    pub records: u64,
    /// Records per second over the last interval.
    pub rate: f64,
    /// Records lost so far (ring full).
    pub lost: u64,
    /// Other loss counters that are not zero.
    pub other_losses: u64,
    /// Processes traced now.
    pub processes: usize,
    /// Capture size so far, bytes.
    pub bytes: u64,
}

/// Name of a record kind, for summaries.
pub fn kind_name(kind: u16) -> &'static str {
    match kind {
        kind::FUNC_ENTRY
        | kind::FUNC_ENTRY_ARGS
        | kind::FUNC_ENTRY_STACK
        | kind::FUNC_ENTRY_FRAME => "entry",
        kind::FUNC_RETURN => "return",
        kind::SYSCALL => "syscall",
        kind::SAMPLE => "sample",
        kind::LIFECYCLE => "lifecycle",
        kind::TCP_RETRANSMIT | kind::TCP_RETRANSMIT_SOCK => "tcp_retransmit",
        kind::USDT => "usdt",
        kind::USDT_STRING => "usdt_string",
        kind::FILE_IO => "file_io",
        kind::BLOCK_IO => "block_io",
        kind::NET_DEV => "net_dev",
        kind::NET_SNMP => "net_snmp",
        kind::DEVICE_NAME => "device_name",
        kind::NET_ADDR => "net_addr",
        kind::CPU_TIMES => "cpu_times",
        kind::ENROLL => "enroll",
        kind::BLOCKED_STACK => "blocked",
        _ => "unknown",
    }
}

/// The recorder's periodic work (drain, counters, flush, live progress
/// once a second); returns a reason to stop.
fn periodic(
    session: &mut Session,
    progress: &mut dyn FnMut(&str),
    live: &mut dyn FnMut(&Progress),
    started: std::time::Instant,
    (last_at, last_records): &mut (std::time::Instant, u64),
) -> Result<Option<String>, RecordError> {
    let stop = session.tick()?;
    for line in session.take_notices() {
        progress(&line);
    }
    if stop.is_some() {
        return Ok(stop);
    }
    if last_at.elapsed() >= Duration::from_secs(1) {
        let records: u64 = session.records().iter().sum();
        let losses = session.losses();
        let lost = losses.get("ring_full").copied().unwrap_or(0);
        live(&Progress {
            elapsed: started.elapsed(),
            records,
            rate: (records - (*last_records).min(records)) as f64 / last_at.elapsed().as_secs_f64(),
            lost,
            other_losses: losses.values().sum::<u64>() - lost,
            processes: session.live_processes().count(),
            bytes: session.current_file().1,
        });
        (*last_at, *last_records) = (std::time::Instant::now(), records);
    }
    Ok(None)
}

/// Runs a recording to its end and returns its summary. `progress` receives
/// one-line status messages meant for a person (attach steps, notes) and,
/// last, the multi-line summary (before the slow detach); `live` receives
/// the recording's [`Progress`] once a second.
pub async fn record(
    config: RecordConfig,
    progress: &mut dyn FnMut(&str),
    live: &mut dyn FnMut(&Progress),
) -> Result<Summary, RecordError> {
    // Handlers first: a signal that comes right after "recording" is
    // printed (a script that starts a tracer and stops it soon, on a loaded
    // machine) must stop the recording cleanly, not kill the process.
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut session = Session::start(&config, progress).await?;
    progress(&format!(
        "recording {} process(es) into {}; Ctrl-C to stop",
        session.live_processes().count(),
        config.output.display()
    ));
    let mut tick = tokio::time::interval(config.flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline = config.duration.map(|d| tokio::time::Instant::now() + d);
    let started = std::time::Instant::now();
    let mut live_at = (started, 0u64);
    // When the periodic work last ran. A ring that is never empty (a busy
    // server) keeps `session.next()` ready, and the interval's tick alone
    // then lost to it for seconds on end: no counters, no CPU times, no
    // flush until the load eased (issue 16: a chunkserver's first 7 s of
    // 22 had none). The drain branch runs the work too once it is due.
    let mut last_tick = std::time::Instant::now();
    let reason = loop {
        let sleep_until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let due = tokio::select! {
            activity = session.next() => {
                if let Activity::CommandExited(_) = activity?
                    && let Some(reason) = session.command_done()
                {
                    break reason;
                }
                last_tick.elapsed() >= config.flush_interval
            }
            _ = tick.tick() => true,
            _ = sleep_until => break "duration reached".to_string(),
            _ = sigint.recv() => break "interrupted (SIGINT)".to_string(),
            _ = sigterm.recv() => break "terminated (SIGTERM)".to_string(),
        };
        if due {
            last_tick = std::time::Instant::now();
            if let Some(reason) = periodic(&mut session, progress, live, started, &mut live_at)? {
                break reason;
            }
        }
    };
    session.finish(reason, progress).await
}
