//! The agent's configuration file (TOML): what to trace, how much disk and
//! CPU it may use, what to analyse live. Every key is checked when the file
//! is read; an error names the key (and for syntax, the line).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Deserializer, Serialize};

pub use tracer_common::live::Scoring;

use crate::{
    quantity::{format_size, parse_duration, parse_size},
    record::{ProbeChoice, RecordConfig, RecordError, Target},
    targets::FunctionPattern,
    usdt::UsdtPattern,
};

/// Version of the configuration format this agent reads.
pub const CONFIG_VERSION: u32 = 1;

/// Largest model or thresholds file the agent hands to its analysis process.
pub const MAX_ANALYSIS_FILE: u64 = crate::overhead::MAX_MODEL_BYTES;

/// An example configuration, printed by `tracer agent --example-config`.
pub const EXAMPLE: &str = include_str!("../../../packaging/agent.toml");

/// Errors reading a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the agent configuration {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Syntax, an unknown key, or a value of the wrong form (toml's message
    /// names the key and shows the line).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// toml's message.
        message: String,
    },
    /// A value that parses but makes no sense.
    #[error("{path}: `{key}`: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, e.g. `target[1]` or `recorder.max_disk`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// A byte size written as `64MiB`, `8M` or a plain number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Size(pub u64);

impl From<Size> for String {
    fn from(s: Size) -> Self {
        format_size(s.0)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Size(n)),
            Raw::S(s) => parse_size(&s).map(Size).map_err(serde::de::Error::custom),
        }
    }
}

/// A percentage written as `5%` or a plain number.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(into = "String")]
pub struct Percent(pub f64);

impl From<Percent> for String {
    fn from(p: Percent) -> Self {
        format!("{}%", p.0)
    }
}

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(f64),
            S(String),
        }
        let s = match Raw::deserialize(d)? {
            Raw::N(n) => n.to_string(),
            Raw::S(s) => s,
        };
        crate::quantity::parse_percent(&s)
            .map(Percent)
            .map_err(serde::de::Error::custom)
    }
}

/// A duration written as `30s`, `500ms`, `2m`, `1h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Span(pub Duration);

impl From<Span> for String {
    fn from(s: Span) -> Self {
        format!("{}s", s.0.as_secs_f64())
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(Span)
            .map_err(serde::de::Error::custom)
    }
}

/// The whole file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// [`CONFIG_VERSION`].
    #[serde(default = "version")]
    pub version: u32,
    /// Where the agent keeps its files and its socket.
    #[serde(default)]
    pub agent: AgentSection,
    /// What to trace: `[[target]]` tables.
    #[serde(default, rename = "target")]
    pub targets: Vec<TargetSpec>,
    /// How to trace it.
    #[serde(default)]
    pub trace: TraceSection,
    /// The flight recorder's limits.
    #[serde(default)]
    pub recorder: RecorderSection,
    /// The overhead budget.
    #[serde(default)]
    pub budget: BudgetSection,
    /// Live analysis.
    #[serde(default)]
    pub analysis: AnalysisSection,
}

fn version() -> u32 {
    CONFIG_VERSION
}

/// `[agent]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSection {
    /// Flight-recorder files go in `state_dir/rings`, snapshots in
    /// `state_dir/snapshots`.
    pub state_dir: PathBuf,
    /// The control socket (mode 0600, owned by root).
    pub socket: PathBuf,
    /// Alerts as JSON lines (default `state_dir/alerts.jsonl`); they go to
    /// standard error too, which systemd puts in the journal.
    pub alerts: Option<PathBuf>,
}

impl Default for AgentSection {
    fn default() -> Self {
        Self {
            state_dir: PathBuf::from("/var/lib/eftrace"),
            socket: PathBuf::from("/run/eftrace/agent.sock"),
            alerts: None,
        }
    }
}

/// A user, written as a name (`gluster`) or a uid (`998`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct User(pub String);

impl From<User> for String {
    fn from(u: User) -> Self {
        u.0
    }
}

