//! Peer comparison across file servers (Kasick, Gandhi & Narasimhan,
//! "Behavior-Based Problem Localization for Parallel File Systems",
//! `papers/003_…`).
//!
//! Every server gets, per window of WinSize seconds shifted by WinShift, one
//! feature vector per metric: per function, its IP samples (per program,
//! binary and function, user and kernel), calls and exclusive time; plus
//! kernel network signals the paper lacked (TCP retransmissions and socket
//! bytes per server). A server's score in a window is its median distance to
//! the other servers; thresholds are learned from fault-free runs (per
//! server, then pooled: the largest of the servers' own, see
//! [`PeersConfig::pool`]); a server
//! above its threshold in k of the last 2k−1 windows is faulty, and the
//! functions that differ most from the median server point at the cause.
//! Nothing here knows what the servers are: any set of peer daemons recorded
//! with the same function patterns works (GlusterFS bricks, PVFS servers).
//!
//! Data flow: [`features::extract`] (captures → binned series per server) →
//! [`features::Features::windows`] (feature vectors, dimensionality
//! reduction) → [`score`] (distances, medians) → [`train()`] (thresholds) or
//! [`diagnose()`] (verdicts, root cause) → [`render`] (text, SVG).

mod diagnose;
mod distance;
pub mod features;
pub mod render;
mod train;
mod types;

pub use diagnose::{
    BEYOND_TRAINING, carries_more, diagnose, k_of_2k_minus_1, load_shifted, persistent,
    rank_components, stands_out,
};
pub use distance::{KL_EPSILON, distance, median, median_vector, scores, term};
pub use features::{
    CaptureSource, Features, MetricVectors, ServerInfo, Windowed, extract, normalize,
};
pub use train::{
    UNTRAINED_FACTOR, minimal_threshold, quantile, sustained_threshold, train, unlike_others,
    untrained, untrained_windows,
};
pub use types::{
    Calibration, Cell, Culprit, Distance, FaultyServer, Metric, Outcome, PAPER_SAMPLE_HZ,
    PeersConfig, PeersError, REPORT_VERSION, Report, RootCause, ServerEndpoint, ServerSplit,
    ServerThreshold, ServerVerdict, ServerWindow, SilentMetric, THRESHOLDS_VERSION, Thresholds,
    TrainingRun, Verdict, WindowReport,
};

/// A run cut into windows and scored: every server's score per metric and
/// window.
#[derive(Clone, Debug)]
pub struct Scored {
    /// Run name.
    pub run: String,
    /// The servers.
    pub servers: Vec<ServerInfo>,
    /// Windows and feature vectors.
    pub windowed: Windowed,
    /// `scores[metric][window][server]`, metrics as in `windowed.metrics`.
    pub scores: Vec<Vec<Vec<f64>>>,
    /// Retransmissions per server and remote address.
    pub retransmit_peers: Vec<std::collections::HashMap<String, u64>>,
    /// Notes from extraction.
    pub notes: Vec<String>,
    /// Records read.
    pub events: u64,
}

impl Scored {
    /// Position of `metric` in `windowed.metrics` and `scores`.
    pub fn metric_index(&self, metric: Metric) -> Option<usize> {
        self.windowed
            .metrics
            .iter()
            .position(|m| m.metric == metric)
    }
}

/// Windows `features` and scores every server in every window.
pub fn score(features: Features, cfg: &PeersConfig) -> Scored {
    let windowed = features.windows(cfg);
    let scores = windowed
        .metrics
        .iter()
        .map(|m| m.vectors.iter().map(|v| scores(cfg.distance, v)).collect())
        .collect();
    Scored {
        run: features.run,
        servers: features.servers,
        windowed,
        scores,
        retransmit_peers: features.retransmit_peers,
        notes: features.notes,
        events: features.events,
    }
}

/// Extracts and scores one run; `min_windows` windows must fit.
pub fn analyze(
    run: &str,
    sources: &[CaptureSource<'_>],
    cfg: &PeersConfig,
    min_windows: usize,
) -> Result<Scored, PeersError> {
    let features = extract(run, sources, cfg)?;
    let (a, b) = features.common_span();
    let scored = score(features, cfg);
    let n = scored.windowed.starts.len();
    if n < min_windows.max(1) {
        return Err(PeersError::TooFewWindows {
            run: run.to_string(),
            windows: n,
            min: min_windows.max(1),
            window_s: cfg.window_ns as f64 / 1e9,
            shift_s: cfg.shift_ns as f64 / 1e9,
            span_s: b.saturating_sub(a) as f64 / 1e9,
        });
    }
    Ok(scored)
}

#[cfg(test)]
mod tests;
