//! One recording session: resolve targets and functions, load and attach the
//! programs, drain the ring into a capture file, and account for everything
//! that was lost. `tracer record` runs one session to its end; the agent runs
//! sessions for as long as it lives, rotating their capture files.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    ffi::OsString,
    io::Write as _,
    os::fd::{AsRawFd as _, OwnedFd},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use tracer_common::{
    capture::{
        CaptureHeader, ClockRef, End, FORMAT_VERSION, MapEntry, Meta, ObjectSymbols, Overhead,
        Probe, ProcessInfo, ProcessState, RawRecords, RecordSettings, Segment, Stats, Symbol,
    },
    decode::{lookup, segment_vaddr},
    record::{
        self, BlockedEntry, BlockedStack, CpuTimes, FuncEntry, Header, Lifecycle, Pod as _,
        SYSCALL_UNFINISHED, SockAddr, Syscall, blocked_flags, kind, lifecycle,
    },
};

use crate::{
    btf,
    elf::{ElfCache, ElfSymbols, file_offset},
    kstats::{KernelStats, KernelStatsConfig},
    loader::{Followed, LoadOptions, Loaded, MAX_SCOPED_PROCESSES},
    overhead::{self, Costs},
    procfs::{self, ProcError},
    record::{RecordConfig, RecordError, Summary, Target, kind_name},
    sink::Sink,
    targets::{self, TargetError, TargetObjects},
    tracefs,
    unwind::{Stack, Unwinder},
    usdt::{self, UsdtSite},
};

/// When an overhead budget first weighs the probes: soon, because until
/// then every probe runs at full cost; later intervals are
/// `--overhead-interval` long.
const FIRST_LOOK: Duration = Duration::from_millis(250);

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

/// This host's name.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buffer and its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// What of the kernel's view a session records, after asking the kernel.
#[derive(Debug, Clone, Default)]
struct KernelView {
    files: bool,
    block: bool,
    net: bool,
    /// What was asked for and this kernel cannot give.
    unavailable: Vec<String>,
}

