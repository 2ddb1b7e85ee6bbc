//! The preprocessing and detection signals of 002 §4.1–4.2, per rank.
//!
//! * S(p, l, t): computation time of the t-th occurrence of rank p's
//!   typical sequence l: the sum of the computation entries of the calls in
//!   that occurrence. Occurrences shorter than the filter (0.5 ms) are
//!   dropped (§4.2).
//! * The threshold. The paper's is T(p, l, t) = AVG(l, t) + K·STDEV(l, t)
//!   over the processors at index t (eq. 2): with two processors every
//!   sample is exactly one STDEV from the mean, and ranks whose work
//!   differs by design (boundary ranks) exceed it in every run (issue 17).
//!   Here each sample is compared with the rank's own clean behaviour and
//!   with the other ranks at the same time ([`super::baseline`]):
//!   Y(p, l, t) = S / B(p, l) / G(p, t), and the indicator (eq. 3) is
//!   I = [Y > max(1 + K·σ(p, l), tail)], σ being the robust spread of Y
//!   in held-out clean runs and the tail the 99% quantile of every rank's
//!   held-out clean Y ([`super::learn::CLEAN_TAIL_QUANTILE`]: slow
//!   stretches of the machine that the robust spread leaves out).
//! * ILS(p, l, t): the running mean of the indicators (§4.2).

use std::collections::BTreeMap;

use super::{
    baseline::{Relative, RunSamples, Sample},
    profile::Profiles,
    typical::{TypicalSequence, find_occurrences},
};

/// Each rank's typical sequences (rank → sequences, `id` = l).
pub type RankSequences = BTreeMap<u32, Vec<TypicalSequence>>;

/// S(p, l, t) of every rank of a run, occurrences of at least
/// `min_sample_ns` only; the sample key is l − 1.
pub fn samples(profiles: &Profiles, sequences: &RankSequences, min_sample_ns: u64) -> RunSamples {
    let mut ranks = Vec::new();
    for r in &profiles.ranks {
        let Some(seqs) = sequences.get(&r.rank) else {
            continue;
        };
        // The rank's calls as indexes into its own function table.
        let ids: Vec<u32> = r.calls.iter().map(|c| u32::from(c.function)).collect();
        let mut out: Vec<Sample> = Vec::new();
        for (l, ts) in seqs.iter().enumerate() {
            let pattern: Option<Vec<u32>> = ts
                .functions
                .iter()
                .map(|f| r.functions.iter().position(|x| x == f).map(|i| i as u32))
                .collect();
            let Some(pattern) = pattern else {
                continue;
            };
            for i in find_occurrences(&ids, &pattern) {
                let s: u64 = r.calls[i..i + pattern.len()]
                    .iter()
                    .map(|c| c.compute_ns)
                    .sum();
                if s >= min_sample_ns {
                    out.push(Sample {
                        key: l as u32,
                        start_ns: r.calls[i].start_ns,
                        value_ns: s,
                    });
                }
            }
        }
        out.sort_by_key(|s| s.start_ns);
        ranks.push((r.rank, out));
    }
    RunSamples { ranks }
}

/// ILS(p, l, t) for t = 1, 2, … of one rank's sequence `l`: the running
/// mean of [Y > `threshold`].
pub fn ils(rel: &[Relative], l: u32, threshold: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let (mut above, mut kept) = (0u64, 0u64);
    for r in rel.iter().filter(|r| r.key == l) {
        kept += 1;
        above += u64::from(r.concurrent > threshold);
        out.push(above as f64 / kept as f64);
    }
    out
}

/// ILS(p, l, end) without the series (0 without samples).
pub fn ils_end(rel: &[Relative], l: u32, threshold: f64) -> f64 {
    let (mut above, mut kept) = (0u64, 0u64);
    for r in rel.iter().filter(|r| r.key == l) {
        kept += 1;
        above += u64::from(r.concurrent > threshold);
    }
    if kept == 0 {
        0.0
    } else {
        above as f64 / kept as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::{
        baseline::{Baseline, concurrent},
        profile::Peer,
        typical::{TypicalConfig, rank_sequences, tests::profile},
    };

    /// Four processors, one slower on every occurrence: its samples are
    /// twice its own baseline and its peers', so every one is above a
    /// threshold of 1.5 and none of the others'; samples under the filter
    /// do not count.
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
        let run = |slow: u64| Profiles {
            version: 2,
            ranks: (0..4)
                .map(|r| profile(r, &body(if r == 3 { slow } else { 1_000_000 })))
                .collect(),
        };
        let clean = run(1_000_000);
        let seqs = rank_sequences(&[&clean], &TypicalConfig::default());
        let base = Baseline::learn(&[&samples(&clean, &seqs, 500_000)]);
        let rel = concurrent(&samples(&run(2_000_000), &seqs, 500_000), &base);
        for (rank, r) in &rel {
            for l in 0..seqs[rank].len() as u32 {
                let want = if *rank == 3 { 1.0 } else { 0.0 };
                assert_eq!(ils_end(r, l, 1.5), want, "rank {rank} l {l}");
                let series = ils(r, l, 1.5);
                assert!(series.iter().all(|v| *v == want));
            }
        }
        // A filter above every sample leaves nothing.
        assert!(
            samples(&run(2_000_000), &seqs, u64::MAX)
                .ranks
                .iter()
                .all(|(_, s)| s.is_empty())
        );
    }
}
