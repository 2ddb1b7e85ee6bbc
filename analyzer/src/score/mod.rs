//! Suspect scores (000 §3.1, eq. 1–2; 001 §3.1 edge variant): how far each
//! execution unit of a trial run deviates from the learned model, 0..1.

mod calibrate;
mod report;
mod suspect;

pub use calibrate::{Calibration, calibrate};
pub use report::{Earliest, SCORE_REPORT_VERSION, ScoreReport};
pub use suspect::{
    Difference, DifferenceKind, NORMAL_MARGIN, Scoring, UnitScore, rank, score_processes,
    score_tree,
};
