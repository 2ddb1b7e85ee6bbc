//! `tracer agent` end to end: the flight recorder, snapshots, the control
//! socket, configuration errors, load shedding, and what it trusts (issue
//! 15: decoy targets, pid files, its state directory), on real processes (the
//! `calls` fixture, each test under its own executable name so agents of
//! tests running side by side never see each other's processes).

use std::{
    collections::BTreeMap,
    io::Write as _,
    os::unix::{
        fs::{MetadataExt as _, PermissionsExt as _},
        process::CommandExt as _,
    },
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Mutex,
    time::Duration,
};

use analyzer::{Capture, Event};
use serde_json::Value;
use tests::{Agent, capture, entries_by_function, events, fixture, privileged, tracer};

/// The flood tests each load both cores; side by side they would measure
/// each other rather than the agent.
static FLOOD: Mutex<()> = Mutex::new(());

fn flood_lock() -> std::sync::MutexGuard<'static, ()> {
    FLOOD.lock().unwrap_or_else(|e| e.into_inner())
}

/// `[[target]] exe = EXE` and a `[trace]` of the fixture's three functions
/// without system calls (so counts are the calls alone), plus `trace`
/// lines.
fn traced(exe: &Path, trace: &str) -> String {
    format!(
        "[[target]]\nexe = \"{}\"\n\n[trace]\nfunctions = [\"leaf\", \"site_*\"]\nsyscalls = false\n{trace}\n",
        exe.display()
    )
}

/// A flight recorder small enough to fill in seconds.
const MAX_DISK: u64 = 2 << 20;
const SMALL_RECORDER: &str =
    "[recorder]\nmax_disk = \"2MiB\"\nfile_size = \"256KiB\"\nfile_age = \"1s\"\n";

/// No budget: the flood is recorded for as long as it runs.
const NO_BUDGET: &str = "[budget]\nmax_events_per_second = 0\nmax_cpu_percent = 0.0\n";

fn utf8(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs `exe ARGS` to completion (it must succeed); returns its pid.
fn run_fixture(exe: &Path, args: &[&str]) -> u32 {
    let child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("fixture starts");
    let pid = child.id();
    let out = child.wait_with_output().expect("fixture runs");
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        exe.display(),
        out.status
    );
    pid
}

