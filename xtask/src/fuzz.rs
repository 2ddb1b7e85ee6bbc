//! `cargo xtask fuzz`: builds the libFuzzer targets of `fuzz/` (cargo-fuzz,
//! nightly, AddressSanitizer) and runs each for a bounded time, with the
//! limits the project holds them to: no crash, no input slower than 10 s,
//! no process over 256 MB resident and no single allocation over 256 MB.
//! Each target's corpus starts from its committed seeds (`fuzz/seeds/`,
//! from real captures, models and configurations) and grows in
//! `fuzz/corpus/`; a failing input is left in `fuzz/artifacts/TARGET/`.
//! Prints executions per target; exits non-zero on any failure.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};

use crate::{root, tool_path};

/// Every target, in the order they run.
pub const TARGETS: &[&str] = &[
    "capture_bytes",
    "capture_structured",
    "live_window",
    "model_load",
    "thresholds_load",
    "mpi_model_load",
    "elf_symbols",
    "usdt_notes",
    "agent_config",
    "agent_pipes",
];

/// `cargo xtask fuzz` options.
#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Run each target this many seconds (CI: a short bounded run).
    #[arg(long, default_value_t = 20, conflicts_with = "minutes")]
    seconds: u64,
    /// Run each target this many minutes (a long run).
    #[arg(long)]
    minutes: Option<u64>,
    /// Only these targets (repeatable; default: all).
    #[arg(long = "target", value_name = "NAME")]
    targets: Vec<String>,
    /// Only build them.
    #[arg(long)]
    build_only: bool,
}

/// The figures of one run.
struct Outcome {
    target: String,
    seconds: f64,
    executions: u64,
    peak_rss_mb: u64,
    corpus: usize,
    failed: Option<String>,
}

/// `cargo +nightly` through rustup, without the variables of the cargo
/// that runs xtask (they name the stable toolchain's tools).
fn cargo_nightly() -> Command {
    let mut cmd = Command::new("cargo");
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if (key.starts_with("CARGO") || key.starts_with("RUST"))
            && key != "CARGO_HOME"
            && key != "RUSTUP_HOME"
        {
            cmd.env_remove(&*key);
        }
    }
    cmd.arg("+nightly").current_dir(root());
    cmd
}

pub fn fuzz(args: &FuzzArgs) -> anyhow::Result<()> {
    let fuzz_dir = root().join("fuzz");
    let ok = cargo_nightly()
        .args(["fuzz", "--version"])
        .env("PATH", tool_path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        bail!(
            "cargo-fuzz is not installed: run `sudo scripts/setup` (it installs it under the tool cache)"
        );
    }
    let targets: Vec<&str> = if args.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        for t in &args.targets {
            if !TARGETS.contains(&t.as_str()) {
                bail!("no fuzz target {t}; there are: {}", TARGETS.join(", "));
            }
        }
        args.targets.iter().map(String::as_str).collect()
    };
    // The tracer library embeds its eBPF object; fuzzing never loads it,
    // so an empty one spares the nightly eBPF build inside the fuzz build.
    let empty_object = fuzz_dir.join("target/empty.bpf.o");
    std::fs::create_dir_all(fuzz_dir.join("target"))?;
    std::fs::write(&empty_object, b"")?;
    let started = Instant::now();
    if targets.len() == TARGETS.len() {
        crate::run(
            cargo_nightly()
                .args(["fuzz", "build"])
                .env("TRACER_EBPF_OBJECT", &empty_object),
        )?;
    } else {
        for t in &targets {
            crate::run(
                cargo_nightly()
                    .args(["fuzz", "build", t])
                    .env("TRACER_EBPF_OBJECT", &empty_object),
            )?;
        }
    }
    eprintln!(
        "xtask fuzz: built {} targets in {:.0} s",
        targets.len(),
        started.elapsed().as_secs_f64()
    );
    if args.build_only {
        return Ok(());
    }
    let seconds = args.minutes.map_or(args.seconds, |m| m * 60);
    let mut outcomes = Vec::new();
    for t in &targets {
        outcomes.push(run_target(&fuzz_dir, t, seconds)?);
    }
    println!(
        "\n{:<20} {:>8} {:>14} {:>10} {:>9} {:>7}  result",
        "target", "seconds", "executions", "exec/s", "peak MB", "corpus"
    );
    let mut failures = 0;
    for o in &outcomes {
        println!(
            "{:<20} {:>8.0} {:>14} {:>10.0} {:>9} {:>7}  {}",
            o.target,
            o.seconds,
            o.executions,
            o.executions as f64 / o.seconds.max(1e-9),
            o.peak_rss_mb,
            o.corpus,
            o.failed.as_deref().unwrap_or("ok")
        );
        failures += usize::from(o.failed.is_some());
    }
    if failures > 0 {
        bail!("{failures} fuzz target(s) failed; the inputs are in fuzz/artifacts/");
    }
    Ok(())
}

fn run_target(fuzz_dir: &Path, target: &str, seconds: u64) -> anyhow::Result<Outcome> {
    let corpus = fuzz_dir.join("corpus").join(target);
    let seeds = fuzz_dir.join("seeds").join(target);
    let artifacts = fuzz_dir.join("artifacts").join(target);
    for d in [&corpus, &seeds, &artifacts] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    eprintln!("xtask fuzz: {target} for {seconds} s");
    let started = Instant::now();
    let out = cargo_nightly()
        .args(["fuzz", "run", target])
        .arg(&corpus)
        .arg(&seeds)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .args([
            "-rss_limit_mb=256",
            "-malloc_limit_mb=256",
            "-timeout=10",
            "-print_final_stats=1",
        ])
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .env("PATH", tool_path())
        .env("TRACER_EBPF_OBJECT", fuzz_dir.join("target/empty.bpf.o"))
        // ASan's quarantine would count against the RSS limit; leaks of
        // process-lifetime statics are not findings.
        .env("ASAN_OPTIONS", "quarantine_size_mb=16:detect_leaks=0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running fuzz target {target}"))?;
    let log = String::from_utf8_lossy(&out.stderr);
    let stat = |name: &str| -> u64 {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("stat::{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let corpus_files = std::fs::read_dir(&corpus).map_or(0, Iterator::count);
    let failed = (!out.status.success()).then(|| {
        let why = log
            .lines()
            .find(|l| {
                l.contains("ERROR: libFuzzer")
                    || l.contains("panicked at")
                    || l.contains("ERROR: AddressSanitizer")
            })
            .unwrap_or("failed")
            .to_string();
        let log_path = artifacts.join("last.log");
        let _ = std::fs::write(&log_path, log.as_bytes());
        format!("{why} (log: {})", log_path.display())
    });
    Ok(Outcome {
        target: target.to_string(),
        seconds: started.elapsed().as_secs_f64(),
        executions: stat("number_of_executed_units"),
        peak_rss_mb: stat("peak_rss_mb"),
        corpus: corpus_files,
        failed,
    })
}
