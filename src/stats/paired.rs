//! Two arms compared task by task: the paired bootstrap interval of the mean per-task delta, a
//! sign-flip permutation p-value, and the unpaired fallback when too few tasks are on both sides.
//!
//! Each arm is its per-task means, sorted by task. With at least `min_paired` shared tasks the
//! comparison is paired: `delta` = the mean of `after − before` over the shared tasks, its interval
//! by default the Student-t interval of that mean over tasks ([`super::interval::t_interval`],
//! clipped to `[−1, 1]`), or with [`Method::Percentile`] the reference's percentile bootstrap
//! over tasks ([`super::bootstrap`]); under [`super::interval::RELIABLE_TASKS`] shared tasks the
//! note says the interval is approximate. The p-value is the share
//! of `draws` random sign flips of the differences whose mean is at least as far from zero as
//! `delta` (`(extreme + 1) / (draws + 1)`). Below that it compares the two arms' task means as
//! independent samples: the delta of the two means, an interval from resampling each arm on its
//! own, and no p-value.
//!
//! The verdict reads the interval alone: `b_better` when it lies above zero, `a_better` when below,
//! an interval touching zero is no difference (measure spec §1.8).
//!
//! Differences from the reference: `mean_a` and `mean_b` are over the tasks the delta uses (the
//! shared ones when paired), so the printed `before -> after` subtracts to the delta; the
//! reference averages every task of each side there (its spec §9, item 13). Draws are `ChaCha`'s;
//! replicate `r` uses stream `r` (bootstrap), family 1 (sign flips) and families 2 and 3 (the
//! unpaired arms), so results do not depend on thread count.

use rand::RngCore;
use rand_distr::{Binomial, Distribution};
use rayon::prelude::*;
use serde::Serialize;

use super::bootstrap::{self, MIN_CI_TASKS};
use super::interval::{self, Method};
use super::sum;

/// Fewest shared tasks for a paired comparison.
pub const MIN_PAIRED: usize = 5;
/// Below this share of paired tasks, the note says most tasks are unpaired.
pub const UNPAIRED_MAJORITY_SHARE: f64 = 0.5;

/// Which arm the interval favours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The interval lies above zero: the after arm is higher.
    BBetter,
    /// The interval lies below zero: the before arm is higher.
    ABetter,
    /// The interval covers zero.
    #[serde(rename = "no_difference_detected")]
    NoDifference,
    /// No interval (too few tasks).
    #[serde(rename = "insufficient_data")]
    Insufficient,
}

impl Direction {
    /// The same verdict read on a metric where lower is better.
    #[must_use]
    pub fn mirrored(self) -> Self {
        match self {
            Self::BBetter => Self::ABetter,
            Self::ABetter => Self::BBetter,
            other => other,
        }
    }
}

/// How the draws are made.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Bootstrap replicates and sign flips.
    pub draws: u32,
    /// The seed.
    pub seed: u64,
    /// Fewest shared tasks for a paired comparison.
    pub min_paired: usize,
    /// Confidence level of the interval.
    pub level: f64,
    /// How the paired interval is made: [`Method::Percentile`] is the reference's bootstrap,
    /// anything else the t interval (differences are not shares, so Wilson does not apply).
    pub method: Method,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            draws: bootstrap::DRAWS,
            seed: 0,
            min_paired: MIN_PAIRED,
            level: bootstrap::LEVEL,
            method: Method::T,
        }
    }
}

/// One metric compared between two arms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Whether the tasks were paired.
    pub paired: bool,
    /// Tasks on both sides.
    pub n_paired: usize,
    /// Tasks only before.
    pub n_only_a: usize,
    /// Tasks only after.
    pub n_only_b: usize,
    /// `n_paired` over the tasks on either side.
    pub paired_share: Option<f64>,
    /// Tasks the delta rests on (the shared ones, or the smaller arm when unpaired).
    pub n_used: usize,
    /// The before mean over the tasks the delta uses.
    pub mean_a: Option<f64>,
    /// The after mean over the tasks the delta uses.
    pub mean_b: Option<f64>,
    /// after − before.
    pub delta: Option<f64>,
    /// The interval of the delta.
    pub ci95: Option<[f64; 2]>,
    /// Paired on fewer than [`interval::RELIABLE_TASKS`] tasks: the interval is approximate.
    pub interval_approximate: bool,
    /// Its confidence level.
    pub level: f64,
    /// The sign-flip p-value (paired only).
    pub p_value: Option<f64>,
    /// Which arm the interval favours.
    pub verdict: Direction,
    /// What to know before reading the numbers.
    pub note: String,
}

