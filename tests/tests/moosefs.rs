//! A real MooseFS cluster (master, four chunkservers each in its own network
//! namespace with its own disk) recorded by one tracer per chunkserver with
//! no function probes at all (MooseFS's Debian binaries export none): clean
//! dd runs and one with packet loss on one chunkserver, and peer comparison
//! trained on the clean runs naming it (issue 16). Its own test binary, so no
//! other test runs beside it.

use std::{collections::BTreeMap, path::Path};

use analyzer::{Event, decode::syscall_name, peers};
use tests::{
    fs::{
        Cluster, ClusterConfig, FaultKind, FaultParams, LoadedRun, ProbeSet, RecordConfig,
        RecordMode, RunConfig, System, Workload, load_run, peers_config, run, score_run,
        server_stats,
    },
    privileged, tracer_bin,
};

/// Windows as the matrix measures them; 16 s runs with the fault from 4 s
/// leave 5 windows wholly under it, enough for k = 3 of the last 5.
const WINDOW_S: f64 = 4.0;
const SHIFT_S: f64 = 2.0;
const RUN_S: f64 = 16.0;
const FAULT_AFTER_S: f64 = 4.0;

fn record_dd(cluster: &Cluster, dir: &Path, fault: Option<(FaultKind, usize)>) -> LoadedRun {
    let config = RunConfig {
        workload: Workload::Dd,
        seconds: RUN_S,
        fault,
        fault_after: FAULT_AFTER_S,
        params: FaultParams::default(),
        record: Some(
            RecordConfig::new(tracer_bin(), System::Moosefs, ProbeSet::None)
                .expect("the empty probe set"),
        ),
    };
    run(cluster, &config, dir).unwrap_or_else(|e| panic!("run into {}: {e:?}", dir.display()));
    load_run(dir).unwrap_or_else(|e| panic!("reading {}: {e:?}", dir.display()))
}

fn diagnose(clean: &[(&Path, &LoadedRun)], trial: (&Path, &LoadedRun)) -> peers::Report {
    let cfg = peers_config(System::Moosefs, RecordMode::PerServer, WINDOW_S, SHIFT_S);
    let scored: Vec<_> = clean
        .iter()
        .map(|(dir, run)| score_run(run, dir, &cfg, 2 * cfg.k - 1).expect("clean run scores"))
        .collect();
    let thresholds = peers::train(&scored, &cfg).expect("thresholds");
    let trial_scored = score_run(trial.1, trial.0, &cfg, 1).expect("trial run scores");
    assert_eq!(trial_scored.servers.len(), 4, "one server per chunkserver");
    peers::diagnose(&trial_scored, &thresholds, cfg.k, 10)
}

