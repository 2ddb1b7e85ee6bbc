//! Recording the servers with the tracer: one `tracer record -p PID` per
//! server (as an operator would attach to each daemon), or one tracer for
//! all of them.

use std::{
    collections::BTreeMap,
    fmt, fs,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    str::FromStr,
    sync::mpsc,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use super::{
    Cluster, FsError, Result, SIGINT, Server, System, io_err, shown, signal, wait_bounded,
};

/// GlusterFS functions a developer of the daemon would choose, from the
/// exports of `libglusterfs.so.0` and `libgfrpc.so.0` (the posix xlator
/// exports only `xlator_api`). Two to four calls per file operation, so
/// uprobes cost little.
/// - `call_resume`: an io-threads worker runs one queued operation down the
///   brick's stack to the posix xlator, disk time included;
/// - `rpcsvc_submit_generic`: one reply sent to a client, socket time included;
/// - `inode_find`, `default_lookup`, `default_create`: metadata operations;
/// - `default_writev_cbk`, `default_readv_cbk`: data operations completing.
///
/// Not `syncop_*`: they run in synctasks, which yield with `swapcontext` and
/// resume on another thread, so a uretprobe's hijacked return address comes
/// back on a thread that has no record of it: the kernel logs "failed to
/// handle uretprobe, sending SIGILL" and the brick dies.
pub const GLUSTER_FUNCTIONS: &[&str] = &[
    "libglusterfs.so.0:call_resume",
    "libgfrpc.so.0:rpcsvc_submit_generic",
    "libglusterfs.so.0:inode_find",
    "libglusterfs.so.0:default_lookup",
    "libglusterfs.so.0:default_create",
    "libglusterfs.so.0:default_writev_cbk",
    "libglusterfs.so.0:default_readv_cbk",
];

/// The C library's file-system calls: what a user who knows nothing of a
/// storage daemon's code can trace in any of them (MooseFS's Debian
/// binaries export no functions at all). Aliases (`pread`/`pread64`) are
/// one probe. Socket I/O is left to the system-call tracepoints.
pub const GENERIC_FUNCTIONS: &[&str] = &[
    "libc.so.6:pread*",
    "libc.so.6:pwrite*",
    "libc.so.6:fsync",
    "libc.so.6:fdatasync",
    "libc.so.6:sync_file_range",
    "libc.so.6:open",
    "libc.so.6:open64",
    "libc.so.6:openat",
    "libc.so.6:openat64",
    "libc.so.6:unlink",
    "libc.so.6:unlinkat",
    "libc.so.6:rename",
    "libc.so.6:renameat",
    "libc.so.6:mkdir",
    "libc.so.6:mkdirat",
    "libc.so.6:rmdir",
    "libc.so.6:ftruncate*",
    "libc.so.6:fallocate*",
    "libc.so.6:fstat*",
    "libc.so.6:stat",
    "libc.so.6:stat64",
    "libc.so.6:lstat*",
    "libc.so.6:statx",
    "libc.so.6:*getxattr",
    "libc.so.6:*setxattr",
];

/// Which function probes to attach (system calls and CPU samples are
/// always recorded).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeSet {
    /// No function probes: system calls and samples only.
    None,
    /// The C library's file-system calls ([`GENERIC_FUNCTIONS`]).
    Generic,
    /// Functions of the daemon itself, chosen knowing its code
    /// ([`GLUSTER_FUNCTIONS`]; MooseFS's binaries are stripped).
    Daemon,
}

impl ProbeSet {
    /// Every probe set.
    pub const ALL: [ProbeSet; 3] = [ProbeSet::None, ProbeSet::Generic, ProbeSet::Daemon];

    /// The `-f` patterns of this set for `system`.
    pub fn patterns(self, system: System) -> Result<Vec<String>> {
        let list: &[&str] = match (self, system) {
            (ProbeSet::None, _) => &[],
            (ProbeSet::Generic, _) => GENERIC_FUNCTIONS,
            (ProbeSet::Daemon, System::Glusterfs) => GLUSTER_FUNCTIONS,
            (ProbeSet::Daemon, System::Moosefs) => {
                return Err(FsError::Invalid(
                    "MooseFS's Debian binaries are stripped and export no functions: use the \
                     `generic` or `none` probe set"
                        .into(),
                ));
            }
        };
        Ok(list.iter().map(|s| s.to_string()).collect())
    }
}

impl fmt::Display for ProbeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeSet::None => "none",
            ProbeSet::Generic => "generic",
            ProbeSet::Daemon => "daemon",
        })
    }
}

impl FromStr for ProbeSet {
    type Err = FsError;
    fn from_str(s: &str) -> Result<Self> {
        ProbeSet::ALL
            .into_iter()
            .find(|p| p.to_string() == s)
            .ok_or_else(|| {
                FsError::Invalid(format!("unknown probe set {s:?} (none, generic, daemon)"))
            })
    }
}

/// How servers are recorded.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RecordMode {
    /// One tracer per server, one capture per server (`serverN.capture`).
    PerServer,
    /// One tracer with every server's pid (`-p` repeated), one capture.
    Single,
}

