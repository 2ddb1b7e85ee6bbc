//! Model-based localization on Python daemons (issue 7): the MPD-like ring
//! of `tests/fixtures/pyring.py` on Debian's `/usr/bin/python3.11`, traced
//! through its USDT probes (`--python`), Python frames as call-tree nodes;
//! normal runs learned, the partial-receive fault localized as on the C ring
//! (`model.rs`).

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use analyzer::{
    model::GlobalModel,
    score::Scoring,
    units::{Variant, decompose_capture},
};
use tests::{Background, PYTHON, capture, privileged};

/// Normal runs of the same ring score below this.
const NORMAL_THRESHOLD: f64 = 0.5;

fn pyring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pyring.py")
}

/// Records one ring run (4 daemons, 10 rounds): the daemons are held until
/// the tracer is attached to each (`-p`), since a pid's uprobe_multi link
/// does not follow forks. Returns the capture path.
fn ring_run(dir: &Path, name: &str, port: u16, fault: Option<u16>) -> PathBuf {
    let out = dir.join(format!("{name}.capture"));
    let mut cmd = Command::new(PYTHON);
    cmd.arg(pyring())
        .args(["--hold", "4", "10", &port.to_string()]);
    if let Some(node) = fault {
        cmd.arg(node.to_string());
    }
    let mut ring = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3.11 starts");
    let mut stdout = BufReader::new(ring.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read the ring's pids");
    let pids: Vec<String> = line
        .strip_prefix("daemons ")
        .unwrap_or_else(|| panic!("expected the daemons' pids, got {line:?}"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(pids.len(), 4, "{line}");
    let mut args = vec!["record", "--python", "--sample-hz", "0"];
    for pid in &pids {
        args.extend(["-p", pid]);
    }
    args.extend(["-o", out.to_str().expect("utf8")]);
    let mut bg = Background::start(&args);
    let stdin = ring.stdin.as_mut().expect("piped");
    stdin.write_all(b"\n").expect("release the daemons");
    stdin.flush().expect("flush");
    let status = ring.wait().expect("the ring ends");
    // 0: completed; 3: hung (the fault), stopped by the launcher.
    assert_eq!(
        status.code(),
        Some(if fault.is_some() { 3 } else { 0 }),
        "{name}"
    );
    // The tracer stops by itself once every traced daemon exited.
    let started = Instant::now();
    let traced = loop {
        if let Some(s) = bg.child.try_wait().expect("tracer status") {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the tracer did not stop after the ring ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(traced.success(), "tracer: {:?}", bg.stderr_lines);
    out
}

/// Normal runs score low; in the faulty run the unit that handles the
/// connection reset (in daemon 2, whose right-hand side daemon 3 closed on
/// the partial header) ranks first, and daemon 3's unit that closed it is in
/// the top 3. Both papers' decompositions and scorings.
#[test]
fn the_partial_receive_fault_of_the_python_ring_is_localized() {
    if !privileged() {
        return;
    }
    if tests::python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let base = tests::port_block(25);
    let normal: Vec<_> = (0..3)
        .map(|i| ring_run(dir.path(), &format!("normal{i}"), base + i * 5, None))
        .collect();
    let trial = ring_run(dir.path(), "trial", base + 15, None);
    // The fault at daemon 2: daemon 3 gets a partial header and closes its
    // left-hand connection; daemon 2 sees its right-hand connection reset.
    let faulty_base = base + 20;
    let faulty = ring_run(dir.path(), "faulty", faulty_base, Some(2));
    for (variant, scoring) in [
        (Variant::Paper000, Scoring::Nodes),
        (Variant::Paper001, Scoring::Edges),
    ] {
        let mut model = GlobalModel::new(variant);
        for path in &normal {
            let processes = decompose_capture(&capture(path), variant);
            assert_eq!(processes.len(), 4, "one traced process per daemon");
            for p in processes {
                // Python frames are nodes: the establishing calls' stacks
                // name the Python functions that made them.
                assert!(
                    p.signature
                        .iter()
                        .any(|s| s.contains("pyring.py:connect_rhs:")),
                    "{:?}",
                    p.signature
                );
                model.learn(&p);
            }
        }
        assert_eq!(model.groups.len(), 1, "all daemons share one role");

        let (worst_normal, top) = tests::assert_ring_fault_localized(
            &model,
            scoring,
            (&trial, &faulty, faulty_base),
            NORMAL_THRESHOLD,
            [":handle_lhs_input:", ":close_connection:"],
        );
        eprintln!("{variant:?}: normal trial {worst_normal:.3}; faulty run: {top}");
    }
}
