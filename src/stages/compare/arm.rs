//! One arm of a comparison, read once: per (run, task, metric) the count, sum, smallest and largest
//! value, and the facts behind the run config.
//!
//! Everything the report needs (per-task means, per-run means, degenerate metrics, group sizes)
//! is derived from these cells, so each arm's rows are scanned twice at most (the cells, and the
//! run-config facts), whatever the number of metrics.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::prelude::{DataFrame, SessionContext};

use crate::error::Result;
use crate::stages::cells::Cells;
use crate::stages::pass_at::{self, RunConfig};

/// The metric name of the binary pass rate.
pub const PASS_AT_1: &str = "pass_at_1";

/// Names shared by both arms, numbered in first-seen order.
#[derive(Debug, Default)]
pub struct Names {
    names: Vec<String>,
    index: HashMap<String, u32>,
}

impl Names {
    /// The number of `name`, adding it when new.
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(i) = self.index.get(name) {
            return *i;
        }
        let i = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.push(name.to_owned());
        self.index.insert(name.to_owned(), i);
        i
    }

    /// The number of `name`, if known.
    pub fn get(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// The name numbered `i`.
    pub fn name(&self, i: u32) -> &str {
        &self.names[i as usize]
    }

    /// How many names.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Each name's rank in text order, by number.
    pub fn ranks(&self) -> Vec<u32> {
        let mut order: Vec<u32> =
            (0..u32::try_from(self.names.len()).unwrap_or(u32::MAX)).collect();
        order.sort_by(|a, b| self.names[*a as usize].cmp(&self.names[*b as usize]));
        let mut rank = vec![0; order.len()];
        for (r, i) in order.into_iter().enumerate() {
            rank[i as usize] = u32::try_from(r).unwrap_or(u32::MAX);
        }
        rank
    }
}

/// The values of one metric on one task in one run (or one group).
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    /// The run (index into [`Arm::runs`]), or `NO_RUN`.
    pub run: u32,
    /// The group (index into the group names), or 0 without grouping.
    pub group: u32,
    /// The task number.
    pub task: u32,
    /// The metric number.
    pub metric: u32,
    /// Rows with a value.
    pub n: u64,
    /// Their sum.
    pub sum: f64,
    /// The smallest value.
    pub lo: f64,
    /// The largest value.
    pub hi: f64,
}

/// The run of rows without a `lineage.eval_run`.
pub(super) const NO_RUN: u32 = u32::MAX;

/// All names the arms share: tasks, metrics, runs, groups.
#[derive(Debug, Default)]
pub struct Dictionary {
    /// Task ids.
    pub tasks: Names,
    /// Metric names (`pass_at_1`, `marker:NAME`).
    pub metrics: Names,
    /// Group values.
    pub groups: Names,
}

/// One arm, read.
#[derive(Debug, Default)]
pub struct Arm {
    /// The cells.
    pub cells: Vec<Cell>,
    /// Run labels (distinct `lineage.eval_run` values), numbers in numeric order.
    pub runs: Vec<String>,
    /// Rows read.
    pub rows: u64,
    /// How the rows were made.
    pub config: RunConfig,
    /// The facts behind the config.
    pub facts: pass_at::Facts,
}

/// The SQL text of the eval-run key.
pub(super) const EVAL_RUN: &str = "coalesce(CAST(json_get_int(lineage, 'eval_run') AS VARCHAR), \
     json_get_str(lineage, 'eval_run'))";

/// The cells of table `table`, by run (`run` is a SQL expression, `''` for none) and by group
/// (`group`, `''` for none).
async fn cells(
    ctx: &SessionContext,
    table: &str,
    run: &str,
    group: &str,
    markers: bool,
) -> Result<Vec<datafusion::arrow::array::RecordBatch>> {
    let marker_part = if markers {
        "UNION ALL \
         SELECT run, grp, task_id, concat('marker:', m['key']) AS metric, count(m['value']) AS n, \
           sum(m['value']) AS s, min(m['value']) AS lo, max(m['value']) AS hi \
         FROM (SELECT run, grp, task_id, unnest(map_entries(markers)) AS m FROM r \
               WHERE markers IS NOT NULL) \
         GROUP BY 1, 2, 3, 4"
    } else {
        ""
    };
    let sql = format!(
        "WITH r AS (SELECT coalesce({run}, '') AS run, coalesce(CAST({group} AS VARCHAR), '(unset)') AS grp, \
           coalesce(task_id, '') AS task_id, \
           CASE WHEN reward = 0 OR reward = 1 THEN reward END AS b, markers FROM {table}) \
         SELECT run, grp, task_id, '{PASS_AT_1}' AS metric, count(b) AS n, sum(b) AS s, \
           min(b) AS lo, max(b) AS hi FROM r GROUP BY 1, 2, 3 \
         {marker_part}"
    );
    Ok(ctx.sql(&sql).await?.collect().await?)
}

