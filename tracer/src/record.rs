//! A recording session: resolve targets and functions, load and attach the
//! programs, drain the ring into a capture file until told to stop, and
//! account for everything that was lost.

use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    ffi::OsString,
    io::Write as _,
    os::fd::{AsRawFd as _, OwnedFd},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
};
use tracer_common::{
    capture::{CaptureHeader, ClockRef, End, FORMAT_VERSION, Meta, RecordSettings, Stats, Symbol},
    record::{
        self, Header, Lifecycle, Pod as _, SYSCALL_UNFINISHED, SockAddr, Syscall, kind, lifecycle,
    },
};

use crate::{
    elf::{ElfError, ElfSymbols, file_offset},
    loader::{LoadError, LoadOptions, Loaded},
    procfs::{self, ProcError},
    sink::{Sink, SinkError},
    targets::{self, FunctionPattern, TargetError, TargetObjects},
    tracefs::{self, TracefsError},
    usdt::{self, UsdtError, UsdtPattern, UsdtSite},
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

/// Settings of a recording.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// What to trace.
    pub targets: Vec<Target>,
    /// Function patterns.
    pub functions: Vec<FunctionPattern>,
    /// Functions that get empty probes (benchmarks: the bare uprobe cost).
    pub empty_probes: Vec<FunctionPattern>,
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
    /// Trace socket system calls.
    pub syscalls: bool,
    /// Sampling frequency (0: off).
    pub sample_hz: u64,
    /// Sample every process on the node.
    pub sample_all: bool,
    /// Follow children of traced processes.
    pub follow: bool,
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
}

impl Default for RecordConfig {
    fn default() -> Self {
        Self {
            targets: Vec::new(),
            functions: Vec::new(),
            empty_probes: Vec::new(),
            usdt: Vec::new(),
            usdt_semaphores: Vec::new(),
            usdt_empty: Vec::new(),
            uprobe_multi: true,
            syscalls: true,
            sample_hz: 0,
            sample_all: false,
            follow: true,
            ring_bytes: 8 << 20,
            wakeup_bytes: 512 << 10,
            chunk_bytes: 1 << 20,
            flush_interval: Duration::from_millis(100),
            duration: None,
            output: PathBuf::from("trace.capture"),
            argv: Vec::new(),
        }
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
        let losses: Vec<String> = self
            .losses
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        if losses.is_empty() {
            writeln!(f, "  losses: none")?;
        } else {
            writeln!(
                f,
                "  LOSSES: {} (grow --ring-size or trace fewer functions)",
                losses.join(", ")
            )?;
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

/// Name of a record kind, for summaries.
pub fn kind_name(kind: u16) -> &'static str {
    match kind {
        kind::FUNC_ENTRY | kind::FUNC_ENTRY_ARGS => "entry",
        kind::FUNC_RETURN => "return",
        kind::SYSCALL => "syscall",
        kind::SAMPLE => "sample",
        kind::LIFECYCLE => "lifecycle",
        kind::TCP_RETRANSMIT => "tcp_retransmit",
        kind::USDT => "usdt",
        kind::USDT_STRING => "usdt_string",
        _ => "unknown",
    }
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` now, ns (the clock of `bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buffer and its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn capture_header(config: &RecordConfig) -> CaptureHeader {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    // Read the two clocks back to back; the pair converts record times to wall time.
    let monotonic_ns = monotonic_ns();
    let realtime_ns = clock(libc::CLOCK_REALTIME);
    CaptureHeader {
        format_version: FORMAT_VERSION,
        tool: format!("tracer {}", env!("CARGO_PKG_VERSION")),
        host: host_name(),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        kernel: read("/proc/sys/kernel/osrelease"),
        clock: ClockRef {
            monotonic_ns,
            realtime_ns,
        },
        argv: config.argv.clone(),
        settings: RecordSettings {
            function_patterns: config
                .functions
                .iter()
                .map(|p| p.as_str().to_string())
                .collect(),
            syscalls: config.syscalls,
            sample_hz: config.sample_hz,
            sample_all: config.sample_all,
            follow_children: config.follow,
            ring_bytes: u64::from(config.ring_bytes),
        },
    }
}

/// Resolves a command's program like `execvp` does.
fn which(program: &OsString) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 {
        return p.canonicalize().ok();
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(p))
        .find(|c| c.is_file())
}

/// A started command, held before `exec` until tracing is armed.
struct Held {
    pid: u32,
    release: Option<OwnedFd>,
    exited: tokio::task::JoinHandle<Option<std::process::ExitStatus>>,
}

/// Forks `argv` and holds the child before `exec` until [`Held::release`]
/// is written to, so the program is traced from its first instruction.
/// (`std::process::Command::spawn` cannot be used: it waits for the exec.)
fn spawn_held(argv: &[OsString], path: &Path) -> Result<Held, RecordError> {
    use std::{ffi::CString, os::unix::ffi::OsStrExt as _};
    let command = argv
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let spawn_err = |source| RecordError::Spawn {
        command: command.clone(),
        source,
    };
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| spawn_err(std::io::Error::other(e)))?;
    let c_args = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| spawn_err(std::io::Error::other(e)))?;
    let mut c_argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    c_argv.push(std::ptr::null());
    let mut fds = [0; 2];
    // SAFETY: valid array of two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(spawn_err(std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 returned two fresh fds that we own.
    let (read_end, write_end) = unsafe {
        use std::os::fd::FromRawFd as _;
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    // SAFETY: the child calls only async-signal-safe functions (close, read,
    // execv, _exit) on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(spawn_err(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            libc::close(write_end.as_raw_fd());
            let mut byte = 0u8;
            let n = libc::read(read_end.as_raw_fd(), (&raw mut byte).cast(), 1);
            if n == 1 {
                libc::execv(c_path.as_ptr(), c_argv.as_ptr());
            }
            libc::_exit(127);
        }
    }
    drop(read_end);
    let pid = pid as u32;
    let exited = tokio::task::spawn_blocking(move || {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        use std::os::unix::process::ExitStatusExt as _;
        (rc == pid as libc::pid_t).then(|| std::process::ExitStatus::from_raw(status))
    });
    Ok(Held {
        pid,
        release: Some(write_end),
        exited,
    })
}

