//! What `analyzer model score` reports: every unit ranked by suspect score,
//! and where the fault first showed.
//!
//! A fault spreads: the units it disturbs later often deviate more than the
//! one where it began (000 §4: "the earlier a deviant behavior occurs, the
//! more likely it would be correlated with the failure"). So besides the
//! ranking, the report names the earliest anomalous unit of each capture
//! (by its monotonic clock) and of all captures together (by wall clock, as
//! far as the hosts' clocks agree).

use serde::{Deserialize, Serialize};

use super::{Scoring, UnitScore};
use crate::units::Variant;

/// Version of [`ScoreReport`]'s JSON form.
pub const SCORE_REPORT_VERSION: u32 = 1;

/// The scores of one or more captures against one model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoreReport {
    /// [`SCORE_REPORT_VERSION`].
    pub version: u32,
    /// Decomposition of the model (000 or 001).
    pub variant: Variant,
    /// How units were scored.
    pub scoring: Scoring,
    /// Every unit, most suspect first (ties: earliest first).
    pub units: Vec<UnitScore>,
    /// Per capture, in the order given: its earliest anomalous unit.
    pub earliest: Vec<Earliest>,
    /// The earliest anomalous unit of all captures by wall clock (index
    /// into `units`); `None` when no unit is anomalous.
    pub first_anomaly: Option<usize>,
}

/// Where the fault first showed in one capture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Earliest {
    /// The capture, as named in [`UnitScore::capture`].
    pub capture: String,
    /// Index into [`ScoreReport::units`] (its rank is one more); `None`
    /// when every unit of the capture behaved like the normal runs.
    pub unit: Option<usize>,
}

impl ScoreReport {
    /// Ranks `units` and finds the earliest anomalies. `captures` names the
    /// captures in the order they were given (a capture without units still
    /// gets its line).
    pub fn new(
        variant: Variant,
        scoring: Scoring,
        captures: &[String],
        mut units: Vec<UnitScore>,
    ) -> Self {
        super::rank(&mut units);
        let anomalous = || units.iter().enumerate().filter(|(_, u)| u.anomalous);
        let earliest = captures
            .iter()
            .map(|c| Earliest {
                capture: c.clone(),
                unit: anomalous()
                    .filter(|(_, u)| &u.capture == c)
                    .min_by_key(|(i, u)| (u.start_ns, *i))
                    .map(|(i, _)| i),
            })
            .collect();
        let first_anomaly = anomalous()
            .min_by_key(|(i, u)| (u.wall_ns, *i))
            .map(|(i, _)| i);
        Self {
            version: SCORE_REPORT_VERSION,
            variant,
            scoring,
            units,
            earliest,
            first_anomaly,
        }
    }

    /// The earliest anomalous unit of `capture`.
    pub fn earliest_in(&self, capture: &str) -> Option<&UnitScore> {
        self.earliest
            .iter()
            .find(|e| e.capture == capture)
            .and_then(|e| e.unit)
            .map(|i| &self.units[i])
    }

    /// The earliest anomalous unit of all captures (wall clock).
    pub fn first(&self) -> Option<&UnitScore> {
        self.first_anomaly.map(|i| &self.units[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::UnitKind;

    fn unit(capture: &str, score: f64, start_ns: u64, wall_ns: u64, anomalous: bool) -> UnitScore {
        UnitScore {
            host: "h".into(),
            pid: 1,
            comm: "d".into(),
            tid: 1,
            kind: UnitKind::Handler,
            start_ns,
            end_ns: start_ns + 1,
            t_s: 0.0,
            wall: String::new(),
            wall_ns,
            capture: capture.into(),
            role: "main".into(),
            connection: None,
            peer: None,
            score,
            normal: None,
            anomalous,
            reason: String::new(),
            differences: Vec::new(),
        }
    }

    /// The ranking is by score; the earliest anomaly is by time, per capture
    /// by its own clock and overall by wall clock; units inside their normal
    /// range never count, however early or high.
    #[test]
    fn earliest_anomaly_is_by_time_not_by_rank() {
        let names = ["a".to_string(), "b".to_string(), "quiet".to_string()];
        let report = ScoreReport::new(
            Variant::Paper000,
            Scoring::Nodes,
            &names,
            vec![
                unit("a", 0.9, 500, 5_500, true),
                unit("a", 0.4, 300, 5_300, true),
                unit("a", 0.95, 100, 5_100, false),
                // b's monotonic clock started elsewhere: 200 is later in
                // wall-clock time than a's 300.
                unit("b", 0.6, 200, 5_400, true),
                unit("b", 0.2, 50, 5_050, false),
                unit("quiet", 0.1, 10, 5_010, false),
            ],
        );
        assert_eq!(report.version, SCORE_REPORT_VERSION);
        let scores: Vec<f64> = report.units.iter().map(|u| u.score).collect();
        assert_eq!(scores, [0.95, 0.9, 0.6, 0.4, 0.2, 0.1]);
        assert_eq!(report.earliest_in("a").map(|u| u.score), Some(0.4));
        assert_eq!(report.earliest_in("b").map(|u| u.score), Some(0.6));
        assert_eq!(report.earliest_in("quiet"), None);
        assert_eq!(report.earliest.len(), 3, "every capture gets its line");
        assert_eq!(report.first().map(|u| u.score), Some(0.4));
        assert_eq!(report.first_anomaly, Some(3), "an index into units");

        let json = serde_json::to_string(&report).expect("serializes");
        let back: ScoreReport = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, report);
    }

    #[test]
    fn no_anomaly_no_earliest() {
        let report = ScoreReport::new(
            Variant::Paper001,
            Scoring::Edges,
            &["a".to_string()],
            vec![unit("a", 0.3, 1, 1, false)],
        );
        assert_eq!(report.first(), None);
        assert_eq!(report.earliest_in("a"), None);
        assert_eq!(report.earliest[0].unit, None);
    }
}
