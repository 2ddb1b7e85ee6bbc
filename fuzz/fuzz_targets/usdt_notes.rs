//! USDT probes of targets: the `.note.stapsdt` section, alone and inside
//! an ELF object, and the argument specs in it.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tracer::usdt;

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            if let Ok(notes) = usdt::parse_notes(rest) {
                for n in notes {
                    let _ = usdt::parse_args(&n.args);
                }
            }
        }
        1 => {
            if let Ok(sites) = usdt::sites_in(rest, Path::new("fuzz")) {
                for s in sites {
                    if let Ok(spec) = s.spec() {
                        let _ = spec;
                    }
                    let _ = s.meta(0);
                }
            }
        }
        _ => {
            let _ = usdt::parse_args(&String::from_utf8_lossy(rest));
        }
    }
});
