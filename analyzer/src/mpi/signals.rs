//! The preprocessing and detection signals of 002 §4.1–4.2.
//!
//! * S(p, l, t): computation time of the t-th occurrence of typical sequence
//!   l on processor p: the sum of the computation entries of the calls in
//!   that occurrence.
//! * AVG(l, t), STDEV(l, t) (eq. 1): mean and population standard
//!   deviation of S over the processors at sample index t. When processors
//!   have different numbers of occurrences, index t averages over those that
//!   have a t-th one.
//! * T(p, l, t) = AVG(l, t) + K(p, l)·STDEV(l, t) (eq. 2), extended by a
//!   relative margin R(p, l)·AVG(l, t): with P processors a sample's
//!   distance to the mean is at most √(P−1) standard deviations, so with the
//!   two processors of a dual-core node the paper's threshold cannot tell a
//!   hogged processor from noise (each sample is exactly ±1 STDEV from the
//!   mean). R = 0 is the paper's threshold.
//! * I(p, l, t) = [S > T] (eq. 3); samples shorter than the filter (0.5 ms)
//!   are skipped; ILS(p, l, t) is the running mean of the kept indicators.

use serde::{Deserialize, Serialize};

use super::{
    profile::Profiles,
    typical::{FunctionSeqs, TypicalSequence, find_occurrences},
};

/// The threshold parameters of one processor and typical sequence.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    /// K(p, l): standard deviations above the mean.
    pub k: f64,
    /// R(p, l): fraction of the mean added on top (0 in the paper).
    pub r: f64,
}

impl Threshold {
    /// T for one sample index.
    #[inline]
    pub fn at(&self, avg: f64, stdev: f64) -> f64 {
        avg + self.k * stdev + self.r * avg
    }
}

/// S, AVG and STDEV of every typical sequence for one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Signals {
    /// Ranks, in the order of the `samples` rows.
    pub ranks: Vec<u32>,
    /// The typical sequences, in the order of the `samples` columns.
    pub sequences: Vec<TypicalSequence>,
    /// `samples[l][p][t]` = S(p, l, t) in ns.
    pub samples: Vec<Vec<Vec<u64>>>,
    /// `starts[l][p][t]`: entry time (CLOCK_MONOTONIC ns) of the occurrence.
    pub starts: Vec<Vec<Vec<u64>>>,
    /// `avg[l][t]` = AVG(l, t) in ns.
    pub avg: Vec<Vec<f64>>,
    /// `stdev[l][t]` = STDEV(l, t) in ns.
    pub stdev: Vec<Vec<f64>>,
}

impl Signals {
    /// Builds the signals of `sequences` over `profiles` (a sequence whose
    /// functions a rank never calls gives that rank no samples).
    pub fn build(profiles: &Profiles, sequences: &[TypicalSequence]) -> Self {
        let seqs = FunctionSeqs::of(profiles);
        let mut samples = Vec::with_capacity(sequences.len());
        let mut starts = Vec::with_capacity(sequences.len());
        let mut avg = Vec::with_capacity(sequences.len());
        let mut stdev = Vec::with_capacity(sequences.len());
        for ts in sequences {
            let pattern = seqs.encode(&ts.functions);
            let mut per_rank = Vec::with_capacity(profiles.ranks.len());
            let mut start_rank = Vec::with_capacity(profiles.ranks.len());
            for (rank, seq) in profiles.ranks.iter().zip(&seqs.seqs) {
                let occ = pattern
                    .as_ref()
                    .map(|p| find_occurrences(seq, p))
                    .unwrap_or_default();
                let len = ts.len();
                per_rank.push(
                    occ.iter()
                        .map(|&i| rank.calls[i..i + len].iter().map(|c| c.compute_ns).sum())
                        .collect::<Vec<u64>>(),
                );
                start_rank.push(occ.iter().map(|&i| rank.calls[i].start_ns).collect());
            }
            let (a, s) = mean_stdev(&per_rank);
            samples.push(per_rank);
            starts.push(start_rank);
            avg.push(a);
            stdev.push(s);
        }
        Self {
            ranks: profiles.ranks.iter().map(|r| r.rank).collect(),
            sequences: sequences.to_vec(),
            samples,
            starts,
            avg,
            stdev,
        }
    }

    /// Row of `rank` in `samples`.
    pub fn rank_index(&self, rank: u32) -> Option<usize> {
        self.ranks.iter().position(|r| *r == rank)
    }

    /// ILS(p, l, t) for every sample index t of processor row `p` (eq. 3 and
    /// the running mean of §4.2): filtered samples repeat the previous value.
    pub fn ils(&self, l: usize, p: usize, th: Threshold, min_sample_ns: u64) -> Vec<f64> {
        let s = &self.samples[l][p];
        let mut out = Vec::with_capacity(s.len());
        let (mut above, mut kept) = (0u64, 0u64);
        for (t, &x) in s.iter().enumerate() {
            if x >= min_sample_ns {
                kept += 1;
                if x as f64 > th.at(self.avg[l][t], self.stdev[l][t]) {
                    above += 1;
                }
            }
            out.push(if kept == 0 {
                0.0
            } else {
                above as f64 / kept as f64
            });
        }
        out
    }

