//! Indictment and root cause (Kasick et al. §5.1–5.2): a server is anomalous
//! in a window when its score is above its threshold, faulty when anomalous in
//! at least k of the last 2k−1 windows; the combined verdict is faulty in any
//! metric. For each faulty server, the components ranked by their summed
//! distance to the median server over its anomalous windows. Beyond the
//! paper, the persistence rule ([`persistent`]) tells a server at fault from
//! one that deviated briefly beside it, and the load-shift rule
//! ([`load_shifted`]) one that took over the work it shed.

use std::collections::BTreeMap;

use super::{
    Scored,
    distance::{median, median_vector, term},
    types::{
        Cell, Culprit, FaultyServer, Metric, Outcome, REPORT_VERSION, Report, RootCause,
        ServerVerdict, ServerWindow, SilentMetric, Thresholds, Verdict, WindowReport,
    },
};

/// Whether each window ends a stretch of the last 2k−1 windows (fewer at the
/// start) with at least k anomalous ones.
pub fn k_of_2k_minus_1(anomalous: &[bool], k: usize) -> Vec<bool> {
    let span = 2 * k.max(1) - 1;
    (0..anomalous.len())
        .map(|w| {
            let from = (w + 1).saturating_sub(span);
            anomalous[from..=w].iter().filter(|a| **a).count() >= k
        })
        .collect()
}

/// Which servers found faulty count as faulty under the persistence rule
/// ([`PeersConfig::persistence`]): given the windows each server was faulty
/// in (0 for a server never faulty), those faulty in at least `share` of the
/// windows of the most persistent server. With the rule off (`None`), every
/// server faulty in any window.
///
/// [`PeersConfig::persistence`]: super::PeersConfig::persistence
pub fn persistent(faulty_windows: &[usize], share: Option<f64>) -> Vec<bool> {
    let top = faulty_windows.iter().copied().max().unwrap_or(0);
    faulty_windows
        .iter()
        .map(|n| *n > 0 && share.is_none_or(|p| *n as f64 >= p * top as f64))
        .collect()
}

/// Whether `server` carried more of the work than the median server over
/// `windows`: the sum of its vector's components above the sum of the
/// median vector's, added up over the windows (a metric's components share
/// one unit). No windows: false.
pub fn carries_more(vectors: &[Vec<Vec<f64>>], server: usize, windows: &[usize]) -> bool {
    let excess: f64 = windows
        .iter()
        .filter_map(|w| {
            let servers = vectors.get(*w)?;
            let mine: f64 = servers.get(server)?.iter().sum();
            Some(mine - median_vector(servers).iter().sum::<f64>())
        })
        .sum();
    excess > 0.0
}

/// Which of the servers called faulty took over load shed by another
/// ([`PeersConfig::load_shift`]), given for each called server the metrics
/// it was found faulty by, each with whether it carried more of the work
/// than the median server in it (read only for metrics that
/// [`Metric::follows_load`]). A server is one when every metric that found
/// it follows load and shows it carrying more, and some other called server
/// was found by a metric of its own resources. When none was, nothing tells
/// the servers apart: none is.
///
/// [`PeersConfig::load_shift`]: super::PeersConfig::load_shift
pub fn load_shifted(called: &[Vec<(Metric, bool)>]) -> Vec<bool> {
    let own_resources = |metrics: &[(Metric, bool)]| metrics.iter().any(|(m, _)| !m.follows_load());
    let only_more_work = |metrics: &[(Metric, bool)]| {
        !metrics.is_empty() && metrics.iter().all(|(m, more)| m.follows_load() && *more)
    };
    (0..called.len())
        .map(|s| {
            only_more_work(&called[s])
                && called
                    .iter()
                    .enumerate()
                    .any(|(o, metrics)| o != s && own_resources(metrics))
        })
        .collect()
}

/// Per server, whether its score exceeds `factor` times the median of the
/// other servers' scores (the outlier rule of [`PeersConfig::outlier`]).
/// NaN scores never stand out.
///
/// [`PeersConfig::outlier`]: super::PeersConfig::outlier
pub fn stands_out(scores: &[f64], factor: f64) -> Vec<bool> {
    (0..scores.len())
        .map(|s| {
            let mut others: Vec<f64> = scores
                .iter()
                .enumerate()
                .filter(|(o, _)| *o != s)
                .map(|(_, x)| *x)
                .collect();
            scores[s] > factor * median(&mut others)
        })
        .collect()
}

