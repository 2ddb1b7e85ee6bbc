//! Live analysis, out of the root process: every interval the agent joins
//! the recent past into one capture (see [`super::window`]) and hands it to
//! its analysis process, `analyzer live`, which it starts as an
//! unprivileged user (`analysis.user`, never root) with no capabilities,
//! no new privileges, a memory limit and no descriptor of the agent's. The
//! process gets the model and thresholds files' bytes once, then windows,
//! on its standard input, and answers each with findings on its standard
//! output (protocol: [`tracer_common::live`]); it never opens a file. The
//! agent parses neither models nor captures for it: a bug in that parsing
//! runs as nobody. If the process dies or stops answering, the recorder
//! goes on; the process is started again (with a back-off) and every
//! restart is counted in `status`.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::process::CommandExt as _,
    },
    path::PathBuf,
    process::{Command, Stdio},
    sync::mpsc::{SyncSender, TrySendError},
    time::{Duration, Instant},
};

use serde::Serialize;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tracer_common::live::{Answer, FileRef, LIVE_VERSION, MAX_LINE, Request, parse_answer};

use super::config::AgentConfig;

/// Errors preparing live analysis.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A model or thresholds file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The configuration names no usable user or analyzer.
    #[error("analysis: {0}")]
    Config(String),
    /// The analysis process refused its setup, or did not start.
    #[error("the live analysis process: {0}")]
    Setup(String),
}

/// What the live analysis did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LiveStatus {
    /// Evaluations answered.
    pub evaluations: u64,
    /// Time the last one took in the analysis process, ms (decode, evaluate).
    pub last_ms: f64,
    /// Units scored in all.
    pub units_scored: u64,
    /// The highest unit score of the last evaluation.
    pub last_max_score: Option<f64>,
    /// Peer windows compared in all.
    pub peer_windows: u64,
    /// The window the last evaluation read, seconds (shorter than the
    /// configured one when `max_window_bytes` capped it).
    pub last_window_s: f64,
    /// Evaluations whose window was shortened by `max_window_bytes` (units
    /// before a shortened window may go unscored).
    pub shortened: u64,
    /// Why the last evaluation failed, if it did.
    pub last_error: Option<String>,
    /// The analysis process now.
    pub process: Option<ProcessStatus>,
    /// The binary it runs.
    pub analyzer: PathBuf,
    /// Processes started after the first (after a crash, a kill, a hang).
    pub restarts: u64,
    /// How the last process ended.
    pub last_exit: Option<String>,
    /// Intervals with no evaluation because the process was still busy
    /// with the previous window, or not running.
    pub skipped: u64,
}

/// The analysis process, as `status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessStatus {
    /// Its pid.
    pub pid: u32,
    /// The user it runs as.
    pub user: String,
    /// Its uid.
    pub uid: u32,
    /// `starting` (setup not answered yet), `idle` or `evaluating`.
    pub state: &'static str,
    /// Seconds since it started.
    pub up_s: f64,
    /// Its resident memory, bytes.
    pub rss_bytes: u64,
}

/// What the reader thread of a process saw.
#[derive(Debug)]
pub enum Event {
    /// A line the process wrote (of process `generation`).
    Line(u64, Vec<u8>),
    /// The process ended, and how.
    Exited(u64, String),
}

/// A request the process has not answered yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Setup,
    Window,
}

/// A running analysis process.
struct Proc {
    pid: u32,
    /// Kills it without the risk of hitting a reused pid.
    pidfd: OwnedFd,
    generation: u64,
    to_stdin: SyncSender<Vec<Vec<u8>>>,
    started: Instant,
    ready: bool,
    pending: Option<(Pending, Instant)>,
}

impl Proc {
    fn kill(&self) {
        // SAFETY: a pidfd we own; a signal number; no siginfo.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
    }
}

/// How to start the process and set it up.
struct Settings {
    analyzer: PathBuf,
    user: String,
    uid: u32,
    gid: u32,
    max_memory: u64,
    timeout: Duration,
    max_input: u64,
    setup: Vec<Vec<u8>>,
}

/// Live analysis: the process and what it found.
pub struct Live {
    settings: Settings,
    proc: Option<Proc>,
    generation: u64,
    events_tx: UnboundedSender<Event>,
    events: UnboundedReceiver<Event>,
    restart_at: Option<Instant>,
    backoff: Duration,
    /// The last peers report (per-window features and verdicts).
    pub last_peers: Option<serde_json::Value>,
    /// Counters.
    pub status: LiveStatus,
}

