//! End-to-end tests: the real tracer binary on real processes (needs root).

mod suite;
