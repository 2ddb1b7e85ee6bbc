//! Real distributed file systems on this host, faults injected into one of
//! their servers, and the tracer recording the servers: the captures that
//! peer comparison (Kasick et al., issues 4 and 16) is proven on.
//!
//! Two systems, so that the analysis' defaults cannot fit one of them:
//! - **GlusterFS** ([`System::Glusterfs`]): four nodes, each a `glusterd`
//!   with one brick daemon (`glusterfsd`), a *disperse* volume of 3 data + 1
//!   redundancy bricks: every write is split into fragments written to all
//!   four bricks in lock-step, like PVFS's striping in the paper.
//! - **MooseFS** ([`System::Moosefs`]): one master (metadata) and four
//!   chunkservers, the peers; every chunk is stored on two of them (the
//!   default goal), so the servers are alike only over many chunks, as on a
//!   real cluster with many clients.
//!
//! # Topology (as a user's cluster would be)
//! Every server is a host of its own: its own network namespace, reached
//! through a veth pair on a bridge with a private address ([`net`]), with a
//! link of finite rate ([`ClusterConfig::link_rate`]), and its own disk: a
//! loop device with ext4, mounted `sync,nobarrier` ([`ClusterConfig::disk_mibps`]). The
//! client (FUSE mount) and the MooseFS master live in the root namespace on
//! the bridge's address; a fifth namespace is the third party a network hog
//! streams from. So each fault hits exactly one server the way it would on
//! real machines: packet loss and the network hog its namespace and link,
//! disk faults its loop device, CPU faults its process (cgroup v1).
//!
//! Only one cluster runs on the host at a time: [`Cluster::start`] takes
//! `flock` on [`LOCK_FILE`] (other engineers' clusters included) and holds
//! it until the cluster is torn down. Every name it creates starts with
//! `eftfs`; [`Cluster::start`] first removes whatever a killed run left, and
//! `Drop` undoes everything. Every command is bounded by `timeout -s KILL`.

use std::{
    fmt, fs,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    str::FromStr,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};

mod fault;
mod glusterfs;
mod moosefs;
pub mod net;
mod record;
mod run;
mod workload;

pub use fault::{Fault, FaultKind, FaultParams};
pub use record::{ProbeSet, RecordConfig, RecordMode, Recording, TracerSummary};
pub use run::{
    FaultInfo, LoadedRun, PhaseStats, ProgramCost, RUN_INFO_VERSION, RunConfig, RunCpu, RunInfo,
    ServerInfo, ServerStats, enable_program_stats, load_run, peers_config, run, score_run,
    server_label, server_stats,
};
pub use workload::{Workload, WorkloadResult};

/// Number of servers (peers) of every cluster.
pub const SERVERS: usize = 4;
/// The lock every file-system cluster on this host is run under.
pub const LOCK_FILE: &str = "/tmp/eftrace-fs.lock";
/// Prefix of everything the harness names (namespaces, links, cgroups).
pub const PREFIX: &str = "eftfs";

/// A distributed file system the harness can build.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    /// GlusterFS 10: the brick daemons are the servers.
    Glusterfs,
    /// MooseFS 3: the chunkservers are the servers.
    Moosefs,
}

impl System {
    /// Both systems.
    pub const ALL: [System; 2] = [System::Glusterfs, System::Moosefs];

    /// Programs the system needs, and the packages that install them.
    fn programs(self) -> &'static [&'static str] {
        match self {
            System::Glusterfs => &["glusterd", "gluster", "mount.glusterfs"],
            System::Moosefs => &["mfsmaster", "mfschunkserver", "mfsmount", "mfsfileinfo"],
        }
    }

    /// How the servers' layout reads in run.json.
    pub fn layout(self) -> String {
        match self {
            System::Glusterfs => format!("disperse {SERVERS} redundancy 1, one node per brick"),
            System::Moosefs => format!("{SERVERS} chunkservers, goal 2, master on the client"),
        }
    }

    /// With one tracer for all servers (`--split-processes`): the
    /// command-line argument whose value labels a server the same in every
    /// run, and the one that holds its listening port, if any.
    pub fn label_args(self) -> (&'static str, Option<&'static str>) {
        match self {
            System::Glusterfs => ("--brick-name", Some("--brick-port")),
            System::Moosefs => ("-c", None),
        }
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            System::Glusterfs => "glusterfs",
            System::Moosefs => "moosefs",
        })
    }
}

