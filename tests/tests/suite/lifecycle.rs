//! Following children across fork and exec.

use analyzer::Event;
use std::process::Command;

use tests::{Background, capture, entries_by_function, events, fixture, privileged, tracer};
use tracer_common::record::lifecycle;

/// A forked child is traced, and still traced after it execs.
#[test]
fn follows_fork_and_exec() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("l.capture");
    let run = tracer(&[
        "record",
        "-f",
        "leaf",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        calls.to_str().expect("utf8"),
        "fork",
        "4",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let evs = events(&cap);
    let fork = evs
        .iter()
        .find_map(|e| match e {
            Event::Lifecycle(l) if l.event == lifecycle::FORK => Some(*l),
            _ => None,
        })
        .expect("a fork event");
    let (parent, child) = (fork.header.pid, fork.child_tid);
    assert_ne!(parent, child);
    let exec_of_child = evs.iter().any(
        |e| matches!(e, Event::Lifecycle(l) if l.event == lifecycle::EXEC && l.header.pid == child),
    );
    assert!(exec_of_child, "the child's exec is recorded");
    let counts = entries_by_function(&cap);
    // run(4): 4 from site_a + 3 from site_b; then the exec'd image: 2.
    assert_eq!(
        counts.get(&(child, "leaf".to_string())),
        Some(&9),
        "{counts:?}"
    );
    assert_eq!(
        counts.get(&(parent, "leaf".to_string())),
        None,
        "{counts:?}"
    );
    let child_exits = evs.iter().filter(|e| matches!(e, Event::Lifecycle(l) if l.event == lifecycle::EXIT && l.header.pid == child && l.group_dead == 1)).count();
    assert_eq!(child_exits, 1);
    assert!(
        cap.processes
            .get(&child)
            .is_some_and(|snaps| snaps.iter().any(|p| p.cmdline.iter().any(|a| a == "exec"))),
        "the exec'd image was snapshotted"
    );
}

/// A process that ended before the recorder read its first record (a
/// loaded machine, a short life) can no longer be read in `/proc`; its
/// exit record still names it, so reports say `calls[pid]`, not `?[pid]`.
#[test]
fn a_process_gone_before_its_records_are_read_is_named_by_its_exit() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("gone.capture");
    let exe = calls.to_str().expect("utf8");
    let recorder = Background::start(&[
        "record",
        "--sample-hz",
        "0",
        "--no-follow",
        "--exe",
        exe,
        "-f",
        "leaf",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    let signal = |sig: &str| {
        let status = Command::new("kill")
            .args(["-s", sig, &recorder.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -s {sig}");
    };
    // The recorder reads nothing while the process runs and is reaped; the
    // kernel side keeps its records in the ring.
    signal("STOP");
    let mut child = Command::new(&calls)
        .args(["run", "3"])
        .spawn()
        .expect("calls runs");
    let pid = child.id();
    let ran = child.wait().expect("calls exits");
    signal("CONT");
    assert!(ran.success(), "calls: {ran}");
    let stopped = recorder.stop("INT");
    assert!(stopped.success(), "tracer: {stopped}");

    let cap = capture(&out);
    let counts = entries_by_function(&cap);
    assert!(
        counts
            .get(&(pid, "leaf".to_string()))
            .is_some_and(|n| *n > 0),
        "its calls were recorded: {counts:?}"
    );
    assert_eq!(cap.comm(pid), Some("calls"), "{:?}", cap.processes);
}
