//! Dissimilarity of two task models (004 §3.1): the sum over the union of
//! their edges of |P1 − P2| plus the L1 norm of the communication-time
//! normals plus that of the computation-time normals; an edge present in
//! only one model costs [`DissimConfig::missing`]. Both models' edges are
//! sorted by key, so matching is one merge pass (O(n + m)) over integer
//! keys, and norms come from the [`OverlapTable`].

use serde::{Deserialize, Serialize};

use super::{
    overlap::OverlapTable,
    smm::{Edge, EdgeKey, Normal},
};

/// How edges are compared.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DissimConfig {
    /// Cost of an edge present in one model only. The largest difference of
    /// a present uncompressed edge is 3 (1 for probability, 2 for one time
    /// norm), so 3 makes a control-flow difference weigh as much as the
    /// most different timing.
    pub missing: f64,
    /// Standard deviations are at least this many ns: a time seen once or
    /// always the same has sd 0, and wake-ups and scheduling make
    /// differences of a few microseconds meaningless (seen on real MPICH
    /// ranks: 4 µs vs 12 µs between MPI_Init and MPI_Comm_rank).
    pub min_sd_ns: f64,
    /// ... and at least this fraction of the mean (a few % jitter is normal).
    pub min_sd_rel: f64,
}

impl Default for DissimConfig {
    fn default() -> Self {
        DissimConfig {
            missing: 3.0,
            min_sd_ns: 10_000.0,
            min_sd_rel: 0.05,
        }
    }
}

impl DissimConfig {
    fn sd(&self, n: &Normal) -> f64 {
        n.sd.max(self.min_sd_ns).max(self.min_sd_rel * n.mean.abs())
    }

    /// L1 norm of two time normals; two empty ones are equal, an empty one
    /// is a point mass at 0.
    pub fn time(&self, table: &OverlapTable, a: &Normal, b: &Normal) -> f64 {
        if a.is_none() && b.is_none() {
            return 0.0;
        }
        table.l1(a.mean, self.sd(a), b.mean, self.sd(b))
    }

    /// Difference of two matching edges. The time terms are weighted by
    /// 1 − 1/n for the fewer observations n of the two: a normal fitted
    /// to one time has no spread to compare (on real MPICH ranks the
    /// one-off MPI_Init, last MPI_Allreduce and MPI_Finalize times differ
    /// between ranks by chance and outranked injected faults), while an
    /// edge seen 40 times keeps 97.5% of its weight. Probabilities and
    /// missing edges are not weighted.
    pub fn edge(&self, table: &OverlapTable, a: &Edge, b: &Edge) -> f64 {
        let n = a.count.min(b.count).max(1) as f64;
        (a.prob - b.prob).abs()
            + (1.0 - 1.0 / n)
                * (self.time(table, &a.comm, &b.comm) + self.time(table, &a.comp, &b.comp))
    }
}

/// A time normal ready for comparison: floored sd and its logarithm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PreparedTime {
    mean: f64,
    sd: f64,
    ln_sd: f64,
    none: bool,
}

/// An edge ready for comparison (see [`prepare`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PreparedEdge {
    /// The edge's key.
    pub key: EdgeKey,
    prob: f64,
    inv_count: f64,
    comm: PreparedTime,
    comp: PreparedTime,
}

/// Precomputes, once per model, what every comparison of its edges needs
/// (floored standard deviations, their logarithms, 1/n), so that
/// [`dissimilarity_prepared`] does no `ln` or floor per pair: the models
/// are compared O(n · sample) times, prepared O(n) times.
pub fn prepare(cfg: &DissimConfig, edges: &[Edge]) -> Vec<PreparedEdge> {
    let time = |n: &Normal| {
        let sd = cfg.sd(n);
        PreparedTime {
            mean: n.mean,
            sd,
            ln_sd: sd.ln(),
            none: n.is_none(),
        }
    };
    edges
        .iter()
        .map(|e| PreparedEdge {
            key: e.key,
            prob: e.prob,
            inv_count: 1.0 / e.count.max(1) as f64,
            comm: time(&e.comm),
            comp: time(&e.comp),
        })
        .collect()
}

#[inline]
fn prepared_time(table: &OverlapTable, a: &PreparedTime, b: &PreparedTime) -> f64 {
    if a.none && b.none {
        return 0.0;
    }
    table.l1_ln(a.mean, a.sd, a.ln_sd, b.mean, b.sd, b.ln_sd)
}

/// [`dissimilarity`] of prepared edge lists (the same value up to the f32
/// rounding of `ln` in the plain path).
pub fn dissimilarity_prepared(
    cfg: &DissimConfig,
    table: &OverlapTable,
    a: &[PreparedEdge],
    b: &[PreparedEdge],
) -> f64 {
    let mut total = 0.0;
    merge_by(
        a,
        b,
        |e| e.key,
        |x, y| {
            total += match (x, y) {
                (Some(x), Some(y)) => {
                    (x.prob - y.prob).abs()
                        + (1.0 - x.inv_count.max(y.inv_count))
                            * (prepared_time(table, &x.comm, &y.comm)
                                + prepared_time(table, &x.comp, &y.comp))
                }
                _ => cfg.missing,
            }
        },
    );
    total
}

