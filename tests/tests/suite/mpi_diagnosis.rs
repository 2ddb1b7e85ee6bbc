//! Issue 17 on real MPICH ranks, the fast and exact part (the fault matrix
//! with its repetitions is `cargo xtask mpi-matrix`):
//!
//! * arguments passed on the stack are read (Sendrecv's source, Gather's
//!   and Scatter's roots, Reduce's root), and calls from Fortran are placed
//!   in the program (`file.f90:line`), not in MPICH's Fortran binding;
//! * a hung run names its culprit: a rank computing forever (C), a rank in
//!   an extra collective (Fortran), a dead peer (C, master/worker).

use std::path::Path;

use analyzer::{
    Capture,
    mpi::{self, Partners, Peer, Profiles, sites::Sites, waitfor},
};
use tests::{
    capture,
    mpi::{Fault, Job, build, record},
    privileged,
};

fn ready() -> bool {
    privileged()
        && tests::installed(
            &["mpicc", "mpif90", "mpiexec", "renice"],
            "apt packages mpich libmpich-dev gfortran",
        )
}

/// Records `job` with `fault` and returns the capture and its profiles.
fn run(dir: &Path, name: &str, job: &Job, fault: Fault) -> (Capture, Profiles) {
    let out = dir.join(format!("{name}.capture"));
    let o = record(job, fault, &out);
    if !fault.hangs() {
        assert!(
            o.status.is_some_and(|s| s.success()),
            "{name}: the job failed or hung: {:?}",
            o.status
        );
    }
    let cap = capture(&o.capture);
    let p = mpi::extract(&[&cap]).expect("profiles");
    (cap, p)
}

fn job(exe: &Path, ranks: u32, args: &[&str], limit_s: u64) -> Job {
    Job {
        exe: exe.to_path_buf(),
        args: args.iter().map(|s| s.to_string()).collect(),
        ranks,
        limit: std::time::Duration::from_secs(limit_s),
    }
}

/// Sendrecv's source (9th argument), Reduce's root (6th) and Bcast's root
/// from a C program; Gather's and Scatter's roots (7th) and every call
/// site in the program's own Fortran source from a Fortran one.
#[test]
fn issue_17_stack_arguments_and_fortran_call_sites() {
    if !ready() {
        return;
    }
    let _mpi = tests::mpi::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    // C: 4 ranks on a line, 20 iterations.
    let halo = build("mpi_halo", dir.path());
    let (_, p) = run(
        dir.path(),
        "halo",
        &job(&halo, 4, &["20", "4000"], 60),
        Fault::None,
    );
    assert_eq!(p.ranks.len(), 4);
    for r in &p.ranks {
        let partners = |f: &str| -> Vec<Partners> {
            r.calls
                .iter()
                .filter(|c| r.function_name(c) == f)
                .map(|c| c.partners)
                .collect()
        };
        let rank = r.rank as i32;
        let p2p = |dest: i32, source: i32| Partners::PointToPoint {
            dest: Some(dest),
            source: Some(source),
        };
        if (1..3).contains(&rank) {
            // Interior: shift right (to rank+1, from rank-1), then left.
            let want: Vec<Partners> = (0..20)
                .flat_map(|_| [p2p(rank + 1, rank - 1), p2p(rank - 1, rank + 1)])
                .collect();
            assert_eq!(partners("MPI_Sendrecv"), want, "rank {rank}");
        } else {
            assert!(partners("MPI_Sendrecv").is_empty(), "rank {rank}");
            assert_eq!(partners("MPI_Send").len(), 20);
            assert_eq!(partners("MPI_Recv").len(), 20);
        }
        let root0 = Partners::Collective {
            comm: Some(mpi::args::MPI_COMM_WORLD),
            root: Some(0),
            request: None,
        };
        assert_eq!(partners("MPI_Reduce"), vec![root0], "rank {rank}");
        assert_eq!(partners("MPI_Bcast"), vec![root0], "rank {rank}");
        assert_eq!(partners("MPI_Allreduce").len(), 4, "rank {rank}");
    }

    // Fortran: 2 ranks, 10 iterations.
    let coll = build("mpi_collectives", dir.path());
    let (cap, p) = run(
        dir.path(),
        "coll",
        &job(&coll, 2, &["10", "2000"], 60),
        Fault::None,
    );
    let mut sites = Sites::new(&[&cap]);
    for r in &p.ranks {
        let peers = |f: &str| -> Vec<Peer> {
            r.calls
                .iter()
                .filter(|c| r.function_name(c) == f)
                .map(|c| c.peer)
                .collect()
        };
        assert_eq!(
            peers("MPI_Gather"),
            vec![Peer::Root(0); 10],
            "rank {}",
            r.rank
        );
        assert_eq!(
            peers("MPI_Scatter"),
            vec![Peer::Root(0); 10],
            "rank {}",
            r.rank
        );
        // The parameters' broadcast from 0, then roots 0, 1, 0, 1, ...
        let mut bcast = vec![Peer::Root(0)];
        bcast.extend((0..10).map(|i| Peer::Root(i % 2)));
        assert_eq!(peers("MPI_Bcast"), bcast, "rank {}", r.rank);
        let reduce_roots: Vec<Option<i32>> = r
            .calls
            .iter()
            .filter(|c| r.function_name(c) == "MPI_Reduce")
            .map(|c| match c.partners {
                Partners::Collective { root, .. } => root,
                _ => None,
            })
            .collect();
        assert_eq!(reduce_roots, vec![Some(1); 10], "rank {}", r.rank);
        // Every call is placed in the program's source, none in the
        // binding library.
        for c in &r.calls {
            let label = sites.label(&r.host, r.pid, c.call_site);
            assert!(
                label.contains("mpi_collectives.f90:"),
                "rank {} {}: {label}",
                r.rank,
                r.function_name(c)
            );
        }
        // Init, Comm_rank, Comm_size, Bcast, 10 x 6 collectives, one
        // barrier, Finalize: one call each, the binding's C calls merged.
        assert_eq!(
            r.calls.len(),
            4 + 60 + 1 + 1,
            "rank {}: {:?}",
            r.rank,
            r.call_counts()
        );
    }
}

