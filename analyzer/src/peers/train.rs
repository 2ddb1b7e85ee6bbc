//! Thresholds by training on fault-free runs. The paper's rule (Kasick et
//! al. §5.1, "Threshold selection"): per server and metric, the smallest
//! threshold (a multiple of the resolution; the paper uses integers) that
//! leaves no training window anomalous, found by binary search, then doubled
//! as a cushion. Or per server and metric, a quantile of the training scores
//! times a margin ([`Calibration`]).

use std::collections::BTreeMap;

use super::{
    BEYOND_TRAINING, Scored,
    features::FOREIGN_FLOOR_BPS,
    types::{
        Calibration, Distance, Metric, PeersConfig, PeersError, ServerThreshold,
        THRESHOLDS_VERSION, Thresholds, TrainingRun,
    },
};

/// The smallest `k · resolution` (k = 0, 1, 2, …) that no score exceeds: a
/// window is anomalous when its score is *above* the threshold.
pub fn minimal_threshold(scores: &[f64], resolution: f64) -> f64 {
    let max = scores.iter().copied().fold(0.0, f64::max);
    let ok = |k: u64| scores.iter().all(|s| *s <= k as f64 * resolution);
    // An upper bound that surely works, despite rounding.
    let mut hi = (max / resolution).ceil() as u64;
    while !ok(hi) {
        hi += 1;
    }
    let mut lo = 0u64;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo as f64 * resolution
}

/// The smallest `j · resolution` (j = 0, 1, 2, …) above which no stretch of
/// 2k−1 consecutive `scores` (fewer at the start, as the k-of-2k−1 rule
/// counts) has k scores: the smallest threshold that leaves the k-of-2k−1
/// rule quiet on this series. It is the largest k-th highest score of any
/// such stretch; with k = 1 it is [`minimal_threshold`].
pub fn sustained_threshold(scores: &[f64], k: usize, resolution: f64) -> f64 {
    let k = k.max(1);
    let span = 2 * k - 1;
    let mut bar = 0.0f64;
    let mut stretch: Vec<f64> = Vec::with_capacity(span);
    for end in 0..scores.len() {
        let from = (end + 1).saturating_sub(span);
        stretch.clear();
        stretch.extend_from_slice(&scores[from..=end]);
        if stretch.len() < k {
            continue;
        }
        stretch.sort_by(|a, b| b.total_cmp(a));
        bar = bar.max(stretch[k - 1]);
    }
    minimal_threshold(&[bar], resolution)
}

