//! Intervals of a mean over tasks, by method: the reference's percentile bootstrap, a Wilson
//! score interval on the effective number of tasks, and a Student-t interval.
//!
//! The estimand is the population mean over tasks (Miller 2024): the tasks are a sample, each
//! task's value (a pass rate `c/n`, a pass^k or pass@k estimate, a marker mean, a paired
//! difference) is one observation, and rollouts are nested inside tasks. Every method below
//! resamples or averages tasks, never rows.
//!
//! - [`Method::Percentile`]: the reference's percentile bootstrap over tasks
//!   ([`super::bootstrap::interval`]). It undercovers at small task counts (its width is the plug-in
//!   sd, `sqrt((n−1)/n)` of the sample sd, times z, and zero when every task has one value): the
//!   coverage study in `docs/statistics.md` measures 52–98% at 5 to 10 tasks, 86–96% at 20 for
//!   pass@1, and as little as 1.6% for pass@k near 1 (every task passed: a zero-width interval).
//! - [`Method::Wilson`] (for values in `[0, 1]`): with `p̂` the mean and `v = Σ(xᵢ − p̂)²/n` the
//!   plug-in variance of one task's value, the effective number of tasks is
//!   `n_eff = n · p̂(1 − p̂) / v` (Kish's design effect; `n_eff ≥ n` for values in `[0, 1]`, equal
//!   to n when every value is 0 or 1, so with one rollout a task it is the textbook Wilson
//!   interval on the tasks). The interval is the Wilson score interval ([`super::wilson`]) of
//!   `p̂` on `n_eff` trials with the Student t quantile at `n − 1` degrees of freedom in place of
//!   z (Korn and Graubard 1998's small-sample correction). When `v = 0` or `p̂ ∈ {0, 1}`,
//!   `n_eff = n`: a run where every task scored alike still gets an interval as wide as n
//!   all-or-nothing tasks allow, where the percentile bootstrap gives zero width. Near the ends
//!   the Wilson bound is too tight (Brown, Cai and DasGupta 2001, §4.1.1, whose "modified
//!   Wilson" this follows, one count tighter): with `x = p̂·n_eff` effective successes in
//!   (0, x*), x* = 2 under 50 effective tasks and 3 from 50, the lower bound is the smaller of
//!   Wilson's and Garwood's Poisson bound `G⁻¹((1 − level)/2; x)/n_eff` (G the Gamma(x, 1)
//!   distribution), and the same for failures at the upper end. This is what covers pass@k near 1 and pass^k near 0, where
//!   one or two tasks in hundreds fail.
//! - [`Method::T`]: `mean ± t(n−1) · s/√n`, with `s` the sample sd (divisor n − 1), clipped to
//!   the values' range (`[0, 1]`, or `[−1, 1]` for differences of such values).
//!
//! None of these changes a point estimate; all give no interval under [`MIN_CI_TASKS`] values.
//!
//! References: Miller, "Adding Error Bars to Evals" (2024); Wilson (1927); Agresti and Coull,
//! "Approximate is better than exact" (1998); Brown, Cai and DasGupta, "Interval estimation for a
//! binomial proportion" (2001); Kish, "Survey Sampling" (1965); Korn and Graubard, "Confidence
//! intervals for proportions with small expected number of positive counts" (1998); Efron and
//! Tibshirani, "An Introduction to the Bootstrap" (1993), ch. 13–14.

use super::bootstrap::{self, MIN_CI_TASKS};
use super::{quantile, sum, wilson};

/// How a mean over tasks gets its interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Wilson score interval on the effective number of tasks, t quantile (shares in `[0, 1]`).
    #[default]
    Wilson,
    /// Student-t interval on the per-task values.
    T,
    /// The reference's percentile bootstrap over tasks.
    Percentile,
}

impl Method {
    /// The name printed and accepted by `--interval`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Wilson => "wilson",
            Self::T => "t",
            Self::Percentile => "percentile",
        }
    }
}

/// Fewest tasks at which the default intervals cover 93% or more in every cell of the coverage
/// study; under it the printed line says the interval is approximate.
pub const RELIABLE_TASKS: usize = 20;

/// "interval approximate: 8 tasks" when `n_tasks` is under [`RELIABLE_TASKS`] (and an interval
/// is printed at all).
pub fn approximate_note(n_tasks: usize) -> Option<String> {
    (MIN_CI_TASKS..RELIABLE_TASKS).contains(&n_tasks).then(|| {
        format!(
            "interval approximate: {n_tasks} tasks (intervals cover 93% or more from {RELIABLE_TASKS})"
        )
    })
}

