//! The interference metric (002 eq. 4): per processor,
//! m(p) = Σ_l w(l)·ILS(p, l, end), with weights proportional to the typical
//! sequences' lengths (normalized over the sequences used for p, so m is in
//! 0..1), computed with a learned [`Model`] on a later run.

use serde::{Deserialize, Serialize};

use super::{
    learn::Model,
    profile::Profiles,
    signals::{Signals, Threshold},
    typical::TypicalSequence,
};

/// Version of the [`Detection`] serde layout.
pub const DETECTION_VERSION: u32 = 1;

/// One typical sequence's contribution on one processor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SequenceResult {
    /// l.
    pub id: usize,
    /// Used in the metric (the model kept it for this processor and the
    /// run has samples of it).
    pub used: bool,
    /// w(l) in the metric (0 when unused).
    pub weight: f64,
    /// The learned threshold.
    pub threshold: Threshold,
    /// Occurrences in this run.
    pub samples: usize,
    /// Occurrences at least as long as the filter.
    pub kept: usize,
    /// ILS(p, l, end).
    pub ils_end: f64,
    /// ILS(p, l, t) for t = 1, 2, … (the paper's figures).
    pub ils: Vec<f64>,
}

/// The result for one processor (one rank, on the CPUs listed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessorResult {
    /// MPI rank.
    pub rank: u32,
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// CPUs the rank ran its MPI calls on.
    pub cpus: Vec<u32>,
    /// m(p); `None` when no typical sequence is usable for this processor.
    pub metric: Option<f64>,
    /// Why `metric` is `None`.
    pub note: Option<String>,
    /// Per typical sequence.
    pub sequences: Vec<SequenceResult>,
}

/// Interference metrics of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Detection {
    /// [`DETECTION_VERSION`].
    pub version: u32,
    /// The model's typical sequences.
    pub sequences: Vec<TypicalSequence>,
    /// Per processor, by rank.
    pub processors: Vec<ProcessorResult>,
}

impl Detection {
    /// The result of `rank`.
    pub fn processor(&self, rank: u32) -> Option<&ProcessorResult> {
        self.processors.iter().find(|p| p.rank == rank)
    }

    /// m(rank), if computed.
    pub fn metric(&self, rank: u32) -> Option<f64> {
        self.processor(rank).and_then(|p| p.metric)
    }
}

