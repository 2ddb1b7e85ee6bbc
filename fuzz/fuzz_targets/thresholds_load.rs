//! Thresholds files from elsewhere: loaded and validated; thresholds that
//! load must drive a live peer comparison without panicking.
#![no_main]

use std::path::Path;

use analyzer::{live::LivePeers, load};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = load::thresholds_from_slice(data, Path::new("fuzz.json")) else {
        return;
    };
    let (cap, _) = eftrace_fuzz::fixture();
    let mut peers = LivePeers::new(t);
    let _ = peers.evaluate(cap, 0, u64::MAX / 2);
});
