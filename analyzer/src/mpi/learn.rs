//! The learning unit (002 §4.3): from a run without and a run with a
//! background job, choose per processor p and typical sequence l the
//! threshold that maximizes ILS_Int(p, l, end) − ILS_Nor(p, l, end) (eq. 5)
//! over k = 0, 0.5, …, 10; drop (p, l) whose best difference is small
//! (insensitive to interference).
//!
//! Beyond the paper: the search also covers the relative margin R of
//! [`Threshold`] (see [`super::signals`]), and among equally good
//! thresholds it takes the median one (ordered by R, then K) rather than
//! the first: the middle of the plateau leaves the most room on both sides
//! for later runs, where the smallest would sit on the edge of the clean
//! run's noise.

use serde::{Deserialize, Serialize};

use super::{
    profile::Profiles,
    signals::{Signals, Threshold},
    typical::{TypicalConfig, TypicalSequence, typical_sequences},
};

/// Version of the [`Model`] serde layout.
pub const MODEL_VERSION: u32 = 1;

/// Errors learning a model.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    /// The clean run has no typical sequence.
    #[error(
        "no typical sequence: no Sequitur rule of the reference rank occurs {min_occurrences} times on every rank"
    )]
    NoTypicalSequences {
        /// The occurrence bound used.
        min_occurrences: usize,
    },
    /// The runs share no rank.
    #[error("the clean and interfered runs have no rank in common")]
    NoCommonRank,
}

/// Learning parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LearnConfig {
    /// How typical sequences are chosen (from the clean run).
    pub typical: TypicalConfig,
    /// Candidate K values (paper: 0, 0.5, …, 10).
    pub k_grid: Vec<f64>,
    /// Candidate relative margins R ([0] gives the paper's threshold).
    pub r_grid: Vec<f64>,
    /// Smallest ILS difference for (p, l) to be used in detection.
    pub min_gain: f64,
    /// Samples shorter than this are filtered (paper: 0.5 ms).
    pub min_sample_ns: u64,
}

impl Default for LearnConfig {
    fn default() -> Self {
        Self {
            typical: TypicalConfig::default(),
            k_grid: (0..=20).map(|i| f64::from(i) * 0.5).collect(),
            r_grid: (0..=25).map(|i| f64::from(i) * 0.02).collect(),
            min_gain: 0.1,
            min_sample_ns: 500_000,
        }
    }
}

impl LearnConfig {
    /// The paper's threshold search only (R = 0).
    pub fn paper() -> Self {
        Self {
            r_grid: vec![0.0],
            ..Self::default()
        }
    }
}

/// What was learned for one typical sequence of one processor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SequenceModel {
    /// l (1-based, as in [`TypicalSequence::id`]).
    pub id: usize,
    /// The chosen threshold.
    pub threshold: Threshold,
    /// ILS_Int(end) − ILS_Nor(end) at the chosen threshold.
    pub gain: f64,
    /// ILS_Nor(p, l, end) at the chosen threshold.
    pub ils_normal: f64,
    /// ILS_Int(p, l, end) at the chosen threshold.
    pub ils_interfered: f64,
    /// False when `gain` < `min_gain`: not used in detection.
    pub used: bool,
}

/// The learned parameters of one processor (rank).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessorModel {
    /// MPI rank.
    pub rank: u32,
    /// Host of the rank in the clean run.
    pub host: String,
    /// One entry per typical sequence, in order.
    pub sequences: Vec<SequenceModel>,
}

/// A learned interference detector, applied to later runs by
/// [`super::detect`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// [`MODEL_VERSION`].
    pub version: u32,
    /// Parameters used.
    pub config: LearnConfig,
    /// The typical sequences (from the clean run).
    pub sequences: Vec<TypicalSequence>,
    /// Per processor.
    pub processors: Vec<ProcessorModel>,
}

impl Model {
    /// The parameters of `rank`.
    pub fn processor(&self, rank: u32) -> Option<&ProcessorModel> {
        self.processors.iter().find(|p| p.rank == rank)
    }
}

/// Learns K(p, l) (and R(p, l)) from a clean and an interfered run.
pub fn learn(
    normal: &Profiles,
    interfered: &Profiles,
    config: &LearnConfig,
) -> Result<Model, LearnError> {
    let sequences = typical_sequences(normal, &config.typical);
    if sequences.is_empty() {
        return Err(LearnError::NoTypicalSequences {
            min_occurrences: config.typical.min_occurrences,
        });
    }
    let nor = Signals::build(normal, &sequences);
    let int = Signals::build(interfered, &sequences);
    let mut candidates: Vec<Threshold> = Vec::new();
    for &r in &config.r_grid {
        for &k in &config.k_grid {
            candidates.push(Threshold { k, r });
        }
    }
    if candidates.is_empty() {
        candidates.push(Threshold { k: 0.0, r: 0.0 });
    }
    // Ordered by strength (R, then K) so the median of ties is meaningful.
    candidates.sort_by(|a, b| a.r.total_cmp(&b.r).then(a.k.total_cmp(&b.k)));
    let mut processors = Vec::new();
    for (pn, rank) in normal.ranks.iter().enumerate() {
        let Some(pi) = int.rank_index(rank.rank) else {
            continue;
        };
        let mut seqs = Vec::new();
        for (l, ts) in sequences.iter().enumerate() {
            let scored: Vec<(Threshold, f64, f64)> = candidates
                .iter()
                .map(|&th| {
                    (
                        th,
                        nor.ils_end(l, pn, th, config.min_sample_ns),
                        int.ils_end(l, pi, th, config.min_sample_ns),
                    )
                })
                .collect();
            let best = scored
                .iter()
                .map(|(_, n, i)| i - n)
                .fold(f64::NEG_INFINITY, f64::max);
            let ties: Vec<&(Threshold, f64, f64)> = scored
                .iter()
                .filter(|(_, n, i)| (i - n) >= best - 1e-12)
                .collect();
            let (threshold, ils_normal, ils_interfered) = *ties[ties.len() / 2];
            seqs.push(SequenceModel {
                id: ts.id,
                threshold,
                gain: best,
                ils_normal,
                ils_interfered,
                used: best >= config.min_gain,
            });
        }
        processors.push(ProcessorModel {
            rank: rank.rank,
            host: rank.host.clone(),
            sequences: seqs,
        });
    }
    if processors.is_empty() {
        return Err(LearnError::NoCommonRank);
    }
    Ok(Model {
        version: MODEL_VERSION,
        config: config.clone(),
        sequences,
        processors,
    })
}