fn fill(
    batches: &[datafusion::arrow::array::RecordBatch],
    dict: &mut Dictionary,
    runs: &mut Names,
    into: &mut Vec<Cell>,
) -> Result<()> {
    for b in batches {
        let cells = Cells(b);
        let text = |name: &str| cells.column(name, &DataType::Utf8);
        let (run, grp, task, metric) = (
            text("run")?,
            text("grp")?,
            text("task_id")?,
            text("metric")?,
        );
        let (run, grp, task, metric) = (
            run.as_string::<i32>(),
            grp.as_string::<i32>(),
            task.as_string::<i32>(),
            metric.as_string::<i32>(),
        );
        let n = cells.column("n", &DataType::Int64)?;
        let n = n.as_primitive::<Int64Type>();
        let float = |name: &str| cells.column(name, &DataType::Float64);
        let (s, lo, hi) = (float("s")?, float("lo")?, float("hi")?);
        let (s, lo, hi) = (
            s.as_primitive::<Float64Type>(),
            lo.as_primitive::<Float64Type>(),
            hi.as_primitive::<Float64Type>(),
        );
        for i in 0..b.num_rows() {
            let count = u64::try_from(n.value(i)).unwrap_or(0);
            let r = run.value(i);
            let run = if r.is_empty() { NO_RUN } else { runs.intern(r) };
            let task = dict.tasks.intern(task.value(i));
            let group = dict.groups.intern(grp.value(i));
            if count == 0 || s.is_null(i) {
                // A task with rows but no value still counts as seen (for pairing by rows).
                continue;
            }
            into.push(Cell {
                run,
                group,
                task,
                metric: dict.metrics.intern(metric.value(i)),
                n: count,
                sum: s.value(i),
                lo: lo.value(i),
                hi: hi.value(i),
            });
        }
    }
    Ok(())
}

/// Reads table `table`: its cells (by eval run, all metrics), run labels, rows and run config.
pub(super) async fn read(ctx: &SessionContext, table: &str, dict: &mut Dictionary) -> Result<Arm> {
    let batches = cells(ctx, table, EVAL_RUN, "''", true).await?;
    let mut runs = Names::default();
    let mut arm = Arm::default();
    fill(&batches, dict, &mut runs, &mut arm.cells)?;
    // Runs numbered in numeric order (then text order), as `wai variance` lists them.
    let mut labels: Vec<String> = (0..u32::try_from(runs.len()).unwrap_or(0))
        .map(|i| runs.name(i).to_owned())
        .collect();
    labels.sort_by(|a, b| match (a.parse::<i64>(), b.parse::<i64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    });
    let renumber: Vec<u32> = (0..u32::try_from(runs.len()).unwrap_or(0))
        .map(|i| {
            let name = runs.name(i);
            u32::try_from(labels.iter().position(|l| l == name).unwrap_or(0)).unwrap_or(0)
        })
        .collect();
    for c in &mut arm.cells {
        if c.run != NO_RUN {
            c.run = renumber[c.run as usize];
        }
    }
    arm.runs = labels;
    let input: DataFrame = ctx.table(table).await?;
    let (_, facts) = pass_at::plan(ctx, input, None).await?;
    let facts = pass_at::collect_facts(ctx, facts)
        .await?
        .into_iter()
        .next()
        .unwrap_or_default()
        .facts;
    arm.rows = facts.rows;
    let pass = dict.metrics.get(PASS_AT_1);
    let mut sizes: HashMap<u32, u64> = HashMap::new();
    for c in arm.cells.iter().filter(|c| Some(c.metric) == pass) {
        *sizes.entry(c.task).or_default() += c.n;
    }
    let k = pass_at::default_k(sizes.values().copied());
    arm.config = pass_at::run_config(&facts, sizes.len() as u64, k);
    arm.facts = facts;
    Ok(arm)
}

/// The cells of table `table` by group (`group` a SQL expression), for the pass rate or one
/// marker, all runs pooled.
pub(super) async fn read_groups(
    ctx: &SessionContext,
    table: &str,
    group: &str,
    markers: bool,
    dict: &mut Dictionary,
) -> Result<Vec<Cell>> {
    let batches = cells(ctx, table, "''", group, markers).await?;
    let mut runs = Names::default();
    let mut out = Vec::new();
    fill(&batches, dict, &mut runs, &mut out)?;
    Ok(out)
}

/// Per-task means of `metric` over `cells` (only `run` when given, only `group` when given), as
/// (task rank, mean, rows), sorted by task rank.
pub(super) fn task_means(
    cells: &[Cell],
    metric: u32,
    run: Option<u32>,
    group: Option<u32>,
    ranks: &[u32],
) -> Vec<(u32, f64, u64)> {
    let mut acc: HashMap<u32, (f64, u64)> = HashMap::new();
    for c in cells {
        if c.metric != metric
            || run.is_some_and(|r| r != c.run)
            || group.is_some_and(|g| g != c.group)
        {
            continue;
        }
        let e = acc.entry(c.task).or_default();
        e.0 += c.sum;
        e.1 += c.n;
    }
    #[allow(clippy::cast_precision_loss, reason = "row counts")]
    let mut out: Vec<(u32, f64, u64)> = acc
        .into_iter()
        .map(|(t, (s, n))| (ranks[t as usize], s / n as f64, n))
        .collect();
    out.sort_unstable_by_key(|t| t.0);
    out
}

/// Whether every value of `metric` in `cells` is one value (to 9 places), with at least one row.
pub(super) fn degenerate(cells: &[Cell], metric: u32) -> bool {
    let round9 = |x: f64| crate::stats::round_places(x, 9);
    let mut seen: Option<f64> = None;
    for c in cells.iter().filter(|c| c.metric == metric) {
        for v in [round9(c.lo), round9(c.hi)] {
            match seen {
                None => seen = Some(v),
                Some(s) if s.to_bits() != v.to_bits() => return false,
                Some(_) => {}
            }
        }
    }
    seen.is_some()
}

/// Whether `metric` has at least one value in `cells`.
pub(super) fn has(cells: &[Cell], metric: u32) -> bool {
    cells.iter().any(|c| c.metric == metric)
}
