//! One experiment on a cluster: a workload, optionally a fault on one server
//! part-way, the servers recorded; `run.json` says what happened. Then what
//! the captures show per server, and how peer comparison reads a run.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use analyzer::Capture;
use serde::{Deserialize, Serialize};

use super::{
    Cluster, Fault, FaultKind, FaultParams, FsError, RecordConfig, RecordMode, Recording, Result,
    Server, System, TracerSummary, Workload, WorkloadResult, cpu_ticks, io_err, unix_ns,
};

/// Version of [`RunInfo`]'s JSON (2: one namespace per server, two systems).
pub const RUN_INFO_VERSION: u32 = 2;

/// One experiment: a workload, optionally a fault on one server part-way.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The workload.
    pub workload: Workload,
    /// Its duration, s.
    pub seconds: f64,
    /// The fault and the 0-based index of the faulty server, or none.
    pub fault: Option<(FaultKind, usize)>,
    /// Seconds into the workload when the fault is switched on; it stays on
    /// to the end.
    pub fault_after: f64,
    /// Fault strengths.
    pub params: FaultParams,
    /// Recording; `None` runs the workload untraced (overhead baselines).
    pub record: Option<RecordConfig>,
}

/// The fault of a run, as written to run.json.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FaultInfo {
    /// What fault.
    pub kind: FaultKind,
    /// Label of the faulty server.
    pub server: String,
    /// Its 0-based index.
    pub server_index: usize,
    /// Switched on, ns since the Unix epoch.
    pub on_unix_ns: u64,
    /// Switched off, ns since the Unix epoch.
    pub off_unix_ns: u64,
    /// Strengths.
    pub params: FaultParams,
    /// How strong it turned out, where that is measured.
    #[serde(default)]
    pub detail: String,
}

/// A server of a run, as written to run.json.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ServerInfo {
    /// The server.
    #[serde(flatten)]
    pub server: Server,
    /// Its capture, relative to the run directory (shared in `single` mode:
    /// select the server's events by `pid`).
    pub capture: Option<String>,
}

/// `run.json`: what a run directory holds and what happened in it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    /// Format version ([`RUN_INFO_VERSION`]).
    pub version: u32,
    /// The file system.
    pub system: System,
    /// Its layout.
    pub layout: String,
    /// Each server's link rate.
    pub link_rate: String,
    /// The workload.
    pub workload: Workload,
    /// The workload's requested duration, s.
    pub seconds: f64,
    /// What it did.
    pub result: WorkloadResult,
    /// The fault, or `None` for a clean run.
    pub fault: Option<FaultInfo>,
    /// The servers.
    pub servers: Vec<ServerInfo>,
    /// The probe set (`none`, `generic`, `daemon`, `custom`).
    pub probes: String,
    /// Traced function patterns.
    pub functions: Vec<String>,
    /// Sampling rate, Hz.
    pub sample_hz: u32,
    /// Recording mode, `None` when untraced.
    pub record_mode: Option<RecordMode>,
    /// The tracers' summaries.
    pub tracers: Vec<TracerSummary>,
    /// Workload start, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// Workload end, ns since the Unix epoch.
    pub end_unix_ns: u64,
    /// The host's 1-minute load average when the workload started (the
    /// host is shared: timings mean little without it).
    pub load_average: f64,
    /// How long the run waited for the servers' links to fall quiet before
    /// it started, s, and whether they did (see [`wait_quiet`]); absent in
    /// runs recorded before the wait.
    #[serde(default)]
    pub quiet: Option<QuietWait>,
    /// CPU time spent while the workload ran (absent in runs recorded
    /// before it was measured).
    #[serde(default)]
    pub cpu: Option<RunCpu>,
    /// What each of the recorders' kernel programs used while the
    /// workload ran, summed over the recorders by program name, most
    /// first; empty unless run-time statistics were on
    /// ([`enable_program_stats`]) and the run was recorded.
    #[serde(default)]
    pub programs: Vec<ProgramCost>,
}

/// One kernel program's cost over a run's workload.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProgramCost {
    /// The program's name (its function's name, cut to 15 bytes by the
    /// kernel).
    pub name: String,
    /// CPU time it ran, ns, on every process it fired for.
    pub run_ns: u64,
    /// How many times it ran.
    pub runs: u64,
}

