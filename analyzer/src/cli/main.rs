//! `analyzer`: offline analysis of captures.

use std::{io::Write as _, path::PathBuf, process::ExitCode};

use analyzer::{
    Capture,
    decode::format::{Formatter, Summary},
};
use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// Analyse captures written by `tracer record`.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Args {
    #[command(subcommand)]
    command: Command,
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
    },
    /// Summarize a capture: events by kind, calls, processes, losses.
    Summary {
        /// The capture file.
        capture: PathBuf,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn run(args: Args) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match args.command {
        Command::Events { capture, json } => {
            let cap = Capture::open(&capture)
                .with_context(|| format!("reading {}", capture.display()))?;
            let fmt = Formatter::new(&cap);
            for event in cap.events() {
                let event = event?;
                if json {
                    writeln!(out, "{}", fmt.json(&event))?;
                } else {
                    writeln!(out, "{}", fmt.text(&event))?;
                }
            }
            if let Some(t) = &cap.truncated {
                eprintln!("warning: {t}; the events before it were printed");
            }
        }
        Command::Summary { capture, json } => {
            let cap = Capture::open(&capture)
                .with_context(|| format!("reading {}", capture.display()))?;
            let summary = Summary::of(&cap);
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
            } else {
                write!(out, "{summary}")?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
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
