//! Model-based localization (papers 000/001) end to end: a ring of traced
//! daemons, normal runs learned, the partial-receive fault localized.

use analyzer::{
    model::GlobalModel,
    score::Scoring,
    units::{Variant, decompose_capture},
};
use tests::{capture, fixture, privileged};

/// Records one ring run (4 daemons, 10 rounds) and returns the capture path.
fn ring_run(
    dir: &std::path::Path,
    name: &str,
    port: u16,
    fault: Option<u16>,
) -> std::path::PathBuf {
    let out = dir.join(format!("{name}.capture"));
    tests::record_ring(&fixture("ring", None), &out, port, fault);
    out
}

/// Normal runs score low; in the faulty run the unit that handles the
/// connection reset ranks first and the faulty daemon's closing unit is in
/// the top 3. Checked for both papers' decompositions and scorings.
#[test]
fn the_partial_receive_fault_is_localized() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let base = tests::port_block(20);
    let normal: Vec<_> = (0..3)
        .map(|i| ring_run(dir.path(), &format!("normal{i}"), base + i * 5, None))
        .collect();
    let trial = ring_run(dir.path(), "trial", base + 15, None);
    // The fault at daemon 2: daemon 3 gets a partial header and closes its
    // left-hand connection; daemon 2 sees its right-hand connection reset.
    let faulty_base = tests::port_block(5);
    let faulty = ring_run(dir.path(), "faulty", faulty_base, Some(2));
    for (variant, scoring) in [
        (Variant::Paper000, Scoring::Nodes),
        (Variant::Paper001, Scoring::Edges),
    ] {
        let mut model = GlobalModel::new(variant);
        for path in &normal {
            for p in decompose_capture(&capture(path), variant) {
                model.learn(&p);
            }
        }
        assert_eq!(
            model.groups.len(),
            1,
            "all daemons share one role (and the launcher has no units with connections)"
        );

        tests::assert_ring_fault_localized(
            &model,
            scoring,
            (&trial, &faulty, faulty_base),
            0.5,
            ["handle_lhs_input", "close_connection@"],
        );
    }
}

/// The same localization whatever the loop waits with (select, epoll) and
/// when each daemon runs two loops in two threads (the main thread's over
/// the listener and left-hand side, a second thread's over the right-hand
/// side, where the reset shows): units are cut per thread, and the other
/// thread's interleaved calls neither split nor join them.
#[test]
fn select_epoll_and_threaded_loops_are_decomposed_and_localized() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = fixture("ring", None);
    for wait in ["select", "epoll", "poll+threads", "epoll+threads"] {
        let base = tests::port_block(25);
        let run = |name: &str, port: u16, fault: Option<u16>| {
            let out = dir.path().join(format!("{wait}-{name}.capture"));
            tests::record_ring_waiting(&exe, &out, port, fault, Some(wait));
            out
        };
        let normal: Vec<_> = (0..3)
            .map(|i| run(&format!("normal{i}"), base + i * 5, None))
            .collect();
        let trial = run("trial", base + 15, None);
        let faulty = run("faulty", base + 20, Some(2));
        for (variant, scoring) in [
            (Variant::Paper000, Scoring::Nodes),
            (Variant::Paper001, Scoring::Edges),
        ] {
            let (model, runs, _) = tests::learn_calibrated(&normal, variant);
            assert_eq!(model.groups.len(), 1, "{wait}: one role");
            // Each daemon's units come from each of its threads, and each
            // thread role (the function its first traced call came from)
            // has its own initializer tree.
            let (threads, roles) = if wait.ends_with("+threads") {
                (2, vec!["main", "rhs_thread"])
            } else {
                (1, vec!["main"])
            };
            let learned: Vec<&str> = model.groups[0]
                .initializer
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(learned, roles, "{wait}");
            for p in runs[0].iter().filter(|p| !p.signature.is_empty()) {
                let mut tids: Vec<u32> = p.units.iter().map(|u| u.tid).collect();
                tids.sort_unstable();
                tids.dedup();
                assert_eq!(tids.len(), threads, "{wait}: {}[{}]", p.comm, p.pid);
            }
            let (worst, top) = tests::assert_ring_fault_localized(
                &model,
                scoring,
                (&trial, &faulty, base + 20),
                0.5,
                ["handle_lhs_input", "close_connection@"],
            );
            eprintln!("{wait} {variant:?}: normal worst {worst:.3}; faulty top 3: {top}");
        }
    }
}