impl<'de> Deserialize<'de> for User {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u32),
            S(String),
        }
        Ok(User(match Raw::deserialize(d)? {
            Raw::N(n) => n.to_string(),
            Raw::S(s) => s,
        }))
    }
}

impl User {
    /// (uid, primary gid), `None` when there is no such user.
    pub fn ids(&self) -> Option<(u32, u32)> {
        crate::trust::uid_of(&self.0)
    }
}

/// One `[[target]]`: exactly one of `exe`, `name`, `pidfile`.
///
/// Targets must be trusted, since the agent runs as root and records into
/// the disk budget and live analysis whatever they match: the executable
/// (and the directories above it) must be owned by root or `owner` and
/// writable by nobody else; a process found by `name` or `pidfile` must run
/// as root or `user`; a pid file must be owned by one of them, not
/// writable by others, and not older than its process (a stale pid file
/// whose pid was reused names another program).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TargetSpec {
    /// Every process running this executable, now or later.
    pub exe: Option<PathBuf>,
    /// Processes whose command name (`/proc/PID/comm`) is this; traced
    /// through their executable, so later ones are followed too.
    pub name: Option<String>,
    /// The process whose pid this file holds; traced through its executable.
    pub pidfile: Option<PathBuf>,
    /// Who may own the executable besides root.
    pub owner: Option<User>,
    /// Who a process found by `name` or `pidfile` may run as besides root.
    pub user: Option<User>,
}

impl TargetSpec {
    /// How it is written in the file (`exe=/usr/sbin/x`).
    pub fn describe(&self) -> String {
        match (&self.exe, &self.name, &self.pidfile) {
            (Some(p), _, _) => format!("exe={}", p.display()),
            (_, Some(n), _) => format!("name={n}"),
            (_, _, Some(p)) => format!("pidfile={}", p.display()),
            _ => "(empty)".to_string(),
        }
    }
}

/// `[trace]`: the same choices as `tracer record`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TraceSection {
    /// `[OBJECT:]GLOB` function patterns (like `record -f`).
    pub functions: Vec<String>,
    /// Patterns whose calls also record six integer arguments (`-a`).
    pub args: Vec<String>,
    /// MPI functions with arguments (`--mpi`).
    pub mpi: bool,
    /// USDT probes `[OBJECT:]PROVIDER:NAME[=STRING_ARGS]` (`--usdt`).
    pub usdt: Vec<String>,
    /// Python functions through CPython's USDT probes (`--python`).
    pub python: bool,
    /// Socket system calls.
    pub syscalls: bool,
    /// CPU samples per second per CPU (0: off).
    pub sample_hz: u64,
    /// Sample every process on the node.
    pub sample_all: bool,
    /// Follow children of traced processes.
    pub follow_children: bool,
    /// Ring buffer between kernel and agent (a power of two).
    pub ring_size: Size,
    /// The function probes' overhead budget, percent slowdown of the
    /// traced processes (like `record --overhead`): the costliest probes
    /// are dropped after each session's first 2 s.
    pub overhead: Option<Percent>,
}

impl Default for TraceSection {
    fn default() -> Self {
        Self {
            functions: Vec::new(),
            args: Vec::new(),
            mpi: false,
            usdt: Vec::new(),
            python: false,
            syscalls: true,
            sample_hz: 0,
            sample_all: false,
            follow_children: true,
            ring_size: Size(8 << 20),
            overhead: None,
        }
    }
}

/// `[recorder]`: the flight recorder.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RecorderSection {
    /// Disk the capture files may use together; the oldest go first.
    pub max_disk: Size,
    /// Files whose last record is older than this are removed.
    pub max_age: Span,
    /// A new file is started when the current one reaches this size
    /// (default: max_disk / 8, at least 256 KiB)...
    pub file_size: Option<Size>,
    /// ... or this age.
    pub file_age: Span,
    /// Each process's first records kept in memory, so its start (the
    /// initializer a model needs) outlives rotation.
    pub preamble: Size,
    /// Memory for all preambles and USDT strings together.
    pub preamble_total: Size,
    /// Disk the snapshots may use together (those taken on alerts and on
    /// request); the oldest are removed first, the newest always kept.
    pub max_snapshots_disk: Size,
}

