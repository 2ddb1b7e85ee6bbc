//! Where each thread of a traced process stands when the recording stops:
//! threads inside a system call get their user stack, unwound by the
//! objects' call frame information, with no function probe at all.

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
};

use analyzer::{Capture, Event};
use tests::{Background, capture, events, fixture, privileged, record_python, tracer};
use tracer_common::{
    record::{SYSCALL_UNFINISHED, blocked_flags},
    syscall::nr,
};

/// Starts the `stuck` fixture and waits until both its threads run.
fn start_stuck(args: &[&str]) -> Child {
    let exe = fixture("stuck", None);
    let mut child = Command::new(&exe)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("stuck starts");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped"))
        .read_line(&mut line)
        .expect("reads its first line");
    assert_eq!(line.trim(), "ready");
    child
}

/// Per thread of `pid`: the system call it was blocked in and its frames'
/// function names, innermost first, as the analyzer reads them.
fn blocked_stacks(cap: &Capture, pid: u32) -> BTreeMap<u32, (String, Vec<String>)> {
    analyzer::blocked::blocked_threads(cap, None)
        .into_iter()
        .filter(|t| t.pid == pid)
        .map(|t| {
            let names = t.path().into_iter().map(str::to_string).collect();
            (t.tid, (t.syscall, names))
        })
        .collect()
}

