//! The capture decoder on raw bytes: `Capture::read`, then everything
//! `tracer replay`, `analyzer events` and `summary` do with the result.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    eftrace_fuzz::decode_all(data);
});
