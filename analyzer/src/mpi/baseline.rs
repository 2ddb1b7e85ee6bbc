//! Computation times compared with each rank's own clean behaviour, then
//! with what the other ranks went through at the same moment.
//!
//! Ranks differ by design (rank 0 reads the input, the ends of a line of
//! ranks have one neighbour, a master hands out work): comparing ranks'
//! raw times flags those roles. So each sample (a computation time: a
//! typical sequence's for 002, a computation region's for 004) is first
//! divided by the median of the same rank's samples of the same kind in
//! the clean runs ([`Baseline`]): X ≈ 1 for a rank doing what it always
//! does, whatever its role.
//!
//! A whole run can also be slower (another problem size, a loaded
//! machine): every rank's X rises alike. So X is then divided by the
//! median X of the *other* ranks in the same stretch of time
//! ([`concurrent`]): Y ≈ 1 unless this rank computed slower than both its
//! own habit and its peers at that moment, which is what interference on
//! its processor, a pause or a CPU cap do. (A rank waiting for a slowed
//! one waits inside MPI: its computation times do not grow.)

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// One computation time of a rank.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// What kind of computation (a typical sequence, a region): baselines
    /// are per rank and kind.
    pub key: u32,
    /// When it started (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// How long it took (ns).
    pub value_ns: u64,
}

/// The samples of one run, per rank (any order of ranks).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunSamples {
    /// (rank, its samples in time order).
    pub ranks: Vec<(u32, Vec<Sample>)>,
}

impl RunSamples {
    /// The samples of `rank`.
    pub fn rank(&self, rank: u32) -> Option<&[Sample]> {
        self.ranks
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, s)| s.as_slice())
    }

    /// The samples that started in [from, to).
    pub fn between(&self, from_ns: u64, to_ns: u64) -> RunSamples {
        RunSamples {
            ranks: self
                .ranks
                .iter()
                .map(|(r, s)| {
                    (
                        *r,
                        s.iter()
                            .filter(|x| x.start_ns >= from_ns && x.start_ns < to_ns)
                            .copied()
                            .collect(),
                    )
                })
                .collect(),
        }
    }

    /// The time span of every sample: (first start, last start).
    pub fn span(&self) -> Option<(u64, u64)> {
        let starts = self
            .ranks
            .iter()
            .flat_map(|(_, s)| s.iter().map(|x| x.start_ns));
        let lo = starts.clone().min()?;
        let hi = starts.max()?;
        Some((lo, hi))
    }
}

/// Median of `v` (sorted in place); 0 for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mid = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    let m = *m;
    if v.len() % 2 == 1 {
        m
    } else {
        let lower = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lower + m) / 2.0
    }
}

/// Each rank's typical time per kind of computation, from clean runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// (rank, key) → median time (ns).
    #[serde(with = "pairs")]
    pub median_ns: HashMap<(u32, u32), f64>,
}

/// JSON object keys must be strings: store the map as a list.
mod pairs {
    use std::collections::HashMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        m: &HashMap<(u32, u32), f64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut v: Vec<(u32, u32, f64)> = m.iter().map(|((a, b), x)| (*a, *b, *x)).collect();
        v.sort_by_key(|x| (x.0, x.1));
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<HashMap<(u32, u32), f64>, D::Error> {
        let v: Vec<(u32, u32, f64)> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|(a, b, x)| ((a, b), x)).collect())
    }
}

impl Baseline {
    /// Medians over every sample of `runs`.
    pub fn learn(runs: &[&RunSamples]) -> Self {
        let mut all: HashMap<(u32, u32), Vec<f64>> = HashMap::new();
        for run in runs {
            for (rank, samples) in &run.ranks {
                for s in samples {
                    all.entry((*rank, s.key))
                        .or_default()
                        .push(s.value_ns as f64);
                }
            }
        }
        Self {
            median_ns: all
                .into_iter()
                .map(|(k, mut v)| (k, median(&mut v)))
                .filter(|(_, m)| *m > 0.0)
                .collect(),
        }
    }
}

/// One normalized sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Relative {
    /// Its kind.
    pub key: u32,
    /// When it started (ns).
    pub start_ns: u64,
    /// How long it took (ns).
    pub value_ns: u64,
    /// Its time over the rank's baseline for the kind (X).
    pub own: f64,
    /// `own` over the other ranks' median `own` at that time (Y).
    pub concurrent: f64,
}

impl Relative {
    /// The time beyond what the rank's baseline and its peers at that time
    /// predict (ns; negative when faster).
    pub fn excess_ns(&self) -> f64 {
        let v = self.value_ns as f64;
        if self.concurrent > 0.0 {
            v - v / self.concurrent
        } else {
            0.0
        }
    }
}

/// Time bins: enough samples in each for a median, at most 200.
fn bins(run: &RunSamples) -> (u64, u64, usize) {
    let Some((lo, hi)) = run.span() else {
        return (0, 1, 1);
    };
    let mut counts: Vec<f64> = run.ranks.iter().map(|(_, s)| s.len() as f64).collect();
    let typical = median(&mut counts);
    let n = ((typical / 8.0) as usize).clamp(1, 200);
    (lo, (hi - lo).max(1), n)
}

fn bin_of(t: u64, lo: u64, width: u64, n: usize) -> usize {
    (((t.saturating_sub(lo)) as u128 * n as u128 / width as u128) as usize).min(n - 1)
}

