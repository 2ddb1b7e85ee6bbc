//! `analyzer diagnose`: every analysis that applies to one run, one
//! combined verdict, and the HTML report.

use std::{io::Write, path::PathBuf, process::ExitCode};

use analyzer::{
    Capture,
    automaded::{self, OutlierConfig, Phase, hang},
    debuginfo::SourceLines,
    diagnose::{
        self, AnalysisKind, AnalysisResult, Diagnosis, Level, Outcome, Status,
        from::{self, RunServers},
        html::{self, Reports},
    },
    mpi::{self, Profiles},
    peers::{self, PeersConfig, ServerSplit, Thresholds},
    score::{Ranking, ScoreReport, Scoring, score_with_blocked},
    units::decompose_capture,
};
use anyhow::{Context as _, bail};
use clap::Args;

/// `analyzer diagnose` arguments.
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct DiagnoseArgs {
    /// The captures of one run: capture files, or directories of them
    /// (every `*.capture` inside). One capture per server or host; a
    /// capture may hold several processes (daemons, MPI ranks).
    #[arg(required = true, value_name = "RUN")]
    run: Vec<PathBuf>,
    /// A model of normal runs (`analyzer model learn`): score every
    /// execution unit against it.
    #[arg(short, long, value_name = "MODEL")]
    model: Option<PathBuf>,
    /// Peer thresholds learned from normal runs (`analyzer peers train`).
    /// Without them, runs of three or more captures are compared untrained:
    /// a server is anomalous where it stands far out from the others, a
    /// weaker verdict the report labels as such.
    #[arg(short, long, value_name = "THRESHOLDS")]
    thresholds: Option<PathBuf>,
    /// An MPI interference model (`analyzer mpi learn`): the interference
    /// metric per processor.
    #[arg(long, value_name = "MPI_MODEL")]
    mpi_model: Option<PathBuf>,
    /// A rank with no MPI transition for this long is hung (e.g. 10s);
    /// default: ten times this run's 99th-percentile transition, at least
    /// 1 s.
    #[arg(long, value_name = "DURATION", value_parser = super::peers::duration_ns)]
    hang_after: Option<u64>,
    /// Write the report as one self-contained HTML file (opens offline).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Print the combined verdict as JSON (versioned) instead of text.
    #[arg(long)]
    json: bool,
    /// Suspects to print per level (text).
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Also look for debug files in DIR (by build id, `DIR/.build-id/xx/
    /// yyyy.debug`, and by .gnu_debuglink name), for the source lines of
    /// call sites. Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dirs: Vec<PathBuf>,
}

/// `analyzer diagnose --help`.
pub(crate) const LONG_ABOUT: &str = "\
Run every analysis that applies to one run and combine their verdicts.

Given the captures of one run (files, or directories of them: one capture
per server or host), diagnose runs:
  model       with --model: each execution unit's suspect score against a
              model of normal runs (analyzer model learn);
  peers       with three or more captures: each server compared with its
              peers window by window, with --thresholds (analyzer peers
              train), or untrained (clearly labelled) without;
  interference  when the captures hold MPI calls and --mpi-model is given;
  outliers    when the captures hold MPI calls: ranks whose behaviour differs
              from the others' (AutomaDeD);
  hang        when the captures hold MPI calls: ranks that stopped making
              progress, and the rank that holds them up.

It prints one ranked verdict: suspects per level (server, process, unit,
function), each with the analyses that point at it, their scores against
the normal range, when it first showed, and a sentence; where the analyses
disagree; and, for each analysis, whether it ran, found something, found
nothing standing out, or had no data (and why).

Exit status: 0 nothing found (or no analysis could judge the run: the
output says which), 1 a suspect was found, 2 usage or input errors.

Examples:
  analyzer diagnose faulty.capture --model model.json -o report.html
  analyzer diagnose run-7/ --thresholds thresholds.json --json
  analyzer diagnose mpi-run.capture --mpi-model mpi-model.json -o report.html";

