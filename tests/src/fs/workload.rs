//! Workloads on the cluster's mount: large streaming I/O (dd), small-file
//! metadata work (PostMark), random I/O (fio). Each keeps several files in
//! flight, so that on MooseFS (two copies of each chunk on two of the four
//! servers) every server does alike work over a few seconds, as it would
//! with many clients; GlusterFS's disperse volume loads every brick with
//! every file anyway.

use std::{
    fmt, fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    str::FromStr,
    time::Instant,
};

use serde::{Deserialize, Serialize};

use super::{Cluster, FsError, Result, bounded, io_err, sh, shown};

/// Size of the random file dd copies, MiB (zeros would be stored sparse by
/// MooseFS and never reach a disk).
pub(crate) const SOURCE_MIB: u64 = 32;

/// A file-system workload.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// dd: 4 streams, each writing a 32 MiB file with 1 MiB `O_DIRECT`
    /// writes and reading it back, in a loop.
    Dd,
    /// PostMark: small-file creates, reads, appends, deletes.
    Postmark,
    /// fio: 2 jobs of random 64 KiB `O_DIRECT` reads and writes over 8
    /// files each.
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
    type Err = FsError;
    fn from_str(s: &str) -> Result<Self> {
        Workload::ALL
            .into_iter()
            .find(|w| w.to_string() == s)
            .ok_or_else(|| FsError::Invalid(format!("unknown workload {s:?} (dd, postmark, fio)")))
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

    fn add(&mut self, other: &WorkloadResult) {
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.ops += other.ops;
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

    /// Concurrent streams.
    const STREAMS: usize = 4;

    /// [`STREAMS`] loops, each writing the cluster's random 32 MiB file to
    /// one of its own two files with 1 MiB `O_DIRECT` dd's and reading it
    /// back, until `seconds` have passed.
    pub fn run(cluster: &Cluster, seconds: f64) -> Result<WorkloadResult> {
        let dir = workload_dir(cluster, "dd")?;
        let start = Instant::now();
        let results: Vec<Result<WorkloadResult>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..STREAMS)
                .map(|s| {
                    let dir = &dir;
                    scope.spawn(move || stream(cluster.source(), dir, s, start, seconds))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(FsError::Invalid("a dd stream panicked".into())))
                })
                .collect()
        });
        let mut r = WorkloadResult::default();
        for one in results {
            r.add(&one?);
        }
        r.seconds = start.elapsed().as_secs_f64();
        let _ = fs::remove_dir_all(&dir);
        Ok(r)
    }

    fn stream(
        source: &Path,
        dir: &Path,
        s: usize,
        start: Instant,
        seconds: f64,
    ) -> Result<WorkloadResult> {
        let mut r = WorkloadResult::default();
        let mut n = 0u64;
        let inf = format!("if={}", source.display());
        let left = || seconds - start.elapsed().as_secs_f64();
        while left() > 0.0 {
            let file = dir.join(format!("s{s}-f{}", n % 2));
            let of = format!("of={}", file.display());
            // Overwritten in place: a truncate would free and allocate the
            // file's storage again every round (MooseFS frees chunks lazily).
            let (bytes, done) = dd_bytes(
                left(),
                &[&inf, &of, "bs=1M", "oflag=direct", "conv=notrunc"],
            )?;
            r.bytes_written += bytes;
            r.ops += 1;
            if !done || left() <= 0.0 {
                break;
            }
            let back = format!("if={}", file.display());
            let (bytes, done) =
                dd_bytes(left(), &[&back, "of=/dev/null", "bs=1M", "iflag=direct"])?;
            r.bytes_read += bytes;
            r.ops += 1;
            if !done {
                break;
            }
            n += 1;
        }
        Ok(r)
    }

    /// Runs dd; (bytes copied, whether it finished). A dd still running a
    /// minute after the workload's end (a server's disk slowed to a crawl
    /// can keep one 32 MiB copy going for minutes) is interrupted, and
    /// reports what it copied (dd prints its counts on SIGINT).
    fn dd_bytes(left_s: f64, args: &[&str]) -> Result<(u64, bool)> {
        let bound = (left_s.max(0.0) + 60.0).ceil() as u64;
        let mut cmd = std::process::Command::new("timeout");
        cmd.args(["-k", "30", "-s", "INT", &bound.to_string(), "dd"])
            .args(args);
        let command = shown(&cmd);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|source| FsError::Spawn {
                command: command.clone(),
                source,
            })?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        // timeout(1) exits 124 when it had to interrupt the command.
        let interrupted = out.status.code() == Some(124);
        if !out.status.success() && !interrupted {
            return Err(FsError::Command {
                command,
                status: out.status.to_string(),
                stderr: stderr.into_owned(),
            });
        }
        // "33554432 bytes (34 MB, 32 MiB) copied, 0.2 s, 150 MB/s"
        let bytes = stderr
            .lines()
            .find_map(|l| {
                l.split_once(" bytes")
                    .and_then(|(n, _)| n.trim().parse().ok())
            })
            .ok_or_else(|| FsError::Parse {
                what: command,
                detail: stderr.to_string(),
            })?;
        Ok((bytes, !interrupted))
    }
}

/// PostMark on the mount, scaled to seconds.
pub mod postmark {
    use super::*;

    /// Runs short PostMark rounds (100 files of 4-64 KiB, 200 transactions,
    /// a few seconds each here) until `seconds` have passed.
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
            // A round under a slow disk or a CPU cap can take minutes.
            let mut cmd = bounded(900, None, "postmark", &[]);
            let command = shown(&cmd);
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|source| FsError::Spawn {
                    command: command.clone(),
                    source,
                })?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin
                    .write_all(script.as_bytes())
                    .map_err(|source| FsError::Spawn {
                        command: command.clone(),
                        source,
                    })?;
            }
            let out = child.wait_with_output().map_err(|source| FsError::Spawn {
                command: command.clone(),
                source,
            })?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                return Err(FsError::Command {
                    command,
                    status: out.status.to_string(),
                    stderr: format!("{}{}", String::from_utf8_lossy(&out.stderr), stdout),
                });
            }
            let (read, written) = parse(&stdout).ok_or_else(|| FsError::Parse {
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
    /// over 8 files of 8 MiB each per job, for `seconds` (after laying the
    /// files out).
    pub fn run(cluster: &Cluster, seconds: f64) -> Result<WorkloadResult> {
        let dir = workload_dir(cluster, "fio")?;
        let runtime = format!("--runtime={}", seconds.ceil().max(1.0) as u64);
        let directory = format!("--directory={}", dir.display());
        let start = Instant::now();
        let json = sh(
            seconds.ceil() as u64 + 180,
            None,
            "fio",
            &[
                "--name=eftrace",
                &directory,
                "--rw=randrw",
                "--rwmixread=50",
                "--bs=64k",
                "--size=64m",
                "--nrfiles=8",
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
        let v: serde_json::Value = serde_json::from_str(&json).map_err(|e| FsError::Parse {
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
}