/// How far beyond their trained thresholds a server's peers are, at the
/// median, before the run counts as unlike training as a whole.
pub const BEYOND_TRAINING: f64 = 5.0;

/// The median, over the windows `server` was faulty in by metric `mi`, of
/// its peers' scores in units of their own thresholds, when it is at least
/// [`BEYOND_TRAINING`]: every server was far from what training saw, and a
/// verdict there rests on the outlier rule alone.
fn peers_beyond_training(
    run: &Scored,
    thresholds: &Thresholds,
    mi: usize,
    server: usize,
    faulty: &[bool],
) -> Option<f64> {
    let metric = run.windowed.metrics.get(mi)?.metric;
    let mut ratios: Vec<f64> = Vec::new();
    for (w, _) in faulty.iter().enumerate().filter(|(_, f)| **f) {
        for (o, peer) in run.servers.iter().enumerate() {
            if o == server {
                continue;
            }
            let Some((threshold, _)) = thresholds.get(metric, &peer.label) else {
                continue;
            };
            let score = run.scores.get(mi)?.get(w)?.get(o)?;
            if threshold > 0.0 && score.is_finite() {
                ratios.push(score / threshold);
            }
        }
    }
    if ratios.is_empty() {
        return None;
    }
    let m = median(&mut ratios);
    (m >= BEYOND_TRAINING).then_some(m)
}

/// Components ranked by Σ over `windows` of term(server, median server),
/// largest first, at most `top`.
pub fn rank_components(
    measure: super::Distance,
    components: &[String],
    vectors: &[Vec<Vec<f64>>],
    server: usize,
    windows: &[usize],
    top: usize,
) -> Vec<Culprit> {
    let mut sum = vec![0.0; components.len()];
    let mut delta = vec![0.0; components.len()];
    for w in windows {
        let median = median_vector(&vectors[*w]);
        let mine = &vectors[*w][server];
        for c in 0..components.len() {
            sum[c] += term(measure, mine[c], median[c]);
            delta[c] += mine[c] - median[c];
        }
    }
    let mut order: Vec<usize> = (0..components.len()).filter(|c| sum[*c] > 0.0).collect();
    order.sort_by(|a, b| {
        sum[*b]
            .total_cmp(&sum[*a])
            .then(components[*a].cmp(&components[*b]))
    });
    order
        .into_iter()
        .take(top)
        .map(|c| Culprit {
            component: components[c].clone(),
            distance: sum[c],
            mean_delta: delta[c] / windows.len().max(1) as f64,
        })
        .collect()
}

