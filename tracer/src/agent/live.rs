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
            for s in scores.iter().filter(|s| s.score >= self.alert_score) {
                alerts.push(unit_alert(s, self.alert_score, host));
            }
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
