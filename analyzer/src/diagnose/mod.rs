//! One verdict from every analysis that applies to a run (`analyzer
//! diagnose`): model-based scores (000/001), peer comparison (Kasick et
//! al.), MPI interference (002), outlier ranks (AutomaDeD, 004) and hangs.
//!
//! Each analysis's own report is turned into [`Finding`]s, each about one
//! suspect at one [`Level`] (server, process, unit, function), and an
//! [`AnalysisResult`] that says what the analysis concluded, or why it did
//! not run or had no data. [`combine`] joins findings about the same
//! suspect, ranks suspects per level (more analyses first, then the
//! earliest), and says where analyses disagree. This module sits at the
//! report end of the data flow: it reads reports, never captures.

pub mod from;
pub mod html;
pub mod sources;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of [`Diagnosis`]'s JSON form.
pub const DIAGNOSIS_VERSION: u32 = 1;

/// The analyses `diagnose` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnalysisKind {
    /// Suspect scores of execution units against a model of normal runs.
    Model,
    /// Servers compared with their peers, window by window.
    Peers,
    /// The MPI interference metric per processor.
    Interference,
    /// Ranks whose semi-Markov models differ from the others'.
    Outliers,
    /// Ranks that stopped making MPI progress, and who holds them up.
    Hang,
}

impl AnalysisKind {
    /// Every analysis, in report order.
    pub const ALL: [Self; 5] = [
        Self::Model,
        Self::Peers,
        Self::Interference,
        Self::Outliers,
        Self::Hang,
    ];

    /// A short name (JSON, table cells).
    pub fn name(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Peers => "peers",
            Self::Interference => "interference",
            Self::Outliers => "outliers",
            Self::Hang => "hang",
        }
    }

    /// The analysis in words, with the paper it comes from.
    pub fn title(self) -> &'static str {
        match self {
            Self::Model => "Model-based scores of execution units (Maruyama & Matsuoka)",
            Self::Peers => "Peer comparison of servers (Kasick et al.)",
            Self::Interference => "MPI interference per processor (Tabatabaee & Hollingsworth)",
            Self::Outliers => "Outlier MPI ranks (AutomaDeD, Laguna et al.)",
            Self::Hang => "MPI hang detection",
        }
    }
}

/// What one analysis concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It points at one or more suspects.
    Found,
    /// It judged the run and nothing stands out.
    NothingStandsOut,
    /// It ran but had nothing to judge (no units, no metric with data, no
    /// rank monitored): no conclusion either way.
    NoData,
    /// It does not apply to these inputs, or lacks an input (see `reason`).
    NotRun,
    /// It failed on these inputs (see `reason`).
    Failed,
}

impl Status {
    /// The status in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Found => "suspect found",
            Self::NothingStandsOut => "nothing stands out",
            Self::NoData => "no data: no conclusion",
            Self::NotRun => "not run",
            Self::Failed => "failed",
        }
    }
}

/// The level of a suspect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// A host, or a server recorded in its own capture.
    Server,
    /// A process (a daemon, an MPI rank).
    Process,
    /// An execution unit (a request handler, an initializer...).
    Unit,
    /// A function or call path, or an MPI call at its call site.
    Function,
}

impl Level {
    /// Every level, coarsest first.
    pub const ALL: [Self; 4] = [Self::Server, Self::Process, Self::Unit, Self::Function];

    /// The level in words.
    pub fn name(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Process => "process",
            Self::Unit => "unit",
            Self::Function => "function",
        }
    }

    /// The level in words, plural.
    pub fn plural(self) -> &'static str {
        match self {
            Self::Server => "servers",
            Self::Process => "processes",
            Self::Unit => "units",
            Self::Function => "functions",
        }
    }
}

