//! The percentile bootstrap over tasks.
//!
//! Each replicate resamples the n per-task values with replacement and takes their mean; the
//! interval is the `(1−level)/2` and `(1+level)/2` order statistics of the replicate means, indexed
//! as the reference indexes them (`int((1−level)/2·draws)` and `int((1+level)/2·draws) − 1`, with
//! the floating error that gives 50 and 1949 at 95% and 2000 draws). Fewer than
//! [`MIN_CI_TASKS`] values give no interval.
//!
//! Draws are ours (ChaCha8), not `CPython`'s: replicate `r` draws from the stream `r` of the seed,
//! so the interval is the same at any thread count. When the values take few distinct values
//! (per-task pass rates of tasks with 4 to 8 rollouts take about 30), a replicate draws the
//! multinomial counts of each distinct value (sequential binomials) instead of n indices: the
//! same distribution of resamples, in time independent of n.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Binomial, Distribution};
use rayon::prelude::*;

/// Fewest values an interval is computed from.
pub const MIN_CI_TASKS: usize = 3;
/// Default number of replicates.
pub const DRAWS: u32 = 2000;
/// Default confidence level.
pub const LEVEL: f64 = 0.95;

/// The generator of replicate `replicate` of stream family `family` (0 for one-sample
/// intervals; other stages take their own family so their draws do not repeat these).
pub(crate) fn rng_at(seed: u64, family: u32, replicate: u32) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream((u64::from(family) << 32) | u64::from(replicate));
    rng
}

/// Distinct values with their counts, in ascending order.
pub(crate) fn categories(values: &[f64]) -> Vec<(f64, u64)> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    categories_of_sorted(&sorted)
}

/// [`categories`] of values already sorted by `f64::total_cmp`.
pub(crate) fn categories_of_sorted(sorted: &[f64]) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = Vec::new();
    for &v in sorted {
        match out.last_mut() {
            Some((last, n)) if last.to_bits() == v.to_bits() => *n += 1,
            _ => out.push((v, 1)),
        }
    }
    out
}

/// The replicate means, sorted ascending.
pub fn replicate_means(values: &[f64], draws: u32, seed: u64) -> Vec<f64> {
    let mut means = replicates(values, draws, seed, 0);
    means.sort_by(f64::total_cmp);
    means
}

/// The replicate means in replicate order, replicate `r` drawn from stream `r` of `family`.
pub(crate) fn replicates(values: &[f64], draws: u32, seed: u64, family: u32) -> Vec<f64> {
    replicates_of(values, &categories(values), draws, seed, family)
}

/// [`replicates`] with the [`categories`] of `values` known.
pub(crate) fn replicates_of(
    values: &[f64],
    cats: &[(f64, u64)],
    draws: u32,
    seed: u64,
    family: u32,
) -> Vec<f64> {
    let n = values.len();
    #[allow(clippy::cast_precision_loss)]
    let nf = n as f64;
    let multinomial = cats.len() * 24 < n;
    (0..draws)
        .into_par_iter()
        .with_min_len(16)
        .map(|r| {
            let mut rng = rng_at(seed, family, r);
            if multinomial {
                let (mut left_n, mut left_count) = (n as u64, n as u64);
                let mut sum = 0.0;
                for (i, (v, count)) in cats.iter().enumerate() {
                    if left_n == 0 {
                        break;
                    }
                    let k = if i + 1 == cats.len() {
                        left_n
                    } else {
                        #[allow(clippy::cast_precision_loss)]
                        let p = *count as f64 / left_count as f64;
                        Binomial::new(left_n, p.min(1.0)).map_or(0, |b| b.sample(&mut rng))
                    };
                    #[allow(clippy::cast_precision_loss)]
                    {
                        sum += k as f64 * v;
                    }
                    left_n -= k;
                    left_count -= count;
                }
                sum / nf
            } else {
                let mut sum = 0.0;
                for _ in 0..n {
                    sum += values[rng.random_range(0..n)];
                }
                sum / nf
            }
        })
        .collect()
}

/// The percentile interval `(low, high)` of the mean, or `None` under [`MIN_CI_TASKS`] values.
///
/// # Panics
/// If `level` is not in (0, 1) or `draws` is 0 (callers validate options first).
pub fn interval(values: &[f64], draws: u32, seed: u64, level: f64) -> Option<(f64, f64)> {
    assert!(level > 0.0 && level < 1.0, "level must be in (0, 1)");
    assert!(draws > 0, "draws must be positive");
    if values.len() < MIN_CI_TASKS {
        return None;
    }
    Some(percentiles(&replicate_means(values, draws, seed), level))
}

/// The `(1−level)/2` and `(1+level)/2` order statistics of `sorted` (non-empty), indexed as the
/// reference indexes them.
pub(crate) fn percentiles(sorted: &[f64], level: f64) -> (f64, f64) {
    #[allow(clippy::cast_precision_loss, reason = "a replicate count")]
    let d = sorted.len() as f64;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let lo = ((1.0 - level) / 2.0 * d) as i64;
    #[allow(clippy::cast_possible_truncation)]
    let hi = (f64::midpoint(1.0, level) * d) as i64 - 1;
    let last = i64::try_from(sorted.len()).unwrap_or(i64::MAX) - 1;
    let at = |i: i64| sorted[usize::try_from(i.clamp(0, last)).unwrap_or(0)];
    (at(lo), at(hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vectors_within_resampling_error() {
        let five = [1.0, 0.5, 0.0, 0.75, 0.25];
        let (lo, hi) = interval(&five, 2000, 0, 0.95).unwrap();
        assert!(
            (lo - 0.2).abs() <= 0.05 + 1e-9 && (hi - 0.8).abs() <= 0.05 + 1e-9,
            "{lo} {hi}"
        );
        let (lo, hi) = interval(&five, 2000, 0, 0.9).unwrap();
        assert!(
            (lo - 0.25).abs() <= 0.05 + 1e-9 && (hi - 0.75).abs() <= 0.05 + 1e-9,
            "{lo} {hi}"
        );
        assert_eq!(interval(&[1.0, 0.0], 2000, 0, 0.95), None);
    }

    #[test]
    fn constant_values_give_a_zero_width_interval_and_seeds_repeat() {
        assert_eq!(interval(&[0.75; 4], 2000, 0, 0.95), Some((0.75, 0.75)));
        let v: Vec<f64> = (0..500).map(|i| f64::from(i % 7) / 6.0).collect();
        assert_eq!(interval(&v, 500, 9, 0.95), interval(&v, 500, 9, 0.95));
    }

    #[test]
    fn multinomial_and_index_resampling_agree_in_distribution() {
        // 600 tasks with 4 distinct rates: the multinomial path; 600 distinct values: the index path.
        let few: Vec<f64> = (0..600).map(|i| f64::from(i % 4) / 3.0).collect();
        let many: Vec<f64> = (0..600)
            .map(|i| f64::from(i % 4) / 3.0 + f64::from(i) * 1e-9)
            .collect();
        let (a, b) = (
            interval(&few, 4000, 1, 0.95).unwrap(),
            interval(&many, 4000, 1, 0.95).unwrap(),
        );
        assert!(
            (a.0 - b.0).abs() < 0.01 && (a.1 - b.1).abs() < 0.01,
            "{a:?} {b:?}"
        );
        // The normal approximation: mean 0.5, sd of the mean sqrt(5/27/600) ≈ 0.0176.
        assert!((a.0 - (0.5 - 1.96 * 0.01757)).abs() < 0.006, "{a:?}");
    }
}
