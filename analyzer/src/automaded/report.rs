//! Text and SVG renderings of an [`Analysis`].

use std::fmt::Write as _;

use super::outliers::{Analysis, Method};
use crate::report::{Series, scatter_svg};

fn ms(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

/// The report as text: abnormal tasks, then their abnormal edges.
pub fn text(a: &Analysis) -> String {
    let mut out = String::new();
    let method = match a.config.method {
        Method::Kmedoids => format!(
            "k-medoids, {} cluster(s) {}",
            a.clusters,
            if a.config.clusters.is_some() {
                "as given"
            } else {
                "by BIC"
            }
        ),
        Method::Sample => format!(
            "nearest neighbour among {} sampled tasks",
            a.config.nn_sample.min(a.tasks.len())
        ),
    };
    let _ = writeln!(
        out,
        "{} tasks; {method}; edges per task {:.1} -> {:.1} after compression",
        a.tasks.len(),
        a.edges_original,
        a.edges_compressed
    );
    let _ = writeln!(
        out,
        "\n{:>3}  {:<16} {:>5} {:>8} {:>10} {:>10}  reference",
        "#", "host", "rank", "pid", "distance", "normalized"
    );
    for (i, t) in a.tasks.iter().take(a.config.top).enumerate() {
        let r = &a.tasks.iter().find(|x| x.task == t.reference);
        let _ = writeln!(
            out,
            "{:>3}  {:<16} {:>5} {:>8} {:>10.3} {:>10.3}  {}",
            i + 1,
            t.host,
            t.rank,
            t.pid,
            t.distance,
            t.normalized,
            match (a.config.method, r) {
                (Method::Kmedoids, Some(r)) => format!(
                    "medoid rank {} (cluster {})",
                    r.rank,
                    t.cluster.unwrap_or(0)
                ),
                (Method::Sample, Some(r)) => format!("nearest sample rank {}", r.rank),
                _ => "-".into(),
            }
        );
    }
    for ab in &a.abnormal {
        let s = &ab.score;
        let _ = writeln!(
            out,
            "\nrank {} ({}, pid {}): abnormal edges",
            s.rank, s.host, s.pid
        );
        for c in &ab.compressed {
            if c.edges > 1 && c.contribution > 0.0 {
                let _ = writeln!(
                    out,
                    "  compressed {:>6.3}  {} => {} ({} edges)",
                    c.contribution, c.from_label, c.to_label, c.edges
                );
            }
        }
        for (i, e) in ab.edges.iter().enumerate() {
            let fmt = |t: &Option<super::outliers::EdgeTimes>| match t {
                None => "absent".to_string(),
                Some(t) => {
                    let (kind, n) = if t.comm.is_none() {
                        ("comp", t.comp)
                    } else {
                        ("comm", t.comm)
                    };
                    format!(
                        "p={:.2} n={} {kind} {}±{} ms",
                        t.prob,
                        t.count,
                        ms(n.mean),
                        ms(n.sd)
                    )
                }
            };
            let _ = writeln!(
                out,
                "  {:>2}. {:>6.3}  {} -> {}\n        task: {}   reference: {}",
                i + 1,
                e.contribution,
                e.from_label,
                e.to_label,
                fmt(&e.task),
                fmt(&e.reference)
            );
        }
    }
    out
}

/// Every task's normalized distance against its rank, top tasks named.
pub fn svg(a: &Analysis) -> String {
    let series = vec![Series {
        label: "tasks".into(),
        points: a
            .tasks
            .iter()
            .map(|t| (f64::from(t.rank), t.normalized))
            .collect(),
    }];
    let labels: Vec<(f64, f64, String)> = a
        .tasks
        .iter()
        .take(a.config.top.min(3))
        .enumerate()
        .map(|(i, t)| {
            (
                f64::from(t.rank),
                t.normalized,
                format!("#{} rank {} {}", i + 1, t.rank, t.host),
            )
        })
        .collect();
    let top = a.tasks.first().map_or(1.0, |t| t.normalized.max(1.0));
    scatter_svg(
        "AutomaDeD: task distance from its reference",
        "MPI rank",
        "normalized distance",
        top,
        &series,
        &labels,
    )
}

/// The outlier verdict as text: the verdict line, the suspects' evidence,
/// then every rank's worst phase against its threshold.
pub fn verdict_text(j: &super::verdict::Judgement) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", j.verdict.summary);
    for s in &j.verdict.suspects {
        let _ = writeln!(
            out,
            "  rank {} (pid {} on {}): {}: {}",
            s.rank, s.pid, s.host, s.evidence, s.detail
        );
    }
    for u in &j.verdict.not_monitored {
        let _ = writeln!(out, "  rank {}: not monitored: {}", u.rank, u.reason);
    }
    let _ = writeln!(
        out,
        "\neach rank against {}:",
        if j.clean_runs == 0 {
            "its own phases and the other ranks of this run".to_string()
        } else {
            format!("its own {} clean run(s)", j.clean_runs)
        }
    );
    let _ = writeln!(
        out,
        "{:>5}  {:>19}  {:>13}  {:>22}  {:>9}",
        "rank", "computation/thresh", "worst phase", "CPU deficit/thresh", "new calls"
    );
    for (rank, p) in &j.phases {
        let _ = writeln!(
            out,
            "{:>5}  {:>8.3} / {:<8.3}  {:>5.1}-{:<5.1} s  {:>22}  {:>9}",
            rank,
            p.score,
            j.phase_thresholds.get(rank).copied().unwrap_or(0.0),
            p.from_s,
            p.to_s,
            match (j.cpu_phases.get(rank), j.cpu_thresholds.get(rank)) {
                (Some((d, at)), Some(t)) => format!("{d:.3} / {t:.3} @{at:.1}s"),
                _ => "-".into(),
            },
            match (
                j.new_transitions.get(rank),
                j.transition_thresholds.get(rank)
            ) {
                (Some(n), Some(t)) => format!("{n} (<= {t})"),
                _ => "-".into(),
            }
        );
    }
    out
}
