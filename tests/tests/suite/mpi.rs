//! MPI profiles with no relink and interference detection (paper 002) on
//! real MPICH ranks: uprobes on `libmpich.so.12:MPI_*` with argument
//! registers, profiles checked call by call against what the fixture
//! programs do, then K(p, l) learned from a clean and a CPU-hogged run and
//! applied to fresh runs and to a run of another problem size.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
};

use analyzer::mpi::{self, LearnConfig, Peer, Profiles};
use tests::{Background, capture, fixture, privileged};

const MPI_MAX: u32 = 0x5800_0001;
const MPI_SUM: u32 = 0x5800_0003;
const MPI_COMM_WORLD: u32 = 0x4400_0000;

/// A background CPU hog on core 1, killed (its whole process group) on drop.
struct Hog(Option<Child>);

#[derive(Clone, Copy, Debug)]
enum Load {
    None,
    /// `stress-ng --cpu 1` for the whole run.
    Continuous,
    /// stress-ng for 0.4 s, idle for 0.4 s, repeated.
    OnOff,
}

impl Hog {
    fn start(load: Load) -> Self {
        use std::os::unix::process::CommandExt as _;
        // Same niceness as the ranks (see `mpi_run`), so the hog takes its
        // fair half of core 1 whatever else runs on this shared machine.
        let script = match load {
            Load::None => return Self(None),
            Load::Continuous => "exec stress-ng --cpu 1 -q --timeout 120",
            Load::OnOff => "while :; do timeout 0.4 stress-ng --cpu 1 -q; sleep 0.4; done",
        };
        let child = Command::new("nice")
            .args(["-n", "-19", "taskset", "-c", "1", "sh", "-c", script])
            .process_group(0)
            .spawn()
            .expect("hog starts");
        // Let stress-ng reach its busy loop before the ranks start.
        std::thread::sleep(std::time::Duration::from_millis(200));
        Self(Some(child))
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
        }
    }
}

/// Records one `mpiexec -n RANKS` run of `exe ARGS` and returns the capture.
fn mpi_run(
    dir: &Path,
    name: &str,
    exe: &Path,
    ranks: u32,
    args: &[&str],
    functions: &[&str],
    load: Load,
) -> PathBuf {
    let out = dir.join(format!("{name}.capture"));
    let tracer = Background::mpi_ranks(exe, &out, functions);
    let hog = Hog::start(load);
    // Two ranks pinned to the two cores for anything timed (oversubscribed
    // ranks busy-poll and make times meaningless); `nice -19` keeps other
    // work on this shared machine from dominating the computation times.
    let mut cmd = Command::new("timeout");
    cmd.args(["-s", "KILL", "60", "nice", "-n", "-19", "mpiexec", "-n"])
        .arg(ranks.to_string());
    if ranks <= 2 {
        cmd.args(["-bind-to", "core"]);
    }
    let status = cmd
        .arg(exe)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("mpiexec runs");
    drop(hog);
    assert!(status.success(), "{name}: mpiexec failed: {status}");
    let status = tracer.stop("INT");
    assert!(status.success(), "{name}: tracer failed: {status}");
    out
}

fn profiles_of(path: &Path) -> Profiles {
    let cap = capture(path);
    mpi::extract(&[&cap]).expect("profiles")
}

/// (function, peer) of every call of `rank`, in order.
fn calls(p: &Profiles, rank: u32) -> Vec<(String, Peer)> {
    let r = p
        .rank(rank)
        .unwrap_or_else(|| panic!("rank {rank} missing"));
    r.calls
        .iter()
        .map(|c| (r.function_name(c).to_string(), c.peer))
        .collect()
}

/// What `mpi_irregular.c` calls on rank `r` of `size`, in order.
fn irregular_expected(r: i32, size: i32, iters: i32) -> Vec<(String, Peer)> {
    let mut out: Vec<(String, Peer)> = vec![
        ("MPI_Init".into(), Peer::None),
        ("MPI_Comm_rank".into(), Peer::None),
        ("MPI_Comm_size".into(), Peer::None),
    ];
    let mut call = |f: &str, p: Peer| out.push((f.to_string(), p));
    for i in 0..iters {
        if i % 3 == 0 {
            call("MPI_Bcast", Peer::Root((i / 3) % size));
        }
        if size > 1 {
            let d = 1 + i % (size - 1);
            call("MPI_Irecv", Peer::Rank((r - d + size) % size));
            call("MPI_Send", Peer::Rank((r + d) % size));
            call("MPI_Wait", Peer::None);
            if i % 2 == 0 {
                if r == 0 {
                    call("MPI_Send", Peer::Rank(size - 1));
                }
                if r == size - 1 {
                    call("MPI_Recv", Peer::Rank(0));
                }
            }
        }
        if i % 4 == 0 {
            call("MPI_Allreduce", Peer::Op(MPI_MAX));
        }
        if i % 5 == 0 {
            call("MPI_Reduce", Peer::Op(MPI_SUM));
        }
        if i % 7 == 0 {
            call("MPI_Barrier", Peer::Comm(MPI_COMM_WORLD));
        }
    }
    call("MPI_Finalize", Peer::None);
    out
}

