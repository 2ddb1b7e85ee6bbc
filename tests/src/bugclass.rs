//! The bug-class suite of model-based localization (issue 20): daemon
//! programs of different shapes, each with a fault switch, recorded as a
//! user would, and each run scored against a model of normal runs.
//!
//! | program | shape | traced with |
//! | --- | --- | --- |
//! | `statusring` (C) | a ring of single-threaded poll() daemons | function probes |
//! | `kvcluster` (C) | multi-threaded epoll servers and their clients | function probes |
//! | `pyjobs` (Python) | a job manager and the workers it forks (MPD-like) | `--python` |
//! | `treeagg` (C, held out of tuning) | a tree of select() aggregators | function probes |
//! | `tpcpool` (C, held out of tuning) | thread-per-connection servers, blocking receives | function probes |
//! | `gossip` (C, held out of tuning) | a ring of UDP daemons, poll() and a timer, no connections | function probes |
//! | `replog` (C, held out of tuning) | a replicated log: a leader with a thread per follower, Unix sockets, a strict order per connection | function probes |
//!
//! Each program forks its daemons and prints `daemon K pid P` for each; a
//! fault switch (`--fault CLASS --fault-node K --fault-at N`) makes daemon K
//! misbehave from its N-th message on, in one of the six [`FaultClass`]es,
//! and it prints `fault fired` when it does.
//! `cargo xtask model-matrix` runs every class on every program; the
//! integration tests keep a fast subset.

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
    str::FromStr,
};

use analyzer::{
    model::GlobalModel,
    score::{Ranking, ScoreReport, Scoring, calibrate, score_linked_processes},
    units::{ProcessUnits, Variant, decompose_capture},
};
use serde::{Deserialize, Serialize};

/// Normal runs learned per program (the matrix's default and the tests'):
/// enough that interleavings a normal run shows now and then were seen
/// (calibration holds each run out in turn).
pub const LEARN: usize = 8;

/// The classes of bugs injected (issue 20).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultClass {
    /// A handler silently not called for some messages.
    Skip,
    /// An extra call: a retry or error path taken.
    Extra,
    /// A different callee on the same path (a wrong branch).
    Branch,
    /// A partial message read as broken; the connection closed early.
    Partial,
    /// A handler that hangs (the unit never completes).
    Hang,
    /// A daemon that exits or crashes mid-run.
    Crash,
}

impl FaultClass {
    /// Every class.
    pub const ALL: [FaultClass; 6] = [
        Self::Skip,
        Self::Extra,
        Self::Branch,
        Self::Partial,
        Self::Hang,
        Self::Crash,
    ];

    /// The name the programs take (`--fault NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Extra => "extra",
            Self::Branch => "branch",
            Self::Partial => "partial",
            Self::Hang => "hang",
            Self::Crash => "crash",
        }
    }
}

impl fmt::Display for FaultClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!("unknown fault class '{s}' (skip, extra, branch, partial, hang, crash)")
            })
    }
}

/// The programs of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Program {
    /// `fixtures/statusring.c`: a ring of poll() daemons, token right,
    /// STATUS left.
    StatusRing,
    /// `fixtures/kvcluster.c`: multi-threaded epoll servers and clients.
    KvCluster,
    /// `fixtures/pyjobs.py`: a Python job manager forking its workers.
    PyJobs,
    /// `fixtures/treeagg.c`: a tree of select() aggregators, kept out of
    /// tuning the defaults.
    TreeAgg,
    /// `fixtures/tpcpool.c`: thread-per-connection servers with blocking
    /// receives (no event loop), each the client of the next; written
    /// after the defaults were chosen and kept out of tuning.
    TpcPool,
    /// `fixtures/gossip.c`: a ring of UDP daemons (one socket each, no
    /// connections) driven by poll() and a timer; written after the order
    /// rule was chosen and kept out of tuning.
    Gossip,
    /// `fixtures/replog.c`: a replicated log, a leader with a thread per
    /// follower over Unix stream sockets, blocking calls, a strict order
    /// of messages on every connection; written after the order rule was
    /// chosen and kept out of tuning. Faults drawn for the leader (daemon
    /// 0) never fire and are drawn again.
    RepLog,
}

