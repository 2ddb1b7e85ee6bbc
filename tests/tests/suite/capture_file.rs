//! The capture file under stress: losses, a killed recorder, corruption,
//! crafted files (issue 15), and how `record -o` creates it.

use std::time::Duration;

use analyzer::Event;
use tests::{Background, analyzer, capture, fixture, privileged, tracer};
use tracer_common::{
    capture::{CaptureHeader, CaptureWriter, Meta, Probe},
    record::{FuncReturn, Header, Pod as _, kind},
};

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

/// Issue 15, item 7: a bad output path is reported before anything is
/// attached (it was found only after every probe was attached).
#[test]
fn issue_15_a_bad_output_is_reported_before_attaching() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let run = tracer(&[
        "record",
        "-f",
        "leaf",
        "-o",
        "/nonexistent/dir/x.capture",
        "--",
        calls.to_str().expect("utf8"),
        "run",
        "1",
    ]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("cannot create capture file /nonexistent/dir/x.capture"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("attached"),
        "probes were attached first: {}",
        run.stderr
    );
}

/// Issue 15, item 5: `record -o` makes a new file. An existing file is
/// refused unless --force; a symbolic link is never followed (its target
/// keeps its content and mode); --force puts a new 0600 file in place of
/// an old one whatever the old one's mode.
#[test]
fn issue_15_record_output_is_new_and_never_followed() {
    if !privileged() {
        return;
    }
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let record = |out: &std::path::Path, force: bool| {
        let mut args = vec![
            "record",
            "--sample-hz",
            "0",
            "-o",
            out.to_str().expect("utf8"),
        ];
        if force {
            args.push("--force");
        }
        args.extend(["--", "true"]);
        tracer(&args)
    };
    let existing = dir.path().join("existing.capture");
    std::fs::write(&existing, b"precious").expect("write");
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let run = record(&existing, false);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("exists (give --force"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read(&existing).expect("read"), b"precious");

    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"not yours").expect("write");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let link = dir.path().join("link.capture");
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let run = record(&link, false);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    let run = record(&link, true);
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(std::fs::read(&victim).expect("read"), b"not yours");
    let victim_mode = std::fs::metadata(&victim)
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(victim_mode & 0o777, 0o644);
    let meta = std::fs::symlink_metadata(&link).expect("meta");
    assert!(meta.is_file(), "a new file in place of the link");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    capture(&link);

    let run = record(&existing, true);
    assert!(run.status.success(), "{}", run.stderr);
    let mode = std::fs::metadata(&existing)
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "not the old file's mode");
    capture(&existing);
}

/// A capture of `meta` items and one records chunk of `records`.
fn crafted(meta: &[Meta], records: &[u8]) -> Vec<u8> {
    let mut w = CaptureWriter::new(Vec::new(), &CaptureHeader::default()).expect("header");
    for m in meta {
        w.write_meta(m).expect("meta");
    }
    w.write_records(records).expect("records");
    w.into_inner()
}

fn ret(ts: u64, size: u16) -> Vec<u8> {
    let mut r = FuncReturn {
        header: Header {
            ts_ns: ts,
            pid: 7,
            tid: 7,
            kind: kind::FUNC_RETURN,
            size: size_of::<FuncReturn>() as u16,
            cpu: 0,
        },
        func_id: 0,
        _pad: 0,
        ret: 0,
    };
    r.header.size = size;
    r.as_bytes().to_vec()
}

/// Issue 15, item 2: a valid-checksum probe table with func_id 2147483647
/// made replay, summary and model learn abort allocating 206 GB; each now
/// exits 2 with the id named, at once.
#[test]
fn issue_15_a_crafted_probe_id_is_an_error_in_every_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("crafted.capture");
    let probe = |func_id| Probe {
        func_id,
        object: "/x".into(),
        symbol: "f".into(),
        ..Probe::default()
    };
    std::fs::write(
        &bad,
        crafted(
            &[Meta::Probes {
                probes: vec![probe(0), probe(2_147_483_647)],
            }],
            &ret(1, 40),
        ),
    )
    .expect("write");
    let path = bad.to_str().expect("utf8");
    for run in [
        tracer(&["replay", path]),
        analyzer(&["summary", path]),
        analyzer(&[
            "model",
            "learn",
            "-o",
            dir.path().join("m.json").to_str().expect("utf8"),
            path,
        ]),
    ] {
        assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
        assert!(
            run.stderr.contains("probe id 2147483647 is out of range"),
            "{}",
            run.stderr
        );
    }
}

