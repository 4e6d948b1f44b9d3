//! Marker summaries: for each marker, the mean of per-task means with an interval over tasks.
//!
//! What it computes: for marker m, each task's mean over its rows where m is not null (tasks
//! weighted equally), their mean, a 95% interval over tasks (none under 3 tasks; by default the
//! Wilson interval on the effective number of tasks, `interval = percentile` for the reference's
//! percentile bootstrap, [`crate::stats::interval`]; under
//! [`crate::stats::interval::RELIABLE_TASKS`] tasks the note says it is approximate), the rows counted, at 1.0 and at 0.0. A marker whose every applicable value (rounded to
//! 9 decimals) is the same is *degenerate*: it has no interval and carries a warning, since a
//! marker that never varies cannot tell a regression (measure spec §1.7, §3.1).
//!
//! Inputs: `task_id`, `markers`. A null value means "does not apply" and is not counted; a marker
//! present only as null reports 0 tasks and a note.
//!
//! Determinism: markers in name order, tasks by id, correctly rounded sums, bootstrap streams
//! keyed by replicate: the same output at any thread count or partitioning.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::Float64Type;
use datafusion::prelude::{DataFrame, SessionContext, col};

use crate::error::{Error, Result};
use crate::queries::stage;
use crate::schema::col as c;
use crate::stats::interval::{self, Method};
use crate::stats::{bootstrap, sum};

/// Options of the stage.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Markers to summarise; empty = every marker seen.
    #[serde(default)]
    pub names: Vec<String>,
    /// Bootstrap seed.
    #[serde(default)]
    pub seed: u64,
    /// Bootstrap replicates.
    #[serde(default = "default_draws")]
    pub draws: u32,
    /// How the intervals are made.
    #[serde(default)]
    pub interval: Method,
}

fn default_draws() -> u32 {
    bootstrap::DRAWS
}

/// One marker's summary.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    /// `marker:NAME`.
    pub metric: String,
    /// Tasks where the marker applies at least once.
    pub n_tasks: u64,
    /// Rows where it applies.
    pub n_rows: u64,
    /// Rows at exactly 1.0.
    pub n_rows_at_1: u64,
    /// Rows at exactly 0.0.
    pub n_rows_at_0: u64,
    /// Mean of per-task means.
    pub mean: Option<f64>,
    /// 95% interval of the mean over tasks.
    pub ci95: Option<[f64; 2]>,
    /// Fewer tasks than [`interval::RELIABLE_TASKS`]: the interval is approximate.
    pub interval_approximate: bool,
    /// From [`interval::RELIABLE_TASKS`] tasks, the interval sits within
    /// [`interval::NEAR_END_TASKS`] tasks of 0 or 1 and is approximate there
    /// ([`interval::near_end`]).
    pub interval_near_end: bool,
    /// Every applicable row has the same value.
    pub degenerate: bool,
    /// Why there is no interval, when there is none and the marker is not degenerate; or that
    /// it is approximate (few tasks; not with the reference's `percentile` interval).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What a degenerate marker means.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// What the stage reports: one summary per marker, in name order.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The bootstrap seed.
    pub seed: u64,
    /// The bootstrap replicates.
    pub draws: u32,
    /// How the intervals were made.
    pub interval: Method,
    /// Marker name and summary (in JSON, an object by name, in this order).
    #[serde(serialize_with = "by_name")]
    pub markers: Vec<(String, Summary)>,
}

/// The summaries as an object keyed by marker name, in report order.
fn by_name<S: serde::Serializer>(
    markers: &[(String, Summary)],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.collect_map(markers.iter().map(|(n, s)| (n, s)))
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
        Ok(())
    }
}

/// What the stage reads.
pub struct Inputs {
    /// Rows: `task_id` and `markers`.
    pub rows: DataFrame,
}

/// The stage: per-marker means with task-bootstrap intervals.
pub struct MarkersStage;

impl crate::stages::Stage for MarkersStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "markers";

    async fn run(
        session: &crate::stages::Session,
        inputs: Inputs,
        options: &Options,
    ) -> Result<Report> {
        run(&session.scope()?, inputs.rows, options).await
    }
}

/// Plans per-(marker, task) value lists. Lazy.
pub async fn plan(ctx: &SessionContext, input: DataFrame) -> Result<DataFrame> {
    crate::schema::check_columns(
        input.schema().as_arrow(),
        &[c::TASK_ID, c::MARKERS],
        "markers",
    )?;
    let rows = input.select(vec![col(c::TASK_ID), col(c::MARKERS)])?;
    ctx.deregister_table("__marker_rows")?;
    ctx.register_table("__marker_rows", rows.into_view())?;
    Ok(ctx.sql(stage::MARKER_TASKS.sql).await?)
}

