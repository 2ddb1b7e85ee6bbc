//! What crosses the agent's local boundaries: control-socket requests
//! (`tracer ctl`), and both directions of the pipe to the live analysis
//! process (requests it reads, answers the agent reads).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracer::agent::ctl::Request;
use tracer_common::live;

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<Request>(data);
    let mut input = data;
    while let Ok(Some((request, payloads))) = live::read_request(&mut input, 1 << 16) {
        assert_eq!(request.payloads().len(), payloads.len());
    }
    for line in data.split(|b| *b == b'\n') {
        let _ = live::parse_answer(line);
    }
});