/// Process bookkeeping while recording: which pids were seen, snapshotted,
/// which objects' symbols were written.
struct Tracker {
    snapshotted: HashSet<u32>,
    objects_written: HashSet<String>,
    elf_cache: BTreeMap<PathBuf, ElfSymbols>,
    kernel_ips: BTreeSet<u64>,
    kernel_written: HashSet<u64>,
    kallsyms: Option<Vec<(u64, String)>>,
    roots: BTreeSet<u32>,
    live: BTreeSet<u32>,
    comms: BTreeMap<u32, String>,
    pending_objects: Vec<PathBuf>,
}

impl Tracker {
    fn new() -> Self {
        Self {
            snapshotted: HashSet::new(),
            objects_written: HashSet::new(),
            elf_cache: BTreeMap::new(),
            kernel_ips: BTreeSet::new(),
            kernel_written: HashSet::new(),
            kallsyms: None,
            roots: BTreeSet::new(),
            live: BTreeSet::new(),
            comms: BTreeMap::new(),
            pending_objects: Vec::new(),
        }
    }

    /// Looks at one record on the hot path: set lookups only, except for
    /// the first record of a process and for lifecycle records (rare), which
    /// snapshot `/proc` right away, while the process still exists.
    #[inline]
    fn observe(
        &mut self,
        header: &Header,
        bytes: &[u8],
        loaded: &mut Loaded,
        sink: &mut Sink,
    ) -> Result<(), RecordError> {
        if header.kind == kind::LIFECYCLE {
            if let Some(lc) = Lifecycle::read_from(bytes) {
                match lc.event {
                    lifecycle::FORK
                        if lc.child_tid != header.pid && loaded.is_traced(lc.child_tid) =>
                    {
                        loaded.register_sockets(lc.child_tid);
                        // A new process (a new thread's snapshot fails: not a tgid).
                        if !self.snapshotted.contains(&lc.child_tid) {
                            self.snapshot(lc.child_tid, true, sink)?;
                        }
                    }
                    // A new image: new maps.
                    lifecycle::EXEC => self.snapshot(header.pid, true, sink)?,
                    lifecycle::EXIT if lc.group_dead != 0 => {
                        self.live.remove(&header.pid);
                    }
                    _ => {}
                }
            }
        } else if header.kind == kind::SAMPLE
            && let Some(s) = record::Sample::read_from(bytes)
            && s.kernel_ip != 0
        {
            self.kernel_ips.insert(s.kernel_ip);
        }
        if header.pid != 0 && !self.snapshotted.contains(&header.pid) {
            let traced = (header.kind != kind::SAMPLE && header.kind != kind::TCP_RETRANSMIT)
                || loaded.is_traced(header.pid);
            // A retransmit runs in whatever task the softirq interrupted: its
            // addresses matter, that task does not.
            if header.kind == kind::TCP_RETRANSMIT && !traced {
                return Ok(());
            }
            if traced {
                // Sockets it already had (an --exe process enrolled itself in
                // the kernel; inherited descriptors, socketpairs).
                loaded.register_sockets(header.pid);
            }
            self.snapshot(header.pid, traced, sink)?;
        }
        Ok(())
    }

