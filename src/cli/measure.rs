//! Measuring: `pass-at`, `markers`, `variance`, `compare`, `holdout-size`, `grade`, `gate`, `judge-trust`, `compare-judges`, `labels`.

use super::shared::{
    DeltaIntervalArg, HollowArgs, IntervalArg, JudgePool, QueryLimits, RowsOut, TrustFloors,
};
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// `wai compare-judges`.
#[derive(Debug, Args)]
pub(crate) struct CompareJudgesArgs {
    /// Rows with gold labels (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(required = true, value_name = "SCORED")]
    pub inputs: Vec<String>,
    /// A judge: `NAME=SPEC` with SPEC `verify:FILE.toml`, `sql:EXPR`, `cmd:COMMAND` or
    /// `llm:MODEL-SPEC` (repeat for each judge).
    #[arg(long = "judge", required = true, value_name = "NAME=SPEC")]
    pub judges: Vec<String>,
    /// LLM judges: the rubric, as text or a file (its listed items are also scored as markers).
    #[arg(long, value_name = "TEXT|FILE")]
    pub rubric: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub floors: TrustFloors,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pool: JudgePool,
}

/// `wai labels ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum LabelsCommand {
    /// Attach labels to rows: each row's `gold_reward` becomes the majority of its labels, with
    /// `gold_kind` saying who wrote them and every label kept in `extra.gold_labels`.
    ///
    /// LABELS is JSON Lines (`{"key": ..., "label": 0/1, "annotator": ...}`), a JSON array of such
    /// objects, or a `{"KEY": 0/1}` map. A key is a row's `rollout_id`, `task_id#rollout_index`,
    /// or a bare `task_id` naming its only rollout; a label may instead carry `rollout_id`,
    /// `task_id` with `rollout_index`, or `prompt` with `final_text`. Nothing is written when a key
    /// names more than one row, or when no label names a row.
    Attach(LabelsAttachArgs),
}

/// `wai labels attach`.
#[derive(Debug, Args)]
pub(crate) struct LabelsAttachArgs {
    /// Rows (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(value_name = "ROWS")]
    pub rows: String,
    /// The labels file.
    #[arg(value_name = "LABELS")]
    pub labels: PathBuf,
    /// Who wrote the labels (a label's own `kind` wins): human, program or model.
    #[arg(long, default_value = "human")]
    pub kind: String,
    /// The annotator of labels that name none.
    #[arg(long, value_name = "NAME")]
    pub annotator: Option<String>,
    /// Drop the labels a row already carries before attaching these.
    #[arg(long)]
    pub replace: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: RowsOut,
}

/// `wai judge-trust`.
#[derive(Debug, Args)]
pub(crate) struct JudgeTrustArgs {
    /// Scored rows with gold labels (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(required = true, value_name = "SCORED")]
    pub inputs: Vec<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub floors: TrustFloors,
    /// The pass-rate gap between short and long replies that flags length bias.
    #[arg(long, default_value_t = 0.15)]
    pub length_gap_flag: f64,
    /// The share of labeled rows the judge may leave fractional before the check is void.
    #[arg(long, default_value_t = 0.10)]
    pub max_skipped_share: f64,
    /// The judge under audit (`verify:FILE.toml`, `sql:EXPR`, `cmd:COMMAND`, `llm:MODEL-SPEC`;
    /// repeat to combine):
    /// re-judges a sample as-is and with neutral filler (consistency, length bias).
    #[arg(long = "judge", value_name = "SPEC")]
    pub judges: Vec<String>,
    /// Exploit probes to run with the judge: `all`, or names from filler, keyword_stuffing,
    /// success_claim, prompt_echo, sycophancy, empty_format, refusal.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "all|NAME,...",
        requires = "judges"
    )]
    pub probes: Vec<String>,
    /// The rubric (text, or a file) an LLM judge grades by and the keyword probe draws its words
    /// from: default for the probe, each row's
    /// system message.
    #[arg(long, value_name = "TEXT|FILE")]
    pub rubric: Option<String>,
    /// Graded rows re-judged (chosen by a seeded hash of their `rollout_id`).
    #[arg(long, default_value_t = 40)]
    pub sample: usize,
    /// The seed of that choice.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The flip (or exploit) rate that flags.
    #[arg(long, default_value_t = 0.10)]
    pub flip_flag: f64,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pool: JudgePool,
    /// Where DataFusion plans run.
    #[command(flatten)]
    pub cluster: crate::cli::ClusterArgs,
}

