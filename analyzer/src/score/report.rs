//! What `analyzer model score` reports: every unit ranked, the processes
//! that deviated, where the fault first showed, why, and a verdict.
//!
//! A fault spreads: the units it disturbs later often deviate more than the
//! one where it began (000 §4: "the earlier a deviant behavior occurs, the
//! more likely it would be correlated with the failure"). So the report
//! names the earliest anomalous unit of each capture (by its monotonic
//! clock) and of all captures together (by wall clock, as far as the hosts'
//! clocks agree), and ranks the anomalous units process by process, the
//! process that deviated first first.
//!
//! Processes of one group run the same code (000 §2.4). A process that
//! deviates in one tree again and again while the other processes of its
//! group do not is evidence against it even when each deviation alone is
//! within what normal runs show ([`Evidence::Repeated`]).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::{Evidence, Scoring, UnitScore};
use crate::{
    model::{GlobalModel, beyond_normal},
    units::{ConnectionKey, Links, UnitKind, Variant},
};

/// Version of [`ScoreReport`]'s JSON form. 2: verdict, summary, suspects,
/// explanation; units carry their evidence and behaviour. 3: the verdict
/// `cannot_judge`, `not_judged` processes, and units' `not_judged`
/// functions.
pub const SCORE_REPORT_VERSION: u32 = 3;

/// Deviating units a process needs in one tree before repetition counts
/// as evidence: fewer could be chance (with 4 processes, 3 deviations all
/// landing in one of them by chance: 1 in 16).
pub const REPEAT_MIN: u32 = 3;

/// How the units are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Ranking {
    /// Anomalous units first, process by process (the process whose first
    /// anomaly came earliest first), each process's strongest evidence
    /// first, then in time order; then the other units by suspect score.
    #[default]
    Evidence,
    /// The papers' ranking: by suspect score alone.
    Score,
}

/// What the report concludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Some units behave as no normal run did: `first_anomaly` is where it
    /// began, `suspects` the processes.
    Anomalous,
    /// Every unit behaves like units of the normal runs.
    NothingStandsOut,
    /// Nothing to judge: no execution unit in the captures (no traced call,
    /// or no process of them).
    NoUnits,
    /// No judged unit behaves unlike the normal runs, but some units could
    /// not be judged (`not_judged` says which and why): the overhead budget
    /// of their capture detached functions the model was learned with. No
    /// conclusion about those processes either way.
    CannotJudge,
}

/// A process some of whose units could not be judged: their trees (or its
/// group) were learned with functions its capture's overhead budget
/// detached (see [`super::UnitScore::not_judged`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotJudged {
    /// Capture it came from.
    pub capture: String,
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// Its units not judged.
    pub units: u32,
    /// Its units.
    pub of: u32,
    /// The detached functions those units' trees were learned with.
    pub functions: Vec<String>,
}

/// A process with anomalous units.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    /// Capture it came from.
    pub capture: String,
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// Its anomalous units.
    pub anomalous: u32,
    /// Its units.
    pub units: u32,
    /// Its earliest anomalous unit (index into [`ScoreReport::units`]).
    pub first: usize,
}

/// The scores of one or more captures against one model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoreReport {
    /// [`SCORE_REPORT_VERSION`].
    pub version: u32,
    /// Decomposition of the model (000 or 001).
    pub variant: Variant,
    /// How units were scored.
    pub scoring: Scoring,
    /// How `units` are ordered.
    pub ranking: Ranking,
    /// The conclusion.
    pub verdict: Verdict,
    /// The conclusion in one sentence.
    pub summary: String,
    /// Whether the model had normal ranges (`model learn` of several
    /// captures): without them only calls no learned unit made, and units
    /// with no model, count as anomalous.
    pub calibrated: bool,
    /// Every unit, ranked.
    pub units: Vec<UnitScore>,
    /// Processes with anomalous units, the first to deviate first.
    pub suspects: Vec<Suspect>,
    /// Per capture, in the order given: its earliest anomalous unit.
    pub earliest: Vec<Earliest>,
    /// The earliest anomalous unit of all captures by wall clock (index
    /// into `units`); `None` when no unit is anomalous.
    pub first_anomaly: Option<usize>,
    /// Why `first_anomaly` is anomalous, in sentences.
    pub explanation: Vec<String>,
    /// Where no unit is anomalous yet a capture went quiet for longer than
    /// any normal run (see [`ScoreReport::judge_quiet`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<Stall>,
    /// Processes with units that could not be judged, in the order of
    /// their first unit: their capture's overhead budget detached
    /// functions the model was learned with. Whatever the verdict, nothing
    /// is concluded about those units.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_judged: Vec<NotJudged>,
}

/// A capture in which no unit of any process began or ended for longer
/// than in any normal run: a stall or hang the units themselves do not show
/// (every process waiting for another, each wait a normal one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// The capture.
    pub capture: String,
    /// When the quiet span began and ended, s from the capture's start.
    pub from_s: f64,
    /// See `from_s`.
    pub to_s: f64,
    /// The longest quiet span of the normal runs, s.
    pub normal_s: f64,
}

/// How much longer than the longest quiet span of the normal runs a span
/// must be to count: three times as long and a second longer (a loaded
/// machine stretches every wait alike).
pub const STALL_FACTOR: f64 = 3.0;
/// See [`STALL_FACTOR`], ns.
pub const STALL_MARGIN_NS: u64 = 1_000_000_000;

/// Where the fault first showed in one capture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Earliest {
    /// The capture, as named in [`UnitScore::capture`].
    pub capture: String,
    /// Index into [`ScoreReport::units`] (its rank is one more); `None`
    /// when every unit of the capture behaved like the normal runs.
    pub unit: Option<usize>,
}

/// A process across captures: (capture, host, pid).
type ProcessKey = (String, String, u32);

fn process_of(u: &UnitScore) -> ProcessKey {
    (u.capture.clone(), u.host.clone(), u.pid)
}

/// The tree a unit was scored against: its group, kind, and connection
/// (handlers) or thread role.
fn tree_of(u: &UnitScore) -> Option<(u32, UnitKind, String)> {
    let key = match u.kind {
        UnitKind::Handler => u
            .connection
            .clone()
            .unwrap_or_else(|| ConnectionKey::UNKNOWN.to_string()),
        _ => u.role.clone(),
    };
    Some((u.group?, u.kind, key))
}

impl ScoreReport {
    /// Judges repeated deviations, ranks `units` by `ranking` and finds
    /// the suspects, the earliest anomalies and the verdict. `captures`
    /// names the captures in the order they were given (a capture without
    /// units still gets its line).
    pub fn new(
        variant: Variant,
        scoring: Scoring,
        ranking: Ranking,
        captures: &[String],
        mut units: Vec<UnitScore>,
    ) -> Self {
        repeated(&mut units);
        shared(&mut units);
        let mut report = Self {
            version: SCORE_REPORT_VERSION,
            variant,
            scoring,
            ranking,
            verdict: Verdict::NoUnits,
            summary: String::new(),
            calibrated: false,
            units,
            suspects: Vec::new(),
            earliest: captures
                .iter()
                .map(|c| Earliest {
                    capture: c.clone(),
                    unit: None,
                })
                .collect(),
            first_anomaly: None,
            explanation: Vec::new(),
            stall: None,
            not_judged: Vec::new(),
        };
        report.conclude();
        report
    }

