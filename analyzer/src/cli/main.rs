//! `analyzer`: offline analysis of captures.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::ExitCode,
};

use analyzer::{
    Capture, Event,
    debuginfo::{AddressKind, SourceLines},
    decode::format::{Formatter, Summary},
    model::GlobalModel,
    score::{
        NORMAL_MARGIN, Ranking, ScoreReport, Scoring, calibrate, score_linked_processes,
        scores_svg, why,
    },
    units::{Variant, decompose_capture},
};
use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

mod diagnose;
mod export;
mod mpi;
mod peers;
mod tasks;

/// Analyse captures written by `tracer record`.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Args {
    /// No progress bars and no notes on standard error (errors and warnings
    /// still print). Progress is drawn only on a terminal anyway.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// How the analyzer talks to a person on standard error.
pub(crate) struct Ui {
    quiet: bool,
}

impl Ui {
    /// A progress bar over `len` steps, drawn on standard error only when it
    /// is a terminal, not `--quiet`, and there are several steps.
    pub(crate) fn bar(&self, len: u64, what: &str) -> indicatif::ProgressBar {
        if self.quiet || len < 2 {
            return indicatif::ProgressBar::hidden();
        }
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(len),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} (eta {eta}) {wide_msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(what.to_string());
        bar
    }

