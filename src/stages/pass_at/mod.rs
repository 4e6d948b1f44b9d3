//! pass@1, pass^k and pass@k with task-bootstrap intervals.
//!
//! What it computes: per task (`task_id`), `n` graded binary rollouts and `c` passes; pass@1 =
//! the mean per-task rate `c/n` (tasks weighted equally, not rows); pass^k = mean of
//! `C(c,k)/C(n,k)` (τ-bench); pass@k = mean of `1 − C(n−c,k)/C(n,k)` (Chen et al.); headroom =
//! pass@k − pass@1. k defaults to the smallest group size of 2 or more (else 1).
//!
//! The reward reader (one for every stage): `reward` = 0 or 1 is a binary verdict and counts;
//! any other number is a partial score, counted in `n_partial` and named in the note; null is
//! unjudged, counted in `n_unjudged`. Nothing else is read (no `qwen_reward` fallback, no strings
//! or booleans: those are bad rows at ingest).
//!
//! Inputs: `task_id`, `reward`; the run config also reads `judge_status`, `reason`,
//! `finish_reason`, `final_text`, `sampling`, `policy_version`, `judge_meta`, `lineage`,
//! `user_model`, `writer_model`, and `messages` only for rows whose `final_text` is blank.
//! Columns a table lacks are read as null.
//!
//! Intervals: over tasks, never rows, for each of the three numbers; none under 3 tasks. By
//! default the Wilson score interval on the effective number of tasks; `interval = percentile`
//! gives the reference's percentile bootstrap ([`crate::stats::interval`], whose docs give the
//! formulas and the coverage study that chose them). Under
//! [`crate::stats::interval::RELIABLE_TASKS`] tasks the note says the interval is approximate.
//!
//! Determinism: tasks are ordered by `task_id`, sums are correctly rounded, and bootstrap
//! replicate r draws from stream r of the seed, so the output does not depend on row order,
//! batch size, partitions or threads.
//!
//! References: measure spec §2; Chen et al. 2021 (Codex), Yao et al. 2024 (τ-bench).

mod counts;
mod estimate;
mod text;

pub use counts::Counts;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::functions_nested::expr_fn::array_element;
use datafusion::prelude::{DataFrame, Expr, SessionContext, col, lit};

pub use estimate::{
    Facts, PassAt, RunConfig, TaskCounts, default_k, estimate, no_interval_note, run_config,
};

use crate::error::{Error, Result};
use crate::queries::stage;
use crate::schema::col as c;
use crate::stages::cells::{Cells, count};

/// Default smallest k for which pass^k and pass@k are reported.
pub const MIN_K: u32 = 4;

/// What `--by` slices on: a row column, or a key of `dims`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Slice {
    /// A column such as `category` or `model_version`.
    Column(String),
    /// A key of `dims`, such as `tier`.
    Dim(String),
}

impl Slice {
    /// Parses `dims.KEY` or a column name.
    pub fn parse(s: &str) -> Self {
        match s.strip_prefix("dims.") {
            Some(key) => Self::Dim(key.to_owned()),
            None => Self::Column(s.to_owned()),
        }
    }

    /// How it is named in output: `dims.tier`, `category`.
    pub fn name(&self) -> String {
        match self {
            Self::Column(c) => c.clone(),
            Self::Dim(k) => format!("dims.{k}"),
        }
    }
}

/// Options of the stage.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Slicings reported beside the overall numbers, each a column or a `dims` key.
    #[serde(default)]
    pub by: Vec<Slice>,
    /// The k values; empty = the reference's default.
    #[serde(default)]
    pub k: Vec<u32>,
    /// pass^k and pass@k are n/a for k below this.
    #[serde(default = "default_min_k")]
    pub min_k: u32,
    /// Let groups shorter than k whose labels all agree count at their unanimous value.
    #[serde(default)]
    pub unanimous_short: bool,
    /// Bootstrap seed.
    #[serde(default)]
    pub seed: u64,
    /// Bootstrap replicates.
    #[serde(default = "default_draws")]
    pub draws: u32,
    /// How the intervals are made.
    #[serde(default)]
    pub interval: crate::stats::interval::Method,
}

