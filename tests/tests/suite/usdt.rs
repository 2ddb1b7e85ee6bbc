//! USDT probes on Debian's CPython 3.11 (`/usr/bin/python3.11`, built with
//! `--with-dtrace`): listing, exact Python call counts, attaching to a
//! running interpreter, semaphores back to 0 after detach, and the error on
//! a binary without probes. Issue #7.

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::fs::FileExt as _,
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
};

use analyzer::{Capture, Event};
use tests::{Background, PYTHON, capture, events, privileged, python, tracer};

/// A script with known calls: `mid` once, `leaf` N times from `mid`, and
/// `twice` 2 times from module level. With `wait`, it prints `ready`, waits
/// for a line on stdin before calling, prints `done`, and waits for another
/// line before exiting (so its memory can be read after the tracer left).
const SCRIPT: &str = r#"import sys

def leaf(x):
    return x + 1

def mid(n):
    s = 0
    for _ in range(n):
        s = leaf(s)
    return s

def twice():
    return 2

wait = sys.argv[2] == "wait"
if wait:
    print("ready", flush=True)
    sys.stdin.readline()
print(mid(int(sys.argv[1])), twice(), twice(), flush=True)
if wait:
    print("done", flush=True)
    sys.stdin.readline()
"#;

fn script(dir: &Path) -> PathBuf {
    let path = dir.join("calls.py");
    std::fs::write(&path, SCRIPT).expect("write script");
    path
}

/// (entries, returns) per Python function name.
type Calls = BTreeMap<String, (usize, usize)>;

/// Entries and returns of the functions of `file`, per function name:
/// (entries, returns), counted from the USDT hits with their string args.
fn python_calls(cap: &Capture, file: &Path) -> Calls {
    python_calls_of(cap, file, None)
}

/// [`python_calls`] of process `pid` only (`None`: of every process).
fn python_calls_of(cap: &Capture, file: &Path, pid: Option<u32>) -> Calls {
    let file = file.to_str().expect("utf8");
    let mut strings: BTreeMap<(u32, u64), String> = BTreeMap::new();
    let mut out = Calls::new();
    for e in events(cap) {
        if let Some((pid, ptr, text)) = e.usdt_text() {
            strings.insert((pid, ptr), text);
            continue;
        }
        let Event::Usdt(hit) = e else { continue };
        if pid.is_some_and(|p| p != hit.header.pid) {
            continue;
        }
        let probe = cap.usdt_probe(hit.probe_id).expect("probe in the table");
        let entry = match probe.name.as_str() {
            "function__entry" => true,
            "function__return" => false,
            _ => continue,
        };
        let text = |i: usize| strings.get(&(hit.header.pid, hit.args[i])).cloned();
        if text(0).as_deref() != Some(file) {
            continue;
        }
        let function = text(1).expect("function name sent before the hit");
        let slot = out.entry(function).or_default();
        if entry {
            slot.0 += 1;
        } else {
            slot.1 += 1;
        }
    }
    out
}

fn expected(n: usize) -> Calls {
    [
        ("<module>".to_string(), (1, 1)),
        ("leaf".to_string(), (n, n)),
        ("mid".to_string(), (1, 1)),
        ("twice".to_string(), (2, 2)),
    ]
    .into_iter()
    .collect()
}

