//! One arm of a comparison, read once: per (run, task, metric) the count, sum, smallest and largest
//! value, and the facts behind the run config.
//!
//! Everything the report needs (per-task means, per-run means, degenerate metrics, group sizes)
//! is derived from these cells, so each arm's rows are scanned twice at most (the cells, and the
//! run-config facts), whatever the number of metrics.

// hashbrown with foldhash: task ids are interned once per cell, a third of a million per arm.
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::common::HashMap;
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
    /// How the rows were made.
    pub config: RunConfig,
    /// The facts behind the config.
    pub facts: pass_at::Facts,
}

/// The SQL text of the eval-run key: the `eval_run` column (the row's `eval_run`, else
/// `lineage.eval_run`, else 0), so a side without run keys is one run, `0`.
pub(super) const EVAL_RUN: &str = "CAST(eval_run AS VARCHAR)";

/// The marker names of table `table` (from its distinct key sets: cheap, rows share few).
async fn marker_names(ctx: &SessionContext, table: &str) -> Result<Vec<String>> {
    let batches = ctx
        .sql(&format!(
            "SELECT DISTINCT unnest(ks) AS k FROM (SELECT DISTINCT map_keys(markers) AS ks FROM {table} \
             WHERE markers IS NOT NULL)"
        ))
        .await?
        .collect()
        .await?;
    let mut names = Vec::new();
    for b in &batches {
        names.extend(Cells(b).texts("k")?);
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// The query of the cells of table `table`, one output row per (run, group, task) with the count, sum,
/// smallest and largest value of the pass rate and of each marker in `markers` as columns
/// (`n_i`, `s_i`, `lo_i`, `hi_i`; 0 is the pass rate). `run` and `group` are SQL expressions
/// (`''` for none).
async fn cells(
    ctx: &SessionContext,
    table: &str,
    run: &str,
    group: &str,
    markers: &[String],
) -> Result<DataFrame> {
    let mut values = vec!["CASE WHEN reward = 0 OR reward = 1 THEN reward END".to_owned()];
    values.extend(
        markers
            .iter()
            .map(|m| format!("markers['{}']", m.replace('\'', "''"))),
    );
    let aggregates: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            // The pass rate's values are 0 and 1, whose plain sum is exact in any order; a
            // marker's are any numbers, summed correctly rounded so the order the rows arrive in
            // (partitions, cores, workers) changes no bit.
            let sum = if i == 0 { "sum" } else { "fsum" };
            format!(
                "count({v}) AS n_{i}, {sum}({v}) AS s_{i}, min({v}) AS lo_{i}, max({v}) AS hi_{i}"
            )
        })
        .collect();
    let sql = format!(
        "SELECT coalesce({run}, '') AS run, coalesce(CAST({group} AS VARCHAR), '(unset)') AS grp, \
           coalesce(task_id, '') AS task_id, {} FROM {table} GROUP BY 1, 2, 3",
        aggregates.join(", ")
    );
    Ok(ctx.sql(&sql).await?)
}

fn fill(
    batches: &[RecordBatch],
    markers: &[String],
    dict: &mut Dictionary,
    runs: &mut Names,
    into: &mut Vec<Cell>,
) -> Result<()> {
    let mut metric_ids = vec![dict.metrics.intern(PASS_AT_1)];
    metric_ids.extend(
        markers
            .iter()
            .map(|m| dict.metrics.intern(&format!("marker:{m}"))),
    );
    for b in batches {
        let cells = Cells(b);
        let text = |name: &str| cells.column(name, &DataType::Utf8);
        let (run, grp, task) = (text("run")?, text("grp")?, text("task_id")?);
        let (run, grp, task) = (
            run.as_string::<i32>(),
            grp.as_string::<i32>(),
            task.as_string::<i32>(),
        );
        let mut columns = Vec::with_capacity(metric_ids.len());
        for i in 0..metric_ids.len() {
            let n = cells.column(&format!("n_{i}"), &DataType::Int64)?;
            let float = |name: String| cells.column(&name, &DataType::Float64);
            columns.push((
                n,
                float(format!("s_{i}"))?,
                float(format!("lo_{i}"))?,
                float(format!("hi_{i}"))?,
            ));
        }
        into.reserve(b.num_rows() * metric_ids.len());
        for r in 0..b.num_rows() {
            let run_name = run.value(r);
            let run = if run_name.is_empty() {
                NO_RUN
            } else {
                runs.intern(run_name)
            };
            let task = dict.tasks.intern(task.value(r));
            let group = dict.groups.intern(grp.value(r));
            for (metric, (n, s, lo, hi)) in metric_ids.iter().zip(&columns) {
                let count = u64::try_from(n.as_primitive::<Int64Type>().value(r)).unwrap_or(0);
                let s = s.as_primitive::<Float64Type>();
                if count == 0 || s.is_null(r) {
                    continue;
                }
                into.push(Cell {
                    run,
                    group,
                    task,
                    metric: *metric,
                    n: count,
                    sum: s.value(r),
                    lo: lo.as_primitive::<Float64Type>().value(r),
                    hi: hi.as_primitive::<Float64Type>().value(r),
                });
            }
        }
    }
    Ok(())
}