fn default_min_k() -> u32 {
    MIN_K
}

fn default_draws() -> u32 {
    crate::stats::bootstrap::DRAWS
}

impl Default for Options {
    fn default() -> Self {
        Self {
            by: Vec::new(),
            k: Vec::new(),
            min_k: MIN_K,
            unanimous_short: false,
            seed: 0,
            draws: default_draws(),
            interval: crate::stats::interval::Method::default(),
        }
    }
}

/// The input columns the stage reads, with the row schema's types.
const READS: [(&str, DataType); 12] = [
    (c::TASK_ID, DataType::Utf8),
    (c::REWARD, DataType::Float64),
    (c::JUDGE_STATUS, DataType::Utf8),
    (c::REASON, DataType::Utf8),
    (c::FINISH_REASON, DataType::Utf8),
    (c::FINAL_TEXT, DataType::Utf8),
    (c::SAMPLING, DataType::Utf8),
    (c::POLICY_VERSION, DataType::Utf8),
    (c::JUDGE_META, DataType::Utf8),
    (c::LINEAGE, DataType::Utf8),
    (c::USER_MODEL, DataType::Utf8),
    (c::WRITER_MODEL, DataType::Utf8),
];

/// The value a row has for `slice` (as text), or `''` for no slicing.
fn slice_expr(input: &DataFrame, slice: Option<&Slice>) -> Result<Expr> {
    let need = |name: &str| -> Result<()> {
        if input.schema().field_with_unqualified_name(name).is_ok() {
            return Ok(());
        }
        Err(Error::missing_column(
            "pass-at",
            name,
            input.schema().as_arrow(),
        ))
    };
    Ok(match slice {
        None => lit(""),
        Some(Slice::Column(name)) => {
            need(name)?;
            datafusion::functions::expr_fn::coalesce(vec![
                datafusion::logical_expr::cast(col(name), DataType::Utf8),
                lit("(unset)"),
            ])
        }
        Some(Slice::Dim(key)) => {
            need(c::DIMS)?;
            let value = array_element(
                datafusion::functions_nested::expr_fn::map_extract(col(c::DIMS), lit(key.as_str())),
                lit(1i64),
            );
            datafusion::functions::expr_fn::coalesce(vec![value, lit("(unset)")])
        }
    })
}

/// Registers the rows the stage reads, with a `slice` column, as `__pass_at_rows`.
fn register(ctx: &SessionContext, input: DataFrame, slice: Option<&Slice>) -> Result<()> {
    let schema = input.schema().clone();
    crate::schema::check_columns(schema.as_arrow(), &[c::TASK_ID], "pass-at")?;
    let mut exprs = vec![slice_expr(&input, slice)?.alias("slice")];
    for (name, ty) in READS {
        exprs.push(if schema.field_with_unqualified_name(name).is_ok() {
            col(name)
        } else {
            lit(ScalarValue::try_from(&ty)?).alias(name)
        });
    }
    let messages = if schema.field_with_unqualified_name(c::MESSAGES).is_ok() {
        col(c::MESSAGES)
    } else {
        let ty = crate::schema::row_schema()
            .field_with_name(c::MESSAGES)?
            .data_type()
            .clone();
        lit(ScalarValue::try_from(&ty)?).alias(c::MESSAGES)
    };
    exprs.push(messages);
    let rows = input.select(exprs)?;
    ctx.deregister_table("__pass_at_rows")?;
    ctx.register_table("__pass_at_rows", rows.into_view())?;
    Ok(())
}

/// Plans the per-task counts and the per-slice facts. Lazy: reads nothing yet.
pub async fn plan(
    ctx: &SessionContext,
    input: DataFrame,
    slice: Option<&Slice>,
) -> Result<(DataFrame, DataFrame)> {
    register(ctx, input, slice)?;
    let tasks = ctx.sql(stage::PASS_AT_TASKS.sql).await?;
    let facts = ctx.sql(stage::PASS_AT_FACTS.sql).await?;
    Ok((tasks, facts))
}

