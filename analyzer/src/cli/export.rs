//! `analyzer export`: captures as files other tools read (pprof, folded
//! stacks, flame graphs, Perfetto/Chrome traces, Parquet).

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use analyzer::{
    Capture,
    debuginfo::SourceLines,
    export::{self, ProfileKind, StackProfile, chrome, flamegraph, parquet, pprof, stacks},
    peers::PeersConfig,
    score::Scoring,
};
use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};

use super::peers::FeatureArgs;

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// gzipped profile.proto: `go tool pprof -top FILE`, `-http=:8080 FILE`.
    Pprof,
    /// Trace-event JSON: open in ui.perfetto.dev or chrome://tracing.
    ChromeTrace,
    /// Folded stacks (`a;b;c 42`), for flamegraph.pl, inferno, Speedscope.
    Folded,
    /// A flame graph SVG (open it in a browser: click to zoom, Ctrl-F to search).
    Flamegraph,
    /// Parquet tables (see --table): DuckDB `SELECT * FROM 'FILE'`.
    Parquet,
}

/// Parquet tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Table {
    /// One row per event of the captures.
    Events,
    /// One row per execution unit scored against --model.
    Units,
    /// One row per peer-comparison window, server, metric and component.
    Windows,
}

/// `analyzer export`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
Examples:
  analyzer export --format pprof server.capture -o cpu.pb.gz && go tool pprof -top cpu.pb.gz
  analyzer export --format pprof --profile time server.capture -o time.pb.gz
  analyzer export --format flamegraph server.capture -o cpu.svg
  analyzer export --format chrome-trace run/*.capture -o run.json     (ui.perfetto.dev: Open trace file)
  analyzer export --format parquet server.capture -o events.parquet
  analyzer export --format parquet --table units --model model.json faulty.capture -o units.parquet
  analyzer export --format parquet --table windows --thresholds t.json run-7/ -o windows.parquet

Source files and lines come from DWARF when the recorded builds (same build
id), or their separate debug files, are on this machine: under /usr/lib/debug
(e.g. Debian's -dbg/-dbgsym packages), $EFTRACE_DEBUG_DIRS or --debug-dir.
The column schemas of the Parquet tables are in the analyzer's documentation
(`analyzer::export`) and in README.md.")]
pub(crate) struct ExportArgs {
    /// Capture files (several: one profile, trace or table of all of them).
    /// For --table windows: run directories or capture files, as for
    /// `analyzer peers`.
    #[arg(required = true, value_name = "CAPTURE")]
    captures: Vec<PathBuf>,
    /// What to write.
    #[arg(short, long, value_enum)]
    format: Format,
    /// Where to write it (`-` for standard output). Default: cpu.pb.gz /
    /// time.pb.gz, trace.json, stacks.folded, flamegraph.svg, TABLE.parquet.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Profiles (pprof, folded, flamegraph): CPU samples, or traced
    /// functions' exclusive time and calls.
    #[arg(long, value_enum, default_value = "samples")]
    profile: ProfileKind,
    /// Parquet: which table.
    #[arg(long, value_enum, default_value = "events")]
    table: Table,
    /// --table units: the model to score units against (`analyzer model learn`).
    #[arg(long, value_name = "MODEL")]
    model: Option<PathBuf>,
    /// --table units: nodes (000) or edges (001).
    #[arg(long, value_enum, default_value = "nodes")]
    scoring: Scoring,
    /// --table windows: take the window, shift, metrics and servers from
    /// these trained thresholds (`analyzer peers train`) instead of the
    /// feature options below.
    #[arg(long, value_name = "FILE")]
    thresholds: Option<PathBuf>,
    /// Also look for debug files in DIR (by build id, `DIR/.build-id/xx/
    /// yyyy.debug`, and by .gnu_debuglink name). Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dirs: Vec<PathBuf>,
    #[command(flatten, next_help_heading = "Peer windows (--table windows)")]
    features: FeatureArgs,
}

/// Standard output or a buffered file.
fn create(path: &Path) -> anyhow::Result<Box<dyn Write + Send>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufWriter::new(std::io::stdout())));
    }
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(Box::new(BufWriter::with_capacity(1 << 20, file)))
}

/// Opens every capture, with a progress bar when there are several.
fn open_all(paths: &[PathBuf], ui: &super::Ui) -> anyhow::Result<Vec<Capture>> {
    let bar = ui.bar(paths.len() as u64, "reading captures");
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        bar.set_message(p.display().to_string());
        out.push(super::open(p)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

fn profile_of(
    captures: &[Capture],
    kind: ProfileKind,
    lines: &mut SourceLines,
) -> anyhow::Result<StackProfile> {
    let refs: Vec<&Capture> = captures.iter().collect();
    let profile = stacks::build(&refs, kind, lines);
    if profile.stacks.is_empty() {
        bail!(
            "{}",
            match kind {
                ProfileKind::Samples =>
                    "the captures hold no CPU samples: record with --sample-hz (99 by default; \
                     0 turns sampling off) or export --profile time for traced functions",
                ProfileKind::Time =>
                    "the captures hold no traced calls: record with -f PATTERN (or --mpi, \
                     --python) or export --profile samples",
            }
        );
    }
    Ok(profile)
}

/// Runs `analyzer export`. What was written, and what could not be
/// resolved, goes to standard error (the export itself may be on standard
/// output); `--quiet` keeps the summary, not the notes.
pub(crate) fn run(args: ExportArgs, ui: &super::Ui) -> anyhow::Result<()> {
    let mut err = std::io::stderr().lock();
    let out = &mut err;
    let ExportArgs {
        captures,
        format,
        output,
        profile,
        table,
        model,
        scoring,
        thresholds,
        debug_dirs,
        features,
    } = args;
    let output = output.unwrap_or_else(|| {
        PathBuf::from(match (format, profile, table) {
            (Format::Pprof, ProfileKind::Samples, _) => "cpu.pb.gz",
            (Format::Pprof, ProfileKind::Time, _) => "time.pb.gz",
            (Format::ChromeTrace, ..) => "trace.json",
            (Format::Folded, ..) => "stacks.folded",
            (Format::Flamegraph, ..) => "flamegraph.svg",
            (Format::Parquet, _, Table::Events) => "events.parquet",
            (Format::Parquet, _, Table::Units) => "units.parquet",
            (Format::Parquet, _, Table::Windows) => "windows.parquet",
        })
    });
    if format != Format::Parquet && (model.is_some() || thresholds.is_some()) {
        bail!("--model and --thresholds are for --format parquet (--table units, windows)");
    }
    let mut lines = SourceLines::new(&debug_dirs);
    let shown = output.display().to_string();
    let note_all = |_: &mut dyn Write, notes: &[String]| -> anyhow::Result<()> {
        for n in notes {
            ui.say(&format!("note: {n}"));
        }
        Ok(())
    };
    match format {
        Format::Pprof | Format::Folded | Format::Flamegraph => {
            let caps = open_all(&captures, ui)?;
            let p = profile_of(&caps, profile, &mut lines)?;
            let [a, b] = p.totals();
            let what = match profile {
                ProfileKind::Samples => {
                    format!("{a} samples ({:.3} s of CPU)", b as f64 / 1e9)
                }
                ProfileKind::Time => {
                    format!("{a} calls ({:.3} s of exclusive time)", b as f64 / 1e9)
                }
            };
            let mut w = create(&output)?;
            match format {
                Format::Pprof => {
                    let refs: Vec<&Capture> = caps.iter().collect();
                    let main = export::main_object(&refs);
                    pprof::write(&p, &export::build_ids(&refs), main, &mut w)?;
                }
                Format::Folded => {
                    for line in p.folded() {
                        writeln!(w, "{line}")?;
                    }
                }
                _ => {
                    let title = format!(
                        "{} of {}",
                        match profile {
                            ProfileKind::Samples => "CPU samples",
                            ProfileKind::Time => "Exclusive time of traced calls",
                        },
                        captures
                            .iter()
                            .map(|c| c.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    flamegraph::write(&p, &title, &mut w)?;
                }
            }
            w.flush().with_context(|| format!("writing {shown}"))?;
            writeln!(
                out,
                "{shown}: {what} in {} stacks of {} processes",
                p.stacks.len(),
                p.processes.len()
            )?;
            note_all(out, &p.notes)?;
            if format == Format::Pprof && shown != "-" {
                writeln!(out, "view: go tool pprof -top {shown}   (or -http=:8080)")?;
            }
        }
        Format::ChromeTrace => {
            let caps = open_all(&captures, ui)?;
            let refs: Vec<&Capture> = caps.iter().collect();
            let mut w = create(&output)?;
            let stats = chrome::write(&refs, &mut lines, &mut w)?;
            w.flush().with_context(|| format!("writing {shown}"))?;
            writeln!(
                out,
                "{shown}: {} call slices, {} system call slices, {} instant events, {} threads of {} processes",
                stats.calls, stats.syscalls, stats.instants, stats.threads, stats.processes
            )?;
            note_all(out, &lines.missing_notes())?;
            if shown != "-" {
                writeln!(
                    out,
                    "view: open {shown} in ui.perfetto.dev (works offline once loaded) or chrome://tracing"
                )?;
            }
        }
        Format::Parquet => {
            let rows = match table {
                Table::Events => {
                    let caps = open_all(&captures, ui)?;
                    let names: Vec<String> =
                        captures.iter().map(|c| c.display().to_string()).collect();
                    let named: Vec<(&str, &Capture)> =
                        names.iter().map(String::as_str).zip(caps.iter()).collect();
                    let mut w = create(&output)?;
                    let rows = parquet::write_events(&named, &mut lines, &mut w)?;
                    w.flush()?;
                    rows
                }
                Table::Units => {
                    let Some(model) = model else {
                        bail!(
                            "--table units needs --model MODEL (learn one with `analyzer model learn`)"
                        );
                    };
                    let model = analyzer::load::model(&model)?;
                    let report = super::score_captures(
                        &model,
                        &captures,
                        scoring,
                        analyzer::score::Ranking::default(),
                        ui,
                    )?;
                    let mut w = create(&output)?;
                    let rows = parquet::write_units(&report, &mut w)?;
                    w.flush()?;
                    rows
                }
                Table::Windows => {
                    let cfg = match &thresholds {
                        Some(t) => analyzer::load::thresholds(t)?.config,
                        None => PeersConfig::try_from(features)?,
                    };
                    let runs = super::peers::runs_of(&captures)?;
                    let bar = ui.bar(runs.len() as u64, "comparing peers");
                    let mut scored = Vec::with_capacity(runs.len());
                    for (name, files) in &runs {
                        bar.set_message(name.clone());
                        scored.push(super::peers::analyze_run(name, files, &cfg, 1)?);
                        bar.inc(1);
                    }
                    bar.finish_and_clear();
                    let mut w = create(&output)?;
                    let rows = parquet::write_windows(&scored, &cfg.normalize, &mut w)?;
                    w.flush()?;
                    rows
                }
            };
            let name = match table {
                Table::Events => "events",
                Table::Units => "units",
                Table::Windows => "windows",
            };
            writeln!(out, "{shown}: {rows} rows ({name} table)")?;
            if table == Table::Events {
                note_all(out, &lines.missing_notes())?;
            }
            if shown != "-" {
                writeln!(out, "query: duckdb -c \"SELECT * FROM '{shown}' LIMIT 10\"")?;
            }
        }
    }
    Ok(())
}
