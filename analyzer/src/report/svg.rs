//! A small hand-written SVG scatter plot (no plotting dependency needed for
//! points, axes and a legend).

use std::fmt::Write as _;

/// One coloured set of points.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points (x, y).
    pub points: Vec<(f64, f64)>,
}

/// The series colours of every plot the analyzer draws.
pub(crate) const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22",
];

/// Text escaped for SVG or HTML element content and quoted attribute
/// values (names from captures may hold quotes): the one escaper of every
/// page and plot the analyzer writes.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Renders `series` as an SVG scatter plot, with `labels` (x, y, text)
/// written next to points worth naming. y spans 0..`y_max`.
pub fn scatter_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    y_max: f64,
    series: &[Series],
    labels: &[(f64, f64, String)],
) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 480.0, 70.0, 170.0, 40.0, 50.0);
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.02;
    let y_max = if y_max > 0.0 { y_max } else { 1.0 };
    let px = |x: f64| left + x / x_max * (w - left - right);
    let py = |y: f64| h - bottom - y / y_max * (h - top - bottom);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        (w - right + left) / 2.0,
        escape(title)
    );
    // Axes and ticks.
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        h - bottom,
        w - right,
        h - bottom
    );
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>"#,
        h - bottom
    );
    for i in 0..=5 {
        let (xv, yv) = (x_max * f64::from(i) / 5.0, y_max * f64::from(i) / 5.0);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{xv:.2}</text>"#,
            px(xv),
            h - bottom + 18.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{yv:.2}</text>"#,
            left - 6.0,
            py(yv) + 4.0
        );
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#eee"/>"##,
            py(yv),
            w - right,
            py(yv)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (w - right + left) / 2.0,
        h - 12.0,
        escape(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{}</text>"#,
        h / 2.0,
        h / 2.0,
        escape(y_label)
    );
    for (i, series) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        for (x, y) in &series.points {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}" fill-opacity="0.75"/>"#,
                px(*x),
                py(*y)
            );
        }
        let ly = top + 20.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<circle cx="{}" cy="{ly}" r="5" fill="{color}"/>"#,
            w - right + 20.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            w - right + 30.0,
            ly + 4.0,
            escape(&series.label)
        );
    }
    for (x, y, text) in labels {
        // Points in the right half are labelled to their left, so the text
        // stays inside the plot instead of running under the legend.
        let (lx, anchor) = if px(*x) > left + (w - left - right) / 2.0 {
            (px(*x) - 6.0, "end")
        } else {
            (px(*x) + 6.0, "start")
        };
        let _ = writeln!(
            s,
            r#"<text x="{lx:.1}" y="{:.1}" font-size="11" text-anchor="{anchor}">{}</text>"#,
            py(*y) - 6.0,
            escape(text)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_every_point_and_escapes_text() {
        let svg = scatter_svg(
            "a <b>",
            "t",
            "score",
            1.0,
            &[
                Series {
                    label: "handler".into(),
                    points: vec![(0.0, 0.1), (2.0, 1.0)],
                },
                Series {
                    label: "init".into(),
                    points: vec![(1.0, 0.5)],
                },
            ],
            &[(2.0, 1.0, "x&y".into())],
        );
        assert_eq!(
            svg.matches("<circle").count(),
            3 + 2,
            "3 points, 2 legend dots"
        );
        assert!(svg.contains("a &lt;b&gt;") && svg.contains("x&amp;y"));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}