/// One slice's per-task counts and facts, materialised.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SliceData {
    /// The slice value (`''` without slicing).
    pub value: String,
    /// Tasks with their counts, ordered by task id.
    pub tasks: Vec<TaskCounts>,
    /// Rows with a partial reward.
    pub n_partial: u64,
    /// Rows without a reward.
    pub n_unjudged: u64,
    /// Facts for notes and config.
    pub facts: Facts,
}

fn strings(batch: &RecordBatch, name: &str) -> Result<Vec<Option<String>>> {
    let a = batch
        .column_by_name(name)
        .ok_or_else(|| Error::Internal(format!("no column `{name}`")))?;
    let a = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
    Ok(a.as_string::<i32>()
        .iter()
        .map(|v| v.map(str::to_owned))
        .collect())
}

fn ints(batch: &RecordBatch, name: &str) -> Result<Vec<Option<i64>>> {
    let a = batch
        .column_by_name(name)
        .ok_or_else(|| Error::Internal(format!("no column `{name}`")))?;
    let a = datafusion::arrow::compute::cast(a, &DataType::Int64)?;
    Ok(a.as_primitive::<Int64Type>().iter().collect())
}

/// Runs the plans of [`plan`] and gathers each slice's data (one slice without slicing).
pub async fn collect(
    ctx: &SessionContext,
    tasks: DataFrame,
    facts: DataFrame,
) -> Result<Vec<SliceData>> {
    let mut slices = collect_facts(ctx, facts).await?;
    collect_tasks(tasks, &mut slices).await?;
    Ok(slices)
}

/// Runs the facts plan of [`plan`]: each slice's facts, its tasks not yet filled in.
pub async fn collect_facts(ctx: &SessionContext, facts: DataFrame) -> Result<Vec<SliceData>> {
    let mut slices: Vec<SliceData> = Vec::new();
    let mut blank_final = 0;
    for batch in facts.collect().await? {
        let c = Cells(&batch);
        for i in 0..batch.num_rows() {
            let facts = Facts {
                rows: c.count("rows", i)?,
                graded: c.count("graded", i)?,
                reward_min: c.float("reward_min", i)?,
                reward_max: c.float("reward_max", i)?,
                status_rows: c.count("status_rows", i)?,
                failed_rows: c.count("failed_rows", i)?,
                failed_statuses: c.sorted_list("failed_statuses", i)?,
                failed_reason: c.text("failed_reason", i)?,
                finish_rows: c.count("finish_rows", i)?,
                truncated_rows: c.count("truncated_rows", i)?,
                spoken_known: c.count("spoken_known", i)?,
                spoken_answered: c.count("spoken_answered", i)?,
                spoken_unclosed: c.count("spoken_unclosed", i)?,
                temperature: (c.count("temperature_n", i)?, c.float("temperature", i)?),
                max_tokens: (c.count("max_tokens_n", i)?, c.int("max_tokens", i)?),
                policy_version: c.agreed("policy_version", i)?,
                judge_version: c.agreed("judge_version", i)?,
                prompt_hash: c.agreed("prompt_hash", i)?,
                user_model: c.agreed("user_model", i)?,
                writer_model: c.agreed("writer_model", i)?,
            };
            blank_final += c.count("blank_final", i)?;
            slices.push(SliceData {
                value: c.text("slice", i)?.unwrap_or_default(),
                facts,
                ..SliceData::default()
            });
        }
    }
    if blank_final > 0 {
        // Rows whose final text is blank: their spoken reply is in `messages`, read by a second,
        // filtered scan only when such rows exist.
        for batch in ctx
            .sql(stage::PASS_AT_BLANK_REPLIES.sql)
            .await?
            .collect()
            .await?
        {
            let c = Cells(&batch);
            for i in 0..batch.num_rows() {
                let value = c.text("slice", i)?.unwrap_or_default();
                if let Some(s) = slices.iter_mut().find(|s| s.value == value) {
                    s.facts.spoken_known += c.count("spoken_known", i)?;
                    s.facts.spoken_answered += c.count("spoken_answered", i)?;
                    s.facts.spoken_unclosed += c.count("spoken_unclosed", i)?;
                }
            }
        }
    }
    Ok(slices)
}