/// One analysis's evidence against one suspect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The analysis.
    pub analysis: AnalysisKind,
    /// The suspect's level.
    pub level: Level,
    /// What identifies the suspect across analyses: the server label; the
    /// server and pid (`server/pid`); the unit (`server/pid/tid/start`);
    /// the function name.
    pub key: String,
    /// The suspect as people read it (`ring[1234]`, `rank 2 (pid 77)`, a
    /// call path).
    pub name: String,
    /// The key of the suspect it belongs to (a process's server, a unit's
    /// or function's process), if known.
    pub parent: Option<String>,
    /// What kind of evidence (`new call`, `syscall-time`, `hang culprit`).
    pub evidence: String,
    /// Its score, when the analysis has one.
    pub score: Option<f64>,
    /// The highest score normal runs showed, or the threshold the score
    /// went over.
    pub normal: Option<f64>,
    /// When it first showed, wall clock (ns since the epoch), if known.
    pub wall_ns: Option<u64>,
    /// When it first showed, seconds into the run, if known.
    pub at_s: Option<f64>,
    /// The evidence in words.
    pub detail: String,
    /// The call site the evidence is about, symbolized (`caller+0x1a`), when
    /// there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// Its source line (`file.c:42`, inlined frames innermost first), where
    /// the recorded objects' debug information is on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// One analysis: whether it ran, what it concluded, its findings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnalysisResult {
    /// The analysis.
    pub analysis: AnalysisKind,
    /// What it concluded.
    pub status: Status,
    /// Its conclusion in one sentence (its own report's summary).
    pub summary: String,
    /// Why it did not run, had no data or failed.
    pub reason: Option<String>,
    /// Judged without thresholds learned from normal runs (the peer
    /// comparison without `--thresholds`): weaker evidence.
    pub untrained: bool,
    /// Things worth knowing about its input (metrics with no data, ranks
    /// not monitored, losses).
    pub notes: Vec<String>,
    /// Processes it could not judge (keys, as [`Finding::key`]: MPI ranks
    /// not monitored): another analysis's suspect among them is no
    /// disagreement with this one's "nothing stands out".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_judged: Vec<String>,
    /// Its evidence.
    pub findings: Vec<Finding>,
}

impl AnalysisResult {
    /// An analysis that did not run, and why.
    pub fn not_run(analysis: AnalysisKind, reason: impl Into<String>) -> Self {
        Self::without_findings(analysis, Status::NotRun, reason.into())
    }

    /// An analysis that failed, and the error.
    pub fn failed(analysis: AnalysisKind, error: impl Into<String>) -> Self {
        Self::without_findings(analysis, Status::Failed, error.into())
    }

    fn without_findings(analysis: AnalysisKind, status: Status, reason: String) -> Self {
        Self {
            analysis,
            status,
            summary: format!("{}: {reason}", status.describe()),
            reason: Some(reason),
            untrained: false,
            notes: Vec::new(),
            not_judged: Vec::new(),
            findings: Vec::new(),
        }
    }
}

/// A suspect with every analysis's evidence against it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    /// Its level.
    pub level: Level,
    /// Its key (see [`Finding::key`]).
    pub key: String,
    /// Its name for people.
    pub name: String,
    /// The suspects it belongs to (keys).
    pub parents: Vec<String>,
    /// The analyses pointing at it.
    pub analyses: Vec<AnalysisKind>,
    /// Whether only untrained analyses point at it.
    pub untrained_only: bool,
    /// The evidence, earliest first.
    pub findings: Vec<Finding>,
    /// When it first showed, wall clock (ns), over its findings.
    pub wall_ns: Option<u64>,
    /// `HH:MM:SS.mmm` UTC of `wall_ns`.
    pub wall: Option<String>,
    /// When it first showed, seconds into the run, when no wall clock is
    /// known.
    pub at_s: Option<f64>,
    /// What an administrator reads.
    pub sentence: String,
}

/// The combined outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// At least one analysis points at a suspect (exit status 1).
    SuspectFound,
    /// At least one analysis judged the run and none found anything.
    NothingStandsOut,
    /// No analysis could judge the run (none applied or none had data).
    NoData,
}