    /// Ranks the units and finds the suspects, the earliest anomalies,
    /// the verdict, its summary and explanation, from the units' evidence.
    fn conclude(&mut self) {
        let ranking = self.ranking;
        let captures: Vec<String> = self.earliest.iter().map(|e| e.capture.clone()).collect();
        let mut units = std::mem::take(&mut self.units);
        let calibrated = units
            .iter()
            .any(|u| u.behaviour.as_ref().is_some_and(|b| b.normal.is_some()));
        order(&mut units, ranking);
        // Where the fault began: the earliest anomaly that is not secondary
        // (see `secondary`), or, when every anomaly is, the earliest.
        let lead = units.iter().any(|u| u.anomalous && !secondary(u));
        let anomalous = || {
            units
                .iter()
                .enumerate()
                .filter(move |(_, u)| u.anomalous && (!lead || !secondary(u)))
        };
        let earliest = captures
            .iter()
            .map(|c| Earliest {
                capture: c.clone(),
                unit: anomalous()
                    .filter(|(_, u)| &u.capture == c)
                    .min_by_key(|(i, u)| (u.deviated_wall_ns, *i))
                    .map(|(i, _)| i),
            })
            .collect();
        let first_anomaly = anomalous()
            .min_by_key(|(i, u)| (u.deviated_wall_ns, *i))
            .map(|(i, _)| i);
        let suspects = suspects(&units);
        let not_judged = not_judged(&units);
        let unjudged = units.iter().filter(|u| !u.not_judged.is_empty()).count();
        let verdict = if units.is_empty() {
            Verdict::NoUnits
        } else if first_anomaly.is_some() {
            Verdict::Anomalous
        } else if unjudged > 0 {
            Verdict::CannotJudge
        } else {
            Verdict::NothingStandsOut
        };
        let summary = match (verdict, first_anomaly) {
            (Verdict::Anomalous, Some(i)) if !lead => {
                let u = &units[i];
                format!(
                    "{} of {} units behave as no normal run did, but each most likely as a consequence (alike in most processes of their group, or waiting for a peer): no single process stands out; it began in {}[{}]@{}, {} unit at {:.3} s",
                    units.iter().filter(|u| u.anomalous).count(),
                    units.len(),
                    u.comm,
                    u.pid,
                    u.host,
                    u.kind.name(),
                    u.deviated_s
                )
            }
            (Verdict::Anomalous, Some(i)) => {
                let u = &units[i];
                format!(
                    "{} of {} units behave as no normal run did, in {} process(es); it began in {}[{}]@{}, {} unit at {:.3} s",
                    units.iter().filter(|u| u.anomalous).count(),
                    units.len(),
                    suspects.len(),
                    u.comm,
                    u.pid,
                    u.host,
                    u.kind.name(),
                    u.deviated_s
                )
            }
            (Verdict::NoUnits, _) => {
                "no execution units: the captures hold no traced call of any process".to_string()
            }
            (Verdict::CannotJudge, _) => format!(
                "cannot judge: {unjudged} of {} units, in {}, could not be compared with the model ({}); none of the other {} units behaves unlike the normal runs, but that says nothing of the units not judged",
                units.len(),
                processes_named(&not_judged),
                detached_why(&not_judged),
                units.len() - unjudged,
            ),
            _ => format!(
                "nothing stands out: each of the {} units behaves like units of the normal runs{}{}",
                units.len(),
                if calibrated {
                    ""
                } else {
                    " (uncalibrated model: only calls no learned unit made, and units with no model, would count)"
                },
                unsure_note(&units)
            ),
        };
        let summary = if verdict == Verdict::Anomalous && unjudged > 0 {
            format!(
                "{summary}; {unjudged} units, in {}, were not judged ({})",
                processes_named(&not_judged),
                detached_why(&not_judged)
            )
        } else {
            summary
        };
        let explanation = first_anomaly
            .map(|i| explain(&units[i]))
            .unwrap_or_default();
        self.verdict = verdict;
        self.summary = summary;
        self.calibrated = calibrated;
        self.units = units;
        self.suspects = suspects;
        self.earliest = earliest;
        self.first_anomaly = first_anomaly;
        self.explanation = explanation;
        self.not_judged = not_judged;
    }

    /// Notes a stall where nothing else stands out: `capture`'s longest
    /// quiet span `span` (see [`crate::units::quiet_span`]; times relative
    /// to `origin_ns`, the capture's start) against the normal runs' in
    /// `model`. A run whose every unit looks normal but that stalled is not
    /// a run in which nothing happened: the summary says so. With `links`
    /// (the capture's connections), the unit that ended a connection first
    /// before the stall is named ([`Evidence::LeftFirst`]): at a stall
    /// every process waits as in normal runs, and the one that left first
    /// is the one the others wait for.
    pub fn judge_quiet(
        &mut self,
        model: &GlobalModel,
        capture: &str,
        span: Option<(u64, u64)>,
        origin_ns: u64,
        links: Option<&Links>,
    ) {
        if !matches!(
            self.verdict,
            Verdict::NothingStandsOut | Verdict::CannotJudge
        ) || self.stall.is_some()
        {
            return;
        }
        let (Some(normal), Some((from, to))) = (model.quiet_ns, span) else {
            return;
        };
        let quiet = to.saturating_sub(from);
        // `normal` comes from a model file: no overflow whatever it holds.
        let bound =
            ((normal as f64 * STALL_FACTOR) as u64).max(normal.saturating_add(STALL_MARGIN_NS));
        if quiet <= bound {
            return;
        }
        let at = |ns: u64| (ns as f64 - origin_ns as f64) / 1e9;
        let stall = Stall {
            capture: capture.to_string(),
            from_s: at(from),
            to_s: at(to),
            normal_s: normal as f64 / 1e9,
        };
        let note = format!(
            "{} went quiet: no unit began or ended in any process for {:.2} s (from {:.3} s to {:.3} s), where the normal runs never stayed quiet longer than {:.2} s",
            stall.capture,
            quiet as f64 / 1e9,
            stall.from_s,
            stall.to_s,
            stall.normal_s
        );
        if self.verdict == Verdict::CannotJudge {
            // Units not judged may deviate: who left first says nothing
            // then. The stall itself needs no function probe.
            self.summary = format!(
                "{}; and {note}: a stall or hang, in a process this report cannot name",
                self.summary
            );
            self.stall = Some(stall);
            return;
        }
        let left = links
            .and_then(|l| l.first_close(from.saturating_add(1)))
            .and_then(|(t, pid, tid)| {
                super::suspect::unit_at(&self.units, Some(capture), pid, tid, t).map(|i| (i, t))
            });
        match left {
            Some((i, t)) => {
                let u = &mut self.units[i];
                u.anomalous = true;
                let since = t.saturating_sub(u.start_ns);
                u.deviated_wall_ns = u.wall_ns.saturating_add(since);
                u.deviated_s = u.t_s + since as f64 / 1e9;
                u.evidence.push(Evidence::LeftFirst {
                    quiet_s: quiet as f64 / 1e9,
                    normal_s: stall.normal_s,
                });
                self.stall = Some(stall);
                self.conclude();
                self.summary = format!(
                    "{}: {note}, after this process ended a connection first (every unit of every process otherwise behaves like units of the normal runs)",
                    self.summary
                );
            }
            None => {
                self.summary = format!(
                    "{}; but {note}: a stall or hang that no unit shows (each process waiting as in normal runs)",
                    self.summary
                );
                self.stall = Some(stall);
            }
        }
    }

