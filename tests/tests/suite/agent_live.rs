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

/// Learns a model of `ring` from three recorded normal runs (ports from
/// `base`), written to `DIR/model.json`.
fn learn_ring_model(dir: &Path, ring: &Path, base: u16) -> (GlobalModel, PathBuf) {
    let mut model = GlobalModel::new(Variant::Paper000);
    for i in 0..3 {
        let out = dir.join(format!("normal{i}.capture"));
        tests::record_ring(ring, &out, base + i * 5, None);
        for p in decompose_capture(&capture(&out), Variant::Paper000) {
            model.learn(&p);
        }
    }
    let model_path = dir.join("model.json");
    std::fs::write(&model_path, serde_json::to_vec(&model).expect("model json")).expect("model");
    (model, model_path)
}

/// An agent tracing `ring` and scoring it live against `model_path`.
fn ring_agent(dir: &Path, ring: &Path, model_path: &Path) -> Agent {
    let functions: Vec<String> = tests::RING_FUNCTIONS
        .iter()
        .map(|f| format!("{f:?}"))
        .collect();
    Agent::start(
        dir,
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
    )
}

/// Waits (at most 20 s) for a unit alert about the handler of `peer`.
fn alert_for_peer(agent: &Agent, peer: &str) -> serde_json::Value {
    let alerts = agent.state_dir.join("alerts.jsonl");
    let started = Instant::now();
    loop {
        if let Some(a) = unit_alerts(&alerts)
            .into_iter()
            .find(|a| a["detail"]["peer"] == peer)
        {
            return a;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no alert for the handler of {peer}: {:#?}\n{:#}\n{}",
            unit_alerts(&alerts),
            agent.status(),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A `/proc/PID/status` field.
fn proc_status(pid: u64, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
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
    let (model, model_path) = learn_ring_model(dir.path(), &ring, base);
    let agent = ring_agent(dir.path(), &ring, &model_path);
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
    let peer = format!("127.0.0.1:{}", faulty_base + 3);
    let alert = alert_for_peer(&agent, &peer);
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

    // On a loaded machine the analysis process may take seconds to start:
    // servers run before it evaluates would be half gone from its windows.
    agent.wait_for("the first evaluation", Duration::from_secs(30), |s| {
        s["analysis"]["evaluations"].as_u64().unwrap_or(0) >= 1
    });
    // Four alike: compared, nobody indicted.
    for mut c in paced_servers(&exe, &alike, 8) {
        assert!(c.wait().expect("server exits").success());
    }
    // Their calls stay in the 8 s window for 8 s after they end.
    agent.wait_for("three peer windows compared", Duration::from_secs(7), |s| {
        s["analysis"]["peer_windows"].as_u64().unwrap_or(0) >= 3
    });
    assert_eq!(server_alerts(&alerts), Vec::<String>::new());
    let features = agent.request(&["features"]);
    assert_eq!(
        features["version"],
        analyzer::live::LIVE_REPORT_VERSION,
        "{features:#}"
    );
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

/// Least privilege (issue 15): the live analysis runs in its own process,
/// as nobody, with no capability, no way to gain one, no supplementary
/// group and none of the agent's descriptors. Killed, it does not stop the
/// recording: a ring run meanwhile is recorded whole; it is started again,
/// the restart is counted, and the fault still raises its alert.
#[test]
fn the_analysis_process_is_unprivileged_and_restarted() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = fixture("ring", Some("ring_lp"));
    let base = tests::port_block(25);
    let (_, model_path) = learn_ring_model(dir.path(), &ring, base);
    // The model is root's alone: the process gets its bytes, not the file.
    std::fs::set_permissions(
        &model_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    let agent = ring_agent(dir.path(), &ring, &model_path);
    let status = agent.wait_for("the analysis process", Duration::from_secs(20), |s| {
        s["analysis"]["process"]["state"] == "idle"
    });
    let p = &status["analysis"]["process"];
    let pid = p["pid"].as_u64().expect("pid");
    assert_eq!(
        (p["user"].as_str(), p["uid"].as_u64()),
        (Some("nobody"), Some(65534))
    );
    assert_eq!(proc_status(pid, "Uid:"), "65534\t65534\t65534\t65534");
    assert_eq!(proc_status(pid, "Gid:"), "65534\t65534\t65534\t65534");
    assert_eq!(proc_status(pid, "Groups:"), "", "no supplementary group");
    for caps in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
        assert_eq!(proc_status(pid, caps), "0000000000000000", "{caps}");
    }
    assert_eq!(proc_status(pid, "NoNewPrivs:"), "1");
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("its descriptors")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    fds.sort();
    assert_eq!(fds, ["0", "1", "2"], "none of the agent's descriptors");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("its executable");
    assert_eq!(exe, tests::analyzer_bin().canonicalize().expect("analyzer"));

    // Killed: the agent goes on recording a normal run meanwhile.
    let before = agent.status()["records_total"].as_u64().unwrap_or(0);
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let normal = Command::new(&ring)
        .args(["4", "10", &tests::port_block(5).to_string()])
        .status()
        .expect("ring runs");
    assert!(normal.success());
    let status = agent.wait_for(
        "a restarted analysis process",
        Duration::from_secs(20),
        // Ready: idle, or already evaluating (on a loaded machine it may
        // never be seen idle between windows).
        |s| {
            s["analysis"]["restarts"] == 1
                && s["analysis"]["process"]["state"] != "starting"
                && s["analysis"]["process"]["state"].is_string()
                && s["analysis"]["process"]["pid"].as_u64() != Some(pid)
        },
    );
    assert_eq!(status["state"], "recording", "{status:#}");
    assert_eq!(
        status["sessions"], 1,
        "recording was never re-armed: {status:#}"
    );
    assert!(
        status["records_total"].as_u64() > Some(before),
        "records while the analysis was down: {status:#}"
    );
    let exit = status["analysis"]["last_exit"].as_str().unwrap_or_default();
    assert_eq!(exit, "was killed by signal 9", "{status:#}");

    // The fault raises its alert through the new process.
    let faulty_base = tests::port_block(5);
    let _ = Command::new(&ring)
        .args(["4", "10", &faulty_base.to_string(), "2"])
        .status()
        .expect("faulty ring runs");
    let alert = alert_for_peer(&agent, &format!("127.0.0.1:{}", faulty_base + 3));
    assert_eq!(alert["detail"]["score"], 1.0, "{alert:#}");
}
