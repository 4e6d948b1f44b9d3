//! Eval variance: how much one metric moves when the same task set is run again.
//!
//! Each run's value is the mean over tasks of the per-task mean (binary rewards for `pass_at_1`,
//! a marker's non-null values for `marker:NAME`). Across two or more runs: the sample standard
//! deviation of those run means (`run_std`), the noise band it implies for a comparison of two
//! single runs (`t(n−1) · √2 · run_std`), and a stability word (measure spec §5.1).
//!
//! Runs come from one table split by a run key (`lineage.eval_run`, else `lineage.scoring_run_id`, or a
//! column or lineage key named by `by`), or from several tables, one run each.

use std::collections::{BTreeMap, BTreeSet};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::prelude::{DataFrame, SessionContext};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::stages::cells::Cells;
use crate::stats::{quantile, round_places, sum};

/// Options of the stage.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Options {
    /// The metric: `pass_at_1` or `marker:NAME`.
    pub metric: String,
    /// The run key of a single table: a column or `lineage` key (default `lineage.eval_run`,
    /// else `lineage.scoring_run_id`).
    pub by: Option<String>,
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        if self.metric != "pass_at_1" && !self.metric.starts_with("marker:") {
            return Err(Error::option(
                "metric",
                format!("is `pass_at_1` or `marker:NAME`, not `{}`", self.metric),
            ));
        }
        Ok(())
    }
}

/// What the stage reads: one table split by its run key, or several tables, one run each
/// (named `run_1`, `run_2`, ...).
pub struct Inputs {
    /// The runs' rows.
    pub runs: Vec<DataFrame>,
}

/// The stage: the re-run spread of one metric.
pub struct VarianceStage;

impl crate::stages::Stage for VarianceStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "variance";

    async fn run(
        session: &crate::stages::Session,
        inputs: Inputs,
        options: &Options,
    ) -> Result<Report> {
        let mut means = BTreeMap::new();
        let (labels, unkeyed) = if let [rows] = inputs.runs.as_slice() {
            let scope = session.scope_with(&[("rows", rows.clone())])?;
            let key = run_key(options.by.as_deref());
            let unkeyed = task_means(&scope, "rows", &key, &mut means).await?;
            (run_labels(&scope, "rows", &key).await?, unkeyed)
        } else {
            let names: Vec<String> = (1..=inputs.runs.len())
                .map(|i| format!("run_{i}"))
                .collect();
            let tables: Vec<(&str, DataFrame)> =
                names.iter().map(String::as_str).zip(inputs.runs).collect();
            let scope = session.scope_with(&tables)?;
            for table in &names {
                task_means(&scope, table, &format!("'{table}'"), &mut means).await?;
            }
            (names, 0)
        };
        // A run key or a marker no row carries is most often misspelt: said, not reported as
        // zero runs (#30 item 10).
        if let Some(by) = &options.by
            && labels.is_empty()
        {
            return Err(Error::Input {
                stage: "variance".into(),
                message: format!(
                    "no row carries the run key `{by}` (a column, or a key of `lineage`)"
                ),
            });
        }
        if let Some(marker) = options.metric.strip_prefix("marker:")
            && !labels.is_empty()
            && !means.keys().any(|(m, _)| *m == options.metric)
        {
            let seen: std::collections::BTreeSet<&str> = means
                .keys()
                .filter_map(|(m, _)| m.strip_prefix("marker:"))
                .collect();
            let seen = crate::report::backticked(seen, "no markers");
            return Err(Error::Input {
                stage: "variance".into(),
                message: format!("no row carries marker `{marker}`; the rows carry {seen}"),
            });
        }
        report(&options.metric, &labels, &means, unkeyed)
    }
}

/// A variance report (the reference's `EvalVarianceReport`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The metric of `means` and `run_std`.
    pub metric: String,
    /// Runs with a value.
    pub n_runs: usize,
    /// Each run's mean (4 places), by run label, in run order.
    pub means: serde_json::Map<String, serde_json::Value>,
    /// The mean of the run means.
    pub mean: Option<f64>,
    /// The sample standard deviation of the run means (two or more runs).
    pub run_std: Option<f64>,
    /// `run_std` of `pass_at_1` and of every marker all runs share.
    pub run_std_by_metric: BTreeMap<String, Option<f64>>,
    /// `run_std` in points (× 100, 2 places).
    pub run_std_points: Option<f64>,
    /// The noise band of a two-run comparison: `t(n−1) · √2 · run_std`.
    pub noise_band: Option<f64>,
    /// Its degrees of freedom, `n_runs − 1`.
    pub noise_band_df: Option<usize>,
    /// `very_stable` (under 0.35 points), `stable` (under 0.7), or `high_variance`.
    pub stability: Option<&'static str>,
    /// Tasks every run has a value for.
    pub tasks_in_every_run: usize,
    /// What to know before reading the numbers.
    pub notes: Vec<String>,
}

