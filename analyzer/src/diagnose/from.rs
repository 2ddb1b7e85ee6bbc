//! Each analysis's report as findings: the conclusions the analyses already
//! drew, re-keyed so that findings about one suspect meet.

use super::{AnalysisKind, AnalysisResult, Finding, Level, Status};
use crate::{
    automaded,
    mpi::{
        self,
        verdict::{Outcome as MpiOutcome, Verdict as MpiVerdict},
        waitfor::HangReport,
    },
    peers::{self, Outcome as PeersOutcome},
    score::{Evidence, ScoreReport, UnitScore, Verdict as ScoreVerdict, why},
};

/// Anomalous units listed per suspect process.
const UNITS_PER_PROCESS: usize = 5;
/// Functions listed per faulty server and metric, or per abnormal rank.
const FUNCTIONS_PER_SUSPECT: usize = 3;

/// The servers of a run: one per capture when there are several (labelled
/// by the file stem, as `analyzer peers` labels them), else the hosts.
#[derive(Clone, Debug, Default)]
pub struct RunServers {
    /// (capture path, label, host) per capture.
    captures: Vec<(String, String, String)>,
    /// (host, MPI rank, pid) of the run's ranks, when it has MPI calls.
    ranks: Vec<(String, u32, u32)>,
}

impl RunServers {
    /// From (capture path, host) per capture of the run.
    pub fn new(captures: &[(String, String)]) -> Self {
        let several = captures.len() > 1;
        Self {
            captures: captures
                .iter()
                .map(|(path, host)| {
                    let label = if several {
                        std::path::Path::new(path)
                            .file_stem()
                            .map_or_else(|| path.clone(), |s| s.to_string_lossy().into_owned())
                    } else {
                        host.clone()
                    };
                    (path.clone(), label, host.clone())
                })
                .collect(),
            ranks: Vec::new(),
        }
    }

    /// The run's MPI ranks: (host, rank, pid) each.
    pub fn with_ranks(mut self, ranks: Vec<(String, u32, u32)>) -> Self {
        self.ranks = ranks;
        self
    }

    /// The process key of MPI rank `rank` on `host`, if the run has it.
    pub fn rank_key(&self, host: &str, rank: u32) -> Option<String> {
        self.ranks
            .iter()
            .find(|(h, r, _)| h == host && *r == rank)
            .map(|(_, _, pid)| process_key(&self.of_host(host), *pid))
    }

