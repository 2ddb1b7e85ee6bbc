//! The agent's live analysis end to end: a model learned from recorded
//! normal ring runs is loaded by `tracer agent`, which traces the ring
//! daemons as they start; a normal run raises no alert, the partial-receive
//! fault raises one for daemon 2's handler of its right-hand connection,
//! with a snapshot that scores the same way offline.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use analyzer::{
    model::GlobalModel,
    score::{Scoring, score_processes},
    units::{Variant, decompose_capture},
};
use tests::{Agent, capture, fixture, privileged};

fn unit_alerts(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("alert is JSON"))
        .filter(|a| a["kind"] == "unit")
        .collect()
}

#[test]
fn live_scores_raise_an_alert_for_the_partial_receive_fault_only() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // Its own copy: the agent traces every process of the executable.
    let ring = fixture("ring", Some("ring_agent"));
    let base = tests::port_block(25);
    let mut model = GlobalModel::new(Variant::Paper000);
    for i in 0..3 {
        let out = dir.path().join(format!("normal{i}.capture"));
        tests::record_ring(&ring, &out, base + i * 5, None);
        for p in decompose_capture(&capture(&out), Variant::Paper000) {
            model.learn(&p);
        }
    }
    let model_path = dir.path().join("model.json");
    std::fs::write(&model_path, serde_json::to_vec(&model).expect("model json")).expect("model");

    let functions: Vec<String> = tests::RING_FUNCTIONS
        .iter()
        .map(|f| format!("{f:?}"))
        .collect();
    let agent = Agent::start(
        dir.path(),
        &format!(
            r#"
[[target]]
exe = "{ring}"
[trace]
functions = [{functions}]
ring_size = "1MiB"
[recorder]
max_disk = "16MiB"
file_size = "2MiB"
file_age = "5s"
[analysis]
interval = "1s"
window = "20s"
model = "{model}"
alert_score = 0.5
snapshot_window = "30s"
"#,
            ring = ring.display(),
            functions = functions.join(", "),
            model = model_path.display(),
        ),
    );
    let alerts = agent.state_dir.join("alerts.jsonl");

    // A normal run under the agent: scored, and nothing to report.
    let status = Command::new(&ring)
        .args(["4", "10", &(base + 15).to_string()])
        .status()
        .expect("ring runs");
    assert!(status.success());
    agent.wait_for(
        "the normal run's units scored",
        Duration::from_secs(20),
        |s| s["analysis"]["units_scored"].as_u64() >= Some(10),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        unit_alerts(&alerts),
        Vec::<serde_json::Value>::new(),
        "a normal run raised alerts"
    );

    // The fault at daemon 2: its handler of the connection to daemon 3
    // (listening on base + 3) sees the reset.
    let faulty_base = tests::port_block(5);
    let _ = Command::new(&ring)
        .args(["4", "10", &faulty_base.to_string(), "2"])
        .status()
        .expect("faulty ring runs");
    let started = Instant::now();
    let peer = format!("127.0.0.1:{}", faulty_base + 3);
    let alert = loop {
        if let Some(a) = unit_alerts(&alerts)
            .into_iter()
            .find(|a| a["detail"]["peer"] == peer.as_str())
        {
            break a;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no alert for the handler of {peer}: {:#?}\n{}",
            unit_alerts(&alerts),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(alert["detail"]["score"], 1.0, "{alert:#}");
    assert_eq!(alert["detail"]["kind"], "handler", "{alert:#}");
    assert_eq!(alert["version"], 1);

    // The snapshot taken for the alert replays, and offline scoring of it
    // with the same model finds the same unit first.
    let snapshot = PathBuf::from(
        alert["snapshot"]
            .as_str()
            .unwrap_or_else(|| panic!("no snapshot with the alert: {alert:#}")),
    );
    let cap = capture(&snapshot);
    let scores = score_processes(
        &model,
        &cap,
        "snapshot",
        &decompose_capture(&cap, Variant::Paper000),
        Scoring::Nodes,
    );
    assert_eq!(
        scores[0].peer.as_deref(),
        Some(peer.as_str()),
        "{:?}",
        scores[0]
    );
    assert_eq!(scores[0].score, 1.0);
}

/// Starts `calls pace RATE SECONDS --name LABEL` for each (label, rate).
fn paced_servers(exe: &Path, servers: &[(&str, u32)], seconds: u32) -> Vec<Child> {
    servers
        .iter()
        .map(|(label, rate)| {
            Command::new(exe)
                .args([
                    "pace",
                    &rate.to_string(),
                    &seconds.to_string(),
                    "--name",
                    label,
                ])
                .stdout(Stdio::null())
                .spawn()
                .expect("calls pace starts")
        })
        .collect()
}

fn server_alerts(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("alert is JSON"))
        .filter(|a| a["kind"] == "server")
        .map(|a| a["summary"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Peer comparison live: thresholds trained on four identical servers
/// (recorded with `tracer record`) are loaded by the agent; four servers
/// alike raise nothing, and one doing three times the calls of its peers is
/// indicted, by its command-line label, and only it.
#[test]
fn live_peer_comparison_indicts_the_server_unlike_its_peers() {
    use analyzer::peers::{CaptureSource, Metric, PeersConfig, ServerSplit, analyze, train};
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = fixture("calls", Some("calls_peers"));
    let labels = ["s0", "s1", "s2", "s3"];

    // Training: one clean run of the four, recorded.
    let train_capture = dir.path().join("train.capture");
    let exe_s = exe.display().to_string();
    let out_s = train_capture.display().to_string();
    let rec = tests::Background::start(&[
        "record",
        "--exe",
        &exe_s,
        "-f",
        "leaf",
        "--no-syscalls",
        "--sample-hz",
        "0",
        "-o",
        &out_s,
    ]);
    let alike: Vec<(&str, u32)> = labels.iter().map(|l| (*l, 1500)).collect();
    for mut c in paced_servers(&exe, &alike, 10) {
        assert!(c.wait().expect("server exits").success());
    }
    assert!(rec.stop("INT").success());
    let cfg = PeersConfig {
        window_ns: 2_000_000_000,
        shift_ns: 1_000_000_000,
        k: 2,
        metrics: vec![Metric::Count],
        min_calls: 10.0,
        // The suite runs beside floods on two cores: a server starved for
        // half a second shifts ~750 calls between two windows. The server
        // at three times the rate is 6000 calls a window away.
        min_threshold: 1500.0,
        split: ServerSplit::PerProcess {
            label_arg: Some("--name".into()),
        },
        ..PeersConfig::default()
    };
    let cap = capture(&train_capture);
    let scored = analyze(
        "train",
        &[CaptureSource {
            path: &train_capture,
            label: "train",
            capture: &cap,
        }],
        &cfg,
        2 * cfg.k - 1,
    )
    .expect("training run analyses");
    let thresholds = train(&[scored], &cfg).expect("thresholds");
    let thresholds_path = dir.path().join("thresholds.json");
    std::fs::write(
        &thresholds_path,
        serde_json::to_vec(&thresholds).expect("json"),
    )
    .expect("write thresholds");

    let agent = Agent::start(
        dir.path(),
        &format!(
            r#"
[[target]]
exe = "{exe}"
[trace]
functions = ["leaf"]
syscalls = false
ring_size = "1MiB"
[recorder]
max_disk = "32MiB"
file_size = "4MiB"
file_age = "5s"
[budget]
max_events_per_second = 0
max_cpu_percent = 0.0
[analysis]
interval = "1s"
window = "8s"
peers_thresholds = "{thresholds}"
"#,
            exe = exe.display(),
            thresholds = thresholds_path.display(),
        ),
    );
    let alerts = agent.state_dir.join("alerts.jsonl");
    let windows = |agent: &Agent| {
        agent.status()["analysis"]["peer_windows"]
            .as_u64()
            .unwrap_or(0)
    };

    // Four alike: compared, nobody indicted.
    for mut c in paced_servers(&exe, &alike, 8) {
        assert!(c.wait().expect("server exits").success());
    }
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        windows(&agent) >= 3,
        "too few peer windows compared: {:#}\n{}",
        agent.status(),
        agent.log()
    );
    assert_eq!(server_alerts(&alerts), Vec::<String>::new());
    let features = agent.request(&["features"]);
    assert_eq!(features["version"], 1, "{features:#}");
    assert_eq!(features["compared"], true, "{features:#}");

    // s2 makes three times the calls of its peers.
    let unlike: Vec<(&str, u32)> = labels
        .iter()
        .map(|l| (*l, if *l == "s2" { 4500 } else { 1500 }))
        .collect();
    let mut servers = paced_servers(&exe, &unlike, 10);
    let started = Instant::now();
    let indicted = loop {
        let found = server_alerts(&alerts);
        if !found.is_empty() {
            break found;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "nobody indicted: {:#}\n{}",
            agent.request(&["features"]),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for c in &mut servers {
        assert!(c.wait().expect("server exits").success());
    }
    std::thread::sleep(Duration::from_secs(2));
    let all = server_alerts(&alerts);
    assert!(indicted[0].starts_with("s2 "), "{indicted:?}");
    assert!(
        all.iter().all(|a| a.starts_with("s2 ")),
        "a server alike its peers was indicted: {all:?}"
    );
}