fn capture_header(config: &RecordConfig, view: &KernelView) -> CaptureHeader {
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
            file_io: view.files,
            block_io: view.block,
            net_stats: view.net,
            stats_interval_ms: if view.files || view.block || view.net {
                config.stats_interval.as_millis() as u64
            } else {
                0
            },
            unavailable: view.unavailable.clone(),
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

/// Attaches the USDT probes for `pid`, a process a traced one forked. A
/// failure loses that process's USDT records, not the session: it may have
/// exited already.
fn follow_usdt(loaded: &mut Loaded, pid: u32) {
    match loaded.follow_usdt(pid) {
        Err(e) => log::warn!("USDT probes not attached for forked process {pid}: {e}"),
        Ok(true) => log::debug!("USDT semaphores held for forked process {pid}"),
        Ok(false) => {}
    }
}

/// Attaches the function probes for `pid`, a process a traced one forked,
/// when they fire in the traced processes only. A failure loses that
/// process's calls, not the session: it may have exited already.
/// Returns whether they were attached just now.
fn follow_probes(loaded: &mut Loaded, pid: u32) -> bool {
    match loaded.follow_probes(pid) {
        Err(e) => {
            log::warn!("function probes not attached for forked process {pid}: {e:#}");
            false
        }
        Ok(Followed::Attached) => {
            log::debug!("function probes attached for forked process {pid}");
            true
        }
        Ok(Followed::Everywhere) => {
            log::warn!(
                "more than {MAX_SCOPED_PROCESSES} traced processes: function probes now fire in every process of their objects (each hit would run every process's links)"
            );
            true
        }
        Ok(Followed::Nothing) => false,
    }
}

/// Process bookkeeping while recording: which pids were seen, snapshotted,
/// which objects' symbols were written.
struct Tracker {
    snapshotted: HashSet<u32>,
    objects_written: HashSet<String>,
    elf_cache: ElfCache,
    kernel_ips: BTreeSet<u64>,
    kernel_written: HashSet<u64>,
    kallsyms: Option<Vec<(u64, String)>>,
    roots: BTreeSet<u32>,
    live: BTreeSet<u32>,
    comms: BTreeMap<u32, String>,
    /// Objects whose symbol tables are to be written, with when each was
    /// first seen (written `tables_after` later, or at the stop).
    pending_objects: Vec<(PathBuf, Instant)>,
    /// [`RecordConfig::object_tables_after`].
    tables_after: Duration,
    /// Last snapshot of each live process and the kernel symbols written,
    /// for the next file after a rotation.
    infos: BTreeMap<u32, ProcessInfo>,
    kernel_symbols: Vec<Symbol>,
    /// Command names from lifecycle records, for processes gone too soon.
    names: BTreeMap<u32, String>,
    stubbed: HashSet<u32>,
    /// The parent of each process forked while recording: a child gone
    /// before `/proc` could be read had its parent's mappings.
    forked_from: BTreeMap<u32, u32>,
    /// When followed processes' function probes were attached (probes
    /// scoped to the traced processes), for their snapshots.
    probes_from: BTreeMap<u32, u64>,
    /// Processes whose last snapshot was taken at their exec: before the
    /// dynamic loader mapped their libraries. Snapshotted again when they
    /// fork (a child inherits what they map) or at the next tick.
    exec_snapshots: BTreeSet<u32>,
    /// When each process was last snapshotted again for an unmapped sample.
    remapped: BTreeMap<u32, u64>,
    /// The `--exe` targets, by the index their enrolment records carry.
    enrolled: Vec<Option<EnrollTarget>>,
    /// Objects only untraced processes ran (`--sample-all`): their tables
    /// hold just the symbols samples fell in (see [`SampledObject`]).
    sampled: BTreeMap<String, SampledObject>,
    /// Settles so far (the recency of [`SampledObject::used`]).
    settles: u64,
    /// Processes whose last snapshot was taken as untraced (only sampled).
    untraced: HashSet<u32>,
    /// Reads sampled-only objects' tables (started on first need).
    reader: Option<SymbolReader>,
    /// Unwinds the stacks of threads whose long system calls a signal
    /// ended (objects read once).
    unwinder: Unwinder,
    /// Bytes the traced processes' socket calls moved (read and written),
    /// from their records: the work the overhead budget weighs their CPU
    /// against ([`overhead::in_situ_factor`]). Counted only with a budget
    /// (`Some`): no other recording reads it, and each socket record
    /// would be decoded for it.
    socket_bytes: Option<u64>,
}

/// An object that only processes sampled, not traced, ran. Its whole
/// symbol table is not written: a busy host runs compilers and runtimes
/// whose tables are tens of MB each (librustc_driver: 93 k symbols, 17 MB,
/// a second to read), which made captures of seconds hundreds of MB and
/// held the drain loop up. A table of the symbols its samples fell in is
/// written instead, again whenever one is added (readers keep the last).
/// Its full table stays cached while the cache of such tables is under
/// [`SAMPLED_CACHE_BYTES`]; the least recently sampled go first.
#[derive(Default)]
struct SampledObject {
    /// File offsets of samples not yet placed in a symbol.
    pending: Vec<u64>,
    /// The table written: the object's, with the symbols samples fell in
    /// (each with a size, sorted by address); again in each new file after
    /// a rotation.
    table: Option<ObjectSymbols>,
    /// Its symbols could not be read: no use trying again.
    unreadable: bool,
    /// Bytes its full table takes in the cache (0: not cached).
    cached_bytes: usize,
    /// The last settle that placed a sample in it.
    used: u64,
}

/// Memory the full tables of sampled-only objects may take in the
/// recorder (an agent sampling a busy host for days sees every compiler
/// and runtime it runs).
const SAMPLED_CACHE_BYTES: usize = 128 << 20;

/// How long settling waits for the symbol tables of sampled-only objects
/// being read: not at all while recording (they are read off the loop,
/// which keeps draining the ring), up to this at the stop; what is left
/// then is said.
const SAMPLED_SYMBOLS_TICK: Duration = Duration::ZERO;
const SAMPLED_SYMBOLS_STOP: Duration = Duration::from_secs(3);

/// How often, and how far apart, the stop looks again at threads of the
/// traced processes that were running when it looked for blocked ones
/// (at most 40 ms more to the stop, only while some thread runs).
const BLOCKED_SETTLE_LOOKS: usize = 4;
const BLOCKED_SETTLE_STEP: Duration = Duration::from_millis(10);

/// Reads the symbol tables of sampled-only objects on a thread of its own:
/// one big table takes about a second (librustc_driver, in a release
/// build), during which the recording loop would neither drain the ring
/// nor read a new process's `/proc` before it is gone.
struct SymbolReader {
    paths: std::sync::mpsc::Sender<PathBuf>,
    tables: std::sync::mpsc::Receiver<(PathBuf, Result<ElfSymbols, String>)>,
    /// Paths sent and not yet answered.
    reading: HashSet<PathBuf>,
}

impl SymbolReader {
    fn start(debug_dirs: Vec<PathBuf>) -> Option<Self> {
        let (paths, todo) = std::sync::mpsc::channel::<PathBuf>();
        let (done, tables) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("symbols".into())
            .spawn(move || {
                // Smallest file first: a program's own table (what a hog's
                // samples need) takes milliseconds, a runtime's a second,
                // so a few big ones do not hold up many small ones.
                let mut queue = std::collections::BinaryHeap::new();
                let size = |p: &Path| std::fs::metadata(p).map_or(u64::MAX, |m| m.len());
                loop {
                    if queue.is_empty() {
                        // Ends when the tracker (the sender) is gone.
                        let Ok(path) = todo.recv() else { break };
                        queue.push(std::cmp::Reverse((size(&path), path)));
                    }
                    while let Ok(path) = todo.try_recv() {
                        queue.push(std::cmp::Reverse((size(&path), path)));
                    }
                    let Some(std::cmp::Reverse((_, path))) = queue.pop() else {
                        continue;
                    };
                    let table =
                        ElfSymbols::read_with(&path, &debug_dirs).map_err(|e| e.to_string());
                    if done.send((path, table)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| log::warn!("no thread to read symbols on: {e}"))
            .ok()?;
        Some(Self {
            paths,
            tables,
            reading: HashSet::new(),
        })
    }
}

impl Tracker {
    fn new() -> Self {
        Self {
            snapshotted: HashSet::new(),
            objects_written: HashSet::new(),
            elf_cache: ElfCache::default(),
            kernel_ips: BTreeSet::new(),
            kernel_written: HashSet::new(),
            kallsyms: None,
            roots: BTreeSet::new(),
            live: BTreeSet::new(),
            comms: BTreeMap::new(),
            pending_objects: Vec::new(),
            tables_after: Duration::ZERO,
            infos: BTreeMap::new(),
            kernel_symbols: Vec::new(),
            names: BTreeMap::new(),
            stubbed: HashSet::new(),
            forked_from: BTreeMap::new(),
            probes_from: BTreeMap::new(),
            exec_snapshots: BTreeSet::new(),
            remapped: BTreeMap::new(),
            enrolled: Vec::new(),
            sampled: BTreeMap::new(),
            settles: 0,
            untraced: HashSet::new(),
            reader: None,
            unwinder: Unwinder::new(),
            socket_bytes: None,
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
        let mut sampled_ip = 0;
        if header.kind == kind::SYSCALL
            && let Some(n) = &mut self.socket_bytes
        {
            *n = n.saturating_add(moved_bytes(bytes));
        }
        if header.kind == kind::LIFECYCLE {
            if let Some(lc) = Lifecycle::read_from(bytes) {
                match lc.event {
                    // Followed (a child that already exited has left the
                    // traced set: its fork is read late).
                    lifecycle::FORK
                        if lc.child_tid != header.pid
                            && (loaded.follows_children() || loaded.is_traced(lc.child_tid)) =>
                    {
                        loaded.register_sockets(lc.child_tid);
                        self.names.insert(lc.child_tid, comm_of(&lc.comm));
                        self.forked_from.insert(lc.child_tid, header.pid);
                        if self.exec_snapshots.remove(&header.pid) {
                            self.snapshot(header.pid, true, sink)?;
                        }
                        if procfs::is_process(lc.child_tid) {
                            follow_usdt(loaded, lc.child_tid);
                            if follow_probes(loaded, lc.child_tid) {
                                self.probes_from.insert(lc.child_tid, monotonic_ns());
                            }
                        }
                        // A new process (a new thread's snapshot fails: not a tgid).
                        if !self.snapshotted.contains(&lc.child_tid) {
                            self.snapshot(lc.child_tid, true, sink)?;
                            if !self.infos.contains_key(&lc.child_tid) {
                                // Gone already, or a thread: its first record
                                // as a process, if any, writes a stub.
                                self.snapshotted.remove(&lc.child_tid);
                            }
                        }
                    }
                    // A new image: new maps.
                    lifecycle::EXEC => {
                        // A new image: not its parent's mappings any more.
                        self.forked_from.remove(&header.pid);
                        self.names.insert(header.pid, comm_of(&lc.comm));
                        self.snapshot(header.pid, true, sink)?;
                        self.stub_if_gone(header.pid, header.ts_ns, sink)?;
                        self.exec_snapshots.insert(header.pid);
                    }
                    lifecycle::EXIT if lc.group_dead != 0 => {
                        // Gone before `/proc` could be read (its first
                        // records were read late: a loaded machine, a
                        // short life): its exit still names it.
                        self.names
                            .entry(header.pid)
                            .or_insert_with(|| comm_of(&lc.comm));
                        if self.snapshotted.contains(&header.pid) {
                            self.stub_if_gone(header.pid, header.ts_ns, sink)?;
                        }
                        self.live.remove(&header.pid);
                        self.infos.remove(&header.pid);
                        loaded.unfollow_usdt(header.pid);
                        loaded.unfollow_probes(header.pid);
                        self.probes_from.remove(&header.pid);
                    }
                    _ => {}
                }
            }
        } else if header.kind == kind::ENROLL
            && let Some(e) = record::Enroll::read_from(bytes)
        {
            // A new process of an `--exe` target (its first record, written
            // to wake us): read its /proc now, while it lives, as any
            // traced process's first record does below.
            if !self.snapshotted.contains(&header.pid) {
                loaded.register_sockets(header.pid);
                self.snapshot(header.pid, true, sink)?;
            }
            if !self.infos.contains_key(&header.pid) {
                self.place_enrolled(header.pid, &e, sink)?;
                self.stub_if_gone(header.pid, header.ts_ns, sink)?;
            }
        } else if header.kind == kind::SAMPLE
            && let Some(s) = record::Sample::read_from(bytes)
        {
            if s.kernel_ip != 0 {
                self.kernel_ips.insert(s.kernel_ip);
            }
            if s.user_ip != 0 {
                self.remap_if_unmapped(header.pid, s.user_ip, header.ts_ns, sink)?;
                sampled_ip = s.user_ip;
            }
        }
        let retransmit =
            header.kind == kind::TCP_RETRANSMIT || header.kind == kind::TCP_RETRANSMIT_SOCK;
        let is_traced = |loaded: &Loaded| {
            (header.kind != kind::SAMPLE && !retransmit) || loaded.is_traced(header.pid)
        };
        // A process first seen by a sample (`--sample-all`) and traced
        // since (a record of its own, or the kernel says so) is read again
        // as a traced one: its objects' whole tables, the live set.
        let traced_since =
            !self.untraced.is_empty() && self.untraced.contains(&header.pid) && is_traced(loaded);
        if header.pid != 0 && (traced_since || !self.snapshotted.contains(&header.pid)) {
            let traced = is_traced(loaded);
            // A retransmit runs in whatever task the softirq interrupted: its
            // addresses matter, that task does not.
            if retransmit && !traced {
                return Ok(());
            }
            if traced {
                // Sockets it already had (an --exe process enrolled itself in
                // the kernel; inherited descriptors, socketpairs).
                loaded.register_sockets(header.pid);
            }
            self.snapshot(header.pid, traced, sink)?;
            if traced {
                self.stub_if_gone(header.pid, header.ts_ns, sink)?;
            }
        }
        if sampled_ip != 0 {
            self.note_sample(header.pid, sampled_ip);
        }
        Ok(())
    }

    /// Unwinds the stack eBPF copied when a signal ended a long system call
    /// ([`record::BlockedRaw`]) into a [`BlockedStack`] record, with the
    /// process's mappings as last read (it may be gone already).
    fn blocked_raw(&mut self, bytes: &[u8], sink: &mut Sink) -> Result<(), RecordError> {
        let Some(raw) = record::BlockedRaw::read_from(bytes) else {
            return Ok(());
        };
        let pid = raw.header.pid;
        let Some(info) = self.infos.get(&pid) else {
            return Ok(());
        };
        let len = (raw.len as usize).min(raw.stack.len());
        let stack = Stack::from_bytes(raw.sp, raw.stack[..len].to_vec());
        let (frames, flags) =
            self.unwinder
                .unwind(pid, &info.maps, &stack, (raw.ip, raw.sp, Some(raw.bp)));
        let mut rec = BlockedStack {
            header: Header {
                kind: kind::BLOCKED_STACK,
                size: size_of::<BlockedStack>() as u16,
                ..raw.header
            },
            since_ns: raw.since_ns,
            nr: raw.nr,
            depth: frames.len() as u32,
            flags: flags | blocked_flags::ENDED_BY_SIGNAL,
            ..BlockedStack::default()
        };
        for (slot, frame) in rec.frames.iter_mut().zip(&frames) {
            *slot = *frame;
        }
        sink.push(rec.as_bytes(), &rec.header)?;
        Ok(())
    }

    /// Remembers where a sample of an untraced process fell, in an object
    /// whose whole table is not written, so its symbol goes in.
    fn note_sample(&mut self, pid: u32, ip: u64) {
        let Some(info) = self.infos.get(&pid).filter(|i| !i.traced) else {
            return;
        };
        let Some(map) = info
            .maps
            .iter()
            .find(|m| ip >= m.start && ip < m.end && m.path.starts_with('/'))
        else {
            return;
        };
        if self.objects_written.contains(&map.path) {
            return;
        }
        let Some(offset) = (ip - map.start).checked_add(map.offset) else {
            return;
        };
        let object = self.sampled.entry(map.path.clone()).or_default();
        // Bounded: a hot loop adds the same offsets until the next tick.
        if !object.unreadable && object.pending.len() < 1 << 16 {
            object.pending.push(offset);
        }
    }

    /// Snapshots `pid` again when it ran code at `ip` outside every mapping
    /// of its last snapshot: a library mapped since (a command target is
    /// snapshotted at its exec, before the dynamic loader maps libc; a
    /// `dlopen`), whose symbols the capture then holds too. At most once a
    /// second per process, as code no file backs (JIT) stays unmapped.
    fn remap_if_unmapped(
        &mut self,
        pid: u32,
        ip: u64,
        ts_ns: u64,
        sink: &mut Sink,
    ) -> Result<(), RecordError> {
        let Some(info) = self.infos.get(&pid) else {
            return Ok(());
        };
        if info.maps.iter().any(|m| ip >= m.start && ip < m.end) {
            return Ok(());
        }
        if self
            .remapped
            .get(&pid)
            .is_some_and(|t| ts_ns.saturating_sub(*t) < 1_000_000_000)
        {
            return Ok(());
        }
        self.remapped.insert(pid, ts_ns);
        let traced = info.traced;
        self.snapshot(pid, traced, sink)
    }

    /// A process of an `--exe` target gone before `/proc` could be read (a
    /// short-lived process, a loaded machine): its snapshot places the
    /// executable where its enrolment record saw the entry point, so calls
    /// from the program's code are still placed. What only `/proc` has (its
    /// environment, such as an MPI rank's number; its arguments; its
    /// libraries, placed by the analyzer from probe hits) stays unknown.
    fn place_enrolled(
        &mut self,
        pid: u32,
        e: &record::Enroll,
        sink: &mut Sink,
    ) -> Result<(), RecordError> {
        let Some(target) = self
            .enrolled
            .get(e.target as usize)
            .and_then(Option::as_ref)
        else {
            return Ok(());
        };
        let Some(map) = target.mapping(e.entry_ip) else {
            return Ok(());
        };
        log::debug!(
            "process {pid} exited before its maps were read: {} placed from its entry point",
            target.path
        );
        if self.objects_written.insert(target.path.clone()) {
            self.pending_objects
                .push((PathBuf::from(&target.path), Instant::now()));
        }
        let comm = self
            .names
            .get(&pid)
            .filter(|c| !c.is_empty())
            .cloned()
            .unwrap_or_else(|| target.comm());
        let info = ProcessInfo {
            pid,
            seen_ns: e.header.ts_ns,
            traced: true,
            comm: comm.clone(),
            exe: target.path.clone(),
            maps: vec![map],
            probes_from_ns: self.probes_from.get(&pid).copied(),
            ..Default::default()
        };
        self.comms.insert(pid, comm);
        sink.meta(&Meta::Process(info.clone()))?;
        self.infos.insert(pid, info);
        Ok(())
    }

    /// A process that exited before `/proc` could be read still gets a
    /// snapshot holding its name, from its lifecycle records (a replay
    /// then says `calls[42]`, not `?[42]`). Only for `pid`s known to be
    /// processes: a thread's fork record names a thread.
    fn stub_if_gone(&mut self, pid: u32, ts_ns: u64, sink: &mut Sink) -> Result<(), RecordError> {
        if self.infos.contains_key(&pid) || self.stubbed.contains(&pid) {
            return Ok(());
        }
        let Some(comm) = self.names.get(&pid).filter(|c| !c.is_empty()) else {
            return Ok(());
        };
        self.stubbed.insert(pid);
        self.comms.insert(pid, comm.clone());
        // A forked child that did not exec has its parent's mappings: with
        // them its calls into shared objects still symbolize.
        let inherited = self
            .forked_from
            .get(&pid)
            .and_then(|parent| self.infos.get(parent))
            .map(|p| ProcessInfo {
                ppid: p.pid,
                ..p.clone()
            })
            .unwrap_or_default();
        sink.meta(&Meta::Process(ProcessInfo {
            pid,
            seen_ns: ts_ns,
            traced: true,
            comm: comm.clone(),
            ..inherited
        }))?;
        Ok(())
    }

    /// Writes a snapshot of `pid` now; its objects' symbols follow in [`Tracker::settle`].
    fn snapshot(&mut self, pid: u32, traced: bool, sink: &mut Sink) -> Result<(), RecordError> {
        self.snapshotted.insert(pid);
        if traced {
            self.untraced.remove(&pid);
        } else {
            self.untraced.insert(pid);
        }
        let Ok(mut info) = procfs::snapshot(pid, monotonic_ns(), traced) else {
            return Ok(());
        };
        info.probes_from_ns = self.probes_from.get(&pid).copied();
        if traced {
            self.live.insert(pid);
        }
        self.comms.insert(pid, info.comm.clone());
        for map in &info.maps {
            // An untraced process's objects (only sampled) get the symbols
            // its samples fall in (`note_sample`); the vDSO is small.
            let named = (traced && map.path.starts_with('/')) || map.path == crate::elf::VDSO;
            if named && !self.objects_written.contains(&map.path) {
                self.objects_written.insert(map.path.clone());
                self.pending_objects
                    .push((PathBuf::from(&map.path), Instant::now()));
            }
        }
        sink.meta(&Meta::Process(info.clone()))?;
        self.infos.insert(pid, info);
        Ok(())
    }

    /// Writes again, into a new file, what readers of it need: the live
    /// processes, every object's symbols, the kernel symbols. Forgets
    /// processes that are gone, so a long-lived agent's memory stays flat.
    fn rewrite(&mut self, sink: &mut Sink) -> Result<(), RecordError> {
        self.live.retain(|pid| procfs::exists(*pid));
        let live = &self.live;
        self.infos.retain(|pid, _| live.contains(pid));
        self.comms.retain(|pid, _| live.contains(pid));
        self.snapshotted.retain(|pid| live.contains(pid));
        self.untraced.retain(|pid| live.contains(pid));
        self.names.retain(|pid, _| live.contains(pid));
        self.forked_from.retain(|pid, _| live.contains(pid));
        self.probes_from.retain(|pid, _| live.contains(pid));
        self.remapped.retain(|pid, _| live.contains(pid));
        self.stubbed.clear();
        for info in self.infos.values() {
            sink.meta(&Meta::Process(info.clone()))?;
        }
        for path in &self.objects_written {
            if let Some(elf) = self.elf_cache.cached(Path::new(path)) {
                sink.meta(&Meta::Object(elf.table.clone()))?;
            }
        }
        for object in self.sampled.values() {
            if let Some(table) = &object.table {
                sink.meta(&Meta::Object(table.clone()))?;
            }
        }
        if !self.kernel_symbols.is_empty() {
            sink.meta(&Meta::KernelSymbols {
                symbols: self.kernel_symbols.clone(),
            })?;
        }
        Ok(())
    }

    /// Writes the symbol tables of newly seen objects, the symbols new
    /// samples of untraced processes fell in (waiting up to `sampled_for`
    /// for their objects' tables being read), and kernel symbols.
    fn settle(&mut self, sink: &mut Sink, sampled_for: Duration) -> Result<(), RecordError> {
        for pid in std::mem::take(&mut self.exec_snapshots) {
            self.snapshot(pid, true, sink)?;
        }
        // Tables may wait (`tracer record`): a launched job's processes map
        // dozens of objects (MPI ranks: libmpich, UCX, verbs, Fortran
        // runtime), and reading their tables as they start took ~0.1 s of
        // CPU from ranks that busy-poll every core (issue 17 item 9). At
        // the stop, all.
        let now = Instant::now();
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_objects)
            .into_iter()
            .partition(|(_, seen)| {
                sampled_for != SAMPLED_SYMBOLS_TICK
                    || now.duration_since(*seen) >= self.tables_after
            });
        self.pending_objects = wait;
        for (path, _) in due {
            // Traced now: its whole table replaces the sampled symbols.
            self.sampled.remove(path.to_string_lossy().as_ref());
            match self.elf_cache.get(&path) {
                Ok(elf) => sink.meta(&Meta::Object(elf.table.clone()))?,
                Err(e) => log::debug!("no symbols for {}: {e}", path.display()),
            }
        }
        self.write_sampled_symbols(sink, sampled_for)?;
        self.write_kernel_symbols(sink)
    }

    /// Places pending samples of sampled-only objects in their symbols and
    /// writes each object whose set grew. Tables not cached are read on the
    /// reader's thread; those that arrive within `wait` are used now, the
    /// rest at a later settle. Then the least recently sampled full tables
    /// leave the cache while it holds more than [`SAMPLED_CACHE_BYTES`].
    fn write_sampled_symbols(
        &mut self,
        sink: &mut Sink,
        wait: Duration,
    ) -> Result<(), RecordError> {
        self.settles += 1;
        let deadline = Instant::now() + wait;
        loop {
            self.receive_tables(deadline);
            for (path, object) in &mut self.sampled {
                if object.pending.is_empty() {
                    continue;
                }
                let Some(elf) = self.elf_cache.cached(Path::new(path)) else {
                    let reader = match &mut self.reader {
                        Some(r) => r,
                        None => match SymbolReader::start(self.elf_cache.debug_dirs().to_vec()) {
                            Some(r) => self.reader.insert(r),
                            None => {
                                object.unreadable = true;
                                object.pending = Vec::new();
                                continue;
                            }
                        },
                    };
                    let path = PathBuf::from(path);
                    if !reader.reading.contains(&path) && reader.paths.send(path.clone()).is_ok() {
                        reader.reading.insert(path);
                    }
                    continue;
                };
                object.used = self.settles;
                let full = &elf.table;
                let table = object.table.get_or_insert_with(|| ObjectSymbols {
                    path: full.path.clone(),
                    build_id: full.build_id.clone(),
                    segments: full.segments.clone(),
                    symbols: Vec::new(),
                    debug_link: full.debug_link.clone(),
                    debug_file: full.debug_file.clone(),
                });
                let before = table.symbols.len();
                for offset in std::mem::take(&mut object.pending) {
                    let Some((sym, size)) = symbol_at_offset(full, offset) else {
                        continue;
                    };
                    // A hot function's samples find it written already.
                    if let Err(at) = table.symbols.binary_search_by_key(&sym.addr, |s| s.addr) {
                        let name = sym.name.clone();
                        table.symbols.insert(
                            at,
                            Symbol {
                                addr: sym.addr,
                                size,
                                name,
                            },
                        );
                    }
                }
                if table.symbols.len() > before {
                    sink.meta(&Meta::Object(table.clone()))?;
                }
            }
            let reading = self.reader.as_ref().is_some_and(|r| !r.reading.is_empty());
            if !reading || Instant::now() >= deadline {
                break;
            }
        }
        self.evict_sampled(SAMPLED_CACHE_BYTES);
        Ok(())
    }

    /// Takes the tables the reader has read, waiting for one until
    /// `deadline` when some are being read and none is ready.
    fn receive_tables(&mut self, deadline: Instant) {
        let Some(reader) = &mut self.reader else {
            return;
        };
        let mut next = reader.tables.try_recv().ok();
        let left = deadline.saturating_duration_since(Instant::now());
        if next.is_none() && !reader.reading.is_empty() && !left.is_zero() {
            next = reader.tables.recv_timeout(left).ok();
        }
        while let Some((path, table)) = next {
            reader.reading.remove(&path);
            let object = self.sampled.get_mut(path.to_string_lossy().as_ref());
            match (table, object) {
                (Ok(elf), Some(object)) => {
                    // Both lists (one name per address, and every alias),
                    // with the allocator's share of each name.
                    object.cached_bytes = elf
                        .table
                        .symbols
                        .iter()
                        .chain(&elf.names)
                        .map(|s| s.name.capacity() + size_of::<Symbol>() + 16)
                        .sum();
                    self.elf_cache.insert(path, elf);
                }
                // Traced since (its whole table is written): nothing to do.
                (Ok(_), None) => {}
                (Err(e), object) => {
                    log::debug!("no symbols for {}: {e}", path.display());
                    if let Some(o) = object {
                        o.unreadable = true;
                        o.pending = Vec::new();
                    }
                }
            }
            next = reader.tables.try_recv().ok();
        }
    }

    /// Drops the least recently sampled full tables of sampled-only
    /// objects from the cache until they take at most `cap` bytes (their
    /// hit symbols stay).
    fn evict_sampled(&mut self, cap: usize) {
        let mut cached: usize = self.sampled.values().map(|o| o.cached_bytes).sum();
        while cached > cap {
            let Some((path, object)) = self
                .sampled
                .iter_mut()
                .filter(|(_, o)| o.cached_bytes > 0)
                .min_by_key(|(_, o)| o.used)
            else {
                break;
            };
            self.elf_cache.evict(Path::new(path));
            cached -= object.cached_bytes;
            object.cached_bytes = 0;
        }
    }

    /// Sampled-only objects whose samples are still unplaced (their tables
    /// were not read in time), for the summary.
    fn unread_sampled(&self) -> Vec<&str> {
        self.sampled
            .iter()
            .filter(|(_, o)| !o.pending.is_empty())
            .map(|(p, _)| p.as_str())
            .collect()
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
            sink.meta(&Meta::KernelSymbols {
                symbols: new.clone(),
            })?;
            self.kernel_symbols.extend(new);
        }
        Ok(())
    }
}

/// The function symbol of `table` holding file offset `offset`, and its
/// size: up to the next symbol where it had none, so that in a table of
/// some symbols only, an address outside them finds none rather than the
/// nearest one kept.
fn symbol_at_offset(table: &ObjectSymbols, offset: u64) -> Option<(&Symbol, u64)> {
    let vaddr = segment_vaddr(table, offset)?;
    let sym = lookup(&table.symbols, vaddr)?;
    // `lookup` took the last symbol at or below `vaddr`: the next one with a
    // higher address starts above `vaddr`.
    let size = match sym.size {
        0 => {
            let next = table.symbols.partition_point(|s| s.addr <= sym.addr);
            table.symbols.get(next).map_or(0, |n| n.addr - sym.addr)
        }
        size => size,
    };
    Some((sym, size))
}

/// The bytes a socket call's record says it moved (read or written): its
/// return value for the calls that move data, else 0.
fn moved_bytes(bytes: &[u8]) -> u64 {
    use tracer_common::syscall::nr;
    let Some(sc) = Syscall::read_from(bytes) else {
        return 0;
    };
    match sc.nr {
        nr::READ
        | nr::READV
        | nr::RECVFROM
        | nr::RECVMSG
        | nr::WRITE
        | nr::WRITEV
        | nr::SENDTO
        | nr::SENDMSG
            if sc.ret > 0 && sc.flags & SYSCALL_UNFINISHED == 0 =>
        {
            sc.ret as u64
        }
        _ => 0,
    }
}

fn comm_of(raw: &[u8; 16]) -> String {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
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

/// An `--exe` target as its enrolment records name it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct EnrollTarget {
    /// Canonical path (as `/proc/PID/maps` names it).
    path: String,
    /// Entry point, a virtual address of the file.
    entry: u64,
    /// The loadable segment holding the entry point: the program's code.
    text: Segment,
}

impl EnrollTarget {
    /// `None` when no segment holds the entry point.
    fn new(path: &str, entry: u64, segments: &[Segment]) -> Option<Self> {
        let text = *segments
            .iter()
            .find(|s| entry >= s.vaddr && entry - s.vaddr < s.filesz)?;
        Some(Self {
            path: path.to_string(),
            entry,
            text,
        })
    }

    /// The code's mapping in a process whose entry point ran at `entry_ip`;
    /// `None` for an address that cannot be one (from a record).
    fn mapping(&self, entry_ip: u64) -> Option<MapEntry> {
        let bias = entry_ip.checked_sub(self.entry)?;
        let start = bias.checked_add(self.text.vaddr)?;
        Some(MapEntry {
            start,
            end: start.checked_add(self.text.filesz)?,
            offset: self.text.offset,
            perms: "r-xp".into(),
            path: self.path.clone(),
        })
    }

    /// The kernel's name of a process running it: the file name, cut to
    /// 15 bytes.
    fn comm(&self) -> String {
        let name = Path::new(&self.path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut end = name.len().min(15);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name[..end].to_string()
    }
}

/// What step 1 of [`Session::start`] gathers from the targets.
#[derive(Clone, Default)]
struct Resolution {
    probes: Vec<Probe>,
    empty_probes: Vec<Probe>,
    elf_cache: ElfCache,
    enroll: Vec<(PathBuf, u64)>,
    root_pids: Vec<u32>,
    command: Option<(Vec<OsString>, PathBuf)>,
    usdt_sites: Vec<UsdtSite>,
    /// The targets' objects, whose symbols are read before recording starts.
    prefetch: Vec<PathBuf>,
    /// Targets added.
    targets: usize,
}

impl Resolution {
    /// Resolves `target`: its objects, its USDT sites and the functions to
    /// probe in it.
    fn add(
        &mut self,
        config: &RecordConfig,
        target: &Target,
        progress: &mut dyn FnMut(&str),
    ) -> Result<(), RecordError> {
        let objects = match target {
            Target::Pid(pid) => {
                if !procfs::exists(*pid) {
                    return Err(ProcError::NoSuchProcess { pid: *pid }.into());
                }
                self.root_pids.push(*pid);
                TargetObjects::of_pid(*pid)?
            }
            Target::Exe(path) => {
                let path = path
                    .canonicalize()
                    .map_err(|_| RecordError::NoExecutable { path: path.clone() })?;
                let elf = self.elf_cache.get(&path)?;
                let entry =
                    file_offset(&elf.table.segments, elf.entry).ok_or(TargetError::NoSegment {
                        object: path.display().to_string(),
                        symbol: "entry point".into(),
                        vaddr: elf.entry,
                    })?;
                self.enroll.push((path.clone(), entry));
                TargetObjects::of_executable(&path)
            }
            Target::Command(argv) => {
                let program = argv.first().ok_or(RecordError::NoTarget)?;
                let path = which(program).ok_or_else(|| RecordError::Spawn {
                    command: program.to_string_lossy().into_owned(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                })?;
                self.command = Some((argv.clone(), path.clone()));
                TargetObjects::of_executable(&path)
            }
        };
        self.prefetch.push(objects.exe.clone());
        self.prefetch.extend(objects.libs.iter().cloned());
        if !config.usdt.is_empty()
            || !config.usdt_semaphores.is_empty()
            || !config.usdt_empty.is_empty()
        {
            let searched: Vec<PathBuf> = std::iter::once(objects.exe.clone())
                .chain(objects.libs.iter().cloned())
                .collect();
            let all = usdt::sites_of(&objects)?;
            let mut chosen = usdt::select(&config.usdt, &all, &searched)?;
            let mut wanted = usdt::select(&config.usdt_semaphores, &all, &searched)?;
            // Probes held per process (no --exe target) follow its children
            // unless --no-follow: see UsdtSite::wide.
            let usdt_wide =
                config.follow && !config.targets.iter().any(|t| matches!(t, Target::Exe(_)));
            if usdt_wide {
                for site in &mut chosen {
                    site.wide = true;
                }
                wanted.extend(chosen.iter().cloned());
            }
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
                if !self
                    .usdt_sites
                    .iter()
                    .any(|s| s.object == site.object && s.file_offset == site.file_offset)
                {
                    // Fail now, before touching the kernel, on a spec we cannot decode.
                    site.spec()?;
                    self.usdt_sites.push(site);
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
                self.usdt_sites.len(),
                objects.exe.display()
            ));
        }
        if !config.empty_probes.is_empty() {
            targets::resolve(
                &config.empty_probes,
                &objects,
                &mut self.empty_probes,
                &mut self.elf_cache,
            )?;
        }
        if !config.functions.is_empty() {
            let resolved = targets::resolve(
                &config.functions,
                &objects,
                &mut self.probes,
                &mut self.elf_cache,
            )?;
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
        self.targets += 1;
        Ok(())
    }
}

/// A target as a person names it.
fn target_name(target: &Target) -> String {
    match target {
        Target::Pid(pid) => format!("pid {pid}"),
        Target::Exe(path) => path.display().to_string(),
        Target::Command(argv) => argv
            .first()
            .map_or_else(String::new, |a| a.to_string_lossy().into_owned()),
    }
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// What [`Session::next`] saw.
#[derive(Debug)]
pub enum Activity {
    /// Records were drained from the ring.
    Drained,
    /// The command target exited (with its status when known).
    CommandExited(Option<std::process::ExitStatus>),
}

/// A file a session closed (by rotation or at its end).
#[derive(Debug, Clone)]
pub struct ClosedFile {
    /// The file.
    pub path: PathBuf,
    /// Its size, bytes.
    pub bytes: u64,
    /// Records in it (not counting metadata).
    pub records: u64,
    /// Time of its first and last record, `CLOCK_MONOTONIC` ns (0 when none).
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
}

/// Removes a capture whose session did not start (on drop, unless cleared).
struct Unfinished(Option<PathBuf>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Per traced process, the CPU times of its threads as last read and the
/// sums of those that exited, so that a process's [`CpuTimes`] never go
/// down when a thread ends (a server's thread pool shrinking must not look
/// like negative time).
#[derive(Debug, Default)]
struct CpuTally {
    /// By pid: (last reading per thread id, sums of exited threads).
    procs: HashMap<u32, (ThreadTimes, [u64; 3])>,
}

/// CPU times (run, wait, slices) by thread id.
type ThreadTimes = HashMap<u32, [u64; 3]>;

impl CpuTally {
    /// Forgets processes not in `live`.
    fn retain(&mut self, live: &[u32]) {
        self.procs.retain(|pid, _| live.contains(pid));
    }

    /// Takes a reading of `pid`'s threads: (sums over every thread seen,
    /// the exited ones at their last reading; threads alive).
    fn read(&mut self, pid: u32, threads: &[(u32, [u64; 3])]) -> ([u64; 3], u32) {
        let (last, exited) = self.procs.entry(pid).or_default();
        let now: ThreadTimes = threads.iter().copied().collect();
        for (tid, t) in last.iter() {
            if !now.contains_key(tid) {
                for (e, v) in exited.iter_mut().zip(t) {
                    *e = e.saturating_add(*v);
                }
            }
        }
        let mut sum = *exited;
        for t in now.values() {
            for (s, v) in sum.iter_mut().zip(t) {
                *s = s.saturating_add(*v);
            }
        }
        let alive = u32::try_from(now.len()).unwrap_or(u32::MAX);
        *last = now;
        (sum, alive)
    }
}

/// CPU time of traced processes since each was first metered.
#[derive(Debug, Default)]
struct CpuMeter {
    /// By pid: (first reading, last reading) of [run, run-queue wait], ns.
    readings: BTreeMap<u32, ([u64; 2], [u64; 2])>,
    /// The host's CPU ticks (busy, all) at the last reading.
    host: Option<(u64, u64)>,
    at: Option<Instant>,
    /// When metering began, `CLOCK_BOOTTIME` ns.
    began_ns: Option<u64>,
}

impl CpuMeter {
    /// Reads the CPU time of `pids` (a process gone keeps its last reading).
    /// A process first seen now that was born since metering began (a
    /// followed child, a launcher's daemon) ran all its CPU under the
    /// probes: it counts from 0, not from this reading, or the calls it
    /// made before would be weighed against no CPU at all.
    fn read(&mut self, pids: impl Iterator<Item = u32>) {
        let began = *self.began_ns.get_or_insert_with(procfs::boottime_ns);
        for pid in pids {
            if let Some((run_ns, wait_ns, ..)) = procfs::cpu_times(pid) {
                let now = [run_ns, wait_ns];
                let e = self.readings.entry(pid).or_insert_with(|| {
                    // The start time is truncated to a clock tick (10 ms):
                    // a process born in the tick metering began in counts
                    // as born since (a daemon forked at once by the
                    // command was read from its first reading a third of
                    // the time, its CPU until then lost while its calls
                    // counted).
                    let born_since = procfs::start_since_boot_ns(pid)
                        .is_ok_and(|at| at.saturating_add(procfs::clock_tick_ns()) > began);
                    (if born_since { [0, 0] } else { now }, now)
                });
                e.1 = [run_ns.max(e.1[0]), wait_ns.max(e.1[1])];
            }
        }
        self.host = procfs::host_cpu_ticks().or(self.host);
        self.at = Some(Instant::now());
    }

    /// CPU time used since metering began, ns.
    fn total(&self) -> u64 {
        self.readings.values().map(|(a, b)| b[0] - a[0]).sum()
    }

    /// Time spent waiting for a CPU (runnable, not running) since metering
    /// began, ns.
    fn waited(&self) -> u64 {
        self.readings
            .values()
            .map(|(a, b)| b[1].saturating_sub(a[1]))
            .sum()
    }

    /// The start of an interval: now, with `calls`, and `records` written
    /// so far.
    fn window(&self, calls: Vec<u64>, records: u64, bytes: u64) -> Window {
        Window {
            at: Instant::now(),
            cpu_ns: self.total(),
            wait_ns: self.waited(),
            host: self.host,
            calls,
            own_ns: own_cpu_ns(),
            records,
            bytes,
        }
    }

    /// The interval since `from`.
    fn since(&self, from: &Window) -> overhead::Interval {
        overhead::Interval {
            ns: from.at.elapsed().as_nanos() as u64,
            traced_cpu_ns: self.total().saturating_sub(from.cpu_ns),
            traced_wait_ns: self.waited().saturating_sub(from.wait_ns),
            host_busy: match (from.host, self.host) {
                (Some((b0, a0)), Some((b1, a1))) if a1 > a0 => {
                    b1.saturating_sub(b0) as f64 / (a1 - a0) as f64
                }
                _ => 0.0,
            },
        }
    }
}

/// The recorder's own CPU time (every thread), ns; `None` when unreadable.
fn own_cpu_ns() -> Option<u64> {
    procfs::cpu_times(std::process::id()).map(|t| t.0)
}

/// The fewest records a window must have written for the recorder's CPU
/// over them to be its cost per record. Its fixed work (ticks, the CPU
/// meter's `/proc` reads, kernel statistics) is charged to the records too,
/// about 10 ms a 300 ms window: over the first window of a server still
/// idle (stop 37: MooseFS chunkservers at 2% of a core, a GlusterFS brick at
/// 0.2%) it read 6-58 us and 215 us a record, where busy windows of the
/// same servers read 0.1-2 us, and the budget dropped probes that fit
/// (`malloc` on 21 of 24 chunkservers). At 5,000 records the fixed work
/// adds at most ~2 us.
const RECORD_COST_MIN_RECORDS: u64 = 5_000;

/// The recorder's CPU per record over a window: its CPU time over the
/// records it wrote (every kind: fixed costs are charged to them too, which
/// errs on the safe side); `None` with fewer than
/// [`RECORD_COST_MIN_RECORDS`] records to weigh it by (the fixed work
/// would be most of it), or without both readings (one unreadable would
/// charge the recorder's whole life to the window).
fn record_cost_ns(from: &Window, own_ns: Option<u64>, records: u64) -> Option<f64> {
    let n = records
        .checked_sub(from.records)
        .filter(|n| *n >= RECORD_COST_MIN_RECORDS)?;
    Some(own_ns?.saturating_sub(from.own_ns?) as f64 / n as f64)
}

/// The recorder's CPU per record to weigh the next decision with: the
/// figure over the window that ends now (from `from`) when it wrote enough
/// records ([`record_cost_ns`]), else `current`, the last one taken (0:
/// none yet). Not only the first window's: there every probe fires, the
/// ring buffer wakes the recorder for many records at once, and a record
/// cost less than once the hottest probes are gone (GlusterFS, 4 bricks
/// with a recorder each: the first windows read 0.1-0.6 us a record, while
/// the recorders' CPU grew by 0.7-1.2 us for each record the probes kept
/// added over recording without probes).
fn next_record_cost(current: f64, from: &Window, own_ns: Option<u64>, records: u64) -> f64 {
    record_cost_ns(from, own_ns, records).unwrap_or(current)
}

/// The function probes' overhead: their calibrated cost, the window being
/// counted, and what was decided so far.
#[derive(Debug)]
struct Budget {
    costs: Costs,
    cpu: CpuMeter,
    /// The interval being counted.
    window: Window,
    /// Since the last probe set was decided (for the measured cost).
    since: Option<Window>,
    /// By function id: still attached.
    kept: Vec<bool>,
    /// What the capture is told; `None` before the first interval ends.
    item: Option<Overhead>,
    /// Probes could not be replaced: no further decisions.
    stuck: bool,
    /// The first look found the traced processes idle and moved the
    /// interval's start to then (see [`Session::evaluate`]).
    idle_before: bool,
    /// The last decision that dropped probes, for what their traps cost in
    /// place: the traced processes' work over the window before it, and
    /// what the dropped probes' calls then cost at the calibrated figures.
    decision: Option<Decision>,
    /// The share of the traced CPU the dropped probes took (calibrated)
    /// at the decision that set `costs.probe.in_situ` (0: none did): a
    /// later decision sets it again only from a larger share, the change
    /// of CPU per byte it causes standing further above the work's spread.
    in_situ_share: f64,
}

/// A decision that dropped probes, for what their traps cost in place.
#[derive(Clone, Copy, Debug)]
struct Decision {
    /// The traced processes' work over the window before it.
    before: overhead::Work,
    /// What the dropped probes' calls in it cost at the calibrated trap
    /// costs, ns.
    dropped_ns: f64,
}

/// The start of an interval: when, the traced processes' CPU and
/// run-queue wait then, and each probe's calls then.
#[derive(Clone, Debug)]
struct Window {
    at: Instant,
    cpu_ns: u64,
    wait_ns: u64,
    /// The host's CPU ticks (busy, all) then.
    host: Option<(u64, u64)>,
    calls: Vec<u64>,
    /// The recorder's own CPU time then, ns, and the records it had
    /// written (for its cost per record).
    own_ns: Option<u64>,
    records: u64,
    /// The bytes the traced processes' sockets had moved then.
    bytes: u64,
}

/// A recording in progress.
pub struct Session {
    /// Targets skipped (see [`RecordConfig::skip_unusable`]) and why.
    skipped: Vec<(Target, String)>,
    config: RecordConfig,
    loaded: Loaded,
    tracker: Tracker,
    sink: Sink,
    ring: AsyncFd<RingBuf<MapData>>,
    held: Option<Held>,
    probes: Vec<Probe>,
    usdt_sites: Vec<UsdtSite>,
    has_pid_targets: bool,
    has_exe_targets: bool,
    started: Instant,
    /// When the programs were attached, `CLOCK_MONOTONIC` ns: a thread
    /// blocked since before then was blocked at least since then.
    recording_start_ns: u64,
    last_stats: Instant,
    command_status: Option<std::process::ExitStatus>,
    taps: Option<Taps>,
    /// Records written by kind over every file of the session.
    totals: [u64; crate::sink::KINDS],
    view: KernelView,
    kstats: KernelStats,
    last_kstats: Instant,
    cpu_tally: CpuTally,
    budget: Option<Budget>,
    /// The node-wide programs' CPU, measured while a budget is given.
    kernel_cost: Option<KernelCost>,
    /// Messages for a person since the last [`Session::take_notices`].
    notices: Vec<String>,
}

/// The CPU of the programs on tracepoints and perf events, measured with
/// the kernel's run-time statistics. Only while a budget is given: the
/// statistics cost every eBPF program of the node two clock reads a run.
struct KernelCost {
    /// Keeps the statistics on until the recording ends.
    _stats: OwnedFd,
    at: Instant,
    ns: u64,
}

impl KernelCost {
    /// Turns the statistics on; what to tell a person where they cannot be.
    fn start(loaded: &Loaded) -> Result<Self, String> {
        let unmeasured =
            "the CPU of the system-call, file, block and sampling programs is not measured";
        let fd = aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| {
            format!("the kernel's run-time statistics are not available ({e}): {unmeasured}")
        })?;
        let ns = loaded
            .kernel_program_ns()
            .ok_or_else(|| format!("the programs' statistics cannot be read: {unmeasured}"))?;
        Ok(Self {
            _stats: fd,
            at: Instant::now(),
            ns,
        })
    }

    /// Their CPU since the start, ms per second.
    fn ms_per_s(&self, loaded: &Loaded) -> Option<f64> {
        let ns = loaded.kernel_program_ns()?.saturating_sub(self.ns);
        Some(ns as f64 / 1e6 / self.at.elapsed().as_secs_f64().max(1e-3))
    }
}

impl Session {
    /// Resolves the targets, loads and attaches the programs, opens the
    /// capture, marks the targets, and releases a command target.
    pub async fn start(
        config: &RecordConfig,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Self, RecordError> {
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
        let config = config.clone();

        // 1. Resolve every target and the functions to probe, before touching the kernel.
        let mut r = Resolution {
            elf_cache: ElfCache::new(&config.debug_dirs),
            ..Resolution::default()
        };
        let mut skipped = Vec::new();
        for target in &config.targets {
            // A target that cannot be resolved leaves nothing behind: the
            // agent skips it and traces the others.
            let before = r.clone();
            if let Err(e) = r.add(&config, target, progress) {
                if !config.skip_unusable {
                    return Err(e);
                }
                progress(&format!(
                    "skipped {}: {}",
                    target_name(target),
                    error_chain(&e)
                ));
                skipped.push((target.clone(), error_chain(&e)));
                r = before;
            }
        }
        if r.targets == 0 {
            // Every target was skipped: nothing to record.
            return Err(RecordError::NothingUsable {
                reasons: skipped
                    .iter()
                    .map(|(t, why)| format!("{}: {why}", target_name(t)))
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        }
        let Resolution {
            mut probes,
            empty_probes,
            mut elf_cache,
            enroll,
            root_pids,
            command,
            usdt_sites,
            prefetch,
            targets: _,
        } = r;

        if !config.exclude_functions.is_empty() {
            let before = probes.len();
            probes.retain(|p| !config.exclude_functions.contains(&p.symbol));
            // Probe ids index the capture's probe table.
            for (id, p) in probes.iter_mut().enumerate() {
                p.func_id = id as u32;
            }
            progress(&format!(
                "left out {} function(s) shed for load: {}",
                before - probes.len(),
                config.exclude_functions.join(", ")
            ));
        }

        // 2. Create the capture before touching the kernel: a bad output
        // path is reported before every probe is attached (and detached).
        let reserved = Sink::reserve(&config.output, config.overwrite)?;
        // Attaching can still fail: then the empty capture goes too.
        let mut unfinished = Unfinished(Some(config.output.clone()));

        // 3. Load and attach.
        if tracefs::ensure_mounted()? {
            progress(&format!("mounted tracefs at {}", tracefs::TRACEFS));
        }
        let btf_started = Instant::now();
        let kernel = match btf::kernel_offsets_cached() {
            Ok(k) => k,
            Err(e) => {
                progress(&format!("{e}"));
                tracer_common::kernel::KernelOffsets::ABSENT
            }
        };
        log::debug!(
            "kernel offsets from BTF in {:.1} ms",
            btf_started.elapsed().as_secs_f64() * 1e3
        );
        let load_started = Instant::now();
        let mut view = KernelView {
            files: config.file_io && kernel.has_files(),
            block: config.block_io && kernel.has_block(),
            net: config.net_stats,
            unavailable: Vec::new(),
        };
        if config.file_io && !view.files {
            view.unavailable.push(
                "file I/O: this kernel's BTF lacks the fields that tell a file descriptor's type"
                    .into(),
            );
        }
        if config.block_io && !view.block {
            view.unavailable
                .push("block I/O: this kernel's BTF lacks the block request fields".into());
        }
        if config.syscalls && !(kernel.has_tcp() && kernel.has_socket()) {
            view.unavailable.push(
                "retransmission owners: this kernel's BTF lacks the socket fields; retransmits carry addresses only"
                    .into(),
            );
        }
        let mut loaded = Loaded::load(&LoadOptions {
            ring_bytes: config.ring_bytes,
            wakeup_bytes: config.wakeup_bytes.min(u64::from(config.ring_bytes) / 2),
            sample_all: config.sample_all,
            follow_children: config.follow,
            syscalls: config.syscalls,
            files: view.files,
            blocked_threads: !config.bench_no_blocked,
            offsets: tracefs::tracepoint_offsets(),
            kernel,
            uprobe_multi: config.uprobe_multi,
        })?;
        log::debug!(
            "programs loaded in {:.1} ms",
            load_started.elapsed().as_secs_f64() * 1e3
        );
        let attach_started = Instant::now();
        loaded.attach_lifecycle(kernel.has_task())?;
        if config.empty_syscalls {
            loaded.attach_empty_syscalls()?;
        } else if config.syscalls || view.files {
            loaded.attach_syscalls()?;
            let others = loaded.other_syscall_programs();
            if others > 0 {
                progress(&format!(
                    "{others} other recorder(s) on this host run system-call programs too: every system call \
                     of every process of the host runs each recorder's, so their cost adds up (record several \
                     processes of one host with one recorder, `tracer record -p A -p B`, as the agent does)"
                ));
            }
        }
        if config.syscalls && !loaded.attach_tcp(kernel.has_tcp() && kernel.has_socket())? {
            view.unavailable
                .push("retransmits: this kernel has no tcp_retransmit_skb tracepoint".into());
        }
        if view.block
            && let Err(e) = loaded.attach_block()
        {
            view.block = false;
            view.unavailable.push(format!("block I/O: {e}"));
        }
        for line in &view.unavailable {
            progress(&format!("not recorded: {line}"));
        }
        if config.sample_hz > 0 {
            let cpus = loaded.attach_sampling(config.sample_hz)?;
            progress(&format!(
                "sampling at {} Hz on {cpus} cpus",
                config.sample_hz
            ));
        }
        let budget = if probes.is_empty() {
            None
        } else {
            let calibration_started = Instant::now();
            match overhead::calibrate(&mut loaded) {
                Ok(costs) => {
                    progress(&format!(
                        "probe cost on this machine: {} (calibrated in {:.0} ms)",
                        costs.probe.describe(),
                        calibration_started.elapsed().as_secs_f64() * 1e3
                    ));
                    Some(costs)
                }
                // A budget that cannot be kept is an error; without one the
                // probes are only not weighed.
                Err(e) if config.overhead_percent.is_some() => return Err(e.into()),
                Err(e) => {
                    progress(&format!("{e}; the probes' cost is not weighed"));
                    None
                }
            }
        };
        // Attached to running processes only, the probes fire in those
        // (and their children, as their forks are read) and not in every
        // process of the host that maps a probed object. A launched command
        // or an executable target keeps probes everywhere: the processes
        // they start must be recorded from their first call.
        if enroll.is_empty()
            && command.is_none()
            && !root_pids.is_empty()
            && !config.probe_everywhere
        {
            let mut pids = root_pids.clone();
            if config.follow {
                for pid in &root_pids {
                    pids.extend(procfs::descendants(*pid));
                }
            }
            loaded.scope_probes(&pids);
        }
        loaded.attach_probes(&probes)?;
        for probe in &empty_probes {
            loaded.attach_empty_probe(probe)?;
        }
        for (index, (exe, offset)) in enroll.iter().enumerate() {
            loaded.attach_enroll(exe, *offset, index as u32)?;
        }
        progress(&format!(
            "attached {} function probes ({} links{}) in {:.0} ms{}",
            probes.len(),
            loaded.links,
            if loaded.multi_link_count > 0 {
                format!(", {} of them uprobe_multi", loaded.multi_link_count)
            } else {
                String::new()
            },
            attach_started.elapsed().as_secs_f64() * 1e3,
            match (probes.is_empty(), loaded.probe_scope()) {
                (true, _) => String::new(),
                (false, Some(n)) => format!(", firing in the {n} traced process(es) only"),
                (false, None) => {
                    ", firing in every process of their objects (others' hits are dropped, each at the cost of a trap)".to_string()
                }
            }
        ));

        // 4. Write the capture's header (what the kernel let us record) and
        // mark the targets.
        let mut sink = Sink::start(
            reserved,
            &capture_header(&config, &view),
            config.chunk_bytes,
        )?;
        write_preface(&mut sink, &probes, &usdt_sites)?;
        let mut tracker = Tracker::new();
        tracker.tables_after = config.object_tables_after;
        if config.overhead_percent.is_some() {
            tracker.socket_bytes = Some(0);
        }
        // The kernel's symbols, read now when samples will need them: read
        // at the first kernel sample, they held the loop for 5-7 s of a
        // 20 s run on a loaded machine (debug build), with no counters or
        // CPU times written meanwhile (issue 16).
        if config.sample_hz > 0 {
            tracker.kallsyms = Some(read_kallsyms());
        }
        // The targets' objects' symbols, read now: read when their first
        // snapshot comes, they held the drain loop for 100-200 ms while a
        // launcher forked its daemons, whose fork records were then read
        // after short-lived ones had gone.
        for path in prefetch {
            let path = path.canonicalize().unwrap_or(path);
            if let Err(e) = elf_cache.get(&path) {
                log::debug!("no symbols for {}: {e}", path.display());
            }
        }
        tracker.enrolled = enroll
            .iter()
            .map(|(path, _)| {
                let elf = elf_cache.get(path).ok()?;
                EnrollTarget::new(&path.display().to_string(), elf.entry, &elf.table.segments)
            })
            .collect();
        tracker.elf_cache = elf_cache;
        // Probed objects' symbols go in even if no snapshot of a process
        // catches them mapped: the analyzer can place them from the probe hits.
        for probe in &probes {
            if tracker.objects_written.insert(probe.object.clone()) {
                tracker
                    .pending_objects
                    .push((PathBuf::from(&probe.object), Instant::now()));
            }
        }
        for pid in &root_pids {
            loaded.trace_pid(*pid, true)?;
            tracker.roots.insert(*pid);
            tracker.snapshot(*pid, true, &mut sink)?;
            if config.follow {
                for child in procfs::descendants(*pid) {
                    loaded.trace_pid(child, false)?;
                    // Forked since the probes were attached.
                    if follow_probes(&mut loaded, child) {
                        tracker.probes_from.insert(child, monotonic_ns());
                    }
                    tracker.snapshot(child, true, &mut sink)?;
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
        tracker.settle(&mut sink, SAMPLED_SYMBOLS_TICK)?;
        if let Some(fd) = held.as_mut().and_then(|h| h.release.take()) {
            // Release the command: it execs now, traced.
            std::fs::File::from(fd).write_all(&[1])?;
        }
        let ring = loaded
            .take_ring()
            .ok_or(RecordError::Io(std::io::Error::other(
                "ring buffer already taken",
            )))?;
        // SAFETY: the ring's fd stays open while the AsyncFd owns the ring.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .map_err(|e| RecordError::Io(std::io::Error::other(e.to_string())))?;
        unfinished.0 = None;
        let probes_len = probes.len();
        let mut session = Self {
            skipped,
            has_pid_targets: !root_pids.is_empty() || held.is_some(),
            has_exe_targets: !enroll.is_empty(),
            config,
            loaded,
            tracker,
            sink,
            ring,
            held,
            probes,
            usdt_sites,
            started,
            recording_start_ns: monotonic_ns(),
            last_stats: Instant::now(),
            command_status: None,
            taps: None,
            totals: [0; crate::sink::KINDS],
            kstats: KernelStats::new(
                KernelStatsConfig {
                    files: view.files,
                    block: view.block,
                    net: view.net,
                },
                monotonic_ns(),
            ),
            view,
            last_kstats: Instant::now(),
            cpu_tally: CpuTally::default(),
            budget: budget.map(|costs| Budget {
                costs,
                cpu: CpuMeter::default(),
                window: Window {
                    at: Instant::now(),
                    cpu_ns: 0,
                    wait_ns: 0,
                    host: procfs::host_cpu_ticks(),
                    calls: vec![0; probes_len],
                    own_ns: own_cpu_ns(),
                    records: 0,
                    bytes: 0,
                },
                since: None,
                kept: vec![true; probes_len],
                item: None,
                stuck: false,
                idle_before: false,
                decision: None,
                in_situ_share: 0.0,
            }),
            kernel_cost: None,
            notices: Vec::new(),
        };
        if session.config.overhead_percent.is_some() {
            match KernelCost::start(&session.loaded) {
                Ok(k) => session.kernel_cost = Some(k),
                Err(why) => progress(&why),
            }
        }
        // The CPU the first interval is weighed against starts now, with
        // the calls counted: read later (the first tick of a loaded
        // machine), the calls in between would be weighed against nothing.
        let pids = session.traced_pids();
        if let Some(budget) = session.budget.as_mut() {
            budget.cpu.read(pids.into_iter());
        }
        Ok(session)
    }

    /// Messages for a person gathered since the last call (the overhead
    /// budget's decision, a warning about costly probes).
    pub fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notices)
    }

    /// The traced processes alive now.
    fn traced_pids(&self) -> Vec<u32> {
        self.tracker
            .live
            .iter()
            .copied()
            .filter(|pid| self.loaded.is_traced(*pid))
            .collect()
    }

    /// Meters the traced processes' CPU and, at the end of each interval,
    /// weighs the probes: the first interval always (the capture is told
    /// the cost, and a costly set without a budget is warned about); with a
    /// budget, every interval, dropping the costliest probes while the
    /// kept ones cost more than the budget (a process that was waiting on
    /// its probes can use more CPU once they go, so one look is not always
    /// enough).
    fn budget_step(&mut self) -> Result<(), RecordError> {
        let pids = self.traced_pids();
        let Some(budget) = self.budget.as_mut() else {
            return Ok(());
        };
        if budget
            .cpu
            .at
            .is_none_or(|at| at.elapsed() >= Duration::from_millis(500))
        {
            budget.cpu.read(pids.into_iter());
        }
        let again = self.config.overhead_percent.is_some() && !budget.stuck;
        // With a budget the first look comes early: until it, every probe
        // runs at full cost (a 2 s first interval cost GlusterFS about 7
        // points of a 15 s run at 50% over budget).
        let due = if budget.item.is_none() && self.config.overhead_percent.is_some() {
            FIRST_LOOK.min(self.config.overhead_interval)
        } else {
            self.config.overhead_interval
        };
        if budget.window.at.elapsed() < due || (budget.item.is_some() && !again) {
            return Ok(());
        }
        self.evaluate()
    }

    /// Weighs the probes over the interval that ends now and drops those
    /// that do not fit the budget.
    fn evaluate(&mut self) -> Result<(), RecordError> {
        let pids = self.traced_pids();
        let records: u64 = self.records().iter().sum();
        let Some(budget) = self.budget.as_mut() else {
            return Ok(());
        };
        budget.cpu.read(pids.into_iter());
        let calls = self.loaded.func_hits(self.probes.len());
        let delta: Vec<u64> = calls
            .iter()
            .zip(&budget.window.calls)
            .zip(&budget.kept)
            .map(|((now, then), kept)| if *kept { now.saturating_sub(*then) } else { 0 })
            .collect();
        // A first look that saw no call has nothing to weigh (a command
        // not running yet, a server idle at start): with a budget, look
        // again at the next tick, until calls come, however long that
        // takes, rather than decide on nothing and let every probe run at
        // full cost until the next interval (recorders started one after
        // another before a benchmark's load: the first ones' servers saw
        // their first calls more than an interval after their start, and
        // ran every GlusterFS probe for up to 1.3 s more).
        // The interval then starts anew at this look, and once calls come
        // once more after them: the slowdown is the probes' cost scaled by
        // the processes' demand for the CPU over the interval, so idle time
        // before the work began would hide it.
        if budget.item.is_none() && self.config.overhead_percent.is_some() {
            let idle = delta.iter().all(|d| *d == 0);
            if idle || budget.idle_before {
                budget.window =
                    budget
                        .cpu
                        .window(calls, records, self.tracker.socket_bytes.unwrap_or(0));
                budget.idle_before = idle;
                return Ok(());
            }
        }
        let interval = budget.cpu.since(&budget.window);
        // The recorder's own CPU per record over the interval that ends
        // now, at every look whose interval wrote enough records for its
        // fixed work not to be most of the figure ([`next_record_cost`]).
        // Until one has, the records are not charged.
        let first_record_cost = budget.costs.probe.record_ns == 0.0;
        budget.costs.probe.record_ns = next_record_cost(
            budget.costs.probe.record_ns,
            &budget.window,
            own_cpu_ns(),
            records,
        );
        if budget.costs.probe.record_ns > 0.0
            && let Some(item) = &mut budget.item
        {
            // The capture is told the figure the later looks used.
            item.probe_costs = Some(budget.costs.probe);
            if first_record_cost {
                self.notices.push(format!(
                    "overhead budget: the recorder's CPU per record, {:.1} us, taken over the last {} ms ({} records; the first window had too few to tell it from the recorder's fixed work)",
                    budget.costs.probe.record_ns / 1e3,
                    interval.ns / 1_000_000,
                    records - budget.window.records
                ));
            }
        }
        // What the traps cost in place, from the last decision that dropped
        // probes: the traced processes' CPU per socket byte on either side.
        let work = overhead::Work {
            ns: interval.ns,
            cpu_ns: interval.traced_cpu_ns,
            bytes: self
                .tracker
                .socket_bytes
                .unwrap_or(0)
                .saturating_sub(budget.window.bytes),
        };
        if let Some(d) = budget.decision.take() {
            let share = d.dropped_ns / d.before.cpu_ns.max(1) as f64;
            if share > budget.in_situ_share
                && let Some(f) = overhead::in_situ_factor(d.before, work, d.dropped_ns)
            {
                budget.in_situ_share = share;
                budget.costs.probe.in_situ = f;
                if let Some(item) = &mut budget.item {
                    item.probe_costs = Some(budget.costs.probe);
                }
                self.notices.push(format!(
                    "overhead budget: a trap costs the traced processes {f:.1}x its calibrated cost in place (their CPU per socket byte over {} ms before the last drop and {} ms after it; the dropped probes' traps were {:.0}% of their CPU at the calibrated cost); the probes kept are weighed at that",
                    d.before.ns / 1_000_000,
                    interval.ns / 1_000_000,
                    100.0 * share,
                ));
            }
        }
        let keep = self.config.overhead_keep.as_ref();
        let mut plan = overhead::plan(
            &self.probes,
            &delta,
            budget.costs,
            interval,
            self.config.overhead_percent,
            keep,
        );
        if let Some(keep) = keep {
            let lost: Vec<&str> = plan
                .dropped
                .iter()
                .map(|d| d.symbol.as_str())
                .filter(|s| keep.has(s))
                .collect();
            if !lost.is_empty() {
                self.notices.push(format!(
                    "overhead budget: the rest did not fit without detaching {}, which the model (--like) was learned with: its units that call {} cannot be judged against it",
                    lost.join(", "),
                    if lost.len() == 1 { "it" } else { "them" }
                ));
            }
        }
        let now_ns = monotonic_ns();
        if !plan.drop.is_empty() {
            let mut kept = budget.kept.clone();
            for i in &plan.drop {
                kept[*i] = false;
            }
            let probes: Vec<Probe> = self
                .probes
                .iter()
                .zip(&kept)
                .filter(|(_, k)| **k)
                .map(|(p, _)| p.clone())
                .collect();
            match self.loaded.replace_probes(&probes) {
                Ok(()) => {
                    // Detached now: the dropped probes record nothing after this.
                    let at_ns = monotonic_ns();
                    for d in &mut plan.dropped {
                        d.at_ns = at_ns;
                    }
                    budget.kept = kept;
                    budget.decision = Some(Decision {
                        before: work,
                        dropped_ns: overhead::trap_ns_of(
                            &self.probes,
                            &delta,
                            &plan.drop,
                            budget.costs,
                        ),
                    });
                }
                Err(e) => {
                    self.notices.push(format!(
                        "overhead budget: could not detach the costliest probes ({}); every probe stays",
                        error_chain(&e)
                    ));
                    budget.stuck = true;
                    plan.drop.clear();
                    plan.dropped.clear();
                    plan.kept_percent = plan.estimated_percent;
                }
            }
        }
        // MPI's C functions: the profile of every rank needs each call.
        let mpi_calls: Vec<&str> = plan
            .drop
            .iter()
            .filter_map(|i| self.probes.get(*i))
            .filter(|p| {
                !p.entry_only && (p.symbol.starts_with("MPI_") || p.symbol.starts_with("PMPI_"))
            })
            .map(|p| p.symbol.as_str())
            .collect();
        let mpi_warning = (!mpi_calls.is_empty()).then(|| {
            format!(
                "warning: the budget detached MPI functions ({}): their calls from now on are missing, so the MPI analyses will not judge this capture; record MPI ranks without --overhead",
                mpi_calls.join(", ")
            )
        });
        let first = budget.item.is_none();
        let changed = first || !plan.drop.is_empty();
        match &mut budget.item {
            None => {
                let mut item = overhead::first_item(
                    budget.costs,
                    interval,
                    self.config.overhead_percent,
                    &plan,
                );
                item.decided_ns = now_ns;
                self.notices.extend(item.describe());
                if self.config.overhead_percent.is_none()
                    && item.probes_core_percent > overhead::WARN_CORE_PERCENT
                {
                    let calls = delta.iter().sum::<u64>() as f64;
                    let rate = calls / (interval.ns.max(1) as f64 / 1e9);
                    // The mean over the calls: each probe's cost is its
                    // function's class's.
                    let each_us = item.probes_core_percent / 100.0 * interval.ns as f64
                        / calls.max(1.0)
                        / 1e3;
                    self.notices.push(format!(
                        "warning: the function probes cost about {:.0}% of a core ({rate:.0} calls/s times {each_us:.1} us each on average, the cost calibrated at start by the functions' first instruction); --overhead PCT keeps the traced processes' slowdown within a budget by dropping the costliest",
                        item.probes_core_percent,
                    ));
                }
                budget.item = Some(item);
            }
            Some(item) if !plan.drop.is_empty() => {
                self.notices.push(format!(
                    "overhead budget: the probes kept cost {:.1}% over the last {} ms (the recorder's CPU {:.1} us a record); dropped {} more, estimated {:.1}% with the rest",
                    plan.estimated_percent,
                    interval.ns / 1_000_000,
                    budget.costs.probe.record_ns / 1e3,
                    plan.drop.len(),
                    plan.kept_percent
                ));
                for d in &plan.dropped {
                    self.notices.push(format!(
                        "  dropped {} ({:.0} calls/s, {:.1}%, {})",
                        d.symbol,
                        d.calls_per_s,
                        d.percent,
                        d.entry_class.name()
                    ));
                }
                item.kept_percent = plan.kept_percent;
                item.dropped.extend(plan.dropped);
            }
            Some(_) => {}
        }
        self.notices.extend(mpi_warning);
        let window = budget.cpu.window(
            self.loaded.func_hits(self.probes.len()),
            records,
            self.tracker.socket_bytes.unwrap_or(0),
        );
        if changed {
            budget.since = Some(window.clone());
            if let Some(item) = &budget.item {
                self.sink.meta(&Meta::Overhead(item.clone()))?;
            }
        }
        budget.window = window;
        Ok(())
    }

    /// The overhead item with the cost measured since the last decision
    /// (or, when the recording ends within the first interval, the probes
    /// weighed over what there was, nothing dropped).
    fn final_overhead(&mut self) -> Option<Overhead> {
        let pids = self.traced_pids();
        let records: u64 = self.records().iter().sum();
        let budget = self.budget.as_mut()?;
        budget.cpu.read(pids.into_iter());
        let calls = self.loaded.func_hits(self.probes.len());
        let Some(item) = &budget.item else {
            let interval = budget.cpu.since(&budget.window);
            let delta: Vec<u64> = calls
                .iter()
                .zip(&budget.window.calls)
                .map(|(now, then)| now.saturating_sub(*then))
                .collect();
            let plan = overhead::plan(&self.probes, &delta, budget.costs, interval, None, None);
            return Some(overhead::first_item(
                budget.costs,
                interval,
                self.config.overhead_percent,
                &plan,
            ));
        };
        let mut item = item.clone();
        if let Some(since) = &budget.since {
            let delta: Vec<u64> = calls
                .iter()
                .zip(&since.calls)
                .zip(&budget.kept)
                .map(|((now, then), kept)| if *kept { now.saturating_sub(*then) } else { 0 })
                .collect();
            let interval = budget.cpu.since(since);
            // The records charged at what they cost the recorder over the
            // same span, not at the figure the decisions had.
            let record_ns = record_cost_ns(since, own_cpu_ns(), records);
            let mut costs = budget.costs;
            if let Some(ns) = record_ns {
                costs.probe.record_ns = ns;
            }
            item.measured_percent = overhead::measured(&self.probes, &delta, costs, interval);
            item.measured_ms = interval.ns / 1_000_000;
            item.measured_record_ns = record_ns;
        }
        Some(item)
    }

    /// Waits for records (draining them) or for the command target to exit.
    pub async fn next(&mut self) -> Result<Activity, RecordError> {
        let child_exit = async {
            match &mut self.held {
                Some(h) => (&mut h.exited).await.ok().flatten(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            guard = self.ring.readable_mut() => {
                let mut guard = guard?;
                guard.clear_ready();
                let more = drain(
                    guard.get_inner_mut(),
                    &mut self.sink,
                    &mut self.tracker,
                    &mut self.loaded,
                    self.taps.as_mut(),
                    drain_limit(&self.config),
                    Some(Instant::now() + self.config.flush_interval),
                )?;
                if more {
                    // Stopped at the limit: come back at once for the rest.
                    guard.retain_ready();
                }
                Ok(Activity::Drained)
            }
            status = child_exit => {
                self.command_status = status;
                self.held = None;
                Ok(Activity::CommandExited(status))
            }
        }
    }

    /// After the command target exited: the reason to stop, unless other
    /// targets are still traced (the last records of its children still
    /// arrive until they exit too).
    pub fn command_done(&mut self) -> Option<String> {
        if self.has_exe_targets {
            return None;
        }
        self.tracker.live.retain(|pid| procfs::exists(*pid));
        self.tracker
            .live
            .is_empty()
            .then(|| "command exited".to_string())
    }

    /// Periodic work: drain, write new symbols, flush, counters once a
    /// second. Returns a reason to stop when every pid target has exited.
    pub fn tick(&mut self) -> Result<Option<String>, RecordError> {
        self.drain()?;
        if self.last_kstats.elapsed() >= self.config.stats_interval {
            self.last_kstats = Instant::now();
            self.collect_kstats()?;
            if !self.config.cpu_times {
                self.cpu_times()?;
            }
        }
        if self.config.cpu_times {
            self.cpu_times()?;
        }
        self.budget_step()?;
        self.tracker.settle(&mut self.sink, SAMPLED_SYMBOLS_TICK)?;
        self.sink.flush()?;
        self.loaded.flush_logs();
        if self.last_stats.elapsed() >= Duration::from_secs(1) {
            self.last_stats = Instant::now();
            write_stats(&self.loaded, &mut self.sink)?;
        }
        if self.has_pid_targets && !self.has_exe_targets && self.command_status.is_none() {
            self.tracker.live.retain(|pid| procfs::exists(*pid));
            if self.tracker.live.is_empty() {
                return Ok(Some("targets exited".to_string()));
            }
        }
        Ok(None)
    }

    /// Writes the file, block and network counters of the interval that
    /// ends now.
    fn collect_kstats(&mut self) -> Result<(), RecordError> {
        self.kstats.collect(
            &mut self.loaded,
            &self.tracker.live,
            monotonic_ns(),
            &mut self.sink,
        )
    }

    /// A [`CpuTimes`] record of every traced process alive, when asked for.
    fn cpu_times(&mut self) -> Result<(), RecordError> {
        if !self.config.cpu_times && !self.config.cpu_stats {
            return Ok(());
        }
        let pids: Vec<u32> = self
            .tracker
            .live
            .iter()
            .copied()
            .filter(|pid| self.loaded.is_traced(*pid))
            .collect();
        self.cpu_tally.retain(&pids);
        for pid in pids {
            let Some(threads) = procfs::thread_cpu_times(pid) else {
                continue;
            };
            let ([run_ns, wait_ns, slices], alive) = self.cpu_tally.read(pid, &threads);
            let rec = CpuTimes {
                header: Header {
                    ts_ns: monotonic_ns(),
                    pid,
                    tid: pid,
                    kind: kind::CPU_TIMES,
                    size: size_of::<CpuTimes>() as u16,
                    cpu: 0,
                },
                run_ns,
                wait_ns,
                slices,
                threads: alive,
                flags: record::cpu_times_flags::KEEPS_EXITED,
            };
            self.sink.push(rec.as_bytes(), &rec.header)?;
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<(), RecordError> {
        drain(
            self.ring.get_mut(),
            &mut self.sink,
            &mut self.tracker,
            &mut self.loaded,
            self.taps.as_mut(),
            drain_limit(&self.config),
            Some(Instant::now() + self.config.flush_interval),
        )?;
        Ok(())
    }

    /// Processes traced now.
    pub fn live_processes(&self) -> impl Iterator<Item = (u32, &str)> {
        self.tracker
            .live
            .iter()
            .map(|pid| (*pid, self.tracker.comms.get(pid).map_or("", String::as_str)))
    }

    /// Targets that could not be resolved and were left out, and why.
    pub fn skipped(&self) -> &[(Target, String)] {
        &self.skipped
    }

    /// Function probes attached.
    pub fn probes(&self) -> &[Probe] {
        &self.probes
    }

    /// Loss counters of the eBPF side since the session started.
    pub fn losses(&self) -> BTreeMap<String, u64> {
        self.loaded.read_stats()
    }

    /// Records written by kind over every file of the session.
    pub fn records(&self) -> [u64; crate::sink::KINDS] {
        let mut all = self.totals;
        for (a, b) in all.iter_mut().zip(self.sink.counts.iter()) {
            *a += b;
        }
        all
    }

    /// The capture file being written, its size and its first record's time.
    pub fn current_file(&self) -> (&Path, u64, u64) {
        (self.sink.path(), self.sink.bytes(), self.sink.first_ns())
    }

    /// About how many bytes of metadata a rotation writes at the start of
    /// the next file (its processes and their objects' symbol tables,
    /// written again so the file stands alone): the metadata of the current
    /// file, which holds the same and a little more. A disk limit must
    /// leave room for it.
    pub fn rotation_bytes(&self) -> u64 {
        self.sink.meta_bytes()
    }

    /// Mean size of a record in the current file, bytes; metadata (large
    /// at the start of a file) is included, so the mean is capped at the
    /// largest record kinds' size.
    pub fn bytes_per_record(&self) -> f64 {
        let records = self.sink.records();
        if records == 0 {
            64.0
        } else {
            (self.sink.bytes() as f64 / records as f64).min(160.0)
        }
    }

    /// Keeps what the agent needs beside the rotating files (see [`Taps`]).
    pub fn enable_taps(&mut self, taps: Taps) {
        self.taps = Some(taps);
    }

    /// The taps, when enabled.
    pub fn taps(&self) -> Option<&Taps> {
        self.taps.as_ref()
    }

    /// The taps, when enabled.
    pub fn taps_mut(&mut self) -> Option<&mut Taps> {
        self.taps.as_mut()
    }

    /// Closes the current capture file (counters, end marker `rotated`) and
    /// continues in a new one at `path`, which starts with everything a
    /// reader needs on its own: probes, the live processes, their objects'
    /// symbols, kernel symbols, and the USDT strings the taps kept.
    pub fn rotate(&mut self, path: &Path) -> Result<ClosedFile, RecordError> {
        self.drain()?;
        // The interval ends with the file, so none straddles two files.
        self.collect_kstats()?;
        self.last_kstats = Instant::now();
        self.tracker.settle(&mut self.sink, SAMPLED_SYMBOLS_TICK)?;
        write_stats(&self.loaded, &mut self.sink)?;
        self.sink.meta(&Meta::End(End {
            stop_ns: monotonic_ns(),
            // Readers take the later of this and the file's own header.
            started_ns: self.recording_start_ns,
            reason: "rotated".to_string(),
            ..Default::default()
        }))?;
        self.sink.flush()?;
        // The flight recorder's names are new each time.
        let next = Sink::create(
            path,
            &capture_header(&self.config, &self.view),
            self.config.chunk_bytes,
            false,
        )?;
        self.kstats.new_file();
        let old = std::mem::replace(&mut self.sink, next);
        for (a, b) in self.totals.iter_mut().zip(old.counts.iter()) {
            *a += b;
        }
        let closed = ClosedFile {
            path: old.path().to_path_buf(),
            bytes: old.bytes(),
            records: old.records(),
            first_ns: old.first_ns(),
            last_ns: old.last_ns(),
        };
        drop(old);
        write_preface(&mut self.sink, &self.probes, &self.usdt_sites)?;
        if let Some(item) = self.budget.as_ref().and_then(|b| b.item.as_ref()) {
            // Each file tells which functions are missing on purpose.
            self.sink.meta(&Meta::Overhead(item.clone()))?;
        }
        self.tracker.rewrite(&mut self.sink)?;
        if let Some(taps) = &self.taps {
            self.sink.push_block(&taps.strings_block())?;
        }
        self.sink.flush()?;
        Ok(closed)
    }

    /// One [`BlockedStack`] record per thread of a traced process that is
    /// inside a system call now (any call: where a hung thread stands),
    /// with its user stack unwound. A thread's entry is its last call,
    /// which may have returned long ago: it counts only while the kernel
    /// says the thread is in that call ([`in_call`]). A thread whose call
    /// ended while its stack was read (its entry changed, or the kernel no
    /// longer shows it in the call) is left out: its stack is no longer
    /// the call's. Processes already gone are out of reach.
    ///
    /// A thread the kernel shows running is looked at again, up to
    /// [`BLOCKED_SETTLE_LOOKS`] times [`BLOCKED_SETTLE_STEP`] apart: one
    /// woken from a short wait (a poll loop's timeout) is runnable, shown
    /// as running, until a CPU is free, which on a busy host is often at
    /// the stop; a moment later it waits again where it always waits. Such
    /// a record is stamped when it was seen, not at the stop.
    async fn write_blocked(&mut self, stop_ns: u64) -> Result<(), RecordError> {
        let mut done = HashSet::new();
        let mut running = self.blocked_look(stop_ns, &mut done)?;
        for _ in 0..BLOCKED_SETTLE_LOOKS {
            if running == 0 {
                break;
            }
            tokio::time::sleep(BLOCKED_SETTLE_STEP).await;
            running = self.blocked_look(monotonic_ns(), &mut done)?;
        }
        Ok(())
    }

    /// One look for [`Self::write_blocked`]: writes, stamped `at_ns`, the
    /// threads in a call now that are not in `done`, and adds them to it.
    /// Returns how many threads of the traced processes it saw outside
    /// any call (running, or their call ended while it looked).
    fn blocked_look(&mut self, at_ns: u64, done: &mut HashSet<u32>) -> Result<usize, RecordError> {
        // One walk of the map a look (up to 16,384 entries, a system call
        // or two each): the threads with an entry, and those in a call now.
        let entries = self.loaded.blocked();
        let seen: HashSet<u32> = entries.iter().map(|(tid, _)| *tid).collect();
        let mut by_pid: BTreeMap<u32, Vec<(u32, BlockedEntry)>> = BTreeMap::new();
        for (tid, entry) in entries {
            if !done.contains(&tid)
                && self.loaded.is_traced(entry.pid)
                && in_call(&entry, procfs::blocked_syscall(entry.pid, tid))
            {
                by_pid.entry(entry.pid).or_default().push((tid, entry));
            }
        }
        // Threads blocked since before the recording started: no entry,
        // but the kernel says where they are.
        let mut before: BTreeMap<u32, Vec<(u32, u32, u64, u64)>> = BTreeMap::new();
        let mut running = 0;
        for &pid in self
            .tracker
            .live
            .iter()
            .filter(|p| self.loaded.is_traced(**p))
        {
            for tid in procfs::threads(pid) {
                if done.contains(&tid) {
                    continue;
                }
                let now = procfs::blocked_syscall(pid, tid);
                if now.is_none() {
                    running += 1;
                } else if let (Some((nr, sp, ip)), false) = (now, seen.contains(&tid)) {
                    before.entry(pid).or_default().push((tid, nr, sp, ip));
                }
            }
        }
        let mut unwinder = Unwinder::new();
        let mut left_out = 0;
        let pids: BTreeSet<u32> = by_pid.keys().chain(before.keys()).copied().collect();
        for pid in pids {
            let Ok(text) = procfs::maps_text(pid) else {
                continue;
            };
            let maps = procfs::parse_maps(&text);
            for (tid, nr, sp, ip) in before.remove(&pid).unwrap_or_default() {
                let stack = Stack::read(pid, sp, &maps);
                // Still in the same call: otherwise its stack is not the call's.
                if procfs::blocked_syscall(pid, tid) != Some((nr, sp, ip))
                    || self.loaded.blocked_entry(tid).is_some()
                {
                    left_out += 1;
                    continue;
                }
                let (frames, flags) = unwinder.unwind(pid, &maps, &stack, (ip, sp, None));
                let since = self.recording_start_ns;
                self.push_blocked(
                    pid,
                    tid,
                    nr,
                    since,
                    &frames,
                    flags | blocked_flags::BEFORE_START,
                    at_ns,
                )?;
                done.insert(tid);
            }
            let mut threads = by_pid.remove(&pid).unwrap_or_default();
            threads.sort_by_key(|(tid, _)| *tid);
            for (tid, entry) in threads {
                let stack = Stack::read(pid, entry.sp, &maps);
                if self.loaded.blocked_entry(tid) != Some(entry)
                    || !in_call(&entry, procfs::blocked_syscall(pid, tid))
                {
                    left_out += 1;
                    continue;
                }
                let (frames, flags) =
                    unwinder.unwind(pid, &maps, &stack, (entry.ip, entry.sp, Some(entry.bp)));
                self.push_blocked(pid, tid, entry.nr, entry.ts_ns, &frames, flags, at_ns)?;
                done.insert(tid);
            }
        }
        if left_out > 0 {
            log::debug!("{left_out} thread(s) left their system call while their stack was read");
        }
        Ok(running + left_out)
    }

    /// Writes one [`BlockedStack`] record.
    #[expect(clippy::too_many_arguments, reason = "the record's fields")]
    fn push_blocked(
        &mut self,
        pid: u32,
        tid: u32,
        nr: u32,
        since_ns: u64,
        frames: &[u64],
        flags: u32,
        stop_ns: u64,
    ) -> Result<(), RecordError> {
        let mut rec = BlockedStack {
            header: Header {
                ts_ns: stop_ns,
                pid,
                tid,
                kind: kind::BLOCKED_STACK,
                size: size_of::<BlockedStack>() as u16,
                cpu: 0,
            },
            since_ns,
            nr,
            depth: frames.len() as u32,
            flags,
            ..BlockedStack::default()
        };
        for (slot, frame) in rec.frames.iter_mut().zip(frames) {
            *slot = *frame;
        }
        self.sink.push(rec.as_bytes(), &rec.header)?;
        // Objects mapped since the process was read (a dlopen): read
        // again, so the frames' symbols are in the capture.
        for &frame in frames {
            self.tracker
                .remap_if_unmapped(pid, frame, stop_ns, &mut self.sink)?;
        }
        Ok(())
    }

    /// Final drain, unfinished system calls, counters, end marker; then the
    /// summary goes to `progress` and the programs are detached.
    pub async fn finish(
        mut self,
        reason: String,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Summary, RecordError> {
        // Where the capture's records end: a call a thread entered after
        // this (the targets still run while the recorder stops) follows
        // records that were never drained, and is not written as in flight
        // below.
        let drained_ns = monotonic_ns();
        // All of it: nothing drains after this.
        drain(
            self.ring.get_mut(),
            &mut self.sink,
            &mut self.tracker,
            &mut self.loaded,
            self.taps.as_mut(),
            u64::MAX,
            None,
        )?;
        self.cpu_times()?;
        let stop_ns = monotonic_ns();
        self.kstats.collect(
            &mut self.loaded,
            &self.tracker.live,
            stop_ns,
            &mut self.sink,
        )?;
        for (tid, enter) in self.loaded.inflight() {
            // Calls on files are counted when they end, never recorded.
            if enter.file_class != 0 || enter.ts_ns > drained_ns {
                continue;
            }
            let pid = tgid_of(tid);
            if pid == 0 || !self.loaded.is_traced(pid) {
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
                conn_port: 0,
                _pad: 0,
                addr: SockAddr::default(),
            };
            self.sink.push(rec.as_bytes(), &rec.header)?;
        }
        self.write_blocked(stop_ns).await?;
        self.tracker.settle(&mut self.sink, SAMPLED_SYMBOLS_STOP)?;
        let unread = self.tracker.unread_sampled();
        if !unread.is_empty() {
            progress(&format!(
                "symbols of {} object(s) that only sampled processes ran were not read within {} s of the stop ({}): their samples show as object+offset",
                unread.len(),
                SAMPLED_SYMBOLS_STOP.as_secs(),
                unread.join(", ")
            ));
        }
        let kernel_ms = self
            .kernel_cost
            .as_ref()
            .and_then(|k| k.ms_per_s(&self.loaded));
        let mut overhead = self.final_overhead();
        if let Some(item) = &mut overhead {
            item.kernel_ms_per_s = kernel_ms;
        }
        if let Some(k) = kernel_ms {
            progress(&format!(
                "kernel programs (system calls, file and block I/O, lifecycle, samples): {k:.1} ms of CPU per second ({:.1}% of one core) on every process of the node, beyond the function-probe budget",
                k / 10.0
            ));
        }
        if let Some(item) = overhead {
            if item.decided_ns == 0 && self.config.overhead_percent.is_some() {
                progress(
                    "the recording ended before the probes' first interval: nothing was weighed against the budget",
                );
            }
            if let Some(m) = item.measured_percent {
                let records = match (item.measured_record_ns, item.probe_costs) {
                    (Some(r), Some(c)) => format!(
                        "; the recorder's CPU per record {:.1} us over that span, weighed at {:.1} us",
                        r / 1e3,
                        c.record_ns / 1e3
                    ),
                    _ => String::new(),
                };
                progress(&format!(
                    "function probes kept: measured slowdown {m:.1}% over {} ms (estimated {:.1}%{records})",
                    item.measured_ms, item.kept_percent
                ));
            }
            self.sink.meta(&Meta::Overhead(item))?;
        }
        let losses = write_stats(&self.loaded, &mut self.sink)?;
        // Where each traced process was when recording stopped: a hang
        // analysis tells a stopped process from one running or waiting.
        let processes = self
            .tracker
            .live
            .iter()
            .filter(|pid| self.loaded.is_traced(**pid))
            .filter_map(|&pid| {
                Some(ProcessState {
                    pid,
                    state: procfs::state(pid)?,
                })
            })
            .collect();
        self.sink.meta(&Meta::End(End {
            stop_ns,
            started_ns: self.recording_start_ns,
            reason: reason.clone(),
            processes,
        }))?;
        self.sink.flush()?;
        self.loaded.flush_logs();
        if let Some(h) = self.held.take() {
            // Recording stopped before the command ended: end it too.
            // SAFETY: signalling our own child.
            unsafe { libc::kill(h.pid as libc::pid_t, libc::SIGTERM) };
            self.command_status = h.exited.await.ok().flatten();
        }

        let mut records = BTreeMap::new();
        for (kind, n) in self.records().iter().enumerate() {
            if *n > 0 {
                *records.entry(kind_name(kind as u16)).or_insert(0) += n;
            }
        }
        let tracker = &self.tracker;
        let processes = tracker
            .comms
            .iter()
            .filter(|(pid, _)| {
                tracker.roots.contains(pid)
                    || self.loaded.is_traced(**pid)
                    || tracker.live.contains(pid)
                    || !self.config.sample_all
            })
            .map(|(pid, comm)| (*pid, comm.clone()))
            .collect();
        let summary = Summary {
            reason,
            elapsed: self.started.elapsed(),
            records,
            losses,
            processes,
            probes: self.probes.len(),
            usdt_probes: self.usdt_sites.len(),
            bytes: self.sink.bytes(),
            output: self.sink.path().to_path_buf(),
            command_status: self.command_status,
        };
        // Tell the user before detaching: the kernel takes an RCU grace period
        // per tracepoint and uprobe link, seconds in all (see Loaded::detach).
        progress(&summary.to_string());
        self.loaded.detach();
        Ok(summary)
    }
}

/// The metadata every capture file of a session starts with.
fn write_preface(
    sink: &mut Sink,
    probes: &[Probe],
    usdt_sites: &[UsdtSite],
) -> Result<(), RecordError> {
    sink.meta(&Meta::Probes {
        probes: probes.to_vec(),
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
    Ok(())
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

/// Most one drain adds to the capture file: half the ring. While the
/// targets keep the ring full a drain would otherwise never end, and the
/// agent's disk limit keeps one ring's worth free between its checks.
fn drain_limit(config: &RecordConfig) -> u64 {
    u64::from(config.ring_bytes) / 2
}

/// Moves records from the ring to the sink until the ring is empty, the
/// file grew by `limit` bytes, or it is `until`; returns whether it stopped
/// at a limit. A ring that fills as fast as it is drained is never empty:
/// without `until`, a busy server's records could keep the recorder here
/// while its counters, CPU times and stop conditions waited.
fn drain(
    ring: &mut RingBuf<MapData>,
    sink: &mut Sink,
    tracker: &mut Tracker,
    loaded: &mut Loaded,
    mut taps: Option<&mut Taps>,
    limit: u64,
    until: Option<Instant>,
) -> Result<bool, RecordError> {
    let start = sink.bytes();
    let mut n = 0u32;
    while sink.bytes() - start < limit {
        n = n.wrapping_add(1);
        if n.is_multiple_of(256) && until.is_some_and(|u| Instant::now() >= u) {
            return Ok(true);
        }
        let Some(item) = ring.next() else {
            return Ok(false);
        };
        let bytes: &[u8] = &item;
        let Some(header) = Header::read_from(bytes) else {
            continue;
        };
        if header.kind == kind::BLOCKED_RAW {
            tracker.blocked_raw(bytes, sink)?;
            continue;
        }
        tracker.observe(&header, bytes, loaded, sink)?;
        if let Some(taps) = taps.as_deref_mut() {
            taps.observe(&header, bytes);
        }
        sink.push(bytes, &header)?;
    }
    Ok(true)
}

/// What the agent keeps in memory beside its rotating files, each bounded:
/// - every process's first records (its *preamble*: the initializer unit and
///   establishing calls that model-based scoring needs to know which process
///   group a daemon belongs to, long after its start has rotated out);
/// - the USDT strings, which are sent once per process and pointer, so every
///   new file needs them again;
/// - function entries per probe since the last look (load shedding).
#[derive(Debug, Default)]
pub struct Taps {
    per_process: usize,
    total: usize,
    used: usize,
    preambles: BTreeMap<u32, Vec<u8>>,
    strings: BTreeMap<u32, Vec<u8>>,
    exited: BTreeMap<u32, u64>,
    hits: Vec<u64>,
    /// Records not kept because a preamble or the total was full (they are
    /// still in the capture files).
    pub not_kept: u64,
}

impl Taps {
    /// Keeps at most `per_process` bytes of each process's first records and
    /// `total` bytes of preambles and strings together.
    pub fn new(per_process: usize, total: usize) -> Self {
        Self {
            per_process,
            total,
            ..Self::default()
        }
    }

    #[inline]
    fn observe(&mut self, header: &Header, bytes: &[u8]) {
        match header.kind {
            kind::FUNC_ENTRY
            | kind::FUNC_ENTRY_ARGS
            | kind::FUNC_ENTRY_STACK
            | kind::FUNC_ENTRY_FRAME => {
                if let Some(e) = FuncEntry::read_from(bytes) {
                    let id = e.func_id as usize;
                    if id >= self.hits.len() {
                        self.hits.resize(id + 1, 0);
                    }
                    self.hits[id] += 1;
                }
            }
            kind::LIFECYCLE => {
                if let Some(lc) = Lifecycle::read_from(bytes)
                    && lc.event == lifecycle::EXIT
                    && lc.group_dead != 0
                {
                    self.exited.insert(header.pid, header.ts_ns);
                }
            }
            kind::USDT_STRING => {
                if self.used + bytes.len() <= self.total {
                    self.used += bytes.len();
                    self.strings
                        .entry(header.pid)
                        .or_default()
                        .extend_from_slice(bytes);
                } else {
                    self.not_kept += 1;
                }
                return;
            }
            // Samples and retransmits say nothing about what a process is.
            kind::SAMPLE | kind::TCP_RETRANSMIT | kind::TCP_RETRANSMIT_SOCK => return,
            _ => {}
        }
        // Records of these kinds only come from traced processes (the eBPF
        // side filters them), and a short-lived one may be gone from the
        // traced set by the time its records are drained.
        if header.pid == 0 {
            return;
        }
        let kept = self.preambles.entry(header.pid).or_default();
        if kept.len() + bytes.len() <= self.per_process && self.used + bytes.len() <= self.total {
            kept.extend_from_slice(bytes);
            self.used += bytes.len();
        } else {
            self.not_kept += 1;
        }
    }

    /// The preambles' records older than `before_ns` (records from then on
    /// are in the files being read with them), process by process.
    pub fn preamble_records(&self, before_ns: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for bytes in self.preambles.values() {
            for (header, rec) in RawRecords::new(bytes).flatten() {
                if header.ts_ns < before_ns {
                    out.extend_from_slice(rec);
                }
            }
        }
        out
    }

    /// Every kept USDT string record.
    pub fn strings_block(&self) -> Vec<u8> {
        self.strings.values().flatten().copied().collect()
    }

    /// Forgets processes that exited before `ns` (nothing still kept on
    /// disk refers to them).
    pub fn forget_exited_before(&mut self, ns: u64) {
        let gone: Vec<u32> = self
            .exited
            .iter()
            .filter(|(_, t)| **t < ns)
            .map(|(p, _)| *p)
            .collect();
        for pid in gone {
            self.exited.remove(&pid);
            for map in [&mut self.preambles, &mut self.strings] {
                if let Some(v) = map.remove(&pid) {
                    self.used -= v.len();
                }
            }
        }
    }

    /// Function entries per `func_id` since the last call.
    pub fn take_hits(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.hits)
    }

    /// Bytes kept in memory.
    pub fn bytes(&self) -> usize {
        self.used
    }

    /// Processes with a preamble.
    pub fn processes(&self) -> usize {
        self.preambles.len()
    }
}

/// Whether a thread whose last system call entry is `entry` is inside
/// that call now, from what `/proc/PID/task/TID/syscall` shows (`now`:
/// number, stack pointer, instruction pointer; `None` while it runs). Every
/// call the thread enters overwrites its entry, so the same number, stack
/// pointer and return address mean the same call; a call that returned
/// leaves a stale entry, which must not read as a blocked thread.
fn in_call(entry: &BlockedEntry, now: Option<(u32, u64, u64)>) -> bool {
    now == Some((entry.nr, entry.sp, entry.ip))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{
        CpuMeter, CpuTally, EnrollTarget, RECORD_COST_MIN_RECORDS, SampledObject, Tracker, Window,
        in_call, next_record_cost, record_cost_ns, symbol_at_offset,
    };
    use tracer_common::{
        capture::{ObjectSymbols, Segment, Symbol},
        record::BlockedEntry,
    };

    /// The recorder's CPU per record: its CPU over the records it wrote
    /// in the window (the GlusterFS shape: 9 ms of CPU over 10,000 records
    /// in a second); nothing to weigh without records, or without both
    /// readings of its CPU (not its whole life's CPU over one window).
    #[test]
    fn the_recorders_cost_per_record_is_its_cpu_over_its_records() {
        let mut from = Window {
            at: std::time::Instant::now(),
            cpu_ns: 0,
            wait_ns: 0,
            host: None,
            calls: Vec::new(),
            own_ns: Some(40_000_000),
            records: 5_000,
            bytes: 0,
        };
        assert_eq!(record_cost_ns(&from, Some(49_000_000), 15_000), Some(900.0));
        assert_eq!(
            record_cost_ns(&from, Some(45_000_000), 10_000),
            Some(1000.0)
        );
        assert_eq!(record_cost_ns(&from, Some(49_000_000), 5_000), None);
        assert_eq!(record_cost_ns(&from, Some(49_000_000), 4_000), None);
        assert_eq!(record_cost_ns(&from, None, 15_000), None);
        from.own_ns = None;
        assert_eq!(record_cost_ns(&from, Some(49_000_000), 15_000), None);
    }

    /// A MooseFS chunkserver still idle at the budget's first look (stop
    /// 37): 11.7 ms of the recorder's CPU, its fixed work, over the 200
    /// records of the window would read 58 us a record and drop probes
    /// that fit. The figure waits for a window with enough records, where
    /// the same fixed work is a small part: 16 ms over 20,000 records.
    #[test]
    fn a_window_with_few_records_does_not_set_the_record_cost() {
        let from = Window {
            at: std::time::Instant::now(),
            cpu_ns: 0,
            wait_ns: 0,
            host: None,
            calls: Vec::new(),
            own_ns: Some(100_000_000),
            records: 1_000,
            bytes: 0,
        };
        assert_eq!(record_cost_ns(&from, Some(111_700_000), 1_200), None);
        assert_eq!(
            record_cost_ns(
                &from,
                Some(111_700_000),
                1_000 + RECORD_COST_MIN_RECORDS - 1
            ),
            None
        );
        assert_eq!(
            record_cost_ns(&from, Some(116_000_000), 21_000),
            Some(800.0)
        );
    }

    /// The records' cost is taken again at every look whose window wrote
    /// enough records, and the next decision weighs the kept probes with
    /// it. At the first look every probe fires and the recorder drains
    /// many records a wake-up (12 ms over 40,000 records: 0.3 us); once the
    /// hottest are gone, 9 ms over 9,000 records (1 us). The two probes
    /// kept, 2,500 push-first calls a second against 250 ms of the traced
    /// processes' CPU, fit a 5% budget at 0.3 us a record (3.8%) and not at
    /// 1 us (5.2%): the hotter goes. A window with too few records keeps
    /// the last figure.
    #[test]
    fn the_record_cost_follows_the_latest_window_with_enough_records() {
        use tracer_common::capture::{EntryClass, Probe, ProbeCosts};
        let window = |own_ms: u64, records| Window {
            at: std::time::Instant::now(),
            cpu_ns: 0,
            wait_ns: 0,
            host: None,
            calls: Vec::new(),
            own_ns: Some(own_ms * 1_000_000),
            records,
            bytes: 0,
        };
        let first = next_record_cost(0.0, &window(100, 0), Some(112_000_000), 40_000);
        assert_eq!(first, 300.0);
        let next = next_record_cost(first, &window(112, 40_000), Some(121_000_000), 49_000);
        assert_eq!(next, 1_000.0);
        assert_eq!(
            next_record_cost(next, &window(121, 49_000), Some(130_000_000), 49_100),
            1_000.0
        );
        let probes: Vec<Probe> = ["warm", "cool"]
            .iter()
            .enumerate()
            .map(|(i, name)| Probe {
                func_id: i as u32,
                symbol: name.to_string(),
                entry_class: EntryClass::Push,
                ..Probe::default()
            })
            .collect();
        let costs = |record_ns| crate::overhead::Costs {
            probe: ProbeCosts {
                push_entry_ns: 1_200.0,
                nop_entry_ns: 1_100.0,
                stepped_entry_ns: 10_000.0,
                return_ns: 2_000.0,
                record_ns,
                in_situ: 0.0,
            },
        };
        let second = crate::overhead::Interval {
            ns: 1_000_000_000,
            traced_cpu_ns: 250_000_000,
            traced_wait_ns: 750_000_000,
            host_busy: 0.9,
        };
        let calls = [2_000, 500];
        let plan = |record_ns| {
            crate::overhead::plan(&probes, &calls, costs(record_ns), second, Some(5.0), None)
        };
        let at_first = plan(first);
        assert!(at_first.drop.is_empty(), "{at_first:?}");
        assert!((at_first.kept_percent - 3.8).abs() < 1e-9, "{at_first:?}");
        let at_next = plan(next);
        assert_eq!(at_next.drop, [0], "{at_next:?}");
        assert!(
            (at_next.estimated_percent - 5.2).abs() < 1e-9,
            "{at_next:?}"
        );
    }

    /// A thread's entry is its last call: it is blocked in it only while
    /// the kernel shows that call (number, stack pointer, return address).
    /// A call that returned (the thread runs, or waits in another call
    /// from elsewhere) is not a blocked thread.
    #[test]
    fn a_finished_calls_entry_is_not_a_blocked_thread() {
        let entry = BlockedEntry {
            ts_ns: 5,
            pid: 10,
            nr: 35,
            ip: 0x7f00_1234,
            sp: 0x7ffd_1000,
            bp: 0x7ffd_1040,
        };
        assert!(in_call(&entry, Some((35, 0x7ffd_1000, 0x7f00_1234))));
        // Running user code.
        assert!(!in_call(&entry, None));
        // Another call, or the same call from another frame: the entry
        // would have been overwritten, so this is not its call.
        assert!(!in_call(&entry, Some((202, 0x7ffd_1000, 0x7f00_1234))));
        assert!(!in_call(&entry, Some((35, 0x7ffd_0f00, 0x7f00_1234))));
        assert!(!in_call(&entry, Some((35, 0x7ffd_1000, 0x7f00_5678))));
    }

    /// A sample of a sampled-only object is placed in its symbol, which
    /// is given a size where it had none, so that a table of the symbols
    /// hit alone finds nothing for an address in a symbol left out.
    #[test]
    fn a_sampled_offset_is_placed_in_a_bounded_symbol() {
        let sym = |addr, size, name: &str| Symbol {
            addr,
            size,
            name: name.into(),
        };
        let table = ObjectSymbols {
            path: "/bin/app".into(),
            segments: vec![Segment {
                vaddr: 0x1000,
                offset: 0,
                filesz: 0x1000,
            }],
            symbols: vec![
                sym(0x1000, 0, "a"),
                sym(0x1100, 0x10, "b"),
                sym(0x1200, 0, "c"),
            ],
            ..ObjectSymbols::default()
        };
        // File offsets 0x50 (in a), 0x180 (past b's end), 0x210 (in c,
        // the last), 0x2000 (outside the segment).
        let at = |offset| symbol_at_offset(&table, offset).map(|(s, size)| (s.name.as_str(), size));
        assert_eq!(at(0x50), Some(("a", 0x100)));
        assert_eq!(at(0x108), Some(("b", 0x10)));
        assert_eq!(at(0x180), None);
        assert_eq!(at(0x210), Some(("c", 0)));
        assert_eq!(at(0x2000), None);
    }

    /// Over the cap, the least recently sampled object's full table leaves
    /// the cache first; the symbols it had placed stay.
    #[test]
    fn the_least_recently_sampled_table_is_evicted_first() {
        let (recent, old) = (Path::new("/usr/bin/true"), Path::new("/usr/bin/false"));
        let mut tracker = Tracker::new();
        for (used, path) in [(2, recent), (1, old)] {
            tracker.elf_cache.get(path).expect("readable ELF");
            let object = SampledObject {
                cached_bytes: 100,
                used,
                table: Some(ObjectSymbols {
                    path: path.display().to_string(),
                    symbols: vec![Symbol {
                        addr: 0x1000,
                        size: 0x10,
                        name: "placed".into(),
                    }],
                    ..ObjectSymbols::default()
                }),
                ..SampledObject::default()
            };
            tracker.sampled.insert(path.display().to_string(), object);
        }
        tracker.evict_sampled(150);
        assert!(tracker.elf_cache.cached(recent).is_some());
        assert!(tracker.elf_cache.cached(old).is_none());
        let placed = &tracker.sampled[old.to_str().expect("utf8")].table;
        assert_eq!(placed.as_ref().map(|t| t.symbols.len()), Some(1));
        tracker.evict_sampled(150);
        assert!(
            tracker.elf_cache.cached(recent).is_some(),
            "under the cap nothing more goes"
        );
    }

    /// The mapping placed from an enrolment record is where the kernel
    /// mapped the program: checked on this test process against its own
    /// `/proc` maps, for a function of it (a call site in the program).
    #[test]
    fn an_entry_point_places_the_programs_code_where_the_kernel_mapped_it() {
        let exe = std::env::current_exe()
            .expect("current exe")
            .canonicalize()
            .expect("canonical");
        let elf = crate::elf::ElfSymbols::read(&exe).expect("readable ELF");
        let path = exe.display().to_string();
        let target =
            EnrollTarget::new(&path, elf.entry, &elf.table.segments).expect("entry in a segment");
        let own = crate::procfs::snapshot(std::process::id(), 0, true).expect("own snapshot");
        let real = |addr: u64| {
            own.maps
                .iter()
                .find(|m| m.path == path && addr >= m.start && addr < m.end)
                .map(|m| addr - m.start + m.offset)
        };
        // Where the entry point is mapped in this process (what the
        // enrolment probe reads from the instruction pointer).
        let entry_offset =
            crate::elf::file_offset(&elf.table.segments, elf.entry).expect("entry offset");
        let m = own
            .maps
            .iter()
            .find(|m| {
                m.path == path
                    && entry_offset >= m.offset
                    && entry_offset - m.offset < m.end - m.start
            })
            .expect("entry point mapped");
        let entry_ip = m.start + (entry_offset - m.offset);
        let placed = target.mapping(entry_ip).expect("a mapping");
        assert_eq!(placed.path, path);
        // A function of the program: same file offset through either mapping.
        let f =
            an_entry_point_places_the_programs_code_where_the_kernel_mapped_it as *const () as u64;
        assert!(
            f >= placed.start && f < placed.end,
            "{f:#x} outside {placed:?}"
        );
        assert_eq!(Some(f - placed.start + placed.offset), real(f));
        // An address no entry point can have is not placed.
        assert_eq!(target.mapping(elf.entry.wrapping_sub(1)), None);
        // Named as the kernel names it.
        assert_eq!(target.comm(), own.comm);
    }

    /// A child busy for a while, then asleep under the same pid.
    fn busy_child() -> (std::process::Child, u32) {
        let child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec sleep 30",
            ])
            .spawn()
            .expect("sh runs");
        let pid = child.id();
        (child, pid)
    }

    /// Waits until `pid`'s busy part is over (it became `sleep`).
    fn wait_until_asleep(pid: u32) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim() != "sleep")
        {
            assert!(std::time::Instant::now() < deadline, "the loop ends");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// A process born after metering began (a launcher's daemon, a
    /// followed child) is first read after it worked: all its CPU counts,
    /// or the calls it made would be weighed against none. One that was
    /// there before counts from its first reading.
    #[test]
    fn cpu_of_a_process_born_since_metering_counts_from_its_birth() {
        let mut meter = CpuMeter::default();
        let me = std::process::id();
        meter.read([me].into_iter());
        assert_eq!(
            meter.total(),
            0,
            "a process there before counts from its first reading"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (mut child, pid) = busy_child();
        wait_until_asleep(pid);
        let before = meter.total();
        meter.read([pid].into_iter());
        let child_ns = meter.total() - before;
        let _ = child.kill();
        let _ = child.wait();
        let (run_ns, ..) = crate::procfs::cpu_times(pid).unwrap_or_default();
        assert!(
            child_ns >= 20_000_000,
            "the child's loop counts: {child_ns} ns"
        );
        assert!(run_ns == 0 || child_ns <= run_ns, "{child_ns} of {run_ns}");
    }

    /// `/proc` gives a start time truncated to its clock tick: a process
    /// born in the tick metering began in (a daemon the command forks at
    /// once) reads as born before it, and counts as born since.
    #[test]
    fn a_process_born_in_the_tick_metering_began_counts_from_its_birth() {
        let (mut child, pid) = busy_child();
        let born = crate::procfs::start_since_boot_ns(pid).expect("start time");
        wait_until_asleep(pid);
        // Metering began later in the tick the start time was cut to.
        let mut meter = CpuMeter {
            began_ns: Some(born + crate::procfs::clock_tick_ns() / 2),
            ..CpuMeter::default()
        };
        meter.read([pid].into_iter());
        let counted = meter.total();
        // A tick later, it was there before metering: from its reading.
        let mut later = CpuMeter {
            began_ns: Some(born + 2 * crate::procfs::clock_tick_ns()),
            ..CpuMeter::default()
        };
        later.read([pid].into_iter());
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            counted >= 20_000_000,
            "the child's loop counts: {counted} ns"
        );
        assert_eq!(later.total(), 0);
        assert_eq!(later.readings.len(), 1, "it was read");
    }

    #[test]
    fn cpu_times_keep_the_threads_that_exited() {
        let mut tally = CpuTally::default();
        assert_eq!(
            tally.read(7, &[(7, [100, 10, 1]), (8, [50, 5, 2])]),
            ([150, 15, 3], 2)
        );
        // Thread 8 ended after its last reading; thread 9 began.
        assert_eq!(
            tally.read(7, &[(7, [120, 12, 2]), (9, [4, 1, 1])]),
            ([174, 18, 5], 2)
        );
        // The sums never go down while threads come and go.
        assert_eq!(tally.read(7, &[(9, [6, 1, 2])]), ([176, 18, 6], 1));
        tally.retain(&[]);
        assert_eq!(tally.read(7, &[(7, [1, 1, 1])]), ([1, 1, 1], 1));
    }
}
