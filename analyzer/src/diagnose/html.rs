//! The diagnosis as one self-contained HTML page: no network fetch, inline
//! CSS, SVG plots and a few lines of script (sortable tables, the table of
//! contents). Everything that came from a capture (names, paths, hosts) is
//! untrusted and goes through [`esc`].

use std::fmt::Write as _;

use super::{AnalysisKind, Diagnosis, Level, Outcome, Status};
use crate::{
    automaded,
    mpi::{self, waitfor::HangReport},
    peers,
    score::{ScoreReport, scores_svg, why},
};

/// The analyses' own reports, drawn in their sections when they ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reports<'a> {
    /// Model-based scores.
    pub model: Option<&'a ScoreReport>,
    /// Peer comparison.
    pub peers: Option<&'a peers::Report>,
    /// MPI interference.
    pub interference: Option<&'a mpi::Detection>,
    /// Outlier ranks: the verdict and the ranking (when there were enough
    /// ranks).
    pub outliers: Option<(
        &'a automaded::verdict::Judgement,
        Option<&'a automaded::Analysis>,
    )>,
    /// Hang detection.
    pub hang: Option<&'a HangReport>,
}

/// Rows shown per table (the JSON has everything).
const ROWS: usize = 200;

/// Text escaped for HTML element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    crate::report::escape(s)
}

fn num(x: Option<f64>, digits: usize) -> String {
    x.filter(|x| x.is_finite())
        .map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
}