/// Applies `model` to a run.
pub fn detect(model: &Model, profiles: &Profiles) -> Detection {
    let signals = Signals::build(profiles, &model.sequences);
    let min = model.config.min_sample_ns;
    let mut processors = Vec::new();
    for (p, rank) in profiles.ranks.iter().enumerate() {
        let learned = model.processor(rank.rank);
        let mut sequences = Vec::new();
        for (l, ts) in model.sequences.iter().enumerate() {
            let params = learned.and_then(|m| m.sequences.iter().find(|s| s.id == ts.id));
            let threshold = params.map_or(Threshold { k: 0.0, r: 0.0 }, |s| s.threshold);
            let samples = &signals.samples[l][p];
            let kept = samples.iter().filter(|&&x| x >= min).count();
            let ils = signals.ils(l, p, threshold, min);
            sequences.push(SequenceResult {
                id: ts.id,
                used: params.is_some_and(|s| s.used) && kept > 0,
                weight: 0.0,
                threshold,
                samples: samples.len(),
                kept,
                ils_end: ils.last().copied().unwrap_or(0.0),
                ils,
            });
        }
        let total: usize = sequences
            .iter()
            .zip(&model.sequences)
            .filter(|(s, _)| s.used)
            .map(|(_, ts)| ts.len())
            .sum();
        let mut metric = None;
        let mut note = None;
        if learned.is_none() {
            note = Some(format!("rank {} is not in the model", rank.rank));
        } else if total == 0 {
            note = Some("no typical sequence of the model is usable on this rank".into());
        } else {
            let mut m = 0.0;
            for (s, ts) in sequences.iter_mut().zip(&model.sequences) {
                if s.used {
                    s.weight = ts.len() as f64 / total as f64;
                    m += s.weight * s.ils_end;
                }
            }
            metric = Some(m);
        }
        processors.push(ProcessorResult {
            rank: rank.rank,
            host: rank.host.clone(),
            pid: rank.pid,
            cpus: rank.cpus.clone(),
            metric,
            note,
            sequences,
        });
    }
    Detection {
        version: DETECTION_VERSION,
        sequences: model.sequences.clone(),
        processors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::{
        learn::{LearnConfig, learn},
        profile::Peer,
        typical::tests::profile,
    };

    /// A 4-rank periodic program: (Isend, Irecv, Waitall, Allreduce) with
    /// `compute(rank, iteration)` ns before the Isend.
    fn run(compute: impl Fn(u32, usize) -> u64) -> Profiles {
        let ranks = (0..4)
            .map(|r| {
                let calls: Vec<(&str, Peer, u64)> = (0..64)
                    .flat_map(|i| {
                        [
                            ("MPI_Isend", Peer::Rank(((r + 1) % 4) as i32), compute(r, i)),
                            ("MPI_Irecv", Peer::Rank(((r + 3) % 4) as i32), 0),
                            ("MPI_Waitall", Peer::None, 0),
                            ("MPI_Allreduce", Peer::Op(0x58000003), 0),
                        ]
                    })
                    .collect();
                profile(r, &calls)
            })
            .collect();
        Profiles { version: 1, ranks }
    }

    /// Deterministic ±3 % noise.
    fn noise(r: u32, i: usize) -> u64 {
        let h = (u64::from(r) * 7919 + i as u64 * 104_729) % 61;
        1_000_000 + h * 1000 - 30_000
    }

    /// Learn on clean + continuous hog on rank 2, then: clean 0, hogged
    /// rank positive and largest, continuous > on-off, and the same model
    /// still orders them on a run with twice the computation per step
    /// (a different problem size).
    #[test]
    fn learned_model_orders_clean_on_off_and_continuous() {
        let clean = |scale: u64| run(move |r, i| noise(r, i) * scale);
        let full = |scale: u64| run(move |r, i| noise(r, i) * scale * if r == 2 { 2 } else { 1 });
        let on_off = |scale: u64| {
            run(move |r, i| noise(r, i) * scale * if r == 2 && (i / 8) % 3 == 0 { 2 } else { 1 })
        };
        let model = learn(&clean(1), &full(1), &LearnConfig::default()).expect("learns");
        assert!(!model.sequences.is_empty());
        for scale in [1, 2] {
            let m = |p: &Profiles| detect(&model, p).metric(2).expect("metric");
            let (c, o, f) = (m(&clean(scale)), m(&on_off(scale)), m(&full(scale)));
            assert_eq!(c, 0.0, "clean, scale {scale}");
            assert!(o > 0.0 && f > o, "scale {scale}: on-off {o}, full {f}");
            let d = detect(&model, &full(scale));
            // The other ranks gained nothing from any threshold in learning
            // (insensitive, §4.3): they are not monitored.
            for r in [0, 1, 3] {
                assert_eq!(d.metric(r), None, "rank {r}");
                assert!(d.processor(r).and_then(|p| p.note.as_ref()).is_some());
            }
        }
    }

    /// With the paper's threshold (R = 0) and four processors the hogged
    /// processor is still found: its samples are √3 STDEV above the mean.
    #[test]
    fn paper_thresholds_work_with_four_processors() {
        let clean = run(noise);
        let full = run(|r, i| noise(r, i) * if r == 2 { 2 } else { 1 });
        let model = learn(&clean, &full, &LearnConfig::paper()).expect("learns");
        let d = detect(&model, &full);
        assert_eq!(d.metric(2), Some(1.0));
        assert!(
            model.processors[2]
                .sequences
                .iter()
                .all(|s| s.used && s.threshold.r == 0.0 && s.threshold.k >= 0.5)
        );
        // Other ranks gain nothing from any threshold: dropped (insensitive).
        assert!(model.processors[0].sequences.iter().all(|s| !s.used));
        assert_eq!(d.metric(0), None);
    }
}