async fn collect_tasks(tasks: DataFrame, slices: &mut [SliceData]) -> Result<()> {
    for batch in tasks.collect().await? {
        let (value, task) = (strings(&batch, "slice")?, strings(&batch, c::TASK_ID)?);
        let (n, cc, partial, unjudged) = (
            ints(&batch, "n")?,
            ints(&batch, "c")?,
            ints(&batch, "partial")?,
            ints(&batch, "unjudged")?,
        );
        let mut current: Option<usize> = None;
        for i in 0..batch.num_rows() {
            let v = value[i].clone().unwrap_or_default();
            let idx = match current {
                Some(idx) if slices[idx].value == v => idx,
                _ => {
                    let idx = slices.iter().position(|s| s.value == v).ok_or_else(|| {
                        Error::Internal(format!("slice `{v}` has tasks but no facts"))
                    })?;
                    current = Some(idx);
                    idx
                }
            };
            let s = &mut slices[idx];
            s.n_partial += count(partial[i]);
            s.n_unjudged += count(unjudged[i]);
            let n = count(n[i]);
            if n > 0 {
                s.tasks.push(TaskCounts {
                    task_id: task[i].clone().unwrap_or_default(),
                    n,
                    c: count(cc[i]),
                });
            }
        }
    }
    Ok(())
}

/// The stage's numbers for one slice at each k asked for (one entry, the default k, when none).
pub fn finish(data: &SliceData, opts: &Options) -> Vec<PassAt> {
    let ks: Vec<Option<u32>> = if opts.k.is_empty() {
        vec![None]
    } else {
        opts.k.iter().copied().map(Some).collect()
    };
    ks.into_iter()
        .map(|k| {
            estimate(
                &data.tasks,
                data.n_partial,
                data.n_unjudged,
                &data.facts,
                k,
                opts,
            )
        })
        .collect()
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        if self.draws == 0 {
            return Err(Error::option("draws", "must be at least 1"));
        }
        crate::stages::at_most(
            "draws",
            u64::from(self.draws),
            u64::from(crate::stages::MAX_DRAWS),
            "each draw resamples every task; 10,000 give intervals steady to the third decimal",
        )?;
        if self.k.contains(&0) {
            return Err(Error::option("k", "must be at least 1"));
        }
        Ok(())
    }
}

/// What the stage reads.
pub struct Inputs {
    /// Rows: `task_id` and `reward`, and the columns the run config reads where present.
    pub rows: DataFrame,
    /// Counts of other rows (each set disjoint from `rows`), measured with them.
    pub stored: Vec<Counts>,
}

impl Inputs {
    /// The stage's inputs: `rows`.
    pub fn new(rows: DataFrame) -> Self {
        Self {
            rows,
            stored: Vec::new(),
        }
    }
}

/// The stage: pass@1, pass^k and pass@k, overall and per slice.
pub struct PassAtStage;

impl crate::stages::Stage for PassAtStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "pass-at";

    async fn run(
        session: &crate::stages::Session,
        inputs: Inputs,
        options: &Options,
    ) -> Result<Report> {
        report(&session.scope()?, inputs.rows, inputs.stored, options).await
    }
}