/// Starts `exe floodfor MS`.
fn flood(exe: &Path, ms: u64) -> Child {
    Command::new(exe)
        .args(["floodfor", &ms.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("flood starts")
}

/// Waits for a flood to end on its own: it must exit 0 having called leaf.
fn flood_finished(child: Child) -> u64 {
    let out = child.wait_with_output().expect("flood runs");
    assert!(out.status.success(), "the flood failed: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let calls: u64 = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("flood output {text:?}"));
    assert!(calls > 0, "{text}");
    calls
}

/// The entries `calls run N` makes in process `pid`.
fn run_counts(pid: u32, n: usize) -> [((u32, String), usize); 3] {
    [
        ((pid, "leaf".to_string()), n + 3),
        ((pid, "site_a".to_string()), 1),
        ((pid, "site_b".to_string()), 3),
    ]
}

fn path_of(v: &Value) -> PathBuf {
    PathBuf::from(v.as_str().unwrap_or_else(|| panic!("not a path: {v}")))
}

/// Entries of `leaf` by process `pid` in `cap`.
fn leaf_entries(cap: &Capture, pid: u32) -> usize {
    entries_by_function(cap)
        .get(&(pid, "leaf".to_string()))
        .copied()
        .unwrap_or(0)
}

/// A program that exits and runs again (a new pid) is followed through its
/// executable: one snapshot of one session holds both runs' exact calls,
/// the first from a file rotated away before the second run.
#[test]
fn follows_a_target_that_restarts() {
    if !privileged() {
        return;
    }
    let exe = fixture("calls", Some("ag_restart"));
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        dir.path(),
        &format!("{}{SMALL_RECORDER}", traced(&exe, "ring_size = \"256KiB\"")),
    );
    let status = agent.wait_for("recording", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    assert_eq!(status["session"]["probes"], 3, "{status:#}");
    let first = run_fixture(&exe, &["run", "5"]);
    // file_age is 1 s: the first run's records go into a closed file.
    agent.wait_for("a rotation", Duration::from_secs(10), |s| {
        s["recorder"]["files"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["records"].as_u64() > Some(0)))
    });
    let second = run_fixture(&exe, &["run", "9"]);
    assert_ne!(first, second);
    let snap = agent.snapshot("60s");
    assert!(
        snap["joined"]["files"].as_u64() >= Some(2),
        "the window spans the rotation: {snap:#}"
    );
    let counts = entries_by_function(&capture(&path_of(&snap["path"])));
    let expected: BTreeMap<(u32, String), usize> = run_counts(first, 5)
        .into_iter()
        .chain(run_counts(second, 9))
        .collect();
    assert_eq!(counts, expected);
    let status = agent.status();
    assert_eq!(
        (
            status["sessions"].as_u64(),
            status["session"]["id"].as_u64()
        ),
        (Some(1), Some(1)),
        "a restart needs no re-arm: {status:#}"
    );
}

/// An executable replaced on disk (a package upgrade: a new inode under
/// the same path) is attached again, so the restarted daemon is traced.
#[test]
fn a_replaced_executable_is_attached_again() {
    if !privileged() {
        return;
    }
    let exe = fixture("calls", Some("ag_upgrade"));
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        dir.path(),
        &format!("{}{SMALL_RECORDER}", traced(&exe, "ring_size = \"256KiB\"")),
    );
    agent.wait_for("recording", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    let new = exe.with_file_name("ag_upgrade.new");
    std::fs::copy(&exe, &new).expect("copy the executable");
    std::fs::rename(&new, &exe).expect("replace it");
    agent.wait_for("a re-arm on the new inode", Duration::from_secs(20), |s| {
        s["sessions"].as_u64() == Some(2) && s["state"] == "recording"
    });
    let pid = run_fixture(&exe, &["run", "4"]);
    let snap = agent.snapshot("60s");
    let counts = entries_by_function(&capture(&path_of(&snap["path"])));
    let expected: BTreeMap<(u32, String), usize> = run_counts(pid, 4).into_iter().collect();
    assert_eq!(counts, expected);
}

/// A snapshot is a private standalone capture that `tracer replay` and the
/// analyzer read, with the exact calls made.
#[test]
fn a_snapshot_replays() {
    if !privileged() {
        return;
    }
    let exe = fixture("calls", Some("ag_snapshot"));
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        dir.path(),
        &format!("{}{SMALL_RECORDER}", traced(&exe, "ring_size = \"256KiB\"")),
    );
    agent.wait_for("recording", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    let pid = run_fixture(&exe, &["run", "6"]);
    let snap = agent.request(&["snapshot", "--window", "60s", "--reason", "operator asked"]);
    let path = path_of(&snap["path"]);
    assert_eq!(
        path.parent(),
        Some(agent.state_dir.join("snapshots").as_path())
    );
    let meta = std::fs::metadata(&path).expect("snapshot exists");
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "{}",
        path.display()
    );
    assert_eq!(snap["bytes"].as_u64(), Some(meta.len()));

    let replay = tracer(&["replay", "--summary", utf8(&path)]);
    assert!(replay.status.success(), "{}", replay.stderr);
    let summary = format!("{}{}", replay.stdout, replay.stderr);
    assert!(summary.contains("leaf 9, site_a 1, site_b 3"), "{summary}");

    let cap = capture(&path);
    assert!(cap.truncated.is_none(), "{:?}", cap.truncated);
    let end = cap.end.as_ref().expect("an end marker");
    assert!(end.reason.contains("operator asked"), "{end:?}");
    let counts = entries_by_function(&cap);
    assert_eq!(counts, run_counts(pid, 6).into_iter().collect());
    // Every entry has its return.
    let returns = events(&cap)
        .iter()
        .filter(|e| matches!(e, Event::Return(_)))
        .count();
    assert_eq!(returns, 9 + 1 + 3);
}

/// A flood far beyond what the files may hold: sampled every 100 ms, the
/// files never exceed max_disk; the oldest were removed and counted; what
/// is left reads back whole.
#[test]
fn disk_stays_under_the_limit_during_a_long_flood() {
    if !privileged() {
        return;
    }
    let _serial = flood_lock();
    let exe = fixture("calls", Some("ag_flood"));
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        dir.path(),
        &format!(
            "{}{SMALL_RECORDER}{NO_BUDGET}",
            traced(&exe, "ring_size = \"256KiB\"")
        ),
    );
    agent.wait_for("recording", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    let mut child = flood(&exe, 10_000);
    let pid = child.id();
    let (mut largest, mut samples) = (0, 0);
    let mut names = std::collections::BTreeSet::new();
    while child_running(&mut child) {
        let files = agent.ring_files();
        let total: u64 = files.iter().map(|f| f.1).sum();
        assert!(
            total <= MAX_DISK,
            "{total} bytes in the flight recorder, over max_disk {MAX_DISK}: {files:?}"
        );
        largest = largest.max(total);
        samples += 1;
        names.extend(files.into_iter().map(|f| f.0));
        std::thread::sleep(Duration::from_millis(100));
    }
    flood_finished(child);
    eprintln!(
        "flood: {samples} samples, at most {largest} of {MAX_DISK} bytes, {} files seen",
        names.len()
    );
    assert!(samples >= 50, "{samples} samples in 10 s");
    // The limit was reached, not just respected by a slow writer.
    assert!(largest > MAX_DISK / 2, "{largest}");

    let status = agent.status();
    let removed = &status["recorder"]["removed_for_size"];
    assert!(removed["files"].as_u64() > Some(0), "{status:#}");
    assert!(removed["records"].as_u64() > Some(0), "{status:#}");
    let total = status["records_total"].as_u64().unwrap_or(0);
    assert!(total > 100_000, "records_total {total}");
    assert!(status["recorder"]["disk_bytes"].as_u64() <= Some(MAX_DISK));

    // Closed files end with `rotated` and hold the records counted for
    // them; the flood is in what is left.
    let mut flood_entries = 0;
    for f in status["recorder"]["files"].as_array().expect("files") {
        let path = path_of(&f["path"]);
        let Ok(cap) = Capture::open(&path) else {
            // Removed for age or size since the status: only if gone.
            assert!(!path.exists(), "{} does not read", path.display());
            continue;
        };
        assert!(cap.truncated.is_none(), "{}", path.display());
        assert_eq!(
            cap.end.as_ref().map(|e| e.reason.as_str()),
            Some("rotated"),
            "{}",
            path.display()
        );
        assert_eq!(
            Some(events(&cap).len() as u64),
            f["records"].as_u64(),
            "{}",
            path.display()
        );
        flood_entries += leaf_entries(&cap, pid);
    }
    let current = path_of(&status["recorder"]["current"][0]);
    flood_entries += leaf_entries(&capture(&current), pid);
    assert!(flood_entries > 0, "no flood records are left");
}

/// SIGKILL mid-flood: every file left reads (only the one being written may
/// end mid-chunk), the closed ones whole; a new agent on the same state
/// directory adopts them and holds the limit, removing them first.
#[test]
fn sigkill_leaves_replayable_files() {
    if !privileged() {
        return;
    }
    let _serial = flood_lock();
    let exe = fixture("calls", Some("ag_sigkill"));
    let dir = tempfile::tempdir().expect("tempdir");
    let body = format!(
        "{}{SMALL_RECORDER}{NO_BUDGET}",
        traced(&exe, "ring_size = \"256KiB\"")
    );
    let mut agent = Agent::start(dir.path(), &body);
    agent.wait_for("recording", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    let child = flood(&exe, 4000);
    let pid = child.id();
    let before = agent.wait_for("two closed files", Duration::from_secs(10), |s| {
        s["recorder"]["files"]
            .as_array()
            .is_some_and(|f| f.len() >= 2)
            && s["records_total"].as_u64() > Some(0)
    });
    let status = agent.stop("KILL");
    assert_eq!(status.code(), None, "killed by a signal: {status}");
    // The traced program is not harmed by its tracer's death.
    flood_finished(child);

    let left = agent.ring_files();
    assert!(left.len() >= 2, "{left:?}");
    let closed: BTreeMap<PathBuf, u64> = before["recorder"]["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| (path_of(&f["path"]), f["records"].as_u64().unwrap_or(0)))
        .collect();
    let (mut flood_entries, mut whole) = (0, 0);
    for (i, (path, _)) in left.iter().enumerate() {
        let cap = capture(path);
        let newest = i + 1 == left.len();
        assert!(
            newest || cap.truncated.is_none(),
            "{} is truncated but is not the file being written",
            path.display()
        );
        let n = events(&cap).len() as u64;
        if let Some(records) = closed.get(path) {
            assert_eq!(n, *records, "closed file {}", path.display());
            whole += 1;
        }
        flood_entries += leaf_entries(&cap, pid);
    }
    assert!(flood_entries > 0, "no flood records survive the kill");
    // Files closed before the kill (the status just before it) are whole;
    // the one being written lost at most what was not flushed yet (250 ms).
    assert!(whole > 0, "none of {closed:?} is left: {left:?}");

    // A new agent adopts what is there (files of an earlier run have no
    // session) and holds the limit while a second flood runs.
    let mut names: Vec<PathBuf> = left.iter().map(|f| f.0.clone()).collect();
    drop(agent);
    let agent = Agent::start(dir.path(), &body);
    let status = agent.wait_for("recording", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    let adopted: Vec<PathBuf> = status["recorder"]["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter(|f| f["session"].is_null())
        .map(|f| path_of(&f["path"]))
        .collect();
    names.retain(|p| p.exists());
    assert_eq!(adopted, names, "{status:#}");
    let mut child = flood(&exe, 3000);
    while child_running(&mut child) {
        let total: u64 = agent.ring_files().iter().map(|f| f.1).sum();
        assert!(total <= MAX_DISK, "{total} > {MAX_DISK}");
        std::thread::sleep(Duration::from_millis(100));
    }
    flood_finished(child);
    assert!(
        !adopted[0].exists(),
        "the oldest adopted file is removed first"
    );
    let status = agent.status();
    assert!(status["recorder"]["removed_for_size"]["files"].as_u64() > Some(0));
}

fn child_running(child: &mut Child) -> bool {
    child.try_wait().expect("child status").is_none()
}

/// Invalid files are refused with exit status 2 and the key named, by
/// `--check` and at start; an invalid file given to `reload` is refused the
/// same way while the agent goes on with the configuration it has.
#[test]
fn a_bad_config_is_rejected_with_the_key_named() {
    if !privileged() {
        return;
    }
    let exe = fixture("calls", Some("ag_config"));
    let dir = tempfile::tempdir().expect("tempdir");
    let good = format!("{}{SMALL_RECORDER}", traced(&exe, "ring_size = \"256KiB\""));
    let cases = [
        (format!("{good}max_disc = \"4MiB\"\n"), "max_disc"),
        (
            good.replace("max_disk = \"2MiB\"", "max_disk = \"12X\""),
            "max_disk",
        ),
        (
            good.replace("[[target]]\n", "[[target]]\nname = \"ag_config\"\n"),
            "target[0]",
        ),
    ];
    let config = dir.path().join("bad.toml");
    for (body, key) in &cases {
        std::fs::write(&config, Agent::config_text(dir.path(), body)).expect("write");
        for check in [true, false] {
            let mut args = vec!["agent", "--config", utf8(&config)];
            if check {
                args.push("--check");
            }
            let run = tracer(&args);
            assert_eq!(
                run.status.code(),
                Some(2),
                "{args:?} {body}: {}",
                run.stderr
            );
            assert!(
                run.stderr.contains(key),
                "{args:?}: the error names {key}: {}",
                run.stderr
            );
        }
    }
    // The same file without the fault is valid.
    std::fs::write(&config, Agent::config_text(dir.path(), &good)).expect("write");
    let run = tracer(&["agent", "--config", utf8(&config), "--check"]);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(run.stdout.contains("valid"), "{}", run.stdout);

    let agent = Agent::start(dir.path(), &good);
    let before = agent.wait_for("recording", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    std::fs::write(
        &agent.config,
        Agent::config_text(
            dir.path(),
            &good.replace("[trace]\n", "[trace]\nfunctionz = []\n"),
        ),
    )
    .expect("rewrite the configuration");
    let reload = agent.ctl(&["reload"]);
    assert_eq!(reload.status.code(), Some(1), "{reload:?}");
    assert!(
        reload.stderr.contains("functionz")
            && reload.stderr.contains("keeping the running configuration"),
        "{}",
        reload.stderr
    );
    let after = agent.status();
    assert_eq!(after["state"], "recording", "{after:#}");
    assert_eq!(
        after["sessions"], before["sessions"],
        "no re-arm: {after:#}"
    );
    assert_eq!(after["session"]["id"], before["session"]["id"]);
    // And it still records what the old configuration says.
    let pid = run_fixture(&exe, &["run", "2"]);
    let snap = agent.snapshot("60s");
    assert_eq!(
        entries_by_function(&capture(&path_of(&snap["path"]))),
        run_counts(pid, 2).into_iter().collect()
    );
}

/// The control socket is root's (0600); a client of another user is refused
/// with a message about permission, and the agent goes on answering root.
/// Were the socket opened up by mistake, the agent itself refuses the peer.
#[test]
fn the_control_socket_refuses_a_non_root_client() {
    if !privileged() {
        return;
    }
    let exe = fixture("calls", Some("ag_socket"));
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        dir.path(),
        &format!("{}{SMALL_RECORDER}", traced(&exe, "ring_size = \"256KiB\"")),
    );
    let meta = std::fs::metadata(&agent.socket).expect("socket");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), 0);
    let as_nobody = || {
        Command::new(tests::tracer_bin())
            .args(["ctl", "--socket", utf8(&agent.socket), "status"])
            .uid(65534)
            .gid(65534)
            .output()
            .expect("tracer ctl runs as nobody")
    };
    let out = as_nobody();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert!(out.stdout.is_empty());

    // Open the directory and the socket to everyone: the agent checks the
    // peer's uid itself.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&agent.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = as_nobody();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("only root may control the agent"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let status = agent.status();
    assert!(status["pid"].as_u64().is_some(), "{status:#}");
}

/// Over its event budget the agent stops sampling first, then stops probing
/// the function called most (leaf); each step is in the status and the
/// alerts file; the flooding program runs to its end untouched.
#[test]
fn load_shedding_is_visible() {
    if !privileged() {
        return;
    }
    let _serial = flood_lock();
    let exe = fixture("calls", Some("ag_shed"));
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        dir.path(),
        &format!(
            "{}{SMALL_RECORDER}[budget]\nmax_events_per_second = 2000\nmax_cpu_percent = 0.0\npatience = 1\n",
            traced(&exe, "ring_size = \"256KiB\"\nsample_hz = 99")
        ),
    );
    let status = agent.wait_for("recording", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    assert_eq!(status["shed"]["sampling"], true, "{status:#}");
    // Long enough to outlast two steps and the re-arm between them on a
    // loaded machine (where the flood runs barely over the budget).
    let mut child = flood(&exe, 12_000);
    let status = agent.wait_for("two shedding steps", Duration::from_secs(15), |s| {
        s["shed"]["actions"]
            .as_array()
            .is_some_and(|a| a.len() >= 2)
    });
    let actions = status["shed"]["actions"].as_array().expect("actions");
    assert_eq!(actions[0]["action"], "stopped CPU sampling", "{status:#}");
    let dropped = actions[1]["action"].as_str().unwrap_or_default();
    assert!(dropped.starts_with("stopped probing leaf ("), "{status:#}");
    for a in &actions[..2] {
        let why = a["why"].as_str().unwrap_or_default();
        assert!(why.contains("over the budget of 2000"), "{why}");
    }
    assert_eq!(status["shed"]["sampling"], false);
    assert_eq!(
        status["shed"]["excluded_functions"],
        serde_json::json!(["leaf"])
    );
    // The session now probes the site functions only, and the flood, still
    // running, records no more leaf calls.
    let status = agent.wait_for("the re-armed session", Duration::from_secs(10), |s| {
        s["session"]["probes"] == 2
    });
    assert!(child_running(&mut child), "the flood outlasts the shedding");
    let snap = agent.snapshot("60s");
    let cap = capture(&path_of(&snap["path"]));
    let probed: Vec<&str> = cap.probes.iter().map(|p| p.symbol.as_str()).collect();
    assert!(!probed.contains(&"leaf"), "{probed:?}");
    assert_eq!(leaf_entries(&cap, child.id()), 0);
    assert!(
        !events(&cap).iter().any(|e| matches!(e, Event::Sample(_))),
        "samples after sampling stopped"
    );
    flood_finished(child);

    let text = std::fs::read_to_string(status["alerts_file"].as_str().expect("alerts file"))
        .expect("alerts written");
    let shed: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("an alert is a JSON line"))
        .filter(|a| a["kind"] == "shed")
        .collect();
    assert!(shed.len() >= 2, "{text}");
    assert_eq!(shed[0]["detail"]["action"], "stopped CPU sampling");
    assert_eq!(shed[1]["detail"]["action"], dropped);
}

/// Targets given by command name and by pid file, absent when the agent
/// starts, are found once they run: the agent goes from waiting to
/// recording both executables and records their calls exactly.
#[test]
fn targets_by_name_and_pidfile_are_found_when_they_start() {
    if !privileged() {
        return;
    }
    let named = fixture("calls", Some("ag_named"));
    let other = fixture("calls", Some("ag_pidfile"));
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("app.pid");
    let agent = Agent::start(
        dir.path(),
        &format!(
            "[[target]]\nname = \"ag_named\"\n[[target]]\npidfile = \"{}\"\n\n[trace]\nfunctions = [\"leaf\", \"site_*\"]\nsyscalls = false\nring_size = \"256KiB\"\n{SMALL_RECORDER}",
            pidfile.display()
        ),
    );
    let status = agent.status();
    let state = status["state"].as_str().unwrap_or_default();
    assert!(
        state.starts_with("waiting for targets")
            && state.contains("no process named ag_named")
            && state.contains(&format!(
                "no running process in pid file {}",
                pidfile.display()
            )),
        "{status:#}"
    );
    assert!(status["session"].is_null(), "{status:#}");

    let waiting = |exe: &Path, n: &str| {
        Command::new(exe)
            .args(["wait", n])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("fixture starts")
    };
    let mut a = waiting(&named, "4");
    let mut b = waiting(&other, "7");
    std::fs::write(&pidfile, format!("{}\n", b.id())).expect("pid file");
    let exes = [
        named.canonicalize().expect("exe"),
        other.canonicalize().expect("exe"),
    ];
    let status = agent.wait_for("both executables", Duration::from_secs(20), |s| {
        let traced: Vec<PathBuf> = s["session"]["executables"]
            .as_array()
            .map(|a| a.iter().map(path_of).collect())
            .unwrap_or_default();
        s["state"] == "recording" && exes.iter().all(|e| traced.contains(e))
    });
    let processes: Vec<u64> = status["session"]["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter_map(|p| p[0].as_u64())
        .collect();
    assert!(
        processes.contains(&u64::from(a.id())) && processes.contains(&u64::from(b.id())),
        "{status:#}"
    );
    let mut pids = Vec::new();
    for child in [&mut a, &mut b] {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"go\n")
            .expect("write");
        pids.push(child.id());
    }
    for child in [a, b] {
        let out = child.wait_with_output().expect("fixture runs");
        assert!(out.status.success());
    }
    let snap = agent.snapshot("60s");
    let counts = entries_by_function(&capture(&path_of(&snap["path"])));
    let expected: BTreeMap<(u32, String), usize> = run_counts(pids[0], 4)
        .into_iter()
        .chain(run_counts(pids[1], 7))
        .collect();
    assert_eq!(counts, expected, "{status:#}");
}

/// Starts `exe wait N`: it waits for a line on stdin, then runs.
fn waiting(exe: &Path, n: &str) -> Child {
    Command::new(exe)
        .args(["wait", n])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("fixture starts")
}

/// Lets a `waiting` fixture run; it must succeed. Returns its pid.
fn go(mut child: Child) -> u32 {
    let pid = child.id();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("write");
    let out = child.wait_with_output().expect("fixture runs");
    assert!(out.status.success(), "{}", out.status);
    pid
}

/// A program run by nobody: killed when dropped.
struct Decoy(Child);

impl Decoy {
    fn start(program: &Path, args: &[&str]) -> Self {
        Self(
            Command::new(program)
                .args(args)
                .uid(65534)
                .gid(65534)
                .spawn()
                .unwrap_or_else(|e| panic!("{} runs as nobody: {e}", program.display())),
        )
    }
}

impl Drop for Decoy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The notes of the status's target `name`.
fn target_state(status: &Value, name: &str) -> (String, Vec<String>) {
    let t = status["targets"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["target"] == name))
        .unwrap_or_else(|| panic!("no target {name}: {status:#}"));
    (
        t["state"].as_str().unwrap_or_default().to_string(),
        t["notes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect(),
    )
}

/// Issue 15, item 1: an unprivileged user cannot blind the agent with a
/// process named like its target. Two decoys run as nobody: a copy of
/// sleep it owns, and root's sleep through a link (so its comm is the
/// target's name). Both are refused and said so; the real daemon is
/// recorded exactly; and a target the session cannot probe (no traced
/// function in /usr/bin/true) is skipped, not fatal for the others.
/// Before, the first decoy made every session fail ("pattern matches no
/// function in .../hv_victimd").
#[test]
fn issue_15_decoys_named_like_a_target_do_not_blind_the_agent() {
    if !privileged() {
        return;
    }
    let exe = fixture("calls", Some("hv_victimd"));
    let dir = tempfile::tempdir().expect("tempdir");
    // A directory nobody owns, reachable by nobody.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let theirs = dir.path().join("nobody");
    for sub in ["copy", "link"] {
        std::fs::create_dir_all(theirs.join(sub)).expect("mkdir");
    }
    for p in [theirs.clone(), theirs.join("copy"), theirs.join("link")] {
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).expect("chown");
    }
    let copy = theirs.join("copy/hv_victimd");
    std::fs::copy("/usr/bin/sleep", &copy).expect("copy sleep");
    std::os::unix::fs::chown(&copy, Some(65534), Some(65534)).expect("chown");
    let link = theirs.join("link/hv_victimd");
    std::os::unix::fs::symlink("/usr/bin/sleep", &link).expect("symlink");
    let decoys = [Decoy::start(&copy, &["120"]), Decoy::start(&link, &["120"])];

    let agent = Agent::start(
        dir.path(),
        &format!(
            "[[target]]\nname = \"hv_victimd\"\n[[target]]\nexe = \"/usr/bin/true\"\n\n[trace]\nfunctions = [\"leaf\", \"site_*\"]\nsyscalls = false\nring_size = \"256KiB\"\n{SMALL_RECORDER}"
        ),
    );
    let real = waiting(&exe, "5");
    let real_exe = exe.canonicalize().expect("exe");
    let status = agent.wait_for("the real daemon recorded", Duration::from_secs(20), |s| {
        s["state"] == "recording"
            && s["session"]["executables"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| path_of(e) == real_exe))
    });
    let (state, notes) = target_state(&status, "name=hv_victimd");
    assert_eq!(state, "recording", "{status:#}");
    for d in &decoys {
        let pid = d.0.id();
        assert!(
            notes.iter().any(|n| n.starts_with(&format!(
                "refused process {pid}: it runs as uid 65534, not as root"
            ))),
            "decoy {pid} not refused: {notes:#?}"
        );
    }
    assert_eq!(
        status["session"]["executables"],
        serde_json::json!([real_exe]),
        "only the real daemon's executable: {status:#}"
    );
    let status = agent.wait_for(
        "the unprobeable target skipped",
        Duration::from_secs(10),
        |s| target_state(s, "exe=/usr/bin/true").0 == "skipped",
    );
    let (_, notes) = target_state(&status, "exe=/usr/bin/true");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("not probed") && n.contains("matches no function")),
        "{notes:#?}"
    );

    let pid = go(real);
    let snap = agent.snapshot("60s");
    assert_eq!(
        entries_by_function(&capture(&path_of(&snap["path"]))),
        run_counts(pid, 5).into_iter().collect()
    );
    drop(decoys);
}