impl Program {
    /// Every program.
    pub const ALL: [Program; 7] = [
        Self::StatusRing,
        Self::KvCluster,
        Self::PyJobs,
        Self::TreeAgg,
        Self::TpcPool,
        Self::Gossip,
        Self::RepLog,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::StatusRing => "statusring",
            Self::KvCluster => "kvcluster",
            Self::PyJobs => "pyjobs",
            Self::TreeAgg => "treeagg",
            Self::TpcPool => "tpcpool",
            Self::Gossip => "gossip",
            Self::RepLog => "replog",
        }
    }

    /// Kept out of tuning: its results are reported apart.
    pub fn held_out(self) -> bool {
        matches!(
            self,
            Self::TreeAgg | Self::TpcPool | Self::Gossip | Self::RepLog
        )
    }

    /// How many daemons a fault may be injected into.
    pub fn daemons(self) -> u32 {
        match self {
            Self::StatusRing | Self::PyJobs | Self::TpcPool | Self::Gossip | Self::RepLog => 4,
            Self::KvCluster => 3,
            Self::TreeAgg => 6,
        }
    }

    /// The range of the message number a fault starts at: late enough that
    /// the run has settled, early enough that its daemon gets there.
    pub fn fault_at(self) -> std::ops::RangeInclusive<u32> {
        match self {
            Self::StatusRing => 3..=30,
            Self::KvCluster => 5..=70,
            Self::PyJobs => 2..=10,
            Self::TreeAgg => 3..=20,
            Self::TpcPool => 3..=30,
            // About 5 messages a round, 40 rounds.
            Self::Gossip => 5..=150,
            // 50 messages a follower (40 entries, 10 commits).
            Self::RepLog => 3..=45,
        }
    }

    /// Ways the crash class ends a daemon.
    pub fn crash_modes(self) -> &'static [&'static str] {
        match self {
            Self::PyJobs => &["exit", "abort", "raise"],
            _ => &["exit", "abort", "segv"],
        }
    }

    /// Ports a run uses from its base.
    pub fn ports(self) -> u16 {
        match self {
            Self::StatusRing | Self::PyJobs | Self::TpcPool | Self::Gossip | Self::RepLog => 4,
            Self::KvCluster => 3,
            Self::TreeAgg => 7,
        }
    }

    /// The functions traced, chosen as a user would by name (handlers,
    /// dispatch, send and receive, the loops); empty for Python (`--python`).
    pub fn functions(self) -> &'static [&'static str] {
        match self {
            Self::StatusRing => &[
                "handle_*",
                "*_msg",
                "dispatch",
                "close_connection",
                "main_loop",
                "connect_rhs",
                "listen_port",
                "finish",
                "record_status",
                "retry_send",
            ],
            Self::KvCluster => &[
                "handle_*",
                "dispatch",
                "*_request",
                "*_reply",
                "store_put",
                "retry_store",
                "update_stats",
                "*_loop",
                "close_client",
                "listen_port",
                "connect_server",
                "server_lost",
                "finish_server",
            ],
            Self::PyJobs => &[],
            Self::TpcPool => &[
                "handle_*",
                "route_request",
                "*_request",
                "*_reply",
                "store_*",
                "retry_store",
                "log_request",
                "serve_conn",
                "client_main",
                "connect_peer",
                "listen_port",
                "finish",
            ],
            Self::TreeAgg => &[
                "handle_*",
                "*_msg",
                "forward_*",
                "merge_*",
                "serve",
                "connect_parent",
                "listen_port",
                "finish",
            ],
            Self::Gossip => &[
                "handle_*",
                "*_msg",
                "dispatch",
                "forward_data",
                "apply_update",
                "mark_alive",
                "retry_send",
                "drop_bad",
                "do_round",
                "say_bye",
                "gossip_loop",
                "bind_port",
                "finish",
            ],
            Self::RepLog => &[
                "handle_*",
                "*_msg",
                "send_ack",
                "resend_ack",
                "store_entry",
                "apply_entr*",
                "flush_log",
                "abort_conn",
                "follow",
                "listen_on",
                "await_ack",
                "replicate_entry",
                "commit_upto",
                "lost_follower",
                "close_follower",
                "connect_follower",
            ],
        }
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Program {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown program '{s}' (statusring, kvcluster, pyjobs, treeagg, tpcpool, gossip, replog)"
                )
            })
    }
}

