//! Loads the embedded eBPF object, sets its globals, and attaches its
//! programs: uprobes per traced function, the raw system-call, lifecycle,
//! block and TCP tracepoints, perf sampling. Owns the maps user space talks to.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap as StdHashMap, HashSet},
    io,
    os::fd::{AsFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use aya::{
    Ebpf, EbpfError, EbpfLoader,
    maps::{Array, HashMap, MapData, MapError, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{
        PerfEvent, ProgramError, RawTracePoint, TracePoint, UProbe,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
    },
};
use tracer_common::{
    COOKIE_ARGS, COOKIE_CALIBRATE, COOKIE_GEN, COOKIE_USDT_SILENT, FUNC_HITS_ENTRIES, TRACED_ROOT,
    capture::Probe,
    globals,
    kernel::{BlockAgg, BlockKey, FileAgg, FileKey, KernelOffsets},
    maps, programs,
    record::{BlockedEntry, SyscallEnter, ThreadCall, TracepointOffsets, UsdtSpec},
    stats::{STAT_COUNT, STAT_NAMES},
};

use crate::{
    multi::{self, MultiError, MultiPrograms},
    usdt::{UsdtError, UsdtSite},
};

/// The eBPF object built by `build.rs`, embedded so the binary is self-contained.
static EBPF_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tracer.bpf.o"));

/// Errors loading or attaching.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The kernel refused to load the programs.
    #[error("loading the eBPF programs failed{hint}")]
    Load {
        /// Advice when the cause is known (not root).
        hint: &'static str,
        /// The cause.
        #[source]
        source: EbpfError,
    },
    /// A program is missing from the object (a build problem).
    #[error("program {name} is missing from the eBPF object")]
    MissingProgram {
        /// The program.
        name: &'static str,
    },
    /// A map is missing or has the wrong type.
    #[error("map {name} is missing or has the wrong type")]
    Map {
        /// The map.
        name: &'static str,
        /// The cause.
        #[source]
        source: MapError,
    },
    /// Loading or attaching a program failed.
    #[error("attaching {what} failed")]
    Attach {
        /// What was being attached.
        what: String,
        /// The cause.
        #[source]
        source: ProgramError,
    },
    /// USDT probes could not be attached.
    #[error(
        "attaching USDT probes needs uprobe_multi links with semaphore offsets (Linux 6.6 or later)"
    )]
    UsdtMulti {
        /// The cause.
        #[source]
        source: MultiError,
    },
    /// Function probes could not be attached for a followed process.
    #[error("attaching function probes for a forked process")]
    ProbeMulti {
        /// The cause.
        #[source]
        source: MultiError,
    },
    /// The kernel refused to probe USDT sites for every process: another
    /// probe there raises the site's semaphore (one semaphore per site).
    #[error(
        "cannot probe the USDT sites of {path} for every process while another probe holds one of them with its semaphore (bpftrace, perf probe, or a tracer run with --no-follow): stop it, or record with --no-follow (forked processes are then not followed)"
    )]
    UsdtHeld {
        /// The object.
        path: String,
        /// The cause.
        #[source]
        source: MultiError,
    },
    /// A USDT probe site cannot be decoded.
    #[error(transparent)]
    Usdt(#[from] UsdtError),
    /// The overhead calibration could not run.
    #[error("calibrating the probe cost: {0}")]
    Calibration(String),
    /// More USDT sites than the spec map holds.
    #[error("{count} USDT probe sites selected; at most {max} can be attached")]
    TooManyUsdtSites {
        /// Sites selected.
        count: usize,
        /// The map's size.
        max: u32,
    },
}

/// How to load the programs.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Ring buffer size in bytes (a power of two, at least a page).
    pub ring_bytes: u32,
    /// Pending bytes above which producers wake the reader.
    pub wakeup_bytes: u64,
    /// Sample every process, not only traced ones.
    pub sample_all: bool,
    /// Follow children of traced processes.
    pub follow_children: bool,
    /// Trace socket system calls.
    pub syscalls: bool,
    /// Count file I/O system calls.
    pub files: bool,
    /// Keep where each thread entered its system call (blocked threads at
    /// the stop, signal-ended long waits); off only in benchmarks.
    pub blocked_threads: bool,
    /// Tracepoint field offsets of this kernel.
    pub offsets: TracepointOffsets,
    /// Kernel struct offsets of this kernel (from its BTF).
    pub kernel: KernelOffsets,
    /// Use uprobe_multi links where the kernel has them.
    pub uprobe_multi: bool,
}

/// The `TRACED_BITS` map mapped into this process: bits set and cleared
/// with atomic operations, as the eBPF programs do.
struct TracedBits {
    words: *mut u64,
    len: usize,
}

// SAFETY: the mapping is shared memory reached only through atomic
// operations; moving the owner between threads is sound.
unsafe impl Send for TracedBits {}

