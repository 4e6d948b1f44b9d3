//! The measurements: which metrics both arms carry, their per-task means and paired comparisons,
//! the noise floor (given or from the arms' eval runs), each metric's reading against it, and
//! the between-seed term of training runs.

use std::collections::BTreeMap;

use super::arm::{self, Arm};
use super::{
    Arms, LOWER_IS_BETTER_MARKERS, Metric, Options, PASS_AT_1, RunStd, Sides, TrainSeeds,
    metric_key,
};
use crate::error::{Error, Result};
use crate::stats::paired::{self, Comparison, Direction};
use crate::stats::{quantile, sum};

/// One task's mean: (task rank, mean, rows).
pub(super) type TaskMean = (u32, f64, u64);

/// The verdict word of a gain verdict.
pub(super) fn word(gain: Direction) -> &'static str {
    match gain {
        Direction::BBetter => "moved",
        Direction::ABetter => "moved_the_wrong_way",
        Direction::NoDifference => "no_change_detected",
        Direction::Insufficient => "insufficient_data",
    }
}

/// The tag of a verdict read in its gain direction: `up`, `DOWN`, `flat`, `n/a`.
pub(super) fn gain_tag(gain: Direction) -> &'static str {
    match gain {
        Direction::BBetter => "up",
        Direction::ABetter => "DOWN",
        Direction::NoDifference => "flat",
        Direction::Insufficient => "n/a",
    }
}

/// The (task, mean) pairs of per-task means.
pub(super) fn pairs(t: &[TaskMean]) -> Vec<(u32, f64)> {
    t.iter().map(|x| (x.0, x.1)).collect()
}

/// The mean of per-task means.
pub(super) fn mean_of(t: &[TaskMean]) -> Option<f64> {
    sum::mean(&t.iter().map(|x| x.1).collect::<Vec<_>>())
}

/// An interval as the warnings print it.
pub(super) fn fmt_ci(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(
        || "no interval".to_owned(),
        |[lo, hi]| format!("95% {lo:+.3}..{hi:+.3}"),
    )
}

/// A delta as the warnings print it.
pub(super) fn fmt_delta(delta: Option<f64>) -> String {
    delta.map_or("n/a".into(), |d| format!("{d:+.3}"))
}

/// Per-run means of `metric` (the mean over tasks of each run's task means), in run order.
fn run_means(arm: &Arm, metric: u32, ranks: &[u32]) -> Vec<f64> {
    (0..u32::try_from(arm.runs.len()).unwrap_or(0))
        .filter_map(|r| mean_of(&arm::task_means(&arm.cells, metric, Some(r), None, ranks)))
        .collect()
}

/// What every part of the report reads: the arms, the options, the metrics both arms carry and
/// their per-task means (all runs pooled), computed once.
pub(super) struct Basis<'a> {
    /// The arms.
    pub arms: &'a Arms,
    /// The options.
    pub opts: &'a Options,
    /// The interval level, `1 − alpha`.
    pub level: f64,
    /// Each task's rank in text order.
    pub ranks: Vec<u32>,
    /// pass@1 first, then the markers both arms carry, by name.
    pub names: Vec<String>,
    /// Each metric's per-task means, a side.
    pub pooled: BTreeMap<String, Sides<Vec<TaskMean>>>,
    /// Whether a drop is the win, by metric.
    pub lower: BTreeMap<String, bool>,
}

/// The metrics both arms carry: pass@1 first, then the markers by name.
pub(super) fn metric_names(arms: &Arms) -> Vec<String> {
    let dict = &arms.dict;
    let mut names: Vec<String> = Vec::new();
    for i in 0..u32::try_from(dict.metrics.len()).unwrap_or(0) {
        let name = dict.metrics.name(i);
        if name != PASS_AT_1 && arm::has(&arms.before.cells, i) && arm::has(&arms.after.cells, i) {
            names.push(name.to_owned());
        }
    }
    names.sort();
    names.insert(0, PASS_AT_1.to_owned());
    names
}

