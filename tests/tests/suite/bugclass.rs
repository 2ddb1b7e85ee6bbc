//! The bug-class suite of model-based localization (issue 20), its fast
//! subset: on the C ring of poll() daemons (`statusring`) every class once,
//! and on the Python job manager that forks its workers (`pyjobs`, traced
//! with `--python`, the workers followed) three classes, each at a fixed
//! daemon and time; normal runs learned. Exact assertions: the faulty
//! daemon holds the earliest anomaly and the highest-ranked unit, and
//! fresh normal runs raise nothing. On the thread-per-connection daemons
//! (`tpcpool`, blocking receives, no event loop) a skipped handler and a
//! crash; on the replicated log (`replog`, a strict order per connection) a
//! wrong branch and a message read in part; on the tree of aggregators
//! (`treeagg`) a message read in part, blamed on the end that closed. `cargo xtask model-matrix` runs
//! every class on every program at random daemons and times.

use std::path::PathBuf;

use analyzer::score::Verdict;
use tests::{
    bugclass::{self, FaultClass, Injection, LEARN, Program},
    privileged, tracer_bin,
};

/// Learns `program` from [`LEARN`] normal runs, checks that `normals`
/// fresh ones raise nothing, and that each fault of `faults` (class,
/// daemon, message number, crash mode) is localized in its daemon.
fn localizes(program: Program, normals: usize, faults: &[(FaultClass, u32, u32, &str)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tracer = tracer_bin();
    let exe = bugclass::executable(program);
    let width = program.ports() + 1;
    let base = tests::port_block(width * 4);
    let mut slot = 0;
    let mut record = |name: &str, fault: Option<Injection>| {
        slot = (slot + 1) % 4;
        let out = dir.path().join(format!("{name}.capture"));
        bugclass::record(
            &tracer,
            program,
            &exe,
            &out,
            base + slot * width,
            fault.as_ref(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let learned: Vec<PathBuf> = (0..LEARN)
        .map(|i| record(&format!("learn{i}"), None).capture)
        .collect();
    let model = bugclass::learn(&learned);
    for i in 0..normals {
        let run = record(&format!("normal{i}"), None);
        let report = bugclass::score(&model, &run.capture);
        assert_eq!(
            report.verdict,
            Verdict::NothingStandsOut,
            "{program}: a normal run: {}\n{:#?}",
            report.summary,
            report.first()
        );
    }
    for &(class, node, at, crash) in faults {
        let fault = Injection {
            class,
            node,
            at,
            crash: crash.into(),
        };
        let run = record(&format!("{class}-{node}-{at}"), Some(fault));
        assert!(run.fired, "{program} {class}: the fault was not injected");
        let report = bugclass::score(&model, &run.capture);
        let faulty = run.faulty_pid();
        let outcome = bugclass::judge(&run, &report);
        eprintln!("{program} {class} at daemon {node}: {}", report.summary);
        assert!(
            outcome.detected,
            "{program} {class}: the earliest anomaly is not in daemon {node} ({faulty:?}): {}\n{:#?}",
            report.summary,
            report.first()
        );
        assert!(
            outcome.top1,
            "{program} {class}: the first unit is not of daemon {node} ({faulty:?}): {:#?}",
            report.units.first()
        );
        assert!(
            !report.explanation.is_empty(),
            "{program} {class}: explained"
        );
    }
}

/// Every class on the ring of poll() daemons.
#[test]
fn statusring_bug_classes_are_localized() {
    if !privileged() {
        return;
    }
    use FaultClass::*;
    localizes(
        Program::StatusRing,
        2,
        &[
            (Skip, 1, 10, "exit"),
            (Extra, 2, 8, "exit"),
            (Branch, 3, 12, "exit"),
            (Partial, 0, 6, "exit"),
            (Hang, 2, 9, "exit"),
            (Crash, 1, 7, "segv"),
        ],
    );
}

/// Three classes on the Python job manager's forked workers.
#[test]
fn pyjobs_bug_classes_are_localized() {
    let _usdt = tests::usdt_exclusive();
    if !privileged() || tests::python().is_none() {
        return;
    }
    use FaultClass::*;
    localizes(
        Program::PyJobs,
        1,
        &[
            (Skip, 1, 3, "exit"),
            (Partial, 2, 4, "exit"),
            (Crash, 0, 3, "raise"),
        ],
    );
}

/// A thread-per-connection server blocks in its receive: a skipped handler
/// of one request shows only when each request is a unit of its own, and
/// the crash's victim, blocked in its receive since before the crash, is
/// dated when that receive returned. Request 16 routed to the wrong handler
/// (a GET where the client's cycle has a PUT) makes a unit like every
/// normal GET: only its place after the requests before it (a STATS, then
/// a GET) is new, and the order of the connection's units finds it.
#[test]
fn tpcpool_bug_classes_are_localized() {
    if !privileged() {
        return;
    }
    use FaultClass::*;
    localizes(
        Program::TpcPool,
        1,
        &[
            (Skip, 2, 12, "exit"),
            (Branch, 3, 16, "exit"),
            (Crash, 1, 20, "abort"),
        ],
    );
}

/// A tree of select() aggregators (held out of tuning): a message read in
/// part at the root, and at an inner daemon, closes the connection it came
/// on; the faulty daemon's own unit looks like a normal end-of-run unit,
/// and the first unit that deviates is its child's, which found the
/// connection ended where no learned unit did. The connecting socket's
/// port, recorded at both ends, names the daemon that closed first.
#[test]
fn treeagg_partial_is_blamed_on_the_end_that_closed_first() {
    if !privileged() {
        return;
    }
    use FaultClass::*;
    localizes(
        Program::TreeAgg,
        1,
        &[(Partial, 0, 11, "exit"), (Partial, 1, 17, "exit")],
    );
}

/// A replicated log: the leader's thread per follower, blocking calls on
/// Unix sockets, a strict order of messages on every connection (written
/// after the order rule was chosen, kept out of tuning). Message 7, an
/// APPEND handled as a COMMIT, makes a unit like every normal COMMIT:
/// only its place on the connection is new. A message read in part makes
/// the follower drop its leader.
#[test]
fn replog_bug_classes_are_localized() {
    if !privileged() {
        return;
    }
    use FaultClass::*;
    localizes(
        Program::RepLog,
        1,
        &[(Branch, 2, 7, "exit"), (Partial, 1, 12, "exit")],
    );
}