/// Runs `diagnose`; the exit status says whether a suspect was found.
pub(crate) fn run(
    args: DiagnoseArgs,
    out: &mut impl Write,
    ui: &super::Ui,
) -> anyhow::Result<ExitCode> {
    let files = capture_files(&args.run)?;
    // Inputs that are wrong are errors before any work (exit status 2).
    let model = args
        .model
        .as_deref()
        .map(analyzer::load::model)
        .transpose()
        .with_context(|| "reading --model")?;
    let thresholds = args
        .thresholds
        .as_deref()
        .map(super::peers::load_thresholds)
        .transpose()
        .with_context(|| "reading --thresholds")?;
    let mpi_model = args
        .mpi_model
        .as_deref()
        .map(super::mpi::load_model)
        .transpose()
        .with_context(|| "reading --mpi-model")?;

    let bar = ui.bar(files.len() as u64 + 3, "diagnosing");
    let mut captures = Vec::with_capacity(files.len());
    let mut warnings = Vec::new();
    for f in &files {
        bar.set_message(format!("reading {}", f.display()));
        let cap = super::open(f)?;
        warnings.extend(super::capture_warnings(f, &cap));
        captures.push(cap);
        bar.inc(1);
    }
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let servers = RunServers::new(
        &names
            .iter()
            .zip(&captures)
            .map(|(n, c)| (n.clone(), c.header.host.clone()))
            .collect::<Vec<_>>(),
    );

    // Where threads stood at the end, read once: shown in the report and
    // judged by the model. Source lines of the evidence's call sites come
    // from the recorded objects' debug information on this machine.
    let mut lines = SourceLines::new(&args.debug_dirs);
    let blocked: Vec<Vec<analyzer::blocked::BlockedThread>> = captures
        .iter()
        .map(|cap| analyzer::blocked::blocked_threads(cap, Some(&mut lines)))
        .collect();

    let mut results = Vec::new();
    bar.set_message("model-based scores");
    let model_report = match &model {
        Some(m) => {
            // Units built from the functions the model was learned with;
            // the other analyses see every function again afterwards.
            let mut notes: Vec<String> = m.left_out_note().into_iter().collect();
            for (name, cap) in names.iter().zip(captures.iter_mut()) {
                if let Some(why) = m.prepare(cap) {
                    notes.push(format!("{name}: {why}"));
                }
            }
            let report = score(m, &names, &captures, &blocked);
            for cap in &mut captures {
                cap.left_out.clear();
            }
            let mut result = from::model(&report, &servers);
            result.notes.extend(notes);
            results.push(result);
            Some(report)
        }
        None => {
            results.push(AnalysisResult::not_run(
                AnalysisKind::Model,
                "no --model: learn one from normal runs with `analyzer model learn`",
            ));
            None
        }
    };
    bar.inc(1);

    bar.set_message("peer comparison");
    let peers_report = compare_peers(&files, &captures, thresholds.as_ref(), &mut results);
    bar.inc(1);

    bar.set_message("MPI analyses");
    let refs: Vec<&Capture> = captures.iter().collect();
    let mpi = mpi_analyses(
        &refs,
        mpi_model.as_ref(),
        args.hang_after,
        &servers,
        &args.debug_dirs,
    );
    bar.inc(1);
    bar.finish_and_clear();
    let (interference, outliers, hang_report) = match mpi {
        Ok(m) => {
            results.extend(m.results);
            for n in &m.line_notes {
                ui.say(&format!("note: {n}"));
            }
            (m.interference, m.outliers, m.hang)
        }
        Err(why) => {
            for kind in [
                AnalysisKind::Interference,
                AnalysisKind::Outliers,
                AnalysisKind::Hang,
            ] {
                results.push(match &why {
                    MpiSkip::NoCalls => AnalysisResult::not_run(
                        kind,
                        "no MPI calls in the captures (record ranks with `tracer record --mpi -- mpiexec ...`)",
                    ),
                    MpiSkip::Failed(e) => AnalysisResult::failed(kind, e.clone()),
                });
            }
            (None, None, None)
        }
    };

    let refs: Vec<&Capture> = captures.iter().collect();
    diagnose::sources::add_source_lines(&mut results, &refs, &mut lines);
    for (object, why) in lines.missing() {
        ui.say(&format!("note: no source lines for {object}: {why}"));
    }
    let at_end = names
        .iter()
        .zip(&captures)
        .zip(blocked)
        .map(|((name, cap), threads)| diagnose::AtEnd {
            capture: name.clone(),
            host: cap.header.host.clone(),
            threads,
        })
        .filter(|a| !a.threads.is_empty())
        .collect();
    let mut d = diagnose::combine(names, results, servers.count());
    d.warnings = warnings;
    d.at_end = at_end;
    if let Some(path) = &args.output {
        let reports = Reports {
            model: model_report.as_ref(),
            peers: peers_report.as_ref(),
            interference: interference.as_ref(),
            outliers: outliers.as_ref().map(|(j, a)| (j, a.as_ref())),
            hang: hang_report.as_ref(),
        };
        std::fs::write(path, html::render(&d, &reports))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&d)?)?;
    } else {
        write!(out, "{}", text(&d, args.top))?;
        if let Some(path) = &args.output {
            writeln!(out, "report: {}", path.display())?;
        }
    }
    Ok(if d.outcome == Outcome::SuspectFound {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The capture files of the arguments: files as given, directories'
/// `*.capture` files.
fn capture_files(args: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for a in args {
        if a.is_dir() {
            files.extend(super::peers::captures_in(a)?);
        } else if a.is_file() {
            files.push(a.clone());
        } else {
            bail!("{}: no such capture file or directory", a.display());
        }
    }
    // A file named twice (alone and in its directory) is one capture.
    let mut seen = std::collections::HashSet::new();
    files.retain(|f| seen.insert(f.clone()));
    Ok(files)
}

/// Scores every capture's units against the model (as `model score`);
/// `blocked`: each capture's blocked threads.
fn score(
    model: &analyzer::model::GlobalModel,
    names: &[String],
    caps: &[Capture],
    blocked: &[Vec<analyzer::blocked::BlockedThread>],
) -> ScoreReport {
    let scoring = Scoring::default();
    let mut scores = Vec::new();
    let mut quiet = Vec::with_capacity(caps.len());
    for ((name, cap), blocked) in names.iter().zip(caps).zip(blocked) {
        let processes = decompose_capture(cap, model.variant);
        let links = analyzer::units::Links::of(cap);
        scores.extend(score_with_blocked(
            model, cap, &links, name, &processes, scoring, blocked,
        ));
        quiet.push((
            analyzer::units::quiet_span(&processes, cap.end.as_ref().map(|e| e.stop_ns)),
            cap.header.clock.monotonic_ns,
            links,
        ));
    }
    let mut report = ScoreReport::new(model.variant, scoring, Ranking::Evidence, names, scores);
    for (name, (span, origin, links)) in names.iter().zip(quiet) {
        report.judge_quiet(model, name, span, origin, Some(&links));
    }
    report
}

/// The peer comparison, trained or untrained, when the run has servers
/// enough; its result goes to `results`.
fn compare_peers(
    files: &[PathBuf],
    captures: &[Capture],
    thresholds: Option<&Thresholds>,
    results: &mut Vec<AnalysisResult>,
) -> Option<peers::Report> {
    const MIN: usize = 3;
    // Thresholds trained per process (`--split-processes`) compare the
    // daemons inside the captures, however many captures there are.
    let per_process =
        thresholds.is_some_and(|t| matches!(t.config.split, ServerSplit::PerProcess { .. }));
    if files.len() < MIN && !per_process {
        results.push(AnalysisResult::not_run(
            AnalysisKind::Peers,
            format!(
                "{} capture(s): peer comparison needs one capture per server, at least {MIN} servers (`analyzer peers --split-processes` compares the daemons of one capture)",
                files.len()
            ),
        ));
        return None;
    }
    let name = run_name(files);
    let outcome = match thresholds {
        Some(t) => super::peers::analyze_opened(&name, files, captures, &t.config, 1)
            .map(|scored| (peers::diagnose(&scored, t, t.config.k, 10), false)),
        None => untrained(&name, files, captures).context(
            "untrained comparison (windows of 2 s or more, over the time every capture covers)",
        ),
    };
    match outcome {
        Ok((report, untrained)) => {
            results.push(from::peers(&report, untrained));
            Some(report)
        }
        Err(e) => {
            results.push(AnalysisResult::failed(
                AnalysisKind::Peers,
                format!("{e:#}"),
            ));
            None
        }
    }
}

fn run_name(files: &[PathBuf]) -> String {
    files
        .first()
        .and_then(|f| f.parent())
        .map_or_else(|| ".".to_string(), |p| p.display().to_string())
}

/// What an untrained comparison of three servers cannot see. A server's
/// score is its median distance to the others: with two others, the mean of
/// both. One server standing out by d from two alike ones scores d, they
/// d/2, so the threshold (twice the median score) is d itself, never
/// exceeded; by the triangle inequality this holds for any three servers
/// in any window.
const THREE_UNTRAINED: &str = "with 3 servers, an untrained comparison cannot name a server that stood out all along: each server's score is the mean of its distances to the other two, so one standing out never scores over twice the median score (the threshold); it is named only where it stood out in fewer than half of the windows. Compare 4 or more servers, or train thresholds on normal runs (`analyzer peers train`)";

/// Peer comparison without learned thresholds ([`peers::untrained`]),
/// windows sized to the run ([`peers::untrained_windows`]).
fn untrained(
    name: &str,
    files: &[PathBuf],
    captures: &[Capture],
) -> anyhow::Result<(peers::Report, bool)> {
    let (window_ns, shift_ns) = peers::untrained_windows(0);
    let mut cfg = PeersConfig {
        window_ns,
        shift_ns,
        ..PeersConfig::default()
    };
    // The span is known once the features are extracted: a first pass
    // with the smallest windows measures it (features are binned by the
    // window's and shift's gcd, so larger windows need a second pass).
    let probe = super::peers::analyze_opened(name, files, captures, &cfg, 1);
    let span_ns = probe.as_ref().map_or(0, |scored| {
        let starts = &scored.windowed.starts;
        match (starts.first(), starts.last()) {
            (Some(a), Some(b)) => b - a + cfg.window_ns,
            _ => 0,
        }
    });
    (cfg.window_ns, cfg.shift_ns) = peers::untrained_windows(span_ns);
    let scored = if cfg.window_ns == window_ns {
        probe?
    } else {
        super::peers::analyze_opened(name, files, captures, &cfg, 1)?
    };
    let thresholds = peers::untrained(&scored, &cfg);
    let mut report = peers::diagnose(&scored, &thresholds, cfg.k, 10);
    if scored.servers.len() == 3 {
        report.notes.insert(0, THREE_UNTRAINED.to_string());
    }
    report.notes.insert(
        0,
        format!(
            "untrained comparison: {} s windows every {} s; per metric a threshold of {} times the median score of this run's servers and windows; train thresholds on normal runs (`analyzer peers train`) for a calibrated verdict",
            cfg.window_ns / 1_000_000_000,
            cfg.shift_ns as f64 / 1e9,
            peers::UNTRAINED_FACTOR
        ),
    );
    Ok((report, true))
}

/// Why the MPI analyses did not run.
enum MpiSkip {
    NoCalls,
    Failed(String),
}

/// What the MPI analyses produced.
struct MpiResults {
    results: Vec<AnalysisResult>,
    interference: Option<mpi::Detection>,
    outliers: Option<(automaded::verdict::Judgement, Option<automaded::Analysis>)>,
    hang: Option<mpi::waitfor::HangReport>,
    /// Why some call sites have no source lines.
    line_notes: Vec<String>,
}

/// Interference (with a model), outlier ranks and hangs, when the
/// captures hold MPI calls.
fn mpi_analyses(
    refs: &[&Capture],
    model: Option<&mpi::Model>,
    hang_after: Option<u64>,
    servers: &RunServers,
    debug_dirs: &[PathBuf],
) -> Result<MpiResults, MpiSkip> {
    let profiles: Profiles =
        mpi::extract(refs).map_err(|e| MpiSkip::Failed(format!("building MPI profiles: {e}")))?;
    if profiles.ranks.is_empty() {
        return Err(MpiSkip::NoCalls);
    }
    let servers = &servers.clone().with_ranks(
        profiles
            .ranks
            .iter()
            .map(|r| (r.host.clone(), r.rank, r.pid))
            .collect(),
    );
    let mut results = Vec::new();
    let interference = match model {
        Some(m) => {
            let d = mpi::detect(m, &profiles);
            results.push(from::interference(&d, servers));
            Some(d)
        }
        None => {
            results.push(AnalysisResult::not_run(
                AnalysisKind::Interference,
                "no --mpi-model: learn one from clean runs with `analyzer mpi learn`",
            ));
            None
        }
    };
    let explicit = hang_after.map(|ns| (ns, "given"));
    let mut sites = mpi::sites::Sites::with_debug_dirs(refs, debug_dirs);
    let hang_report = mpi::waitfor::analyze_sited(&profiles, explicit, &mut |r, addr| {
        sites.label(&r.host, r.pid, addr)
    });
    let judged = automaded::verdict::judge(
        &automaded::verdict::Run {
            profiles: &profiles,
            captures: refs.to_vec(),
        },
        &[],
    );
    // As `tasks outliers`: models end where each rank stood only with an
    // explicit hang threshold.
    let tails = explicit
        .filter(|_| hang_report.hung)
        .map(|_| hang::tails_of(&profiles));
    let models = automaded::smm::build_with_tails(&profiles, refs, Phase::Whole, tails.as_ref());
    let ranking = automaded::analyze(&models, &OutlierConfig::default()).ok();
    results.push(from::outliers(&judged, ranking.as_ref(), servers));
    let verdict = hang_report.verdict(&profiles);
    // A rank's last MPI transition, on its capture's clock.
    let mut since = |w: &mpi::waitfor::RankWait| {
        let last = profiles
            .ranks
            .iter()
            .find(|r| r.host == w.host && r.pid == w.pid)
            .map(|r| r.last_ns)
            .filter(|ns| *ns > 0);
        let clock = refs
            .iter()
            .find(|c| c.header.host == w.host)
            .map(|c| c.header.clock);
        match (last, clock) {
            (Some(ns), Some(clock)) => (
                Some(clock.to_realtime(ns)).filter(|w| *w > 0),
                Some((ns as f64 - clock.monotonic_ns as f64) / 1e9),
            ),
            _ => (None, None),
        }
    };
    results.push(from::hang(
        &hang_report,
        &verdict,
        servers,
        &mut |w| sites.label(&w.host, w.pid, w.call_site),
        &mut since,
    ));
    if let Some(note) = profiles.rank_numbering_note() {
        for r in &mut results {
            r.notes.push(note.clone());
        }
    }
    // Calls an overhead budget detached look like ranks that stopped
    // calling: no MPI analysis concludes anything from such captures.
    let detached = mpi::Detached::of(refs);
    if let Some(note) = detached.note() {
        for r in &mut results {
            if detached.loses_calls() && r.status != Status::NotRun {
                r.status = Status::NoData;
                r.summary = format!(
                    "not judged: an overhead budget detached MPI functions ({})",
                    detached
                        .calls
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                r.reason = Some(note.clone());
                r.findings.clear();
            } else {
                r.notes.push(note.clone());
            }
        }
    }
    Ok(MpiResults {
        results,
        interference,
        outliers: Some((judged, ranking)),
        hang: Some(hang_report),
        line_notes: sites.missing_notes(),
    })
}

/// Each analysis's score of a suspect against its normal range (the
/// model: the highest held-out score) or threshold (the others).
fn scores_of(x: &diagnose::Suspect) -> Vec<String> {
    x.analyses
        .iter()
        .filter_map(|a| {
            let f = x
                .findings
                .iter()
                .find(|f| f.analysis == *a && f.score.is_some())?;
            let score = f.score?;
            Some(match (a, f.normal) {
                (AnalysisKind::Model, Some(n)) => {
                    format!("{} {score:.3} (normal up to {n:.3})", a.name())
                }
                (AnalysisKind::Model, None) => {
                    format!("{} {score:.3} (no normal range learned for it)", a.name())
                }
                (_, Some(n)) => format!("{} {score:.3} (threshold {n:.3})", a.name()),
                (_, None) => format!("{} {score:.3}", a.name()),
            })
        })
        .collect()
}

/// The verdict for a terminal.
fn text(d: &Diagnosis, top: usize) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "verdict: {}",
        match d.outcome {
            Outcome::SuspectFound => "suspect found",
            Outcome::NothingStandsOut => "nothing stands out",
            Outcome::NoData => "no verdict (no analysis could judge the run)",
        }
    );
    for line in &d.summary {
        let _ = writeln!(s, "  {line}");
    }
    for w in &d.warnings {
        let _ = writeln!(s, "  warning: {w}");
    }
    for level in Level::ALL {
        let at: Vec<_> = d.at(level).collect();
        if at.is_empty() {
            continue;
        }
        let _ = writeln!(s, "suspect {}:", level.plural());
        for (i, x) in at.iter().take(top).enumerate() {
            let _ = writeln!(s, "  {}. {}", i + 1, x.sentence);
            let scores = scores_of(x);
            if !scores.is_empty() {
                let _ = writeln!(s, "     scores: {}", scores.join("; "));
            }
        }
        if at.len() > top {
            let _ = writeln!(
                s,
                "  ({} more; --top N, --json or -o report.html)",
                at.len() - top
            );
        }
    }
    at_end_text(&mut s, d, top);
    if !d.disagreements.is_empty() {
        let _ = writeln!(s, "where the analyses disagree:");
        for line in &d.disagreements {
            let _ = writeln!(s, "  {line}");
        }
    }
    if !d.unconfirmed.is_empty() {
        let _ = writeln!(s, "neither confirmed nor contradicted:");
        for line in &d.unconfirmed {
            let _ = writeln!(s, "  {line}");
        }
    }
    let _ = writeln!(s, "analyses:");
    for a in &d.analyses {
        let _ = writeln!(
            s,
            "  {:<13} {:<26} {}",
            a.analysis.name(),
            format!(
                "{}{}",
                a.status.describe(),
                if a.untrained { " (untrained)" } else { "" }
            ),
            match a.status {
                Status::NotRun | Status::Failed => a.reason.clone().unwrap_or_default(),
                _ => a.summary.clone(),
            }
        );
        for n in &a.notes {
            let _ = writeln!(s, "  {:<13} note: {n}", "");
        }
    }
    s
}

/// Threads shown per capture in the terminal's "at the end" list (the
/// longest blocked; the JSON and HTML reports have them all).
const AT_END_SHOWN: usize = 5;

/// Where threads stood at the end of each capture, longest blocked first.
fn at_end_text(s: &mut String, d: &Diagnosis, top: usize) {
    use std::fmt::Write as _;
    if d.at_end.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "at the end of the capture{} (threads inside a system call, longest blocked first):",
        if d.at_end.len() > 1 { "s" } else { "" }
    );
    let shown = AT_END_SHOWN.max(top);
    for a in &d.at_end {
        if d.at_end.len() > 1 {
            let _ = writeln!(s, "  {}:", a.capture);
        }
        for t in a.threads.iter().take(shown) {
            let _ = writeln!(s, "  - {}", t.sentence());
        }
        if a.threads.len() > shown {
            let _ = writeln!(
                s,
                "  ({} more threads; --json or -o report.html)",
                a.threads.len() - shown
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that is neither a capture nor a directory is refused by name.
    #[test]
    fn missing_inputs_are_named() {
        let err = capture_files(&[std::path::Path::new("/nonexistent/x.capture").to_path_buf()])
            .expect_err("missing");
        assert!(err.to_string().contains("/nonexistent/x.capture"), "{err}");
    }
}
