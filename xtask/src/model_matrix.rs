//! `cargo xtask model-matrix`: the bug-class suite of model-based
//! localization (issue 20) on every program of `tests::bugclass`: per
//! program, normal runs learned, fresh normal runs scored for false
//! alarms, and every fault class injected at a random daemon and a random
//! time, scored for detection (the earliest anomaly is in the faulty
//! process) and top-1 (the highest-ranked unit is).
//!
//! Recording and scoring are apart: `--table-only` scores the runs an
//! earlier command recorded again (after a change to the analysis).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, bail};
use clap::Args;
use serde::{Deserialize, Serialize};
use tests::bugclass::{self, FaultClass, Injection, Program, RecordedRun};

use crate::{build_tracer, is_root};

use tests::bugclass::LEARN;

/// Version of the matrix's `runs.json`.
const RUNS_VERSION: u32 = 1;

#[derive(Debug, Args)]
pub(crate) struct ModelMatrixArgs {
    /// Programs, comma-separated (statusring, kvcluster, pyjobs, treeagg,
    /// tpcpool, gossip, replog); default: all. treeagg, tpcpool, gossip and replog are held
    /// out of tuning and reported apart.
    #[arg(long, value_delimiter = ',')]
    programs: Vec<String>,
    /// Fault classes, comma-separated (skip, extra, branch, partial, hang,
    /// crash); default: all.
    #[arg(long, value_delimiter = ',')]
    classes: Vec<String>,
    /// Repetitions of each class on each program (a random daemon and time
    /// each).
    #[arg(long, default_value_t = 10)]
    reps: usize,
    /// Fresh normal runs per program, scored for false alarms.
    #[arg(long, default_value_t = 20)]
    normals: usize,
    /// Normal runs per program whose recorder is stopped while every daemon
    /// still runs (`tracer record --duration`, as a user who records
    /// running daemons and stops the recorder), scored for false alarms in
    /// a column of their own. The learned runs all end with the daemons'
    /// exit.
    #[arg(long, default_value_t = 10)]
    stopped: usize,
    /// When the recorder of a stopped run stops, ms after it started the
    /// program: long enough that a thread waiting for work (an accept, a
    /// join, an idle connection) has waited over a second.
    #[arg(long, default_value_t = 2500)]
    stop_after_ms: u64,
    /// How many times as long as a normal run a stopped run's program is
    /// made (rounds, requests, jobs), so that its daemons still run at the
    /// stop.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    stopped_scale: u32,
    /// Normal runs learned per program.
    #[arg(long, default_value_t = LEARN)]
    learn: usize,
    /// Seed of the random daemons, times and crash modes (default: the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Directory of the captures and `runs.json` (one subdirectory per
    /// program).
    #[arg(short, long)]
    output: PathBuf,
    /// Score the runs recorded in OUTPUT again; record nothing.
    #[arg(long)]
    table_only: bool,
    /// Print each run's verdict.
    #[arg(long)]
    verbose: bool,
    /// Make every run this many times as long (rounds, requests, jobs;
    /// faults drawn over the longer run): with `--overhead`, so that the
    /// budget acts (its first look is after 250 ms) before most faults.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    scale: u32,
    /// Record every run (learned, normal, faulty) under this overhead
    /// budget (`tracer record --overhead`, e.g. 5%).
    #[arg(long)]
    overhead: Option<String>,
    /// With --overhead: record the normal and faulty runs `tracer record
    /// --like` the model learned from the learned runs (written to
    /// OUTPUT/PROGRAM/model.json), so that their budget keeps the model's
    /// functions while others can go.
    #[arg(long, requires = "overhead")]
    like_learned: bool,
}

/// What one program's directory holds.
#[derive(Debug, Serialize, Deserialize)]
struct Runs {
    version: u32,
    learn: Vec<RecordedRun>,
    normal: Vec<RecordedRun>,
    faulty: Vec<RecordedRun>,
    /// Normal runs whose recorder stopped while the daemons ran (absent
    /// from matrices recorded before they were).
    #[serde(default)]
    stopped: Vec<RecordedRun>,
}