    /// How many servers the run has.
    pub fn count(&self) -> usize {
        let mut labels: Vec<&str> = self.captures.iter().map(|c| c.1.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        labels.len()
    }

    /// The server of something recorded in capture `path` on `host`.
    pub fn of_capture(&self, path: &str, host: &str) -> String {
        self.captures
            .iter()
            .find(|c| c.0 == path)
            .map_or_else(|| self.of_host(host), |c| c.1.clone())
    }

    /// The server of something that ran on `host` (its capture's label when
    /// one capture comes from that host).
    pub fn of_host(&self, host: &str) -> String {
        let mut on: Vec<&(String, String, String)> =
            self.captures.iter().filter(|c| c.2 == host).collect();
        on.dedup_by(|a, b| a.1 == b.1);
        match on.as_slice() {
            [one] => one.1.clone(),
            _ => host.to_string(),
        }
    }
}

fn process_key(server: &str, pid: u32) -> String {
    format!("{server}/{pid}")
}

/// The call site of a call path's last call (`a > b@site > c@x+0x1` →
/// `x+0x1`).
pub fn site_of(path: &str) -> Option<&str> {
    let last = path.rsplit(" > ").next().unwrap_or(path);
    last.split_once('@')
        .map(|(_, site)| site)
        .filter(|s| !s.is_empty())
}

/// The function a call path ends in (`a > b@site > c@site` → `c`).
pub fn function_of(path: &str) -> &str {
    let last = path.rsplit(" > ").next().unwrap_or(path);
    last.split('@').next().unwrap_or(last)
}

/// The model-based scores.
pub fn model(report: &ScoreReport, servers: &RunServers) -> AnalysisResult {
    let status = match report.verdict {
        ScoreVerdict::Anomalous => Status::Found,
        ScoreVerdict::NothingStandsOut => Status::NothingStandsOut,
        ScoreVerdict::NoUnits => Status::NoData,
        // Nothing concluded about the units not judged, and nothing found
        // in the others: no conclusion, said as such.
        ScoreVerdict::CannotJudge => Status::NoData,
    };
    let mut notes = Vec::new();
    if !report.calibrated {
        notes.push(
            "the model has no normal ranges (learned from one capture or with --no-calibrate): only new calls and units with no model count as anomalous"
                .to_string(),
        );
    }
    let mut findings = Vec::new();
    for p in &report.suspects {
        let Some(first) = report.units.get(p.first) else {
            continue;
        };
        let server = servers.of_capture(&p.capture, &p.host);
        let process = process_key(&server, p.pid);
        let name = format!("{}[{}]", p.comm, p.pid);
        let wall_ns = deviated(first);
        findings.push(Finding {
            analysis: AnalysisKind::Model,
            level: Level::Server,
            key: server.clone(),
            name: server.clone(),
            parent: None,
            evidence: "anomalous units".into(),
            score: None,
            normal: None,
            wall_ns,
            at_s: Some(first.deviated_s),
            detail: format!("its process {name} behaves as no normal run did"),
            site: None,
            source: None,
        });
        findings.push(Finding {
            analysis: AnalysisKind::Model,
            level: Level::Process,
            key: process.clone(),
            name: name.clone(),
            parent: Some(server.clone()),
            evidence: "anomalous units".into(),
            score: Some(first.score),
            normal: first.normal,
            wall_ns,
            at_s: Some(first.deviated_s),
            detail: format!(
                "{} of its {} execution units behave as no normal run did, first its {} ({})",
                p.anomalous,
                p.units,
                first.kind.name(),
                why(first)
            ),
            site: None,
            source: None,
        });
        let units = report
            .units
            .iter()
            .filter(|u| u.anomalous && u.capture == p.capture && u.pid == p.pid)
            .take(UNITS_PER_PROCESS);
        for u in units {
            findings.push(Finding {
                analysis: AnalysisKind::Model,
                level: Level::Unit,
                key: format!("{process}/{}/{}", u.tid, u.start_ns),
                name: format!(
                    "{name} tid {} {} at {:.3} s{}",
                    u.tid,
                    u.kind.name(),
                    u.t_s,
                    u.peer
                        .as_deref()
                        .map(|p| format!(" (peer {p})"))
                        .unwrap_or_default()
                ),
                parent: Some(process.clone()),
                evidence: "anomalous unit".into(),
                score: Some(u.score),
                normal: u.normal,
                wall_ns: deviated(u),
                at_s: Some(u.deviated_s),
                detail: why(u),
                site: None,
                source: None,
            });
            findings.extend(functions_of(u, &process));
        }
    }
    let not_judged = report
        .not_judged
        .iter()
        .map(|p| process_key(&servers.of_capture(&p.capture, &p.host), p.pid))
        .collect();
    for p in &report.not_judged {
        notes.push(format!(
            "cannot judge {} of the {} units of {}[{}]@{}: its capture's overhead budget detached {}, which the model learned their trees with",
            p.units,
            p.of,
            p.comm,
            p.pid,
            p.host,
            p.functions.join(", ")
        ));
    }
    AnalysisResult {
        analysis: AnalysisKind::Model,
        status,
        summary: report.summary.clone(),
        reason: (status == Status::NoData).then(|| report.summary.clone()),
        untrained: false,
        notes,
        not_judged,
        findings,
    }
}

/// When a unit deviated, wall clock (its start when unknown).
fn deviated(u: &UnitScore) -> Option<u64> {
    Some(if u.deviated_wall_ns > 0 {
        u.deviated_wall_ns
    } else {
        u.wall_ns
    })
    .filter(|ns| *ns > 0)
}

/// The call paths a unit's evidence names.
fn functions_of(u: &UnitScore, process: &str) -> Vec<Finding> {
    let mut paths: Vec<(String, &str)> = Vec::new();
    for e in &u.evidence {
        match e {
            Evidence::NewCall { paths: p, .. } => {
                paths.extend(
                    p.iter()
                        .map(|p| (p.clone(), "a call no normal run made here")),
                );
            }
            Evidence::Skipped { paths: p, .. } => {
                paths.extend(
                    p.iter()
                        .map(|p| (p.clone(), "skipped, where normal runs call it")),
                );
            }
            Evidence::Open {
                frames,
                waiting: false,
                ..
            } => {
                if let Some(f) = frames.last() {
                    paths.push((f.clone(), "never returned"));
                }
            }
            Evidence::NewBehaviour { .. } => {
                if let Some(n) = u.behaviour.as_ref().and_then(|b| b.nearest.as_ref()) {
                    paths.extend(
                        n.extra
                            .iter()
                            .map(|p| (p.clone(), "called, unlike the nearest normal behaviour")),
                    );
                    paths.extend(
                        n.missing
                            .iter()
                            .map(|p| (p.clone(), "missing, unlike the nearest normal behaviour")),
                    );
                }
            }
            Evidence::OutOfOrder { this, .. } => {
                paths.extend(this.split(", ").map(|f| {
                    (
                        f.to_string(),
                        "called where normal runs call something else",
                    )
                }));
            }
            _ => {}
        }
    }
    paths
        .into_iter()
        .take(FUNCTIONS_PER_SUSPECT)
        .map(|(path, what)| Finding {
            analysis: AnalysisKind::Model,
            level: Level::Function,
            key: function_of(&path).to_string(),
            name: function_of(&path).to_string(),
            parent: Some(process.to_string()),
            evidence: what.to_string(),
            score: Some(u.score),
            normal: u.normal,
            wall_ns: deviated(u),
            at_s: Some(u.deviated_s),
            detail: format!("{what}: {path}"),
            site: site_of(&path).map(str::to_string),
            source: None,
        })
        .collect()
}

/// The peer comparison; `untrained` when its thresholds were not learned
/// from normal runs.
pub fn peers(report: &peers::Report, untrained: bool) -> AnalysisResult {
    let status = match report.verdict.outcome {
        PeersOutcome::Faulty => Status::Found,
        PeersOutcome::NoneStandsOut => Status::NothingStandsOut,
        PeersOutcome::NoData => Status::NoData,
    };
    let mut notes: Vec<String> = report
        .verdict
        .no_data
        .iter()
        .map(|s| {
            let reason = s.reason.split_whitespace().collect::<Vec<_>>().join(" ");
            format!("no data for {}: {reason}", s.metric.name())
        })
        .collect();
    // Some notes are wrapped for a terminal: one line each here.
    notes.extend(
        report
            .notes
            .iter()
            .map(|n| n.split_whitespace().collect::<Vec<_>>().join(" ")),
    );
    let mut findings = Vec::new();
    for f in &report.verdict.faulty {
        let sv = report.servers.iter().find(|s| s.server == f.server);
        let first = sv
            .and_then(|s| s.first_faulty_window)
            .and_then(|w| report.windows.get(w));
        let mut clauses = Vec::new();
        let mut worst: Option<(f64, f64)> = None;
        for m in &f.metrics {
            // The highest anomalous score of the metric, with its threshold.
            let top = report
                .windows
                .iter()
                .flat_map(|w| w.servers.iter().filter(|s| s.server == f.server))
                .filter_map(|s| s.metrics.get(m))
                .filter(|c| c.anomalous)
                .map(|c| (c.score, c.threshold))
                .reduce(|a, b| if b.0 > a.0 { b } else { a });
            let windows = sv
                .and_then(|s| s.anomalous_windows.get(m))
                .copied()
                .unwrap_or(0);
            if let Some((score, threshold)) = top {
                // What differs most, for a metric whose components are
                // not functions (those are function suspects below).
                let most = report
                    .root_causes
                    .iter()
                    .filter(|rc| rc.server == f.server && rc.metric == *m && !names_calls(*m))
                    .flat_map(|rc| rc.top.iter().take(FUNCTIONS_PER_SUSPECT))
                    .map(|c| {
                        format!(
                            "{} {:+.2} {}",
                            c.component,
                            c.mean_delta,
                            m.unit_of(&report.normalized)
                        )
                    })
                    .collect::<Vec<_>>();
                clauses.push(format!(
                    "{}: {:.1}x the threshold away from its peers' (distance {score:.1} vs {threshold:.1} {}; metric {}) in {windows} windows{}",
                    in_words(*m),
                    score / threshold.max(f64::MIN_POSITIVE),
                    m.unit_of(&report.normalized),
                    m.name(),
                    if most.is_empty() {
                        String::new()
                    } else {
                        format!(", most off the median server: {} per window", most.join(", "))
                    }
                ));
                let ratio = |(s, t): (f64, f64)| s / t.max(f64::MIN_POSITIVE);
                if worst.is_none_or(|w| ratio(w) < ratio((score, threshold))) {
                    worst = Some((score, threshold));
                }
            }
        }
        let retransmits: u64 = sv.map_or(0, |s| s.retransmit_peers.values().sum());
        if retransmits > 0 {
            clauses.push(format!("{retransmits} TCP retransmissions over the run"));
        }
        findings.push(Finding {
            analysis: AnalysisKind::Peers,
            level: Level::Server,
            key: f.server.clone(),
            name: f.server.clone(),
            parent: None,
            evidence: f
                .metrics
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", "),
            score: worst.map(|w| w.0),
            normal: worst.map(|w| w.1),
            wall_ns: first.map(|w| w.start_ns),
            at_s: Some(f.from_s),
            detail: format!(
                "{}{}",
                clauses.join("; "),
                if untrained {
                    " (untrained comparison)"
                } else {
                    ""
                }
            ),
            site: None,
            source: None,
        });
    }
    // Function suspects: the functions and system calls that differ most
    // on a server the comparison calls faulty (not one that deviated only
    // briefly), for the metrics whose components are calls.
    for rc in report.root_causes.iter().filter(|rc| {
        names_calls(rc.metric) && report.verdict.faulty.iter().any(|f| f.server == rc.server)
    }) {
        let first = report
            .servers
            .iter()
            .find(|s| s.server == rc.server)
            .and_then(|s| s.first_faulty_window)
            .and_then(|w| report.windows.get(w));
        for c in rc.top.iter().take(FUNCTIONS_PER_SUSPECT) {
            findings.push(Finding {
                analysis: AnalysisKind::Peers,
                level: Level::Function,
                key: c.component.clone(),
                name: c.component.clone(),
                parent: Some(rc.server.clone()),
                evidence: format!("{} differs", rc.metric.name()),
                score: Some(c.distance),
                normal: None,
                wall_ns: first.map(|w| w.start_ns),
                at_s: None,
                detail: format!(
                    "{} on {}: {} than the median server ({:+.2} {} per window)",
                    rc.metric.name(),
                    rc.server,
                    if c.mean_delta >= 0.0 { "more" } else { "less" },
                    c.mean_delta,
                    rc.metric.unit_of(&report.normalized)
                ),
                site: None,
                source: None,
            });
        }
    }
    AnalysisResult {
        analysis: AnalysisKind::Peers,
        status,
        summary: report.verdict.summary.clone(),
        reason: (status == Status::NoData).then(|| report.verdict.summary.clone()),
        untrained,
        notes,
        not_judged: Vec::new(),
        findings,
    }
}

