//! The outlier verdict (004, issue 17): which rank is abnormal, or that no
//! rank stands out, calibrated so that ranks that differ by design (rank
//! 0, the ends of a line of ranks, a master) are not abnormal.
//!
//! Each rank is compared with itself: across clean runs of the program
//! when they are given, and over the phases of the run itself otherwise
//! (004 compares a task's phases too). Two kinds of evidence:
//!
//! * **Computation beyond habit, by phase.** Every computation region
//!   (the time between two MPI calls, named by the two call sites) is
//!   compared with the same rank's median for that region (in the clean
//!   runs, or in this run) and with what the other ranks computed at the
//!   same moment ([`crate::mpi::baseline`]): a pause, a CPU cap or a hog
//!   makes the faulty rank compute longer than both, while the ranks that
//!   wait for it wait inside MPI. The run is cut into phases; a rank's
//!   score is the largest share of a phase's wall time it spent computing
//!   beyond that expectation. The threshold is a prediction bound on what
//!   held-out clean runs reached ([`crate::mpi::bound`]: median + 3 robust
//!   standard deviations, at least 0.15); without clean runs, three times
//!   the median score of the run's ranks.
//! * **Control flow** (with two or more clean runs): calls made between
//!   call sites the rank never went between in any clean run, against how
//!   many such calls a held-out clean run makes.
//! * **CPU deficit, by phase** (when the recorder read CPU times): the
//!   share of its usual CPU a rank lacked over half a second, beside its
//!   peers ([`crate::mpi::cpu`]): a paused or capped rank gets less even
//!   when it spends its time polling inside MPI, where its computation
//!   times cannot show it. Thresholds as above, at least 0.3 (a pause
//!   lacks all, a quarter-core cap about half). While a rank is stopped
//!   the others' deficits are not judged ([`cpu::excuse_stopped`]): what
//!   they lack then is the stop's doing, not theirs.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::{
    decode::Capture,
    mpi::{
        Profiles,
        baseline::{Baseline, Relative, RunSamples, Sample, concurrent, median},
        bound::Bound,
        cpu,
        learn::held_out_baselines,
        sites::Sites,
        verdict::{Suspect, Unmonitored, Verdict},
    },
};

/// The lowest threshold on the phase score.
pub const MIN_PHASE_SCORE: f64 = 0.15;

/// The evidence of a rank whose computation in its worst phase went beyond
/// its habit (its [`PhaseScore`]).
pub const BEYOND_HABIT: &str = "computation beyond habit";

/// The lowest threshold on a phase's CPU deficit.
pub const MIN_CPU_DEFICIT: f64 = 0.3;

/// The most a phase score or a CPU deficit can be: a threshold at or over
/// it judges nothing.
pub const MAX_SHARE: f64 = 1.0;

/// Length of a phase for the CPU deficit (the recorder reads every 100 ms).
pub const CPU_PHASE_NS: u64 = 500_000_000;

/// One run to judge or learn from: its profiles and the captures they came
/// from (for call sites).
pub struct Run<'a> {
    /// Profiles.
    pub profiles: &'a Profiles,
    /// Its captures.
    pub captures: Vec<&'a Capture>,
}

