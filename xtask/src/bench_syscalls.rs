//! `cargo xtask bench`, system-call part: what tracing system calls costs
//! a call, for the traced process and for every other process of the node
//! (the raw `sys_enter`/`sys_exit` tracepoints run for every system call),
//! and how soon the recorder exits after its command ended.
//!
//! Four kinds of call (`bench sys`, CPU time per call, so a busy neighbour
//! does not count): `getppid` (never recorded), a 64-byte write and read on a
//! socketpair (two recorded socket calls), the same on a pipe (neither
//! socket nor file: looked at, not kept), a 4 KiB pread of a cached file
//! (counted file I/O). Measured untraced; while the tracer records another
//! process (the node-wide cost); traced with empty tracepoint programs (the
//! tracepoints' own cost); traced as recorded by default; traced without
//! file I/O. With `--baseline TRACER`, the same for another tracer binary
//! (one built from an older commit) where it has the options.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail};

use crate::{bench::median, target_dir};

/// CPU ns per call of the four kinds, from `bench sys` output.
fn parse(stdout: &[u8]) -> anyhow::Result<[f64; 4]> {
    let text = String::from_utf8_lossy(stdout);
    let v: Vec<f64> = text
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    match v[..] {
        [a, b, c, d] => Ok([a, b, c, d]),
        _ => bail!("unexpected bench output: {text}"),
    }
}

fn capture_path() -> std::path::PathBuf {
    target_dir().join("xtask/bench-syscalls.capture")
}

/// `bench sys calls` under `tracer record ARGS --`, or alone without a tracer.
fn traced(
    tracer: Option<&Path>,
    args: &[&str],
    bench: &str,
    calls: u64,
) -> anyhow::Result<[f64; 4]> {
    let calls = calls.to_string();
    let out = match tracer {
        None => Command::new(bench).args(["sys", &calls]).output(),
        Some(t) => Command::new(t)
            .args(["record", "--sample-hz", "0", "-o"])
            .arg(capture_path())
            .args(args)
            .args(["--", bench, "sys", &calls])
            .output(),
    }
    .context("running the system-call bench")?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    parse(&out.stdout)
}

/// `bench sys calls` untraced while `tracer` records a sleeping process.
fn beside(tracer: &Path, bench: &str, calls: u64) -> anyhow::Result<[f64; 4]> {
    let mut sleeper = Command::new("sleep").arg("600").spawn()?;
    let mut rec = Command::new(tracer)
        .args(["record", "--sample-hz", "0", "-o"])
        .arg(capture_path())
        .args(["-p", &sleeper.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()?;
    // Wait until it records.
    let stderr = rec.stderr.take().context("stderr")?;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    for line in lines.by_ref() {
        if line?.contains("recording") {
            break;
        }
    }
    let result = traced(None, &[], bench, calls);
    let _ = Command::new("kill")
        .args(["-INT", &rec.id().to_string()])
        .status();
    let _ = rec.wait();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    result
}

/// Seconds between the end of the traced command and the recorder's exit.
fn exit_latency(tracer: &Path) -> anyhow::Result<f64> {
    let out_file = target_dir().join("xtask/bench-exit.time");
    let script = format!("sleep 0.3; date +%s.%N > {}", out_file.display());
    let status = Command::new(tracer)
        .args(["record", "--sample-hz", "0", "-o"])
        .arg(capture_path())
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .status()?;
    let exited = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    if !status.success() {
        bail!("tracer failed ({status})");
    }
    let ended: f64 = std::fs::read_to_string(&out_file)?.trim().parse()?;
    Ok(exited - ended)
}

/// Prints the system-call and exit-time figures of `tracer` (and of
/// `baseline`, when given).
pub(crate) fn syscall_overhead(
    tracer: &Path,
    baseline: Option<&Path>,
    calls: u64,
    repeat: usize,
) -> anyhow::Result<()> {
    let bench = crate::build_c(&crate::root().join("xtask/bench/bench.c"), "bench")?;
    let bench = bench.to_str().context("utf-8 path")?;
    println!(
        "\n== system calls: CPU ns per call ({calls} rounds, median of {repeat}; load average {})",
        load_average()
    );
    type Row<'a> = (&'a str, Box<dyn Fn() -> anyhow::Result<[f64; 4]> + 'a>);
    let mut rows: Vec<Row<'_>> = vec![
        ("untraced", Box::new(|| traced(None, &[], bench, calls))),
        (
            "other process, this tracer recording",
            Box::new(|| beside(tracer, bench, calls)),
        ),
        (
            "traced, empty tracepoint programs",
            Box::new(|| traced(Some(tracer), &["--bench-empty-syscalls"], bench, calls)),
        ),
        (
            "traced (default)",
            Box::new(|| traced(Some(tracer), &[], bench, calls)),
        ),
        (
            "traced, --no-file-io",
            Box::new(|| traced(Some(tracer), &["--no-file-io"], bench, calls)),
        ),
    ];
    if let Some(base) = baseline {
        rows.push((
            "other process, baseline recording",
            Box::new(move || beside(base, bench, calls)),
        ));
        rows.push((
            "traced by the baseline",
            Box::new(move || traced(Some(base), &[], bench, calls)),
        ));
    }
    // Interleaved repetitions: a change of load hits every row alike.
    let mut results: Vec<Vec<[f64; 4]>> = vec![Vec::new(); rows.len()];
    for _ in 0..repeat {
        for (i, (_, run)) in rows.iter().enumerate() {
            results[i].push(run()?);
        }
    }
    println!(
        "  {:<40} {:>8} {:>8} {:>8} {:>8}",
        "", "getppid", "socket", "pipe", "pread"
    );
    for ((name, _), r) in rows.iter().zip(&results) {
        let m: Vec<f64> = (0..4)
            .map(|k| median(r.iter().map(|v| v[k]).collect()))
            .collect();
        println!(
            "  {name:<40} {:>8.0} {:>8.0} {:>8.0} {:>8.0}",
            m[0], m[1], m[2], m[3]
        );
    }
    println!(
        "\n== exit: seconds from the command's end to the recorder's exit (median of {repeat})"
    );
    let mut tracers = vec![("this tracer", tracer)];
    if let Some(base) = baseline {
        tracers.push(("baseline", base));
    }
    for (name, t) in tracers {
        let mut v = Vec::new();
        for _ in 0..repeat {
            v.push(exit_latency(t)?);
            std::thread::sleep(Duration::from_millis(100));
        }
        let shown: Vec<String> = v.iter().map(|s| format!("{s:.3}")).collect();
        println!(
            "  {name:<12} {:.3} s (runs: {})",
            median(v.clone()),
            shown.join(", ")
        );
    }
    Ok(())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