/// The interval of the mean of `values` (each in `[0, 1]`) by `method` at `level`, or `None`
/// under [`MIN_CI_TASKS`] values. `draws` and `seed` are the bootstrap's (read by
/// [`Method::Percentile`] only).
///
/// # Panics
/// If `level` is not in (0, 1) or `draws` is 0 (callers validate options first).
pub fn of_shares(
    values: &[f64],
    method: Method,
    draws: u32,
    seed: u64,
    level: f64,
) -> Option<(f64, f64)> {
    match method {
        Method::Percentile => bootstrap::interval(values, draws, seed, level),
        Method::Wilson if values.iter().all(|v| (0.0..=1.0).contains(v)) => {
            wilson_tasks(values, level)
        }
        Method::Wilson | Method::T => t_interval(values, level, (0.0, 1.0)),
    }
}

/// The Wilson score interval on the effective number of tasks (see the module docs), or `None`
/// under [`MIN_CI_TASKS`] values.
#[allow(clippy::many_single_char_names, reason = "the formula's own names")]
pub fn wilson_tasks(values: &[f64], level: f64) -> Option<(f64, f64)> {
    let n = values.len();
    if n < MIN_CI_TASKS {
        return None;
    }
    let (p, n_eff) = effective(values)?;
    #[allow(clippy::cast_precision_loss, reason = "a task count")]
    let nf = n as f64;
    let q = quantile::t_quantile(nf - 1.0, level).ok()?;
    let (mut lo, mut hi) = wilson::interval(p * n_eff, n_eff, q)?;
    // Near either end the Wilson bound is too tight (Brown, Cai and DasGupta 2001, §4.1.1):
    // with (effective) successes or failures under the cut, take the Poisson bound when it is
    // wider. The cut is one count under Brown, Cai and DasGupta's x* (2 up to 50 trials, 3
    // above): the coverage study measured this one; theirs covers 99.4% where this covers 95.5%
    // (pass@4 of easy tasks at 100 tasks) and the same elsewhere.
    let cut = if n_eff < 50.0 { 2.0 } else { 3.0 };
    let under = |count: f64| count > 0.0 && count < cut - 1e-9;
    let (x, y) = (p * n_eff, (1.0 - p) * n_eff);
    if under(x) {
        lo = lo.min(poisson_lower(x, level)? / n_eff);
    }
    if under(y) {
        hi = hi.max(1.0 - poisson_lower(y, level)? / n_eff);
    }
    Some((lo, hi))
}

/// The mean `p̂` of `values` (each in `[0, 1]`) and their effective number of tasks
/// `n_eff = n · p̂(1 − p̂)/v` (see the module docs), or `None` for no values.
fn effective(values: &[f64]) -> Option<(f64, f64)> {
    let p = sum::mean(values)?;
    let v = sum::population_var(values)?;
    #[allow(clippy::cast_precision_loss, reason = "a task count")]
    let nf = values.len() as f64;
    let spread = p * (1.0 - p);
    // Exactly n when every value is 0 or 1 (v = p(1 − p) up to rounding), so a count at an end
    // is the integer it is when the cut in `wilson_tasks` or [`near_end`] reads it.
    let n_eff = if v > 0.0 && spread > 0.0 && (spread - v).abs() > 1e-12 * spread {
        (nf * spread / v).max(nf)
    } else {
        nf
    };
    Some((p, n_eff))
}

/// Most (effective) tasks at the nearer end for which [`near_end`] calls a share's interval
/// approximate.
pub const NEAR_END_TASKS: f64 = 3.0;

/// A share whose interval sits within [`NEAR_END_TASKS`] tasks of 0 or 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NearEnd {
    /// Effective tasks at the nearer end: those that failed it when `high`, else those that
    /// passed it (a whole count when every value is 0 or 1).
    pub count: f64,
    /// Tasks.
    pub tasks: usize,
    /// The effective number of tasks the count is out of (`tasks` when every value is 0 or 1).
    pub effective: f64,
    /// The end is 1 (the share is near 100%).
    pub high: bool,
}

