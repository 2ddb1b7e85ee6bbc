//! `analyzer peers`: find the faulty server by comparing servers with their
//! peers (Kasick et al.), trained on fault-free runs.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use analyzer::peers::{
    self, Calibration, CaptureSource, Distance, Metric, PeersConfig, ServerEndpoint, ServerSplit,
    Thresholds, render,
};
use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};

/// Peer comparison subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum PeersCommand {
    /// Learn per-server thresholds from fault-free runs.
    ///
    /// Each run is a directory of captures (every `*.capture` in it, one
    /// server per file, labelled by the file stem), or capture files, which
    /// are grouped into runs by their directory. Every run is compared on
    /// its own; the thresholds cover all of them. Label servers the same way
    /// in every run (e.g. brick0.capture … brick3.capture).
    ///
    /// Example: analyzer peers train clean-1/ clean-2/ --window 4s --shift 2s -o thresholds.json
    #[command(verbatim_doc_comment)]
    Train {
        /// Run directories or capture files of fault-free runs.
        #[arg(required = true, value_name = "RUN")]
        runs: Vec<PathBuf>,
        /// Where to write the thresholds (JSON).
        #[arg(short, long, default_value = "thresholds.json")]
        output: PathBuf,
        #[command(flatten)]
        features: FeatureArgs,
        /// Print the thresholds as JSON instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Find the faulty server(s) of one run, with thresholds from `train`.
    ///
    /// Prints the verdict (faulty servers, or "no server stands out", or no
    /// verdict when no metric had data), the metrics that had no data and
    /// why, per window and server the scores (median distance to the other
    /// servers) and the functions that differ most on faulty servers.
    /// Window, shift, distance and server labelling come from the thresholds
    /// file. Exit status 0 whatever the verdict; with --json, `.verdict`
    /// holds the outcome (`faulty`, `none_stands_out`, `no_data`), the
    /// faulty servers and the metrics with no data, and `.faulty_by_metric`
    /// the servers each metric alone found.
    ///
    /// Example: analyzer peers diagnose --thresholds thresholds.json run-7/ --svg run-7.svg
    #[command(verbatim_doc_comment)]
    Diagnose {
        /// The thresholds written by `analyzer peers train`.
        #[arg(short, long)]
        thresholds: PathBuf,
        /// Capture files, or a directory of them: one run, one server per
        /// capture (or per process, as in training).
        #[arg(required = true, value_name = "CAPTURE")]
        captures: Vec<PathBuf>,
        /// Faulty = anomalous in at least K of the last 2K−1 windows
        /// (default: as trained, paper: 3).
        #[arg(long)]
        k: Option<usize>,
        /// Outlier rule: anomalous only when also above F × the median of
        /// the other servers' scores in the window; 0: off (default: as
        /// trained).
        #[arg(long, value_name = "F")]
        outlier: Option<f64>,
        /// Persistence rule: when several servers are found faulty, call
        /// faulty only those faulty in at least this share of the windows of
        /// the most persistent one, and list the others as having deviated
        /// briefly; 0: off (default: as trained).
        #[arg(long, value_name = "SHARE")]
        persistence: Option<f64>,
        /// Load-shift rule: when a server called faulty deviates in its own
        /// resources, do not call faulty a server that only carried more of
        /// the work (its calls, socket bytes) and list it as having taken
        /// over load; false: off (default: as trained).
        #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
        load_shift: Option<bool>,
        /// Functions to list per faulty server and metric.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// The report as JSON (version, verdict, faulty, servers, windows,
        /// root_causes).
        #[arg(long)]
        json: bool,
        /// Also write an SVG plot of every server's score over time with its
        /// threshold, one panel per metric.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        #[command(flatten)]
        endpoints: EndpointArgs,
    },
}

