//! `cargo xtask mpi-matrix`: the MPI diagnosis proof of issue 17. Every
//! program of the suite (C and Fortran, five shapes and one held out of
//! tuning) runs clean and with each fault, recorded with `tracer record
//! --mpi`, and each run is judged as a user would:
//!
//! - interference (paper 002, 2 ranks pinned to the 2 cores): a model
//!   learned from clean runs and one CPU-hogged run, then clean runs, a
//!   continuous hog and an on-off hog on either core; right when the
//!   verdict names exactly the rank on the hogged core, and nothing on
//!   clean runs;
//! - outliers and hangs (paper 004 and the wait-for graph, 4 ranks): the
//!   outlier verdict calibrated on clean runs, then clean runs, a paused
//!   rank, a capped rank (right: exactly that rank named), and a rank hung
//!   in computation, a dead peer and an extra collective (right: the hang
//!   culprit is exactly that rank).
//!
//! Recording writes `runs.json` and the captures under the output
//! directory; `--table-only` scores them again without recording.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use analyzer::{
    Capture,
    automaded::verdict::{Run as JudgeRun, judge},
    mpi::{self, LearnConfig, Outcome, Profiles, waitfor},
};
use anyhow::{Context as _, bail};
use clap::Args;
use serde::{Deserialize, Serialize};
use tests::mpi::{Fault, Job, build, on_off_turn_ms, record};

use crate::{build_tracer, is_root, target_dir};

/// `cargo xtask mpi-matrix`.
#[derive(Debug, Args)]
pub(crate) struct MatrixArgs {
    /// Repetitions of every fault (the faulty rank or core rotates).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Clean runs recorded to learn from, per program and experiment.
    #[arg(long, default_value_t = 3)]
    learn_runs: usize,
    /// Programs (default: all): halo, wavefront, master, collectives,
    /// nonblocking, cg (cg is held out of tuning).
    #[arg(long, value_delimiter = ',')]
    programs: Vec<String>,
    /// Faults (default: all): clean, hog, on-off-hog, pause, cap, hang,
    /// dead-peer, extra-collective.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Output directory (captures, runs.json).
    #[arg(short, long, default_value_os_t = target_dir().join("xtask/mpi-matrix"))]
    out: PathBuf,
    /// Score the runs already recorded in the output directory.
    #[arg(long)]
    table_only: bool,
    /// Learn the interference model from this many clean runs of each
    /// program, drawn from all its clean runs (learning ones first, then
    /// the scored ones) starting at `--learn-offset` and wrapping around;
    /// every other clean run is scored. Default: the learning runs as
    /// recorded. With `--table-only`, measures how many clean runs the
    /// model needs for no false verdict on the rest.
    #[arg(long)]
    learn_from: Option<usize>,
    /// Where in the list of clean runs `--learn-from` starts.
    #[arg(long, default_value_t = 0)]
    learn_offset: usize,
    /// How long a run with a hang fault records before it is stopped
    /// (seconds; default: as long as any 4-rank run, 12). The hang comes
    /// early (5-8% of a clean run) and is called after at least 1 s of no
    /// MPI progress, so a few seconds show it.
    #[arg(long)]
    hang_limit: Option<u64>,
}

/// A program of the suite and its sizes. The iteration counts make a run
/// last about 1.5-3 s when the job gets its cores (load 6-9, issue 17's
/// session 26): at a third of that, runs of 0.5-1 s held 5-9 of the
/// recorder's 100 ms CPU readings, fewer than a CPU-deficit phase needs.
struct Program {
    name: &'static str,
    /// Fixture name.
    fixture: &'static str,
    /// Arguments with 2 pinned ranks, and with 4.
    args2: &'static [&'static str],
    args4: &'static [&'static str],
    /// Ranks a fault may be put on (the master of master/worker does not
    /// compute, so it is never paused or capped; see `rank_faults`).
    faulty: &'static [u32],
    /// Iteration of the in-program faults.
    fault_iter: u32,
    /// Kept out of the tuning of the analyses.
    held_out: bool,
}