    /// The earliest anomalous unit of `capture`.
    pub fn earliest_in(&self, capture: &str) -> Option<&UnitScore> {
        self.earliest
            .iter()
            .find(|e| e.capture == capture)
            .and_then(|e| e.unit)
            .map(|i| &self.units[i])
    }

    /// The earliest anomalous unit of all captures (wall clock).
    pub fn first(&self) -> Option<&UnitScore> {
        self.first_anomaly.map(|i| &self.units[i])
    }
}

/// The processes with units not judged, in the order of their first unit.
fn not_judged(units: &[UnitScore]) -> Vec<NotJudged> {
    let mut out: Vec<NotJudged> = Vec::new();
    let mut index: HashMap<ProcessKey, usize> = HashMap::new();
    let mut order: Vec<(u64, usize)> = Vec::new();
    for u in units {
        let i = *index.entry(process_of(u)).or_insert_with(|| {
            out.push(NotJudged {
                capture: u.capture.clone(),
                host: u.host.clone(),
                pid: u.pid,
                comm: u.comm.clone(),
                units: 0,
                of: 0,
                functions: Vec::new(),
            });
            order.push((u64::MAX, out.len() - 1));
            out.len() - 1
        });
        let p = &mut out[i];
        p.of += 1;
        if !u.not_judged.is_empty() {
            p.units += 1;
            order[i].0 = order[i].0.min(u.wall_ns);
            for f in &u.not_judged {
                if !p.functions.contains(f) {
                    p.functions.push(f.clone());
                }
            }
        }
    }
    order.sort_unstable();
    let mut slots: Vec<Option<NotJudged>> = out.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|(_, i)| slots[i].take())
        .filter(|p| p.units > 0)
        .map(|mut p| {
            p.functions.sort();
            p
        })
        .collect()
}

/// `comm[pid]@host` of each process not judged, for a summary.
fn processes_named(not_judged: &[NotJudged]) -> String {
    const SHOWN: usize = 6;
    let mut names: Vec<String> = not_judged
        .iter()
        .take(SHOWN)
        .map(|p| format!("{}[{}]@{} ({} of {})", p.comm, p.pid, p.host, p.units, p.of))
        .collect();
    if not_judged.len() > SHOWN {
        names.push(format!("{} more", not_judged.len() - SHOWN));
    }
    format!(
        "{} process{} ({})",
        not_judged.len(),
        if not_judged.len() == 1 { "" } else { "es" },
        names.join(", ")
    )
}

