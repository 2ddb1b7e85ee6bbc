//! `cargo xtask gluster`: the GlusterFS experiments of issue 4 (peer
//! comparison, Kasick et al.) on a real 4-brick volume on this host.
//!
//! - `run`: one experiment (workload, optional fault on one server part-way),
//!   recorded into captures + `run.json`;
//! - `matrix`: every fault x workload x N runs (faulty server rotating) plus
//!   clean runs, then Table 1 of the paper (TP/FP per fault and metric):
//!   peer comparison trained on the clean runs of the same workload (each
//!   clean run judged by thresholds from the others);
//! - `bench`: cluster start/stop times, workload throughput untraced and
//!   traced (both recording modes), event rates, capture sizes;
//! - `signal`: per-server activity of run directories before and during the
//!   fault (what signal the analysis has to work with).

use std::{collections::BTreeMap, path::PathBuf, time::Instant};

use analyzer::peers::{Report, diagnose, train};
use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use tests::gluster::{
    Cluster, ClusterConfig, FaultKind, FaultParams, RecordConfig, RecordMode, RunConfig, RunInfo,
    Workload, load_run, peers_config, score_run, server_label, server_stats,
};

use crate::{bench::median, build_tracer, is_root, target_dir};

/// `cargo xtask gluster`.
#[derive(Debug, Args)]
pub(crate) struct GlusterArgs {
    #[command(subcommand)]
    command: GlusterCommand,
}

