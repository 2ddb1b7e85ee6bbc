//! `cargo xtask bench`, Python part: the cost per Python call of tracing a
//! CPython 3.11 interpreter through its USDT probes (issue #7), in four
//! runs of the same loop of calls to a one-line function:
//!
//! - untraced;
//! - semaphores only: `function__entry/return` and `line` raised by silent
//!   probes at sites never reached (the interpreter's tracing path, no trap);
//! - bare USDT uprobes: empty probes at the function sites, `line` held as
//!   `--python` holds it (the kernel's uprobe cost, no records);
//! - `--python`: records with interned file and function names.

use std::process::Command;

use anyhow::{Context as _, bail};

use tests::PYTHON;

use crate::target_dir;

/// Times `n` calls of a trivial function; prints ns per call.
const SCRIPT: &str = "import sys, time
def f(x):
    return x
n = int(sys.argv[1])
t = time.perf_counter_ns()
for i in range(n):
    f(i)
print((time.perf_counter_ns() - t) / n)
";

fn ns_per_call(out: &std::process::Output) -> anyhow::Result<f64> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "run failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    stdout
        .trim()
        .parse()
        .with_context(|| format!("bench output: {stdout}"))
}

pub(crate) fn python_overhead(
    tracer: &std::path::Path,
    calls: u64,
    repeat: usize,
) -> anyhow::Result<()> {
    if !std::path::Path::new(PYTHON).exists() {
        println!("\n== Python calls: skipped, {PYTHON} (Debian's, with USDT probes) is missing");
        return Ok(());
    }
    let dir = target_dir().join("xtask");
    std::fs::create_dir_all(&dir).context("creating target/xtask")?;
    let script = dir.join("bench_calls.py");
    std::fs::write(&script, SCRIPT).context("writing the Python bench script")?;
    let capture = dir.join("bench_python.capture");
    let n = calls.to_string();
    let py_args = [script.as_os_str(), n.as_ref()];
    let traced = |flags: &[&str]| -> anyhow::Result<f64> {
        // The recorder refuses to replace an existing capture.
        let _ = std::fs::remove_file(&capture);
        let out = Command::new(tracer)
            .args(["record", "--no-syscalls", "--sample-hz", "0", "-o"])
            .arg(&capture)
            .args(flags)
            .arg("--")
            .arg(PYTHON)
            .args(py_args)
            .output()
            .context("running the tracer")?;
        ns_per_call(&out)
    };
    let modes: [(&str, &[&str]); 3] = [
        (
            "semaphores raised, no probe hit",
            &[
                "--usdt-semaphore",
                "python:function__*",
                "--usdt-semaphore",
                "python:line",
            ],
        ),
        (
            "bare USDT uprobes (entry+return)",
            &[
                "--bench-empty-usdt",
                "python:function__*",
                "--usdt-semaphore",
                "python:line",
            ],
        ),
        ("--python (records, names)", &["--python"]),
    ];
    let mut rows: Vec<Vec<f64>> = Vec::new();
    for _ in 0..repeat {
        let plain = ns_per_call(
            &Command::new(PYTHON)
                .args(py_args)
                .output()
                .context("running python")?,
        )?;
        let mut row = vec![plain];
        for (_, flags) in &modes {
            row.push(traced(flags)?);
        }
        rows.push(row);
    }
    let med = |i: usize| crate::bench::median(rows.iter().map(|r| r[i]).collect());
    let plain = med(0);
    println!(
        "\n== Python calls ({calls} calls of a one-line function, {PYTHON}, median of {repeat})"
    );
    println!("  untraced:                          {plain:8.1} ns/call");
    for (i, (name, _)) in modes.iter().enumerate() {
        let v = med(i + 1);
        println!(
            "  {name:<34} {v:8.1} ns/call (+{:.1} ns, {:.2}x untraced)",
            v - plain,
            v / plain
        );
    }
    let bare = med(2);
    let full = med(3);
    println!(
        "  added cost ratio:                  {:8.2}x ((--python - untraced)/(bare - untraced))",
        (full - plain) / (bare - plain)
    );
    Ok(())
}