/// Issue 15, item 1: the agent's owner rule, without the uid rule: root
/// runs a copy of the daemon that nobody owns (as a user tricked into it
/// would): refused, until the target names that owner.
#[test]
fn issue_15_an_executable_another_user_owns_is_refused_unless_named() {
    if !privileged() {
        return;
    }
    let exe = fixture("calls", Some("hv_owned"));
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let theirs = dir.path().join("bin");
    std::fs::create_dir(&theirs).expect("mkdir");
    let copy = theirs.join("hv_owned");
    std::fs::copy(&exe, &copy).expect("copy");
    std::os::unix::fs::chown(&copy, Some(65534), Some(65534)).expect("chown");
    let body = |owner: &str| {
        format!(
            "[[target]]\nname = \"hv_owned\"\n{owner}\n[trace]\nfunctions = [\"leaf\", \"site_*\"]\nsyscalls = false\nring_size = \"256KiB\"\n{SMALL_RECORDER}"
        )
    };
    let mut agent = Agent::start(dir.path(), &body(""));
    let daemon = waiting(&copy, "3");
    let status = agent.wait_for("the refusal", Duration::from_secs(20), |s| {
        target_state(s, "name=hv_owned").0 == "refused"
    });
    let (_, notes) = target_state(&status, "name=hv_owned");
    assert!(
        notes.iter().any(|n| n.contains(&format!(
            "{} is owned by uid 65534, not by root",
            copy.display()
        ))),
        "{notes:#?}"
    );
    assert!(status["session"].is_null(), "{status:#}");
    agent.stop("TERM");
    let agent = Agent::start(dir.path(), &body("owner = \"nobody\""));
    agent.wait_for("the owned copy recorded", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    let pid = go(daemon);
    let snap = agent.snapshot("60s");
    assert_eq!(
        entries_by_function(&capture(&path_of(&snap["path"]))),
        run_counts(pid, 3).into_iter().collect()
    );
}

/// Issue 15, item 1: a pid file is believed only when it is not older
/// than its process (a stale file names whatever got the pid since) and
/// nobody else can write it.
#[test]
fn issue_15_a_stale_or_writable_pid_file_is_not_believed() {
    if !privileged() {
        return;
    }
    let exe = fixture("calls", Some("hv_pidfile"));
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("daemon.pid");
    let daemon = waiting(&exe, "2");
    std::fs::write(&pidfile, format!("{}\n", daemon.id())).expect("pid file");
    // Written an hour before the process started: stale.
    std::fs::File::options()
        .write(true)
        .open(&pidfile)
        .expect("open")
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .expect("mtime");
    let name = format!("pidfile={}", pidfile.display());
    let agent = Agent::start(
        dir.path(),
        &format!(
            "[[target]]\npidfile = \"{}\"\n\n[trace]\nfunctions = [\"leaf\", \"site_*\"]\nsyscalls = false\nring_size = \"256KiB\"\n{SMALL_RECORDER}",
            pidfile.display()
        ),
    );
    let status = agent.wait_for("the stale pid file refused", Duration::from_secs(10), |s| {
        target_state(s, &name).0 == "refused"
    });
    let (_, notes) = target_state(&status, &name);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("a stale pid file whose pid was reused")),
        "{notes:#?}"
    );
    assert!(status["session"].is_null(), "{status:#}");

    // Fresh, but anyone may write it.
    std::fs::write(&pidfile, format!("{}\n", daemon.id())).expect("pid file");
    std::fs::set_permissions(&pidfile, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let status = agent.wait_for(
        "the writable pid file refused",
        Duration::from_secs(10),
        |s| {
            target_state(s, &name)
                .1
                .iter()
                .any(|n| n.contains("can be changed by everyone"))
        },
    );
    assert!(status["session"].is_null(), "{status:#}");

    std::fs::set_permissions(&pidfile, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    agent.wait_for("the pid file believed", Duration::from_secs(20), |s| {
        s["state"] == "recording" && target_state(s, &name).0 == "recording"
    });
    let pid = go(daemon);
    let snap = agent.snapshot("60s");
    assert_eq!(
        entries_by_function(&capture(&path_of(&snap["path"]))),
        run_counts(pid, 2).into_iter().collect()
    );
}

/// Issue 15, item 5: a state directory others can write is refused (root
/// would write captures where they choose); a symbolic link planted as
/// `rings` is refused, not followed (setting its mode changed the
/// target's); a directory of root's that others may read is made 0700.
#[test]
fn issue_15_the_state_directory_must_be_roots_alone() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("agent.toml");
    let body = "[[target]]\nexe = \"/nonexistent/hv_state\"\n[trace]\nfunctions = [\"leaf\"]\n";
    std::fs::write(&config, Agent::config_text(dir.path(), body)).expect("config");
    let state = dir.path().join("state");
    let start = || tracer(&["agent", "--config", utf8(&config)]);

    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let run = start();
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("refusing the state directory")
            && run.stderr.contains("can be changed by everyone"),
        "{}",
        run.stderr
    );

    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink(&elsewhere, state.join("rings")).expect("symlink");
    let run = start();
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("symbolic link"), "{}", run.stderr);
    let mode = std::fs::metadata(&elsewhere)
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755, "the link's target was left alone");

    std::fs::remove_file(state.join("rings")).expect("unlink");
    let agent = Agent::start(dir.path(), body);
    let status = agent.status();
    assert!(
        status["state"]
            .as_str()
            .unwrap_or_default()
            .starts_with("waiting")
    );
    for d in [state.clone(), state.join("rings"), state.join("snapshots")] {
        let meta = std::fs::symlink_metadata(&d).expect("exists");
        assert!(meta.is_dir(), "{}", d.display());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700, "{}", d.display());
    }
}