/// Back-off before restarting a process that died: doubled each time, up
/// to [`MAX_BACKOFF`], back to 1 s after one that lived that long.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

impl Live {
    /// Prepares what `config.analysis` names (`None` when it names nothing):
    /// reads the model and thresholds files, resolves the user and the
    /// analyzer binary. Starts nothing yet.
    pub fn new(config: &AgentConfig) -> Result<Option<Self>, LiveError> {
        let a = &config.analysis;
        if a.model.is_none() && a.peers_thresholds.is_none() {
            return Ok(None);
        }
        let (uid, gid) = a.user.ids().filter(|(uid, _)| *uid != 0).ok_or_else(|| {
            LiveError::Config(format!("user {} is not a non-root user", a.user.0))
        })?;
        let analyzer = config.analyzer_path().map_err(LiveError::Config)?;
        let mut files = Vec::new();
        let mut refs = Vec::new();
        for path in [&a.model, &a.peers_thresholds] {
            refs.push(match path {
                Some(p) => {
                    // Read as root, handed over as bytes: the process needs
                    // no access to the file, and never parses it as root.
                    let bytes = read_bounded(p)?;
                    let r = FileRef {
                        name: p.display().to_string(),
                        bytes: bytes.len() as u64,
                    };
                    files.push(bytes);
                    Some(r)
                }
                None => None,
            });
        }
        let request = Request::Setup {
            version: LIVE_VERSION,
            model: refs[0].clone(),
            scoring: a.scoring,
            alert_score: a.alert_score,
            thresholds: refs[1].clone(),
        };
        let mut setup = vec![line(&request)];
        setup.extend(files);
        let (events_tx, events) = unbounded_channel();
        let max_input = (a.max_window_bytes.0.saturating_mul(8))
            .max(super::config::MAX_ANALYSIS_FILE)
            .max(64 << 20);
        Ok(Some(Self {
            settings: Settings {
                analyzer: analyzer.clone(),
                user: a.user.0.clone(),
                uid,
                gid,
                max_memory: a.max_memory.0,
                timeout: a.timeout.0,
                max_input,
                setup,
            },
            proc: None,
            generation: 0,
            events_tx,
            events,
            restart_at: None,
            backoff: Duration::from_secs(1),
            last_peers: None,
            status: LiveStatus {
                analyzer,
                ..LiveStatus::default()
            },
        }))
    }

