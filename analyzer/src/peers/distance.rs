//! Distances between feature vectors (Kasick et al. §5.1) and a server's
//! score in a window: its median distance to the other servers.

use super::types::Distance;

/// What a zero component counts as in the symmetric KL divergence, in metric
/// units: `p log(p/q)` is infinite when `q` is 0, and a function that runs on
/// one server only is exactly what must stay visible, so zeros are smoothed
/// to half a unit (half a sample, call, ms, byte) instead of skipped.
pub const KL_EPSILON: f64 = 0.5;

/// The contribution of one component pair to the distance: summed over the
/// components it gives the distance, and against the median server it ranks
/// functions for root-cause analysis (§5.2).
#[inline]
pub fn term(measure: Distance, p: f64, q: f64) -> f64 {
    if p == q {
        return 0.0;
    }
    match measure {
        Distance::Manhattan => (p - q).abs(),
        Distance::Relative => (p - q).abs() / p.max(q),
        Distance::RelativeScaled => (p - q) * (p - q) / p.max(q),
        Distance::SymmetricKl => {
            let (p, q) = (
                if p > 0.0 { p } else { KL_EPSILON },
                if q > 0.0 { q } else { KL_EPSILON },
            );
            // ½ (p log(p/q) + q log(q/p)) = ½ (p − q) log(p/q), never negative.
            0.5 * (p - q) * (p / q).ln()
        }
    }
}

/// d(p, q) = Σᵢ term(pᵢ, qᵢ); the vectors have the same components.
pub fn distance(measure: Distance, p: &[f64], q: &[f64]) -> f64 {
    p.iter().zip(q).map(|(a, b)| term(measure, *a, *b)).sum()
}

/// The median of `values` (the mean of the two middle ones for an even
/// count; 0 for none). Reorders `values`.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Each server's score in one window: the median of its distances to every
/// other server. `vectors[s]` is server `s`'s feature vector.
pub fn scores(measure: Distance, vectors: &[Vec<f64>]) -> Vec<f64> {
    let n = vectors.len();
    let mut d = vec![0.0; n * n];
    for i in 0..n {
        for j in i + 1..n {
            let x = distance(measure, &vectors[i], &vectors[j]);
            d[i * n + j] = x;
            d[j * n + i] = x;
        }
    }
    let mut row = Vec::with_capacity(n.saturating_sub(1));
    (0..n)
        .map(|i| {
            row.clear();
            row.extend((0..n).filter(|j| *j != i).map(|j| d[i * n + j]));
            median(&mut row)
        })
        .collect()
}

/// The component-wise median of the servers' vectors: the "median node"
/// root-cause analysis compares a faulty server with.
pub fn median_vector(vectors: &[Vec<f64>]) -> Vec<f64> {
    let dims = vectors.first().map_or(0, Vec::len);
    let mut column = Vec::with_capacity(vectors.len());
    (0..dims)
        .map(|c| {
            column.clear();
            column.extend(vectors.iter().map(|v| v[c]));
            median(&mut column)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// p = (3, 0, 5), q = (1, 2, 5), by hand:
    /// Manhattan 2 + 2 + 0 = 4; relative 2/3 + 2/2 = 5/3;
    /// relative-scaled 4/3 + 4/2 = 10/3.
    #[test]
    fn measures_match_hand_computed_values() {
        let (p, q) = ([3.0, 0.0, 5.0], [1.0, 2.0, 5.0]);
        assert!(close(distance(Distance::Manhattan, &p, &q), 4.0));
        assert!(close(distance(Distance::Relative, &p, &q), 5.0 / 3.0));
        assert!(close(
            distance(Distance::RelativeScaled, &p, &q),
            10.0 / 3.0
        ));
        for m in [
            Distance::Manhattan,
            Distance::Relative,
            Distance::RelativeScaled,
            Distance::SymmetricKl,
        ] {
            assert!(
                close(distance(m, &p, &q), distance(m, &q, &p)),
                "{m:?} symmetric"
            );
            assert_eq!(distance(m, &p, &p), 0.0, "{m:?} of equal vectors");
        }
    }

    /// p = (2, 4), q = (1, 2): ½ (2 ln 2 + 1 ln ½ + 4 ln 2 + 2 ln ½) = 1.5 ln 2.
    /// With a zero, p = (1, 0), q = (1, 4): the 0 counts as 0.5, so
    /// ½ (0.5 ln(0.5/4) + 4 ln(4/0.5)) = ½ · 3.5 · ln 8.
    #[test]
    fn symmetric_kl_matches_hand_computed_values() {
        let d = distance(Distance::SymmetricKl, &[2.0, 4.0], &[1.0, 2.0]);
        assert!(close(d, 1.5 * 2f64.ln()), "{d}");
        let d = distance(Distance::SymmetricKl, &[1.0, 0.0], &[1.0, 4.0]);
        assert!(close(d, 0.5 * 3.5 * 8f64.ln()), "{d}");
        assert!(d.is_finite());
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    /// One-component servers 0, 1, 3, 10. Distances: s0 {1, 3, 10} → 3;
    /// s1 {1, 2, 9} → 2; s2 {3, 2, 7} → 3; s3 {10, 9, 7} → 9.
    #[test]
    fn score_is_the_median_distance_to_the_others() {
        let v = vec![vec![0.0], vec![1.0], vec![3.0], vec![10.0]];
        assert_eq!(scores(Distance::Manhattan, &v), vec![3.0, 2.0, 3.0, 9.0]);
        // An outlier in a symmetric group stands out; the others score 0.
        let v = vec![
            vec![5.0, 1.0],
            vec![5.0, 1.0],
            vec![5.0, 1.0],
            vec![9.0, 1.0],
        ];
        assert_eq!(scores(Distance::Manhattan, &v), vec![0.0, 0.0, 0.0, 4.0]);
    }

    #[test]
    fn median_vector_is_componentwise() {
        let v = vec![vec![1.0, 10.0], vec![2.0, 30.0], vec![9.0, 20.0]];
        assert_eq!(median_vector(&v), vec![2.0, 20.0]);
    }
}
