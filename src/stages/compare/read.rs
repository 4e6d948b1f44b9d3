//! Reading the arms: both sides' cells, their training seeds and slices in one pass of queries,
//! with the optional per-task balancing of rollouts.

use std::collections::{BTreeMap, BTreeSet};

use datafusion::prelude::{DataFrame, SessionContext};

use super::arm::{self, Arm, Dictionary};
use super::{Balanced, By, Inputs, Options, PASS_AT_1, Sides};
use crate::error::{Error, Result};
use crate::stages::Session;
use crate::stages::holdout;
use crate::stages::pass_at::Slice;

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

/// Reads both arms as `opts` asks, in a scope of `session` of their own.
///
/// # Errors
/// A query failure, or a `by` column the rows lack.
pub async fn read(session: &Session, inputs: Inputs, opts: &Options) -> Result<Arms> {
    let ctx = session.scope_with(&[("before", inputs.before), ("after", inputs.after)])?;
    Box::pin(read_tables(&ctx, opts)).await
}

/// Reads tables `before` and `after` of `ctx` (a stage's scope) as `opts` asks.
async fn read_tables(ctx: &SessionContext, opts: &Options) -> Result<Arms> {
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
                    return Err(Error::option(
                        "by",
                        format!("{}: the rows have no column `{column}`", s.name()),
                    ));
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

/// Per-task binary pass rates of `before` and (when given) `after`, sorted by task id, for
/// holdout sizing.
///
/// # Errors
/// A query failure.
pub async fn pass_rates(
    session: &Session,
    before: DataFrame,
    after: Option<DataFrame>,
) -> Result<(Vec<holdout::TaskRate>, Option<Vec<holdout::TaskRate>>)> {
    let mut tables = vec![("before", before)];
    tables.extend(after.map(|a| ("after", a)));
    let ctx = session.scope_with(&tables)?;
    let mut dict = Dictionary::default();
    let b = arm::read(&ctx, "before", &mut dict).await?;
    let a = if tables.len() > 1 {
        Some(arm::read(&ctx, "after", &mut dict).await?)
    } else {
        None
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
