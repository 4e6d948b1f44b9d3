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
//! version, temperature, `max_tokens`) are not comparable unless named in `changed`, the change
//! under test; a target that was not measured fails the gate; the before and after means are
//! over the tasks the delta uses.

mod arm;
mod checks;
mod measure;
mod read;
mod report;
mod slices;
mod text;
mod verdict;

use std::collections::BTreeMap;

use datafusion::prelude::DataFrame;

pub use arm::{Arm, Dictionary, PASS_AT_1};
pub use read::{Arms, pass_rates, read};
pub use report::{Balanced, DeltaReport, Group, Metric, Repeats, Sides, TrainSeeds};
pub use verdict::report;

use crate::error::{Error, Result};
use crate::stages::Session;
use crate::stages::holdout;
use crate::stages::pass_at::Slice;

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
impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        for (key, x) in [("alpha", self.alpha), ("power", self.power)] {
            if !(x > 0.0 && x < 1.0) {
                return Err(Error::option(key, "must be in (0, 1)"));
            }
        }
        if self.draws == 0 {
            return Err(Error::option("draws", "must be at least 1"));
        }
        crate::stages::at_most(
            "draws",
            u64::from(self.draws),
            u64::from(crate::stages::MAX_DRAWS),
            "each draw resamples every task; 10,000 give intervals steady to the third decimal",
        )?;
        if self.run_std_runs.is_some() && self.run_std.is_none() {
            return Err(Error::option("run_std_runs", "needs `run_std`"));
        }
        if self.run_std_runs.is_some_and(|n| n < 2) {
            return Err(Error::option(
                "run_std_runs",
                "is at least 2 (a sd needs two runs)",
            ));
        }
        if let Some(s) = self
            .changed
            .iter()
            .find(|s| !SETTINGS.contains(&s.as_str()))
        {
            return Err(Error::option(
                "changed",
                format!("names one of {}, not `{s}`", SETTINGS.join(", ")),
            ));
        }
        Ok(())
    }
}

/// What the stage reads: the two arms' rows.
pub struct Inputs {
    /// The before arm.
    pub before: DataFrame,
    /// The after arm.
    pub after: DataFrame,
}

impl Inputs {
    /// The stage's inputs: `before` and `after`.
    pub fn new(before: DataFrame, after: DataFrame) -> Self {
        Self { before, after }
    }
}

/// The stage: before against after, with a noise floor and the gate.
pub struct CompareStage;

impl crate::stages::Stage for CompareStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = DeltaReport;
    const NAME: &'static str = "compare";

    async fn run(session: &Session, inputs: Inputs, options: &Options) -> Result<DeltaReport> {
        let started = std::time::Instant::now();
        let arms = read(session, inputs, options).await?;
        tracing::debug!(
            seconds = started.elapsed().as_secs_f64(),
            "compare: arms read"
        );
        let started = std::time::Instant::now();
        let report = report(&arms, options)?;
        tracing::debug!(
            seconds = started.elapsed().as_secs_f64(),
            "compare: report drawn"
        );
        Ok(report)
    }
}

#[cfg(test)]
mod testing;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::Options as _;

    fn key_of(opts: &Options) -> Option<String> {
        match opts.check() {
            Err(Error::Option { key, .. }) => Some(key),
            Err(e) => panic!("not an option error: {e}"),
            Ok(()) => None,
        }
    }

    #[test]
    fn options_are_checked_by_key() {
        assert_eq!(key_of(&Options::default()), None);
        let bad = |f: fn(&mut Options)| {
            let mut o = Options::default();
            f(&mut o);
            key_of(&o)
        };
        assert_eq!(bad(|o| o.alpha = 1.0).as_deref(), Some("alpha"));
        assert_eq!(bad(|o| o.power = 0.0).as_deref(), Some("power"));
        assert_eq!(bad(|o| o.draws = 0).as_deref(), Some("draws"));
        assert_eq!(
            bad(|o| o.run_std_runs = Some(3)).as_deref(),
            Some("run_std_runs")
        );
        assert_eq!(
            bad(|o| {
                o.run_std = Some(RunStd::All(0.1));
                o.run_std_runs = Some(1);
            })
            .as_deref(),
            Some("run_std_runs")
        );
        assert_eq!(
            bad(|o| o.changed = vec!["weather".into()]).as_deref(),
            Some("changed")
        );
    }

    #[test]
    fn names_are_metric_keys() {
        assert_eq!(metric_key("pass_at_1"), "pass_at_1");
        assert_eq!(metric_key("hedging"), "marker:hedging");
        assert_eq!(metric_key("marker:x"), "marker:x");
    }

    #[tokio::test]
    async fn the_stage_reads_two_frames_in_its_own_scope() {
        let session = Session::new().unwrap();
        let rows = |passes: usize| {
            let rows = (0..8).flat_map(|t| {
                (0..4).map(move |j| {
                    let reward = if j < passes { 1.0 } else { 0.0 };
                    serde_json::json!({"task_id": format!("t{t}"), "rollout_index": j,
                        "final_text": "done", "reward": reward})
                })
            });
            let batch = crate::pipeline::row::testing::batch_of(rows);
            session.context().read_batch(batch).unwrap()
        };
        let report = crate::stages::run::<CompareStage>(
            &session,
            Inputs::new(rows(1), rows(3)),
            &Options::default(),
        )
        .await
        .unwrap();
        assert_eq!(report.n_paired_tasks, 8);
        assert!((report.metrics[PASS_AT_1].comparison.delta.unwrap() - 0.5).abs() < 1e-12);
        // The arms' views stayed in the stage's scope.
        assert!(session.context().table("before").await.is_err());
    }
}