/// Turns on the kernel's run-time statistics of eBPF programs while the
/// returned descriptor is open (the programs' CPU, [`RunInfo::programs`]).
/// They cost every program run two clock reads, on every process.
pub fn enable_program_stats() -> Result<std::os::fd::OwnedFd> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .map_err(|e| FsError::Invalid(format!("enabling eBPF run-time statistics: {e}")))
}

/// CPU time over a run's workload, ns: what recording costs in CPU, which
/// a shared host's load disturbs far less than throughput.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RunCpu {
    /// The servers' daemons, every thread (probe traps are charged here).
    pub servers_ns: u64,
    /// The recorders' own processes (their user side and system calls).
    pub tracers_ns: u64,
    /// The whole host, busy (not idle or waiting on I/O), every core.
    pub host_busy_ns: u64,
    /// Wall time between the two readings.
    pub wall_ns: u64,
    /// The recorders' kernel programs, ns, charged to whichever process
    /// they fired in (0 unless run-time statistics were on, see
    /// [`enable_program_stats`]).
    #[serde(default)]
    pub programs_ns: u64,
}

/// One reading of the CPU counters [`RunCpu`] is the difference of.
struct CpuReading {
    servers_ns: u64,
    tracers_ns: u64,
    host_busy_ns: u64,
    /// The recorders' kernel programs by id.
    programs: BTreeMap<u32, ProgramCost>,
    at: Instant,
}

impl CpuReading {
    fn now(servers: &[u32], tracers: &[u32]) -> Self {
        // User + system time of every thread each process had.
        let sum = |pids: &[u32]| pids.iter().filter_map(|p| cpu_ticks(*p)).sum::<u64>() * TICK_NS;
        CpuReading {
            servers_ns: sum(servers),
            tracers_ns: sum(tracers),
            host_busy_ns: host_busy_ns().unwrap_or(0),
            programs: tracer_programs(tracers),
            at: Instant::now(),
        }
    }

    /// The CPU used since `start`, and each program's cost by name.
    fn since(&self, start: &CpuReading) -> (RunCpu, Vec<ProgramCost>) {
        let mut by_name: BTreeMap<&str, ProgramCost> = BTreeMap::new();
        for (id, now) in &self.programs {
            let before = start.programs.get(id);
            let p = by_name.entry(&now.name).or_insert_with(|| ProgramCost {
                name: now.name.clone(),
                ..ProgramCost::default()
            });
            p.run_ns += now.run_ns - before.map_or(0, |b| b.run_ns.min(now.run_ns));
            p.runs += now.runs - before.map_or(0, |b| b.runs.min(now.runs));
        }
        let mut programs: Vec<ProgramCost> = by_name.into_values().collect();
        programs.sort_by(|a, b| b.run_ns.cmp(&a.run_ns).then(a.name.cmp(&b.name)));
        let cpu = RunCpu {
            servers_ns: self.servers_ns.saturating_sub(start.servers_ns),
            tracers_ns: self.tracers_ns.saturating_sub(start.tracers_ns),
            host_busy_ns: self.host_busy_ns.saturating_sub(start.host_busy_ns),
            wall_ns: self.at.duration_since(start.at).as_nanos() as u64,
            programs_ns: programs.iter().map(|p| p.run_ns).sum(),
        };
        (cpu, programs)
    }
}

/// The eBPF programs the processes `pids` hold open (their descriptors
/// `anon_inode:bpf-prog`, whose /proc/PID/fdinfo names the program id), by
/// id, with their names and the run time and count the kernel keeps while
/// statistics are on (from the kernel's program info).
fn tracer_programs(pids: &[u32]) -> BTreeMap<u32, ProgramCost> {
    let mut programs = BTreeMap::new();
    for pid in pids {
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let is_prog =
                fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf-prog");
            if !is_prog {
                continue;
            }
            let Ok(info) = fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            )) else {
                continue;
            };
            let id = info
                .lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse::<u32>().ok());
            if let Some(id) = id {
                programs.insert(id, ProgramCost::default());
            }
        }
    }
    if !programs.is_empty() {
        for info in aya::programs::loaded_programs().flatten() {
            if let Some(p) = programs.get_mut(&info.id()) {
                p.name = info.name_as_str().unwrap_or("?").to_string();
                p.run_ns = u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX);
                p.runs = info.run_count();
            }
        }
    }
    programs
}

/// Nanoseconds per clock tick of /proc's CPU times (USER_HZ, 100 on Linux).
const TICK_NS: u64 = 10_000_000;

