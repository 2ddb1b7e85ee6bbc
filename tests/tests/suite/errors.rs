//! Bad input gets a clear message and exit code 2.

use tests::{fixture, privileged, tracer};

fn fails_with(args: &[&str], needle: &str) {
    let run = tracer(args);
    assert_eq!(run.status.code(), Some(2), "{args:?}: {}", run.stderr);
    assert!(
        run.stderr.contains(needle),
        "{args:?}: expected '{needle}' in: {}",
        run.stderr
    );
}

/// Nonexistent pid, nonexistent binary, pattern matching nothing.
#[test]
fn bad_targets_and_patterns_are_explained() {
    if !privileged() {
        return;
    }
    fails_with(
        &["record", "-p", "999999999"],
        "no process with pid 999999999",
    );
    fails_with(
        &["record", "--exe", "/nonexistent/daemon"],
        "executable /nonexistent/daemon does not exist",
    );
    let calls = fixture("calls", None);
    let c = calls.to_str().expect("utf8");
    fails_with(
        &["record", "-f", "no_such_function", "--", c, "run", "1"],
        "pattern 'no_such_function' matches no function",
    );
    fails_with(
        &["record", "-f", "libnothere:f", "--", c, "run", "1"],
        "no object named 'libnothere'",
    );
    fails_with(&["record"], "nothing to trace");
    fails_with(&["replay", "/nonexistent.capture"], "cannot open capture");
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"not a capture at all").expect("write");
    fails_with(
        &["replay", junk.to_str().expect("utf8")],
        "not a capture file",
    );
}

/// Without root, recording refuses with advice.
#[test]
fn not_root_is_explained() {
    if !privileged() {
        return;
    }
    // Drop to nobody for this one run.
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(tests::tracer_bin())
        .args(["record", "-p", "1"])
        .output()
        .expect("setpriv runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs root"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