/// Names of computation regions, shared by every run of an analysis so
/// that keys agree between them.
#[derive(Default)]
struct Regions {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Regions {
    fn id(&mut self, name: String) -> u32 {
        if let Some(id) = self.ids.get(&name) {
            return *id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name.clone(), id);
        self.names.push(name);
        id
    }
}

/// Computation regions of a run: every call's computation time, keyed by
/// (previous call and site, this call and site). The first call of a rank
/// (its start-up) is left out.
fn regions(run: &Run<'_>, names: &mut Regions) -> RunSamples {
    let mut sites = Sites::new(&run.captures);
    let mut out = Vec::new();
    for r in &run.profiles.ranks {
        let mut samples = Vec::with_capacity(r.calls.len());
        // Per rank, each (function, call site) is labelled and each pair of
        // them named once, not once per call (runs have millions of calls).
        let mut labels: Vec<String> = Vec::new();
        let mut heres: rustc_hash::FxHashMap<(u16, u64), usize> = rustc_hash::FxHashMap::default();
        let mut keys: rustc_hash::FxHashMap<(usize, usize), u32> = rustc_hash::FxHashMap::default();
        let mut prev: Option<usize> = None;
        for c in &r.calls {
            let here = *heres.entry((c.function, c.call_site)).or_insert_with(|| {
                labels.push(format!(
                    "{} at {}",
                    r.function_name(c),
                    sites.label(&r.host, r.pid, c.call_site)
                ));
                labels.len() - 1
            });
            if let Some(p) = prev {
                let key = *keys
                    .entry((p, here))
                    .or_insert_with(|| names.id(format!("{} -> {}", labels[p], labels[here])));
                samples.push(Sample {
                    key,
                    start_ns: c.start_ns.saturating_sub(c.compute_ns),
                    value_ns: c.compute_ns,
                });
            }
            prev = Some(here);
        }
        samples.sort_by_key(|s| s.start_ns);
        out.push((r.rank, samples));
    }
    RunSamples { ranks: out }
}

/// A rank's worst phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseScore {
    /// Share of the phase's wall time spent computing beyond expectation.
    pub score: f64,
    /// Phase start, seconds into the run.
    pub from_s: f64,
    /// Phase end, seconds into the run.
    pub to_s: f64,
    /// The region with the most excess time in it.
    pub region: String,
    /// That excess (s).
    pub excess_s: f64,
}

/// Each rank's worst phase of a run, given its relative samples.
fn phase_scores(
    rel: &[(u32, Vec<Relative>)],
    span: (u64, u64),
    names: &Regions,
) -> BTreeMap<u32, PhaseScore> {
    let (lo, hi) = span;
    let width = hi.saturating_sub(lo).max(1);
    // Phases of about 250 ms, 4 to 40 of them.
    let n = ((width / 250_000_000) as usize).clamp(4, 40);
    let phase_ns = width as f64 / n as f64;
    rel.iter()
        .map(|(rank, samples)| {
            let mut excess = vec![0.0f64; n];
            let mut top: Vec<(f64, u32)> = vec![(0.0, 0); n];
            for s in samples {
                let w = (((s.start_ns.saturating_sub(lo)) as f64 / phase_ns) as usize).min(n - 1);
                let e = s.excess_ns();
                excess[w] += e;
                if e > top[w].0 {
                    top[w] = (e, s.key);
                }
            }
            let (w, e) = excess
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(w, e)| (w, *e))
                .unwrap_or((0, 0.0));
            let start = |w: usize| (w as f64 * phase_ns) / 1e9;
            (
                *rank,
                PhaseScore {
                    score: (e / phase_ns).max(0.0),
                    from_s: start(w),
                    to_s: start(w + 1),
                    region: names
                        .names
                        .get(top[w].1 as usize)
                        .cloned()
                        .unwrap_or_default(),
                    excess_s: top[w].0 / 1e9,
                },
            )
        })
        .collect()
}

/// The outlier verdict of a run, and what it rests on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    /// Clean runs it was calibrated with (0: the run's own phases and
    /// ranks).
    pub clean_runs: usize,
    /// Each rank's worst phase.
    pub phases: BTreeMap<u32, PhaseScore>,
    /// Each rank's threshold on its phase score.
    pub phase_thresholds: BTreeMap<u32, f64>,
    /// Calls along transitions the rank never made in a clean run.
    pub new_transitions: BTreeMap<u32, usize>,
    /// Their threshold (calls), per rank.
    pub transition_thresholds: BTreeMap<u32, usize>,
    /// Each rank's worst CPU-deficit phase: (mean deficit, start s into
    /// the run), when the captures have CPU readings.
    pub cpu_phases: BTreeMap<u32, (f64, f64)>,
    /// Their thresholds.
    pub cpu_thresholds: BTreeMap<u32, f64>,
    /// What each phase threshold rests on ([`Bound`]; with no clean runs,
    /// the stated multiple of the run's own median, resting on nothing).
    #[serde(default)]
    pub phase_bounds: BTreeMap<u32, Bound>,
    /// What each CPU threshold rests on.
    #[serde(default)]
    pub cpu_bounds: BTreeMap<u32, Bound>,
    /// The verdict.
    pub verdict: Verdict,
}