/// A fault to inject.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injection {
    /// Its class.
    pub class: FaultClass,
    /// The daemon (0-based) it is injected into.
    pub node: u32,
    /// The message number it starts at.
    pub at: u32,
    /// For [`FaultClass::Crash`]: how the daemon ends.
    pub crash: String,
}

/// One recorded run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecordedRun {
    /// The program.
    pub program: Program,
    /// The capture.
    pub capture: PathBuf,
    /// The fault injected, if any.
    pub injection: Option<Injection>,
    /// Pid of each daemon, by index.
    pub daemons: BTreeMap<u32, u32>,
    /// What the program printed last (completed, hung, ...).
    pub outcome: String,
    /// The faulty daemon said it injected the fault (a fault at a message
    /// its daemon never got is not injected).
    #[serde(default = "yes")]
    pub fired: bool,
}

fn yes() -> bool {
    true
}

impl RecordedRun {
    /// The pid of the daemon the fault was injected into.
    pub fn faulty_pid(&self) -> Option<u32> {
        self.injection
            .as_ref()
            .and_then(|i| self.daemons.get(&i.node).copied())
    }
}

/// The command line of `program` run with ports from `port` and `fault`,
/// its rounds (requests, jobs) `scale` times the usual count.
pub fn command(
    program: Program,
    exe: &Path,
    port: u16,
    fault: Option<&Injection>,
    scale: u32,
) -> Vec<String> {
    let count = |n: u32| n.saturating_mul(scale.max(1)).to_string();
    let mut args: Vec<String> = match program {
        Program::StatusRing => vec![exe.display().to_string(), "4".into(), count(40)],
        Program::KvCluster => vec![exe.display().to_string(), "3".into(), "3".into(), count(30)],
        Program::PyJobs => vec![
            crate::PYTHON.into(),
            exe.display().to_string(),
            "4".into(),
            count(60),
        ],
        Program::TreeAgg => vec![exe.display().to_string(), "6".into(), count(30)],
        Program::TpcPool | Program::Gossip | Program::RepLog => {
            vec![exe.display().to_string(), "4".into(), count(40)]
        }
    };
    args.push(port.to_string());
    if let Some(f) = fault {
        args.extend([
            "--fault".into(),
            f.class.name().into(),
            "--fault-node".into(),
            f.node.to_string(),
            "--fault-at".into(),
            f.at.to_string(),
            "--crash".into(),
            f.crash.clone(),
        ]);
    }
    args
}

/// The program's executable: the C fixtures compiled once (see
/// [`crate::fixture`]), the Python script as it is.
pub fn executable(program: Program) -> PathBuf {
    match program {
        Program::PyJobs => Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pyjobs.py"),
        p => crate::fixture(p.name(), None),
    }
}

/// Records one run of `program` (ports from `port`) into `out` with
/// `tracer record` of the binary `tracer`, the launcher as the command and
/// its daemons followed.
pub fn record(
    tracer: &Path,
    program: Program,
    exe: &Path,
    out: &Path,
    port: u16,
    fault: Option<&Injection>,
) -> Result<RecordedRun, String> {
    record_with(tracer, program, exe, out, port, fault, &Length::default())
}

