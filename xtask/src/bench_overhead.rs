//! `cargo xtask bench-overhead` (issue 19): what recording costs a real
//! file system's throughput. One cluster (GlusterFS by default, MooseFS with
//! `--fs moosefs`), one `tracer record -p` per server, the workload run
//! untraced, traced without function probes, traced with a broad function
//! pattern, and traced with the same pattern under `--overhead 5%` (or the
//! modes `--modes` names, such as the ablations that turn one signal off);
//! the modes interleaved in each repetition, each repetition in its own
//! order (a Williams design: every mode in every position and after every
//! other equally often, relabelled from a printed seed that `--seed`
//! replays; a rotated order kept each mode after the same one) and each
//! run after a `sync`, so that drift in the host's load and one run's
//! write-back hit them alike. Each traced run's throughput is divided by
//! the untraced run of its own repetition; min / median / max of those
//! ratios are printed, with the load average, and for the budgeted runs
//! what the budget dropped and the cost the recorders measured.

use std::path::PathBuf;

use analyzer::decode::Capture;
use anyhow::Context as _;
use clap::Args;
use tests::fs::{ClusterConfig, FaultParams, RecordConfig, RunConfig, System, Workload};

use crate::{bench::median, build_tracer, is_root, target_dir};

/// A broad pattern of GlusterFS's own functions: everything its
/// dictionary, inode table, default translator, call-stub and RPC server
/// code does (hundreds of functions, several of them called many times per
/// request), plus the C library's file-system calls.
const GLUSTER_BROAD: &[&str] = &[
    "libglusterfs.so.0:dict_*",
    "libglusterfs.so.0:inode_*",
    "libglusterfs.so.0:default_*",
    "libglusterfs.so.0:call_*",
    "libgfrpc.so.0:rpcsvc_*",
    "libc.so.6:pread*",
    "libc.so.6:pwrite*",
    "libc.so.6:fsync",
    "libc.so.6:fdatasync",
];

/// MooseFS's binaries are stripped: the C library's calls are what a user
/// can name.
const MOOSE_BROAD: &[&str] = &[
    "libc.so.6:pread*",
    "libc.so.6:pwrite*",
    "libc.so.6:read",
    "libc.so.6:write",
    "libc.so.6:memcpy*",
    "libc.so.6:malloc",
    "libc.so.6:free",
    "libc.so.6:fsync",
];

/// `cargo xtask bench-overhead`.
#[derive(Debug, Args)]
pub(crate) struct BenchOverheadArgs {
    /// The file system: glusterfs or moosefs.
    #[arg(long = "fs", default_value = "glusterfs")]
    system: String,
    /// The workload: dd, postmark or fio.
    #[arg(long, default_value = "dd")]
    workload: String,
    /// Seconds per run.
    #[arg(long, default_value_t = 15.0)]
    seconds: f64,
    /// Repetitions of every mode (at least 3).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// The budget of the budgeted mode, percent.
    #[arg(long, default_value_t = 5.0)]
    overhead: f64,
    /// Function patterns of the broad modes instead of the built-in ones
    /// (repeatable).
    #[arg(short = 'f', long = "functions", value_name = "PATTERN")]
    functions: Vec<String>,
    /// Record with this tracer binary instead of building the release one.
    #[arg(long)]
    tracer: Option<PathBuf>,
    /// Where the captures go.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The modes to run, comma-separated (untraced always runs first):
    /// no-f, no-f-one (one recorder for all servers), broad,
    /// broad-everywhere (probes in every process of their objects,
    /// `--probe-everywhere`), budget, budget-one (one budgeted recorder
    /// for all servers), and
    /// the no-f ablations that each turn one
    /// signal off, to find where the cost of recording without probes
    /// goes: no-f-nosample, no-f-nosyscalls, no-f-nofile, no-f-noblock,
    /// no-f-nonet, no-f-nocpu, no-f-noblocked (no blocked-thread entry
    /// per system call), and no-f-bare (all of them off); each ablation
    /// also as no-f-one-NAME (one recorder for all servers, e.g.
    /// no-f-one-noblocked).
    #[arg(long, value_delimiter = ',', default_value = "no-f,broad,budget")]
    modes: Vec<String>,
    /// The tracer binary of the modes named MODE@base (e.g. no-f-one@base:
    /// an older build), interleaved with the others in each repetition: two
    /// builds compared under the same drift of the host's load.
    #[arg(long, value_name = "TRACER")]
    baseline: Option<PathBuf>,
    /// Turn the kernel's run-time statistics of eBPF programs on for the
    /// whole benchmark and print, per run and mode, where the CPU went:
    /// the recorders' own processes, their kernel programs (each by
    /// name) and the servers, as % of the host's cores. The statistics
    /// cost each program run two clock reads (every mode alike).
    #[arg(long)]
    program_stats: bool,
    /// Seed of the modes' order in each repetition (a design balanced for
    /// position and predecessor, relabelled from the seed; printed, so a
    /// run's order can be replayed). Without it, a seed from the clock.
    #[arg(long)]
    seed: Option<u64>,
}