impl NearEnd {
    /// "pass@8 (1 of 100 tasks failed)", for the quantity `what`, with `words` what a task at
    /// the low end and at the high end did (`("failed", "passed")`). A count of effective tasks
    /// (values between 0 and 1) says so: "pass@1 (1.0 of 409 effective tasks failed)".
    pub fn describe(&self, what: &str, words: (&str, &str)) -> String {
        let side = if self.high { words.0 } else { words.1 };
        #[allow(clippy::cast_precision_loss, reason = "a task count")]
        let whole = self.count.fract() == 0.0 && self.effective == self.tasks as f64;
        if whole {
            format!("{what} ({} of {} tasks {side})", self.count, self.tasks)
        } else {
            let digits = if self.count < 1.0 { 2 } else { 1 };
            format!(
                "{what} ({:.digits$} of {:.0} effective tasks {side})",
                self.count, self.effective
            )
        }
    }
}

/// The note for the numbers near an end ([`NEAR_END_TASKS`] or fewer tasks from 0% or 100%),
/// from their [`NearEnd::describe`] texts: one note for all of them, or `None` for none.
pub fn near_end_note(described: &[String]) -> Option<String> {
    (!described.is_empty())
        .then(|| format!("interval approximate near an end: {}", described.join(", ")))
}

/// Whether the default interval of the mean of `values` (each in `[0, 1]`) sits within
/// [`NEAR_END_TASKS`] effective tasks of an end, from [`RELIABLE_TASKS`] tasks up (under it
/// [`approximate_note`] already says the interval is approximate). With `x = p̂ · n_eff` tasks'
/// worth of passes and `y = (1 − p̂) · n_eff` of failures, the count at the nearer end is
/// `min(x, y)`.
///
/// Why (the coverage study, `docs/statistics.md` §4): with three or fewer tasks at an end the
/// count there is a handful, and any interval that covers 95% at every truth covers nearly 100%
/// at the truths that put about one task there (pass@8 of an easy eval, truth 0.9992, covers
/// 99.9% at 100 tasks); no interval can cover 93–98% in those cells, so the line says so.
pub fn near_end(values: &[f64]) -> Option<NearEnd> {
    if values.len() < RELIABLE_TASKS || !values.iter().all(|v| (0.0..=1.0).contains(v)) {
        return None;
    }
    let (p, n_eff) = effective(values)?;
    let (x, y) = (p * n_eff, (1.0 - p) * n_eff);
    let high = y < x;
    // A whole count when every value is 0 or 1 (less the rounding of p̂ · n).
    let count = x.min(y);
    let count = if (count - count.round()).abs() < 1e-9 {
        count.round()
    } else {
        count
    };
    (count <= NEAR_END_TASKS + 1e-9).then_some(NearEnd {
        count,
        tasks: values.len(),
        effective: n_eff,
        high,
    })
}

/// Garwood's lower bound on a Poisson mean from a count of `x`: the `(1 − level)/2` quantile of
/// Gamma(x, 1) (`½χ²` at `2x` degrees of freedom).
fn poisson_lower(x: f64, level: f64) -> Option<f64> {
    use statrs::distribution::{ContinuousCDF, Gamma};
    Some(Gamma::new(x, 1.0).ok()?.inverse_cdf((1.0 - level) / 2.0))
}