const PROGRAMS: &[Program] = &[
    Program {
        name: "halo",
        fixture: "mpi_halo",
        args2: &["4500", "20000"],
        args4: &["600", "4000"],
        faulty: &[0, 1, 2, 3],
        fault_iter: 40,
        held_out: false,
    },
    Program {
        name: "wavefront",
        fixture: "mpi_wavefront",
        args2: &["1200", "2048"],
        args4: &["180", "512"],
        faulty: &[0, 1, 2, 3],
        fault_iter: 15,
        held_out: false,
    },
    Program {
        name: "master",
        fixture: "mpi_master",
        args2: &["1200", "800000"],
        args4: &["900", "400000"],
        faulty: &[1, 2, 3],
        fault_iter: 20,
        held_out: false,
    },
    Program {
        name: "collectives",
        fixture: "mpi_collectives",
        args2: &["1800", "40000"],
        args4: &["150", "20000"],
        faulty: &[0, 1, 2, 3],
        fault_iter: 10,
        held_out: false,
    },
    Program {
        name: "nonblocking",
        fixture: "mpi_nonblocking",
        args2: &["3000", "80000"],
        args4: &["300", "20000"],
        faulty: &[0, 1, 2, 3],
        fault_iter: 25,
        held_out: false,
    },
    Program {
        name: "cg",
        fixture: "mpi_cg",
        args2: &["1800", "40000"],
        args4: &["240", "20000"],
        faulty: &[0, 1, 2, 3],
        fault_iter: 20,
        held_out: true,
    },
];

/// Which part of the matrix a run belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Experiment {
    /// 2 pinned ranks, judged by the 002 verdict.
    Interference,
    /// 4 ranks, judged by the 004 verdict and the hang analysis.
    Outliers,
}

/// One recorded run.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct RunRecord {
    program: String,
    experiment: Experiment,
    /// Learning run (clean, or the hogged one of interference).
    learn: bool,
    fault: Fault,
    capture: PathBuf,
    /// The job's exit code; `None` when stopped (hung or over time).
    status: Option<i32>,
    elapsed_s: f64,
    /// Load average when the run started.
    load: f64,
    /// Where the job ran: its cpu group, or why it had none (absent in
    /// indexes written before jobs had groups).
    #[serde(default)]
    cpu_group: Option<String>,
    /// Whether the fault was made (a pause or cap due after the job ended
    /// was not); absent in older indexes: taken as made.
    #[serde(default = "made")]
    fault_applied: bool,
    /// The CPU a hog took while the ranks ran, share of its core (absent
    /// in older indexes and without a hog).
    #[serde(default)]
    hog_share: Option<f64>,
}

