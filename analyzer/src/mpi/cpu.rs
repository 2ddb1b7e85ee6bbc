//! The CPU a rank received, against its own clean habit and its peers at
//! the same moment: what a CPU hog, a pause or a CPU cap take from a rank,
//! whatever its split between computation and communication.
//!
//! Paper 002 reads interference from computation times only. But MPI ranks
//! busy-poll inside MPI calls, so when the computation between calls is
//! short a hog takes its CPU mostly while the rank polls: the computation
//! times barely move and the waits of every rank grow alike (issue 17). The
//! kernel says it directly: the recorder reads each process's CPU times
//! every flush interval (`tracer_common::record::CpuTimes`). Per interval,
//! a rank's share of the wall time on a CPU, over its own clean median
//! share and over the other ranks' at the same time
//! ([`super::baseline::concurrent`]), is 1 when it got what it usually gets;
//! its deficit, max(0, 1 − that), is the share of its usual CPU it lacked.
//! (A rank waiting for a slowed one keeps polling: its share does not
//! drop.)
//!
//! A stopped rank lacks all of its CPU; while it is stopped the others'
//! shares move for reasons of the machine and the program, not of their
//! own (issue 17: on a loaded machine a peer of a paused rank lacked
//! 0.3-0.6 of its CPU in the same seconds, and was named beside it).
//! [`excuse_stopped`] leaves those intervals out of the peers' deficits.
//!
//! A fault that comes and goes (a hog on for 0.4 s, off for 0.4 s) halves
//! the mean deficit, into the range a clean run's level reaches on a
//! loaded machine; per reading it lacks as much as a steady one.
//! [`share_short`] counts the readings over a bound learned from clean
//! readings ([`reading_bound`]), so that how often a rank was short of
//! CPU is judged, not only how short it was on average.

use std::collections::BTreeMap;

use super::{
    baseline::{Baseline, Relative, RunSamples, Sample, concurrent},
    profile::Profiles,
};

/// Shares are stored in samples as parts per million.
const PPM: f64 = 1e6;

/// Each rank's CPU share per recorder interval: a sample per interval,
/// key 0, value = share of the interval's wall time on a CPU (ppm), start
/// = the interval's start. Only intervals between the return of the
/// rank's first MPI call and the entry of its last (or the end, when it
/// is still inside one) count: start-up (MPI_Init waits for the launcher)
/// and the tail differ between ranks by nature. Intervals in which a
/// thread came or went are left out (its times come and go with it).
/// Ranks without readings have no samples.
pub fn samples(profiles: &Profiles) -> RunSamples {
    RunSamples {
        ranks: profiles
            .ranks
            .iter()
            .filter(|r| r.cpu.len() >= 2)
            .map(|r| {
                let from = r.calls.first().map_or(0, |c| c.start_ns + c.comm_ns);
                let to = match (&r.open, r.calls.last()) {
                    (Some(_), _) => u64::MAX,
                    (None, Some(c)) if r.calls.len() >= 2 => c.start_ns,
                    _ => u64::MAX,
                };
                let s = r
                    .cpu
                    .windows(2)
                    .filter_map(|w| {
                        let wall = w[1].ts_ns.checked_sub(w[0].ts_ns)?;
                        // Intervals under 20 ms are too short to share.
                        if wall < 20_000_000
                            || w[0].ts_ns < from
                            || w[1].ts_ns > to
                            || w[0].threads != w[1].threads
                            || w[1].run_ns < w[0].run_ns
                        {
                            return None;
                        }
                        let run = (w[1].run_ns - w[0].run_ns) as f64;
                        Some(Sample {
                            key: 0,
                            start_ns: w[0].ts_ns,
                            value_ns: ((run / wall as f64).min(4.0) * PPM) as u64,
                        })
                    })
                    .collect();
                (r.rank, s)
            })
            .collect(),
    }
}

/// Whether the profiles have CPU readings at all.
pub fn recorded(profiles: &Profiles) -> bool {
    profiles.ranks.iter().any(|r| r.cpu.len() >= 2)
}

/// Each rank's deficits: (rank, [(interval start, max(0, 1 − Y))]).
pub type Deficits = Vec<(u32, Vec<(u64, f64)>)>;