impl FromStr for System {
    type Err = FsError;
    fn from_str(s: &str) -> Result<Self> {
        System::ALL
            .into_iter()
            .find(|x| x.to_string() == s)
            .ok_or_else(|| {
                FsError::Invalid(format!("unknown file system {s:?} (glusterfs, moosefs)"))
            })
    }
}

/// Errors of the harness.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The harness needs root (namespaces, loop devices, mounts, eBPF).
    #[error("needs root: it creates namespaces, loop devices and mounts")]
    NotRoot,
    /// A program is not installed.
    #[error("`{program}` is not installed: run `sudo scripts/setup`")]
    Missing {
        /// The program.
        program: String,
    },
    /// A command could not be started.
    #[error("starting `{command}`")]
    Spawn {
        /// The command line.
        command: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A command failed (or was killed by its timeout).
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr (and stdout).
        stderr: String,
    },
    /// A file could not be read or written.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Something did not happen in time.
    #[error("timed out after {seconds} s waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The bound.
        seconds: u64,
    },
    /// A command printed something unexpected.
    #[error("unexpected output of {what}: {detail}")]
    Parse {
        /// The command or file.
        what: String,
        /// What was wrong.
        detail: String,
    },
    /// The tracer failed.
    #[error("tracer for {server}: {detail}")]
    Tracer {
        /// Server label(s).
        server: String,
        /// What went wrong, with its stderr.
        detail: String,
    },
    /// run.json could not be written or read.
    #[error("{}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A capture could not be read.
    #[error("capture {}", path.display())]
    Capture {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: analyzer::DecodeError,
    },
    /// Peer comparison refused a run.
    #[error("peer comparison of {run}")]
    Peers {
        /// The run directory.
        run: PathBuf,
        /// The cause.
        #[source]
        source: analyzer::peers::PeersError,
    },
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
}

pub(crate) type Result<T, E = FsError> = std::result::Result<T, E>;

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> FsError + '_ {
    move |source| FsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

// ---------------------------------------------------------------------------
// Commands

pub(crate) fn shown(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// `timeout -s KILL SECS [ip netns exec NS] PROGRAM ARGS`.
pub(crate) fn bounded(secs: u64, netns: Option<&str>, program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-s", "KILL", &secs.to_string()]);
    if let Some(ns) = netns {
        cmd.args(["ip", "netns", "exec", ns]);
    }
    cmd.arg(program).args(args);
    cmd
}

/// Runs a command to completion; its stdout, or an error with its stderr.
pub(crate) fn output(mut cmd: Command) -> Result<String> {
    let command = shown(&cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| FsError::Spawn {
            command: command.clone(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if !stdout.trim().is_empty() {
            stderr.push_str(" | ");
            stderr.push_str(stdout.trim());
        }
        return Err(FsError::Command {
            command,
            status: out.status.to_string(),
            stderr,
        });
    }
    Ok(stdout)
}

/// Runs `program args` bounded by `secs`, in `netns` if given.
pub(crate) fn sh(secs: u64, netns: Option<&str>, program: &str, args: &[&str]) -> Result<String> {
    output(bounded(secs, netns, program, args))
}

pub(crate) fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
        || ["/usr/sbin", "/sbin", "/usr/bin"]
            .iter()
            .any(|d| Path::new(d).join(program).is_file())
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn c_geteuid() -> u32;
    #[link_name = "kill"]
    fn c_kill(pid: i32, sig: i32) -> i32;
}

pub(crate) const SIGINT: i32 = 2;
pub(crate) const SIGKILL: i32 = 9;

pub(crate) fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { c_geteuid() == 0 }
}

/// Sends `sig` to `pid` (negative: a process group) that the harness started.
pub(crate) fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions; the caller names a
    // process (or, negative, a process group) it started.
    unsafe {
        c_kill(pid, sig);
    }
}

/// Wall-clock time, ns since the Unix epoch.
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Waits for `child` up to `limit`; kills it (and its group) after that.
pub(crate) fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                signal(child.id() as i32, SIGKILL);
                let _ = child.wait();
                return None;
            }
        }
    }
}

