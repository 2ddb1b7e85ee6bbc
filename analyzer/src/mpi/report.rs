//! Reports of a [`Detection`]: the verdict and a text table (metric and
//! threshold per processor, final ILS per typical sequence), an SVG of
//! ILS(p, l, t) against t, one panel per processor, one line per typical
//! sequence, like the paper's Figures 1–12; and the hang analysis as text.

use std::fmt::Write as _;

use super::metric::Detection;
use crate::report::{COLORS, escape};

/// The text report: the verdict, then the metric per processor, its
/// threshold and final ILS per typical sequence.
pub fn text(d: &Detection) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", d.verdict.summary);
    if let Some(note) = d.pace_note() {
        let _ = writeln!(s, "note: {note}");
    }
    let _ = writeln!(
        s,
        "\ninterference metric m(p) per processor (K = {}; threshold learned from clean runs)",
        d.k
    );
    if !d.learned_from.is_empty() {
        let _ = writeln!(s, "model {}", d.learned_from);
    }
    let _ = writeln!(
        s,
        "{:>5}  {:<14} {:>8} {:<6} {:>7} {:>7} {:>14} {:>9} {:>13}  ILS(p,l,end) per own typical sequence (* = used)",
        "rank", "host", "pid", "cpus", "m(p)", "thresh", "m by thirds", "own time", "CPU deficit"
    );
    for p in &d.processors {
        let cpus = p
            .cpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let num = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |m| format!("{m:.3}"));
        let ils = p
            .sequences
            .iter()
            .map(|q| format!("{:.2}{}", q.ils_end, if q.used { "*" } else { " " }))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            s,
            "{:>5}  {:<14} {:>8} {:<6} {:>7} {:>7} {:>14} {:>9} {:>13}  {}{}{}",
            p.rank,
            p.host,
            p.pid,
            cpus,
            num(p.metric),
            num(p.threshold),
            if p.metric_parts.is_empty() {
                "-".to_string()
            } else {
                p.metric_parts
                    .iter()
                    .map(|x| x.map_or_else(|| "-".to_string(), |v| format!("{v:.2}")))
                    .collect::<Vec<_>>()
                    .join(" ")
            },
            p.own_slowdown
                .map_or_else(|| "-".to_string(), |x| format!("{x:.2}x")),
            match (p.cpu_deficit, p.cpu_threshold) {
                (Some(c), Some(t)) => format!("{c:.3} / {t:.3}"),
                _ => "-".to_string(),
            },
            ils,
            if p.interfered { "  INTERFERED" } else { "" },
            p.note
                .as_deref()
                .map(|n| format!("  (metric not computed: {n})"))
                .unwrap_or_default()
        );
    }
    s
}

/// ILS(p, l, t) against t as SVG: one panel per processor; t is shown as the
/// fraction of the sequence's occurrences (sequences of different lengths
/// have different numbers of samples).
pub fn ils_svg(d: &Detection, title: &str) -> String {
    let cols = d.processors.len().clamp(1, 4);
    let rows = d.processors.len().div_ceil(cols).max(1);
    let (pw, ph) = (300.0, 200.0);
    let (ml, mt, legend) = (45.0, 30.0, 150.0);
    let w = cols as f64 * (pw + ml) + legend + 20.0;
    let h = rows as f64 * (ph + mt + 30.0) + 40.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" font-size="14" text-anchor="middle">{}</text>"#,
        (w - legend) / 2.0,
        escape(title)
    );
    for (i, p) in d.processors.iter().enumerate() {
        let x0 = (i % cols) as f64 * (pw + ml) + ml;
        let y0 = (i / cols) as f64 * (ph + mt + 30.0) + 40.0 + mt;
        let _ = writeln!(
            s,
            r#"<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let metric = p.metric.map_or_else(|| "-".into(), |m| format!("{m:.3}"));
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">rank {} ({}) m = {}</text>"#,
            x0 + pw / 2.0,
            y0 - 6.0,
            p.rank,
            escape(&p.host),
            metric
        );
        for (y, label) in [(0.0, "0"), (0.5, "0.5"), (1.0, "1")] {
            let py = y0 + ph - y * ph;
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{label}</text><line x1="{x0}" y1="{py}" x2="{}" y2="{py}" stroke="lightgray"/>"#,
                x0 - 4.0,
                py + 4.0,
                x0 + pw
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" fill="dimgray">t (fraction of occurrences)</text>"#,
            x0 + pw / 2.0,
            y0 + ph + 16.0
        );
        for (l, q) in p.sequences.iter().enumerate() {
            if q.ils.is_empty() {
                continue;
            }
            let n = q.ils.len() as f64;
            let points: Vec<String> = q
                .ils
                .iter()
                .enumerate()
                .map(|(t, v)| {
                    format!(
                        "{:.1},{:.1}",
                        x0 + (t as f64 + 1.0) / n * pw,
                        y0 + ph - v.clamp(0.0, 1.0) * ph
                    )
                })
                .collect();
            let dash = if q.used {
                ""
            } else {
                r#" stroke-dasharray="3,3""#
            };
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.5"{dash} points="{}"/>"#,
                COLORS[l % COLORS.len()],
                points.join(" ")
            );
        }
    }
    let lx = cols as f64 * (pw + ml) + 10.0;
    let most = d
        .processors
        .iter()
        .map(|p| p.sequences.len())
        .max()
        .unwrap_or(0);
    for l in 0..most {
        let ly = 60.0 + l as f64 * 16.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2"/><text x="{}" y="{}">the rank's TS{}</text>"#,
            lx + 18.0,
            COLORS[l % COLORS.len()],
            lx + 22.0,
            ly + 4.0,
            l + 1
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{lx}" y="{}" fill="dimgray">dashed: not used</text>"#,
        70.0 + most as f64 * 16.0
    );
    s.push_str("</svg>\n");
    s
}

