//! Holdout sizing: how many tasks an eval needs to detect a gain of `effect` (measure spec §5.2).
//!
//! The per-task sd of the difference comes, best first, from paired rows (`before` and `after`:
//! the sample sd of the per-task differences, the covariance pairing buys included), from a
//! given `task_std`, or from the binomial model at `base` with `k` rollouts a task
//! ([`crate::stats::sizing`]). With `before` rows alone, the base rate and k are read from them.
//! A baseline at the ceiling (or with no spread) cannot size anything: the report says so and
//! falls back to the model at the default base.
//!
//! The range `n_tasks_low..n_tasks_high` is a percentile bootstrap over the rows' tasks (our
//! `ChaCha` draws, family 4 of the seed), so it agrees with the reference's within resampling
//! error.

use rayon::prelude::*;
use serde::Serialize;

mod stage;

pub use stage::{HoldoutStage, Inputs, Sizing};

use crate::error::{Error, Result};
use crate::stats::{bootstrap, round_places, sizing, sum};

/// The default base pass rate.
pub const BASE_PASS_RATE: f64 = 0.6;
/// The default rollouts per task.
pub const ROLLOUTS_PER_TASK: u32 = 4;
/// The ceiling pass rate.
pub const CEILING_PASS_RATE: f64 = 0.9;

/// One task's binary pass rate and graded rollouts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskRate {
    /// The task (any key that sorts as the task ids do).
    pub task: u32,
    /// The pass rate.
    pub rate: f64,
    /// Graded binary rollouts.
    pub n: u64,
}

/// What to size.
#[derive(Debug, Clone)]
pub struct Options {
    /// The gain to detect, in (0, 1).
    pub effect: f64,
    /// The base pass rate (read from `before` when given).
    pub base: f64,
    /// Rollouts per task (read from `before` when given).
    pub k: u32,
    /// Power.
    pub power: f64,
    /// Two-sided false-positive rate.
    pub alpha: f64,
    /// A known per-task sd of the difference.
    pub task_std: Option<f64>,
    /// The ceiling pass rate.
    pub ceiling: f64,
    /// The bootstrap seed of the range.
    pub seed: u64,
    /// Whether to compute the bootstrap range of `n_tasks`.
    pub range: bool,
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        if !(self.effect > 0.0 && self.effect < 1.0) {
            return Err(Error::option(
                "effect",
                format!("is a gain in (0, 1), not {}", self.effect),
            ));
        }
        if !(0.0..=1.0).contains(&self.base) {
            return Err(Error::option(
                "base",
                format!("is a pass rate in [0, 1], not {}", self.base),
            ));
        }
        // A gain past a pass rate of 1 cannot be detected at any size: said, not sized.
        if self.base + self.effect > 1.0 {
            return Err(Error::option(
                "effect",
                format!(
                    "of {} on a base of {} would pass a rate of 1 ({:.3}): the largest gain from that base is {:.3}",
                    self.effect,
                    self.base,
                    self.base + self.effect,
                    1.0 - self.base
                ),
            ));
        }
        for (key, x) in [("power", self.power), ("alpha", self.alpha)] {
            if !(x > 0.0 && x < 1.0) {
                return Err(Error::option(key, "must be in (0, 1)"));
            }
        }
        if self.task_std.is_some_and(|s| s <= 0.0 || !s.is_finite()) {
            return Err(Error::option("task_std", "is a positive number"));
        }
        Ok(())
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            effect: 0.05,
            base: BASE_PASS_RATE,
            k: ROLLOUTS_PER_TASK,
            power: 0.8,
            alpha: 0.05,
            task_std: None,
            ceiling: CEILING_PASS_RATE,
            seed: 0,
            range: true,
        }
    }
}