/// Dissimilarity of two models' edge lists (both sorted by key).
pub fn dissimilarity(cfg: &DissimConfig, table: &OverlapTable, a: &[Edge], b: &[Edge]) -> f64 {
    let mut total = 0.0;
    merge(a, b, |x, y| {
        total += match (x, y) {
            (Some(x), Some(y)) => cfg.edge(table, x, y),
            _ => cfg.missing,
        }
    });
    total
}

/// Per-edge contributions to the dissimilarity of `a` from `b`, unsorted.
pub fn contributions(
    cfg: &DissimConfig,
    table: &OverlapTable,
    a: &[Edge],
    b: &[Edge],
) -> Vec<(EdgeKey, f64)> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    merge(a, b, |x, y| {
        let (key, d) = match (x, y) {
            (Some(x), Some(y)) => (x.key, cfg.edge(table, x, y)),
            (Some(x), None) => (x.key, cfg.missing),
            (None, Some(y)) => (y.key, cfg.missing),
            (None, None) => return,
        };
        out.push((key, d));
    });
    out
}

/// Calls `f` once per key of the union, with the edge of each side.
fn merge<'a>(a: &'a [Edge], b: &'a [Edge], f: impl FnMut(Option<&'a Edge>, Option<&'a Edge>)) {
    merge_by(a, b, |e| e.key, f)
}

#[inline]
fn merge_by<'a, T>(
    a: &'a [T],
    b: &'a [T],
    key: impl Fn(&T) -> EdgeKey,
    mut f: impl FnMut(Option<&'a T>, Option<&'a T>),
) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (&a[i], &b[j]);
        match key(x).cmp(&key(y)) {
            std::cmp::Ordering::Less => {
                f(Some(x), None);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                f(None, Some(y));
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                f(Some(x), Some(y));
                i += 1;
                j += 1;
            }
        }
    }
    for x in &a[i..] {
        f(Some(x), None);
    }
    for y in &b[j..] {
        f(None, Some(y));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(key: EdgeKey, prob: f64, comp: (f64, f64)) -> Edge {
        Edge {
            key,
            count: 10,
            prob,
            comm: Normal::default(),
            comp: Normal {
                mean: comp.0,
                sd: comp.1,
            },
        }
    }

    #[test]
    fn dissimilarity_sums_probability_time_and_missing_edges() {
        let t = OverlapTable::shared();
        let cfg = DissimConfig::default();
        let a = [edge(1, 1.0, (1e6, 1e5)), edge(2, 0.5, (2e6, 1e5))];
        let b = [
            edge(1, 1.0, (1e6, 1e5)),
            edge(2, 0.25, (2e6, 1e5)),
            edge(3, 1.0, (0.0, 0.0)),
        ];
        assert_eq!(dissimilarity(&cfg, t, &a, &a), 0.0);
        let d = dissimilarity(&cfg, t, &a, &b);
        // Edge 2 differs by 0.25 in probability, edge 3 is missing.
        assert!((d - (0.25 + cfg.missing)).abs() < 1e-9, "{d}");
        assert_eq!(d, dissimilarity(&cfg, t, &b, &a));
        // A slow edge: 10 sd away → nearly 2, weighted 1 − 1/10.
        let slow = [edge(1, 1.0, (2e6, 1e5)), edge(2, 0.5, (2e6, 1e5))];
        let d = dissimilarity(&cfg, t, &a, &slow);
        assert!(d > 0.9 * 1.99 && d <= 0.9 * 2.0 + 1e-9, "{d}");
        // Seen once, times are not compared; twice, at half weight.
        let seen = |e: &Edge, count| Edge { count, ..*e };
        assert_eq!(cfg.edge(t, &seen(&a[0], 1), &seen(&slow[0], 5)), 0.0);
        let d2 = cfg.edge(t, &seen(&a[0], 2), &seen(&slow[0], 5));
        assert!((d2 - 1.0).abs() < 0.01, "{d2}");
        // Prepared edges give the same values.
        for (x, y) in [(&a[..], &b[..]), (&a[..], &slow[..]), (&b[..], &slow[..])] {
            let (px, py) = (prepare(&cfg, x), prepare(&cfg, y));
            let (u, v) = (
                dissimilarity(&cfg, t, x, y),
                dissimilarity_prepared(&cfg, t, &px, &py),
            );
            assert!((u - v).abs() < 1e-5, "{u} {v}");
        }
        let c = contributions(&cfg, t, &a, &b);
        assert_eq!(c.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2, 3]);
    }
}