    /// Starts the process and waits (at most `timeout`) for it to accept
    /// its setup: a model that does not load is an error here, where the
    /// agent starts or a reload is judged.
    pub async fn start(&mut self, timeout: Duration) -> Result<(), LiveError> {
        self.spawn().map_err(LiveError::Setup)?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let event = tokio::time::timeout_at(deadline, self.next_event())
                .await
                .map_err(|_| {
                    self.kill();
                    LiveError::Setup(format!("no answer within {} s", timeout.as_secs()))
                })?;
            if let Some(answer) = self.on_event(event) {
                // Only a window answer comes out; not during setup.
                drop(answer);
            }
            match &self.proc {
                Some(p) if p.ready => return Ok(()),
                Some(_) => {}
                None => {
                    return Err(LiveError::Setup(
                        self.status
                            .last_error
                            .clone()
                            .or_else(|| self.status.last_exit.clone())
                            .unwrap_or_else(|| "it ended".into()),
                    ));
                }
            }
        }
    }

    /// Starts a process and sends it its setup.
    fn spawn(&mut self) -> Result<(), String> {
        self.restart_at = None;
        let s = &self.settings;
        let mut cmd = Command::new(&s.analyzer);
        cmd.arg("live")
            .arg("--max-input")
            .arg(s.max_input.to_string())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // std drops the supplementary groups when root sets a uid.
            .gid(s.gid)
            .uid(s.uid);
        let (uid, max_memory, parent) = (s.uid, s.max_memory, std::process::id());
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only async-signal-safe system calls on values copied in.
        unsafe {
            cmd.pre_exec(move || confine(uid, max_memory, parent));
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", s.analyzer.display()))?;
        let pid = child.id();
        // SAFETY: pidfd_open of our own child, not yet reaped.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if raw < 0 {
            let e = std::io::Error::last_os_error();
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("pidfd_open of the analysis process: {e}"));
        }
        // SAFETY: a fresh descriptor we own.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the analysis process has no pipes".into());
        };
        if self.generation > 0 {
            self.status.restarts += 1;
        }
        self.generation += 1;
        let generation = self.generation;
        let (to_stdin, from_agent) = std::sync::mpsc::sync_channel::<Vec<Vec<u8>>>(1);
        std::thread::Builder::new()
            .name("analysis-in".into())
            .spawn(move || {
                for pieces in from_agent {
                    for piece in &pieces {
                        if stdin.write_all(piece).is_err() {
                            return;
                        }
                    }
                    drop(pieces);
                    // The window is freed here: give it back to the system.
                    // SAFETY: no preconditions.
                    unsafe { libc::malloc_trim(0) };
                }
            })
            .map_err(|e| format!("starting a thread: {e}"))?;
        let events = self.events_tx.clone();
        std::thread::Builder::new()
            .name("analysis-out".into())
            .spawn(move || {
                let mut reader = BufReader::new(stdout);
                loop {
                    let mut line = Vec::new();
                    match (&mut reader)
                        .take(MAX_LINE as u64 + 1)
                        .read_until(b'\n', &mut line)
                    {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let complete = line.last() == Some(&b'\n');
                            if complete {
                                line.pop();
                            }
                            let _ = events.send(Event::Line(generation, line));
                            if !complete {
                                // Too long, or cut: nothing after it can be
                                // trusted to start a line.
                                break;
                            }
                        }
                    }
                }
                let how = match child.wait() {
                    Ok(status) => describe_exit(status),
                    Err(e) => format!("cannot wait for it: {e}"),
                };
                let _ = events.send(Event::Exited(generation, how));
            })
            .map_err(|e| format!("starting a thread: {e}"))?;
        let p = Proc {
            pid,
            pidfd,
            generation,
            to_stdin,
            started: Instant::now(),
            ready: false,
            pending: Some((Pending::Setup, Instant::now())),
        };
        if p.to_stdin.try_send(s.setup.clone()).is_err() {
            p.kill();
        }
        self.proc = Some(p);
        self.refresh();
        Ok(())
    }

    /// The next event of the current (or an earlier) process.
    pub async fn next_event(&mut self) -> Event {
        match self.events.recv().await {
            Some(e) => e,
            // `self` holds a sender: the channel never closes.
            None => std::future::pending().await,
        }
    }

    /// Takes an event; returns the answer to a window, for the agent to
    /// raise its findings. The status says at once that the process is idle
    /// again: refreshed only once a second, right after a window was sent,
    /// it read "evaluating" all along while each window took 1 ms.
    pub fn on_event(&mut self, event: Event) -> Option<Answer> {
        let answer = self.take_event(event);
        self.refresh();
        answer
    }

    fn take_event(&mut self, event: Event) -> Option<Answer> {
        let current = self.proc.as_ref().map(|p| p.generation);
        match event {
            Event::Line(generation, line) if Some(generation) == current => {
                let p = self.proc.as_mut()?;
                let Some((pending, _)) = p.pending.take() else {
                    self.status.last_error =
                        Some("the analysis process answered what was not asked".into());
                    p.kill();
                    return None;
                };
                let answer = match parse_answer(&line) {
                    Ok(a) => a,
                    Err(e) => {
                        self.status.last_error =
                            Some(format!("the analysis process's answer: {e}"));
                        p.kill();
                        return None;
                    }
                };
                match pending {
                    Pending::Setup => {
                        if let Some(e) = answer.error {
                            self.status.last_error = Some(e);
                            p.kill();
                        } else {
                            p.ready = true;
                        }
                        None
                    }
                    Pending::Window => {
                        self.status.evaluations += 1;
                        self.status.last_ms = answer.ms;
                        self.status.units_scored += answer.units_scored;
                        self.status.peer_windows += answer.peer_windows;
                        if answer.units_scored > 0 || answer.max_score.is_some() {
                            self.status.last_max_score = answer.max_score;
                        }
                        self.status.last_error.clone_from(&answer.error);
                        if answer.peers.is_some() {
                            self.last_peers.clone_from(&answer.peers);
                        }
                        Some(answer)
                    }
                }
            }
            Event::Exited(generation, how) if Some(generation) == current => {
                let lived = self
                    .proc
                    .take()
                    .map_or(Duration::ZERO, |p| p.started.elapsed());
                eprintln!(
                    "tracer agent: the live analysis process {how}; starting another in {} s",
                    self.backoff.as_secs()
                );
                self.status.last_exit = Some(how);
                if lived >= MAX_BACKOFF {
                    self.backoff = Duration::from_secs(1);
                }
                self.restart_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                None
            }
            // From a process already replaced.
            _ => None,
        }
    }

    /// Once a second: restarts a process that died, kills one that does
    /// not answer within `analysis.timeout`, refreshes the status.
    pub fn tick(&mut self) {
        if self.proc.is_none()
            && self.restart_at.is_some_and(|t| Instant::now() >= t)
            && let Err(e) = self.spawn()
        {
            self.status.last_error = Some(e);
            self.restart_at = Some(Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        }
        if let Some(p) = &self.proc
            && let Some((what, since)) = p.pending
            && since.elapsed() > self.settings.timeout
        {
            self.status.last_error = Some(format!(
                "no answer to {} within {} s: killed",
                match what {
                    Pending::Setup => "its setup",
                    Pending::Window => "a window",
                },
                self.settings.timeout.as_secs()
            ));
            p.kill();
        }
        self.refresh();
    }

    /// Whether a window can be sent now; counts the interval as skipped
    /// when not.
    pub fn ready(&mut self) -> bool {
        let ready = self
            .proc
            .as_ref()
            .is_some_and(|p| p.ready && p.pending.is_none());
        if !ready {
            self.status.skipped += 1;
        }
        ready
    }

    /// Hands `window` (joined from `since_ns` to `now_ns`) to the process.
    pub fn send_window(&mut self, window: Vec<u8>, since_ns: u64, now_ns: u64, host: &str) {
        let Some(p) = &mut self.proc else {
            return;
        };
        let request = Request::Window {
            version: LIVE_VERSION,
            since_ns,
            now_ns,
            host: host.to_string(),
            bytes: window.len() as u64,
        };
        match p.to_stdin.try_send(vec![line(&request), window]) {
            Ok(()) => p.pending = Some((Pending::Window, Instant::now())),
            Err(TrySendError::Full(_)) => self.status.skipped += 1,
            // The writer stopped: the process is going, its exit follows.
            Err(TrySendError::Disconnected(_)) => self.status.skipped += 1,
        }
        self.refresh();
    }

    /// Kills the process (the agent stops, or a reload replaces it).
    pub fn kill(&mut self) {
        if let Some(p) = &self.proc {
            p.kill();
        }
    }

    fn refresh(&mut self) {
        self.status.process = self.proc.as_ref().map(|p| ProcessStatus {
            pid: p.pid,
            user: self.settings.user.clone(),
            uid: self.settings.uid,
            state: match (p.ready, p.pending) {
                (false, _) => "starting",
                (true, Some(_)) => "evaluating",
                (true, None) => "idle",
            },
            up_s: p.started.elapsed().as_secs_f64(),
            rss_bytes: rss_of(p.pid),
        });
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.kill();
    }
}