/// Which of `names` read lower as better: the stock markers and those `lower_is_better` names.
///
/// # Errors
/// A name in `lower_is_better` that is not a metric of `names`.
pub(super) fn lower_is_better(
    names: &[String],
    lower_is_better: &[String],
) -> Result<BTreeMap<String, bool>> {
    let mut lower: BTreeMap<String, bool> = names
        .iter()
        .map(|m| {
            let stock = m
                .strip_prefix("marker:")
                .is_some_and(|n| LOWER_IS_BETTER_MARKERS.contains(&n));
            (m.clone(), stock)
        })
        .collect();
    for n in lower_is_better {
        let key = metric_key(n);
        match lower.get_mut(&key) {
            Some(v) => *v = true,
            None => {
                return Err(Error::option(
                    "lower_is_better",
                    format!(
                        "{n}: no metric `{key}` on both sides (measured: {})",
                        names.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(lower)
}

impl<'a> Basis<'a> {
    /// The metrics of `arms` and their per-task means.
    ///
    /// # Errors
    /// A `lower_is_better` name that is not a measured metric.
    pub(super) fn new(arms: &'a Arms, opts: &'a Options) -> Result<Self> {
        let ranks = arms.dict.tasks.ranks();
        let names = metric_names(arms);
        let pooled = names
            .iter()
            .map(|m| {
                let side = |a: &Arm| {
                    arms.dict.metrics.get(m).map_or_else(Vec::new, |mid| {
                        arm::task_means(&a.cells, mid, None, None, &ranks)
                    })
                };
                (
                    m.clone(),
                    Sides {
                        before: side(&arms.before),
                        after: side(&arms.after),
                    },
                )
            })
            .collect();
        let lower = lower_is_better(&names, &opts.lower_is_better)?;
        Ok(Self {
            arms,
            opts,
            level: 1.0 - opts.alpha,
            ranks,
            names,
            pooled,
            lower,
        })
    }

    /// The number of metric `name`, if either arm has it.
    pub(super) fn id(&self, name: &str) -> Option<u32> {
        self.arms.dict.metrics.get(name)
    }

    /// The paired comparison's options, at `seed`.
    pub(super) fn compare_opts(&self, seed: u64) -> paired::Options {
        paired::Options {
            draws: self.opts.draws,
            seed,
            min_paired: paired::MIN_PAIRED,
            level: self.level,
            method: self.opts.interval,
        }
    }

    /// Each metric's pooled comparison (metric i draws from seed + i).
    pub(super) fn comparisons(&self) -> BTreeMap<String, Comparison> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let p = &self.pooled[m.as_str()];
                let c = paired::compare(
                    &pairs(&p.before),
                    &pairs(&p.after),
                    &self.compare_opts(self.opts.seed + i as u64),
                );
                (m.clone(), c)
            })
            .collect()
    }

    /// Per-task means of metric `name` in `cells`.
    pub(super) fn task_means(&self, cells: &[arm::Cell], name: &str) -> Vec<TaskMean> {
        self.id(name)
            .map(|mid| arm::task_means(cells, mid, None, None, &self.ranks))
            .unwrap_or_default()
    }
}

/// Training seeds a side.
pub(super) fn seed_counts(arms: &Arms) -> Sides<u32> {
    Sides {
        before: u32::try_from(arms.seeds.before.len()).unwrap_or(u32::MAX),
        after: u32::try_from(arms.seeds.after.len()).unwrap_or(u32::MAX),
    }
}

/// The noise floor: each metric's re-run sd, where it came from, and the band rule.
pub(super) struct Noise {
    /// Distinct eval runs (or training seeds) a side.
    pub eval_runs: Sides<u32>,
    /// Each metric's floor.
    pub floors: BTreeMap<String, Option<f64>>,
    /// `given` or `eval_run`.
    pub source: Option<&'static str>,
    /// Degrees of freedom of the band's t quantile.
    pub df: Option<u32>,
    /// The band rule, in words.
    pub rule: String,
    runs: (u32, u32),
    level: f64,
}

impl Noise {
    /// The floors of `b`'s metrics.
    ///
    /// # Errors
    /// The level has no quantile.
    pub(super) fn new(b: &Basis, seeds: &Sides<u32>) -> Result<Self> {
        let (before, after) = (&b.arms.before, &b.arms.after);
        let eval_runs = Sides {
            before: u32::try_from(before.runs.len())
                .unwrap_or(u32::MAX)
                .max(seeds.before),
            after: u32::try_from(after.runs.len())
                .unwrap_or(u32::MAX)
                .max(seeds.after),
        };
        let (floors, source) = floors(b, &eval_runs);
        let (n_a, n_b) = (eval_runs.before.max(1), eval_runs.after.max(1));
        let df = match source {
            Some("eval_run") => Some((n_a - 1) + (n_b - 1)),
            Some("given") => b.opts.run_std_runs.map(|r| r - 1),
            _ => None,
        };
        let q_text = match df {
            None => format!(
                "{:.2}",
                quantile::z_level(b.level).map_err(|e| Error::Usage(e.to_string()))?
            ),
            Some(d) => format!(
                "t(df={d})={:.2}",
                quantile::t_quantile(f64::from(d), b.level)
                    .map_err(|e| Error::Usage(e.to_string()))?
            ),
        };
        Ok(Self {
            eval_runs,
            floors,
            source,
            df,
            rule: format!("{q_text} x run_std x sqrt(1/{n_a} + 1/{n_b})"),
            runs: (n_a, n_b),
            level: b.level,
        })
    }

    /// The floor of metric `m`.
    pub(super) fn floor(&self, m: &str) -> Option<f64> {
        self.floors.get(m).copied().flatten()
    }

    /// The band a floor implies.
    ///
    /// # Errors
    /// The level has no quantile.
    pub(super) fn band(&self, floor: f64) -> Result<f64> {
        quantile::noise_band(
            floor,
            self.runs.0,
            self.runs.1,
            self.df.map(f64::from),
            self.level,
        )
        .map_err(|e| Error::Usage(e.to_string()))
    }
}

/// Each metric's floor and the floors' source: the given `run_std`, else the spread of the arms'
/// eval runs (two or more a side), else none.
fn floors(
    b: &Basis,
    eval_runs: &Sides<u32>,
) -> (BTreeMap<String, Option<f64>>, Option<&'static str>) {
    let (before, after) = (&b.arms.before, &b.arms.after);
    let names = &b.names;
    match &b.opts.run_std {
        Some(RunStd::All(x)) => (
            names.iter().map(|m| (m.clone(), Some(*x))).collect(),
            Some("given"),
        ),
        Some(RunStd::Each(map)) => (
            names
                .iter()
                .map(|m| (m.clone(), map.get(m).copied()))
                .collect(),
            Some("given"),
        ),
        None if eval_runs.before.min(eval_runs.after) >= 2
            && before.runs.len() >= 2
            && after.runs.len() >= 2 =>
        {
            let floors: BTreeMap<String, Option<f64>> = names
                .iter()
                .map(|m| {
                    let floor = b.id(m).and_then(|mid| {
                        quantile::pooled_run_std(
                            &run_means(before, mid, &b.ranks),
                            &run_means(after, mid, &b.ranks),
                        )
                    });
                    (m.clone(), floor)
                })
                .collect();
            let source = floors.values().any(Option::is_some).then_some("eval_run");
            (floors, source)
        }
        None => (names.iter().map(|m| (m.clone(), None)).collect(), None),
    }
}

/// Every metric read against its floor, and the metrics that moved, sorted in metric order.
pub(super) struct Readings {
    /// Every metric, by name.
    pub metrics: BTreeMap<String, Metric>,
    /// Metrics that moved the right way past the noise.
    pub improved: Vec<String>,
    /// Guarded metrics that moved the wrong way past the noise.
    pub regressions: Vec<String>,
    /// Unguarded metrics that moved the wrong way past the noise.
    pub slipped: Vec<String>,
    /// Metrics whose delta is inside their noise band.
    pub within: Vec<String>,
}

/// Reads each comparison against its floor (`replicated`: the headline has a floor).
///
/// # Errors
/// The level has no quantile.
pub(super) fn read_metrics(
    b: &Basis,
    comparisons: &BTreeMap<String, Comparison>,
    noise: &Noise,
    guarded: &[String],
    replicated: bool,
) -> Result<Readings> {
    let mut out = Readings {
        metrics: BTreeMap::new(),
        improved: Vec::new(),
        regressions: Vec::new(),
        slipped: Vec::new(),
        within: Vec::new(),
    };
    for m in &b.names {
        let c = comparisons[m].clone();
        let floor = noise.floor(m);
        let band = floor.map(|f| noise.band(f)).transpose()?;
        let within_noise = matches!((band, c.delta), (Some(b), Some(d)) if d.abs() < b);
        let gain = if b.lower[m] {
            c.verdict.mirrored()
        } else {
            c.verdict
        };
        let mut w = word(gain);
        if within_noise && matches!(w, "moved" | "moved_the_wrong_way") {
            w = "within_eval_noise";
        }
        if w == "moved" && !replicated {
            w = "moved_unreplicated";
        }
        if within_noise {
            out.within.push(m.clone());
        } else {
            match gain {
                Direction::ABetter if guarded.contains(m) => out.regressions.push(m.clone()),
                Direction::ABetter => out.slipped.push(m.clone()),
                Direction::BBetter => out.improved.push(m.clone()),
                _ => {}
            }
        }
        let metric = Metric {
            comparison: c,
            lower_is_better: b.lower[m],
            gain_verdict: gain,
            word: w,
            run_std: floor,
            noise_band: band,
            within_noise,
            noise_note: (noise.source.is_some() && floor.is_none()).then_some("no_replicate_floor"),
        };
        out.metrics.insert(m.clone(), metric);
    }
    let order = |v: &mut Vec<String>| v.sort_by_key(|m| b.names.iter().position(|n| n == m));
    order(&mut out.improved);
    order(&mut out.regressions);
    order(&mut out.slipped);
    order(&mut out.within);
    Ok(out)
}

/// The between-seed term of training runs (with `train_runs`): the headline's delta of the arm
/// means, its interval widened by the seed-to-seed variance.
pub(super) fn train_seeds(
    b: &Basis,
    headline: &str,
    head: &Comparison,
    seeds: &Sides<u32>,
) -> Option<TrainSeeds> {
    b.opts.train_runs.as_ref()?;
    let arms = b.arms;
    let seed_means = |s: &[(String, Vec<arm::Cell>)]| -> Vec<f64> {
        s.iter()
            .filter_map(|(_, cells)| mean_of(&b.task_means(cells, headline)))
            .collect()
    };
    let (mb, ma) = (
        seed_means(&arms.seeds.before),
        seed_means(&arms.seeds.after),
    );
    let (mut variance, mut dfs) = (0.0, 0usize);
    let mut std = Sides::default();
    let mut unresolved = false;
    for (m, slot, n) in [
        (&mb, &mut std.before, seeds.before),
        (&ma, &mut std.after, seeds.after),
    ] {
        if n == 0 {
            continue;
        }
        match sum::sample_sd(m) {
            Some(s) => {
                variance += s * s / m.len() as f64;
                dfs += m.len() - 1;
                *slot = Some(s);
            }
            None => unresolved = true,
        }
    }
    let arm_mean = |s: &[f64], t: &[TaskMean]| {
        if s.is_empty() {
            mean_of(t)
        } else {
            sum::mean(s)
        }
    };
    let head_means = &b.pooled[headline];
    let delta = match (
        arm_mean(&mb, &head_means.before),
        arm_mean(&ma, &head_means.after),
    ) {
        (Some(x), Some(y)) => Some(y - x),
        _ => None,
    };
    let t = if dfs > 0 {
        quantile::t_quantile(dfs as f64, b.level).unwrap_or(f64::NAN)
    } else {
        0.0
    };
    let ci = match (delta, head.ci95) {
        (Some(d), Some([lo, hi])) if !unresolved => {
            let half = (((hi - lo) / 2.0).powi(2) + t * t * variance).sqrt();
            Some([d - half, d + half])
        }
        _ => None,
    };
    Some(TrainSeeds {
        seeds: Sides {
            before: arms.seeds.before.len(),
            after: arms.seeds.after.len(),
        },
        std,
        df: dfs,
        delta,
        ci95: ci,
        rule: format!(
            "half-width = sqrt(task half-width^2 + t(df={dfs})^2 x sum of seed sd^2 / seeds)"
        ),
        covers_zero: ci.is_some_and(|[lo, hi]| lo <= 0.0 && hi >= 0.0),
        unresolved,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{arms, pass_arms, pass_rows};
    use super::*;

    #[test]
    fn words_and_tags_read_the_gain_direction() {
        assert_eq!(word(Direction::BBetter), "moved");
        assert_eq!(word(Direction::ABetter), "moved_the_wrong_way");
        assert_eq!(gain_tag(Direction::ABetter), "DOWN");
        assert_eq!(gain_tag(Direction::Insufficient), "n/a");
        assert_eq!(fmt_delta(None), "n/a");
        assert_eq!(fmt_ci(Some([-0.1, 0.25])), "95% -0.100..+0.250");
    }

    #[test]
    fn metrics_are_pass_at_1_then_the_markers_both_arms_carry() {
        let one = [1.0];
        let a = arms(
            &[
                ("t1", PASS_AT_1, None, &one),
                ("t1", "marker:zeal", None, &one),
                ("t1", "marker:hedging", None, &one),
                ("t1", "marker:only_before", None, &one),
            ],
            &[
                ("t1", PASS_AT_1, None, &one),
                ("t1", "marker:hedging", None, &one),
                ("t1", "marker:zeal", None, &one),
            ],
        );
        let names = metric_names(&a);
        assert_eq!(names, ["pass_at_1", "marker:hedging", "marker:zeal"]);
        let lower = lower_is_better(&names, &["zeal".into()]).unwrap();
        assert!(lower["marker:hedging"] && lower["marker:zeal"] && !lower[PASS_AT_1]);
        let e = lower_is_better(&names, &["nope".into()]).unwrap_err();
        assert!(matches!(e, Error::Option { ref key, .. } if key == "lower_is_better"));
    }

    #[test]
    fn a_given_run_std_is_every_metric_s_floor() {
        let rows = pass_rows(10, |i| i % 4);
        let a = pass_arms(&rows, &rows);
        let opts = Options {
            run_std: Some(RunStd::All(0.02)),
            ..Options::default()
        };
        let b = Basis::new(&a, &opts).unwrap();
        let noise = Noise::new(&b, &seed_counts(&a)).unwrap();
        assert_eq!(noise.source, Some("given"));
        assert_eq!(noise.floor(PASS_AT_1), Some(0.02));
        assert!(noise.band(0.02).unwrap() > 0.02);
        assert_eq!(noise.rule, "1.96 x run_std x sqrt(1/1 + 1/1)");
        // No floor, no band: the same arms read as unreplicated.
        let plain = Options::default();
        let b = Basis::new(&a, &plain).unwrap();
        let noise = Noise::new(&b, &seed_counts(&a)).unwrap();
        assert_eq!((noise.source, noise.floor(PASS_AT_1)), (None, None));
    }

    #[test]
    fn a_planted_gain_reads_as_moved_and_a_drop_as_the_wrong_way() {
        let (low, high) = (pass_rows(40, |_| 1), pass_rows(40, |_| 3));
        for (before, after, want) in [
            (&low, &high, "moved_unreplicated"),
            (&high, &low, "moved_the_wrong_way"),
        ] {
            let a = pass_arms(before, after);
            let opts = Options::default();
            let b = Basis::new(&a, &opts).unwrap();
            let noise = Noise::new(&b, &seed_counts(&a)).unwrap();
            let guarded = [PASS_AT_1.to_owned()];
            let r = read_metrics(&b, &b.comparisons(), &noise, &guarded, false).unwrap();
            let m = &r.metrics[PASS_AT_1];
            assert_eq!(m.word, want);
            assert!((m.comparison.delta.unwrap().abs() - 0.5).abs() < 1e-12);
            let moved = if want.starts_with("moved_the") {
                &r.regressions
            } else {
                &r.improved
            };
            assert_eq!(moved, &[PASS_AT_1.to_owned()]);
        }
    }
}