/// The combined verdict of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// [`DIAGNOSIS_VERSION`].
    pub version: u32,
    /// The captures of the run.
    pub captures: Vec<String>,
    /// The conclusion.
    pub outcome: Outcome,
    /// The conclusion in sentences: the top suspect of each level.
    pub summary: Vec<String>,
    /// Suspects, level by level (server first), most supported first.
    pub suspects: Vec<Suspect>,
    /// Where analyses disagree.
    pub disagreements: Vec<String>,
    /// Suspects that an analysis which found nothing could not judge (an
    /// MPI rank it did not monitor): neither confirmed nor contradicted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unconfirmed: Vec<String>,
    /// Every analysis, run or not, in [`AnalysisKind::ALL`] order.
    pub analyses: Vec<AnalysisResult>,
    /// What is missing from the captures (a file cut short, records lost
    /// while recording): evidence the verdict could not see.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Where the threads of each capture that were inside a system call
    /// stood when its recording stopped (longest blocked first): where a
    /// hung daemon waits, whatever was traced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at_end: Vec<AtEnd>,
}

/// The threads of one capture inside a system call at its end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtEnd {
    /// The capture.
    pub capture: String,
    /// Its host.
    pub host: String,
    /// Its blocked threads, longest blocked first.
    pub threads: Vec<crate::blocked::BlockedThread>,
}

impl Diagnosis {
    /// The suspects of one level, most supported first.
    pub fn at(&self, level: Level) -> impl Iterator<Item = &Suspect> {
        self.suspects.iter().filter(move |s| s.level == level)
    }

    /// The result of one analysis.
    pub fn analysis(&self, kind: AnalysisKind) -> Option<&AnalysisResult> {
        self.analyses.iter().find(|a| a.analysis == kind)
    }
}

/// `HH:MM:SS.mmm` (UTC) of a wall-clock time in ns since the epoch.
pub fn wall_clock(ns: u64) -> String {
    let ms = ns / 1_000_000;
    let s = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60,
        ms % 1000
    )
}

/// Combines the analyses of one run into one verdict. `servers` is how many
/// servers (hosts or per-server captures) the run has: with one, a
/// server-level suspect says nothing and is left out.
pub fn combine(
    captures: Vec<String>,
    mut analyses: Vec<AnalysisResult>,
    servers: usize,
) -> Diagnosis {
    analyses.sort_by_key(|a| a.analysis);
    // Findings grouped by (level, key), in first-seen order per level.
    let mut groups: BTreeMap<(Level, String), Vec<&Finding>> = BTreeMap::new();
    let mut untrained: BTreeMap<AnalysisKind, bool> = BTreeMap::new();
    for a in &analyses {
        untrained.insert(a.analysis, a.untrained);
        for f in &a.findings {
            if f.level == Level::Server && servers < 2 {
                continue;
            }
            groups.entry((f.level, f.key.clone())).or_default().push(f);
        }
    }
    let mut suspects: Vec<Suspect> = groups
        .into_iter()
        .map(|((level, key), findings)| suspect_of(level, key, findings, &untrained))
        .collect();
    suspects.sort_by(|a, b| {
        a.level
            .cmp(&b.level)
            // Trained evidence before untrained, then more analyses first.
            .then(a.untrained_only.cmp(&b.untrained_only))
            .then(b.analyses.len().cmp(&a.analyses.len()))
            .then(b.findings.len().min(3).cmp(&a.findings.len().min(3)))
            .then(earliest_order(a).total_cmp(&earliest_order(b)))
            .then(a.key.cmp(&b.key))
    });
    let judged = analyses
        .iter()
        .any(|a| matches!(a.status, Status::Found | Status::NothingStandsOut));
    let outcome = if !suspects.is_empty() {
        Outcome::SuspectFound
    } else if judged {
        Outcome::NothingStandsOut
    } else {
        Outcome::NoData
    };
    let summary = summary_of(outcome, &suspects, &analyses);
    let (disagreements, unconfirmed) = disagreements_of(&analyses, &suspects, servers);
    Diagnosis {
        version: DIAGNOSIS_VERSION,
        captures,
        outcome,
        summary,
        suspects,
        disagreements,
        unconfirmed,
        analyses,
        warnings: Vec::new(),
        at_end: Vec::new(),
    }
}

