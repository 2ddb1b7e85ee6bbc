//! `cargo xtask bench-mpi`: repeat the timed MPI interference test (learn on
//! a clean and a hogged 2-rank run, then clean / on-off / continuous hog on
//! two problem sizes) and summarize the hogged processor's metric.

use std::collections::BTreeMap;

use anyhow::Context as _;

/// Runs the ignored test `repeat` times and prints min / median / max per
/// (problem size, load), and how many repetitions ordered clean < on-off <
/// continuous on both sizes.
pub(crate) fn bench_mpi(repeat: usize) -> anyhow::Result<()> {
    let results = crate::target_dir().join("xtask/mpi-results.tsv");
    std::fs::create_dir_all(results.parent().context("results dir")?)?;
    let _ = std::fs::remove_file(&results);
    let tracer = crate::build_tracer(false)?;
    let mut ordered = 0;
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
            .args(["--ignored", "--test-threads", "1"])
            .status()
            .context("running cargo test")?;
        ordered += usize::from(status.success());
    }
    let text = std::fs::read_to_string(&results)
        .with_context(|| format!("reading {}", results.display()))?;
    let mut by: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if let [size, load, m] = f[..]
            && let Ok(m) = m.parse::<f64>()
        {
            by.entry((size.to_string(), load.to_string()))
                .or_default()
                .push(m);
        }
    }
    println!("\n| problem size | load | runs | min m(p) | median | max |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for ((size, load), mut v) in by {
        v.sort_by(f64::total_cmp);
        println!(
            "| {size} | {load} | {} | {:.3} | {:.3} | {:.3} |",
            v.len(),
            v[0],
            crate::bench::median(v.clone()),
            v[v.len() - 1]
        );
    }
    println!(
        "\n{ordered} of {repeat} repetitions passed every check (same-size clean < 0.15; on both sizes continuous > 0.6 and clean < on-off < continuous)"
    );
    Ok(())
}
