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
//! run's noise. (Scoring thresholds by the mean or the worst difference over
//! grid neighbours was tried on real runs and chose worse thresholds: with
//! two processors K ≥ 1 never fires, so K neighbours drag the choice to
//! weak margins.)

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

/// The grid sorted ascending, or `[0]` when empty.
fn sorted_or_zero(grid: &[f64]) -> Vec<f64> {
    let mut g: Vec<f64> = grid.iter().copied().filter(|x| x.is_finite()).collect();
    g.sort_by(f64::total_cmp);
    g.dedup();
    if g.is_empty() {
        g.push(0.0);
    }
    g
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
    let r_grid = sorted_or_zero(&config.r_grid);
    let k_grid = sorted_or_zero(&config.k_grid);
    let mut processors = Vec::new();
    for (pn, rank) in normal.ranks.iter().enumerate() {
        let Some(pi) = int.rank_index(rank.rank) else {
            continue;
        };
        let mut seqs = Vec::new();
        for (l, ts) in sequences.iter().enumerate() {
            // (ILS_Nor, ILS_Int) at every grid point, [r][k].
            let ils: Vec<Vec<(f64, f64)>> = r_grid
                .iter()
                .map(|&r| {
                    k_grid
                        .iter()
                        .map(|&k| {
                            let th = Threshold { k, r };
                            (
                                nor.ils_end(l, pn, th, config.min_sample_ns),
                                int.ils_end(l, pi, th, config.min_sample_ns),
                            )
                        })
                        .collect()
                })
                .collect();
            let mut scored = Vec::with_capacity(r_grid.len() * k_grid.len());
            for (ri, row) in ils.iter().enumerate() {
                for (ki, (nor, int)) in row.iter().enumerate() {
                    scored.push((ri, ki, int - nor));
                }
            }
            let best = scored.iter().map(|s| s.2).fold(f64::NEG_INFINITY, f64::max);
            // `scored` is in (R, K) order: the median of the ties is the
            // middle of the best plateau.
            let ties: Vec<&(usize, usize, f64)> =
                scored.iter().filter(|s| s.2 >= best - 1e-12).collect();
            let (ri, ki, _) = *ties[ties.len() / 2];
            let (ils_normal, ils_interfered) = ils[ri][ki];
            let gain = ils_interfered - ils_normal;
            seqs.push(SequenceModel {
                id: ts.id,
                threshold: Threshold {
                    k: k_grid[ki],
                    r: r_grid[ri],
                },
                gain,
                ils_normal,
                ils_interfered,
                used: gain >= config.min_gain,
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
