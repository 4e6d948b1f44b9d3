//! Before against after: is the change real? (measure spec §4, the reference's `delta_report`).
//!
//! Metrics: pass@1 (binary rewards) and every marker both arms carry. Each is compared task by
//! task ([`crate::stats::paired`]): the paired delta, its bootstrap interval and a sign-flip
//! p-value. A noise floor, the re-run spread of the eval itself, comes from `--run-std` or from
//! the arms' own eval runs (`lineage.eval_run`, two or more a side); a delta inside its band is
//! eval noise, not a change. The verdict words follow, then the gate: `ok` is false on a
//! significant regression of the headline or of a guarded metric, on over-optimisation of a
//! proxy, and whenever the arms are not comparable.
//!
//! Fixes over the reference (its spec §9): without a target, a significant pass@1 drop fails the
//! gate (the reference printed FAIL with `ok` true); a different system-prompt hash is not
//! comparable and fails the gate (the reference kept `ok` true); settings that differ (judge
//! version, temperature, max_tokens) are not comparable unless named in `changed`, the change
//! under test; a target that was not measured fails the gate; the before and after means are
//! over the tasks the delta uses.

mod arm;
mod text;

use std::collections::{BTreeMap, BTreeSet};

use datafusion::prelude::SessionContext;
use serde::Serialize;

pub use arm::{Arm, Dictionary, PASS_AT_1};

use crate::error::{Error, Result};
use crate::stages::holdout;
use crate::stages::pass_at::{RunConfig, Slice};
use crate::stats::paired::{self, Comparison, Direction};
use crate::stats::{quantile, round_places, sizing, sum};

/// Markers where a drop is the win.
pub const LOWER_IS_BETTER_MARKERS: [&str; 6] = [
    "boilerplate",
    "self_reference",
    "hedging",
    "refusal",
    "sycophancy",
    "truncated",
];
/// Settings whose difference makes two arms not comparable unless declared the change.
pub const SETTINGS: [&str; 6] = [
    "prompt_hash",
    "judge_version",
    "temperature",
    "max_tokens",
    "user_model",
    "writer_model",
];
const CEILING_MIN_TASKS_WITH_ROOM: usize = 20;
const CEILING_ROOM_SHARE: f64 = 0.5;
const FAMILY_ERROR_MIN_METRICS: usize = 4;
const TRUNCATED_SHARE_GAP: f64 = 0.05;
const GRADED_SHARE_WARN: f64 = 0.95;
const WEAK_SLICE_SCORE: f64 = 0.5;
const MIN_RERUNS: u32 = 3;

/// How the arms are grouped for the slice table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum By {
    /// `category` when both arms share two or more of its values.
    Auto,
    /// No slice table.
    Off,
    /// This column or `dims` key.
    Slice(Slice),
}

/// What to compare and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// The metric the gate reads (`pass_at_1`, `marker:NAME`); default pass@1, ungated word.
    pub target: Option<String>,
    /// Metrics that must not drop significantly.
    pub must_not_regress: Vec<String>,
    /// Metrics where lower is better (beside the stock ones).
    pub lower_is_better: Vec<String>,
    /// The slice table.
    pub by: By,
    /// A metric that must not rise without the target (over-optimisation).
    pub proxy: Option<String>,
    /// The eval's re-run sd: one for every metric, or per metric.
    pub run_std: Option<RunStd>,
    /// How many re-runs `run_std` was measured on.
    pub run_std_runs: Option<u32>,
    /// A column or `lineage` key naming each row's training seed.
    pub train_runs: Option<String>,
    /// Trim each shared task to the same number of rows on both sides.
    pub balance_rollouts: bool,
    /// Settings that differ on purpose (the change under test).
    pub changed: Vec<String>,
    /// Two-sided false-positive rate; intervals are at `1 − alpha`.
    pub alpha: f64,
    /// Power for the sizing line.
    pub power: f64,
    /// Bootstrap replicates and sign flips.
    pub draws: u32,
    /// The seed.
    pub seed: u64,
    /// How the paired intervals are made (t by default, or the reference's percentile).
    pub interval: crate::stats::interval::Method,
    /// The before pass rate from which the eval is at its ceiling.
    pub ceiling_pass_rate: f64,
    /// The answered-share gap that makes arms not comparable without a noise band.
    pub answered_gap_points: f64,
    /// The answered-share test's level.
    pub answered_alpha: f64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            target: None,
            must_not_regress: Vec::new(),
            lower_is_better: Vec::new(),
            by: By::Auto,
            proxy: None,
            run_std: None,
            run_std_runs: None,
            train_runs: None,
            balance_rollouts: false,
            changed: Vec::new(),
            alpha: 0.05,
            power: 0.8,
            draws: crate::stats::bootstrap::DRAWS,
            seed: 0,
            interval: crate::stats::interval::Method::T,
            ceiling_pass_rate: holdout::CEILING_PASS_RATE,
            answered_gap_points: 0.10,
            answered_alpha: 0.01,
        }
    }
}

/// A given re-run sd.
#[derive(Debug, Clone, PartialEq)]
pub enum RunStd {
    /// The same for every metric.
    All(f64),
    /// Per metric (normalised names); a metric not named has no floor.
    Each(BTreeMap<String, f64>),
}

/// `pass_at_1` and `marker:*` as they are; any other name is a marker.
pub fn metric_key(name: &str) -> String {
    if name == PASS_AT_1 || name.starts_with("marker:") {
        name.to_owned()
    } else {
        format!("marker:{name}")
    }
}

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