/// `wai compare`.
#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// Rows of the before arm (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(value_name = "BEFORE")]
    pub before: String,
    /// Rows of the after arm.
    #[arg(value_name = "AFTER")]
    pub after: String,
    /// The metric the gate reads: `pass_at_1` or `marker:NAME` (default: pass@1).
    #[arg(long, value_name = "METRIC")]
    pub target: Option<String>,
    /// Metrics that must not drop past the noise (names or `marker:NAME`, comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "METRIC")]
    pub must_not_regress: Vec<String>,
    /// Metrics where a drop is the win, beside the stock ones (refusal, hedging, ...).
    #[arg(long, value_delimiter = ',', value_name = "METRIC")]
    pub lower_is_better: Vec<String>,
    /// The slice table: a column, `dims.KEY`, or `none` (default: `category` when both arms
    /// share two or more of its values).
    #[arg(long, value_name = "COLUMN|dims.KEY|none")]
    pub by: Option<String>,
    /// A metric that must not rise without the target (over-optimisation check).
    #[arg(long, value_name = "METRIC")]
    pub proxy: Option<String>,
    /// The eval's re-run sd (from `wai variance`): one number for every metric, or
    /// `METRIC=X,...`.
    #[arg(long, value_name = "X|METRIC=X,...")]
    pub run_std: Option<String>,
    /// How many re-runs `--run-std` came from (the band then uses t at df = N - 1).
    #[arg(long, value_name = "N")]
    pub run_std_runs: Option<u32>,
    /// A column or `lineage` key naming each row's training seed: adds the seed-to-seed variance
    /// of trained arms to the headline interval.
    #[arg(long, value_name = "KEY")]
    pub train_runs: Option<String>,
    /// Trim each shared task to the same number of rollouts a side (seeded choice of rows).
    #[arg(long)]
    pub balance_rollouts: bool,
    /// Settings that differ on purpose, the change under test (prompt_hash, judge_version,
    /// temperature, max_tokens, user_model, writer_model): a note, not NOT COMPARABLE.
    #[arg(long, value_delimiter = ',', value_name = "SETTING")]
    pub changed: Vec<String>,
    /// Two-sided false-positive rate (intervals at 1 - alpha).
    #[arg(long, default_value_t = 0.05)]
    pub alpha: f64,
    /// Power of the sizing line.
    #[arg(long, default_value_t = 0.8)]
    pub power: f64,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Bootstrap replicates and sign flips.
    #[arg(long, default_value_t = 2000)]
    pub draws: u32,
    /// How the paired intervals are made (docs/statistics.md has the coverage of each).
    #[arg(long, value_enum, default_value_t = DeltaIntervalArg::T)]
    pub interval: DeltaIntervalArg,
    /// Where DataFusion plans run.
    #[command(flatten)]
    pub cluster: crate::cli::ClusterArgs,
}