impl Default for RecorderSection {
    fn default() -> Self {
        Self {
            max_disk: Size(1 << 30),
            max_age: Span(Duration::from_secs(3600)),
            file_size: None,
            file_age: Span(Duration::from_secs(60)),
            preamble: Size(256 << 10),
            preamble_total: Size(16 << 20),
            max_snapshots_disk: Size(256 << 20),
        }
    }
}

impl RecorderSection {
    /// The size at which files rotate.
    pub fn file_bytes(&self) -> u64 {
        self.file_size
            .map_or((self.max_disk.0 / 8).max(256 << 10), |s| s.0)
    }
}

/// `[budget]`: what the agent may cost; beyond it, it sheds load.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetSection {
    /// Records per second (0: no limit).
    pub max_events_per_second: u64,
    /// The agent's own CPU, percent of one core (0: no limit).
    pub max_cpu_percent: f64,
    /// The agent's resident memory; above it, preambles are dropped.
    pub max_memory: Size,
    /// Seconds over budget before a shedding step.
    pub patience: u32,
}

impl Default for BudgetSection {
    fn default() -> Self {
        Self {
            max_events_per_second: 200_000,
            max_cpu_percent: 25.0,
            max_memory: Size(256 << 20),
            patience: 3,
        }
    }
}

/// `[analysis]`: live evaluation of the recent past.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AnalysisSection {
    /// How often.
    pub interval: Span,
    /// How much of the recent past each evaluation reads.
    pub window: Span,
    /// A model learned with `analyzer model learn`: suspect scores of units.
    pub model: Option<PathBuf>,
    /// `nodes` (paper 000) or `edges` (paper 001).
    pub scoring: Scoring,
    /// Units scoring at least this raise an alert.
    pub alert_score: f64,
    /// Thresholds trained with `analyzer peers train`: faulty servers among
    /// the traced processes.
    pub peers_thresholds: Option<PathBuf>,
    /// Freeze the window into a snapshot when an alert is raised.
    pub snapshot_on_alert: bool,
    /// How much of the past a snapshot holds.
    pub snapshot_window: Span,
    /// Most bytes of records one evaluation reads: above it the window is
    /// shortened (an evaluation holds a few times its window in memory).
    pub max_window_bytes: Size,
    /// The `analyzer` binary run as the analysis process (default: the one
    /// beside this `tracer`, else on PATH). Owned by root, like targets.
    pub analyzer: Option<PathBuf>,
    /// The user the analysis process runs as: never root. A user of its
    /// own is better than `nobody`, which other daemons share.
    pub user: User,
    /// Address space the analysis process may use; beyond it, it fails and
    /// is started again.
    pub max_memory: Size,
    /// An evaluation not answered within this is taken as hung: the
    /// process is killed and started again.
    pub timeout: Span,
}

impl Default for AnalysisSection {
    fn default() -> Self {
        Self {
            interval: Span(Duration::from_secs(10)),
            window: Span(Duration::from_secs(30)),
            model: None,
            scoring: Scoring::Nodes,
            alert_score: 0.9,
            peers_thresholds: None,
            snapshot_on_alert: true,
            snapshot_window: Span(Duration::from_secs(120)),
            max_window_bytes: Size(8 << 20),
            analyzer: None,
            user: User("nobody".into()),
            max_memory: Size(4 << 30),
            timeout: Span(Duration::from_secs(60)),
        }
    }
}