fn made() -> bool {
    true
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// When a pause and a cap start, from the median wall time of the clean
/// learning runs (`clean`): a fixed time (0.7 s, 0.3 s) let short jobs end
/// before the fault (issue 17: master's 4-rank runs end 0.65-0.87 s after
/// launch). A pause starts at 30% of a clean run, a cap at 15%, neither
/// before 0.3 s / 0.2 s (MPI_Init and the first calls); without clean runs,
/// at those floors.
fn fault_times(clean: &[f64]) -> (Duration, Duration) {
    let mut v: Vec<f64> = clean.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let median = v.get(v.len() / 2).copied().unwrap_or(0.0);
    let at = |share: f64, floor: f64| Duration::from_secs_f64((share * median).max(floor));
    (at(0.3, 0.3), at(0.15, 0.2))
}

/// The rank a rank fault of repetition `rep` is put on: every rank of
/// `list` in turn, starting at a place that differs by program. (It was
/// `rep * 3 + name length`: with master's 3 faulty ranks every repetition
/// hit rank 1.)
fn faulty_rank(list: &[u32], rep: usize, program: &str) -> u32 {
    list[(rep + program.len()) % list.len()]
}

fn faults_for(p: &Program, exp: Experiment, rep: usize, clean: &[f64]) -> Vec<Fault> {
    let (pause_at, cap_at) = fault_times(clean);
    let pick = |list: &[u32]| faulty_rank(list, rep, p.name);
    match exp {
        Experiment::Interference => vec![
            Fault::None,
            Fault::Hog {
                cpu: (rep % 2) as u32,
                on_off: false,
                slice_ms: 0,
                workers: 1,
            },
            Fault::Hog {
                cpu: ((rep + 1) % 2) as u32,
                on_off: true,
                slice_ms: on_off_turn_ms(clean),
                workers: 1,
            },
        ],
        Experiment::Outliers => {
            let r = pick(p.faulty);
            vec![
                Fault::None,
                Fault::Pause {
                    rank: r,
                    at: pause_at,
                    length: Duration::from_millis(1500),
                },
                Fault::Cap {
                    rank: r,
                    percent: 25,
                    at: cap_at,
                },
                Fault::Hang {
                    rank: r,
                    iter: p.fault_iter,
                },
                Fault::Exit {
                    rank: r,
                    iter: p.fault_iter,
                },
                Fault::Collective {
                    rank: r,
                    iter: p.fault_iter,
                },
            ]
        }
    }
}

fn wanted(list: &[String], name: &str) -> bool {
    list.is_empty() || list.iter().any(|x| x == name)
}

/// Runs the matrix.
pub(crate) fn mpi_matrix(a: &MatrixArgs) -> anyhow::Result<()> {
    let index = a.out.join("runs.json");
    if !a.table_only {
        if !is_root() {
            bail!("recording loads eBPF programs: run as root (after scripts/setup)");
        }
        let tracer = build_tracer(true)?;
        // SAFETY: single-threaded at this point; the harness reads it.
        unsafe { std::env::set_var("TRACER_BIN", &tracer) };
        std::fs::create_dir_all(&a.out)?;
        let bin = a.out.join("bin");
        std::fs::create_dir_all(&bin)?;
        let mut runs: Vec<RunRecord> = Vec::new();
        let started = Instant::now();
        for p in PROGRAMS.iter().filter(|p| wanted(&a.programs, p.name)) {
            let exe = build(p.fixture, &bin);
            for exp in [Experiment::Interference, Experiment::Outliers] {
                let (ranks, args, limit) = match exp {
                    Experiment::Interference => (2, p.args2, Duration::from_secs(20)),
                    Experiment::Outliers => (4, p.args4, Duration::from_secs(12)),
                };
                let job = Job {
                    exe: exe.clone(),
                    args: args.iter().map(|s| s.to_string()).collect(),
                    ranks,
                    limit,
                };
                let dir = a.out.join(p.name).join(format!("{exp:?}").to_lowercase());
                std::fs::create_dir_all(&dir)?;
                let mut plan: Vec<(bool, Fault, String)> = (0..a.learn_runs)
                    .map(|i| (true, Fault::None, format!("learn-clean-{i}")))
                    .collect();
                if exp == Experiment::Interference {
                    plan.push((
                        true,
                        Fault::Hog {
                            cpu: 1,
                            on_off: false,
                            slice_ms: 0,
                            workers: 1,
                        },
                        "learn-hog".into(),
                    ));
                }
                let learning = plan.len();
                // The faulty runs are planned once the clean learning runs
                // have said how long the job lasts.
                let mut clean_s: Vec<f64> = Vec::new();
                let mut i = 0;
                while i < plan.len() || (i == learning && a.runs > 0) {
                    if i == learning {
                        for rep in 0..a.runs {
                            for f in faults_for(p, exp, rep, &clean_s) {
                                if wanted(&a.faults, f.name()) {
                                    plan.push((false, f, format!("{}-{rep}", f.name())));
                                }
                            }
                        }
                        if i >= plan.len() {
                            break;
                        }
                    }
                    let (learn, fault, name) = plan[i].clone();
                    i += 1;
                    let capture = dir.join(format!("{name}.capture"));
                    let load = load_average();
                    let o = match a.hang_limit {
                        Some(s) if fault.hangs() => record(
                            &Job {
                                limit: Duration::from_secs(s),
                                ..job.clone()
                            },
                            fault,
                            &capture,
                        ),
                        _ => record(&job, fault, &capture),
                    };
                    // Said once, and for every run without a group of its own.
                    if runs.is_empty() || o.cpu_group.starts_with("no ") {
                        println!("job in: {}", o.cpu_group);
                    }
                    println!(
                        "[{:>5.0} s] {} {:?} {name}: {:.1} s, exit {:?} (load {load:.1}){}{}",
                        started.elapsed().as_secs_f64(),
                        p.name,
                        exp,
                        o.elapsed.as_secs_f64(),
                        o.status.and_then(|s| s.code()),
                        o.hog_share
                            .map(|h| format!(", hog took {:.0}% of its core", h * 100.0))
                            .unwrap_or_default(),
                        if o.fault_applied {
                            ""
                        } else {
                            "; fault NOT made: the job ended first"
                        },
                    );
                    if learn && fault == Fault::None {
                        clean_s.push(o.elapsed.as_secs_f64());
                    }
                    runs.push(RunRecord {
                        program: p.name.into(),
                        experiment: exp,
                        learn,
                        fault,
                        capture,
                        status: o.status.and_then(|s| s.code()),
                        elapsed_s: o.elapsed.as_secs_f64(),
                        load,
                        cpu_group: Some(o.cpu_group.clone()),
                        fault_applied: o.fault_applied,
                        hog_share: o.hog_share,
                    });
                    std::fs::write(&index, serde_json::to_vec_pretty(&runs)?)?;
                }
            }
        }
        println!(
            "recorded {} runs in {:.0} s",
            runs.len(),
            started.elapsed().as_secs_f64()
        );
    }
    let text = std::fs::read(&index).with_context(|| format!("reading {}", index.display()))?;
    let runs: Vec<RunRecord> = serde_json::from_slice(&text)?;
    score(&runs, a)
}

fn open(path: &Path) -> anyhow::Result<(Capture, Profiles)> {
    let cap = Capture::open(path).with_context(|| format!("reading {}", path.display()))?;
    let profiles =
        mpi::extract(&[&cap]).with_context(|| format!("profiles of {}", path.display()))?;
    Ok((cap, profiles))
}

/// One judged run.
struct Judged {
    program: String,
    fault: String,
    right: bool,
    /// A verdict on a clean run, or a wrong rank named.
    false_verdict: bool,
    /// A hang whose culprit was named.
    culprit_named: Option<bool>,
    what: String,
}

fn score(runs: &[RunRecord], a: &MatrixArgs) -> anyhow::Result<()> {
    let mut judged: Vec<Judged> = Vec::new();
    // Runs whose fault was never made are not runs of that fault: counted
    // apart, not scored.
    let mut not_made: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut programs: Vec<&str> = runs.iter().map(|r| r.program.as_str()).collect();
    programs.dedup();
    for prog in programs {
        if !wanted(&a.programs, prog) {
            continue;
        }
        for exp in [Experiment::Interference, Experiment::Outliers] {
            let set: Vec<&RunRecord> = runs
                .iter()
                .filter(|r| r.program == prog && r.experiment == exp)
                .collect();
            if set.is_empty() {
                continue;
            }
            // Which runs this model learns from (by position in `set`).
            let mut learning: Vec<bool> = set.iter().map(|r| r.learn).collect();
            if let (Some(n), Experiment::Interference) = (a.learn_from, exp) {
                // Learning clean runs first, then the scored ones.
                let mut pool: Vec<usize> = (0..set.len())
                    .filter(|&i| set[i].fault == Fault::None)
                    .collect();
                pool.sort_by_key(|&i| !set[i].learn);
                if n == 0 || n >= pool.len() {
                    bail!(
                        "{prog}: --learn-from {n} needs between 1 and {} clean runs",
                        pool.len().saturating_sub(1)
                    );
                }
                for &i in &pool {
                    learning[i] = false;
                }
                for j in 0..n {
                    learning[pool[(a.learn_offset + j) % pool.len()]] = true;
                }
            }
            let learn_clean: Vec<(Capture, Profiles)> = set
                .iter()
                .zip(&learning)
                .filter(|(r, l)| **l && r.fault == Fault::None)
                .map(|(r, _)| open(&r.capture))
                .collect::<anyhow::Result<_>>()?;
            let learn_int: Vec<(Capture, Profiles)> = set
                .iter()
                .filter(|r| r.learn && r.fault != Fault::None)
                .map(|r| open(&r.capture))
                .collect::<anyhow::Result<_>>()?;
            let model = match exp {
                Experiment::Interference => Some(
                    mpi::learn(
                        &learn_clean.iter().map(|x| &x.1).collect::<Vec<_>>(),
                        &learn_int.iter().map(|x| &x.1).collect::<Vec<_>>(),
                        &LearnConfig::default(),
                    )
                    .with_context(|| format!("learning {prog}"))?,
                ),
                Experiment::Outliers => None,
            };
            if let Some(m) = &model {
                // What the thresholds rest on: held-out clean values.
                let list = |v: &[f64]| {
                    v.iter()
                        .map(|x| format!("{x:.2}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                println!(
                    "model {prog}: K {}, per-sample threshold max(1 + K·σ, clean tail {}); {}",
                    m.k,
                    m.clean_tail.map_or("-".into(), |t| format!("{t:.3}")),
                    m.learned_from()
                );
                for p in &m.processors {
                    println!(
                        "model {prog} rank {}: m clean [{}] -> {:.2}; cpu clean [{}] -> {}; short (reading > {}) clean [{}] -> {}",
                        p.rank,
                        list(&p.clean_metrics),
                        p.threshold,
                        list(&p.cpu_clean),
                        p.cpu_threshold.map_or("-".into(), |t| format!("{t:.2}")),
                        p.cpu_reading_bound
                            .map_or("-".into(), |t| format!("{t:.2}")),
                        list(&p.cpu_short_clean),
                        p.cpu_short_bound
                            .as_ref()
                            .map_or("-".into(), |b| format!("{:.2}", b.threshold))
                    );
                }
            }
            let clean_runs: Vec<JudgeRun<'_>> = learn_clean
                .iter()
                .map(|(c, p)| JudgeRun {
                    profiles: p,
                    captures: vec![c],
                })
                .collect();
            for (r, _) in set.iter().zip(&learning).filter(|(_, l)| !**l) {
                if !wanted(&a.faults, r.fault.name()) {
                    continue;
                }
                if !r.fault_applied {
                    *not_made
                        .entry((prog.to_string(), r.fault.name().to_string()))
                        .or_default() += 1;
                    continue;
                }
                let (cap, profiles) = open(&r.capture)?;
                let j = match (&model, exp) {
                    (Some(model), _) => judge_interference(model, &profiles, r),
                    (None, _) => judge_outliers(&cap, &profiles, &clean_runs, r),
                };
                judged.push(Judged {
                    program: prog.to_string(),
                    ..j
                });
            }
        }
    }
    // Every run, with its scores against their thresholds.
    println!("\nper run:");
    for j in &judged {
        let mark = match (j.right, j.false_verdict) {
            (true, _) => "right",
            (false, true) => "FALSE",
            (false, false) => "missed",
        };
        println!("- {} {} {mark}: {}", j.program, j.fault, j.what);
    }
    // Per program and fault.
    /// Runs, right, false verdicts, what the misses said.
    type Cell = (usize, usize, usize, Vec<String>);
    let mut table: BTreeMap<(String, String), Cell> = BTreeMap::new();
    for j in &judged {
        let e = table
            .entry((j.program.clone(), j.fault.clone()))
            .or_default();
        e.0 += 1;
        e.1 += usize::from(j.right);
        e.2 += usize::from(j.false_verdict);
        if !j.right {
            e.3.push(j.what.clone());
        }
    }
    println!("\n| program | fault | runs | right | false verdicts | misses |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for ((p, f), (n, right, fv, misses)) in &table {
        let held = PROGRAMS.iter().any(|x| x.name == p && x.held_out);
        println!(
            "| {p}{} | {f} | {n} | {right} | {fv} | {} |",
            if held { " (held out)" } else { "" },
            misses.join("; ")
        );
    }
    for ((p, f), n) in &not_made {
        println!("{p} {f}: {n} run(s) not scored: the job ended before the fault was due");
    }
    let total = judged.len();
    let right = judged.iter().filter(|j| j.right).count();
    let clean: Vec<&Judged> = judged.iter().filter(|j| j.fault == "clean").collect();
    let clean_false = clean.iter().filter(|j| j.false_verdict).count();
    let hangs: Vec<bool> = judged.iter().filter_map(|j| j.culprit_named).collect();
    println!(
        "\nright: {right} of {total} ({:.1}%); clean runs with a false verdict: {clean_false} of {}; hangs with the culprit named: {} of {}",
        100.0 * right as f64 / total.max(1) as f64,
        clean.len(),
        hangs.iter().filter(|x| **x).count(),
        hangs.len()
    );
    let missed_target = (right * 10 < total * 9) || clean_false > 0 || hangs.iter().any(|x| !x);
    let loads: Vec<f64> = runs
        .iter()
        .map(|r| r.load)
        .filter(|x| x.is_finite())
        .collect();
    if !loads.is_empty() {
        let mut l = loads.clone();
        l.sort_by(f64::total_cmp);
        println!(
            "load average at the start of runs: min {:.1}, median {:.1}, max {:.1}",
            l[0],
            l[l.len() / 2],
            l[l.len() - 1]
        );
    }
    if missed_target {
        bail!(
            "targets (>= 90% right, no false verdict on clean runs, every hang's culprit named) not met"
        );
    }
    Ok(())
}

fn judge_interference(model: &mpi::Model, p: &Profiles, r: &RunRecord) -> Judged {
    let d = mpi::detect(model, p);
    let named = d.verdict.suspect_ranks();
    // What each rank scored against its thresholds: why a miss stayed under.
    let num = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
    let scores: Vec<String> = d
        .processors
        .iter()
        .map(|x| {
            format!(
                "r{} m {}/{} parts {} y {} x {} cpu {}/{} short {}/{}",
                x.rank,
                num(x.metric),
                num(x.threshold),
                x.metric_parts
                    .iter()
                    .map(|m| num(*m))
                    .collect::<Vec<_>>()
                    .join(":"),
                x.beyond_peers.map_or("-".into(), |v| format!("{v:.3}")),
                x.own_slowdown.map_or("-".into(), |v| format!("{v:.3}")),
                num(x.cpu_deficit),
                num(x.cpu_threshold),
                num(x.cpu_short),
                num(x.cpu_short_threshold)
            )
        })
        .collect();
    let scores = format!(" [{}]", scores.join(", "));
    let (right, false_verdict, what) = match r.fault {
        Fault::Hog { cpu, .. } => {
            let expected: Vec<u32> = p
                .ranks
                .iter()
                .filter(|x| x.cpus == [cpu])
                .map(|x| x.rank)
                .collect();
            let right = !expected.is_empty() && named == expected;
            let wrong = named.iter().any(|n| !expected.contains(n));
            (
                right,
                wrong,
                format!(
                    "core {cpu} (rank {expected:?}): {}{scores}",
                    d.verdict.summary
                ),
            )
        }
        _ => {
            let ok = d.verdict.outcome == Outcome::NothingAbnormal;
            (
                ok,
                !named.is_empty(),
                format!("{}{scores}", d.verdict.summary),
            )
        }
    };
    Judged {
        program: String::new(),
        fault: r.fault.name().to_string(),
        right,
        false_verdict,
        culprit_named: None,
        what,
    }
}

fn judge_outliers(cap: &Capture, p: &Profiles, clean: &[JudgeRun<'_>], r: &RunRecord) -> Judged {
    let j = judge(
        &JudgeRun {
            profiles: p,
            captures: vec![cap],
        },
        clean,
    );
    let mut sites = mpi::sites::Sites::new(&[cap]);
    let hang = waitfor::analyze_sited(p, None, &mut |r, addr| sites.label(&r.host, r.pid, addr));
    let named = j.verdict.suspect_ranks();
    let scores: Vec<String> = j
        .phases
        .iter()
        .map(|(rank, p)| {
            let t = j.phase_thresholds.get(rank).copied().unwrap_or(f64::NAN);
            let cpu = match (j.cpu_phases.get(rank), j.cpu_thresholds.get(rank)) {
                (Some((d, _)), Some(t)) => format!(" cpu {d:.2}/{t:.2}"),
                _ => String::new(),
            };
            format!("r{rank} phase {:.2}/{t:.2}{cpu}", p.score)
        })
        .collect();
    let scores = format!(" [{}]", scores.join(", "));
    let culprits: Vec<u32> = hang.culprits.iter().map(|c| c.rank).collect();
    let (right, false_verdict, culprit_named, what) = match r.fault {
        Fault::None => (
            named.is_empty() && !hang.hung,
            !named.is_empty() || hang.hung,
            None,
            format!(
                "{}{}{scores}",
                j.verdict.summary,
                if hang.hung { "; HUNG" } else { "" }
            ),
        ),
        Fault::Pause { rank, .. } | Fault::Cap { rank, .. } => (
            named == [rank],
            named.iter().any(|n| *n != rank),
            None,
            format!("rank {rank}: {}{scores}", j.verdict.summary),
        ),
        Fault::Hang { rank, .. } | Fault::Exit { rank, .. } | Fault::Collective { rank, .. } => {
            let ok = hang.hung && culprits == [rank];
            (
                ok,
                culprits.iter().any(|c| *c != rank),
                Some(ok),
                format!("rank {rank}: hung {} culprits {culprits:?}", hang.hung),
            )
        }
        Fault::Hog { .. } => (false, false, None, "hog in a 4-rank run".into()),
    };
    Judged {
        program: String::new(),
        fault: r.fault.name().to_string(),
        right,
        false_verdict,
        culprit_named,
        what,
    }
}

#[cfg(test)]
mod timing_tests {
    use super::*;

    #[test]
    fn rank_faults_visit_every_faulty_rank() {
        for p in PROGRAMS {
            let hit: std::collections::BTreeSet<u32> = (0..p.faulty.len())
                .map(|rep| faulty_rank(p.faulty, rep, p.name))
                .collect();
            assert_eq!(hit.len(), p.faulty.len(), "{}: {hit:?}", p.name);
        }
    }

    #[test]
    fn faults_start_inside_short_jobs() {
        // Clean runs of 0.7-0.9 s: the former fixed 0.7 s pause came after
        // most of them had ended.
        let (pause, cap) = fault_times(&[0.9, 0.7, 0.8]);
        assert!(pause < Duration::from_secs_f64(0.8 / 2.0), "{pause:?}");
        assert!(cap < pause, "{cap:?} {pause:?}");
        let (pause, cap) = fault_times(&[3.0, 3.2, 2.8]);
        assert_eq!(pause, Duration::from_millis(900));
        assert_eq!(cap, Duration::from_millis(450));
        // No clean runs: the floors.
        assert_eq!(
            fault_times(&[]),
            (Duration::from_millis(300), Duration::from_millis(200))
        );
    }

    #[test]
    fn on_off_hogs_turn_several_times_in_a_short_job() {
        // cg's 2-rank runs: 0.56-0.68 s; at least three on turns in them.
        let turn = on_off_turn_ms(&[0.6, 0.56, 0.68]);
        assert!(3 * 2 * turn <= 600, "{turn} ms");
        // Long jobs keep 400 ms turns, and so do runs without clean timings.
        assert_eq!(on_off_turn_ms(&[3.0, 2.9, 3.1]), 400);
        assert_eq!(on_off_turn_ms(&[]), 400);
        // Never shorter than the scheduler and sleep can keep.
        assert_eq!(on_off_turn_ms(&[0.2]), 100);
    }
}
