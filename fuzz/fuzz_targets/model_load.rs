//! Model files from elsewhere: loaded and validated; a model that loads
//! must score units (both scorings), merge and print without panicking.
#![no_main]

use std::path::Path;

use analyzer::{
    load,
    score::{Scoring, score_processes},
    units::decompose_capture,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = load::model_from_slice(data, Path::new("fuzz.json")) else {
        return;
    };
    let (cap, learned) = eftrace_fuzz::fixture();
    let processes = decompose_capture(cap, model.variant);
    for scoring in [Scoring::Nodes, Scoring::Edges] {
        for s in score_processes(&model, cap, "fuzz", &processes, scoring) {
            assert!(s.score.is_finite(), "{s:?}");
        }
    }
    let mut merged = learned.clone();
    if merged.variant == model.variant {
        merged.merge(&model);
    }
    for g in &model.groups {
        for kind in analyzer::units::UnitKind::ALL {
            for tree in g.trees(kind).values() {
                for n in 0..tree.nodes.len().min(64) {
                    let _ = tree.path_display(n as u32);
                    let _ = tree.p(n as u32);
                }
            }
        }
    }
});
