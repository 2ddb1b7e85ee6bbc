//! `cargo xtask bench-mpi`: repeat the timed MPI interference test (learn
//! like the matrix from clean runs and a hogged 2-rank run, then a clean
//! run, continuous and on-off hogs on either core, on two problem sizes)
//! and count its verdicts.

use std::collections::BTreeMap;

use anyhow::Context as _;

/// Runs the timed test `cpu_hog_is_named_on_the_hogged_processor` `repeat`
/// times and prints, per (problem size, load), how many of its verdicts
/// were right (the hogged rank named and no other; nothing abnormal on a
/// clean run), and how many repetitions passed every check.
pub(crate) fn bench_mpi(repeat: usize) -> anyhow::Result<()> {
    let results = crate::target_dir().join("xtask/mpi-results.tsv");
    std::fs::create_dir_all(results.parent().context("results dir")?)?;
    let _ = std::fs::remove_file(&results);
    let tracer = crate::build_tracer(false)?;
    let mut passed = 0;
    for i in 0..repeat {
        println!("repetition {} of {repeat}", i + 1);
        let status = crate::cargo()
            .env("PATH", crate::tool_path())
            .env("TRACER_BIN", &tracer)
            .env("EFTRACE_MPI_RESULTS", &results)
            .args([
                "test",
                "-p",
                "tests",
                "--test",
                "integration",
                "cpu_hog",
                "--",
            ])
            .args(["--include-ignored", "--test-threads", "1"])
            .status()
            .context("running cargo test")?;
        passed += usize::from(status.success());
    }
    let text = std::fs::read_to_string(&results)
        .with_context(|| format!("reading {}", results.display()))?;
    let mut by: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if let [size, load, verdict] = f[..] {
            let e = by.entry((size.to_string(), load.to_string())).or_default();
            e.0 += 1;
            e.1 += usize::from(verdict == "right");
        }
    }
    println!("\n| problem size | load | runs | right verdicts |");
    println!("| --- | --- | --- | --- |");
    for ((size, load), (n, right)) in by {
        println!("| {size} | {load} | {n} | {right} |");
    }
    println!(
        "\n{passed} of {repeat} repetitions passed every check (the hogged rank named and no other; nothing abnormal on clean runs)"
    );
    Ok(())
}