/// Each rank's deficits: (interval start, max(0, 1 − Y)).
pub fn deficits(run: &RunSamples, base: &Baseline) -> Deficits {
    concurrent(run, base)
        .into_iter()
        .map(|(rank, rel)| {
            (
                rank,
                rel.iter()
                    .map(|r: &Relative| (r.start_ns, (1.0 - r.concurrent).max(0.0)))
                    .collect(),
            )
        })
        .collect()
}

/// A rank lacking at least this share of its usual CPU in an interval is
/// taken as stopped there (a `SIGSTOP`, a job-control stop, a debugger):
/// it lacks all of it but for the interval's edges.
pub const STOPPED_DEFICIT: f64 = 0.9;

/// `d` without each rank's intervals that overlap a stretch in which
/// another rank was stopped ([`STOPPED_DEFICIT`]), widened by one of that
/// rank's intervals on either side (a stop starts and ends inside an
/// interval) and by `widen_ns` more on either side: the phase the verdict
/// judges by, since the peers of a stopped rank catch up (or wait) for a
/// while after it resumes (issue 17: peers of a paused master-worker rank
/// lacked 0.34 of their CPU just after the excused stretch). A rank
/// stopped at the same time keeps its own intervals, so two ranks stopped
/// together are both still seen.
pub fn excuse_stopped(d: &[(u32, Vec<(u64, f64)>)], widen_ns: u64) -> Vec<(u32, Vec<(u64, f64)>)> {
    // Each rank's typical interval length, from its interval starts.
    let spacing = |v: &[(u64, f64)]| -> u64 {
        let mut gaps: Vec<f64> = v
            .windows(2)
            .map(|w| w[1].0.saturating_sub(w[0].0) as f64)
            .collect();
        super::baseline::median(&mut gaps) as u64
    };
    // (rank, [from, to)) of every stopped stretch, widened.
    let mut stops: Vec<(u32, u64, u64)> = Vec::new();
    for (rank, v) in d {
        let sp = spacing(v);
        let mut i = 0;
        while i < v.len() {
            if v[i].1 < STOPPED_DEFICIT {
                i += 1;
                continue;
            }
            let first = v[i].0;
            while i + 1 < v.len() && v[i + 1].1 >= STOPPED_DEFICIT {
                i += 1;
            }
            stops.push((
                *rank,
                first.saturating_sub(sp + widen_ns),
                v[i].0 + 2 * sp + widen_ns,
            ));
            i += 1;
        }
    }
    d.iter()
        .map(|(rank, v)| {
            let sp = spacing(v);
            let kept = v
                .iter()
                .filter(|(t, x)| {
                    *x >= STOPPED_DEFICIT
                        || !stops
                            .iter()
                            .any(|(q, from, to)| q != rank && t + sp > *from && t < to)
                })
                .copied()
                .collect();
            (*rank, kept)
        })
        .collect()
}

/// Each rank's worst phase of deficits against `base` ([`worst_phase`]),
/// with the intervals in which another rank was stopped, and a phase on
/// either side, left out ([`excuse_stopped`]): what the outlier verdict
/// judges.
pub fn worst_phases(run: &RunSamples, base: &Baseline, phase_ns: u64) -> BTreeMap<u32, (f64, u64)> {
    worst_phase(&excuse_stopped(&deficits(run, base), phase_ns), phase_ns)
}

/// The mean deficit of each rank over the run: the share of its usual CPU
/// it lacked.
pub fn mean_deficit(d: &[(u32, Vec<(u64, f64)>)]) -> BTreeMap<u32, f64> {
    d.iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(r, v)| (*r, v.iter().map(|x| x.1).sum::<f64>() / v.len() as f64))
        .collect()
}

/// The lowest per-reading deficit that counts as a reading short of CPU
/// ([`reading_bound`]): a quarter of a rank's usual CPU. A hog sharing
/// the rank's core takes about half of it while it runs; clean runs on a
/// loaded machine shift a rank's level by up to about 0.2 for a whole run
/// (`cargo xtask mpi-matrix`, issue 17).
pub const MIN_READING_DEFICIT: f64 = 0.25;

/// Quantile of the clean readings' deficits that bounds a clean reading.
pub const READING_QUANTILE: f64 = 0.9;

/// The deficit above which one reading (one recorder interval) of a rank
/// is short of CPU: the [`READING_QUANTILE`] of its held-out clean
/// readings, at least [`MIN_READING_DEFICIT`]. Without readings: the
/// floor.
pub fn reading_bound(clean: &[f64]) -> f64 {
    let mut v: Vec<f64> = clean.iter().copied().filter(|x| x.is_finite()).collect();
    // Nearest rank, as peer comparison's calibration takes it; 0 for none.
    crate::peers::quantile(&mut v, READING_QUANTILE).max(MIN_READING_DEFICIT)
}