/// A `dims` key no row carries (most often a misspelt one): the error names the keys the rows
/// do carry (#30 item 10).
async fn no_such_dim(ctx: &SessionContext, input: &DataFrame, key: &str) -> Error {
    let seen = async {
        ctx.deregister_table("__pass_at_dims")?;
        ctx.register_table("__pass_at_dims", input.clone().into_view())?;
        let batches = ctx
            .sql(
                "SELECT DISTINCT k FROM (SELECT unnest(map_keys(dims)) AS k FROM __pass_at_dims) \
                 ORDER BY k",
            )
            .await?
            .collect()
            .await?;
        let mut keys = Vec::new();
        for b in &batches {
            let a = datafusion::arrow::compute::cast(b.column(0), &DataType::Utf8)?;
            keys.extend(
                a.as_string::<i32>()
                    .iter()
                    .flatten()
                    .map(|k| format!("`{k}`")),
            );
        }
        Ok::<_, Error>(keys)
    }
    .await
    .unwrap_or_default();
    Error::Input {
        stage: "pass-at".into(),
        message: format!(
            "no row carries `dims.{key}`; the rows' dims keys are {}",
            crate::report::backticked(seen, "none")
        ),
    }
}

/// The whole stage on a `DataFrame` in `ctx` (a stage scope: views are registered in it):
/// overall, then each slicing, each with its slices.
async fn report(
    ctx: &SessionContext,
    input: DataFrame,
    stored: Vec<Counts>,
    opts: &Options,
) -> Result<Report> {
    let (tasks, facts) = plan(ctx, input.clone(), None).await?;
    let overall = collect(ctx, tasks, facts)
        .await?
        .into_iter()
        .next()
        .unwrap_or_default();
    let mut slicings = Vec::new();
    for slice in &opts.by {
        let (tasks, facts) = plan(ctx, input.clone(), Some(slice)).await?;
        slicings.push((slice.name(), collect(ctx, tasks, facts).await?));
    }
    let counts = Counts {
        overall,
        slices: slicings,
    };
    // The counts measured: these rows', with the stored ones added when there are any.
    let merged = if stored.is_empty() {
        None
    } else {
        let mut all = counts.clone();
        for other in stored {
            all = all.merge(other)?;
        }
        Some(all)
    };
    let all = merged.as_ref().unwrap_or(&counts);
    let overall_numbers = finish(&all.overall, opts);
    // Slices are read at the overall k unless a k is asked for: a slice of long groups would
    // otherwise print its own (pass^28 beside an overall pass^4), and the lines would not compare.
    let slice_opts = if opts.k.is_empty() {
        Options {
            k: overall_numbers.iter().map(|r| r.k).collect(),
            ..opts.clone()
        }
    } else {
        opts.clone()
    };
    let mut slices = Vec::new();
    for (slice, (name, data)) in opts.by.iter().zip(&all.slices) {
        if let Slice::Dim(key) = slice
            && !data.is_empty()
            && data.iter().all(|d| d.value == "(unset)")
        {
            return Err(no_such_dim(ctx, &input, key).await);
        }
        for data in data {
            slices.push(SliceReport {
                by: name.clone(),
                value: data.value.clone(),
                results: finish(data, &slice_opts),
            });
        }
    }
    Ok(Report {
        seed: opts.seed,
        draws: opts.draws,
        results: overall_numbers,
        slices,
        counts: Some(counts),
    })
}

/// One slice's numbers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SliceReport {
    /// What was sliced on (`dims.tier`).
    pub by: String,
    /// The slice's value.
    pub value: String,
    /// Its numbers, one entry per k.
    pub results: Vec<PassAt>,
}

/// What the stage reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The bootstrap seed.
    pub seed: u64,
    /// The bootstrap replicates.
    pub draws: u32,
    /// Overall numbers, one entry per k.
    pub results: Vec<PassAt>,
    /// Per-slice numbers.
    pub slices: Vec<SliceReport>,
    /// The counts of the rows read (not of stored counts added to them), to store.
    #[serde(skip)]
    pub counts: Option<Counts>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for r in &self.results {
            writeln!(f, "{r}")?;
        }
        if let Some(first) = self.results.first()
            && first.n_unjudged > 0
        {
            writeln!(
                f,
                "{} without a reward (unjudged) are not counted",
                crate::report::plural(first.n_unjudged, "row")
            )?;
        }
        for s in &self.slices {
            for r in &s.results {
                writeln!(f, "  {}={}: {r}", s.by, s.value)?;
            }
        }
        Ok(())
    }
}