/// Each rank's samples relative to its own baseline (X), and to the other
/// ranks at the same time (Y). Samples of a kind the baseline lacks are
/// left out.
pub fn concurrent(run: &RunSamples, base: &Baseline) -> Vec<(u32, Vec<Relative>)> {
    let (lo, width, n) = bins(run);
    // (rank, [(key, start, value, X)])
    type Own = Vec<(u32, Vec<(u32, u64, u64, f64)>)>;
    let own: Own = run
        .ranks
        .iter()
        .map(|(rank, samples)| {
            (
                *rank,
                samples
                    .iter()
                    .filter_map(|s| {
                        let b = base.median_ns.get(&(*rank, s.key))?;
                        Some((s.key, s.start_ns, s.value_ns, s.value_ns as f64 / b))
                    })
                    .collect(),
            )
        })
        .collect();
    // Per rank and bin, the median X; empty bins take the nearest earlier
    // one (else the nearest later one).
    let per_bin: Vec<Vec<Option<f64>>> = own
        .iter()
        .map(|(_, xs)| {
            let mut bins: Vec<Vec<f64>> = vec![Vec::new(); n];
            for (_, t, _, x) in xs {
                bins[bin_of(*t, lo, width, n)].push(*x);
            }
            let mut med: Vec<Option<f64>> = bins
                .iter_mut()
                .map(|b| (!b.is_empty()).then(|| median(b)))
                .collect();
            let mut last = None;
            for m in med.iter_mut() {
                match m {
                    Some(v) => last = Some(*v),
                    None => *m = last,
                }
            }
            let mut next = None;
            for m in med.iter_mut().rev() {
                match m {
                    Some(v) => next = Some(*v),
                    None => *m = next,
                }
            }
            med
        })
        .collect();
    own.iter()
        .enumerate()
        .map(|(i, (rank, xs))| {
            // The other ranks' medians per bin, once.
            let others: Vec<f64> = (0..n)
                .map(|b| {
                    let mut v: Vec<f64> = per_bin
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .filter_map(|(_, m)| m[b])
                        .collect();
                    if v.is_empty() { 1.0 } else { median(&mut v) }
                })
                .collect();
            let rel = xs
                .iter()
                .map(|(key, t, value, x)| {
                    let g = others[bin_of(*t, lo, width, n)];
                    Relative {
                        key: *key,
                        start_ns: *t,
                        value_ns: *value,
                        own: *x,
                        concurrent: if g > 0.0 { x / g } else { *x },
                    }
                })
                .collect();
            (*rank, rel)
        })
        .collect()
}

/// The median of every rank's own (X) values: how much slower the run as a
/// whole computed than the baseline.
pub fn overall(rel: &[(u32, Vec<Relative>)]) -> Option<f64> {
    let mut per_rank: Vec<f64> = rel
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(_, v)| {
            let mut x: Vec<f64> = v.iter().map(|r| r.own).collect();
            median(&mut x)
        })
        .collect();
    (!per_rank.is_empty()).then(|| median(&mut per_rank))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (key, start, value) samples of one rank.
    type Raw<'a> = &'a [(u32, u64, u64)];

    fn run(ranks: &[(u32, Raw<'_>)]) -> RunSamples {
        RunSamples {
            ranks: ranks
                .iter()
                .map(|(r, s)| {
                    (
                        *r,
                        s.iter()
                            .map(|&(key, start_ns, value_ns)| Sample {
                                key,
                                start_ns,
                                value_ns,
                            })
                            .collect(),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    /// Rank 0 computes 1 ms per sample, rank 1 (another role) 3 ms: both
    /// are at X = 1 of their own baselines. A later run twice as slow on
    /// every rank has X = 2 but Y = 1; one where only rank 1 is twice as
    /// slow has Y = 2 for it and 0.5 for rank 0.
    #[test]
    fn own_baseline_then_the_others_at_the_same_time() {
        let samples = |a: u64, b: u64| -> RunSamples {
            let r0: Vec<(u32, u64, u64)> = (0..40).map(|i| (0, i * 10_000_000, a)).collect();
            let r1: Vec<(u32, u64, u64)> = (0..40).map(|i| (0, i * 10_000_000, b)).collect();
            run(&[(0, &r0), (1, &r1)])
        };
        let clean = samples(1_000_000, 3_000_000);
        let base = Baseline::learn(&[&clean]);
        assert_eq!(base.median_ns[&(1, 0)], 3_000_000.0);
        let all_slow = concurrent(&samples(2_000_000, 6_000_000), &base);
        for (_, rel) in &all_slow {
            assert!(rel.iter().all(|r| r.own == 2.0 && r.concurrent == 1.0));
        }
        assert_eq!(overall(&all_slow), Some(2.0));
        let one_slow = concurrent(&samples(1_000_000, 6_000_000), &base);
        assert!(one_slow[1].1.iter().all(|r| r.concurrent == 2.0));
        assert!(one_slow[0].1.iter().all(|r| r.concurrent == 0.5));
        // A kind the baseline never saw is left out.
        let other = run(&[(0, &[(9, 0, 5)])]);
        assert!(concurrent(&other, &base)[0].1.is_empty());
        // Baselines round-trip through JSON.
        let json = serde_json::to_string(&base).expect("json");
        assert_eq!(serde_json::from_str::<Baseline>(&json).expect("back"), base);
    }
}
