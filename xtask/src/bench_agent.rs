//! `cargo xtask bench-agent`: the agent's soak benchmark (issue 8).
//!
//! Starts `tracer agent` (the release build, as deployed) on a paced target
//! (`calls pace`, restarted every minute so process churn is exercised) with
//! small recorder limits, so files rotate and are removed many times; runs a
//! steady phase at 10 k events/s, a burst phase at 100 k events/s and a
//! short steady phase after it; and measures the agent from outside, from
//! `/proc/PID/{stat,status}` and the size of its directory, beside its own
//! `tracer ctl status`. Exits non-zero when a target is missed, so it can
//! gate: < 100 MB resident, < 5% of a core at 10 k events/s, disk never above
//! `max_disk`, no resident growth over the steady phase.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::Path,
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;
use serde::Serialize;
use serde_json::Value;

use crate::{build_c, build_tracer, is_root, root};

/// Version of the `--json` report.
const REPORT_VERSION: u32 = 1;

/// Recorder limits small enough that rotation and removal happen many times
/// in a few minutes.
const MAX_DISK: u64 = 64 << 20;

/// `cargo xtask bench-agent` options.
#[derive(Debug, Args)]
pub(crate) struct BenchAgentArgs {
    /// Minutes of the steady phase.
    #[arg(long, default_value_t = 5.0)]
    minutes: f64,
    /// Traced events per second in the steady phases (2 per call).
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Events per second in the burst phase.
    #[arg(long, default_value_t = 100_000)]
    burst_rate: u64,
    /// Minutes of the burst phase (6 at 100 k/s push an hour of 10 k/s
    /// through; 0: no burst).
    #[arg(long, default_value_t = 1.0)]
    burst_minutes: f64,
    /// Minutes of steady rate after the burst (does memory come back?).
    #[arg(long, default_value_t = 1.0)]
    after_minutes: f64,
    /// The target is restarted this often, seconds.
    #[arg(long, default_value_t = 60)]
    restart_s: u64,
    /// Seconds between rows of the table.
    #[arg(long, default_value_t = 10)]
    interval_s: u64,
    /// Target: the agent's resident memory stays below this, MB (10^6 bytes).
    #[arg(long, default_value_t = 100.0)]
    max_rss_mb: f64,
    /// Target: the agent's mean CPU in the steady phase, % of one core.
    #[arg(long, default_value_t = 5.0)]
    max_cpu_percent: f64,
    /// Target: resident growth from the first to the last third of the
    /// steady phase, MiB.
    #[arg(long, default_value_t = 8.0)]
    max_rss_growth_mib: f64,
    /// Also evaluate the recent past live (`[analysis]`, window 30 s every
    /// 10 s) with a model learned first from a traced run of the target.
    #[arg(long)]
    analysis: bool,
    /// Benchmark the debug build instead of the release build.
    #[arg(long)]
    debug: bool,
    /// Keep the temporary directory (config, agent log, capture files).
    #[arg(long)]
    keep: bool,
    /// Print the report as JSON (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Phase {
    Steady,
    Burst,
    After,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Steady => "steady",
            Phase::Burst => "burst",
            Phase::After => "after",
        }
    }
}

/// One row of the table: the agent over the last interval.
#[derive(Clone, Debug, Serialize)]
struct Row {
    /// Seconds since the workload started.
    t_s: f64,
    /// The phase at both ends of the interval; `None` when it changed.
    phase: Option<Phase>,
    /// Records the agent wrote per second (from `records_total`).
    events_per_s: f64,
    /// The agent's CPU from /proc/PID/stat, % of one core.
    cpu_percent: f64,
    /// The agent's own figure for its last second.
    self_cpu_percent: f64,
    /// VmRSS, bytes.
    rss_bytes: u64,
    /// VmHWM since the last row, bytes: the peak, which a live evaluation
    /// reaches for a fraction of a second between two samples.
    peak_rss_bytes: u64,
    /// Capture files on disk (the directory, measured here), bytes.
    disk_bytes: u64,
    /// The agent's `recorder.disk_bytes`.
    status_disk_bytes: u64,
    /// Files removed so far (size and age limits).
    removed_files: u64,
    /// Records lost so far (every cause).
    lost: u64,
    /// Records written so far.
    records_total: u64,
    /// Bytes of preambles kept.
    preamble_bytes: u64,
    /// Time of the last live evaluation, ms (with --analysis).
    analysis_ms: Option<f64>,
}