#[derive(Debug, Subcommand)]
enum GlusterCommand {
    /// One recorded experiment: start the cluster, record its bricks, run a
    /// workload, inject a fault into one server part-way, write captures and
    /// run.json into the output directory.
    ///
    /// Example:
    ///   cargo xtask gluster run --workload dd --fault packet-loss --server 2 \
    ///       --seconds 40 --fault-after 15 -o /tmp/run1
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
    /// Every fault x workload x --runs (the faulty server rotates), plus
    /// --runs clean runs per workload; then the TP/FP table.
    Matrix(MatrixArgs),
    /// Timings: cluster start/stop, throughput untraced vs traced, event
    /// rates and capture sizes.
    Bench(BenchArgs),
    /// Per-server activity of run directories, before and during the fault.
    Signal {
        /// Run directories (each with a run.json).
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// What to record and how strong the faults are (shared by run and matrix).
#[derive(Debug, Args, Clone)]
struct Common {
    /// Workload duration, seconds.
    #[arg(long, default_value_t = 40.0)]
    seconds: f64,
    /// Seconds into the workload when the fault is switched on (it stays on).
    #[arg(long, default_value_t = 15.0)]
    fault_after: f64,
    /// One tracer for all bricks (`single`) or one per brick (`per-server`).
    #[arg(long, default_value = "single")]
    record_mode: String,
    /// IP samples per second per CPU.
    #[arg(long, default_value_t = 99)]
    sample_hz: u32,
    /// Sample every process on the host (hogs show up by name).
    #[arg(long)]
    sample_all: bool,
    /// Function patterns to trace instead of the default set (repeatable).
    #[arg(short = 'f', long = "functions", value_name = "PATTERN")]
    functions: Vec<String>,
    /// packet-loss: drop probability.
    #[arg(long, default_value_t = FaultParams::default().loss)]
    loss: f64,
    /// disk-throttle: MiB/s the faulty server may read/write.
    #[arg(long, default_value_t = FaultParams::default().disk_bps >> 20)]
    disk_mibps: u64,
    /// disk-throttle: I/O operations/s the faulty server may issue each way
    /// (0: no limit).
    #[arg(long, default_value_t = FaultParams::default().disk_iops)]
    disk_iops: u64,
    /// network-hog: the faulty server's link rate (tc syntax).
    #[arg(long, default_value_t = FaultParams::default().link_rate)]
    link_rate: String,
    /// cpu-hog: CPUs shared by the faulty server and the hog.
    #[arg(long, default_value_t = FaultParams::default().cpu_share)]
    cpu_share: f64,
    /// Record with this tracer binary instead of building the release one.
    #[arg(long)]
    tracer: Option<PathBuf>,
}

impl Common {
    fn params(&self) -> FaultParams {
        FaultParams {
            loss: self.loss,
            disk_bps: self.disk_mibps << 20,
            disk_iops: self.disk_iops,
            link_rate: self.link_rate.clone(),
            cpu_share: self.cpu_share,
            ..FaultParams::default()
        }
    }

    fn record(&self) -> anyhow::Result<RecordConfig> {
        let tracer = match &self.tracer {
            Some(t) => t.clone(),
            None => build_tracer(true)?,
        };
        let mut r = RecordConfig::new(tracer);
        r.mode = self.record_mode.parse()?;
        r.sample_hz = self.sample_hz;
        r.sample_all = self.sample_all;
        if !self.functions.is_empty() {
            r.functions = self.functions.clone();
        }
        Ok(r)
    }
}

#[derive(Debug, Args)]
struct RunArgs {
    /// dd, postmark or fio.
    #[arg(long, default_value = "dd")]
    workload: String,
    /// none, disk-hog, disk-throttle, network-hog, packet-loss or cpu-hog.
    #[arg(long, default_value = "none")]
    fault: String,
    /// The faulty server, 1..4.
    #[arg(long, default_value_t = 1)]
    server: usize,
    /// Output directory (captures + run.json).
    #[arg(short, long)]
    output: PathBuf,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct MatrixArgs {
    /// Runs per fault and workload (and clean runs per workload).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Faults to include (default: all).
    #[arg(long = "fault", value_name = "FAULT")]
    faults: Vec<String>,
    /// Workloads to include (default: all).
    #[arg(long = "workload", value_name = "WORKLOAD")]
    workloads: Vec<String>,
    /// Output directory: one run directory per experiment + matrix.json.
    #[arg(short, long)]
    output: PathBuf,
    /// Only print the table for an existing matrix directory.
    #[arg(long)]
    table_only: bool,
    /// Peer comparison: WinSize, seconds (paper: 60 for runs of minutes).
    #[arg(long, default_value_t = 4.0)]
    window: f64,
    /// Peer comparison: WinShift, seconds (paper: 30).
    #[arg(long, default_value_t = 2.0)]
    shift: f64,
    /// Peer comparison: distance between feature vectors.
    #[arg(long, value_enum, default_value = "manhattan")]
    distance: analyzer::peers::Distance,
    /// Peer comparison: metrics (comma-separated; default: the analyzer's).
    #[arg(long, value_enum, value_delimiter = ',')]
    metrics: Vec<analyzer::peers::Metric>,
    /// Peer comparison: metrics compared in shares of each window's work
    /// (comma-separated; default: the analyzer's; `--normalize` alone:
    /// none; see `analyzer peers train --help`).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 0..)]
    normalize: Option<Vec<analyzer::peers::Metric>>,
    /// Peer comparison: the outlier rule's factor, 0 for off (default: the
    /// analyzer's; see `analyzer peers train --help`).
    #[arg(long, value_name = "F")]
    outlier: Option<f64>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Seconds per workload measurement.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Repetitions of each measurement (medians reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Output directory for the captures.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Record with this tracer binary instead of building the release one.
    #[arg(long)]
    tracer: Option<PathBuf>,
}

fn parse_fault(s: &str) -> anyhow::Result<Option<FaultKind>> {
    Ok(if s == "none" { None } else { Some(s.parse()?) })
}

pub(crate) fn run(args: GlusterArgs) -> anyhow::Result<()> {
    match args.command {
        GlusterCommand::Run(a) => run_one(a),
        GlusterCommand::Matrix(a) => matrix(a),
        GlusterCommand::Bench(a) => bench(a),
        GlusterCommand::Signal { dirs, json } => signal(&dirs, json),
    }
}

fn need_root() -> anyhow::Result<()> {
    if !is_root() {
        bail!(
            "the GlusterFS experiments create namespaces, loop devices and mounts and load eBPF programs: run as root (after `sudo scripts/setup`)"
        );
    }
    Ok(())
}

fn start_cluster() -> anyhow::Result<Cluster> {
    let c = Cluster::start(ClusterConfig::default()).context("starting the GlusterFS cluster")?;
    eprintln!(
        "gluster: cluster up in {:.1} s: {}",
        c.start_seconds,
        c.servers()
            .iter()
            .map(|s| format!(
                "{}=pid {} port {} {}",
                s.label, s.pid, s.port, s.loop_device
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(c)
}

fn describe(info: &RunInfo) -> String {
    let fault = match &info.fault {
        Some(f) => format!(
            "{} on {} for {:.1} s",
            f.kind,
            f.server,
            (f.off_unix_ns - f.on_unix_ns) as f64 / 1e9
        ),
        None => "no fault".into(),
    };
    let lost: u64 = info.tracers.iter().map(|t| t.lost).sum();
    let events: u64 = info.tracers.iter().flat_map(|t| t.events.values()).sum();
    let bytes: u64 = info.tracers.iter().map(|t| t.bytes).sum();
    format!(
        "{} {:.1} s, {:.1} MB/s, {}; {} events, {:.1} MB captured, {} lost",
        info.workload,
        info.result.seconds,
        info.result.mb_per_s(),
        fault,
        events,
        bytes as f64 / 1e6,
        lost
    )
}

fn run_one(a: RunArgs) -> anyhow::Result<()> {
    need_root()?;
    let workload: Workload = a.workload.parse()?;
    let fault = parse_fault(&a.fault)?;
    if a.server == 0 || a.server > tests::gluster::SERVERS {
        bail!("--server is 1..{}", tests::gluster::SERVERS);
    }
    let record = a.common.record()?;
    let cluster = start_cluster()?;
    let config = RunConfig {
        workload,
        seconds: a.common.seconds,
        fault: fault.map(|k| (k, a.server - 1)),
        fault_after: a.common.fault_after,
        params: a.common.params(),
        record: Some(record),
    };
    let info = tests::gluster::run(&cluster, &config, &a.output)
        .with_context(|| format!("running into {}", a.output.display()))?;
    let stop = cluster.stop().context("stopping the cluster")?;
    println!("{}", describe(&info));
    println!(
        "wrote {}/run.json (cluster stopped in {stop:.1} s)",
        a.output.display()
    );
    Ok(())
}

/// One experiment of the matrix, as listed in matrix.json.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct MatrixEntry {
    /// Run directory, relative to the matrix directory.
    dir: String,
    workload: Workload,
    fault: Option<FaultKind>,
    /// Label of the faulty server.
    server: Option<String>,
}

/// matrix.json.
#[derive(Debug, Serialize, Deserialize)]
struct MatrixIndex {
    version: u32,
    runs: Vec<MatrixEntry>,
}

fn matrix(a: MatrixArgs) -> anyhow::Result<()> {
    if !a.table_only {
        run_matrix(&a)?;
    }
    table(&a)
}

fn run_matrix(a: &MatrixArgs) -> anyhow::Result<()> {
    need_root()?;
    let faults: Vec<FaultKind> = if a.faults.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        a.faults
            .iter()
            .map(|f| f.parse())
            .collect::<Result<_, _>>()?
    };
    let workloads: Vec<Workload> = if a.workloads.is_empty() {
        Workload::ALL.to_vec()
    } else {
        a.workloads
            .iter()
            .map(|w| w.parse())
            .collect::<Result<_, _>>()?
    };
    let record = a.common.record()?;
    std::fs::create_dir_all(&a.output)?;
    let mut plan: Vec<(Workload, Option<FaultKind>, usize, String)> = Vec::new();
    let mut rotate = 0;
    for &w in &workloads {
        for r in 0..a.runs {
            plan.push((w, None, 0, format!("{w}/none/run{}", r + 1)));
        }
        for &f in &faults {
            for r in 0..a.runs {
                // A different faulty server each time.
                let server = rotate % tests::gluster::SERVERS;
                rotate += 1;
                plan.push((w, Some(f), server, format!("{w}/{f}/run{}", r + 1)));
            }
        }
    }
    eprintln!(
        "gluster: matrix of {} runs of {:.0} s into {}",
        plan.len(),
        a.common.seconds,
        a.output.display()
    );
    let started = Instant::now();
    // One cluster for the whole matrix: the bricks keep their pids, and each
    // workload starts from an empty directory.
    let cluster = start_cluster()?;
    let mut index = MatrixIndex {
        version: 1,
        runs: Vec::new(),
    };
    for (i, (w, f, server, dir)) in plan.iter().enumerate() {
        let config = RunConfig {
            workload: *w,
            seconds: a.common.seconds,
            fault: f.map(|k| (k, *server)),
            fault_after: a.common.fault_after,
            params: a.common.params(),
            record: Some(record.clone()),
        };
        let out = a.output.join(dir);
        let _ = std::fs::remove_dir_all(&out);
        let info =
            tests::gluster::run(&cluster, &config, &out).with_context(|| format!("run {dir}"))?;
        println!("[{}/{}] {dir}: {}", i + 1, plan.len(), describe(&info));
        index.runs.push(MatrixEntry {
            dir: dir.clone(),
            workload: *w,
            fault: *f,
            server: info.fault.as_ref().map(|f| f.server.clone()),
        });
        std::fs::write(
            a.output.join("matrix.json"),
            serde_json::to_string_pretty(&index)?,
        )?;
    }
    cluster.stop()?;
    eprintln!(
        "gluster: matrix done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One metric's verdict on one run: the servers it indicts (`combined` is
/// the verdict over all metrics).
#[derive(Debug)]
struct MetricVerdict {
    metric: String,
    indicted: Vec<String>,
}

/// Counts for one (fault, metric) cell of Table 1.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Cell {
    runs: u32,
    /// Runs where the faulty server was indicted.
    tp: u32,
    /// Runs where a non-faulty server was indicted.
    fp: u32,
}

/// Table 1 cells from verdicts: TP is the share of runs where the faulty
/// server is indicted, FP the share where some other server is.
fn tally(
    verdicts: &[(Option<FaultKind>, Option<String>, Vec<MetricVerdict>)],
) -> BTreeMap<(Option<FaultKind>, String), Cell> {
    let mut cells: BTreeMap<(Option<FaultKind>, String), Cell> = BTreeMap::new();
    for (fault, faulty, metrics) in verdicts {
        for m in metrics {
            let c = cells.entry((*fault, m.metric.clone())).or_default();
            c.runs += 1;
            if faulty.as_ref().is_some_and(|f| m.indicted.contains(f)) {
                c.tp += 1;
            }
            if m.indicted.iter().any(|s| Some(s) != faulty.as_ref()) {
                c.fp += 1;
            }
        }
    }
    cells
}

/// Per-metric and combined verdicts of `report`, servers named as in the
/// harness (`server1`..).
fn verdicts_of(report: &Report, info: &RunInfo) -> Vec<MetricVerdict> {
    let name = |v: &[String]| -> Vec<String> { v.iter().map(|l| server_label(info, l)).collect() };
    let mut out: Vec<MetricVerdict> = report
        .faulty_by_metric
        .iter()
        .map(|(m, v)| MetricVerdict {
            metric: m.name().to_string(),
            indicted: name(v),
        })
        .collect();
    out.push(MetricVerdict {
        metric: "combined".into(),
        indicted: name(&report.faulty),
    });
    out
}

fn table(a: &MatrixArgs) -> anyhow::Result<()> {
    let index_path = a.output.join("matrix.json");
    let index: MatrixIndex = serde_json::from_str(
        &std::fs::read_to_string(&index_path)
            .with_context(|| format!("reading {}", index_path.display()))?,
    )
    .with_context(|| format!("parsing {}", index_path.display()))?;
    let mut cfg = analyzer::peers::PeersConfig {
        distance: a.distance,
        ..peers_config(a.window, a.shift)
    };
    if !a.metrics.is_empty() {
        cfg.metrics = a.metrics.clone();
    }
    if let Some(n) = &a.normalize {
        cfg.normalize = n.clone();
    }
    if let Some(f) = a.outlier {
        cfg.outlier = (f != 0.0).then_some(f);
    }
    cfg.validate()?;
    // Score every run once; keep the scores, not the captures.
    let mut scored = Vec::new();
    for (i, run) in index.runs.iter().enumerate() {
        let dir = a.output.join(&run.dir);
        eprint!("\rgluster: scoring run {}/{}", i + 1, index.runs.len());
        let loaded = load_run(&dir).with_context(|| format!("reading {}", dir.display()))?;
        let min_windows = if run.fault.is_none() {
            2 * cfg.k - 1
        } else {
            1
        };
        let s = score_run(&loaded, &dir, &cfg, min_windows)?;
        scored.push((s, loaded.info));
    }
    eprintln!();
    let mut verdicts = Vec::new();
    let mut workloads: Vec<Workload> = Vec::new();
    for (i, run) in index.runs.iter().enumerate() {
        // Thresholds from the clean runs of the same workload, this one
        // left out: a clean run is never judged by thresholds it trained.
        let clean: Vec<_> = index
            .runs
            .iter()
            .enumerate()
            .filter(|(j, r)| *j != i && r.fault.is_none() && r.workload == run.workload)
            .map(|(j, _)| scored[j].0.clone())
            .collect();
        if clean.is_empty() {
            bail!(
                "{}: no other clean {} run to train on (use --runs 2 or more)",
                run.dir,
                run.workload
            );
        }
        let thresholds = train(&clean, &cfg)?;
        let (s, info) = &scored[i];
        let report = diagnose(s, &thresholds, cfg.k, 10);
        let v = verdicts_of(&report, info);
        let combined = v.last().map(|m| m.indicted.join(",")).unwrap_or_default();
        println!(
            "{:<28} faulty {:<8} indicted [{combined}]",
            run.dir,
            run.server.as_deref().unwrap_or("-")
        );
        verdicts.push((run.fault, run.server.clone(), v));
        workloads.push(run.workload);
    }
    println!(
        "\nwindows {} s every {} s, k = {} (of 2k-1), {:?} distance, outlier factor {}, thresholds per workload from the other clean runs",
        a.window,
        a.shift,
        cfg.k,
        cfg.distance,
        cfg.outlier.map_or("off".to_string(), |f| f.to_string())
    );
    print_table(&tally(&verdicts));
    // The combined verdict per workload: where the misses are.
    let mut names: Vec<Workload> = workloads.clone();
    names.dedup();
    let mut per_workload: BTreeMap<(Option<FaultKind>, String), Cell> = BTreeMap::new();
    for w in names {
        let mine: Vec<_> = verdicts
            .iter()
            .zip(&workloads)
            .filter(|(_, x)| **x == w)
            .map(|((f, s, v), _)| {
                let combined = v.iter().filter(|m| m.metric == "combined");
                let combined = combined
                    .map(|m| MetricVerdict {
                        metric: format!("combined {w}"),
                        indicted: m.indicted.clone(),
                    })
                    .collect();
                (*f, s.clone(), combined)
            })
            .collect();
        per_workload.extend(tally(&mine));
    }
    print_table(&per_workload);
    Ok(())
}

fn print_table(cells: &BTreeMap<(Option<FaultKind>, String), Cell>) {
    let metrics: Vec<String> = {
        let mut m: Vec<String> = cells.keys().map(|(_, m)| m.clone()).collect();
        m.sort();
        m.dedup();
        m
    };
    let faults: Vec<Option<FaultKind>> = {
        let mut f: Vec<_> = cells.keys().map(|(f, _)| *f).collect();
        f.dedup();
        f
    };
    print!("\n{:<16}", "fault");
    for m in &metrics {
        print!(" {:>16}", format!("{m} TP/FP %"));
    }
    println!();
    let pct = |n: u32, d: u32| 100.0 * f64::from(n) / f64::from(d.max(1));
    for f in faults {
        let name = f
            .map(|k| k.to_string())
            .unwrap_or_else(|| "none (control)".into());
        print!("{name:<16}");
        for m in &metrics {
            match cells.get(&(f, m.clone())) {
                Some(c) => print!(
                    " {:>16}",
                    format!("{:.1}/{:.1}", pct(c.tp, c.runs), pct(c.fp, c.runs))
                ),
                None => print!(" {:>16}", "-"),
            }
        }
        println!();
    }
}

fn signal(dirs: &[PathBuf], json: bool) -> anyhow::Result<()> {
    for dir in dirs {
        let run = load_run(dir).with_context(|| format!("reading {}", dir.display()))?;
        let stats = server_stats(&run);
        if json {
            println!(
                "{}",
                serde_json::json!({"run": dir, "fault": run.info.fault, "servers": stats})
            );
            continue;
        }
        println!("\n== {}: {}", dir.display(), describe(&run.info));
        println!(
            "{:<9} {:<6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>11}",
            "server",
            "phase",
            "calls/s",
            "resume_us",
            "submit_us",
            "rx MB/s",
            "tx MB/s",
            "smpl/s",
            "retx/s",
            "sysc/s"
        );
        for s in &stats {
            let mut phases = vec![("before", &s.before)];
            if let Some(d) = &s.during {
                phases.push(("fault", d));
            }
            for (name, p) in phases {
                let calls: f64 = p.calls.values().sum();
                let mean = |f: &str| p.mean_us.get(f).copied().unwrap_or(0.0);
                println!(
                    "{:<9} {:<6} {:>9.0} {:>9.1} {:>9.1} {:>9.2} {:>9.2} {:>8.1} {:>8.2} {:>11.0}",
                    format!("{}{}", s.server, if s.faulty { "*" } else { "" }),
                    name,
                    calls,
                    mean("call_resume"),
                    mean("rpcsvc_submit_generic"),
                    p.rx_bytes / 1e6,
                    p.tx_bytes / 1e6,
                    p.samples,
                    p.retransmits,
                    p.syscalls
                );
            }
        }
    }
    Ok(())
}

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    need_root()?;
    let tracer = match &a.tracer {
        Some(t) => t.clone(),
        None => build_tracer(true)?,
    };
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| target_dir().join("xtask/gluster-bench"));
    let _ = std::fs::remove_dir_all(&out);
    println!("== cluster start / stop (3 times)");
    for _ in 0..3 {
        let c = start_cluster()?;
        let start = c.start_seconds;
        let stop = c.stop()?;
        println!("  start {start:5.1} s   stop {stop:5.1} s");
    }
    let cluster = start_cluster()?;
    println!(
        "\n== throughput, {:.0} s per workload, median of {} (MB/s read+write through the mount)",
        a.seconds, a.repeat
    );
    println!(
        "{:<9} {:>9} {:>12} {:>12} {:>10} {:>10} {:>12} {:>12} {:>10} {:>10}",
        "workload",
        "untraced",
        "single",
        "per-server",
        "ovh single",
        "ovh per",
        "events/s 1",
        "events/s 4",
        "MB/s cap 1",
        "MB/s cap 4"
    );
    let mut rows = Vec::new();
    for w in Workload::ALL {
        // Modes interleaved within each repetition, so drift in the host's
        // load (other builds) hits them alike; medians reported.
        let mut mbps: [Vec<f64>; 3] = Default::default();
        let mut rates: [Vec<f64>; 2] = Default::default();
        let mut caps: [Vec<f64>; 2] = Default::default();
        let mut traced = Vec::new();
        for rep in 0..a.repeat.max(1) {
            let modes = [None, Some(RecordMode::Single), Some(RecordMode::PerServer)];
            for (m, mode) in modes.into_iter().enumerate() {
                let record = mode.map(|mode| {
                    let mut r = RecordConfig::new(tracer.clone());
                    r.mode = mode;
                    r
                });
                let name = match mode {
                    None => "untraced",
                    Some(RecordMode::Single) => "single",
                    Some(RecordMode::PerServer) => "per-server",
                };
                let dir = out.join(format!("{w}-{name}-{}", rep + 1));
                let info = tests::gluster::run(
                    &cluster,
                    &RunConfig {
                        workload: w,
                        seconds: a.seconds,
                        fault: None,
                        fault_after: 0.0,
                        params: FaultParams::default(),
                        record,
                    },
                    &dir,
                )?;
                mbps[m].push(info.result.mb_per_s());
                if m > 0 {
                    let secs = info.result.seconds.max(1e-9);
                    let events: u64 = info.tracers.iter().flat_map(|t| t.events.values()).sum();
                    let bytes: u64 = info.tracers.iter().map(|t| t.bytes).sum();
                    rates[m - 1].push(events as f64 / secs);
                    caps[m - 1].push(bytes as f64 / 1e6 / secs);
                    traced.push((dir, info));
                }
            }
        }
        let [base, single, per] = mbps.map(median);
        let [rate1, rate4] = rates.map(median);
        let [cap1, cap4] = caps.map(median);
        println!(
            "{:<9} {:>9.1} {:>12.1} {:>12.1} {:>9.1}% {:>9.1}% {:>12.0} {:>12.0} {:>10.2} {:>10.2}",
            w.to_string(),
            base,
            single,
            per,
            100.0 * (1.0 - single / base),
            100.0 * (1.0 - per / base),
            rate1,
            rate4,
            cap1,
            cap4
        );
        rows.push((w, traced));
    }
    println!("\n== calls per second per function (single tracer, all 4 servers, summed)");
    for (w, traced) in &rows {
        let run = load_run(&traced[0].0)?;
        let mut per_fn: BTreeMap<String, f64> = BTreeMap::new();
        for s in server_stats(&run) {
            for (f, r) in s.before.calls {
                *per_fn.entry(f).or_default() += r;
            }
        }
        let list: Vec<String> = per_fn.iter().map(|(f, r)| format!("{f} {r:.0}")).collect();
        println!("  {w}: {}", list.join(", "));
    }
    let lost: u64 = rows
        .iter()
        .flat_map(|(_, t)| t.iter())
        .flat_map(|(_, i)| i.tracers.iter())
        .map(|t| t.lost)
        .sum();
    println!("\nrecords lost in all traced runs: {lost}");
    let stop = cluster.stop()?;
    println!(
        "captures in {} (cluster stopped in {stop:.1} s)",
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests_table {
    use super::*;

    fn v(metric: &str, indicted: &[&str]) -> MetricVerdict {
        MetricVerdict {
            metric: metric.into(),
            indicted: indicted.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// TP counts runs indicting the faulty server, FP runs indicting another.
    #[test]
    fn tally_counts_true_and_false_positives() {
        let verdicts = vec![
            (
                Some(FaultKind::DiskHog),
                Some("server2".to_string()),
                vec![v("time", &["server2"]), v("count", &[])],
            ),
            (
                Some(FaultKind::DiskHog),
                Some("server3".to_string()),
                vec![v("time", &["server3", "server1"]), v("count", &["server1"])],
            ),
            (None, None, vec![v("time", &[]), v("count", &["server4"])]),
        ];
        let cells = tally(&verdicts);
        assert_eq!(
            cells[&(Some(FaultKind::DiskHog), "time".to_string())],
            Cell {
                runs: 2,
                tp: 2,
                fp: 1
            }
        );
        assert_eq!(
            cells[&(Some(FaultKind::DiskHog), "count".to_string())],
            Cell {
                runs: 2,
                tp: 0,
                fp: 1
            }
        );
        assert_eq!(
            cells[&(None, "count".to_string())],
            Cell {
                runs: 1,
                tp: 0,
                fp: 1
            }
        );
        assert_eq!(
            cells[&(None, "time".to_string())],
            Cell {
                runs: 1,
                tp: 0,
                fp: 0
            }
        );
    }
}
