//! AutomaDeD (paper 004) on real MPICH ranks: the `mpi_faults` fixture
//! injects CPU_INTENSIVE, MEM_INTENSIVE, TRANS_STALL or HANG into one
//! randomly chosen rank; the recorded run's semi-Markov models must make
//! that rank the top-1 outlier with an edge of the injected computation
//! region among its top-5 abnormal edges (the paper's process- and
//! edge-isolation recall, §4.2).
//!
//! `AUTOMADED_REPEAT=N` (`cargo xtask bench-automaded`) repeats every case
//! N times with a fresh random rank and prints recall tables like the
//! paper's Figures 7 and 8 (then the test asserts recall ≥ 80% instead of
//! every run). A single run that misses gets one retry on a fresh run: the
//! two cores are shared with other tests.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use analyzer::{
    automaded::{self, Method, OutlierConfig, Phase, hang},
    mpi,
};
use tests::{Background, capture, fixture, privileged};

const FUNCTIONS: [&str; 12] = [
    "MPI_Init*",
    "MPI_Finalize*",
    "MPI_Comm_rank",
    "MPI_Comm_size",
    "MPI_Irecv",
    "MPI_Isend",
    "MPI_Waitall",
    "MPI_Allreduce",
    "MPI_Bcast",
    "MPI_Recv",
    "MPI_Send",
    "MPI_Barrier",
];

/// A rank in `lo..hi` from the clock (printed, so a failure can be rerun
/// by reading the log).
fn random_rank(lo: u32, hi: u32) -> u32 {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    lo + (ns / 1000) % (hi - lo)
}

/// One case: structure, ranks, fault, and the computation region it is
/// injected into (the prefix of that state's label).
#[derive(Clone, Copy, Debug)]
struct Case {
    structure: &'static str,
    ranks: u32,
    /// Ranks that may be faulty.
    faulty: (u32, u32),
    fault: &'static str,
    region: &'static str,
    clusters: Option<usize>,
}

