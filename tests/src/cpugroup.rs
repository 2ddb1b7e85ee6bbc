//! A job's own cpu cgroup with a high weight, so that what runs inside it
//! (MPI ranks, an injected CPU hog, the recorder) competes on equal terms
//! with itself and barely with the rest of a shared machine.
//!
//! Why a cgroup and not `nice`: with autogroup scheduling
//! (`kernel.sched_autogroup_enabled=1`) a nice value only orders tasks of
//! one session; every session gets an equal share of the machine whatever
//! its tasks' nice values (issue 17: ranks at nice -19 still got 25-55% of
//! their cores while other sessions loaded the machine, and a pinned hog
//! took nothing measurable from the rank on its core). A task in a
//! non-root cpu cgroup is outside autogroup: its group's weight against the
//! other top-level entities decides.
//!
//! The cpu controller is found at run time: cgroup v1 (a `cgroup` mount with
//! the `cpu` option: `cpu.shares`, `cpu.cfs_quota_us`) or cgroup v2 (a
//! `cgroup2` mount whose root enables `cpu` for its children: `cpu.weight`,
//! `cpu.max`). The group is `<root>/eftrace-mpi-<pid>-<n>`, with the job in
//! its leaf `job` and capped processes in leaves `cap-<n>` (cgroup v2 allows
//! processes only in leaves once a group enables controllers for children).
//! On drop every task left is moved back to the root group and the
//! directories are removed.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

/// cgroup v1 `cpu.shares` of the job's group: 64 times a default group's
/// or session's 1024. Measured at load 15-19 on 2 cores with other
/// helpers' sessions busy, an untraced clean 4-rank job got 85-112% of the
/// 200% at 8192 and 157-165% at 65536 (63-65% in its session at nice -19).
pub const V1_SHARES: u32 = 65536;

/// cgroup v2 `cpu.weight` of the job's group: 64 times the default 100.
pub const V2_WEIGHT: u32 = 6400;

/// Why a job cannot have a cpu group of its own.
#[derive(Debug, thiserror::Error)]
pub enum CpuGroupError {
    /// No mounted hierarchy has the cpu controller.
    #[error(
        "no cgroup hierarchy with the cpu controller (no v1 `cpu` mount; no v2 mount whose root enables `cpu` for its children in cgroup.subtree_control)"
    )]
    NoController,
    /// A file of the group could not be made or written.
    #[error("cannot set up {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Which cgroup interface the cpu controller speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// cgroup v1: `cpu.shares`, `cpu.cfs_quota_us`.
    V1,
    /// cgroup v2: `cpu.weight`, `cpu.max`.
    V2,
}

/// Where the cpu controller is mounted, and which interface it speaks.
pub fn hierarchy() -> Result<(Version, PathBuf), CpuGroupError> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    hierarchy_in(&mounts, |p| std::fs::read_to_string(p).ok())
}

/// [`hierarchy`] over the text of `/proc/mounts`, reading cgroup files with
/// `read`. A v1 cpu mount wins: on a hybrid system the v2 mount cannot have
/// the controller v1 holds.
fn hierarchy_in(
    mounts: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Result<(Version, PathBuf), CpuGroupError> {
    let mut v2 = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [_, dir, fstype, opts, ..] = f[..] else {
            continue;
        };
        match fstype {
            "cgroup" if opts.split(',').any(|o| o == "cpu") => {
                return Ok((Version::V1, PathBuf::from(dir)));
            }
            "cgroup2" if v2.is_none() => {
                let dir = PathBuf::from(dir);
                let enabled = read(&dir.join("cgroup.subtree_control"))
                    .is_some_and(|s| s.split_whitespace().any(|c| c == "cpu"));
                if enabled {
                    v2 = Some((Version::V2, dir));
                }
            }
            _ => {}
        }
    }
    v2.ok_or(CpuGroupError::NoController)
}

/// A job's cpu group, removed on drop.
#[derive(Debug)]
pub struct CpuGroup {
    version: Version,
    root: PathBuf,
    dir: PathBuf,
    caps: AtomicU32,
}