impl FromStr for RecordMode {
    type Err = FsError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "per-server" => Ok(RecordMode::PerServer),
            "single" => Ok(RecordMode::Single),
            _ => Err(FsError::Invalid(format!(
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
    /// Which probe set `functions` came from (`custom` when given by hand).
    pub probes: String,
    /// Function patterns (`-f`).
    pub functions: Vec<String>,
    /// IP samples per second per CPU (0: none).
    pub sample_hz: u32,
    /// Sample every process on the host, not only the servers.
    pub sample_all: bool,
    /// One tracer per server or one for all.
    pub mode: RecordMode,
    /// More `tracer record` arguments (e.g. `--overhead 5%`).
    pub extra_args: Vec<String>,
}

impl RecordConfig {
    /// `probes` for `system`, 99 Hz sampling of the servers, one tracer per
    /// server.
    pub fn new(tracer: PathBuf, system: System, probes: ProbeSet) -> Result<Self> {
        Ok(Self {
            tracer,
            probes: probes.to_string(),
            functions: probes.patterns(system)?,
            sample_hz: 99,
            sample_all: false,
            mode: RecordMode::PerServer,
            extra_args: Vec::new(),
        })
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
        // Start them all, then wait for each: attaching takes seconds.
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
            cmd.args(&config.extra_args);
            cmd.arg("-o").arg(&path);
            let command = shown(&cmd);
            let labels: Vec<String> = servers.iter().map(|s| s.label.clone()).collect();
            let mut child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|source| FsError::Spawn { command, source })?;
            let (tx, rx) = mpsc::channel();
            if let Some(stderr) = child.stderr.take() {
                // Kept beside the capture too: what the recorder said (its
                // budget's decisions and costs) once the run is over.
                let mut log = fs::File::create(path.with_extension("log")).ok();
                std::thread::spawn(move || {
                    for line in BufReader::new(stderr).lines() {
                        let Ok(line) = line else { break };
                        if let Some(f) = log.as_mut() {
                            use std::io::Write;
                            let _ = writeln!(f, "{line}");
                        }
                        // The run reads the first lines only: keep logging
                        // after it stopped listening.
                        let _ = tx.send(line);
                    }
                });
            }
            rec.tracers.push(Tracer {
                child,
                lines: rx,
                summary: TracerSummary {
                    capture: name,
                    servers: labels,
                    ..Default::default()
                },
                path,
            });
        }
        let started = Instant::now();
        for t in &mut rec.tracers {
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
            if !ok {
                return Err(FsError::Tracer {
                    server: t.summary.servers.join(","),
                    detail: format!("did not start recording: {}", seen.join(" | ")),
                });
            }
        }
        Ok(rec)
    }

    /// The recorders' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.tracers.iter().map(|t| t.child.id()).collect()
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
                    return Err(FsError::Tracer {
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
        for t in &self.tracers {
            signal(t.child.id() as i32, SIGINT);
        }
        for t in &mut self.tracers {
            wait_bounded(&mut t.child, Duration::from_secs(30));
        }
    }
}

/// Reads the tracer's closing summary ("  events: entry 5, ...",
/// "  LOSSES: ring_full 3, ...": only `ring_full` counts records lost).
pub(crate) fn parse_summary(lines: &[String], s: &mut TracerSummary) {
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
        // "LOSSES: ring_full 7: records dropped ... (advice)", one line per
        // counter; "kept: ..." lines count nothing lost.
        if let Some(rest) = l.strip_prefix("LOSSES:") {
            let mut w = rest.split_whitespace();
            if let (Some("ring_full"), Some(n)) = (
                w.next(),
                w.next()
                    .and_then(|n| n.trim_end_matches([':', ',']).parse().ok()),
            ) {
                s.lost = n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracer_summary_lines() {
        let lines: Vec<String> = [
            "recorded 10 events in 1.00 s into x (5 bytes); stopped: signal",
            "  events: entry 4, return 4, syscall 2",
            "  LOSSES: ring_full 7: records dropped: the ring buffer was full (grow --ring-size, or trace fewer or less frequently called functions)",
            "  kept: user_ip_unreadable 3: CPU samples ... (nothing was lost; no action needed)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut s = TracerSummary::default();
        parse_summary(&lines, &mut s);
        let mut old = TracerSummary::default();
        parse_summary(
            &["  LOSSES: ring_full 5, other 1 (grow)".to_string()],
            &mut old,
        );
        assert_eq!(
            old.lost, 5,
            "the summary of tracers before advice per counter"
        );
        assert_eq!(s.events.get("entry"), Some(&4));
        assert_eq!(s.events.get("syscall"), Some(&2));
        assert_eq!(s.lost, 7);
    }

    #[test]
    fn probe_sets() {
        assert!(
            ProbeSet::None
                .patterns(System::Moosefs)
                .unwrap_or_default()
                .is_empty()
        );
        assert!(ProbeSet::Daemon.patterns(System::Moosefs).is_err());
        let g = ProbeSet::Generic
            .patterns(System::Glusterfs)
            .unwrap_or_default();
        assert!(g.iter().all(|p| p.starts_with("libc.so.6:")));
        for p in ProbeSet::ALL {
            assert_eq!(p.to_string().parse::<ProbeSet>().ok(), Some(p));
        }
    }
}
