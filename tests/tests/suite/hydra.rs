//! Model-based localization (paper 000) on a real process manager: MPICH's
//! Hydra (`mpiexec.hydra` + one `hydra_pmi_proxy` per "host"), rebuilt with
//! symbols by `scripts/hydra-build`, running `mpiexec -n 4` of a small MPI
//! program, two ranks per proxy. Normal runs are learned and calibrated; a
//! fresh normal run must score low, and in a run where one rank is killed
//! the earliest anomaly must be its proxy's handler of the PMI connection,
//! no earlier than the kill, and the `pmi_cb` that reads the dead rank's
//! EOF and kills the rank's sibling must be among that proxy's anomalies.
//!
//! Two choices make the proxies' connections visible to the tracer, which
//! marks only descriptors made by socket()/accept() as sockets: the launcher
//! `fixtures/hydra/launch.sh` stands in for ssh, so each proxy connect()s to
//! mpiexec (the fork launcher passes it a socketpair instead), and
//! `-pmi-port` makes ranks connect to a proxy's PMI port (the default PMI_FD
//! is a socketpair too). Stdout/stderr of ranks are pipes and stay unseen.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use analyzer::{
    model::GlobalModel,
    score::{DifferenceKind, Ranking, ScoreReport, Scoring, UnitScore, score_processes},
    units::{UnitKind, Variant, decompose_capture},
};
use tests::{Background, capture, hydra_bin, privileged};

/// What is probed in both executables (every pattern must match in each):
/// the demux loop, the socket helpers, every callback, the PMI/pmcd layer.
const FUNCTIONS: &[&str] = &["HYDT_dmx*", "HYDU_sock_*", "*_cb", "HYD_pmcd_*", "main"];

/// Measured (000 scoring, 8 and 12 runs learned): a fresh normal run's maximum is
/// 0.372 (a proxy's launch handler), a killed rank's run's first unit
/// 0.73-0.76 (the other proxy's aborted loop).
const THRESHOLD: f64 = 0.5;

/// Normal runs learned. Calibration holds runs out in turn, so an
/// interleaving must occur in the learned runs to be inside the normal
/// range: measured over 18 normal runs, models of 5 runs left a rare
/// start-up handler of mpiexec outside it in 8 of 52 other runs, models of 8
/// runs in none of 40 (2 had a late unit outside it). Beside the rest of the
/// suite, 8 runs still missed it once in 7 (an mpiexec `control_cb` that
/// deregisters a descriptor during start-up, 0.397 against 0.148): 12.
const LEARNED: usize = 12;

