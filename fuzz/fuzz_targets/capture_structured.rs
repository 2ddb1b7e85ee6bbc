//! The capture decoder on structurally valid files: chunks with correct
//! checksums holding fuzzed records (wrong kinds and sizes included) and
//! fuzzed metadata (probe ids, maps, segments, symbols), possibly cut.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|spec: eftrace_fuzz::Spec| {
    eftrace_fuzz::decode_all(&spec.bytes());
});