fn write(path: &Path, what: &str) -> Result<(), CpuGroupError> {
    std::fs::write(path, what).map_err(|source| CpuGroupError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn mkdir(path: &Path) -> Result<(), CpuGroupError> {
    std::fs::create_dir(path).map_err(|source| CpuGroupError::Io {
        path: path.to_path_buf(),
        source,
    })
}

impl CpuGroup {
    /// Makes a group with a high weight under the cpu controller's root.
    pub fn new() -> Result<Self, CpuGroupError> {
        let (version, root) = hierarchy()?;
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("eftrace-mpi-{}-{n}", std::process::id()));
        mkdir(&dir)?;
        // From here on, drop removes what was made.
        let group = Self {
            version,
            root,
            dir,
            caps: AtomicU32::new(0),
        };
        match version {
            Version::V1 => write(&group.dir.join("cpu.shares"), &V1_SHARES.to_string())?,
            Version::V2 => {
                write(&group.dir.join("cpu.weight"), &V2_WEIGHT.to_string())?;
                write(&group.dir.join("cgroup.subtree_control"), "+cpu")?;
            }
        }
        mkdir(&group.dir.join("job"))?;
        Ok(group)
    }

    /// The interface in use.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The group's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// One line for reports: where the job runs and at what weight.
    pub fn describe(&self) -> String {
        match self.version {
            Version::V1 => format!(
                "cgroup v1 cpu group {} (cpu.shares {V1_SHARES})",
                self.dir.display()
            ),
            Version::V2 => format!(
                "cgroup v2 cpu group {} (cpu.weight {V2_WEIGHT})",
                self.dir.display()
            ),
        }
    }

    fn job_procs(&self) -> PathBuf {
        self.dir.join("job").join("cgroup.procs")
    }

    /// Moves process `pid` (every thread of it) into the job.
    pub fn add(&self, pid: u32) -> Result<(), CpuGroupError> {
        write(&self.job_procs(), &pid.to_string())
    }

    /// `cmd` run inside the job from its first instruction: a shell moves
    /// itself in, then executes `cmd` (so every child it makes starts
    /// inside too).
    pub fn wrap(&self, cmd: &Command) -> Command {
        let mut out = Command::new("sh");
        out.arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(self.job_procs())
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => out.env(k, v),
                None => out.env_remove(k),
            };
        }
        if let Some(d) = cmd.get_current_dir() {
            out.current_dir(d);
        }
        out
    }

    /// A leaf of the group limited to `percent` of one core (100 ms
    /// periods); returns its `cgroup.procs`, where writing a pid moves that
    /// process under the cap.
    pub fn cap(&self, percent: u32) -> Result<PathBuf, CpuGroupError> {
        let n = self.caps.fetch_add(1, Ordering::Relaxed);
        let leaf = self.dir.join(format!("cap-{n}"));
        mkdir(&leaf)?;
        let quota = percent.clamp(1, 100) * 1000;
        match self.version {
            Version::V1 => {
                write(&leaf.join("cpu.cfs_period_us"), "100000")?;
                write(&leaf.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
            Version::V2 => write(&leaf.join("cpu.max"), &format!("{quota} 100000"))?,
        }
        Ok(leaf.join("cgroup.procs"))
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        let Ok(leaves) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let leaves: Vec<PathBuf> = leaves
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        let back = self.root.join("cgroup.procs");
        for leaf in &leaves {
            // A task that is exiting may still be listed: try a few times.
            for _ in 0..50 {
                let procs = std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines() {
                    let _ = std::fs::write(&back, pid);
                }
                if std::fs::remove_dir(leaf).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,nosuid,nodev,noexec,relatime,cpu 0 0
";

    const UNIFIED: &str = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n";

    /// A hybrid system uses its v1 cpu mount (not cpuacct, not the v2 mount
    /// without the controller); a unified one its v2 root only when the
    /// root enables cpu for children.
    #[test]
    fn the_cpu_controller_is_found_where_it_is_mounted() {
        let none = |_: &Path| None;
        let (v, dir) = hierarchy_in(HYBRID, none).expect("v1");
        assert_eq!(
            (v, dir.as_path()),
            (Version::V1, Path::new("/sys/fs/cgroup/cpu"))
        );
        let with_cpu = |_: &Path| Some("cpuset cpu io memory pids\n".to_string());
        let (v, dir) = hierarchy_in(UNIFIED, with_cpu).expect("v2");
        assert_eq!(
            (v, dir.as_path()),
            (Version::V2, Path::new("/sys/fs/cgroup"))
        );
        let without = |_: &Path| Some("memory pids\n".to_string());
        assert!(matches!(
            hierarchy_in(UNIFIED, without),
            Err(CpuGroupError::NoController)
        ));
        assert!(matches!(
            hierarchy_in("", none),
            Err(CpuGroupError::NoController)
        ));
    }
}
