//! `cargo xtask mpi-overhead`: what `tracer record --mpi` costs an MPI job
//! (issue 17, item 9). An MPI fixture (`--program`: the Fortran wavefront,
//! whose every MPI call goes through the Fortran binding, or the C halo
//! exchange, which calls the C functions directly) runs on 2 ranks pinned
//! to the 2 cores, untraced and traced, interleaved, each `--runs` times;
//! optionally beside a busy neighbour (`stress-ng --cpu 2` at the same
//! priority, both cores).
//!
//! Per variant: the benchmark's own time (its iterations, printed by rank
//! 0), the job's wall time, how long the recorder took to exit after the
//! job ended, and the recorder's CPU time (user + system, start-up and
//! detach included).

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{bench::median, build_tracer, is_root, target_dir};

/// `cargo xtask mpi-overhead`.
#[derive(Debug, Args)]
pub(crate) struct OverheadArgs {
    /// Interleaved repetitions of every variant.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// The program: `wavefront` (Fortran, tests/fixtures/mpi_wavefront.f90)
    /// or `halo` (C, tests/fixtures/mpi_halo.c).
    #[arg(long, default_value = "wavefront", value_parser = ["wavefront", "halo"])]
    program: String,
    /// The program's arguments: iterations and rows of the wavefront,
    /// iterations and cells of the halo exchange. Default: short
    /// computation between MPI calls, the hard case: "6000 1024" for the
    /// wavefront (about 3.5 s on 2 vCPUs: a run of 0.2 s, "400 1024", is
    /// mostly the recorder's start and exit), "2000 32000" for the halo
    /// exchange (both about 16,000 MPI calls per second per rank).
    #[arg(long)]
    size: Option<String>,
    /// Run a busy neighbour (`stress-ng --cpu 2`) during every run.
    #[arg(long)]
    neighbour: bool,
    /// Leave out the empty-probe variant: its single uprobe links take
    /// about 2 minutes to detach after every run (a benchmark-only
    /// variant; `--mpi` uses multi links).
    #[arg(long)]
    no_empty_probe: bool,
    /// Another tracer binary (e.g. an earlier build) whose `--mpi` runs
    /// are interleaved with the others: a before/after comparison that
    /// load changes during the measurement hit alike.
    #[arg(long, value_name = "PATH")]
    compare_tracer: Option<std::path::PathBuf>,
    /// Add `--mpi --overhead PCT` variants (with --compare-tracer, for
    /// both tracers): the budget's estimate, what it dropped and the
    /// measured cost of each run are printed beside the slowdown.
    #[arg(long, value_name = "PCT")]
    overhead: Option<f64>,
}

/// A variant: its name, the recorder's extra arguments (`None`:
/// untraced) and another recorder binary to run them with.
type Variant<'a> = (String, Option<&'a [&'a str]>, Option<&'a Path>);

struct Sample {
    bench_s: f64,
    wall_s: f64,
    exit_lag_s: Option<f64>,
    /// The recorder's own CPU time: its whole tree's (it waits for the
    /// job) less the job's.
    cpu_s: Option<f64>,
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One run; `tracer` = the recorder's extra arguments (None: untraced).
fn one(
    exe: &Path,
    size: &[&str],
    tracer: Option<(&Path, &[&str])>,
    dir: &Path,
) -> anyhow::Result<Sample> {
    let stamp = dir.join("stamps");
    let job = format!(
        "date +%s.%N > {s}; mpiexec -n 2 -bind-to core {exe} {args}; date +%s.%N >> {s}",
        s = stamp.display(),
        exe = exe.display(),
        args = size.join(" ")
    );
    let mut cmd = match tracer {
        None => {
            let mut c = Command::new("sh");
            c.args(["-c", &job]);
            c
        }
        Some((bin, extra)) => {
            // Each traced run writes the same capture: the recorder refuses
            // to replace one, which failed every traced run after the first.
            let capture = dir.join("run.capture");
            match std::fs::remove_file(&capture) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing {}", capture.display())),
            }
            // The outer time counts the recorder and the job it waits
            // for; the inner one the job alone (2 busy-polling ranks,
            // most of the total): the recorder's own CPU is the difference.
            let mut c = Command::new("/usr/bin/time");
            c.args(["-f", "cpu %U %S"])
                .arg(bin)
                .args(["record", "--sample-hz", "0", "-o"])
                .arg(dir.join("run.capture"))
                .args(extra)
                .args(["--", "/usr/bin/time", "-f", "job %U %S", "sh", "-c", &job]);
            c
        }
    };
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .context("running the job")?;
    let ended = now_s();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("run failed: {stderr}");
    }
    let bench_s = stdout
        .split_whitespace()
        .skip_while(|w| *w != "time")
        .nth(1)
        .and_then(|t| t.parse().ok())
        .with_context(|| format!("no 'time' in the output: {stdout}"))?;
    let stamps: Vec<f64> = std::fs::read_to_string(&stamp)?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let [start, end] = stamps[..] else {
        bail!("job stamps missing");
    };
    let times = |prefix: &str| {
        stderr.lines().find_map(|l| {
            let mut f = l.strip_prefix(prefix)?.split_whitespace();
            Some(f.next()?.parse::<f64>().ok()? + f.next()?.parse::<f64>().ok()?)
        })
    };
    let cpu_s = match (times("cpu "), times("job ")) {
        (Some(all), Some(job)) => Some((all - job).max(0.0)),
        _ => None,
    };
    Ok(Sample {
        bench_s,
        wall_s: end - start,
        exit_lag_s: tracer.map(|_| ended - end),
        cpu_s,
    })
}