/// In the child, after std set its uid and gid and dropped its groups:
/// no way back to privilege, dies with the agent, bounded memory, lower
/// priority, and none of the agent's descriptors (rings, maps, captures,
/// the control socket) across exec.
fn confine(uid: u32, max_memory: u64, parent: u32) -> std::io::Result<()> {
    let check = |rc: libc::c_long| {
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: async-signal-safe system calls with valid arguments.
    unsafe {
        // A real, effective and saved uid of the user: with them changed
        // from root, the kernel cleared every capability.
        if libc::getuid() != uid || libc::geteuid() != uid || uid == 0 {
            return Err(std::io::Error::other("the uid did not change"));
        }
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
        // After the uid change, which clears it.
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into())?;
        if libc::getppid() as u32 != parent {
            // The agent died before the signal was armed.
            libc::_exit(1);
        }
        let limit = libc::rlimit {
            rlim_cur: max_memory,
            rlim_max: max_memory,
        };
        check(libc::setrlimit(libc::RLIMIT_AS, &limit).into())?;
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        check(libc::setrlimit(libc::RLIMIT_CORE, &none).into())?;
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
        // CLOSE_RANGE_CLOEXEC: std's own error pipe must stay open until exec.
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        check(libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        ))?;
    }
    Ok(())
}

/// A request line.
fn line(request: &Request) -> Vec<u8> {
    let mut l = serde_json::to_vec(request).unwrap_or_default();
    l.push(b'\n');
    l
}

/// A model or thresholds file, refused beyond [`MAX_ANALYSIS_FILE`].
///
/// [`MAX_ANALYSIS_FILE`]: super::config::MAX_ANALYSIS_FILE
fn read_bounded(path: &std::path::Path) -> Result<Vec<u8>, LiveError> {
    let err = |source| LiveError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(err)?;
    let mut bytes = Vec::new();
    file.take(super::config::MAX_ANALYSIS_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(err)?;
    if bytes.len() as u64 > super::config::MAX_ANALYSIS_FILE {
        return Err(err(std::io::Error::other("larger than 256 MiB")));
    }
    Ok(bytes)
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => format!("ended ({status})"),
    }
}

fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
