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

use crate::args::{Args, Command, ListUsdtArgs, RecordArgs, ReplayArgs};

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

fn run_list_usdt(args: ListUsdtArgs) -> anyhow::Result<ExitCode> {
    use tracer::usdt;
    let pid = args.target.parse::<u32>().ok();
    let (sites, searched) = match pid {
        Some(pid) => {
            let objects = tracer::targets::TargetObjects::of_pid(pid)
                .with_context(|| format!("listing the objects of process {pid}"))?;
            let searched: Vec<_> = std::iter::once(objects.exe.clone())
                .chain(objects.libs.iter().cloned())
                .collect();
            (usdt::sites_of(&objects)?, searched)
        }
        None => {
            let path = std::path::PathBuf::from(&args.target);
            (usdt::read_sites(&path)?, vec![path])
        }
    };
    if sites.is_empty() {
        return Err(usdt::no_probes(&searched).into());
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for site in &sites {
        // In a running process: where the semaphore is and who raised it.
        let live = match pid {
            Some(pid) if site.semaphore_offset != 0 => {
                usdt::runtime_address(pid, &site.object, site.semaphore_offset)?
                    .map(|addr| (addr, usdt::read_semaphore(pid, addr).ok()))
            }
            _ => None,
        };
        if args.json {
            let mut v = serde_json::json!({
                "object": site.object.display().to_string(),
                "provider": site.provider,
                "name": site.name,
                "vaddr": site.vaddr,
                "file_offset": site.file_offset,
                "semaphore": site.semaphore,
                "semaphore_offset": site.semaphore_offset,
                "args": site.args_text,
                "nargs": site.args.as_ref().map(Vec::len).ok(),
            });
            if let (Some((addr, value)), Some(obj)) = (live, v.as_object_mut()) {
                obj.insert("semaphore_address".into(), serde_json::json!(addr));
                obj.insert("semaphore_value".into(), serde_json::json!(value));
            }
            writeln!(out, "{v}")?;
        } else {
            let sema = match (site.semaphore, live) {
                (0, _) => "no semaphore".to_string(),
                (addr, None) => format!("semaphore {addr:#x} (file {:#x})", site.semaphore_offset),
                (_, Some((addr, value))) => format!(
                    "semaphore at {addr:#x} = {}",
                    value.map_or("unreadable".to_string(), |v| v.to_string())
                ),
            };
            writeln!(
                out,
                "{}:{}  {}  at {:#x} (file {:#x}), {sema}, args: {}{}",
                site.provider,
                site.name,
                site.object.display(),
                site.vaddr,
                site.file_offset,
                if site.args_text.is_empty() {
                    "none"
                } else {
                    &site.args_text
                },
                match &site.args {
                    Ok(_) => String::new(),
                    Err(e) => format!(" (cannot be decoded: {e})"),
                }
            )?;
        }
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
        Command::ListUsdt(a) => run_list_usdt(a),
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