    /// Writes a snapshot of `pid` now; its objects' symbols follow in [`Tracker::settle`].
    fn snapshot(&mut self, pid: u32, traced: bool, sink: &mut Sink) -> Result<(), RecordError> {
        self.snapshotted.insert(pid);
        let Ok(info) = procfs::snapshot(pid, monotonic_ns(), traced) else {
            return Ok(());
        };
        if traced {
            self.live.insert(pid);
        }
        self.comms.insert(pid, info.comm.clone());
        for map in &info.maps {
            if map.path.starts_with('/') && !self.objects_written.contains(&map.path) {
                self.objects_written.insert(map.path.clone());
                self.pending_objects.push(PathBuf::from(&map.path));
            }
        }
        sink.meta(&Meta::Process(info))?;
        Ok(())
    }

    /// Writes the symbol tables of newly seen objects and kernel symbols.
    fn settle(&mut self, sink: &mut Sink) -> Result<(), RecordError> {
        for path in std::mem::take(&mut self.pending_objects) {
            if !self.elf_cache.contains_key(&path) {
                match ElfSymbols::read(&path) {
                    Ok(elf) => {
                        self.elf_cache.insert(path.clone(), elf);
                    }
                    Err(e) => {
                        log::debug!("no symbols for {}: {e}", path.display());
                        continue;
                    }
                }
            }
            sink.meta(&Meta::Object(self.elf_cache[&path].table.clone()))?;
        }
        self.write_kernel_symbols(sink)
    }

    fn write_kernel_symbols(&mut self, sink: &mut Sink) -> Result<(), RecordError> {
        if self.kernel_ips.is_empty() {
            return Ok(());
        }
        let kallsyms = self.kallsyms.get_or_insert_with(read_kallsyms);
        let mut new = Vec::new();
        for ip in std::mem::take(&mut self.kernel_ips) {
            let idx = kallsyms.partition_point(|(addr, _)| *addr <= ip);
            let Some((addr, name)) = idx.checked_sub(1).and_then(|i| kallsyms.get(i)) else {
                continue;
            };
            if self.kernel_written.insert(*addr) {
                new.push(Symbol {
                    addr: *addr,
                    size: 0,
                    name: name.clone(),
                });
            }
        }
        if !new.is_empty() {
            sink.meta(&Meta::KernelSymbols { symbols: new })?;
        }
        Ok(())
    }
}

