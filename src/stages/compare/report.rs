//! The report's types: one metric's reading, the slice table, the per-run repeats, the training
//! seeds, and the whole comparison ([`DeltaReport`]).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::stages::pass_at::RunConfig;
use crate::stats::paired::{Comparison, Direction};

/// One metric's comparison and its reading.
#[derive(Debug, Clone, Serialize)]
pub struct Metric {
    /// The paired (or unpaired) comparison.
    #[serde(flatten)]
    pub comparison: Comparison,
    /// Whether a drop is the win.
    pub lower_is_better: bool,
    /// The verdict read in the metric's direction.
    pub gain_verdict: Direction,
    /// The verdict word.
    pub word: &'static str,
    /// The re-run sd floor.
    pub run_std: Option<f64>,
    /// The noise band it implies.
    pub noise_band: Option<f64>,
    /// `|delta|` under the band.
    pub within_noise: bool,
    /// Why there is no band when other metrics have one.
    pub noise_note: Option<&'static str>,
}

/// One slice of the `--by` table.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    /// The comparison within the slice.
    #[serde(flatten)]
    pub comparison: Comparison,
    /// Rows with a value before.
    pub rows_a: u64,
    /// Rows with a value after.
    pub rows_b: u64,
    /// Whether a drop is the win.
    pub lower_is_better: bool,
    /// The verdict read in the metric's direction.
    pub gain_verdict: Direction,
    /// Too few paired tasks to read any delta.
    pub low_n: bool,
    /// Why the slice is weak (`low`, `no_gain`).
    pub weak_reasons: Vec<&'static str>,
    /// Whether it is weak.
    pub weak: bool,
}

/// The per-run comparison of the headline.
#[derive(Debug, Clone, Serialize)]
pub struct Repeats {
    /// The metric.
    pub metric: String,
    /// Runs a side.
    pub n_runs: Sides<usize>,
    /// Each run's mean, a side.
    pub run_means: Sides<Vec<f64>>,
    /// The smallest and largest run mean, a side (two or more runs).
    pub range: Sides<Option<[f64; 2]>>,
    /// Their difference.
    pub spread: Sides<Option<f64>>,
    /// How runs were paired.
    pub pairing: Option<&'static str>,
    /// Each pair's delta.
    pub run_deltas: Vec<Option<f64>>,
    /// Each pair's tag (`up`, `DOWN`, `flat`, `n/a`).
    pub run_tags: Vec<&'static str>,
    /// The pooled comparison's tag.
    pub pooled_tag: &'static str,
    /// Pairs whose tag is the pooled tag.
    pub agree: Option<usize>,
    /// Pairs.
    pub n: usize,
    /// In a sentence.
    pub note: String,
}

/// One value a side.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct Sides<T> {
    /// Before.
    pub before: T,
    /// After.
    pub after: T,
}

/// The between-seed term of training runs.
#[derive(Debug, Clone, Serialize)]
pub struct TrainSeeds {
    /// Seeds a side (0 = untrained).
    pub seeds: Sides<usize>,
    /// The sd of the per-seed means, a trained side with two or more seeds.
    pub std: Sides<Option<f64>>,
    /// Degrees of freedom of the t quantile.
    pub df: usize,
    /// The delta of the arm means.
    pub delta: Option<f64>,
    /// Its interval with the seed term added.
    pub ci95: Option<[f64; 2]>,
    /// The rule, in words.
    pub rule: String,
    /// Whether the interval covers zero.
    pub covers_zero: bool,
    /// Whether a trained arm has fewer than two seeds.
    pub unresolved: bool,
}

/// What `--balance-rollouts` trimmed.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Balanced {
    /// Rows dropped, a side.
    pub rows_dropped: Sides<u64>,
    /// Tasks trimmed.
    pub tasks_trimmed: u64,
}

