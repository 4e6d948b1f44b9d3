//! How many tasks an eval needs to detect a change, and what change a task count can detect.
//!
//! The binomial model (measure spec §1.9, §5.2): a task's pass rate over `k` rollouts at rate
//! `p` has variance `p(1−p)/k`; the per-task difference of two independent arms at `p` and
//! `q = p + effect` has sd `sqrt((p(1−p) + q(1−q)) / k)`. With the two-sided normal quantile of
//! `alpha` and the quantile of `power`, `z = z(1−alpha/2) + z(power)`, a test on `n` tasks
//! detects `effect` when `n ≥ (z · sd / effect)²`.
//!
//! The quantiles are exact normal quantiles here, not the 1.96 used for intervals.

use statrs::distribution::{ContinuousCDF, Normal};

/// Fewest tasks any sizing answers.
pub const MIN_HOLDOUT_TASKS: u64 = 2;
/// Steps of the detectable-effect fixed point.
const FIXED_POINT_STEPS: usize = 12;

/// The standard normal quantile.
pub fn inv_cdf(p: f64) -> f64 {
    Normal::standard().inverse_cdf(p)
}

/// The standard normal distribution function.
pub fn cdf(x: f64) -> f64 {
    Normal::standard().cdf(x)
}

/// `z(1 − alpha/2) + z(power)`.
pub fn z_total(alpha: f64, power: f64) -> f64 {
    inv_cdf(1.0 - alpha / 2.0) + inv_cdf(power)
}

/// The sd of a per-task difference between independent arms at `base` and `base + effect`, `k`
/// rollouts a task.
pub fn model_sd(base: f64, effect: f64, k: u32) -> f64 {
    let p = base.clamp(0.0, 1.0);
    let q = (p + effect).clamp(0.0, 1.0);
    ((p * (1.0 - p) + q * (1.0 - q)) / f64::from(k.max(1))).sqrt()
}

/// The per-task sd when the gain is carried by a share of tasks that go from `base` to passing
/// (the rest unchanged): the within-task term of the changed and unchanged tasks plus the
/// between-task spread of the gain.
pub fn concentrated_sd(base: f64, effect: f64, k: u32) -> f64 {
    let p = base.clamp(0.0, 1.0);
    let gain = (1.0 - p).min(effect.max(0.0));
    if gain <= 0.0 || p >= 1.0 {
        return model_sd(base, effect, k);
    }
    let share = gain / (1.0 - p);
    let kf = f64::from(k.max(1));
    let within = ((1.0 - share) * 2.0 * p * (1.0 - p) + share * p * (1.0 - p)) / kf;
    let between = gain * gain * (1.0 - share) / share;
    (within + between).sqrt()
}

/// Tasks needed to detect `effect` with per-task difference sd `sd`: `max(2, ⌈(z·sd/effect)²⌉)`.
pub fn tasks_needed(sd: f64, effect: f64, alpha: f64, power: f64) -> u64 {
    if sd <= 0.0 {
        return MIN_HOLDOUT_TASKS;
    }
    let n = (z_total(alpha, power) * sd / effect).powi(2).ceil();
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a positive task count"
    )]
    let n = n as u64;
    n.max(MIN_HOLDOUT_TASKS)
}

/// The smallest effect `n_tasks` tasks detect at `base` with `k` rollouts a task (4 places), or
/// `None` under two tasks. At a base of 1.0 the model has no variance and this is 0.
pub fn detectable_effect(n_tasks: usize, base: f64, k: u32, power: f64, alpha: f64) -> Option<f64> {
    if n_tasks < 2 {
        return None;
    }
    let z = z_total(alpha, power);
    #[allow(clippy::cast_precision_loss, reason = "a task count")]
    let root_n = (n_tasks as f64).sqrt();
    let mut effect = 0.0;
    for _ in 0..FIXED_POINT_STEPS {
        effect = z * model_sd(base, effect, k) / root_n;
    }
    Some(super::round_places(effect.min(1.0), 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_the_reference_values() {
        assert!((inv_cdf(0.975) - 1.959_963_984_540_053_6).abs() < 1e-15);
        assert!((inv_cdf(0.8) - 0.841_621_233_572_914_4).abs() < 1e-15);
    }

    #[test]
    fn detectable_effects_match_the_reference() {
        let v: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/fixtures/vectors_measure.json"))
                .expect("vectors");
        for case in v["detectable_effect"].as_array().expect("cases") {
            let n = usize::try_from(case["n_tasks"].as_u64().expect("n")).expect("small");
            let base = case["base"].as_f64().expect("base");
            let k = u32::try_from(case["k"].as_u64().expect("k")).expect("small");
            assert_eq!(
                detectable_effect(n, base, k, 0.8, 0.05),
                case["effect"].as_f64(),
                "{case}"
            );
        }
        assert_eq!(detectable_effect(6, 1.0, 3, 0.8, 0.05), Some(0.0));
    }

    #[test]
    fn the_binomial_model_sizes_as_the_reference() {
        // holdout_size(0.05): 367 tasks, sd 0.3419, 409 when concentrated.
        let sd = model_sd(0.6, 0.05, 4);
        assert_eq!(crate::stats::round_places(sd, 4), 0.3419);
        assert_eq!(tasks_needed(sd, 0.05, 0.05, 0.8), 367);
        assert_eq!(
            tasks_needed(concentrated_sd(0.6, 0.05, 4), 0.05, 0.05, 0.8),
            409
        );
        // holdout_size(0.1, task_std=0.38): 114.
        assert_eq!(tasks_needed(0.38, 0.1, 0.05, 0.8), 114);
        assert_eq!(tasks_needed(0.0, 0.1, 0.05, 0.8), 2);
    }
}