/// Per run label: per task, the metric's task mean.
pub type Runs = BTreeMap<String, BTreeMap<String, f64>>;

fn round4(x: f64) -> f64 {
    round_places(x, 4)
}

/// The SQL expression of a run key: a column of the row schema, else a lineage key (written
/// `KEY` or `lineage.KEY`). Also the training-seed key of `wai compare --train-runs`.
pub fn run_key(by: Option<&str>) -> String {
    let lineage_only = by.is_some_and(|k| k.starts_with("lineage."));
    match by.map(|k| k.strip_prefix("lineage.").unwrap_or(k)) {
        // `lineage.eval_run` as the run gave it (the `eval_run` column defaults to 0 without it).
        None => "coalesce(CAST(json_get_int(lineage, 'eval_run') AS VARCHAR), \
                 json_get_str(lineage, 'eval_run'), json_get_str(lineage, 'scoring_run_id'))"
            .into(),
        Some(c) if !lineage_only && crate::schema::row_schema().index_of(c).is_ok() => {
            format!("CAST(\"{}\" AS VARCHAR)", c.replace('"', "\"\""))
        }
        Some(k) => format!(
            "coalesce(json_get_str(lineage, '{k}'), CAST(json_get_int(lineage, '{k}') AS VARCHAR))",
            k = k.replace('\'', "''")
        ),
    }
}

fn collect_means(
    batches: &[RecordBatch],
    into: &mut BTreeMap<(String, String), BTreeMap<String, f64>>,
) -> Result<()> {
    for b in batches {
        let cells = Cells(b);
        let text = |name: &str| cells.column(name, &DataType::Utf8);
        let (runs, metrics, tasks) = (text("run")?, text("metric")?, text("task_id")?);
        let (runs, metrics, tasks) = (
            runs.as_string::<i32>(),
            metrics.as_string::<i32>(),
            tasks.as_string::<i32>(),
        );
        let values = cells.column("v", &DataType::Float64)?;
        let values = values.as_primitive::<Float64Type>();
        for i in 0..b.num_rows() {
            if values.is_null(i) {
                continue;
            }
            into.entry((metrics.value(i).to_owned(), runs.value(i).to_owned()))
                .or_default()
                .insert(tasks.value(i).to_owned(), values.value(i));
        }
    }
    Ok(())
}

/// Per-(metric, run) task means of table `name` in `ctx`, runs keyed by `key` (or all one run
/// labelled `label`), and the rows without a run key.
pub async fn task_means(
    ctx: &SessionContext,
    table: &str,
    key: &str,
    into: &mut BTreeMap<(String, String), BTreeMap<String, f64>>,
) -> Result<u64> {
    // A pass rate's values are 0 and 1, whose plain mean is exact in any order; a marker's mean
    // is a correctly rounded sum over the count, so the order the rows arrive in (partitions,
    // cores, workers) changes no bit.
    let sql = format!(
        "WITH r AS (SELECT {key} AS run, task_id, reward, markers FROM {table}) \
         SELECT run, 'pass_at_1' AS metric, task_id, avg(reward) AS v FROM r \
           WHERE run IS NOT NULL AND run <> '' AND (reward = 0 OR reward = 1) GROUP BY 1, 2, 3 \
         UNION ALL \
         SELECT run, concat('marker:', m['key']) AS metric, task_id, fsum(m['value']) / count(m['value']) AS v \
           FROM (SELECT run, task_id, unnest(map_entries(markers)) AS m FROM r \
                 WHERE run IS NOT NULL AND run <> '' AND markers IS NOT NULL) \
           WHERE m['value'] IS NOT NULL GROUP BY 1, 2, 3"
    );
    let batches = ctx.sql(&sql).await?.collect().await?;
    collect_means(&batches, into)?;
    let unkeyed = ctx
        .sql(&format!(
            "SELECT count(*) AS n FROM {table} WHERE {key} IS NULL OR {key} = ''"
        ))
        .await?
        .collect()
        .await?;
    Ok(match unkeyed.first() {
        Some(b) => Cells(b).count("n", 0)?,
        None => 0,
    })
}

/// The distinct run keys of table `table`: run numbers in numeric order, other labels in text
/// order.
pub async fn run_labels(ctx: &SessionContext, table: &str, key: &str) -> Result<Vec<String>> {
    let batches = ctx
        .sql(&format!(
            "SELECT DISTINCT {key} AS run FROM {table} WHERE {key} IS NOT NULL AND {key} <> ''"
        ))
        .await?
        .collect()
        .await?;
    let mut labels = Vec::new();
    for b in &batches {
        labels.extend(Cells(b).texts("run")?);
    }
    labels.sort_by(|a, b| match (a.parse::<i64>(), b.parse::<i64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    });
    Ok(labels)
}