/// Both arms, read, with the names they share.
#[derive(Debug)]
pub struct Arms {
    /// Before.
    pub before: Arm,
    /// After.
    pub after: Arm,
    /// Names.
    pub dict: Dictionary,
    /// Per-seed cells of each arm (`--train-runs`).
    pub seeds: Sides<Vec<(String, Vec<arm::Cell>)>>,
    /// The slicing (its name and source), when on: each arm's cells carry their slice.
    pub groups: Option<(String, &'static str)>,
    /// Balancing.
    pub balanced: Option<Balanced>,
}

/// Whether table `table` has a column `column`.
async fn has_column(ctx: &SessionContext, table: &str, column: &str) -> Result<bool> {
    Ok(ctx
        .table(table)
        .await?
        .schema()
        .field_with_unqualified_name(column)
        .is_ok())
}

/// The SQL expression of a slice.
fn slice_expr(slice: &Slice) -> String {
    match slice {
        Slice::Column(c) => format!("\"{}\"", c.replace('"', "\"\"")),
        Slice::Dim(k) => format!("map_extract(dims, '{}')[1]", k.replace('\'', "''")),
    }
}

/// Trims each task both tables share to the same number of rows (the smaller count), choosing the
/// rows kept by a seeded hash of each row; registers the trimmed tables as `{t}_balanced`.
async fn balance(ctx: &SessionContext, seed: u64) -> Result<Balanced> {
    let row_hash = |side: &str| {
        format!(
            "stable_hash(concat('{seed}:{side}:', coalesce(task_id, ''), ':', coalesce(rollout_id, ''), ':', \
             coalesce(CAST(rollout_index AS VARCHAR), ''), ':', coalesce(final_text, ''), ':', \
             coalesce(CAST(reward AS VARCHAR), ''), ':', coalesce(array_to_string(map_keys(markers), ','), ''), ':', \
             coalesce(array_to_string(map_values(markers), ','), '')))"
        )
    };
    for (side, other) in [("before", "after"), ("after", "before")] {
        let sql = format!(
            "WITH want AS (SELECT a.task_id, least(a.n, b.n) AS w FROM \
               (SELECT task_id, count(*) AS n FROM {side} GROUP BY task_id) a JOIN \
               (SELECT task_id, count(*) AS n FROM {other} GROUP BY task_id) b ON a.task_id = b.task_id), \
             ranked AS (SELECT t.*, row_number() OVER (PARTITION BY t.task_id ORDER BY {h}) AS __rank \
               FROM {side} t) \
             SELECT ranked.* FROM ranked LEFT JOIN want ON ranked.task_id = want.task_id \
             WHERE want.w IS NULL OR ranked.__rank <= want.w",
            h = row_hash(side)
        );
        let df = ctx.sql(&sql).await?;
        let cols: Vec<String> = ctx
            .table(side)
            .await?
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let df = df.select_columns(&cols.iter().map(String::as_str).collect::<Vec<_>>())?;
        ctx.register_table(format!("{side}_balanced"), df.into_view())?;
    }
    // What the trim drops follows from the per-task counts alone (no need to run the window).
    let mut out = Balanced::default();
    let trim = "(SELECT a.n AS na, b.n AS nb FROM \
                 (SELECT task_id, count(*) AS n FROM before GROUP BY task_id) a JOIN \
                 (SELECT task_id, count(*) AS n FROM after GROUP BY task_id) b ON a.task_id = b.task_id)";
    let batches = ctx
        .sql(&format!(
            "SELECT CAST(coalesce(sum(na - least(na, nb)), 0) AS BIGINT) AS before, \
               CAST(coalesce(sum(nb - least(na, nb)), 0) AS BIGINT) AS after, \
               count(CASE WHEN na <> nb THEN 1 END) AS trimmed FROM {trim}"
        ))
        .await?
        .collect()
        .await?;
    if let Some(b) = batches.first() {
        let c = crate::stages::cells::Cells(b);
        out.rows_dropped = Sides {
            before: c.count("before", 0)?,
            after: c.count("after", 0)?,
        };
        out.tasks_trimmed = c.count("trimmed", 0)?;
    }
    Ok(out)
}

/// Reads tables `before` and `after` of `ctx` as `opts` asks.
///
/// # Errors
/// A query failure, or a `--by` column the rows lack.
pub async fn read(ctx: &SessionContext, opts: &Options) -> Result<Arms> {
    let balanced = if opts.balance_rollouts {
        Some(balance(ctx, opts.seed).await?)
    } else {
        None
    };
    let (tb, ta) = if balanced.is_some() {
        ("before_balanced", "after_balanced")
    } else {
        ("before", "after")
    };
    let seed_expr = opts
        .train_runs
        .as_ref()
        .map(|key| crate::stages::variance::run_key(Some(key)));
    let slicing = match &opts.by {
        By::Off => None,
        By::Slice(s) => {
            let column = match s {
                Slice::Column(c) => c.as_str(),
                Slice::Dim(_) => crate::schema::col::DIMS,
            };
            for t in [tb, ta] {
                if !has_column(ctx, t, column).await? {
                    return Err(Error::Usage(format!(
                        "--by {}: the rows have no column `{column}`",
                        s.name()
                    )));
                }
            }
            Some((s.name(), "given", slice_expr(s)))
        }
        // Slices by `category` when both arms share two or more of its values (read off the
        // cells below, so no query of its own).
        By::Auto => {
            let category = crate::schema::col::CATEGORY;
            (has_column(ctx, tb, category).await? && has_column(ctx, ta, category).await?)
                .then(|| (category.to_owned(), "auto", category.to_owned()))
        }
    };
    // Plan everything first (plans bind their tables), then run every query at once: the two
    // arms (their cells split by slice) and their training seeds are independent scans.
    let started = std::time::Instant::now();
    let group = slicing.as_ref().map_or("''", |(_, _, expr)| expr.as_str());
    let planned = arm::plan_both(ctx, tb, ta, group).await?;
    let seed_scans = async {
        match &seed_expr {
            Some(expr) => Ok::<_, Error>(Some(tokio::try_join!(
                arm::scan_groups(ctx, tb, expr),
                arm::scan_groups(ctx, ta, expr)
            )?)),
            None => Ok(None),
        }
    };
    let (scan_b, scan_a, seed_scans) =
        tokio::try_join!(planned.0.run(ctx), planned.1.run(ctx), seed_scans)?;
    tracing::debug!(
        seconds = started.elapsed().as_secs_f64(),
        "compare: queries run"
    );
    let mut dict = Dictionary::default();
    let before = arm::build(scan_b, &mut dict)?;
    let after = arm::build(scan_a, &mut dict)?;
    let mut seeds = Sides::default();
    if let Some((sb, sa)) = &seed_scans {
        for (scan, into) in [(sb, &mut seeds.before), (sa, &mut seeds.after)] {
            let mut by_seed: BTreeMap<String, Vec<arm::Cell>> = BTreeMap::new();
            for c in arm::build_groups(scan, &mut dict)? {
                let name = dict.groups.name(c.group);
                if name != "(unset)" {
                    by_seed.entry(name.to_owned()).or_default().push(c);
                }
            }
            *into = by_seed.into_iter().collect();
        }
    }
    let groups = slicing.and_then(|(name, source, _)| {
        let values = |cells: &[arm::Cell]| -> BTreeSet<u32> {
            cells
                .iter()
                .map(|c| c.group)
                .filter(|g| dict.groups.name(*g) != "(unset)")
                .collect()
        };
        let common = values(&before.cells)
            .intersection(&values(&after.cells))
            .count();
        (source != "auto" || common >= 2).then_some((name, source))
    });
    Ok(Arms {
        before,
        after,
        dict,
        seeds,
        groups,
        balanced,
    })
}

/// The verdict word of a gain verdict.
fn word(gain: Direction) -> &'static str {
    match gain {
        Direction::BBetter => "moved",
        Direction::ABetter => "moved_the_wrong_way",
        Direction::NoDifference => "no_change_detected",
        Direction::Insufficient => "insufficient_data",
    }
}