/// Runs the measurement.
pub(crate) fn mpi_overhead(a: &OverheadArgs) -> anyhow::Result<()> {
    if !is_root() {
        bail!("the tracer loads eBPF programs: run as root (after scripts/setup)");
    }
    let tracer = build_tracer(true)?;
    let dir = target_dir().join("xtask/mpi-overhead");
    std::fs::create_dir_all(&dir)?;
    let (fixture, default_size) = match a.program.as_str() {
        "halo" => ("mpi_halo", "2000 32000"),
        _ => ("mpi_wavefront", "6000 1024"),
    };
    let exe = tests::mpi::build(fixture, &dir);
    let size_text = a.size.as_deref().unwrap_or(default_size);
    let size: Vec<&str> = size_text.split_whitespace().collect();
    let _neighbour = a.neighbour.then(|| {
        Command::new("stress-ng")
            .args(["--cpu", "2", "-q", "--timeout", "3600"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    });
    struct Kill(Option<std::process::Child>);
    impl Drop for Kill {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
                let _ = Command::new("pkill")
                    .args(["-KILL", "-f", "stress-ng --cpu 2 -q --timeout 3600"])
                    .status();
            }
        }
    }
    let _guard = Kill(_neighbour.and_then(Result::ok));
    // The empty-probe variant pays the uprobe traps of the MPI functions
    // and nothing else (what bpftrace counting entries pays, plus returns).
    let mut variants: Vec<Variant<'_>> = vec![
        ("untraced".into(), None, None),
        (
            "empty uprobes on MPI_* (traps only)".into(),
            Some(&[
                "--no-syscalls",
                "--bench-empty-probe",
                "{libmpich.so.12*}:MPI_*",
            ]),
            None,
        ),
        ("tracer record --mpi".into(), Some(&["--mpi"]), None),
        (
            "tracer record --mpi --no-syscalls".into(),
            Some(&["--mpi", "--no-syscalls"]),
            None,
        ),
    ];
    if let Some(other) = &a.compare_tracer {
        variants.push((
            format!("{} record --mpi", other.display()),
            Some(&["--mpi"]),
            Some(other.as_path()),
        ));
    }
    let budget_pct = a.overhead.map(|p| format!("{p}%"));
    let budget_args: Option<[&str; 3]> = budget_pct
        .as_deref()
        .map(|pct| ["--mpi", "--overhead", pct]);
    if let (Some(args), Some(pct)) = (&budget_args, &budget_pct) {
        variants.push((
            format!("tracer record --mpi --overhead {pct}"),
            Some(&args[..]),
            None,
        ));
        if let Some(other) = &a.compare_tracer {
            variants.push((
                format!("{} record --mpi --overhead {pct}", other.display()),
                Some(&args[..]),
                Some(other.as_path()),
            ));
        }
    }
    let mut budget_notes: Vec<String> = Vec::new();
    let mut results: Vec<Vec<Sample>> = variants.iter().map(|_| Vec::new()).collect();
    let started = Instant::now();
    let load0 = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    for i in 0..a.runs {
        for (v, (name, extra, bin)) in variants.iter().enumerate() {
            if a.no_empty_probe && extra.is_some_and(|e| e.contains(&"--bench-empty-probe")) {
                continue;
            }
            let bin = bin.unwrap_or(tracer.as_path());
            let s = one(&exe, &size, extra.map(|e| (bin, e)), &dir)?;
            println!(
                "[{:>4.0} s] run {} {name}: benchmark {:.3} s, job {:.3} s{}",
                started.elapsed().as_secs_f64(),
                i + 1,
                s.bench_s,
                s.wall_s,
                s.exit_lag_s
                    .map(|l| format!(", recorder exit {l:.3} s after the job"))
                    .unwrap_or_default()
            );
            if extra.is_some_and(|e| e.contains(&"--overhead")) {
                budget_notes.push(format!(
                    "run {} {name}: benchmark {:.3} s; {}",
                    i + 1,
                    s.bench_s,
                    budget_note(&dir.join("run.capture"))?
                ));
            }
            results[v].push(s);
        }
    }
    let load1 = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let med = |v: &[Sample], f: &dyn Fn(&Sample) -> Option<f64>| {
        let x: Vec<f64> = v.iter().filter_map(f).collect();
        (!x.is_empty()).then(|| median(x))
    };
    let base_bench = med(&results[0], &|s| Some(s.bench_s)).unwrap_or(f64::NAN);
    let base_wall = med(&results[0], &|s| Some(s.wall_s)).unwrap_or(f64::NAN);
    println!(
        "\n{} {} on 2 pinned ranks, {} interleaved runs{}; load average before: {}after: {}",
        a.program,
        size_text,
        a.runs,
        if a.neighbour {
            ", beside stress-ng --cpu 2"
        } else {
            ""
        },
        load0,
        load1
    );
    println!(
        "| variant | benchmark (median) | ratio | per-run ratio (median, min-max) | fastest run | ratio of fastest | job wall | ratio | recorder exit after job (median, max) | recorder's own CPU (job's excluded) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    // The fastest run of each variant: what it costs when nothing else
    // got in the way (another job's load only ever adds time).
    let fastest = |r: &[Sample]| {
        r.iter()
            .map(|s| s.bench_s)
            .reduce(f64::min)
            .unwrap_or(f64::NAN)
    };
    let base_fastest = fastest(&results[0]);
    for ((name, _, _), r) in variants.iter().zip(&results) {
        if r.is_empty() {
            continue;
        }
        let b = med(r, &|s| Some(s.bench_s)).unwrap_or(f64::NAN);
        let w = med(r, &|s| Some(s.wall_s)).unwrap_or(f64::NAN);
        let fmt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3} s"));
        // Each run against the untraced run of its own repetition: drift
        // in the host's load between repetitions cancels.
        let per_run: Vec<f64> = r
            .iter()
            .zip(&results[0])
            .map(|(s, u)| s.bench_s / u.bench_s)
            .collect();
        let per_run_text = match (
            per_run.iter().copied().reduce(f64::min),
            per_run.iter().copied().reduce(f64::max),
        ) {
            (Some(lo), Some(hi)) => {
                format!("{:.3}x ({lo:.3}-{hi:.3})", median(per_run.clone()))
            }
            _ => "-".to_string(),
        };
        let f = fastest(r);
        println!(
            "| {name} | {b:.3} s | {:.3}x | {per_run_text} | {f:.3} s | {:.3}x | {w:.3} s | {:.3}x | {} | {} |",
            b / base_bench,
            f / base_fastest,
            w / base_wall,
            match (
                med(r, &|s| s.exit_lag_s),
                r.iter().filter_map(|s| s.exit_lag_s).reduce(f64::max),
            ) {
                (Some(m), Some(x)) => format!("{m:.3} s (max {x:.3} s)"),
                _ => "-".to_string(),
            },
            fmt(med(r, &|s| s.cpu_s)),
        );
    }
    if !budget_notes.is_empty() {
        println!("\nbudgeted runs (the estimate vs the benchmark's slowdown above):");
        for n in &budget_notes {
            println!("  {n}");
        }
    }
    Ok(())
}

/// What the budget of the capture at `path` decided: the probes, the
/// estimate, what it dropped (by first-instruction class) and the
/// measured cost.
fn budget_note(path: &Path) -> anyhow::Result<String> {
    let cap = analyzer::decode::Capture::open(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let Some(o) = cap.overhead else {
        return Ok(format!("{} probes, no overhead item", cap.probes.len()));
    };
    let classes = crate::bench::probe_classes(cap.probes.iter().map(|p| p.entry_class.name()));
    Ok(format!(
        "{} probes {classes:?}, estimated {:.1}% (probes {:.1}% of a core, traced CPU {:.1}%), dropped {} ({}), kept {:.1}%, measured {}; costs {}",
        cap.probes.len(),
        o.estimated_percent,
        o.probes_core_percent,
        o.traced_cpu_percent,
        o.dropped.len(),
        o.dropped
            .iter()
            .take(4)
            .map(|d| format!("{} {:.0}/s {:.1}%", d.symbol, d.calls_per_s, d.percent))
            .collect::<Vec<_>>()
            .join(", "),
        o.kept_percent,
        o.measured_percent
            .map_or("-".into(), |m| format!("{m:.1}%")),
        o.per_call_cost(),
    ))
}
