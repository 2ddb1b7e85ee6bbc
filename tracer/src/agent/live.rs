//! Live analysis: every interval the agent joins the recent past into one
//! capture (see [`super::window`]) and evaluates it with the analyzer's
//! replay code ([`analyzer::live`]): suspect scores of the units that became
//! complete, and peer comparison of the windows that did. Its results become
//! alerts; the last peers report is what `tracer ctl features` shows.

use std::time::Instant;

use analyzer::{
    Capture,
    live::{LiveModel, LivePeers, LivePeersReport},
    load::LoadError,
    score::UnitScore,
};
use serde::Serialize;

use super::{
    alerts::{ALERT_VERSION, Alert, now_rfc3339},
    config::AgentConfig,
};

/// What the live analysis did last.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LiveStatus {
    /// Evaluations run.
    pub evaluations: u64,
    /// Time the last one took, ms (join, decode, evaluate).
    pub last_ms: f64,
    /// Units scored in all.
    pub units_scored: u64,
    /// The highest unit score of the last evaluation.
    pub last_max_score: Option<f64>,
    /// Peer windows compared in all.
    pub peer_windows: u64,
    /// The window the last evaluation read, seconds (shorter than the
    /// configured one when `max_window_bytes` capped it).
    pub last_window_s: f64,
    /// Evaluations whose window was shortened by `max_window_bytes` (units
    /// before a shortened window may go unscored).
    pub shortened: u64,
    /// Why the last evaluation failed, if it did.
    pub last_error: Option<String>,
}

/// The loaded model and thresholds and what they found.
pub struct Live {
    model: Option<LiveModel>,
    peers: Option<LivePeers>,
    alert_score: f64,
    /// The last peers report (per-window features and verdicts).
    pub last_peers: Option<LivePeersReport>,
    /// Processes already reported as unknown to the model.
    unknown: std::collections::BTreeSet<u32>,
    /// Counters.
    pub status: LiveStatus,
}

impl Live {
    /// Loads what `config.analysis` names; `None` when it names nothing.
    pub fn load(config: &AgentConfig) -> Result<Option<Self>, LoadError> {
        let a = &config.analysis;
        let model = match &a.model {
            Some(path) => Some(LiveModel::new(analyzer::load::model(path)?, a.scoring)),
            None => None,
        };
        let peers = match &a.peers_thresholds {
            Some(path) => Some(LivePeers::new(analyzer::load::thresholds(path)?)),
            None => None,
        };
        if model.is_none() && peers.is_none() {
            return Ok(None);
        }
        Ok(Some(Self {
            model,
            peers,
            alert_score: a.alert_score,
            last_peers: None,
            unknown: std::collections::BTreeSet::new(),
            status: LiveStatus::default(),
        }))
    }

