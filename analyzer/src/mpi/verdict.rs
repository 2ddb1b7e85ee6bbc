//! The verdict of an MPI analysis, one shape for all of them (interference
//! 002, outlier ranks 004, hangs), so that a later `analyzer diagnose` can
//! combine them: which ranks or processors are suspect, with scores against
//! learned thresholds; or "nothing abnormal"; or what could not be
//! monitored and why.

use serde::{Deserialize, Serialize};

/// Version of the [`Verdict`] serde layout.
pub const VERDICT_VERSION: u32 = 1;

/// What an analysis concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// At least one suspect scored above its threshold.
    Abnormal,
    /// Every monitored rank stayed within its threshold.
    NothingAbnormal,
    /// Nothing could be judged (see [`Verdict::not_monitored`]).
    NotMonitored,
}

/// A rank (and its processor) the analysis points at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    /// MPI rank.
    pub rank: u32,
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// CPUs its MPI calls ran on (its processor when pinned).
    pub cpus: Vec<u32>,
    /// Its score.
    pub score: f64,
    /// The threshold the score went over (learned, or stated).
    pub threshold: f64,
    /// What kind of evidence (`interference metric`, `computation
    /// slowdown`, `control flow`, `hang culprit`).
    pub evidence: String,
    /// Where and when, in words (a call site, a phase, a reason).
    pub detail: String,
}

/// A rank the analysis could not judge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unmonitored {
    /// MPI rank.
    pub rank: u32,
    /// Host.
    pub host: String,
    /// Why.
    pub reason: String,
}

/// One analysis's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// [`VERDICT_VERSION`].
    pub version: u32,
    /// `interference` (paper 002), `outliers` (paper 004) or `hang`.
    pub analysis: String,
    /// The conclusion.
    pub outcome: Outcome,
    /// One line for people.
    pub summary: String,
    /// Suspects, most abnormal (score over threshold) first.
    pub suspects: Vec<Suspect>,
    /// Ranks not judged, with the reason.
    pub not_monitored: Vec<Unmonitored>,
    /// Ranks judged.
    pub monitored: Vec<u32>,
    /// Evidence that could not be used on a judged rank, with the reason
    /// (its clean runs varied too much for any run to exceed the
    /// threshold): what "nothing abnormal" does not cover.
    #[serde(default)]
    pub cannot_judge: Vec<Unmonitored>,
}

impl Verdict {
    /// A verdict from suspects (any order) and unmonitored ranks; the
    /// summary is written from them, with `what` naming the scored
    /// quantity.
    pub fn new(
        analysis: &str,
        mut suspects: Vec<Suspect>,
        not_monitored: Vec<Unmonitored>,
        monitored: Vec<u32>,
        what: &str,
    ) -> Self {
        suspects.sort_by(|a, b| {
            let ra = a.score / a.threshold.max(f64::MIN_POSITIVE);
            let rb = b.score / b.threshold.max(f64::MIN_POSITIVE);
            rb.total_cmp(&ra).then(a.rank.cmp(&b.rank))
        });
        let outcome = if !suspects.is_empty() {
            Outcome::Abnormal
        } else if monitored.is_empty() {
            Outcome::NotMonitored
        } else {
            Outcome::NothingAbnormal
        };
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        let unmonitored: Vec<u32> = not_monitored.iter().map(|u| u.rank).collect();
        let tail = if unmonitored.is_empty() {
            String::new()
        } else {
            format!("; not monitored: rank(s) {}", list(&unmonitored))
        };
        let summary = match outcome {
            Outcome::Abnormal => {
                let names: Vec<String> = suspects
                    .iter()
                    .map(|s| {
                        format!(
                            "rank {} ({} {:.3} > {:.3})",
                            s.rank, s.evidence, s.score, s.threshold
                        )
                    })
                    .collect();
                format!("abnormal: {}{tail}", names.join(", "))
            }
            Outcome::NothingAbnormal => format!(
                "nothing abnormal: {what} rank(s) {} within their thresholds{tail}",
                list(&monitored)
            ),
            Outcome::NotMonitored => format!("not monitored{tail}"),
        };
        Self {
            version: VERDICT_VERSION,
            analysis: analysis.to_string(),
            outcome,
            summary,
            suspects,
            not_monitored,
            monitored,
            cannot_judge: Vec::new(),
        }
    }

    /// The verdict with `notes` on evidence it could not use on judged
    /// ranks, said in the summary too.
    pub fn cannot_judge(mut self, notes: Vec<Unmonitored>) -> Self {
        if notes.is_empty() {
            return self;
        }
        let said: Vec<String> = notes
            .iter()
            .map(|n| format!("rank {}: {}", n.rank, n.reason))
            .collect();
        self.summary = format!("{}; {}", self.summary, said.join("; "));
        self.cannot_judge = notes;
        self
    }

    /// The suspects' ranks, most abnormal first.
    pub fn suspect_ranks(&self) -> Vec<u32> {
        self.suspects.iter().map(|s| s.rank).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suspect(rank: u32, score: f64, threshold: f64) -> Suspect {
        Suspect {
            rank,
            host: "h".into(),
            pid: 1,
            cpus: vec![rank],
            score,
            threshold,
            evidence: "metric".into(),
            detail: String::new(),
        }
    }

    #[test]
    fn outcomes_and_order() {
        let v = Verdict::new(
            "interference",
            vec![suspect(0, 0.3, 0.2), suspect(1, 0.9, 0.2)],
            vec![Unmonitored {
                rank: 2,
                host: "h".into(),
                reason: "no samples".into(),
            }],
            vec![0, 1],
            "metric",
        );
        assert_eq!(v.outcome, Outcome::Abnormal);
        assert_eq!(v.suspect_ranks(), vec![1, 0]);
        assert!(
            v.summary.contains("not monitored: rank(s) 2"),
            "{}",
            v.summary
        );
        let ok = Verdict::new("outliers", vec![], vec![], vec![0, 1], "slowdown");
        assert_eq!(ok.outcome, Outcome::NothingAbnormal);
        assert!(ok.summary.starts_with("nothing abnormal"));
        let partly =
            Verdict::new("outliers", vec![], vec![], vec![0, 1], "slowdown").cannot_judge(vec![
                Unmonitored {
                    rank: 1,
                    host: "h".into(),
                    reason: "cannot judge its CPU deficit: clean runs varied by ±0.40".into(),
                },
            ]);
        assert_eq!(partly.outcome, Outcome::NothingAbnormal);
        assert!(
            partly
                .summary
                .ends_with("; rank 1: cannot judge its CPU deficit: clean runs varied by ±0.40"),
            "{}",
            partly.summary
        );
        let none = Verdict::new("outliers", vec![], vec![], vec![], "slowdown");
        assert_eq!(none.outcome, Outcome::NotMonitored);
        let json = serde_json::to_string(&v).expect("json");
        assert!(json.contains("\"outcome\":\"abnormal\""), "{json}");
    }
}
