//! Following children across fork and exec.

use analyzer::Event;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use tests::{Background, capture, entries_by_function, events, fixture, privileged, tracer};
use tracer_common::record::{ExitStatus, lifecycle};

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
    let pid = run_while_paused(recorder, &calls);

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

/// The program of a process that ended before the recorder read its first
/// record is still placed, from its enrolment record: a call it made into
/// a library is placed in its own code, not left unplaced (issue 17: an
/// MPI rank's calls into libmpi had no call site). Only the library is
/// probed, so no probe hit places the program.
#[test]
fn a_process_gone_before_its_records_are_read_has_its_program_placed() {
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
        "--no-syscalls",
        "--exe",
        exe,
        "-f",
        "libc.so.6:fflush",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    let pid = run_while_paused(recorder, &calls);

    let cap = capture(&out);
    let program = calls.canonicalize().expect("canonical");
    let sym = analyzer::Symbolizer::new(&cap);
    let sites: Vec<String> = events(&cap)
        .iter()
        .filter_map(|e| match e {
            Event::Entry { rec, .. } if rec.header.pid == pid => Some(
                sym.user(pid, rec.call_site)
                    .filter(|l| Path::new(l.object) == program)
                    .map_or_else(
                        || format!("unplaced {:#x}", rec.call_site),
                        |l| l.to_string(),
                    ),
            ),
            _ => None,
        })
        .collect();
    assert!(
        !sites.is_empty() && sites.iter().all(|s| !s.starts_with("unplaced")),
        "{sites:?} {:?}",
        cap.processes
    );
}

/// Runs `calls run 3` to its end while `recorder` is stopped (SIGSTOP), so
/// the recorder reads nothing while the process lives and is reaped (the
/// kernel side keeps its records in the ring); then lets it read them and
/// stops it. Returns the process's pid.
fn run_while_paused(recorder: Background, calls: &Path) -> u32 {
    let signal = |sig: &str| {
        let status = Command::new("kill")
            .args(["-s", sig, &recorder.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -s {sig}");
    };
    signal("STOP");
    let mut child = Command::new(calls)
        .args(["run", "3"])
        .stdout(Stdio::null())
        .spawn()
        .expect("calls runs");
    let pid = child.id();
    let ran = child.wait().expect("calls exits");
    signal("CONT");
    assert!(ran.success(), "calls: {ran}");
    let stopped = recorder.stop("INT");
    assert!(stopped.success(), "tracer: {stopped}");
    pid
}

/// Whether `pid`'s executable text differs from the file `exe`: a uprobe
/// installed in a process writes a breakpoint into its copy of the page.
fn text_patched(pid: u32, exe: &Path) -> bool {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let file = std::fs::read(exe).expect("exe");
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("mem");
    let mut compared = 0;
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') || Path::new(f[5]) != exe {
            continue;
        }
        let (start, end) = f[0].split_once('-').expect("range");
        let start = u64::from_str_radix(start, 16).expect("hex");
        let end = u64::from_str_radix(end, 16).expect("hex");
        let offset = usize::from_str_radix(f[2], 16).expect("hex");
        let len = ((end - start) as usize).min(file.len().saturating_sub(offset));
        let mut text = vec![0u8; len];
        mem.seek(SeekFrom::Start(start)).expect("seek");
        mem.read_exact(&mut text).expect("read text");
        compared += len;
        if text != file[offset..offset + len] {
            return true;
        }
    }
    assert!(compared > 0, "no text of {} in {pid}", exe.display());
    false
}

/// `calls ARGS` (a mode that waits for a line on its stdin first).
fn waiting(calls: &Path, args: &[&str]) -> Child {
    Command::new(calls)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("calls starts")
}

/// Sends `child` its line and waits for it to succeed.
fn go_and_wait(child: &mut Child) {
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("write");
    drop(stdin);
    assert!(child.wait().expect("calls exits").success());
}

/// `tracer record -p PID -f leaf` without samples, and `extra`, into `out`.
fn record_leaf(pid: u32, out: &Path, extra: &[&str]) -> Background {
    let pid = pid.to_string();
    let mut args = vec![
        "record",
        "-p",
        &pid,
        "-f",
        "leaf",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
    ];
    args.extend_from_slice(extra);
    Background::start(&args)
}

/// The children the capture saw forked, in order.
fn forked(cap: &analyzer::Capture) -> Vec<u32> {
    events(cap)
        .iter()
        .filter_map(|e| match e {
            Event::Lifecycle(l) if l.event == lifecycle::FORK => Some(l.child_tid),
            _ => None,
        })
        .collect()
}