/// How features are built (stored with the thresholds).
#[derive(Debug, Args)]
pub(crate) struct FeatureArgs {
    /// WinSize: length of a window (e.g. 60s, 4s, 500ms; paper: 60s).
    #[arg(long, default_value = "60s", value_parser = duration_ns)]
    window: u64,
    /// WinShift: windows start this far apart (paper: 30s).
    #[arg(long, default_value = "30s", value_parser = duration_ns)]
    shift: u64,
    /// Distance between feature vectors.
    #[arg(long, value_enum, default_value = "manhattan")]
    distance: Distance,
    /// Faulty = anomalous in K of the last 2K−1 windows; training runs need
    /// 2K−1 windows.
    #[arg(long, default_value_t = 3)]
    k: usize,
    /// Keep a samples component reaching this many samples per 60 s of
    /// window in some window on some server, counted at the paper's
    /// sampling rate (one sample per 100,000 cycles at 2.8 GHz, 28 kHz;
    /// paper: 100): scaled to --window and to the captures' own rate, so at
    /// 99 Hz the bar is a fraction of one sample.
    #[arg(long, default_value_t = 100.0)]
    min_samples: f64,
    /// Keep a time (and count) component reaching this exclusive time per
    /// 60 s of window (paper: 1s; scaled to --window).
    #[arg(long, default_value = "1s", value_parser = duration_ns)]
    min_time: u64,
    /// Also keep a count component reaching this many calls per 60 s of
    /// window (0: only the paper's time rule).
    #[arg(long, default_value_t = 600.0)]
    min_calls: f64,
    /// Threshold search step in metric units (default 1; 0.01 for
    /// --distance relative).
    #[arg(long)]
    resolution: Option<f64>,
    /// How thresholds are learned: `sustained:F:C` (per server, F times the
    /// smallest threshold that leaves it faulty in no training window, i.e.
    /// the largest k-th highest score of any 2k−1 consecutive windows, at
    /// most C times its largest training score; `sustained` for F = 3,
    /// C = 2, `sustained:F:C`), `paper` (per server, twice the largest
    /// training score; `paper:F` for F times), or `quantile:Q:M` (per
    /// server, M times the Q-quantile of its training scores).
    #[arg(long, value_name = "RULE", default_value_t = PeersConfig::default().calibration)]
    calibration: Calibration,
    /// Smallest threshold, in metric units (keeps a metric that never
    /// differed in training, such as retransmissions, from flagging one).
    #[arg(long, default_value_t = 1.0)]
    min_threshold: f64,
    /// Metrics to compare (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values_t = Metric::DEFAULT
    )]
    metrics: Vec<Metric>,
    /// Metrics compared in shares of the window's work: each server's
    /// vector scaled to percent of the servers' median total per window, so
    /// an asymmetry keeps its size when a fault slows every server
    /// (comma-separated; latencies are never scaled; `--normalize` alone:
    /// none).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        num_args = 0..,
        default_value = "syscalls,time"
    )]
    normalize: Vec<Metric>,
    /// Outlier rule (beyond the paper): a server is anomalous in a window
    /// only when its score is above its threshold and above F times the
    /// median of the other servers' scores there, so a window in which
    /// every server differs from every other indicts none; 0: off (the
    /// paper's rule).
    #[arg(long, value_name = "F", default_value_t = 1.5)]
    outlier: f64,
    /// Persistence rule (beyond the paper): when several servers are found
    /// faulty, one faulty in fewer than this share of the windows of the
    /// most persistent one is listed as having deviated briefly (a knock-on
    /// effect of the fault, a passing burst), not called faulty; 0: off.
    #[arg(long, value_name = "SHARE", default_value_t = 0.67)]
    persistence: f64,
    /// Load-shift rule (beyond the paper): when several servers are called
    /// faulty and one deviates in its own resources (CPU wait, latencies,
    /// retransmissions, its devices and link), one found only by the work
    /// it carries (calls, socket bytes), more than its peers, is listed as
    /// having taken over load the faulty server shed, not called faulty;
    /// false: off.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    load_shift: bool,
    /// Small-sample margin (beyond the paper): trained on fewer than N
    /// fault-free runs, the sustained calibration's cushion on its bar is
    /// widened by (N+1)/(runs+1), since a fresh clean run beats the
    /// largest of fewer training runs more often (2 runs: ×1.33, 1 run:
    /// ×2; the paper's cap stays); 0: off.
    #[arg(long, value_name = "N", default_value_t = PeersConfig::default().reference_runs.unwrap_or(0))]
    reference_runs: usize,
    /// Peer pool (beyond the paper): every server's trained threshold of a
    /// metric is the largest of the servers' own, since a burst one clean
    /// server shows in training (a disk flush, a CPU taken for a while) is
    /// one any of its peers may show; only raises thresholds; false: each
    /// server's own training only.
    #[arg(long, value_name = "BOOL", default_value_t = PeersConfig::default().pool, action = clap::ArgAction::Set)]
    pool: bool,
    /// One capture holds several server daemons (`tracer record -p A -p B`):
    /// each traced process (with its followed children) is a server,
    /// labelled `comm[pid]` or by --label-arg. Untraced processes' samples
    /// belong to the node, i.e. to every server on that host.
    #[arg(long)]
    split_processes: bool,
    /// With --split-processes: label each server by the command-line value
    /// after this argument (e.g. `--brick-name` for GlusterFS bricks, `-a`
    /// for PVFS servers), stable across runs unlike pids.
    #[arg(
        long,
        value_name = "ARG",
        requires = "split_processes",
        allow_hyphen_values = true
    )]
    label_arg: Option<String>,
    /// Read each server's listening port from its command line, the value
    /// after this argument (e.g. `--brick-port` for GlusterFS bricks), to
    /// place TCP retransmissions of servers that bound before recording.
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    port_arg: Option<String>,
    #[command(flatten)]
    endpoints: EndpointArgs,
}