/// Diagnoses a scored run against trained thresholds.
pub fn diagnose(run: &Scored, thresholds: &Thresholds, k: usize, top: usize) -> Report {
    let measure = thresholds.config.distance;
    let n_servers = run.servers.len();
    let n_windows = run.windowed.starts.len();
    let mut notes = run.notes.clone();
    notes.extend(super::render::unlike_training_lines(thresholds));
    let mut metrics = Vec::new();
    // cells[w][s][metric]
    let mut cells: Vec<Vec<BTreeMap<Metric, Cell>>> =
        vec![vec![BTreeMap::new(); n_servers]; n_windows];
    let mut verdicts: Vec<ServerVerdict> = run
        .servers
        .iter()
        .map(|s| ServerVerdict {
            server: s.label.clone(),
            faulty: false,
            metrics: Vec::new(),
            first_faulty_window: None,
            anomalous_windows: BTreeMap::new(),
            faulty_windows: 0,
            brief: false,
            load_shift: false,
            beyond_training: BTreeMap::new(),
            source: s.source.clone(),
            retransmit_peers: BTreeMap::new(),
        })
        .collect();
    let mut root_causes = Vec::new();
    let mut dimensions = BTreeMap::new();
    let mut no_data = Vec::new();
    // Per server, each metric it was found faulty by, with whether it
    // carried more of the work than the median server in its anomalous
    // windows (for the load-shift rule).
    let mut found_by: Vec<Vec<(Metric, bool)>> = vec![Vec::new(); n_servers];
    for (mi, mv) in run.windowed.metrics.iter().enumerate() {
        let metric = mv.metric;
        if !thresholds.metrics.contains_key(&metric) {
            let reason = match &mv.empty {
                Some(why) => format!("not trained (no data in the training runs); here: {why}"),
                None => "not trained (no data in the training runs)".to_string(),
            };
            no_data.push(SilentMetric { metric, reason });
            continue;
        }
        // A metric with no dimension has nothing to compare: every score
        // would be 0, which reads as "alike" where nothing was seen.
        if let Some(why) = &mv.empty {
            no_data.push(SilentMetric {
                metric,
                reason: why.clone(),
            });
            continue;
        }
        metrics.push(metric);
        dimensions.insert(metric, mv.components.len());
        // outlier[w][s]: the outlier rule, all true when it is off.
        let outlier: Vec<Vec<bool>> = run.scores[mi]
            .iter()
            .map(|w| match thresholds.config.outlier {
                Some(f) => stands_out(w, f),
                None => vec![true; w.len()],
            })
            .collect();
        for (s, server) in run.servers.iter().enumerate() {
            let Some((threshold, own)) = thresholds.get(metric, &server.label) else {
                continue;
            };
            if !own {
                notes.push(format!(
                    "server {} has no trained {} threshold; using the largest trained one ({threshold})",
                    server.label,
                    metric.name()
                ));
            }
            let anomalous: Vec<bool> = (0..n_windows)
                .map(|w| run.scores[mi][w][s] > threshold && outlier[w][s])
                .collect();
            let faulty = k_of_2k_minus_1(&anomalous, k);
            for w in 0..n_windows {
                cells[w][s].insert(
                    metric,
                    Cell {
                        score: run.scores[mi][w][s],
                        threshold,
                        anomalous: anomalous[w],
                        faulty: faulty[w],
                    },
                );
            }
            let anomalous_windows: Vec<usize> = (0..n_windows).filter(|w| anomalous[*w]).collect();
            let v = &mut verdicts[s];
            v.anomalous_windows.insert(metric, anomalous_windows.len());
            if let Some(first) = faulty.iter().position(|f| *f) {
                if let Some(beyond) = peers_beyond_training(run, thresholds, mi, s, &faulty) {
                    notes.push(format!(
                        "while {} stood out by {}, its peers were themselves {beyond:.0} times their trained thresholds (median): this run is unlike the training runs as a whole (host load, a shared disk or network), so the thresholds cannot say what is normal here and {} stands out only among its peers",
                        server.label,
                        metric.name(),
                        server.label
                    ));
                    v.beyond_training.insert(metric, beyond);
                }
                v.faulty = true;
                v.metrics.push(metric);
                v.first_faulty_window = Some(v.first_faulty_window.map_or(first, |x| x.min(first)));
                found_by[s].push((
                    metric,
                    metric.follows_load() && carries_more(&mv.vectors, s, &anomalous_windows),
                ));
                root_causes.push(RootCause {
                    server: server.label.clone(),
                    metric,
                    anomalous_windows: anomalous_windows.len(),
                    top: rank_components(
                        measure,
                        &mv.components,
                        &mv.vectors,
                        s,
                        &anomalous_windows,
                        top,
                    ),
                });
            }
        }
    }
    // Windows each server was faulty in by any metric, and the persistence
    // rule over them.
    let faulty_windows: Vec<usize> = (0..n_servers)
        .map(|s| {
            (0..n_windows)
                .filter(|w| cells[*w][s].values().any(|c| c.faulty))
                .count()
        })
        .collect();
    let keep = persistent(&faulty_windows, thresholds.config.persistence);
    for (s, v) in verdicts.iter_mut().enumerate() {
        v.faulty_windows = faulty_windows[s];
        if v.faulty && !keep[s] {
            v.faulty = false;
            v.brief = true;
        }
    }
    // The load-shift rule among the servers still called faulty.
    if thresholds.config.load_shift {
        let called: Vec<usize> = (0..n_servers).filter(|s| verdicts[*s].faulty).collect();
        let evidence: Vec<Vec<(Metric, bool)>> =
            called.iter().map(|s| found_by[*s].clone()).collect();
        for (s, shifted) in called.iter().zip(load_shifted(&evidence)) {
            if shifted {
                verdicts[*s].faulty = false;
                verdicts[*s].load_shift = true;
            }
        }
    }
    for (s, v) in verdicts.iter_mut().enumerate() {
        v.retransmit_peers = run.retransmit_peers[s]
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect();
    }
    let first = run.windowed.starts.first().copied().unwrap_or(0);
    let windows = (0..n_windows)
        .map(|w| {
            let start = run.windowed.starts[w];
            WindowReport {
                index: w,
                start_ns: start,
                end_ns: start + run.windowed.window_ns,
                t_s: (start - first) as f64 / 1e9,
                wall: wall_clock(start),
                servers: (0..n_servers)
                    .map(|s| ServerWindow {
                        server: run.servers[s].label.clone(),
                        faulty: cells[w][s].values().any(|c| c.faulty),
                        metrics: std::mem::take(&mut cells[w][s]),
                    })
                    .collect(),
            }
        })
        .collect();
    let faulty_by_metric = metrics
        .iter()
        .map(|m| {
            let servers = verdicts
                .iter()
                .filter(|v| v.metrics.contains(m))
                .map(|v| v.server.clone())
                .collect();
            (*m, servers)
        })
        .collect();
    let verdict = verdict_of(&verdicts, &metrics, no_data, &run.windowed.starts);
    Report {
        version: REPORT_VERSION,
        verdict,
        faulty: verdicts
            .iter()
            .filter(|v| v.faulty)
            .map(|v| v.server.clone())
            .collect(),
        faulty_by_metric,
        k,
        outlier: thresholds.config.outlier,
        normalized: thresholds
            .config
            .normalize
            .iter()
            .copied()
            .filter(|m| metrics.contains(m))
            .collect(),
        metrics,
        servers: verdicts,
        windows,
        root_causes,
        dimensions,
        notes,
    }
}