impl AgentConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks `text` (read from `path`, for messages).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        config.check(path)?;
        Ok(config)
    }

    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            key: key.to_string(),
            message,
        };
        if self.version != CONFIG_VERSION {
            return Err(invalid(
                "version",
                format!(
                    "this agent reads version {CONFIG_VERSION}, not {}",
                    self.version
                ),
            ));
        }
        if self.targets.is_empty() {
            return Err(invalid(
                "target",
                "nothing to trace: add a [[target]] with exe, name or pidfile".into(),
            ));
        }
        for (i, t) in self.targets.iter().enumerate() {
            let given = [t.exe.is_some(), t.name.is_some(), t.pidfile.is_some()]
                .iter()
                .filter(|g| **g)
                .count();
            if given != 1 {
                return Err(invalid(
                    &format!("target[{i}]"),
                    format!("give exactly one of exe, name, pidfile (found {given})"),
                ));
            }
            if let Some(exe) = &t.exe
                && !exe.is_absolute()
            {
                return Err(invalid(
                    &format!("target[{i}].exe"),
                    format!("{} is not an absolute path", exe.display()),
                ));
            }
            for (key, user) in [("owner", &t.owner), ("user", &t.user)] {
                if let Some(u) = user
                    && u.ids().is_none()
                {
                    return Err(invalid(
                        &format!("target[{i}].{key}"),
                        format!("no user {} (a name or a uid)", u.0),
                    ));
                }
            }
            if t.user.is_some() && t.exe.is_some() {
                return Err(invalid(
                    &format!("target[{i}].user"),
                    "applies to name and pidfile targets (an exe target traces every process of the executable)".into(),
                ));
            }
        }
        let trace = &self.trace;
        if trace.functions.is_empty()
            && trace.args.is_empty()
            && !trace.mpi
            && trace.usdt.is_empty()
            && !trace.python
            && !trace.syscalls
            && trace.sample_hz == 0
        {
            return Err(invalid(
                "trace",
                "nothing would be recorded: give functions, usdt, syscalls or sample_hz".into(),
            ));
        }
        for (key, list, args) in [
            ("trace.functions", &trace.functions, false),
            ("trace.args", &trace.args, true),
        ] {
            for (i, p) in list.iter().enumerate() {
                FunctionPattern::parse(p, args)
                    .map_err(|e| invalid(&format!("{key}[{i}]"), e.to_string()))?;
            }
        }
        for (i, p) in trace.usdt.iter().enumerate() {
            UsdtPattern::parse(p)
                .map_err(|e| invalid(&format!("trace.usdt[{i}]"), e.to_string()))?;
        }
        let ring = trace.ring_size.0;
        if !ring.is_power_of_two() || !(4096..=1 << 30).contains(&ring) {
            return Err(invalid(
                "trace.ring_size",
                format!("{ring} is not a power of two between 4 KiB and 1 GiB"),
            ));
        }
        let rec = &self.recorder;
        if rec.max_disk.0 < 1 << 20 {
            return Err(invalid(
                "recorder.max_disk",
                "below 1 MiB no useful history fits".into(),
            ));
        }
        // Two files and one ring's worth of records (what one drain can add
        // before the limit is checked again) must fit.
        if rec.file_bytes() * 2 + ring > rec.max_disk.0 {
            return Err(invalid(
                "recorder.file_size",
                format!(
                    "two files of {} and the ring ({}) do not fit in max_disk {}",
                    format_size(rec.file_bytes()),
                    format_size(ring),
                    format_size(rec.max_disk.0)
                ),
            ));
        }
        if rec.file_bytes() < 64 << 10 {
            return Err(invalid(
                "recorder.file_size",
                "below 64 KiB a file is mostly its own metadata".into(),
            ));
        }
        if rec.file_age.0 < Duration::from_secs(1) {
            return Err(invalid("recorder.file_age", "at least 1s".into()));
        }
        if rec.max_age.0 < rec.file_age.0 {
            return Err(invalid(
                "recorder.max_age",
                "shorter than recorder.file_age: no closed file would be kept".into(),
            ));
        }
        if rec.preamble.0 > rec.preamble_total.0 {
            return Err(invalid(
                "recorder.preamble",
                "larger than recorder.preamble_total".into(),
            ));
        }
        if rec.max_snapshots_disk.0 < 1 << 20 {
            return Err(invalid(
                "recorder.max_snapshots_disk",
                "below 1 MiB no snapshot fits".into(),
            ));
        }
        if !(0.0..=100.0 * 1024.0).contains(&self.budget.max_cpu_percent) {
            return Err(invalid(
                "budget.max_cpu_percent",
                "a percentage of one core, 0 for no limit".into(),
            ));
        }
        if self.budget.patience == 0 {
            return Err(invalid("budget.patience", "at least 1 second".into()));
        }
        let a = &self.analysis;
        if a.interval.0 < Duration::from_secs(1) {
            return Err(invalid("analysis.interval", "at least 1s".into()));
        }
        if a.window.0 < a.interval.0 {
            return Err(invalid(
                "analysis.window",
                "shorter than analysis.interval: some records would never be evaluated".into(),
            ));
        }
        if a.max_window_bytes.0 < 256 << 10 {
            return Err(invalid(
                "analysis.max_window_bytes",
                "below 256 KiB an evaluation sees too little".into(),
            ));
        }
        if !(0.0..=1.0).contains(&a.alert_score) {
            return Err(invalid(
                "analysis.alert_score",
                "suspect scores are between 0 and 1".into(),
            ));
        }
        for (key, file) in [
            ("analysis.model", &a.model),
            ("analysis.peers_thresholds", &a.peers_thresholds),
        ] {
            if let Some(f) = file {
                match std::fs::metadata(f) {
                    Ok(m) if m.is_file() && m.len() <= MAX_ANALYSIS_FILE => {}
                    Ok(m) if m.is_file() => {
                        return Err(invalid(
                            key,
                            format!(
                                "{} is larger than {}",
                                f.display(),
                                format_size(MAX_ANALYSIS_FILE)
                            ),
                        ));
                    }
                    _ => return Err(invalid(key, format!("{} does not exist", f.display()))),
                }
            }
        }
        if a.model.is_some() || a.peers_thresholds.is_some() {
            match a.user.ids() {
                None => {
                    return Err(invalid(
                        "analysis.user",
                        format!("no user {} (a name or a uid)", a.user.0),
                    ));
                }
                Some((0, _)) => {
                    return Err(invalid(
                        "analysis.user",
                        "the analysis process parses what traced programs wrote: never as root"
                            .into(),
                    ));
                }
                Some(_) => {}
            }
            self.analyzer_path()
                .map_err(|message| invalid("analysis.analyzer", message))?;
            if a.max_memory.0 < 64 << 20 {
                return Err(invalid("analysis.max_memory", "at least 64 MiB".into()));
            }
            if a.timeout.0 < Duration::from_secs(1) {
                return Err(invalid("analysis.timeout", "at least 1s".into()));
            }
        }
        Ok(())
    }

    /// The `analyzer` binary to run for live analysis: `analysis.analyzer`,
    /// else the one beside this executable, else on PATH; owned by root and
    /// writable by nobody else. The error says what to set.
    pub fn analyzer_path(&self) -> Result<PathBuf, String> {
        let candidate = match &self.analysis.analyzer {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .ok()
                .and_then(|exe| Some(exe.parent()?.join("analyzer")))
                .filter(|p| p.is_file())
                .or_else(|| {
                    std::env::var_os("PATH").and_then(|paths| {
                        std::env::split_paths(&paths)
                            .map(|d| d.join("analyzer"))
                            .find(|p| p.is_file())
                    })
                })
                .ok_or("no analyzer binary beside tracer or on PATH: set analysis.analyzer")?,
        };
        crate::trust::check(&candidate, crate::trust::Kind::File, &[])
            .map_err(|e| format!("the analyzer binary is not trusted: {e}"))
    }

    /// The recording settings for these targets, given the executables they
    /// resolve to now, minus what load shedding took away.
    pub fn record_config(
        &self,
        exes: &[PathBuf],
        sampling: bool,
        excluded: &[String],
        output: PathBuf,
    ) -> Result<RecordConfig, RecordError> {
        let t = &self.trace;
        let (functions, usdt, usdt_semaphores) = ProbeChoice {
            functions: &t.functions,
            args: &t.args,
            entries: &[],
            mpi: t.mpi,
            usdt: &t.usdt,
            usdt_semaphores: &[],
            python: t.python,
        }
        .parse()?;
        Ok(RecordConfig {
            targets: exes.iter().cloned().map(Target::Exe).collect(),
            functions,
            exclude_functions: excluded.to_vec(),
            usdt,
            usdt_semaphores,
            syscalls: t.syscalls,
            cpu_times: t.mpi,
            sample_hz: if sampling { t.sample_hz } else { 0 },
            sample_all: t.sample_all,
            follow: t.follow_children,
            ring_bytes: t.ring_size.0 as u32,
            flush_interval: Duration::from_millis(250),
            output,
            argv: std::env::args().collect(),
            skip_unusable: true,
            overhead_percent: t.overhead.map(|p| p.0),
            overhead_keep: t.overhead.and(self.budget_keep()),
            ..RecordConfig::default()
        })
    }

    /// With a budget and a model to score against, the model's functions
    /// are the budget's last to drop (as `record --like`): units of trees
    /// learned with a function a capture lacks cannot be judged. A model
    /// that cannot be read here is said in the log and the budget goes on
    /// without it (the analysis process reports the file itself).
    fn budget_keep(&self) -> Option<crate::overhead::Keep> {
        let path = self.analysis.model.as_ref()?;
        match crate::overhead::Keep::from_model_file(path) {
            Ok(keep) => Some(keep),
            Err(e) => {
                log::warn!("the overhead budget does not keep a model's functions: {e}");
                None
            }
        }
    }

    /// Where alerts go.
    pub fn alerts_path(&self) -> PathBuf {
        self.agent
            .alerts
            .clone()
            .unwrap_or_else(|| self.agent.state_dir.join("alerts.jsonl"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AgentConfig, ConfigError> {
        AgentConfig::parse(text, Path::new("agent.toml"))
    }

    const MINIMAL: &str = "[[target]]\nexe = \"/usr/bin/true\"\n[trace]\nfunctions = [\"main\"]\n";

    #[test]
    fn the_example_is_valid() {
        let c = parse(EXAMPLE).expect("packaging/agent.toml parses");
        assert!(!c.targets.is_empty());
    }

    #[test]
    fn the_probe_budget_is_a_percentage_passed_to_each_session() {
        for text in ["\"5%\"", "5", "5.0"] {
            let c = parse(&format!("{MINIMAL}overhead = {text}\n")).expect(text);
            assert_eq!(c.trace.overhead, Some(Percent(5.0)), "{text}");
            let r = c
                .record_config(&[PathBuf::from("/usr/bin/true")], true, &[], "x".into())
                .expect("record config");
            assert_eq!(r.overhead_percent, Some(5.0));
        }
        for bad in ["\"0%\"", "\"120%\"", "\"five\""] {
            let e = parse(&format!("{MINIMAL}overhead = {bad}\n")).expect_err(bad);
            assert!(format!("{e:#}").contains("percent"), "{bad}: {e:#}");
        }
        assert_eq!(parse(MINIMAL).expect("minimal").trace.overhead, None);
    }

    /// With a budget and a model, the budget keeps the model's functions
    /// (as `record --like`); without a budget, or without a model, nothing
    /// is kept.
    #[test]
    fn the_budget_keeps_the_functions_of_the_model_scored_against() {
        let dir = tempfile::tempdir().expect("tempdir");
        let model = dir.path().join("model.json");
        std::fs::write(
            &model,
            r#"{"version":6,"left_out":["old"],"groups":[{"signature":["main@_start+0x1"],
            "handlers":{"k":{"nodes":[{"parent":null,"site":"loop+0x1","callee":"serve","p_sum":1.0}]}}}]}"#,
        )
        .expect("write");
        let keep = |text: &str| {
            let mut c = parse(text).expect(text);
            c.analysis.model = Some(model.clone());
            c.record_config(&[PathBuf::from("/usr/bin/true")], true, &[], "x".into())
                .expect("record config")
                .overhead_keep
        };
        let kept = keep(&format!("{MINIMAL}overhead = \"5%\"\n")).expect("kept");
        assert!(kept.has("serve") && kept.has("main") && !kept.has("old"));
        assert_eq!(keep(MINIMAL), None, "no budget, nothing to order");
        std::fs::write(&model, "not a model").expect("write");
        assert_eq!(keep(&format!("{MINIMAL}overhead = \"5%\"\n")), None);
    }

    #[test]
    fn defaults_fill_what_is_not_given() {
        let c = parse(MINIMAL).expect("minimal config");
        assert_eq!(c.recorder.max_disk, Size(1 << 30));
        assert_eq!(c.recorder.file_bytes(), 128 << 20);
        assert_eq!(c.analysis.interval, Span(Duration::from_secs(10)));
        assert!(c.trace.syscalls);
    }

    #[test]
    fn errors_name_the_key() {
        let cases: &[(&str, &str)] = &[
            (
                "[[target]]\nexe = \"/usr/bin/true\"\n[recorder]\nmax_disc = \"1G\"\n",
                "max_disc",
            ),
            (
                "[[target]]\nexe = \"/usr/bin/true\"\n[recorder]\nmax_disk = \"12X\"\n",
                "max_disk",
            ),
            (
                "[[target]]\nexe = \"/usr/bin/true\"\nname = \"x\"\n",
                "target[0]",
            ),
            ("[[target]]\nexe = \"bin/true\"\n", "target[0].exe"),
            (
                "[[target]]\nexe = \"/usr/bin/true\"\n[trace]\nfunctions = [\"ok\", \"[oops\"]\n",
                "trace.functions[1]",
            ),
            (
                "[[target]]\nexe = \"/usr/bin/true\"\n[trace]\nring_size = \"3M\"\n",
                "trace.ring_size",
            ),
            (
                "[[target]]\nexe = \"/usr/bin/true\"\n[recorder]\nmax_disk = \"4M\"\nfile_size = \"3M\"\n",
                "recorder.file_size",
            ),
            (
                "[[target]]\nexe = \"/usr/bin/true\"\n[analysis]\nmodel = \"/nonexistent/model.json\"\n",
                "analysis.model",
            ),
            (
                "[[target]]\nexe = \"/usr/bin/true\"\n[analysis]\ninterval = \"ten seconds\"\n",
                "interval",
            ),
            (
                "version = 2\n[[target]]\nexe = \"/usr/bin/true\"\n",
                "version",
            ),
            ("[trace]\nfunctions = [\"main\"]\n", "target"),
        ];
        for (text, key) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(key), "{text:?}: {err}");
        }
    }

    #[test]
    fn record_config_follows_the_file() {
        let c = parse(
            "[[target]]\nexe = \"/usr/bin/true\"\n[trace]\nfunctions = [\"a*\"]\nargs = [\"b\"]\nsample_hz = 49\npython = true\n",
        )
        .expect("config");
        let r = c
            .record_config(
                &[PathBuf::from("/usr/bin/true")],
                false,
                &["a1".to_string()],
                PathBuf::from("x.capture"),
            )
            .expect("checked patterns parse");
        assert_eq!(r.functions.len(), 2);
        assert_eq!(r.sample_hz, 0, "sampling shed");
        assert_eq!(r.exclude_functions, ["a1"]);
        assert_eq!(r.usdt.len(), crate::usdt::PYTHON_PROBES.len());
        assert_eq!(r.targets, [Target::Exe(PathBuf::from("/usr/bin/true"))]);
    }
}
