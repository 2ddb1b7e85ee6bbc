//! A real GlusterFS cluster on this host, faults injected into one of its
//! servers, and the tracer recording its brick daemons: the captures that
//! peer comparison (Kasick et al., issue 4) is proven on.
//!
//! # Topology
//! Everything runs in one private network namespace ([`NETNS`]) holding a
//! veth address ([`ADDR`]; glusterd refuses loopback brick hosts). The four
//! "servers" are the four `glusterfsd` brick daemons; each listens on its own
//! TCP port and stores its data on its own loop device + ext4
//! (`losetup --direct-io=on`, mounted `sync`), so a fault can hit exactly one server:
//! network faults match the brick's port (iptables, tc), disk faults its loop
//! device, CPU and blkio faults its process (cgroup v1). One namespace keeps
//! a single glusterd (a host has one `/var/lib/glusterd`), and being private
//! it keeps every rule and qdisc away from the host's own network; deleting
//! it removes whatever a crashed run left there.
//!
//! # Layout
//! A *disperse* volume, 3 data + 1 redundancy bricks. Like PVFS's striping in
//! the paper, every write is split into fragments written to all four bricks
//! in lock-step, so the four servers are peers doing the same work. (A
//! distribute volume puts each file on one brick: a single-file dd would load
//! one server.) Reads need 3 of 4 fragments; `disperse.read-policy
//! round-robin` spreads them over all bricks instead of pinning each file to
//! the same three. `performance.strict-o-direct` passes the workloads'
//! `O_DIRECT` through to the bricks, so their I/O reaches the loop devices
//! instead of the page cache, where disk faults could not touch it.
//!
//! Every command is bounded by `timeout -s KILL`; [`Cluster`]'s `Drop` undoes
//! everything it set up, and [`Cluster::start`] first removes what a killed
//! run may have left.

use std::{
    collections::BTreeMap,
    fmt, fs,
    io::{BufRead as _, BufReader},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    str::FromStr,
    sync::mpsc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use analyzer::Capture;
use serde::{Deserialize, Serialize};

/// The private network namespace of the cluster.
pub const NETNS: &str = "eftrace-gluster";
/// The servers' address inside [`NETNS`].
pub const ADDR: &str = "10.213.0.1";
/// The volume's name.
pub const VOLUME: &str = "eftrace";
/// Number of servers (brick daemons).
pub const SERVERS: usize = 4;
/// Port of the network hog's sink (below glusterd's brick port range).
const HOG_PORT: u16 = 24100;
/// Version of [`RunInfo`]'s JSON.
pub const RUN_INFO_VERSION: u32 = 1;

/// Functions traced in every brick, chosen from the exports of
/// `libglusterfs.so.0` and `libgfrpc.so.0` (the posix xlator exports only
/// `xlator_api`). Two to four calls per file operation, so uprobes cost
/// little (`iobref_new`, two per operation, was dropped: it doubled the
/// rate and duplicates `call_resume`'s count). Rates on this host, all 4
/// bricks: dd ~7 k calls/s, PostMark ~23 k/s, fio ~26 k/s
/// (`cargo xtask gluster bench`).
/// - `call_resume`: an io-threads worker runs one queued operation down the
///   brick's stack to the posix xlator, disk time included;
/// - `rpcsvc_submit_generic`: one reply sent to a client, socket time included;
/// - `inode_find`, `default_lookup`, `default_create`: metadata operations
///   (PostMark);
/// - `default_writev_cbk`, `default_readv_cbk`: data operations completing;
///
/// Not `syncop_*`: they run in synctasks, which yield with `swapcontext` and
/// resume on another `glfs_sproc` thread, so a uretprobe's hijacked return
/// address comes back on a thread that has no record of it: the kernel
/// logs "failed to handle uretprobe, sending SIGILL" and the brick dies
/// (seen here under PostMark).
pub const FUNCTIONS: &[&str] = &[
    "libglusterfs.so.0:call_resume",
    "libgfrpc.so.0:rpcsvc_submit_generic",
    "libglusterfs.so.0:inode_find",
    "libglusterfs.so.0:default_lookup",
    "libglusterfs.so.0:default_create",
    "libglusterfs.so.0:default_writev_cbk",
    "libglusterfs.so.0:default_readv_cbk",
];

/// Errors of the harness.
#[derive(Debug, thiserror::Error)]
pub enum GlusterError {
    /// The harness needs root (namespaces, loop devices, mounts, eBPF).
    #[error("needs root: it creates namespaces, loop devices and mounts")]
    NotRoot,
    /// A program is not installed.
    #[error("`{program}` is not installed: run `sudo scripts/setup`")]
    Missing {
        /// The program.
        program: String,
    },
    /// A glusterd not started by this harness runs on the host.
    #[error("a glusterd (pid {pid}) not started by this harness is running; stop it first")]
    ForeignGlusterd {
        /// Its pid.
        pid: u32,
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

type Result<T, E = GlusterError> = std::result::Result<T, E>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> GlusterError + '_ {
    move |source| GlusterError::Io {
        path: path.to_path_buf(),
        source,
    }
}

// ---------------------------------------------------------------------------
// Commands

fn shown(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// `timeout -s KILL SECS PROGRAM ARGS`, in the cluster's namespace if `ns`.
fn bounded(secs: u64, ns: bool, program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-s", "KILL", &secs.to_string()]);
    if ns {
        cmd.arg("nsenter").arg(format!("--net=/run/netns/{NETNS}"));
    }
    cmd.arg(program).args(args);
    cmd
}

/// Runs a command to completion; its stdout, or an error with its stderr.
fn output(mut cmd: Command) -> Result<String> {
    let command = shown(&cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| GlusterError::Spawn {
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
        return Err(GlusterError::Command {
            command,
            status: out.status.to_string(),
            stderr,
        });
    }
    Ok(stdout)
}

/// Runs `program args` bounded by `secs`, in the namespace if `ns`.
fn sh(secs: u64, ns: bool, program: &str, args: &[&str]) -> Result<String> {
    output(bounded(secs, ns, program, args))
}

/// `gluster --mode=script ARGS` against the cluster's glusterd.
fn gluster(args: &[&str]) -> Result<String> {
    let mut all = vec!["--mode=script"];
    all.extend_from_slice(args);
    sh(60, true, "gluster", &all)
}

fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
        || ["/usr/sbin", "/sbin"]
            .iter()
            .any(|d| Path::new(d).join(program).is_file())
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn c_geteuid() -> u32;
    #[link_name = "kill"]
    fn c_kill(pid: i32, sig: i32) -> i32;
}

const SIGINT: i32 = 2;
const SIGKILL: i32 = 9;

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { c_geteuid() == 0 }
}

fn signal(pid: i32, sig: i32) {
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
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
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

/// A helper process in its own process group: killed with its children on drop.
#[derive(Debug)]
struct Group {
    child: Child,
}

impl Group {
    fn spawn(mut cmd: Command) -> Result<Self> {
        let command = shown(&cmd);
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| GlusterError::Spawn { command, source })?;
        Ok(Self { child })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        signal(-(self.child.id() as i32), SIGKILL);
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Cluster

/// How to build the cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Size of each brick's loop device, MiB.
    pub disk_mib: u64,
    /// Bandwidth of each brick's disk, MiB/s each way (cgroup v1 blkio rule
    /// on its loop device for the root cgroup, where the brick and any disk
    /// hog run); 0 for none. All loop devices share the host's one disk: the
    /// cap makes each server's disk a resource of its own that a hog can
    /// saturate without slowing the other servers' disks.
    pub disk_mibps: u64,
    /// Where images, brick file systems and the mount live. Removed on drop.
    pub workdir: PathBuf,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            disk_mib: 1024,
            disk_mibps: 48,
            workdir: std::env::temp_dir().join("eftrace-gluster"),
        }
    }
}

/// One server: a brick daemon with its own port and disk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Server {
    /// Stable label, `server1`..`server4` in brick order.
    pub label: String,
    /// 0-based index.
    pub index: usize,
    /// Pid of its `glusterfsd`.
    pub pid: u32,
    /// Its TCP port.
    pub port: u16,
    /// Its loop device.
    pub loop_device: String,
    /// Its brick directory.
    pub brick: String,
}