/// Three hangs, each stopped while it hangs: the culprit is the faulty
/// rank, with what it does, and nobody else.
#[test]
fn issue_17_hang_culprits_are_named() {
    if !ready() {
        return;
    }
    let _mpi = tests::mpi::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: [(&str, &[&str], Fault, &str); 3] = [
        (
            "mpi_halo",
            &["400", "4000"],
            Fault::Hang { rank: 2, iter: 10 },
            "computing",
        ),
        (
            "mpi_wavefront",
            &["200", "512"],
            Fault::Collective { rank: 1, iter: 5 },
            "MPI_Barrier",
        ),
        (
            "mpi_master",
            &["400", "200000"],
            Fault::Exit { rank: 2, iter: 5 },
            "exited",
        ),
    ];
    for (program, args, fault, says) in cases {
        let exe = build(program, dir.path());
        let (cap, p) = run(dir.path(), program, &job(&exe, 4, args, 6), fault);
        let mut sites = Sites::new(&[&cap]);
        let h = waitfor::analyze_sited(&p, None, &mut |r, a| sites.label(&r.host, r.pid, a));
        let text = mpi::report::hang_text(&h, &p, &mut sites);
        assert!(h.hung, "{program}: {text}");
        let culprits: Vec<u32> = h.culprits.iter().map(|c| c.rank).collect();
        assert_eq!(
            culprits,
            fault.rank().into_iter().collect::<Vec<_>>(),
            "{program}: {text}"
        );
        assert!(h.culprits[0].reason.contains(says), "{program}: {text}");
        // The culprit's call site is in the program's source.
        let source = if program == "mpi_wavefront" {
            ".f90:"
        } else {
            ".c:"
        };
        let at = text.lines().nth(2).unwrap_or_default();
        assert!(
            at.contains(source) || at.contains("mpi_fault.h:"),
            "{program}: {text}"
        );
    }
}

/// MPI ranks recorded under an overhead budget that detaches MPI functions
/// (a budget of 0.01%: any MPI call rate exceeds it): the recorder warns
/// when it happens, and `diagnose` draws no MPI verdict from the capture
/// (the ranks would seem to stop calling those functions), saying why,
/// rather than "nothing stands out" or a hung rank.
#[test]
fn mpi_calls_an_overhead_budget_detached_give_no_verdict() {
    use analyzer::diagnose::{AnalysisKind, Diagnosis, Status};
    if !ready() {
        return;
    }
    let exe = tests::fixture("mpi_nonblocking", None);
    let _mpi = tests::mpi::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("budget.capture");
    let run = tests::tracer(&[
        "record",
        "--mpi",
        "--overhead",
        "0.01%",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        "mpiexec",
        "-n",
        "2",
        exe.to_str().expect("utf8"),
        // About a second untraced: the budget's first look comes after
        // 250 ms of calls, well before the end.
        "20000",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("warning: the budget detached MPI functions"),
        "{}",
        run.stderr
    );
    let diag = tests::analyzer(&["diagnose", "--json", out.to_str().expect("utf8")]);
    let d: Diagnosis = serde_json::from_str(&diag.stdout).expect("a diagnosis");
    for kind in [AnalysisKind::Outliers, AnalysisKind::Hang] {
        let a = d.analysis(kind).expect("listed");
        assert_eq!(a.status, Status::NoData, "{a:#?}");
        assert!(
            a.reason
                .as_deref()
                .is_some_and(|r| r.contains("an overhead budget detached MPI_")),
            "{a:#?}"
        );
        assert!(a.findings.is_empty(), "{a:#?}");
    }
    assert_eq!(diag.status.code(), Some(0), "{}", diag.stdout);
}
