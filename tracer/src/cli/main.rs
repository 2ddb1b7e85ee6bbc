//! `tracer`: record running, unmodified processes with eBPF; replay captures.

mod args;

use std::{io::Write as _, process::ExitCode};

use anyhow::Context as _;
use clap::Parser as _;
use tracer::record::{Progress, RecordConfig, record};
use tracer_common::decode::{
    Capture,
    format::{Formatter, Summary},
};

use crate::args::{
    AgentArgs, Args, Command, CtlArgs, CtlCommand, ListUsdtArgs, RecordArgs, ReplayArgs,
};

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The live line of a recording.
fn live_line(p: &Progress) -> String {
    let lost = if p.lost + p.other_losses == 0 {
        "nothing lost".to_string()
    } else {
        format!(
            "LOST {} records{}",
            grouped(p.lost),
            if p.other_losses > 0 {
                format!(" (+{} other losses)", grouped(p.other_losses))
            } else {
                String::new()
            }
        )
    };
    format!(
        "{:>5.0} s  {} events ({}/s)  {lost}  {} process{}  {}",
        p.elapsed.as_secs_f64(),
        grouped(p.records),
        grouped(p.rate.round() as u64),
        p.processes,
        if p.processes == 1 { "" } else { "es" },
        tracer::quantity::format_size(p.bytes)
    )
}

