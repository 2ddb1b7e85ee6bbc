//! Renderings of a [`ScoreReport`] for people: the short reason of a unit's
//! table row and the plot of every unit's score over time (000 Figure 6).

use super::{Evidence, ScoreReport, UnitScore};
use crate::report::{Series, scatter_svg};

/// The short reason in a unit's table row: its strongest evidence, or
/// the calls that weigh most in its score.
pub fn why(s: &UnitScore) -> String {
    let last = |path: &str| path.rsplit(" > ").next().unwrap_or(path).to_string();
    if s.evidence.is_empty() && !s.not_judged.is_empty() {
        return format!(
            "not judged: learned with {}, detached by this capture's budget",
            s.not_judged.join(", ")
        );
    }
    if let Some(e) = s.evidence.first() {
        return match e {
            Evidence::NoGroup | Evidence::NoModel { .. } => s.reason.clone(),
            Evidence::NewCall { paths, .. } => format!(
                "new call: {}",
                paths.iter().map(|p| last(p)).collect::<Vec<_>>().join(", ")
            ),
            Evidence::Skipped { paths, .. } => format!(
                "skipped: {}",
                paths.iter().map(|p| last(p)).collect::<Vec<_>>().join(", ")
            ),
            Evidence::NewBehaviour { learned } => {
                let near = s.behaviour.as_ref().and_then(|b| b.nearest.as_ref());
                let mut what = vec![format!("never in {learned} learned units")];
                if let Some(n) = near {
                    what.extend(n.missing.iter().map(|p| format!("without {}", last(p))));
                    what.extend(n.extra.iter().map(|p| format!("with {}", last(p))));
                }
                what.join("; ")
            }
            Evidence::Open {
                frames,
                exited,
                waiting,
            } => format!(
                "never completed ({}{} in {})",
                if *exited { "ended" } else { "capture ended" },
                if *waiting { ", waiting" } else { "" },
                frames.last().map_or("?".to_string(), |f| last(f))
            ),
            Evidence::OutOfOrder { this, usual, .. } => {
                format!("{this} out of order (normally {usual})")
            }
            Evidence::AboveRange { .. } => "score above the normal range".to_string(),
            Evidence::LeftFirst { quiet_s, .. } => {
                format!("ended a connection first; then the run stalled for {quiet_s:.2} s")
            }
            Evidence::ClosedFirst { peer, comm, .. } => {
                format!("closed first: its peer {comm}[{peer}] found the connection ended")
            }
            Evidence::Died { how, at_s, .. } => format!("process ended at {at_s:.3} s, {how}"),
            Evidence::Hung {
                tid,
                place,
                blocked_s,
                at_least,
                normal_s,
                ..
            } => format!(
                "thread {tid} blocked {}{blocked_s:.2} s at the end in {place}{}",
                if *at_least { "at least " } else { "" },
                match normal_s {
                    None => " (never in normal runs)".to_string(),
                    Some(n) => format!(" (normal runs: up to {n:.2} s)"),
                }
            ),
            Evidence::Repeated { units, peers, .. } => format!(
                "deviated {units} times in this tree (peers: {})",
                peers
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
    }
    if !s.reason.is_empty() {
        return s.reason.clone();
    }
    s.differences
        .iter()
        .take(2)
        .map(|d| format!("{:?} {} (p={:.2})", d.kind, last(&d.path), d.p).to_lowercase())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every unit's score against its start time, by unit kind; the top three
/// named, and the earliest anomaly when it is not among them.
pub fn scores_svg(report: &ScoreReport) -> String {
    let scores = &report.units;
    let mut series: Vec<Series> = Vec::new();
    for s in scores {
        let label = s.kind.name();
        match series.iter_mut().find(|x| x.label == label) {
            Some(x) => x.points.push((s.t_s, s.score)),
            None => series.push(Series {
                label: label.to_string(),
                points: vec![(s.t_s, s.score)],
            }),
        }
    }
    let mut labels: Vec<(f64, f64, String)> = scores
        .iter()
        .take(3)
        .enumerate()
        .map(|(i, s)| {
            (
                s.t_s,
                s.score,
                format!("#{} {}[{}] {}", i + 1, s.comm, s.pid, s.kind.name()),
            )
        })
        .collect();
    let mut earliest: Vec<usize> = report.earliest.iter().filter_map(|e| e.unit).collect();
    earliest.sort_unstable();
    earliest.dedup();
    for i in earliest.into_iter().filter(|i| *i >= 3) {
        let s = &scores[i];
        labels.push((
            s.t_s,
            s.score,
            format!(
                "earliest anomaly: #{} {}[{}] {}",
                i + 1,
                s.comm,
                s.pid,
                s.kind.name()
            ),
        ));
    }
    scatter_svg(
        "Suspect scores of execution units",
        "seconds since the capture started",
        "suspect score",
        1.0,
        &series,
        &labels,
    )
}