/// The fewest short readings that judge a rank: one reading short is a
/// blip that clean runs show too (often the first after start-up), and in
/// a run of three readings it is already a third of them.
pub const MIN_SHORT_READINGS: usize = 2;

/// Each rank's readings whose deficit is above its bound (`bounds`,
/// [`reading_bound`]; ranks without one are left out): (their share of the
/// rank's readings, how many). A fault that comes and goes (a hog on for
/// 0.4 s, off for 0.4 s) lacks as much as a steady one while it is on,
/// but only half of it on average, which the mean deficit cannot tell
/// from a clean run's level.
pub fn share_short(
    d: &[(u32, Vec<(u64, f64)>)],
    bounds: &BTreeMap<u32, f64>,
) -> BTreeMap<u32, (f64, usize)> {
    d.iter()
        .filter(|(_, v)| !v.is_empty())
        .filter_map(|(r, v)| {
            let b = bounds.get(r)?;
            let n = v.iter().filter(|x| x.1 > *b).count();
            Some((*r, (n as f64 / v.len() as f64, n)))
        })
        .collect()
}

/// The worst phase of each rank: the largest mean deficit over `phase_ns`
/// of consecutive intervals, with the phase's start.
pub fn worst_phase(d: &[(u32, Vec<(u64, f64)>)], phase_ns: u64) -> BTreeMap<u32, (f64, u64)> {
    d.iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(r, v)| {
            let mut best = (0.0, v[0].0);
            let mut lo = 0;
            let mut sum = 0.0;
            for hi in 0..v.len() {
                sum += v[hi].1;
                while v[hi].0 - v[lo].0 >= phase_ns {
                    sum -= v[lo].1;
                    lo += 1;
                }
                let mean = sum / (hi - lo + 1) as f64;
                // Count a phase only once it spans what it should (or the
                // whole run is shorter).
                let full = v[hi].0 - v[lo].0 + phase_ns / 4 >= phase_ns * 3 / 4
                    || v[v.len() - 1].0 - v[0].0 < phase_ns;
                if full && mean > best.0 {
                    best = (mean, v[lo].0);
                }
            }
            (*r, best)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::{CpuReading, typical::tests::profile as rank_profile};

    /// Ranks reading `share(rank, interval)` of each 100 ms interval.
    fn run(share: impl Fn(u32, u64) -> f64) -> Profiles {
        let ranks = (0..4)
            .map(|r| {
                let mut p = rank_profile(r, &[]);
                let mut run_ns = 0.0;
                p.cpu = (0..40u64)
                    .map(|i| {
                        let c = CpuReading {
                            ts_ns: i * 100_000_000,
                            run_ns: run_ns as u64,
                            wait_ns: 0,
                            threads: 1,
                        };
                        run_ns += share(r, i) * 1e8;
                        c
                    })
                    .collect();
                p
            })
            .collect();
        Profiles { version: 2, ranks }
    }

    /// Four oversubscribed ranks get half a CPU each. Rank 2 stopped for a
    /// second (the others get more then), or capped to a quarter: its
    /// deficit shows, and only its.
    #[test]
    fn a_paused_or_capped_rank_lacks_cpu() {
        let clean = run(|_, _| 0.5);
        let base = Baseline::learn(&[&samples(&clean)]);
        let paused = run(|r, i| match (r, (10..20).contains(&i)) {
            (2, true) => 0.0,
            (_, true) => 0.66,
            _ => 0.5,
        });
        let d = deficits(&samples(&paused), &base);
        let worst = worst_phase(&d, 300_000_000);
        assert!((worst[&2].0 - 1.0).abs() < 1e-9, "{worst:?}");
        assert_eq!(worst[&2].1, 1_000_000_000);
        for r in [0, 1, 3] {
            assert_eq!(worst[&r].0, 0.0);
        }
        let capped = run(|r, _| if r == 2 { 0.25 } else { 0.55 });
        let m = mean_deficit(&deficits(&samples(&capped), &base));
        assert!((m[&2] - (1.0 - 0.5 / 1.1)).abs() < 0.01, "{m:?}");
        assert_eq!(m[&0], 0.0);
        assert!(recorded(&clean));
    }

    /// Rank 1 gets a quarter core instead of half for 0.4 s of every
    /// 0.8 s (an on-off hog): its mean deficit (0.25) is what a clean run
    /// on a loaded machine can show as a level (rank 3 lacks 0.2 all run
    /// long), but half of its readings are short of CPU and none of rank
    /// 3's are.
    #[test]
    fn a_fault_that_comes_and_goes_shows_in_the_share_of_short_readings() {
        let clean = run(|_, _| 0.5);
        let base = Baseline::learn(&[&samples(&clean)]);
        let on_off = run(|r, i| match r {
            1 if (i / 4) % 2 == 0 => 0.25,
            3 => 0.4,
            _ => 0.5,
        });
        let d = deficits(&samples(&on_off), &base);
        let mean = mean_deficit(&d);
        assert!(mean[&1] < 0.3 && mean[&3] > 0.15, "{mean:?}");
        // Clean readings lack nothing: the bound is the floor.
        let clean_d = deficits(&samples(&clean), &base);
        let b = reading_bound(
            &clean_d
                .iter()
                .flat_map(|(_, v)| v.iter().map(|x| x.1))
                .collect::<Vec<_>>(),
        );
        assert_eq!(b, MIN_READING_DEFICIT);
        let bounds: BTreeMap<u32, f64> = (0..4).map(|r| (r, b)).collect();
        let short = share_short(&d, &bounds);
        assert!((short[&1].0 - 0.5).abs() < 0.06, "{short:?}");
        assert!(short[&1].1 >= 18, "{short:?}");
        for r in [0, 2, 3] {
            assert_eq!(short[&r], (0.0, 0), "{short:?}");
        }
        // A rank whose clean readings often lacked 0.4 gets that bound.
        let noisy: Vec<f64> = (0..20)
            .map(|i| if i % 4 == 0 { 0.4 } else { 0.0 })
            .collect();
        assert!((reading_bound(&noisy) - 0.4).abs() < 1e-9);
        assert_eq!(reading_bound(&[]), MIN_READING_DEFICIT);
    }

    /// Rank 2 stopped for a second; meanwhile rank 3 got a quarter core
    /// instead of its usual half (the machine or the program moved CPU
    /// away from it while its peer was stopped). Only rank 2 lacks CPU by
    /// its own doing. Two ranks stopped together are both seen, and a
    /// deficit away from any stop still counts.
    #[test]
    fn a_peer_of_a_stopped_rank_is_not_judged_while_it_is_stopped() {
        let clean = run(|_, _| 0.5);
        let base = Baseline::learn(&[&samples(&clean)]);
        // Rank 3 also lacks CPU for the 0.3 s after rank 2 resumes.
        let paused = run(|r, i| match (r, i) {
            (2, 10..20) => 0.0,
            (3, 10..23) => 0.25,
            (_, 10..20) => 0.66,
            _ => 0.5,
        });
        let worst = worst_phases(&samples(&paused), &base, 300_000_000);
        assert!((worst[&2].0 - 1.0).abs() < 1e-9, "{worst:?}");
        assert!(worst.get(&3).is_none_or(|w| w.0 < 0.1), "{worst:?}");
        // Without leaving the stop out, rank 3 lacked over half its CPU.
        let raw = worst_phase(&deficits(&samples(&paused), &base), 300_000_000);
        assert!(raw[&3].0 > 0.5, "{raw:?}");
        // Widened by an interval only, the 0.3 s after the stop still
        // count against rank 3.
        let narrow = worst_phase(
            &excuse_stopped(&deficits(&samples(&paused), &base), 0),
            300_000_000,
        );
        assert!(narrow[&3].0 > 0.3, "{narrow:?}");

        let both = run(|r, i| match (r, (10..20).contains(&i)) {
            (1 | 2, true) => 0.0,
            _ => 0.5,
        });
        let worst = worst_phases(&samples(&both), &base, 300_000_000);
        for r in [1, 2] {
            assert!((worst[&r].0 - 1.0).abs() < 1e-9, "{worst:?}");
        }

        let later = run(|r, i| match (r, i) {
            (2, 10..20) => 0.0,
            (3, 30..36) => 0.25,
            (_, 10..20) => 0.66,
            _ => 0.5,
        });
        let worst = worst_phases(&samples(&later), &base, 300_000_000);
        assert!(worst[&3].0 > 0.4, "{worst:?}");
    }
}