/// The report for `metric` from the task means of every (metric, run), with `labels` the runs
/// in order and `unkeyed` the rows left out for want of a run key.
pub fn report(
    metric: &str,
    labels: &[String],
    means: &BTreeMap<(String, String), BTreeMap<String, f64>>,
    unkeyed: u64,
) -> Result<Report> {
    let run_mean = |metric: &str, run: &str| -> Option<f64> {
        let tasks = means.get(&(metric.to_owned(), run.to_owned()))?;
        sum::mean(&tasks.values().copied().collect::<Vec<_>>())
    };
    let mut by_run = serde_json::Map::new();
    let mut values = Vec::new();
    for run in labels {
        let m = run_mean(metric, run);
        by_run.insert(run.clone(), serde_json::json!(m.map(round4)));
        values.extend(m);
    }
    let run_std = sum::sample_sd(&values);
    let mut run_std_by_metric = BTreeMap::new();
    let mut listed: Vec<String> = vec!["pass_at_1".into()];
    let markers: BTreeSet<&str> = means
        .keys()
        .filter(|(m, _)| m.starts_with("marker:"))
        .map(|(m, _)| m.as_str())
        .filter(|m| {
            labels
                .iter()
                .all(|r| means.contains_key(&((*m).to_owned(), r.clone())))
        })
        .collect();
    listed.extend(markers.iter().map(|m| (*m).to_owned()));
    if !listed.iter().any(|m| m == metric) {
        listed.push(metric.to_owned());
    }
    for m in &listed {
        let vals: Vec<f64> = labels.iter().filter_map(|r| run_mean(m, r)).collect();
        run_std_by_metric.insert(m.clone(), sum::sample_sd(&vals).map(round4));
    }
    let n = values.len();
    let df = n.checked_sub(1).filter(|d| *d >= 1);
    let noise_band = match (run_std, df) {
        (Some(s), Some(d)) => Some(round4(
            quantile::noise_band(s, 1, 1, Some(d as f64), 0.95)
                .map_err(|e| Error::Internal(e.to_string()))?,
        )),
        _ => None,
    };
    let tasks_in_every_run = {
        let mut sets = labels.iter().map(|r| {
            means
                .get(&(metric.to_owned(), r.clone()))
                .map(|t| t.keys().cloned().collect::<BTreeSet<_>>())
                .unwrap_or_default()
        });
        let first = sets.next().unwrap_or_default();
        sets.fold(first, |acc, s| acc.intersection(&s).cloned().collect())
            .len()
    };
    let mut notes = Vec::new();
    if unkeyed > 0 {
        notes.push(format!(
            "{unkeyed} row(s) without a run key were left out (set lineage.eval_run, or pass `by`)"
        ));
    }
    if n < 3 {
        notes.push(format!(
            "{n} run(s): two is a difference, not a distribution; 3 or more re-runs give a standard deviation worth reading"
        ));
    }
    let union: BTreeSet<&String> = labels
        .iter()
        .filter_map(|r| means.get(&(metric.to_owned(), r.clone())))
        .flat_map(BTreeMap::keys)
        .collect();
    if union.len() > tasks_in_every_run {
        notes.push(format!(
            "the runs do not cover the same tasks ({tasks_in_every_run} of {} in every run); compare runs of one task set",
            union.len()
        ));
    }
    Ok(Report {
        metric: metric.to_owned(),
        n_runs: n,
        means: by_run,
        mean: sum::mean(&values).map(round4),
        run_std: run_std.map(round4),
        run_std_by_metric,
        run_std_points: run_std.map(|s| round_places(s * 100.0, 2)),
        noise_band,
        noise_band_df: df,
        stability: run_std.map(|s| {
            if s * 100.0 < 0.35 {
                "very_stable"
            } else if s * 100.0 < 0.7 {
                "stable"
            } else {
                "high_variance"
            }
        }),
        tasks_in_every_run,
        notes,
    })
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let num = |v: Option<f64>| v.map_or("n/a".to_owned(), |x| format!("{x:.4}"));
        writeln!(
            f,
            "eval_variance {}: run_std {} over {} runs, mean {}",
            self.metric,
            num(self.run_std),
            self.n_runs,
            num(self.mean)
        )?;
        if let (Some(band), Some(df)) = (self.noise_band, self.noise_band_df) {
            writeln!(
                f,
                "noise band {band:.4} (t at df {df} times sqrt(2) times run_std): a delta inside it is the eval re-running, not a gain. Pass it to compare (`run_std`, `run_std_runs`)"
            )?;
        }
        let runs: Vec<String> = self
            .means
            .iter()
            .map(|(k, v)| format!("{k} {}", num(v.as_f64())))
            .collect();
        writeln!(
            f,
            "{} ({} tasks in every run)",
            runs.join(" | "),
            self.tasks_in_every_run
        )?;
        if let (Some(word), Some(points)) = (self.stability, self.run_std_points) {
            writeln!(f, "stability {word} ({points:.2} points)")?;
        }
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        Ok(())
    }
}