/// Four ranks of an irregular program, with the MPI families it uses and
/// some it does not (communicator and datatype calls, which MPICH could
/// make internally) probed: each rank's profile is exactly the program's
/// call sequence (functions, peers from the argument registers, nothing
/// else), ranks come from Hydra's PMI_RANK, and the export tables hold every
/// call. (All 619 `MPI_*` work too but take up to a minute to attach on a
/// loaded machine.)
#[test]
fn irregular_profile_matches_the_program_call_by_call() {
    if !privileged()
        || !tests::installed(
            &["mpicc", "mpiexec", "stress-ng", "taskset"],
            "apt packages mpich libmpich-dev stress-ng",
        )
    {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = fixture("mpi_irregular", None);
    let iters = 30;
    let path = mpi_run(
        dir.path(),
        "irregular",
        &exe,
        4,
        &[&iters.to_string(), "2000"],
        &[
            "MPI_Init*",
            "MPI_Finalize*",
            "MPI_Comm_*",
            "MPI_Type_*",
            "MPI_*[Ss]end*",
            "MPI_*[Rr]ecv*",
            "MPI_Wait*",
            "MPI_*[Cc]ast*",
            "MPI_*[Rr]educe*",
            "MPI_*[Bb]arrier",
        ],
        Load::None,
    );
    let p = profiles_of(&path);
    assert_eq!(
        p.ranks.len(),
        4,
        "{:?}",
        p.ranks.iter().map(|r| r.rank).collect::<Vec<_>>()
    );
    let host = capture(&path).header.host;
    for r in 0..4 {
        let prof = p.rank(r).expect("rank");
        assert_eq!(prof.rank_source, mpi::RankSource::Environment);
        assert_eq!(prof.size, Some(4));
        assert_eq!(prof.host, host);
        assert_eq!(prof.unfinished, 0);
        assert_eq!(
            calls(&p, r),
            irregular_expected(r as i32, 4, iters),
            "rank {r}"
        );
        // Computation + communication never exceed the rank's wall time.
        let first = prof.calls.first().expect("calls").start_ns;
        let last = prof.calls.last().expect("calls");
        let wall = last.start_ns + last.comm_ns - first;
        let busy: u64 = prof.calls.iter().map(|c| c.compute_ns + c.comm_ns).sum();
        assert!(busy <= wall, "rank {r}: {busy} > {wall}");
    }

    let mut jsonl = Vec::new();
    mpi::write_jsonl(&p, &mut jsonl).expect("jsonl");
    assert_eq!(
        String::from_utf8_lossy(&jsonl).lines().count(),
        p.total_calls()
    );
    let pq = dir.path().join("irregular.parquet");
    mpi::write_parquet(&p, std::fs::File::create(&pq).expect("create")).expect("parquet");
    let bytes = std::fs::read(&pq).expect("read");
    assert!(bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"));
}

const STENCIL: &[&str] = &[
    "MPI_Init",
    "MPI_Finalize",
    "MPI_Comm_rank",
    "MPI_Comm_size",
    "MPI_Isend",
    "MPI_Irecv",
    "MPI_Waitall",
    "MPI_Allreduce",
];

/// Learn on a clean and a continuously hogged run (hog on core 1), then
/// fresh runs: the hogged processor's metric is near 0 clean, clearly
/// positive with an on-off hog and larger with a continuous one; the same
/// model orders the three runs of another problem size the same way. The
/// unhogged processor gains nothing in learning and is left out.
///
/// Bound on clean runs of the learned configuration: m < 0.15 (0.005–0.131
/// over 10 quiet runs, on-off never below 0.3); another problem size:
/// ordering only (clean 0.04–0.29).
///
/// Ignored by default: it measures wall-clock computation times, and on a
/// 2-core VM shared with other builds (load average 20–30) their
/// preemptions of one rank are themselves interference, as large as the
/// hog's; the ordering then flips in about one run in three. Run it on a
/// quiet machine: `cargo xtask test -- --ignored cpu_hog`.
#[test]
#[ignore = "timed: needs a quiet 2-core machine"]
fn cpu_hog_is_detected_and_ordered_on_the_hogged_processor() {
    if !privileged()
        || !tests::installed(
            &["mpicc", "mpiexec", "stress-ng", "taskset"],
            "apt packages mpich libmpich-dev stress-ng",
        )
    {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = fixture("mpi_stencil", None);
    // 800 iterations of ~1.6 ms of cache-resident computation (2000 cells
    // fit in L1/L2: memory-bound work would measure other tenants' memory
    // traffic instead of the hog).
    let run = |name: &str, cells: &str, load: Load| {
        let path = mpi_run(
            dir.path(),
            name,
            &exe,
            2,
            &["800", cells, "1000"],
            STENCIL,
            load,
        );
        let p = profiles_of(&path);
        for r in 0..2 {
            // Init, Comm_rank, Comm_size, 6 calls per iteration, Finalize.
            let c = calls(&p, r);
            assert_eq!(c.len(), 4 + 6 * 800, "{name} rank {r}");
            let other = Peer::Rank(1 - r as i32);
            assert_eq!(c.iter().filter(|(_, peer)| *peer == other).count(), 4 * 800);
        }
        p
    };
    let clean = run("learn-clean", "2000", Load::None);
    let hogged = run("learn-hog", "2000", Load::Continuous);
    // The processor under the hog: the rank bound to core 1.
    let victim = hogged
        .ranks
        .iter()
        .find(|r| r.cpus == [1])
        .unwrap_or_else(|| {
            panic!(
                "no rank ran on core 1 only (mpiexec -bind-to core): {:?}",
                hogged.ranks.iter().map(|r| &r.cpus).collect::<Vec<_>>()
            )
        })
        .rank;
    let model = mpi::learn(&[&clean], &[&hogged], &LearnConfig::default()).expect("learns");
    for (rank, seqs) in model.sequences() {
        assert!(seqs.len() >= 3, "rank {rank}: {seqs:?}");
        // The stencil's period is 6 calls: every typical sequence is whole periods.
        assert!(
            seqs.iter().all(|s| s.len() % 6 == 0),
            "rank {rank}: {seqs:?}"
        );
    }
    let learned = model.processor(victim).expect("victim in the model");
    assert!(learned.sequences.iter().any(|s| s.used), "{learned:?}");

    // Every run first, then the checks, so a failure still shows the whole
    // table; with EFTRACE_MPI_RESULTS=FILE the rows are appended there too
    // (`cargo xtask bench-mpi` repeats this test and summarizes them).
    let mut rows = Vec::new();
    for (size, cells) in [("same", "2000"), ("half", "1000")] {
        for (name, load) in [
            ("clean", Load::None),
            ("on-off", Load::OnOff),
            ("continuous", Load::Continuous),
        ] {
            let d = mpi::detect(&model, &run(&format!("{name}-{cells}"), cells, load));
            eprintln!("{size} size, {name}:\n{}", mpi::report::text(&d));
            rows.push((size, name, d.metric(victim).expect("victim metric")));
        }
    }
    if let Some(path) = std::env::var_os("EFTRACE_MPI_RESULTS") {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("results file");
        for (size, name, m) in &rows {
            writeln!(f, "{size}\t{name}\t{m:.4}").expect("write results");
        }
    }
    for (i, size) in ["same", "half"].iter().enumerate() {
        let (c, o, f) = (rows[3 * i].2, rows[3 * i + 1].2, rows[3 * i + 2].2);
        // A clean run of the learned configuration stays near 0; another
        // problem size reuses thresholds learned for this one, so only the
        // ordering is asked of it (measured quiet: clean up to 0.29 there).
        if i == 0 {
            assert!(c < 0.15, "{size} size: clean run metric {c}: {rows:?}");
        }
        assert!(f > 0.6, "{size} size: continuous hog metric {f}: {rows:?}");
        assert!(
            c < o && o < f,
            "{size} size: clean {c}, on-off {o}, continuous {f}: {rows:?}"
        );
    }
}