    /// A line for a person on standard error (not with `--quiet`).
    pub(crate) fn say(&self, text: &str) {
        if !self.quiet {
            eprintln!("{text}");
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print a capture's events, symbolized, one per line.
    Events {
        /// The capture file.
        capture: PathBuf,
        /// JSON lines instead of text.
        #[arg(long)]
        json: bool,
        /// Add the source line of call sites and sampled instructions
        /// (`calls.c:42`, innermost inlined function first) where the
        /// recorded builds' debug information is on this machine.
        #[arg(long)]
        lines: bool,
        /// Also look for debug files in DIR (with --lines). Repeatable.
        #[arg(long = "debug-dir", value_name = "DIR", requires = "lines")]
        debug_dirs: Vec<PathBuf>,
    },
    /// Summarize a capture: events by kind, calls, processes, losses.
    Summary {
        /// The capture file.
        capture: PathBuf,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the execution units of a capture (initializer, handlers, finalizer).
    Units {
        /// The capture file.
        capture: PathBuf,
        /// Decomposition: 000 (handler units) or 001 (also pre/post-processing).
        #[arg(long, value_enum, default_value = "000")]
        variant: Variant,
    },
    /// Run every analysis that applies to a run; one ranked verdict, and
    /// an HTML report with -o.
    #[command(long_about = diagnose::LONG_ABOUT)]
    Diagnose(Box<diagnose::DiagnoseArgs>),
    /// Learn and apply models of normal behaviour (Maruyama & Matsuoka).
    #[command(subcommand)]
    Model(ModelCommand),
    /// Find the faulty server by comparing servers with their peers (Kasick et al.).
    #[command(subcommand)]
    Peers(peers::PeersCommand),
    #[command(subcommand, about = mpi::ABOUT, long_about = mpi::LONG_ABOUT)]
    Mpi(mpi::MpiCommand),
    #[command(subcommand, about = tasks::ABOUT, long_about = tasks::LONG_ABOUT)]
    Tasks(tasks::TasksCommand),
    /// The agent's live analysis process: reads a model and thresholds,
    /// then window captures, on standard input and answers each with its
    /// findings on standard output (`tracer agent` starts it as an
    /// unprivileged user; not meant to be run by hand).
    Live {
        /// Largest payload (model, thresholds, window) accepted, bytes; a
        /// larger one ends the process with an error.
        #[arg(long, default_value_t = 1 << 30)]
        max_input: u64,
    },
    /// Write captures as files other tools read: pprof profiles, folded
    /// stacks, flame graph SVGs, Perfetto/Chrome traces, Parquet tables.
    Export(Box<export::ExportArgs>),
    /// Print a shell completion script.
    ///
    /// Examples:
    ///   analyzer completions bash > /usr/local/share/bash-completion/completions/analyzer
    ///   analyzer completions zsh > /usr/local/share/zsh/site-functions/_analyzer
    /// `cargo xtask man --install` installs them with the man pages.
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (one per command) into DIR (used by `cargo xtask man`).
    #[command(hide = true)]
    Manpages {
        /// Output directory.
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum ModelCommand {
    /// Learn a global model from captures of normal runs.
    ///
    /// Example: analyzer model learn normal-*.capture -o model.json
    Learn {
        /// Captures of fault-free runs.
        #[arg(required = true)]
        captures: Vec<PathBuf>,
        /// Where to write the model (JSON).
        #[arg(short, long, default_value = "model.json")]
        output: PathBuf,
        /// Merge into this existing model instead of starting empty.
        #[arg(long)]
        merge: Option<PathBuf>,
        /// Decomposition: 000 or 001.
        #[arg(long, value_enum, default_value = "000")]
        variant: Variant,
        /// Skip calibration. By default each capture is held out in turn
        /// (at most 5 folds), the rest learned, and its units scored: the
        /// highest score per tree is stored as its normal range, and `model
        /// score` marks units more than 0.03 above it as anomalous (as it does
        /// units that make a call no learned unit made). Costs a learning pass
        /// per fold and keeps every capture's units in memory.
        #[arg(long)]
        no_calibrate: bool,
    },
    /// Score the units of captures against a model; most suspect first.
    ///
    /// Example: analyzer model score --model model.json faulty.capture
    Score {
        /// The model learned with `model learn`.
        #[arg(short, long)]
        model: PathBuf,
        /// Captures to score.
        #[arg(required = true)]
        captures: Vec<PathBuf>,
        /// nodes (000, eq. 1-2) or edges (001).
        #[arg(long, value_enum, default_value = "nodes")]
        scoring: Scoring,
        /// Order of the units: `evidence` puts anomalous units first,
        /// process by process (the process that deviated first first), each
        /// process's strongest evidence first, then the rest by score;
        /// `score` is the papers' order, by suspect score alone.
        #[arg(long, value_enum, default_value = "evidence")]
        rank: Ranking,
        /// Units to show.
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// JSON instead of a table: a versioned report of every unit, most
        /// suspect first, with the earliest anomaly of each capture and of
        /// all captures (`earliest`, `first_anomaly`: indices into `units`).
        #[arg(long)]
        json: bool,
        /// Also write an SVG plot of every unit's score over time (000 Figure 6).
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
}

/// Opens a capture, warning about a truncated file or lost records.
pub(crate) fn open(path: &Path) -> anyhow::Result<Capture> {
    let cap = Capture::open(path).with_context(|| format!("reading {}", path.display()))?;
    for w in capture_warnings(path, &cap) {
        eprintln!("analyzer: warning: {w}");
    }
    Ok(cap)
}

/// What is missing from a capture: the file cut short, malformed chunks,
/// records the kernel side lost.
pub(crate) fn capture_warnings(path: &Path, cap: &Capture) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(t) = &cap.truncated {
        out.push(format!("{}: {t}; using the complete part", path.display()));
    }
    let malformed = cap.malformed_chunks();
    if malformed > 0 {
        out.push(format!(
            "{}: {malformed} records chunks hold a malformed record; each is read up to it and the rest skipped",
            path.display()
        ));
    }
    if cap.lost_records() > 0 {
        out.push(format!(
            "{}: {} records were lost while recording",
            path.display(),
            cap.lost_records()
        ));
    }
    out
}

fn load_model(path: &Path) -> anyhow::Result<GlobalModel> {
    Ok(analyzer::load::model(path)?)
}

/// Scores the units of `captures` against `model` into a ranked report.
pub(crate) fn score_captures(
    model: &GlobalModel,
    captures: &[PathBuf],
    scoring: Scoring,
    rank: Ranking,
    ui: &Ui,
) -> anyhow::Result<ScoreReport> {
    if let Some(note) = model.left_out_note() {
        ui.say(&format!("note: {note}"));
    }
    let bar = ui.bar(captures.len() as u64, "scoring");
    let mut scores = Vec::new();
    let mut names = Vec::with_capacity(captures.len());
    let mut quiet = Vec::with_capacity(captures.len());
    for path in captures {
        bar.set_message(path.display().to_string());
        let mut cap = open(path)?;
        if let Some(why) = model.prepare(&mut cap) {
            ui.say(&format!("note: {}: {why}", path.display()));
        }
        let processes = decompose_capture(&cap, model.variant);
        let name = path.display().to_string();
        let links = analyzer::units::Links::of(&cap);
        scores.extend(score_linked_processes(
            model, &cap, &links, &name, &processes, scoring,
        ));
        quiet.push((
            analyzer::units::quiet_span(&processes, cap.end.as_ref().map(|e| e.stop_ns)),
            cap.header.clock.monotonic_ns,
            links,
        ));
        names.push(name);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut report = ScoreReport::new(model.variant, scoring, rank, &names, scores);
    for (name, (span, origin, links)) in names.iter().zip(quiet) {
        report.judge_quiet(model, name, span, origin, Some(&links));
    }
    Ok(report)
}

fn print_scores(
    out: &mut impl std::io::Write,
    report: &ScoreReport,
    top: usize,
) -> anyhow::Result<()> {
    let scores = &report.units;
    writeln!(
        out,
        "{:>4} {:>7} {:>6}  {:<22} {:>7} {:<12} {:>9} {:<12} {:<21} why",
        "rank", "score", "normal", "process@host", "tid", "unit", "t (s)", "wall (UTC)", "peer"
    )?;
    for (i, s) in scores.iter().take(top).enumerate() {
        writeln!(
            out,
            "{:>4} {:>6.3}{} {:>6}  {:<22} {:>7} {:<12} {:>9.3} {:<12} {:<21} {}",
            i + 1,
            s.score,
            if s.anomalous {
                '!'
            } else if !s.not_judged.is_empty() {
                '?'
            } else {
                ' '
            },
            s.normal.map_or("-".to_string(), |n| format!("{n:.3}")),
            format!("{}[{}]@{}", s.comm, s.pid, s.host),
            s.tid,
            s.kind.name(),
            s.t_s,
            s.wall,
            s.peer.as_deref().unwrap_or("-"),
            why(s)
        )?;
    }
    if scores.len() > top {
        writeln!(
            out,
            "({} more units; --top N or --json for all)",
            scores.len() - top
        )?;
    }
    writeln!(
        out,
        "! behaviour no normal run showed: no model to match, a call no learned unit made there, call paths no learned unit had together, normal call paths in an order no normal run took, a unit that never completed, a process that crashed or exited with an error as no learned one did, a score more than {NORMAL_MARGIN} above the highest of held-out normal units (\"normal\"), or a process deviating again and again where its peers do not"
    )?;
    if !report.not_judged.is_empty() {
        writeln!(
            out,
            "? not judged: the unit's tree was learned with functions this capture's overhead budget detached (only a unit that never completed, or a process that died, still counts)"
        )?;
    }
    if !report.calibrated {
        writeln!(
            out,
            "  (no normal ranges: the model was learned from one capture or with --no-calibrate; only new calls and units with no model count)"
        )?;
    }
    let describe = |i: usize| {
        let s = &report.units[i];
        format!(
            "rank {} ({:.3}), {}[{}]@{} tid {} {} at {:.3} s ({} UTC){}",
            i + 1,
            s.score,
            s.comm,
            s.pid,
            s.host,
            s.tid,
            s.kind.name(),
            s.t_s,
            s.wall,
            s.peer
                .as_deref()
                .map(|p| format!(", peer {p}"))
                .unwrap_or_default()
        )
    };
    writeln!(out, "verdict: {}", report.summary)?;
    for e in &report.earliest {
        match e.unit {
            Some(i) => writeln!(out, "earliest anomaly in {}: {}", e.capture, describe(i))?,
            None => {
                let unjudged: u32 = report
                    .not_judged
                    .iter()
                    .filter(|p| p.capture == e.capture)
                    .map(|p| p.units)
                    .sum();
                if unjudged == 0 {
                    writeln!(out, "{}: no unit behaves unlike the normal runs", e.capture)?
                } else {
                    writeln!(
                        out,
                        "{}: no judged unit behaves unlike the normal runs; {unjudged} units not judged",
                        e.capture
                    )?
                }
            }
        }
    }
    if report.earliest.len() > 1
        && let Some(i) = report.first_anomaly
    {
        writeln!(
            out,
            "earliest anomaly of all captures (by wall clock): {}",
            describe(i)
        )?;
    }
    if !report.explanation.is_empty() {
        writeln!(out, "why:")?;
        for line in &report.explanation {
            writeln!(out, "  {line}")?;
        }
    }
    if !report.not_judged.is_empty() {
        writeln!(
            out,
            "not judged (their capture's overhead budget detached functions the model has):"
        )?;
        for p in &report.not_judged {
            writeln!(
                out,
                "  {}[{}]@{}: {} of {} units, trees learned with {}",
                p.comm,
                p.pid,
                p.host,
                p.units,
                p.of,
                p.functions.join(", ")
            )?;
        }
    }
    if report.suspects.len() > 1 {
        writeln!(
            out,
            "processes with anomalous units, the first to deviate first:"
        )?;
        for s in &report.suspects {
            writeln!(
                out,
                "  {}[{}]@{}: {} of {} units, first at rank {} ({:.3} s)",
                s.comm,
                s.pid,
                s.host,
                s.anomalous,
                s.units,
                s.first + 1,
                report.units[s.first].t_s
            )?;
        }
    }
    Ok(())
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let ui = &Ui { quiet: args.quiet };
    match args.command {
        Command::Diagnose(a) => {
            let code = diagnose::run(*a, &mut out, ui)?;
            out.flush()?;
            return Ok(code);
        }
        Command::Export(a) => export::run(*a, ui)?,
        Command::Completions { shell } => {
            let mut cmd = <Args as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "analyzer", &mut out);
        }
        Command::Manpages { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(<Args as clap::CommandFactory>::command(), &dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
        }
        Command::Mpi(cmd) => mpi::run(cmd, &mut out)?,
        Command::Tasks(cmd) => tasks::run(cmd, &mut out)?,
        Command::Events {
            capture,
            json,
            lines,
            debug_dirs,
        } => {
            let cap = open(&capture)?;
            let fmt = Formatter::new(&cap);
            let symbols = analyzer::Symbolizer::new(&cap);
            let mut sources = lines.then(|| SourceLines::new(&debug_dirs));
            for event in cap.events() {
                // Skipped, and reported by `open` (one rule with `summary`
                // and `tracer replay`).
                let Ok(event) = event else { continue };
                // The code address whose line a person wants: a call's
                // site, a sample's instruction.
                let at = match &event {
                    Event::Entry { rec, .. } => Some((rec.call_site, AddressKind::Return)),
                    Event::Sample(s) if s.user_ip != 0 => {
                        Some((s.user_ip, AddressKind::Instruction))
                    }
                    _ => None,
                };
                let source = match (&mut sources, at) {
                    (Some(lines), Some((addr, kind))) => {
                        let frames = lines.frames_at(&symbols, event.header().pid, addr, kind);
                        let text: Vec<String> = frames
                            .iter()
                            .filter_map(|f| {
                                f.file_line().map(|fl| {
                                    format!("{fl}{}", if f.inlined { " (inlined)" } else { "" })
                                })
                            })
                            .collect();
                        (!text.is_empty()).then(|| text.join(" < "))
                    }
                    _ => None,
                };
                if json {
                    let mut v = fmt.json(&event);
                    if let (Some(s), Some(obj)) = (source, v.as_object_mut()) {
                        obj.insert("source".into(), serde_json::json!(s));
                    }
                    writeln!(out, "{v}")?;
                } else {
                    match source {
                        Some(s) => writeln!(out, "{} at {s}", fmt.text(&event))?,
                        None => writeln!(out, "{}", fmt.text(&event))?,
                    }
                }
            }
            if let Some(lines) = &sources {
                for note in lines.missing_notes() {
                    ui.say(&format!("note: {note}"));
                }
            }
        }
        Command::Summary { capture, json } => {
            let cap = open(&capture)?;
            let summary = Summary::of(&cap);
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
            } else {
                write!(out, "{summary}")?;
            }
        }
        Command::Units { capture, variant } => {
            let cap = open(&capture)?;
            for p in decompose_capture(&cap, variant) {
                writeln!(
                    out,
                    "{}[{}] signature: {}",
                    p.comm,
                    p.pid,
                    if p.signature.is_empty() {
                        "(none)".into()
                    } else {
                        p.signature.join(" | ")
                    }
                )?;
                for u in &p.units {
                    let t = (u.start_ns as f64 - cap.header.clock.monotonic_ns as f64) / 1e9;
                    writeln!(
                        out,
                        "  {:>10.6} tid {:>7} {:<12} {:>4} nodes  {}{}",
                        t,
                        u.tid,
                        u.kind.name(),
                        u.nodes.len(),
                        u.fd.map(|fd| format!("fd {fd} ")).unwrap_or_default(),
                        u.peer.as_deref().unwrap_or("")
                    )?;
                }
            }
        }
        Command::Model(ModelCommand::Learn {
            captures,
            output,
            merge,
            variant,
            no_calibrate,
        }) => {
            let mut model = match &merge {
                Some(path) => load_model(path)?,
                None => GlobalModel::new(variant),
            };
            if model.variant != variant {
                bail!(
                    "the model to merge into was learned with variant {:?}, not {:?}",
                    model.variant,
                    variant
                );
            }
            let base = merge.is_some().then(|| model.clone());
            let mut processes = 0;
            let bar = ui.bar(captures.len() as u64, "learning");
            // Every capture is learned from the same functions: those any
            // of them (or the model merged into) lost to its overhead
            // budget are left out of all. A capture that kept one is read
            // again once the whole set is known.
            let mut left_out = model.left_out.clone();
            let mut decomposed = Vec::with_capacity(captures.len());
            for path in &captures {
                bar.set_message(path.display().to_string());
                bar.inc(1);
                let mut cap = open(path)?;
                let dropped = cap.budget_dropped();
                cap.leave_out(&left_out);
                left_out.extend(dropped);
                let seen = left_out.len();
                let run = decompose_capture(&cap, variant);
                let blocked = analyzer::blocked::recorded(&cap)
                    .then(|| analyzer::blocked::blocked_threads(&cap, None));
                decomposed.push((run, cap.end.as_ref().map(|e| e.stop_ns), seen, blocked));
            }
            bar.finish_and_clear();
            let mut runs = Vec::with_capacity(captures.len());
            for (path, (mut run, mut stop, seen, blocked)) in captures.iter().zip(decomposed) {
                if seen < left_out.len() {
                    let mut cap = open(path)?;
                    cap.leave_out(&left_out);
                    run = decompose_capture(&cap, variant);
                    stop = cap.end.as_ref().map(|e| e.stop_ns);
                }
                for p in &run {
                    model.learn(p);
                    processes += 1;
                }
                model.learn_quiet(&run, stop);
                model.learn_ends(&run, blocked.as_deref());
                model.sources.push(path.display().to_string());
                if !no_calibrate {
                    runs.push(run);
                }
            }
            if let Some(b) = base.as_ref().filter(|b| !b.groups.is_empty()) {
                let new: Vec<&String> = left_out.difference(&b.left_out).collect();
                if !new.is_empty() {
                    ui.say(&format!(
                        "note: the overhead budget of these captures detached {new:?}, which the model merged into was learned with: its units differ from these captures' for that reason alone"
                    ));
                }
            }
            if !left_out.is_empty() {
                ui.say(&format!(
                    "note: left out of every capture, as the overhead budget of some detached them: {}",
                    left_out.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            model.left_out = left_out;
            let calibration = if no_calibrate {
                None
            } else {
                let spinner = ui.bar(2, "calibrating (held-out folds)");
                spinner.tick();
                let c = calibrate(&mut model, base.as_ref(), &runs);
                spinner.finish_and_clear();
                Some(c)
            };
            let json = serde_json::to_vec(&model)?;
            std::fs::write(&output, &json)
                .with_context(|| format!("writing {}", output.display()))?;
            writeln!(
                out,
                "learned {processes} processes from {} captures into {} process groups; model {} ({} bytes)",
                captures.len(),
                model.groups.len(),
                output.display(),
                json.len()
            )?;
            for g in &model.groups {
                writeln!(
                    out,
                    "  group of {} processes (e.g. {}): {} handler models",
                    g.processes,
                    g.examples.join(", "),
                    g.handlers.len()
                )?;
            }
            match calibration {
                Some(c) if c.folds > 0 => writeln!(
                    out,
                    "normal ranges of {} trees from {} held-out units ({} folds): units above them are marked anomalous",
                    c.trees, c.units, c.folds
                )?,
                Some(_) => writeln!(
                    out,
                    "not calibrated (one capture): learn from two or more to mark anomalous units"
                )?,
                None => {}
            }
        }
        Command::Model(ModelCommand::Score {
            model,
            captures,
            scoring,
            rank,
            top,
            json,
            svg,
        }) => {
            let model = load_model(&model)?;
            let report = score_captures(&model, &captures, scoring, rank, ui)?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                print_scores(&mut out, &report, top)?;
            }
            if let Some(path) = svg {
                std::fs::write(&path, scores_svg(&report))
                    .with_context(|| format!("writing {}", path.display()))?;
                if !json {
                    writeln!(
                        out,
                        "plot of every unit's score over time: {}",
                        path.display()
                    )?;
                }
            }
        }
        Command::Peers(command) => peers::run(command, &mut out, ui)?,
        Command::Live { max_input } => {
            drop(out);
            let stdin = std::io::stdin();
            analyzer::live::serve::serve(stdin.lock(), std::io::stdout().lock(), max_input)
                .context("serving the agent")?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("analyzer: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn cli_is_consistent() {
        Args::command().debug_assert();
    }

    /// Man pages and completions come from the same definitions as
    /// `--help`: a subcommand's options are in both.
    #[test]
    fn man_pages_and_completions_cover_every_subcommand() {
        let dir = tempfile::tempdir().expect("tempdir");
        clap_mangen::generate_to(Args::command(), dir.path()).expect("man pages");
        let export = std::fs::read_to_string(dir.path().join("analyzer-export.1")).expect("page");
        for option in [
            "\\-\\-format",
            "\\-\\-profile",
            "\\-\\-table",
            "\\-\\-debug\\-dir",
        ] {
            assert!(export.contains(option), "{option}");
        }
        for page in [
            "analyzer.1",
            "analyzer-model-learn.1",
            "analyzer-peers-diagnose.1",
            "analyzer-diagnose.1",
        ] {
            assert!(dir.path().join(page).is_file(), "{page}");
        }
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Args::command(),
            "analyzer",
            &mut bash,
        );
        let bash = String::from_utf8(bash).expect("utf8");
        assert!(bash.contains("chrome-trace") && bash.contains("--thresholds"));
    }
}