/// Records the script run with `extra` tracer flags: its calls, the
/// tracer's stderr, and the number of hits per probe name.
fn record_script(extra: &[&str], n: usize) -> (Calls, String, BTreeMap<String, usize>) {
    let python = python().expect("checked by the caller");
    let dir = tempfile::tempdir().expect("tempdir");
    let script = script(dir.path());
    let out = dir.path().join("py.capture");
    let n = n.to_string();
    let run = tracer(
        &[
            &["record", "--sample-hz", "0", "--no-syscalls"][..],
            extra,
            &[
                "-o",
                out.to_str().expect("utf8"),
                "--",
                python,
                script.to_str().expect("utf8"),
                &n,
                "run",
            ],
        ]
        .concat(),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    assert_eq!(cap.lost_records(), 0);
    let mut hits: BTreeMap<String, usize> = BTreeMap::new();
    for e in events(&cap) {
        if let Event::Usdt(hit) = e {
            *hits.entry(cap.usdt_name(hit.probe_id)).or_default() += 1;
        }
    }
    (python_calls(&cap, &script), run.stderr, hits)
}

/// `list-usdt` finds CPython's function probes with their three arguments
/// (file, function, line) and their semaphores.
#[test]
fn list_usdt_shows_python_function_entry_with_three_args() {
    let _usdt = tests::usdt_exclusive();
    let Some(python) = python() else { return };
    let run = tracer(&["list-usdt", "--json", python]);
    assert!(run.status.success(), "{}", run.stderr);
    let sites: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let entry = sites
        .iter()
        .find(|s| s["provider"] == "python" && s["name"] == "function__entry")
        .expect("python:function__entry listed");
    assert_eq!(entry["nargs"], 3, "{entry}");
    assert_ne!(entry["semaphore"], 0, "{entry}");
    let text = tracer(&["list-usdt", python]);
    assert!(text.stdout.contains("python:line "), "{}", text.stdout);
}

/// Exact Python call counts with `--usdt function__entry/return` and the
/// `line` probe attached (CPython 3.11 fires the function probes for
/// Python-to-Python calls only while `line`'s semaphore is raised).
#[test]
fn python_calls_are_counted_exactly_with_the_line_probe() {
    let _usdt = tests::usdt_exclusive();
    if !privileged() || python().is_none() {
        return;
    }
    let (calls, stderr, hits) = record_script(
        &[
            "--usdt",
            "python:function__entry=0,1",
            "--usdt",
            "python:function__return=0,1",
            "--usdt",
            "python:line",
        ],
        37,
    );
    assert_eq!(calls, expected(37), "{stderr}");
    assert!(hits.get("python:line").is_some_and(|n| *n > 37), "{hits:?}");
}

/// The `--python` preset holds `line`'s semaphore with a silent probe at a
/// site that is never reached: the same exact counts, no line records.
#[test]
fn python_preset_counts_exactly_without_line_records() {
    let _usdt = tests::usdt_exclusive();
    if !privileged() || python().is_none() {
        return;
    }
    let (calls, stderr, hits) = record_script(&["--python"], 37);
    assert_eq!(calls, expected(37), "{stderr}");
    assert_eq!(hits.get("python:line"), None, "{hits:?}");
    assert!(
        stderr.contains("python:line: semaphore raised by a silent probe at"),
        "{stderr}"
    );
}

/// Without `line`, CPython 3.11 fires `function__return` but never
/// `function__entry` for Python functions (entry is only reported on the
/// interpreter's tracing path): the reason the preset raises `line` (if
/// this starts failing, a newer CPython no longer needs it).
#[test]
fn python_to_python_calls_need_the_line_semaphore() {
    let _usdt = tests::usdt_exclusive();
    if !privileged() || python().is_none() {
        return;
    }
    let (calls, stderr, _) = record_script(
        &[
            "--usdt",
            "python:function__entry=0,1",
            "--usdt",
            "python:function__return=0,1",
        ],
        37,
    );
    assert_eq!(calls.get("leaf"), Some(&(0, 37)), "{calls:?} {stderr}");
    assert_eq!(calls.get("mid"), Some(&(0, 1)), "{calls:?} {stderr}");
}

/// A running interpreter waiting on stdin.
struct Interpreter {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Interpreter {
    fn start(script: &Path, n: usize) -> Self {
        let mut child = Command::new(PYTHON)
            .arg(script)
            .arg(n.to_string())
            .arg("wait")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python starts");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut me = Self { child, stdout };
        me.expect_line("ready");
        me
    }

    fn expect_line(&mut self, prefix: &str) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read python");
        assert!(line.starts_with(prefix), "expected {prefix}, got {line:?}");
    }

    fn release(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("piped");
        stdin.write_all(b"\n").expect("write");
        stdin.flush().expect("flush");
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Interpreter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The semaphores of `python:NAME` in process `pid`: its address from
/// `list-usdt`, its value read here from `/proc/PID/mem`.
fn semaphore(pid: u32, name: &str) -> u16 {
    let run = tracer(&["list-usdt", "--json", &pid.to_string()]);
    assert!(run.status.success(), "{}", run.stderr);
    let site: serde_json::Value = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON"))
        .find(|s| s["provider"] == "python" && s["name"] == name)
        .expect("probe listed for the process");
    let addr = site["semaphore_address"]
        .as_u64()
        .expect("semaphore mapped");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open mem");
    let mut buf = [0u8; 2];
    mem.read_exact_at(&mut buf, addr).expect("read semaphore");
    let value = u16::from_le_bytes(buf);
    assert_eq!(site["semaphore_value"], value, "list-usdt agrees");
    value
}

/// Attaching to an interpreter that is already running: exact counts of
/// the calls it makes while traced, semaphores raised while attached and
/// back to 0 once the tracer has gone (the probes stop costing anything).
#[test]
fn attaches_to_a_running_interpreter_and_restores_semaphores() {
    let _usdt = tests::usdt_exclusive();
    if !privileged() || python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let script = script(dir.path());
    let out = dir.path().join("running.capture");
    let mut py = Interpreter::start(&script, 11);
    let pid = py.pid();
    for name in ["function__entry", "function__return", "line"] {
        assert_eq!(semaphore(pid, name), 0, "{name} before attaching");
    }
    let bg = Background::start(&[
        "record",
        "-p",
        &pid.to_string(),
        "--python",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    for name in ["function__entry", "function__return", "line"] {
        assert_eq!(semaphore(pid, name), 1, "{name} while attached");
    }
    // Nothing else in the interpreter is raised (the holder's site has its own).
    assert_eq!(semaphore(pid, "gc__start"), 0);
    py.release();
    py.expect_line("11 2 2");
    py.expect_line("done");
    assert!(bg.stop("INT").success());
    for name in ["function__entry", "function__return", "line", "gc__start"] {
        assert_eq!(semaphore(pid, name), 0, "{name} after the tracer exited");
    }
    py.release();
    let cap = capture(&out);
    let calls = python_calls(&cap, &script);
    // Attached while the module was running: its return and the calls made
    // after the release are seen, its entry was before.
    assert_eq!(calls.get("leaf"), Some(&(11, 11)), "{calls:?}");
    assert_eq!(calls.get("mid"), Some(&(1, 1)), "{calls:?}");
    assert_eq!(calls.get("twice"), Some(&(2, 2)), "{calls:?}");
}

/// A binary without probes (a pyenv build, `/bin/true`) is a clear error
/// that names the cause.
#[test]
fn binary_without_probes_is_a_clear_error() {
    let _usdt = tests::usdt_exclusive();
    let listed = tracer(&["list-usdt", "/bin/true"]);
    assert_eq!(listed.status.code(), Some(2));
    assert!(
        listed.stderr.contains("/bin/true has no USDT probes"),
        "{}",
        listed.stderr
    );
    assert!(listed.stderr.contains("pyenv"), "{}", listed.stderr);
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("none.capture");
    let run = tracer(&[
        "record",
        "--python",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        "/bin/true",
    ]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("no USDT probes"), "{}", run.stderr);
    assert!(run.stderr.contains("--with-dtrace"), "{}", run.stderr);
}

/// A recorder killed with SIGKILL leaves no raised semaphore behind: the
/// links die with its file descriptors and the kernel lowers the counters.
#[test]
fn killed_tracer_leaves_semaphores_at_zero() {
    let _usdt = tests::usdt_exclusive();
    if !privileged() || python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let script = script(dir.path());
    let out = dir.path().join("killed.capture");
    let py = Interpreter::start(&script, 3);
    let pid = py.pid();
    let bg = Background::start(&[
        "record",
        "-p",
        &pid.to_string(),
        "--python",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    assert_eq!(semaphore(pid, "line"), 1, "line while attached");
    // Still running until the signal (an earlier exit would have a code).
    let status = bg.stop("KILL");
    assert_eq!(status.code(), None, "killed by the signal: {status}");
    // Link teardown can trail the process's exit by a grace period.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let values: Vec<u16> = ["function__entry", "function__return", "line"]
            .iter()
            .map(|n| semaphore(pid, n))
            .collect();
        if values == [0, 0, 0] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "semaphores still {values:?} after the tracer was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A daemon that forks a worker when told to: the worker's first Python
/// call is `work`, which calls `leaf` N times; it then waits for a line on
/// stdin before it exits, as the parent does for the worker.
const FORKING: &str = r#"import os, sys

def leaf(x):
    return x + 1

def work(n):
    s = 0
    for _ in range(n):
        s = leaf(s)
    return s

print("ready", flush=True)
sys.stdin.readline()
pid = os.fork()
if pid == 0:
    work(int(sys.argv[1]))
    print("worker", os.getpid(), flush=True)
    sys.stdin.readline()
    os._exit(0)
os.waitpid(pid, 0)
"#;

/// Attached to a running daemon (`-p`), the USDT probes follow the worker
/// it forks from the worker's first instruction (exact counts of its
/// calls, the first one included), and its semaphores go back to 0 when
/// the tracer exits while the worker still runs; with `--no-follow` the
/// worker's calls are not recorded, and its semaphores (inherited raised
/// from its parent's memory) go back to 0 all the same.
#[test]
fn usdt_probes_follow_forked_processes_unless_no_follow() {
    let _usdt = tests::usdt_exclusive();
    if !privileged() || python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("forking.py");
    std::fs::write(&script, FORKING).expect("write script");
    for follow in [true, false] {
        let out = dir.path().join(format!("fork-{follow}.capture"));
        let mut py = Interpreter::start(&script, 17);
        let parent = py.pid();
        let mut args = vec![
            "record".to_string(),
            "-p".into(),
            parent.to_string(),
            "--python".into(),
            "--sample-hz".into(),
            "0".into(),
            "-o".into(),
            out.display().to_string(),
        ];
        if !follow {
            args.push("--no-follow".into());
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let bg = Background::start(&refs);
        py.release();
        let mut line = String::new();
        py.stdout.read_line(&mut line).expect("read python");
        let worker: u32 = line
            .strip_prefix("worker ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("expected the worker's pid, got {line:?}"));
        assert!(bg.stop("INT").success());
        for name in ["function__entry", "function__return", "line"] {
            assert_eq!(
                semaphore(worker, name),
                0,
                "follow {follow}: the worker's {name} after the tracer exited"
            );
        }
        // The worker reads the next line, exits, and so does the parent.
        py.release();
        assert!(py.child.wait().expect("python exits").success());
        let cap = capture(&out);
        assert_eq!(cap.lost_records(), 0);
        let calls = python_calls_of(&cap, &script, Some(worker));
        if follow {
            let want: Calls = [("leaf".to_string(), (17, 17)), ("work".to_string(), (1, 1))]
                .into_iter()
                .collect();
            assert_eq!(calls, want, "the worker's calls, its first included");
        } else {
            assert!(calls.is_empty(), "--no-follow: {calls:?}");
        }
        // The parent's own calls: nothing of the worker's.
        assert!(
            !python_calls_of(&cap, &script, Some(parent)).contains_key("work"),
            "follow {follow}"
        );
    }
}

/// Following forks probes the function sites for every process without
/// their semaphores; the kernel allows one semaphore per site, so while
/// another probe holds a site with its semaphore (here a tracer run with
/// `--no-follow`) the recording is refused with what to do.
#[test]
fn a_site_held_with_its_semaphore_refuses_following_and_says_what_to_do() {
    let _usdt = tests::usdt_exclusive();
    if !privileged() || python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let script = script(dir.path());
    let py = Interpreter::start(&script, 1);
    let pid = py.pid().to_string();
    let held = dir.path().join("held.capture");
    let bg = Background::start(&[
        "record",
        "-p",
        &pid,
        "--python",
        "--no-follow",
        "--sample-hz",
        "0",
        "-o",
        held.to_str().expect("utf8"),
    ]);
    let out = dir.path().join("refused.capture");
    let run = tracer(&[
        "record",
        "-p",
        &pid,
        "--python",
        "--sample-hz",
        "0",
        "--duration",
        "1s",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("another probe holds one of them with its semaphore")
            && run.stderr.contains("record with --no-follow"),
        "{}",
        run.stderr
    );
    assert!(bg.stop("INT").success());
}