/// Whether a peer metric's components are functions or system calls (a
/// function-level suspect), not classes of file I/O, block operations,
/// traffic directions or CPU states.
fn names_calls(m: peers::Metric) -> bool {
    use peers::Metric as M;
    matches!(
        m,
        M::Samples
            | M::Count
            | M::Time
            | M::Latency
            | M::Syscalls
            | M::SyscallTime
            | M::SyscallLatency
    )
}

/// A peer metric as an administrator names it.
fn in_words(m: peers::Metric) -> &'static str {
    use peers::Metric as M;
    match m {
        M::Samples => "CPU samples",
        M::Count => "calls of traced functions",
        M::Time => "times in traced functions",
        M::Retransmits => "TCP retransmissions",
        M::SocketBytes => "socket bytes",
        M::Syscalls => "system calls",
        M::SyscallTime => "times in system calls",
        M::Latency => "times per call of traced functions",
        M::SyscallLatency => "times per system call",
        M::FileIo => "file I/O calls",
        M::FileTime => "times in file I/O calls",
        M::FileLatency => "times per file I/O call",
        M::BlockRequests => "disk requests",
        M::BlockBytes => "disk bytes",
        M::BlockTime => "disk request times",
        M::BlockLatency => "times per disk request",
        M::NetBytes => "network traffic of its namespace",
        M::NetForeign => "traffic in its namespace that is not its own",
        M::NetErrors => "network drops and errors",
        M::CpuWait => "time waiting for a CPU",
    }
}

