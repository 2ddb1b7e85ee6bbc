//! `cargo xtask fs`: peer comparison (Kasick et al., issues 4 and 16) on real
//! distributed file systems, GlusterFS and MooseFS, four servers each, every
//! server in its own network namespace with its own disk.
//!
//! - `run`: one experiment (workload, optional fault on one server part-way),
//!   recorded into captures + `run.json`;
//! - `matrix`: every fault x workload x N runs (the faulty server rotating)
//!   plus clean runs, then the table: peer comparison trained on the clean
//!   runs of the same workload (each clean run judged by thresholds from the
//!   others); `--table-only` re-scores a recorded matrix;
//! - `bench`: cluster start/stop times, workload throughput untraced and
//!   traced, event rates, capture sizes;
//! - `signal`: per-server activity of run directories before and during the
//!   fault (what signal the analysis has to work with).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Instant,
};

use analyzer::peers::{Report, diagnose, train};
use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use tests::fs::{
    Cluster, ClusterConfig, FaultKind, FaultParams, LoadedRun, ProbeSet, RecordConfig, RecordMode,
    RunConfig, RunInfo, SERVERS, System, Workload, load_run, peers_config, score_run, server_label,
    server_stats,
};

use crate::{bench::median, build_tracer, is_root, target_dir};

/// `cargo xtask fs`.
#[derive(Debug, Args)]
pub(crate) struct FsArgs {
    #[command(subcommand)]
    command: FsCommand,
}

// Parsed once per invocation: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum FsCommand {
    /// One recorded experiment: start the cluster, record its servers, run
    /// a workload, inject a fault into one server part-way, write captures
    /// and run.json into the output directory.
    ///
    /// Example:
    ///   cargo xtask fs run --fs moosefs --workload dd --fault packet-loss \
    ///       --server 2 --seconds 30 --fault-after 10 -o /tmp/run1
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
    /// Every fault x workload x --runs (the faulty server rotates), plus
    /// --clean clean runs per workload; then the TP table.
    ///
    /// Example (both systems, no function probes, then re-scored):
    ///   cargo xtask fs matrix --fs glusterfs --probes none -o /var/tmp/fsm-g
    ///   cargo xtask fs matrix --fs moosefs --probes none -o /var/tmp/fsm-m
    ///   ./target/release/xtask fs matrix --table-only -o /var/tmp/fsm-g
    #[command(verbatim_doc_comment)]
    Matrix(MatrixArgs),
    /// Timings: cluster start/stop, throughput untraced vs traced, event
    /// rates and capture sizes.
    Bench(BenchArgs),
    /// Remove what an interrupted run left (daemons, mounts, loop devices,
    /// namespaces); every other subcommand does this before it starts.
    Clean,
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

/// The cluster (shared by run, matrix and bench).
#[derive(Debug, Args, Clone)]
struct ClusterArgs {
    /// The file system: glusterfs or moosefs.
    #[arg(long = "fs", default_value = "glusterfs")]
    system: String,
    /// Each server's link rate, both ways (tc syntax; "" for none).
    #[arg(long, default_value = "500mbit")]
    link_rate: String,
    /// Each server's disk bandwidth, MiB/s each way.
    #[arg(long, default_value_t = 48)]
    disk_mibps: u64,
}

impl ClusterArgs {
    fn config(&self) -> anyhow::Result<ClusterConfig> {
        let mut c = ClusterConfig::new(self.system.parse()?);
        c.link_rate = self.link_rate.clone();
        c.disk_mibps = self.disk_mibps;
        Ok(c)
    }
}

/// What to record and how strong the faults are (shared by run and matrix).
#[derive(Debug, Args, Clone)]
struct Common {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Workload duration, seconds.
    #[arg(long, default_value_t = 30.0)]
    seconds: f64,
    /// Seconds into the workload when the fault is switched on (it stays on).
    #[arg(long, default_value_t = 10.0)]
    fault_after: f64,
    /// Function probes: none, generic (the C library's file-system calls)
    /// or daemon (GlusterFS's own functions).
    #[arg(long, default_value = "generic")]
    probes: String,
    /// Function patterns to trace instead of --probes (repeatable).
    #[arg(short = 'f', long = "functions", value_name = "PATTERN")]
    functions: Vec<String>,
    /// One tracer per server (`per-server`) or one for all (`single`).
    #[arg(long, default_value = "per-server")]
    record_mode: String,
    /// IP samples per second per CPU.
    #[arg(long, default_value_t = 99)]
    sample_hz: u32,
    /// Sample every process on the host (hogs show up by name).
    #[arg(long)]
    sample_all: bool,
    /// packet-loss: drop probability.
    #[arg(long, default_value_t = FaultParams::default().loss)]
    loss: f64,
    /// disk-throttle: MiB/s the faulty server may read/write.
    #[arg(long, default_value_t = FaultParams::default().disk_bps >> 20)]
    disk_mibps_fault: u64,
    /// disk-throttle: I/O operations/s the faulty server may issue each way
    /// (0: no limit; default: 20 on GlusterFS, 60 on MooseFS, where 20
    /// stalled every write).
    #[arg(long)]
    disk_iops: Option<u64>,
    /// cpu-hog: CPUs shared by the faulty server and the hog.
    #[arg(long, default_value_t = FaultParams::default().cpu_share)]
    cpu_share: f64,
    /// cpu-cap: the server's quota as a share of the CPU it used just before.
    #[arg(long, default_value_t = FaultParams::default().cpu_cap)]
    cpu_cap: f64,
    /// Record with this tracer binary instead of building the release one.
    #[arg(long)]
    tracer: Option<PathBuf>,
}

impl Common {
    fn system(&self) -> anyhow::Result<System> {
        Ok(self.cluster.system.parse()?)
    }