/// Each no-f ablation: its name, the sample rate (`None`: the harness's
/// 99 Hz) and the recorder's other flags.
const ABLATIONS: &[(&str, Option<u32>, &[&str])] = &[
    ("no-f-nosample", Some(0), &[]),
    ("no-f-nosyscalls", None, &["--no-syscalls"]),
    ("no-f-nofile", None, &["--no-file-io"]),
    ("no-f-noblock", None, &["--no-block-io"]),
    ("no-f-nonet", None, &["--no-net-stats"]),
    ("no-f-nocpu", None, &["--no-cpu-times"]),
    // Where each thread entered its system call, kept on every call for
    // the blocked threads at the stop: a hidden recorder flag skips it.
    ("no-f-noblocked", None, &["--bench-no-blocked"]),
    (
        "no-f-bare",
        Some(0),
        &[
            "--no-syscalls",
            "--no-file-io",
            "--no-block-io",
            "--no-net-stats",
            "--no-cpu-times",
        ],
    ),
];

/// The ablation `name` names (`no-f-X`, or `no-f-one-X` for one recorder
/// for all servers): its sample rate, flags and whether it is one recorder.
fn ablation(name: &str) -> Option<(Option<u32>, &'static [&'static str], bool)> {
    let (lookup, single) = match name.strip_prefix("no-f-one-") {
        Some(rest) => (format!("no-f-{rest}"), true),
        None => (name.to_string(), false),
    };
    ABLATIONS
        .iter()
        .find(|(n, ..)| *n == lookup)
        .map(|(_, hz, flags)| (*hz, *flags, single))
}

/// One traced mode: its name and the recorder's settings.
struct Mode {
    name: String,
    record: Option<RecordConfig>,
}