/// The items on both sides, as (before, after) pairs in key order, and the counts of items on
/// one side only. Both inputs are sorted by `key`.
#[allow(
    clippy::many_single_char_names,
    reason = "a merge of two sorted lists: a, b and their cursors i, j"
)]
pub fn join_by<T: Copy, K: Ord>(
    a: &[T],
    b: &[T],
    key: impl Fn(&T) -> K,
) -> (Vec<(T, T)>, usize, usize) {
    let (mut i, mut j) = (0, 0);
    let mut shared = Vec::with_capacity(a.len().min(b.len()));
    while i < a.len() && j < b.len() {
        match key(&a[i]).cmp(&key(&b[j])) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared.push((a[i], b[j]));
                i += 1;
                j += 1;
            }
        }
    }
    let n = shared.len();
    (shared, a.len() - n, b.len() - n)
}

/// [`join_by`] on (task, value) pairs: the shared tasks' (before, after) values.
pub fn join<K: Ord + Copy>(a: &[(K, f64)], b: &[(K, f64)]) -> (Vec<(f64, f64)>, usize, usize) {
    let (shared, only_a, only_b) = join_by(a, b, |t| t.0);
    (
        shared.into_iter().map(|(x, y)| (x.1, y.1)).collect(),
        only_a,
        only_b,
    )
}

/// The sign-flip permutation p-value of the mean of `diffs` (`delta`): each of `draws` flips keeps
/// or negates every difference with even odds; the p-value is `(extreme + 1) / (draws + 1)`, where
/// a flip is extreme when its mean is at least `|delta|` from zero (less 1e-12 for rounding).
pub fn sign_flip_p(diffs: &[f64], delta: f64, draws: u32, seed: u64) -> f64 {
    sign_flip_p_of(diffs, &bootstrap::categories(diffs), delta, draws, seed)
}

/// [`sign_flip_p`] with the categories of `diffs` known.
fn sign_flip_p_of(diffs: &[f64], cats: &[(f64, u64)], delta: f64, draws: u32, seed: u64) -> f64 {
    let n = diffs.len();
    #[allow(clippy::cast_precision_loss, reason = "a task count")]
    let nf = n as f64;
    let by_category = cats.len() * 24 < n;
    let bar = delta.abs() - 1e-12;
    // One binomial(count, 1/2) per distinct value, built once for every draw; counts up to
    // `POPCOUNT_MAX` are drawn as the number of set bits in `count` random bits instead (the same
    // distribution, a few instructions per 64 values).
    let kept: Vec<(f64, u64, Option<Binomial>)> = cats
        .iter()
        .map(|&(v, count)| {
            let binomial = (count > POPCOUNT_MAX)
                .then(|| Binomial::new(count, 0.5).ok())
                .flatten();
            (v, count, binomial)
        })
        .collect();
    let extreme = (0..draws)
        .into_par_iter()
        .with_min_len(16)
        .filter(|&r| {
            let mut rng = bootstrap::rng_at(seed, 1, r);
            let total = if by_category {
                // The number kept of each distinct value is binomial(count, 1/2).
                kept.iter()
                    .map(|(v, count, binomial)| {
                        let (v, count) = (*v, *count);
                        let kept = match binomial {
                            Some(b) => b.sample(&mut rng),
                            None => set_bits(&mut rng, count),
                        };
                        #[allow(clippy::cast_precision_loss, reason = "task counts")]
                        let signed = (2 * kept) as f64 - count as f64;
                        v * signed
                    })
                    .sum::<f64>()
            } else {
                let mut total = 0.0;
                for chunk in diffs.chunks(64) {
                    let bits = rng.next_u64();
                    for (i, d) in chunk.iter().enumerate() {
                        total += if bits >> i & 1 == 1 { *d } else { -*d };
                    }
                }
                total
            };
            (total / nf).abs() >= bar
        })
        .count();
    #[allow(clippy::cast_precision_loss, reason = "draw counts")]
    let p = (extreme as f64 + 1.0) / (f64::from(draws) + 1.0);
    p
}

/// Largest count whose binomial(count, 1/2) is drawn bit by bit ([`set_bits`]).
const POPCOUNT_MAX: u64 = 1024;

/// The number of set bits among `count` random bits: a binomial(count, 1/2) draw.
fn set_bits(rng: &mut impl RngCore, count: u64) -> u64 {
    let mut left = count;
    let mut kept = 0;
    while left > 0 {
        let word = rng.next_u64();
        let word = if left < 64 {
            word & ((1u64 << left) - 1)
        } else {
            word
        };
        kept += u64::from(word.count_ones());
        left = left.saturating_sub(64);
    }
    kept
}

