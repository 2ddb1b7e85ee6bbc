//! How the programs talk to a person: a live line while recording on a
//! terminal, nothing of it elsewhere, and `--quiet`.

use std::{
    path::Path,
    process::{Command, Stdio},
};

use tests::{fixture, privileged, tracer_bin};

fn path(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// Records a steadily calling process by pid for 3 s with `extra` flags,
/// under a terminal (`script`) or with piped output; everything the tracer
/// wrote on its terminal or standard error.
fn record(dir: &Path, terminal: bool, extra: &[&str]) -> String {
    let calls = fixture("calls", None);
    let mut target = Command::new(&calls)
        .args(["pace", "500", "6"])
        .stdout(Stdio::null())
        .spawn()
        .expect("target starts");
    let out = dir.join(format!("{}{}.capture", terminal, extra.len()));
    let pid = target.id().to_string();
    let mut args = vec![
        path(&tracer_bin()).to_string(),
        "record".into(),
        "-p".into(),
        pid,
        "-f".into(),
        "leaf".into(),
        "--duration".into(),
        "3s".into(),
        "-o".into(),
        path(&out).to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let output = run_on(&args, terminal);
    let _ = target.kill();
    let _ = target.wait();
    assert!(output.status.success(), "{output:?}");
    text(&output)
}

/// Runs `args` (the program first) for at most 60 s, under a terminal
/// (`script` gives it a pseudo-terminal and copies what it drew to its own
/// standard output) or with piped output.
fn run_on(args: &[String], terminal: bool) -> std::process::Output {
    if terminal {
        Command::new("timeout")
            .args([
                "-s",
                "KILL",
                "60",
                "script",
                "-qefc",
                &args.join(" "),
                "/dev/null",
            ])
            .stdin(Stdio::null())
            .output()
    } else {
        Command::new("timeout")
            .args(["-s", "KILL", "60"])
            .args(args)
            .output()
    }
    .expect("the program runs")
}

/// Everything a run wrote, standard output then standard error.
fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// On a terminal the recording shows its rate, losses and processes as it
/// goes; piped, only the one-line steps and the summary; `--quiet`, nothing
/// when nothing was lost.
#[test]
fn recording_shows_a_live_line_on_a_terminal_only() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let shown = record(dir.path(), true, &[]);
    assert!(
        shown.contains("events (") && shown.contains("/s)") && shown.contains("nothing lost"),
        "no live line on a terminal: {shown}"
    );
    assert!(shown.contains("1 process"), "{shown}");
    assert!(shown.contains("recorded "), "the summary: {shown}");

    let piped = record(dir.path(), false, &[]);
    assert!(
        !piped.contains("events ("),
        "a live line when piped: {piped}"
    );
    assert!(piped.contains("tracer: recording 1 process(es)"), "{piped}");
    assert!(piped.contains("recorded "), "{piped}");

    let quiet = record(dir.path(), true, &["--quiet"]);
    assert_eq!(quiet.trim(), "", "--quiet on a terminal: {quiet}");
}

/// The analyzer's progress bar over captures: drawn on a terminal, not
/// when its output is piped, and not with `--quiet` on a terminal; the
/// verdict is printed either way.
#[test]
fn analyzer_progress_shows_on_a_terminal_only() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let capture = dir.path().join("calls.capture");
    let run = tests::tracer(&[
        "record",
        "-f",
        "site_*",
        "--sample-hz",
        "0",
        "-o",
        path(&capture),
        "--",
        path(&fixture("calls", None)),
        "run",
        "5",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let analyzer = tests::analyzer_bin();
    let diagnose = |terminal: bool, quiet: bool| -> String {
        let mut args = vec![path(&analyzer).to_string(), "diagnose".into()];
        if quiet {
            args.push("--quiet".into());
        }
        args.push(path(&capture).to_string());
        let output = run_on(&args, terminal);
        // No analysis applies to this capture alone: exit 0, "no verdict".
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        text(&output)
    };
    let shown = diagnose(true, false);
    assert!(
        shown.contains("diagnosing ["),
        "no bar on a terminal: {shown}"
    );
    assert!(shown.contains("verdict: no verdict"), "{shown}");
    let piped = diagnose(false, false);
    assert!(!piped.contains("diagnosing"), "a bar when piped: {piped}");
    assert!(piped.starts_with("verdict: no verdict"), "{piped}");
    let quiet = diagnose(true, true);
    assert!(!quiet.contains("diagnosing"), "a bar with --quiet: {quiet}");
    assert!(quiet.contains("verdict: no verdict"), "{quiet}");
}