/// Compiles the MPI fixture with mpicc.
fn mpi_program(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hydra/allreduce.c");
    let out = dir.join("allreduce");
    let status = Command::new("mpicc")
        .args(["-O2", "-g", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("mpicc runs (scripts/hydra-build installs libmpich-dev)");
    assert!(status.success(), "compiling {}", src.display());
    out
}

/// The pid of the rank whose parent is the proxy started with `--proxy-id
/// ID`, and that proxy's pid, once both exist.
fn rank_of_proxy(id: u32, deadline: Instant) -> Option<(u32, u32)> {
    let tail = format!("--proxy-id\0{id}\0");
    while Instant::now() < deadline {
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // comm is parenthesised; ppid is the second field after it.
            let Some((head, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            if !head.ends_with("(allreduce") {
                continue;
            }
            let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{ppid}/cmdline")).unwrap_or_default();
            if cmdline.ends_with(tail.as_bytes()) {
                return Some((pid, ppid));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The kill of a rank: the pid of the proxy that owned it, and the wall
/// clock (ns since the epoch) just before the signal was sent.
struct Kill {
    owner: u32,
    before_ns: u64,
}

/// Records one `mpiexec -n 4` run on two proxies, two ranks each; with
/// `kill`, a rank of proxy 1 is killed with SIGKILL 750 ms in. (With one rank
/// per proxy the proxy may see the death only on the rank's stdout/stderr
/// pipes, whose end looks like a normal exit, and leave its loop before it
/// reads the PMI socket; the sibling keeps it in the loop.) Returns the
/// capture and, for a killed run, the kill.
fn hydra_run(
    bin: &Path,
    program: &Path,
    dir: &Path,
    name: &str,
    kill: bool,
) -> (PathBuf, Option<Kill>) {
    let out = dir.join(format!("{name}.capture"));
    let proxy = bin.join("hydra_pmi_proxy").display().to_string();
    let mpiexec = bin.join("mpiexec.hydra");
    let mut args = vec![
        "record".to_string(),
        "--sample-hz".into(),
        "0".into(),
        "--no-follow".into(),
        "--exe".into(),
        proxy,
        "--exe".into(),
        mpiexec.display().to_string(),
    ];
    for f in FUNCTIONS {
        args.extend(["-f".to_string(), f.to_string()]);
    }
    args.extend(["-o".into(), out.display().to_string()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let tracer = Background::start(&refs);

    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hydra/launch.sh");
    let mut run = Command::new("timeout");
    run.args(["-s", "KILL", "30"])
        .arg(&mpiexec)
        .args(["-launcher", "ssh", "-launcher-exec"])
        .arg(&launcher)
        .args(["-pmi-port", "-hosts", "h1,h2", "-n", "4", "-ppn", "2"])
        .arg(program)
        .arg("30")
        .stdout(std::process::Stdio::null());
    let mut child = run.spawn().expect("mpiexec starts");
    let mut owner = None;
    if kill {
        let start = Instant::now();
        let (rank, proxy) = rank_of_proxy(1, start + Duration::from_secs(10))
            .expect("proxy 1 started its rank within 10 s");
        std::thread::sleep(Duration::from_millis(750).saturating_sub(start.elapsed()));
        let before_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let status = Command::new("kill")
            .args(["-9", &rank.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "killing rank {rank}");
        owner = Some(Kill {
            owner: proxy,
            before_ns,
        });
    }
    let status = child.wait().expect("mpiexec exits");
    assert_ne!(
        status.code(),
        None,
        "mpiexec hung and was killed by timeout"
    );
    if !kill {
        assert!(status.success(), "a normal mpiexec run failed: {status}");
    }
    let stopped = tracer.stop("INT");
    assert!(stopped.success(), "tracer: {stopped}");
    (out, owner)
}

fn table(scores: &[UnitScore]) -> String {
    scores
        .iter()
        .take(10)
        .enumerate()
        .map(|(i, s)| {
            let why: Vec<_> = s.differences.iter().take(2).map(|d| &d.path).collect();
            let evidence: Vec<_> = s
                .evidence
                .iter()
                .map(|e| {
                    serde_json::to_value(e)
                        .ok()
                        .and_then(|v| v["kind"].as_str().map(str::to_string))
                        .unwrap_or_default()
                })
                .collect();
            format!(
                "{:2} {:.3}{} (normal {:?}) t={:.3} deviated {:.6} {}[{}] {:?} {:?} {:?}\n",
                i + 1,
                s.score,
                if s.anomalous { "!" } else { " " },
                s.normal,
                s.t_s,
                s.deviated_s,
                s.comm,
                s.pid,
                s.kind,
                evidence,
                why
            )
        })
        .collect()
}

/// A normal run scores below the threshold, and none of its PMI handlers
/// behaves as no normal run did.
/// When a rank is killed, the affected proxy is named first, and its
/// earliest anomaly is a handler of the PMI connection, dated no earlier
/// than the kill, where the dead rank's descriptors close: the proxy
/// deregisters the rank's stdout/stderr pipes (`stdoe_cb`), then reads the
/// PMI socket's EOF (`pmi_cb`, which deregisters and closes the socket and
/// signals the sibling: calls no normal `pmi_cb` makes). Both come out of
/// one wake-up of its loop, pipes first (the kernel closes a dead process's
/// descriptors in order), and pipes are no sockets, so their calls stay in
/// the PMI connection's unit before; whichever comes first, the PMI close
/// is among the proxy's anomalies. The highest score goes to a unit the
/// abort cascade reached later.
#[test]
fn a_killed_rank_shows_first_in_its_proxys_pmi_handler() {
    if !privileged() {
        return;
    }
    let Some(bin) = hydra_bin() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let program = mpi_program(dir.path());
    let normal: Vec<_> = (0..LEARNED)
        .map(|i| hydra_run(&bin, &program, dir.path(), &format!("normal{i}"), false).0)
        .collect();
    let (trial, _) = hydra_run(&bin, &program, dir.path(), "trial", false);
    let (killed, kill) = hydra_run(&bin, &program, dir.path(), "killed", true);
    let kill = kill.expect("the killed run names the proxy");
    let owner = kill.owner;

    let variant = Variant::Paper000;
    let (model, runs, calibration) = tests::learn_calibrated(&normal, variant);
    // Sizes like the paper's Table 1 (per process, global), for the notes.
    let json_len = |m: &GlobalModel| serde_json::to_vec(m).map_or(0, |v| v.len());
    for p in &runs[0] {
        let mut one = GlobalModel::new(variant);
        one.learn(p);
        eprintln!(
            "process model of {}[{}]: {} bytes",
            p.comm,
            p.pid,
            json_len(&one)
        );
    }
    eprintln!(
        "global model of {} processes in {} groups: {} bytes",
        model.groups.iter().map(|g| g.processes).sum::<u32>(),
        model.groups.len(),
        json_len(&model)
    );
    assert!(calibration.folds >= 2, "{calibration:?}");
    assert_eq!(
        model.groups.len(),
        2,
        "mpiexec and the proxies are two roles (the proxies share one)"
    );
    let score = |path: &Path, name: &str| {
        let cap = capture(path);
        score_processes(
            &model,
            &cap,
            name,
            &decompose_capture(&cap, variant),
            Scoring::Nodes,
        )
    };

    let report = |name: &str, units: Vec<UnitScore>, ranking| {
        ScoreReport::new(variant, Scoring::Nodes, ranking, &[name.to_string()], units)
    };
    let trial_scores = score(&trial, "trial");
    eprintln!("normal run, top 10:\n{}", table(&trial_scores));
    assert!(
        trial_scores[0].score < THRESHOLD,
        "a normal run scores {}: {:?}",
        trial_scores[0].score,
        trial_scores[0]
    );
    // As `model score` reports it: with the processes' repeated deviations.
    let trial_report = report("trial", trial_scores, Ranking::Evidence);
    let outside: Vec<_> = trial_report.units.iter().filter(|s| s.anomalous).collect();
    eprintln!(
        "anomalous in the normal run:\n{}",
        table(&outside.iter().map(|s| (*s).clone()).collect::<Vec<_>>())
    );
    // A rare interleaving may still be new (see LEARNED); the PMI traffic
    // of a normal run, where the fault will show, may not.
    let pmi = |s: &&UnitScore| {
        s.kind == UnitKind::Handler
            && s.connection
                .as_deref()
                .is_some_and(|c| c.contains("pmi_listen_cb"))
    };
    assert!(
        !outside.iter().any(pmi),
        "a normal run's PMI handler behaves as no normal run did: {outside:#?}"
    );

    let killed_scores = score(&killed, "killed");
    let by_score = report("killed", killed_scores.clone(), Ranking::Score);
    eprintln!(
        "killed rank of proxy {owner}, top 10 by score:\n{}",
        table(&by_score.units)
    );
    // The abort cascade still makes the most suspect unit of the run.
    assert!(
        by_score.units[0].score > THRESHOLD,
        "{:?}",
        by_score.units[0]
    );
    let by_evidence = report("killed", killed_scores, Ranking::Evidence);
    let ours: Vec<UnitScore> = by_evidence
        .units
        .iter()
        .take_while(|u| u.anomalous && u.pid == owner)
        .cloned()
        .collect();
    eprintln!(
        "{}\nfirst by evidence (the proxy's own anomalies):\n{}",
        by_evidence.summary,
        table(&by_evidence.units)
    );
    // The affected proxy, which deviated first, is named first.
    assert_eq!(
        by_evidence.suspects.first().map(|s| s.pid),
        Some(owner),
        "{:#?}",
        by_evidence.suspects
    );
    assert!(!ours.is_empty(), "{:#?}", by_evidence.units[0]);

    let earliest = by_evidence
        .earliest_in("killed")
        .expect("the killed run has anomalous units");
    eprintln!(
        "earliest anomaly: {}",
        table(std::slice::from_ref(earliest))
    );
    assert_eq!(earliest.pid, owner, "{earliest:#?}");
    assert_eq!(earliest.kind, UnitKind::Handler, "{earliest:#?}");
    assert!(pmi(&earliest), "not the PMI connection: {earliest:#?}");
    // Where the fault began, not before: a unit dated before the kill is a
    // false anomaly in time, however right its process.
    assert!(
        earliest.deviated_wall_ns >= kill.before_ns,
        "dated {} ms before the kill: {earliest:#?}",
        (kill.before_ns - earliest.deviated_wall_ns) as f64 / 1e6
    );
    let deregisters = |u: &UnitScore| {
        u.differences.iter().any(|d| {
            d.kind != DifferenceKind::Missing
                && (d.path.contains("HYDT_dmx_deregister_fd@pmi_cb")
                    || d.path.contains("HYDT_dmx_deregister_fd@stdoe_cb"))
        })
    };
    assert!(
        deregisters(earliest),
        "not the dead rank's descriptors closing: {earliest:#?}"
    );
    // The PMI close: among the proxy's anomalies, after the kill.
    let close = ours.iter().find(|u| {
        pmi(u)
            && u.differences.iter().any(|d| {
                d.kind == DifferenceKind::Unexpected
                    && d.path.contains("HYDT_dmx_deregister_fd@pmi_cb")
            })
    });
    let close =
        close.unwrap_or_else(|| panic!("no PMI close among the proxy's anomalies: {ours:#?}"));
    assert!(close.deviated_wall_ns >= kill.before_ns, "{close:#?}");
}