    /// ILS(p, l, end) without building the series.
    pub fn ils_end(&self, l: usize, p: usize, th: Threshold, min_sample_ns: u64) -> f64 {
        let s = &self.samples[l][p];
        let (mut above, mut kept) = (0u64, 0u64);
        for (t, &x) in s.iter().enumerate() {
            if x >= min_sample_ns {
                kept += 1;
                above += u64::from(x as f64 > th.at(self.avg[l][t], self.stdev[l][t]));
            }
        }
        if kept == 0 {
            0.0
        } else {
            above as f64 / kept as f64
        }
    }
}

/// Eq. 1 per sample index over the processors that have that sample.
fn mean_stdev(per_rank: &[Vec<u64>]) -> (Vec<f64>, Vec<f64>) {
    let n = per_rank.iter().map(Vec::len).max().unwrap_or(0);
    let mut avg = vec![0.0; n];
    let mut stdev = vec![0.0; n];
    for t in 0..n {
        let (mut sum, mut count) = (0.0, 0usize);
        for s in per_rank {
            if let Some(&x) = s.get(t) {
                sum += x as f64;
                count += 1;
            }
        }
        let mean = sum / count.max(1) as f64;
        let var = per_rank
            .iter()
            .filter_map(|s| s.get(t))
            .map(|&x| (x as f64 - mean).powi(2))
            .sum::<f64>()
            / count.max(1) as f64;
        avg[t] = mean;
        stdev[t] = var.sqrt();
    }
    (avg, stdev)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::{
        profile::Peer,
        typical::{TypicalConfig, tests::profile, typical_sequences},
    };

    fn paper() -> Threshold {
        Threshold { k: 0.0, r: 0.0 }
    }

    #[test]
    fn eq1_mean_and_population_stdev() {
        let (a, s) = mean_stdev(&[vec![2, 10], vec![4], vec![6, 20]]);
        assert_eq!(a, vec![4.0, 15.0]);
        assert!((s[0] - (8.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(s[1], 5.0);
    }

    /// Four processors, one slower on every occurrence: its ILS is 1 with
    /// K = 1 (it is √3 STDEV above the mean), the others' 0; samples under
    /// the filter do not count.
    #[test]
    fn ils_counts_samples_above_the_threshold() {
        let body = |compute: u64| -> Vec<(&'static str, Peer, u64)> {
            (0..8)
                .flat_map(|_| {
                    [
                        ("MPI_Isend", Peer::Rank(1), compute),
                        ("MPI_Waitall", Peer::None, 0),
                    ]
                })
                .collect()
        };
        let ranks = vec![
            profile(0, &body(1_000_000)),
            profile(1, &body(1_000_000)),
            profile(2, &body(1_000_000)),
            profile(3, &body(3_000_000)),
        ];
        let profiles = Profiles { version: 1, ranks };
        let ts = typical_sequences(&profiles, &TypicalConfig::default());
        let sig = Signals::build(&profiles, &ts);
        let k1 = Threshold { k: 1.0, r: 0.0 };
        for l in 0..ts.len() {
            assert_eq!(sig.ils_end(l, 3, k1, 500_000), 1.0);
            for p in 0..3 {
                assert_eq!(sig.ils_end(l, p, k1, 500_000), 0.0);
            }
            // √3 ≈ 1.73 STDEV: K = 2 is never reached.
            assert_eq!(
                sig.ils_end(l, 3, Threshold { k: 2.0, r: 0.0 }, 500_000),
                0.0
            );
            // A filter above every sample leaves nothing: ILS stays 0.
            assert_eq!(sig.ils_end(l, 3, k1, u64::MAX), 0.0);
            let series = sig.ils(l, 3, paper(), 0);
            assert_eq!(series.len(), sig.samples[l][3].len());
            assert!(series.iter().all(|v| *v == 1.0));
        }
    }

    /// With two processors each sample is exactly one STDEV from the mean,
    /// so K alone cannot separate them; the relative margin can.
    #[test]
    fn two_processors_need_the_relative_margin() {
        let alternating = |slow_first: bool| -> Vec<(&'static str, Peer, u64)> {
            (0..16)
                .flat_map(|i| {
                    let slow = (i % 2 == 0) == slow_first;
                    [
                        (
                            "MPI_Send",
                            Peer::Rank(1),
                            if slow { 1_050_000 } else { 1_000_000 },
                        ),
                        ("MPI_Recv", Peer::Rank(1), 0),
                    ]
                })
                .collect()
        };
        let ranks = vec![
            profile(0, &alternating(true)),
            profile(1, &alternating(false)),
        ];
        let profiles = Profiles { version: 1, ranks };
        let one = vec![TypicalSequence {
            id: 1,
            functions: vec!["MPI_Send".into(), "MPI_Recv".into()],
        }];
        let sig = Signals::build(&profiles, &one);
        // 5 % noise: the paper's K = 0 flags half the samples of a clean run.
        assert_eq!(sig.ils_end(0, 0, paper(), 0), 0.5);
        assert_eq!(sig.ils_end(0, 0, Threshold { k: 0.9, r: 0.0 }, 0), 0.5);
        assert_eq!(sig.ils_end(0, 0, Threshold { k: 1.0, r: 0.0 }, 0), 0.0);
        // A 10 % margin ignores the noise.
        assert_eq!(sig.ils_end(0, 0, Threshold { k: 0.0, r: 0.1 }, 0), 0.0);
    }
}