/// `%g`-like: `1`, `0.5`, `0.333333`.
fn short(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

fn round9(v: f64) -> f64 {
    crate::stats::round_places(v, 9)
}

/// Summarises one marker from its per-task value lists (tasks in id order).
pub fn summarize(name: &str, tasks: &[Vec<f64>], opts: &Options) -> Summary {
    let tasks: Vec<&Vec<f64>> = tasks.iter().filter(|v| !v.is_empty()).collect();
    let all = || tasks.iter().flat_map(|v| v.iter().copied());
    let n_rows = all().count() as u64;
    let means: Vec<f64> = tasks.iter().filter_map(|v| sum::mean(v)).collect();
    let first = all().next().map(round9);
    let degenerate = first.is_some_and(|f| all().all(|v| round9(v) == f));
    let ci95 = if degenerate {
        None
    } else {
        interval::of_shares(
            &means,
            opts.interval,
            opts.draws,
            opts.seed,
            bootstrap::LEVEL,
        )
        .map(|(lo, hi)| [lo, hi])
    };
    let approximate = ci95.and(interval::approximate_note(means.len()));
    let interval_approximate = approximate.is_some();
    let near_end = ci95.and(interval::near_end(&means));
    let near_end_note = near_end
        .and_then(|e| interval::near_end_note(&[e.describe(name, ("did not fire", "fired"))]));
    let note = (ci95.is_none() && !degenerate)
        .then(|| {
            format!(
                "no interval: {} task(s) carry {name}, and the bootstrap needs 3 or more. Add tasks (more situations, not more rollouts of one) and score them.",
                means.len()
            )
        })
        // Under 20 tasks or near an end (from 20): the reference's interval prints neither.
        .or(approximate
            .or(near_end_note)
            .filter(|_| opts.interval != Method::Percentile));
    let warning = degenerate.then(|| {
        format!(
            "every one of the {n_rows} rows where {name} applies scored {}: it has never been seen to vary, so make sure it can fire at all (a misspelt key looks the same) before reading its mean, and do not use it as a must-not-regress guard, which could never trip",
            short(first.unwrap_or(0.0))
        )
    });
    Summary {
        metric: format!("marker:{name}"),
        n_tasks: means.len() as u64,
        n_rows,
        n_rows_at_1: all().filter(|v| *v == 1.0).count() as u64,
        n_rows_at_0: all().filter(|v| *v == 0.0).count() as u64,
        mean: sum::mean(&means),
        ci95,
        interval_approximate,
        interval_near_end: near_end.is_some(),
        degenerate,
        note,
        warning,
    }
}

/// Runs the stage.
pub async fn run(ctx: &SessionContext, input: DataFrame, opts: &Options) -> Result<Report> {
    crate::stages::Options::check(opts)?;
    let mut by_marker: Vec<(String, Vec<Vec<f64>>)> = Vec::new();
    for batch in plan(ctx, input).await?.collect().await? {
        let names = batch.column(0).as_string::<i32>();
        let vals = batch.column(2).as_list::<i32>();
        for i in 0..batch.num_rows() {
            let name = names.value(i).to_owned();
            let values: Vec<f64> = if vals.is_valid(i) {
                vals.value(i)
                    .as_primitive::<Float64Type>()
                    .iter()
                    .flatten()
                    .collect()
            } else {
                Vec::new()
            };
            match by_marker.last_mut() {
                Some((last, tasks)) if *last == name => tasks.push(values),
                _ => by_marker.push((name, vec![values])),
            }
        }
    }
    // A marker asked for by name that no row carries is most often a misspelt key: say which
    // markers the rows do carry, rather than report an empty marker (#30 item 10).
    if let Some(missing) = opts
        .names
        .iter()
        .find(|w| !by_marker.iter().any(|(n, _)| n == *w))
    {
        let seen = crate::report::backticked(by_marker.iter().map(|(n, _)| n), "no markers");
        return Err(Error::Input {
            stage: "markers".into(),
            message: format!("no row carries marker `{missing}`; the rows carry {seen}"),
        });
    }
    let wanted = |n: &str| opts.names.is_empty() || opts.names.iter().any(|w| w == n);
    let mut markers: Vec<(String, Summary)> = by_marker
        .iter()
        .filter(|(n, _)| wanted(n))
        .map(|(n, tasks)| (n.clone(), summarize(n, tasks, opts)))
        .collect();
    for name in &opts.names {
        if !markers.iter().any(|(n, _)| n == name) {
            markers.push((name.clone(), summarize(name, &[], opts)));
        }
    }
    Ok(Report {
        seed: opts.seed,
        draws: opts.draws,
        interval: opts.interval,
        markers,
    })
}

/// What the printed rate is: the demo's marker table and `wai sql --query marker_rates` give
/// it as `task_mean`, beside the share of rows.
pub const UNIT: &str = "per task: each marker's mean over the tasks of its per-task mean (every task weighted alike, whatever its number of rows), with a 95% interval over tasks; the share of rows is `at 1` / `rows`";

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.markers.is_empty() {
            return writeln!(f, "no markers on these rows");
        }
        let width = self.markers.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        writeln!(f, "{UNIT}")?;
        for (name, s) in &self.markers {
            let mean = s
                .mean
                .map_or_else(|| "n/a".to_owned(), |m| format!("{m:.2}"));
            let ci = s
                .ci95
                .map_or_else(String::new, |[lo, hi]| format!(" [{lo:.2}..{hi:.2}]"));
            writeln!(
                f,
                "{name:width$}  {mean}{ci} ({} tasks, {} rows: {} at 1, {} at 0)",
                s.n_tasks, s.n_rows, s.n_rows_at_1, s.n_rows_at_0
            )?;
            if let Some(w) = &s.warning {
                writeln!(f, "{:width$}  warning: {w}", "")?;
            }
            if let Some(n) = &s.note {
                writeln!(f, "{:width$}  note: {n}", "")?;
            }
        }
        Ok(())
    }
}