/// Issue 15, item 6: snapshots count against `max_snapshots_disk`; the
/// oldest go first, the count is in the status, and a new agent adopts
/// what is left.
#[test]
fn issue_15_snapshots_stay_within_their_budget() {
    if !privileged() {
        return;
    }
    let exe = fixture("calls", Some("hv_snapshots"));
    let dir = tempfile::tempdir().expect("tempdir");
    // Each snapshot holds its processes' symbol tables too (libc's alone
    // is about 200 KB with its debug file installed): 2 MiB keeps 2-4.
    const BUDGET: u64 = 2 << 20;
    let body = format!(
        "{}{SMALL_RECORDER}max_snapshots_disk = \"2MiB\"\n",
        traced(&exe, "ring_size = \"256KiB\"")
    );
    let mut agent = Agent::start(dir.path(), &body);
    agent.wait_for("recording", Duration::from_secs(20), |s| {
        s["state"] == "recording"
    });
    // About 8,000 records: some 400-600 KB per snapshot.
    run_fixture(&exe, &["run", "4000"]);
    let mut taken = Vec::new();
    for i in 0..5 {
        let snap = agent.request(&["snapshot", "--window", "60s", "--reason", &format!("s{i}")]);
        let bytes = snap["bytes"].as_u64().unwrap_or(0);
        assert!(bytes > 200_000 && bytes < BUDGET / 2, "{snap:#}");
        taken.push(path_of(&snap["path"]));
        // Distinct names (they carry the time in ms).
        std::thread::sleep(Duration::from_millis(5));
    }
    let on_disk = |dir: &Path| -> (usize, u64) {
        std::fs::read_dir(dir)
            .expect("snapshots dir")
            .filter_map(|e| e.ok()?.metadata().ok())
            .fold((0, 0), |(n, b), m| (n + 1, b + m.len()))
    };
    let snapshots = agent.state_dir.join("snapshots");
    let (files, bytes) = on_disk(&snapshots);
    assert!(
        bytes <= BUDGET,
        "{bytes} bytes of snapshots over the {BUDGET}-byte budget"
    );
    let status = agent.status();
    let s = &status["snapshots_disk"];
    assert_eq!(s["files"].as_u64(), Some(files as u64), "{s:#}");
    assert_eq!(s["bytes"].as_u64(), Some(bytes), "{s:#}");
    assert_eq!(s["max_bytes"].as_u64(), Some(BUDGET));
    assert_eq!(
        s["removed"]["files"].as_u64(),
        Some((5 - files) as u64),
        "{s:#}"
    );
    assert!((1..5).contains(&files), "{files}");
    // Oldest first: the ones kept are the last taken.
    for (i, p) in taken.iter().enumerate() {
        assert_eq!(p.exists(), i >= 5 - files, "{}", p.display());
    }
    agent.stop("TERM");
    let agent = Agent::start(dir.path(), &body);
    let s = &agent.status()["snapshots_disk"];
    assert_eq!(s["files"].as_u64(), Some(files as u64), "adopted: {s:#}");
}
