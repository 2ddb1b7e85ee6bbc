//! Peer comparison (paper 003) of the windows of a live recording, each
//! window once, with the k-of-2k−1 rule over the windows seen so far, and
//! the persistence rule of `peers diagnose` over the current episode: a
//! server found faulty is called faulty only while it has been faulty in at
//! least the configured share of the windows of the most persistent server
//! since the episode began (a knock-on victim or a passing disturbance
//! deviates briefly beside the server at fault). An episode ends when no
//! server has been faulty for 2k−1 windows: by then every anomalous window
//! has left the k-of-2k−1 history. Then, in each window, the load-shift
//! rule of `peers diagnose`: of the servers called faulty, one faulty only
//! by the work it carries, more than the median server, beside one faulty
//! in its own resources took over load and is not called faulty.

use std::collections::{BTreeMap, VecDeque};

use super::{
    anchor,
    types::{
        LIVE_REPORT_VERSION, LivePeersReport, LiveServerWindow, LiveWindow, MetricFeatures,
        WindowFeatures,
    },
};
use crate::{
    decode::Capture,
    peers::{
        CaptureSource, Cell, Metric, PeersError, RootCause, ServerSplit, Thresholds, carries_more,
        extract, load_shifted, rank_components, score,
    },
};

/// Root-cause functions reported per faulty server and metric.
const TOP: usize = 10;

/// Compares the traced servers of successive live captures with their
/// peers, window by window, against trained thresholds.
#[derive(Debug)]
pub struct LivePeers {
    thresholds: Thresholds,
    /// Start (wall clock) of the last window reported.
    last_window: Option<u64>,
    /// Per server and metric: (window start, anomalous) of the last 2k−1
    /// windows.
    history: BTreeMap<String, BTreeMap<Metric, VecDeque<(u64, bool)>>>,
    /// Per server, the windows of the current episode it was faulty in.
    episode: BTreeMap<String, usize>,
    /// Windows in a row in which no server was faulty.
    calm: usize,
    /// The servers called faulty at the last window.
    called: Vec<String>,
}

/// The servers faulty by the k-of-2k−1 rule in one window (`raw`) that are
/// called faulty under the persistence rule, given the faulty-window counts
/// of the episode so far (`episode`, already counting this window). The
/// rest deviated briefly.
fn call(raw: &[String], episode: &BTreeMap<String, usize>, share: Option<f64>) -> Vec<String> {
    let counts: Vec<usize> = episode.values().copied().collect();
    let keep = crate::peers::persistent(&counts, share);
    episode
        .keys()
        .zip(keep)
        .filter(|(label, keep)| *keep && raw.contains(label))
        .map(|(label, _)| label.clone())
        .collect()
}

impl LivePeers {
    /// A live comparison with `thresholds` (its config gives WinSize,
    /// WinShift, k, the distance and how servers are labelled).
    pub fn new(thresholds: Thresholds) -> Self {
        Self {
            thresholds,
            last_window: None,
            history: BTreeMap::new(),
            episode: BTreeMap::new(),
            calm: 0,
            called: Vec::new(),
        }
    }

    /// Servers whose verdict history is kept.
    pub fn remembered_servers(&self) -> usize {
        self.history.len()
    }

