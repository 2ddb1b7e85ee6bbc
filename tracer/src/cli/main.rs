//! `tracer`: record running, unmodified processes with eBPF; replay captures.

mod args;

use std::{io::Write as _, process::ExitCode};

use analyzer::{
    Capture,
    decode::format::{Formatter, Summary},
};
use anyhow::Context as _;
use clap::Parser as _;
use tracer::record::{RecordConfig, record};

use crate::args::{Args, Command, RecordArgs, ReplayArgs};

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();
}

fn run_record(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let config = RecordConfig::try_from(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let mut progress = |msg: &str| {
        if msg.contains('\n') {
            eprint!("{msg}"); // the summary
        } else {
            eprintln!("tracer: {msg}");
        }
    };
    runtime.block_on(record(config, &mut progress))?;
    Ok(ExitCode::SUCCESS)
}

fn run_replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let capture = Capture::open(&args.capture)
        .with_context(|| format!("replaying {}", args.capture.display()))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    if !args.summary {
        let fmt = Formatter::new(&capture);
        for event in capture.events() {
            let event = event.with_context(|| format!("decoding {}", args.capture.display()))?;
            if args.json {
                writeln!(out, "{}", fmt.json(&event))?;
            } else {
                writeln!(out, "{}", fmt.text(&event))?;
            }
        }
    }
    let summary = Summary::of(&capture);
    if args.json || !args.summary {
        out.flush()?;
        eprint!("{summary}");
    } else {
        write!(out, "{summary}")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.verbose);
    let result = match args.command {
        Command::Record(a) => run_record(a),
        Command::Replay(a) => run_replay(a),
    };
    match result {
        Ok(code) => code,
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tracer: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