/// `mean ± t(n−1) · s/√n`, clipped to `range`, or `None` under [`MIN_CI_TASKS`] values.
pub fn t_interval(values: &[f64], level: f64, range: (f64, f64)) -> Option<(f64, f64)> {
    let n = values.len();
    if n < MIN_CI_TASKS {
        return None;
    }
    let m = sum::mean(values)?;
    let s = sum::sample_sd(values)?;
    #[allow(clippy::cast_precision_loss, reason = "a task count")]
    let nf = n as f64;
    let half = quantile::t_quantile(nf - 1.0, level).ok()? * s / nf.sqrt();
    Some(((m - half).max(range.0), (m + half).min(range.1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_one_rollout_a_task_it_is_wilson_with_the_t_quantile() {
        // 7 of 10 tasks passed: every value 0 or 1, so n_eff = 10; t(9) = 2.262.
        let v: Vec<f64> = (0..10).map(|i| if i < 7 { 1.0 } else { 0.0 }).collect();
        let (lo, hi) = wilson_tasks(&v, 0.95).unwrap();
        assert_eq!(Some((lo, hi)), wilson::interval(7.0, 10.0, 2.262));
        // Wilson's formula by hand at z = 2.262: centre (0.7 + z²/20)/(1 + z²/10) = 0.632302,
        // half-width z·sqrt(0.021 + z²/400)/(1 + z²/10) = 0.275067.
        assert!(
            (lo - 0.357_235).abs() < 1e-5 && (hi - 0.907_369).abs() < 1e-5,
            "{lo} {hi}"
        );
        // At 200 tasks the t quantile is 1.972 and the interval is close to the z = 1.96 one.
        let v: Vec<f64> = (0..200).map(|i| if i < 150 { 1.0 } else { 0.0 }).collect();
        let (lo, hi) = wilson_tasks(&v, 0.95).unwrap();
        let (zl, zh) = wilson::interval(150.0, 200.0, 1.96).unwrap();
        assert!((lo - zl).abs() < 1e-3 && (hi - zh).abs() < 1e-3);
        assert!(
            (zl - 0.686_0).abs() < 1e-3 && (zh - 0.805_0).abs() < 1e-3,
            "{zl} {zh}"
        );
    }

    #[test]
    fn spread_inside_tasks_raises_the_effective_count() {
        // Rates 0.25 and 0.75 (mean 0.5, plug-in variance 1/16): n_eff = n · 0.25 / 0.0625 = 4n.
        let v: Vec<f64> = (0..10)
            .map(|i| if i % 2 == 0 { 0.25 } else { 0.75 })
            .collect();
        let got = wilson_tasks(&v, 0.95).unwrap();
        assert_eq!(Some(got), wilson::interval(20.0, 40.0, 2.262));
        // Every task alike: n_eff = n, a nonzero width where the bootstrap has none.
        let (lo, hi) = wilson_tasks(&[1.0; 8], 0.95).unwrap();
        assert_eq!(hi, 1.0);
        assert!(lo > 0.5 && lo < 0.75, "{lo}");
        assert_eq!(
            bootstrap::interval(&[1.0; 8], 2000, 0, 0.95),
            Some((1.0, 1.0))
        );
    }

    #[test]
    fn one_or_two_counts_from_an_end_take_the_poisson_bound() {
        // 1 of 50 binary tasks: Garwood's lower bound −ln(0.975)/50 = 0.000506 replaces Wilson's.
        let mut v = vec![0.0; 50];
        v[0] = 1.0;
        let (lo, hi) = wilson_tasks(&v, 0.95).unwrap();
        let t49 = quantile::t_quantile(49.0, 0.95).unwrap();
        let (wl, wh) = wilson::interval(1.0, 50.0, t49).unwrap();
        assert!((lo - 0.025_317_8 / 50.0).abs() < 1e-7 && lo < wl, "{lo}");
        assert_eq!(hi, wh);
        // Mirrored: 49 of 50 pass gives the mirrored upper bound.
        let w: Vec<f64> = v.iter().map(|x| 1.0 - x).collect();
        let (lo2, hi2) = wilson_tasks(&w, 0.95).unwrap();
        assert!((lo2 - (1.0 - hi)).abs() < 1e-12 && (hi2 - (1.0 - lo)).abs() < 1e-12);
        // 2 of 50: Gamma(2, 1)'s 2.5% point 0.242209 (½χ² at 4 df); 3 of 50 keeps Wilson's.
        v[1] = 1.0;
        let (lo, _) = wilson_tasks(&v, 0.95).unwrap();
        assert!((lo - 0.242_209 / 50.0).abs() < 1e-6, "{lo}");
        v[2] = 1.0;
        assert_eq!(wilson_tasks(&v, 0.95), wilson::interval(3.0, 50.0, t49));
        // Under 50 tasks the cut is 2: 1 of 40 takes the Poisson bound, 2 of 40 keeps Wilson's
        // (the rule the coverage study measured; n_eff is exactly 40 for 0/1 values).
        let t39 = quantile::t_quantile(39.0, 0.95).unwrap();
        let mut u = vec![0.0; 40];
        u[0] = 1.0;
        let (lo, _) = wilson_tasks(&u, 0.95).unwrap();
        assert!((lo - 0.025_317_8 / 40.0).abs() < 1e-7, "{lo}");
        u[1] = 1.0;
        assert_eq!(wilson_tasks(&u, 0.95), wilson::interval(2.0, 40.0, t39));
    }

    #[test]
    fn t_interval_matches_the_textbook_and_clips() {
        // 0.1, 0.2, ..., 0.5: mean 0.3, s = 0.158114, t(4) = 2.776: 0.3 ± 0.196292.
        let v = [0.1, 0.2, 0.3, 0.4, 0.5];
        let (lo, hi) = t_interval(&v, 0.95, (0.0, 1.0)).unwrap();
        assert!(
            (lo - 0.103_708).abs() < 1e-6 && (hi - 0.496_292).abs() < 1e-6,
            "{lo} {hi}"
        );
        let (lo, _) = t_interval(&[0.0, 0.0, 0.1], 0.95, (0.0, 1.0)).unwrap();
        assert_eq!(lo, 0.0);
        assert_eq!(t_interval(&[0.5, 0.5], 0.95, (0.0, 1.0)), None);
    }

    #[test]
    fn shares_dispatch_by_method_and_fall_back_to_t_outside_the_unit_interval() {
        let v = [0.0, 0.5, 1.0, 1.0, 0.25];
        assert_eq!(
            of_shares(&v, Method::Percentile, 500, 3, 0.95),
            bootstrap::interval(&v, 500, 3, 0.95)
        );
        assert_eq!(
            of_shares(&v, Method::Wilson, 1, 0, 0.95),
            wilson_tasks(&v, 0.95)
        );
        let odd = [0.0, 2.0, 1.0];
        assert_eq!(
            of_shares(&odd, Method::Wilson, 1, 0, 0.95),
            t_interval(&odd, 0.95, (0.0, 1.0))
        );
        assert_eq!(approximate_note(2), None);
        assert_eq!(approximate_note(RELIABLE_TASKS), None);
        assert!(
            approximate_note(8)
                .unwrap()
                .starts_with("interval approximate: 8 tasks")
        );
    }

    #[test]
    fn near_an_end_counts_the_tasks_there_from_twenty_tasks() {
        // 1 of 100 binary tasks failed: 1 task from 100%.
        let mut v = vec![1.0; 100];
        v[0] = 0.0;
        let e = near_end(&v).unwrap();
        assert_eq!(
            (e.count, e.tasks, e.effective, e.high),
            (1.0, 100, 100.0, true)
        );
        assert_eq!(
            e.describe("pass@8", ("failed", "passed")),
            "pass@8 (1 of 100 tasks failed)"
        );
        // 3 passed of 100 is still near 0%; 4 is not.
        let mut w = vec![0.0; 100];
        w[..3].fill(1.0);
        let e = near_end(&w).unwrap();
        assert_eq!((e.count, e.high), (3.0, false));
        w[3] = 1.0;
        assert_eq!(near_end(&w), None);
        // Every task alike sits at the end, 0 tasks from it; under 20 tasks the task-count
        // warning speaks instead, and values outside [0, 1] are not shares.
        assert_eq!(near_end(&[1.0; 20]).map(|e| e.count), Some(0.0));
        assert_eq!(near_end(&[1.0; 19]), None);
        let mut odd = vec![0.0; 30];
        odd[0] = 2.0;
        assert_eq!(near_end(&odd), None);
        // Fractional values count effective tasks: 40 tasks at 0.05 and 0.0 alternating have
        // mean 0.025 and n_eff = 40 · 0.024375 / 0.000625 = 1560, so 39 effective passes.
        let frac: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 0.05 } else { 0.0 })
            .collect();
        assert_eq!(near_end(&frac), None);
        // One task at 0.1 among 39 at 0: mean 0.0025, plug-in variance 0.00024375, so
        // n_eff = 40 · 0.0025 · 0.9975 / 0.00024375 = 409.2 and x = 1.02 effective passes.
        let mut one = vec![0.0; 40];
        one[0] = 0.1;
        let e = near_end(&one).unwrap();
        assert!(!e.high && (e.count - 1.023_077).abs() < 1e-6, "{e:?}");
        assert_eq!(
            e.describe("marker:m", ("did not fire", "fired")),
            "marker:m (1.0 of 409 effective tasks fired)"
        );
        // Under one effective task, two digits: 40 tasks at 0.01 alike (n_eff = n) are 0.4.
        assert_eq!(
            near_end(&[0.01; 40]).unwrap().describe("m", ("no", "yes")),
            "m (0.40 of 40 effective tasks yes)"
        );
        assert_eq!(
            near_end_note(&["a (1)".to_owned(), "b (2)".to_owned()]).unwrap(),
            "interval approximate near an end: a (1), b (2)"
        );
        assert_eq!(near_end_note(&[]), None);
    }
}