pub(crate) fn wait_for(what: &str, seconds: u64, mut ready: impl FnMut() -> bool) -> Result<()> {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > Duration::from_secs(seconds) {
            return Err(FsError::Timeout {
                what: what.into(),
                seconds,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// A helper process in its own process group: killed with its children on drop.
#[derive(Debug)]
pub(crate) struct Group {
    child: Child,
}

impl Group {
    pub(crate) fn spawn(mut cmd: Command) -> Result<Self> {
        let command = shown(&cmd);
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| FsError::Spawn { command, source })?;
        Ok(Self { child })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        signal(-(self.child.id() as i32), SIGKILL);
        let _ = self.child.wait();
    }
}

/// (device, mount point, type) of every mount.
pub(crate) fn mounts() -> Vec<(String, String, String)> {
    fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.into(), f.next()?.into(), f.next()?.into()))
        })
        .collect()
}

pub(crate) fn is_mounted(path: &Path) -> bool {
    let p = path.display().to_string();
    mounts().iter().any(|(_, at, _)| *at == p)
}

/// Unmounts `at`, lazily if it is busy.
pub(crate) fn unmount(at: &str) {
    let _ = sh(30, None, "umount", &[at]).or_else(|_| sh(10, None, "umount", &["-l", at]));
}

/// Command name of a live (not zombie) process, if any.
pub(crate) fn live_comm(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, tail) = stat.rsplit_once(')')?;
    if tail.trim_start().starts_with('Z') {
        return None;
    }
    Some(head.split_once('(')?.1.to_string())
}

/// Pids of the processes whose command line mentions `needle` (a path only
/// this harness uses, so the processes are ones it started).
pub(crate) fn pids_mentioning(needle: &str) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
                && live_comm(*pid).is_some()
        })
        .collect()
}

/// `MAJ:MIN` of a block device such as `/dev/loop3`.
pub(crate) fn devno(dev: &str) -> Result<String> {
    let path = PathBuf::from(format!(
        "/sys/block/{}/dev",
        dev.trim_start_matches("/dev/")
    ));
    Ok(fs::read_to_string(&path)
        .map_err(io_err(&path))?
        .trim()
        .to_string())
}

/// Caps reads and writes of the root blkio cgroup to `dev` at `bps` (0
/// removes the cap).
pub(crate) fn set_root_disk_limit(dev: &str, bps: u64) -> Result<()> {
    let devno = devno(dev)?;
    for file in [
        "blkio.throttle.read_bps_device",
        "blkio.throttle.write_bps_device",
    ] {
        let p = Path::new("/sys/fs/cgroup/blkio").join(file);
        fs::write(&p, format!("{devno} {bps}")).map_err(io_err(&p))?;
    }
    Ok(())
}

/// Moves the tasks of a cgroup to its parent and removes it.
pub(crate) fn remove_cgroup(path: &Path) {
    if !path.exists() {
        return;
    }
    let parent_procs = path.parent().map(|p| p.join("cgroup.procs"));
    for _ in 0..20 {
        let tasks = fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
        if let Some(pp) = &parent_procs {
            for t in tasks.split_whitespace() {
                let _ = fs::write(pp, t);
            }
        }
        if fs::remove_dir(path).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// CPU time (user + system) a process has used, in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let tail = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = tail.split_whitespace().collect();
    // After ") ": state is field 3 of stat(5), utime 14, stime 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

// ---------------------------------------------------------------------------
// Cluster

/// How to build a cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Which file system.
    pub system: System,
    /// Size of each server's loop device, MiB.
    pub disk_mib: u64,
    /// Bandwidth of each server's disk, MiB/s each way (cgroup v1 blkio rule
    /// on its loop device for the root cgroup, where the server and any disk
    /// hog run); 0 for none. All loop devices share the host's one disk: the
    /// cap makes each server's disk a resource of its own that a hog can
    /// saturate without slowing the other servers' disks.
    pub disk_mibps: u64,
    /// Each server's link rate, both ways (tc `tbf` on both ends of its
    /// veth, tc rate syntax); empty for none. Veth pairs are as fast as the
    /// CPU: without a rate a network hog would only burn CPU, where on real
    /// machines it fills the server's NIC.
    pub link_rate: String,
    /// Where images, disks, state and the mount live. Removed on drop.
    pub workdir: PathBuf,
}

impl ClusterConfig {
    /// The defaults for `system`.
    pub fn new(system: System) -> Self {
        Self {
            system,
            disk_mib: 4096,
            disk_mibps: 48,
            link_rate: "500mbit".into(),
            workdir: std::env::temp_dir().join(PREFIX),
        }
    }
}

/// One server: a daemon with its own namespace, address, port and disk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Server {
    /// Stable label, `server1`..`server4`.
    pub label: String,
    /// 0-based index.
    pub index: usize,
    /// Pid of its daemon (`glusterfsd`, `mfschunkserver`).
    pub pid: u32,
    /// The TCP port it serves on.
    pub port: u16,
    /// Its address on the bridge.
    pub addr: String,
    /// Its network namespace.
    pub netns: String,
    /// The host end of its veth pair.
    pub veth: String,
    /// Its loop device.
    pub loop_device: String,
    /// Where its disk is mounted (a disk hog writes here).
    pub disk_dir: String,
    /// How peer comparison labels it when one tracer records all servers
    /// (the value after [`System::label_args`] in its command line).
    pub peers_label: String,
}

