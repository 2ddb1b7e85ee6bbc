//! `tracer agent`: a long-lived privileged daemon that records its targets
//! all the time into a flight recorder (a bounded, rotating set of capture
//! files), freezes the recent past into snapshots on request or on an
//! alert, evaluates it live with the analyzer's replay code, sheds load when
//! over its budget, and answers `tracer ctl` on a root-only Unix socket.
//!
//! - [`config`]: the TOML file; [`targets`]: which processes and
//!   executables are trusted; [`recorder`]: the files and their limits;
//!   [`window`]: joins files into one capture (windows, snapshots);
//!   [`budget`]: self-measurement and load shedding; [`alerts`]: JSON lines;
//!   [`ctl`]: the control socket and its client.

pub mod alerts;
pub mod budget;
pub mod config;
pub mod ctl;
pub mod live;
pub mod recorder;
pub mod snapshots;
pub mod targets;
pub mod window;

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde::Serialize;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc,
};

use self::{
    alerts::AlertLog,
    budget::{Meter, Shed, Step, Usage},
    config::{AgentConfig, ConfigError},
    ctl::{CtlError, CtlServer, Request, Response},
    live::{Live, LiveStatus},
    recorder::{FileEntry, FlightRecorder, Limits, RecorderError, Removed, private_dir},
    snapshots::{Snapshots, SnapshotsStatus},
    targets::TargetState,
    window::{Joined, WindowError},
};
use crate::{
    record::{RecordError, kind_name, monotonic_ns},
    session::{Session, Taps},
};

/// Version of the status format.
pub const STATUS_VERSION: u32 = 1;