/// The sizing report (the reference's `HoldoutSizeReport`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Tasks needed.
    pub n_tasks: u64,
    /// The gain sized for.
    pub effect: f64,
    /// The base pass rate used.
    pub base: f64,
    /// Rollouts per task used.
    pub k: u32,
    /// Power.
    pub power: f64,
    /// Two-sided false-positive rate.
    pub alpha: f64,
    /// The per-task sd of the difference (4 places).
    pub task_std: f64,
    /// Where the sd came from: `rows`, `given` or `model`.
    pub sd_source: &'static str,
    /// The interval half-width at `n_tasks` (4 places).
    pub half_width: f64,
    /// Tasks needed when the gain is carried by a few tasks (model only).
    pub n_tasks_concentrated: Option<u64>,
    /// The sd of the before rows' per-task pass rates (4 places).
    pub base_spread: Option<f64>,
    /// Paired tasks the sd was measured on.
    pub n_paired: Option<usize>,
    /// The baseline sits at the ceiling or has no spread: the model was used instead.
    pub saturated: bool,
    /// The low end of the bootstrap range of `n_tasks`.
    pub n_tasks_low: Option<u64>,
    /// The high end.
    pub n_tasks_high: Option<u64>,
    /// How the range was computed.
    pub n_tasks_range_method: Option<String>,
    /// What the numbers assume.
    pub notes: Vec<String>,
    /// What makes them unreliable.
    pub warnings: Vec<String>,
}

fn round4(x: f64) -> f64 {
    round_places(x, 4)
}

/// The sample sd with plain sums (for the range's replicates, where speed matters more than the
/// last bit).
fn quick_sd(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    (values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0)).sqrt()
}

/// The base pass rate (mean of the per-task rates) and k (the smallest group) of `rates`, or
/// `None` for no tasks.
pub fn base_and_k(rates: &[TaskRate]) -> Option<(f64, u32)> {
    let base = sum::mean(&rates.iter().map(|t| t.rate).collect::<Vec<_>>())?;
    let k = rates.iter().map(|t| t.n).min()?;
    Some((base, u32::try_from(k).unwrap_or(u32::MAX)))
}

/// The gain a task count can detect (binomial model).
#[derive(Debug, Clone, Serialize)]
pub struct Detectable {
    /// Tasks.
    pub n_tasks: usize,
    /// The base pass rate.
    pub base: f64,
    /// Rollouts per task.
    pub k: u32,
    /// Power.
    pub power: f64,
    /// Two-sided false-positive rate.
    pub alpha: f64,
    /// The smallest detectable gain (4 places), or `None` under two tasks.
    pub effect: Option<f64>,
}

/// The gain `n_tasks` tasks can detect at `opts`' base and k, or at those of `before` rows.
///
/// # Errors
/// `power` or `alpha` out of (0, 1).
pub fn detectable(
    n_tasks: usize,
    opts: &Options,
    before: Option<&[TaskRate]>,
) -> Result<Detectable> {
    crate::stages::Options::check(opts)?;
    let (base, k) = before.and_then(base_and_k).unwrap_or((opts.base, opts.k));
    Ok(Detectable {
        n_tasks,
        base,
        k,
        power: opts.power,
        alpha: opts.alpha,
        effect: sizing::detectable_effect(n_tasks, base, k, opts.power, opts.alpha),
    })
}

impl std::fmt::Display for Detectable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.effect {
            Some(e) => writeln!(
                f,
                "{} tasks at k={} and base {:.3} can detect a gain of about {e:+.4} at {:.0}% power, alpha {} (binomial model)",
                self.n_tasks,
                self.k,
                self.base,
                self.power * 100.0,
                self.alpha
            ),
            None => writeln!(
                f,
                "{} task(s): a comparison needs 2 or more tasks",
                self.n_tasks
            ),
        }
    }
}

