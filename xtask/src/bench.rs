//! Benchmarks (figures for issue notes, not pass/fail tests).

use clap::Args;

/// `cargo xtask bench` options.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {}

pub(crate) fn run_benches(_args: &BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("benchmarks are not written yet")
}