fn run_record(args: RecordArgs, quiet: bool, verbose: bool) -> anyhow::Result<ExitCode> {
    let config = RecordConfig::try_from(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    // The live line: on a terminal only (indicatif draws nothing
    // elsewhere), not with --quiet, nor beside -v's log lines, nor over a
    // command target's own output on the same terminal.
    let command = config
        .targets
        .iter()
        .any(|t| matches!(t, tracer::record::Target::Command(_)));
    let bar = if quiet || verbose || command {
        indicatif::ProgressBar::hidden()
    } else {
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = indicatif::ProgressStyle::with_template("tracer: recording {msg}") {
            bar.set_style(style);
        }
        bar
    };
    let mut progress = |msg: &str| {
        if msg.contains('\n') {
            // The summary: always when records were lost.
            if !quiet || msg.contains("LOSSES") {
                bar.finish_and_clear();
                eprint!("{msg}");
            }
        } else if !quiet {
            bar.suspend(|| eprintln!("tracer: {msg}"));
        }
    };
    let mut live = |p: &Progress| bar.set_message(live_line(p));
    runtime.block_on(record(config, &mut progress, &mut live))?;
    bar.finish_and_clear();
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
            // A malformed record ends its chunk: the rest of the chunk is
            // skipped, and the summary below counts and reports it.
            let Ok(event) = event else { continue };
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

fn run_agent(args: AgentArgs) -> anyhow::Result<ExitCode> {
    use tracer::agent::{Agent, config::AgentConfig};
    if args.example_config {
        print!("{}", tracer::agent::config::EXAMPLE);
        return Ok(ExitCode::SUCCESS);
    }
    if args.check {
        let config = AgentConfig::load(&args.config)?;
        let (_, targets) = tracer::agent::targets::resolve(&config);
        println!("{}: valid", args.config.display());
        for t in targets {
            for exe in &t.executables {
                println!("  {}: traces {}", t.target, exe.display());
            }
            for note in &t.notes {
                println!("  {}: {note}", t.target);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let agent = Agent::new(&args.config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(agent.run())?;
    Ok(ExitCode::SUCCESS)
}

fn run_ctl(args: CtlArgs) -> anyhow::Result<ExitCode> {
    use tracer::agent::ctl::{Request, request};
    let req = match &args.command {
        CtlCommand::Status => Request::Status,
        CtlCommand::Snapshot { window, reason } => Request::Snapshot {
            window_s: window.map(|w| w.as_secs_f64()),
            reason: reason.clone(),
        },
        CtlCommand::Reload => Request::Reload,
        CtlCommand::Features => Request::Features,
    };
    let socket = match &args.config {
        Some(path) => tracer::agent::config::AgentConfig::load(path)?.agent.socket,
        None => args.socket.clone(),
    };
    let response = request(&socket, &req, std::time::Duration::from_secs(120))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&response)?);
    } else if let Some(e) = &response.error {
        eprintln!("tracer: the agent refused: {e}");
    } else {
        print!("{}", ctl_text(&args.command, &response.result));
    }
    Ok(if response.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A person's view of an agent's answer.
fn ctl_text(command: &CtlCommand, r: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let size = |v: &serde_json::Value| tracer::quantity::format_size(v.as_u64().unwrap_or(0));
    match command {
        CtlCommand::Status => {
            let _ = writeln!(
                out,
                "agent pid {} up {:.0} s: {}",
                r["pid"],
                r["uptime_s"].as_f64().unwrap_or(0.0),
                r["state"].as_str().unwrap_or("?")
            );
            if let Some(e) = r["last_error"].as_str() {
                let _ = writeln!(out, "  last error: {e}");
            }
            for t in r["targets"].as_array().into_iter().flatten() {
                let exes: Vec<&str> = t["executables"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.as_str())
                    .collect();
                let _ = writeln!(
                    out,
                    "  target {}: {}{}",
                    t["target"].as_str().unwrap_or("?"),
                    t["state"].as_str().unwrap_or("?"),
                    if exes.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", exes.join(", "))
                    }
                );
                for n in t["notes"].as_array().into_iter().flatten() {
                    let _ = writeln!(out, "    {}", n.as_str().unwrap_or(""));
                }
            }
            if let Some(s) = r["session"].as_object() {
                let procs: Vec<String> = s["processes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| format!("{}[{}]", p[1].as_str().unwrap_or(""), p[0]))
                    .collect();
                let _ = writeln!(
                    out,
                    "  session {}: {} function probes; processes: {}",
                    s["id"],
                    s["probes"],
                    if procs.is_empty() {
                        "none yet".to_string()
                    } else {
                        procs.join(" ")
                    }
                );
            }
            let u = &r["usage"];
            let _ = writeln!(
                out,
                "  {:.0} events/s; agent CPU {:.1}%, memory {}",
                u["events_per_s"].as_f64().unwrap_or(0.0),
                u["cpu_percent"].as_f64().unwrap_or(0.0),
                size(&u["rss_bytes"])
            );
            let losses: Vec<String> = r["losses"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(
                out,
                "  records {}; lost: {}",
                r["records_total"],
                if losses.is_empty() {
                    "none".to_string()
                } else {
                    losses.join(", ")
                }
            );
            let rec = &r["recorder"];
            let _ = writeln!(
                out,
                "  flight recorder {}: {} files + current, {} of {}; removed {} files ({} records) for size, {} for age",
                rec["dir"].as_str().unwrap_or(""),
                rec["files"].as_array().map_or(0, Vec::len),
                size(&rec["disk_bytes"]),
                size(&rec["max_disk"]),
                rec["removed_for_size"]["files"],
                rec["removed_for_size"]["records"],
                rec["removed_for_age"]["files"],
            );
            let p = &r["preambles"];
            let _ = writeln!(
                out,
                "  preambles: {} processes, {}",
                p["processes"],
                size(&p["bytes"])
            );
            for a in r["shed"]["actions"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "  shed at {:.0} s: {} ({})",
                    a["at_s"].as_f64().unwrap_or(0.0),
                    a["action"].as_str().unwrap_or(""),
                    a["why"].as_str().unwrap_or("")
                );
            }
            let _ = writeln!(
                out,
                "  alerts: {} (in {})",
                r["alerts"],
                r["alerts_file"].as_str().unwrap_or("")
            );
            let snaps = &r["snapshots_disk"];
            let _ = writeln!(
                out,
                "  snapshots {}: {} files, {} of {}; removed {} ({}) for the budget",
                snaps["dir"].as_str().unwrap_or(""),
                snaps["files"],
                size(&snaps["bytes"]),
                size(&snaps["max_bytes"]),
                snaps["removed"]["files"],
                size(&snaps["removed"]["bytes"]),
            );
            if let Some(a) = r["analysis"].as_object() {
                let _ = writeln!(
                    out,
                    "  live analysis: {} evaluations (last {:.0} ms over {:.1} s), {} units scored, {} peer windows{}",
                    a["evaluations"],
                    a["last_ms"].as_f64().unwrap_or(0.0),
                    a["last_window_s"].as_f64().unwrap_or(0.0),
                    a["units_scored"],
                    a["peer_windows"],
                    a["last_error"]
                        .as_str()
                        .map(|e| format!("; last error: {e}"))
                        .unwrap_or_default()
                );
                let p = &a["process"];
                let _ = writeln!(
                    out,
                    "    analysis process: {}; {} restarts{}; {} intervals skipped",
                    if p.is_object() {
                        format!(
                            "pid {} as {} (uid {}), {}, {}",
                            p["pid"],
                            p["user"].as_str().unwrap_or("?"),
                            p["uid"],
                            p["state"].as_str().unwrap_or("?"),
                            size(&p["rss_bytes"])
                        )
                    } else {
                        "not running".to_string()
                    },
                    a["restarts"],
                    a["last_exit"]
                        .as_str()
                        .map(|e| format!(" (the last {e})"))
                        .unwrap_or_default(),
                    a["skipped"]
                );
            }
        }
        CtlCommand::Snapshot { .. } => {
            let j = &r["joined"];
            let _ = writeln!(
                out,
                "{}\n  {} records from {} file(s) and {} from process preambles, {}",
                r["path"].as_str().unwrap_or(""),
                j["records"],
                j["files"],
                j["preamble_records"],
                size(&r["bytes"])
            );
            for f in r["earlier_files"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "  also in the window, from an earlier session: {}",
                    f.as_str().unwrap_or("")
                );
            }
        }
        CtlCommand::Reload => {
            let _ = writeln!(out, "configuration reloaded");
        }
        CtlCommand::Features => {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(r).unwrap_or_default()
            );
        }
    }
    out
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.verbose);
    let result = match args.command {
        Command::Record(a) => run_record(*a, args.quiet, args.verbose > 0),
        Command::Completions { shell } => {
            let mut cmd = <Args as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "tracer", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Manpages { dir } => std::fs::create_dir_all(&dir)
            .and_then(|()| {
                clap_mangen::generate_to(<Args as clap::CommandFactory>::command(), &dir)
            })
            .with_context(|| format!("writing man pages into {}", dir.display()))
            .map(|()| ExitCode::SUCCESS),
        Command::Replay(a) => run_replay(a),
        Command::ListUsdt(a) => run_list_usdt(a),
        Command::Agent(a) => run_agent(a),
        Command::Ctl(a) => run_ctl(a),
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_live_line_says_rate_losses_and_processes() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_234_567), "1,234,567");
        let mut p = Progress {
            elapsed: Duration::from_secs(12),
            records: 45_678,
            rate: 3210.4,
            lost: 0,
            other_losses: 0,
            processes: 3,
            bytes: 2 << 20,
        };
        let line = live_line(&p);
        assert!(
            line.contains("12 s  45,678 events (3,210/s)  nothing lost  3 processes"),
            "{line}"
        );
        p.lost = 1200;
        p.other_losses = 4;
        p.processes = 1;
        let line = live_line(&p);
        assert!(
            line.contains("LOST 1,200 records (+4 other losses)  1 process "),
            "{line}"
        );
    }
}