impl TracedBits {
    fn map(fd: &OwnedFd) -> io::Result<Self> {
        use std::os::fd::AsRawFd as _;
        let len = tracer_common::TRACED_BITS_WORDS as usize * 8;
        // SAFETY: a fresh shared mapping of a BPF_F_MMAPABLE array of
        // exactly `len` bytes; checked for failure below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            words: ptr.cast(),
            len,
        })
    }

    fn word(&self, pid: u32) -> Option<&std::sync::atomic::AtomicU64> {
        let index = (pid >> 6) as usize;
        if index >= self.len / 8 {
            return None;
        }
        // SAFETY: in bounds of the mapping, which lives as long as `self`;
        // 8-byte aligned (page-aligned start); only accessed atomically.
        Some(unsafe { std::sync::atomic::AtomicU64::from_ptr(self.words.add(index)) })
    }

    fn set(&self, pid: u32) {
        if let Some(w) = self.word(pid) {
            w.fetch_or(1 << (pid & 63), std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn clear(&self, pid: u32) {
        if let Some(w) = self.word(pid) {
            w.fetch_and(!(1 << (pid & 63)), std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl Drop for TracedBits {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.words.cast(), self.len) };
    }
}

/// The most processes function probes are scoped to ([`Loaded::scope_probes`]).
/// Each process has links of its own, and every hit of a probe runs the
/// handler of each link on it: a traced call cost 8.0 µs with one process,
/// 9.4 µs with 32 followed children, 19.8 with 128 and 62 with 512 (`tracer
/// record -p` on a program calling one function in a loop after forking N
/// sleeping children, this VM). Beyond this many, the probes fire in every
/// process of their objects instead: one link per object, whatever the
/// count.
pub const MAX_SCOPED_PROCESSES: usize = 16;

/// What [`Loaded::follow_probes`] did for a forked process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Followed {
    /// Nothing: the probes fire in it already (or it is not followed, or
    /// it is gone).
    Nothing,
    /// Links of its own, from now on.
    Attached,
    /// It made the scope too large: the probes now fire in every process of
    /// their objects, this one from now on.
    Everywhere,
}

/// Whether a link failed because its process is gone.
fn gone(e: &MultiError) -> bool {
    matches!(e, MultiError::Link { source, .. } if source.raw_os_error() == Some(libc::ESRCH))
}

/// The loaded programs and the maps user space uses.
pub struct Loaded {
    ebpf: Ebpf,
    ring: Option<RingBuf<MapData>>,
    traced: HashMap<MapData, u32, u32>,
    traced_bits: TracedBits,
    sockets: HashMap<MapData, u64, u64>,
    /// `CLOSED`: when a socket of a traced process was closed.
    closed: HashMap<MapData, u64, u64>,
    /// `PARENT` (value: the eBPF side's `Forked`, 16 bytes).
    parents: HashMap<MapData, u32, [u8; 16]>,
    /// `INFLIGHT`: each traced thread's call in progress and where it
    /// entered its last call.
    inflight: HashMap<MapData, u32, ThreadCall>,
    stats: PerCpuArray<MapData, u64>,
    file_stats: PerCpuHashMap<MapData, FileKey, FileAgg>,
    block_stats: PerCpuHashMap<MapData, BlockKey, BlockAgg>,
    usdt_specs: Array<MapData, UsdtSpec>,
    func_hits: PerCpuArray<MapData, u64>,
    func_gen: Array<MapData, u32>,
    /// Generation of the function-probe links attached now (see
    /// [`tracer_common::COOKIE_GEN`]).
    probe_gen: u32,
    /// The function probes' links (uprobe_multi, or one perf link per
    /// probe and direction), apart from the others so that the overhead
    /// budget can replace them.
    probe_multi_links: Vec<OwnedFd>,
    probe_links: Vec<(&'static str, aya::programs::uprobe::UProbeLinkId)>,
    /// The processes the function probes fire in ([`Loaded::scope_probes`]);
    /// `None`: every process of their objects.
    probe_pids: Option<BTreeSet<u32>>,
    /// The function probes attached now, to attach for followed processes.
    attached: Vec<Probe>,
    /// The function-probe links of processes followed since they were
    /// attached (scoped probes only), by pid.
    probe_followed: StdHashMap<u32, Vec<OwnedFd>>,
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    loaded_uprobes: bool,
    /// Number of kernel attachments made (perf and uprobe_multi links).
    pub links: usize,
    /// Of those, uprobe_multi links.
    pub multi_link_count: usize,
    /// Fds of the maps aya created, for the uprobe_multi copies of the programs.
    map_fds: Vec<(String, OwnedFd)>,
    /// The uprobe_multi programs: `None` before first use, `Some(Err)` when
    /// this kernel cannot have them (then each probe is its own perf link).
    multi: Option<Result<MultiPrograms, String>>,
    multi_links: Vec<OwnedFd>,
    allow_multi: bool,
    tracepoint_links: Vec<(&'static str, aya::programs::trace_point::TracePointLinkId)>,
    raw_links: Vec<(
        &'static str,
        aya::programs::raw_trace_point::RawTracePointLinkId,
    )>,
    uprobe_links: Vec<(&'static str, aya::programs::uprobe::UProbeLinkId)>,
    /// Children of traced processes are followed (`--no-follow` clears it).
    follow_children: bool,
    /// USDT probes attached per process, kept to attach them for the
    /// processes those fork ([`Loaded::follow_usdt`]).
    usdt_follow: Option<UsdtFollow>,
}

/// One object's per-process USDT sites: its path, and the sites' file
/// offsets, semaphore offsets and cookies.
type UsdtGroup = (PathBuf, Vec<u64>, Vec<u64>, Vec<u64>);

/// What [`Loaded::attach_usdt`] attached per process: the program and, per
/// object, the sites' offsets, semaphores and cookies; the processes it
/// attached them for, and the links of the processes followed since.
struct UsdtFollow {
    prog: OwnedFd,
    groups: Vec<UsdtGroup>,
    roots: HashSet<u32>,
    followed: StdHashMap<u32, Vec<OwnedFd>>,
}

fn take<T: TryFrom<aya::maps::Map, Error = MapError>>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<T, LoadError> {
    let map = ebpf.take_map(name).ok_or(LoadError::Map {
        name,
        source: MapError::InvalidName { name: name.into() },
    })?;
    T::try_from(map).map_err(|source| LoadError::Map { name, source })
}

fn attach_err(what: impl Into<String>) -> impl FnOnce(ProgramError) -> LoadError {
    let what = what.into();
    move |source| LoadError::Attach { what, source }
}

impl Loaded {
    /// Loads the object with `opts` (programs are loaded into the kernel, not attached).
    pub fn load(opts: &LoadOptions) -> Result<Self, LoadError> {
        raise_memlock();
        raise_nofile();
        let sample_all = u32::from(opts.sample_all);
        let follow = u32::from(opts.follow_children);
        let syscalls = u32::from(opts.syscalls);
        let files = u32::from(opts.files && opts.kernel.has_files());
        let blocked = u32::from(opts.blocked_threads);
        let mut ebpf = EbpfLoader::new()
            .override_global(globals::SAMPLE_ALL, &sample_all, true)
            .override_global(globals::WAKEUP_BYTES, &opts.wakeup_bytes, true)
            .override_global(globals::FOLLOW_CHILDREN, &follow, true)
            .override_global(globals::TRACE_SYSCALLS, &syscalls, true)
            .override_global(globals::TRACE_FILES, &files, true)
            .override_global(globals::BLOCKED_THREADS, &blocked, true)
            .override_global(globals::TP_OFFSETS, &opts.offsets, true)
            .override_global(globals::KERNEL_OFFSETS, &opts.kernel, true)
            .map_max_entries(maps::EVENTS, opts.ring_bytes)
            .load(EBPF_OBJECT)
            .map_err(|source| {
                let denied = matches!(&source, EbpfError::MapError(MapError::CreateError { io_error, .. })
                    if io_error.kind() == io::ErrorKind::PermissionDenied)
                    || matches!(&source, EbpfError::ProgramError(ProgramError::LoadError { io_error, .. })
                    if io_error.kind() == io::ErrorKind::PermissionDenied);
                let hint = if denied {
                    ": permission denied. The tracer must run as root (or with CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN)"
                } else {
                    ""
                };
                LoadError::Load { hint, source }
            })?;
        let map_fds: Vec<(String, OwnedFd)> = ebpf
            .maps()
            .filter_map(|(name, map)| {
                let fd = map_data(map).fd().as_fd().try_clone_to_owned().ok()?;
                Some((name.to_string(), fd))
            })
            .collect();
        // The log ring exists only when the programs log; debug logs are rare events.
        let logger = aya_log::EbpfLogger::init(&mut ebpf).ok();
        let ring = take::<RingBuf<MapData>>(&mut ebpf, maps::EVENTS)?;
        let traced = take(&mut ebpf, maps::TRACED_PIDS)?;
        let traced_bits = map_fds
            .iter()
            .find(|(name, _)| name == maps::TRACED_BITS)
            .ok_or(LoadError::Map {
                name: maps::TRACED_BITS,
                source: MapError::InvalidName {
                    name: maps::TRACED_BITS.into(),
                },
            })
            .and_then(|(_, fd)| {
                TracedBits::map(fd).map_err(|e| LoadError::Map {
                    name: maps::TRACED_BITS,
                    source: MapError::SyscallError(aya::sys::SyscallError {
                        call: "mmap",
                        io_error: e,
                    }),
                })
            })?;
        let sockets = take(&mut ebpf, maps::SOCKET_FDS)?;
        let parents = take(&mut ebpf, maps::PARENT)?;
        let closed = take(&mut ebpf, maps::CLOSED)?;
        let inflight = take(&mut ebpf, maps::INFLIGHT)?;
        let stats = take(&mut ebpf, maps::STATS)?;
        let usdt_specs = take(&mut ebpf, maps::USDT_SPECS)?;
        let file_stats = take(&mut ebpf, maps::FILE_STATS)?;
        let block_stats = take(&mut ebpf, maps::BLOCK_STATS)?;
        let func_hits = take(&mut ebpf, maps::FUNC_HITS)?;
        let func_gen = take(&mut ebpf, maps::FUNC_GEN)?;
        Ok(Self {
            func_hits,
            func_gen,
            probe_gen: 0,
            probe_multi_links: Vec::new(),
            probe_links: Vec::new(),
            probe_pids: None,
            attached: Vec::new(),
            probe_followed: StdHashMap::new(),
            ebpf,
            ring: Some(ring),
            traced,
            traced_bits,
            sockets,
            closed,
            parents,
            inflight,
            stats,
            file_stats,
            block_stats,
            usdt_specs,
            logger,
            loaded_uprobes: false,
            links: 0,
            multi_link_count: 0,
            map_fds,
            multi: None,
            multi_links: Vec::new(),
            allow_multi: opts.uprobe_multi,
            tracepoint_links: Vec::new(),
            raw_links: Vec::new(),
            uprobe_links: Vec::new(),
            follow_children: opts.follow_children,
            usdt_follow: None,
        })
    }

    /// Takes the ring buffer (once) for the reader.
    pub fn take_ring(&mut self) -> Option<RingBuf<MapData>> {
        self.ring.take()
    }

    /// Forwards eBPF log messages to the `log` crate.
    pub fn flush_logs(&mut self) {
        if let Some(logger) = &mut self.logger {
            logger.flush();
        }
    }

    fn tracepoint(&mut self, program: &'static str) -> Result<&mut TracePoint, LoadError> {
        let prog: &mut TracePoint = self
            .ebpf
            .program_mut(program)
            .ok_or(LoadError::MissingProgram { name: program })?
            .try_into()
            .map_err(attach_err(program))?;
        if prog.fd().is_err() {
            prog.load()
                .map_err(attach_err(format!("{program} (load)")))?;
        }
        Ok(prog)
    }

    fn raw_tracepoint(&mut self, program: &'static str) -> Result<&mut RawTracePoint, LoadError> {
        let prog: &mut RawTracePoint = self
            .ebpf
            .program_mut(program)
            .ok_or(LoadError::MissingProgram { name: program })?
            .try_into()
            .map_err(attach_err(program))?;
        if prog.fd().is_err() {
            prog.load()
                .map_err(attach_err(format!("{program} (load)")))?;
        }
        Ok(prog)
    }

    /// Attaches `program` to raw tracepoint `event`.
    fn attach_raw(&mut self, program: &'static str, event: &str) -> Result<(), LoadError> {
        let id = self
            .raw_tracepoint(program)?
            .attach(event)
            .map_err(attach_err(format!("raw tracepoint {event}")))?;
        self.raw_links.push((program, id));
        self.links += 1;
        Ok(())
    }

    /// Attaches fork/exec/exit tracking: raw tracepoints when `raw` (this
    /// kernel's BTF gave the task offsets), else the perf tracepoints.
    pub fn attach_lifecycle(&mut self, raw: bool) -> Result<(), LoadError> {
        if raw {
            for (program, event) in [
                (programs::RAW_PROC_FORK, "sched_process_fork"),
                (programs::RAW_PROC_EXEC, "sched_process_exec"),
                (programs::RAW_PROC_EXIT, "sched_process_exit"),
            ] {
                self.attach_raw(program, event)?;
            }
            return Ok(());
        }
        for (program, event) in [
            (programs::PROC_FORK, "sched_process_fork"),
            (programs::PROC_EXEC, "sched_process_exec"),
            (programs::PROC_EXIT, "sched_process_exit"),
        ] {
            let id = self
                .tracepoint(program)?
                .attach("sched", event)
                .map_err(attach_err(format!("sched:{event}")))?;
            self.tracepoint_links.push((program, id));
            self.links += 1;
        }
        Ok(())
    }

    /// Attaches the two raw system-call tracepoints (`sys_enter`,
    /// `sys_exit`), through which every system call of the node passes.
    pub fn attach_syscalls(&mut self) -> Result<(), LoadError> {
        self.attach_raw(programs::SYS_ENTER, "sys_enter")?;
        self.attach_raw(programs::SYS_EXIT, "sys_exit")
    }

    /// Other programs on the host named like our system-call entry program
    /// (other recorders, ours or another build): every system call of every
    /// process runs each of them, so recorders of one host add up.
    pub fn other_syscall_programs(&self) -> usize {
        let ours = self
            .ebpf
            .program(programs::SYS_ENTER)
            .and_then(|p| p.info().ok())
            .map(|i| i.id());
        aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .filter(|p| {
                p.program_type() == aya::programs::ProgramType::RawTracePoint.into()
                    && p.name_as_str() == Some("sys_enter")
                    && Some(p.id()) != ours
            })
            .count()
    }

    /// Attaches empty programs to the raw system-call tracepoints instead
    /// (overhead benchmarks: what the tracepoints cost with nothing to do).
    pub fn attach_empty_syscalls(&mut self) -> Result<(), LoadError> {
        self.attach_raw(programs::EMPTY_SYS_ENTER, "sys_enter")?;
        self.attach_raw(programs::EMPTY_SYS_EXIT, "sys_exit")
    }

    /// Attaches TCP retransmission tracking: the raw tracepoint when `raw`
    /// (this kernel's BTF gave the socket offsets), else the perf
    /// tracepoint (addresses only); false when the kernel lacks it.
    pub fn attach_tcp(&mut self, raw: bool) -> Result<bool, LoadError> {
        if raw {
            return match self.attach_raw(programs::RAW_TCP_RETRANSMIT, "tcp_retransmit_skb") {
                Ok(()) => Ok(true),
                Err(LoadError::Attach { .. })
                    if !crate::tracefs::has_event("tcp", "tcp_retransmit_skb") =>
                {
                    Ok(false)
                }
                Err(e) => Err(e),
            };
        }
        if !crate::tracefs::has_event("tcp", "tcp_retransmit_skb") {
            return Ok(false);
        }
        let id = self
            .tracepoint(programs::TCP_RETRANSMIT)?
            .attach("tcp", "tcp_retransmit_skb")
            .map_err(attach_err("tcp:tcp_retransmit_skb"))?;
        self.tracepoint_links.push((programs::TCP_RETRANSMIT, id));
        self.links += 1;
        Ok(true)
    }

    /// Attaches block request tracking (creation, issue, completion).
    pub fn attach_block(&mut self) -> Result<(), LoadError> {
        for (program, event) in [
            (programs::BLOCK_IO_START, "block_io_start"),
            (programs::BLOCK_RQ_ISSUE, "block_rq_issue"),
            (programs::BLOCK_RQ_COMPLETE, "block_rq_complete"),
        ] {
            self.attach_raw(program, event)?;
        }
        Ok(())
    }

    /// Starts cpu-clock sampling at `hz` on every online CPU; returns the CPU count.
    pub fn attach_sampling(&mut self, hz: u64) -> Result<usize, LoadError> {
        let cpus = aya::util::online_cpus().map_err(|(_, e)| LoadError::Attach {
            what: "perf sampling (reading online cpus)".into(),
            source: ProgramError::IOError(e),
        })?;
        let prog: &mut PerfEvent = self
            .ebpf
            .program_mut(programs::SAMPLE)
            .ok_or(LoadError::MissingProgram {
                name: programs::SAMPLE,
            })?
            .try_into()
            .map_err(attach_err(programs::SAMPLE))?;
        prog.load().map_err(attach_err("perf sampling (load)"))?;
        for cpu in &cpus {
            prog.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu: *cpu },
                SamplePolicy::Frequency(hz),
                false,
            )
            .map_err(attach_err(format!("perf sampling on cpu {cpu}")))?;
            self.links += 1;
        }
        Ok(cpus.len())
    }

    fn load_uprobes(&mut self) -> Result<(), LoadError> {
        if self.loaded_uprobes {
            return Ok(());
        }
        for name in [
            programs::FUNC_ENTRY,
            programs::FUNC_RETURN,
            programs::EMPTY_ENTRY,
            programs::EMPTY_RETURN,
        ] {
            let prog: &mut UProbe = self
                .ebpf
                .program_mut(name)
                .ok_or(LoadError::MissingProgram { name })?
                .try_into()
                .map_err(attach_err(name))?;
            prog.load().map_err(attach_err(format!("{name} (load)")))?;
        }
        self.loaded_uprobes = true;
        Ok(())
    }

    /// Makes the function probes attached from now on fire only in `pids`
    /// (and the processes they fork, as their forks are read: see
    /// [`Loaded::follow_probes`]), where the kernel has uprobe_multi links.
    ///
    /// Without it a probe traps in every process that maps its object: the
    /// programs drop other processes' hits, but each trap still costs its
    /// microseconds, so tracing one server's library function slowed every
    /// other process of the host using that library (a second instance of
    /// a probed program ran 40 times slower).
    ///
    /// More than [`MAX_SCOPED_PROCESSES`] leave the probes everywhere.
    pub fn scope_probes(&mut self, pids: &[u32]) {
        let pids: BTreeSet<u32> = pids.iter().copied().collect();
        self.probe_pids = (pids.len() <= MAX_SCOPED_PROCESSES).then_some(pids);
    }

    /// The number of processes the function probes fire in; `None` when
    /// they fire in every process of their objects.
    pub fn probe_scope(&self) -> Option<usize> {
        self.probe_pids
            .as_ref()
            .map(|p| p.len() + self.probe_followed.len())
    }

    /// Attaches entry and return probes at every probe, for the processes
    /// of [`Loaded::scope_probes`] or else every process of their objects;
    /// the programs keep only traced processes' events. One uprobe_multi
    /// link per object, direction (and process) where the kernel has them
    /// (fast to attach and to detach), else one perf link per probe, for
    /// every process (a perf uprobe for a pid fires in one thread only).
    pub fn attach_probes(&mut self, probes: &[Probe]) -> Result<(), LoadError> {
        if probes.is_empty() {
            return Ok(());
        }
        self.attached = probes.to_vec();
        self.load_uprobes()?;
        if self.multi.is_none() && !self.allow_multi {
            self.multi = Some(Err("turned off".into()));
        }
        if self.multi.is_none() {
            self.multi = Some(
                MultiPrograms::load(
                    EBPF_OBJECT,
                    &self.map_fds,
                    programs::FUNC_ENTRY,
                    programs::FUNC_RETURN,
                )
                .map_err(|e| format!("{e:#}")),
            );
        }
        if let Some(Ok(_)) = &self.multi {
            let pids: Vec<u32> = match &self.probe_pids {
                Some(pids) => pids.iter().copied().collect(),
                None => vec![0],
            };
            let mut links = Vec::new();
            let mut failed = None;
            for pid in pids {
                match self.multi_links_for(probes, pid) {
                    Ok(l) => links.extend(l),
                    // A root gone before its probes: it needs none.
                    Err(e) if pid != 0 && gone(&e) => {}
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            match failed {
                None => {
                    self.links += links.len();
                    self.multi_link_count += links.len();
                    self.probe_multi_links.extend(links);
                    return Ok(());
                }
                // One perf link per probe below names the probe at fault.
                Some(e) => log::debug!("uprobe_multi: {e:#}; one link per probe"),
            }
        } else if let Some(Err(e)) = &self.multi {
            log::debug!("no uprobe_multi ({e}); one link per probe");
        }
        // Perf links fire in every process.
        self.probe_pids = None;
        for probe in probes {
            self.attach_probe(probe)?;
        }
        Ok(())
    }

    /// uprobe_multi links of `probes` (entry, then return; one per object)
    /// for process `pid` (0: every process), with the current generation's
    /// cookies. On error the links made so far go.
    fn multi_links_for(&self, probes: &[Probe], pid: u32) -> Result<Vec<OwnedFd>, MultiError> {
        let Some(Ok(multi)) = &self.multi else {
            return Ok(Vec::new());
        };
        // Entry-only probes get no return link.
        let group = |ret: bool| {
            multi::group_by_object(
                probes
                    .iter()
                    .filter(|p| !(ret && p.entry_only))
                    .map(|p| (p.object.as_str(), p.file_offset, self.probe_cookie(p))),
            )
        };
        let mut links = Vec::new();
        for ret in [false, true] {
            for (path, offsets, cookies) in &group(ret) {
                match multi.attach(Path::new(path), offsets, cookies, ret, pid) {
                    Ok(fd) => links.push(fd),
                    Err(e) => {
                        drop_concurrently(
                            links
                                .into_iter()
                                .map(|l| Box::new(l) as Box<dyn Send>)
                                .collect(),
                        );
                        return Err(e);
                    }
                }
            }
        }
        Ok(links)
    }

    /// Attaches the function probes for `pid`, a process a traced one
    /// forked, when they are scoped to the traced processes (else they fire
    /// in it already). The child runs from its fork until then: its calls
    /// in between are not recorded. The one that would make the scope
    /// larger than [`MAX_SCOPED_PROCESSES`] turns it into every process.
    pub fn follow_probes(&mut self, pid: u32) -> Result<Followed, LoadError> {
        let Some(roots) = self.probe_pids.as_ref() else {
            return Ok(Followed::Nothing);
        };
        if !self.follow_children
            || self.attached.is_empty()
            || roots.contains(&pid)
            || self.probe_followed.contains_key(&pid)
        {
            return Ok(Followed::Nothing);
        }
        if roots.len() + self.probe_followed.len() >= MAX_SCOPED_PROCESSES {
            let old = self.probe_pids.take();
            let kept = self.attached.clone();
            if let Err(e) = self.replace_probes(&kept) {
                self.probe_pids = old;
                return Err(e);
            }
            return Ok(Followed::Everywhere);
        }
        match self.multi_links_for(&self.attached, pid) {
            Ok(links) => {
                self.links += links.len();
                self.multi_link_count += links.len();
                self.probe_followed.insert(pid, links);
                Ok(Followed::Attached)
            }
            Err(e) if gone(&e) => Ok(Followed::Nothing),
            Err(source) => Err(LoadError::ProbeMulti { source }),
        }
    }

    /// Drops the function-probe links of followed process `pid`, which
    /// exited: its pid may come back as another process.
    pub fn unfollow_probes(&mut self, pid: u32) {
        let Some(links) = self.probe_followed.remove(&pid) else {
            return;
        };
        self.links -= links.len();
        self.multi_link_count -= links.len();
        std::thread::spawn(move || drop(links));
    }

    /// Attaches entry and return probes at `probe` (only the entry for an
    /// entry-only probe), for every process of its object; the programs keep
    /// only traced processes' events.
    pub fn attach_probe(&mut self, probe: &Probe) -> Result<(), LoadError> {
        let names = [programs::FUNC_ENTRY, programs::FUNC_RETURN];
        let cookie = self.probe_cookie(probe);
        let ids = self.attach_programs(
            probe,
            &names[..if probe.entry_only { 1 } else { 2 }],
            cookie,
        )?;
        self.probe_links.extend(ids);
        Ok(())
    }

    /// The attach cookie of `probe`'s links of the current generation.
    fn probe_cookie(&self, probe: &Probe) -> u64 {
        u64::from(probe.func_id)
            | if probe.args { COOKIE_ARGS } else { 0 }
            | if self.probe_gen == 1 { COOKIE_GEN } else { 0 }
    }

    /// Attaches the empty programs at `probe` (overhead benchmarks only).
    pub fn attach_empty_probe(&mut self, probe: &Probe) -> Result<(), LoadError> {
        let cookie = self.probe_cookie(probe);
        let ids = self.attach_programs(
            probe,
            &[programs::EMPTY_ENTRY, programs::EMPTY_RETURN],
            cookie,
        )?;
        self.uprobe_links.extend(ids);
        Ok(())
    }

    /// Replaces the function probes by `kept` (a subset, same ids) without
    /// recording a call twice or losing a return: the new links are
    /// attached as the next generation, whose hits the programs ignore;
    /// then the generation switches (one map write: every hit from then on
    /// is recorded by the new links only, and a call entered before returns
    /// through the new return probe, which the kernel runs for every
    /// consumer registered at return time); then the old links go.
    pub fn replace_probes(&mut self, kept: &[Probe]) -> Result<(), LoadError> {
        let mut old_multi = std::mem::take(&mut self.probe_multi_links);
        let old_links = std::mem::take(&mut self.probe_links);
        let old_followed = std::mem::take(&mut self.probe_followed);
        let (old_attached, old_scope) = (self.attached.clone(), self.probe_pids.clone());
        let (links, multi) = (self.links, self.multi_link_count);
        self.probe_gen ^= 1;
        let mut attached = self.attach_probes(kept);
        if attached.is_ok() {
            // Their links went with the old generation: made again (an
            // exited one gets none).
            for pid in old_followed.keys() {
                if let Err(e) = self.follow_probes(*pid) {
                    attached = Err(e);
                    break;
                }
            }
        }
        if let Err(e) = attached {
            // The new generation's links go; the old ones stay and record.
            let mut new_multi = std::mem::replace(&mut self.probe_multi_links, old_multi);
            let new_links = std::mem::replace(&mut self.probe_links, old_links);
            new_multi.extend(
                std::mem::replace(&mut self.probe_followed, old_followed)
                    .into_values()
                    .flatten(),
            );
            self.attached = old_attached;
            self.probe_pids = old_scope;
            self.probe_gen ^= 1;
            self.drop_links(new_multi, new_links);
            self.links = links;
            self.multi_link_count = multi;
            return Err(e);
        }
        old_multi.extend(old_followed.into_values().flatten());
        self.func_gen
            .set(0, self.probe_gen, 0)
            .map_err(|source| LoadError::Map {
                name: maps::FUNC_GEN,
                source,
            })?;
        self.links -= old_multi.len() + old_links.len();
        self.multi_link_count -= old_multi.len();
        // In the background: the kernel waits for calls in progress through
        // a probe's return probe before a link goes (seconds, when a
        // long-running function such as an event loop is probed), and the
        // session must keep draining meanwhile. The programs ignore the old
        // links' hits already.
        let links = self.take_links(old_multi, old_links);
        std::thread::spawn(move || drop_concurrently(links));
        Ok(())
    }

    /// Detaches function-probe links, concurrently (see [`Loaded::detach`]).
    fn drop_links(
        &mut self,
        multi: Vec<OwnedFd>,
        perf: Vec<(&'static str, aya::programs::uprobe::UProbeLinkId)>,
    ) {
        drop_concurrently(self.take_links(multi, perf));
    }

    /// Function-probe links as owned values, to drop.
    fn take_links(
        &mut self,
        multi: Vec<OwnedFd>,
        perf: Vec<(&'static str, aya::programs::uprobe::UProbeLinkId)>,
    ) -> Vec<Box<dyn Send>> {
        let mut links: Vec<Box<dyn Send>> = multi
            .into_iter()
            .map(|l| Box::new(l) as Box<dyn Send>)
            .collect();
        for (name, id) in perf {
            let prog: Option<&mut UProbe> =
                self.ebpf.program_mut(name).and_then(|p| p.try_into().ok());
            if let Some(link) = prog.and_then(|p| p.take_link(id).ok()) {
                links.push(Box::new(link));
            }
        }
        links
    }

    /// CPU the programs on tracepoints and perf events (system calls, file
    /// and block I/O, lifecycle, retransmissions, samples) have used since
    /// they were loaded, ns, on every process of the node: counted by the
    /// kernel only while run-time statistics are on (see
    /// [`aya::sys::enable_stats`]); `None` when it cannot be read. The
    /// function probes' programs are left out: their cost is the trap's,
    /// which the budget's calibration measures whole.
    pub fn kernel_program_ns(&self) -> Option<u64> {
        let mut total = 0u64;
        let mut read = false;
        for (_, program) in self.ebpf.programs() {
            if matches!(program, aya::programs::Program::UProbe(_)) {
                continue;
            }
            if let Ok(info) = program.info() {
                total = total.saturating_add(info.run_time().as_nanos() as u64);
                read = true;
            }
        }
        read.then_some(total)
    }

    /// Calls of each function probe recorded so far (by traced processes,
    /// through the current generation's links), indexed by function id, for
    /// ids below `count`; ids past [`FUNC_HITS_ENTRIES`] read 0.
    pub fn func_hits(&self, count: usize) -> Vec<u64> {
        (0..count)
            .map(|id| {
                u32::try_from(id)
                    .ok()
                    .filter(|id| *id < FUNC_HITS_ENTRIES)
                    .and_then(|id| self.func_hits.get(&id, 0).ok())
                    .map_or(0, |v| v.iter().sum())
            })
            .collect()
    }

    /// This machine's cost of one recorded call, ns of CPU, with an entry
    /// probe and (`with_return`) with the return probe too: `run(n)` calls
    /// a function of the tracer's own at `file_offset` in `object` `n`
    /// times; it is timed without a probe, with the entry program attached
    /// there, and with the return program too (their full work, the records
    /// discarded), `rounds` times each, the medians compared. Returns the
    /// entry's cost and the pair's.
    pub fn calibrate(
        &mut self,
        object: &Path,
        file_offset: u64,
        calls: u64,
        rounds: usize,
        with_return: bool,
        run: &mut dyn FnMut(u64),
    ) -> Result<(f64, Option<f64>), LoadError> {
        let probe = Probe {
            func_id: 0,
            object: object.to_string_lossy().into_owned(),
            symbol: "calibration".into(),
            file_offset,
            ..Probe::default()
        };
        // CPU time of this thread, not wall time: the probes run in the
        // calling thread, and on a loaded machine wall time counts the
        // time others ran too.
        let rounds = rounds.max(1);
        let timed = |run: &mut dyn FnMut(u64)| {
            let mut v: Vec<f64> = (0..rounds)
                .map(|_| {
                    let started = thread_cpu_ns();
                    run(calls);
                    thread_cpu_ns().saturating_sub(started) as f64
                })
                .collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let bare = timed(run);
        // Only in this process: recorders of the same binary calibrating
        // at once (one per server) must not time each other's probes.
        let own = UProbeScope::CallingProcess;
        let mut ids =
            self.attach_programs_in(&probe, &[programs::FUNC_ENTRY], COOKIE_CALIBRATE, own)?;
        let entry = timed(run);
        let pair = if with_return {
            self.attach_programs_in(&probe, &[programs::FUNC_RETURN], COOKIE_CALIBRATE, own)
                .map(|more| {
                    ids.extend(more);
                    Some(timed(run))
                })
        } else {
            Ok(None)
        };
        self.links -= ids.len();
        // Detaching waits for an RCU grace period: not on the way to
        // attaching the real probes.
        let links = self.take_links(Vec::new(), ids);
        std::thread::spawn(move || drop_concurrently(links));
        let per_call = |t: f64| ((t - bare) / calls.max(1) as f64).max(0.0);
        Ok((per_call(entry), pair?.map(per_call)))
    }

    fn attach_programs(
        &mut self,
        probe: &Probe,
        names: &[&'static str],
        cookie: u64,
    ) -> Result<Vec<(&'static str, aya::programs::uprobe::UProbeLinkId)>, LoadError> {
        self.attach_programs_in(probe, names, cookie, UProbeScope::AllProcesses)
    }

    fn attach_programs_in(
        &mut self,
        probe: &Probe,
        names: &[&'static str],
        cookie: u64,
        scope: UProbeScope,
    ) -> Result<Vec<(&'static str, aya::programs::uprobe::UProbeLinkId)>, LoadError> {
        self.load_uprobes()?;
        let mut ids = Vec::new();
        for &name in names {
            let prog: &mut UProbe = self
                .ebpf
                .program_mut(name)
                .ok_or(LoadError::MissingProgram { name })?
                .try_into()
                .map_err(attach_err(name))?;
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(probe.file_offset),
                cookie: Some(cookie),
            };
            let id = prog
                .attach(point, Path::new(&probe.object), scope)
                .map_err(attach_err(format!(
                    "{name} at {}:{}",
                    probe.object, probe.symbol
                )))?;
            ids.push((name, id));
            self.links += 1;
        }
        Ok(ids)
    }

    /// Attaches the USDT program at `sites` (site `i` has probe id and
    /// cookie `i`), raising their semaphores while attached: one
    /// uprobe_multi link per object and pid (`pids` empty: every process of
    /// the object, else only those processes). [`UsdtSite::wide`] sites
    /// get one link per object for every process, raising nothing. The
    /// kernel lowers the semaphores again when the links go
    /// ([`Loaded::detach`]), or when the tracer dies.
    pub fn attach_usdt(&mut self, sites: &[UsdtSite], pids: &[u32]) -> Result<(), LoadError> {
        if sites.is_empty() {
            return Ok(());
        }
        if sites.len() > tracer_common::USDT_MAX_SITES as usize {
            return Err(LoadError::TooManyUsdtSites {
                count: sites.len(),
                max: tracer_common::USDT_MAX_SITES,
            });
        }
        for (id, site) in sites.iter().enumerate() {
            self.usdt_specs
                .set(id as u32, site.spec()?, 0)
                .map_err(|source| LoadError::Map {
                    name: maps::USDT_SPECS,
                    source,
                })?;
        }
        let usdt_err = |source| LoadError::UsdtMulti { source };
        let prog = multi::load_programs(EBPF_OBJECT, &self.map_fds, &[programs::USDT])
            .map_err(usdt_err)?
            .pop()
            .ok_or(LoadError::MissingProgram {
                name: programs::USDT,
            })?;
        let cookie =
            |id: usize, s: &UsdtSite| id as u64 | if s.silent { COOKIE_USDT_SILENT } else { 0 };
        // Wide sites: every process, no semaphore (held per process instead).
        let wide = multi::group_by_object(sites.iter().enumerate().filter(|(_, s)| s.wide).map(
            |(id, s)| {
                (
                    s.object.to_str().unwrap_or_default(),
                    s.file_offset,
                    cookie(id, s),
                )
            },
        ));
        for (path, offsets, cookies) in wide {
            let none = vec![0; offsets.len()];
            let link = multi::link(
                &prog,
                Path::new(path),
                &offsets,
                Some(&none),
                &cookies,
                false,
                0,
            )
            .map_err(|source| match &source {
                MultiError::Link { source: e, .. } if e.kind() == io::ErrorKind::InvalidInput => {
                    LoadError::UsdtHeld {
                        path: path.to_string(),
                        source,
                    }
                }
                _ => usdt_err(source),
            })?;
            self.multi_links.push(link);
            self.links += 1;
            self.multi_link_count += 1;
        }
        let groups = multi::group_by_object(sites.iter().enumerate().filter(|(_, s)| !s.wide).map(
            |(id, s)| {
                (
                    s.object.to_str().unwrap_or_default(),
                    s.file_offset,
                    cookie(id, s),
                )
            },
        ));
        let all = [0];
        let per_process = !pids.is_empty();
        let pids = if pids.is_empty() { &all[..] } else { pids };
        let mut follow = UsdtFollow {
            prog,
            groups: Vec::new(),
            roots: pids.iter().copied().collect(),
            followed: StdHashMap::new(),
        };
        for (path, offsets, cookies) in groups {
            let ref_ctrs: Vec<u64> = cookies
                .iter()
                .map(|cookie| sites[(*cookie as u32) as usize].semaphore_offset)
                .collect();
            for pid in pids {
                let link = multi::link(
                    &follow.prog,
                    Path::new(path),
                    &offsets,
                    Some(&ref_ctrs),
                    &cookies,
                    false,
                    *pid,
                )
                .map_err(usdt_err)?;
                self.multi_links.push(link);
                self.links += 1;
                self.multi_link_count += 1;
            }
            follow
                .groups
                .push((PathBuf::from(path), offsets, ref_ctrs, cookies));
        }
        if per_process && self.follow_children {
            self.usdt_follow = Some(follow);
        }
        Ok(())
    }

    /// Attaches the USDT probes that [`Loaded::attach_usdt`] attached per
    /// process (the semaphore holders, when its sites are wide) for process
    /// `pid` too, a child of a traced process, which a pid's link does not
    /// follow. Returns whether links were made: not for a pid that has
    /// them, nor when USDT probes are attached to every process of their
    /// objects or children are not followed.
    ///
    /// A forked child needs none of this to be recorded: it inherits its
    /// parent's raised semaphores (its memory is a copy) and the wide sites
    /// fire in it. Its own holders raise the semaphores again when it
    /// executes the interpreter anew (the kernel installs a pid's probes in
    /// its new image), and keep them raised should its parent exit first.
    /// An exec that comes before this call starts with the semaphores down:
    /// its first calls are not recorded.
    pub fn follow_usdt(&mut self, pid: u32) -> Result<bool, LoadError> {
        let Some(follow) = self.usdt_follow.as_mut() else {
            return Ok(false);
        };
        if follow.roots.contains(&pid) || follow.followed.contains_key(&pid) {
            return Ok(false);
        }
        let mut links = Vec::with_capacity(follow.groups.len());
        for (path, offsets, ref_ctrs, cookies) in &follow.groups {
            let link = multi::link(
                &follow.prog,
                path,
                offsets,
                Some(ref_ctrs),
                cookies,
                false,
                pid,
            )
            .map_err(|source| LoadError::UsdtMulti { source })?;
            links.push(link);
        }
        self.links += links.len();
        self.multi_link_count += links.len();
        follow.followed.insert(pid, links);
        Ok(true)
    }

    /// Whether children of traced processes are followed.
    pub fn follows_children(&self) -> bool {
        self.follow_children
    }

    /// Drops the USDT links of followed process `pid`, which exited: its
    /// pid may come back as another process, which needs links of its
    /// own. The links are closed on another thread, as each close waits
    /// for an RCU grace period.
    pub fn unfollow_usdt(&mut self, pid: u32) {
        let Some(links) = self
            .usdt_follow
            .as_mut()
            .and_then(|f| f.followed.remove(&pid))
        else {
            return;
        };
        self.links -= links.len();
        self.multi_link_count -= links.len();
        std::thread::spawn(move || drop(links));
    }

    /// Attaches an enrolment probe at `file_offset` (an executable's entry
    /// point): every process that starts running it becomes traced, and its
    /// enrolment record carries `index`.
    pub fn attach_enroll(
        &mut self,
        exe: &Path,
        file_offset: u64,
        index: u32,
    ) -> Result<(), LoadError> {
        self.load_uprobes()?;
        let prog: &mut UProbe = self
            .ebpf
            .program_mut(programs::FUNC_ENTRY)
            .ok_or(LoadError::MissingProgram {
                name: programs::FUNC_ENTRY,
            })?
            .try_into()
            .map_err(attach_err(programs::FUNC_ENTRY))?;
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(file_offset),
            cookie: Some(tracer_common::COOKIE_ENROLL | u64::from(index)),
        };
        let id = prog
            .attach(point, exe, UProbeScope::AllProcesses)
            .map_err(attach_err(format!("entry point of {}", exe.display())))?;
        self.uprobe_links.push((programs::FUNC_ENTRY, id));
        self.links += 1;
        Ok(())
    }

    /// Detaches everything, many links at once: each detach waits for an RCU
    /// grace period in the kernel (tens of ms here), and done one by one they
    /// add up to seconds; concurrent detaches share grace periods.
    pub fn detach(mut self) {
        let mut links: Vec<Box<dyn Send>> = Vec::new();
        for link in std::mem::take(&mut self.multi_links)
            .into_iter()
            .chain(std::mem::take(&mut self.probe_multi_links))
            .chain(
                std::mem::take(&mut self.probe_followed)
                    .into_values()
                    .flatten(),
            )
        {
            links.push(Box::new(link));
        }
        if let Some(follow) = self.usdt_follow.take() {
            for link in follow.followed.into_values().flatten() {
                links.push(Box::new(link));
            }
        }
        for (name, id) in std::mem::take(&mut self.tracepoint_links) {
            let prog: Option<&mut TracePoint> =
                self.ebpf.program_mut(name).and_then(|p| p.try_into().ok());
            if let Some(link) = prog.and_then(|p| p.take_link(id).ok()) {
                links.push(Box::new(link));
            }
        }
        for (name, id) in std::mem::take(&mut self.raw_links) {
            let prog: Option<&mut RawTracePoint> =
                self.ebpf.program_mut(name).and_then(|p| p.try_into().ok());
            if let Some(link) = prog.and_then(|p| p.take_link(id).ok()) {
                links.push(Box::new(link));
            }
        }
        let mut uprobe_links = std::mem::take(&mut self.uprobe_links);
        uprobe_links.extend(std::mem::take(&mut self.probe_links));
        for (name, id) in uprobe_links {
            let prog: Option<&mut UProbe> =
                self.ebpf.program_mut(name).and_then(|p| p.try_into().ok());
            if let Some(link) = prog.and_then(|p| p.take_link(id).ok()) {
                links.push(Box::new(link));
            }
        }
        drop_concurrently(links);
        drop(self);
    }

    /// Marks `pid` as traced (`root`: named by the user) and registers its
    /// open sockets so their reads and writes are recorded.
    pub fn trace_pid(&mut self, pid: u32, root: bool) -> Result<(), LoadError> {
        let value = if root {
            TRACED_ROOT
        } else {
            tracer_common::TRACED_CHILD
        };
        // The bit first: the programs test it before the map (and
        // `sys_enter` only it: it goes again if the map refuses the pid).
        self.traced_bits.set(pid);
        if let Err(source) = self.traced.insert(pid, value, 0) {
            if self.traced.get(&pid, 0).is_err() {
                self.traced_bits.clear(pid);
            }
            return Err(LoadError::Map {
                name: maps::TRACED_PIDS,
                source,
            });
        }
        for fd in crate::procfs::socket_fds(pid) {
            self.sockets
                .insert((u64::from(pid) << 32) | u64::from(fd), 1u64, 0)
                .map_err(|source| LoadError::Map {
                    name: maps::SOCKET_FDS,
                    source,
                })?;
        }
        Ok(())
    }

    /// Registers the open sockets of `pid` (a forked child inherits its
    /// parent's). Then its `PARENT` entry goes: the eBPF side walks the
    /// ancestry on every fd call it does not know, a walk needed only until
    /// the inherited sockets are copied here.
    ///
    /// The process runs meanwhile: a socket listed here may be closed
    /// before its mark is written (a forked worker closing what it
    /// inherited), and a mark written after that close would make whatever
    /// next gets the number (an epoll descriptor) a socket. A socket the
    /// programs saw closed since the listing began is not marked, or is
    /// unmarked again.
    pub fn register_sockets(&mut self, pid: u32) {
        let listed_at = crate::session::monotonic_ns();
        let closed_since = |closed: &HashMap<MapData, u64, u64>, key: u64| {
            closed.get(&key, 0).is_ok_and(|at| at >= listed_at)
        };
        let mut marked = Vec::new();
        for fd in crate::procfs::socket_fds(pid) {
            let key = (u64::from(pid) << 32) | u64::from(fd);
            if closed_since(&self.closed, key) {
                continue;
            }
            if self.sockets.insert(key, 1u64, 0).is_ok() {
                marked.push(key);
            }
        }
        // A close between the check and the mark: the programs unmark, then
        // note the close, so look again once every mark is written.
        for key in marked {
            if closed_since(&self.closed, key) {
                let _ = self.sockets.remove(&key);
            }
        }
        let _ = self.parents.remove(&pid);
    }

    /// Whether `pid` is in the traced set.
    pub fn is_traced(&self, pid: u32) -> bool {
        self.traced.get(&pid, 0).is_ok()
    }

    /// Counters summed over CPUs, by name.
    pub fn read_stats(&self) -> BTreeMap<String, u64> {
        (0..STAT_COUNT)
            .map(|i| {
                let total = self.stats.get(&i, 0).map(|v| v.iter().sum()).unwrap_or(0);
                (STAT_NAMES[i as usize].to_string(), total)
            })
            .collect()
    }

    /// System calls in progress now, by tid.
    pub fn inflight(&self) -> Vec<(u32, SyscallEnter)> {
        self.inflight
            .iter()
            .filter_map(Result::ok)
            // A thread's entry stays after its call returned, marked done
            // (`ts_ns` 0): only calls still in progress count.
            .filter(|(_, t)| t.call.ts_ns != 0)
            .map(|(tid, t)| (tid, t.call))
            .collect()
    }

    /// The last system call each thread of a traced process entered, by
    /// tid: where it entered it. The entry stays after the call returned
    /// (the kernel side does not clear it, which cost a lookup per call):
    /// whether the thread is still inside is for the caller to tell, by
    /// [`crate::procfs::blocked_syscall`] (`session::in_call`).
    pub fn blocked(&self) -> Vec<(u32, BlockedEntry)> {
        self.inflight
            .iter()
            .filter_map(Result::ok)
            // 0: the thread's entry was made by a call kept for its exit
            // with blocked threads off (never written with 0 otherwise).
            .filter(|(_, t)| t.blocked.ts_ns != 0)
            .map(|(tid, t)| (tid, t.blocked))
            .collect()
    }

    /// Where thread `tid` entered its last system call (finished or not).
    pub fn blocked_entry(&self, tid: u32) -> Option<BlockedEntry> {
        self.inflight
            .get(&tid, 0)
            .ok()
            .map(|t| t.blocked)
            .filter(|e| e.ts_ns != 0)
    }

    /// The file I/O counters, summed over CPUs (cumulative since the key
    /// appeared).
    pub fn file_stats(&self) -> Vec<(FileKey, FileAgg)> {
        summed(&self.file_stats, FileAgg::add)
    }

    /// The block counters, summed over CPUs (cumulative).
    pub fn block_stats(&self) -> Vec<(BlockKey, BlockAgg)> {
        summed(&self.block_stats, BlockAgg::add)
    }

    /// Forgets the file counters of `key` (its process is gone).
    pub fn forget_file_key(&mut self, key: &FileKey) {
        let _ = self.file_stats.remove(key);
    }

    /// Forgets the block counters of `key` (its submitter is gone).
    pub fn forget_block_key(&mut self, key: &BlockKey) {
        let _ = self.block_stats.remove(key);
    }
}

/// Raises `RLIMIT_MEMLOCK`: kernels before 5.11 charge BPF maps against it.
fn raise_memlock() {
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: valid pointer to an initialised rlimit.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };
    if rc != 0 {
        log::debug!(
            "setrlimit(RLIMIT_MEMLOCK) failed: {}",
            io::Error::last_os_error()
        );
    }
}

/// Raises the soft limit of open files to the hard one: each process a
/// session follows gets links (file descriptors) of its own, and a low soft
/// limit (1024 by default) would refuse them mid-recording.
fn raise_nofile() {
    let mut rlim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointers to an rlimit.
    let rc = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rlim) != 0 {
            -1
        } else {
            rlim.rlim_cur = rlim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rlim)
        }
    };
    if rc != 0 {
        log::debug!(
            "raising RLIMIT_NOFILE failed: {}",
            io::Error::last_os_error()
        );
    }
}

/// The map data behind any map variant.
fn map_data(map: &aya::maps::Map) -> &MapData {
    use aya::maps::Map;
    match map {
        Map::Array(d)
        | Map::ArrayOfMaps(d)
        | Map::BloomFilter(d)
        | Map::CgroupArray(d)
        | Map::CgroupStorage(d)
        | Map::CgrpStorage(d)
        | Map::CpuMap(d)
        | Map::DevMap(d)
        | Map::DevMapHash(d)
        | Map::HashMap(d)
        | Map::HashOfMaps(d)
        | Map::InodeStorage(d)
        | Map::LpmTrie(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuCgroupStorage(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::ReusePortSockArray(d)
        | Map::RingBuf(d)
        | Map::SockHash(d)
        | Map::SockMap(d)
        | Map::SkStorage(d)
        | Map::Stack(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d)
        | Map::XskMap(d) => d,
    }
}

/// Every entry of a per-CPU map, its CPUs' values added with `add`.
fn summed<K: aya::Pod, V: aya::Pod + Default>(
    map: &PerCpuHashMap<MapData, K, V>,
    add: fn(&mut V, &V),
) -> Vec<(K, V)> {
    map.iter()
        .filter_map(Result::ok)
        .map(|(key, per_cpu)| {
            let mut sum = V::default();
            for v in per_cpu.iter() {
                add(&mut sum, v);
            }
            (key, sum)
        })
        .collect()
}

/// Drops `links` from up to 32 threads: each detach waits for an RCU grace
/// period, and concurrent detaches share them.
fn drop_concurrently(links: Vec<Box<dyn Send>>) {
    let per_thread = links.len().div_ceil(32).max(1);
    std::thread::scope(|scope| {
        let mut links = links;
        while !links.is_empty() {
            let chunk: Vec<_> = links.drain(..per_thread.min(links.len())).collect();
            scope.spawn(move || drop(chunk));
        }
    });
}

/// CPU time of the calling thread, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}