    /// Evaluates `window` (joined from `since_ns` to `now_ns`) and returns
    /// the alerts it raises.
    pub fn evaluate(
        &mut self,
        window: &[u8],
        since_ns: u64,
        now_ns: u64,
        host: &str,
    ) -> Vec<Alert> {
        let started = Instant::now();
        let capture = match Capture::read(window) {
            Ok(c) => c,
            Err(e) => {
                self.status.last_error = Some(format!("decoding the window: {e}"));
                return Vec::new();
            }
        };
        let mut alerts = Vec::new();
        if let Some(model) = &mut self.model {
            let scores = model.evaluate(&capture, since_ns, now_ns, "live");
            self.status.units_scored += scores.len() as u64;
            self.status.last_max_score = scores.iter().map(|s| s.score).reduce(f64::max);
            alerts.extend(unit_alerts(
                &scores,
                self.alert_score,
                host,
                &mut self.unknown,
            ));
        }
        if let Some(peers) = &mut self.peers {
            let report = peers.evaluate(&capture, since_ns, now_ns);
            self.status.peer_windows += report.windows.len() as u64;
            for w in &report.windows {
                for server in &w.faulty {
                    alerts.push(Alert {
                        version: ALERT_VERSION,
                        at: now_rfc3339(),
                        host: host.to_string(),
                        kind: "server".into(),
                        summary: format!(
                            "{server} is faulty (anomalous in k of the last 2k-1 windows); top functions: {}",
                            w.root_causes
                                .iter()
                                .filter(|r| r.server == *server)
                                .flat_map(|r| r.top.iter().take(3))
                                .map(|c| c.component.clone())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        snapshot: None,
                        detail: serde_json::to_value(w).unwrap_or_default(),
                    });
                }
            }
            self.last_peers = Some(report);
        }
        self.status.evaluations += 1;
        self.status.last_ms = started.elapsed().as_secs_f64() * 1e3;
        self.status.last_error = None;
        alerts
    }
}

/// Most unit alerts one evaluation raises; the rest are counted in the last.
const MAX_UNIT_ALERTS: usize = 5;

/// Alerts for the units scoring at least `threshold` (`scores` is sorted,
/// highest first), without flooding: a process the model has no group for
/// scores 1 in every unit, so it is reported once, as a process; of the
/// others at most [`MAX_UNIT_ALERTS`] per evaluation.
pub(crate) fn unit_alerts(
    scores: &[UnitScore],
    threshold: f64,
    host: &str,
    unknown: &mut std::collections::BTreeSet<u32>,
) -> Vec<Alert> {
    let mut alerts = Vec::new();
    let mut over = scores.iter().filter(|s| s.score >= threshold);
    let (mut units, mut rest) = (0, 0);
    for s in over.by_ref() {
        if s.reason.starts_with("no process group") {
            if unknown.insert(s.pid) {
                let mut a = unit_alert(s, threshold, host);
                a.kind = "process".into();
                a.summary = format!(
                    "{}[{}] matches no process group of the model (its start differs from every learned process): all its units score 1",
                    s.comm, s.pid
                );
                alerts.push(a);
            }
            continue;
        }
        if units < MAX_UNIT_ALERTS {
            units += 1;
            alerts.push(unit_alert(s, threshold, host));
        } else {
            rest += 1;
        }
    }
    if rest > 0
        && let Some(last) = alerts.last_mut()
    {
        last.summary.push_str(&format!(
            " (and {rest} more units at or above {threshold} in this window)"
        ));
    }
    // Forget processes that exited (memory stays bounded over days).
    unknown.retain(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
    alerts
}

fn unit_alert(s: &UnitScore, threshold: f64, host: &str) -> Alert {
    let why: Vec<String> = s
        .differences
        .iter()
        .take(3)
        .map(|d| format!("{:?} {}", d.kind, d.path))
        .collect();
    Alert {
        version: ALERT_VERSION,
        at: now_rfc3339(),
        host: host.to_string(),
        kind: "unit".into(),
        summary: format!(
            "{}[{}] tid {} {} unit at {} scores {:.3} (alert at {threshold}){}{}",
            s.comm,
            s.pid,
            s.tid,
            s.kind.name(),
            s.wall,
            s.score,
            s.peer
                .as_deref()
                .map(|p| format!(", peer {p}"))
                .unwrap_or_default(),
            if why.is_empty() {
                format!(": {}", s.reason)
            } else {
                format!(": {}", why.join("; "))
            }
        ),
        snapshot: None,
        detail: serde_json::to_value(s).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use analyzer::units::UnitKind;

    use super::*;

    fn score(pid: u32, score: f64, reason: &str) -> UnitScore {
        UnitScore {
            host: "h".into(),
            pid,
            comm: "d".into(),
            tid: pid,
            kind: UnitKind::Handler,
            start_ns: 0,
            end_ns: 0,
            t_s: 0.0,
            wall: String::new(),
            wall_ns: 0,
            deviated_wall_ns: 0,
            deviated_s: 0.0,
            capture: "live".into(),
            role: "main".into(),
            connection: None,
            peer: None,
            score,
            normal: None,
            anomalous: false,
            reason: reason.into(),
            differences: Vec::new(),
            evidence: Vec::new(),
            behaviour: None,
            open: Vec::new(),
            exited: false,
            cut: false,
            shared: false,
            group: None,
        }
    }

    #[test]
    fn alerts_do_not_flood() {
        let me = std::process::id();
        let mut unknown = std::collections::BTreeSet::new();
        let mut scores: Vec<UnitScore> = (0..20)
            .map(|_| score(me, 1.0, "no process group with this signature in the model"))
            .collect();
        scores.extend((0..8).map(|i| score(1, 0.99 - f64::from(i) * 0.001, "nodes")));
        scores.push(score(1, 0.5, "nodes"));
        let alerts = unit_alerts(&scores, 0.9, "h", &mut unknown);
        let kinds: Vec<&str> = alerts.iter().map(|a| a.kind.as_str()).collect();
        assert_eq!(kinds, ["process", "unit", "unit", "unit", "unit", "unit"]);
        assert!(
            alerts[5]
                .summary
                .ends_with("(and 3 more units at or above 0.9 in this window)")
        );
        // The unknown process (this test, alive) is reported once.
        let again = unit_alerts(&scores[..20], 0.9, "h", &mut unknown);
        assert!(again.is_empty(), "{again:?}");
    }
}