/// One of the MPI analyses, from its verdict (one shape for all of them).
/// `since` gives when a suspect rank's evidence began (wall clock ns, and
/// seconds into the run), when the analysis knows.
fn mpi_verdict(
    kind: AnalysisKind,
    v: &MpiVerdict,
    servers: &RunServers,
    since: &mut SuspectSince<'_>,
) -> AnalysisResult {
    let status = match v.outcome {
        MpiOutcome::Abnormal => Status::Found,
        MpiOutcome::NothingAbnormal => Status::NothingStandsOut,
        MpiOutcome::NotMonitored => Status::NoData,
    };
    let notes = v
        .not_monitored
        .iter()
        .map(|u| format!("rank {} ({}) not monitored: {}", u.rank, u.host, u.reason))
        .collect();
    let not_judged = v
        .not_monitored
        .iter()
        .filter_map(|u| servers.rank_key(&u.host, u.rank))
        .collect();
    let mut findings = Vec::new();
    for s in &v.suspects {
        let server = servers.of_host(&s.host);
        let (wall_ns, at_s) = since(s);
        let detail = format!(
            "{} {:.3} over its threshold {:.3}{}",
            s.evidence,
            s.score,
            s.threshold,
            if s.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", s.detail)
            }
        );
        findings.push(Finding {
            analysis: kind,
            level: Level::Server,
            key: server.clone(),
            name: server.clone(),
            parent: None,
            evidence: s.evidence.clone(),
            score: Some(s.score),
            normal: Some(s.threshold),
            wall_ns,
            at_s,
            detail: format!("its rank {}: {detail}", s.rank),
            site: None,
            source: None,
        });
        findings.push(Finding {
            analysis: kind,
            level: Level::Process,
            key: process_key(&server, s.pid),
            name: format!("rank {} (pid {}, CPUs {:?})", s.rank, s.pid, s.cpus),
            parent: Some(server),
            evidence: s.evidence.clone(),
            score: Some(s.score),
            normal: Some(s.threshold),
            wall_ns,
            at_s,
            detail,
            site: None,
            source: None,
        });
    }
    AnalysisResult {
        analysis: kind,
        status,
        summary: v.summary.clone(),
        reason: (status == Status::NoData).then(|| v.summary.clone()),
        untrained: false,
        notes,
        not_judged,
        findings,
    }
}

