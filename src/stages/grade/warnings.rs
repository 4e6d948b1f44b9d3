//! What would make a graded run's number hollow, each warning naming its fix.
//!
//! Read from the scored rows (table `rows`) with SQL, so `wai grade` (after writing) and
//! `wai gate` (on any scored file) say the same. A warning is *hollow* when the number means
//! nothing at all (no tool was touched, the judge failed everywhere or too often); the rest are
//! coverage gaps worth fixing that leave the number readable.

use datafusion::arrow::array::RecordBatch;
use datafusion::execution::context::SessionContext;

use crate::error::{Error, Result};
use crate::stages::cells::Cells;

/// Rows without a tool call, as a count, that are worth a warning.
pub const SILENT_ROWS_MIN: u64 = 2;
/// ... or as a share of the rows.
pub const SILENT_ROWS_SHARE: f64 = 0.1;
/// The share of rows the judge may leave without an ok verdict (error, timeout, invalid result,
/// missing reward, never judged) before the run is hollow.
pub const JUDGE_FAILURE_SHARE: f64 = 0.1;
/// The least share of rows with an ok verdict for the number to mean something.
pub const MIN_GRADED_SHARE: f64 = 0.9;

/// What to check against.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Tools the agent was given (`--tools`): each should be called somewhere.
    pub declared: Vec<String>,
    /// The agent has no tools by design: do not warn that none was called.
    pub no_tools: bool,
    /// The share of rows without an ok verdict above which the run is hollow
    /// (`--max-judge-failures`).
    pub max_judge_failures: f64,
    /// The share of rows with an ok verdict below which the run is hollow.
    pub min_graded: f64,
}

/// One warning.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Warning {
    /// A stable id: `no_tool_called`, `silent_rows`, `tool_never_called`, `marker_never_fired`,
    /// `marker_never_varied`, `judge_failed`, `few_graded`, `no_rows`; `wai gate` adds `unanimous` and
    /// `no_binary_reward` from the pass@k report.
    pub kind: &'static str,
    /// What is wrong and how to fix it.
    pub text: String,
    /// Whether it makes the run hollow (`wai gate` exits 2).
    pub hollow: bool,
}

fn warn(kind: &'static str, hollow: bool, text: String) -> Warning {
    Warning { kind, text, hollow }
}

async fn query(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    Ok(ctx.sql(sql).await?.collect().await?)
}

/// Every non-null text of a column over the batches of a result.
fn texts(batches: &[RecordBatch], column: &str) -> Result<Vec<String>> {
    Ok(batches
        .iter()
        .map(|b| Cells(b).texts(column))
        .collect::<Result<Vec<_>>>()?
        .concat())
}

/// The warnings for table `rows` of `ctx`.
pub async fn check(ctx: &SessionContext, opts: &Options) -> Result<Vec<Warning>> {
    let mut out = Vec::new();
    let counts = query(
        ctx,
        "SELECT count(*) AS n, \
           count(*) FILTER (WHERE coalesce(cardinality(tools_used), 0) > 0) AS with_tools, \
           count(*) FILTER (WHERE coalesce(judge_status, CASE WHEN reward IS NULL THEN 'missing_reward' ELSE 'ok' END) <> 'ok') AS unjudged, \
           count(DISTINCT prompt) FILTER (WHERE coalesce(cardinality(tools_used), 0) = 0) AS silent_asks \
         FROM rows",
    )
    .await?;
    let b = counts
        .first()
        .ok_or_else(|| Error::Internal("warnings: no counts".into()))?;
    let n = Cells(b).count("n", 0)?;
    if n == 0 {
        out.push(warn(
            "no_rows",
            true,
            "there are no rows, so there is no number. Check the input path.".into(),
        ));
        return Ok(out);
    }
    let with_tools = Cells(b).count("with_tools", 0)?;
    let unjudged = Cells(b).count("unjudged", 0)?;

    judge_warnings(ctx, opts, n, unjudged, &mut out).await?;
    if !opts.no_tools {
        tool_warnings(ctx, opts, b, n, with_tools, &mut out).await?;
    }
    marker_warnings(ctx, n, &mut out).await?;
    Ok(out)
}