/// The host's busy CPU time over every core, ns: /proc/stat's first line
/// less idle and I/O wait.
fn host_busy_ns() -> Option<u64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| v.get(*i))
        .sum::<u64>();
    Some(busy * TICK_NS)
}

/// The wait for quiet links before a run.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct QuietWait {
    /// Seconds waited.
    pub waited_s: f64,
    /// Whether the links fell quiet (else the run started at the bound).
    pub quiet: bool,
}

/// Traffic on all the servers' links together under which they count as
/// quiet, bytes a second (heartbeats and metadata are a few KB/s; a chunk
/// being replicated is tens of MB/s).
const QUIET_BPS: f64 = 1e6;
/// How long the links must stay quiet.
const QUIET_FOR: Duration = Duration::from_secs(2);
/// The longest wait before a run starts anyway.
const QUIET_MAX: Duration = Duration::from_secs(60);

/// Whether readings of the links' byte counters show quiet for `QUIET_FOR`:
/// `readings` are (seconds, total bytes) in time order, the last one now.
fn quiet_for(readings: &[(f64, u64)], bps: f64, span: f64) -> bool {
    let Some(&(now, last)) = readings.last() else {
        return false;
    };
    // The latest reading at least `span` old.
    let Some(&(then, first)) = readings.iter().rev().find(|(t, _)| now - t >= span) else {
        return false;
    };
    // A counter that went back (a link re-created) is no quiet.
    last >= first && (last - first) as f64 / (now - then) < bps
}