/// MPI interference (002).
pub fn interference(d: &mpi::Detection, servers: &RunServers) -> AnalysisResult {
    let mut r = mpi_verdict(AnalysisKind::Interference, &d.verdict, servers, &mut |_| {
        (None, None)
    });
    if let Some(note) = d.pace_note() {
        r.notes.push(note);
    }
    r
}

/// Outlier ranks (004): the verdict, and the abnormal edges of the ranks
/// it names from the ranking, when there is one.
pub fn outliers(
    j: &automaded::verdict::Judgement,
    analysis: Option<&automaded::Analysis>,
    servers: &RunServers,
) -> AnalysisResult {
    // Computation beyond habit showed from the rank's worst phase (the
    // other kinds of evidence are over the whole run: no time).
    let mut r = mpi_verdict(AnalysisKind::Outliers, &j.verdict, servers, &mut |s| {
        let phase = j
            .phases
            .get(&s.rank)
            .filter(|_| s.evidence == automaded::verdict::BEYOND_HABIT);
        (None, phase.map(|p| p.from_s))
    });
    if j.clean_runs == 0 {
        r.notes.push(
            "no clean runs given: each rank was judged against its own phases and the other ranks"
                .into(),
        );
    }
    let Some(a) = analysis else { return r };
    for s in &j.verdict.suspects {
        let server = servers.of_host(&s.host);
        let Some(task) = a.abnormal.iter().find(|t| t.score.rank == s.rank) else {
            continue;
        };
        for e in task.edges.iter().take(FUNCTIONS_PER_SUSPECT) {
            let name = format!("{} → {}", e.from_label, e.to_label);
            r.findings.push(Finding {
                analysis: AnalysisKind::Outliers,
                level: Level::Function,
                key: name.clone(),
                name,
                parent: Some(process_key(&server, s.pid)),
                evidence: "abnormal edge".into(),
                score: Some(e.contribution),
                normal: None,
                wall_ns: None,
                at_s: None,
                detail: format!(
                    "rank {}'s transition {} → {} {}",
                    s.rank,
                    e.from_label,
                    e.to_label,
                    match (&e.task, &e.reference) {
                        (Some(t), Some(r)) => format!(
                            "taken {} times at p={:.2} (reference: {} at p={:.2})",
                            t.count, t.prob, r.count, r.prob
                        ),
                        (Some(t), None) => {
                            format!("taken {} times, never by its reference", t.count)
                        }
                        (None, _) => "never taken, unlike its reference".into(),
                    }
                ),
                site: None,
                source: None,
            });
        }
    }
    r
}