/// `wai holdout-size`.
#[derive(Debug, Args)]
pub(crate) struct HoldoutArgs {
    /// The gain to detect (a pass-rate difference in (0, 1)).
    #[arg(long, value_name = "GAIN", required_unless_present = "tasks")]
    pub effect: Option<f64>,
    /// Instead: the gain this many tasks can detect.
    #[arg(long, value_name = "N")]
    pub tasks: Option<usize>,
    /// The base pass rate (read from `--before` when given).
    #[arg(long, default_value_t = 0.6)]
    pub base: f64,
    /// Rollouts per task (read from `--before` when given).
    #[arg(long, default_value_t = 4)]
    pub k: u32,
    /// Power.
    #[arg(long, default_value_t = 0.8)]
    pub power: f64,
    /// Two-sided false-positive rate.
    #[arg(long, default_value_t = 0.05)]
    pub alpha: f64,
    /// A known per-task sd of the difference (read off a compare interval).
    #[arg(long, value_name = "SD")]
    pub task_std: Option<f64>,
    /// Rows of a previous eval: base rate, k and their spread.
    #[arg(long, value_name = "ROWS")]
    pub before: Option<String>,
    /// Rows of the same tasks after a change: the paired sd.
    #[arg(long, value_name = "ROWS", requires = "before")]
    pub after: Option<String>,
    /// Seed of the range's bootstrap.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `wai variance`.
#[derive(Debug, Args)]
pub(crate) struct VarianceArgs {
    /// Rows of two or more runs of one task set (one input split by run key, or one input per
    /// run).
    #[arg(required = true, value_name = "RUN")]
    pub inputs: Vec<String>,
    /// The metric: `pass_at_1` or `marker:NAME`.
    #[arg(long, default_value = "pass_at_1")]
    pub metric: String,
    /// The run key: a column, else a key of `lineage` (default `lineage.eval_run`,
    /// then `lineage.scoring_run_id`).
    #[arg(long, value_name = "KEY")]
    pub by: Option<String>,
    /// Where DataFusion plans run.
    #[command(flatten)]
    pub cluster: crate::cli::ClusterArgs,
}

/// `wai grade`.
#[derive(Debug, Args)]
pub(crate) struct GradeArgs {
    /// Rows: files, folders, globs or URLs.
    #[arg(required = true, value_name = "ROWS")]
    pub inputs: Vec<String>,
    /// A judge: `verify:FILE.toml` (built-in verifiers), `sql:EXPR` (the reward as a SQL
    /// expression over a row), `sql:QUERY` or `sql:FILE.sql` (a query over table `rows` returning
    /// `rollout_id, reward[, reason, markers...]`), `cmd:COMMAND` (a program reading one JSON
    /// request per line), `llm:MODEL-SPEC` (a model: `llm:openai:gpt-4.1-mini`,
    /// `llm:endpoint:MODEL@URL`; see `--rubric`). Repeat to combine: a row scores its worst
    /// judge's reward.
    #[arg(long = "judge", required = true, value_name = "SPEC")]
    pub judges: Vec<String>,
    /// LLM judges: the rubric, as text or a file (each item it lists, `- ...` or `1. ...`, is
    /// also scored as a marker); without one an LLM judge grades the conduct floor.
    #[arg(long, value_name = "TEXT|FILE")]
    pub rubric: Option<String>,
    /// Where the scored rows go.
    #[command(flatten)]
    pub output: RowsOut,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pool: JudgePool,
    /// What a SQL judge may take.
    #[command(flatten)]
    pub limits: QueryLimits,
    /// The judge version stamped into `lineage.judge_version` (a verifier file's `version` wins).
    #[arg(long, value_name = "VERSION")]
    pub judge_version: Option<String>,
    /// This scoring run's id in `lineage.scoring_run_id` (default: a hash of the judges and
    /// inputs, so the same grade gives the same file).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Also gate: exit 1 when pass@1 is below this floor, 2 when the run is hollow.
    #[arg(long, value_name = "FLOOR")]
    pub gate: Option<f64>,
    /// What makes the run hollow.
    #[command(flatten)]
    pub hollow: HollowArgs,
    /// Where DataFusion plans run.
    #[command(flatten)]
    pub cluster: crate::cli::ClusterArgs,
}

/// `wai gate`.
#[derive(Debug, Args)]
pub(crate) struct GateArgs {
    /// Scored rows: files, folders, globs or URLs.
    #[arg(required = true, value_name = "SCORED")]
    pub inputs: Vec<String>,
    /// The lowest pass@1 that passes.
    #[arg(long, value_name = "FLOOR")]
    pub floor: f64,
    /// What makes the run hollow.
    #[command(flatten)]
    pub hollow: HollowArgs,
}

/// `wai pass-at`.
#[derive(Debug, Args)]
pub(crate) struct PassAtArgs {
    /// Rows: files, folders, globs or URLs.
    #[arg(required = true, value_name = "ROWS")]
    pub inputs: Vec<String>,
    /// The k of pass^k and pass@k; a list (`1,2,3,4`) prints a line for each. Default: the
    /// smallest group size of 2 or more.
    #[arg(long, value_delimiter = ',', value_name = "K")]
    pub k: Vec<u32>,
    /// pass^k and pass@k are n/a for k below this.
    #[arg(long, default_value_t = crate::stages::pass_at::MIN_K)]
    pub min_k: u32,
    /// Also print one line per value of a column or `dims.KEY` (repeatable).
    #[arg(long, value_name = "COLUMN|dims.KEY")]
    pub by: Vec<String>,
    /// Count tasks with fewer than k verdicts that all agree at their unanimous value.
    #[arg(long)]
    pub unanimous_short: bool,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Bootstrap replicates (read by `--interval percentile`).
    #[arg(long, default_value_t = crate::stats::bootstrap::DRAWS)]
    pub draws: u32,
    /// How the intervals are made (docs/statistics.md has the coverage of each).
    #[arg(long, value_enum, default_value_t = IntervalArg::Wilson)]
    pub interval: IntervalArg,
    /// Also measure the rows counted in FILE (written by `--save-counts` with the same `--by`,
    /// of rows other than these), without reading them again (repeatable).
    #[arg(long, value_name = "FILE")]
    pub add_counts: Vec<std::path::PathBuf>,
    /// Write the rows' sufficient statistics (per slice: each task's counts, the rows' facts) to
    /// FILE, for a later `--add-counts`.
    #[arg(long, value_name = "FILE")]
    pub save_counts: Option<std::path::PathBuf>,
    /// What the saved counts count, as the file records it (repeatable; default: the inputs).
    #[arg(long, value_name = "NAME", requires = "save_counts")]
    pub counts_cover: Vec<String>,
    /// Where DataFusion plans run.
    #[command(flatten)]
    pub cluster: crate::cli::ClusterArgs,
}

/// `wai markers`.
#[derive(Debug, Args)]
pub(crate) struct MarkersArgs {
    /// Rows: files, folders, globs or URLs.
    #[arg(required = true, value_name = "ROWS")]
    pub inputs: Vec<String>,
    /// Only these markers (repeatable); default: every marker seen.
    #[arg(long = "name", value_name = "MARKER")]
    pub names: Vec<String>,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Bootstrap replicates (read by `--interval percentile`).
    #[arg(long, default_value_t = crate::stats::bootstrap::DRAWS)]
    pub draws: u32,
    /// How the intervals are made (docs/statistics.md has the coverage of each).
    #[arg(long, value_enum, default_value_t = IntervalArg::Wilson)]
    pub interval: IntervalArg,
    /// Where DataFusion plans run.
    #[command(flatten)]
    pub cluster: crate::cli::ClusterArgs,
}