/// Every chunkserver's capture holds its socket calls and CPU samples and
/// nothing was lost; the chunkservers share the work; with no function
/// probes the function metrics say they have no data (and why) instead of
/// scoring zeros; trained on two clean runs nobody stands out in a third;
/// trained on three, packet loss on one chunkserver names it alone.
// Clean chunkservers have bursts: one's file latency or run-queue delay
// 2-10 times its peers' for 6-12 s (a loop-device flush, writeback, a CPU
// taken for a while), a different one each run. Trained on two runs, each
// server on its own, a burst its own runs lacked named it in 24 of 360
// clean judgements (issue 16); the thresholds are pooled over the servers
// (`PeersConfig::pool`), 6 of 360, every fault still found.
// Chunkservers replicate to each other, so the healthy ones sending to the
// lossy one retransmit too. A retransmission between two servers is charged
// to the end the lossy paths share, not to its sender (issue 16: charged to
// the sender, the lossy run read "no server stands out" in 1 of 3 CI runs,
// and this test was ignored).
#[test]
fn moosefs_chunkservers_recorded_and_lossy_server_found() {
    if !privileged() {
        return;
    }
    let cluster = match Cluster::start(ClusterConfig::new(System::Moosefs)) {
        Ok(c) => c,
        Err(tests::fs::FsError::Missing { program }) => {
            eprintln!("skipped: {program} is not installed (run `sudo scripts/setup`)");
            assert!(
                std::env::var_os("EFTRACE_REQUIRE_ROOT").is_none(),
                "EFTRACE_REQUIRE_ROOT is set but {program} is missing"
            );
            return;
        }
        Err(e) => panic!("starting the cluster: {e:?}"),
    };
    let servers = cluster.servers().to_vec();
    assert_eq!(servers.len(), 4);
    let netns: Vec<&str> = servers.iter().map(|s| s.netns.as_str()).collect();
    assert_eq!(netns.len(), 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let dirs: Vec<_> = ["clean1", "clean2", "clean3", "packet-loss"]
        .iter()
        .map(|d| dir.path().join(d))
        .collect();

    let clean1 = record_dd(&cluster, &dirs[0], None);
    assert_eq!(clean1.info.tracers.len(), 4, "one tracer per chunkserver");
    assert!(clean1.info.result.bytes_written > 0 && clean1.info.result.bytes_read > 0);
    let mut bytes = Vec::new();
    for s in &clean1.info.servers {
        let cap = clean1.capture_of(s).expect("a capture per server");
        assert_eq!(cap.lost_records(), 0);
        assert!(cap.end.is_some(), "the tracer closed the capture");
        let mut calls: BTreeMap<String, u64> = BTreeMap::new();
        let (mut entries, mut samples, mut moved) = (0, 0, 0i64);
        for e in cap.events() {
            let e = e.expect("records decode");
            if e.header().pid != s.server.pid {
                continue;
            }
            match e {
                Event::Syscall(sc) => {
                    let name = syscall_name(sc.nr);
                    if sc.ret > 0 && ["read", "write", "writev"].contains(&name.as_str()) {
                        moved += sc.ret;
                    }
                    *calls.entry(name).or_default() += 1;
                }
                Event::Entry { .. } => entries += 1,
                Event::Sample(_) => samples += 1,
                _ => {}
            }
        }
        assert_eq!(entries, 0, "{}: no function probes", s.server.label);
        assert!(samples > 0, "{}: no CPU samples", s.server.label);
        for call in ["read", "write", "poll"] {
            assert!(
                calls.get(call).copied().unwrap_or(0) > 10,
                "{}: {call}: {calls:?}",
                s.server.label
            );
        }
        bytes.push(moved);
    }
    // Two copies of every chunk over four servers: each server moves a
    // share of the data. Shares are uneven for one file of a few chunks
    // (a pair of servers that holds the copies of one chunk moves the same
    // bytes: seen [1.22, 1.27, 0.40, 0.40] GB), so each share is only held
    // to a quarter of the mean: a server whose socket calls went unrecorded
    // would move next to nothing.
    let mean = bytes.iter().sum::<i64>() / 4;
    let lo = *bytes.iter().min().expect("4 servers");
    assert!(
        mean > 0 && lo >= mean / 4,
        "socket bytes per server: {bytes:?}"
    );

    let clean2 = record_dd(&cluster, &dirs[1], None);
    let clean3 = record_dd(&cluster, &dirs[2], None);
    let report = diagnose(
        &[(&dirs[0], &clean1), (&dirs[1], &clean2)],
        (&dirs[2], &clean3),
    );
    let text = peers::render::report_text(&report, peers::Distance::Manhattan);
    assert_eq!(
        report.verdict.outcome,
        peers::Outcome::NoneStandsOut,
        "{text}"
    );
    // The function metrics have no data, and say why. Beside them only
    // syscall-time may be silent: on a quiet host no system call of the
    // training runs reached its 67 ms in a window (the most was 65 ms),
    // which the report says. The kernel's own signals are compared, so
    // "no server stands out" is a verdict.
    for function_metric in [peers::Metric::Count, peers::Metric::Time] {
        let silent = report
            .verdict
            .no_data
            .iter()
            .find(|s| s.metric == function_metric)
            .unwrap_or_else(|| panic!("{function_metric} has data: {text}"));
        assert!(
            silent
                .reason
                .contains("the captures hold no function calls"),
            "{text}"
        );
    }
    for silent in &report.verdict.no_data {
        assert!(
            [
                peers::Metric::Count,
                peers::Metric::Time,
                peers::Metric::SyscallTime
            ]
            .contains(&silent.metric),
            "{}: {text}",
            silent.metric
        );
    }
    for compared in [
        peers::Metric::Retransmits,
        peers::Metric::SocketBytes,
        peers::Metric::CpuWait,
        peers::Metric::FileLatency,
    ] {
        assert!(report.verdict.compared.contains(&compared), "{text}");
    }
    assert!(text.contains("no data for count: "), "{text}");

    let lossy = record_dd(&cluster, &dirs[3], Some((FaultKind::PacketLoss, 1)));
    let stats = server_stats(&lossy);
    let retx: Vec<f64> = stats
        .iter()
        .map(|s| s.during.as_ref().expect("fault phase").retransmits)
        .collect();
    // The lossy server retransmits the most, charged to itself (issue 16:
    // a remote-address lookup once charged them to another server), and
    // far more than a typical peer. Its replication partner retransmits
    // too, and honestly: the ACKs it waits for from server2 are lost
    // (47.5/s against 24.2/s once, under load), so it is not held to half.
    let mut others: Vec<f64> = retx
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, r)| *r)
        .collect();
    others.sort_by(f64::total_cmp);
    let (median, most) = (others[others.len() / 2], others[others.len() - 1]);
    assert!(
        retx[1] > most && retx[1] > 2.0 * median.max(0.5),
        "retransmits/s while the fault was on: {retx:?}"
    );
    let report = diagnose(
        &[
            (&dirs[0], &clean1),
            (&dirs[1], &clean2),
            (&dirs[2], &clean3),
        ],
        (&dirs[3], &lossy),
    );
    let text = peers::render::report_text(&report, peers::Distance::Manhattan);
    assert_eq!(report.faulty, ["server2"], "{text}");
    assert_eq!(report.verdict.outcome, peers::Outcome::Faulty, "{text}");
    assert!(
        report.faulty_by_metric[&peers::Metric::Retransmits] == ["server2"],
        "{text}"
    );

    let stop = cluster.stop().expect("cleanup");
    assert!(stop < 60.0);
    for ns in netns {
        assert!(
            !Path::new(&format!("/run/netns/{ns}")).exists(),
            "{ns} remains"
        );
    }
}