/// The judge's failures: on every row, over the failure share, or under the graded floor.
async fn judge_warnings(
    ctx: &SessionContext,
    opts: &Options,
    n: u64,
    unjudged: u64,
    out: &mut Vec<Warning>,
) -> Result<()> {
    if unjudged == n {
        let statuses = texts(
            &query(
                ctx,
                "SELECT DISTINCT coalesce(judge_status, 'missing_reward') AS s FROM rows ORDER BY 1",
            )
            .await?,
            "s",
        )?;
        let first = texts(
            &query(
                ctx,
                // The row of the lowest id: the same row whatever the partitions (a bare
                // LIMIT 1 takes whichever partition answers first).
                "SELECT reason FROM rows WHERE reason IS NOT NULL ORDER BY rollout_id, reason LIMIT 1",
            )
            .await?,
            "reason",
        )?;
        out.push(warn(
            "judge_failed",
            true,
            format!(
                "the judge failed on all {n} rows ({}){}; fix the judge and grade again.",
                statuses.join("/"),
                first
                    .first()
                    .map(|r| format!(": {}", r.chars().take(120).collect::<String>()))
                    .unwrap_or_default()
            ),
        ));
    } else if unjudged as f64 / n as f64 > opts.max_judge_failures {
        // Every row without an ok verdict counts: a judge that declines (`missing_reward`) or
        // rows never judged leave the number as empty as a judge that crashes.
        let by_status = texts(
            &query(
                ctx,
                "SELECT concat(count(*), ' ', s) AS t FROM \
                   (SELECT coalesce(judge_status, CASE WHEN reward IS NULL THEN 'missing_reward' ELSE 'ok' END) AS s FROM rows) \
                 WHERE s <> 'ok' GROUP BY s ORDER BY count(*) DESC, s",
            )
            .await?,
            "t",
        )?;
        out.push(warn(
            "judge_failed",
            true,
            format!(
                "the judge gave no verdict on {unjudged} of {n} rows ({:.0}%, over {:.0}%: {}), so the number leaves out what the judge could not read. Fix the judge (see `judge_status` and `reason` of those rows) and grade again.",
                100.0 * unjudged as f64 / n as f64,
                100.0 * opts.max_judge_failures,
                by_status.join(", ")
            ),
        ));
    } else if ((n - unjudged) as f64 / n as f64) < opts.min_graded {
        out.push(warn(
            "few_graded",
            true,
            format!(
                "only {} of {n} rows have an ok verdict ({:.0}%, under the `min_graded` floor of {:.0}%), so the number speaks for too few rows. Fix the judge and grade again.",
                n - unjudged,
                100.0 * (n - unjudged) as f64 / n as f64,
                100.0 * opts.min_graded
            ),
        ));
    }

    Ok(())
}

