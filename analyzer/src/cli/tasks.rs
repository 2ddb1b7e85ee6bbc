//! `analyzer tasks …`: abnormal MPI tasks and edges with semi-Markov
//! models (AutomaDeD, paper 004).

use std::{io::Write, path::PathBuf};

use analyzer::{
    Capture,
    automaded::{self, Method, OutlierConfig, Phase, hang, report},
    mpi,
};
use anyhow::{Context as _, bail};
use clap::{Subcommand, ValueEnum};

/// One-line help of `analyzer tasks`.
pub(crate) const ABOUT: &str =
    "Abnormal MPI tasks and code regions from semi-Markov models (AutomaDeD)";

/// `analyzer tasks --help`.
pub(crate) const LONG_ABOUT: &str = "\
Abnormal MPI tasks and code regions from semi-Markov models (Laguna et al.,
AutomaDeD, SC11).

Each rank becomes a graph: states are MPI calls at their call sites and the
computation between consecutive calls; an edge carries how often the
transition happens and how long it takes (communication and computation
time kept apart). Ranks are compared edge by edge, chains common to every
rank are compressed, and the rank farthest from its cluster's medoid (or
from its nearest sampled rank) is reported with the edges that make it
different.

Record the ranks first (at least 3; with 2 the two distances are equal):

  tracer record --mpi --sample-hz 0 -o run.capture -- mpiexec -n 4 ./app

Then:
  analyzer tasks outliers run.capture
  analyzer tasks outliers run.capture --method sample --json
  analyzer tasks outliers run.capture --svg tasks.svg --top 3
  analyzer tasks outliers master.capture --clusters 2 --min-cluster 1
  analyzer tasks outliers hung.capture --hang-after 10

A rank that made no MPI transition for longer than --hang-after
(or longer than the longest transition of --hang-learn normal captures) is
reported as hung and the analysis runs on what was recorded so far.

Tasks of different kinds (a master and its workers) form clusters of their
own: give their number with --clusters, and --min-cluster 1 so a lone
master keeps its cluster. Timing faults need ranks that agree: with two
ranks, or oversubscribed cores, scheduling noise can outweigh them.";

/// How tasks are compared.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum MethodArg {
    /// k-medoids clustering (FasterPAM), k by BIC, distance over cluster sd.
    Kmedoids,
    /// Nearest neighbour among a deterministic sample of tasks.
    Sample,
}