/// Issue 15, item 7: one rule for a malformed record in every reader: the
/// chunk is read up to it, the rest skipped, and the count reported
/// (`tracer replay` failed where `analyzer summary` skipped).
#[test]
fn issue_15_a_malformed_record_is_skipped_and_counted_by_every_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("malformed.capture");
    let records = [ret(1, 40), ret(2, 40), ret(3, 12), ret(4, 40)].concat();
    std::fs::write(&bad, crafted(&[], &records)).expect("write");
    let path = bad.to_str().expect("utf8");
    let warning = "1 records chunks hold a malformed record";
    let replay = tracer(&["replay", path]);
    assert!(replay.status.success(), "{}", replay.stderr);
    assert_eq!(replay.stdout.lines().count(), 2, "{}", replay.stdout);
    assert!(replay.stderr.contains(warning), "{}", replay.stderr);
    let summary = analyzer(&["summary", "--json", path]);
    assert!(summary.status.success(), "{}", summary.stderr);
    let s: serde_json::Value = serde_json::from_str(&summary.stdout).expect("json");
    assert_eq!(
        (s["malformed"].as_u64(), s["events"]["return"].as_u64()),
        (Some(1), Some(2))
    );
    let events = analyzer(&["events", path]);
    assert!(events.status.success(), "{}", events.stderr);
    assert_eq!(events.stdout.lines().count(), 2, "{}", events.stdout);
    assert!(events.stderr.contains(warning), "{}", events.stderr);
}

/// Issue 15, item 3: a model whose node names a parent out of range (or a
/// cycle) is refused with its tree named, exit 2, by `model score` and
/// `model learn --merge` (they panicked with exit 101, or looped).
#[test]
fn issue_15_a_model_with_a_bad_parent_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let capture_path = dir.path().join("empty.capture");
    std::fs::write(&capture_path, crafted(&[], &ret(1, 40))).expect("write");
    let model_path = dir.path().join("model.json");
    let learn = analyzer(&[
        "model",
        "learn",
        "--no-calibrate",
        "-o",
        model_path.to_str().expect("utf8"),
        capture_path.to_str().expect("utf8"),
    ]);
    assert!(learn.status.success(), "{}", learn.stderr);
    let mut model: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&model_path).expect("model")).expect("json");
    // A handler tree of two nodes, the second naming parent 99999.
    model["groups"] = serde_json::json!([{
        "signature": [], "processes": 1, "examples": [],
        "initializer": {}, "finalizer": {}, "pre_process": {}, "post_process": {},
        "handlers": {"conn": {"models": 1, "units": 1, "nodes": [
            {"parent": null, "site": "", "callee": "a", "p_sum": 1.0},
            {"parent": 99999, "site": "", "callee": "b", "p_sum": 1.0}
        ]}}
    }]);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, serde_json::to_vec(&model).expect("json")).expect("write");
    let (bad_s, cap_s) = (
        bad.to_str().expect("utf8"),
        capture_path.to_str().expect("utf8"),
    );
    let merged = dir.path().join("merged.json");
    for run in [
        analyzer(&["model", "score", "--model", bad_s, cap_s]),
        analyzer(&[
            "model",
            "learn",
            "--merge",
            bad_s,
            "-o",
            merged.to_str().expect("utf8"),
            cap_s,
        ]),
    ] {
        assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
        assert!(
            run.stderr.contains(
                "is not a valid model: group 0, handler tree 'conn': node 1's parent 99999"
            ),
            "{}",
            run.stderr
        );
    }
}