/// When an MPI analysis's suspect began to show: wall clock (ns since the
/// epoch) and seconds into the run, when known.
type SuspectSince<'a> = dyn FnMut(&mpi::verdict::Suspect) -> (Option<u64>, Option<f64>) + 'a;

/// When a rank made its last MPI transition: wall clock (ns since the
/// epoch) and seconds into its capture, when known.
pub type LastProgress<'a> = dyn FnMut(&mpi::waitfor::RankWait) -> (Option<u64>, Option<f64>) + 'a;

/// Hang detection: its verdict, and where each culprit stood. `site`
/// labels a rank's call site; `since` says when the rank last made MPI
/// progress, which is when a hung rank's suspicion began.
pub fn hang(
    report: &HangReport,
    verdict: &MpiVerdict,
    servers: &RunServers,
    site: &mut dyn FnMut(&mpi::waitfor::RankWait) -> String,
    since: &mut LastProgress<'_>,
) -> AnalysisResult {
    let mut r = mpi_verdict(AnalysisKind::Hang, verdict, servers, &mut |s| {
        report.rank(s.rank).map_or((None, None), &mut *since)
    });
    if !report.hung {
        // Not hung: nothing to say at any level (the verdict says so).
        r.findings.clear();
        if r.status == Status::Found {
            r.status = Status::NothingStandsOut;
        }
        return r;
    }
    if report.culprits.is_empty() {
        // Hung, but no rank holds the others up that the wait-for graph
        // can tell: every stuck rank is a suspect, not "nothing".
        for w in report.ranks.iter().filter(|w| {
            w.state != mpi::waitfor::RankState::Finished && w.idle_ns >= report.threshold_ns
        }) {
            let server = servers.of_host(&w.host);
            let (wall_ns, at_s) = since(w);
            r.findings.push(Finding {
                analysis: AnalysisKind::Hang,
                level: Level::Process,
                key: process_key(&server, w.pid),
                name: format!("rank {} (pid {})", w.rank, w.pid),
                parent: Some(server),
                evidence: "hung, culprit not found".into(),
                score: Some(w.idle_ns as f64 / 1e9),
                normal: Some(report.threshold_ns as f64 / 1e9),
                wall_ns,
                at_s,
                detail: format!(
                    "no MPI progress for {:.1} s ({:?}{}); which rank holds the others up could not be told",
                    w.idle_ns as f64 / 1e9,
                    w.state,
                    w.call
                        .as_deref()
                        .map(|c| format!(" in {c}"))
                        .unwrap_or_default()
                ),
                site: None,
                source: None,
            });
        }
        if !r.findings.is_empty() {
            r.status = Status::Found;
        }
    }
    for c in &report.culprits {
        let Some(w) = report.ranks.iter().find(|w| w.rank == c.rank) else {
            continue;
        };
        let server = servers.of_host(&w.host);
        let at = site(w);
        let (wall_ns, at_s) = since(w);
        // Inside an MPI call: that call. Outside MPI (computing, stopped):
        // the code after its last MPI call, named by that call's site.
        let (key, name, detail) = match &w.call {
            Some(call) => (
                function_of(call).to_string(),
                call.clone(),
                format!(
                    "rank {} stood in {call}{} for {:.1} s ({:?}), holding up rank(s) {:?}",
                    c.rank,
                    if at.is_empty() {
                        String::new()
                    } else {
                        format!(" at {at}")
                    },
                    w.idle_ns as f64 / 1e9,
                    w.state,
                    c.blocking
                ),
            ),
            None if !at.is_empty() => (
                function_of(at.split(" (").next().unwrap_or(&at)).to_string(),
                format!("{at}, outside MPI"),
                format!(
                    "rank {} stayed outside MPI for {:.1} s ({:?}) after its last MPI call at {at}, holding up rank(s) {:?}",
                    c.rank,
                    w.idle_ns as f64 / 1e9,
                    w.state,
                    c.blocking
                ),
            ),
            None => continue,
        };
        r.findings.push(Finding {
            analysis: AnalysisKind::Hang,
            level: Level::Function,
            key,
            name,
            parent: Some(process_key(&server, w.pid)),
            evidence: "where the culprit stood".into(),
            score: Some(w.idle_ns as f64 / 1e9),
            normal: Some(report.threshold_ns as f64 / 1e9),
            wall_ns,
            at_s,
            detail,
            site: None,
            source: (!at.is_empty()).then(|| at.clone()),
        });
    }
    r
}