/// `analyzer tasks` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TasksCommand {
    /// Rank tasks by how abnormal they are; show their abnormal edges.
    ///
    /// Example: analyzer tasks outliers run.capture --svg tasks.svg
    Outliers {
        /// Captures of one run (one per host, or one with every rank).
        #[arg(required = true)]
        captures: Vec<PathBuf>,
        /// k-medoids or sample (nearest neighbour).
        #[arg(long, value_enum, default_value = "kmedoids")]
        method: MethodArg,
        /// Abnormal tasks to show.
        #[arg(long, default_value_t = 5)]
        top: usize,
        /// Abnormal edges to show per task.
        #[arg(long, default_value_t = 5)]
        top_edges: usize,
        /// k-medoids with this many clusters instead of choosing k by BIC
        /// (e.g. 2 for a master and its workers).
        #[arg(long, value_name = "K")]
        clusters: Option<usize>,
        /// Clusters with fewer tasks are merged into the nearest larger one
        /// (their tasks are then outliers); 1 keeps every cluster.
        #[arg(long, value_name = "N", default_value_t = OutlierConfig::default().min_cluster)]
        min_cluster: usize,
        /// Compare the full graphs (no chain compression).
        #[arg(long)]
        no_compress: bool,
        /// Only calls entered at or after this many seconds into the run.
        #[arg(long, value_name = "SECONDS")]
        from: Option<f64>,
        /// Only calls entered before this many seconds into the run.
        #[arg(long, value_name = "SECONDS")]
        to: Option<f64>,
        /// Only each rank's calls number A..B (0-based; an iteration range
        /// when every iteration makes the same calls).
        #[arg(long, value_name = "A..B", conflicts_with_all = ["from", "to"])]
        calls: Option<String>,
        /// A clean run of the same program (repeat for more; a run on
        /// several hosts is its captures joined by commas): each rank is
        /// judged against its own behaviour there. Without, against its own
        /// phases and the other ranks of this run.
        #[arg(long, value_name = "CAPTURE[,CAPTURE...]")]
        clean: Vec<String>,
        /// A rank with no MPI transition for this long is hung (10, 10s,
        /// 500ms); the models then end where each rank stood. Without, a
        /// hang is still reported, with this run's own threshold.
        #[arg(long, value_name = "DURATION", value_parser = super::peers::duration_ns)]
        hang_after: Option<u64>,
        /// Learn the hang threshold: the longest transition of these
        /// captures of normal runs.
        #[arg(long, value_name = "CAPTURE", conflicts_with = "hang_after")]
        hang_learn: Vec<PathBuf>,
        /// JSON (the verdict, the hang analysis, every task) instead of text.
        #[arg(long)]
        json: bool,
        /// Also write an SVG of every task's normalized distance.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// Is the run hung, and which rank holds the others up? Builds the
    /// wait-for graph of where each rank was when recording stopped:
    /// receive sources, collectives, the requests a wait completes, and
    /// ranks dead, stopped or computing outside MPI.
    ///
    /// Example: analyzer tasks hang run.capture
    Hang {
        /// Captures of one run (one per host, or one with every rank).
        #[arg(required = true)]
        captures: Vec<PathBuf>,
        /// A rank with no MPI transition for this long is hung (default:
        /// ten times this run's 99th-percentile transition, at least 1 s).
        #[arg(long, value_name = "DURATION", value_parser = super::peers::duration_ns)]
        hang_after: Option<u64>,
        /// Learn the threshold: the longest transition of these captures of
        /// normal runs.
        #[arg(long, value_name = "CAPTURE", conflicts_with = "hang_after")]
        hang_learn: Vec<PathBuf>,
        /// JSON (the versioned report) instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The hang threshold: given, learned from normal captures, or this run's.
fn hang_threshold(
    hang_after: Option<u64>,
    hang_learn: &[PathBuf],
) -> anyhow::Result<Option<(u64, &'static str)>> {
    Ok(match (hang_after, hang_learn.is_empty()) {
        (Some(ns), _) => Some((ns, "given")),
        (None, false) => {
            let (_, normal) =
                super::mpi::profiles(hang_learn).context("learning the hang threshold")?;
            Some((mpi::waitfor::max_transition_ns(&normal), "learned"))
        }
        (None, true) => None,
    })
}

fn phase(from: Option<f64>, to: Option<f64>, calls: Option<&str>) -> anyhow::Result<Phase> {
    if let Some(c) = calls {
        let (a, b) = c
            .split_once("..")
            .with_context(|| format!("--calls {c}: expected A..B, e.g. 100..200"))?;
        let a: usize = a
            .trim()
            .parse()
            .with_context(|| format!("--calls {c}: bad start"))?;
        let b: usize = b
            .trim()
            .parse()
            .with_context(|| format!("--calls {c}: bad end"))?;
        if b <= a {
            bail!("--calls {c}: the end must be after the start");
        }
        return Ok(Phase::Calls { from: a, to: b });
    }
    if from.is_none() && to.is_none() {
        return Ok(Phase::Whole);
    }
    let ns = |s: f64| (s.max(0.0) * 1e9) as u64;
    Ok(Phase::Window {
        from_ns: from.map_or(0, ns),
        to_ns: to.map_or(u64::MAX, ns),
    })
}

/// Says on stderr which objects' call sites were shown without lines, and
/// why (another build on this machine, no debug file...).
fn note_missing_lines(sites: &mpi::sites::Sites<'_>) {
    for note in sites.missing_notes() {
        eprintln!("note: {note}");
    }
}

/// Says which ranks were numbered by pid order (their launcher's rank
/// was not read), if any: every rank the reports name is by that number.
fn note_rank_numbering(profiles: &mpi::Profiles) {
    if let Some(note) = profiles.rank_numbering_note() {
        eprintln!("note: {note}");
    }
}

/// Runs one `tasks` subcommand.
pub(crate) fn run(cmd: TasksCommand, out: &mut impl Write) -> anyhow::Result<()> {
    if let TasksCommand::Hang {
        captures,
        hang_after,
        hang_learn,
        json,
    } = cmd
    {
        let (caps, profiles) = super::mpi::profiles(&captures)?;
        let refs: Vec<&Capture> = caps.iter().collect();
        let mut sites = mpi::sites::Sites::new(&refs);
        let report = mpi::waitfor::analyze_sited(
            &profiles,
            hang_threshold(hang_after, &hang_learn)?,
            &mut |r, addr| sites.label(&r.host, r.pid, addr),
        );
        if json {
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "version": mpi::waitfor::HANG_VERSION,
                    "verdict": report.verdict(&profiles),
                    "hang": report,
                    "rank_numbering": profiles.rank_numbering_note(),
                }))?
            )?;
        } else {
            write!(
                out,
                "{}",
                mpi::report::hang_text(&report, &profiles, &mut sites)
            )?;
            note_missing_lines(&sites);
            note_rank_numbering(&profiles);
        }
        return Ok(());
    }
    let TasksCommand::Outliers {
        captures,
        method,
        top,
        top_edges,
        clusters,
        min_cluster,
        no_compress,
        from,
        to,
        calls,
        clean,
        hang_after,
        hang_learn,
        json,
        svg,
    } = cmd
    else {
        return Ok(());
    };
    let phase = phase(from, to, calls.as_deref())?;
    let (caps, profiles) = super::mpi::profiles(&captures)?;
    let refs: Vec<&Capture> = caps.iter().collect();
    // Clean runs, each its captures joined by commas.
    let mut clean_runs = Vec::new();
    for run in &clean {
        let paths: Vec<PathBuf> = run
            .split(',')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        clean_runs.push(super::mpi::profiles(&paths).with_context(|| format!("clean run {run}"))?);
    }
    let judged = automaded::verdict::judge(
        &automaded::verdict::Run {
            profiles: &profiles,
            captures: refs.clone(),
        },
        &clean_runs
            .iter()
            .map(|(c, p)| automaded::verdict::Run {
                profiles: p,
                captures: c.iter().collect(),
            })
            .collect::<Vec<_>>(),
    );
    let explicit = hang_threshold(hang_after, &hang_learn)?;
    let mut sites = mpi::sites::Sites::new(&refs);
    let hang_report = mpi::waitfor::analyze_sited(&profiles, explicit, &mut |r, addr| {
        sites.label(&r.host, r.pid, addr)
    });
    // With an explicit threshold the models end where each rank stood (the
    // paper's hang analysis); without, the ranking keeps its meaning: how
    // each rank's completed behaviour differs.
    let tails = explicit
        .filter(|_| hang_report.hung)
        .map(|_| hang::tails_of(&profiles));
    let models = automaded::smm::build_with_tails(&profiles, &refs, phase, tails.as_ref());
    let cfg = OutlierConfig {
        method: match method {
            MethodArg::Kmedoids => Method::Kmedoids,
            MethodArg::Sample => Method::Sample,
        },
        top,
        top_edges,
        clusters,
        min_cluster: min_cluster.max(1),
        compress: !no_compress,
        ..OutlierConfig::default()
    };
    let analysis = match automaded::analyze(&models, &cfg) {
        Ok(a) => Some(a),
        Err(e @ automaded::OutlierError::TooFewTasks { .. }) => {
            if !json {
                writeln!(out, "(no AutomaDeD ranking: {e})")?;
            }
            None
        }
    };
    if json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "version": automaded::ANALYSIS_VERSION,
                "verdict": judged.verdict,
                "judgement": judged,
                "hang_verdict": hang_report.verdict(&profiles),
                "hang": hang_report,
                "analysis": analysis,
                "rank_numbering": profiles.rank_numbering_note(),
            }))?
        )?;
    } else {
        write!(out, "{}", report::verdict_text(&judged))?;
        note_rank_numbering(&profiles);
        if hang_report.hung {
            writeln!(out)?;
            write!(
                out,
                "{}",
                mpi::report::hang_text(&hang_report, &profiles, &mut sites)
            )?;
            note_missing_lines(&sites);
        }
        if let Some(a) = &analysis {
            writeln!(
                out,
                "\nAutomaDeD ranking ({}; how each rank's model differs from its reference):",
                if tails.is_some() {
                    "models end where each rank stood"
                } else {
                    "completed transitions"
                }
            )?;
            write!(out, "{}", report::text(a))?;
        }
    }
    if let (Some(path), Some(a)) = (svg, &analysis) {
        std::fs::write(&path, report::svg(a))
            .with_context(|| format!("writing {}", path.display()))?;
        if !json {
            writeln!(out, "\nplot of every task's distance: {}", path.display())?;
        }
    }
    Ok(())
}
