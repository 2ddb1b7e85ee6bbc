//! Private kernel resources for the tests of the kernel's view: loop-device
//! disks with a file system, network namespaces joined to the host by a
//! veth pair, blkio cgroups. Each is removed when dropped, also when the
//! test panics; names carry this test process's pid, so concurrent runs on a
//! shared machine never meet.

use std::{
    collections::BTreeSet,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

/// Namespace numbers in use by the tests of this process: tests run in
/// parallel threads, and two with the same number would share (and delete)
/// each other's namespace.
static NETNS_IN_USE: Mutex<BTreeSet<u8>> = Mutex::new(BTreeSet::new());

/// Runs `program args`, bounded by 60 s; panics with its output on failure.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .args(["-s", "KILL", "60", program])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A file system on its own loop device (direct I/O to its backing file, so
/// its requests are its own), mounted in a temporary directory.
pub struct LoopDisk {
    /// `/dev/loopN`.
    pub dev: String,
    /// Where it is mounted.
    pub mount: PathBuf,
    /// (major, minor).
    pub devno: (u32, u32),
    dir: tempfile::TempDir,
}

impl LoopDisk {
    /// A `size_mb` MiB ext4 disk.
    pub fn new(size_mb: u64) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("eftrace-disk-{}-", std::process::id()))
            .tempdir()
            .expect("temp dir");
        let image = dir.path().join("disk.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).expect("mount point");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(size_mb << 20))
            .expect("disk image");
        let image = image.to_str().expect("utf8");
        let dev = run("losetup", &["--find", "--show", "--direct-io=on", image])
            .trim()
            .to_string();
        let disk = Self {
            devno: devno(&dev),
            dev,
            mount,
            dir,
        };
        run("mkfs.ext4", &["-q", "-F", &disk.dev]);
        run("mount", &[&disk.dev, disk.mount.to_str().expect("utf8")]);
        disk
    }

    /// The kernel's `dev_t` of the disk (major << 20 | minor).
    pub fn kernel_dev(&self) -> u32 {
        (self.devno.0 << 20) | self.devno.1
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = &self.dir;
    }
}

/// (major, minor) of a block device node.
fn devno(dev: &str) -> (u32, u32) {
    let text = run("stat", &["-L", "-c", "%t %T", dev]);
    let mut parts = text
        .split_whitespace()
        .map(|h| u32::from_str_radix(h, 16).expect("hex"));
    (parts.next().expect("major"), parts.next().expect("minor"))
}

/// A network namespace joined to the host's by a veth pair on a /30 of its
/// own (10.213.P.4k+1 on the host, 10.213.P.4k+2 inside, P from the pid).
pub struct Netns {
    /// Its number in this process.
    k: u8,
    /// `ip netns` name.
    pub name: String,
    /// The address inside.
    pub addr: Ipv4Addr,
    /// The host side's address.
    pub host_addr: Ipv4Addr,
}

impl Netns {
    /// Namespace number `k` (0..60) of this test process; each test of the
    /// process takes numbers of its own (panics on one in use).
    pub fn new(k: u8) -> Self {
        assert!(k < 60, "at most 60 namespaces");
        let fresh = NETNS_IN_USE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(k);
        assert!(
            fresh,
            "network namespace number {k} is in use by another test of this process: give each test numbers of its own"
        );
        let pid = std::process::id();
        let name = format!("eftcap-{pid}-{k}");
        let (host_if, inner_if) = (
            format!("ec{}h{k}", pid % 100_000),
            format!("ec{}n{k}", pid % 100_000),
        );
        let subnet = (pid % 250) as u8;
        let host_addr = Ipv4Addr::new(10, 213, subnet, 4 * k + 1);
        let addr = Ipv4Addr::new(10, 213, subnet, 4 * k + 2);
        run("ip", &["netns", "add", &name]);
        let ns = Self {
            k,
            name,
            addr,
            host_addr,
        };
        run(
            "ip",
            &[
                "link", "add", &host_if, "type", "veth", "peer", "name", &inner_if,
            ],
        );
        run("ip", &["link", "set", &inner_if, "netns", &ns.name]);
        run(
            "ip",
            &["addr", "add", &format!("{host_addr}/30"), "dev", &host_if],
        );
        run("ip", &["link", "set", &host_if, "up"]);
        ns.ip(&["addr", "add", &format!("{addr}/30"), "dev", &inner_if]);
        ns.ip(&["link", "set", &inner_if, "up"]);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.name, "ip"];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// `program args` to run inside the namespace.
    pub fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name])
            .arg(program)
            .args(args);
        cmd
    }

    /// Joins this namespace to `other` by a veth pair of their own (link
    /// number `k` of this test process), on 10.214.P.4k+1 (here) and 4k+2
    /// (there); returns (this side's address, the other side's).
    pub fn link(&self, other: &Netns, k: u8) -> (Ipv4Addr, Ipv4Addr) {
        assert!(k < 60, "at most 60 links");
        let pid = std::process::id();
        let (a, b) = (
            format!("ec{}a{k}", pid % 100_000),
            format!("ec{}b{k}", pid % 100_000),
        );
        let subnet = (pid % 250) as u8;
        let here = Ipv4Addr::new(10, 214, subnet, 4 * k + 1);
        let there = Ipv4Addr::new(10, 214, subnet, 4 * k + 2);
        self.ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        self.ip(&["link", "set", &b, "netns", &other.name]);
        self.ip(&["addr", "add", &format!("{here}/30"), "dev", &a]);
        self.ip(&["link", "set", &a, "up"]);
        other.ip(&["addr", "add", &format!("{there}/30"), "dev", &b]);
        other.ip(&["link", "set", &b, "up"]);
        (here, there)
    }

    /// Drops each packet entering the namespace with probability `p`
    /// (iptables statistic match; the namespace's rules go with it): lost
    /// on the wire, as far as the senders can tell.
    pub fn lose_incoming(&self, p: f64) {
        let p = p.to_string();
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.name,
                "iptables",
                "-A",
                "INPUT",
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ],
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and so both.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        NETNS_IN_USE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.k);
    }
}

/// A cgroup v1 blkio group (the kernel's block throttling).
pub struct BlkioCgroup {
    /// Its directory.
    pub path: PathBuf,
}

impl BlkioCgroup {
    /// A new group, or `None` (with the reason printed) where cgroup v1
    /// blkio is not mounted.
    pub fn new(name: &str) -> Option<Self> {
        let root = Path::new("/sys/fs/cgroup/blkio");
        if !root.join("blkio.throttle.read_bps_device").exists() {
            eprintln!("no cgroup v1 blkio at {}", root.display());
            return None;
        }
        let path = root.join(format!("eftcap-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&path).expect("cgroup");
        Some(Self { path })
    }

    /// Limits reads from `devno` to `bytes_per_s`.
    pub fn throttle_reads(&self, devno: (u32, u32), bytes_per_s: u64) {
        std::fs::write(
            self.path.join("blkio.throttle.read_bps_device"),
            format!("{}:{} {bytes_per_s}", devno.0, devno.1),
        )
        .expect("throttle");
    }

    /// The `cgroup.procs` file a process joins the group by.
    pub fn procs(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }
}

impl Drop for BlkioCgroup {
    fn drop(&mut self) {
        // Its processes have exited (the tests wait for them); rmdir of an
        // empty cgroup removes it.
        let _ = std::fs::remove_dir(&self.path);
    }
}