/// The `q`-quantile of `values` by nearest rank: the smallest value at
/// least a share `q` of them do not exceed (`q` = 1: the largest); 0 for
/// none. NaNs sort last.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// Learns thresholds from scored fault-free runs. Each run must have at least
/// 2k−1 windows, or the anomaly filter could never have judged it.
pub fn train(runs: &[Scored], cfg: &PeersConfig) -> Result<Thresholds, PeersError> {
    if runs.is_empty() {
        return Err(PeersError::NoRuns);
    }
    let min_windows = 2 * cfg.k.max(1) - 1;
    for run in runs {
        let n = run.windowed.starts.len();
        if n < min_windows {
            let (a, b) = run.windowed.common_span;
            return Err(PeersError::TooFewWindows {
                run: run.run.clone(),
                windows: n,
                min: min_windows,
                window_s: cfg.window_ns as f64 / 1e9,
                shift_s: cfg.shift_ns as f64 / 1e9,
                span_s: b.saturating_sub(a) as f64 / 1e9,
            });
        }
    }
    let resolution = cfg.resolution();
    let small_sample = cfg.small_sample_margin(runs.len());
    let mut metrics: BTreeMap<Metric, BTreeMap<String, ServerThreshold>> = BTreeMap::new();
    for metric in &cfg.metrics {
        // A metric with no component in any run (nothing was sampled, say)
        // cannot be trained; diagnosis skips it and says so.
        let used = runs.iter().any(|r| {
            r.windowed
                .metrics
                .iter()
                .any(|m| m.metric == *metric && !m.components.is_empty())
        });
        if !used {
            continue;
        }
        let mut per_server: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        // The sustained rule's bar per server: the k-of-2k−1 rule runs
        // over each run's own windows, never across two runs.
        let mut sustained: BTreeMap<String, f64> = BTreeMap::new();
        for run in runs {
            let Some(mi) = run.metric_index(*metric) else {
                continue;
            };
            for window in &run.scores[mi] {
                for (s, score) in window.iter().enumerate() {
                    per_server
                        .entry(run.servers[s].label.clone())
                        .or_default()
                        .push(*score);
                }
            }
            for (s, server) in run.servers.iter().enumerate() {
                let series: Vec<f64> = run.scores[mi]
                    .iter()
                    .filter_map(|w| w.get(s).copied())
                    .collect();
                let bar = sustained_threshold(&series, cfg.k, resolution);
                let e = sustained.entry(server.label.clone()).or_insert(0.0);
                *e = e.max(bar);
            }
        }
        let mut thresholds: BTreeMap<String, ServerThreshold> = per_server
            .into_iter()
            .map(|(label, mut scores)| {
                let (minimal, threshold) = match cfg.calibration {
                    Calibration::Paper { factor } => {
                        let m = minimal_threshold(&scores, resolution);
                        (m, factor * m)
                    }
                    Calibration::Quantile { q, margin } => {
                        let m = quantile(&mut scores, q);
                        (m, margin * m)
                    }
                    // The small-sample margin widens the sustained bar's
                    // cushion, not the paper's cap: a steady metric keeps
                    // its paper threshold.
                    Calibration::Sustained { factor, cap } => {
                        let m = sustained.get(&label).copied().unwrap_or(0.0);
                        let paper = cap * minimal_threshold(&scores, resolution);
                        (m, (small_sample * factor * m).min(paper))
                    }
                };
                let t = ServerThreshold {
                    threshold: threshold.max(cfg.min_threshold).max(floor(*metric, cfg)),
                    minimal,
                    max_score: scores.iter().copied().fold(0.0, f64::max),
                    windows: scores.len(),
                };
                (label, t)
            })
            .collect();
        // The peer pool: a clean burst any server showed, any may show.
        if cfg.pool {
            let top = thresholds.values().map(|t| t.threshold).fold(0.0, f64::max);
            for t in thresholds.values_mut() {
                t.threshold = top;
            }
        }
        metrics.insert(*metric, thresholds);
    }
    let unlike = unlike_others(runs, cfg);
    Ok(Thresholds {
        version: THRESHOLDS_VERSION,
        config: cfg.clone(),
        metrics,
        runs: runs
            .iter()
            .zip(unlike)
            .map(|(r, unlike_others)| TrainingRun {
                name: r.run.clone(),
                servers: r.servers.iter().map(|s| s.label.clone()).collect(),
                windows: r.windowed.starts.len(),
                unlike_others,
            })
            .collect(),
    })
}

/// The least threshold of `metric` whatever the training scores: a noise
/// floor where the metric's clean scores are mostly 0 (only
/// [`Metric::NetForeign`], under the Manhattan distance, whose scores are
/// bytes).
fn floor(metric: Metric, cfg: &PeersConfig) -> f64 {
    match (metric, cfg.distance) {
        (Metric::NetForeign, Distance::Manhattan) => FOREIGN_FLOOR_BPS * cfg.window_ns as f64 / 1e9,
        _ => 0.0,
    }
}

/// Per training run, the metrics by which it was unlike the other training
/// runs as a whole ([`TrainingRun::unlike_others`]): its servers' median
/// score in its worst window at least [`BEYOND_TRAINING`] times the largest
/// score of any server in the other runs. A host-wide stall in one clean
/// run (MooseFS PostMark: the host's disk busy with another process's reads
/// for 8 s, every chunkserver's file latency 100 times the other runs')
/// otherwise raised every pooled threshold unseen, and a throttled disk
/// 78-374 times its peers' latency went unnamed. Needs two runs.
pub fn unlike_others(runs: &[Scored], cfg: &PeersConfig) -> Vec<BTreeMap<Metric, f64>> {
    let mut out = vec![BTreeMap::new(); runs.len()];
    if runs.len() < 2 {
        return out;
    }
    for metric in &cfg.metrics {
        let series: Vec<Option<&Vec<Vec<f64>>>> = runs
            .iter()
            .map(|r| r.metric_index(*metric).map(|mi| &r.scores[mi]))
            .collect();
        let largest = |s: &Vec<Vec<f64>>| {
            s.iter()
                .flatten()
                .copied()
                .filter(|x| x.is_finite())
                .fold(0.0, f64::max)
        };
        let largest_of: Vec<Option<f64>> = series.iter().map(|s| s.map(largest)).collect();
        for (i, own) in series.iter().enumerate() {
            let Some(own) = own else { continue };
            let others = largest_of
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .filter_map(|(_, l)| *l)
                .fold(0.0, f64::max);
            if others <= 0.0 {
                continue;
            }
            let worst = own
                .iter()
                .map(|w| {
                    let mut v: Vec<f64> = w.iter().copied().filter(|x| x.is_finite()).collect();
                    if v.is_empty() {
                        0.0
                    } else {
                        super::median(&mut v)
                    }
                })
                .fold(0.0, f64::max);
            let ratio = worst / others;
            if ratio >= BEYOND_TRAINING {
                out[i].insert(*metric, ratio);
            }
        }
    }
    out
}

