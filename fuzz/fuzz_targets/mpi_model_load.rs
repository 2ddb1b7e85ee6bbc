//! MPI interference models from elsewhere (`analyzer mpi learn` output):
//! loaded and validated; a model that loads must detect on a real run's
//! profiles, and print and plot the result, without panicking and with
//! finite metrics.
#![no_main]

use std::path::Path;

use analyzer::{load, mpi};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = load::mpi_model_from_slice(data, Path::new("fuzz.json")) else {
        return;
    };
    let d = mpi::detect(&model, eftrace_fuzz::mpi_fixture());
    for p in &d.processors {
        if let Some(m) = p.metric {
            assert!(m.is_finite(), "{p:?}");
        }
    }
    let _ = mpi::report::text(&d);
    let _ = mpi::report::ils_svg(&d, "fuzz");
});