/// The bootstrap range of the task count: `pool` (paired differences when `from_rows`, else
/// per-task base rates) resampled, each draw sized again; the 95% percentiles, widened to hold
/// `n`, and how they were drawn.
fn range(
    opts: &Options,
    pool: &[f64],
    from_rows: bool,
    base: f64,
    k: u32,
    n: u64,
) -> (Option<u64>, Option<u64>, Option<String>) {
    let draws = bootstrap::DRAWS;
    let mut ns: Vec<u64> = (0..draws)
        .into_par_iter()
        .map(|r| {
            use rand::Rng;
            let mut rng = bootstrap::rng_at(opts.seed, 4, r);
            let sample: Vec<f64> = (0..pool.len())
                .map(|_| pool[rng.random_range(0..pool.len())])
                .collect();
            let s = if from_rows {
                quick_sd(&sample)
            } else {
                sizing::model_sd(sum::mean(&sample).unwrap_or(base), opts.effect, k)
            };
            sizing::tasks_needed(s, opts.effect, opts.alpha, opts.power)
        })
        .collect();
    ns.sort_unstable();
    let sorted: Vec<f64> = ns.iter().map(|v| *v as f64).collect();
    let (lo, hi) = bootstrap::percentiles(&sorted, bootstrap::LEVEL);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a small positive count"
    )]
    let (low, high) = (n.min(lo as u64), n.max(hi as u64));
    let method = format!(
        "percentile bootstrap of the {} over {} tasks, {draws} draws, 95%",
        if from_rows {
            "paired sd"
        } else {
            "base pass rate"
        },
        pool.len()
    );
    (Some(low), Some(high), Some(method))
}

/// The paired differences of the tasks on both sides, their sd, and the before side's base and
/// smallest k over them.
struct Paired {
    diffs: Vec<f64>,
    sd: f64,
    base: f64,
    k: u32,
    n: usize,
}

/// [`Paired`] of `before` and `after` (`base` when the mean is undefined).
fn paired(before: &[TaskRate], after: &[TaskRate], base: f64) -> Result<Paired> {
    let pairs = crate::stats::paired::join_by(before, after, |t| t.task).0;
    if pairs.len() < 3 {
        return Err(Error::Input {
            stage: "holdout-size".into(),
            message: format!(
                "{} task(s) are on both sides; a paired sd needs 3 or more",
                pairs.len()
            ),
        });
    }
    let diffs: Vec<f64> = pairs.iter().map(|(x, y)| y.rate - x.rate).collect();
    Ok(Paired {
        sd: sum::sample_sd(&diffs).unwrap_or(0.0),
        diffs,
        base: sum::mean(&pairs.iter().map(|p| p.0.rate).collect::<Vec<_>>()).unwrap_or(base),
        k: u32::try_from(pairs.iter().map(|(x, y)| x.n.min(y.n)).min().unwrap_or(1))
            .unwrap_or(u32::MAX),
        n: pairs.len(),
    })
}

/// Why a saturated sizing is the model's answer, not a measurement: the before rows at the
/// ceiling, or paired differences without spread.
fn saturated_warning(base: f64, k: u32, opts: &Options) -> String {
    let what = if base >= opts.ceiling {
        format!(
            "CEILING: the before rows pass {base:.2} of tasks, at or above the ceiling {:.2}, so this suite cannot show a {:.2} gain; the binomial variance collapses and the formula would return its floor of 2 tasks, which is the model collapsing, not evidence",
            opts.ceiling, opts.effect
        )
    } else {
        "DEGENERATE: the per-task differences have no spread, so the formula would return its floor of 2 tasks, which is not evidence".to_owned()
    };
    format!(
        "{what}. n_tasks is the binomial model's answer at the default base {BASE_PASS_RATE:.2} with these rows' k={k}, not a measurement. Fix: harder situations, so the baseline sits inside the 20%-80% difficulty band, then size again on those rows."
    )
}

