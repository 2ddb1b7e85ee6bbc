//! `cargo xtask bench`: figures for issue notes, not pass/fail tests.
//!
//! - overhead: ns per call of an unprobed function, of one with an empty
//!   uprobe+uretprobe pair, and of one traced with records, in the same run;
//! - event rate: calls flooded through the tracer into a capture, with the
//!   records lost (if any) as the tracer reports them;
//! - system calls and exit time (`bench_syscalls.rs`).
//!
//! The decode rate is `cargo bench -p analyzer --bench decode`.

use std::process::Command;

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{build_c, build_tracer, is_root, root, target_dir};

/// `cargo xtask bench` options.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Calls per overhead measurement.
    #[arg(long, default_value_t = 500_000)]
    calls: u64,
    /// Calls per process in the event-rate floods.
    #[arg(long, default_value_t = 1_000_000)]
    flood_calls: u64,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Rounds of the system-call measurement (each round makes 6 calls).
    #[arg(long, default_value_t = 100_000)]
    sys_rounds: u64,
    /// Another tracer binary (built from an older commit) to measure beside
    /// this one in the system-call and exit-time benchmarks.
    #[arg(long, value_name = "TRACER")]
    baseline: Option<std::path::PathBuf>,
    /// Only the system-call, exit-time and server-workload benchmarks.
    #[arg(long)]
    syscalls_only: bool,
    /// Seconds of each server-workload run.
    #[arg(long, default_value_t = 5.0)]
    workload_seconds: f64,
}

/// How many of a capture's function probes are of each first-instruction
/// class (`classes`: each probe's class name, what the budget weighed it
/// at), for the benchmarks' notes.
pub(crate) fn probe_classes(
    classes: impl IntoIterator<Item = &'static str>,
) -> std::collections::BTreeMap<&'static str, usize> {
    let mut count = std::collections::BTreeMap::new();
    for class in classes {
        *count.entry(class).or_default() += 1;
    }
    count
}

/// The median (upper of the two middle values); NaN for no values.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

struct TracedRun {
    stdout: String,
    stderr: String,
}

fn traced(tracer: &std::path::Path, args: &[&str], command: &[&str]) -> anyhow::Result<TracedRun> {
    let capture = target_dir().join("xtask/bench.capture");
    // The recorder refuses to replace an existing capture.
    let _ = std::fs::remove_file(&capture);
    let out = Command::new(tracer)
        .args(["record", "--no-syscalls", "--sample-hz", "0", "-o"])
        .arg(&capture)
        .args(args)
        .arg("--")
        .args(command)
        .output()
        .context("running the tracer")?;
    let run = TracedRun {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    if !out.status.success() {
        bail!("tracer failed: {}", run.stderr);
    }
    Ok(run)
}

/// Records lost according to the tracer's summary.
fn losses(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("LOSSES: ring_full "))
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn run_benches(args: &BenchArgs) -> anyhow::Result<()> {
    if !is_root() {
        bail!("benchmarks attach probes: run as root");
    }
    let tracer = build_tracer(true)?;
    if args.syscalls_only {
        crate::bench_syscalls::syscall_overhead(
            &tracer,
            args.baseline.as_deref(),
            args.sys_rounds,
            args.repeat,
        )?;
        return crate::bench_syscalls::workload_overhead(
            &tracer,
            args.baseline.as_deref(),
            args.workload_seconds,
            args.repeat,
        );
    }
    let bench = build_c(&root().join("xtask/bench/bench.c"), "bench")?;
    let bench = bench.to_str().context("utf-8 path")?;

    println!(
        "== overhead per call ({} calls, median of {})",
        args.calls, args.repeat
    );
    let mut rows = Vec::new();
    for _ in 0..args.repeat {
        let calls = args.calls.to_string();
        let run = traced(
            &tracer,
            &["-f", "traced_fn", "--bench-empty-probe", "empty_fn"],
            &[bench, "compare", &calls],
        )?;
        let nums: Vec<f64> = run
            .stdout
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect();
        if nums.len() != 3 {
            bail!("unexpected bench output: {}", run.stdout);
        }
        rows.push((nums[0], nums[1], nums[2]));
    }
    let plain = median(rows.iter().map(|r| r.0).collect());
    let empty = median(rows.iter().map(|r| r.1).collect());
    let full = median(rows.iter().map(|r| r.2).collect());
    println!("  unprobed function:               {plain:8.1} ns/call");
    println!("  empty uprobe+uretprobe pair:     {empty:8.1} ns/call");
    println!("  traced (entry+return records):   {full:8.1} ns/call");
    println!(
        "  ratio traced / empty pair:       {:8.2}x (target <= 1.2x)",
        full / empty
    );
    println!(
        "  added cost ratio:                {:8.2}x ((traced-unprobed)/(empty-unprobed))",
        (full - plain) / (empty - plain)
    );

    println!(
        "\n== event rate into a capture file ({} calls per process, 2 events per call)",
        args.flood_calls
    );
    for (procs, ring) in [(1, "8M"), (1, "64M"), (2, "64M")] {
        let mut rates = Vec::new();
        let mut lost = Vec::new();
        for _ in 0..args.repeat {
            let n = args.flood_calls.to_string();
            let p = procs.to_string();
            let run = traced(
                &tracer,
                &["-f", "traced_fn", "--ring-size", ring],
                &[bench, "flood", &n, &p],
            )?;
            let secs: f64 = run
                .stdout
                .trim()
                .parse()
                .with_context(|| format!("bench output: {}", run.stdout))?;
            rates.push((2 * args.flood_calls * procs) as f64 / secs);
            lost.push(losses(&run.stderr));
        }
        println!(
            "  {procs} producer(s), ring {ring:>3}: {:6.2} M events/s, lost {} (per run: {:?})",
            median(rates) / 1e6,
            lost.iter().max().copied().unwrap_or(0),
            lost
        );
    }
    crate::bench_python::python_overhead(&tracer, args.calls, args.repeat)?;
    crate::bench_syscalls::syscall_overhead(
        &tracer,
        args.baseline.as_deref(),
        args.sys_rounds,
        args.repeat,
    )?;
    crate::bench_syscalls::workload_overhead(
        &tracer,
        args.baseline.as_deref(),
        args.workload_seconds,
        args.repeat,
    )?;
    println!("\n(decode rate: cargo bench -p analyzer --bench decode)");
    Ok(())
}