/// The tag of a verdict read in its gain direction: `up`, `DOWN`, `flat`, `n/a`.
fn gain_tag(gain: Direction) -> &'static str {
    match gain {
        Direction::BBetter => "up",
        Direction::ABetter => "DOWN",
        Direction::NoDifference => "flat",
        Direction::Insufficient => "n/a",
    }
}

/// Per-run means of `metric` (the mean over tasks of each run's task means), in run order.
fn run_means(arm: &Arm, metric: u32, ranks: &[u32]) -> Vec<f64> {
    (0..u32::try_from(arm.runs.len()).unwrap_or(0))
        .filter_map(|r| {
            let t = arm::task_means(&arm.cells, metric, Some(r), None, ranks);
            sum::mean(&t.iter().map(|x| x.1).collect::<Vec<_>>())
        })
        .collect()
}

fn pairs(t: &[(u32, f64, u64)]) -> Vec<(u32, f64)> {
    t.iter().map(|x| (x.0, x.1)).collect()
}

fn fmt_ci(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(
        || "no interval".to_owned(),
        |[lo, hi]| format!("95% {lo:+.3}..{hi:+.3}"),
    )
}

/// Compares the arms.
///
/// # Errors
/// Options out of range, or a `--lower-is-better` name that is not a measured metric.
#[allow(
    clippy::too_many_lines,
    reason = "one report, assembled in the spec's order"
)]
pub fn report(arms: &Arms, opts: &Options) -> Result<DeltaReport> {
    if !(opts.alpha > 0.0 && opts.alpha < 1.0) || !(opts.power > 0.0 && opts.power < 1.0) {
        return Err(Error::Usage("--alpha and --power are in (0, 1)".into()));
    }
    if opts.draws == 0 {
        return Err(Error::Usage("`--draws` must be at least 1".into()));
    }
    if opts.run_std_runs.is_some() && opts.run_std.is_none() {
        return Err(Error::Usage("--run-std-runs needs --run-std".into()));
    }
    if opts.run_std_runs.is_some_and(|n| n < 2) {
        return Err(Error::Usage(
            "--run-std-runs is at least 2 (a sd needs two runs)".into(),
        ));
    }
    for s in &opts.changed {
        if !SETTINGS.contains(&s.as_str()) {
            return Err(Error::Usage(format!(
                "--changed names one of {}, not `{s}`",
                SETTINGS.join(", ")
            )));
        }
    }
    let level = 1.0 - opts.alpha;
    let (before, after, dict) = (&arms.before, &arms.after, &arms.dict);
    let ranks = dict.tasks.ranks();

    // Metrics: pass@1 and the markers on both sides, by name.
    let mut names: Vec<String> = Vec::new();
    for i in 0..u32::try_from(dict.metrics.len()).unwrap_or(0) {
        let name = dict.metrics.name(i);
        if name != PASS_AT_1 && arm::has(&before.cells, i) && arm::has(&after.cells, i) {
            names.push(name.to_owned());
        }
    }
    names.sort();
    names.insert(0, PASS_AT_1.to_owned());
    let id = |name: &str| dict.metrics.get(name);
    // Each metric's per-task means, all runs pooled: computed once, read by every part below.
    let pooled: BTreeMap<&str, Sides<Vec<(u32, f64, u64)>>> = names
        .iter()
        .map(|m| {
            let side = |a: &Arm| {
                id(m).map_or_else(Vec::new, |mid| {
                    arm::task_means(&a.cells, mid, None, None, &ranks)
                })
            };
            (
                m.as_str(),
                Sides {
                    before: side(before),
                    after: side(after),
                },
            )
        })
        .collect();
    let mut lower: BTreeMap<String, bool> = names
        .iter()
        .map(|m| {
            let stock = m
                .strip_prefix("marker:")
                .is_some_and(|n| LOWER_IS_BETTER_MARKERS.contains(&n));
            (m.clone(), stock)
        })
        .collect();
    for n in &opts.lower_is_better {
        let key = metric_key(n);
        match lower.get_mut(&key) {
            Some(v) => *v = true,
            None => {
                return Err(Error::Usage(format!(
                    "--lower-is-better {n}: no metric `{key}` on both sides (measured: {})",
                    names.join(", ")
                )));
            }
        }
    }
    let compare_opts = |seed: u64| paired::Options {
        draws: opts.draws,
        seed,
        min_paired: paired::MIN_PAIRED,
        level,
        method: opts.interval,
    };
    let mut comparisons: BTreeMap<String, Comparison> = BTreeMap::new();
    for (i, m) in names.iter().enumerate() {
        let c = paired::compare(
            &pairs(&pooled[m.as_str()].before),
            &pairs(&pooled[m.as_str()].after),
            &compare_opts(opts.seed + i as u64),
        );
        comparisons.insert(m.clone(), c);
    }
    let gain = |m: &str| {
        let v = comparisons[m].verdict;
        if lower[m] { v.mirrored() } else { v }
    };
    let target_key = opts.target.as_deref().map(metric_key);
    let target_measured = target_key
        .as_ref()
        .is_some_and(|t| comparisons.contains_key(t));
    let headline_metric = target_key
        .clone()
        .filter(|_| target_measured)
        .unwrap_or_else(|| PASS_AT_1.to_owned());

    // Seeds of training runs, and eval runs.
    let seeds = Sides {
        before: u32::try_from(arms.seeds.before.len()).unwrap_or(u32::MAX),
        after: u32::try_from(arms.seeds.after.len()).unwrap_or(u32::MAX),
    };
    let eval_runs = Sides {
        before: u32::try_from(before.runs.len())
            .unwrap_or(u32::MAX)
            .max(seeds.before),
        after: u32::try_from(after.runs.len())
            .unwrap_or(u32::MAX)
            .max(seeds.after),
    };

    // The noise floor.
    let mut floors: BTreeMap<String, Option<f64>> = BTreeMap::new();
    let mut source = None;
    match &opts.run_std {
        Some(RunStd::All(x)) => {
            source = Some("given");
            for m in &names {
                floors.insert(m.clone(), Some(*x));
            }
        }
        Some(RunStd::Each(map)) => {
            source = Some("given");
            for m in &names {
                floors.insert(m.clone(), map.get(m).copied());
            }
        }
        None if eval_runs.before.min(eval_runs.after) >= 2
            && before.runs.len() >= 2
            && after.runs.len() >= 2 =>
        {
            for m in &names {
                let floor = id(m).and_then(|mid| {
                    quantile::pooled_run_std(
                        &run_means(before, mid, &ranks),
                        &run_means(after, mid, &ranks),
                    )
                });
                floors.insert(m.clone(), floor);
            }
            if floors.values().any(Option::is_some) {
                source = Some("eval_run");
            }
        }
        None => {
            for m in &names {
                floors.insert(m.clone(), None);
            }
        }
    }
    let replicated = floors.get(&headline_metric).copied().flatten().is_some();
    let (n_a, n_b) = (eval_runs.before.max(1), eval_runs.after.max(1));
    let df = match source {
        Some("eval_run") => Some((n_a - 1) + (n_b - 1)),
        Some("given") => opts.run_std_runs.map(|r| r - 1),
        _ => None,
    };
    let q_text = match df {
        None => format!(
            "{:.2}",
            quantile::z_level(level).map_err(|e| Error::Usage(e.to_string()))?
        ),
        Some(d) => format!(
            "t(df={d})={:.2}",
            quantile::t_quantile(f64::from(d), level).map_err(|e| Error::Usage(e.to_string()))?
        ),
    };
    let noise_rule = format!("{q_text} x run_std x sqrt(1/{n_a} + 1/{n_b})");
    let band_of = |floor: f64| {
        quantile::noise_band(floor, n_a, n_b, df.map(f64::from), level)
            .map_err(|e| Error::Usage(e.to_string()))
    };

    // Each metric read.
    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    let guarded: Vec<String> = opts
        .must_not_regress
        .iter()
        .map(|m| metric_key(m))
        .collect();
    let (mut improved, mut regressions, mut slipped, mut within) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for m in &names {
        let c = comparisons[m].clone();
        let floor = floors.get(m).copied().flatten();
        let band = floor.map(band_of).transpose()?;
        let within_noise = matches!((band, c.delta), (Some(b), Some(d)) if d.abs() < b);
        let g = gain(m);
        let mut w = word(g);
        if within_noise && matches!(w, "moved" | "moved_the_wrong_way") {
            w = "within_eval_noise";
        }
        if w == "moved" && !replicated {
            w = "moved_unreplicated";
        }
        if within_noise {
            within.push(m.clone());
        } else {
            match g {
                Direction::ABetter if guarded.contains(m) => regressions.push(m.clone()),
                Direction::ABetter => slipped.push(m.clone()),
                Direction::BBetter => improved.push(m.clone()),
                _ => {}
            }
        }
        metrics.insert(
            m.clone(),
            Metric {
                comparison: c,
                lower_is_better: lower[m],
                gain_verdict: g,
                word: w,
                run_std: floor,
                noise_band: band,
                within_noise,
                noise_note: (source.is_some() && floor.is_none()).then_some("no_replicate_floor"),
            },
        );
    }
    let order = |v: &mut Vec<String>| v.sort_by_key(|m| names.iter().position(|n| n == m));
    order(&mut improved);
    order(&mut regressions);
    order(&mut slipped);
    order(&mut within);

    let mut warnings = Vec::new();
    let mut not_comparable: Vec<String> = Vec::new();
    let mut ok = regressions.is_empty();
    let head = &metrics[&headline_metric];
    let head_c = &head.comparison;

    // Training seeds.
    let train = opts.train_runs.as_ref().map(|_| {
        let seed_means = |s: &[(String, Vec<arm::Cell>)]| -> Vec<f64> {
            s.iter()
                .filter_map(|(_, cells)| {
                    let t = id(&headline_metric)
                        .map(|mid| arm::task_means(cells, mid, None, None, &ranks))
                        .unwrap_or_default();
                    sum::mean(&t.iter().map(|x| x.1).collect::<Vec<_>>())
                })
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
                    #[allow(clippy::cast_precision_loss, reason = "seed counts")]
                    {
                        variance += s * s / m.len() as f64;
                    }
                    dfs += m.len() - 1;
                    *slot = Some(s);
                }
                None => unresolved = true,
            }
        }
        let arm_mean = |s: &[f64], t: &[(u32, f64, u64)]| {
            if s.is_empty() {
                sum::mean(&t.iter().map(|x| x.1).collect::<Vec<_>>())
            } else {
                sum::mean(s)
            }
        };
        let head_means = &pooled[headline_metric.as_str()];
        let delta = match (
            arm_mean(&mb, &head_means.before),
            arm_mean(&ma, &head_means.after),
        ) {
            (Some(x), Some(y)) => Some(y - x),
            _ => None,
        };
        let t = if dfs > 0 {
            #[allow(clippy::cast_precision_loss, reason = "seed counts")]
            quantile::t_quantile(dfs as f64, level).unwrap_or(f64::NAN)
        } else {
            0.0
        };
        let ci = match (delta, head_c.ci95) {
            (Some(d), Some([lo, hi])) if !unresolved => {
                let half = (((hi - lo) / 2.0).powi(2) + t * t * variance).sqrt();
                Some([d - half, d + half])
            }
            _ => None,
        };
        TrainSeeds {
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
        }
    });

    // Verdict words.
    let word_of = |m: &str| metrics[m].word;
    let target_verdict = target_key.as_ref().map(|t| {
        if target_measured {
            word_of(t)
        } else {
            "target_not_measured"
        }
    });
    let mut headline_verdict = if target_measured {
        word_of(&headline_metric)
    } else {
        word_of(PASS_AT_1)
    };
    let gate_word = headline_verdict;
    if let Some(t) = &train {
        if t.unresolved && headline_verdict.starts_with("moved") {
            headline_verdict = "unresolved";
        } else if t.covers_zero && matches!(headline_verdict, "moved" | "moved_unreplicated") {
            headline_verdict = "no_change_detected";
        }
    }
    // The gate reads the headline metric with or without a target (the reference read only a
    // target, so a significant pass@1 drop passed without one).
    if gate_word == "moved_the_wrong_way" {
        ok = false;
    }
    if target_key.is_some() && !target_measured {
        ok = false;
        warnings.push(format!(
            "the target {} is not measured on both sides (measured: {}); the gate cannot pass on a metric it never saw",
            target_key.as_deref().unwrap_or_default(),
            names.join(", ")
        ));
    }

    // Proxy.
    let proxy_key = opts.proxy.as_deref().map(metric_key);
    let (mut proxy_verdict, mut proxy_delta, mut proxy_ci, mut over_optimized) =
        (None, None, None, false);
    if let Some(p) = &proxy_key {
        if !metrics.contains_key(p) {
            proxy_verdict = Some("proxy_not_measured");
            warnings.push(format!("the proxy {p} is not measured on both sides"));
        } else if *p == headline_metric {
            proxy_verdict = Some("proxy_is_target");
            warnings.push(format!(
                "the proxy {p} is the headline metric; name the metric the proxy stands in for as --target"
            ));
        } else {
            let pm = &metrics[p];
            proxy_verdict = Some(word(pm.gain_verdict));
            proxy_delta = pm.comparison.delta;
            proxy_ci = pm.comparison.ci95;
            let up = |m: &Metric| m.gain_verdict == Direction::BBetter && !m.within_noise;
            let gain_ci = |m: &Metric| {
                m.comparison.ci95.map(|[lo, hi]| {
                    if m.lower_is_better {
                        [-hi, -lo]
                    } else {
                        [lo, hi]
                    }
                })
            };
            let beyond = matches!((gain_ci(pm), gain_ci(head)), (Some([plo, _]), Some([_, thi])) if plo > thi);
            if up(pm) && (!up(head) || beyond) {
                over_optimized = true;
                ok = false;
                warnings.push(format!(
                    "OVER-OPTIMIZED: the proxy {p} rose {} ({}) while {headline_metric} {}; the policy is learning the proxy, not the goal",
                    pm.comparison.delta.map_or("n/a".into(), |d| format!("{d:+.3}")),
                    fmt_ci(pm.comparison.ci95),
                    if up(head) { "rose less" } else { "did not rise" }
                ));
            }
        }
    }

    // Comparability.
    let pass = &metrics[PASS_AT_1].comparison;
    if pass
        .paired_share
        .is_some_and(|s| s < paired::UNPAIRED_MAJORITY_SHARE)
        && pass.n_only_a + pass.n_only_b > 0
    {
        not_comparable.push("situations".into());
        warnings.push(format!(
            "NOT COMPARABLE: the two arms ran different task sets; {} of {} tasks are on both sides ({} only before, {} only after), so the delta is between two evals, not two policies. Re-run the after side on the before side's tasks.",
            pass.n_paired,
            pass.n_paired + pass.n_only_a + pass.n_only_b,
            pass.n_only_a,
            pass.n_only_b
        ));
    }
    let (cb, ca) = (&before.config, &after.config);
    let bar = head
        .noise_band
        .or_else(|| head_c.ci95.map(|[lo, hi]| (hi - lo) / 2.0));
    // Settings.
    let offline = |w: &Option<String>| {
        w.as_deref().map(|v| {
            if matches!(v, "seed" | "template" | "pinned" | "callable-writer") {
                "offline".to_owned()
            } else {
                v.to_owned()
            }
        })
    };
    let settings: [(&str, Option<String>, Option<String>, &str); 6] = [
        (
            "prompt_hash",
            cb.prompt_hash.clone(),
            ca.prompt_hash.clone(),
            "the system prompt differs (lineage.system_prompt_sha); if the prompt is the change under test, pass --changed prompt_hash",
        ),
        (
            "judge_version",
            cb.judge_version.clone(),
            ca.judge_version.clone(),
            "the arms were graded by different judge versions, so the delta mixes the policy with the ruler; re-grade both with one judge (wai grade)",
        ),
        (
            "temperature",
            cb.temperature.map(|t| format!("{t}")),
            ca.temperature.map(|t| format!("{t}")),
            "sampling temperature differs; pin it, or pass --changed temperature if it is the change under test",
        ),
        (
            "max_tokens",
            cb.max_tokens.map(|t| t.to_string()),
            ca.max_tokens.map(|t| t.to_string()),
            "the token cap differs, which moves truncation; pin it, or pass --changed max_tokens if it is the change under test",
        ),
        (
            "user_model",
            cb.user_model.clone(),
            ca.user_model.clone(),
            "the simulated user moved with the policy, so the delta measures the pair; pin one user model on both arms",
        ),
        (
            "writer_model",
            offline(&cb.writer_model),
            offline(&ca.writer_model),
            "the environment (the ask writer) moved with the weights, so this delta measures the pair, not the policy; pin one writer on both arms",
        ),
    ];
    for (name, b, a, why) in settings {
        if let (Some(b), Some(a)) = (&b, &a) {
            if b != a {
                if opts.changed.iter().any(|c| c == name) {
                    warnings.push(format!("{name} was {b:?} before and {a:?} after, declared the change under test (--changed)"));
                } else {
                    not_comparable.push(name.to_owned());
                    warnings.push(format!(
                        "NOT COMPARABLE: {name} was {b:?} before and {a:?} after; {why}"
                    ));
                }
            }
        }
    }
    if let (Some(x), Some(y)) = (cb.truncated_share, ca.truncated_share) {
        if (x - y).abs() > TRUNCATED_SHARE_GAP {
            warnings.push(format!(
                "the share of replies cut by the token cap moved from {x:.2} to {y:.2}; part of the delta may be truncation"
            ));
        }
    }
    if let (Some(x), Some(y)) = (&cb.policy_version, &ca.policy_version) {
        if x == y {
            warnings.push(format!(
                "both arms carry policy_version {x:?}: this compares a policy to itself, so any delta is eval noise"
            ));
        }
    }
    // Graded share: rows without a reward can bias the pass rate by up to d/(1 − d) a side.
    if let (Some(gb), Some(ga)) = (cb.graded_share, ca.graded_share) {
        let term = |g: f64| {
            let d = 1.0 - g;
            if d >= 1.0 { 1.0 } else { d / (1.0 - d) }
        };
        let bias = term(gb) + term(ga);
        if let Some(bar) = bar {
            if bias > bar && bias > 0.0 {
                let delta = head_c.delta.unwrap_or(0.0).abs();
                if bias >= delta {
                    not_comparable.push("graded_share".into());
                    warnings.push(format!(
                        "NOT COMPARABLE: {:.0}% of rows before and {:.0}% after carry a reward; the ungraded rows could move {headline_metric} by up to {bias:.3}, which covers the whole delta. Grade them (wai grade) or find why the judge skipped them.",
                        gb * 100.0,
                        ga * 100.0
                    ));
                } else {
                    warnings.push(format!(
                        "ungraded rows could move {headline_metric} by up to {bias:.3} (graded share {gb:.2} before, {ga:.2} after)"
                    ));
                }
            } else if gb.min(ga) < GRADED_SHARE_WARN {
                warnings.push(format!(
                    "graded share {gb:.2} before, {ga:.2} after: some rows carry no reward"
                ));
            }
        }
    }
    // Answered share: a two-proportion z test on the rows with a spoken reply.
    let (fb, fa) = (&before.facts, &after.facts);
    if fb.spoken_known > 0 && fa.spoken_known > 0 {
        #[allow(clippy::cast_precision_loss, reason = "row counts")]
        let (xb, nb, xa, na) = (
            fb.spoken_answered as f64,
            fb.spoken_known as f64,
            fa.spoken_answered as f64,
            fa.spoken_known as f64,
        );
        let pooled = (xb + xa) / (nb + na);
        if pooled > 0.0 && pooled < 1.0 {
            let se = (pooled * (1.0 - pooled) * (1.0 / nb + 1.0 / na)).sqrt();
            let gap = (xb / nb - xa / na).abs();
            let p = 2.0 * (1.0 - sizing::cdf(gap / se));
            if p < opts.answered_alpha {
                let mechanism = if fb.spoken_unclosed + fa.spoken_unclosed > 0 {
                    "an unclosed <think> block ate the reply"
                } else if fb.truncated_rows + fa.truncated_rows > 0 {
                    "the token cap cut replies off"
                } else {
                    "check finish_reason on the rows without a reply"
                };
                warnings.push(format!(
                    "the share of rows with a spoken reply moved from {:.2} to {:.2} (p {p:.2e}); likely mechanism: {mechanism}",
                    xb / nb,
                    xa / na
                ));
                if gap > head.noise_band.unwrap_or(opts.answered_gap_points) {
                    not_comparable.push("answered".into());
                    warnings.push(format!(
                        "NOT COMPARABLE: the answered share moved by {gap:.2}, more than the bar; the delta is about replying at all, not replying well"
                    ));
                }
            }
        }
    }
    if !not_comparable.is_empty() {
        ok = false;
    }

    // Ceiling.
    let mut ceiling = false;
    if pass.mean_a.is_some_and(|m| m >= opts.ceiling_pass_rate) {
        ceiling = true;
        warnings.push(format!(
            "The before run already passes {:.2} of tasks, so there is little room to measure improvement; use harder situations.",
            pass.mean_a.unwrap_or(0.0)
        ));
    } else {
        let p = &pooled[PASS_AT_1];
        let shared = paired::join(&pairs(&p.before), &pairs(&p.after)).0;
        let with_room = shared.iter().filter(|(b, _)| *b < 1.0).count();
        #[allow(clippy::cast_precision_loss, reason = "task counts")]
        if !shared.is_empty()
            && with_room < CEILING_MIN_TASKS_WITH_ROOM
            && (with_room as f64) < CEILING_ROOM_SHARE * shared.len() as f64
        {
            ceiling = true;
            warnings.push(format!(
                "only {with_room} of {} shared tasks leave the before run room to improve; use harder situations",
                shared.len()
            ));
        }
    }

    // Sizing.
    let k_eval = cb.k;
    let n_paired = head_c.n_paired;
    let detectable = (n_paired >= 2)
        .then(|| {
            // The binomial model sizes pass rates: its base is pass@1 before, whatever the headline.
            sizing::detectable_effect(
                n_paired,
                pass.mean_a.unwrap_or(holdout::BASE_PASS_RATE),
                k_eval,
                opts.power,
                opts.alpha,
            )
        })
        .flatten();
    let signed_gain = head_c
        .delta
        .map(|d| if head.lower_is_better { -d } else { d });
    let (mut tasks_needed, mut tasks_needed_source) = (None, None);
    if let Some(g) = signed_gain.filter(|g| *g > 0.0 && *g < 1.0) {
        let hopts = holdout::Options {
            effect: g,
            base: pass.mean_a.unwrap_or(holdout::BASE_PASS_RATE),
            k: k_eval,
            power: opts.power,
            alpha: opts.alpha,
            ceiling: opts.ceiling_pass_rate,
            seed: opts.seed,
            range: false,
            ..holdout::Options::default()
        };
        let rates = |t: &[(u32, f64, u64)]| -> Vec<holdout::TaskRate> {
            t.iter()
                .map(|&(task, rate, n)| holdout::TaskRate { task, rate, n })
                .collect()
        };
        let (rb, ra) = (
            rates(&pooled[PASS_AT_1].before),
            rates(&pooled[PASS_AT_1].after),
        );
        let sized = holdout::size(&hopts, Some(&rb), Some(&ra))
            .or_else(|_| holdout::size(&hopts, None, None));
        if let Ok(r) = sized {
            tasks_needed = Some(r.n_tasks);
            tasks_needed_source = Some(if r.sd_source == "rows" {
                "rows"
            } else {
                "model"
            });
        }
    }
    if headline_verdict == "no_change_detected" {
        if let Some(e) = detectable {
            let mut w = format!(
                "{n_paired} paired tasks at k={k_eval} can prove a gain of about {} at {:.0}% power (wai holdout-size).",
                // Two places as the reference prints it; four when that would read +0.00.
                if e >= 0.005 {
                    format!("{e:+.2}")
                } else {
                    format!("{e:+.4}")
                },
                opts.power * 100.0
            );
            if let (Some(n), Some(d)) = (tasks_needed, signed_gain) {
                w.push_str(&format!(
                    " The observed {d:+.3} would need about {n} tasks."
                ));
            }
            warnings.push(w);
        }
    }
    if ca.k != k_eval && ca.n_tasks > 0 && cb.n_tasks > 0 {
        warnings.push(format!(
            "k differs: {k_eval} rollouts a task before, {} after; pass@1 is comparable, pass^k is not",
            ca.k
        ));
    }

    // Family error.
    #[allow(
        clippy::cast_possible_wrap,
        clippy::cast_possible_truncation,
        reason = "a metric count"
    )]
    let family_error = round_places(1.0 - level.powi(names.len() as i32), 4);
    if names.len() >= FAMILY_ERROR_MIN_METRICS
        && !(improved.is_empty() && slipped.is_empty() && regressions.is_empty())
    {
        warnings.push(format!(
            "{} metrics at {:.0}%: up to {:.0}% chance that one of them clears zero on luck alone; read a single moved marker with care",
            names.len(),
            level * 100.0,
            family_error * 100.0
        ));
    }

    // Guards that cannot fail.
    let mut degenerate_guards = Vec::new();
    for g in &guarded {
        if let Some(mid) = id(g) {
            if arm::degenerate(&before.cells, mid) && arm::degenerate(&after.cells, mid) {
                degenerate_guards.push(g.clone());
                warnings.push(format!(
                    "the guard {g} takes one value on every row of both arms, so it cannot fail; check that it fires at all (a key-name mismatch looks the same)"
                ));
            }
        } else {
            warnings.push(format!("the guard {g} is not measured on either side"));
        }
    }

    // Warnings on the verdict.
    if let Some(t) = &target_key {
        if target_measured {
            let tm = &metrics[t];
            if tm.within_noise {
                warnings.push(format!(
                    "{t}: {} is inside the eval's own re-run band ({noise_rule} = {:.3}); re-running the eval moves it that much",
                    tm.comparison.delta.map_or("n/a".into(), |d| format!("{d:+.3}")),
                    tm.noise_band.unwrap_or(0.0)
                ));
            }
        }
    }
    for m in &regressions {
        let c = &metrics[m].comparison;
        warnings.push(format!(
            "REGRESSION {m}: {} ({}), named in --must-not-regress",
            c.delta.map_or("n/a".into(), |d| format!("{d:+.3}")),
            fmt_ci(c.ci95)
        ));
    }
    for m in &slipped {
        let c = &metrics[m].comparison;
        let (verb, tail) = if metrics[m].lower_is_better {
            ("rose", " (lower is better)")
        } else {
            ("dropped", "")
        };
        warnings.push(format!(
            "{m} {verb} {} ({}){tail}",
            c.delta.map_or("n/a".into(), |d| format!("{d:+.3}")),
            fmt_ci(c.ci95)
        ));
    }
    if !head_c.note.is_empty() {
        warnings.insert(0, format!("{headline_metric}: {}", head_c.note));
    }
    if source.is_none() && target_verdict == Some("moved_unreplicated") {
        warnings.push(
            "One eval run on each side, so this could be noise. Run each side three times (lineage.eval_run 0, 1, 2) and the report will say.".into(),
        );
    }
    let missing: Vec<&String> = names
        .iter()
        .filter(|m| source.is_some() && floors[*m].is_none())
        .collect();
    if !missing.is_empty() {
        warnings.push(format!(
            "no re-run floor for {}: their verdicts ignore eval noise",
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    match (source, opts.run_std_runs) {
        (Some("given"), None) => warnings.push(
            "--run-std was given without --run-std-runs, so the band uses 1.96 and reads it as the eval's exact spread. If it came from re-runs, pass --run-std-runs N (the n_runs of wai variance) so the band uses the t quantile at df = N - 1: 3 re-runs is 4.30, not 1.96.".into(),
        ),
        (Some("given"), Some(r)) if r < MIN_RERUNS => warnings.push(format!(
            "run_std comes from {r} re-runs: a difference, not a distribution; 3 or more give a sd worth reading"
        )),
        (Some("eval_run"), _) if eval_runs.before.min(eval_runs.after) < MIN_RERUNS => warnings.push(format!(
            "the floor comes from {} eval runs before and {} after; 3 or more a side give a sd worth reading",
            eval_runs.before, eval_runs.after
        )),
        _ => {}
    }
    if let Some(t) = &train {
        if t.unresolved {
            warnings.push(
                "a trained arm has one training seed, so seed-to-seed variance is unknown; train 2 or more seeds per arm".into(),
            );
        } else if t.covers_zero {
            warnings.push(format!(
                "with the seed-to-seed variance added, the interval {} covers zero: the gain does not survive a re-train",
                fmt_ci(t.ci95)
            ));
        }
    }

    // Slices.
    let slice_min_tasks = {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "small"
        )]
        let n = (2.0 / opts.alpha).log2().ceil() as usize;
        n.max(2)
    };
    let (mut groups, mut groups_down, mut groups_weak, mut by, mut by_source) =
        (None, Vec::new(), Vec::new(), None, None);
    if let Some((name, src)) = &arms.groups {
        let mut table = BTreeMap::new();
        let gid = id(&headline_metric);
        let in_after: BTreeSet<u32> = after.cells.iter().map(|c| c.group).collect();
        let gnames: BTreeSet<u32> = before
            .cells
            .iter()
            .map(|c| c.group)
            .filter(|g| in_after.contains(g))
            .collect();
        let mut sorted: Vec<(String, u32)> = gnames
            .into_iter()
            .map(|g| (dict.groups.name(g).to_owned(), g))
            .collect();
        sorted.sort();
        for (i, (gname, g)) in sorted.iter().enumerate() {
            let Some(mid) = gid else { break };
            let tb = arm::task_means(&before.cells, mid, None, Some(*g), &ranks);
            let ta = arm::task_means(&after.cells, mid, None, Some(*g), &ranks);
            if tb.is_empty() || ta.is_empty() {
                continue;
            }
            let c = paired::compare(
                &pairs(&tb),
                &pairs(&ta),
                &compare_opts(opts.seed + 100 + i as u64),
            );
            let lower_g = head.lower_is_better;
            let gv = if lower_g {
                c.verdict.mirrored()
            } else {
                c.verdict
            };
            let low_n = c.n_paired < slice_min_tasks;
            let is_rate = headline_metric == PASS_AT_1
                || [c.mean_a, c.mean_b]
                    .iter()
                    .all(|m| m.is_some_and(|v| (0.0..=1.0).contains(&v)));
            let mut reasons = Vec::new();
            if is_rate && !lower_g && c.mean_b.is_some_and(|m| m < WEAK_SLICE_SCORE) {
                reasons.push("low");
            }
            let at_ceiling = is_rate && c.mean_b.is_some_and(|m| m >= holdout::CEILING_PASS_RATE);
            if gv != Direction::BBetter && !at_ceiling && !low_n {
                reasons.push("no_gain");
            }
            if gv == Direction::ABetter {
                groups_down.push(gname.clone());
            }
            if !reasons.is_empty() {
                groups_weak.push(gname.clone());
            }
            table.insert(
                gname.clone(),
                Group {
                    rows_a: tb.iter().map(|t| t.2).sum(),
                    rows_b: ta.iter().map(|t| t.2).sum(),
                    comparison: c,
                    lower_is_better: lower_g,
                    gain_verdict: gv,
                    low_n,
                    weak: !reasons.is_empty(),
                    weak_reasons: reasons,
                },
            );
        }
        for g in &groups_down {
            let c = &table[g].comparison;
            warnings.push(format!(
                "slice {name}={g} moved the wrong way: {} ({})",
                c.delta.map_or("n/a".into(), |d| format!("{d:+.3}")),
                fmt_ci(c.ci95)
            ));
        }
        by = Some(name.clone());
        by_source = Some(*src);
        groups = Some(table);
    }

    // Repeats: the headline per eval run.
    let repeats = {
        let hid = id(&headline_metric);
        let split = |a: &Arm,
                     s: &[(String, Vec<arm::Cell>)],
                     all: &Vec<(u32, f64, u64)>|
         -> Vec<Vec<(u32, f64, u64)>> {
            let Some(mid) = hid else { return Vec::new() };
            if a.runs.len() >= 2 {
                (0..u32::try_from(a.runs.len()).unwrap_or(0))
                    .map(|r| arm::task_means(&a.cells, mid, Some(r), None, &ranks))
                    .collect()
            } else if s.len() >= 2 {
                s.iter()
                    .map(|(_, cells)| arm::task_means(cells, mid, None, None, &ranks))
                    .collect()
            } else {
                vec![all.clone()]
            }
        };
        let head_means = &pooled[headline_metric.as_str()];
        let (rb, ra) = (
            split(before, &arms.seeds.before, &head_means.before),
            split(after, &arms.seeds.after, &head_means.after),
        );
        let mean_of =
            |t: &Vec<(u32, f64, u64)>| sum::mean(&t.iter().map(|x| x.1).collect::<Vec<_>>());
        let run_means = Sides {
            before: rb.iter().filter_map(mean_of).collect::<Vec<f64>>(),
            after: ra.iter().filter_map(mean_of).collect::<Vec<f64>>(),
        };
        let range = |v: &[f64]| {
            (v.len() >= 2).then(|| {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                [lo, hi]
            })
        };
        let tag_of = |c: &Comparison, band: Option<f64>| -> &'static str {
            if band.is_some_and(|b| c.delta.is_some_and(|d| d.abs() < b)) {
                return "flat";
            }
            gain_tag(if head.lower_is_better {
                c.verdict.mirrored()
            } else {
                c.verdict
            })
        };
        let pooled_tag = tag_of(head_c, head.noise_band);
        let (mut deltas, mut tags, mut pairing) = (Vec::new(), Vec::new(), None);
        if rb.len() >= 2 || ra.len() >= 2 {
            let jobs: Vec<(Vec<(u32, f64)>, Vec<(u32, f64)>)> = if rb.len() == ra.len() {
                pairing = Some("run i before vs run i after");
                rb.iter()
                    .zip(&ra)
                    .map(|(x, y)| (pairs(x), pairs(y)))
                    .collect()
            } else if rb.len() > ra.len() {
                pairing = Some("each before run vs all after rows");
                let all = pairs(&head_means.after);
                rb.iter().map(|x| (pairs(x), all.clone())).collect()
            } else {
                pairing = Some("all before rows vs each after run");
                let all = pairs(&head_means.before);
                ra.iter().map(|y| (all.clone(), pairs(y))).collect()
            };
            for (i, (x, y)) in jobs.iter().enumerate() {
                let c = paired::compare(x, y, &compare_opts(opts.seed + 1000 + i as u64));
                deltas.push(c.delta);
                tags.push(tag_of(&c, None));
            }
        }
        let agree = (!tags.is_empty()).then(|| tags.iter().filter(|t| **t == pooled_tag).count());
        let n = tags.len().max(1);
        let note = match agree {
            Some(a) => format!("{a}/{n} runs agree"),
            None if source == Some("given") => "1 run, noise from the given run_std".into(),
            None => "1 run, noise unknown".into(),
        };
        Repeats {
            metric: headline_metric.clone(),
            n_runs: Sides {
                before: rb.len(),
                after: ra.len(),
            },
            range: Sides {
                before: range(&run_means.before),
                after: range(&run_means.after),
            },
            spread: Sides {
                before: range(&run_means.before).map(|[lo, hi]| hi - lo),
                after: range(&run_means.after).map(|[lo, hi]| hi - lo),
            },
            run_means,
            pairing,
            run_deltas: deltas,
            run_tags: tags,
            pooled_tag,
            agree,
            n,
            note,
        }
    };

    let mut report = DeltaReport {
        ok,
        headline_word: String::new(),
        not_comparable,
        target: target_key.clone(),
        target_verdict,
        headline_verdict,
        headline_metric: headline_metric.clone(),
        target_delta: target_key
            .as_ref()
            .filter(|_| target_measured)
            .and_then(|t| metrics[t].comparison.delta),
        target_ci95: target_key
            .as_ref()
            .filter(|_| target_measured)
            .and_then(|t| metrics[t].comparison.ci95),
        n_metrics: names.len(),
        alpha: opts.alpha,
        level,
        family_error,
        n_paired_tasks: pass.n_paired,
        n_unpaired_tasks: pass.n_only_a + pass.n_only_b,
        improved,
        regressions,
        slipped,
        lower_is_better: names.iter().filter(|m| lower[*m]).cloned().collect(),
        within_noise: within,
        run_std: floors.get(&headline_metric).copied().flatten(),
        run_std_by_metric: floors,
        run_std_source: source,
        run_std_runs: opts.run_std_runs,
        run_std_df: df,
        noise_band: head.noise_band,
        noise_rule,
        eval_runs,
        replicated,
        train,
        ceiling,
        detectable_effect: detectable,
        tasks_needed,
        tasks_needed_source,
        degenerate_guards,
        proxy: proxy_key,
        proxy_verdict,
        proxy_delta,
        proxy_ci95: proxy_ci,
        over_optimized,
        metrics,
        warnings,
        config: Sides {
            before: cb.clone(),
            after: ca.clone(),
        },
        balanced: arms.balanced.clone(),
        by,
        by_source,
        groups,
        groups_down,
        groups_weak,
        slice_min_tasks: arms.groups.as_ref().map(|_| slice_min_tasks),
        repeats,
        seed: opts.seed,
        draws: opts.draws,
    };
    report.headline_word = text::headline_word(&report);
    Ok(report)
}

/// Per-task binary pass rates of tables `before` and (when given) `after` of `ctx`, sorted by
/// task id, for holdout sizing.
///
/// # Errors
/// A query failure.
pub async fn pass_rates(
    ctx: &SessionContext,
    before: &str,
    after: Option<&str>,
) -> Result<(Vec<holdout::TaskRate>, Option<Vec<holdout::TaskRate>>)> {
    let mut dict = Dictionary::default();
    let b = arm::read(ctx, before, &mut dict).await?;
    let a = match after {
        Some(t) => Some(arm::read(ctx, t, &mut dict).await?),
        None => None,
    };
    let ranks = dict.tasks.ranks();
    let rates = |arm: &Arm| -> Vec<holdout::TaskRate> {
        dict.metrics
            .get(PASS_AT_1)
            .map(|m| arm::task_means(&arm.cells, m, None, None, &ranks))
            .unwrap_or_default()
            .into_iter()
            .map(|(task, rate, n)| holdout::TaskRate { task, rate, n })
            .collect()
    };
    Ok((rates(&b), a.as_ref().map(rates)))
}