fn read_kallsyms() -> Vec<(u64, String)> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let mut syms: Vec<(u64, String)> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
            let kind = parts.next()?;
            let name = parts.next()?;
            (addr != 0 && matches!(kind, "t" | "T" | "w" | "W")).then(|| (addr, name.to_string()))
        })
        .collect();
    syms.sort_unstable();
    syms
}

/// Runs a recording to its end and returns its summary. `progress` receives
/// one-line status messages meant for a person (attach steps, notes) and,
/// last, the multi-line summary (before the slow detach).
pub async fn record(
    config: RecordConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<Summary, RecordError> {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(RecordError::NotRoot);
    }
    if config.targets.is_empty() {
        return Err(RecordError::NoTarget);
    }
    if !config.ring_bytes.is_power_of_two() || config.ring_bytes < 4096 {
        return Err(RecordError::RingSize(config.ring_bytes));
    }
    let started = Instant::now();

    // 1. Resolve every target and the functions to probe, before touching the kernel.
    let mut probes = Vec::new();
    let mut empty_probes = Vec::new();
    let mut elf_cache = BTreeMap::new();
    let mut enroll = Vec::new();
    let mut root_pids = Vec::new();
    let mut command = None;
    let mut usdt_sites: Vec<UsdtSite> = Vec::new();
    for target in &config.targets {
        let objects = match target {
            Target::Pid(pid) => {
                if !procfs::exists(*pid) {
                    return Err(ProcError::NoSuchProcess { pid: *pid }.into());
                }
                root_pids.push(*pid);
                TargetObjects::of_pid(*pid)?
            }
            Target::Exe(path) => {
                let path = path
                    .canonicalize()
                    .map_err(|_| RecordError::NoExecutable { path: path.clone() })?;
                let elf = ElfSymbols::read(&path)?;
                let entry =
                    file_offset(&elf.table.segments, elf.entry).ok_or(TargetError::NoSegment {
                        object: path.display().to_string(),
                        symbol: "entry point".into(),
                        vaddr: elf.entry,
                    })?;
                enroll.push((path.clone(), entry));
                TargetObjects::of_executable(&path)
            }
            Target::Command(argv) => {
                let program = argv.first().ok_or(RecordError::NoTarget)?;
                let path = which(program).ok_or_else(|| RecordError::Spawn {
                    command: program.to_string_lossy().into_owned(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                })?;
                command = Some((argv.clone(), path.clone()));
                TargetObjects::of_executable(&path)
            }
        };
        if !config.usdt.is_empty()
            || !config.usdt_semaphores.is_empty()
            || !config.usdt_empty.is_empty()
        {
            let searched: Vec<PathBuf> = std::iter::once(objects.exe.clone())
                .chain(objects.libs.iter().cloned())
                .collect();
            let all = usdt::sites_of(&objects)?;
            let mut chosen = usdt::select(&config.usdt, &all, &searched)?;
            let wanted = usdt::select(&config.usdt_semaphores, &all, &searched)?;
            let holders = usdt::semaphore_holders(&wanted, &all, &chosen);
            for h in &holders {
                progress(&format!(
                    "{}: semaphore raised{}",
                    h.full_name(),
                    if h.vaddr
                        == wanted
                            .iter()
                            .find(|w| w.semaphore_offset == h.semaphore_offset)
                            .map_or(0, |w| w.vaddr)
                    {
                        " by a silent probe at its own site (a trap per hit)".to_string()
                    } else {
                        format!(" by a silent probe at {:#x}, a site never reached", h.vaddr)
                    }
                ));
            }
            chosen.extend(holders);
            for site in usdt::select(&config.usdt_empty, &all, &searched)? {
                chosen.push(UsdtSite {
                    silent: true,
                    ..site
                });
            }
            for site in chosen {
                if !usdt_sites
                    .iter()
                    .any(|s| s.object == site.object && s.file_offset == site.file_offset)
                {
                    // Fail now, before touching the kernel, on a spec we cannot decode.
                    site.spec()?;
                    usdt_sites.push(site);
                }
            }
            let names: Vec<String> = config
                .usdt
                .iter()
                .chain(&config.usdt_semaphores)
                .chain(&config.usdt_empty)
                .map(|p| p.as_str().to_string())
                .collect();
            progress(&format!(
                "{}: {} USDT probe site(s) in {}",
                names.join(", "),
                usdt_sites.len(),
                objects.exe.display()
            ));
        }
        if !config.empty_probes.is_empty() {
            targets::resolve(
                &config.empty_probes,
                &objects,
                &mut empty_probes,
                &mut elf_cache,
            )?;
        }
        if !config.functions.is_empty() {
            let resolved =
                targets::resolve(&config.functions, &objects, &mut probes, &mut elf_cache)?;
            for (pattern, r) in config.functions.iter().zip(resolved) {
                let names: Vec<String> =
                    r.objects.iter().map(|p| p.display().to_string()).collect();
                progress(&format!(
                    "{}: {} function(s) in {}{}",
                    pattern.as_str(),
                    r.functions,
                    names.join(", "),
                    if r.from_system {
                        format!(
                            " (not loaded by {} itself: probed for the processes that load it)",
                            objects.exe.display()
                        )
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }

    // 2. Load and attach.
    if tracefs::ensure_mounted()? {
        progress(&format!("mounted tracefs at {}", tracefs::TRACEFS));
    }
    let mut loaded = Loaded::load(&LoadOptions {
        ring_bytes: config.ring_bytes,
        wakeup_bytes: config.wakeup_bytes.min(u64::from(config.ring_bytes) / 2),
        sample_all: config.sample_all,
        follow_children: config.follow,
        syscalls: config.syscalls,
        offsets: tracefs::tracepoint_offsets(),
        uprobe_multi: config.uprobe_multi,
    })?;
    let attach_started = Instant::now();
    loaded.attach_lifecycle()?;
    if config.syscalls {
        let missing = loaded.attach_syscalls()?;
        if !missing.is_empty() {
            progress(&format!(
                "this kernel has no tracepoints for: {}",
                missing.join(", ")
            ));
        }
        if !loaded.attach_tcp()? {
            progress(
                "this kernel has no tcp:tcp_retransmit_skb tracepoint; retransmits are not recorded",
            );
        }
    }
    if config.sample_hz > 0 {
        let cpus = loaded.attach_sampling(config.sample_hz)?;
        progress(&format!(
            "sampling at {} Hz on {cpus} cpus",
            config.sample_hz
        ));
    }
    loaded.attach_probes(&probes)?;
    for probe in &empty_probes {
        loaded.attach_empty_probe(probe)?;
    }
    for (exe, offset) in &enroll {
        loaded.attach_enroll(exe, *offset)?;
    }
    progress(&format!(
        "attached {} function probes ({} links{}) in {:.0} ms",
        probes.len(),
        loaded.links,
        if loaded.multi_link_count > 0 {
            format!(", {} of them uprobe_multi", loaded.multi_link_count)
        } else {
            String::new()
        },
        attach_started.elapsed().as_secs_f64() * 1e3
    ));

    // 3. Open the capture and mark the targets.
    let mut sink = Sink::create(&config.output, &capture_header(&config), config.chunk_bytes)?;
    sink.meta(&Meta::Probes {
        probes: probes.clone(),
    })?;
    if !usdt_sites.is_empty() {
        sink.meta(&Meta::UsdtProbes {
            probes: usdt_sites
                .iter()
                .enumerate()
                .map(|(id, s)| s.meta(id as u32))
                .collect(),
        })?;
    }
    let mut tracker = Tracker::new();
    tracker.elf_cache = elf_cache;
    // Probed objects' symbols go in even if no snapshot of a process
    // catches them mapped: the analyzer can place them from the probe hits.
    for probe in &probes {
        if tracker.objects_written.insert(probe.object.clone()) {
            tracker.pending_objects.push(PathBuf::from(&probe.object));
        }
    }
    for pid in &root_pids {
        loaded.trace_pid(*pid, true)?;
        tracker.roots.insert(*pid);
        tracker.snapshot(*pid, true, &mut sink)?;
        if config.follow {
            let mut stack = procfs::children(*pid);
            while let Some(child) = stack.pop() {
                loaded.trace_pid(child, false)?;
                tracker.snapshot(child, true, &mut sink)?;
                stack.extend(procfs::children(child));
            }
        }
    }
    for (exe, _) in &enroll {
        // Processes already running the executable; new ones enrol themselves.
        for pid in running_instances(exe) {
            loaded.trace_pid(pid, true)?;
            tracker.snapshot(pid, true, &mut sink)?;
        }
    }
    let mut held = match &command {
        Some((argv, path)) => {
            let held = spawn_held(argv, path)?;
            let pid = held.pid;
            loaded.trace_pid(pid, true)?;
            tracker.roots.insert(pid);
            tracker.live.insert(pid);
            Some(held)
        }
        None => None,
    };
    if !usdt_sites.is_empty() {
        // Semaphores count who listens: probe only the traced processes
        // where they are known (a raised `line` semaphore slows every other
        // interpreter on the node), every process of the object for --exe.
        let pids: Vec<u32> = if enroll.is_empty() {
            tracker.live.iter().copied().collect()
        } else {
            Vec::new()
        };
        let usdt_started = Instant::now();
        loaded.attach_usdt(&usdt_sites, &pids)?;
        progress(&format!(
            "attached {} USDT probe site(s) for {} in {:.0} ms",
            usdt_sites.len(),
            if pids.is_empty() {
                "every process of their objects".to_string()
            } else {
                format!("{} process(es)", pids.len())
            },
            usdt_started.elapsed().as_secs_f64() * 1e3
        ));
    }
    tracker.settle(&mut sink)?;
    if let Some(fd) = held.as_mut().and_then(|h| h.release.take()) {
        // Release the command: it execs now, traced.
        std::fs::File::from(fd).write_all(&[1])?;
    }

    progress(&format!(
        "recording {} process(es) into {}; Ctrl-C to stop",
        tracker.live.len(),
        config.output.display()
    ));

    // 4. Drain until a stop condition.
    let ring = loaded
        .take_ring()
        .ok_or(RecordError::Io(std::io::Error::other(
            "ring buffer already taken",
        )))?;
    // SAFETY: the ring's fd stays open while the AsyncFd owns the ring.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(|e| RecordError::Io(std::io::Error::other(e.to_string())))?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut tick = tokio::time::interval(config.flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline = config.duration.map(|d| tokio::time::Instant::now() + d);
    let mut last_stats = Instant::now();
    let mut command_status = None;
    let has_pid_targets = !root_pids.is_empty() || held.is_some();
    let has_exe_targets = !enroll.is_empty();
    let reason = loop {
        let sleep_until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let child_exit = async {
            match &mut held {
                Some(h) => (&mut h.exited).await.ok().flatten(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                guard.clear_ready();
                drain(guard.get_inner_mut(), &mut sink, &mut tracker, &mut loaded)?;
            }
            _ = tick.tick() => {
                drain(ring.get_mut(), &mut sink, &mut tracker, &mut loaded)?;
                tracker.settle(&mut sink)?;
                sink.flush()?;
                loaded.flush_logs();
                if last_stats.elapsed() >= Duration::from_secs(1) {
                    last_stats = Instant::now();
                    write_stats(&loaded, &mut sink)?;
                }
                if has_pid_targets && !has_exe_targets && command_status.is_none() {
                    tracker.live.retain(|pid| procfs::exists(*pid));
                    if tracker.live.is_empty() {
                        break "targets exited".to_string();
                    }
                }
            }
            status = child_exit => {
                command_status = status;
                held = None;
                if !has_exe_targets {
                    // Let the last records of the command's children arrive.
                    tracker.live.retain(|pid| procfs::exists(*pid));
                    if tracker.live.is_empty() {
                        break "command exited".to_string();
                    }
                }
            }
            _ = sleep_until => break "duration reached".to_string(),
            _ = sigint.recv() => break "interrupted (SIGINT)".to_string(),
            _ = sigterm.recv() => break "terminated (SIGTERM)".to_string(),
        }
    };

    // 5. Final drain, unfinished system calls, counters, end marker.
    drain(ring.get_mut(), &mut sink, &mut tracker, &mut loaded)?;
    let stop_ns = monotonic_ns();
    for (tid, enter) in loaded.inflight() {
        let pid = tgid_of(tid);
        if pid == 0 || !loaded.is_traced(pid) {
            continue;
        }
        let rec = Syscall {
            header: Header {
                ts_ns: stop_ns,
                pid,
                tid,
                kind: kind::SYSCALL,
                size: size_of::<Syscall>() as u16,
                cpu: 0,
            },
            enter_ns: enter.ts_ns,
            nr: enter.nr,
            fd: enter.fd,
            ret: 0,
            arg: enter.arg,
            flags: SYSCALL_UNFINISHED,
            _pad: 0,
            addr: SockAddr::default(),
        };
        sink.push(rec.as_bytes(), &rec.header)?;
    }
    tracker.settle(&mut sink)?;
    let losses = write_stats(&loaded, &mut sink)?;
    sink.meta(&Meta::End(End {
        stop_ns,
        reason: reason.clone(),
    }))?;
    sink.flush()?;
    loaded.flush_logs();
    if let Some(h) = held {
        // Recording stopped before the command ended: end it too.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(h.pid as libc::pid_t, libc::SIGTERM) };
        command_status = h.exited.await.ok().flatten();
    }

    let mut records = BTreeMap::new();
    for (kind, n) in sink.counts.iter().enumerate() {
        if *n > 0 {
            *records.entry(kind_name(kind as u16)).or_insert(0) += n;
        }
    }
    let processes = tracker
        .comms
        .iter()
        .filter(|(pid, _)| {
            tracker.roots.contains(pid)
                || loaded.is_traced(**pid)
                || tracker.live.contains(pid)
                || !config.sample_all
        })
        .map(|(pid, comm)| (*pid, comm.clone()))
        .collect();
    let summary = Summary {
        reason,
        elapsed: started.elapsed(),
        records,
        losses,
        processes,
        probes: probes.len(),
        usdt_probes: usdt_sites.len(),
        bytes: sink.bytes(),
        output: sink.path().to_path_buf(),
        command_status,
    };
    // Tell the user before detaching: the kernel takes an RCU grace period
    // per tracepoint and uprobe link, seconds in all (see Loaded::detach).
    progress(&summary.to_string());
    loaded.detach();
    Ok(summary)
}

fn tgid_of(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Tgid:")
                    .map(|v| v.trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0)
}

fn running_instances(exe: &Path) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| procfs::exe(*pid).is_ok_and(|p| p == exe))
        .collect()
}

fn write_stats(loaded: &Loaded, sink: &mut Sink) -> Result<BTreeMap<String, u64>, RecordError> {
    let counters = loaded.read_stats();
    sink.meta(&Meta::Stats(Stats {
        at_ns: monotonic_ns(),
        counters: counters.clone(),
        records_written: sink.records(),
    }))?;
    Ok(counters)
}

/// Moves every available record from the ring into the capture.
fn drain(
    ring: &mut RingBuf<MapData>,
    sink: &mut Sink,
    tracker: &mut Tracker,
    loaded: &mut Loaded,
) -> Result<(), RecordError> {
    while let Some(item) = ring.next() {
        let bytes: &[u8] = &item;
        let Some(header) = Header::read_from(bytes) else {
            continue;
        };
        tracker.observe(&header, bytes, loaded, sink)?;
        sink.push(bytes, &header)?;
    }
    Ok(())
}