/// A running cluster of [`SERVERS`] servers and a FUSE mount. Dropping it
/// tears everything down.
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    servers: Vec<Server>,
    mount: PathBuf,
    /// Random data the workloads write (zeros would be stored sparse).
    source: PathBuf,
    net: net::Net,
    /// Pids of daemons started outside the servers' namespaces (MooseFS's
    /// master), stopped at teardown.
    extra_pids: Vec<u32>,
    torn_down: bool,
    _lock: fs::File,
    /// Seconds `start` took (not counting the wait for the lock).
    pub start_seconds: f64,
}

impl Cluster {
    /// Takes the host's file-system lock (waiting while another cluster
    /// runs), removes what a killed run left, then builds the servers'
    /// network and disks, starts the file system and mounts it.
    pub fn start(config: ClusterConfig) -> Result<Self> {
        if !is_root() {
            return Err(FsError::NotRoot);
        }
        let mut programs = vec![
            "losetup",
            "mkfs.ext4",
            "ip",
            "iptables",
            "tc",
            "nc",
            "stress-ng",
            "dd",
            "postmark",
            "fio",
        ];
        programs.extend_from_slice(config.system.programs());
        for program in programs {
            if !have(program) {
                return Err(FsError::Missing {
                    program: program.into(),
                });
            }
        }
        let lock = take_lock()?;
        let started = Instant::now();
        cleanup_stale(&config.workdir);
        // From here on, Drop undoes whatever was done.
        let mut cluster = Self {
            mount: config.workdir.join("mnt"),
            source: config.workdir.join("source.bin"),
            net: net::Net::new(SERVERS),
            config,
            servers: Vec::new(),
            extra_pids: Vec::new(),
            torn_down: false,
            _lock: lock,
            start_seconds: 0.0,
        };
        cluster.build()?;
        cluster.start_seconds = started.elapsed().as_secs_f64();
        Ok(cluster)
    }

    fn build(&mut self) -> Result<()> {
        let work = self.config.workdir.clone();
        fs::create_dir_all(&work).map_err(io_err(&work))?;
        write_random(&self.source, workload::SOURCE_MIB << 20)?;
        self.net.build(&self.config.link_rate)?;
        let mut disks = Vec::new();
        for i in 0..SERVERS {
            disks.push(self.make_disk(i)?);
        }
        match self.config.system {
            System::Glusterfs => glusterfs::start(self, &disks)?,
            System::Moosefs => moosefs::start(self, &disks)?,
        }
        Ok(())
    }

