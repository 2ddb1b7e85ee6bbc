//! The live analysis process (`analyzer live`) on fuzzed windows: what
//! the agent hands it is a capture of processes an attacker may run.
//! Decomposition into units, model scores (both scorings) and the
//! findings it answers with.
#![no_main]

use analyzer::live::serve::Server;
use libfuzzer_sys::fuzz_target;
use tracer_common::live::{FileRef, LIVE_VERSION, Request, Scoring};

fuzz_target!(|input: (eftrace_fuzz::Spec, bool)| {
    let (spec, edges) = input;
    let (_, model) = eftrace_fuzz::fixture();
    let model = serde_json::to_vec(model).unwrap_or_default();
    let mut server = Server::default();
    let setup = Request::Setup {
        version: LIVE_VERSION,
        model: Some(FileRef {
            name: "model.json".into(),
            bytes: model.len() as u64,
        }),
        scoring: if edges {
            Scoring::Edges
        } else {
            Scoring::Nodes
        },
        alert_score: 0.5,
        thresholds: None,
    };
    let answer = server.handle(&setup, &[model]);
    assert!(answer.error.is_none(), "{:?}", answer.error);
    let window = spec.bytes();
    let request = Request::Window {
        version: LIVE_VERSION,
        since_ns: spec.monotonic_ns.saturating_add(500),
        now_ns: u64::MAX,
        host: "fuzz".into(),
        bytes: window.len() as u64,
    };
    let _ = server.handle(&request, &[window]);
});