/// Sorting key for "earliest": wall clock when known, else seconds into
/// the run (both in seconds; an unknown time sorts last).
fn earliest_order(s: &Suspect) -> f64 {
    s.wall_ns
        .map(|ns| ns as f64 / 1e9)
        .or(s.at_s)
        .unwrap_or(f64::INFINITY)
}

fn suspect_of(
    level: Level,
    key: String,
    mut findings: Vec<&Finding>,
    untrained: &BTreeMap<AnalysisKind, bool>,
) -> Suspect {
    findings.sort_by(|a, b| {
        let t = |f: &Finding| f.wall_ns.map(|n| n as f64 / 1e9).or(f.at_s);
        t(a).unwrap_or(f64::INFINITY)
            .total_cmp(&t(b).unwrap_or(f64::INFINITY))
            .then(a.analysis.cmp(&b.analysis))
    });
    let mut analyses: Vec<AnalysisKind> = findings.iter().map(|f| f.analysis).collect();
    analyses.sort_unstable();
    analyses.dedup();
    let mut parents: Vec<String> = findings.iter().filter_map(|f| f.parent.clone()).collect();
    parents.sort_unstable();
    parents.dedup();
    // The longest name is the most telling (`rank 2, ring[77]` over `77`).
    let name = findings
        .iter()
        .map(|f| f.name.as_str())
        .max_by_key(|n| n.len())
        .unwrap_or(&key)
        .to_string();
    let wall_ns = findings.iter().filter_map(|f| f.wall_ns).min();
    let at_s = findings
        .iter()
        .filter_map(|f| f.at_s)
        .reduce(f64::min)
        .filter(|_| wall_ns.is_none());
    let untrained_only = analyses
        .iter()
        .all(|a| untrained.get(a).copied().unwrap_or(false));
    let sentence = sentence_of(level, &name, &findings, wall_ns, at_s);
    Suspect {
        level,
        key,
        name,
        parents,
        untrained_only,
        analyses,
        findings: findings.into_iter().cloned().collect(),
        wall: wall_ns.map(wall_clock),
        wall_ns,
        at_s,
        sentence,
    }
}

/// "server3: TCP retransmissions ... from 12:03:10 (peer comparison); ...".
fn sentence_of(
    level: Level,
    name: &str,
    findings: &[&Finding],
    wall_ns: Option<u64>,
    at_s: Option<f64>,
) -> String {
    let when = match (wall_ns, at_s) {
        (Some(ns), _) => format!(", from {} UTC", wall_clock(ns)),
        (None, Some(s)) => format!(", from {s:.1} s into the run"),
        (None, None) => String::new(),
    };
    // One clause per analysis (its first, i.e. earliest, finding), and how
    // many more findings it has.
    let mut clauses = Vec::new();
    for kind in AnalysisKind::ALL {
        let of: Vec<&&Finding> = findings.iter().filter(|f| f.analysis == kind).collect();
        let Some(first) = of.first() else { continue };
        let more = if of.len() > 1 {
            format!(" (+{} more)", of.len() - 1)
        } else {
            String::new()
        };
        clauses.push(format!("{} [{}]{more}", first.detail, kind.name()));
    }
    format!("{} {name}{when}: {}", level.name(), clauses.join("; "))
}