    /// Server `i`'s disk: a sparse image on a loop device (direct I/O, so
    /// the host's page cache does not hide the device), ext4 (made with its
    /// inode tables zeroed) mounted `sync`.
    /// `sync`: a server's writes reach its disk before they return, as a
    /// loaded server's would. Without it a run of seconds never leaves the
    /// page cache (writeback after 30 s), buffered writeback escapes cgroup
    /// v1 blkio limits, and disk faults could not touch the servers at all:
    /// measured on GlusterFS, PostMark ran as fast under a disk hog as without.
    /// `nobarrier`: a journal commit does not flush the loop device, which
    /// would fsync the image on the host's disk, shared with everything else
    /// on the host: PostMark on GlusterFS ran 4 times slower with barriers,
    /// at the mercy of other work's I/O.
    fn make_disk(&self, i: usize) -> Result<(String, PathBuf)> {
        let root = self.server_dir(i);
        let mnt = root.join("disk");
        fs::create_dir_all(&mnt).map_err(io_err(&mnt))?;
        let image = root.join("disk.img");
        let f = fs::File::create(&image).map_err(io_err(&image))?;
        f.set_len(self.config.disk_mib << 20)
            .map_err(io_err(&image))?;
        drop(f);
        let dev = sh(
            10,
            None,
            "losetup",
            &[
                "--direct-io=on",
                "-f",
                "--show",
                image.to_str().unwrap_or_default(),
            ],
        )?
        .trim()
        .to_string();
        // Inode tables and journal zeroed now, not by the kernel's
        // `ext4lazyinit` thread after the mount: that thread zeroes one 2 MiB
        // inode table every second or so (under the disk limit) for half a
        // minute or more per disk, a kernel thread's requests on a device
        // only this server's files live on, so peer comparison charged them
        // to the server. The first one or two runs after a cluster started
        // then showed a server writing 7-13 MB per window more than its
        // peers (GlusterFS: a clean run named server3 by block-bytes).
        // On a loop device the zeroing takes a few milliseconds.
        sh(
            60,
            None,
            "mkfs.ext4",
            &[
                "-q",
                "-F",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                &dev,
            ],
        )?;
        sh(
            20,
            None,
            "mount",
            &[
                "-o",
                "sync,nobarrier",
                &dev,
                mnt.to_str().unwrap_or_default(),
            ],
        )?;
        if self.config.disk_mibps > 0 {
            set_root_disk_limit(&dev, self.config.disk_mibps << 20)?;
        }
        Ok((dev, mnt))
    }

    /// Directory of server `i`'s image, disk and state.
    pub(crate) fn server_dir(&self, i: usize) -> PathBuf {
        self.config.workdir.join(format!("server{}", i + 1))
    }

    /// The file system.
    pub fn system(&self) -> System {
        self.config.system
    }

    /// How it was built.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The servers, in order.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// The network.
    pub fn net(&self) -> &net::Net {
        &self.net
    }

    /// The FUSE mount point.
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// The random data workloads copy.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// A server by 0-based index.
    pub fn server(&self, index: usize) -> Result<&Server> {
        self.servers.get(index).ok_or_else(|| {
            FsError::Invalid(format!(
                "no server {} (there are {})",
                index + 1,
                self.servers.len()
            ))
        })
    }

    /// Tears everything down; reports the steps that failed.
    pub fn stop(mut self) -> Result<f64> {
        let started = Instant::now();
        let failed = self.teardown();
        if failed.is_empty() {
            Ok(started.elapsed().as_secs_f64())
        } else {
            Err(FsError::Invalid(format!(
                "cleanup left work undone: {}",
                failed.join("; ")
            )))
        }
    }

    /// Undoes `build`, step by step, whatever state it reached.
    fn teardown(&mut self) -> Vec<String> {
        if std::mem::replace(&mut self.torn_down, true) {
            return Vec::new();
        }
        let mut failed = Vec::new();
        if is_mounted(&self.mount) {
            unmount(&self.mount.display().to_string());
        }
        for pid in std::mem::take(&mut self.extra_pids) {
            if live_comm(pid).is_some() {
                signal(pid as i32, SIGKILL);
            }
        }
        let work = self.config.workdir.clone();
        cleanup_stale(&work);
        for ns in self.net.namespaces() {
            if Path::new(&format!("/run/netns/{ns}")).exists() {
                failed.push(format!("network namespace {ns} remains"));
            }
        }
        if work.exists() {
            failed.push(format!("{} remains", work.display()));
        }
        self.servers.clear();
        failed
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for f in self.teardown() {
            eprintln!("fs: cleanup: {f}");
        }
    }
}