/// Errors that stop the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Not root.
    #[error("the agent needs root to load eBPF programs and attach probes")]
    NotRoot,
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The flight-recorder directory is unusable.
    #[error(transparent)]
    Recorder(#[from] RecorderError),
    /// The control socket could not be created.
    #[error(transparent)]
    Ctl(#[from] CtlError),
    /// Live analysis cannot be set up (a model that does not load, no
    /// analyzer binary).
    #[error(transparent)]
    Live(#[from] live::LiveError),
    /// Signals or the runtime failed.
    #[error("agent i/o")]
    Io(#[from] std::io::Error),
}

/// The recording in progress and what it was started with.
struct Running {
    session: Session,
    id: u64,
    exes: Vec<PathBuf>,
    /// (device, inode) of each executable when attached: uprobes hold the
    /// inode, so a binary replaced on disk (an upgrade) needs a re-arm.
    inodes: Vec<Option<(u64, u64)>>,
    started: Instant,
}

/// The agent's state.
pub struct Agent {
    config_path: PathBuf,
    config: AgentConfig,
    recorder: FlightRecorder,
    snapshot_store: Snapshots,
    running: Option<Running>,
    sessions: u64,
    shed: Shed,
    meter: Meter,
    alerts: AlertLog,
    started: Instant,
    /// The targets as last resolved.
    targets: Vec<TargetState>,
    /// Executables a session could not probe (no function matched...),
    /// with their (device, inode) then and why: not tried again until the
    /// file changes or the configuration is reloaded.
    unprobed: BTreeMap<PathBuf, (Option<(u64, u64)>, String)>,
    last_error: Option<String>,
    /// Losses of finished sessions.
    lost_before: BTreeMap<String, u64>,
    /// Records of finished sessions.
    records_before: u64,
    /// Time without a session while re-arming.
    rearm_gap: Duration,
    snapshots: Vec<PathBuf>,
    host: String,
    live: Option<Live>,
    last_auto_snapshot: Option<Instant>,
}

/// `tracer ctl status`.
#[derive(Debug, Serialize)]
pub struct Status {
    /// [`STATUS_VERSION`].
    pub version: u32,
    /// The agent's pid.
    pub pid: u32,
    /// Seconds since it started.
    pub uptime_s: f64,
    /// Its configuration file.
    pub config: PathBuf,
    /// `recording`, or what it waits for.
    pub state: String,
    /// Each target: what it resolves to, and what was refused or could not
    /// be probed, and why.
    pub targets: Vec<TargetState>,
    /// The last error (a session that could not start).
    pub last_error: Option<String>,
    /// The recording session.
    pub session: Option<SessionStatus>,
    /// Sessions started (re-arms after reloads, new executables, shedding).
    pub sessions: u64,
    /// Seconds spent re-arming (nothing recorded meanwhile).
    pub rearm_gap_s: f64,
    /// Records written since the agent started.
    pub records_total: u64,
    /// Records lost by the eBPF side since the agent started, by cause.
    pub losses: BTreeMap<String, u64>,
    /// The agent's own usage over the last second.
    pub usage: Usage,
    /// The flight recorder.
    pub recorder: RecorderStatus,
    /// Preambles and USDT strings kept in memory.
    pub preambles: PreambleStatus,
    /// Load shed.
    pub shed: ShedStatus,
    /// Alerts raised and where they go.
    pub alerts: u64,
    /// The alert file.
    pub alerts_file: PathBuf,
    /// Snapshots written (latest last, at most 20; an older one may have
    /// been removed for the budget since).
    pub snapshots: Vec<PathBuf>,
    /// The snapshots directory against its budget (`max_snapshots_disk`).
    pub snapshots_disk: SnapshotsStatus,
    /// Live analysis, when a model or thresholds are configured.
    pub analysis: Option<LiveStatus>,
}

/// The session part of [`Status`].
#[derive(Debug, Serialize)]
pub struct SessionStatus {
    /// Its number.
    pub id: u64,
    /// Seconds since it started.
    pub age_s: f64,
    /// Executables traced.
    pub executables: Vec<PathBuf>,
    /// Function probes attached.
    pub probes: usize,
    /// Processes traced now (pid, command name).
    pub processes: Vec<(u32, String)>,
    /// Records written by kind.
    pub records: BTreeMap<&'static str, u64>,
}

/// The recorder part of [`Status`].
#[derive(Debug, Serialize)]
pub struct RecorderStatus {
    /// Directory.
    pub dir: PathBuf,
    /// Closed files.
    pub files: Vec<FileEntry>,
    /// The file being written and its size.
    pub current: Option<(PathBuf, u64)>,
    /// Bytes on disk, all files.
    pub disk_bytes: u64,
    /// The limit.
    pub max_disk: u64,
    /// Removed to stay under max_disk.
    pub removed_for_size: Removed,
    /// Removed for age.
    pub removed_for_age: Removed,
}

/// The preamble part of [`Status`].
#[derive(Debug, Serialize)]
pub struct PreambleStatus {
    /// Processes with one.
    pub processes: usize,
    /// Bytes kept.
    pub bytes: usize,
    /// Records not kept (budget full; still in the files).
    pub not_kept: u64,
}

/// The shedding part of [`Status`].
#[derive(Debug, Serialize)]
pub struct ShedStatus {
    /// Whether CPU sampling is on.
    pub sampling: bool,
    /// Functions no longer probed.
    pub excluded_functions: Vec<String>,
    /// Every step, oldest first.
    pub actions: Vec<budget::ShedAction>,
}

/// What a snapshot wrote.
#[derive(Debug, Serialize)]
pub struct SnapshotResult {
    /// The file (replay it with `tracer replay` or `analyzer`).
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// What went in.
    pub joined: Joined,
    /// Files of earlier sessions (before a re-arm or a restart of the agent)
    /// that reach into the window: they replay on their own, but cannot be
    /// joined with this session's (probe ids differ).
    pub earlier_files: Vec<PathBuf>,
}

impl Agent {
    /// Reads the configuration and prepares the directories (not the socket).
    pub fn new(config_path: &Path) -> Result<Self, AgentError> {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(AgentError::NotRoot);
        }
        let config = AgentConfig::load(config_path)?;
        let state_dir = &config.agent.state_dir;
        if !state_dir.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(state_dir)
                .map_err(|source| RecorderError::Dir {
                    path: state_dir.clone(),
                    source,
                })?;
        }
        // Root writes its captures, snapshots and alerts there: nobody else
        // may be able to change it (or a directory above it).
        // (Judged where it leads, should the administrator have made it a
        // link; the directories the agent makes in it are never links.)
        let state_dir = crate::trust::check(state_dir, crate::trust::Kind::Dir, &[])
            .map_err(RecorderError::Untrusted)?;
        private_dir(&state_dir)?;
        let recorder = FlightRecorder::open(&state_dir.join("rings"), limits(&config))?;
        let snapshot_store = Snapshots::open(
            &state_dir.join("snapshots"),
            config.recorder.max_snapshots_disk.0,
        )?;
        let live = Live::new(&config)?;
        Ok(Self {
            config_path: config_path.to_path_buf(),
            alerts: AlertLog::new(&config.alerts_path()),
            config,
            recorder,
            snapshot_store,
            running: None,
            sessions: 0,
            shed: Shed::new(),
            meter: Meter::new(0),
            started: Instant::now(),
            targets: Vec::new(),
            unprobed: BTreeMap::new(),
            last_error: None,
            lost_before: BTreeMap::new(),
            records_before: 0,
            rearm_gap: Duration::ZERO,
            snapshots: Vec::new(),
            host: crate::session::host_name(),
            live,
            last_auto_snapshot: None,
        })
    }

    /// Runs until SIGTERM or SIGINT; SIGHUP reloads the configuration.
    pub async fn run(mut self) -> Result<(), AgentError> {
        if let Some(live) = &mut self.live {
            live.start(SETUP_TIMEOUT).await?;
            if let Some(p) = &live.status.process {
                eprintln!(
                    "tracer agent: live analysis in process {} as {} (uid {})",
                    p.pid, p.user, p.uid
                );
            }
        }
        let ctl = CtlServer::bind(&self.config.agent.socket)?;
        log::info!("control socket {}", ctl.path().display());
        eprintln!(
            "tracer agent: flight recorder in {} (at most {} on disk, {} of history); control socket {}",
            self.recorder.dir().display(),
            crate::quantity::format_size(self.config.recorder.max_disk.0),
            humanize(self.config.recorder.max_age.0),
            ctl.path().display()
        );
        let (to_agent, mut requests) = mpsc::channel(16);
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sighup = signal(SignalKind::hangup())?;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut second = tokio::time::interval(Duration::from_secs(1));
        second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut analysis = tokio::time::interval(self.config.analysis.interval.0);
        analysis.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut poll = tokio::time::interval(Duration::from_secs(2));
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let reason = loop {
            tokio::select! {
                activity = next_activity(&mut self.running) => {
                    if let Err(e) = activity {
                        self.fail(format!("recording failed: {e}")).await;
                    } else {
                        self.rotate_if_due(false);
                    }
                }
                _ = tick.tick() => self.on_tick(),
                _ = second.tick() => self.on_second().await,
                _ = poll.tick() => self.poll_targets().await,
                _ = analysis.tick() => self.analyze(),
                event = next_live_event(&mut self.live) => self.on_live_event(event),
                Some((request, reply)) = requests.recv() => {
                    let response = self.handle(request).await;
                    let _ = reply.send(response);
                }
                accepted = ctl.accept(to_agent.clone()) => {
                    if let Err(e) = accepted {
                        log::warn!("control socket: {e}");
                    }
                }
                _ = sighup.recv() => {
                    let r = self.reload().await;
                    eprintln!("tracer agent: SIGHUP: {}", r.error.as_deref().unwrap_or("configuration reloaded"));
                }
                _ = sigint.recv() => break "interrupted (SIGINT)",
                _ = sigterm.recv() => break "terminated (SIGTERM)",
            }
        };
        eprintln!("tracer agent: stopping: {reason}");
        self.stop_session(reason).await;
        Ok(())
    }

    /// Resolves the targets; starts or re-arms the session when executables
    /// appeared that it does not trace.
    async fn poll_targets(&mut self) {
        let (mut exes, states) = targets::resolve(&self.config);
        self.targets = states;
        // Not again what could not be probed, unless the file changed.
        self.unprobed
            .retain(|exe, (ino, _)| exe.is_file() && inode(exe) == *ino);
        exes.retain(|e| !self.unprobed.contains_key(e));
        let mut wanted: Vec<PathBuf> = self
            .running
            .as_ref()
            .map(|r| r.exes.clone())
            .unwrap_or_default();
        let mut new = false;
        for exe in exes {
            if !wanted.contains(&exe) {
                wanted.push(exe);
                new = true;
            }
        }
        // An executable removed from disk cannot be attached again.
        wanted.retain(|e| e.is_file());
        let replaced = self
            .running
            .as_ref()
            .is_some_and(|r| r.exes.iter().map(|e| inode(e)).ne(r.inodes.iter().copied()));
        if replaced {
            eprintln!("tracer agent: an executable was replaced on disk; re-arming on the new one");
            self.rearm(wanted, "executable replaced").await;
        } else if new || (self.running.is_none() && !wanted.is_empty()) {
            self.rearm(wanted, "new executables to trace").await;
        }
    }

    /// Ends the session (if any) and starts one tracing `exes`.
    async fn rearm(&mut self, exes: Vec<PathBuf>, why: &str) {
        let gap_started = Instant::now();
        let had_session = self.running.is_some();
        self.stop_session(why).await;
        if exes.is_empty() {
            return;
        }
        self.sessions += 1;
        let id = self.sessions;
        let output = self.recorder.next_path(id);
        let mut progress = |msg: &str| eprintln!("tracer agent: session {id}: {}", msg.trim_end());
        let started = match self.config.record_config(
            &exes,
            self.shed.sampling,
            &self.shed.excluded,
            output.clone(),
        ) {
            Ok(config) => Session::start(&config, &mut progress).await,
            Err(e) => Err(e),
        };
        let exes = match &started {
            Ok(session) => {
                for (target, why) in session.skipped() {
                    if let crate::record::Target::Exe(exe) = target {
                        self.unprobed.insert(exe.clone(), (inode(exe), why.clone()));
                    }
                }
                exes.into_iter()
                    .filter(|e| !self.unprobed.contains_key(e))
                    .collect()
            }
            // Every executable failed to resolve: none is tried again
            // until it changes.
            Err(RecordError::NothingUsable { reasons }) => {
                for exe in &exes {
                    self.unprobed
                        .insert(exe.clone(), (inode(exe), reasons.clone()));
                }
                exes
            }
            Err(_) => exes,
        };
        match started {
            Ok(mut session) => {
                session.enable_taps(Taps::new(
                    self.config.recorder.preamble.0 as usize,
                    if self.shed.preambles_dropped {
                        0
                    } else {
                        self.config.recorder.preamble_total.0 as usize
                    },
                ));
                eprintln!(
                    "tracer agent: session {id}: recording {} ({} process(es) now) into {}",
                    exes.iter()
                        .map(|e| e.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    session.live_processes().count(),
                    self.recorder.dir().display()
                );
                self.meter = Meter::new(0);
                self.last_error = None;
                self.running = Some(Running {
                    session,
                    id,
                    inodes: exes.iter().map(|e| inode(e)).collect(),
                    exes,
                    started: Instant::now(),
                });
                if had_session {
                    self.rearm_gap += gap_started.elapsed();
                }
            }
            Err(e) => {
                let message = error_chain(&e);
                if self.last_error.as_deref() != Some(message.as_str()) {
                    eprintln!("tracer agent: cannot start recording: {message}");
                }
                self.last_error = Some(message);
                // Nothing was written worth keeping.
                let _ = fs::remove_file(&output);
            }
        }
    }

    /// Finishes the session: its file is closed with an end marker.
    async fn stop_session(&mut self, reason: &str) {
        let Some(running) = self.running.take() else {
            return;
        };
        let id = running.id;
        let losses = running.session.losses();
        for (k, v) in losses {
            *self.lost_before.entry(k).or_default() += v;
        }
        self.records_before += running.session.records().iter().sum::<u64>();
        let (path, _, first_ns) = running.session.current_file();
        let path = path.to_path_buf();
        let mut progress = |msg: &str| log::info!("session {id}: {}", msg.trim_end());
        match running
            .session
            .finish(reason.to_string(), &mut progress)
            .await
        {
            Ok(summary) => self.recorder.closed(
                crate::session::ClosedFile {
                    path,
                    bytes: summary.bytes,
                    records: summary.records.values().sum(),
                    first_ns,
                    last_ns: monotonic_ns(),
                },
                id,
            ),
            Err(e) => eprintln!(
                "tracer agent: session {id} ended badly: {}",
                error_chain(&e)
            ),
        }
    }

    async fn fail(&mut self, message: String) {
        eprintln!("tracer agent: {message}; re-arming at the next target poll");
        self.last_error = Some(message);
        self.stop_session("error").await;
    }

    fn on_tick(&mut self) {
        if let Some(r) = &mut self.running {
            if let Err(e) = r.session.tick() {
                self.last_error = Some(format!("flushing: {}", error_chain(&e)));
            }
            for line in r.session.take_notices() {
                eprintln!("tracer agent: {line}");
            }
        }
        self.rotate_if_due(true);
    }

    /// Rotates when the current file is big (or, on ticks, old) enough, and
    /// keeps the files within their limits.
    fn rotate_if_due(&mut self, by_age: bool) {
        let Some(r) = &mut self.running else {
            self.recorder.enforce(0);
            return;
        };
        let (_, bytes, _) = r.session.current_file();
        // A file's size counts its records: the metadata it starts with
        // (every object's symbols, a few hundred KB with libc's) must not
        // make a small file_size rotate again at once.
        let records = bytes.saturating_sub(r.session.rotation_bytes());
        let due = if by_age {
            self.recorder.should_rotate(records)
        } else {
            records >= self.recorder.limits().file_bytes
        };
        if due {
            // Rotating drains once more into the old file and starts the
            // new one with every process's and object's metadata again:
            // make room for both first, so that the limit holds throughout.
            self.recorder.enforce(bytes + r.session.rotation_bytes());
            let next = self.recorder.next_path(r.id);
            match r.session.rotate(&next) {
                Ok(closed) => self.recorder.closed(closed, r.id),
                Err(e) => self.last_error = Some(format!("rotating: {}", error_chain(&e))),
            }
        }
        let (_, bytes, _) = r.session.current_file();
        self.recorder.enforce(bytes);
        // Processes that exited before the oldest kept record are not
        // needed any more.
        let oldest = self
            .recorder
            .files()
            .find(|f| f.session == Some(r.id) && f.first_ns > 0)
            .map(|f| f.first_ns)
            .unwrap_or_else(|| r.session.current_file().2);
        if let Some(taps) = r.session.taps_mut() {
            taps.forget_exited_before(oldest);
        }
    }

    async fn on_second(&mut self) {
        if let Some(live) = &mut self.live {
            live.tick();
        }
        let total = self.records_now();
        let usage = self.meter.measure(total);
        let Some(r) = &mut self.running else {
            return;
        };
        if let Some(taps) = r.session.taps_mut() {
            let hits = taps.take_hits();
            let probes = r.session.probes();
            self.shed.add_hits(
                hits.into_iter()
                    .enumerate()
                    .filter(|(_, n)| *n > 0)
                    .filter_map(|(id, n)| Some((probes.get(id)?.symbol.clone(), n))),
            );
        }
        let step = self.shed.decide(
            &usage,
            &self.config.budget,
            self.config.trace.sample_hz > 0,
            self.started.elapsed().as_secs_f64(),
        );
        if step == Step::Nothing {
            return;
        }
        if let Some(action) = self.shed.actions.last().cloned() {
            self.alerts.raise(&alerts::Alert {
                version: alerts::ALERT_VERSION,
                at: alerts::now_rfc3339(),
                host: self.host.clone(),
                kind: "shed".into(),
                summary: format!("{} ({})", action.action, action.why),
                snapshot: None,
                detail: serde_json::to_value(&action).unwrap_or_default(),
            });
        }
        match step {
            Step::DropPreambles => {
                if let Some(taps) = r.session.taps_mut() {
                    *taps = Taps::new(0, 0);
                }
            }
            Step::StopSampling | Step::DropFunction(_) => {
                let exes = r.exes.clone();
                self.rearm(exes, "shedding load").await;
            }
            Step::Nothing => {}
        }
    }

    /// Hands the recent past to the analysis process (when it is idle).
    fn analyze(&mut self) {
        let (Some(live), Some(r)) = (&mut self.live, &mut self.running) else {
            return;
        };
        if !live.ready() {
            return;
        }
        if let Err(e) = r.session.tick() {
            live.status.last_error = Some(format!("flushing: {}", error_chain(&e)));
            return;
        }
        for line in r.session.take_notices() {
            eprintln!("tracer agent: {line}");
        }
        let now = monotonic_ns();
        let window_ns = self.config.analysis.window.0.as_nanos() as u64;
        // Shorten the window to what max_window_bytes holds at the recent
        // byte rate: an evaluation holds a few times its window in memory.
        // The rate of the last second too, so a burst is seen at once.
        let instant = self.meter.usage.events_per_s * r.session.bytes_per_record() / 1e9;
        let recent = recent_byte_rate(&self.recorder, r, now, window_ns).unwrap_or(0.0);
        let eval_ns = match recent.max(instant) {
            rate if rate > 0.0 => {
                let fits = (self.config.analysis.max_window_bytes.0 as f64 / rate) as u64;
                window_ns.min(fits.max(1_000_000_000))
            }
            _ => window_ns,
        };
        live.status.last_window_s = eval_ns as f64 / 1e9;
        if eval_ns < window_ns {
            live.status.shortened += 1;
        }
        let since = now.saturating_sub(eval_ns);
        let (files, preamble) = window_sources(&self.recorder, r, since);
        let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let mut buf = Vec::new();
        if let Err(e) = window::join(&files, &preamble, since, "live window", &mut buf) {
            live.status.last_error = Some(format!("joining the window: {}", error_chain(&e)));
            return;
        }
        live.send_window(buf, since, now, &self.host);
    }

    /// Raises what the analysis process found in a window, with a snapshot
    /// of it when configured.
    fn on_live_event(&mut self, event: live::Event) {
        let Some(live) = &mut self.live else {
            return;
        };
        let Some(answer) = live.on_event(event) else {
            return;
        };
        let mut alerts: Vec<alerts::Alert> = answer
            .findings
            .into_iter()
            .map(|f| alerts::Alert {
                version: alerts::ALERT_VERSION,
                at: alerts::now_rfc3339(),
                host: self.host.clone(),
                kind: f.kind,
                summary: f.summary,
                snapshot: None,
                detail: f.detail,
            })
            .collect();
        let quiet_for = self.config.analysis.snapshot_window.0 / 2;
        let wanted = !alerts.is_empty()
            && self.config.analysis.snapshot_on_alert
            && self
                .last_auto_snapshot
                .is_none_or(|t| t.elapsed() >= quiet_for);
        if wanted {
            self.last_auto_snapshot = Some(Instant::now());
            let reason = format!("alert {}", alerts[0].kind);
            match self.snapshot(self.config.analysis.snapshot_window.0, &reason) {
                Ok(s) => {
                    for a in &mut alerts {
                        a.snapshot = Some(s.path.clone());
                    }
                }
                Err(e) => eprintln!("tracer agent: snapshot for an alert failed: {e}"),
            }
        }
        for a in &alerts {
            self.alerts.raise(a);
        }
    }

    fn records_now(&self) -> u64 {
        self.running
            .as_ref()
            .map_or(0, |r| r.session.records().iter().sum())
    }

    async fn handle(&mut self, request: Request) -> Response {
        match request {
            Request::Status => Response::ok(self.status()),
            Request::Snapshot { window_s, reason } => {
                let window = window_s
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .unwrap_or(self.config.analysis.snapshot_window.0);
                match self.snapshot(window, reason.as_deref().unwrap_or("requested")) {
                    Ok(result) => Response::ok(result),
                    Err(e) => Response::error(e),
                }
            }
            Request::Reload => self.reload().await,
            Request::Features => match &self.live {
                None => Response::error(
                    "no live evaluation is configured (analysis.model or analysis.peers_thresholds)",
                ),
                Some(live) => match &live.last_peers {
                    Some(report) => Response::ok(report),
                    None => Response::ok(serde_json::json!({
                        "note": "no peer windows evaluated yet (analysis.peers_thresholds, at least one interval)",
                        "analysis": live.status,
                    })),
                },
            },
        }
    }

    /// Reads the configuration again; keeps the running one if the new one
    /// is invalid or changes what cannot change while running.
    async fn reload(&mut self) -> Response {
        let new = match AgentConfig::load(&self.config_path) {
            Ok(c) => c,
            Err(e) => {
                return Response::error(format!("{e}; keeping the running configuration"));
            }
        };
        if new.agent != self.config.agent {
            return Response::error(
                "the [agent] section (state_dir, socket, alerts) cannot change while running; \
                 restart the agent; keeping the running configuration",
            );
        }
        let mut live = match Live::new(&new) {
            Ok(l) => l,
            Err(e) => {
                return Response::error(format!(
                    "{}; keeping the running configuration",
                    error_chain(&e)
                ));
            }
        };
        // The new analysis process must accept the new model before the
        // old one goes.
        if let Some(l) = &mut live
            && let Err(e) = l.start(SETUP_TIMEOUT).await
        {
            return Response::error(format!(
                "{}; keeping the running configuration",
                error_chain(&e)
            ));
        }
        let rearm = new.targets != self.config.targets || new.trace != self.config.trace;
        self.config = new;
        self.live = live;
        self.recorder.set_limits(limits(&self.config));
        self.snapshot_store
            .set_budget(self.config.recorder.max_snapshots_disk.0);
        // A new budget starts from nothing shed.
        self.shed = Shed::new();
        if rearm || self.running.is_some() {
            self.unprobed.clear();
            let (exes, states) = targets::resolve(&self.config);
            self.targets = states;
            self.rearm(exes, "configuration reloaded").await;
        }
        Response::ok(serde_json::json!({"reloaded": self.config_path}))
    }

    /// Joins the last `window` of the current session into a snapshot file.
    fn snapshot(&mut self, window: Duration, reason: &str) -> Result<SnapshotResult, String> {
        let Some(r) = &mut self.running else {
            return Err("not recording (no target is running yet)".into());
        };
        r.session
            .tick()
            .map_err(|e| format!("flushing: {}", error_chain(&e)))?;
        let since = monotonic_ns().saturating_sub(window.as_nanos() as u64);
        let (files, preamble) = window_sources(&self.recorder, r, since);
        let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let window_start = std::time::SystemTime::now()
            .checked_sub(window)
            .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
        let earlier_files: Vec<PathBuf> = self
            .recorder
            .files()
            .filter(|f| f.session != Some(r.id) && f.closed >= window_start)
            .map(|f| f.path.clone())
            .collect();
        let slug: String = reason
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
        let path = self
            .snapshot_store
            .dir()
            .join(format!("{stamp}-{slug}.capture"));
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("creating {}: {e}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        let joined = window::join(
            &files,
            &preamble,
            since,
            &format!("snapshot: {reason}"),
            &mut out,
        )
        .map_err(|e: WindowError| format!("writing {}: {}", path.display(), error_chain(&e)))?;
        drop(out);
        let bytes = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "tracer agent: snapshot {} ({} records, {} bytes): {reason}",
            path.display(),
            joined.records + joined.preamble_records,
            bytes
        );
        self.snapshot_store.added(path.clone(), bytes);
        self.snapshots.push(path.clone());
        if self.snapshots.len() > 20 {
            self.snapshots.remove(0);
        }
        Ok(SnapshotResult {
            path,
            bytes,
            joined,
            earlier_files,
        })
    }

    fn status(&self) -> Status {
        let mut losses = self.lost_before.clone();
        let mut session = None;
        let mut current = None;
        let mut preambles = PreambleStatus {
            processes: 0,
            bytes: 0,
            not_kept: 0,
        };
        if let Some(r) = &self.running {
            for (k, v) in r.session.losses() {
                *losses.entry(k).or_default() += v;
            }
            let mut records = BTreeMap::new();
            for (kind, n) in r.session.records().iter().enumerate() {
                if *n > 0 {
                    *records.entry(kind_name(kind as u16)).or_insert(0) += n;
                }
            }
            session = Some(SessionStatus {
                id: r.id,
                age_s: r.started.elapsed().as_secs_f64(),
                executables: r.exes.clone(),
                probes: r.session.probes().len(),
                processes: r
                    .session
                    .live_processes()
                    .map(|(p, c)| (p, c.to_string()))
                    .collect(),
                records,
            });
            let (path, bytes, _) = r.session.current_file();
            current = Some((path.to_path_buf(), bytes));
            if let Some(t) = r.session.taps() {
                preambles = PreambleStatus {
                    processes: t.processes(),
                    bytes: t.bytes(),
                    not_kept: t.not_kept,
                };
            }
        }
        let traced: &[PathBuf] = self.running.as_ref().map_or(&[], |r| &r.exes);
        let targets: Vec<TargetState> = self
            .targets
            .iter()
            .map(|t| {
                let mut t = t.clone();
                for exe in &t.executables {
                    if let Some((_, why)) = self.unprobed.get(exe) {
                        t.notes
                            .push(format!("not probed: {}: {why}", exe.display()));
                    }
                }
                if t.executables.iter().any(|e| traced.contains(e)) {
                    t.state = "recording";
                } else if !t.executables.is_empty()
                    && t.executables.iter().all(|e| self.unprobed.contains_key(e))
                {
                    t.state = "skipped";
                }
                t
            })
            .collect();
        let waiting: Vec<&str> = targets
            .iter()
            .filter(|t| t.state != "recording")
            .flat_map(|t| t.notes.iter().map(String::as_str))
            .collect();
        let state = if self.running.is_some() {
            "recording".to_string()
        } else if !waiting.is_empty() {
            format!("waiting for targets: {}", waiting.join("; "))
        } else {
            "starting".to_string()
        };
        Status {
            version: STATUS_VERSION,
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            config: self.config_path.clone(),
            state,
            targets,
            last_error: self.last_error.clone(),
            session,
            sessions: self.sessions,
            rearm_gap_s: self.rearm_gap.as_secs_f64(),
            records_total: self.records_before + self.records_now(),
            losses,
            usage: self.meter.usage,
            recorder: RecorderStatus {
                dir: self.recorder.dir().to_path_buf(),
                files: self.recorder.files().cloned().collect(),
                disk_bytes: self.recorder.closed_bytes() + current.as_ref().map_or(0, |c| c.1),
                current,
                max_disk: self.recorder.limits().max_disk,
                removed_for_size: self.recorder.removed_for_size,
                removed_for_age: self.recorder.removed_for_age,
            },
            preambles,
            shed: ShedStatus {
                sampling: self.config.trace.sample_hz > 0 && self.shed.sampling,
                excluded_functions: self.shed.excluded.clone(),
                actions: self.shed.actions.clone(),
            },
            alerts: self.alerts.count,
            alerts_file: self.alerts.path().to_path_buf(),
            snapshots: self.snapshots.clone(),
            snapshots_disk: self.snapshot_store.status(),
            analysis: self.live.as_ref().map(|l| l.status.clone()),
        }
    }
}

/// The files of the current session that hold records from `since_ns` on
/// (the current one last), and the preambles before it.
fn window_sources(
    recorder: &FlightRecorder,
    r: &Running,
    since_ns: u64,
) -> (Vec<PathBuf>, Vec<u8>) {
    let mut files: Vec<PathBuf> = recorder
        .files()
        .filter(|f| f.session == Some(r.id) && f.last_ns >= since_ns)
        .map(|f| f.path.clone())
        .collect();
    files.push(r.session.current_file().0.to_path_buf());
    let preamble = r
        .session
        .taps()
        .map(|t| t.preamble_records(since_ns))
        .unwrap_or_default();
    (files, preamble)
}

/// Bytes written per ns over the files of the current session that reach
/// into the last `window_ns` (`None` before anything was written).
fn recent_byte_rate(
    recorder: &FlightRecorder,
    r: &Running,
    now: u64,
    window_ns: u64,
) -> Option<f64> {
    let (_, mut bytes, mut first) = r.session.current_file();
    for f in recorder.files() {
        if f.session == Some(r.id) && f.first_ns > 0 && f.last_ns + window_ns >= now {
            bytes += f.bytes;
            first = if first == 0 {
                f.first_ns
            } else {
                first.min(f.first_ns)
            };
        }
    }
    (first > 0 && now > first).then(|| bytes as f64 / (now - first) as f64)
}

async fn next_live_event(live: &mut Option<Live>) -> live::Event {
    match live {
        Some(l) => l.next_event().await,
        None => std::future::pending().await,
    }
}

/// How long a new analysis process may take to accept its setup.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

async fn next_activity(
    running: &mut Option<Running>,
) -> Result<crate::session::Activity, RecordError> {
    match running {
        Some(r) => r.session.next().await,
        None => std::future::pending().await,
    }
}

fn inode(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn limits(config: &AgentConfig) -> Limits {
    Limits {
        max_disk: config.recorder.max_disk.0,
        max_age: config.recorder.max_age.0,
        file_bytes: config.recorder.file_bytes(),
        file_age: config.recorder.file_age.0,
        headroom: config.trace.ring_size.0,
    }
}

fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{} h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else {
        format!("{:.0} s", d.as_secs_f64())
    }
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