/// The comparison (the reference's `DeltaReport`).
#[derive(Debug, Clone, Serialize)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "the report's schema: one flag per finding"
)]
pub struct DeltaReport {
    /// The gate: true when nothing guarded regressed and the arms are comparable.
    pub ok: bool,
    /// The first printed word: PASS, NO DIFFERENCE, INCONCLUSIVE (...), FAIL, ...
    pub headline_word: String,
    /// Why the arms cannot be compared (`situations`, `prompt_hash`, `answered`, ...).
    pub not_comparable: Vec<String>,
    /// The target metric.
    pub target: Option<String>,
    /// The target's verdict word.
    pub target_verdict: Option<&'static str>,
    /// The headline metric's verdict word.
    pub headline_verdict: &'static str,
    /// The headline metric.
    pub headline_metric: String,
    /// The target's delta.
    pub target_delta: Option<f64>,
    /// Its interval.
    pub target_ci95: Option<[f64; 2]>,
    /// Metrics compared.
    pub n_metrics: usize,
    /// Two-sided false-positive rate.
    pub alpha: f64,
    /// Interval level.
    pub level: f64,
    /// The chance at least one metric clears zero on luck alone (4 places).
    pub family_error: f64,
    /// pass@1 tasks on both sides.
    pub n_paired_tasks: usize,
    /// pass@1 tasks on one side only.
    pub n_unpaired_tasks: usize,
    /// Metrics that moved the right way past the noise.
    pub improved: Vec<String>,
    /// Guarded metrics that moved the wrong way past the noise.
    pub regressions: Vec<String>,
    /// Unguarded metrics that moved the wrong way past the noise.
    pub slipped: Vec<String>,
    /// Metrics read with lower as better.
    pub lower_is_better: Vec<String>,
    /// Metrics whose delta is inside their noise band.
    pub within_noise: Vec<String>,
    /// The headline's re-run sd floor.
    pub run_std: Option<f64>,
    /// Each metric's floor.
    pub run_std_by_metric: BTreeMap<String, Option<f64>>,
    /// `given` or `eval_run`.
    pub run_std_source: Option<&'static str>,
    /// Re-runs behind a given `run_std`.
    pub run_std_runs: Option<u32>,
    /// Degrees of freedom of the band's t quantile.
    pub run_std_df: Option<u32>,
    /// The headline's noise band.
    pub noise_band: Option<f64>,
    /// The band rule, in words.
    pub noise_rule: String,
    /// Distinct eval runs (or training seeds) a side.
    pub eval_runs: Sides<u32>,
    /// Whether the headline has a floor.
    pub replicated: bool,
    /// Training seeds.
    pub train: Option<TrainSeeds>,
    /// The before arm leaves little room to improve.
    pub ceiling: bool,
    /// The smallest gain the paired tasks can detect.
    pub detectable_effect: Option<f64>,
    /// Tasks the observed gain would need.
    pub tasks_needed: Option<u64>,
    /// `rows` or `model`.
    pub tasks_needed_source: Option<&'static str>,
    /// Guarded metrics that never vary (the guard cannot fail).
    pub degenerate_guards: Vec<String>,
    /// The proxy metric.
    pub proxy: Option<String>,
    /// Its verdict word.
    pub proxy_verdict: Option<&'static str>,
    /// Its delta.
    pub proxy_delta: Option<f64>,
    /// Its interval.
    pub proxy_ci95: Option<[f64; 2]>,
    /// The proxy rose without the target.
    pub over_optimized: bool,
    /// Every metric, by name.
    pub metrics: BTreeMap<String, Metric>,
    /// What to read before trusting the verdict.
    pub warnings: Vec<String>,
    /// Each arm's run config.
    pub config: Sides<RunConfig>,
    /// What balancing trimmed.
    pub balanced: Option<Balanced>,
    /// What the slice table is by.
    pub by: Option<String>,
    /// `given` or `auto`.
    pub by_source: Option<&'static str>,
    /// The slice table.
    pub groups: Option<BTreeMap<String, Group>>,
    /// Slices that moved the wrong way.
    pub groups_down: Vec<String>,
    /// Weak slices.
    pub groups_weak: Vec<String>,
    /// Fewest paired tasks for a slice to be read.
    pub slice_min_tasks: Option<usize>,
    /// The headline per eval run.
    pub repeats: Repeats,
    /// Seed of the draws.
    pub seed: u64,
    /// Bootstrap replicates.
    pub draws: u32,
}