/// The verdict from the per-server verdicts: faulty servers, or none
/// stands out over the metrics compared, or no data at all.
fn verdict_of(
    servers: &[ServerVerdict],
    compared: &[Metric],
    no_data: Vec<SilentMetric>,
    starts: &[u64],
) -> Verdict {
    let first = starts.first().copied().unwrap_or(0);
    let listed = |v: &ServerVerdict| FaultyServer {
        server: v.server.clone(),
        metrics: v.metrics.clone(),
        from_s: v
            .first_faulty_window
            .and_then(|w| starts.get(w))
            .map_or(0.0, |s| (s - first) as f64 / 1e9),
        windows: v.faulty_windows,
    };
    let faulty: Vec<FaultyServer> = servers.iter().filter(|v| v.faulty).map(listed).collect();
    let brief: Vec<FaultyServer> = servers.iter().filter(|v| v.brief).map(listed).collect();
    let load_shift: Vec<FaultyServer> = servers
        .iter()
        .filter(|v| v.load_shift)
        .map(listed)
        .collect();
    let names = |m: &[Metric]| m.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ");
    let (outcome, mut summary) = if compared.is_empty() {
        (
            Outcome::NoData,
            "no verdict: no metric had data to compare".to_string(),
        )
    } else if faulty.is_empty() {
        (
            Outcome::NoneStandsOut,
            format!("no server stands out (compared by {})", names(compared)),
        )
    } else {
        let list: Vec<String> = faulty
            .iter()
            .map(|f| format!("{} (by {})", f.server, names(&f.metrics)))
            .collect();
        (Outcome::Faulty, format!("faulty: {}", list.join("; ")))
    };
    if !brief.is_empty() {
        let list: Vec<String> = brief
            .iter()
            .map(|f| {
                format!(
                    "{} (by {}, {} windows)",
                    f.server,
                    names(&f.metrics),
                    f.windows
                )
            })
            .collect();
        summary.push_str(&format!("; deviated briefly: {}", list.join("; ")));
    }
    if !load_shift.is_empty() {
        let list: Vec<String> = load_shift
            .iter()
            .map(|f| format!("{} (by {})", f.server, names(&f.metrics)))
            .collect();
        summary.push_str(&format!(
            "; took over load (more work, own resources normal): {}",
            list.join("; ")
        ));
    }
    if !no_data.is_empty() {
        let silent: Vec<Metric> = no_data.iter().map(|s| s.metric).collect();
        summary.push_str(&format!("; no data for {}", names(&silent)));
    }
    Verdict {
        outcome,
        faulty,
        brief,
        load_shift,
        compared: compared.to_vec(),
        no_data,
        summary,
    }
}