/// A running 4-brick disperse volume, FUSE-mounted. Dropping it tears
/// everything down.
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    servers: Vec<Server>,
    mount: PathBuf,
    torn_down: bool,
    /// Seconds `start` took.
    pub start_seconds: f64,
}

/// Parent of a brick's mount point and image.
fn brick_root(workdir: &Path, i: usize) -> PathBuf {
    workdir.join(format!("server{}", i + 1))
}

impl Cluster {
    /// Builds the namespace, disks and volume, starts it and mounts it.
    pub fn start(config: ClusterConfig) -> Result<Self> {
        let started = Instant::now();
        if !is_root() {
            return Err(GlusterError::NotRoot);
        }
        for program in [
            "glusterd",
            "gluster",
            "mount.glusterfs",
            "losetup",
            "mkfs.ext4",
            "nsenter",
            "iptables",
            "tc",
        ] {
            if !have(program) {
                return Err(GlusterError::Missing {
                    program: program.into(),
                });
            }
        }
        cleanup_stale(&config.workdir);
        if let Some(pid) = running_glusterd() {
            return Err(GlusterError::ForeignGlusterd { pid });
        }
        // From here on, Drop undoes whatever was done.
        let mut cluster = Self {
            mount: config.workdir.join("mnt"),
            config,
            servers: Vec::new(),
            torn_down: false,
            start_seconds: 0.0,
        };
        cluster.build()?;
        cluster.start_seconds = started.elapsed().as_secs_f64();
        Ok(cluster)
    }