fn summary_of(outcome: Outcome, suspects: &[Suspect], analyses: &[AnalysisResult]) -> Vec<String> {
    let mut lines = Vec::new();
    match outcome {
        Outcome::SuspectFound => {
            for level in Level::ALL {
                let mut at = suspects.iter().filter(|s| s.level == level);
                if let Some(s) = at.next() {
                    let others = at.count();
                    let names: Vec<&str> = s.analyses.iter().map(|a| a.name()).collect();
                    lines.push(format!(
                        "most suspect {}: {} (by {}{}{})",
                        level.name(),
                        s.name,
                        names.join(" and "),
                        if s.untrained_only { ", untrained" } else { "" },
                        if others > 0 {
                            format!(
                                "; {others} other suspect {}",
                                if others == 1 { level.name() } else { level.plural() }
                            )
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
        Outcome::NothingStandsOut => {
            let judged: Vec<&str> = analyses
                .iter()
                .filter(|a| a.status == Status::NothingStandsOut)
                .map(|a| a.analysis.name())
                .collect();
            lines.push(format!(
                "nothing stands out: {} judged the run and found nothing abnormal",
                judged.join(", ")
            ));
        }
        Outcome::NoData => lines.push(
            "no verdict: no analysis could judge this run (none applied, or none had data); see each analysis below"
                .to_string(),
        ),
    }
    for a in analyses {
        if matches!(a.status, Status::NoData | Status::Failed) {
            lines.push(format!(
                "{}: {}{}",
                a.analysis.name(),
                a.status.describe(),
                a.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ));
        }
    }
    lines
}

/// Where analyses disagree: one found suspects where another that judged
/// the same run found nothing; two name different suspects at a level.
/// Second, the suspects an analysis that found nothing could not judge.
fn disagreements_of(
    analyses: &[AnalysisResult],
    suspects: &[Suspect],
    servers: usize,
) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::new();
    let mut unconfirmed = Vec::new();
    let found: Vec<&AnalysisResult> = analyses
        .iter()
        .filter(|a| a.status == Status::Found)
        .collect();
    let quiet: Vec<&AnalysisResult> = analyses
        .iter()
        .filter(|a| a.status == Status::NothingStandsOut)
        .collect();
    for f in &found {
        // Its process suspects; those another analysis could not judge
        // are no disagreement with it.
        let mut processes: Vec<(&str, &str)> = f
            .findings
            .iter()
            .filter(|x| x.level == Level::Process)
            .map(|x| (x.key.as_str(), x.name.as_str()))
            .collect();
        processes.dedup();
        for q in &quiet {
            let unjudged: Vec<&str> = processes
                .iter()
                .filter(|(key, _)| q.not_judged.iter().any(|k| k == key))
                .map(|(_, name)| *name)
                .collect();
            if !processes.is_empty() && unjudged.len() == processes.len() {
                unconfirmed.push(format!(
                    "{} could not judge {}, which {} points at",
                    q.analysis.name(),
                    list(&unjudged),
                    f.analysis.name()
                ));
                continue;
            }
            out.push(format!(
                "{} points at suspects ({}) where {} finds nothing standing out ({}){}",
                f.analysis.name(),
                f.summary,
                q.analysis.name(),
                q.summary,
                if unjudged.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; {} could not judge {}",
                        q.analysis.name(),
                        list(&unjudged)
                    )
                }
            ));
        }
    }
    // Per level, the suspects each analysis names; two analyses naming
    // only different ones disagree.
    // Units come from one analysis, and functions are named too
    // differently across analyses (call paths, components, MPI calls) for
    // their difference to mean disagreement.
    for level in [Level::Server, Level::Process] {
        if level == Level::Server && servers < 2 {
            continue;
        }
        let mut named: BTreeMap<AnalysisKind, Vec<&str>> = BTreeMap::new();
        for s in suspects.iter().filter(|s| s.level == level) {
            for a in &s.analyses {
                named.entry(*a).or_default().push(&s.name);
            }
        }
        let kinds: Vec<AnalysisKind> = named.keys().copied().collect();
        for (i, a) in kinds.iter().enumerate() {
            for b in &kinds[i + 1..] {
                let shared = suspects
                    .iter()
                    .filter(|s| s.level == level)
                    .any(|s| s.analyses.contains(a) && s.analyses.contains(b));
                if !shared {
                    out.push(format!(
                        "at the {} level, {} names {} but {} names {}",
                        level.name(),
                        a.name(),
                        list(&named[a]),
                        b.name(),
                        list(&named[b])
                    ));
                }
            }
        }
    }
    (out, unconfirmed)
}

fn list(names: &[&str]) -> String {
    crate::report::first_and_more(names, 3)
}
