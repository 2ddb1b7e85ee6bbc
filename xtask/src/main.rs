//! `cargo xtask`: jobs cargo cannot do alone. Nothing in a normal build
//! depends on it.
//!
//! - `test`: build the tracer, then run every test (the privileged `tests`
//!   crate included, which needs root).
//! - `demo`: trace a ring of event-driven daemons in normal runs, learn a
//!   model, inject the partial-receive fault, and print the ranked units.
//! - `bench`: the benchmarks whose figures go into issue notes.
//! - `bench-agent`: the agent's soak benchmark (CPU, memory, disk over time).
//! - `bench-overhead`: what recording costs a file system's throughput,
//!   with and without function probes and an overhead budget.
//! - `fuzz`: the libFuzzer targets, each for a bounded time.
//! - `fs`: GlusterFS and MooseFS runs with faults, the fault matrices, their
//!   timings (peer comparison).
//! - `mpi-matrix`: MPI programs with faults, judged by the MPI analyses.
//! - `model-matrix`: the bug-class suite of model-based localization.
//! - `man`: man pages and shell completions, optionally installed.

mod bench;
mod bench_agent;
mod bench_overhead;
mod bench_python;
mod bench_syscalls;
mod failures;
mod fs;
mod fuzz;
mod man;
mod model_matrix;
mod mpi;
mod mpi_matrix;
mod mpi_overhead;

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(about = "Project tasks: test, demo, bench")]
struct Args {
    #[command(subcommand)]
    command: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Build the tracer and run the whole test suite (needs root for the
    /// privileged tests; run `sudo scripts/setup` once first).
    Test {
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(last = true)]
        cargo_args: Vec<String>,
    },
    /// Run the built-in demo: learn a daemon ring's normal behaviour, inject a
    /// fault, localize it.
    Demo,
    /// Run the benchmarks and print their figures.
    Bench(bench::BenchArgs),
    /// Repeat the timed MPI interference test (needs root, MPICH, stress-ng
    /// and a quiet 2-core machine) and count its verdicts.
    BenchMpi {
        /// Repetitions.
        #[arg(long, default_value_t = 5)]
        repeat: usize,
    },
    /// Soak the long-lived agent (needs root): a paced target at 10 k
    /// events/s, a burst, restarts; a table of its CPU, memory and disk.
    /// Exits non-zero when a target is missed.
    BenchAgent(bench_agent::BenchAgentArgs),
    /// What recording costs a file system's throughput (needs root):
    /// untraced, no -f, a broad function pattern, and the same pattern
    /// under --overhead 5%, interleaved, >= 3 runs each; prints throughput
    /// ratios (min/median/max) and what the budget dropped.
    BenchOverhead(bench_overhead::BenchOverheadArgs),
    /// Build and run the libFuzzer targets (captures, models, thresholds,
    /// ELF and USDT notes, the agent's configuration and pipes), each for
    /// a bounded time; prints executions and exits non-zero on a finding.
    /// Needs cargo-fuzz and the nightly toolchain (`scripts/setup`).
    Fuzz(fuzz::FuzzArgs),
    /// File-system experiments for peer comparison (GlusterFS, MooseFS):
    /// runs, fault matrices, timings.
    Fs(Box<fs::FsArgs>),
    /// The MPI diagnosis matrix (needs root, MPICH, gfortran, stress-ng):
    /// every program of the suite, clean and with each fault, recorded and
    /// judged (interference verdict, outlier verdict, hang culprit); a table
    /// per program and fault. Exits non-zero when a target is missed.
    MpiMatrix(mpi_matrix::MatrixArgs),
    /// What `tracer record --mpi` costs an MPI job: the wavefront on 2
    /// pinned ranks untraced and traced, interleaved (needs root, MPICH,
    /// gfortran; --neighbour adds a busy neighbour).
    MpiOverhead(mpi_overhead::OverheadArgs),
    /// The bug-class suite of model-based localization (issue 20): every
    /// fault class on every daemon program, at a random daemon and time,
    /// with fresh normal runs for false alarms; per cell detection (the
    /// earliest anomaly is in the faulty process) and top-1 (the
    /// highest-ranked unit is). Needs root to record.
    ModelMatrix(model_matrix::ModelMatrixArgs),
    /// Generate the man pages and shell completions (bash, zsh, fish) of
    /// `tracer` and `analyzer` from their command-line definitions into
    /// target/man; with --install, install them under --prefix (/usr/local).
    Man(man::ManArgs),
    /// Repeat the AutomaDeD fault injections on real MPICH ranks (needs
    /// root, MPICH) with a random faulty rank each time; print task- and
    /// edge-isolation recall (paper 004 Figures 7 and 8).
    BenchAutomaded {
        /// Repetitions per fault.
        #[arg(long, default_value_t = 10)]
        repeat: usize,
    },
}

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Where cargo puts build outputs.
pub(crate) fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// PATH with the cached tool directory of scripts/setup appended.
pub(crate) fn tool_path() -> std::ffi::OsString {
    let tools = env::var_os("EFTRACE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/eftrace".into())
        .join("tools/bin");
    let mut dirs: Vec<PathBuf> = env::var_os("PATH")
        .map(|p| env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(tools);
    env::join_paths(dirs).unwrap_or_default()
}

pub(crate) fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .env("PATH", tool_path())
        .status()
        .with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

pub(crate) fn cargo() -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"))
}

