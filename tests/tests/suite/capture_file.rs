//! The capture file under stress: losses, a killed recorder, corruption.

use std::time::Duration;

use analyzer::Event;
use tests::{Background, capture, fixture, privileged, tracer};

/// A tiny ring under a flood loses records, and says so.
#[test]
fn losses_are_counted_and_reported() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("flood.capture");
    let run = tracer(&[
        "record",
        "-f",
        "leaf",
        // Only this process's records: no system-wide TCP retransmits.
        "--no-syscalls",
        "--ring-size",
        "4096",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        calls.to_str().expect("utf8"),
        "flood",
        "300000",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(run.stderr.contains("LOSSES: ring_full"), "{}", run.stderr);
    let cap = capture(&out);
    let lost = cap.lost_records();
    assert!(lost > 0);
    // The ring's records only: the counters written every stats interval
    // (block I/O of the node, network namespaces) never pass the ring.
    let recorded = tests::events(&cap)
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Entry { .. } | Event::Return(_) | Event::Lifecycle(_)
            )
        })
        .count() as u64;
    // Every call produced an entry and a return, plus the exec and the exit of
    // the process: what was recorded and what was counted lost account for all.
    assert_eq!(
        recorded + lost,
        2 * 300_000 + 2,
        "recorded {recorded}, lost {lost}"
    );
}

/// SIGKILL leaves a capture that replays up to its last complete chunk;
/// a flipped byte is a clear error naming the offset.
#[test]
fn killed_recorder_leaves_a_readable_prefix_and_corruption_is_named() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("killed.capture");
    let bg = Background::start(&[
        "record",
        "--sample-hz",
        "999",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        calls.to_str().expect("utf8"),
        "spin",
        "25000",
    ]);
    // Kill once some chunks are on disk (a loaded machine starts slowly).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline
        && !(out.exists() && tests::events(&capture(&out)).len() > 100)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = bg.stop("KILL");
    assert!(!status.success());
    let cap = capture(&out);
    // The spinner outlives its killed recorder: stop it.
    for (pid, snaps) in &cap.processes {
        if snaps.iter().any(|p| p.comm == "calls") {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    assert!(cap.end.is_none(), "a killed recorder wrote no end marker");
    assert!(
        tests::events(&cap).len() > 100,
        "samples of the first second were written"
    );
    let replay = tracer(&["replay", "--summary", out.to_str().expect("utf8")]);
    assert!(replay.status.success(), "{}", replay.stderr);
    assert!(replay.stdout.contains("WARNING"), "{}", replay.stdout);

    let mut bytes = std::fs::read(&out).expect("capture bytes");
    let (offset, _) = cap.chunks[cap.chunks.len() / 2];
    bytes[offset as usize + 40] ^= 0xff;
    let bad = dir.path().join("corrupt.capture");
    std::fs::write(&bad, &bytes).expect("write corrupt copy");
    let replay = tracer(&["replay", bad.to_str().expect("utf8")]);
    assert_eq!(replay.status.code(), Some(2));
    assert!(
        replay
            .stderr
            .contains(&format!("corrupt chunk at byte offset {offset}")),
        "{}",
        replay.stderr
    );
}

/// Capture files are private to their owner.
#[test]
fn capture_files_are_created_0600() {
    if !privileged() {
        return;
    }
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("mode.capture");
    let run = tracer(&[
        "record",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        "true",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let mode = std::fs::metadata(&out)
        .expect("exists")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}
