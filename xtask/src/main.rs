//! `cargo xtask`: jobs cargo cannot do alone. Nothing in a normal build
//! depends on it.
//!
//! - `test`: build the tracer, then run every test (the privileged `tests`
//!   crate included, which needs root).
//! - `demo`: build, start the bundled event-driven client/server under the
//!   tracer, replay the capture and print what it holds.
//! - `bench`: the benchmarks whose figures go into issue notes.

mod bench;

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
    /// Run the built-in demo: trace a small client/server, replay, summarize.
    Demo,
    /// Run the benchmarks and print their figures.
    Bench(bench::BenchArgs),
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

/// Builds the tracer binary (`release` or debug) and returns its path.
pub(crate) fn build_tracer(release: bool) -> anyhow::Result<PathBuf> {
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
        .env("TRACER_BIN", &tracer);
    run(&mut cmd)
}

fn demo() -> anyhow::Result<()> {
    if !is_root() {
        bail!("the demo loads eBPF programs: run it as root (after `sudo scripts/setup`)");
    }
    let tracer = build_tracer(true)?;
    let echo = build_c(&root().join("xtask/demo/echo.c"), "demo-echo")?;
    let capture = target_dir().join("xtask/demo.capture");
    println!(
        "== demo: tracing a poll() echo server and 3 clients (functions, socket calls, CPU samples)"
    );
    run(Command::new(&tracer)
        .args([
            "record",
            "-f",
            "serve",
            "-f",
            "on_*",
            "-f",
            "handle_request",
            "-f",
            "send_reply",
            "-o",
        ])
        .arg(&capture)
        .arg("--")
        .arg(&echo)
        .args(["3", "20"]))?;
    println!("\n== replay: the first events of {}", capture.display());
    let out = Command::new(&tracer)
        .arg("replay")
        .arg(&capture)
        .output()
        .context("replaying the demo capture")?;
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines().filter(|l| !l.contains(" sample ")).take(30) {
        println!("{line}");
    }
    println!("\n== summary");
    run(Command::new(&tracer)
        .args(["replay", "--summary"])
        .arg(&capture))?;
    println!(
        "\n(full event list: {} replay {}; JSON lines: add --json)",
        tracer.display(),
        capture.display()
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Task::Test { cargo_args } => test(&cargo_args),
        Task::Demo => demo(),
        Task::Bench(args) => bench::run_benches(&args),
    }
}