/// One run of the target.
#[derive(Clone, Debug, Serialize)]
struct TargetRun {
    phase: Phase,
    asked_calls_per_s: f64,
    achieved_calls_per_s: f64,
    seconds: f64,
}

#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    value: f64,
    limit: f64,
    unit: &'static str,
    ok: bool,
}

/// The `--json` report.
#[derive(Debug, Serialize)]
struct Report {
    version: u32,
    build: &'static str,
    rate: u64,
    burst_rate: u64,
    minutes: f64,
    burst_minutes: f64,
    after_minutes: f64,
    max_disk: u64,
    analysis: bool,
    rows: Vec<Row>,
    targets: Vec<TargetRun>,
    mean_cpu_steady: f64,
    mean_cpu_burst: f64,
    mean_events_steady: f64,
    mean_events_burst: f64,
    max_rss_bytes: u64,
    /// The highest per-row peak at the steady rate (steady and after).
    max_rss_steady_bytes: u64,
    rss_growth_steady_bytes: f64,
    max_disk_bytes_seen: u64,
    records_total: u64,
    hour_equivalent: f64,
    removed_for_size: u64,
    removed_for_age: u64,
    lost: u64,
    sessions: u64,
    shed_actions: u64,
    /// Live evaluations run and alerts raised (with --analysis).
    evaluations: u64,
    alerts: u64,
    checks: Vec<Check>,
}