/// Whether `b` sorts before `a` (both sorted; `total_cmp`, element by element).
fn sorts_before(a: &[f64], b: &[f64]) -> bool {
    b.iter()
        .zip(a)
        .map(|(x, y)| x.total_cmp(y))
        .find(|o| o.is_ne())
        .map_or(b.len() < a.len(), std::cmp::Ordering::is_lt)
}

/// `values` sorted by `total_cmp`.
fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

fn verdict(delta: Option<f64>, ci: Option<[f64; 2]>) -> Direction {
    match (delta, ci) {
        (Some(d), Some([lo, hi])) if !d.is_nan() => {
            if lo > 0.0 {
                Direction::BBetter
            } else if hi < 0.0 {
                Direction::ABetter
            } else {
                Direction::NoDifference
            }
        }
        _ => Direction::Insufficient,
    }
}

/// Compares per-task means `a` (before) and `b` (after), each sorted by task key.
///
/// # Panics
/// If `opts.level` is not in (0, 1) or `opts.draws` is 0 (callers validate options first).
pub fn compare<K: Ord + Copy>(a: &[(K, f64)], b: &[(K, f64)], opts: &Options) -> Comparison {
    let (shared, only_a, only_b) = join(a, b);
    let union = shared.len() + only_a + only_b;
    #[allow(clippy::cast_precision_loss, reason = "task counts")]
    let paired_share = (union > 0).then(|| shared.len() as f64 / union as f64);
    let mut out = Comparison {
        paired: false,
        n_paired: shared.len(),
        n_only_a: only_a,
        n_only_b: only_b,
        paired_share,
        n_used: 0,
        mean_a: None,
        mean_b: None,
        delta: None,
        ci95: None,
        interval_approximate: false,
        level: opts.level,
        p_value: None,
        verdict: Direction::Insufficient,
        note: String::new(),
    };
    if shared.len() >= opts.min_paired.max(1) {
        let diffs: Vec<f64> = shared.iter().map(|(x, y)| y - x).collect();
        let delta = sum::mean(&diffs).unwrap_or(f64::NAN);
        out.paired = true;
        out.n_used = shared.len();
        out.mean_a = sum::mean(&shared.iter().map(|p| p.0).collect::<Vec<_>>());
        out.mean_b = sum::mean(&shared.iter().map(|p| p.1).collect::<Vec<_>>());
        out.delta = Some(delta);
        // Draws run on one orientation of the differences (of `d` and `−d`, the one that sorts
        // first), so swapping the arms mirrors the interval and keeps the p-value exactly. The
        // draws read the oriented differences in sorted order: one sort serves the orientation,
        // the categories of both resamplings, and a task order that a swap cannot change.
        let ascending = sorted(&diffs);
        // `+ 0.0` keeps a zero difference +0.0 when negated: −0.0 sorts before +0.0, and a
        // multiset equal to its negation must compare equal to it (then no side is flipped).
        let negated: Vec<f64> = ascending.iter().rev().map(|d| -d + 0.0).collect();
        let flip = sorts_before(&ascending, &negated);
        let oriented = if flip { &negated } else { &ascending };
        let cats = bootstrap::categories_of_sorted(oriented);
        if oriented.len() >= MIN_CI_TASKS && opts.method != Method::Percentile {
            out.ci95 = interval::t_interval(oriented, opts.level, (-1.0, 1.0))
                .map(|(l, h)| if flip { [-h, -l] } else { [l, h] });
        } else if oriented.len() >= MIN_CI_TASKS {
            let mut means = bootstrap::replicates_of(oriented, &cats, opts.draws, opts.seed, 0);
            means.sort_by(f64::total_cmp);
            let (l, h) = bootstrap::percentiles(&means, opts.level);
            out.ci95 = Some(if flip { [-h, -l] } else { [l, h] });
        }
        out.p_value = Some(sign_flip_p_of(
            oriented, &cats, delta, opts.draws, opts.seed,
        ));
        if only_a + only_b > 0 {
            let prefix = if paired_share.is_some_and(|s| s < UNPAIRED_MAJORITY_SHARE) {
                "most tasks unpaired: "
            } else {
                ""
            };
            out.note = format!(
                "{prefix}{only_a} tasks only in before and {only_b} only in after were dropped; the verdict rests on the {} shared",
                shared.len()
            );
        }
        let approximate = out.ci95.and(interval::approximate_note(shared.len()));
        out.interval_approximate = approximate.is_some();
        // The warning is the t interval's own: `percentile` prints the reference's words.
        if let Some(note) = approximate.filter(|_| opts.method != Method::Percentile) {
            out.note = if out.note.is_empty() {
                note
            } else {
                format!("{}; {note}", out.note)
            };
        }
    } else {
        let va: Vec<f64> = a.iter().map(|t| t.1).collect();
        let vb: Vec<f64> = b.iter().map(|t| t.1).collect();
        out.n_used = va.len().min(vb.len());
        out.mean_a = sum::mean(&va);
        out.mean_b = sum::mean(&vb);
        out.delta = match (out.mean_a, out.mean_b) {
            (Some(x), Some(y)) => Some(y - x),
            _ => None,
        };
        if va.len() >= MIN_CI_TASKS && vb.len() >= MIN_CI_TASKS {
            // Each arm's stream family follows its values, not its side, so a swap mirrors.
            let (fa, fb) = if sorts_before(&sorted(&va), &sorted(&vb)) {
                (3, 2)
            } else {
                (2, 3)
            };
            let ra = bootstrap::replicates(&va, opts.draws, opts.seed, fa);
            let rb = bootstrap::replicates(&vb, opts.draws, opts.seed, fb);
            let mut diffs: Vec<f64> = ra.iter().zip(&rb).map(|(x, y)| y - x).collect();
            diffs.sort_by(f64::total_cmp);
            let (lo, hi) = bootstrap::percentiles(&diffs, opts.level);
            out.ci95 = Some([lo, hi]);
        }
        out.note = format!(
            "fewer than {} shared tasks; unpaired task means, weaker test",
            opts.min_paired
        );
    }
    out.verdict = verdict(out.delta, out.ci95);
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn arm(values: &[f64]) -> Vec<(usize, f64)> {
        values.iter().copied().enumerate().collect()
    }

    #[test]
    fn the_reference_vector_agrees_within_resampling_error() {
        // measure vectors `compare_runs`: 8 tasks × 4 rollouts, delta 0.15625, [-0.15625, 0.4375],
        // p 0.454 (seed 0) and 0.437 (seed 7): CPython's draws, so the p-value within its error.
        let before = [0.0, 0.25, 0.5, 0.5, 0.0, 0.75, 1.0, 0.0];
        let after = [0.75, 0.0, 1.0, 0.25, 0.5, 0.5, 0.75, 0.5];
        let percentile = Options {
            method: Method::Percentile,
            ..Options::default()
        };
        let c = compare(&arm(&before), &arm(&after), &percentile);
        assert!(c.paired);
        assert_eq!(c.delta, Some(0.15625));
        let [lo, hi] = c.ci95.unwrap();
        assert!(
            (lo + 0.15625).abs() <= 0.0625 && (hi - 0.4375).abs() <= 0.0625,
            "{lo} {hi}"
        );
        let p = c.p_value.unwrap();
        assert!((p - 0.445).abs() < 0.04, "{p}");
        assert_eq!(c.verdict, Direction::NoDifference);
        // The default: the t interval, 0.15625 ± t(7) 2.365 · 0.441942/√8; the p-value and the
        // point estimate do not depend on the method.
        let t = compare(&arm(&before), &arm(&after), &Options::default());
        let [lo, hi] = t.ci95.unwrap();
        assert!(
            (lo + 0.213_281).abs() < 1e-6 && (hi - 0.525_781).abs() < 1e-6,
            "{lo} {hi}"
        );
        assert_eq!((t.delta, t.p_value), (c.delta, c.p_value));
        assert!(t.interval_approximate && t.note.starts_with("interval approximate: 8 tasks"));
    }

    #[test]
    fn set_bits_draws_a_fair_binomial() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        assert_eq!(super::set_bits(&mut rng, 0), 0);
        for count in [1_u64, 37, 64, 100, 1000] {
            let draws: Vec<f64> = (0..20_000)
                .map(|_| {
                    let k = super::set_bits(&mut rng, count);
                    assert!(k <= count, "{k} of {count}");
                    k as f64
                })
                .collect();
            let mean = draws.iter().sum::<f64>() / draws.len() as f64;
            let var = draws.iter().map(|k| (k - mean).powi(2)).sum::<f64>() / draws.len() as f64;
            let (m, v) = (count as f64 / 2.0, count as f64 / 4.0);
            // Five standard errors of the mean and of the variance.
            assert!(
                (mean - m).abs() < 5.0 * (v / 20_000.0).sqrt(),
                "{count}: mean {mean}"
            );
            assert!(
                (var - v).abs() < 5.0 * v * (2.0 / 20_000.0_f64).sqrt() + 1e-9,
                "{count}: var {var}"
            );
        }
    }

    #[test]
    fn under_five_shared_tasks_the_arms_are_compared_unpaired() {
        let a: Vec<(&str, f64)> = vec![("t0", 0.0), ("t1", 0.25), ("t2", 0.5)];
        let b: Vec<(&str, f64)> = vec![("t2", 0.5), ("t3", 0.75), ("t4", 0.5)];
        let c = compare(&a, &b, &Options::default());
        assert!(!c.paired);
        assert_eq!((c.n_paired, c.n_only_a, c.n_only_b), (1, 2, 2));
        assert_eq!(c.paired_share, Some(0.2));
        assert_eq!(c.p_value, None);
        assert!((c.delta.unwrap() - (0.583_333_333_333_333_4 - 0.25)).abs() < 1e-15);
        assert!(c.ci95.is_some());
        assert!(c.note.starts_with("fewer than 5 shared tasks"));
    }

    #[test]
    fn a_planted_effect_on_500_tasks_is_detected() {
        let before: Vec<f64> = (0..500).map(|i| f64::from(i % 5) / 4.0).collect();
        let after: Vec<f64> = before
            .iter()
            .enumerate()
            .map(|(i, v)| if i % 10 < 4 { (v + 0.25).min(1.0) } else { *v })
            .collect();
        let c = compare(&arm(&before), &arm(&after), &Options::default());
        assert_eq!(c.verdict, Direction::BBetter, "{c:?}");
        assert!(c.p_value.unwrap() < 0.01);
    }

    #[test]
    fn a_difference_set_equal_to_its_negation_is_not_flipped() {
        // Found by the swap property on CI: a zero difference negates to −0.0, which sorted
        // before +0.0 and flipped both orders of the arms alike.
        let a: Vec<(usize, f64)> = [1.0, 1.0, 0.5, 0.0, 0.75].into_iter().enumerate().collect();
        let b: Vec<(usize, f64)> = [0.75, 0.0, 0.75, 1.0, 0.75]
            .into_iter()
            .enumerate()
            .collect();
        let opts = Options {
            seed: 22,
            draws: 400,
            ..Options::default()
        };
        let (ab, ba) = (compare(&a, &b, &opts), compare(&b, &a, &opts));
        assert_eq!(ab.ci95, ba.ci95, "one draw of one multiset");
        assert_eq!(ab.p_value, ba.p_value);
        assert_eq!(ab.verdict, ba.verdict.mirrored());
    }

    #[test]
    fn orientation_is_chosen_by_sorted_values() {
        assert!(sorts_before(&[0.25, 0.5], &[-0.5, -0.25]));
        assert!(!sorts_before(&[-0.5, -0.25], &[0.25, 0.5]));
        assert!(!sorts_before(&[0.0, 0.0], &[0.0, 0.0]));
        assert_eq!(sorted(&[0.5, -1.0, 0.25]), vec![-1.0, 0.25, 0.5]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn swapping_the_arms_negates_the_delta_and_flips_the_verdict(
            pairs in prop::collection::vec((0u8..5, 0u8..5), 5..60),
            seed in 0u64..50,
        ) {
            let a: Vec<(usize, f64)> = pairs.iter().enumerate().map(|(i, p)| (i, f64::from(p.0) / 4.0)).collect();
            let b: Vec<(usize, f64)> = pairs.iter().enumerate().map(|(i, p)| (i, f64::from(p.1) / 4.0)).collect();
            let opts = Options { seed, draws: 400, ..Options::default() };
            let ab = compare(&a, &b, &opts);
            let ba = compare(&b, &a, &opts);
            prop_assert!((ab.delta.unwrap() + ba.delta.unwrap()).abs() < 1e-12);
            let (l1, h1) = (ab.ci95.unwrap()[0], ab.ci95.unwrap()[1]);
            let (l2, h2) = (ba.ci95.unwrap()[0], ba.ci95.unwrap()[1]);
            // The same resamples of negated differences: the interval mirrors exactly (a
            // multiset equal to its negation is drawn as itself, so only the verdict flips there).
            let diffs: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y.1 - x.1).collect();
            let negated: Vec<f64> = diffs.iter().map(|d| -d + 0.0).collect();
            let (diffs, negated) = (sorted(&diffs), sorted(&negated));
            if sorts_before(&diffs, &negated) || sorts_before(&negated, &diffs) {
                prop_assert!((l1 + h2).abs() < 1e-12 && (h1 + l2).abs() < 1e-12);
                prop_assert_eq!(ab.p_value, ba.p_value);
            }
            prop_assert_eq!(ab.verdict, ba.verdict.mirrored());
            let same = compare(&a, &a, &opts);
            prop_assert_eq!(same.delta, Some(0.0));
            prop_assert_eq!(same.verdict, Direction::NoDifference);
        }
    }
}