/// A threshold stated rather than learned from clean runs.
fn stated(threshold: f64) -> Bound {
    Bound {
        threshold,
        median: 0.0,
        spread: 0.0,
        n: 0,
        exceeded: 0,
    }
}

/// Judges `run` against `clean` runs of the same program (none: against
/// its own phases and ranks).
pub fn judge(run: &Run<'_>, clean: &[Run<'_>]) -> Judgement {
    let mut names = Regions::default();
    let test = regions(run, &mut names);
    let clean_samples: Vec<RunSamples> = clean.iter().map(|c| regions(c, &mut names)).collect();
    let span = test.span().unwrap_or((0, 1));
    // Phase scores and their thresholds.
    let (phases, phase_bounds) = if clean_samples.is_empty() {
        let rel = concurrent(&test, &Baseline::learn(&[&test]));
        let phases = phase_scores(&rel, span, &names);
        let mut all: Vec<f64> = phases.values().map(|p| p.score).collect();
        let t = (3.0 * median(&mut all)).max(MIN_PHASE_SCORE);
        let th: BTreeMap<u32, Bound> = phases.keys().map(|r| (*r, stated(t))).collect();
        (phases, th)
    } else {
        let mut worst: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for (fold, base) in held_out_baselines(&clean_samples) {
            let rel = concurrent(&fold, &base);
            for (rank, p) in phase_scores(&rel, fold.span().unwrap_or((0, 1)), &names) {
                worst.entry(rank).or_default().push(p.score);
            }
        }
        let base = Baseline::learn(&clean_samples.iter().collect::<Vec<_>>());
        let phases = phase_scores(&concurrent(&test, &base), span, &names);
        let th = phases
            .keys()
            .map(|r| {
                let w = worst.get(r).map_or(&[][..], Vec::as_slice);
                (*r, Bound::learn(w, MIN_PHASE_SCORE))
            })
            .collect();
        (phases, th)
    };
    // Control flow against two or more clean runs.
    let keys = |s: &RunSamples| -> BTreeMap<u32, Vec<u32>> {
        s.ranks
            .iter()
            .map(|(r, v)| (*r, v.iter().map(|x| x.key).collect()))
            .collect()
    };
    let seen = |runs: &[&RunSamples]| -> BTreeMap<u32, BTreeSet<u32>> {
        let mut out: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for r in runs {
            for (rank, k) in keys(r) {
                out.entry(rank).or_default().extend(k);
            }
        }
        out
    };
    let new_calls =
        |s: &RunSamples, known: &BTreeMap<u32, BTreeSet<u32>>| -> BTreeMap<u32, usize> {
            keys(s)
                .into_iter()
                .map(|(rank, k)| {
                    let set = known.get(&rank);
                    (
                        rank,
                        k.iter()
                            .filter(|x| !set.is_some_and(|s| s.contains(x)))
                            .count(),
                    )
                })
                .collect()
        };
    let (new_transitions, transition_thresholds) = if clean_samples.len() >= 2 {
        let mut worst: BTreeMap<u32, usize> = BTreeMap::new();
        for i in 0..clean_samples.len() {
            let others: Vec<&RunSamples> = clean_samples
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, s)| s)
                .collect();
            for (rank, n) in new_calls(&clean_samples[i], &seen(&others)) {
                let e = worst.entry(rank).or_insert(0);
                *e = (*e).max(n);
            }
        }
        let known = seen(&clean_samples.iter().collect::<Vec<_>>());
        let test_new = new_calls(&test, &known);
        let th = test_new
            .keys()
            .map(|r| (*r, 2 * worst.get(r).copied().unwrap_or(0) + 1))
            .collect();
        (test_new, th)
    } else {
        (BTreeMap::new(), BTreeMap::new())
    };

    // CPU deficits by phase.
    let t0 = span.0;
    let (cpu_phases, cpu_bounds): (BTreeMap<u32, (f64, f64)>, BTreeMap<u32, Bound>) =
        if !cpu::recorded(run.profiles) {
            (BTreeMap::new(), BTreeMap::new())
        } else {
            let test_cpu = cpu::samples(run.profiles);
            let clean_cpu: Vec<RunSamples> = clean
                .iter()
                .filter(|c| cpu::recorded(c.profiles))
                .map(|c| cpu::samples(c.profiles))
                .collect();
            let to_s = |ns: u64| ns.saturating_sub(t0) as f64 / 1e9;
            if clean_cpu.is_empty() {
                let worst =
                    cpu::worst_phases(&test_cpu, &Baseline::learn(&[&test_cpu]), CPU_PHASE_NS);
                let mut all: Vec<f64> = worst.values().map(|w| w.0).collect();
                let t = (3.0 * median(&mut all)).max(MIN_CPU_DEFICIT);
                (
                    worst.iter().map(|(r, w)| (*r, (w.0, to_s(w.1)))).collect(),
                    worst.keys().map(|r| (*r, stated(t))).collect(),
                )
            } else {
                let mut held: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
                for (fold, base) in held_out_baselines(&clean_cpu) {
                    let w = cpu::worst_phases(&fold, &base, CPU_PHASE_NS);
                    for (r, (d, _)) in w {
                        held.entry(r).or_default().push(d);
                    }
                }
                let base = Baseline::learn(&clean_cpu.iter().collect::<Vec<_>>());
                let worst = cpu::worst_phases(&test_cpu, &base, CPU_PHASE_NS);
                (
                    worst.iter().map(|(r, w)| (*r, (w.0, to_s(w.1)))).collect(),
                    worst
                        .keys()
                        .map(|r| {
                            let h = held.get(r).map_or(&[][..], Vec::as_slice);
                            (*r, Bound::learn(h, MIN_CPU_DEFICIT))
                        })
                        .collect(),
                )
            }
        };

    let thresholds = |b: &BTreeMap<u32, Bound>| -> BTreeMap<u32, f64> {
        b.iter().map(|(r, b)| (*r, b.threshold)).collect()
    };
    let (phase_thresholds, cpu_thresholds) = (thresholds(&phase_bounds), thresholds(&cpu_bounds));
    let mut suspects = Vec::new();
    let mut not_monitored = Vec::new();
    let mut monitored = Vec::new();
    let mut cannot = Vec::new();
    let clean_ranks: BTreeSet<u32> = clean
        .iter()
        .flat_map(|c| c.profiles.ranks.iter().map(|r| r.rank))
        .collect();
    for r in &run.profiles.ranks {
        if !clean.is_empty() && !clean_ranks.contains(&r.rank) {
            not_monitored.push(Unmonitored {
                rank: r.rank,
                host: r.host.clone(),
                reason: "not in the clean runs".into(),
            });
            continue;
        }
        let Some(p) = phases.get(&r.rank) else {
            continue;
        };
        if test.rank(r.rank).is_none_or(|s| s.len() < 2) {
            not_monitored.push(Unmonitored {
                rank: r.rank,
                host: r.host.clone(),
                reason: "fewer than three MPI calls".into(),
            });
            continue;
        }
        let t = phase_thresholds
            .get(&r.rank)
            .copied()
            .unwrap_or(MIN_PHASE_SCORE);
        // Both phase scores are shares (at most 1): a threshold at or over 1
        // (twice what a held-out clean run reached) can never be exceeded,
        // so that evidence judges nothing.
        let phase_usable = t < MAX_SHARE;
        let cpu_usable = cpu_thresholds.get(&r.rank).is_some_and(|t| *t < MAX_SHARE);
        let flow_usable = transition_thresholds.contains_key(&r.rank);
        let mut unusable = Vec::new();
        if !phase_usable && let Some(b) = phase_bounds.get(&r.rank) {
            unusable.push(b.too_wide("its computation beyond habit"));
        }
        if !cpu_usable && let Some(b) = cpu_bounds.get(&r.rank) {
            unusable.push(b.too_wide("its CPU deficit"));
        }
        if !phase_usable && !cpu_usable && !flow_usable {
            not_monitored.push(Unmonitored {
                rank: r.rank,
                host: r.host.clone(),
                reason: format!(
                    "clean runs too noisy to judge by (a busy machine?): {}",
                    unusable.join("; ")
                ),
            });
            continue;
        }
        monitored.push(r.rank);
        // Judged, but not by everything: said, not passed over.
        cannot.extend(unusable.into_iter().map(|why| Unmonitored {
            rank: r.rank,
            host: r.host.clone(),
            reason: why,
        }));
        if phase_usable && p.score > t {
            suspects.push(Suspect {
                rank: r.rank,
                host: r.host.clone(),
                pid: r.pid,
                cpus: r.cpus.clone(),
                score: p.score,
                threshold: t,
                evidence: BEYOND_HABIT.into(),
                detail: format!(
                    "{:.0}% of {:.1}-{:.1} s spent computing beyond its {} and its peers'; most in {} ({:.3} s over)",
                    100.0 * p.score,
                    p.from_s,
                    p.to_s,
                    if clean.is_empty() {
                        "median in this run"
                    } else {
                        "clean runs"
                    },
                    p.region,
                    p.excess_s
                ),
            });
        }
        if let (Some((d, from)), Some(t)) = (cpu_phases.get(&r.rank), cpu_thresholds.get(&r.rank))
            && cpu_usable
            && d > t
        {
            let deficit = Suspect {
                rank: r.rank,
                host: r.host.clone(),
                pid: r.pid,
                cpus: r.cpus.clone(),
                score: *d,
                threshold: *t,
                evidence: "CPU deficit".into(),
                detail: format!(
                    "lacked {:.0}% of its usual CPU at {:.1}-{:.1} s, beside its peers (stopped, capped or crowded out)",
                    100.0 * d,
                    from,
                    from + CPU_PHASE_NS as f64 / 1e9
                ),
            };
            // One entry per rank: the stronger evidence.
            match suspects.iter_mut().find(|s| s.rank == r.rank) {
                Some(s) if s.score / s.threshold < d / t => *s = deficit,
                Some(_) => {}
                None => suspects.push(deficit),
            }
        }
        if let (Some(n), Some(t)) = (
            new_transitions.get(&r.rank),
            transition_thresholds.get(&r.rank),
        ) && n > t
            && !suspects.iter().any(|s| s.rank == r.rank)
        {
            suspects.push(Suspect {
                rank: r.rank,
                host: r.host.clone(),
                pid: r.pid,
                cpus: r.cpus.clone(),
                score: *n as f64,
                threshold: *t as f64,
                evidence: "control flow".into(),
                detail: format!(
                    "{n} calls between call sites it never went between in the clean runs"
                ),
            });
        }
    }
    Judgement {
        clean_runs: clean.len(),
        phases,
        phase_thresholds,
        new_transitions,
        transition_thresholds,
        cpu_phases,
        cpu_thresholds,
        phase_bounds,
        cpu_bounds,
        verdict: Verdict::new(
            "outliers",
            suspects,
            not_monitored,
            monitored,
            "the computation of",
        )
        .cannot_judge(cannot),
    }
}