/// Tool use: no row called a tool, rows that called none, declared tools never called.
async fn tool_warnings(
    ctx: &SessionContext,
    opts: &Options,
    b: &datafusion::arrow::array::RecordBatch,
    n: u64,
    with_tools: u64,
    out: &mut Vec<Warning>,
) -> Result<()> {
    if with_tools == 0 {
        out.push(warn(
                "no_tool_called",
                true,
                format!(
                    "0 of {n} rows called a tool, so this score says nothing about tool use. Put the ids your world has (order numbers, account names) in the tool descriptions or in the seeds, and check the agent wrapper records its steps (or pass `no_tools` for an agent without tools)."
                ),
            ));
    } else {
        let silent = n - with_tools;
        if silent >= SILENT_ROWS_MIN || silent as f64 / n as f64 >= SILENT_ROWS_SHARE {
            let asks = texts(
                &query(
                    ctx,
                    "SELECT DISTINCT coalesce(prompt, '') AS p FROM rows \
                         WHERE coalesce(cardinality(tools_used), 0) = 0 ORDER BY 1 LIMIT 3",
                )
                .await?,
                "p",
            )?;
            let m = Cells(b).count("silent_asks", 0)?;
            let shown: Vec<String> = asks
                .iter()
                .filter(|a| !a.is_empty())
                .map(|a| a.chars().take(60).collect())
                .collect();
            let situations = if m == 1 { "situation" } else { "situations" };
            out.push(warn(
                    "silent_rows",
                    false,
                    format!(
                        "{silent} of {n} rows made no tool call ({m} {situations}{}); they score without touching a tool. Drop them from the eval or give them a seed that reaches one.",
                        if shown.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", shown.join("; "))
                        }
                    ),
                ));
        }
    }
    if !opts.declared.is_empty() {
        let called = texts(
                &query(
                    ctx,
                    "SELECT DISTINCT t FROM (SELECT unnest(tools_used) AS t FROM rows) WHERE t IS NOT NULL",
                )
                .await?,
                "t",
            )?;
        let never: Vec<&String> = opts
            .declared
            .iter()
            .filter(|d| !called.contains(d))
            .collect();
        if !never.is_empty() {
            out.push(warn(
                    "tool_never_called",
                    false,
                    format!(
                        "{} of {} declared tools were never called ({}); the policy branches behind them are untested. Add a seed ask for each.",
                        never.len(),
                        opts.declared.len(),
                        never.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ));
        }
    }
    Ok(())
}

/// Markers that never fired or never varied.
async fn marker_warnings(ctx: &SessionContext, n: u64, out: &mut Vec<Warning>) -> Result<()> {
    let markers = query(
        ctx,
        "WITH e AS (SELECT unnest(map_entries(markers)) AS m FROM rows WHERE markers IS NOT NULL) \
         SELECT m['key'] AS name, count(m['value']) AS fired, count(DISTINCT m['value']) AS kinds, \
                min(m['value']) AS v \
         FROM e GROUP BY 1 ORDER BY 1",
    )
    .await?;
    for b in &markers {
        let cells = Cells(b);
        for i in 0..b.num_rows() {
            let name = cells.text("name", i)?.unwrap_or_default();
            let fired = cells.count("fired", i)?;
            let kinds = cells.count("kinds", i)?;
            if fired == 0 {
                out.push(warn(
                    "marker_never_fired",
                    false,
                    format!(
                        "marker '{name}' fired on 0 of {n} rows; its rate is not a measurement. Add a seed ask that exercises it, or drop it from the report."
                    ),
                ));
            } else if fired >= 2 && kinds == 1 {
                let v = cells.float("v", i)?.unwrap_or_default();
                out.push(warn(
                    "marker_never_varied",
                    false,
                    format!(
                        "marker '{name}' was {} on all {fired} rows it applied to; a rate that never moves says nothing about the agent. Add a seed ask that goes the other way, or drop it from the report.",
                        crate::report::score_text(v)
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::datasource::MemTable;
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_judge_that_failed_everywhere_is_shown_by_the_same_row_at_any_partitioning() {
        let row = |id: &str, reason: &str| {
            json!({"task_id": "t", "rollout_id": id, "prompt": "p", "final_text": "x",
                   "reward": null, "judge_status": "error", "reason": reason})
        };
        let (late, early) = (
            crate::testing::batch_of([row("r9", "late failure")]),
            crate::testing::batch_of([row("r1", "first failure")]),
        );
        let opts = Options {
            declared: Vec::new(),
            no_tools: true,
            max_judge_failures: 0.5,
            min_graded: 0.5,
        };
        // The later row alone in the first partition, read first.
        for partitions in [
            vec![vec![late.clone()], vec![early.clone()]],
            vec![vec![early, late]],
        ] {
            let ctx = SessionContext::new();
            let table = MemTable::try_new(partitions[0][0].schema(), partitions).expect("table");
            ctx.register_table("rows", Arc::new(table))
                .expect("register");
            let found = check(&ctx, &opts).await.expect("checked");
            let failed = found
                .iter()
                .find(|w| w.kind == "judge_failed")
                .expect("judge_failed");
            assert!(failed.text.contains(": first failure"), "{}", failed.text);
        }
    }
}
