//! Faults, injected into one server at a time, the way they would hit one
//! machine of a real cluster (Kasick et al. §6.2, plus a CPU cap).

use std::{
    fmt, fs,
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use serde::{Deserialize, Serialize};

use super::{
    BLKIO_CGROUP, CPU_CGROUP, Cluster, FsError, Group, Result, Server, bounded, cpu_ticks, devno,
    io_err, remove_cgroup, sh, unix_ns,
};

/// Port of the network hog's sink (used by neither file system).
const HOG_PORT: u16 = 24100;

/// A fault, injected into one server at a time.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// A process streaming the server's disk: `dd` writes a file on the
    /// server's file system and reads it back, both `O_DIRECT`, in a loop.
    /// It shares the disk's bandwidth ([`super::ClusterConfig::disk_mibps`])
    /// with the server.
    DiskHog,
    /// A slow disk: the server's reads and writes capped at
    /// [`FaultParams::disk_bps`] and [`FaultParams::disk_iops`] (the server
    /// moved into a cgroup v1 blkio group with lower limits on its loop
    /// device).
    DiskThrottle,
    /// A third party (its own namespace on the bridge) streaming TCP into
    /// the server's namespace ([`FaultParams::hog_streams`] times `cat
    /// /dev/zero | nc` into an `nc` sink), filling the server's link
    /// ([`super::ClusterConfig::link_rate`]).
    NetworkHog,
    /// Random loss of [`FaultParams::loss`] of the server's TCP packets,
    /// both ways (iptables `statistic` in its namespace, INPUT and OUTPUT).
    PacketLoss,
    /// A CPU-bound process (`stress-ng --cpu 1`) competing with the server.
    /// With 2 cores shared by every server a free-running hog would slow
    /// them all alike, so the server and the hog share one cgroup v1 `cpu`
    /// group capped at [`FaultParams::cpu_share`] CPUs: the hog takes CPU
    /// from that server only, as on a machine of its own.
    CpuHog,
    /// The server alone capped (cgroup v1 CFS quota) at
    /// [`FaultParams::cpu_cap`] times the CPU it used in the
    /// [`FaultParams::cpu_measure_s`] seconds before the fault, so the cap
    /// bites whatever the workload (a fixed quota would be no fault at all
    /// for a server that needs less).
    CpuCap,
}

impl FaultKind {
    /// Every fault.
    pub const ALL: [FaultKind; 6] = [
        FaultKind::DiskHog,
        FaultKind::DiskThrottle,
        FaultKind::NetworkHog,
        FaultKind::PacketLoss,
        FaultKind::CpuHog,
        FaultKind::CpuCap,
    ];
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultKind::DiskHog => "disk-hog",
            FaultKind::DiskThrottle => "disk-throttle",
            FaultKind::NetworkHog => "network-hog",
            FaultKind::PacketLoss => "packet-loss",
            FaultKind::CpuHog => "cpu-hog",
            FaultKind::CpuCap => "cpu-cap",
        })
    }
}

impl FromStr for FaultKind {
    type Err = FsError;
    fn from_str(s: &str) -> Result<Self> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.to_string() == s)
            .ok_or_else(|| {
                FsError::Invalid(format!(
                    "unknown fault {s:?} (disk-hog, disk-throttle, network-hog, packet-loss, \
                     cpu-hog, cpu-cap)"
                ))
            })
    }
}

/// Strength of the faults (fields missing from older run.json take defaults).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct FaultParams {
    /// packet-loss: probability a packet of the server is dropped.
    pub loss: f64,
    /// disk-throttle: bytes/s the server may read and write to its disk.
    pub disk_bps: u64,
    /// disk-throttle: I/O operations/s the server may issue each way (a
    /// slow disk is slow at small synchronous writes too, which a byte
    /// limit alone never reaches: at 100 IOPS PostMark on GlusterFS ran as
    /// fast as without the fault, at 20 at half the speed); 0 for no limit.
    pub disk_iops: u64,
    /// disk-hog: size of the file the hog writes and reads back, MiB.
    pub disk_hog_mib: u64,
    /// network-hog: parallel TCP streams (TCP shares a link per flow: one
    /// stream filled a MooseFS chunkserver's link and cost dd nothing, its
    /// own flows still getting what they needed).
    pub hog_streams: usize,
    /// cpu-hog: CPUs the server and the hog share (cgroup v1 CFS quota).
    pub cpu_share: f64,
    /// cpu-cap: the server's quota as a share of the CPU it used just before.
    pub cpu_cap: f64,
    /// cpu-cap: seconds over which that use is measured.
    pub cpu_measure_s: f64,
    /// Bound on any hog process, s (it is killed when the fault ends anyway).
    pub max_seconds: u64,
}

impl Default for FaultParams {
    fn default() -> Self {
        Self {
            loss: 0.05,
            disk_bps: 8 << 20,
            disk_iops: 20,
            disk_hog_mib: 128,
            hog_streams: 8,
            cpu_share: 0.5,
            cpu_cap: 0.5,
            cpu_measure_s: 2.0,
            max_seconds: 900,
        }
    }
}