    fn params(&self) -> anyhow::Result<FaultParams> {
        let defaults = FaultParams::for_system(self.system()?);
        Ok(FaultParams {
            loss: self.loss,
            disk_bps: self.disk_mibps_fault << 20,
            disk_iops: self.disk_iops.unwrap_or(defaults.disk_iops),
            cpu_share: self.cpu_share,
            cpu_cap: self.cpu_cap,
            ..defaults
        })
    }

    fn record(&self) -> anyhow::Result<RecordConfig> {
        let tracer = match &self.tracer {
            Some(t) => t.clone(),
            None => build_tracer(true)?,
        };
        let probes: ProbeSet = self.probes.parse()?;
        let mut r = RecordConfig::new(tracer, self.system()?, probes)?;
        r.mode = self.record_mode.parse()?;
        r.sample_hz = self.sample_hz;
        r.sample_all = self.sample_all;
        if !self.functions.is_empty() {
            r.functions = self.functions.clone();
            r.probes = "custom".into();
        }
        Ok(r)
    }
}

#[derive(Debug, Args)]
struct RunArgs {
    /// dd, postmark or fio.
    #[arg(long, default_value = "dd")]
    workload: String,
    /// none, disk-hog, disk-throttle, network-hog, packet-loss, cpu-hog or
    /// cpu-cap.
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

/// How a recorded matrix is scored (stored nowhere: `--table-only` may
/// re-score with other settings).
#[derive(Debug, Args, Clone)]
struct ScoreArgs {
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
    /// Peer comparison: the persistence rule's share, 0 for off (default:
    /// the analyzer's; see `analyzer peers train --help`).
    #[arg(long, value_name = "SHARE")]
    persistence: Option<f64>,
    /// Peer comparison: the load-shift rule, true or false (default: the
    /// analyzer's; see `analyzer peers train --help`).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    load_shift: Option<bool>,
    /// Peer comparison: the small-sample margin's reference count of
    /// training runs, 0 for off (default: the analyzer's; see `analyzer
    /// peers train --help`).
    #[arg(long, value_name = "N")]
    reference_runs: Option<usize>,
    /// Train on every set of this many of the other clean runs of the
    /// workload, each set one judgement of the run (what the CI test does
    /// with 2 or 3 clean runs); default: all of the other clean runs at once.
    #[arg(long, value_name = "N")]
    train_runs: Option<usize>,
    /// Peer comparison: the peer pool, true or false (default: the
    /// analyzer's; see `analyzer peers train --help`).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pool: Option<bool>,
    /// Threshold calibration (see `analyzer peers train --help`); several,
    /// comma-separated, print one summary line each (default: the
    /// analyzer's).
    #[arg(long, value_name = "RULE", value_delimiter = ',')]
    calibration: Vec<analyzer::peers::Calibration>,
    /// Also write the table as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write every run's scores (per metric, window and server) and
    /// the thresholds it was judged by as JSON lines to this file, for
    /// studying calibrations.
    #[arg(long, value_name = "FILE")]
    scores: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct MatrixArgs {
    /// Runs per fault and workload (4: each fault on each server once).
    #[arg(long, default_value_t = 4)]
    runs: usize,
    /// Clean runs per workload (default: --runs).
    #[arg(long)]
    clean: Option<usize>,
    /// Faults to include (default: all); with --table-only, the runs to
    /// judge (clean runs always).
    #[arg(long = "fault", value_name = "FAULT")]
    faults: Vec<String>,
    /// Workloads to include (default: dd and postmark, the large-streaming
    /// and the small-file workload); with --table-only, the runs to judge.
    #[arg(long = "workload", value_name = "WORKLOAD")]
    workloads: Vec<String>,
    /// Output directory: one run directory per experiment + matrix.json.
    #[arg(short, long)]
    output: PathBuf,
    /// Only print the table for an existing matrix directory.
    #[arg(long)]
    table_only: bool,
    /// Keep the runs already recorded in the output directory (a matrix
    /// that stopped part-way goes on where it stopped).
    #[arg(long)]
    resume: bool,
    #[command(flatten)]
    score: ScoreArgs,
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
    #[command(flatten)]
    cluster: ClusterArgs,
}

fn parse_fault(s: &str) -> anyhow::Result<Option<FaultKind>> {
    Ok(if s == "none" { None } else { Some(s.parse()?) })
}

pub(crate) fn run(args: FsArgs) -> anyhow::Result<()> {
    match args.command {
        FsCommand::Run(a) => run_one(a),
        FsCommand::Matrix(a) => matrix(a),
        FsCommand::Bench(a) => bench(a),
        FsCommand::Signal { dirs, json } => signal(&dirs, json),
        FsCommand::Clean => {
            need_root()?;
            let workdir = ClusterConfig::new(System::Glusterfs).workdir;
            tests::fs::clean(&workdir)?;
            eprintln!("fs: removed what was left under {}", workdir.display());
            Ok(())
        }
    }
}

fn need_root() -> anyhow::Result<()> {
    if !is_root() {
        bail!(
            "the file-system experiments create namespaces, loop devices and mounts and load eBPF programs: run as root (after `sudo scripts/setup`)"
        );
    }
    Ok(())
}

fn start_cluster(config: ClusterConfig) -> anyhow::Result<Cluster> {
    let system = config.system;
    let c = Cluster::start(config).with_context(|| format!("starting the {system} cluster"))?;
    eprintln!(
        "fs: {system} cluster up in {:.1} s: {}",
        c.start_seconds,
        c.servers()
            .iter()
            .map(|s| format!(
                "{}=pid {} {}:{} {}",
                s.label, s.pid, s.addr, s.port, s.loop_device
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(c)
}

fn describe(info: &RunInfo) -> String {
    let fault = match &info.fault {
        Some(f) => format!(
            "{} on {} for {:.1} s{}",
            f.kind,
            f.server,
            (f.off_unix_ns - f.on_unix_ns) as f64 / 1e9,
            if f.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", f.detail)
            }
        ),
        None => "no fault".into(),
    };
    let lost: u64 = info.tracers.iter().map(|t| t.lost).sum();
    let events: u64 = info.tracers.iter().flat_map(|t| t.events.values()).sum();
    let bytes: u64 = info.tracers.iter().map(|t| t.bytes).sum();
    let quiet = match info.quiet {
        Some(q) if !q.quiet => format!("; links still busy after {:.0} s", q.waited_s),
        Some(q) if q.waited_s >= 2.5 => format!("; waited {:.0} s for quiet links", q.waited_s),
        _ => String::new(),
    };
    format!(
        "{} {} {:.1} s, {:.1} MB/s, {}; {} events, {:.1} MB captured, {} lost; load {:.1}{quiet}",
        info.system,
        info.workload,
        info.result.seconds,
        info.result.mb_per_s(),
        fault,
        events,
        bytes as f64 / 1e6,
        lost,
        info.load_average
    )
}

fn run_one(a: RunArgs) -> anyhow::Result<()> {
    need_root()?;
    let workload: Workload = a.workload.parse()?;
    let fault = parse_fault(&a.fault)?;
    if a.server == 0 || a.server > SERVERS {
        bail!("--server is 1..{SERVERS}");
    }
    let record = a.common.record()?;
    let cluster = start_cluster(a.common.cluster.config()?)?;
    let config = RunConfig {
        workload,
        seconds: a.common.seconds,
        fault: fault.map(|k| (k, a.server - 1)),
        fault_after: a.common.fault_after,
        params: a.common.params()?,
        record: Some(record),
    };
    let info = tests::fs::run(&cluster, &config, &a.output)
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
    /// Why the run failed (a workload the harness had to kill, a fault that
    /// could not be set up): it has no verdict, and the table lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed: Option<String>,
}

/// matrix.json.
#[derive(Debug, Serialize, Deserialize)]
struct MatrixIndex {
    version: u32,
    system: System,
    probes: String,
    runs: Vec<MatrixEntry>,
}

fn matrix(a: MatrixArgs) -> anyhow::Result<()> {
    if !a.table_only {
        run_matrix(&a)?;
    }
    // With --table-only, --workload and --fault pick the runs to judge.
    let (workloads, faults) = if a.table_only {
        (
            a.workloads
                .iter()
                .map(|w| w.parse())
                .collect::<Result<Vec<Workload>, _>>()?,
            a.faults
                .iter()
                .map(|f| f.parse())
                .collect::<Result<Vec<FaultKind>, _>>()?,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    table(&a.output, &a.score, &workloads, &faults)
}

fn run_matrix(a: &MatrixArgs) -> anyhow::Result<()> {
    need_root()?;
    let system = a.common.system()?;
    let faults: Vec<FaultKind> = if a.faults.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        a.faults
            .iter()
            .map(|f| f.parse())
            .collect::<Result<_, _>>()?
    };
    let workloads: Vec<Workload> = if a.workloads.is_empty() {
        vec![Workload::Dd, Workload::Postmark]
    } else {
        a.workloads
            .iter()
            .map(|w| w.parse())
            .collect::<Result<_, _>>()?
    };
    let record = a.common.record()?;
    std::fs::create_dir_all(&a.output)?;
    let index_path = a.output.join("matrix.json");
    let mut index = MatrixIndex {
        version: 2,
        system,
        probes: record.probes.clone(),
        runs: Vec::new(),
    };
    if a.resume && index_path.exists() {
        let old: MatrixIndex = serde_json::from_str(&std::fs::read_to_string(&index_path)?)
            .with_context(|| format!("parsing {}", index_path.display()))?;
        if old.system != system || old.probes != index.probes {
            bail!(
                "{} holds a {} matrix with probes {}: not resumable as {system} with {}",
                a.output.display(),
                old.system,
                old.probes,
                index.probes
            );
        }
        // Failed runs are tried again.
        index.runs = old
            .runs
            .into_iter()
            .filter(|r| r.failed.is_none())
            .collect();
    }
    let clean = a.clean.unwrap_or(a.runs);
    let mut plan: Vec<(Workload, Option<FaultKind>, usize, String)> = Vec::new();
    let mut rotate = 0;
    for &w in &workloads {
        for r in 0..clean {
            plan.push((w, None, 0, format!("{w}/none/run{}", r + 1)));
        }
        for &f in &faults {
            for r in 0..a.runs {
                // A different faulty server each time.
                let server = rotate % SERVERS;
                rotate += 1;
                plan.push((w, Some(f), server, format!("{w}/{f}/run{}", r + 1)));
            }
        }
    }
    plan.retain(|(_, _, _, dir)| !index.runs.iter().any(|r| r.dir == *dir));
    eprintln!(
        "fs: {system} matrix of {} runs of {:.0} s (probes {}) into {}",
        plan.len(),
        a.common.seconds,
        index.probes,
        a.output.display()
    );
    let started = Instant::now();
    // One cluster for the whole matrix: the servers keep their pids, and each
    // workload starts from an empty directory.
    let mut cluster = start_cluster(a.common.cluster.config()?)?;
    let mut failed = 0;
    for (i, (w, f, server, dir)) in plan.iter().enumerate() {
        let config = RunConfig {
            workload: *w,
            seconds: a.common.seconds,
            fault: f.map(|k| (k, *server)),
            fault_after: a.common.fault_after,
            params: a.common.params()?,
            record: Some(record.clone()),
        };
        let out = a.output.join(dir);
        let _ = std::fs::remove_dir_all(&out);
        // A run that fails (MooseFS under a 20 IOPS disk throttle stalled
        // a dd past the harness's bound, which killed it) is recorded as
        // failed, with why, and the matrix goes on; the one before this
        // ended the whole matrix.
        let entry = match tests::fs::run(&cluster, &config, &out) {
            Ok(info) => {
                println!("[{}/{}] {dir}: {}", i + 1, plan.len(), describe(&info));
                MatrixEntry {
                    dir: dir.clone(),
                    workload: *w,
                    fault: *f,
                    server: info.fault.as_ref().map(|f| f.server.clone()),
                    failed: None,
                }
            }
            Err(e) => {
                failed += 1;
                let label = match f {
                    Some(_) => Some(cluster.server(*server)?.label.clone()),
                    None => None,
                };
                let why = format!("{e:#}");
                println!("[{}/{}] {dir}: FAILED: {why}", i + 1, plan.len());
                // What stalled may still hold the cluster (a hung mount, a
                // chunk write waiting on the throttled server): the next
                // run starts on a fresh one.
                if let Err(e) = cluster.stop() {
                    eprintln!("fs: stopping the cluster after a failed run: {e:#}");
                }
                cluster = start_cluster(a.common.cluster.config()?)?;
                MatrixEntry {
                    dir: dir.clone(),
                    workload: *w,
                    fault: *f,
                    server: label,
                    failed: Some(why),
                }
            }
        };
        index.runs.push(entry);
        std::fs::write(&index_path, serde_json::to_string_pretty(&index)?)?;
    }
    cluster.stop()?;
    eprintln!(
        "fs: matrix done in {:.0} s ({failed} runs failed)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One metric's verdict on one run: the servers it indicts (`combined` is
/// the verdict over all metrics).
#[derive(Debug, Clone, Serialize)]
struct MetricVerdict {
    metric: String,
    indicted: Vec<String>,
}

/// Counts for one (fault, column) cell of the table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
struct Cell {
    runs: u32,
    /// Runs where the faulty server was indicted.
    tp: u32,
    /// Runs where a non-faulty server was indicted.
    wrong: u32,
}

/// Table cells from verdicts: TP counts the runs where the faulty server is
/// indicted, `wrong` those where some other server is.
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
                c.wrong += 1;
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

/// The table as JSON (`--json`).
#[derive(Debug, Serialize)]
struct TableJson {
    version: u32,
    system: System,
    probes: String,
    config: analyzer::peers::PeersConfig,
    runs: Vec<RunVerdict>,
    /// Runs that failed while recording (not scored).
    failed: Vec<MatrixEntry>,
    /// (fault, column) → cell; columns are metrics, `combined`, and
    /// `combined WORKLOAD`.
    cells: Vec<(Option<FaultKind>, String, Cell)>,
}

/// One run's verdict in the JSON table.
#[derive(Debug, Serialize)]
struct RunVerdict {
    dir: String,
    workload: Workload,
    fault: Option<FaultKind>,
    server: Option<String>,
    metrics: Vec<MetricVerdict>,
    /// The report's own verdict line.
    verdict: String,
    /// Servers named although their peers were themselves far beyond
    /// their trained thresholds (the report's "unlike the training runs as
    /// a whole" note), with the metrics that named them so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    beyond_training: Vec<String>,
    /// Training runs of this judgement that were unlike the other training
    /// runs as a whole, with the metrics.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    training_unlike: BTreeMap<String, BTreeMap<String, f64>>,
}

/// Every run of a matrix directory, scored once.
struct ScoredMatrix {
    /// The runs scored (failed runs left out).
    index: MatrixIndex,
    /// Runs that failed while recording: no captures to judge.
    failed: Vec<MatrixEntry>,
    cfg: analyzer::peers::PeersConfig,
    runs: Vec<(analyzer::peers::Scored, RunInfo)>,
}

fn score_matrix(
    dir: &Path,
    a: &ScoreArgs,
    workloads: &[Workload],
    faults: &[FaultKind],
) -> anyhow::Result<ScoredMatrix> {
    let index_path = dir.join("matrix.json");
    let mut index: MatrixIndex = serde_json::from_str(
        &std::fs::read_to_string(&index_path)
            .with_context(|| format!("reading {}", index_path.display()))?,
    )
    .with_context(|| format!("parsing {}", index_path.display()))?;
    // Clean runs always stay: they are the training data.
    index.runs.retain(|r| {
        (workloads.is_empty() || workloads.contains(&r.workload))
            && (faults.is_empty() || r.fault.is_none_or(|f| faults.contains(&f)))
    });
    let (failed, ok): (Vec<_>, Vec<_>) = index.runs.into_iter().partition(|r| r.failed.is_some());
    index.runs = ok;
    let mut runs = Vec::new();
    let mut cfg = None;
    for (i, run) in index.runs.iter().enumerate() {
        let run_dir = dir.join(&run.dir);
        eprint!("\rfs: scoring run {}/{}", i + 1, index.runs.len());
        let loaded =
            load_run(&run_dir).with_context(|| format!("reading {}", run_dir.display()))?;
        let c = match &cfg {
            Some(c) => c,
            None => cfg.insert(score_config(&loaded, a)?),
        };
        let min_windows = if run.fault.is_none() { 2 * c.k - 1 } else { 1 };
        let s = score_run(&loaded, &run_dir, c, min_windows)?;
        runs.push((s, loaded.info));
    }
    eprintln!();
    let Some(cfg) = cfg else {
        bail!("{} lists no runs", index_path.display());
    };
    Ok(ScoredMatrix {
        index,
        failed,
        cfg,
        runs,
    })
}

/// Every run judged by thresholds trained on the clean runs of its
/// workload, itself left out (a clean run is never judged by thresholds it
/// trained).
fn judge(
    m: &ScoredMatrix,
    cfg: &analyzer::peers::PeersConfig,
    train_runs: Option<usize>,
    mut scores: Option<&mut dyn std::io::Write>,
) -> anyhow::Result<Vec<RunVerdict>> {
    let mut out = Vec::new();
    for (i, run) in m.index.runs.iter().enumerate() {
        let others: Vec<usize> = m
            .index
            .runs
            .iter()
            .enumerate()
            .filter(|(j, r)| *j != i && r.fault.is_none() && r.workload == run.workload)
            .map(|(j, _)| j)
            .collect();
        if others.is_empty() {
            bail!(
                "{}: no other clean {} run to train on (use --clean 2 or more)",
                run.dir,
                run.workload
            );
        }
        let sets = match train_runs {
            Some(n) if n < others.len() => subsets(&others, n.max(1)),
            _ => vec![others],
        };
        for set in sets {
            let clean: Vec<_> = set.iter().map(|j| m.runs[*j].0.clone()).collect();
            let dir = if train_runs.is_some() {
                let names: Vec<String> = set
                    .iter()
                    .map(|j| {
                        m.index.runs[*j]
                            .dir
                            .rsplit('/')
                            .next()
                            .unwrap_or("")
                            .to_string()
                    })
                    .collect();
                format!("{} by {}", run.dir, names.join("+"))
            } else {
                run.dir.clone()
            };
            let thresholds = train(&clean, cfg)?;
            let (s, info) = &m.runs[i];
            let report = diagnose(s, &thresholds, cfg.k, 10);
            if let Some(w) = scores.as_deref_mut() {
                let metrics: BTreeMap<String, serde_json::Value> = s
                    .windowed
                    .metrics
                    .iter()
                    .enumerate()
                    .map(|(mi, mv)| {
                        let th: BTreeMap<String, f64> = thresholds
                            .metrics
                            .get(&mv.metric)
                            .map(|t| {
                                t.iter()
                                    .map(|(l, x)| (server_label(info, l), x.threshold))
                                    .collect()
                            })
                            .unwrap_or_default();
                        (
                            mv.metric.name().to_string(),
                            serde_json::json!({
                                "dimensions": mv.components.len(),
                                "thresholds": th,
                                "scores": s.scores[mi],
                            }),
                        )
                    })
                    .collect();
                let servers: Vec<String> = s
                    .servers
                    .iter()
                    .map(|x| server_label(info, &x.label))
                    .collect();
                writeln!(
                    w,
                    "{}",
                    serde_json::json!({
                        "dir": dir,
                        "workload": run.workload,
                        "fault": run.fault,
                        "server": run.server,
                        "servers": servers,
                        "fault_on_s": info.fault.as_ref().map(|f| (f.on_unix_ns as f64 - s.windowed.starts.first().copied().unwrap_or(0) as f64) / 1e9),
                        "starts_s": s.windowed.starts.iter().map(|t| (*t as f64 - s.windowed.starts[0] as f64) / 1e9).collect::<Vec<_>>(),
                        "metrics": metrics,
                    })
                )?;
            }
            let metrics = verdicts_of(&report, info);
            let verdict = metrics
                .last()
                .map(|v| v.indicted.join(","))
                .unwrap_or_default();
            let beyond_training = report
                .servers
                .iter()
                .filter(|v| v.faulty && !v.beyond_training.is_empty())
                .map(|v| {
                    let by: Vec<String> = v
                        .beyond_training
                        .iter()
                        .map(|(m, x)| format!("{} {x:.0}x", m.name()))
                        .collect();
                    format!("{} ({})", server_label(info, &v.server), by.join(", "))
                })
                .collect();
            let training_unlike = thresholds
                .runs
                .iter()
                .zip(&set)
                .filter(|(r, _)| !r.unlike_others.is_empty())
                .map(|(r, j)| {
                    let by = r
                        .unlike_others
                        .iter()
                        .map(|(m, x)| (m.name().to_string(), *x))
                        .collect();
                    (m.index.runs[*j].dir.clone(), by)
                })
                .collect();
            out.push(RunVerdict {
                dir,
                workload: run.workload,
                fault: run.fault,
                server: run.server.clone(),
                metrics,
                verdict,
                beyond_training,
                training_unlike,
            });
        }
    }
    Ok(out)
}

/// Every set of `n` of `items`, in order.
fn subsets(items: &[usize], n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    if items.len() < n {
        return Vec::new();
    }
    let mut out: Vec<Vec<usize>> = subsets(&items[1..], n - 1)
        .into_iter()
        .map(|mut rest| {
            rest.insert(0, items[0]);
            rest
        })
        .collect();
    out.extend(subsets(&items[1..], n));
    out
}

/// Cells of every metric, of `combined`, and of `combined WORKLOAD`.
fn cells_of(verdicts: &[RunVerdict]) -> BTreeMap<(Option<FaultKind>, String), Cell> {
    let all: Vec<_> = verdicts
        .iter()
        .map(|v| (v.fault, v.server.clone(), v.metrics.clone()))
        .collect();
    let mut cells = tally(&all);
    let per_workload: Vec<_> = verdicts
        .iter()
        .map(|v| {
            let combined = v
                .metrics
                .iter()
                .filter(|m| m.metric == "combined")
                .map(|m| MetricVerdict {
                    metric: format!("combined {}", v.workload),
                    indicted: m.indicted.clone(),
                })
                .collect();
            (v.fault, v.server.clone(), combined)
        })
        .collect();
    cells.extend(tally(&per_workload));
    cells
}

fn table(
    dir: &Path,
    a: &ScoreArgs,
    workloads: &[Workload],
    faults: &[FaultKind],
) -> anyhow::Result<()> {
    let m = score_matrix(dir, a, workloads, faults)?;
    let calibrations = if a.calibration.is_empty() {
        vec![m.cfg.calibration]
    } else {
        a.calibration.clone()
    };
    if calibrations.len() > 1 {
        // A sweep: one line per calibration.
        println!(
            "{} with probes {}, {} runs; per calibration: combined TP, wrong-server runs, clean runs indicting anyone, TP per fault",
            m.index.system,
            m.index.probes,
            m.index.runs.len()
        );
        for c in calibrations {
            let cfg = analyzer::peers::PeersConfig {
                calibration: c,
                ..m.cfg.clone()
            };
            cfg.validate()?;
            let cells = cells_of(&judge(&m, &cfg, a.train_runs, None)?);
            println!("{:<24} {}", c.to_string(), headline(&cells, &m.failed));
        }
        return Ok(());
    }
    let cfg = analyzer::peers::PeersConfig {
        calibration: calibrations[0],
        ..m.cfg.clone()
    };
    cfg.validate()?;
    let mut scores_file = match &a.scores {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("writing {}", p.display()))?,
        )),
        None => None,
    };
    let verdicts = judge(
        &m,
        &cfg,
        a.train_runs,
        scores_file.as_mut().map(|w| w as &mut dyn std::io::Write),
    )?;
    if let Some(mut w) = scores_file {
        std::io::Write::flush(&mut w)?;
    }
    for v in &verdicts {
        let beyond = if v.beyond_training.is_empty() {
            String::new()
        } else {
            format!("  peers beyond training: {}", v.beyond_training.join("; "))
        };
        println!(
            "{:<28} faulty {:<8} indicted [{}]{beyond}",
            v.dir,
            v.server.as_deref().unwrap_or("-"),
            v.verdict
        );
    }
    for f in &m.failed {
        println!(
            "{:<28} faulty {:<8} FAILED (not scored): {}",
            f.dir,
            f.server.as_deref().unwrap_or("-"),
            f.failed.as_deref().unwrap_or("")
        );
    }
    println!(
        "\n{} with probes {}: windows {} s every {} s, k = {} (of 2k-1), {:?} distance, outlier factor {}, persistence share {}, load-shift rule {}, peer pool {}, small-sample margin {}, thresholds {} per workload from {}",
        m.index.system,
        m.index.probes,
        a.window,
        a.shift,
        cfg.k,
        cfg.distance,
        cfg.outlier.map_or("off".to_string(), |f| f.to_string()),
        cfg.persistence.map_or("off".to_string(), |p| p.to_string()),
        if cfg.load_shift { "on" } else { "off" },
        if cfg.pool { "on" } else { "off" },
        cfg.reference_runs
            .map_or("off".to_string(), |r| format!("below {r} training runs")),
        cfg.calibration.describe(),
        a.train_runs
            .map_or("the other clean runs".to_string(), |n| format!(
                "every set of {n} other clean runs (one judgement each)"
            )),
    );
    let cells = cells_of(&verdicts);
    let (metrics, workloads): (BTreeMap<_, _>, BTreeMap<_, _>) = cells
        .clone()
        .into_iter()
        .partition(|((_, name), _)| !name.starts_with("combined "));
    print_table(&metrics);
    print_table(&workloads);
    print_impact(&m);
    println!("\n{}", headline(&cells, &m.failed));
    println!("{}", beyond_line(&verdicts));
    if let Some(path) = &a.json {
        let out = TableJson {
            version: 1,
            system: m.index.system,
            probes: m.index.probes.clone(),
            config: cfg.clone(),
            runs: verdicts,
            failed: m.failed.clone(),
            cells: cells.into_iter().map(|((f, m), c)| (f, m, c)).collect(),
        };
        std::fs::write(path, serde_json::to_string_pretty(&out)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The scoring configuration for runs recorded like `run`, with `a`'s
/// overrides.
fn score_config(run: &LoadedRun, a: &ScoreArgs) -> anyhow::Result<analyzer::peers::PeersConfig> {
    let mode = run.info.record_mode.unwrap_or(RecordMode::PerServer);
    let mut cfg = analyzer::peers::PeersConfig {
        distance: a.distance,
        ..peers_config(run.info.system, mode, a.window, a.shift)
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
    if let Some(p) = a.persistence {
        cfg.persistence = (p != 0.0).then_some(p);
    }
    if let Some(on) = a.load_shift {
        cfg.load_shift = on;
    }
    if let Some(r) = a.reference_runs {
        cfg.reference_runs = (r != 0).then_some(r);
    }
    if let Some(on) = a.pool {
        cfg.pool = on;
    }
    cfg.validate()?;
    Ok(cfg)
}

/// How often a server was named while its peers were far beyond training
/// (the report's note), among faulty and clean runs' judgements, and how
/// many of those named the faulty server.
fn beyond_line(verdicts: &[RunVerdict]) -> String {
    let noted: Vec<&RunVerdict> = verdicts
        .iter()
        .filter(|v| !v.beyond_training.is_empty())
        .collect();
    let faulty = noted.iter().filter(|v| v.fault.is_some()).count();
    let right = noted
        .iter()
        .filter(|v| {
            v.server.as_ref().is_some_and(|s| {
                v.beyond_training
                    .iter()
                    .any(|b| b.starts_with(&format!("{s} ")))
            })
        })
        .count();
    // Run → metric → the smallest and largest factor over the judgements.
    let mut unlike: BTreeMap<&str, BTreeMap<&str, (f64, f64)>> = BTreeMap::new();
    for v in verdicts {
        for (run, by) in &v.training_unlike {
            for (metric, x) in by {
                let e = unlike
                    .entry(run.as_str())
                    .or_default()
                    .entry(metric.as_str())
                    .or_insert((*x, *x));
                *e = (e.0.min(*x), e.1.max(*x));
            }
        }
    }
    let trained_on = verdicts
        .iter()
        .filter(|v| !v.training_unlike.is_empty())
        .count();
    let missed = verdicts
        .iter()
        .filter(|v| {
            !v.training_unlike.is_empty()
                && v.server.as_ref().is_some_and(|s| {
                    !v.metrics
                        .iter()
                        .any(|m| m.metric == "combined" && m.indicted.contains(s))
                })
        })
        .count();
    format!(
        "beyond-training note: {} of {} judgements ({faulty} of faulty runs, {right} of them on the faulty server; {} of clean runs)\n\
         training runs unlike the others as a whole: {}; in the training of {trained_on} judgements, {missed} of them faulty runs whose server went unnamed",
        noted.len(),
        verdicts.len(),
        noted.len() - faulty,
        if unlike.is_empty() {
            "none".to_string()
        } else {
            unlike
                .iter()
                .map(|(run, by)| {
                    let by: Vec<String> = by
                        .iter()
                        .map(|(m, (lo, hi))| format!("{m} {lo:.0}-{hi:.0}x"))
                        .collect();
                    format!("{run} ({})", by.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; ")
        }
    )
}

/// The headline figures: combined TP over the faulty runs, runs naming a
/// wrong server, clean runs indicting anyone, and every fault class's TP;
/// runs that failed while recording are counted apart (they have no
/// verdict, right or wrong).
fn headline(cells: &BTreeMap<(Option<FaultKind>, String), Cell>, failed: &[MatrixEntry]) -> String {
    let (mut runs, mut tp, mut wrong, mut clean, mut clean_wrong) = (0, 0, 0, 0, 0);
    let mut per_fault = Vec::new();
    for ((f, m), c) in cells {
        if m != "combined" {
            continue;
        }
        match f {
            Some(k) => {
                runs += c.runs;
                tp += c.tp;
                wrong += c.wrong;
                let lost = failed.iter().filter(|r| r.fault == Some(*k)).count();
                per_fault.push(if lost > 0 {
                    format!("{k} {}/{} (+{lost} failed)", c.tp, c.runs)
                } else {
                    format!("{k} {}/{}", c.tp, c.runs)
                });
            }
            None => {
                clean += c.runs;
                clean_wrong += c.wrong;
            }
        }
    }
    // A fault whose every run failed has no cell.
    for r in failed {
        if let Some(k) = r.fault
            && !cells.contains_key(&(Some(k), "combined".to_string()))
        {
            let name = format!("{k} 0/0 (+");
            if !per_fault.iter().any(|p| p.starts_with(&name)) {
                let lost = failed.iter().filter(|x| x.fault == Some(k)).count();
                per_fault.push(format!("{name}{lost} failed)"));
            }
        }
    }
    let failed_note = if failed.is_empty() {
        String::new()
    } else {
        format!("; {} runs failed while recording, not scored", failed.len())
    };
    format!(
        "TP {tp}/{runs} ({:.1}%), wrong {wrong}/{runs}, clean FP {clean_wrong}/{clean}; {}{failed_note}",
        100.0 * f64::from(tp) / f64::from(runs.max(1)),
        per_fault.join(", ")
    )
}

/// What each fault did to each workload: the median throughput of its runs
/// in percent of the clean runs' median (a fault that costs nothing is not
/// one a user would look for).
fn print_impact(m: &ScoredMatrix) {
    let mut by: BTreeMap<(Workload, Option<FaultKind>), Vec<f64>> = BTreeMap::new();
    for (entry, (_, info)) in m.index.runs.iter().zip(&m.runs) {
        by.entry((entry.workload, entry.fault))
            .or_default()
            .push(info.result.mb_per_s());
    }
    let workloads: Vec<Workload> = {
        let mut w: Vec<Workload> = by.keys().map(|(w, _)| *w).collect();
        w.dedup();
        w
    };
    print!("\n{:<16}", "throughput");
    for w in &workloads {
        print!(" {:>14}", format!("{w} % of clean"));
    }
    println!();
    let mut faults: Vec<Option<FaultKind>> = by.keys().map(|(_, f)| *f).collect();
    faults.sort();
    faults.dedup();
    for f in faults {
        let name = f.map_or("none (MB/s)".to_string(), |k| k.to_string());
        print!("{name:<16}");
        for w in &workloads {
            let clean = by.get(&(*w, None)).map(|v| median(v.clone()));
            match (by.get(&(*w, f)), clean) {
                (Some(v), Some(c)) if f.is_some() && c > 0.0 => {
                    print!(" {:>14.0}", 100.0 * median(v.clone()) / c)
                }
                (Some(v), _) if f.is_none() => print!(" {:>14.2}", median(v.clone())),
                _ => print!(" {:>14}", "-"),
            }
        }
        println!();
    }
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
    print!("\n{:<16}", "fault (runs)");
    for m in &metrics {
        print!(" {:>18}", format!("{m} TP/wrong"));
    }
    println!();
    for f in faults {
        let runs = metrics
            .iter()
            .filter_map(|m| cells.get(&(f, m.clone())))
            .map(|c| c.runs)
            .max()
            .unwrap_or(0);
        let name = f.map(|k| k.to_string()).unwrap_or_else(|| "none".into());
        print!("{:<16}", format!("{name} ({runs})"));
        for m in &metrics {
            match cells.get(&(f, m.clone())) {
                Some(c) => print!(" {:>18}", format!("{}/{}", c.tp, c.wrong)),
                None => print!(" {:>18}", "-"),
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
            "{:<9} {:<6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9}",
            "server",
            "phase",
            "calls/s",
            "rx MB/s",
            "tx MB/s",
            "sysc/s",
            "sysc_us",
            "smpl/s",
            "retx/s"
        );
        for s in &stats {
            let mut phases = vec![("before", &s.before)];
            if let Some(d) = &s.during {
                phases.push(("fault", d));
            }
            for (name, p) in phases {
                let calls: f64 = p.calls.values().sum();
                println!(
                    "{:<9} {:<6} {:>9.0} {:>9.2} {:>9.2} {:>9.0} {:>8.1} {:>8.1} {:>9.2}",
                    format!("{}{}", s.server, if s.faulty { "*" } else { "" }),
                    name,
                    calls,
                    p.rx_bytes / 1e6,
                    p.tx_bytes / 1e6,
                    p.syscalls,
                    p.syscall_us,
                    p.samples,
                    p.retransmits,
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
    let config = a.cluster.config()?;
    let system = config.system;
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| target_dir().join(format!("xtask/fs-bench-{system}")));
    let _ = std::fs::remove_dir_all(&out);
    println!("== {system} cluster start / stop (3 times)");
    for _ in 0..3 {
        let c = start_cluster(config.clone())?;
        let start = c.start_seconds;
        let stop = c.stop()?;
        println!("  start {start:5.1} s   stop {stop:5.1} s");
    }
    let cluster = start_cluster(config)?;
    let modes: Vec<(&str, Option<ProbeSet>)> = vec![
        ("untraced", None),
        ("none", Some(ProbeSet::None)),
        ("generic", Some(ProbeSet::Generic)),
    ];
    println!(
        "\n== throughput, {:.0} s per workload, median of {} (MB/s read+write through the mount), one tracer per server",
        a.seconds, a.repeat
    );
    print!("{:<9}", "workload");
    for (m, _) in &modes {
        print!(" {:>10}", *m);
    }
    for (m, p) in &modes {
        if p.is_some() {
            print!(" {:>12} {:>10}", format!("ev/s {m}"), format!("MB/s {m}"));
        }
    }
    println!(" {:>6}", "load");
    let mut lost = 0u64;
    for w in Workload::ALL {
        // Modes interleaved within each repetition, so drift in the host's
        // load (other builds) hits them alike; medians reported.
        let mut mbps: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut caps: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut loads = Vec::new();
        for rep in 0..a.repeat.max(1) {
            for (m, (name, probes)) in modes.iter().enumerate() {
                let record = match probes {
                    Some(p) => Some(RecordConfig::new(tracer.clone(), system, *p)?),
                    None => None,
                };
                let dir = out.join(format!("{w}-{name}-{}", rep + 1));
                let info = tests::fs::run(
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
                loads.push(info.load_average);
                mbps[m].push(info.result.mb_per_s());
                let secs = info.result.seconds.max(1e-9);
                let events: u64 = info.tracers.iter().flat_map(|t| t.events.values()).sum();
                let bytes: u64 = info.tracers.iter().map(|t| t.bytes).sum();
                lost += info.tracers.iter().map(|t| t.lost).sum::<u64>();
                rates[m].push(events as f64 / secs);
                caps[m].push(bytes as f64 / 1e6 / secs);
            }
        }
        print!("{:<9}", w.to_string());
        for v in &mbps {
            print!(" {:>10.1}", median(v.clone()));
        }
        for (m, (_, p)) in modes.iter().enumerate() {
            if p.is_some() {
                print!(
                    " {:>12.0} {:>10.2}",
                    median(rates[m].clone()),
                    median(caps[m].clone())
                );
            }
        }
        println!(" {:>6.1}", median(loads));
    }
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

    /// TP counts runs indicting the faulty server, `wrong` runs indicting
    /// another.
    #[test]
    fn tally_counts_true_positives_and_wrong_servers() {
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
                wrong: 1
            }
        );
        assert_eq!(
            cells[&(Some(FaultKind::DiskHog), "count".to_string())],
            Cell {
                runs: 2,
                tp: 0,
                wrong: 1
            }
        );
        assert_eq!(
            cells[&(None, "count".to_string())],
            Cell {
                runs: 1,
                tp: 0,
                wrong: 1
            }
        );
        assert_eq!(
            cells[&(None, "time".to_string())],
            Cell {
                runs: 1,
                tp: 0,
                wrong: 0
            }
        );
    }

    /// A run that failed while recording is listed apart in the headline,
    /// beside its fault class, and a fault whose every run failed still
    /// shows; an older matrix.json without `failed` reads as all recorded.
    #[test]
    fn failed_runs_show_in_the_headline_without_a_verdict() {
        let verdicts = vec![
            (
                Some(FaultKind::PacketLoss),
                Some("server1".to_string()),
                vec![v("combined", &["server1"])],
            ),
            (None, None, vec![v("combined", &[])]),
        ];
        let entry = |dir: &str, fault| MatrixEntry {
            dir: dir.into(),
            workload: Workload::Dd,
            fault,
            server: Some("server2".into()),
            failed: Some("dd killed by its bound".into()),
        };
        let failed = vec![
            entry("dd/packet-loss/run2", Some(FaultKind::PacketLoss)),
            entry("dd/disk-throttle/run1", Some(FaultKind::DiskThrottle)),
            entry("dd/disk-throttle/run2", Some(FaultKind::DiskThrottle)),
        ];
        let line = headline(&tally(&verdicts), &failed);
        assert!(
            line.starts_with("TP 1/1 (100.0%), wrong 0/1, clean FP 0/1; "),
            "{line}"
        );
        assert!(line.contains("packet-loss 1/1 (+1 failed)"), "{line}");
        assert!(line.contains("disk-throttle 0/0 (+2 failed)"), "{line}");
        assert_eq!(line.matches("disk-throttle").count(), 1, "{line}");
        assert!(line.ends_with("; 3 runs failed while recording, not scored"));
        assert!(!headline(&tally(&verdicts), &[]).contains("failed"));

        let old: MatrixEntry = serde_json::from_str(
            r#"{"dir":"dd/none/run1","workload":"dd","fault":null,"server":null}"#,
        )
        .expect("old entry");
        assert!(old.failed.is_none());
    }
}
