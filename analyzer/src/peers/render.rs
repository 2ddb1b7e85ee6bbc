//! Reports for people: the diagnosis as text, the trained thresholds as text,
//! and an SVG of every server's score over time with its threshold, one panel
//! per metric (the JSON form is the serde [`Report`] itself).

use std::fmt::Write as _;

use super::types::{Calibration, Outcome, Report, Thresholds};
use crate::report::{COLORS, escape};

/// The diagnosis as text: verdict, per-metric score tables (`*` anomalous,
/// `!` faulty), root causes, notes.
pub fn report_text(report: &Report, distance: super::Distance) -> String {
    let mut s = String::new();
    let full: Vec<&str> = report.servers.iter().map(|v| v.server.as_str()).collect();
    let servers = short_labels(&full);
    let width = servers.iter().map(|l| l.len()).max().unwrap_or(0).max(12) + 2;
    let window_s = report
        .windows
        .first()
        .map_or(0.0, |w| (w.end_ns - w.start_ns) as f64 / 1e9);
    let shift_s = match report.windows.as_slice() {
        [a, b, ..] => (b.start_ns - a.start_ns) as f64 / 1e9,
        _ => window_s,
    };
    let _ = writeln!(
        s,
        "peer comparison of {} servers over {} windows of {window_s} s every {shift_s} s; \
         faulty = anomalous in {} of the last {} windows",
        full.len(),
        report.windows.len(),
        report.k,
        2 * report.k - 1
    );
    if servers.iter().zip(&full).any(|(a, b)| a != b) {
        let _ = writeln!(
            s,
            "servers: {}",
            servers
                .iter()
                .zip(&full)
                .map(|(a, b)| format!("{a} = {b}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    match report.verdict.outcome {
        Outcome::NoData => {
            let _ = writeln!(s, "verdict: NO VERDICT: no metric had data to compare");
        }
        Outcome::NoneStandsOut => {
            let _ = writeln!(
                s,
                "verdict: no server stands out (compared by {})",
                report
                    .verdict
                    .compared
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Outcome::Faulty => {}
    }
    for v in report.servers.iter().filter(|v| v.faulty) {
        let first = v.first_faulty_window.and_then(|w| report.windows.get(w));
        let _ = writeln!(
            s,
            "verdict: {} is FAULTY by {}{}",
            v.server,
            v.metrics
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", "),
            first.map_or(String::new(), |w| format!(
                " from window {} (t = {:.1} s, {} UTC)",
                w.index, w.t_s, w.wall
            ))
        );
    }
    // Servers found faulty by some metric but not called faulty, and why.
    let set_aside = [
        (
            &report.verdict.brief,
            "deviated briefly",
            "beside a server faulty for longer: a knock-on effect of its fault or a passing disturbance; --persistence 0 names every server found faulty",
        ),
        (
            &report.verdict.load_shift,
            "took over load",
            "it carried more of the work than its peers while a server faulty in its own resources shed it; --load-shift false names it",
        ),
    ];
    for (servers, what, why) in set_aside {
        for b in servers {
            let _ = writeln!(
                s,
                "{what}, not called faulty: {} by {} in {} windows from t = {:.1} s ({why})",
                b.server,
                b.metrics
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                b.windows,
                b.from_s
            );
        }
    }
    for silent in &report.verdict.no_data {
        let _ = writeln!(s, "no data for {}: {}", silent.metric.name(), silent.reason);
    }
    for metric in &report.metrics {
        let _ = writeln!(
            s,
            "\n{} ({} components; score = median {} distance to the other servers, in {}):",
            metric.name(),
            report.dimensions.get(metric).copied().unwrap_or(0),
            distance_name(distance),
            metric.unit_of(&report.normalized)
        );
        let _ = write!(s, "{:>5} {:>8} {:>12}", "win", "t (s)", "UTC");
        for l in &servers {
            let _ = write!(s, "{l:>width$}");
        }
        s.push('\n');
        let mut thresholds = vec![None; servers.len()];
        for w in &report.windows {
            let _ = write!(s, "{:>5} {:>8.1} {:>12}", w.index, w.t_s, w.wall);
            for (i, sw) in w.servers.iter().enumerate() {
                match sw.metrics.get(metric) {
                    Some(c) => {
                        thresholds[i] = Some(c.threshold);
                        let mark = match (c.anomalous, c.faulty) {
                            (_, true) => "*!",
                            (true, false) => "* ",
                            _ => "  ",
                        };
                        let _ = write!(s, "{:>w$}{mark}", number(c.score), w = width - 2);
                    }
                    None => {
                        let _ = write!(s, "{:>width$}", "-");
                    }
                }
            }
            s.push('\n');
        }
        let _ = write!(s, "{:>27}", "threshold");
        for t in &thresholds {
            let _ = write!(s, "{:>w$}  ", t.map_or("-".into(), number), w = width - 2);
        }
        s.push('\n');
    }
    if !report.metrics.is_empty() {
        let _ = match report.outlier {
            Some(f) => writeln!(
                s,
                "(* anomalous: score above the threshold and above {f} × the median of the \
                 other servers' scores; ! faulty)"
            ),
            None => writeln!(s, "(* anomalous: score above the threshold; ! faulty)"),
        };
    }
    for rc in &report.root_causes {
        let _ = writeln!(
            s,
            "\nroot cause hints for {} by {} ({} anomalous windows): components most different from the median server",
            rc.server,
            rc.metric.name(),
            rc.anomalous_windows
        );
        for (i, c) in rc.top.iter().enumerate() {
            let _ = writeln!(
                s,
                "  {:>2}. {:<60} {:>12}  {}{} {} per window vs the median",
                i + 1,
                c.component,
                number(c.distance),
                if c.mean_delta >= 0.0 { "+" } else { "-" },
                number(c.mean_delta.abs()),
                rc.metric.unit_of(&report.normalized)
            );
        }
    }
    for v in report
        .servers
        .iter()
        .filter(|v| !v.retransmit_peers.is_empty())
    {
        let mut peers: Vec<_> = v.retransmit_peers.iter().collect();
        peers.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let _ = writeln!(
            s,
            "\nTCP retransmissions of {}'s connections by remote address: {}",
            v.server,
            peers
                .iter()
                .take(8)
                .map(|(a, n)| format!("{a} ({n})"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for n in &report.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// Labels without the part every label shares, for table columns
/// (`/srv/b1/fs/brick` … `/srv/b4/fs/brick` → `b1` … `b4`); cut only at
/// separators, and left whole when that would leave one empty.
pub fn short_labels(labels: &[&str]) -> Vec<String> {
    let sep = |c: char| !c.is_alphanumeric();
    if labels.len() < 2 {
        return labels.iter().map(|l| l.to_string()).collect();
    }
    let first = labels[0];
    // Longest common prefix ending just after a separator.
    let mut prefix = 0;
    for (i, c) in first.char_indices() {
        if labels.iter().any(|l| !l[i..].starts_with(c)) {
            break;
        }
        if sep(c) {
            prefix = i + c.len_utf8();
        }
    }
    // Longest common suffix starting at a separator.
    let mut suffix = 0;
    for (n, c) in first.chars().rev().enumerate() {
        let len: usize = first.chars().rev().take(n + 1).map(char::len_utf8).sum();
        if labels
            .iter()
            .any(|l| l.len() < len || !l.ends_with(&first[first.len() - len..]))
        {
            break;
        }
        if sep(c) {
            suffix = len;
        }
    }
    let short: Vec<String> = labels
        .iter()
        .map(|l| {
            l.get(prefix..l.len().saturating_sub(suffix))
                .unwrap_or("")
                .to_string()
        })
        .collect();
    let mut unique = short.clone();
    unique.sort();
    unique.dedup();
    if short.iter().any(String::is_empty) || unique.len() != short.len() {
        return labels.iter().map(|l| l.to_string()).collect();
    }
    short
}

/// A summary of trained thresholds.
pub fn thresholds_text(t: &Thresholds) -> String {
    let mut s = String::new();
    let c = &t.config;
    let _ = writeln!(
        s,
        "thresholds from {} fault-free run(s), {} windows of {} s every {} s, {} distance; \
         threshold = {} (at least {})",
        t.runs.len(),
        t.runs.iter().map(|r| r.windows).sum::<usize>(),
        c.window_ns as f64 / 1e9,
        c.shift_ns as f64 / 1e9,
        distance_name(c.distance),
        c.calibration.describe(),
        number(c.min_threshold)
    );
    let margin = c.small_sample_margin(t.runs.len());
    if margin > 1.0 && matches!(c.calibration, Calibration::Sustained { .. }) {
        let _ = writeln!(
            s,
            "  cushion on the sustained bar widened {margin:.2}× for training on {} run(s), fewer than the {} it was chosen for (a fresh clean run beats every training run more often; --reference-runs)",
            t.runs.len(),
            c.reference_runs.unwrap_or(0)
        );
    }
    if c.pool {
        let _ = writeln!(
            s,
            "  pooled: each server's threshold is the largest of the servers' own (a burst one clean server showed, any may show; --pool false)"
        );
    }
    for (metric, servers) in &t.metrics {
        let _ = writeln!(
            s,
            "  {} ({}):",
            metric.name(),
            metric.unit_of(&t.config.normalize)
        );
        for (label, th) in servers {
            let _ = writeln!(
                s,
                "    {label:<24} threshold {:>12}  (max training score {}, {} windows)",
                number(th.threshold),
                number(th.max_score),
                th.windows
            );
        }
    }
    let skipped: Vec<&str> = c
        .metrics
        .iter()
        .filter(|m| !t.metrics.contains_key(m))
        .map(|m| m.name())
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(
            s,
            "  not trained (no data in the runs): {}",
            skipped.join(", ")
        );
    }
    for line in unlike_training_lines(t) {
        let _ = writeln!(s, "  {line}");
    }
    s
}

/// One line per training run that was unlike the other training runs as a
/// whole ([`super::TrainingRun::unlike_others`]); empty when none was.
pub fn unlike_training_lines(t: &Thresholds) -> Vec<String> {
    t.runs
        .iter()
        .filter(|r| !r.unlike_others.is_empty())
        .map(|r| {
            let by: Vec<String> = r
                .unlike_others
                .iter()
                .map(|(m, x)| format!("{} {x:.0}", m.name()))
                .collect();
            format!(
                "training run {} was unlike the other training runs as a whole (its servers' median score, times the largest of any server in the others: {}): every server deviated at once (host load, a shared disk or network), which no peer comparison calls, yet those windows set the thresholds{}; they are loose: a fault may go unnamed (train without that run, or on more runs)",
                r.name,
                by.join(", "),
                if t.config.pool { ", pooled for every server" } else { "" }
            )
        })
        .collect()
}

fn distance_name(d: super::Distance) -> &'static str {
    match d {
        super::Distance::Manhattan => "Manhattan",
        super::Distance::Relative => "relative",
        super::Distance::RelativeScaled => "relative-scaled",
        super::Distance::SymmetricKl => "symmetric-KL",
    }
}

/// A number with as many decimals as it needs to read well (never `-0`).
fn number(x: f64) -> String {
    let x = if x == 0.0 { 0.0 } else { x };
    let a = x.abs();
    if a >= 1000.0 || a == a.trunc() {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

/// Every server's score over time, one panel per metric, with each server's
/// threshold as a dashed line of its colour; anomalous windows are filled
/// dots, faulty ones ringed.
pub fn report_svg(report: &Report) -> String {
    let (w, panel_h, left, right, top) = (960.0, 230.0, 80.0, 190.0, 40.0);
    let h = top + panel_h * report.metrics.len().max(1) as f64 + 20.0;
    let x_max = report.windows.last().map_or(1.0, |w| w.t_s.max(1e-9)) * 1.02;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let full: Vec<&str> = report.servers.iter().map(|v| v.server.as_str()).collect();
    let short = short_labels(&full);
    let faulty: Vec<&str> = report
        .servers
        .iter()
        .zip(&short)
        .filter(|(v, _)| v.faulty)
        .map(|(_, l)| l.as_str())
        .collect();
    let title = if faulty.is_empty() {
        "Peer comparison: no server faulty".to_string()
    } else {
        format!("Peer comparison: faulty {}", faulty.join(", "))
    };
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        (w - right + left) / 2.0,
        escape(&title)
    );
    for (i, v) in report.servers.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let ly = top + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}{}</text>"#,
            w - right + 12.0,
            w - right + 32.0,
            w - right + 38.0,
            ly + 4.0,
            escape(&short[i]),
            if v.faulty { " (faulty)" } else { "" }
        );
    }
    for (p, metric) in report.metrics.iter().enumerate() {
        let y0 = top + panel_h * p as f64;
        let (plot_top, plot_bottom) = (y0 + 20.0, y0 + panel_h - 35.0);
        let cell = |wi: usize, si: usize| report.windows[wi].servers[si].metrics.get(metric);
        let y_max = report
            .windows
            .iter()
            .flat_map(|w| w.servers.iter())
            .filter_map(|sw| sw.metrics.get(metric))
            .map(|c| c.score.max(c.threshold))
            .fold(0.0, f64::max)
            .max(1e-9)
            * 1.05;
        let px = |x: f64| left + x / x_max * (w - left - right);
        let py = |y: f64| plot_bottom - y / y_max * (plot_bottom - plot_top);
        let _ = writeln!(
            s,
            r#"<text x="{left}" y="{}" font-size="13">{} — score ({}) over time</text>"#,
            y0 + 12.0,
            metric.name(),
            metric.unit_of(&report.normalized)
        );
        let _ = writeln!(
            s,
            r#"<line x1="{left}" y1="{plot_bottom}" x2="{}" y2="{plot_bottom}" stroke="black"/><line x1="{left}" y1="{plot_top}" x2="{left}" y2="{plot_bottom}" stroke="black"/>"#,
            w - right
        );
        for t in 0..=4 {
            let (xv, yv) = (x_max * f64::from(t) / 4.0, y_max * f64::from(t) / 4.0);
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{xv:.0} s</text><text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                px(xv),
                plot_bottom + 15.0,
                left - 6.0,
                py(yv) + 4.0,
                number(yv)
            );
        }
        for si in 0..report.servers.len() {
            let color = COLORS[si % COLORS.len()];
            let points: Vec<(f64, f64, bool, bool, f64)> = (0..report.windows.len())
                .filter_map(|wi| {
                    cell(wi, si).map(|c| {
                        (
                            report.windows[wi].t_s,
                            c.score,
                            c.anomalous,
                            c.faulty,
                            c.threshold,
                        )
                    })
                })
                .collect();
            if points.is_empty() {
                continue;
            }
            let line: Vec<String> = points
                .iter()
                .map(|(x, y, ..)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.5"/>"#,
                line.join(" ")
            );
            let threshold = points[0].4;
            let _ = writeln!(
                s,
                r#"<line x1="{left}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="{color}" stroke-dasharray="6 4" stroke-opacity="0.8"/>"#,
                py(threshold),
                w - right,
                py(threshold)
            );
            for (x, y, anomalous, faulty, _) in &points {
                let (r, fill) = if *anomalous {
                    (4.0, color)
                } else {
                    (2.0, "white")
                };
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{fill}" stroke="{color}"/>"#,
                    px(*x),
                    py(*y)
                );
                if *faulty {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="7" fill="none" stroke="black"/>"#,
                        px(*x),
                        py(*y)
                    );
                }
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_labels_drop_what_every_label_shares() {
        let l = [
            "/tmp/g/server1/fs/brick",
            "/tmp/g/server2/fs/brick",
            "/tmp/g/server10/fs/brick",
        ];
        assert_eq!(short_labels(&l), vec!["server1", "server2", "server10"]);
        // Cut at separators only: "b1x" and "b2x" keep their tails.
        assert_eq!(short_labels(&["b1x", "b2x"]), vec!["b1x", "b2x"]);
        assert_eq!(short_labels(&["srv[10]", "srv[11]"]), vec!["10", "11"]);
        // One label contained in another would become empty: keep them whole.
        assert_eq!(short_labels(&["/a/", "/a/b/"]), vec!["/a/", "/a/b/"]);
        assert_eq!(short_labels(&["x"]), vec!["x"]);
    }
}