/// Records the `stuck` fixture started with `args` for `duration`, with no
/// `-f` and no samples, then kills it: its pid and the capture.
fn record_stuck(args: &[&str], duration: &str) -> (u32, Capture) {
    let mut child = start_stuck(args);
    let pid = child.id();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("stuck.capture");
    let run = tracer(&[
        "record",
        "-p",
        &pid.to_string(),
        "--duration",
        duration,
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(run.status.success(), "{}", run.stderr);
    (pid, capture(&out))
}

/// With no `-f` and no samples, a thread that sleeps in a function nothing
/// probes is found blocked in that function, and the polling main thread
/// in its poll loop under `main`.
#[test]
fn blocked_threads_are_found_where_they_wait_without_probes() {
    if !privileged() {
        return;
    }
    let (pid, cap) = record_stuck(&[], "2s");
    let stacks = blocked_stacks(&cap, pid);
    let main = stacks
        .get(&pid)
        .unwrap_or_else(|| panic!("main thread in {stacks:?}"));
    assert!(main.0.contains("poll"), "{main:?}");
    let at = |names: &[String], f: &str| names.iter().position(|n| n == f);
    let (poll_loop, in_main) = (at(&main.1, "poll_loop"), at(&main.1, "main"));
    assert!(
        matches!((poll_loop, in_main), (Some(p), Some(m)) if p < m),
        "poll_loop under main: {main:?}"
    );
    let (_, worker) = stacks
        .iter()
        .find(|(tid, _)| **tid != pid)
        .unwrap_or_else(|| panic!("the worker thread in {stacks:?}"));
    assert!(worker.0.contains("sleep"), "{worker:?}");
    let stuck = at(&worker.1, "stuck_here");
    assert!(stuck.is_some(), "stuck_here in {worker:?}");
    // The thread's own start routine is above it.
    assert!(
        at(&worker.1, "worker").is_some_and(|w| Some(w) > stuck),
        "worker above stuck_here: {worker:?}"
    );
}

/// A thread stopped inside a call that is recorded (a receive on a socket
/// nothing writes to) is both an unfinished call and a blocked thread,
/// entered at the same instant: the thread's one kernel entry keeps its
/// call in progress and where it entered it, neither written over by the
/// other.
#[test]
fn a_thread_in_a_recorded_call_is_both_unfinished_and_blocked_since_its_entry() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = record_python(
        &dir.path().join("receiver.capture"),
        "2s",
        // The alarm ends it after the recording.
        "import signal, socket\nsignal.alarm(10)\na, b = socket.socketpair()\nb.recv(1)",
    );
    let evs = events(&cap);
    let unfinished: Vec<_> = evs
        .iter()
        .filter_map(|e| match e {
            Event::Syscall(s) if s.flags & SYSCALL_UNFINISHED != 0 => Some(s),
            _ => None,
        })
        .collect();
    let [recv] = unfinished.as_slice() else {
        panic!("the receive, unfinished: {unfinished:?}");
    };
    assert_eq!(recv.nr, nr::RECVFROM, "{recv:?}");
    let blocked: Vec<_> = evs
        .iter()
        .filter_map(|e| match e {
            Event::Blocked(b) if b.header.tid == recv.header.tid => Some(b),
            _ => None,
        })
        .collect();
    let [thread] = blocked.as_slice() else {
        panic!("the receiving thread, blocked: {blocked:?}");
    };
    assert_eq!(thread.nr, recv.nr, "{thread:?}");
    assert_eq!(thread.since_ns, recv.enter_ns, "{thread:?} {recv:?}");
    assert_eq!(thread.flags & blocked_flags::BEFORE_START, 0, "{thread:?}");
}

/// A thread that entered its system call before the recording started (a
/// daemon found hung, then traced) is found too, from what the kernel
/// says, and said to have been blocked since before the recording.
#[test]
fn a_thread_blocked_before_the_recording_is_found_too() {
    if !privileged() {
        return;
    }
    let (pid, cap) = record_stuck(&["long"], "1s");
    let before: Vec<_> = events(&cap)
        .into_iter()
        .filter_map(|e| match e {
            Event::Blocked(b) if b.header.tid != pid => Some(b),
            _ => None,
        })
        .collect();
    assert_eq!(before.len(), 1, "{before:?}");
    assert_ne!(before[0].flags & blocked_flags::BEFORE_START, 0);
    let stacks = blocked_stacks(&cap, pid);
    let (_, worker) = stacks
        .iter()
        .find(|(tid, _)| **tid != pid)
        .expect("the worker");
    assert!(worker.0.contains("sleep"), "{worker:?}");
    assert!(
        worker.1.iter().any(|n| n == "stuck_here"),
        "stuck_here in {worker:?}"
    );
}

/// A process killed while a thread hung in a call it entered during the
/// recording is gone before the recording stops: where that thread stood
/// is recorded when the signal ends the call, and the analyzer keeps it as
/// the thread's end (its process ended right after).
#[test]
fn a_thread_killed_while_it_hung_is_found_where_it_hung() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    let mut child = start_stuck(&["late", go.to_str().expect("utf8")]);
    let pid = child.id();
    let out = dir.path().join("killed.capture");
    let out_s = out.to_str().expect("utf8");
    let rec = Background::start(&[
        "record",
        "-p",
        &pid.to_string(),
        "--sample-hz",
        "0",
        "-o",
        out_s,
    ]);
    // Attached: the worker enters its long sleep now; 2 s in it.
    std::fs::write(&go, b"").expect("the go file");
    std::thread::sleep(std::time::Duration::from_millis(2000));
    let _ = child.kill();
    let _ = child.wait();
    // Every target gone: the recorder stops by itself.
    let mut rec = rec;
    let status = rec.child.wait().expect("tracer exits");
    assert!(status.success());
    let cap = capture(&out);
    let threads = analyzer::blocked::blocked_threads(&cap, None);
    let worker = threads
        .iter()
        .find(|t| t.pid == pid && t.tid != pid)
        .unwrap_or_else(|| panic!("the worker in {threads:?}"));
    assert!(worker.ended_by_signal, "{worker:?}");
    assert!(worker.blocked_s >= 1.0, "{worker:?}");
    assert!(worker.path().contains(&"stuck_here"), "{worker:?}");
}

/// A thread's last system call stays in the recorder's table after it
/// returned: a thread that slept once during the recording and then runs
/// user code (no call since) is not reported blocked, while the polling
/// main thread still is.
#[test]
fn a_thread_whose_call_returned_is_not_reported_blocked() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    let mut child = start_stuck(&["spin", go.to_str().expect("utf8")]);
    let pid = child.id();
    let out = dir.path().join("spin.capture");
    let rec = Background::start(&[
        "record",
        "-p",
        &pid.to_string(),
        "--duration",
        "2s",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    // Attached: the worker's nap and its spinning start now.
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::write(&go, b"").expect("the go file");
    let mut rec = rec;
    let status = rec.child.wait().expect("tracer exits");
    let _ = child.kill();
    let _ = child.wait();
    assert!(status.success());
    let cap = capture(&out);
    let stacks = blocked_stacks(&cap, pid);
    assert!(
        stacks.get(&pid).is_some_and(|m| m.0.contains("poll")),
        "the polling main thread in {stacks:?}"
    );
    assert_eq!(
        stacks.len(),
        1,
        "only the main thread is blocked, not the spinning worker: {stacks:?}"
    );
}