/// Waits until the servers' links (the host ends of their veths) carry less
/// than [`QUIET_BPS`] together for [`QUIET_FOR`], at most [`QUIET_MAX`]. A
/// file system keeps working after a workload ended (MooseFS replicates the
/// chunks a previous run left short of their goal, and deletes its files):
/// a clean run recorded meanwhile had 200 MB of replication a window on
/// some chunkservers and none on others, and trained thresholds on it that
/// hid a CPU cap (issue 16).
pub fn wait_quiet(cluster: &Cluster) -> QuietWait {
    let links: Vec<String> = cluster.servers().iter().map(|s| s.veth.clone()).collect();
    let bytes = || -> u64 {
        links
            .iter()
            .flat_map(|l| {
                ["rx_bytes", "tx_bytes"].map(|c| format!("/sys/class/net/{l}/statistics/{c}"))
            })
            .filter_map(|p| fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
            .sum()
    };
    let started = Instant::now();
    let mut readings = Vec::new();
    loop {
        let t = started.elapsed().as_secs_f64();
        readings.push((t, bytes()));
        if quiet_for(&readings, QUIET_BPS, QUIET_FOR.as_secs_f64()) {
            return QuietWait {
                waited_s: t,
                quiet: true,
            };
        }
        if started.elapsed() >= QUIET_MAX {
            return QuietWait {
                waited_s: t,
                quiet: false,
            };
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The host's 1-minute load average.
fn load_average() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Runs one experiment on `cluster`, writing captures and `run.json` to `dir`.
pub fn run(cluster: &Cluster, config: &RunConfig, dir: &Path) -> Result<RunInfo> {
    if let Some((_, i)) = config.fault {
        cluster.server(i)?;
    }
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let quiet = wait_quiet(cluster);
    let recording = match &config.record {
        Some(r) => Some(Recording::start(cluster, r, dir)?),
        None => None,
    };
    let load = load_average();
    let server_pids: Vec<u32> = cluster.servers().iter().map(|s| s.pid).collect();
    let tracer_pids = recording.as_ref().map(|r| r.pids()).unwrap_or_default();
    let cpu_start = CpuReading::now(&server_pids, &tracer_pids);
    let start_unix_ns = unix_ns();
    let (result, fault) = std::thread::scope(|scope| -> Result<_> {
        let work = scope.spawn(|| config.workload.run(cluster, config.seconds));
        let mut fault_info = None;
        if let Some((kind, index)) = config.fault {
            let started = Instant::now();
            let at = Duration::from_secs_f64(config.fault_after.max(0.0));
            while started.elapsed() < at && !work.is_finished() {
                std::thread::sleep(Duration::from_millis(20));
            }
            let fault = Fault::inject(cluster, kind, index, &config.params);
            while !work.is_finished() {
                std::thread::sleep(Duration::from_millis(20));
            }
            let fault = fault?;
            let on = fault.on_unix_ns;
            let server = fault.server.clone();
            let detail = fault.detail.clone();
            let off = fault.remove()?;
            fault_info = Some(FaultInfo {
                kind,
                server: server.label,
                server_index: index,
                on_unix_ns: on,
                off_unix_ns: off,
                params: config.params.clone(),
                detail,
            });
        }
        let result = work
            .join()
            .map_err(|_| FsError::Invalid("the workload thread panicked".into()))??;
        Ok((result, fault_info))
    })?;
    let end_unix_ns = unix_ns();
    let (cpu, programs) = CpuReading::now(&server_pids, &tracer_pids).since(&cpu_start);
    let tracers = match recording {
        Some(r) => r.stop()?,
        None => Vec::new(),
    };
    let servers = cluster
        .servers()
        .iter()
        .map(|s| ServerInfo {
            server: s.clone(),
            capture: tracers
                .iter()
                .find(|t| t.servers.contains(&s.label))
                .map(|t| t.capture.clone()),
        })
        .collect();
    let info = RunInfo {
        version: RUN_INFO_VERSION,
        system: cluster.system(),
        layout: cluster.system().layout(),
        link_rate: cluster.config().link_rate.clone(),
        workload: config.workload,
        seconds: config.seconds,
        result,
        fault,
        servers,
        probes: config
            .record
            .as_ref()
            .map(|r| r.probes.clone())
            .unwrap_or_else(|| "untraced".into()),
        functions: config
            .record
            .as_ref()
            .map(|r| r.functions.clone())
            .unwrap_or_default(),
        sample_hz: config.record.as_ref().map(|r| r.sample_hz).unwrap_or(0),
        record_mode: config.record.as_ref().map(|r| r.mode),
        tracers,
        start_unix_ns,
        end_unix_ns,
        load_average: load,
        quiet: Some(quiet),
        cpu: Some(cpu),
        programs,
    };
    let path = dir.join("run.json");
    let json = serde_json::to_string_pretty(&info).map_err(|source| FsError::Json {
        path: path.clone(),
        source,
    })?;
    fs::write(&path, json).map_err(io_err(&path))?;
    Ok(info)
}

/// A run directory read back: `run.json` and the captures it names.
pub struct LoadedRun {
    /// run.json.
    pub info: RunInfo,
    /// Captures by file name (relative to the run directory).
    pub captures: BTreeMap<String, Capture>,
}

impl LoadedRun {
    /// The capture holding `server`'s events (select them by its pid).
    pub fn capture_of(&self, server: &ServerInfo) -> Option<&Capture> {
        self.captures.get(server.capture.as_deref()?)
    }
}

/// Reads `DIR/run.json` and every capture it names.
pub fn load_run(dir: &Path) -> Result<LoadedRun> {
    let path = dir.join("run.json");
    let text = fs::read_to_string(&path).map_err(io_err(&path))?;
    let info: RunInfo = serde_json::from_str(&text).map_err(|source| FsError::Json {
        path: path.clone(),
        source,
    })?;
    if info.version != RUN_INFO_VERSION {
        return Err(FsError::Invalid(format!(
            "{}: run.json version {} (this harness reads {RUN_INFO_VERSION}): record the run again",
            path.display(),
            info.version
        )));
    }
    let mut captures = BTreeMap::new();
    for t in &info.tracers {
        let p = dir.join(&t.capture);
        let c = Capture::open(&p).map_err(|source| FsError::Capture {
            path: p.clone(),
            source,
        })?;
        captures.insert(t.capture.clone(), c);
    }
    Ok(LoadedRun { info, captures })
}

// ---------------------------------------------------------------------------
// What the captures show per server

/// One server's activity in one phase of a run, per second of the phase.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseStats {
    /// Phase length, s.
    pub seconds: f64,
    /// Function entries per second, by function.
    pub calls: BTreeMap<String, f64>,
    /// Mean time per call, µs, by function (entry to return, same thread).
    pub mean_us: BTreeMap<String, f64>,
    /// Function returns per second.
    pub returns: f64,
    /// Recorded system calls per second.
    pub syscalls: f64,
    /// Mean duration of the system calls that are not waits, µs.
    pub syscall_us: f64,
    /// Socket bytes received per second.
    pub rx_bytes: f64,
    /// Socket bytes sent per second.
    pub tx_bytes: f64,
    /// IP samples of the server's pid per second.
    pub samples: f64,
    /// TCP retransmissions from or to the server's address and port per
    /// second.
    pub retransmits: f64,
}

/// A server's activity before and during the fault (or over the whole run).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ServerStats {
    /// Server label.
    pub server: String,
    /// Whether it was the faulty one.
    pub faulty: bool,
    /// Before the fault (the whole run when clean).
    pub before: PhaseStats,
    /// While the fault was on.
    pub during: Option<PhaseStats>,
}

/// Per-server activity of a loaded run, split at the fault.
pub fn server_stats(run: &LoadedRun) -> Vec<ServerStats> {
    use analyzer::{Event, decode::syscall_name};
    let waits = [
        "epoll_wait",
        "epoll_pwait",
        "poll",
        "ppoll",
        "select",
        "pselect6",
    ];
    let mut out = Vec::new();
    let fault = run.info.fault.as_ref();
    for s in &run.info.servers {
        let Some(cap) = run.capture_of(s) else {
            continue;
        };
        let clock = &cap.header.clock;
        let wall = |mono: u64| clock.to_realtime(mono);
        let start = run.info.start_unix_ns;
        let end = run.info.end_unix_ns;
        let split = fault.map(|f| f.on_unix_ns).unwrap_or(end);
        let pid = s.server.pid;
        let port = s.server.port;
        let addr: Option<std::net::Ipv4Addr> = s.server.addr.parse().ok();
        let is_server =
            |ip: &[u8; 16], p: u16| p == port && addr.is_some_and(|a| ip[..4] == a.octets());
        let mut phases = [PhaseStats::default(), PhaseStats::default()];
        let mut time_ns: [BTreeMap<String, (u64, u64)>; 2] = Default::default();
        let mut service: [(u64, u64); 2] = [(0, 0); 2];
        let mut stacks: BTreeMap<u32, Vec<(u32, u64)>> = BTreeMap::new();
        for e in cap.events().flatten() {
            let h = *e.header();
            let t = wall(h.ts_ns);
            if t < start || t > end {
                continue;
            }
            let ph = usize::from(t >= split);
            // Every recorder on the host sees every retransmission: the
            // server's are those of its own address and port.
            let retrans_here = matches!(e, Event::TcpRetransmit(r)
                if r.family == 2 && (is_server(&r.saddr, r.sport) || is_server(&r.daddr, r.dport)));
            if h.pid != pid && !retrans_here {
                continue;
            }
            let p = &mut phases[ph];
            match e {
                Event::Entry { rec, .. } => {
                    *p.calls.entry(cap.function_name(rec.func_id)).or_default() += 1.0;
                    stacks
                        .entry(h.tid)
                        .or_default()
                        .push((rec.func_id, h.ts_ns));
                }
                Event::Return(r) => {
                    p.returns += 1.0;
                    let stack = stacks.entry(h.tid).or_default();
                    if let Some(i) = stack.iter().rposition(|(f, _)| *f == r.func_id) {
                        let (_, t0) = stack[i];
                        stack.truncate(i);
                        let slot = time_ns[ph].entry(cap.function_name(r.func_id)).or_default();
                        slot.0 += h.ts_ns.saturating_sub(t0);
                        slot.1 += 1;
                    }
                }
                Event::Syscall(sc) => {
                    p.syscalls += 1.0;
                    let name = syscall_name(sc.nr);
                    if !waits.contains(&name.as_str()) {
                        service[ph].0 += h.ts_ns.saturating_sub(sc.enter_ns);
                        service[ph].1 += 1;
                    }
                    if sc.ret > 0 {
                        if name.starts_with("read") || name.starts_with("recv") {
                            p.rx_bytes += sc.ret as f64;
                        } else if name.starts_with("write") || name.starts_with("send") {
                            p.tx_bytes += sc.ret as f64;
                        }
                    }
                }
                Event::Sample(_) => p.samples += 1.0,
                Event::TcpRetransmit(_) => p.retransmits += 1.0,
                _ => {}
            }
        }
        let lens = [
            (split.min(end).saturating_sub(start)) as f64 / 1e9,
            (end.saturating_sub(split)) as f64 / 1e9,
        ];
        for (ph, p) in phases.iter_mut().enumerate() {
            let secs = lens[ph].max(1e-9);
            p.seconds = lens[ph];
            for v in p.calls.values_mut() {
                *v /= secs;
            }
            for v in [
                &mut p.returns,
                &mut p.syscalls,
                &mut p.rx_bytes,
                &mut p.tx_bytes,
                &mut p.samples,
                &mut p.retransmits,
            ] {
                *v /= secs;
            }
            p.syscall_us = service[ph].0 as f64 / 1e3 / service[ph].1.max(1) as f64;
            p.mean_us = time_ns[ph]
                .iter()
                .map(|(k, (ns, n))| (k.clone(), *ns as f64 / 1e3 / (*n).max(1) as f64))
                .collect();
        }
        let [before, during] = phases;
        out.push(ServerStats {
            server: s.server.label.clone(),
            faulty: fault.is_some_and(|f| f.server_index == s.server.index),
            before,
            during: fault.map(|_| during),
        });
    }
    out
}

// ---------------------------------------------------------------------------
// Peer comparison of runs

/// How peer comparison reads runs of `system` recorded in `mode`. One
/// capture per server: each capture is a server, labelled by its file stem
/// (`server1`..). One capture of all servers: every traced daemon is a
/// server (`--split-processes`), labelled by a command-line value that is
/// the same in every run (`--label-arg`: the brick path, the chunkserver's
/// configuration), with its port from its command line where it has one
/// (`--port-arg`). Nothing specific to a file system is in the analysis:
/// these are its generic options filled in, as `analyzer peers train`
/// takes them.
pub fn peers_config(
    system: System,
    mode: RecordMode,
    window_s: f64,
    shift_s: f64,
) -> analyzer::peers::PeersConfig {
    let (label_arg, port_arg) = system.label_args();
    let mut cfg = analyzer::peers::PeersConfig {
        window_ns: (window_s * 1e9) as u64,
        shift_ns: (shift_s * 1e9) as u64,
        ..Default::default()
    };
    if mode == RecordMode::Single {
        cfg.split = analyzer::peers::ServerSplit::PerProcess {
            label_arg: Some(label_arg.into()),
        };
        cfg.port_arg = port_arg.map(str::to_string);
    }
    cfg
}

/// Scores a loaded run (`dir` is where it was loaded from) with `cfg`;
/// `min_windows` windows must fit (2k-1 for training).
pub fn score_run(
    run: &LoadedRun,
    dir: &Path,
    cfg: &analyzer::peers::PeersConfig,
    min_windows: usize,
) -> Result<analyzer::peers::Scored> {
    let paths: Vec<PathBuf> = run.captures.keys().map(|c| dir.join(c)).collect();
    let labels: Vec<String> = run
        .captures
        .keys()
        .map(|c| c.trim_end_matches(".capture").to_string())
        .collect();
    let sources: Vec<analyzer::peers::CaptureSource<'_>> = run
        .captures
        .values()
        .zip(&paths)
        .zip(&labels)
        .map(|((capture, path), label)| analyzer::peers::CaptureSource {
            path,
            label,
            capture,
        })
        .collect();
    analyzer::peers::analyze(&dir.display().to_string(), &sources, cfg, min_windows).map_err(
        |source| FsError::Peers {
            run: dir.to_path_buf(),
            source,
        },
    )
}

/// The harness label (`server1`..) of the server peer comparison calls
/// `peers_label`, or the label itself when no server has it.
pub fn server_label(info: &RunInfo, peers_label: &str) -> String {
    info.servers
        .iter()
        .find(|s| s.server.label == peers_label || s.server.peers_label == peers_label)
        .map_or_else(|| peers_label.to_string(), |s| s.server.label.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_quiet_only_after_a_quiet_span() {
        // 50 MB/s of replication, then a few KB/s.
        let mut r = vec![(0.0, 0u64), (1.0, 50_000_000), (2.0, 100_000_000)];
        assert!(!quiet_for(&r, 1e6, 2.0), "busy");
        r.push((3.0, 100_004_000));
        assert!(!quiet_for(&r, 1e6, 2.0), "quiet for 1 s only");
        r.push((4.0, 100_008_000));
        assert!(quiet_for(&r, 1e6, 2.0), "quiet for 2 s");
        // Too early to tell, and a counter that went back.
        assert!(!quiet_for(&r[..1], 1e6, 2.0));
        assert!(!quiet_for(&[(0.0, 500), (3.0, 100)], 1e6, 2.0));
    }
}