/// One arm's queries, planned (cheap) and not yet run.
pub(super) struct Planned {
    markers: Vec<String>,
    cells: DataFrame,
    facts: DataFrame,
}

/// One arm's query results, before its names are numbered.
#[derive(Debug)]
pub(super) struct Scan {
    markers: Vec<String>,
    batches: Vec<RecordBatch>,
    facts: pass_at::Facts,
}

/// Plans the queries of table `table`: its cells (by eval run and task, all metrics) and the run-config
/// facts. Plans bind their tables when made, so arms are planned one after the other and then run
/// at once ([`Planned::run`]).
pub(super) async fn plan(ctx: &SessionContext, table: &str) -> Result<Planned> {
    plan_with(ctx, table, "''", marker_names(ctx, table).await?).await
}

/// Plans both arms, reading their marker names at once; their cells are split by `group` (a SQL
/// expression, `''` for none), so slices need no scan of their own.
pub(super) async fn plan_both(
    ctx: &SessionContext,
    before: &str,
    after: &str,
    group: &str,
) -> Result<(Planned, Planned)> {
    let (mb, ma) = tokio::try_join!(marker_names(ctx, before), marker_names(ctx, after))?;
    Ok((
        plan_with(ctx, before, group, mb).await?,
        plan_with(ctx, after, group, ma).await?,
    ))
}

/// [`plan`] with the grouping and the marker names known.
async fn plan_with(
    ctx: &SessionContext,
    table: &str,
    group: &str,
    markers: Vec<String>,
) -> Result<Planned> {
    let cells = cells(ctx, table, EVAL_RUN, group, &markers).await?;
    let input: DataFrame = ctx.table(table).await?;
    let (_, facts) = pass_at::plan(ctx, input, None).await?;
    Ok(Planned {
        markers,
        cells,
        facts,
    })
}

impl Planned {
    /// Runs the queries (the cells and the facts are two scans of one table: run together).
    pub(super) async fn run(self, ctx: &SessionContext) -> Result<Scan> {
        let started = std::time::Instant::now();
        let (batches, facts) = tokio::try_join!(
            async { Ok::<_, crate::error::Error>(self.cells.collect().await?) },
            pass_at::collect_facts(ctx, self.facts)
        )?;
        tracing::debug!(
            seconds = started.elapsed().as_secs_f64(),
            "compare: cells and facts"
        );
        let facts = facts.into_iter().next().unwrap_or_default().facts;
        Ok(Scan {
            markers: self.markers,
            batches,
            facts,
        })
    }
}

/// Numbers the names of `scan` in `dict`: its cells, run labels and run config.
pub(super) fn build(scan: Scan, dict: &mut Dictionary) -> Result<Arm> {
    let mut runs = Names::default();
    let mut arm = Arm::default();
    fill(
        &scan.batches,
        &scan.markers,
        dict,
        &mut runs,
        &mut arm.cells,
    )?;
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
    let pass = dict.metrics.get(PASS_AT_1);
    let mut sizes: HashMap<u32, u64> = HashMap::new();
    for c in arm.cells.iter().filter(|c| Some(c.metric) == pass) {
        *sizes.entry(c.task).or_default() += c.n;
    }
    let k = pass_at::default_k(sizes.values().copied());
    arm.config = pass_at::run_config(&scan.facts, sizes.len() as u64, k);
    arm.facts = scan.facts;
    Ok(arm)
}

/// Reads table `table`: [`plan`], [`Planned::run`], then [`build`].
pub(super) async fn read(ctx: &SessionContext, table: &str, dict: &mut Dictionary) -> Result<Arm> {
    build(plan(ctx, table).await?.run(ctx).await?, dict)
}

/// One grouped query's results, before its names are numbered.
#[derive(Debug)]
pub(super) struct GroupScan(Vec<RecordBatch>);

/// Queries the pass-rate cells of table `table` by group (`group` a SQL expression), all runs
/// pooled.
pub(super) async fn scan_groups(
    ctx: &SessionContext,
    table: &str,
    group: &str,
) -> Result<GroupScan> {
    Ok(GroupScan(
        cells(ctx, table, "''", group, &[]).await?.collect().await?,
    ))
}

/// Numbers the names of `scan` in `dict`: its (pass-rate) cells.
pub(super) fn build_groups(scan: &GroupScan, dict: &mut Dictionary) -> Result<Vec<Cell>> {
    let mut runs = Names::default();
    let mut out = Vec::new();
    fill(&scan.0, &[], dict, &mut runs, &mut out)?;
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
    // Dense by task number (every task has a rank): no hashing per cell.
    let mut acc: Vec<(f64, u64)> = vec![(0.0, 0); ranks.len()];
    for c in cells {
        if c.metric != metric
            || run.is_some_and(|r| r != c.run)
            || group.is_some_and(|g| g != c.group)
        {
            continue;
        }
        let e = &mut acc[c.task as usize];
        e.0 += c.sum;
        e.1 += c.n;
    }
    #[allow(clippy::cast_precision_loss, reason = "row counts")]
    let mut out: Vec<(u32, f64, u64)> = acc
        .into_iter()
        .enumerate()
        .filter(|(_, (_, n))| *n > 0)
        .map(|(t, (s, n))| (ranks[t], s / n as f64, n))
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