impl FaultParams {
    /// The defaults for `system`: MooseFS's disk throttle allows more
    /// operations a second (see [`MOOSEFS_DISK_IOPS`]).
    pub fn for_system(system: super::System) -> Self {
        match system {
            super::System::Glusterfs => Self::default(),
            super::System::Moosefs => Self {
                disk_iops: MOOSEFS_DISK_IOPS,
                ..Self::default()
            },
        }
    }
}

/// disk-throttle's I/O operations a second on a MooseFS chunkserver. At
/// GlusterFS's 20 a dd through MooseFS stalled: every chunk has copies on
/// two chunkservers, a write returns once both have it, and the throttled
/// one held about half of all writes; one dd ran at 23 % of clean
/// throughput, the next hung in a direct write the harness had to kill
/// (SIGINT did not end it) 90 s past the workload's end.
pub const MOOSEFS_DISK_IOPS: u64 = 60;

/// One step to undo when a fault is removed.
#[derive(Debug)]
enum Undo {
    /// A hog process group to kill.
    Process(Group),
    /// A file a hog wrote.
    RemoveFile(PathBuf),
    /// Delete an iptables rule (the arguments after `-A`/`-D`) in a namespace.
    Iptables { netns: String, rule: Vec<String> },
    /// Move `pid` back to the controller's root cgroup.
    MoveBack { controller: &'static str, pid: u32 },
    /// Remove a cgroup.
    Cgroup(PathBuf),
}

impl Undo {
    fn run(self) -> Result<()> {
        match self {
            Undo::Process(g) => drop(g),
            Undo::RemoveFile(path) => {
                if path.exists() {
                    fs::remove_file(&path).map_err(io_err(&path))?;
                }
            }
            Undo::Iptables { netns, rule } => {
                let mut args = vec!["-w", "5", "-D"];
                args.extend(rule.iter().map(String::as_str));
                sh(10, Some(&netns), "iptables", &args)?;
            }
            Undo::MoveBack { controller, pid } => {
                let procs = Path::new("/sys/fs/cgroup")
                    .join(controller)
                    .join("cgroup.procs");
                // The server may have exited: then there is nothing to move.
                if Path::new(&format!("/proc/{pid}")).exists() {
                    fs::write(&procs, pid.to_string()).map_err(io_err(&procs))?;
                }
            }
            Undo::Cgroup(path) => {
                remove_cgroup(&path);
                if path.exists() {
                    return Err(FsError::Invalid(format!(
                        "cgroup {} still has tasks",
                        path.display()
                    )));
                }
            }
        }
        Ok(())
    }
}

/// A fault in force on one server; removed on drop.
#[derive(Debug)]
pub struct Fault {
    /// What fault.
    pub kind: FaultKind,
    /// The faulty server.
    pub server: Server,
    /// When it was switched on, ns since the Unix epoch.
    pub on_unix_ns: u64,
    /// How strong it turned out, where that is measured (cpu-cap's quota).
    pub detail: String,
    undo: Vec<Undo>,
}

/// A cpu cgroup with a CFS quota of `cpus` CPUs, `pid` moved into it.
fn cpu_group(fault: &mut Fault, pid: u32, cpus: f64) -> Result<PathBuf> {
    let cg = PathBuf::from(CPU_CGROUP);
    remove_cgroup(&cg);
    fs::create_dir(&cg).map_err(io_err(&cg))?;
    fault.undo.push(Undo::Cgroup(cg.clone()));
    let period = 100_000u64;
    // The kernel's minimum quota is 1 ms.
    let quota = ((cpus * period as f64) as u64).max(1000);
    for (file, value) in [("cpu.cfs_period_us", period), ("cpu.cfs_quota_us", quota)] {
        let p = cg.join(file);
        fs::write(&p, value.to_string()).map_err(io_err(&p))?;
    }
    let procs = cg.join("cgroup.procs");
    fs::write(&procs, pid.to_string()).map_err(io_err(&procs))?;
    fault.undo.push(Undo::MoveBack {
        controller: "cpu",
        pid,
    });
    Ok(procs)
}

impl Fault {
    /// Injects `kind` into server `index` of `cluster`.
    pub fn inject(
        cluster: &Cluster,
        kind: FaultKind,
        index: usize,
        params: &FaultParams,
    ) -> Result<Fault> {
        let server = cluster.server(index)?.clone();
        let mut fault = Fault {
            kind,
            server: server.clone(),
            on_unix_ns: 0,
            detail: String::new(),
            undo: Vec::new(),
        };
        // On error, `fault` drops here and undoes the steps already taken.
        let max = params.max_seconds.to_string();
        match kind {
            FaultKind::DiskHog => {
                // Reading the loop device itself would mostly read holes of
                // the sparse image (no disk I/O): the hog writes a file on
                // the server's file system and streams it back, O_DIRECT.
                let file = Path::new(&server.disk_dir).join("eftfs-disk-hog");
                fault.undo.push(Undo::RemoveFile(file.clone()));
                let script = format!(
                    "while :; do dd if=/dev/zero of={f} bs=1M count={mib} oflag=direct status=none; \
                     dd if={f} of=/dev/null bs=1M iflag=direct status=none; done",
                    f = file.display(),
                    mib = params.disk_hog_mib,
                );
                let g = Group::spawn(bounded(params.max_seconds, None, "sh", &["-c", &script]))?;
                fault.undo.push(Undo::Process(g));
            }
            FaultKind::DiskThrottle => {
                let devno = devno(&server.loop_device)?;
                let cg = PathBuf::from(BLKIO_CGROUP);
                remove_cgroup(&cg);
                fs::create_dir(&cg).map_err(io_err(&cg))?;
                fault.undo.push(Undo::Cgroup(cg.clone()));
                let mut limits = vec![
                    ("blkio.throttle.read_bps_device", params.disk_bps),
                    ("blkio.throttle.write_bps_device", params.disk_bps),
                ];
                if params.disk_iops > 0 {
                    limits.push(("blkio.throttle.read_iops_device", params.disk_iops));
                    limits.push(("blkio.throttle.write_iops_device", params.disk_iops));
                }
                for (file, limit) in limits {
                    let p = cg.join(file);
                    fs::write(&p, format!("{} {limit}", devno.trim())).map_err(io_err(&p))?;
                }
                let procs = cg.join("cgroup.procs");
                fs::write(&procs, server.pid.to_string()).map_err(io_err(&procs))?;
                fault.undo.push(Undo::MoveBack {
                    controller: "blkio",
                    pid: server.pid,
                });
            }
            FaultKind::CpuHog => {
                let procs = cpu_group(&mut fault, server.pid, params.cpu_share)?;
                // The shell joins the cgroup before it becomes the hog, so
                // the hog's workers are born inside it.
                let script = format!(
                    "echo $$ > {} && exec stress-ng --cpu 1 --timeout {max}s --quiet",
                    procs.display()
                );
                let g = Group::spawn(bounded(params.max_seconds, None, "sh", &["-c", &script]))?;
                fault.undo.push(Undo::Process(g));
            }
            FaultKind::CpuCap => {
                let ticks_per_s = 100.0; // USER_HZ on Linux
                let before = cpu_ticks(server.pid);
                std::thread::sleep(Duration::from_secs_f64(params.cpu_measure_s));
                let after = cpu_ticks(server.pid);
                let used = match (before, after) {
                    (Some(a), Some(b)) => {
                        b.saturating_sub(a) as f64 / ticks_per_s / params.cpu_measure_s
                    }
                    _ => {
                        return Err(FsError::Invalid(format!(
                            "cannot read the CPU time of {} (pid {})",
                            server.label, server.pid
                        )));
                    }
                };
                let cap = (used * params.cpu_cap).max(0.01);
                cpu_group(&mut fault, server.pid, cap)?;
                fault.detail = format!("quota {cap:.3} CPU; it used {used:.3} CPU before");
            }
            FaultKind::PacketLoss => {
                let p = params.loss.to_string();
                for chain in ["INPUT", "OUTPUT"] {
                    let rule: Vec<String> = [
                        chain,
                        "-p",
                        "tcp",
                        "-m",
                        "statistic",
                        "--mode",
                        "random",
                        "--probability",
                        &p,
                        "-j",
                        "DROP",
                    ]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                    let mut args = vec!["-w", "5", "-A"];
                    args.extend(rule.iter().map(String::as_str));
                    sh(10, Some(&server.netns), "iptables", &args)?;
                    fault.undo.push(Undo::Iptables {
                        netns: server.netns.clone(),
                        rule,
                    });
                }
            }
            FaultKind::NetworkHog => {
                let sink = Group::spawn(bounded(
                    params.max_seconds,
                    Some(&server.netns),
                    "sh",
                    &[
                        "-c",
                        &format!("exec nc -l -k {} {HOG_PORT} > /dev/null", server.addr),
                    ],
                ))?;
                fault.undo.push(Undo::Process(sink));
                let one = format!(
                    "while :; do cat /dev/zero | nc -N {} {HOG_PORT}; sleep 0.1; done",
                    server.addr
                );
                let all = vec![format!("( {one} ) &"); params.hog_streams.max(1)].join(" ");
                let source = Group::spawn(bounded(
                    params.max_seconds,
                    Some(&cluster.net().hog_ns()),
                    "sh",
                    &["-c", &format!("{all} wait")],
                ))?;
                fault.undo.push(Undo::Process(source));
            }
        }
        fault.on_unix_ns = unix_ns();
        Ok(fault)
    }

    /// Removes the fault; returns when it was switched off (ns since the epoch).
    pub fn remove(mut self) -> Result<u64> {
        let off = unix_ns();
        let mut first_err = None;
        for u in std::mem::take(&mut self.undo).into_iter().rev() {
            if let Err(e) = u.run() {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(off),
        }
    }
}

impl Drop for Fault {
    fn drop(&mut self) {
        for u in std::mem::take(&mut self.undo).into_iter().rev() {
            if let Err(e) = u.run() {
                eprintln!("fs: removing {} fault: {e}", self.kind);
            }
        }
    }
}