/// How long a run is, and the recorder's overhead budget: the matrix's
/// runs are short (a fraction of a second), so a budget (first look after
/// 250 ms) only acts on runs made longer.
#[derive(Clone, Debug, PartialEq)]
pub struct Length {
    /// The program's rounds (requests, jobs) times this.
    pub scale: u32,
    /// `tracer record --overhead` (e.g. "5%").
    pub overhead: Option<String>,
    /// `tracer record --like MODEL`: the budget keeps the model's functions
    /// while others can go.
    pub like: Option<PathBuf>,
    /// `tracer record --duration`: the recorder stops this long after it
    /// started the program, while the program may still run (a user who
    /// records running daemons and stops the recorder); see
    /// [`record_with`].
    pub stop_after: Option<std::time::Duration>,
}

impl Default for Length {
    fn default() -> Self {
        Self {
            scale: 1,
            overhead: None,
            like: None,
            stop_after: None,
        }
    }
}

/// [`record`] with runs `length.scale` times as long and the recorder's
/// overhead budget. With `length.stop_after`, the recorder stops then
/// (which ends the launcher: `tracer record` ends a command it started
/// when it stops first) and every process the run left is killed once the
/// recorder has exited: the capture ends while the daemons ran.
pub fn record_with(
    tracer: &Path,
    program: Program,
    exe: &Path,
    out: &Path,
    port: u16,
    fault: Option<&Injection>,
    length: &Length,
) -> Result<RecordedRun, String> {
    let mut args: Vec<String> = vec!["record".into(), "--sample-hz".into(), "0".into()];
    if let Some(budget) = &length.overhead {
        args.extend(["--overhead".into(), budget.clone()]);
        if let Some(model) = &length.like {
            args.extend(["--like".into(), model.display().to_string()]);
        }
    }
    if program == Program::PyJobs {
        args.push("--python".into());
    }
    for f in program.functions() {
        args.extend(["-f".to_string(), f.to_string()]);
    }
    if let Some(stop) = length.stop_after {
        args.extend(["--duration".into(), format!("{}ms", stop.as_millis())]);
    }
    args.extend(["-o".into(), out.display().to_string(), "--".into()]);
    args.extend(command(program, exe, port, fault, length.scale));
    if length.stop_after.is_some() {
        // The launcher's own bound on the run must not end it first.
        args.extend(["--timeout".into(), "60000".into()]);
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = match length.stop_after {
        None => crate::run_bounded(tracer, &refs),
        Some(_) => run_stopped(tracer, &refs)?,
    };
    if !run.status.success() {
        return Err(format!("{program}: tracer record failed: {}", run.stderr));
    }
    let mut daemons = BTreeMap::new();
    let mut outcome = String::new();
    let fired = run.stdout.lines().any(|l| l == "fault fired");
    for line in run.stdout.lines() {
        if let Some(rest) = line.strip_prefix("daemon ") {
            let mut parts = rest.split_whitespace();
            if let (Some(k), Some("pid"), Some(pid)) = (parts.next(), parts.next(), parts.next())
                && let (Ok(k), Ok(pid)) = (k.parse(), pid.parse())
            {
                daemons.insert(k, pid);
            }
        } else if line.starts_with(&format!("{}:", program.name())) {
            outcome = line.to_string();
        }
    }
    if daemons.len() != program.daemons() as usize {
        return Err(format!(
            "{program}: expected {} daemon pids, got {daemons:?}: {}",
            program.daemons(),
            run.stdout
        ));
    }
    Ok(RecordedRun {
        program,
        capture: out.to_path_buf(),
        injection: fault.cloned(),
        daemons,
        outcome,
        fired,
    })
}

/// Runs `tracer ARGS` (a recording with `--duration`) in a process group
/// of its own; once the tracer exited (within 60 s), kills what is left of
/// the group (the daemons of a program the recorder stopped), so that
/// their output ends too.
fn run_stopped(tracer: &Path, args: &[&str]) -> Result<crate::Run, String> {
    use std::{
        io::Read,
        os::unix::process::CommandExt as _,
        process::{Command, Stdio},
        time::{Duration, Instant},
    };
    let mut child = Command::new(tracer)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{} runs: {e}", tracer.display()))?;
    let group = child.id();
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => break None,
        }
    };
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
    let status = match status {
        Some(s) => s,
        None => {
            let _ = child.kill();
            child
                .wait()
                .map_err(|e| format!("waiting for the tracer: {e}"))?
        }
    };
    Ok(crate::Run {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Whether each daemon of `run` was still running when its recording
/// stopped (no exit of it in the capture), and the capture saw them all.
pub fn daemons_ran_at_stop(run: &RecordedRun) -> bool {
    let cap = crate::capture(&run.capture);
    let processes = decompose_capture(&cap, Variant::Paper000);
    run.daemons.values().all(|pid| {
        processes
            .iter()
            .find(|p| p.pid == *pid)
            .is_some_and(|p| p.ended.is_none())
    })
}

/// Learns a calibrated model (000 decomposition) from normal runs.
pub fn learn(runs: &[PathBuf]) -> GlobalModel {
    let mut model = GlobalModel::new(Variant::Paper000);
    // As `analyzer model learn`: what any run's overhead budget detached
    // is left out of every run (the captures are small: read twice).
    model.left_out = runs
        .iter()
        .flat_map(|p| crate::capture(p).budget_dropped())
        .collect();
    let mut ends = Vec::with_capacity(runs.len());
    let (decomposed, stops): (Vec<Vec<ProcessUnits>>, Vec<Option<u64>>) = runs
        .iter()
        .map(|p| {
            let mut cap = crate::capture(p);
            cap.leave_out(&model.left_out);
            let stop = cap.end.as_ref().map(|e| e.stop_ns);
            ends.push(
                analyzer::blocked::recorded(&cap)
                    .then(|| analyzer::blocked::blocked_threads(&cap, None)),
            );
            (decompose_capture(&cap, Variant::Paper000), stop)
        })
        .unzip();
    for ((run, stop), blocked) in decomposed.iter().zip(stops).zip(&ends) {
        for p in run {
            model.learn(p);
        }
        model.learn_quiet(run, stop);
        model.learn_ends(run, blocked.as_deref());
    }
    calibrate(&mut model, None, &decomposed);
    model
}

/// Scores one capture against `model`: the report `model score` prints.
pub fn score(model: &GlobalModel, capture: &Path) -> ScoreReport {
    let mut cap = crate::capture(capture);
    // What cannot be made comparable shows in the scores themselves.
    let _ = model.prepare(&mut cap);
    let name = capture.display().to_string();
    let processes = decompose_capture(&cap, model.variant);
    let links = analyzer::units::Links::of(&cap);
    let units = score_linked_processes(model, &cap, &links, &name, &processes, Scoring::Nodes);
    let mut report = ScoreReport::new(
        model.variant,
        Scoring::Nodes,
        Ranking::Evidence,
        std::slice::from_ref(&name),
        units,
    );
    report.judge_quiet(
        model,
        &name,
        analyzer::units::quiet_span(&processes, cap.end.as_ref().map(|e| e.stop_ns)),
        cap.header.clock.monotonic_ns,
        Some(&links),
    );
    report
}

/// What a scored run says about its fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// The earliest anomaly is in the faulty process.
    pub detected: bool,
    /// The highest-ranked unit is in the faulty process.
    pub top1: bool,
    /// Any unit was anomalous (a false alarm for a normal run).
    pub alarm: bool,
    /// The report could not judge some units and found nothing in the
    /// others ([`analyzer::score::Verdict::CannotJudge`]): no answer, not a
    /// wrong one.
    pub cannot_judge: bool,
    /// The report's summary.
    pub summary: String,
}

/// Judges `report` of `run`: detection and top-1 against the faulty pid.
pub fn judge(run: &RecordedRun, report: &ScoreReport) -> Outcome {
    let faulty = run.faulty_pid();
    Outcome {
        detected: faulty.is_some() && report.first().map(|u| u.pid) == faulty,
        top1: faulty.is_some()
            && report.units.first().filter(|u| u.anomalous).map(|u| u.pid) == faulty,
        alarm: report.first_anomaly.is_some(),
        cannot_judge: report.verdict == analyzer::score::Verdict::CannotJudge,
        summary: report.summary.clone(),
    }
}