/// Takes [`LOCK_FILE`], waiting while another cluster holds it; released
/// when the file is closed (also when the process dies).
fn take_lock() -> Result<fs::File> {
    let lock_path = Path::new(LOCK_FILE);
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .map_err(io_err(lock_path))?;
    if lock.try_lock().is_err() {
        eprintln!("fs: waiting for {LOCK_FILE}: another file-system cluster runs on this host");
        lock.lock().map_err(io_err(lock_path))?;
    }
    Ok(lock)
}

/// Removes what a killed harness process left behind (its cluster's
/// daemons, mounts, disks, namespaces), under the lock. [`Cluster::start`]
/// does the same before it builds.
pub fn clean(workdir: &Path) -> Result<()> {
    if !is_root() {
        return Err(FsError::NotRoot);
    }
    let _lock = take_lock()?;
    cleanup_stale(workdir);
    Ok(())
}

/// Writes `bytes` of random data to `path` (from the kernel's generator).
fn write_random(path: &Path, bytes: u64) -> Result<()> {
    use std::io::{Read as _, Write as _};
    let mut src = fs::File::open("/dev/urandom").map_err(io_err(Path::new("/dev/urandom")))?;
    let mut out = fs::File::create(path).map_err(io_err(path))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        src.read_exact(&mut buf[..n])
            .map_err(io_err(Path::new("/dev/urandom")))?;
        out.write_all(&buf[..n]).map_err(io_err(path))?;
        left -= n as u64;
    }
    Ok(())
}

/// Cgroups the faults create.
pub(crate) const CPU_CGROUP: &str = "/sys/fs/cgroup/cpu/eftfs-fault";
pub(crate) const BLKIO_CGROUP: &str = "/sys/fs/cgroup/blkio/eftfs-fault";

/// Removes what this harness may have left: every process in its
/// namespaces and every process whose command line names `workdir` (the
/// MooseFS master), mounts and loop devices under `workdir`, its namespaces,
/// links, cgroups and files. Only things this harness names; best effort.
/// Runs under the lock, so no live cluster of this harness owns them.
fn cleanup_stale(workdir: &Path) {
    let prefix = workdir.display().to_string();
    if is_mounted(&workdir.join("mnt")) {
        unmount(&format!("{prefix}/mnt"));
    }
    let net = net::Net::new(SERVERS);
    for _ in 0..50 {
        let mut live: Vec<u32> = Vec::new();
        for ns in net.namespaces() {
            if !Path::new(&format!("/run/netns/{ns}")).exists() {
                continue;
            }
            let pids = sh(10, None, "ip", &["netns", "pids", &ns]).unwrap_or_default();
            live.extend(
                pids.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok())
                    .filter(|p| live_comm(*p).is_some()),
            );
        }
        live.extend(pids_mentioning(&format!("{prefix}/")));
        live.retain(|p| *p != std::process::id());
        if live.is_empty() {
            break;
        }
        for p in live {
            signal(p as i32, SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The FUSE client died with the servers; a lazy unmount clears a dead mount.
    for (_, at, _) in mounts() {
        if at.starts_with(&prefix) {
            unmount(&at);
        }
    }
    if let Ok(list) = sh(10, None, "losetup", &["-n", "-l", "-O", "NAME,BACK-FILE"]) {
        for line in list.lines() {
            let mut f = line.split_whitespace();
            if let (Some(dev), Some(back)) = (f.next(), f.next())
                && back.starts_with(&prefix)
            {
                let _ = set_root_disk_limit(dev, 0);
                let _ = sh(10, None, "losetup", &["-d", dev]);
            }
        }
    }
    net.remove();
    let _ = fs::remove_dir_all(workdir);
    for cg in [CPU_CGROUP, BLKIO_CGROUP] {
        remove_cgroup(Path::new(cg));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in System::ALL {
            assert_eq!(s.to_string().parse::<System>().ok(), Some(s));
        }
        for k in FaultKind::ALL {
            assert_eq!(k.to_string().parse::<FaultKind>().ok(), Some(k));
        }
        for w in Workload::ALL {
            assert_eq!(w.to_string().parse::<Workload>().ok(), Some(w));
        }
        assert!("nope".parse::<FaultKind>().is_err());
        assert!("ext4".parse::<System>().is_err());
    }
}