    /// The windows of `capture` that lie inside `[window_start_ns, now_ns]`
    /// (`CLOCK_MONOTONIC`) and were not reported before, compared.
    pub fn evaluate(
        &mut self,
        capture: &Capture,
        window_start_ns: u64,
        now_ns: u64,
    ) -> LivePeersReport {
        let mut cfg = self.thresholds.config.clone();
        let mut notes = Vec::new();
        // One capture holds every server: one server per traced process.
        if cfg.split == ServerSplit::PerCapture {
            cfg.split = ServerSplit::PerProcess { label_arg: None };
            notes.push(
                "thresholds were trained one capture per server; live servers are labelled \
                 comm[pid], which training may not know"
                    .to_string(),
            );
        }
        let mut report = LivePeersReport {
            version: LIVE_REPORT_VERSION,
            servers: Vec::new(),
            compared: false,
            windows: Vec::new(),
            faulty: Vec::new(),
            notes,
        };
        let facts = anchor::scan(capture, window_start_ns);
        let anchored = anchor::anchored(capture, &facts, window_start_ns);
        let path = std::path::Path::new("live");
        let sources = [CaptureSource {
            path,
            label: "live",
            capture: anchored.get(),
        }];
        let mut features = match extract("live", &sources, &cfg) {
            Ok(f) => f,
            Err(PeersError::TooFewServers { found, min, .. }) => {
                report.notes.push(format!(
                    "peer comparison needs at least {min} servers, {found} traced: no verdict"
                ));
                return report;
            }
            Err(e) => {
                report.notes.push(format!("no verdict: {e}"));
                return report;
            }
        };
        let clock = capture.header.clock;
        let (from, to) = (
            clock.to_realtime(window_start_ns),
            clock.to_realtime(now_ns),
        );
        // Every traced process was drained up to now: a server that went
        // quiet (hung) is quiet in the windows up to now, not absent.
        for s in &mut features.servers {
            s.span.1 = s.span.1.max(to);
        }
        let scored = score(features, &cfg);
        report.compared = true;
        report.servers = scored.servers.iter().map(|s| s.label.clone()).collect();
        report.notes.extend(scored.notes.iter().cloned());
        self.history
            .retain(|label, _| report.servers.iter().any(|s| s == label));
        self.episode
            .retain(|label, _| report.servers.iter().any(|s| s == label));
        let span = 2 * cfg.k.max(1) - 1;
        let window_ns = scored.windowed.window_ns;
        let new: Vec<usize> = (0..scored.windowed.starts.len())
            .filter(|w| {
                let s = scored.windowed.starts[*w];
                s >= from && s + window_ns <= to && self.last_window.is_none_or(|l| s > l)
            })
            .collect();
        let mut untrained = Vec::new();
        for w in new {
            let start = scored.windowed.starts[w];
            let mut servers = Vec::new();
            let mut root_causes = Vec::new();
            // Per server, the metrics it is faulty by, each with whether it
            // carried more of the work than the median server (the
            // load-shift rule).
            let mut found_by: BTreeMap<String, Vec<(Metric, bool)>> = BTreeMap::new();
            // The same rule as `peers diagnose`: over the threshold and,
            // when trained with one, standing out from the peers.
            let stand_out: Vec<Vec<bool>> = (0..scored.windowed.metrics.len())
                .map(|mi| match cfg.outlier {
                    Some(f) => crate::peers::stands_out(&scored.scores[mi][w], f),
                    None => vec![true; report.servers.len()],
                })
                .collect();
            for (s, label) in report.servers.iter().enumerate() {
                let mut metrics = BTreeMap::new();
                for (mi, mv) in scored.windowed.metrics.iter().enumerate() {
                    let Some((threshold, own)) = self.thresholds.get(mv.metric, label) else {
                        continue;
                    };
                    if !own && !untrained.contains(label) {
                        untrained.push(label.clone());
                    }
                    let distance = scored.scores[mi][w][s];
                    let anomalous = distance > threshold && stand_out[mi][s];
                    let h = self
                        .history
                        .entry(label.clone())
                        .or_default()
                        .entry(mv.metric)
                        .or_default();
                    h.push_back((start, anomalous));
                    while h.len() > span {
                        h.pop_front();
                    }
                    let faulty = h.iter().filter(|(_, a)| *a).count() >= cfg.k;
                    if faulty {
                        // The anomalous windows of the history this capture
                        // still holds.
                        let windows: Vec<usize> = h
                            .iter()
                            .filter(|(_, a)| *a)
                            .filter_map(|(t, _)| scored.windowed.starts.iter().position(|x| x == t))
                            .collect();
                        found_by.entry(label.clone()).or_default().push((
                            mv.metric,
                            mv.metric.follows_load() && carries_more(&mv.vectors, s, &windows),
                        ));
                        root_causes.push(RootCause {
                            server: label.clone(),
                            metric: mv.metric,
                            anomalous_windows: h.iter().filter(|(_, a)| *a).count(),
                            top: rank_components(
                                cfg.distance,
                                &mv.components,
                                &mv.vectors,
                                s,
                                &windows,
                                TOP,
                            ),
                        });
                    }
                    metrics.insert(
                        mv.metric,
                        Cell {
                            score: distance,
                            threshold,
                            anomalous,
                            faulty,
                        },
                    );
                }
                servers.push(LiveServerWindow {
                    server: label.clone(),
                    faulty: metrics.values().any(|c| c.faulty),
                    metrics,
                });
            }
            let raw: Vec<String> = servers
                .iter()
                .filter(|s| s.faulty)
                .map(|s| s.server.clone())
                .collect();
            if raw.is_empty() {
                self.calm += 1;
                if self.calm >= span {
                    self.episode.clear();
                }
            } else {
                self.calm = 0;
                for label in &raw {
                    *self.episode.entry(label.clone()).or_default() += 1;
                }
            }
            let mut faulty = call(&raw, &self.episode, cfg.persistence);
            let brief: Vec<String> = raw
                .iter()
                .filter(|l| !faulty.contains(l))
                .cloned()
                .collect();
            let mut load_shift = Vec::new();
            if cfg.load_shift {
                let evidence: Vec<Vec<(Metric, bool)>> = faulty
                    .iter()
                    .map(|l| found_by.get(l).cloned().unwrap_or_default())
                    .collect();
                let shifted = load_shifted(&evidence);
                let (shed, kept): (Vec<_>, Vec<_>) =
                    faulty.into_iter().zip(shifted).partition(|(_, s)| *s);
                load_shift = shed.into_iter().map(|(l, _)| l).collect();
                faulty = kept.into_iter().map(|(l, _)| l).collect();
            }
            for s in &mut servers {
                s.faulty = faulty.contains(&s.server);
            }
            root_causes.retain(|r| faulty.contains(&r.server));
            report.faulty.clone_from(&faulty);
            self.called.clone_from(&faulty);
            report.windows.push(LiveWindow {
                start_ns: start,
                end_ns: start + window_ns,
                servers,
                faulty,
                brief,
                load_shift,
                root_causes,
                features: WindowFeatures {
                    version: LIVE_REPORT_VERSION,
                    start_ns: start,
                    window_ns,
                    servers: report.servers.clone(),
                    metrics: scored
                        .windowed
                        .metrics
                        .iter()
                        .map(|mv| MetricFeatures {
                            metric: mv.metric,
                            components: mv.components.clone(),
                            vectors: mv.vectors[w].clone(),
                        })
                        .collect(),
                },
            });
            self.last_window = Some(start);
        }
        if report.windows.is_empty() {
            // Nothing new: the verdicts stand as of the last window, less
            // the servers no longer compared.
            report.faulty = self
                .called
                .iter()
                .filter(|l| self.history.contains_key(*l))
                .cloned()
                .collect();
        }
        for label in untrained {
            report.notes.push(format!(
                "server {label} has no trained threshold; using the largest trained one"
            ));
        }
        report
    }
}
