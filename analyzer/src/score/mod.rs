//! Suspect scores (000 §3.1, eq. 1–2; 001 §3.1 edge variant): how far each
//! execution unit of a trial run deviates from the learned model, 0..1.

mod calibrate;
mod render;
mod report;
mod suspect;

pub use calibrate::{Calibration, calibrate};
pub use render::{scores_svg, why};
pub use report::{
    Earliest, NotJudged, REPEAT_MIN, Ranking, SCORE_REPORT_VERSION, ScoreReport, Suspect, Verdict,
};
pub use suspect::{
    Detached, Difference, DifferenceKind, Evidence, MIN_LEARNED_UNITS, NORMAL_MARGIN, Nearest,
    Scoring, Seen, UnitScore, rank, score_linked_processes, score_processes, score_tree,
    score_with_blocked,
};