/// A table cell whose sort value is `v` (numbers sort as numbers).
fn cell_num(x: Option<f64>, digits: usize) -> String {
    match x.filter(|x| x.is_finite()) {
        Some(v) => format!(r#"<td data-v="{v}">{v:.digits$}</td>"#),
        None => r#"<td data-v="">-</td>"#.to_string(),
    }
}

/// The rank, host and pid cells that open every per-rank row.
fn rank_cells(rank: u32, host: &str, pid: u32) -> String {
    format!(
        r#"<td data-v="{rank}">{rank}</td><td>{}</td><td>{pid}</td>"#,
        esc(host)
    )
}

fn table_head(out: &mut String, id: &str, columns: &[&str]) {
    let _ = write!(out, r#"<table class="sortable" id="{id}"><thead><tr>"#);
    for c in columns {
        let _ = write!(out, "<th>{}</th>", esc(c));
    }
    out.push_str("</tr></thead><tbody>\n");
}

fn table_end(out: &mut String, shown: usize, total: usize) {
    out.push_str("</tbody></table>\n");
    if total > shown {
        let _ = writeln!(
            out,
            "<p class=note>{} more rows not shown (the --json report has all).</p>",
            total - shown
        );
    }
}

const STYLE: &str = r#"
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
.verdict{padding:1em;border-radius:6px;border:2px solid}
.suspect_found{background:#fdecea;border-color:#d62728}
.nothing_stands_out{background:#eaf6ea;border-color:#2ca02c}
.no_data{background:#f4f4f4;border-color:#7f7f7f}
.status{font-weight:bold;padding:.1em .4em;border-radius:4px}
.st-found{background:#fdecea}.st-nothing_stands_out{background:#eaf6ea}
.st-no_data,.st-not_run{background:#eee}.st-failed{background:#ffe9c6}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f0f0f0;cursor:pointer;user-select:none}
th.asc::after{content:" \25B2"}th.desc::after{content:" \25BC"}
.note{color:#555;font-size:.9em}.untrained{color:#8c564b;font-weight:bold}
code{font-size:.9em;overflow-wrap:anywhere}
#script-error{background:#d62728;color:white;padding:1em}
svg{max-width:100%;height:auto}
nav#toc a{margin-right:1em}
"#;

/// Sortable tables, the table of contents, and errors made visible: a
/// script error shows as `#script-error`; the page marks `data-ready` on
/// `<body>` when it finished.
const SCRIPT_ERRORS: &str = r#"
window.addEventListener('error', function (e) {
  var d = document.getElementById('script-error');
  if (!d) { d = document.createElement('div'); d.id = 'script-error'; document.body.prepend(d); }
  d.textContent += 'script error: ' + e.message + ' ';
});
"#;

const SCRIPT: &str = r#"
(function () {
  function value(td) {
    var v = td.getAttribute('data-v');
    if (v === null) { return td.textContent.trim().toLowerCase(); }
    return v === '' ? Infinity : parseFloat(v);
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var asc = !th.classList.contains('asc');
        table.querySelectorAll('th').forEach(function (h) { h.classList.remove('asc', 'desc'); });
        th.classList.add(asc ? 'asc' : 'desc');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = value(a.cells[col]), y = value(b.cells[col]);
          var c = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  var toc = document.getElementById('toc');
  document.querySelectorAll('section[id]').forEach(function (s) {
    var a = document.createElement('a');
    a.href = '#' + s.id;
    a.textContent = s.querySelector('h2').textContent;
    toc.appendChild(a);
  });
  document.body.setAttribute('data-ready', '1');
})();
"#;

/// The whole page.
pub fn render(d: &Diagnosis, r: &Reports<'_>) -> String {
    let mut out = String::new();
    let title = match d.outcome {
        Outcome::SuspectFound => "suspect found",
        Outcome::NothingStandsOut => "nothing stands out",
        Outcome::NoData => "no verdict (no data)",
    };
    let _ = write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>eftrace diagnosis: {title}</title>
<style>{STYLE}</style>
<script>{SCRIPT_ERRORS}</script>
</head><body>
<h1>eftrace diagnosis</h1>
<p class=note>Captures: {}</p>
<nav id="toc"></nav>
"#,
        d.captures
            .iter()
            .map(|c| format!("<code>{}</code>", esc(c)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    verdict(&mut out, d);
    suspects(&mut out, d);
    for kind in AnalysisKind::ALL {
        analysis(&mut out, d, r, kind);
    }
    let _ = write!(out, "<script>{SCRIPT}</script>\n</body></html>\n");
    out
}

fn verdict(out: &mut String, d: &Diagnosis) {
    let outcome = match d.outcome {
        Outcome::SuspectFound => "suspect_found",
        Outcome::NothingStandsOut => "nothing_stands_out",
        Outcome::NoData => "no_data",
    };
    let _ = write!(
        out,
        r#"<section id="verdict"><h2>Verdict</h2><div class="verdict {outcome}" data-outcome="{outcome}">"#
    );
    out.push_str("<ul>");
    for line in &d.summary {
        let _ = write!(out, "<li>{}</li>", esc(line));
    }
    out.push_str("</ul>");
    for s in d.suspects.iter().take(4) {
        let _ = write!(out, "<p>{}</p>", esc(&s.sentence));
    }
    out.push_str("</div>");
    if !d.warnings.is_empty() {
        out.push_str(r#"<h3>What the captures miss</h3><ul id="warnings">"#);
        for w in &d.warnings {
            let _ = write!(out, "<li>{}</li>", esc(w));
        }
        out.push_str("</ul>");
    }
    if !d.at_end.is_empty() {
        out.push_str(
            r#"<h3>Where threads stood at the end</h3><p class=note>Threads inside a system call when the recording stopped, longest blocked first, with their call stacks (no function probe needed).</p><ul id="at-end">"#,
        );
        for a in &d.at_end {
            for t in &a.threads {
                let _ = write!(
                    out,
                    "<li><code>{}</code>: {}</li>",
                    esc(&a.host),
                    esc(&t.sentence())
                );
            }
        }
        out.push_str("</ul>");
    }
    if !d.disagreements.is_empty() {
        out.push_str("<h3>Where the analyses disagree</h3><ul>");
        for line in &d.disagreements {
            let _ = write!(out, "<li>{}</li>", esc(line));
        }
        out.push_str("</ul>");
    }
    if !d.unconfirmed.is_empty() {
        out.push_str("<h3>Neither confirmed nor contradicted</h3><ul>");
        for line in &d.unconfirmed {
            let _ = write!(out, "<li>{}</li>", esc(line));
        }
        out.push_str("</ul>");
    }
    out.push_str("<h3>Analyses</h3>");
    table_head(
        out,
        "analyses",
        &["analysis", "status", "conclusion", "notes"],
    );
    for a in &d.analyses {
        let status = serde_json::to_value(a.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let _ = write!(
            out,
            r##"<tr data-analysis="{}"><td><a href="#analysis-{}">{}</a></td><td><span class="status st-{status}">{}</span>{}</td><td>{}</td><td>{}</td></tr>"##,
            a.analysis.name(),
            a.analysis.name(),
            esc(a.analysis.title()),
            a.status.describe(),
            if a.untrained {
                " <span class=untrained>untrained</span>"
            } else {
                ""
            },
            esc(&a.summary),
            esc(&a
                .reason
                .iter()
                .filter(|r| !a.summary.contains(r.as_str()))
                .chain(&a.notes)
                .cloned()
                .collect::<Vec<_>>()
                .join("; "))
        );
    }
    table_end(out, d.analyses.len(), d.analyses.len());
    out.push_str("</section>\n");
}

fn suspects(out: &mut String, d: &Diagnosis) {
    out.push_str(r#"<section id="suspects"><h2>Suspects by level</h2>"#);
    if d.suspects.is_empty() {
        let _ = write!(
            out,
            "<p>No suspect: {}.</p>",
            match d.outcome {
                Outcome::NoData =>
                    "no analysis could judge this run (no data is not the same as nothing abnormal)",
                _ => "the analyses that judged the run found nothing standing out",
            }
        );
    }
    for level in Level::ALL {
        let at: Vec<_> = d.at(level).collect();
        if at.is_empty() {
            continue;
        }
        let _ = write!(out, "<h3>Suspect {}</h3>", level.plural());
        table_head(
            out,
            &format!("suspects-{}", level.name()),
            &[
                "rank",
                level.name(),
                "analyses",
                "score",
                "normal / threshold",
                "earliest (UTC)",
                "evidence",
            ],
        );
        for (i, s) in at.iter().enumerate().take(ROWS) {
            let best = s.findings.iter().find(|f| f.score.is_some());
            let _ = write!(
                out,
                r#"<tr class="suspect"><td data-v="{}">{}</td><td><code>{}</code></td><td>{}</td>{}{}<td>{}</td><td>"#,
                i + 1,
                i + 1,
                esc(&s.name),
                s.analyses
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                cell_num(best.and_then(|f| f.score), 3),
                cell_num(best.and_then(|f| f.normal), 3),
                esc(s.wall.as_deref().unwrap_or("-")),
            );
            let _ = write!(out, "<details><summary>{}</summary><ul>", esc(&s.sentence));
            for f in &s.findings {
                let _ = write!(
                    out,
                    "<li>[{}] {}: {}{}</li>",
                    f.analysis.name(),
                    esc(&f.evidence),
                    esc(&f.detail),
                    match (f.score, f.normal) {
                        (Some(s), Some(n)) => format!(" (score {s:.3}, normal up to {n:.3})"),
                        (Some(s), None) => format!(" (score {s:.3})"),
                        _ => String::new(),
                    }
                );
            }
            out.push_str("</ul></details></td></tr>\n");
        }
        table_end(out, at.len().min(ROWS), at.len());
    }
    out.push_str("</section>\n");
}

fn analysis(out: &mut String, d: &Diagnosis, r: &Reports<'_>, kind: AnalysisKind) {
    let _ = write!(
        out,
        r#"<section id="analysis-{}"><h2>{}</h2>"#,
        kind.name(),
        esc(kind.title())
    );
    if let Some(a) = d.analysis(kind) {
        let status = serde_json::to_value(a.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let _ = write!(
            out,
            r#"<p><span class="status st-{status}">{}</span>{} {}</p>"#,
            a.status.describe(),
            if a.untrained {
                r#" <span class=untrained>untrained comparison: no thresholds learned from normal runs; servers count as anomalous only where they stand far out from the others (train with <code>analyzer peers train</code>)</span>"#
            } else {
                ""
            },
            esc(&a.summary)
        );
        if let Some(reason) = &a.reason
            && matches!(a.status, Status::NotRun | Status::Failed)
            && !a.summary.contains(reason.as_str())
        {
            let _ = write!(out, "<p class=note>{}</p>", esc(reason));
        }
        if !a.notes.is_empty() {
            out.push_str("<ul class=note>");
            for n in &a.notes {
                let _ = write!(out, "<li>{}</li>", esc(n));
            }
            out.push_str("</ul>");
        }
    }
    match kind {
        AnalysisKind::Model => {
            if let Some(m) = r.model {
                model(out, m);
            }
        }
        AnalysisKind::Peers => {
            if let Some(p) = r.peers {
                peers_section(out, p);
            }
        }
        AnalysisKind::Interference => {
            if let Some(i) = r.interference {
                interference(out, i);
            }
        }
        AnalysisKind::Outliers => {
            if let Some((j, a)) = r.outliers {
                outliers(out, j, a);
            }
        }
        AnalysisKind::Hang => {
            if let Some(h) = r.hang {
                hang(out, h);
            }
        }
    }
    out.push_str("</section>\n");
}

/// An SVG drawn by the analyzer's own plotting code (which escapes the
/// text it writes), inline.
fn figure(out: &mut String, svg: &str) {
    let start = svg.find("<svg").unwrap_or(0);
    let _ = write!(out, "<figure>{}</figure>", &svg[start..]);
}

fn model(out: &mut String, m: &ScoreReport) {
    figure(out, &scores_svg(m));
    if !m.explanation.is_empty() {
        out.push_str("<h3>Why the earliest anomaly is anomalous</h3><ul>");
        for line in &m.explanation {
            let _ = write!(out, "<li>{}</li>", esc(line));
        }
        out.push_str("</ul>");
    }
    out.push_str("<h3>Execution units, most suspect first</h3>");
    table_head(
        out,
        "model-units",
        &[
            "rank",
            "score",
            "normal",
            "anomalous",
            "process",
            "tid",
            "unit",
            "t (s)",
            "wall (UTC)",
            "peer",
            "why",
        ],
    );
    for (i, u) in m.units.iter().enumerate().take(ROWS) {
        let _ = writeln!(
            out,
            r#"<tr><td data-v="{}">{}</td>{}{}<td>{}</td><td>{}</td><td data-v="{}">{}</td><td>{}</td>{}<td>{}</td><td>{}</td><td>{}</td></tr>"#,
            i + 1,
            i + 1,
            cell_num(Some(u.score), 3),
            cell_num(u.normal, 3),
            if u.anomalous { "yes" } else { "" },
            esc(&format!("{}[{}]@{}", u.comm, u.pid, u.host)),
            u.tid,
            u.tid,
            u.kind.name(),
            cell_num(Some(u.t_s), 3),
            esc(&u.wall),
            esc(u.peer.as_deref().unwrap_or("-")),
            esc(&why(u))
        );
    }
    table_end(out, m.units.len().min(ROWS), m.units.len());
    // Call-path differences of the first anomalous units.
    let anomalous: Vec<_> = m.units.iter().filter(|u| u.anomalous).take(5).collect();
    if !anomalous.is_empty() {
        out.push_str("<h3>Call-path differences of the first anomalous units</h3>");
    }
    for (n, u) in anomalous.into_iter().enumerate() {
        let _ = write!(
            out,
            "<h4>{}[{}] tid {} {} at {:.3} s</h4>",
            esc(&u.comm),
            u.pid,
            u.tid,
            u.kind.name(),
            u.t_s
        );
        table_head(
            out,
            &format!("model-diff-{n}"),
            &["call path", "difference", "p", "Δ"],
        );
        for d in u.differences.iter().take(ROWS) {
            let _ = writeln!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td>{}{}</tr>",
                esc(&d.path),
                esc(&format!("{:?}", d.kind).to_lowercase()),
                cell_num(Some(d.p), 3),
                cell_num(Some(d.delta), 3)
            );
        }
        table_end(out, u.differences.len().min(ROWS), u.differences.len());
        if !u.open.is_empty() {
            let _ = write!(
                out,
                "<p>Open when the capture ended: {}</p>",
                u.open
                    .iter()
                    .map(|f| format!("<code>{}</code>", esc(f)))
                    .collect::<Vec<_>>()
                    .join(" &gt; ")
            );
        }
    }
}

fn peers_section(out: &mut String, p: &peers::Report) {
    figure(out, &peers::render::report_svg(p));
    out.push_str("<h3>Servers</h3>");
    let mut columns = vec!["server", "faulty", "by", "source", "retransmissions"];
    let metric_names: Vec<String> = p
        .metrics
        .iter()
        .map(|m| format!("anomalous windows: {}", m.name()))
        .collect();
    columns.extend(metric_names.iter().map(String::as_str));
    table_head(out, "peers-servers", &columns);
    for s in &p.servers {
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td><code>{}</code></td>{}",
            esc(&s.server),
            if s.faulty { "yes" } else { "" },
            s.metrics
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", "),
            esc(&s.source),
            cell_num(Some(s.retransmit_peers.values().sum::<u64>() as f64), 0)
        );
        for m in &p.metrics {
            out.push_str(&cell_num(s.anomalous_windows.get(m).map(|n| *n as f64), 0));
        }
        out.push_str("</tr>\n");
    }
    table_end(out, p.servers.len(), p.servers.len());
    out.push_str("<h3>Distances per window (score / threshold)</h3>");
    let mut cols = vec![
        "window".to_string(),
        "wall (UTC)".to_string(),
        "server".to_string(),
    ];
    cols.extend(p.metrics.iter().map(|m| m.name().to_string()));
    let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
    table_head(out, "peers-windows", &cols);
    let mut rows = 0;
    let total: usize = p.windows.iter().map(|w| w.servers.len()).sum();
    'windows: for w in &p.windows {
        for s in &w.servers {
            if rows >= ROWS {
                break 'windows;
            }
            rows += 1;
            let _ = write!(
                out,
                r#"<tr><td data-v="{}">{}</td><td>{}</td><td><code>{}</code></td>"#,
                w.index,
                w.index,
                esc(&w.wall),
                esc(&s.server)
            );
            for m in &p.metrics {
                match s.metrics.get(m) {
                    Some(c) => {
                        let _ = write!(
                            out,
                            r#"<td data-v="{}"{}>{:.2} / {:.2}</td>"#,
                            c.score,
                            if c.anomalous {
                                r#" style="background:#fdecea""#
                            } else {
                                ""
                            },
                            c.score,
                            c.threshold
                        );
                    }
                    None => out.push_str(r#"<td data-v="">-</td>"#),
                }
            }
            out.push_str("</tr>\n");
        }
    }
    table_end(out, rows, total);
    for (n, rc) in p.root_causes.iter().enumerate() {
        let _ = write!(
            out,
            "<h3>What differs most on {} ({}, {} anomalous windows)</h3>",
            esc(&rc.server),
            rc.metric.name(),
            rc.anomalous_windows
        );
        table_head(
            out,
            &format!("peers-root-{n}"),
            &[
                "function / component",
                "distance to the median server",
                "mean Δ per window",
            ],
        );
        for c in &rc.top {
            let _ = writeln!(
                out,
                "<tr><td><code>{}</code></td>{}{}</tr>",
                esc(&c.component),
                cell_num(Some(c.distance), 2),
                cell_num(Some(c.mean_delta), 2)
            );
        }
        table_end(out, rc.top.len(), rc.top.len());
    }
}

fn interference(out: &mut String, d: &mpi::Detection) {
    figure(out, &mpi::report::ils_svg(d, "ILS(p, l, t)"));
    out.push_str("<h3>Per processor</h3>");
    table_head(
        out,
        "interference-processors",
        &[
            "rank",
            "host",
            "pid",
            "CPUs",
            "m(p)",
            "threshold",
            "interfered",
            "own slowdown",
            "CPU deficit",
            "note",
        ],
    );
    for p in d.processors.iter().take(ROWS) {
        let _ = writeln!(
            out,
            r#"<tr>{}<td>{}</td>{}{}<td>{}</td>{}{}<td>{}</td></tr>"#,
            rank_cells(p.rank, &p.host, p.pid),
            esc(&format!("{:?}", p.cpus)),
            cell_num(p.metric, 3),
            cell_num(p.threshold, 3),
            if p.interfered { "yes" } else { "" },
            cell_num(p.own_slowdown, 2),
            cell_num(p.cpu_deficit, 2),
            esc(p.note.as_deref().unwrap_or(""))
        );
    }
    table_end(out, d.processors.len().min(ROWS), d.processors.len());
}

fn outliers(out: &mut String, j: &automaded::verdict::Judgement, a: Option<&automaded::Analysis>) {
    out.push_str("<h3>Each rank's worst phase</h3>");
    table_head(
        out,
        "outliers-phases",
        &[
            "rank",
            "phase score",
            "threshold",
            "from (s)",
            "to (s)",
            "region",
            "excess (s)",
        ],
    );
    for (rank, p) in j.phases.iter().take(ROWS) {
        let _ = writeln!(
            out,
            r#"<tr><td data-v="{rank}">{rank}</td>{}{}{}{}<td><code>{}</code></td>{}</tr>"#,
            cell_num(Some(p.score), 3),
            cell_num(j.phase_thresholds.get(rank).copied(), 3),
            cell_num(Some(p.from_s), 2),
            cell_num(Some(p.to_s), 2),
            esc(&p.region),
            cell_num(Some(p.excess_s), 3)
        );
    }
    table_end(out, j.phases.len().min(ROWS), j.phases.len());
    let Some(a) = a else {
        out.push_str("<p class=note>No AutomaDeD ranking (too few ranks).</p>");
        return;
    };
    figure(out, &automaded::report::svg(a));
    out.push_str("<h3>Ranks by distance to their reference</h3>");
    table_head(
        out,
        "outliers-tasks",
        &["rank", "host", "pid", "cluster", "distance", "normalized"],
    );
    for t in a.tasks.iter().take(ROWS) {
        let _ = writeln!(
            out,
            r#"<tr>{}<td>{}</td>{}{}</tr>"#,
            rank_cells(t.rank, &t.host, t.pid),
            t.cluster.map_or("-".to_string(), |c| c.to_string()),
            cell_num(Some(t.distance), 3),
            cell_num(Some(t.normalized), 3)
        );
    }
    table_end(out, a.tasks.len().min(ROWS), a.tasks.len());
    for (n, t) in a.abnormal.iter().enumerate() {
        let _ = write!(
            out,
            "<h3>Abnormal edges of rank {} (normalized distance {})</h3>",
            t.score.rank,
            num(Some(t.score.normalized), 3)
        );
        table_head(
            out,
            &format!("outliers-edges-{n}"),
            &[
                "from",
                "to",
                "contribution",
                "count (rank / reference)",
                "p (rank / reference)",
            ],
        );
        for e in t.edges.iter().take(ROWS) {
            let pair = |f: fn(&automaded::outliers::EdgeTimes) -> String| {
                format!(
                    "{} / {}",
                    e.task.as_ref().map_or("-".to_string(), f),
                    e.reference.as_ref().map_or("-".to_string(), f)
                )
            };
            let _ = writeln!(
                out,
                "<tr><td><code>{}</code></td><td><code>{}</code></td>{}<td>{}</td><td>{}</td></tr>",
                esc(&e.from_label),
                esc(&e.to_label),
                cell_num(Some(e.contribution), 3),
                pair(|x| x.count.to_string()),
                pair(|x| format!("{:.2}", x.prob))
            );
        }
        table_end(out, t.edges.len().min(ROWS), t.edges.len());
    }
}

fn hang(out: &mut String, h: &HangReport) {
    let _ = write!(
        out,
        "<p>{} (a rank with no MPI transition for {:.1} s is hung; threshold {}).</p>",
        if h.hung {
            "The run is hung"
        } else {
            "The run is not hung"
        },
        h.threshold_ns as f64 / 1e9,
        esc(&h.threshold_source)
    );
    table_head(
        out,
        "hang-ranks",
        &[
            "rank",
            "host",
            "pid",
            "state",
            "in call",
            "waits for",
            "idle (s)",
        ],
    );
    for w in h.ranks.iter().take(ROWS) {
        let _ = writeln!(
            out,
            r#"<tr>{}<td>{}</td><td><code>{}</code></td><td>{}</td>{}</tr>"#,
            rank_cells(w.rank, &w.host, w.pid),
            esc(&format!("{:?}", w.state)),
            esc(w.call.as_deref().unwrap_or("-")),
            esc(&format!("{:?}", w.waits_for)),
            cell_num(Some(w.idle_ns as f64 / 1e9), 2)
        );
    }
    table_end(out, h.ranks.len().min(ROWS), h.ranks.len());
    if !h.culprits.is_empty() {
        out.push_str("<h3>Culprits</h3><ul>");
        for c in &h.culprits {
            let _ = write!(
                out,
                "<li>rank {}: {} (holds up {:?})</li>",
                c.rank,
                esc(&c.reason),
                c.blocking
            );
        }
        out.push_str("</ul>");
    }
}