/// xorshift64*: the matrix needs reproducible draws, not a crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub(crate) fn model_matrix(a: &ModelMatrixArgs) -> anyhow::Result<()> {
    let programs: Vec<Program> = if a.programs.is_empty() {
        Program::ALL.to_vec()
    } else {
        a.programs
            .iter()
            .map(|p| p.parse().map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()?
    };
    let classes: Vec<FaultClass> = if a.classes.is_empty() {
        FaultClass::ALL.to_vec()
    } else {
        a.classes
            .iter()
            .map(|c| c.parse().map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()?
    };
    if !a.table_only {
        if !is_root() {
            bail!("recording loads eBPF programs: run as root (or --table-only on recorded runs)");
        }
        let tracer = build_tracer(true)?;
        let seed = a.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        }) | 1;
        eprintln!("model-matrix: seed {seed}");
        let mut rng = Rng(seed);
        for &program in &programs {
            record_program(&tracer, program, &classes, a, &mut rng)?;
        }
    }
    let mut rows = Vec::new();
    for &program in &programs {
        rows.extend(score_program(program, &classes, a)?);
    }
    print_table(&rows);
    let path = a.output.join("results.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&rows)?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("per-cell results: {}", path.display());
    Ok(())
}

/// Records the learned, normal and faulty runs of `program`.
fn record_program(
    tracer: &Path,
    program: Program,
    classes: &[FaultClass],
    a: &ModelMatrixArgs,
    rng: &mut Rng,
) -> anyhow::Result<()> {
    let dir = a.output.join(program.name());
    std::fs::create_dir_all(&dir)?;
    let exe = bugclass::executable(program);
    // Ports: a block of this process reused run after run (the programs
    // listen with SO_REUSEADDR; a run's ports are free once it ended).
    let width = program.ports() + 1;
    let base = tests::port_block(width * 8);
    let mut slot = 0u16;
    let mut port = || {
        slot = (slot + 1) % 8;
        base + slot * width
    };
    let started = Instant::now();
    let like: std::cell::RefCell<Option<PathBuf>> = Default::default();
    // `stopped`: the scale of a run whose recorder stops early.
    let mut record = |name: String,
                      fault: Option<Injection>,
                      stopped: Option<u32>|
     -> anyhow::Result<RecordedRun> {
        let out = dir.join(format!("{name}.capture"));
        let length = bugclass::Length {
            scale: stopped.unwrap_or(a.scale),
            overhead: a.overhead.clone(),
            like: like.borrow().clone(),
            stop_after: stopped.map(|_| std::time::Duration::from_millis(a.stop_after_ms)),
        };
        let run =
            bugclass::record_with(tracer, program, &exe, &out, port(), fault.as_ref(), &length)
                .map_err(anyhow::Error::msg)?;
        eprintln!(
            "  {program} {name}: {} ({:.0} s)",
            run.outcome,
            started.elapsed().as_secs_f64()
        );
        Ok(run)
    };
    let mut runs = Runs {
        version: RUNS_VERSION,
        learn: Vec::new(),
        normal: Vec::new(),
        faulty: Vec::new(),
        stopped: Vec::new(),
    };
    // A run without a fault that the launcher had to stop (a slow, loaded
    // machine) is no normal run: it is recorded again, and kept after five
    // tries, when the table shows what its report said.
    let mut normal = |name: String| -> anyhow::Result<RecordedRun> {
        let mut attempt = 0;
        loop {
            let shown = match attempt {
                0 => name.clone(),
                n => format!("{name}-{n}"),
            };
            let run = record(shown, None, None)?;
            if !run.outcome.contains("hung") || attempt == 4 {
                return Ok(run);
            }
            eprintln!("  {program} {name}: stopped by its launcher, no normal run; recorded again");
            attempt += 1;
        }
    };
    for i in 0..a.learn {
        runs.learn.push(normal(format!("learn-{i}"))?);
    }
    if a.like_learned {
        let learned: Vec<PathBuf> = runs.learn.iter().map(|r| r.capture.clone()).collect();
        let path = dir.join("model.json");
        std::fs::write(&path, serde_json::to_vec(&bugclass::learn(&learned))?)
            .with_context(|| format!("writing {}", path.display()))?;
        *like.borrow_mut() = Some(path);
    }
    for i in 0..a.normals {
        runs.normal.push(normal(format!("normal-{i}"))?);
    }
    // A stopped run in which a daemon ended before the stop (a program
    // faster than its scale allowed for) is not what it should be:
    // recorded again twice as long, and kept after five tries, when
    // scoring leaves it out and says so. The next run starts at the
    // length that sufficed.
    let mut scale = a.scale.saturating_mul(a.stopped_scale);
    for i in 0..a.stopped {
        for attempt in 0..5 {
            let name = match attempt {
                0 => format!("stopped-{i}"),
                n => format!("stopped-{i}-{n}"),
            };
            let run = record(name, None, Some(scale))?;
            if bugclass::daemons_ran_at_stop(&run) || attempt == 4 {
                runs.stopped.push(run);
                break;
            }
            scale = scale.saturating_mul(2);
            eprintln!(
                "  {program} stopped-{i}: a daemon ended before the stop; recorded again {scale} times as long as a normal run"
            );
        }
    }
    let at = program.fault_at();
    for &class in classes {
        for r in 0..a.reps {
            // A fault its daemon never reached (a worker that got fewer
            // jobs) is drawn again.
            for attempt in 0..5 {
                let fault = Injection {
                    class,
                    node: rng.below(u64::from(program.daemons())) as u32,
                    at: at.start()
                        + rng.below(u64::from(at.end() * a.scale - at.start() + 1)) as u32,
                    crash: program.crash_modes()
                        [rng.below(program.crash_modes().len() as u64) as usize]
                        .to_string(),
                };
                // A draw again is a new capture: the one that missed stays.
                let name = match attempt {
                    0 => format!("{class}-{r}"),
                    n => format!("{class}-{r}-{n}"),
                };
                let run = record(name, Some(fault), None)?;
                if run.fired || attempt == 4 {
                    runs.faulty.push(run);
                    break;
                }
                eprintln!("  {program} {class}-{r}: the fault was not reached; drawn again");
            }
        }
    }
    let path = dir.join("runs.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&runs)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// One cell of the matrix.
#[derive(Debug, Serialize)]
struct Row {
    program: Program,
    held_out: bool,
    /// `None`: the fresh normal runs.
    class: Option<FaultClass>,
    /// Normal runs whose recorder stopped while the daemons ran.
    #[serde(default)]
    stopped: bool,
    /// Runs whose report holds a hung thread ([`analyzer::score::Evidence::Hung`]).
    #[serde(default)]
    hung: usize,
    /// Stopped runs left out: a daemon ended before the stop.
    #[serde(default)]
    left_out: usize,
    runs: usize,
    detected: usize,
    top1: usize,
    alarms: usize,
    /// Runs whose report could not judge some units and found nothing in
    /// the others (their budget detached functions the model has): no
    /// answer, counted apart from detections and from wrong answers.
    cannot_judge: usize,
    /// Faulty runs whose earliest anomaly is in another process.
    wrong: usize,
    /// Runs that missed, with their fault and the report's summary.
    misses: Vec<String>,
}

/// The row of a program's fault-free runs: the fresh normal runs, or
/// (`stopped`) those whose recorder stopped while the daemons ran, of
/// which a run where a daemon ended before the stop is left out.
fn score_quiet(
    program: Program,
    model: &analyzer::model::GlobalModel,
    runs: &[RecordedRun],
    stopped: bool,
    verbose: bool,
) -> Row {
    let mut row = Row {
        program,
        held_out: program.held_out(),
        class: None,
        stopped,
        hung: 0,
        left_out: 0,
        runs: 0,
        detected: 0,
        top1: 0,
        alarms: 0,
        cannot_judge: 0,
        wrong: 0,
        misses: Vec::new(),
    };
    for run in runs {
        if stopped && !bugclass::daemons_ran_at_stop(run) {
            row.left_out += 1;
            continue;
        }
        let report = bugclass::score(model, &run.capture);
        let outcome = bugclass::judge(run, &report);
        row.runs += 1;
        row.hung += usize::from(has_hung(&report));
        row.cannot_judge += usize::from(outcome.cannot_judge);
        if outcome.alarm {
            row.alarms += 1;
            row.misses
                .push(format!("{}: {}", run.capture.display(), outcome.summary));
        }
        if verbose {
            eprintln!(
                "  {program} {} {}: {}",
                if stopped { "stopped" } else { "normal" },
                run.capture.display(),
                outcome.summary
            );
        }
    }
    row
}

fn score_program(
    program: Program,
    classes: &[FaultClass],
    a: &ModelMatrixArgs,
) -> anyhow::Result<Vec<Row>> {
    let dir = a.output.join(program.name());
    let path = dir.join("runs.json");
    let text = std::fs::read(&path).with_context(|| {
        format!(
            "reading {} (record it first, without --table-only)",
            path.display()
        )
    })?;
    let runs: Runs = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not the matrix's runs.json", path.display()))?;
    if runs.version != RUNS_VERSION {
        bail!("{}: version {}, record again", path.display(), runs.version);
    }
    let learned: Vec<PathBuf> = runs.learn.iter().map(|r| r.capture.clone()).collect();
    let model = bugclass::learn(&learned);
    let mut rows = vec![score_quiet(program, &model, &runs.normal, false, a.verbose)];
    if !runs.stopped.is_empty() {
        rows.push(score_quiet(program, &model, &runs.stopped, true, a.verbose));
    }
    let mut by_class: BTreeMap<FaultClass, Row> = BTreeMap::new();
    for run in &runs.faulty {
        let Some(fault) = &run.injection else {
            continue;
        };
        if !classes.contains(&fault.class) || !run.fired {
            continue;
        }
        let report = bugclass::score(&model, &run.capture);
        let outcome = bugclass::judge(run, &report);
        let row = by_class.entry(fault.class).or_insert_with(|| Row {
            program,
            held_out: program.held_out(),
            class: Some(fault.class),
            stopped: false,
            hung: 0,
            left_out: 0,
            runs: 0,
            detected: 0,
            top1: 0,
            alarms: 0,
            cannot_judge: 0,
            wrong: 0,
            misses: Vec::new(),
        });
        row.runs += 1;
        row.hung += usize::from(has_hung(&report));
        row.detected += usize::from(outcome.detected);
        row.top1 += usize::from(outcome.top1);
        row.alarms += usize::from(outcome.alarm);
        row.cannot_judge += usize::from(outcome.cannot_judge);
        row.wrong += usize::from(outcome.alarm && !outcome.detected);
        if !outcome.detected || !outcome.top1 {
            row.misses.push(format!(
                "{} (daemon {} pid {:?}, at {}, {}): detected {}, top-1 {}: {}",
                run.capture.display(),
                fault.node,
                run.faulty_pid(),
                fault.at,
                run.outcome,
                outcome.detected,
                outcome.top1,
                outcome.summary
            ));
        }
        if a.verbose {
            eprintln!(
                "  {program} {} daemon {} at {}: detected {} top-1 {}: {}",
                fault.class, fault.node, fault.at, outcome.detected, outcome.top1, outcome.summary
            );
        }
    }
    rows.extend(by_class.into_values());
    Ok(rows)
}

/// Whether an anomalous unit of `report` holds a hung thread.
fn has_hung(report: &analyzer::score::ScoreReport) -> bool {
    report.units.iter().any(|u| {
        u.anomalous
            && u.evidence
                .iter()
                .any(|e| matches!(e, analyzer::score::Evidence::Hung { .. }))
    })
}

fn pct(n: usize, of: usize) -> String {
    if of == 0 {
        "-".to_string()
    } else {
        format!("{n}/{of} ({:.0}%)", 100.0 * n as f64 / of as f64)
    }
}

fn print_table(rows: &[Row]) {
    for held_out in [false, true] {
        let rows: Vec<&Row> = rows.iter().filter(|r| r.held_out == held_out).collect();
        if rows.is_empty() {
            continue;
        }
        println!(
            "\n{}",
            if held_out {
                "held out of tuning:"
            } else {
                "programs the defaults were chosen on:"
            }
        );
        println!(
            "| program | class | runs | detection | top-1 | wrong process | cannot judge | false alarms |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for r in &rows {
            match r.class {
                None => println!(
                    "| {} | {} | {} | | | | {} | {} |",
                    r.program,
                    if r.stopped { "stopped early" } else { "normal" },
                    r.runs,
                    pct(r.cannot_judge, r.runs),
                    pct(r.alarms, r.runs)
                ),
                Some(c) => println!(
                    "| {} | {} | {} | {} | {} | {} | {} | |",
                    r.program,
                    c,
                    r.runs,
                    pct(r.detected, r.runs),
                    pct(r.top1, r.runs),
                    pct(r.wrong, r.runs),
                    pct(r.cannot_judge, r.runs)
                ),
            }
        }
        println!(
            "(wrong process: the earliest anomaly is in another process; cannot judge: the report found nothing in the units it could judge and could not judge the others, as their capture's overhead budget detached functions the model has: no answer, neither a detection nor a wrong one; stopped early: normal runs whose recorder stopped while every daemon ran)"
        );
        for r in &rows {
            let kind = match r.class {
                Some(c) => c.name(),
                None if r.stopped => "stopped early",
                None => "normal",
            };
            if r.class.is_none() && r.hung > 0 {
                println!(
                    "  {} {kind}: {} run(s) with a hung thread",
                    r.program, r.hung
                );
            }
            if r.left_out > 0 {
                println!(
                    "  {} {kind}: {} run(s) left out, a daemon ended before the stop",
                    r.program, r.left_out
                );
            }
            for m in &r.misses {
                println!("  miss [{} {kind}]: {m}", r.program);
            }
        }
    }
}