/// The hang analysis as text: the culprits first, then every rank's place
/// in the wait-for graph, call sites labelled by `sites`.
pub fn hang_text(
    h: &super::waitfor::HangReport,
    profiles: &super::Profiles,
    sites: &mut super::sites::Sites<'_>,
) -> String {
    use super::waitfor::RankState;
    let mut s = String::new();
    let secs = |ns: u64| ns as f64 / 1e9;
    if !h.hung {
        let _ = writeln!(
            s,
            "not hung: no rank still running was idle for {:.1} s ({})",
            secs(h.threshold_ns),
            h.threshold_source
        );
        return s;
    }
    let site = |sites: &mut super::sites::Sites<'_>, rank: u32, addr: u64| {
        profiles
            .rank(rank)
            .map(|p| sites.label(&p.host, p.pid, addr))
            .filter(|l| !l.is_empty())
            .unwrap_or_else(|| "an unknown site".into())
    };
    let _ = writeln!(
        s,
        "HUNG: a rank made no MPI progress for over {:.1} s ({})",
        secs(h.threshold_ns),
        h.threshold_source
    );
    if h.culprits.is_empty() {
        let _ = writeln!(
            s,
            "culprit: not found (no rank the others wait for is outside MPI, and no odd collective or wait cycle)"
        );
    }
    for c in &h.culprits {
        let Some(w) = h.rank(c.rank) else {
            continue;
        };
        let _ = writeln!(
            s,
            "culprit: rank {} (pid {} on {}): {}",
            c.rank, w.pid, w.host, c.reason
        );
        let what = if w.call.is_some() {
            "stuck at"
        } else {
            "last MPI call at"
        };
        let _ = writeln!(s, "  {what} {}", site(sites, c.rank, w.call_site));
        if !c.blocking.is_empty() {
            let _ = writeln!(
                s,
                "  holding up ranks {}",
                c.blocking
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let _ = writeln!(s, "\nwait-for graph when recording stopped:");
    for w in &h.ranks {
        let state = match &w.state {
            RankState::Finished => "finished".to_string(),
            RankState::Dead { .. } => "exited".to_string(),
            RankState::Stopped => "stopped".to_string(),
            RankState::Computing => "computing".to_string(),
            RankState::Blocked | RankState::InMpi => {
                format!("in {}", w.call.as_deref().unwrap_or("MPI"))
            }
        };
        let waits = if w.waits_for.is_empty() {
            String::new()
        } else {
            format!(
                "  waits for {}",
                w.waits_for
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let _ = writeln!(
            s,
            "  rank {:>3}  {:<22} at {}{}  (idle {:.1} s)",
            w.rank,
            state,
            site(sites, w.rank, w.call_site),
            waits,
            secs(w.idle_ns)
        );
    }
    s
}