/// Server addresses the captures may lack.
#[derive(Debug, Args)]
pub(crate) struct EndpointArgs {
    /// A server's listening port, LABEL=PORT or LABEL=ADDR:PORT (repeat per
    /// server), to place TCP retransmissions when the server bound its
    /// socket before recording started (the capture then holds none of its
    /// addresses; the report notes retransmissions that matched no server).
    /// Ports that change from run to run go in an `endpoints.txt` beside a
    /// run's captures, one LABEL=PORT a line.
    #[arg(long = "endpoint", value_name = "LABEL=PORT")]
    endpoints: Vec<ServerEndpoint>,
}

impl TryFrom<FeatureArgs> for PeersConfig {
    type Error = anyhow::Error;

    fn try_from(a: FeatureArgs) -> anyhow::Result<Self> {
        let cfg = PeersConfig {
            window_ns: a.window,
            shift_ns: a.shift,
            distance: a.distance,
            min_samples: a.min_samples,
            min_time_ms: a.min_time as f64 / 1e6,
            min_calls: a.min_calls,
            resolution: a.resolution,
            min_threshold: a.min_threshold,
            metrics: a.metrics,
            normalize: a.normalize,
            outlier: (a.outlier != 0.0).then_some(a.outlier),
            persistence: (a.persistence != 0.0).then_some(a.persistence),
            load_shift: a.load_shift,
            reference_runs: (a.reference_runs != 0).then_some(a.reference_runs),
            pool: a.pool,
            calibration: a.calibration,
            k: a.k,
            port_arg: a.port_arg,
            endpoints: a.endpoints.endpoints,
            split: if a.split_processes {
                ServerSplit::PerProcess {
                    label_arg: a.label_arg,
                }
            } else {
                ServerSplit::PerCapture
            },
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// `60s`, `500ms`, `2m`, `1.5s`, `250us`; a bare number is seconds.
pub(crate) fn duration_ns(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 60s, 500ms or 2m"))?;
    let scale = match unit.trim() {
        "" | "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        "m" | "min" => 60e9,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}` (use ns, us, ms, s, m)"
            ));
        }
    };
    let ns = value * scale;
    if !(1.0..1e18).contains(&ns) {
        return Err(format!("`{text}` is out of range"));
    }
    Ok(ns.round() as u64)
}