pub(crate) fn bench_overhead(a: &BenchOverheadArgs) -> anyhow::Result<()> {
    if !is_root() {
        anyhow::bail!(
            "bench-overhead starts a file-system cluster in namespaces and loads eBPF programs: run as root"
        );
    }
    let system: System = a.system.parse()?;
    let workload: Workload = a.workload.parse()?;
    let tracer = match &a.tracer {
        Some(t) => t.clone(),
        None => build_tracer(true)?,
    };
    let broad: Vec<String> = if a.functions.is_empty() {
        match system {
            System::Glusterfs => GLUSTER_BROAD,
            System::Moosefs => MOOSE_BROAD,
        }
        .iter()
        .map(|s| s.to_string())
        .collect()
    } else {
        a.functions.clone()
    };
    let record = |functions: &[String], extra: &[String]| -> anyhow::Result<RecordConfig> {
        let mut r = RecordConfig::new(tracer.clone(), system, tests::fs::ProbeSet::None)?;
        r.probes = if functions.is_empty() {
            "none"
        } else {
            "broad"
        }
        .into();
        r.functions = functions.to_vec();
        r.extra_args = extra.to_vec();
        Ok(r)
    };
    let budget = format!("{}%", a.overhead);
    let mut modes = vec![Mode {
        name: "untraced".into(),
        record: None,
    }];
    for name in &a.modes {
        let (plain, base) = match name.strip_suffix("@base") {
            Some(plain) => match &a.baseline {
                Some(b) => (plain, Some(b)),
                None => anyhow::bail!("mode {name:?} needs --baseline TRACER"),
            },
            None => (name.as_str(), None),
        };
        let mut record = match plain {
            "untraced" => continue,
            "no-f" => record(&[], &[])?,
            "no-f-one" => {
                // One recorder for every server of the host, as a host
                // with several servers would be traced: the node-wide
                // programs (system-call and block tracepoints) run once.
                let mut r = record(&[], &[])?;
                r.mode = tests::fs::RecordMode::Single;
                r
            }
            "broad" => record(&broad, &[])?,
            // As recorders did before probes were scoped to the traced
            // processes: every process mapping a probed library traps.
            "broad-everywhere" => record(&broad, &["--probe-everywhere".into()])?,
            "budget" | "budget-one" => {
                let mut r = record(
                    &broad,
                    &[
                        "--overhead".into(),
                        budget.clone(),
                        "--overhead-interval".into(),
                        "1s".into(),
                    ],
                )?;
                // budget-one: one recorder, one budget, for all servers
                // of the host (as no-f-one), instead of one per server
                // each spending its own.
                if plain == "budget-one" {
                    r.mode = tests::fs::RecordMode::Single;
                }
                r
            }
            other => match ablation(other) {
                Some((hz, flags, single)) => {
                    let mut r = record(
                        &[],
                        &flags.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
                    )?;
                    if let Some(hz) = hz {
                        r.sample_hz = hz;
                    }
                    if single {
                        r.mode = tests::fs::RecordMode::Single;
                    }
                    r
                }
                None => anyhow::bail!(
                    "unknown mode {other:?}: untraced, no-f, no-f-one, broad, broad-everywhere, budget, budget-one, {} (each ablation also as no-f-one-X; any mode as MODE@base with --baseline)",
                    ABLATIONS
                        .iter()
                        .map(|(n, ..)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        };
        if let Some(base) = base {
            record.tracer = base.clone();
        }
        modes.push(Mode {
            name: name.clone(),
            record: Some(record),
        });
    }
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| target_dir().join(format!("xtask/bench-overhead-{system}")));
    let _ = std::fs::remove_dir_all(&out);
    // Held open for the whole benchmark: statistics on while it lasts.
    let _stats = if a.program_stats {
        Some(tests::fs::enable_program_stats()?)
    } else {
        None
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cluster = tests::fs::Cluster::start(ClusterConfig::new(system))
        .with_context(|| format!("starting the {system} cluster"))?;
    println!(
        "== recording overhead on {system}, workload {workload}, {:.0} s per run, {} runs per mode, interleaved; one `tracer record -p` per server (no-f-one: one for all), 99 Hz samples",
        a.seconds,
        a.repeat.max(3)
    );
    println!("   broad pattern: {}", broad.join(" "));
    let reps = a.repeat.max(3);
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let orders = run_orders(modes.len(), reps, seed);
    println!(
        "   modes' order per repetition (balanced for position and predecessor, relabelled from seed {seed}; --seed {seed} replays it)"
    );
    for (rep, order) in orders.iter().enumerate() {
        println!(
            "   repetition {}: {}",
            rep + 1,
            order
                .iter()
                .map(|m| modes[*m].name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut mbps: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    // Per mode and repetition: CPU ms per MB moved of the servers, of the
    // whole host, and the recorders' CPU, ms per s.
    let mut cpu: Vec<Vec<Option<CpuPerMb>>> = vec![Vec::new(); modes.len()];
    let mut loads: Vec<f64> = Vec::new();
    // Per mode and repetition: where the CPU went (program_stats).
    let mut shares: Vec<Vec<Shares>> = vec![Vec::new(); modes.len()];
    let mut budget_notes: Vec<String> = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for (rep, order) in orders.iter().enumerate() {
            // Each repetition in another order: a run inherits the
            // write-back and deletions of the run before it, which in a
            // fixed order (or a rotated one: each mode still follows the
            // same one) favour the same mode every time.
            for &m in order {
                let mode = &modes[m];
                settle();
                let dir = out.join(format!(
                    "{}-{}",
                    mode.name.replace([' ', '-', '@'], "_"),
                    rep + 1
                ));
                let info = tests::fs::run(
                    &cluster,
                    &RunConfig {
                        workload,
                        seconds: a.seconds,
                        fault: None,
                        fault_after: 0.0,
                        params: FaultParams::default(),
                        record: mode.record.clone(),
                    },
                    &dir,
                )
                .with_context(|| format!("run {} of {}", rep + 1, mode.name))?;
                let v = info.result.mb_per_s();
                eprintln!(
                    "bench-overhead: run {} {:<20} {v:8.1} MB/s  load {:.1}",
                    rep + 1,
                    mode.name,
                    info.load_average
                );
                if a.program_stats
                    && let Some(sh) = info
                        .cpu
                        .as_ref()
                        .and_then(|c| Shares::of(c, &info.programs, cores))
                {
                    eprintln!(
                        "bench-overhead: run {} {:<20} CPU % of {cores} cores: recorders {:.2}, kernel programs {:.2}, servers {:.2}, host busy {:.2}; {:.0} system calls/s; {}",
                        rep + 1,
                        mode.name,
                        sh.recorders,
                        sh.programs,
                        sh.servers,
                        sh.host,
                        sh.syscalls_per_s,
                        sh.by_program
                            .iter()
                            .map(|(n, p, runs)| format!("{n} {p:.2}% ({runs:.0}/s)"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    shares[m].push(sh);
                }
                mbps[m].push(v);
                cpu[m].push(
                    info.cpu
                        .as_ref()
                        .and_then(|c| CpuPerMb::of(c, &info.result)),
                );
                loads.push(info.load_average);
                // budget@base too: the baseline's decisions beside this build's.
                if mode.name.starts_with("budget") {
                    for t in &info.tracers {
                        let cap = Capture::open(&dir.join(&t.capture))
                            .with_context(|| format!("reading {}", t.capture))?;
                        if let Some(o) = cap.overhead {
                            let classes = crate::bench::probe_classes(
                                cap.probes.iter().map(|p| p.entry_class.name()),
                            );
                            budget_notes.push(format!(
                                "run {} {} {}: {} probes {classes:?}, dropped {} (hottest: {}), estimated {:.1}% -> {:.1}% kept, measured {}; kernel programs {}; costs {}",
                                rep + 1,
                                mode.name,
                                t.servers.join(","),
                                cap.probes.len(),
                                o.dropped.len(),
                                o.dropped
                                    .iter()
                                    .take(3)
                                    .map(|d| d.symbol.as_str())
                                    .collect::<Vec<_>>()
                                    .join(" "),
                                o.estimated_percent,
                                o.kept_percent,
                                o.measured_percent
                                    .map_or("-".into(), |m| format!("{m:.1}%")),
                                o.kernel_ms_per_s
                                    .map_or("-".into(), |k| format!("{k:.1} ms/s")),
                                o.per_call_cost()
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    })();
    let stop = cluster.stop();
    result?;
    stop?;
    println!(
        "\n{:<22} {:>10} {:>8} {:>8} {:>8}   (throughput / the untraced run of the same repetition)",
        "mode", "MB/s med", "min", "median", "max"
    );
    for (m, mode) in modes.iter().enumerate() {
        let r = ratios(&mbps[m], &mbps[0], |v| Some(*v));
        println!(
            "{:<22} {:>10.1} {:>8.3} {:>8.3} {:>8.3}",
            mode.name,
            median(mbps[m].clone()),
            r.first().copied().unwrap_or(f64::NAN),
            median(r.clone()),
            r.last().copied().unwrap_or(f64::NAN),
        );
    }
    println!(
        "\n{:<22} {:>10} {:>8} {:>8} {:>8} {:>12} {:>8} {:>12}   (CPU per MB moved / the untraced run of the same repetition)",
        "mode", "servers", "min", "median", "max", "host median", "max", "recorders"
    );
    for (m, mode) in modes.iter().enumerate() {
        let servers = ratios(&cpu[m], &cpu[0], |c| Some(c.as_ref()?.servers_ms_per_mb));
        let host = ratios(&cpu[m], &cpu[0], |c| Some(c.as_ref()?.host_ms_per_mb));
        let tracers: Vec<f64> = cpu[m]
            .iter()
            .flatten()
            .map(|c| c.tracers_ms_per_s)
            .collect();
        println!(
            "{:<22} {:>7.1} ms {:>8.3} {:>8.3} {:>8.3} {:>12.3} {:>8.3} {:>7.1} ms/s",
            mode.name,
            median(
                cpu[m]
                    .iter()
                    .flatten()
                    .map(|c| c.servers_ms_per_mb)
                    .collect()
            ),
            servers.first().copied().unwrap_or(f64::NAN),
            median(servers.clone()),
            servers.last().copied().unwrap_or(f64::NAN),
            median(host.clone()),
            host.last().copied().unwrap_or(f64::NAN),
            median(tracers),
        );
    }
    println!(
        "  servers: their daemons' CPU per MB (probe traps are charged to them); host: every busy core per MB \
         (recorders, kernel programs on every process, the client); recorders: their own CPU, ms per s of wall time"
    );
    if a.program_stats {
        print_shares(&modes, &mbps, &shares, cores);
    }
    println!(
        "load average during the runs: median {:.1}, max {:.1} (a shared machine: noisy)",
        median(loads.clone()),
        loads.iter().copied().fold(0.0, f64::max)
    );
    println!("\n== what the budget ({budget}) did, per recorder");
    for n in &budget_notes {
        println!("  {n}");
    }
    println!("captures in {}", out.display());
    Ok(())
}

/// A run's CPU cost per MB moved through the mount.
#[derive(Clone, Copy, Debug)]
struct CpuPerMb {
    servers_ms_per_mb: f64,
    host_ms_per_mb: f64,
    tracers_ms_per_s: f64,
}

impl CpuPerMb {
    fn of(cpu: &tests::fs::RunCpu, result: &tests::fs::WorkloadResult) -> Option<Self> {
        let mb = (result.bytes_read + result.bytes_written) as f64 / 1e6;
        if mb <= 0.0 || cpu.wall_ns == 0 {
            return None;
        }
        Some(CpuPerMb {
            servers_ms_per_mb: cpu.servers_ns as f64 / 1e6 / mb,
            host_ms_per_mb: cpu.host_busy_ns as f64 / 1e6 / mb,
            tracers_ms_per_s: cpu.tracers_ns as f64 / 1e6 / (cpu.wall_ns as f64 / 1e9),
        })
    }
}

/// Where a run's CPU went, % of all the host's cores over the workload.
#[derive(Clone, Debug)]
struct Shares {
    recorders: f64,
    programs: f64,
    servers: f64,
    host: f64,
    /// Runs of the system-call entry program a second (every process's
    /// calls: the raw tracepoint fires for all).
    syscalls_per_s: f64,
    /// Each kernel program: name, %, runs a second.
    by_program: Vec<(String, f64, f64)>,
}

impl Shares {
    fn of(
        cpu: &tests::fs::RunCpu,
        programs: &[tests::fs::ProgramCost],
        cores: f64,
    ) -> Option<Self> {
        if cpu.wall_ns == 0 {
            return None;
        }
        let wall = cpu.wall_ns as f64;
        let pct = |ns: u64| ns as f64 / (wall * cores) * 100.0;
        Some(Shares {
            recorders: pct(cpu.tracers_ns),
            programs: pct(cpu.programs_ns),
            servers: pct(cpu.servers_ns),
            host: pct(cpu.host_busy_ns),
            syscalls_per_s: programs
                .iter()
                .find(|p| p.name == "sys_enter")
                .map_or(0.0, |p| p.runs as f64 / (wall / 1e9)),
            by_program: programs
                .iter()
                .map(|p| (p.name.clone(), pct(p.run_ns), p.runs as f64 / (wall / 1e9)))
                .collect(),
        })
    }
}

/// The breakdown table: per mode, the median throughput ratio next to the
/// median share of the host's cores of each consumer, and the programs'.
fn print_shares(modes: &[Mode], mbps: &[Vec<f64>], shares: &[Vec<Shares>], cores: f64) {
    println!(
        "\n{:<22} {:>8} {:>10} {:>10} {:>10} {:>10} {:>12}   (medians; CPU as % of {cores} cores over the workload)",
        "mode", "ratio", "recorders", "programs", "servers", "host busy", "syscalls/s"
    );
    for (m, mode) in modes.iter().enumerate() {
        let r = ratios(&mbps[m], &mbps[0], |v| Some(*v));
        let med = |f: &dyn Fn(&Shares) -> f64| median(shares[m].iter().map(f).collect());
        println!(
            "{:<22} {:>8.3} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>12.0}",
            mode.name,
            median(r),
            med(&|s| s.recorders),
            med(&|s| s.programs),
            med(&|s| s.servers),
            med(&|s| s.host),
            med(&|s| s.syscalls_per_s),
        );
    }
    println!("\nkernel programs, median % of {cores} cores (runs/s):");
    for (m, mode) in modes.iter().enumerate() {
        let mut names: Vec<&str> = shares[m]
            .iter()
            .flat_map(|s| s.by_program.iter().map(|(n, ..)| n.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            continue;
        }
        let mut row: Vec<(f64, String)> = names
            .iter()
            .map(|n| {
                let of = |i: usize| -> f64 {
                    median(
                        shares[m]
                            .iter()
                            .filter_map(|s| s.by_program.iter().find(|(p, ..)| p == n))
                            .map(|(_, pct, rate)| if i == 0 { *pct } else { *rate })
                            .collect(),
                    )
                };
                let pct = of(0);
                (pct, format!("{n} {pct:.2} ({:.0})", of(1)))
            })
            .collect();
        row.sort_by(|a, b| b.0.total_cmp(&a.0));
        println!(
            "  {:<20} {}",
            mode.name,
            row.into_iter()
                .map(|(_, s)| s)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// Sorted ratios of `f` of each repetition to the same repetition's
/// baseline, where both were measured.
fn ratios<T>(runs: &[T], base: &[T], f: impl Fn(&T) -> Option<f64>) -> Vec<f64> {
    let mut r: Vec<f64> = runs
        .iter()
        .zip(base)
        .filter_map(|(a, b)| Some(f(a)? / f(b)?.max(1e-9)))
        .collect();
    r.sort_by(f64::total_cmp);
    r
}

/// Writes back what earlier runs left dirty and lets the servers' disks go
/// idle, so that a run does not pay for the one before it.
fn settle() {
    let _ = std::process::Command::new("sync").status();
    std::thread::sleep(std::time::Duration::from_secs(2));
}

/// The order of `modes` modes in each of `reps` repetitions: rows of a
/// Williams design (a Latin square whose rows, with their mirrors for an
/// odd number of modes, put every mode in every position equally often and
/// every mode right after every other equally often), in blocks of its
/// rows, each block with its modes relabelled and its rows taken in an
/// order drawn from `seed`. A plain shuffle per repetition
/// left position to chance: on MooseFS one mode ran first in 4 of 6
/// repetitions, and runs later in a repetition were slower (write-back).
fn run_orders(modes: usize, reps: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    // The first row: 0, 1, n-1, 2, n-2, ...; row r adds r to each.
    let base: Vec<usize> = (0..modes)
        .map(|i| match i {
            0 => 0,
            i if i % 2 == 1 => i.div_ceil(2),
            i => modes - i / 2,
        })
        .collect();
    let mut rows: Vec<Vec<usize>> = (0..modes)
        .map(|r| base.iter().map(|b| (b + r) % modes).collect())
        .collect();
    if modes % 2 == 1 {
        let mirrors: Vec<Vec<usize>> = rows
            .iter()
            .map(|r| r.iter().rev().copied().collect())
            .collect();
        rows.extend(mirrors);
    }
    let mut orders = Vec::with_capacity(reps);
    while orders.len() < reps {
        let mut label: Vec<usize> = (0..modes).collect();
        rng.shuffle(&mut label);
        let mut pick: Vec<usize> = (0..rows.len()).collect();
        rng.shuffle(&mut pick);
        for r in pick {
            if orders.len() == reps {
                break;
            }
            orders.push(rows[r].iter().map(|m| label[*m]).collect());
        }
    }
    orders
}

#[cfg(test)]
mod order_tests {
    use super::run_orders;

    /// Every repetition runs every mode once; a seed replays its orders.
    #[test]
    fn each_repetition_runs_every_mode_once_and_a_seed_replays_it() {
        for modes in 1..7 {
            let orders = run_orders(modes, 6, 42);
            assert_eq!(orders.len(), 6);
            for o in &orders {
                let mut sorted = o.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..modes).collect::<Vec<_>>(), "{orders:?}");
            }
            assert_eq!(orders, run_orders(modes, 6, 42));
        }
        assert_ne!(run_orders(4, 6, 42), run_orders(4, 6, 43));
    }

    /// Over a whole block (as many repetitions as modes, twice that for
    /// an odd number), every mode runs in every position equally often and
    /// right after every other mode equally often: neither the runs late in
    /// a repetition (slower, after the others' write-back) nor one mode's
    /// leftovers fall on one mode more than on another.
    #[test]
    fn a_block_of_repetitions_balances_positions_and_predecessors() {
        for (modes, seed) in [(2, 1), (4, 7), (4, 8), (5, 3), (6, 11)] {
            let block = if modes % 2 == 0 { modes } else { 2 * modes };
            let orders = run_orders(modes, block, seed);
            let each = block / modes;
            for m in 0..modes {
                for pos in 0..modes {
                    let n = orders.iter().filter(|o| o[pos] == m).count();
                    assert_eq!(n, each, "mode {m} position {pos}: {orders:?}");
                }
                for before in (0..modes).filter(|b| *b != m) {
                    let n = orders
                        .iter()
                        .flat_map(|o| o.windows(2))
                        .filter(|w| w[0] == before && w[1] == m)
                        .count();
                    assert_eq!(n, each, "{before} then {m}: {orders:?}");
                }
            }
        }
    }

    /// No mode always runs right after the same one (a rotated cyclic
    /// order did that in every repetition), over 6 repetitions of 4 modes.
    #[test]
    fn no_mode_always_follows_the_same_one() {
        for seed in 0..20 {
            let orders = run_orders(4, 6, seed);
            for m in 0..4 {
                // The mode before it, in the repetitions it is not first.
                let before: Vec<usize> = orders
                    .iter()
                    .filter_map(|o| {
                        let at = o.iter().position(|x| *x == m).expect("every mode runs");
                        at.checked_sub(1).map(|p| o[p])
                    })
                    .collect();
                assert!(
                    before.iter().any(|b| *b != before[0]),
                    "seed {seed}: mode {m} always after {before:?}: {orders:?}"
                );
            }
        }
    }
}
