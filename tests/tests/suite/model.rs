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
            let mut t = vec![
                ("init".to_string(), g.initializer.canonical()),
                ("fin".to_string(), g.finalizer.canonical()),
            ];
            t.extend(g.handlers.iter().map(|(k, v)| (k.clone(), v.canonical())));
            t
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