/// Records one run with `fault` in `rank`; a hang is left hanging for a
/// few seconds, then the recorder stops and the ranks are killed.
fn record(dir: &Path, exe: &Path, case: &Case, rank: u32, run: usize) -> PathBuf {
    let out = dir.join(format!("{}-{}-{run}.capture", case.structure, case.fault));
    let tracer = Background::mpi_ranks(exe, &out, &FUNCTIONS);
    let hang = case.fault == "hang";
    let status = Command::new("timeout")
        .args(["-s", "KILL", if hang { "6" } else { "90" }, "mpiexec", "-n"])
        .arg(case.ranks.to_string())
        .arg(exe)
        .args([case.structure, "40"])
        .env("FAULT", case.fault)
        .env("FAULT_RANK", rank.to_string())
        .env("FAULT_ITER", "20")
        .env("STALL_S", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("mpiexec runs");
    if hang {
        // The ranks were killed with mpiexec; give the recorder a moment
        // to drain their last records.
        std::thread::sleep(Duration::from_millis(300));
    } else {
        assert!(status.success(), "{case:?}: mpiexec failed: {status}");
    }
    let status = tracer.stop("INT");
    assert!(status.success(), "{case:?}: tracer failed: {status}");
    out
}

/// (faulty rank is top-1, injected region in its top-5 edges) per method.
fn analyze(path: &Path, case: &Case, rank: u32) -> Vec<(Method, bool, bool)> {
    let cap = capture(path);
    let profiles = mpi::extract(&[&cap]).expect("profiles");
    assert_eq!(
        profiles.ranks.len() as u32,
        case.ranks,
        "{case:?}: ranks recorded"
    );
    let tails = if case.fault == "hang" {
        let t = hang::tails(&[&cap]).expect("tails");
        assert!(
            !hang::hung(&t, 2_000_000_000).is_empty(),
            "{case:?}: no rank idle for 2 s"
        );
        Some(t)
    } else {
        None
    };
    let models = automaded::smm::build_with_tails(&profiles, &[&cap], Phase::Whole, tails.as_ref());
    let methods: &[Method] = if case.clusters.is_some() {
        // A lone master has no near neighbour: nearest neighbour is for
        // SPMD runs (§3.3.2).
        &[Method::Kmedoids]
    } else {
        &[Method::Kmedoids, Method::Sample]
    };
    methods
        .iter()
        .map(|&method| {
            let cfg = OutlierConfig {
                method,
                clusters: case.clusters,
                min_cluster: if case.clusters.is_some() { 1 } else { 3 },
                ..OutlierConfig::default()
            };
            let a = automaded::analyze(&models, &cfg).expect("analysis");
            let top = &a.abnormal[0];
            let task_hit = top.score.rank == rank;
            let edge_hit = top.edges.iter().take(5).any(|e| {
                e.from_label.starts_with(case.region) || e.to_label.starts_with(case.region)
            });
            if !(task_hit && edge_hit) {
                eprintln!(
                    "{case:?} rank {rank} {method:?}: top rank {} edges {:?}",
                    top.score.rank,
                    top.edges
                        .iter()
                        .map(|e| format!("{} -> {}", e.from_label, e.to_label))
                        .collect::<Vec<_>>()
                );
            }
            (method, task_hit, edge_hit)
        })
        .collect()
}

/// The cases' ranks share two cores: one case at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_cases(cases: &[Case]) {
    if !privileged() || !tests::installed(&["mpicc", "mpiexec"], "apt packages mpich libmpich-dev")
    {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let repeat: usize = std::env::var("AUTOMADED_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = fixture("mpi_faults", None);
    let mut table = Vec::new();
    for case in cases {
        // (method, runs, task hits, edge hits given the task)
        let mut tally: Vec<(Method, usize, usize, usize)> = Vec::new();
        let mut retried = false;
        let mut run = 0;
        while run < repeat {
            let rank = random_rank(case.faulty.0, case.faulty.1);
            eprintln!(
                "{} {} ranks, {} in rank {rank}",
                case.structure, case.ranks, case.fault
            );
            let path = record(dir.path(), &exe, case, rank, run + usize::from(retried));
            let results = analyze(&path, case, rank);
            let _ = std::fs::remove_file(&path);
            // A single run (the default) gets one fresh retry: the 2-core
            // machine is shared, and one run in about twenty missed when
            // other jobs loaded it. Recall tables count every run.
            if repeat == 1 && !retried && results.iter().any(|r| !(r.1 && r.2)) {
                eprintln!("missed; one retry with a fresh run");
                retried = true;
                continue;
            }
            run += 1;
            for (method, task, edge) in results {
                let t = match tally.iter_mut().find(|t| t.0 == method) {
                    Some(t) => t,
                    None => {
                        tally.push((method, 0, 0, 0));
                        tally.last_mut().expect("pushed")
                    }
                };
                t.1 += 1;
                t.2 += usize::from(task);
                t.3 += usize::from(task && edge);
            }
        }
        for t in tally {
            table.push((*case, t));
        }
    }
    eprintln!(
        "\n{:<8} {:<8} {:>5} {:<9} {:>5} {:>16} {:>16}",
        "app", "fault", "ranks", "method", "runs", "task recall", "edge recall"
    );
    for (case, (method, runs, task, edge)) in &table {
        eprintln!(
            "{:<8} {:<8} {:>5} {:<9} {:>5} {:>15.0}% {:>15.0}%",
            case.structure,
            case.fault,
            case.ranks,
            format!("{method:?}"),
            runs,
            100.0 * *task as f64 / *runs as f64,
            100.0 * *edge as f64 / (*task).max(1) as f64
        );
    }
    for (case, (method, runs, task, edge)) in &table {
        if repeat == 1 {
            assert_eq!(
                *task, 1,
                "{case:?} {method:?}: the faulty rank is not the top outlier"
            );
            assert_eq!(
                *edge, 1,
                "{case:?} {method:?}: the injected region is not in the top 5 edges"
            );
        } else {
            assert!(
                *task * 10 >= runs * 8,
                "{case:?} {method:?}: task recall below 80%"
            );
            assert!(
                *edge * 10 >= task * 8,
                "{case:?} {method:?}: edge recall below 80%"
            );
        }
    }
}

const RING: Case = Case {
    structure: "ring",
    ranks: 4,
    faulty: (0, 4),
    fault: "",
    region: "compute[MPI_Waitall@",
    clusters: None,
};

/// CPU_INTENSIVE, MEM_INTENSIVE and TRANS_STALL in one rank of a 4-rank
/// halo-exchange ring: the rank is the top outlier, the region before its
/// Allreduce among its abnormal edges, by k-medoids and nearest neighbour.
#[test]
fn ring_faults_are_isolated() {
    run_cases(&[
        Case {
            fault: "cpu",
            ..RING
        },
        Case {
            fault: "mem",
            ..RING
        },
        Case {
            fault: "stall",
            ..RING
        },
    ]);
}

/// HANG (the rank stops itself with SIGSTOP): the analysis runs on what
/// was recorded when no transition happened for 2 s.
#[test]
fn ring_hang_is_isolated() {
    run_cases(&[Case {
        fault: "hang",
        ..RING
    }]);
}

/// A master and 5 workers (two kinds of tasks, k = 2 given): a CPU loop
/// in one worker makes it the top outlier of the workers' cluster.
#[test]
fn master_worker_cpu_fault_is_isolated() {
    run_cases(&[Case {
        structure: "master",
        ranks: 6,
        faulty: (1, 6),
        fault: "cpu",
        region: "compute[MPI_Send@",
        clusters: Some(2),
    }]);
}