/// Models merge: learning two halves and merging equals learning all.
#[test]
fn models_learned_in_parts_merge_to_the_whole() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let base = tests::port_block(40);
    let runs: Vec<_> = (0..2)
        .map(|i| ring_run(dir.path(), &format!("m{i}"), base + i * 5, None))
        .collect();
    let mut whole = GlobalModel::new(Variant::Paper000);
    let mut parts = Vec::new();
    for path in &runs {
        let mut part = GlobalModel::new(Variant::Paper000);
        for p in decompose_capture(&capture(path), Variant::Paper000) {
            whole.learn(&p);
            part.learn(&p);
        }
        parts.push(part);
    }
    let mut merged = GlobalModel::new(Variant::Paper000);
    for part in &parts {
        merged.merge(part);
    }
    assert_eq!(merged.groups.len(), whole.groups.len());
    for (a, b) in merged.groups.iter().zip(&whole.groups) {
        assert_eq!(
            (a.signature.clone(), a.processes),
            (b.signature.clone(), b.processes)
        );
        let trees = |g: &analyzer::model::GroupModel| {
            analyzer::units::UnitKind::ALL
                .into_iter()
                .flat_map(|kind| {
                    g.trees(kind)
                        .iter()
                        .map(move |(k, v)| (format!("{} {k}", kind.name()), v.canonical()))
                })
                .collect::<Vec<_>>()
        };
        for ((ka, ta), (kb, tb)) in trees(a).into_iter().zip(trees(b)) {
            assert_eq!(ka, kb);
            assert_eq!(
                ta.keys().collect::<Vec<_>>(),
                tb.keys().collect::<Vec<_>>(),
                "{ka}"
            );
            for (path, p) in &ta {
                assert!(
                    (p - tb[path]).abs() < 1e-9,
                    "{ka} {path}: {p} vs {}",
                    tb[path]
                );
            }
        }
    }
}

/// The CLI a user runs (and the demo): `analyzer model learn` writes a
/// calibrated model of one role, `model score --json` a versioned report
/// whose verdict is anomalous, whose earliest anomaly is the closing unit
/// (explained: the call no learned unit made there) and, ranked by
/// evidence, first; `--rank score` (the papers' order) puts the reset
/// handler first; the text table says the same, `--svg` writes the plot,
/// and a file that is not a model is refused with its name.
#[test]
fn the_analyzer_cli_learns_scores_and_names_the_earliest_anomaly() {
    use analyzer::score::{DifferenceKind, SCORE_REPORT_VERSION, ScoreReport, Verdict};
    use tests::analyzer;

    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let base = tests::port_block(20);
    let normal: Vec<String> = (0..3)
        .map(|i| {
            ring_run(dir.path(), &format!("normal{i}"), base + i * 5, None)
                .display()
                .to_string()
        })
        .collect();
    let faulty_base = base + 15;
    let faulty = ring_run(dir.path(), "faulty", faulty_base, Some(2));
    let faulty = faulty.display().to_string();
    let model = dir.path().join("model.json").display().to_string();

    let mut learn = vec!["model", "learn", "-o", &model];
    learn.extend(normal.iter().map(String::as_str));
    let run = analyzer(&learn);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.stdout.contains("from 3 captures into 1 process groups"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("normal ranges of"),
        "not calibrated: {}",
        run.stdout
    );

    let svg = dir.path().join("scores.svg");
    let svg_arg = svg.display().to_string();
    let run = analyzer(&[
        "model", "score", "--model", &model, &faulty, "--json", "--svg", &svg_arg,
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let report: ScoreReport = serde_json::from_str(&run.stdout).expect("a score report");
    assert_eq!(report.version, SCORE_REPORT_VERSION);
    assert_eq!(report.verdict, Verdict::Anomalous, "{}", report.summary);
    let by_score = analyzer(&[
        "model", "score", "--model", &model, &faulty, "--json", "--rank", "score",
    ]);
    assert!(by_score.status.success(), "{}", by_score.stderr);
    let by_score: ScoreReport = serde_json::from_str(&by_score.stdout).expect("a score report");
    let first = &by_score.units[0];
    assert_eq!(
        (first.peer.as_deref(), first.score),
        (Some(format!("127.0.0.1:{}", faulty_base + 3).as_str()), 1.0),
        "{first:#?}"
    );
    let earliest = report.earliest_in(&faulty).expect("an earliest anomaly");
    assert_eq!(report.first_anomaly, Some(0), "ranked by evidence: first");
    assert!(
        report
            .explanation
            .iter()
            .any(|l| l.contains("close_connection@") && l.contains("where none of the")),
        "{:#?}",
        report.explanation
    );
    assert!(
        earliest
            .differences
            .iter()
            .any(|d| d.kind == DifferenceKind::Unexpected
                && d.path.contains("handle_lhs_input")
                && d.path.contains("close_connection@")),
        "{earliest:#?}"
    );
    assert_eq!(report.first(), Some(earliest), "one capture: the same unit");
    let plot = std::fs::read_to_string(&svg).expect("the SVG was written");
    assert!(
        plot.starts_with("<svg") && plot.contains("#1 ring["),
        "{plot}"
    );

    let run = analyzer(&["model", "score", "--model", &model, &faulty, "--top", "5"]);
    assert!(run.status.success(), "{}", run.stderr);
    let rank = report
        .earliest
        .iter()
        .find_map(|e| e.unit)
        .expect("an index")
        + 1;
    assert!(
        run.stdout
            .contains(&format!("earliest anomaly in {faulty}: rank {rank} (")),
        "{}",
        run.stdout
    );
    assert_eq!(rank, 1, "ranked by evidence, the earliest anomaly leads");
    assert!(run.stdout.contains("verdict: "), "{}", run.stdout);
    let run = analyzer(&[
        "model", "score", "--model", &model, &faulty, "--top", "5", "--rank", "score",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let top_row = run.stdout.lines().nth(1).expect("a first row");
    assert!(top_row.contains(" 1.000!"), "{top_row}");

    // A capture where the model belongs: refused, the file named.
    let run = analyzer(&["model", "score", "--model", &faulty, &faulty]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("{faulty} is not a model")),
        "{}",
        run.stderr
    );
}