/// Capture files of a directory, sorted.
pub(crate) fn captures_in(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "capture"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("{} holds no *.capture files", dir.display());
    }
    Ok(files)
}

/// Runs from arguments: a directory is a run; files group by directory.
pub(crate) fn runs_of(args: &[PathBuf]) -> anyhow::Result<Vec<(String, Vec<PathBuf>)>> {
    let mut runs: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for a in args {
        let (name, files) = if a.is_dir() {
            (a.display().to_string(), captures_in(a)?)
        } else {
            let dir = a.parent().map_or(".".into(), |p| {
                if p.as_os_str().is_empty() {
                    ".".into()
                } else {
                    p.display().to_string()
                }
            });
            (dir, vec![a.clone()])
        };
        match runs.iter_mut().find(|(n, _)| *n == name) {
            Some((_, list)) => list.extend(files),
            None => runs.push((name, files)),
        }
    }
    Ok(runs)
}

/// Reads and scores one run.
pub(crate) fn analyze_run(
    name: &str,
    files: &[PathBuf],
    cfg: &PeersConfig,
    min_windows: usize,
) -> anyhow::Result<peers::Scored> {
    let captures = files
        .iter()
        .map(|f| super::open(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    analyze_opened(name, files, &captures, cfg, min_windows)
}

/// Scores one run of captures already open (`files[i]` is `captures[i]`'s
/// path), with `cfg`'s endpoints and those of the run's `endpoints.txt`.
pub(crate) fn analyze_opened(
    name: &str,
    files: &[PathBuf],
    captures: &[analyzer::Capture],
    cfg: &PeersConfig,
    min_windows: usize,
) -> anyhow::Result<peers::Scored> {
    let mut cfg = cfg.clone();
    if let Some(dir) = files.first().and_then(|f| f.parent()) {
        let file = dir.join(ENDPOINTS_FILE);
        if file.is_file() {
            for e in read_endpoints(&file)? {
                if !cfg.endpoints.iter().any(|x| x.label == e.label) {
                    cfg.endpoints.push(e);
                }
            }
        }
    }
    let cfg = &cfg;
    let labels: Vec<String> = files
        .iter()
        .map(|f| {
            f.file_stem().map_or_else(
                || f.display().to_string(),
                |s| s.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let sources: Vec<CaptureSource<'_>> = files
        .iter()
        .zip(&labels)
        .zip(captures)
        .map(|((path, label), capture)| CaptureSource {
            path,
            label,
            capture,
        })
        .collect();
    Ok(peers::analyze(name, &sources, cfg, min_windows)?)
}

/// A run directory's file of server endpoints, `LABEL=[ADDR:]PORT` a line.
const ENDPOINTS_FILE: &str = "endpoints.txt";

fn read_endpoints(path: &Path) -> anyhow::Result<Vec<ServerEndpoint>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| (i, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            l.parse::<ServerEndpoint>()
                .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

pub(crate) fn load_thresholds(path: &Path) -> anyhow::Result<Thresholds> {
    Ok(analyzer::load::thresholds(path)?)
}

/// Runs one `analyzer peers` subcommand.
pub(crate) fn run(
    command: PeersCommand,
    out: &mut impl Write,
    ui: &super::Ui,
) -> anyhow::Result<()> {
    match command {
        PeersCommand::Train {
            runs,
            output,
            features,
            json,
        } => {
            let cfg = PeersConfig::try_from(features)?;
            let mut scored = Vec::new();
            let runs = runs_of(&runs)?;
            let bar = ui.bar(runs.len() as u64, "comparing peers");
            for (name, files) in &runs {
                bar.set_message(name.clone());
                scored.push(analyze_run(name, files, &cfg, 2 * cfg.k - 1)?);
                bar.inc(1);
            }
            bar.finish_and_clear();
            let thresholds = peers::train(&scored, &cfg)?;
            let text = serde_json::to_string_pretty(&thresholds)?;
            std::fs::write(&output, &text)
                .with_context(|| format!("writing {}", output.display()))?;
            if json {
                writeln!(out, "{text}")?;
            } else {
                write!(out, "{}", render::thresholds_text(&thresholds))?;
                writeln!(out, "thresholds written to {}", output.display())?;
            }
        }
        PeersCommand::Diagnose {
            thresholds,
            captures,
            k,
            outlier,
            persistence,
            load_shift,
            top,
            json,
            svg,
            endpoints,
        } => {
            let mut model = load_thresholds(&thresholds)?;
            model.config.endpoints = endpoints.endpoints;
            if let Some(f) = outlier {
                model.config.outlier = (f != 0.0).then_some(f);
                model.config.validate()?;
            }
            if let Some(p) = persistence {
                model.config.persistence = (p != 0.0).then_some(p);
                model.config.validate()?;
            }
            if let Some(on) = load_shift {
                model.config.load_shift = on;
            }
            let mut files = Vec::new();
            for c in &captures {
                if c.is_dir() {
                    files.extend(captures_in(c)?);
                } else {
                    files.push(c.clone());
                }
            }
            let k = k.unwrap_or(model.config.k);
            if k == 0 {
                bail!("--k must be at least 1");
            }
            let name = captures
                .first()
                .map_or_else(String::new, |p| p.display().to_string());
            let scored = analyze_run(&name, &files, &model.config, 1)?;
            let report = peers::diagnose(&scored, &model, k, top);
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                write!(
                    out,
                    "{}",
                    render::report_text(&report, model.config.distance)
                )?;
            }
            if let Some(path) = svg {
                std::fs::write(&path, render::report_svg(&report))
                    .with_context(|| format!("writing {}", path.display()))?;
                if !json {
                    writeln!(
                        out,
                        "plot of every server's score over time: {}",
                        path.display()
                    )?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory is a run; loose files join the run of their directory.
    #[test]
    fn runs_group_by_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        for d in [&a, &b] {
            std::fs::create_dir(d).expect("dir");
            for f in ["s1.capture", "s0.capture", "run.json"] {
                std::fs::write(d.join(f), b"").expect("file");
            }
        }
        std::fs::write(
            a.join("endpoints.txt"),
            "# ports\ns0=49152\n\ns1=10.0.0.1:7\n",
        )
        .expect("endpoints");
        let runs = runs_of(&[a.clone(), b.join("s1.capture"), b.join("s0.capture")]).expect("runs");
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].1, vec![a.join("s0.capture"), a.join("s1.capture")]);
        assert_eq!(runs[1].1, vec![b.join("s1.capture"), b.join("s0.capture")]);
        let e = read_endpoints(&a.join("endpoints.txt")).expect("endpoints");
        assert_eq!((e.len(), e[1].port), (2, 7));
        std::fs::write(b.join("endpoints.txt"), "s0 49152\n").expect("bad");
        let err = read_endpoints(&b.join("endpoints.txt")).expect_err("no =");
        assert!(err.to_string().contains(":1:"), "{err}");
        assert!(
            runs_of(&[root.path().to_path_buf()]).is_err(),
            "no captures in root"
        );
    }

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(duration_ns("60s"), Ok(60_000_000_000));
        assert_eq!(duration_ns("4"), Ok(4_000_000_000));
        assert_eq!(duration_ns("500ms"), Ok(500_000_000));
        assert_eq!(duration_ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(duration_ns("2m"), Ok(120_000_000_000));
        assert!(duration_ns("4 parsecs").is_err());
        assert!(duration_ns("s").is_err());
        assert!(duration_ns("0s").is_err());
    }
}
