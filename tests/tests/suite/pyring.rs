//! Model-based localization on Python daemons (issue 7): the MPD-like ring
//! of `tests/fixtures/pyring.py` on Debian's `/usr/bin/python3.11`, traced
//! through its USDT probes (`--python`), Python frames as call-tree nodes;
//! normal runs learned, the partial-receive fault localized as on the C ring
//! (`model.rs`).

use std::path::{Path, PathBuf};

use analyzer::{
    model::GlobalModel,
    score::Scoring,
    units::{Variant, decompose_capture},
};
use tests::{PYTHON, capture, privileged, tracer};

/// Normal runs of the same ring score below this.
const NORMAL_THRESHOLD: f64 = 0.5;

fn pyring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pyring.py")
}

/// Records one ring run (4 daemons, 10 rounds) as a user would, the
/// launcher as the command (`tracer record --python -- python3.11 pyring.py
/// ...`): the USDT probes follow the daemons it forks. Returns the capture
/// path.
fn ring_run(dir: &Path, name: &str, port: u16, fault: Option<u16>) -> PathBuf {
    let out = dir.join(format!("{name}.capture"));
    let script = pyring();
    let port = port.to_string();
    let fault = fault.map(|n| n.to_string());
    let mut args = vec![
        "record",
        "--python",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        PYTHON,
        script.to_str().expect("utf8"),
        "4",
        "10",
        &port,
    ];
    args.extend(fault.as_deref());
    let run = tracer(&args);
    assert!(run.status.success(), "{name}: {}", run.stderr);
    out
}

/// Normal runs score low; in the faulty run the unit that handles the
/// connection reset (in daemon 2, whose right-hand side daemon 3 closed on
/// the partial header) ranks first, and daemon 3's unit that closed it is in
/// the top 3. Both papers' decompositions and scorings.
#[test]
fn the_partial_receive_fault_of_the_python_ring_is_localized() {
    let _usdt = tests::usdt_exclusive();
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
            assert_eq!(processes.len(), 5, "the launcher and each daemon it forked");
            let daemons = processes.iter().filter(|p| !p.signature.is_empty());
            for p in daemons {
                // Python frames are nodes: the establishing calls' stacks
                // name the Python functions that made them, from the
                // daemon's first call after the fork.
                assert!(
                    p.signature
                        .iter()
                        .any(|s| s.contains("pyring.py:connect_rhs:")),
                    "{:?}",
                    p.signature
                );
                let first = p.units.first().expect("units");
                assert!(
                    p.nodes
                        .path_string(first.nodes[0])
                        .contains("pyring.py:__init__:")
                        || first
                            .nodes
                            .iter()
                            .any(|n| p.nodes.path_string(*n).contains(":__init__:")),
                    "the daemon's first call (Daemon.__init__) is recorded"
                );
            }
            for p in &processes {
                model.learn(p);
            }
        }
        assert_eq!(
            model.groups.len(),
            2,
            "the daemons share one role, the launcher (no connection) is another"
        );

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