pub(crate) fn bench_agent(args: &BenchAgentArgs) -> anyhow::Result<()> {
    if !is_root() {
        bail!("the agent loads eBPF programs: run as root");
    }
    if args.minutes <= 0.0 || args.rate < 2 || args.interval_s == 0 || args.restart_s == 0 {
        bail!("--minutes, --rate (>= 2), --interval-s and --restart-s must be positive");
    }
    let tracer = build_tracer(!args.debug)?;
    let calls = build_c(&root().join("tests/fixtures/calls.c"), "calls-pace")?;
    let dir = std::env::temp_dir().join(format!("eftrace-bench-agent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let config = dir.join("agent.toml");
    let socket = dir.join("agent.sock");
    let rings = dir.join("state/rings");
    let model = if args.analysis {
        Some(learn_model(&tracer, &calls, &dir)?)
    } else {
        None
    };
    std::fs::write(
        &config,
        agent_config(&dir, &socket, &calls, model.as_deref()),
    )
    .with_context(|| format!("writing {}", config.display()))?;
    let log = dir.join("agent.log");
    let mut agent = Agent::start(&tracer, &config, &log)?;
    let result = soak(args, &agent, &socket, &rings, &calls);
    agent.stop();
    if let Err(e) = &result {
        eprintln!("agent log ({}), last lines:", log.display());
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines[lines.len().saturating_sub(20)..] {
            eprintln!("  {l}");
        }
        eprintln!("bench-agent: {e:#}");
    }
    let report = result?;
    if args.keep {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    // With --json the text goes to stderr, so stdout is the report alone.
    if args.json {
        print_summary(&report, args, &mut std::io::stderr())?;
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report, args, &mut std::io::stdout())?;
    }
    let missed: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.name)
        .collect();
    if !missed.is_empty() {
        bail!("targets missed: {}", missed.join(", "));
    }
    Ok(())
}

/// Records a short run of the target and learns a model of it, for the
/// live evaluation.
fn learn_model(tracer: &Path, calls: &Path, dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let capture = dir.join("learn.capture");
    // The recorder refuses to replace an existing capture.
    let _ = std::fs::remove_file(&capture);
    let out = Command::new(tracer)
        .args([
            "record",
            "--sample-hz",
            "0",
            "-f",
            "leaf",
            "-f",
            "site_*",
            "-o",
        ])
        .arg(&capture)
        .arg("--")
        .arg(calls)
        .args(["pace", "5000", "3"])
        .output()
        .context("running tracer record")?;
    if !out.status.success() {
        bail!(
            "recording the run to learn from failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let analyzer = tracer.with_file_name("analyzer");
    let model = dir.join("model.json");
    let out = Command::new(&analyzer)
        .args(["model", "learn", "-o"])
        .arg(&model)
        .arg(&capture)
        .output()
        .with_context(|| format!("running {}", analyzer.display()))?;
    if !out.status.success() {
        bail!(
            "learning the model failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(model)
}

fn agent_config(dir: &Path, socket: &Path, calls: &Path, model: Option<&Path>) -> String {
    let analysis = model.map_or(String::new(), |m| {
        format!(
            r#"
# Snapshots are off so the disk figure is the flight recorder's alone.
[analysis]
model = "{}"
interval = "10s"
window = "30s"
snapshot_on_alert = false
"#,
            m.display()
        )
    });
    format!(
        r#"# written by cargo xtask bench-agent
version = 1

[agent]
state_dir = "{state}"
socket = "{socket}"

[[target]]
exe = "{calls}"

[trace]
functions = ["leaf", "site_*"]
syscalls = true
sample_hz = 0

[recorder]
max_disk = "{max_disk}"
# At 10 k events/s the age limit removes files, at 100 k/s the size limit.
max_age = "90s"
file_size = "4MiB"
file_age = "10s"

# Measure, do not shed: shedding would take leaf away and the rest of the
# run would trace nothing.
[budget]
max_events_per_second = 0
max_cpu_percent = 0
{analysis}"#,
        state = dir.join("state").display(),
        socket = socket.display(),
        calls = calls.display(),
        max_disk = MAX_DISK,
    )
}

/// The agent process; stopped with SIGTERM (its own pid only).
struct Agent {
    child: Child,
}

impl Agent {
    fn start(tracer: &Path, config: &Path, log: &Path) -> anyhow::Result<Self> {
        let log = std::fs::File::create(log).context("creating the agent log")?;
        let child = Command::new(tracer)
            .args(["agent", "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting tracer agent")?;
        Ok(Self { child })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `tracer ctl status --json`, spoken directly on the socket.
fn status(socket: &Path) -> anyhow::Result<Value> {
    let mut stream = UnixStream::connect(socket)
        .with_context(|| format!("connecting to {}", socket.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(b"{\"command\":\"status\"}\n")?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let response: Value = serde_json::from_str(&line).context("the agent's answer")?;
    if response["ok"] != Value::Bool(true) {
        bail!("status refused: {}", response["error"]);
    }
    Ok(response["result"].clone())
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// utime + stime of `pid`, clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("the agent (pid {pid}) is gone"))?;
    // The command name may hold spaces: count fields after its ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    Ok(f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0))
}

/// `field` (VmRSS, VmHWM) of `pid`'s status, bytes.
fn status_bytes(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("the agent (pid {pid}) is gone"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    status_bytes(pid, "VmRSS")
}

/// The peak resident size since the last call; resets the peak
/// (`/proc/PID/clear_refs` 5, Linux >= 4.0) so each row has its own.
fn take_peak_rss(pid: u32) -> anyhow::Result<u64> {
    let peak = status_bytes(pid, "VmHWM")?;
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .with_context(|| format!("resetting the peak RSS of pid {pid}"))?;
    Ok(peak)
}

/// Bytes of the capture files in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn clock_ticks_per_s() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The workload's state, shared with the sampler.
#[derive(Default)]
struct Workload {
    phase: Option<Phase>,
    runs: Vec<TargetRun>,
    error: Option<String>,
}

/// Runs the phases, restarting the target every `restart_s`.
fn run_workload(
    calls: &Path,
    phases: &[(Phase, u64, f64)],
    restart_s: u64,
    state: &Mutex<Workload>,
    done: &AtomicBool,
) {
    let set = |f: &mut dyn FnMut(&mut Workload)| {
        if let Ok(mut s) = state.lock() {
            f(&mut s);
        }
    };
    'phases: for &(phase, rate, minutes) in phases {
        set(&mut |s| s.phase = Some(phase));
        let end = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
        loop {
            let left = end.saturating_duration_since(Instant::now()).as_secs_f64();
            if left < 1.0 {
                break;
            }
            let secs = left.min(restart_s as f64);
            let calls_per_s = rate as f64 / 2.0;
            let out = Command::new(calls)
                .args(["pace", &calls_per_s.to_string(), &format!("{secs:.3}")])
                .output();
            let parsed = out
                .as_ref()
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| achieved(&String::from_utf8_lossy(&o.stdout)));
            match parsed {
                Some(achieved) => set(&mut |s| {
                    s.runs.push(TargetRun {
                        phase,
                        asked_calls_per_s: calls_per_s,
                        achieved_calls_per_s: achieved,
                        seconds: secs,
                    })
                }),
                None => {
                    let why = match &out {
                        Ok(o) => format!(
                            "{}: {}{}",
                            o.status,
                            String::from_utf8_lossy(&o.stdout),
                            String::from_utf8_lossy(&o.stderr)
                        ),
                        Err(e) => e.to_string(),
                    };
                    set(&mut |s| s.error = Some(format!("the target failed: {why}")));
                    break 'phases;
                }
            }
        }
    }
    done.store(true, Ordering::SeqCst);
}

/// The rate `calls pace` printed at its exit.
fn achieved(stdout: &str) -> Option<f64> {
    let line = stdout.lines().find(|l| l.starts_with("pace: "))?;
    let (_, rest) = line.split_once(" = ")?;
    rest.split_whitespace().next()?.parse().ok()
}

fn soak(
    args: &BenchAgentArgs,
    agent: &Agent,
    socket: &Path,
    rings: &Path,
    calls: &Path,
) -> anyhow::Result<Report> {
    let pid = agent.pid();
    // Wait for the session: the agent polls its targets every 2 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(s) = status(socket)
            && s["state"] == "recording"
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("the agent did not start recording within 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let phases: Vec<(Phase, u64, f64)> = [
        (Phase::Steady, args.rate, args.minutes),
        (Phase::Burst, args.burst_rate, args.burst_minutes),
        (Phase::After, args.rate, args.after_minutes),
    ]
    .into_iter()
    .filter(|p| p.2 > 0.0)
    .collect();
    let total_s: f64 = phases.iter().map(|p| p.2 * 60.0).sum();
    let out = |line: &str| {
        if args.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    out(&format!(
        "agent pid {pid} ({} build); workload {:.1} min: {}",
        if args.debug { "debug" } else { "release" },
        total_s / 60.0,
        phases
            .iter()
            .map(|(p, r, m)| format!("{} {r} ev/s for {m} min", p.name()))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out(&format!(
        "{:>6} {:<8} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8}",
        "t s",
        "phase",
        "events/s",
        "cpu %",
        "self %",
        "RSS MiB",
        "peak MiB",
        "disk MiB",
        "status",
        "removed",
        "lost",
        "eval ms"
    ));
    let tck = clock_ticks_per_s();
    let state = Arc::new(Mutex::new(Workload {
        phase: phases.first().map(|p| p.0),
        ..Workload::default()
    }));
    let done = Arc::new(AtomicBool::new(false));
    let worker = {
        let (state, done, calls) = (state.clone(), done.clone(), calls.to_path_buf());
        let restart = args.restart_s;
        std::thread::spawn(move || run_workload(&calls, &phases, restart, &state, &done))
    };
    let phase_now = || state.lock().ok().and_then(|s| s.phase);
    let start = Instant::now();
    let mut rows = Vec::new();
    let mut max_rss = 0u64;
    let mut max_disk = 0u64;
    let mut prev_at = Instant::now();
    let mut prev_ticks = cpu_ticks(pid)?;
    // The start-up peak (loading programs) is not the soak's.
    take_peak_rss(pid)?;
    let mut prev_records = u(&status(socket)?["records_total"]);
    let mut prev_phase = phase_now();
    let mut last = Value::Null;
    let mut finished = false;
    while !finished {
        // Disk and memory each second (their peaks), the row each interval.
        let row_due = prev_at + Duration::from_secs(args.interval_s);
        while Instant::now() < row_due {
            if done.load(Ordering::SeqCst) {
                finished = true;
                break;
            }
            std::thread::sleep(
                Duration::from_secs(1).min(row_due.saturating_duration_since(Instant::now())),
            );
            max_rss = max_rss.max(rss_bytes(pid)?);
            max_disk = max_disk.max(dir_bytes(rings));
        }
        if finished && prev_at.elapsed() < Duration::from_secs(1) {
            // The workload ended just after the last row: nothing to add.
            break;
        }
        let s = status(socket)?;
        let now = Instant::now();
        let ticks = cpu_ticks(pid)?;
        let rss = rss_bytes(pid)?;
        let peak = take_peak_rss(pid)?;
        let disk = dir_bytes(rings);
        max_rss = max_rss.max(rss).max(peak);
        max_disk = max_disk.max(disk);
        let dt = now.duration_since(prev_at).as_secs_f64().max(1e-3);
        let records = u(&s["records_total"]);
        let phase = phase_now();
        let row = Row {
            t_s: start.elapsed().as_secs_f64(),
            phase: if phase == prev_phase && !finished {
                phase
            } else {
                None
            },
            events_per_s: records.saturating_sub(prev_records) as f64 / dt,
            cpu_percent: ticks.saturating_sub(prev_ticks) as f64 / tck / dt * 100.0,
            self_cpu_percent: s["usage"]["cpu_percent"].as_f64().unwrap_or(0.0),
            rss_bytes: rss,
            peak_rss_bytes: peak,
            disk_bytes: disk,
            status_disk_bytes: u(&s["recorder"]["disk_bytes"]),
            removed_files: u(&s["recorder"]["removed_for_size"]["files"])
                + u(&s["recorder"]["removed_for_age"]["files"]),
            lost: s["losses"]
                .as_object()
                .map_or(0, |m| m.values().map(u).sum()),
            records_total: records,
            preamble_bytes: u(&s["preambles"]["bytes"]),
            analysis_ms: s["analysis"]["last_ms"].as_f64(),
        };
        out(&format!(
            "{:>6.0} {:<8} {:>9.0} {:>7.2} {:>8.2} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>7} {:>7} {:>8}",
            row.t_s,
            row.phase.map_or("(change)", Phase::name),
            row.events_per_s,
            row.cpu_percent,
            row.self_cpu_percent,
            mib(row.rss_bytes),
            mib(row.peak_rss_bytes),
            mib(row.disk_bytes),
            mib(row.status_disk_bytes),
            row.removed_files,
            row.lost,
            row.analysis_ms
                .map_or("-".to_string(), |ms| format!("{ms:.0}"))
        ));
        rows.push(row);
        prev_at = now;
        prev_ticks = ticks;
        prev_records = records;
        prev_phase = phase;
        last = s;
    }
    worker
        .join()
        .map_err(|_| anyhow::anyhow!("the workload thread panicked"))?;
    let workload = std::mem::take(&mut *state.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    if let Some(e) = workload.error {
        bail!(e);
    }
    Ok(summarize(
        args,
        rows,
        workload.runs,
        &last,
        max_rss,
        max_disk,
    ))
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (n, s) = v.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    if n == 0 { f64::NAN } else { s / n as f64 }
}

fn summarize(
    args: &BenchAgentArgs,
    rows: Vec<Row>,
    runs: Vec<TargetRun>,
    last: &Value,
    max_rss: u64,
    max_disk_seen: u64,
) -> Report {
    let of = |p: Phase| rows.iter().filter(move |r| r.phase == Some(p));
    let steady: Vec<&Row> = of(Phase::Steady).collect();
    let third = steady.len() / 3;
    let growth = if third > 0 {
        mean(
            steady[steady.len() - third..]
                .iter()
                .map(|r| r.rss_bytes as f64),
        ) - mean(steady[..third].iter().map(|r| r.rss_bytes as f64))
    } else {
        f64::NAN
    };
    let mean_cpu_steady = mean(of(Phase::Steady).map(|r| r.cpu_percent));
    let records_total = u(&last["records_total"]);
    let removed = |k: &str| u(&last["recorder"][k]["files"]);
    let achieved_steady = mean(
        runs.iter()
            .filter(|r| r.phase != Phase::Burst)
            .map(|r| r.achieved_calls_per_s / r.asked_calls_per_s),
    );
    let checks = vec![
        Check {
            name: "max RSS",
            value: max_rss as f64 / 1e6,
            limit: args.max_rss_mb,
            unit: "MB",
            ok: (max_rss as f64 / 1e6) < args.max_rss_mb,
        },
        Check {
            name: "mean CPU at the steady rate",
            value: mean_cpu_steady,
            limit: args.max_cpu_percent,
            unit: "% of a core",
            ok: mean_cpu_steady < args.max_cpu_percent,
        },
        Check {
            name: "RSS growth over the steady phase",
            value: growth / (1u64 << 20) as f64,
            limit: args.max_rss_growth_mib,
            unit: "MiB",
            ok: growth / ((1u64 << 20) as f64) < args.max_rss_growth_mib,
        },
        Check {
            name: "disk within max_disk",
            value: mib(max_disk_seen),
            limit: mib(MAX_DISK),
            unit: "MiB",
            ok: max_disk_seen <= MAX_DISK,
        },
        // Without it the CPU figure is not one at the asked rate.
        Check {
            name: "target held the steady rate",
            value: achieved_steady * 100.0,
            limit: 95.0,
            unit: "% of asked (at least)",
            ok: achieved_steady >= 0.95,
        },
    ];
    Report {
        version: REPORT_VERSION,
        build: if args.debug { "debug" } else { "release" },
        rate: args.rate,
        burst_rate: args.burst_rate,
        minutes: args.minutes,
        burst_minutes: args.burst_minutes,
        after_minutes: args.after_minutes,
        max_disk: MAX_DISK,
        analysis: args.analysis,
        mean_cpu_steady,
        mean_cpu_burst: mean(of(Phase::Burst).map(|r| r.cpu_percent)),
        mean_events_steady: mean(of(Phase::Steady).map(|r| r.events_per_s)),
        mean_events_burst: mean(of(Phase::Burst).map(|r| r.events_per_s)),
        max_rss_bytes: max_rss,
        max_rss_steady_bytes: rows
            .iter()
            .filter(|r| matches!(r.phase, Some(Phase::Steady | Phase::After)))
            .map(|r| r.peak_rss_bytes)
            .max()
            .unwrap_or(0),
        rss_growth_steady_bytes: growth,
        max_disk_bytes_seen: max_disk_seen,
        records_total,
        hour_equivalent: records_total as f64 / (args.rate as f64 * 3600.0),
        removed_for_size: removed("removed_for_size"),
        removed_for_age: removed("removed_for_age"),
        lost: rows.last().map_or(0, |r| r.lost),
        sessions: u(&last["sessions"]),
        shed_actions: last["shed"]["actions"]
            .as_array()
            .map_or(0, |a| a.len() as u64),
        evaluations: u(&last["analysis"]["evaluations"]),
        alerts: u(&last["alerts"]),
        rows,
        targets: runs,
        checks,
    }
}

fn print_summary(
    r: &Report,
    args: &BenchAgentArgs,
    w: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let runs = |p: Phase| {
        let v: Vec<&TargetRun> = r.targets.iter().filter(|t| t.phase == p).collect();
        let min = v
            .iter()
            .map(|t| t.achieved_calls_per_s * 2.0)
            .fold(f64::INFINITY, f64::min);
        (
            v.len(),
            mean(v.iter().map(|t| t.achieved_calls_per_s * 2.0)),
            min,
        )
    };
    writeln!(w, "\n== summary ({} build of the tracer)", r.build)?;
    for p in [Phase::Steady, Phase::Burst, Phase::After] {
        let (n, m, min) = runs(p);
        if n > 0 {
            writeln!(
                w,
                "  {:<7} target runs: {n}, traced calls x2: mean {m:.0} ev/s, lowest run {min:.0} ev/s",
                p.name()
            )?;
        }
    }
    writeln!(
        w,
        "  agent at {} ev/s: mean CPU {:.2}% of a core ({:.0} records/s written)",
        args.rate, r.mean_cpu_steady, r.mean_events_steady
    )?;
    writeln!(
        w,
        "  agent at {} ev/s: mean CPU {:.2}% of a core ({:.0} records/s written)",
        args.burst_rate, r.mean_cpu_burst, r.mean_events_burst
    )?;
    writeln!(
        w,
        "  max RSS {:.1} MiB ({:.1} MiB at the steady rate); growth over the steady phase (last third - first third) {:+.2} MiB",
        mib(r.max_rss_bytes),
        mib(r.max_rss_steady_bytes),
        r.rss_growth_steady_bytes / (1u64 << 20) as f64
    )?;
    writeln!(
        w,
        "  disk: at most {:.1} MiB of {:.0} MiB; files removed {} for size, {} for age",
        mib(r.max_disk_bytes_seen),
        mib(r.max_disk),
        r.removed_for_size,
        r.removed_for_age
    )?;
    writeln!(
        w,
        "  records {} ({:.2} h at {} ev/s), lost {}, sessions {}, shed steps {}",
        r.records_total, r.hour_equivalent, r.rate, r.lost, r.sessions, r.shed_actions
    )?;
    if r.analysis {
        writeln!(
            w,
            "  live analysis: {} evaluations, {} alerts",
            r.evaluations, r.alerts
        )?;
    }
    for c in &r.checks {
        writeln!(
            w,
            "  [{}] {}: {:.2} {} (limit {:.2})",
            if c.ok { "ok" } else { "MISSED" },
            c.name,
            c.value,
            c.unit,
            c.limit
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchAgentArgs,
    }

    fn args() -> BenchAgentArgs {
        Cli::parse_from(["bench-agent"]).args
    }

    fn row(phase: Option<Phase>, cpu: f64, rss_mib: u64) -> Row {
        Row {
            t_s: 0.0,
            phase,
            events_per_s: 10_000.0,
            cpu_percent: cpu,
            self_cpu_percent: 0.0,
            rss_bytes: rss_mib << 20,
            peak_rss_bytes: rss_mib << 20,
            disk_bytes: 0,
            status_disk_bytes: 0,
            removed_files: 0,
            lost: 0,
            records_total: 0,
            preamble_bytes: 0,
            analysis_ms: None,
        }
    }

    fn runs(ratio: f64) -> Vec<TargetRun> {
        vec![TargetRun {
            phase: Phase::Steady,
            asked_calls_per_s: 5000.0,
            achieved_calls_per_s: 5000.0 * ratio,
            seconds: 60.0,
        }]
    }

    fn failed(r: &Report) -> Vec<&str> {
        r.checks.iter().filter(|c| !c.ok).map(|c| c.name).collect()
    }

    #[test]
    fn the_rate_the_fixture_printed_is_read() {
        let out = "pace: 300000 calls in 60.002 s = 4999.8 calls/s (asked 5000.0) sum 42\n";
        assert_eq!(achieved(out), Some(4999.8));
        assert_eq!(achieved("unknown mode pace\n"), None);
    }

    #[test]
    fn a_quiet_agent_passes_and_phase_changes_are_left_out() {
        let mut rows: Vec<Row> = (0..6).map(|_| row(Some(Phase::Steady), 0.2, 30)).collect();
        // The interval that straddles the burst is neither phase's.
        rows.push(row(None, 50.0, 30));
        rows.push(row(Some(Phase::Burst), 1.0, 31));
        let r = summarize(&args(), rows, runs(1.0), &Value::Null, 31 << 20, 50 << 20);
        assert!(failed(&r).is_empty(), "{:?}", failed(&r));
        assert!((r.mean_cpu_steady - 0.2).abs() < 1e-9);
        assert!((r.mean_cpu_burst - 1.0).abs() < 1e-9);
    }

    #[test]
    fn each_missed_target_fails_its_check() {
        let steady = |cpu, rss: &[u64]| -> Vec<Row> {
            rss.iter()
                .map(|m| row(Some(Phase::Steady), cpu, *m))
                .collect()
        };
        let flat = [30, 30, 30, 30, 30, 30];
        let r = summarize(&args(), steady(6.0, &flat), runs(1.0), &Value::Null, 0, 0);
        assert_eq!(failed(&r), ["mean CPU at the steady rate"]);
        let r = summarize(
            &args(),
            steady(0.2, &flat),
            runs(1.0),
            &Value::Null,
            120 << 20,
            0,
        );
        assert_eq!(failed(&r), ["max RSS"]);
        let growing = [30, 30, 35, 40, 45, 50];
        let r = summarize(
            &args(),
            steady(0.2, &growing),
            runs(1.0),
            &Value::Null,
            0,
            0,
        );
        assert_eq!(failed(&r), ["RSS growth over the steady phase"]);
        let r = summarize(
            &args(),
            steady(0.2, &flat),
            runs(1.0),
            &Value::Null,
            0,
            MAX_DISK + 1,
        );
        assert_eq!(failed(&r), ["disk within max_disk"]);
        let r = summarize(&args(), steady(0.2, &flat), runs(0.8), &Value::Null, 0, 0);
        assert_eq!(failed(&r), ["target held the steady rate"]);
    }
}