    fn build(&mut self) -> Result<()> {
        let work = self.config.workdir.clone();
        fs::create_dir_all(&work).map_err(io_err(&work))?;
        sh(10, false, "ip", &["netns", "add", NETNS])?;
        sh(10, true, "ip", &["link", "set", "lo", "up"])?;
        sh(
            10,
            true,
            "ip",
            &[
                "link", "add", "eftgl0", "type", "veth", "peer", "name", "eftgl1",
            ],
        )?;
        sh(
            10,
            true,
            "ip",
            &["addr", "add", &format!("{ADDR}/24"), "dev", "eftgl0"],
        )?;
        sh(10, true, "ip", &["link", "set", "eftgl0", "up"])?;
        sh(10, true, "ip", &["link", "set", "eftgl1", "up"])?;

        let mut loops = Vec::new();
        let mut bricks = Vec::new();
        for i in 0..SERVERS {
            let root = brick_root(&work, i);
            let fsdir = root.join("fs");
            fs::create_dir_all(&fsdir).map_err(io_err(&fsdir))?;
            let image = root.join("disk.img");
            let f = fs::File::create(&image).map_err(io_err(&image))?;
            f.set_len(self.config.disk_mib << 20)
                .map_err(io_err(&image))?;
            drop(f);
            let dev = sh(
                10,
                false,
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
            sh(60, false, "mkfs.ext4", &["-q", "-F", &dev])?;
            // `sync`: a brick's writes reach its disk before they return,
            // as a loaded server's would. Without it a PostMark run of
            // seconds never leaves the page cache (24 GiB, writeback after
            // 30 s), so disk faults could not touch the servers at all:
            // measured, PostMark ran as fast under a disk hog as without.
            sh(
                20,
                false,
                "mount",
                &["-o", "sync", &dev, fsdir.to_str().unwrap_or_default()],
            )?;
            let brick = fsdir.join("brick");
            fs::create_dir_all(&brick).map_err(io_err(&brick))?;
            if self.config.disk_mibps > 0 {
                set_root_disk_limit(&dev, self.config.disk_mibps << 20)?;
            }
            loops.push(dev);
            bricks.push(brick);
        }

        let pidfile = work.join("glusterd.pid");
        sh(
            30,
            true,
            "glusterd",
            &["-p", pidfile.to_str().unwrap_or_default()],
        )?;
        wait_for("glusterd to answer", 30, || {
            gluster(&["volume", "list"]).is_ok()
        })?;
        let mut create = vec![
            "volume".to_string(),
            "create".into(),
            VOLUME.into(),
            "disperse".into(),
            SERVERS.to_string(),
            "redundancy".into(),
            "1".into(),
            "transport".into(),
            "tcp".into(),
        ];
        create.extend(bricks.iter().map(|b| format!("{ADDR}:{}", b.display())));
        // All bricks on one host: glusterd wants `force` for that.
        create.push("force".into());
        gluster(&create.iter().map(String::as_str).collect::<Vec<_>>())?;
        for (key, value) in [
            ("disperse.read-policy", "round-robin"),
            ("performance.strict-o-direct", "on"),
        ] {
            gluster(&["volume", "set", VOLUME, key, value])?;
        }
        gluster(&["volume", "start", VOLUME])?;
        let mut servers = Vec::new();
        wait_for("all bricks online", 30, || match brick_status() {
            Ok(s) if s.len() == SERVERS && s.iter().all(|b| b.1 > 0 && b.2 > 0) => {
                servers = s;
                true
            }
            _ => false,
        })?;
        for (i, brick) in bricks.iter().enumerate() {
            let path = brick.display().to_string();
            let Some(&(_, port, pid)) = servers.iter().find(|s| s.0 == path) else {
                return Err(GlusterError::Parse {
                    what: "gluster volume status".into(),
                    detail: format!("no brick {path}"),
                });
            };
            self.servers.push(Server {
                label: format!("server{}", i + 1),
                index: i,
                pid,
                port,
                loop_device: loops[i].clone(),
                brick: path,
            });
        }

        fs::create_dir_all(&self.mount).map_err(io_err(&self.mount))?;
        sh(
            60,
            true,
            "mount",
            &[
                "-t",
                "glusterfs",
                &format!("{ADDR}:/{VOLUME}"),
                self.mount.to_str().unwrap_or_default(),
            ],
        )?;
        let mount = self.mount.clone();
        wait_for("the FUSE mount", 30, || is_mounted(&mount))?;
        Ok(())
    }

    /// The servers, in brick order.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// The FUSE mount point.
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// A server by 0-based index.
    pub fn server(&self, index: usize) -> Result<&Server> {
        self.servers.get(index).ok_or_else(|| {
            GlusterError::Invalid(format!(
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
            Err(GlusterError::Invalid(format!(
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
        let work = self.config.workdir.clone();
        if is_mounted(&self.mount)
            && sh(
                30,
                false,
                "umount",
                &[self.mount.to_str().unwrap_or_default()],
            )
            .is_err()
        {
            let _ = sh(
                10,
                false,
                "umount",
                &["-l", self.mount.to_str().unwrap_or_default()],
            );
        }
        if Path::new(&format!("/run/netns/{NETNS}")).exists() {
            // Bounded: glusterd is gone if an earlier step failed.
            let _ = gluster(&["volume", "stop", VOLUME, "force"]);
            let _ = gluster(&["volume", "delete", VOLUME]);
        }
        cleanup_stale(&work);
        if Path::new(&format!("/run/netns/{NETNS}")).exists() {
            failed.push(format!("network namespace {NETNS} remains"));
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
            eprintln!("gluster: cleanup: {f}");
        }
    }
}

fn wait_for(what: &str, seconds: u64, mut ready: impl FnMut() -> bool) -> Result<()> {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > Duration::from_secs(seconds) {
            return Err(GlusterError::Timeout {
                what: what.into(),
                seconds,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

fn mounts() -> Vec<(String, String, String)> {
    fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.into(), f.next()?.into(), f.next()?.into()))
        })
        .collect()
}

fn is_mounted(path: &Path) -> bool {
    let p = path.display().to_string();
    mounts().iter().any(|(_, at, _)| *at == p)
}

/// (brick path, port, pid) of every brick, from `gluster volume status --xml`.
fn brick_status() -> Result<Vec<(String, u16, u32)>> {
    let xml = gluster(&["volume", "status", VOLUME, "--xml"])?;
    let tag = |block: &str, name: &str| -> Option<String> {
        let open = format!("<{name}>");
        let start = block.find(&open)? + open.len();
        let end = block[start..].find(&format!("</{name}>"))? + start;
        Some(block[start..end].trim().to_string())
    };
    let mut out = Vec::new();
    for block in xml.split("<node>").skip(1) {
        let block = block.split("</node>").next().unwrap_or("");
        let (Some(host), Some(path)) = (tag(block, "hostname"), tag(block, "path")) else {
            continue;
        };
        if host != ADDR {
            continue; // the self-heal daemon
        }
        let port = tag(block, "port").and_then(|p| p.parse().ok()).unwrap_or(0);
        let pid = tag(block, "pid").and_then(|p| p.parse().ok()).unwrap_or(0);
        out.push((path, port, pid));
    }
    Ok(out)
}

/// `MAJ:MIN` of a block device such as `/dev/loop3`.
fn devno(dev: &str) -> Result<String> {
    let path = PathBuf::from(format!(
        "/sys/block/{}/dev",
        dev.trim_start_matches("/dev/")
    ));
    Ok(fs::read_to_string(&path)
        .map_err(io_err(&path))?
        .trim()
        .to_string())
}

/// Caps reads and writes of the root blkio cgroup to `dev` at `bps` (0 removes the cap).
fn set_root_disk_limit(dev: &str, bps: u64) -> Result<()> {
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

/// A glusterd running on the host (not a zombie), if any.
fn running_glusterd() -> Option<u32> {
    let dir = fs::read_dir("/proc").ok()?;
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ..."
        let Some(rest) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = rest.0.split_once('(').map(|(_, c)| c).unwrap_or("");
        let state = rest.1.split_whitespace().next().unwrap_or("");
        if comm == "glusterd" && state != "Z" {
            return Some(pid);
        }
    }
    None
}

/// Removes what this harness may have left: the namespace and every process
/// in it, mounts and loop devices under `workdir`, the volume's glusterd
/// state. Only things this harness names; best effort.
fn cleanup_stale(workdir: &Path) {
    let prefix = workdir.display().to_string();
    for (_, at, _) in mounts() {
        if at == format!("{prefix}/mnt") {
            let _ =
                sh(30, false, "umount", &[&at]).or_else(|_| sh(10, false, "umount", &["-l", &at]));
        }
    }
    let ns_path = format!("/run/netns/{NETNS}");
    if Path::new(&ns_path).exists() {
        // Every process in the namespace is a glusterd, brick, heal daemon or
        // FUSE client of ours.
        for _ in 0..50 {
            let pids = sh(10, false, "ip", &["netns", "pids", NETNS]).unwrap_or_default();
            let pids: Vec<i32> = pids
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            let live: Vec<i32> = pids
                .into_iter()
                .filter(|p| {
                    fs::read_to_string(format!("/proc/{p}/stat"))
                        .map(|s| {
                            s.rsplit_once(')')
                                .is_some_and(|(_, t)| !t.trim_start().starts_with('Z'))
                        })
                        .unwrap_or(false)
                })
                .collect();
            if live.is_empty() {
                break;
            }
            for p in live {
                signal(p, SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = sh(10, false, "ip", &["netns", "del", NETNS]);
    }
    // The FUSE client died with the namespace; a lazy unmount clears a dead mount.
    for (_, at, _) in mounts() {
        if at.starts_with(&prefix) {
            let _ =
                sh(30, false, "umount", &[&at]).or_else(|_| sh(10, false, "umount", &["-l", &at]));
        }
    }
    if let Ok(list) = sh(10, false, "losetup", &["-n", "-l", "-O", "NAME,BACK-FILE"]) {
        for line in list.lines() {
            let mut f = line.split_whitespace();
            if let (Some(dev), Some(back)) = (f.next(), f.next())
                && back.starts_with(&prefix)
            {
                let _ = set_root_disk_limit(dev, 0);
                let _ = sh(10, false, "losetup", &["-d", dev]);
            }
        }
    }
    let _ = fs::remove_dir_all(workdir);
    // glusterd state of our volume, only when no glusterd can be using it.
    if running_glusterd().is_none() {
        let _ = fs::remove_dir_all(format!("/var/lib/glusterd/vols/{VOLUME}"));
    }
    for cg in [CPU_CGROUP, BLKIO_CGROUP] {
        remove_cgroup(Path::new(cg));
    }
}

// ---------------------------------------------------------------------------
// Workloads

/// A file-system workload.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// dd: sequential 1 MiB `O_DIRECT` writes, then reads, of 32 MiB files.
    Dd,
    /// PostMark: small-file creates, reads, appends, deletes.
    Postmark,
    /// fio: 2 jobs of random 64 KiB `O_DIRECT` reads and writes.
    Fio,
}

impl Workload {
    /// Every workload.
    pub const ALL: [Workload; 3] = [Workload::Dd, Workload::Postmark, Workload::Fio];

    /// Runs the workload on `cluster` for about `seconds`.
    pub fn run(self, cluster: &Cluster, seconds: f64) -> Result<WorkloadResult> {
        match self {
            Workload::Dd => dd::run(cluster, seconds),
            Workload::Postmark => postmark::run(cluster, seconds),
            Workload::Fio => fio::run(cluster, seconds),
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Workload::Dd => "dd",
            Workload::Postmark => "postmark",
            Workload::Fio => "fio",
        })
    }
}

impl FromStr for Workload {
    type Err = GlusterError;
    fn from_str(s: &str) -> Result<Self> {
        Workload::ALL
            .into_iter()
            .find(|w| w.to_string() == s)
            .ok_or_else(|| {
                GlusterError::Invalid(format!("unknown workload {s:?} (dd, postmark, fio)"))
            })
    }
}

/// What a workload did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkloadResult {
    /// Wall time, s.
    pub seconds: f64,
    /// Bytes read through the mount.
    pub bytes_read: u64,
    /// Bytes written through the mount.
    pub bytes_written: u64,
    /// Operations completed (dd files, PostMark transactions, fio I/Os).
    pub ops: u64,
}

impl WorkloadResult {
    /// Read + write throughput, MB/s.
    pub fn mb_per_s(&self) -> f64 {
        (self.bytes_read + self.bytes_written) as f64 / 1e6 / self.seconds.max(1e-9)
    }
}

/// A fresh directory for a workload on the mount (emptied first).
fn workload_dir(cluster: &Cluster, name: &str) -> Result<PathBuf> {
    let dir = cluster.mount().join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    Ok(dir)
}

/// dd on the mount.
pub mod dd {
    use super::*;

    const FILE_MIB: u64 = 32;

    /// Writes then reads back 32 MiB files with 1 MiB `O_DIRECT` dd's until
    /// `seconds` have passed.
    pub fn run(cluster: &Cluster, seconds: f64) -> Result<WorkloadResult> {
        let dir = workload_dir(cluster, "dd")?;
        let start = Instant::now();
        let mut r = WorkloadResult::default();
        let mut n = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            let file = dir.join(format!("f{}", n % 4));
            let of = format!("of={}", file.display());
            let count = format!("count={FILE_MIB}");
            let w = dd_bytes(&["if=/dev/zero", &of, "bs=1M", &count, "oflag=direct"])?;
            r.bytes_written += w;
            if start.elapsed().as_secs_f64() >= seconds {
                r.ops += 1;
                break;
            }
            let inf = format!("if={}", file.display());
            r.bytes_read += dd_bytes(&[&inf, "of=/dev/null", "bs=1M", "iflag=direct"])?;
            r.ops += 2;
            n += 1;
        }
        r.seconds = start.elapsed().as_secs_f64();
        let _ = fs::remove_dir_all(&dir);
        Ok(r)
    }

    fn dd_bytes(args: &[&str]) -> Result<u64> {
        let mut cmd = bounded(120, false, "dd", args);
        let command = shown(&cmd);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|source| GlusterError::Spawn {
                command: command.clone(),
                source,
            })?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(GlusterError::Command {
                command,
                status: out.status.to_string(),
                stderr: stderr.into_owned(),
            });
        }
        // "33554432 bytes (34 MB, 32 MiB) copied, 0.2 s, 150 MB/s"
        stderr
            .lines()
            .find_map(|l| {
                l.split_once(" bytes")
                    .and_then(|(n, _)| n.trim().parse().ok())
            })
            .ok_or_else(|| GlusterError::Parse {
                what: command,
                detail: stderr.into_owned(),
            })
    }
}

/// PostMark on the mount, scaled to seconds.
pub mod postmark {
    use std::io::Write as _;

    use super::*;

    /// Runs short PostMark rounds (100 files of 4-64 KiB, 200 transactions,
    /// about 3 s each here) until `seconds` have passed.
    pub fn run(cluster: &Cluster, seconds: f64) -> Result<WorkloadResult> {
        let dir = workload_dir(cluster, "postmark")?;
        let start = Instant::now();
        let mut r = WorkloadResult::default();
        while start.elapsed().as_secs_f64() < seconds {
            let script = format!(
                "set location {}\nset number 100\nset transactions 200\nset size 4096 65536\n\
                 set read 65536\nset write 65536\nset buffering false\nrun\nquit\n",
                dir.display()
            );
            let mut cmd = bounded(120, false, "postmark", &[]);
            let command = shown(&cmd);
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|source| GlusterError::Spawn {
                    command: command.clone(),
                    source,
                })?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin
                    .write_all(script.as_bytes())
                    .map_err(|source| GlusterError::Spawn {
                        command: command.clone(),
                        source,
                    })?;
            }
            let out = child
                .wait_with_output()
                .map_err(|source| GlusterError::Spawn {
                    command: command.clone(),
                    source,
                })?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                return Err(GlusterError::Command {
                    command,
                    status: out.status.to_string(),
                    stderr: format!("{}{}", String::from_utf8_lossy(&out.stderr), stdout),
                });
            }
            let (read, written) = parse(&stdout).ok_or_else(|| GlusterError::Parse {
                what: command,
                detail: stdout.to_string(),
            })?;
            r.bytes_read += read;
            r.bytes_written += written;
            r.ops += 200;
        }
        r.seconds = start.elapsed().as_secs_f64();
        let _ = fs::remove_dir_all(&dir);
        Ok(r)
    }

    /// Bytes read and written from PostMark's report ("12.34 kilobytes read").
    pub(crate) fn parse(report: &str) -> Option<(u64, u64)> {
        let amount = |what: &str| -> Option<u64> {
            let line = report.lines().find(|l| l.contains(what))?;
            let mut words = line.split_whitespace();
            let n: f64 = words.next()?.parse().ok()?;
            let scale = match words.next()? {
                "bytes" => 1.0,
                "kilobytes" => 1024.0,
                "megabytes" => 1024.0 * 1024.0,
                "gigabytes" => 1024.0 * 1024.0 * 1024.0,
                _ => return None,
            };
            Some((n * scale) as u64)
        };
        Some((amount("bytes read (")?, amount("bytes written (")?))
    }
}

/// fio on the mount.
pub mod fio {
    use super::*;

    /// Runs 2 fio jobs of random 64 KiB `O_DIRECT` reads and writes (50/50)
    /// on 64 MiB files for `seconds` (after laying the files out).
    pub fn run(cluster: &Cluster, seconds: f64) -> Result<WorkloadResult> {
        let dir = workload_dir(cluster, "fio")?;
        let runtime = format!("--runtime={}", seconds.ceil().max(1.0) as u64);
        let directory = format!("--directory={}", dir.display());
        let start = Instant::now();
        let json = sh(
            seconds.ceil() as u64 + 120,
            false,
            "fio",
            &[
                "--name=eftrace",
                &directory,
                "--rw=randrw",
                "--rwmixread=50",
                "--bs=64k",
                "--size=64m",
                "--numjobs=2",
                "--direct=1",
                "--ioengine=psync",
                "--time_based",
                &runtime,
                "--group_reporting",
                "--output-format=json",
            ],
        )?;
        let seconds = start.elapsed().as_secs_f64();
        let v: serde_json::Value =
            serde_json::from_str(&json).map_err(|e| GlusterError::Parse {
                what: "fio --output-format=json".into(),
                detail: e.to_string(),
            })?;
        let job = &v["jobs"][0];
        let num = |dir: &str, key: &str| job[dir][key].as_u64().unwrap_or(0);
        let _ = fs::remove_dir_all(&dir);
        Ok(WorkloadResult {
            seconds,
            bytes_read: num("read", "io_bytes"),
            bytes_written: num("write", "io_bytes"),
            ops: num("read", "total_ios") + num("write", "total_ios"),
        })
    }
}

// ---------------------------------------------------------------------------
// Faults

const CPU_CGROUP: &str = "/sys/fs/cgroup/cpu/eftrace-gluster-fault";
const BLKIO_CGROUP: &str = "/sys/fs/cgroup/blkio/eftrace-gluster-fault";

/// A fault, injected into one server at a time.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// A process streaming the server's disk: `dd` writes a file on the
    /// server's file system and reads it back, both `O_DIRECT`, in a loop.
    /// It shares the disk's bandwidth ([`ClusterConfig::disk_mibps`]) with
    /// the server.
    DiskHog,
    /// The server's reads and writes to its disk capped at
    /// [`FaultParams::disk_bps`] and [`FaultParams::disk_iops`] (the brick
    /// moved into a cgroup v1 blkio group with lower limits on its loop
    /// device).
    DiskThrottle,
    /// A third-party TCP stream saturating the server's "link". All servers
    /// share the namespace's loopback, which has no bandwidth of its own, so
    /// while the fault is on the server's port and the hog's stream
    /// (`cat /dev/zero | nc` into an `nc` sink) share one htb class of
    /// [`FaultParams::link_rate`]: the server's NIC, filled by the hog.
    NetworkHog,
    /// Random loss of the server's TCP packets, both ways (iptables
    /// `statistic` on its port, INPUT and OUTPUT).
    PacketLoss,
    /// A CPU-bound process (`stress-ng --cpu 1`) competing with the server.
    /// With 2 cores and 4 servers a free-running hog would slow every server
    /// alike, so the server and the hog share one cgroup v1 `cpu` group
    /// capped at [`FaultParams::cpu_share`] CPUs: the hog takes CPU from that
    /// server only, and the rest of the host loses at most that share.
    CpuHog,
}

impl FaultKind {
    /// Every fault.
    pub const ALL: [FaultKind; 5] = [
        FaultKind::DiskHog,
        FaultKind::DiskThrottle,
        FaultKind::NetworkHog,
        FaultKind::PacketLoss,
        FaultKind::CpuHog,
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
        })
    }
}