/// `HH:MM:SS.mmm` (UTC) of a wall-clock time in ns since the epoch.
fn wall_clock(ns: u64) -> String {
    let ms = ns / 1_000_000;
    let s = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::Distance;

    #[test]
    fn k_of_the_last_2k_minus_1_windows() {
        let a = |s: &str| s.chars().map(|c| c == '1').collect::<Vec<_>>();
        let f = |v: Vec<bool>| {
            v.iter()
                .map(|b| if *b { '1' } else { '0' })
                .collect::<String>()
        };
        // k = 3: 3 of the last 5.
        assert_eq!(f(k_of_2k_minus_1(&a("1101000"), 3)), "0001100");
        assert_eq!(f(k_of_2k_minus_1(&a("1010100"), 3)), "0000100");
        assert_eq!(
            f(k_of_2k_minus_1(&a("1001001"), 3)),
            "0000000",
            "3 in 7, never 3 in 5"
        );
        assert_eq!(f(k_of_2k_minus_1(&a("0111111"), 3)), "0001111");
        // k = 1: any anomaly.
        assert_eq!(f(k_of_2k_minus_1(&a("0100"), 1)), "0100");
        // k = 2: 2 of the last 3.
        assert_eq!(f(k_of_2k_minus_1(&a("10100"), 2)), "00100");
    }

    /// Server 3 differs from the median (2, 10, 5) by (+8, 0, −1) in window 0
    /// and from the median (2.5, 10, 5) by (+5.5, 0, −3) in window 1: f0 ranks
    /// first with 13.5, f2 second with 4, f1 (no difference) not at all.
    #[test]
    fn root_cause_ranks_by_summed_component_distance_to_the_median() {
        let names: Vec<String> = ["f0", "f1", "f2"].iter().map(|s| s.to_string()).collect();
        let w0 = vec![
            vec![2.0, 10.0, 5.0],
            vec![2.0, 10.0, 5.0],
            vec![1.0, 10.0, 6.0],
            vec![10.0, 10.0, 4.0],
        ];
        let w1 = vec![
            vec![2.0, 10.0, 5.0],
            vec![2.0, 9.0, 5.0],
            vec![3.0, 11.0, 5.0],
            vec![8.0, 10.0, 2.0],
        ];
        // Medians: w0 (2, 10, 5); w1 (2.5, 10, 5).
        let got = rank_components(Distance::Manhattan, &names, &[w0, w1], 3, &[0, 1], 10);
        let summary: Vec<(&str, f64, f64)> = got
            .iter()
            .map(|c| (c.component.as_str(), c.distance, c.mean_delta))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("f0", 8.0 + 5.5, (8.0 + 5.5) / 2.0),
                ("f2", 1.0 + 3.0, -2.0)
            ]
        );
        let top1 = rank_components(
            Distance::Manhattan,
            &names,
            &[vec![vec![0.0; 3]; 3]],
            0,
            &[0],
            1,
        );
        assert!(top1.is_empty(), "no difference, nothing to blame");
    }

    /// Four servers: one far from three that agree stands out; four that
    /// all disagree alike do not; factor 1 is "above the others' median".
    #[test]
    fn a_score_stands_out_when_above_factor_times_the_others_median() {
        assert_eq!(
            stands_out(&[2.0, 2.5, 12.0, 3.0], 2.0),
            vec![false, false, true, false]
        );
        assert_eq!(stands_out(&[10.0, 9.0, 11.0, 10.0], 2.0), vec![false; 4]);
        assert_eq!(
            stands_out(&[10.0, 9.0, 11.0, 10.0], 1.0),
            vec![false, false, true, false]
        );
        // Exactly the factor is not above it; peers at 0 leave any score out.
        assert_eq!(
            stands_out(&[4.0, 2.0, 2.0, 0.0], 2.0),
            vec![false, false, false, false]
        );
        assert_eq!(stands_out(&[0.1, 0.0, 0.0], 2.0), vec![true, false, false]);
        assert_eq!(stands_out(&[f64::NAN, 1.0, 1.0], 2.0), vec![false; 3]);
    }

    #[test]
    fn wall_clock_is_utc_time_of_day() {
        assert_eq!(
            wall_clock(((13 * 3600 + 4 * 60 + 5) * 1000 + 67) * 1_000_000),
            "13:04:05.067"
        );
    }
}
