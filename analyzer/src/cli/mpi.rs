//! `analyzer mpi …`: MPI profiles and interference detection (paper 002).

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use analyzer::{
    Capture,
    mpi::{self, LearnConfig, Model, Profiles, TypicalConfig, learn::LearnError, report},
};
use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};

/// One-line help of `analyzer mpi`.
pub(crate) const ABOUT: &str =
    "MPI profiles and interference detection (Tabatabaee & Hollingsworth)";

/// `analyzer mpi --help`.
pub(crate) const LONG_ABOUT: &str = "\
MPI profiles and interference detection (Tabatabaee & Hollingsworth, SC07).

Record the ranks first: --mpi probes the MPI library's MPI_* functions with
the argument registers the peers come from, in every rank the launcher starts:

  tracer record --mpi --sample-hz 0 -o run.capture -- mpiexec -n 2 -bind-to core ./app ...

Then:
  analyzer mpi profile run.capture --parquet run.parquet
  analyzer mpi learn --clean c1.capture --clean c2.capture --clean c3.capture \\
      --interfered hog.capture -o model.json
  analyzer mpi detect --model model.json new.capture --svg ils.svg

Learn from runs without background load (at least 3: each is judged
against the others to set each processor's threshold) and, optionally,
runs with a background job (e.g. a CPU hog on one rank's core: taskset -c 1
stress-ng --cpu 1), which tune how many standard deviations count. detect
then gives a verdict per processor: interfered (its metric over its
threshold), nothing abnormal, or not monitored and why. Every processor is
judged against its own clean behaviour (ranks may differ by design) and the
other processors at the same time (so a whole run being slower, e.g.
another problem size, is not interference on one). With the recorder's CPU
readings, a processor short of CPU is named by them; the metric alone then
names one only when it is over its threshold in two of the run's three
thirds (a passing slowdown is said in the verdict, not named), and never
from fewer slow samples than clean noise gives. A sample is slow when it is
over its rank's clean spread and over 99% of the clean samples (a virtual
machine's clean runs have slow stretches of their own).

With fewer than 3 clean runs that 99% tail cannot be placed: slow
stretches last seconds, so one run (held out by halves) or two may have
none. learn then says so, and detect names no rank by the metric (the CPU
readings still name them; a run without them is \"not monitored\", with why).
Measured on a 2-vCPU VM (issue 17's suite of six programs, 8 clean runs
each, every rotation of the learning runs): learning from 1 clean run gave
8 false verdicts in 336 scored clean runs, from 2 runs 1, from 3 runs none.

Several captures of one run (one per host) are merged by MPI rank
(PMI_RANK; without it, pid order per capture).";

/// `analyzer mpi` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum MpiCommand {
    /// Per-rank MPI profiles: call counts, peers, computation and
    /// communication time; optionally exported as JSON lines or Parquet.
    ///
    /// Example: analyzer mpi profile run.capture --parquet run.parquet
    Profile {
        /// Captures of one run.
        #[arg(required = true)]
        captures: Vec<PathBuf>,
        /// Write one JSON object per call to this file.
        #[arg(long, value_name = "FILE")]
        jsonl: Option<PathBuf>,
        /// Write the calls as a Parquet file (DuckDB: SELECT * FROM 'FILE').
        #[arg(long, value_name = "FILE")]
        parquet: Option<PathBuf>,
        /// Print the whole profile (every call) as JSON instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// The typical sequences of a run (Sequitur rules found on every rank).
    Sequences {
        /// Captures of one run.
        #[arg(required = true)]
        captures: Vec<PathBuf>,
        #[command(flatten)]
        typical: TypicalArgs,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Learn per-processor thresholds from clean runs (and runs with a
    /// background job, if any).
    ///
    /// Each --clean or --interfered is one run; a run recorded on several
    /// hosts is its captures joined by commas (a.capture,b.capture).
    ///
    /// Example: analyzer mpi learn --clean c1.capture --clean c2.capture --clean c3.capture --interfered hog.capture -o model.json
    Learn {
        /// A run without background load (repeat for more runs: at least
        /// 3 for the interference metric to name a rank; with fewer, only
        /// the CPU readings do, and learn and detect say so).
        #[arg(long, required = true, value_name = "CAPTURE[,CAPTURE...]")]
        clean: Vec<String>,
        /// A run with a background job on some processor, e.g.
        /// `taskset -c 1 stress-ng --cpu 1` (repeat for more runs; optional:
        /// it tunes K and which sequences react).
        #[arg(long, value_name = "CAPTURE[,CAPTURE...]")]
        interfered: Vec<String>,
        /// Where to write the model (JSON).
        #[arg(short, long, default_value = "mpi-model.json")]
        output: PathBuf,
        /// Smallest ILS gain for a typical sequence to be used on a
        /// processor an interfered run hit.
        #[arg(long, default_value_t = LearnConfig::default().min_gain)]
        min_gain: f64,
        /// Filter: samples shorter than this many ms are ignored.
        #[arg(long, default_value_t = 0.5)]
        filter_ms: f64,
        #[command(flatten)]
        typical: TypicalArgs,
    },
    /// Interference metric per processor of a run, with a learned model.
    ///
    /// Example: analyzer mpi detect --model model.json run.capture --svg ils.svg
    Detect {
        /// The model from `analyzer mpi learn`.
        #[arg(short, long)]
        model: PathBuf,
        /// Captures of one run.
        #[arg(required = true)]
        captures: Vec<PathBuf>,
        /// JSON instead of text (includes every ILS series).
        #[arg(long)]
        json: bool,
        /// Also write ILS(p, l, t) against t as SVG (the paper's figures).
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
}

/// Typical-sequence options.
#[derive(Debug, Args)]
pub(crate) struct TypicalArgs {
    /// Rank whose profile feeds Sequitur (default: the lowest).
    #[arg(long)]
    reference_rank: Option<u32>,
    /// L: typical sequences kept.
    #[arg(long, default_value_t = TypicalConfig::default().max_sequences)]
    sequences: usize,
    /// Occurrences a rule needs on every rank.
    #[arg(long, default_value_t = TypicalConfig::default().min_occurrences)]
    min_occurrences: usize,
}

impl From<TypicalArgs> for TypicalConfig {
    fn from(a: TypicalArgs) -> Self {
        Self {
            reference_rank: a.reference_rank,
            max_sequences: a.sequences,
            min_occurrences: a.min_occurrences,
            ..Self::default()
        }
    }
}

/// Opens the captures of one run and builds their MPI profiles (the captures
/// are returned too: later steps symbolize with them).
pub(crate) fn profiles(paths: &[PathBuf]) -> anyhow::Result<(Vec<Capture>, Profiles)> {
    let captures = paths
        .iter()
        .map(|p| super::open(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let refs: Vec<&Capture> = captures.iter().collect();
    let profiles = mpi::extract(&refs).context("building MPI profiles")?;
    // Every MPI and tasks command reads its captures here: each says what
    // an overhead budget took from them.
    if let Some(note) = mpi::Detached::of(&refs).note() {
        eprintln!("note: {note}");
    }
    if profiles.ranks.is_empty() {
        bail!(
            "no MPI calls in {}: record with `tracer record --mpi -- mpiexec ...`",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok((captures, profiles))
}

pub(crate) fn load_model(path: &Path) -> anyhow::Result<Model> {
    Ok(analyzer::load::mpi_model(path)?)
}

/// Runs one `mpi` subcommand.
pub(crate) fn run(cmd: MpiCommand, out: &mut impl Write) -> anyhow::Result<()> {
    match cmd {
        MpiCommand::Profile {
            captures,
            jsonl,
            parquet,
            json,
        } => {
            let p = profiles(&captures)?.1;
            if let Some(path) = &jsonl {
                let file = std::fs::File::create(path)
                    .with_context(|| format!("creating {}", path.display()))?;
                mpi::write_jsonl(&p, std::io::BufWriter::new(file))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if let Some(path) = &parquet {
                let file = std::fs::File::create(path)
                    .with_context(|| format!("creating {}", path.display()))?;
                mpi::write_parquet(&p, std::io::BufWriter::new(file))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if json {
                writeln!(out, "{}", serde_json::to_string(&p)?)?;
                return Ok(());
            }
            for r in &p.ranks {
                let compute: u64 = r.calls.iter().map(|c| c.compute_ns).sum();
                let comm: u64 = r.calls.iter().map(|c| c.comm_ns).sum();
                writeln!(
                    out,
                    "rank {} ({:?}) {}[{}]@{} cpus {:?}: {} calls, computation {:.3} s, communication {:.3} s{}",
                    r.rank,
                    r.rank_source,
                    r.comm,
                    r.pid,
                    r.host,
                    r.cpus,
                    r.calls.len(),
                    compute as f64 / 1e9,
                    comm as f64 / 1e9,
                    if r.unfinished > 0 {
                        format!(", {} unfinished calls dropped", r.unfinished)
                    } else {
                        String::new()
                    }
                )?;
                let mut by: std::collections::BTreeMap<(String, String), usize> =
                    std::collections::BTreeMap::new();
                for c in &r.calls {
                    *by.entry((r.function_name(c).to_string(), c.peer.label()))
                        .or_default() += 1;
                }
                for ((f, peer), n) in by {
                    writeln!(out, "  {n:>8}  {f:<20} peer {peer}")?;
                }
            }
        }
        MpiCommand::Sequences {
            captures,
            typical,
            json,
        } => {
            let p = profiles(&captures)?.1;
            let ts = mpi::typical_sequences(&p, &typical.into());
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&ts)?)?;
            } else if ts.is_empty() {
                writeln!(
                    out,
                    "no typical sequence (no rule occurs often enough on every rank)"
                )?;
            } else {
                for t in &ts {
                    writeln!(out, "TS{:<3} {}", t.id, t.summary(12))?;
                }
            }
        }
        MpiCommand::Learn {
            clean,
            interfered,
            output,
            min_gain,
            filter_ms,
            typical,
        } => {
            let load = |runs: &[String]| -> anyhow::Result<Vec<Profiles>> {
                runs.iter()
                    .map(|run| {
                        let paths: Vec<PathBuf> = run
                            .split(',')
                            .filter(|p| !p.is_empty())
                            .map(PathBuf::from)
                            .collect();
                        profiles(&paths).map(|(_, p)| p)
                    })
                    .collect()
            };
            let normal = load(&clean)?;
            let int = load(&interfered)?;
            let config = LearnConfig {
                typical: typical.into(),
                min_gain,
                min_sample_ns: (filter_ms * 1e6) as u64,
                ..LearnConfig::default()
            };
            let model = match mpi::learn(
                &normal.iter().collect::<Vec<_>>(),
                &int.iter().collect::<Vec<_>>(),
                &config,
            ) {
                Ok(m) => m,
                Err(e @ LearnError::NoTypicalSequences { .. }) => {
                    return Err(e).context("try --min-occurrences 2 or longer runs");
                }
                Err(e) => return Err(e.into()),
            };
            let json = serde_json::to_vec_pretty(&model)?;
            std::fs::write(&output, &json)
                .with_context(|| format!("writing {}", output.display()))?;
            writeln!(
                out,
                "learned from {} clean and {} interfered run(s), K = {}, into {}",
                model.clean_runs,
                model.interfered.len(),
                model.k,
                output.display()
            )?;
            writeln!(out, "  {}", model.learned_from())?;
            if let Some(tail) = model.clean_tail {
                writeln!(
                    out,
                    "  a sample counts when Y > max(1 + K·σ, {tail:.3}): {:.0}% of the held-out clean samples were at or under {tail:.3}",
                    100.0 * mpi::learn::CLEAN_TAIL_QUANTILE
                )?;
            }
            for p in &model.processors {
                let used = p.sequences.iter().filter(|s| s.used).count();
                writeln!(
                    out,
                    "  rank {}@{}: {}",
                    p.rank,
                    p.host,
                    match &p.unmonitored {
                        Some(why) => format!("NOT MONITORED: {why}"),
                        None => format!(
                            "{} typical sequences ({used} used), threshold {:.3} (held-out clean runs: {})",
                            p.sequences.len(),
                            p.threshold,
                            p.clean_metrics
                                .iter()
                                .map(|m| format!("{m:.3}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    }
                )?;
            }
            for run in &model.interfered {
                writeln!(
                    out,
                    "  interfered run {}: {}",
                    run.index + 1,
                    if run.ranks.is_empty() {
                        "shows no interference on any processor (not used to tune K)".to_string()
                    } else {
                        run.ranks
                            .iter()
                            .zip(&run.metrics)
                            .map(|(r, m)| format!("rank {r} (m = {m:.3})"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )?;
            }
        }
        MpiCommand::Detect {
            model,
            captures,
            json,
            svg,
        } => {
            let model = load_model(&model)?;
            let p = profiles(&captures)?.1;
            let d = mpi::detect(&model, &p);
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&d)?)?;
            } else {
                write!(out, "{}", report::text(&d))?;
            }
            if let Some(path) = svg {
                let title = format!(
                    "ILS(p, l, t): {}",
                    captures
                        .iter()
                        .map(|c| c.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                std::fs::write(&path, report::ils_svg(&d, &title))
                    .with_context(|| format!("writing {}", path.display()))?;
                if !json {
                    writeln!(out, "ILS plot: {}", path.display())?;
                }
            }
        }
    }
    Ok(())
}