/// Attached to a running process, function probes are installed in it and
/// not in another process of the same program (each trap costs
/// microseconds, recorded or not: a second instance of a probed program
/// ran 40 times slower), and a child it forks later gets them too.
#[test]
fn probes_of_a_running_process_stay_out_of_others_and_follow_its_forks() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("scoped.capture");
    let mut traced = waiting(&calls, &["waitfork", "4"]);
    let mut other = waiting(&calls, &["wait", "4"]);
    let recorder = record_leaf(traced.id(), &out, &[]);
    let exe = calls.canonicalize().expect("fixture path");
    assert!(
        text_patched(traced.id(), &exe),
        "the traced process has the probe"
    );
    assert!(
        !text_patched(other.id(), &exe),
        "the other process has none"
    );
    go_and_wait(&mut traced);
    go_and_wait(&mut other);
    assert!(recorder.stop("INT").success());

    let cap = capture(&out);
    let fork = *forked(&cap).first().expect("a fork event");
    let counts = entries_by_function(&cap);
    // run(4): 4 calls from site_a, 3 from site_b, all in the child.
    assert_eq!(
        counts.get(&(fork, "leaf".to_string())),
        Some(&7),
        "{counts:?}"
    );
    assert_eq!(counts.len(), 1, "only the child called leaf: {counts:?}");
    // The capture says when the child's probes came: its calls before were
    // not recorded.
    let summary = analyzer::decode::format::Summary::of(&cap);
    let late: Vec<&String> = summary.late_probes.keys().collect();
    assert_eq!(late, [&format!("calls[{fork}]")], "{summary}");
    assert!(
        summary.to_string().contains("attached after the fork"),
        "{summary}"
    );
}

/// A traced process that forks more children than probes are scoped to:
/// past the limit the probes fire in every process of the program (one
/// link per object instead of one per process, each of which every hit
/// would run), and every child's calls are still recorded.
#[test]
fn many_followed_children_widen_the_probes_to_every_process() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("widened.capture");
    let kids = 20;
    let mut traced = waiting(&calls, &["waitfork", "2", &kids.to_string()]);
    let mut other = waiting(&calls, &["wait", "2"]);
    let recorder = record_leaf(traced.id(), &out, &[]);
    let exe = calls.canonicalize().expect("fixture path");
    assert!(!text_patched(other.id(), &exe), "scoped at first");
    let mut stdin = traced.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("write");
    drop(stdin);
    // The children sleep a second before their calls.
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert!(text_patched(other.id(), &exe), "the probes went everywhere");
    assert!(traced.wait().expect("traced exits").success());
    go_and_wait(&mut other);
    assert!(recorder.stop("INT").success());

    let cap = capture(&out);
    let children = forked(&cap);
    assert_eq!(children.len(), kids, "{children:?}");
    let counts = entries_by_function(&cap);
    // run(2): 2 calls from site_a, 3 from site_b, in each child.
    for child in &children {
        assert_eq!(
            counts.get(&(*child, "leaf".to_string())),
            Some(&5),
            "{counts:?}"
        );
    }
    assert_eq!(counts.len(), kids, "only the children: {counts:?}");
}

/// `--probe-everywhere` installs the probes in every process of the
/// program, as a command or `--exe` target does.
#[test]
fn probe_everywhere_reaches_other_processes_of_the_program() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("everywhere.capture");
    let (mut traced, mut other) = (
        waiting(&calls, &["wait", "1"]),
        waiting(&calls, &["wait", "1"]),
    );
    let recorder = record_leaf(traced.id(), &out, &["--probe-everywhere"]);
    let exe = calls.canonicalize().expect("fixture path");
    assert!(text_patched(traced.id(), &exe));
    assert!(
        text_patched(other.id(), &exe),
        "the other process has it too"
    );
    go_and_wait(&mut traced);
    go_and_wait(&mut other);
    assert!(recorder.stop("INT").success());
    // Only the traced process's calls are recorded all the same.
    let counts = entries_by_function(&capture(&out));
    assert_eq!(
        counts.keys().map(|(p, _)| *p).collect::<Vec<_>>(),
        [traced.id()],
        "{counts:?}"
    );
}

/// How each process ended is recorded: an exit status, or the signal that
/// killed it. The model analysis tells a crash from a normal end by it,
/// without a probe in the function that crashed.
#[test]
fn how_each_process_ended_is_recorded() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("ends.capture");
    // Three children, run one after another: one exits with 3, one is
    // killed by the abort signal it sends itself, one ends normally.
    let run = tracer(&[
        "record",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        "sh",
        "-c",
        "sh -c 'exit 3'; sh -c 'kill -ABRT $$'; sh -c 'exit 0'; exit 0",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let mut ended: Vec<(u64, u32, Option<ExitStatus>)> = events(&cap)
        .iter()
        .filter_map(|e| match e {
            Event::Lifecycle(l) if l.event == lifecycle::EXIT && l.group_dead == 1 => {
                Some((l.header.ts_ns, l.header.pid, l.exit_status()))
            }
            _ => None,
        })
        .collect();
    ended.sort_unstable();
    let statuses: Vec<Option<ExitStatus>> = ended.iter().map(|e| e.2).collect();
    // Whether the abort dumped a core depends on the host's core limit.
    assert!(
        matches!(
            statuses.as_slice(),
            [
                Some(ExitStatus::Exited(3)),
                Some(ExitStatus::Killed { signal: 6, .. }),
                Some(ExitStatus::Exited(0)),
                Some(ExitStatus::Exited(0)),
            ]
        ),
        "{ended:?}"
    );
    let text = tracer(&["replay", out.to_str().expect("utf8")]);
    assert!(
        text.stdout.contains("(process ended: killed by SIGABRT"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("(process ended: exit status 3)"),
        "{}",
        text.stdout
    );
}