/// Why units were not judged, for a summary.
fn detached_why(not_judged: &[NotJudged]) -> String {
    let mut functions: Vec<&String> = not_judged.iter().flat_map(|p| &p.functions).collect();
    functions.sort();
    functions.dedup();
    format!(
        "the overhead budget of their capture detached {}, which the model's trees of those units were learned with: they differ from the learned units for that reason alone; record with `tracer record --like MODEL` to keep the model's functions, or learn from captures without them",
        functions
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// What units did that the few learned units of their tree never did (see
/// [`super::MIN_LEARNED_UNITS`]), for a verdict of nothing standing out.
fn unsure_note(units: &[UnitScore]) -> String {
    let unsure: Vec<&UnitScore> = units.iter().filter(|u| !u.unsure.is_empty()).collect();
    let Some(first) = unsure.iter().min_by_key(|u| u.wall_ns) else {
        return String::new();
    };
    let learned = first.behaviour.as_ref().map_or(0, |b| b.learned);
    format!(
        "; {} unit(s) did what no learned unit of their tree did, but those trees hold too few learned units to tell a rare normal path from a fault (first: {}[{}]@{}, {} unit at {:.3} s, never in {} learned units; fewer than {} do not count)",
        unsure.len(),
        first.comm,
        first.pid,
        first.host,
        first.kind.name(),
        first.t_s,
        thousands(learned),
        super::MIN_LEARNED_UNITS
    )
}

/// Marks the deviating units of processes that deviate in one tree again
/// and again: more often than any held-out normal process did (twice its
/// count, plus one), at least [`REPEAT_MIN`] times, and at least four
/// times as often as the median other process of its group (plus
/// [`REPEAT_MIN`]): a deviation all processes share is the workload's, not
/// one process's fault; a process with no other of its group in the
/// captures has nothing to be compared with and is not judged so. A unit
/// deviates when no learned unit had its call
/// paths; a process also deviates by as many units as it had learned call
/// paths beyond the most any learned process had, and beyond the largest
/// share of its units of the tree any learned process had them in (see
/// [`beyond_normal`]: a worker busier than every learned one, or a
/// recording longer than theirs, does more of everything). Needs a
/// calibrated tree.
fn repeated(units: &mut [UnitScore]) {
    // Processes of each group.
    let mut members: HashMap<u32, Vec<ProcessKey>> = HashMap::new();
    for u in units.iter() {
        if let Some(g) = u.group {
            let p = process_of(u);
            let list = members.entry(g).or_default();
            if !list.contains(&p) {
                list.push(p);
            }
        }
    }
    // Per tree and process: units by learned behaviour, and novel units.
    type PerProcess = HashMap<ProcessKey, (HashMap<u32, Vec<usize>>, Vec<usize>)>;
    let mut trees: HashMap<(u32, UnitKind, String), PerProcess> = HashMap::new();
    for (i, u) in units.iter().enumerate() {
        let (Some(tree), Some(seen)) = (tree_of(u), u.behaviour.as_ref()) else {
            continue;
        };
        // Uncalibrated, cut by the end of its thread's trace, or not
        // comparable with its tree.
        if seen.normal.is_none() || u.cut || !u.not_judged.is_empty() {
            continue;
        }
        let entry = trees
            .entry(tree)
            .or_default()
            .entry(process_of(u))
            .or_default();
        match seen.id {
            Some(id) => entry.0.entry(id).or_default().push(i),
            None => entry.1.push(i),
        }
    }
    for ((group, _, _), per_process) in trees {
        // Per process: how many units deviate (new ones, and those beyond
        // a behaviour's per-process maximum), and the units involved (all
        // of a behaviour that exceeded its maximum: they are alike).
        let mut deviating: BTreeMap<ProcessKey, (u32, Vec<usize>)> = BTreeMap::new();
        let mut allowance = 0;
        for (p, (by_behaviour, novel)) in per_process {
            // The process's units of the tree: a learned behaviour counts
            // beyond the share of them a learned process had too.
            let total = (novel.len() + by_behaviour.values().map(Vec::len).sum::<usize>()) as u32;
            let mut count = novel.len() as u32;
            let mut d = novel;
            for (_, list) in by_behaviour {
                let seen = units[list[0]].behaviour.as_ref();
                allowance = allowance.max(
                    seen.and_then(|s| s.normal)
                        .map_or(0, |n| n.deviating_per_process),
                );
                let beyond = seen.map_or(list.len() as u32, |s| {
                    beyond_normal(s.max_per_process, s.max_share, list.len() as u32, total)
                });
                if beyond > 0 {
                    count += beyond;
                    d.extend(list);
                }
            }
            if let Some(n) = d.first().and_then(|i| units[*i].behaviour.as_ref()?.normal) {
                allowance = allowance.max(n.deviating_per_process);
            }
            deviating.insert(p, (count, d));
        }
        let group_members = members.get(&group).map(Vec::as_slice).unwrap_or_default();
        for (p, (count, list)) in &deviating {
            let count = *count;
            if count < REPEAT_MIN || count <= 2 * allowance + 1 {
                continue;
            }
            let mut peers: Vec<u32> = group_members
                .iter()
                .filter(|q| *q != p)
                .map(|q| deviating.get(q).map_or(0, |d| d.0))
                .collect();
            peers.sort_unstable();
            // Without another process of its group in the captures, nothing
            // tells a deviation of this process from a recording unlike the
            // learned ones (longer, with fewer start-up and end units in
            // the mix): the rule compares peers, and there are none.
            let Some(&median) = peers.get(peers.len() / 2) else {
                continue;
            };
            if count < 4 * median + REPEAT_MIN {
                continue;
            }
            for &i in list {
                let u = &mut units[i];
                u.evidence.push(Evidence::Repeated {
                    units: count,
                    normal: allowance,
                    peers: peers.clone(),
                });
                u.evidence.sort_by_key(|e| std::cmp::Reverse(e.strength()));
                u.anomalous = true;
            }
        }
    }
}

/// What a unit's evidence says, for telling whether processes deviate
/// alike: its tree and each piece of evidence with its call paths.
fn deviation(u: &UnitScore) -> Option<String> {
    let (group, kind, key) = tree_of(u)?;
    let mut out = format!("{group}|{}|{key}", kind.name());
    for e in &u.evidence {
        let part = match e {
            Evidence::NoGroup => "no-group".to_string(),
            Evidence::NoModel { .. } => "no-model".to_string(),
            Evidence::NewCall { paths, .. } => format!("new:{}", paths.join(";")),
            Evidence::Skipped { paths, .. } => format!("skipped:{}", paths.join(";")),
            Evidence::NewBehaviour { .. } => {
                let near = u.behaviour.as_ref().and_then(|b| b.nearest.as_ref());
                format!(
                    "behaviour:{}",
                    near.map(|n| format!("-{}+{}", n.missing.join(";"), n.extra.join(";")))
                        .unwrap_or_default()
                )
            }
            Evidence::Open { frames, .. } => format!("open:{}", frames.join(";")),
            Evidence::OutOfOrder { after, this, .. } => {
                format!("order:{}>{this}", after.join(">"))
            }
            Evidence::AboveRange { .. } => "above".to_string(),
            Evidence::Repeated { .. } => "repeated".to_string(),
            Evidence::LeftFirst { .. } => "left-first".to_string(),
            Evidence::ClosedFirst { peer, .. } => format!("closed-first:{peer}"),
            Evidence::Died { how, .. } => format!("died:{how}"),
            Evidence::Hung {
                place, normal_s, ..
            } => format!("hung:{}:{place}", normal_s.is_some()),
        };
        out.push('|');
        out.push_str(&part);
    }
    Some(out)
}

/// Marks anomalous units whose deviation (see [`deviation`]) at least 3
/// processes of their group show, more than half of them: a stall or the
/// end of a run makes every process deviate alike, and that points at none
/// of them.
fn shared(units: &mut [UnitScore]) {
    let mut members: HashMap<u32, Vec<ProcessKey>> = HashMap::new();
    for u in units.iter() {
        if let Some(g) = u.group {
            let p = process_of(u);
            let list = members.entry(g).or_default();
            if !list.contains(&p) {
                list.push(p);
            }
        }
    }
    let mut alike: HashMap<String, (Vec<ProcessKey>, Vec<usize>)> = HashMap::new();
    for (i, u) in units.iter().enumerate().filter(|(_, u)| u.anomalous) {
        let Some(key) = deviation(u) else { continue };
        let entry = alike.entry(key).or_default();
        let p = process_of(u);
        if !entry.0.contains(&p) {
            entry.0.push(p);
        }
        entry.1.push(i);
    }
    for (processes, list) in alike.into_values() {
        let Some(group) = units[list[0]].group else {
            continue;
        };
        let size = members.get(&group).map_or(0, Vec::len);
        if processes.len() >= 3 && processes.len() * 2 > size {
            for i in list {
                units[i].shared = true;
            }
        }
    }
}

/// Whether an anomaly is secondary, most likely a consequence of another:
/// most of its group's processes deviate alike, it followed the other end
/// closing its connection first ([`UnitScore::ended_by`]), or its only
/// evidence is a thread that never completed a call where it waits for a
/// peer.
fn secondary(u: &UnitScore) -> bool {
    u.shared
        || u.ended_by.is_some()
        || (!u.evidence.is_empty()
            && u.evidence.iter().all(|e| {
                matches!(
                    e,
                    Evidence::Open { waiting: true, .. }
                        | Evidence::Hung {
                            normal_s: Some(_),
                            ..
                        }
                        | Evidence::Hung { waiting: true, .. }
                )
            }))
}

/// Orders units by `ranking`.
fn order(units: &mut [UnitScore], ranking: Ranking) {
    match ranking {
        Ranking::Score => super::rank(units),
        Ranking::Evidence => {
            // Each process's earliest anomaly of its own (wall clock), and
            // how many; anomalies most of its group share come after.
            let mut first: HashMap<ProcessKey, (u64, usize)> = HashMap::new();
            for u in units.iter().filter(|u| u.anomalous && !secondary(u)) {
                let e = first.entry(process_of(u)).or_insert((u64::MAX, 0));
                e.0 = e.0.min(u.deviated_wall_ns);
                e.1 += 1;
            }
            let strength = |u: &UnitScore| u.evidence.iter().map(Evidence::strength).max();
            let class = |u: &UnitScore| match (u.anomalous, secondary(u)) {
                (true, false) => 0,
                (true, true) => 1,
                _ => 2,
            };
            units.sort_by(|a, b| {
                class(a).cmp(&class(b)).then_with(|| {
                    if !a.anomalous {
                        return b
                            .score
                            .total_cmp(&a.score)
                            .then(a.start_ns.cmp(&b.start_ns));
                    }
                    let (pa, pb) = (process_of(a), process_of(b));
                    let (fa, fb) = if secondary(a) {
                        // Shared: in time order, whoever showed it.
                        ((a.deviated_wall_ns, 0), (b.deviated_wall_ns, 0))
                    } else {
                        (first[&pa], first[&pb])
                    };
                    // Within a process, strongest evidence first, then in
                    // the order it happened.
                    fa.0.cmp(&fb.0)
                        .then(fb.1.cmp(&fa.1))
                        .then_with(|| pa.cmp(&pb))
                        .then_with(|| strength(b).cmp(&strength(a)))
                        .then(a.deviated_wall_ns.cmp(&b.deviated_wall_ns))
                        .then_with(|| b.score.total_cmp(&a.score))
                })
            });
        }
    }
}

/// The processes with anomalous units, the first to deviate first.
fn suspects(units: &[UnitScore]) -> Vec<Suspect> {
    let mut by_process: HashMap<ProcessKey, Suspect> = HashMap::new();
    for (i, u) in units.iter().enumerate() {
        let s = by_process.entry(process_of(u)).or_insert_with(|| Suspect {
            capture: u.capture.clone(),
            host: u.host.clone(),
            pid: u.pid,
            comm: u.comm.clone(),
            anomalous: 0,
            units: 0,
            first: usize::MAX,
        });
        s.units += 1;
        if u.anomalous {
            s.anomalous += 1;
            // Its own anomalies before those most of its group share.
            let key = |j: usize| (secondary(&units[j]), units[j].deviated_wall_ns);
            if s.first == usize::MAX || key(i) < key(s.first) {
                s.first = i;
            }
        }
    }
    let mut out: Vec<Suspect> = by_process
        .into_values()
        .filter(|s| s.anomalous > 0)
        .collect();
    out.sort_by_key(|s| {
        (
            secondary(&units[s.first]),
            units[s.first].deviated_wall_ns,
            s.first,
        )
    });
    out
}

/// `1312` as `1,312`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Why `u` is anomalous, in sentences: where it is, then each piece of
/// evidence, with how often normal runs showed what it did.
pub(crate) fn explain(u: &UnitScore) -> Vec<String> {
    let mut out = vec![format!(
        "{}[{}]@{} thread {}: {} unit at {:.3} s ({} UTC){}{}{}",
        u.comm,
        u.pid,
        u.host,
        u.tid,
        u.kind.name(),
        u.t_s,
        u.wall,
        if u.deviated_s - u.t_s > 5e-4 {
            format!(", deviating at {:.3} s", u.deviated_s)
        } else {
            String::new()
        },
        u.peer
            .as_deref()
            .map(|p| format!(", peer {p}"))
            .unwrap_or_default(),
        u.connection
            .as_deref()
            .map(|c| format!(", connection established by {c}"))
            .unwrap_or_default()
    )];
    let seen = u.behaviour.as_ref();
    if let Some(closer) = u.ended_by {
        out.push(format!(
            "the process at the other end of its connection, pid {closer}, closed it first: this unit found it ended and deviated as a consequence"
        ));
    }
    for e in &u.evidence {
        out.push(match e {
            Evidence::NoGroup => {
                "its process signature (the call stacks that established its connections) matches no learned process group".to_string()
            }
            Evidence::NoModel { learned } => format!(
                "{}: never in {} learned units of its process group",
                if u.kind == UnitKind::Handler {
                    "no learned unit came from this connection".to_string()
                } else {
                    format!("no learned {} unit came from threads of role '{}'", u.kind.name(), u.role)
                },
                thousands(*learned)
            ),
            Evidence::NewCall { paths, learned } => format!(
                "called {} where none of the {} learned units of its tree did",
                paths.join("; "),
                thousands(*learned)
            ),
            Evidence::Skipped { paths, learned } => format!(
                "did not call {}, which each of the {} learned units that made its caller made",
                paths.join("; "),
                thousands(*learned)
            ),
            Evidence::NewBehaviour { learned } => format!(
                "its call paths together: never in {} learned units of its tree (held-out normal units always matched one of another run)",
                thousands(*learned)
            ),
            Evidence::Open {
                frames,
                exited,
                waiting,
            } => format!(
                "never completed: {} inside {}{}",
                if *exited {
                    "its thread ended"
                } else {
                    "the capture ended while it was still"
                },
                frames.last().map_or("?", String::as_str),
                if *waiting {
                    " (where normal units receive from a peer: most likely waiting for another process)"
                } else {
                    ""
                }
            ),
            Evidence::OutOfOrder {
                after,
                this,
                usual,
                followed,
            } => format!(
                "its calls ({this}) are a normal unit's, but came after {}: none of the {} learned units that followed those did so (most often: {usual}); held-out normal units never came out of order",
                after.join(", then "),
                thousands(*followed)
            ),
            Evidence::AboveRange { score, normal } => format!(
                "suspect score {score:.3}, above the highest of held-out normal units ({normal:.3})"
            ),
            Evidence::LeftFirst { quiet_s, normal_s } => format!(
                "it ended a connection at {:.3} s, the first of the run to, and the run then stalled: no unit began or ended in any process for {quiet_s:.2} s, where the normal runs never stayed quiet longer than {normal_s:.2} s; every other unit behaves like units of the normal runs (each process waiting as in them), so the process that left first is the one the others wait for",
                u.deviated_s
            ),
            Evidence::Died { how, at_s, learned } => format!(
                "its process ended at {at_s:.3} s, {how}: a failure of its own, which none of the {} learned processes of its group ended by",
                thousands(u64::from(*learned))
            ),
            Evidence::Hung {
                tid,
                place,
                blocked_s,
                at_least,
                normal_s,
                learned,
                waiting,
                ended_by_signal,
            } => match normal_s {
                None if *waiting => format!(
                    "at the end of {} its thread {tid} had been blocked for {}{blocked_s:.2} s in {place}, where no learned thread of its group stood: a call in which threads wait for other processes, so most likely waiting for another that hung",
                    if *ended_by_signal { "its process (a signal ended the call, then the process)" } else { "the capture" },
                    if *at_least { "at least " } else { "" },
                ),
                None => format!(
                    "at the end of {} its thread {tid} had been blocked for {}{blocked_s:.2} s in {place}: none of the {} threads of learned processes of its group that were inside a system call at their capture's end stood there (a hang; needs no function probe)",
                    if *ended_by_signal { "its process (a signal ended the call, then the process)" } else { "the capture" },
                    if *at_least { "at least " } else { "" },
                    thousands(u64::from(*learned))
                ),
                Some(n) => format!(
                    "at the end of the capture its thread {tid} had been blocked for {}{blocked_s:.2} s in {place}, where learned threads stood at most {n:.2} s: most likely waiting for another process",
                    if *at_least { "at least " } else { "" },
                ),
            },
            Evidence::ClosedFirst {
                peer,
                comm,
                ended_s,
                learned,
            } => format!(
                "it closed its end of the connection to {comm}[{peer}] first: at {ended_s:.3} s {comm}[{peer}] found the connection ended (end of stream or reset, as after a close or a message cut short), which none of the {} learned units of its tree did, and deviated there; the peer pid {} closed first",
                thousands(*learned),
                u.pid
            ),
            Evidence::Repeated {
                units,
                normal,
                peers,
            } => format!(
                "its process deviated in this tree {units} times (held-out normal processes: at most {normal}; the other processes of its group: {})",
                if peers.is_empty() {
                    "none".to_string()
                } else {
                    peers.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                }
            ),
        });
    }
    // Paths the evidence already named need no second mention.
    let said: Vec<&String> = u
        .evidence
        .iter()
        .flat_map(|e| match e {
            Evidence::NewCall { paths, .. } | Evidence::Skipped { paths, .. } => paths.iter(),
            _ => [].iter(),
        })
        .collect();
    let new_to_say = |paths: &[String]| paths.iter().any(|p| !said.contains(&p));
    if let Some(near) = seen
        .and_then(|s| s.nearest.as_ref())
        .filter(|n| new_to_say(&n.missing) || new_to_say(&n.extra))
    {
        let mut what = Vec::new();
        if !near.missing.is_empty() {
            what.push(format!(
                "called {} and this unit did not",
                near.missing.join("; ")
            ));
        }
        if !near.extra.is_empty() {
            what.push(format!("did not call {}", near.extra.join("; ")));
        }
        if !what.is_empty() {
            out.push(format!(
                "the nearest normal behaviour ({} learned units) {}",
                thousands(near.units),
                what.join(", and ")
            ));
        }
    } else if let Some(s) = seen.filter(|s| s.id.is_some()) {
        out.push(format!(
            "its call paths: {} of {} learned units (at most {} in one learned process)",
            thousands(s.units),
            thousands(s.learned),
            s.max_per_process
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::NormalRange,
        score::{Evidence, Seen},
        units::UnitKind,
    };

    fn unit(capture: &str, score: f64, start_ns: u64, wall_ns: u64, anomalous: bool) -> UnitScore {
        UnitScore {
            host: "h".into(),
            pid: 1,
            comm: "d".into(),
            tid: 1,
            kind: UnitKind::Handler,
            start_ns,
            end_ns: start_ns + 1,
            t_s: 0.0,
            wall: String::new(),
            wall_ns,
            deviated_wall_ns: wall_ns,
            deviated_s: 0.0,
            capture: capture.into(),
            role: "main".into(),
            connection: None,
            peer: None,
            score,
            normal: None,
            anomalous,
            reason: String::new(),
            differences: Vec::new(),
            evidence: if anomalous {
                vec![Evidence::NewCall {
                    paths: vec!["serve > close".into()],
                    learned: 10,
                }]
            } else {
                Vec::new()
            },
            unsure: Vec::new(),
            behaviour: None,
            open: Vec::new(),
            exited: false,
            cut: false,
            shared: false,
            group: Some(0),
            ended_by: None,
            not_judged: Vec::new(),
        }
    }

    /// A unit of process `pid` (group 0, one handler tree) at time `t`
    /// with learned behaviour `id` (`None`: never learned), from a
    /// calibrated tree where a held-out process deviated at most
    /// `allowance` times and each behaviour occurred at most once per
    /// learned process.
    fn seen(pid: u32, t: u64, id: Option<u32>, allowance: u32) -> UnitScore {
        let mut u = unit("c", 0.1, t, t, false);
        u.pid = pid;
        u.connection = Some("listen".into());
        u.behaviour = Some(Seen {
            id,
            units: if id.is_some() { 100 } else { 0 },
            learned: 400,
            max_per_process: 1,
            // Once in a learned process's 10 units.
            max_share: 0.1,
            exhaustive: true,
            nearest: None,
            normal: Some(NormalRange {
                units: 400,
                novel: 3,
                deviating_per_process: allowance,
                ..NormalRange::default()
            }),
        });
        u
    }

    fn report(ranking: Ranking, names: &[&str], units: Vec<UnitScore>) -> ScoreReport {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        ScoreReport::new(Variant::Paper000, Scoring::Nodes, ranking, &names, units)
    }

    /// With the papers' ranking, units are in score order; the earliest
    /// anomaly is by time, per capture by its own clock and overall by
    /// wall clock; units inside their normal range never count, however
    /// early or high.
    #[test]
    fn earliest_anomaly_is_by_time_not_by_rank() {
        let report = report(
            Ranking::Score,
            &["a", "b", "quiet"],
            vec![
                unit("a", 0.9, 500, 5_500, true),
                unit("a", 0.4, 300, 5_300, true),
                unit("a", 0.95, 100, 5_100, false),
                // b's monotonic clock started elsewhere: 200 is later in
                // wall-clock time than a's 300.
                unit("b", 0.6, 200, 5_400, true),
                unit("b", 0.2, 50, 5_050, false),
                unit("quiet", 0.1, 10, 5_010, false),
            ],
        );
        assert_eq!(report.version, SCORE_REPORT_VERSION);
        let scores: Vec<f64> = report.units.iter().map(|u| u.score).collect();
        assert_eq!(scores, [0.95, 0.9, 0.6, 0.4, 0.2, 0.1]);
        assert_eq!(report.earliest_in("a").map(|u| u.score), Some(0.4));
        assert_eq!(report.earliest_in("b").map(|u| u.score), Some(0.6));
        assert_eq!(report.earliest_in("quiet"), None);
        assert_eq!(report.earliest.len(), 3, "every capture gets its line");
        assert_eq!(report.first().map(|u| u.score), Some(0.4));
        assert_eq!(report.first_anomaly, Some(3), "an index into units");
        assert_eq!(report.verdict, Verdict::Anomalous);

        let json = serde_json::to_string(&report).expect("serializes");
        let back: ScoreReport = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, report);
    }

    /// The evidence ranking puts anomalous units first, process by
    /// process, the process that deviated first first (a fault spreads: its
    /// neighbour's symptom may score higher), each process's strongest
    /// evidence first; normal units follow by score, however high.
    #[test]
    fn the_process_that_deviated_first_ranks_first() {
        let mut cause = unit("c", 0.2, 100, 100, true);
        cause.pid = 2;
        let mut later_in_cause = unit("c", 0.3, 400, 400, true);
        later_in_cause.pid = 2;
        later_in_cause.evidence = vec![Evidence::AboveRange {
            score: 0.3,
            normal: 0.2,
        }];
        let mut strongest_in_cause = unit("c", 0.25, 500, 500, true);
        strongest_in_cause.pid = 2;
        strongest_in_cause.evidence = vec![Evidence::Open {
            frames: vec!["serve > handle".into()],
            exited: true,
            waiting: false,
        }];
        let mut symptom = unit("c", 1.0, 200, 200, true);
        symptom.pid = 1;
        symptom.evidence = vec![Evidence::NoModel { learned: 50 }];
        let rare_but_normal = unit("c", 0.9, 50, 50, false);
        let report = report(
            Ranking::Evidence,
            &["c"],
            vec![
                rare_but_normal,
                symptom,
                later_in_cause,
                cause,
                strongest_in_cause,
            ],
        );
        let order: Vec<(u32, u64)> = report.units.iter().map(|u| (u.pid, u.start_ns)).collect();
        assert_eq!(order, [(2, 500), (2, 100), (2, 400), (1, 200), (1, 50)]);
        let suspects: Vec<(u32, u32, usize)> = report
            .suspects
            .iter()
            .map(|s| (s.pid, s.anomalous, s.first))
            .collect();
        assert_eq!(suspects, [(2, 3, 1), (1, 1, 3)]);
        assert_eq!(report.first().map(|u| (u.pid, u.start_ns)), Some((2, 100)));
        assert!(
            report.summary.contains("4 of 5 units") && report.summary.contains("d[2]@h"),
            "{}",
            report.summary
        );
        assert!(
            report.explanation[1].contains("called serve > close where none of the 10"),
            "{:?}",
            report.explanation
        );
    }

    /// A process whose units deviate in one tree again and again, where its
    /// peers do not, is anomalous for it; the same deviations spread over
    /// every peer (the workload's) are not, nor are a few, nor as many as a
    /// held-out normal process had.
    /// The processes with an anomalous unit, in the report's order.
    fn flagged(r: &ScoreReport) -> Vec<u32> {
        let mut pids: Vec<u32> = r
            .units
            .iter()
            .filter(|u| u.anomalous)
            .map(|u| u.pid)
            .collect();
        pids.dedup();
        pids
    }

    #[test]
    fn repeated_deviation_against_quiet_peers_is_evidence() {
        let run = |deviations: &[(u32, usize)], allowance: u32| {
            let mut units = Vec::new();
            let mut t = 0;
            for pid in 1..=4u32 {
                let d = deviations
                    .iter()
                    .find(|(p, _)| *p == pid)
                    .map_or(0, |(_, n)| *n);
                for i in 0..10 {
                    t += 1;
                    // Deviating: never learned, or a learned behaviour
                    // more often than its per-process maximum (1).
                    let id = if i >= d {
                        Some(i as u32)
                    } else if i % 2 == 0 {
                        None
                    } else {
                        Some(99)
                    };
                    units.push(seen(pid, t, id, allowance));
                }
            }
            report(Ranking::Evidence, &["c"], units)
        };

        let one = run(&[(3, 6)], 1);
        assert_eq!(flagged(&one), [3]);
        let u = &one.units[0];
        // 3 new, and 3 alike where a learned process had 1: 2 beyond.
        assert_eq!(
            u.evidence,
            [Evidence::Repeated {
                units: 5,
                normal: 1,
                peers: vec![0, 0, 0]
            }]
        );
        assert_eq!(one.units.iter().filter(|u| u.anomalous).count(), 6);
        assert_eq!(one.verdict, Verdict::Anomalous);

        assert!(
            flagged(&run(&[(1, 6), (2, 6), (3, 6), (4, 6)], 1)).is_empty(),
            "shared"
        );
        assert!(flagged(&run(&[(3, 2)], 0)).is_empty(), "too few");
        assert!(
            flagged(&run(&[(3, 6)], 3)).is_empty(),
            "within what normal processes did"
        );
        let quiet = run(&[], 0);
        assert_eq!(quiet.verdict, Verdict::NothingStandsOut);
        assert!(
            quiet
                .summary
                .starts_with("nothing stands out: each of the 40 units"),
            "{}",
            quiet.summary
        );
        assert!(quiet.explanation.is_empty() && quiet.suspects.is_empty());
    }

    /// A worker busier than every learned one does more of everything: its
    /// common behaviours beyond the most a learned process had, but within
    /// the share of its units a learned process had them in, are no
    /// repetition (pyjobs: a worker with 21 jobs of a kind where learned
    /// workers had at most 18, its peers fewer). A rare behaviour far
    /// beyond its learned share stays evidence, busy or not (issue 20's
    /// ring: 35 units alike where a learned process had 1 in 40), where
    /// the process has peers to be compared with.
    #[test]
    fn repeated_counts_beyond_the_learned_share_not_the_learned_count() {
        // Learned processes had 8 units of the tree: behaviour 0 (common)
        // 6 of them at most, behaviour 1 at most 3 (3 of 8), behaviour 2
        // (rare) once (1 of 8).
        let learned = [(6, 0.75), (3, 0.375), (1, 0.125)];
        let run = |per_pid: &[(u32, [usize; 3])]| {
            let mut units = Vec::new();
            let mut t = 0;
            for &(pid, counts) in per_pid {
                for (id, &n) in counts.iter().enumerate() {
                    for _ in 0..n {
                        t += 1;
                        let mut u = seen(pid, t, Some(id as u32), 0);
                        let b = u.behaviour.as_mut().expect("seen() gives a behaviour");
                        (b.max_per_process, b.max_share) = learned[id];
                        units.push(u);
                    }
                }
            }
            report(Ranking::Evidence, &["c"], units)
        };
        let peers = [(1, [6, 2, 0]), (2, [5, 2, 1]), (4, [6, 1, 1])];

        // Three times as busy, in the learned proportions: 18 of the
        // common kind where a learned process had 6.
        let busy: Vec<_> = peers.iter().copied().chain([(3, [18, 5, 1])]).collect();
        let r = run(&busy);
        assert!(flagged(&r).is_empty(), "{}", r.summary);
        assert_eq!(r.verdict, Verdict::NothingStandsOut);

        // As busy as its peers, with the rare behaviour 6 times: 5 beyond.
        let ring: Vec<_> = peers.iter().copied().chain([(3, [2, 0, 6])]).collect();
        let r = run(&ring);
        assert_eq!(flagged(&r), [3]);
        let u = r.units.iter().find(|u| u.anomalous).expect("flagged");
        assert_eq!(
            u.evidence,
            [Evidence::Repeated {
                units: 5,
                normal: 0,
                peers: vec![0, 0, 0]
            }]
        );
        assert_eq!(r.units.iter().filter(|u| u.anomalous).count(), 6);

        // Alone in its group: no peer to compare with, and a recording
        // unlike the learned ones (longer, fewer start-up units in the
        // mix) shifts every share alike.
        let r = run(&[(3, [2, 0, 6])]);
        assert!(flagged(&r).is_empty(), "{}", r.summary);

        // Busy and repeating the rare behaviour: 12 of 30 where its share
        // allows 4 (1 in 8).
        let both: Vec<_> = peers.iter().copied().chain([(3, [15, 3, 12])]).collect();
        let r = run(&both);
        assert_eq!(flagged(&r), [3]);
        let u = r.units.iter().find(|u| u.anomalous).expect("flagged");
        assert!(
            matches!(u.evidence[..], [Evidence::Repeated { units: 8, .. }]),
            "{:?}",
            u.evidence
        );
    }

    #[test]
    fn no_anomaly_no_earliest() {
        let report = report(Ranking::Evidence, &["a"], vec![unit("a", 0.3, 1, 1, false)]);
        assert_eq!(report.first(), None);
        assert_eq!(report.earliest_in("a"), None);
        assert_eq!(report.earliest[0].unit, None);
        assert_eq!(report.verdict, Verdict::NothingStandsOut);
        assert!(!report.calibrated);
        assert!(
            report.summary.contains("uncalibrated"),
            "{}",
            report.summary
        );

        let empty = ScoreReport::new(
            Variant::Paper000,
            Scoring::Nodes,
            Ranking::Evidence,
            &["a".to_string()],
            Vec::new(),
        );
        assert_eq!(empty.verdict, Verdict::NoUnits);
    }

    /// A run whose every unit looks normal but which stalled far longer
    /// than any normal run says so; a short quiet span, a model without
    /// the learned span, and a report that already names an anomaly are
    /// left as they are.
    #[test]
    fn a_stall_no_unit_shows_is_said() {
        let quiet = || {
            ScoreReport::new(
                Variant::Paper000,
                Scoring::Nodes,
                Ranking::Evidence,
                &["c".to_string()],
                vec![unit("c", 0.1, 10, 10, false)],
            )
        };
        let mut model = GlobalModel::new(Variant::Paper000);
        model.quiet_ns = Some(100_000_000);
        let mut report = quiet();
        report.judge_quiet(&model, "c", Some((1_000_000_000, 4_000_000_000)), 0, None);
        let stall = report.stall.clone().expect("a stall");
        assert_eq!((stall.from_s, stall.to_s, stall.normal_s), (1.0, 4.0, 0.1));
        assert_eq!(report.verdict, Verdict::NothingStandsOut);
        assert!(report.summary.contains("went quiet"), "{}", report.summary);
        assert!(report.summary.contains("3.00 s"), "{}", report.summary);
        // Within a second of the normal runs' longest: nothing said.
        let mut short = quiet();
        short.judge_quiet(&model, "c", Some((0, 1_050_000_000)), 0, None);
        assert_eq!(short.stall, None);
        // A model learned before the span was kept says nothing.
        let mut old = quiet();
        old.judge_quiet(
            &GlobalModel::new(Variant::Paper000),
            "c",
            Some((0, 9_000_000_000)),
            0,
            None,
        );
        assert_eq!(old.stall, None);
        // A crafted model's span cannot overflow the bound.
        let mut huge = quiet();
        let mut crafted = GlobalModel::new(Variant::Paper000);
        crafted.quiet_ns = Some(u64::MAX);
        huge.judge_quiet(&crafted, "c", Some((0, u64::MAX)), 0, None);
        assert_eq!(huge.stall, None);
        // An anomaly already named keeps its verdict and summary.
        let mut named = ScoreReport::new(
            Variant::Paper000,
            Scoring::Nodes,
            Ranking::Evidence,
            &["c".to_string()],
            vec![unit("c", 0.9, 10, 10, true)],
        );
        let before = named.summary.clone();
        named.judge_quiet(&model, "c", Some((0, 9_000_000_000)), 0, None);
        assert_eq!((named.stall.clone(), named.summary.clone()), (None, before));
        // Units not judged: the stall is said, and no process named.
        let mut unjudged = unit("c", 0.9, 10, 10, false);
        unjudged.not_judged = vec!["helper".into()];
        let mut cannot = ScoreReport::new(
            Variant::Paper000,
            Scoring::Nodes,
            Ranking::Evidence,
            &["c".to_string()],
            vec![unjudged],
        );
        assert_eq!(cannot.verdict, Verdict::CannotJudge);
        cannot.judge_quiet(&model, "c", Some((0, 9_000_000_000)), 0, None);
        assert!(cannot.stall.is_some());
        assert_eq!(cannot.verdict, Verdict::CannotJudge);
        assert!(
            cannot.summary.starts_with("cannot judge") && cannot.summary.contains("went quiet"),
            "{}",
            cannot.summary
        );
    }

    /// At a stall no unit shows, the unit that ended a connection first
    /// before the stall is named: the others wait as in normal runs for
    /// the one that left. A close after the stall began does not count.
    #[test]
    fn at_a_stall_the_first_to_end_a_connection_is_named() {
        use crate::units::{End, Links};
        let units = || {
            let mut a = unit("c", 0.1, 10, 1_010, false);
            a.end_ns = 40;
            let mut b = unit("c", 0.1, 20, 1_020, false);
            (b.pid, b.tid, b.end_ns) = (2, 2, 60);
            ScoreReport::new(
                Variant::Paper000,
                Scoring::Nodes,
                Ranking::Evidence,
                &["c".to_string()],
                vec![a, b],
            )
        };
        let end = |pid, fd, since_ns| End { pid, fd, since_ns };
        let pair = vec![(end(1, 3, 1), end(2, 4, 2))];
        let mut model = GlobalModel::new(Variant::Paper000);
        model.quiet_ns = Some(100_000_000);
        // Process 2 closes its end at 50, inside its unit, then all stall.
        let links = Links::from_parts(pair.clone(), &[(2, 4, 50, 2), (1, 3, 70, 1)]);
        let mut report = units();
        report.judge_quiet(&model, "c", Some((60, 4_000_000_000)), 0, Some(&links));
        assert_eq!(report.verdict, Verdict::Anomalous);
        let first = report.first().expect("named");
        assert_eq!(first.pid, 2);
        assert!(matches!(
            first.evidence.as_slice(),
            [Evidence::LeftFirst { .. }]
        ));
        assert_eq!(first.deviated_wall_ns, 1_050, "dated at its close");
        assert!(report.stall.is_some());
        assert!(report.summary.contains("went quiet"), "{}", report.summary);
        assert!(
            report.explanation.iter().any(|l| l.contains("left first")),
            "{:#?}",
            report.explanation
        );
        // Only closes after the quiet span began: nothing named.
        let late = Links::from_parts(pair, &[(2, 4, 90, 2)]);
        let mut report = units();
        report.judge_quiet(&model, "c", Some((60, 4_000_000_000)), 0, Some(&late));
        assert_eq!(report.verdict, Verdict::NothingStandsOut);
        assert!(report.stall.is_some());
    }

    #[test]
    fn counts_have_thousands_separators() {
        let shown: Vec<String> = [0, 999, 1000, 1312, 1_234_567].map(thousands).to_vec();
        assert_eq!(shown, ["0", "999", "1,000", "1,312", "1,234,567"]);
    }

    /// A deviation that most processes of a group show alike (a stall, the
    /// end of a run) and a thread that never completed a call where it
    /// waits for a peer are secondary: the earliest anomaly and the first
    /// ranks go to the process that deviated on its own, even later; and
    /// a unit is dated by when it deviated, not when it started.
    #[test]
    fn secondary_anomalies_come_after_a_process_that_deviated_on_its_own() {
        let mut units = Vec::new();
        for pid in 1..=4u32 {
            let mut u = unit("c", 0.5, 10 + u64::from(pid), 10 + u64::from(pid), true);
            u.pid = pid;
            u.connection = Some("listen".into());
            u.evidence = vec![Evidence::Skipped {
                paths: vec!["serve > select > key".into()],
                learned: 100,
            }];
            if pid < 4 {
                units.push(u);
            }
        }
        let mut waiting = unit("c", 0.3, 5, 5, true);
        waiting.pid = 5;
        waiting.group = Some(1);
        waiting.evidence = vec![Evidence::Open {
            frames: vec!["main > recv_reply".into()],
            exited: true,
            waiting: true,
        }];
        units.push(waiting);
        // Started first, deviated last but one: dated by its new call.
        let mut own = unit("c", 0.2, 1, 1, true);
        own.pid = 4;
        own.connection = Some("listen".into());
        own.deviated_wall_ns = 50;
        units.push(own);
        let mut quiet = unit("c", 0.1, 2, 2, false);
        quiet.pid = 4;
        units.push(quiet);
        let r = report(Ranking::Evidence, &["c"], units);
        let shared: Vec<u32> = r.units.iter().filter(|u| u.shared).map(|u| u.pid).collect();
        assert_eq!(shared.len(), 3, "{shared:?}");
        assert_eq!(r.first().map(|u| u.pid), Some(4));
        assert_eq!(r.units[0].pid, 4);
        assert_eq!(r.suspects[0].pid, 4);
        assert_eq!(r.verdict, Verdict::Anomalous);
        // Only secondary anomalies: still anomalous, said to be so.
        let mut only: Vec<UnitScore> = r.units.iter().filter(|u| u.pid != 4).cloned().collect();
        for u in &mut only {
            u.shared = false;
        }
        let r = report(Ranking::Evidence, &["c"], only);
        assert_eq!(r.verdict, Verdict::Anomalous);
        assert!(
            r.summary.contains("no single process stands out"),
            "{}",
            r.summary
        );
        assert_eq!(r.first().map(|u| u.pid), Some(5), "the earliest of them");
    }
}