/// Builds the tracer binary (`release` or debug) and returns its path; with
/// `XTASK_TRACER` set, that binary instead, built by nobody.
pub(crate) fn build_tracer(release: bool) -> anyhow::Result<PathBuf> {
    // A tracer built before (a long matrix recorded with one binary while
    // the worktree changes): used as it is, nothing built.
    if let Some(tracer) = env::var_os("XTASK_TRACER") {
        return Ok(PathBuf::from(tracer));
    }
    let mut cmd = cargo();
    cmd.args(["build", "-p", "tracer", "-p", "analyzer", "--bins"]);
    if release {
        cmd.arg("--release");
    }
    run(&mut cmd)?;
    Ok(target_dir()
        .join(if release { "release" } else { "debug" })
        .join("tracer"))
}

/// Compiles a C source with gcc into the target directory.
pub(crate) fn build_c(source: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let out_dir = target_dir().join("xtask");
    std::fs::create_dir_all(&out_dir)?;
    let out = out_dir.join(name);
    run(Command::new("gcc")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&out)
        .arg(source))?;
    Ok(out)
}

fn test(cargo_args: &[String]) -> anyhow::Result<()> {
    let tracer = build_tracer(false)?;
    if !is_root() {
        eprintln!(
            "xtask: not root: the privileged tests in `tests` will skip (run as root to include them)"
        );
    }
    let mut cmd = cargo();
    cmd.args(["test", "--workspace"])
        .args(cargo_args)
        .env("TRACER_BIN", &tracer)
        .env("PATH", tool_path())
        .stdout(std::process::Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd.spawn().with_context(|| format!("starting {shown}"))?;
    let mut collector = failures::Collector::default();
    if let Some(out) = child.stdout.take() {
        use std::io::{BufRead as _, Write as _};
        let mut reader = std::io::BufReader::new(out);
        let mut line = Vec::new();
        let stdout = std::io::stdout();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                // Unreadable output: pass the rest through unread, so cargo
                // never blocks on a full pipe.
                Err(_) => {
                    let _ = std::io::copy(&mut reader, &mut stdout.lock());
                    break;
                }
                Ok(_) => {
                    let mut lock = stdout.lock();
                    let _ = lock.write_all(&line);
                    let _ = lock.flush();
                    let text = String::from_utf8_lossy(&line);
                    collector.line(text.trim_end_matches(['\n', '\r']));
                }
            }
        }
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for {shown}"))?;
    if !status.success() {
        let failed = collector.finish();
        if !failed.is_empty() {
            println!("\n== the failed tests' messages, again ({})", failed.len());
            for f in &failed {
                println!("\n-- {}", f.name);
                for l in &f.message {
                    println!("   {l}");
                }
            }
        }
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

/// The functions the demo traces in the ring daemons.
pub(crate) const RING_FUNCTIONS: &[&str] = &[
    "-f",
    "handle_*",
    "-f",
    "*_msg",
    "-f",
    "close_connection",
    "-f",
    "main_loop",
    "-f",
    "connect_rhs",
    "-f",
    "listen_port",
    "-f",
    "finish",
];

fn step(text: &str) {
    println!("\n== {text}");
}

fn demo() -> anyhow::Result<()> {
    if !is_root() {
        bail!("the demo loads eBPF programs: run it as root (after `sudo scripts/setup`)");
    }
    step("building the tracer, the analyzer and the daemon ring");
    let tracer = build_tracer(true)?;
    let analyzer = target_dir().join("release/analyzer");
    let ring = build_c(&root().join("tests/fixtures/ring.c"), "ring")?;
    let dir = target_dir().join("xtask/demo");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    // Ports from the process id, so two demos on one machine do not collide.
    let base = 20000 + (std::process::id() % 2000) * 10;
    let record = |name: &str, port: u32, fault: Option<u32>| -> anyhow::Result<PathBuf> {
        let capture = dir.join(format!("{name}.capture"));
        let mut cmd = Command::new(&tracer);
        cmd.args(["record", "--sample-hz", "0"])
            .args(RING_FUNCTIONS)
            .arg("-o")
            .arg(&capture)
            .arg("--")
            .arg(&ring);
        cmd.args(["4", "10", &port.to_string()]);
        if let Some(node) = fault {
            cmd.arg(node.to_string());
        }
        let out = cmd.output().context("running the tracer")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            bail!("recording {name} failed: {stderr}");
        }
        let summary = stderr
            .lines()
            .find(|l| l.starts_with("recorded"))
            .unwrap_or("");
        println!("  {name}: {summary}");
        Ok(capture)
    };
    step("recording 3 normal runs of a 4-daemon token ring (poll loops, 10 rounds)");
    let mut normal = Vec::new();
    for i in 0..3 {
        normal.push(record(&format!("normal-{}", i + 1), base + i * 10, None)?);
    }
    step("learning the model of normal behaviour");
    let model = dir.join("model.json");
    run(Command::new(&analyzer)
        .args(["model", "learn", "-o"])
        .arg(&model)
        .args(&normal))?;
    step(
        "recording a run with the partial-receive fault injected at daemon 2 (the ring hangs; it is stopped after 1.5 s)",
    );
    let faulty = record("faulty", base + 30, Some(2))?;
    step("a fresh normal run, scored against the model (its highest scores)");
    let trial = record("normal-trial", base + 40, None)?;
    run(Command::new(&analyzer)
        .args(["model", "score", "--top", "3", "--model"])
        .arg(&model)
        .arg(&trial))?;
    step("the faulty run, scored: most suspect execution units first");
    let svg = dir.join("scores.svg");
    run(Command::new(&analyzer)
        .args(["model", "score", "--top", "10", "--model"])
        .arg(&model)
        .arg(&faulty)
        .arg("--svg")
        .arg(&svg))?;
    println!(
        "\nDaemon 3 got a partial header and closed its left-hand connection (the 'unexpected close_connection' unit);\n\
         daemon 2 saw that connection reset (a handler on a connection never seen serving input in normal runs).\n\
         Captures, model and plot: {}",
        dir.display()
    );
    step("every analysis that applies to the faulty run, one verdict, and the HTML report");
    let report = dir.join("report.html");
    // Exit status 1 is the verdict "a suspect was found", not a failure.
    let status = Command::new(&analyzer)
        .args(["diagnose", "--model"])
        .arg(&model)
        .arg(&faulty)
        .arg("-o")
        .arg(&report)
        .status()
        .context("running analyzer diagnose")?;
    match status.code() {
        Some(0 | 1) => {}
        _ => bail!("analyzer diagnose failed ({status})"),
    }
    println!(
        "\nThe report (one HTML file, opens offline): {}",
        report.display()
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    // The error alone: a backtrace of xtask itself (RUST_BACKTRACE is often
    // set for the tests) would bury what failed at the end of a CI log.
    match task(Args::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn task(command: Task) -> anyhow::Result<()> {
    match command {
        Task::Test { cargo_args } => test(&cargo_args),
        Task::Demo => demo(),
        Task::Bench(args) => bench::run_benches(&args),
        Task::BenchMpi { repeat } => mpi::bench_mpi(repeat),
        Task::BenchAgent(args) => bench_agent::bench_agent(&args),
        Task::BenchOverhead(args) => bench_overhead::bench_overhead(&args),
        Task::Fuzz(args) => fuzz::fuzz(&args),
        Task::Fs(args) => fs::run(*args),
        Task::MpiMatrix(args) => mpi_matrix::mpi_matrix(&args),
        Task::MpiOverhead(args) => mpi_overhead::mpi_overhead(&args),
        Task::ModelMatrix(args) => model_matrix::model_matrix(&args),
        Task::Man(args) => man::run(args),
        Task::BenchAutomaded { repeat } => {
            let tracer = build_tracer(false)?;
            run(cargo()
                .args(["test", "-p", "tests", "--test", "automaded", "--"])
                .args(["--test-threads", "1", "--nocapture"])
                .env("TRACER_BIN", &tracer)
                .env("AUTOMADED_REPEAT", repeat.to_string()))
        }
    }
}