impl FromStr for FaultKind {
    type Err = GlusterError;
    fn from_str(s: &str) -> Result<Self> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.to_string() == s)
            .ok_or_else(|| {
                GlusterError::Invalid(format!(
                    "unknown fault {s:?} (disk-hog, disk-throttle, network-hog, packet-loss, cpu-hog)"
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
    /// limit alone never reaches); 0 for no limit.
    pub disk_iops: u64,
    /// disk-hog: size of the file the hog writes and reads back, MiB.
    pub disk_hog_mib: u64,
    /// network-hog: the server's link rate (tc rate, e.g. `400mbit`).
    pub link_rate: String,
    /// cpu-hog: CPUs the server and the hog share (cgroup v1 CFS quota).
    pub cpu_share: f64,
    /// Bound on any hog process, s (it is killed when the fault ends anyway).
    pub max_seconds: u64,
}

impl Default for FaultParams {
    fn default() -> Self {
        Self {
            loss: 0.05,
            disk_bps: 8 << 20,
            disk_iops: 100,
            disk_hog_mib: 128,
            link_rate: "400mbit".into(),
            cpu_share: 0.5,
            max_seconds: 900,
        }
    }
}

/// One step to undo when a fault is removed.
#[derive(Debug)]
enum Undo {
    /// A hog process group to kill.
    Process(Group),
    /// A file a hog wrote.
    RemoveFile(PathBuf),
    /// Delete an iptables rule (the arguments after `-A`/`-D`).
    Iptables(Vec<String>),
    /// Remove the root qdisc of the namespace's `lo`.
    Qdisc,
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
            Undo::Iptables(rule) => {
                let mut args = vec!["-w", "5", "-D"];
                args.extend(rule.iter().map(String::as_str));
                sh(10, true, "iptables", &args)?;
            }
            Undo::Qdisc => {
                sh(10, true, "tc", &["qdisc", "del", "dev", "lo", "root"])?;
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
                    return Err(GlusterError::Invalid(format!(
                        "cgroup {} still has tasks",
                        path.display()
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Moves the tasks of a cgroup to its parent and removes it.
fn remove_cgroup(path: &Path) {
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

/// A fault in force on one server; removed on drop.
#[derive(Debug)]
pub struct Fault {
    /// What fault.
    pub kind: FaultKind,
    /// The faulty server.
    pub server: Server,
    /// When it was switched on, ns since the Unix epoch.
    pub on_unix_ns: u64,
    undo: Vec<Undo>,
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
            undo: Vec::new(),
        };
        // On error, `fault` drops here and undoes the steps already taken.
        let max = params.max_seconds.to_string();
        match kind {
            FaultKind::DiskHog => {
                // Reading the loop device itself would mostly read holes of
                // the sparse image (no disk I/O): the hog writes a file on
                // the server's file system and streams it back, O_DIRECT.
                let fs_dir = Path::new(&server.brick)
                    .parent()
                    .ok_or_else(|| GlusterError::Invalid(format!("brick {}", server.brick)))?;
                let file = fs_dir.join("eftrace-disk-hog");
                fault.undo.push(Undo::RemoveFile(file.clone()));
                let script = format!(
                    "while :; do dd if=/dev/zero of={f} bs=1M count={mib} oflag=direct status=none; \
                     dd if={f} of=/dev/null bs=1M iflag=direct status=none; done",
                    f = file.display(),
                    mib = params.disk_hog_mib,
                );
                let g = Group::spawn(bounded(params.max_seconds, false, "sh", &["-c", &script]))?;
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
                let cg = PathBuf::from(CPU_CGROUP);
                remove_cgroup(&cg);
                fs::create_dir(&cg).map_err(io_err(&cg))?;
                fault.undo.push(Undo::Cgroup(cg.clone()));
                let period = 100_000u64;
                let quota = ((params.cpu_share * period as f64) as u64).max(1000);
                for (file, value) in [("cpu.cfs_period_us", period), ("cpu.cfs_quota_us", quota)] {
                    let p = cg.join(file);
                    fs::write(&p, value.to_string()).map_err(io_err(&p))?;
                }
                let procs = cg.join("cgroup.procs");
                fs::write(&procs, server.pid.to_string()).map_err(io_err(&procs))?;
                fault.undo.push(Undo::MoveBack {
                    controller: "cpu",
                    pid: server.pid,
                });
                // The shell joins the cgroup before it becomes the hog, so
                // the hog's workers are born inside it.
                let script = format!(
                    "echo $$ > {} && exec stress-ng --cpu 1 --timeout {max}s --quiet",
                    procs.display()
                );
                let g = Group::spawn(bounded(params.max_seconds, false, "sh", &["-c", &script]))?;
                fault.undo.push(Undo::Process(g));
            }
            FaultKind::PacketLoss => {
                let p = params.loss.to_string();
                let port = server.port.to_string();
                for (chain, dir) in [("INPUT", "--dport"), ("OUTPUT", "--sport")] {
                    let rule: Vec<String> = [
                        chain,
                        "-p",
                        "tcp",
                        dir,
                        &port,
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
                    sh(10, true, "iptables", &args)?;
                    fault.undo.push(Undo::Iptables(rule));
                }
            }
            FaultKind::NetworkHog => {
                let tc = |args: &[&str]| sh(10, true, "tc", args);
                tc(&[
                    "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1",
                ])?;
                fault.undo.push(Undo::Qdisc);
                tc(&[
                    "class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate",
                    "100gbit",
                ])?;
                tc(&[
                    "class",
                    "add",
                    "dev",
                    "lo",
                    "parent",
                    "1:",
                    "classid",
                    "1:2",
                    "htb",
                    "rate",
                    &params.link_rate,
                    "ceil",
                    &params.link_rate,
                ])?;
                for port in [server.port, HOG_PORT] {
                    for field in ["dport", "sport"] {
                        tc(&[
                            "filter",
                            "add",
                            "dev",
                            "lo",
                            "parent",
                            "1:",
                            "protocol",
                            "ip",
                            "prio",
                            "1",
                            "u32",
                            "match",
                            "ip",
                            field,
                            &port.to_string(),
                            "0xffff",
                            "flowid",
                            "1:2",
                        ])?;
                    }
                }
                let sink = Group::spawn(bounded(
                    params.max_seconds,
                    true,
                    "sh",
                    &[
                        "-c",
                        &format!("exec nc -l -k {ADDR} {HOG_PORT} > /dev/null"),
                    ],
                ))?;
                fault.undo.push(Undo::Process(sink));
                let source = Group::spawn(bounded(
                    params.max_seconds,
                    true,
                    "sh",
                    &[
                        "-c",
                        &format!(
                            "while :; do cat /dev/zero | nc -N {ADDR} {HOG_PORT}; sleep 0.1; done"
                        ),
                    ],
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
                eprintln!("gluster: removing {} fault: {e}", self.kind);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Recording

/// How brick daemons are recorded.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RecordMode {
    /// One tracer per server, one capture per server.
    PerServer,
    /// One tracer with every server's pid (`-p` repeated), one capture.
    Single,
}

impl FromStr for RecordMode {
    type Err = GlusterError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "per-server" => Ok(RecordMode::PerServer),
            "single" => Ok(RecordMode::Single),
            _ => Err(GlusterError::Invalid(format!(
                "unknown record mode {s:?} (per-server, single)"
            ))),
        }
    }
}

/// What the tracer records.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RecordConfig {
    /// The tracer binary.
    pub tracer: PathBuf,
    /// Function patterns (`-f`).
    pub functions: Vec<String>,
    /// IP samples per second per CPU (0: none).
    pub sample_hz: u32,
    /// Sample every process on the host, not only the bricks.
    pub sample_all: bool,
    /// One tracer per server or one for all.
    pub mode: RecordMode,
}

impl RecordConfig {
    /// [`FUNCTIONS`], 99 Hz sampling of the bricks, one tracer for all
    /// servers (it costs less than four: see `cargo xtask gluster bench`).
    pub fn new(tracer: PathBuf) -> Self {
        Self {
            tracer,
            functions: FUNCTIONS.iter().map(|s| s.to_string()).collect(),
            sample_hz: 99,
            sample_all: false,
            mode: RecordMode::Single,
        }
    }
}

/// What one tracer said when it stopped.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TracerSummary {
    /// Capture file name (relative to the run directory).
    pub capture: String,
    /// Labels of the servers it recorded.
    pub servers: Vec<String>,
    /// Records by kind, from its summary.
    pub events: BTreeMap<String, u64>,
    /// Records lost (ring full).
    pub lost: u64,
    /// Capture size, bytes.
    pub bytes: u64,
    /// Seconds from start to "recording" (probe attachment).
    pub attach_seconds: f64,
}

struct Tracer {
    child: Child,
    lines: mpsc::Receiver<String>,
    summary: TracerSummary,
    path: PathBuf,
}

/// Tracers recording a cluster's servers.
pub struct Recording {
    tracers: Vec<Tracer>,
}

impl Recording {
    /// Starts the tracer(s) and waits until they record.
    pub fn start(cluster: &Cluster, config: &RecordConfig, dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let groups: Vec<Vec<&Server>> = match config.mode {
            RecordMode::PerServer => cluster.servers().iter().map(|s| vec![s]).collect(),
            RecordMode::Single => vec![cluster.servers().iter().collect()],
        };
        let mut rec = Recording {
            tracers: Vec::new(),
        };
        for servers in groups {
            let name = match config.mode {
                RecordMode::PerServer => format!("{}.capture", servers[0].label),
                RecordMode::Single => "servers.capture".to_string(),
            };
            let path = dir.join(&name);
            let mut cmd = Command::new(&config.tracer);
            cmd.arg("record");
            for s in &servers {
                cmd.args(["-p", &s.pid.to_string()]);
            }
            for f in &config.functions {
                cmd.args(["-f", f]);
            }
            cmd.args(["--sample-hz", &config.sample_hz.to_string()]);
            if config.sample_all {
                cmd.arg("--sample-all");
            }
            cmd.arg("-o").arg(&path);
            let command = shown(&cmd);
            let labels: Vec<String> = servers.iter().map(|s| s.label.clone()).collect();
            let started = Instant::now();
            let mut child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|source| GlusterError::Spawn { command, source })?;
            let (tx, rx) = mpsc::channel();
            if let Some(stderr) = child.stderr.take() {
                std::thread::spawn(move || {
                    for line in BufReader::new(stderr).lines() {
                        let Ok(line) = line else { break };
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                });
            }
            let mut t = Tracer {
                child,
                lines: rx,
                summary: TracerSummary {
                    capture: name,
                    servers: labels.clone(),
                    ..Default::default()
                },
                path,
            };
            // Wait for "recording ..." (probes attached).
            let mut seen = Vec::new();
            let ok = loop {
                match t
                    .lines
                    .recv_timeout(Duration::from_secs(120).saturating_sub(started.elapsed()))
                {
                    Ok(l) => {
                        let recording = l.contains("recording");
                        seen.push(l);
                        if recording {
                            break true;
                        }
                    }
                    Err(_) => break false,
                }
            };
            t.summary.attach_seconds = started.elapsed().as_secs_f64();
            rec.tracers.push(t);
            if !ok {
                return Err(GlusterError::Tracer {
                    server: labels.join(","),
                    detail: format!("did not start recording: {}", seen.join(" | ")),
                });
            }
        }
        Ok(rec)
    }

    /// Stops the tracers with SIGINT; checks they exit 0 and lost nothing
    /// they did not report.
    pub fn stop(mut self) -> Result<Vec<TracerSummary>> {
        let mut out = Vec::new();
        for t in &self.tracers {
            signal(t.child.id() as i32, SIGINT);
        }
        let tracers = std::mem::take(&mut self.tracers);
        for mut t in tracers {
            let status = wait_bounded(&mut t.child, Duration::from_secs(60));
            // Once the tracer exited, read its stderr to the end: the
            // summary (events, LOSSES) comes last and must not be missed.
            let lines: Vec<String> = if status.is_some() {
                t.lines.iter().collect()
            } else {
                t.lines.try_iter().collect()
            };
            let server = t.summary.servers.join(",");
            match status {
                Some(s) if s.success() => {}
                other => {
                    return Err(GlusterError::Tracer {
                        server,
                        detail: format!("exit {other:?}: {}", lines.join(" | ")),
                    });
                }
            }
            parse_summary(&lines, &mut t.summary);
            t.summary.bytes = fs::metadata(&t.path).map(|m| m.len()).unwrap_or(0);
            out.push(t.summary);
        }
        Ok(out)
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        for t in &mut self.tracers {
            signal(t.child.id() as i32, SIGINT);
            wait_bounded(&mut t.child, Duration::from_secs(30));
        }
    }
}

/// Reads the tracer's closing summary ("  events: entry 5, ...", "  LOSSES: ring_full 3").
fn parse_summary(lines: &[String], s: &mut TracerSummary) {
    for l in lines {
        let l = l.trim();
        if let Some(rest) = l.strip_prefix("events:") {
            for part in rest.split(',') {
                let mut w = part.split_whitespace();
                if let (Some(k), Some(n)) = (w.next(), w.next().and_then(|n| n.parse().ok())) {
                    s.events.insert(k.to_string(), n);
                }
            }
        }
        if let Some(rest) = l.strip_prefix("LOSSES:") {
            for part in rest.split(',') {
                let mut w = part.split_whitespace();
                if let (Some("ring_full"), Some(n)) =
                    (w.next(), w.next().and_then(|n| n.parse().ok()))
                {
                    s.lost = n;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Runs

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
    /// What the servers are (`glusterfs`).
    pub system: String,
    /// Volume layout.
    pub layout: String,
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
}

/// Runs one experiment on `cluster`, writing captures and `run.json` to `dir`.
pub fn run(cluster: &Cluster, config: &RunConfig, dir: &Path) -> Result<RunInfo> {
    if let Some((_, i)) = config.fault {
        cluster.server(i)?;
    }
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let recording = match &config.record {
        Some(r) => Some(Recording::start(cluster, r, dir)?),
        None => None,
    };
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
            let off = fault.remove()?;
            fault_info = Some(FaultInfo {
                kind,
                server: server.label,
                server_index: index,
                on_unix_ns: on,
                off_unix_ns: off,
                params: config.params.clone(),
            });
        }
        let result = work
            .join()
            .map_err(|_| GlusterError::Invalid("the workload thread panicked".into()))??;
        Ok((result, fault_info))
    })?;
    let end_unix_ns = unix_ns();
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
        system: "glusterfs".into(),
        layout: format!("disperse {SERVERS} redundancy 1"),
        workload: config.workload,
        seconds: config.seconds,
        result,
        fault,
        servers,
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
    };
    let path = dir.join("run.json");
    let json = serde_json::to_string_pretty(&info).map_err(|source| GlusterError::Json {
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
    let info: RunInfo = serde_json::from_str(&text).map_err(|source| GlusterError::Json {
        path: path.clone(),
        source,
    })?;
    let mut captures = BTreeMap::new();
    for t in &info.tracers {
        let p = dir.join(&t.capture);
        let c = Capture::open(&p).map_err(|source| GlusterError::Capture {
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
    /// Socket system calls per second.
    pub syscalls: f64,
    /// Socket bytes received per second.
    pub rx_bytes: f64,
    /// Socket bytes sent per second.
    pub tx_bytes: f64,
    /// IP samples of the server's pid per second.
    pub samples: f64,
    /// TCP retransmissions on the server's port per second.
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
        let mut phases = [PhaseStats::default(), PhaseStats::default()];
        let mut time_ns: [BTreeMap<String, (u64, u64)>; 2] = Default::default();
        let mut stacks: BTreeMap<u32, Vec<(u32, u64)>> = BTreeMap::new();
        for e in cap.events().flatten() {
            let h = *e.header();
            let t = wall(h.ts_ns);
            if t < start || t > end {
                continue;
            }
            let ph = usize::from(t >= split);
            let retrans_here =
                matches!(e, Event::TcpRetransmit(r) if r.sport == port || r.dport == port);
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

/// How peer comparison reads these runs: every brick daemon is a server
/// (`--split-processes`), labelled by its brick path, which unlike its pid
/// is the same in every run (`--label-arg --brick-name`), with its port from
/// its command line to place TCP retransmissions (`--port-arg --brick-port`).
/// Nothing GlusterFS-specific is in the analysis: these are its generic
/// options filled in, as `analyzer peers train` takes them.
pub fn peers_config(window_s: f64, shift_s: f64) -> analyzer::peers::PeersConfig {
    analyzer::peers::PeersConfig {
        window_ns: (window_s * 1e9) as u64,
        shift_ns: (shift_s * 1e9) as u64,
        split: analyzer::peers::ServerSplit::PerProcess {
            label_arg: Some("--brick-name".into()),
        },
        port_arg: Some("--brick-port".into()),
        ..Default::default()
    }
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
        |source| GlusterError::Peers {
            run: dir.to_path_buf(),
            source,
        },
    )
}

/// The harness label (`server1`..) of the server peer comparison calls
/// `peers_label` (its brick path), or the label itself when no brick has it.
pub fn server_label(info: &RunInfo, peers_label: &str) -> String {
    info.servers
        .iter()
        .find(|s| s.server.brick == peers_label)
        .map_or_else(|| peers_label.to_string(), |s| s.server.label.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postmark_report_amounts() {
        let report = "Files:\n\t186 read (37 per second)\n\t214 appended (42 per second)\n\
                      Data:\n\t1.23 megabytes read (0.41 megabytes per second)\n\
                      \t512.00 kilobytes written (170.67 kilobytes per second)\n";
        assert_eq!(postmark::parse(report), Some((1_289_748, 524_288)));
    }

    #[test]
    fn tracer_summary_lines() {
        let lines: Vec<String> = [
            "recorded 10 events in 1.00 s into x (5 bytes); stopped: signal",
            "  events: entry 4, return 4, syscall 2",
            "  LOSSES: ring_full 7, other 1 (grow --ring-size or trace fewer functions)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut s = TracerSummary::default();
        parse_summary(&lines, &mut s);
        assert_eq!(s.events.get("entry"), Some(&4));
        assert_eq!(s.events.get("syscall"), Some(&2));
        assert_eq!(s.lost, 7);
    }

    #[test]
    fn names_round_trip() {
        for k in FaultKind::ALL {
            assert_eq!(k.to_string().parse::<FaultKind>().ok(), Some(k));
        }
        for w in Workload::ALL {
            assert_eq!(w.to_string().parse::<Workload>().ok(), Some(w));
        }
        assert!("nope".parse::<FaultKind>().is_err());
    }
}