/// How far above the run's typical score an untrained threshold sits.
pub const UNTRAINED_FACTOR: f64 = 2.0;

/// Windows for a comparison without training: a sixth of the run's span
/// (`span_ns`), whole even seconds from 2 to 60, shifted by half; returns
/// (window, shift) in ns.
pub fn untrained_windows(span_ns: u64) -> (u64, u64) {
    let window_s = (span_ns / 6 / 1_000_000_000).clamp(2, 60) & !1;
    (window_s * 1_000_000_000, window_s * 500_000_000)
}

/// Thresholds for a run compared without training (`analyzer diagnose`
/// without `--thresholds`): per metric, [`UNTRAINED_FACTOR`] times the
/// median score over the run's servers and windows (at least the floor),
/// the same for every server. With the outlier rule and K of 2K−1 windows
/// on top, a server is faulty where it stands far out from the others for
/// a while; weaker evidence than thresholds learned from normal runs.
pub fn untrained(run: &Scored, cfg: &PeersConfig) -> Thresholds {
    let mut metrics = BTreeMap::new();
    for (mi, mv) in run.windowed.metrics.iter().enumerate() {
        let mut all: Vec<f64> = run.scores[mi]
            .iter()
            .flatten()
            .copied()
            .filter(|x| x.is_finite())
            .collect();
        let typical = if all.is_empty() {
            0.0
        } else {
            super::median(&mut all)
        };
        let threshold = (UNTRAINED_FACTOR * typical).max(cfg.min_threshold);
        let per_server = run
            .servers
            .iter()
            .map(|s| {
                (
                    s.label.clone(),
                    ServerThreshold {
                        threshold,
                        minimal: threshold,
                        max_score: typical,
                        windows: run.windowed.starts.len(),
                    },
                )
            })
            .collect();
        metrics.insert(mv.metric, per_server);
    }
    Thresholds {
        version: THRESHOLDS_VERSION,
        config: cfg.clone(),
        metrics,
        runs: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The found threshold removes every anomaly, and one step less would
    /// leave at least one (minimality), for many score sets and resolutions.
    #[test]
    fn binary_search_finds_the_minimal_threshold_that_removes_all_anomalies() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..500 {
            let n = 1 + (next() % 40) as usize;
            let scores: Vec<f64> = (0..n).map(|_| (next() % 100_000) as f64 / 37.0).collect();
            let res = [1.0, 0.01, 0.5, 7.0][round % 4];
            let t = minimal_threshold(&scores, res);
            assert!(
                scores.iter().all(|s| *s <= t),
                "round {round}: {t} leaves an anomaly"
            );
            let k = (t / res).round();
            assert!((k * res - t).abs() < 1e-9, "a multiple of the resolution");
            if k > 0.0 {
                let less = (k - 1.0) * res;
                assert!(
                    scores.iter().any(|s| *s > less),
                    "round {round}: {less} would do"
                );
            }
        }
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut v: Vec<f64> = (1..=20).map(f64::from).rev().collect();
        assert_eq!(quantile(&mut v, 0.95), 19.0);
        assert_eq!(quantile(&mut v, 1.0), 20.0);
        assert_eq!(quantile(&mut v, 0.5), 10.0);
        assert_eq!(quantile(&mut v, 0.0), 1.0);
        assert_eq!(quantile(&mut [], 0.9), 0.0);
        assert_eq!(quantile(&mut [3.0], 0.9), 3.0);
    }

    /// Paper: the minimum integer threshold; scores 3.2, 7 and 0 need 7.
    #[test]
    fn integer_thresholds_as_in_the_paper() {
        assert_eq!(minimal_threshold(&[3.2, 7.0, 0.0], 1.0), 7.0);
        assert_eq!(minimal_threshold(&[3.2, 7.01], 1.0), 8.0);
        assert_eq!(minimal_threshold(&[0.0, 0.0], 1.0), 0.0);
        assert_eq!(minimal_threshold(&[], 1.0), 0.0);
    }
}