/// Sizes the holdout. `before` and `after` are per-task rates sorted by task.
///
/// # Errors
/// An option out of range, `after` without `before`, `before` without a binary row, or paired
/// rows with fewer than 3 shared tasks.
pub fn size(
    opts: &Options,
    before: Option<&[TaskRate]>,
    after: Option<&[TaskRate]>,
) -> Result<Report> {
    crate::stages::Options::check(opts)?;
    if after.is_some() && before.is_none() {
        return Err(Error::Input {
            stage: "holdout-size".into(),
            message: "after rows need before rows (the sd is of paired differences)".into(),
        });
    }
    let (mut base, mut k) = (opts.base, opts.k);
    let mut base_spread = None;
    let mut ratio = None;
    let mut notes = Vec::new();
    let mut warnings = Vec::new();
    if let Some(b) = before {
        if b.is_empty() {
            return Err(Error::Input {
                stage: "holdout-size".into(),
                message: "the before rows have no binary reward (0 or 1), so there is no base pass rate to size from".into(),
            });
        }
        let rates: Vec<f64> = b.iter().map(|t| t.rate).collect();
        (base, k) = base_and_k(b).unwrap_or((opts.base, opts.k));
        base_spread = sum::sample_sd(&rates);
        let pq = base * (1.0 - base);
        if let Some(var) = sum::population_var(&rates).filter(|_| rates.len() >= 2)
            && pq > 0.0
            && pq - var > 1e-12
        {
            ratio = Some(pq / (pq - var));
        }
    }
    let mut sd_source = "model";
    let mut n_paired = None;
    let mut diffs = Vec::new();
    let sd = if let (Some(b), Some(a)) = (before, after) {
        let p = paired(b, a, base)?;
        (diffs, base, k, n_paired, sd_source) = (p.diffs, p.base, p.k, Some(p.n), "rows");
        p.sd
    } else if let Some(s) = opts.task_std {
        sd_source = "given";
        s
    } else {
        sizing::model_sd(base, opts.effect, k)
    };
    let mut sd = sd;
    let mut saturated = false;
    if before.is_some() && sd_source != "given" && (base >= opts.ceiling || sd <= 0.0) {
        saturated = true;
        warnings.push(saturated_warning(base, k, opts));
        sd = sizing::model_sd(BASE_PASS_RATE, opts.effect, k);
        sd_source = "model";
        n_paired = None;
    }
    let n = sizing::tasks_needed(sd, opts.effect, opts.alpha, opts.power);
    let (mut n_low, mut n_high, mut method) = (None, None, None);
    if opts.range
        && !saturated
        && sd_source != "given"
        && let Some(b) = before
    {
        let pool: Vec<f64> = if sd_source == "rows" {
            diffs.clone()
        } else {
            b.iter().map(|t| t.rate).collect()
        };
        if pool.len() >= 3 {
            (n_low, n_high, method) = range(opts, &pool, sd_source == "rows", base, k, n);
        }
    }
    let n_concentrated = (sd_source == "model").then(|| {
        let p = if saturated { BASE_PASS_RATE } else { base };
        sizing::tasks_needed(
            sizing::concentrated_sd(p, opts.effect, k),
            opts.effect,
            opts.alpha,
            opts.power,
        )
    });
    match sd_source {
        "rows" => notes.push(format!(
            "task_std {sd:.3} measured as the sample sd of the per-task paired difference over {} tasks; no model, the covariance pairing buys is in it",
            n_paired.unwrap_or(0)
        )),
        "given" => notes.push(format!("task_std {sd:.3} given; the binomial model was not used")),
        _ => notes.push(format!(
            "n_tasks {n} assumes the gain is spread evenly across tasks and the two arms are independent draws. If the gain is carried by a few tasks (a trait only some prompts exercise) the same {:.3} gain needs about {} tasks (n_tasks_concentrated). Pass --before and --after rows of a previous eval to measure the paired sd, or --task-std read off a compare interval.",
            opts.effect,
            n_concentrated.unwrap_or(n)
        )),
    }
    if let (Some(r), Some(spread)) = (ratio, base_spread)
        && sd_source == "model"
        && !saturated
    {
        notes.push(format!(
            "per-task base pass rates spread sd {spread:.3}; the independent-arms model asks for {r:.2}x the tasks pairing needs at this spread (1 / (1 - Var(p_i) / (p(1-p))) with p {base:.2}). It understates when the gain is concentrated; --after rows decide which way this one errs."
        ));
    }
    let half_width = round4(sizing::inv_cdf(1.0 - opts.alpha / 2.0) * sd / (n as f64).sqrt());
    Ok(Report {
        n_tasks: n,
        effect: opts.effect,
        base: round4(base),
        k,
        power: opts.power,
        alpha: opts.alpha,
        task_std: round4(sd),
        sd_source,
        half_width,
        n_tasks_concentrated: n_concentrated,
        base_spread: base_spread.map(round4).or(before.map(|_| 0.0)),
        n_paired,
        saturated,
        n_tasks_low: n_low,
        n_tasks_high: n_high,
        n_tasks_range_method: method,
        notes,
        warnings,
    })
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let range = match (self.n_tasks_low, self.n_tasks_high) {
            (Some(lo), Some(hi)) => format!(" (95% {lo}..{hi})"),
            _ => String::new(),
        };
        writeln!(
            f,
            "holdout: {} tasks{range} to detect a {:+.3} gain at {:.0}% power, alpha {} (base {:.3}, k={}, task sd {:.4} from {}, half-width {:.4})",
            self.n_tasks,
            self.effect,
            self.power * 100.0,
            self.alpha,
            self.base,
            self.k,
            self.task_std,
            self.sd_source,
            self.half_width
        )?;
        if let Some(c) = self.n_tasks_concentrated {
            writeln!(f, "if the gain is carried by a few tasks: about {c} tasks")?;
        }
        for w in &self.warnings {
            writeln!(f, "! {w}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(values: &[(f64, u64)]) -> Vec<TaskRate> {
        values
            .iter()
            .enumerate()
            .map(|(i, (rate, n))| TaskRate {
                task: u32::try_from(i).unwrap(),
                rate: *rate,
                n: *n,
            })
            .collect()
    }

    #[test]
    fn model_given_and_ceiling_cases_match_the_reference() {
        let r = size(&Options::default(), None, None).unwrap();
        assert_eq!(
            (r.n_tasks, r.task_std, r.half_width, r.n_tasks_concentrated),
            (367, 0.3419, 0.035, Some(409))
        );
        let r = size(
            &Options {
                effect: 0.1,
                base: 0.3,
                k: 8,
                ..Options::default()
            },
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            (r.n_tasks, r.task_std, r.half_width, r.n_tasks_concentrated),
            (45, 0.2372, 0.0693, Some(86))
        );
        let r = size(
            &Options {
                effect: 0.1,
                task_std: Some(0.38),
                ..Options::default()
            },
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            (r.n_tasks, r.half_width, r.sd_source),
            (114, 0.0698, "given")
        );
        // Every task passes: saturated, the model at 0.6 with the rows' k = 3.
        let full = rates(&[(1.0, 3); 6]);
        let r = size(&Options::default(), Some(&full), None).unwrap();
        assert!(r.saturated);
        assert_eq!(
            (r.n_tasks, r.task_std, r.k, r.n_tasks_concentrated),
            (490, 0.3948, 3, Some(526))
        );
        assert!(r.warnings[0].starts_with("CEILING"));
    }

    #[test]
    fn bad_options_are_refused() {
        for opts in [
            Options {
                effect: 0.0,
                ..Options::default()
            },
            Options {
                effect: 1.0,
                ..Options::default()
            },
            Options {
                power: 1.0,
                ..Options::default()
            },
            Options {
                task_std: Some(0.0),
                ..Options::default()
            },
        ] {
            assert!(size(&opts, None, None).is_err(), "{opts:?}");
        }
        assert!(size(&Options::default(), None, Some(&rates(&[(0.5, 4)]))).is_err());
    }
}
