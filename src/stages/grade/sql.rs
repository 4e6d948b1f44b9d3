//! SQL judges, vectorized by DataFusion.
//!
//! - An **expression** over a row's columns gives the reward (`final_text ILIKE '%refund%'`,
//!   `array_has(tools_used, 'issue_refund')`, `CASE ... END`); a boolean reads as 1 or 0. It is
//!   planned once and evaluated on each batch as it streams by.
//! - A **query** over the table `rows` (`SELECT rollout_id, reward, reason, ... FROM rows ...`)
//!   sees every row at once (joins, windows, per-task aggregates). It returns `rollout_id`,
//!   `reward`, optionally `reason`, and any other numeric columns as markers; rows it does not
//!   return are marked `missing_reward`.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::{CastOptions, cast, cast_with_options};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::common::DFSchema;
use datafusion::execution::context::SessionContext;
use datafusion::physical_expr::PhysicalExpr;

use super::{Judge, Status, Verdict, verdict};
use crate::error::{Error, Result};
use crate::pipeline::session;
use crate::schema::{col, row_schema};

/// Whether `sql` is a query (else an expression).
pub fn is_query(sql: &str) -> bool {
    let head = sql.trim_start().to_ascii_lowercase();
    head.starts_with("select") || head.starts_with("with") || head.starts_with('(')
}

/// A judge whose reward is one SQL expression over the row.
pub struct ExpressionJudge {
    name: String,
    text: String,
    expr: Arc<dyn PhysicalExpr>,
    /// The columns the expression names.
    reads: Vec<String>,
}

impl ExpressionJudge {
    /// Plans `sql` against the row schema.
    pub fn new(name: String, sql: &str) -> Result<Self> {
        let context = session::new_context(Some(1))?;
        let schema = DFSchema::try_from(row_schema().as_ref().clone())?;
        let usage = |e: datafusion::error::DataFusionError| {
            Error::Usage(format!("the SQL judge `{}`: {e}", sql.trim()))
        };
        session::bounded_sql(sql, &format!("the SQL judge `{name}`"))?;
        let logical = context.parse_sql_expr(sql, &schema).map_err(usage)?;
        let mut reads: Vec<String> = logical
            .column_refs()
            .into_iter()
            .map(|c| c.name.clone())
            .collect();
        reads.sort_unstable();
        reads.dedup();
        let expr = context
            .create_physical_expr(logical, &schema)
            .map_err(usage)?;
        Ok(Self {
            name,
            text: sql.trim().to_owned(),
            expr,
            reads,
        })
    }
}

impl Judge for ExpressionJudge {
    fn name(&self) -> &str {
        &self.name
    }

    fn reads(&self) -> Option<Vec<String>> {
        Some(self.reads.clone())
    }

    fn judge(&mut self, batch: &RecordBatch) -> Result<Vec<Verdict>> {
        let value = self
            .expr
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()))
            .map_err(crate::pipeline::limits::engine_error)?;
        let rewards = cast(&value, &DataType::Float64).map_err(|e| {
            Error::Usage(format!(
                "the SQL judge `{}` gives {}, not a number or a boolean: {e}",
                self.text,
                value.data_type()
            ))
        })?;
        let rewards = rewards.as_primitive::<Float64Type>();
        Ok((0..batch.num_rows())
            .map(|i| {
                if rewards.is_null(i) {
                    return Verdict::failed(
                        Status::MissingReward,
                        format!("`{}` is null for this row", self.text),
                    );
                }
                let x = rewards.value(i);
                Verdict::reward(x, format!("`{}` = {x}", self.text))
            })
            .collect())
    }
}

/// Casting that fails on text that is not a number, instead of reading it as null.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: datafusion::arrow::util::display::FormatOptions::new(),
};

/// A failure of the judge query as a usage error, except the memory pool's refusal, which stays an
/// engine error for the caller to name its limit.
fn query_error(e: datafusion::error::DataFusionError) -> Error {
    match crate::pipeline::limits::engine_error(e) {
        Error::Engine(e)
            if !matches!(
                e.find_root(),
                datafusion::error::DataFusionError::ResourcesExhausted(_)
            ) =>
        {
            Error::Usage(format!("the SQL judge query: {e}"))
        }
        Error::Usage(why) => Error::Usage(format!("the SQL judge query: {why}")),
        other => other,
    }
}

/// A judge that looked every row up in the result of one query.
pub struct QueryJudge {
    name: String,
    verdicts: HashMap<String, Verdict>,
}

impl QueryJudge {
    /// Runs `sql` over `context`'s table `rows` and keeps its verdicts by rollout id.
    #[allow(
        clippy::result_large_err,
        reason = "a marker's error is the verdict the row gets, not a failure to carry up"
    )]
    pub async fn run(name: String, sql: &str, context: &SessionContext) -> Result<Self> {
        let usage = query_error;
        session::bounded_sql(sql, &format!("the SQL judge `{name}`"))?;
        let frame = context
            .sql_with_options(sql, session::read_only())
            .await
            .map_err(usage)?;
        let schema = frame.schema().as_arrow().clone();
        for needed in [col::ROLLOUT_ID, col::REWARD] {
            if schema.index_of(needed).is_err() {
                return Err(Error::Usage(format!(
                    "the SQL judge query must return `rollout_id` and `reward`; it returns {}",
                    schema
                        .fields()
                        .iter()
                        .map(|f| format!("`{}`", f.name()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        let batches = frame.collect().await.map_err(usage)?;
        let mut verdicts: HashMap<String, Verdict> = HashMap::new();
        let mut twice: Vec<String> = Vec::new();
        for batch in &batches {
            let ids = cast(
                batch
                    .column_by_name(col::ROLLOUT_ID)
                    .unwrap_or_else(|| unreachable!()),
                &DataType::Utf8,
            )?;
            let ids = ids.as_string::<i32>();
            let rewards = cast_with_options(
                batch
                    .column_by_name(col::REWARD)
                    .unwrap_or_else(|| unreachable!()),
                &DataType::Float64,
                &STRICT,
            )
            .map_err(|e| {
                Error::Usage(format!(
                    "the SQL judge query's `reward` is not a number: {e}"
                ))
            })?;
            let rewards = rewards.as_primitive::<Float64Type>();
            let reasons = match batch.column_by_name(col::REASON) {
                Some(r) => Some(cast(r, &DataType::Utf8)?),
                None => None,
            };
            let markers: Vec<(String, Arc<dyn Array>)> = batch
                .schema()
                .fields()
                .iter()
                .zip(batch.columns())
                .filter(|(f, _)| ![col::ROLLOUT_ID, col::REWARD, col::REASON].contains(&f.name().as_str()))
                .map(|(f, c)| {
                    cast_with_options(c, &DataType::Float64, &STRICT).map(|a| (f.name().clone(), a)).map_err(|e| {
                        Error::Usage(format!(
                            "the SQL judge query's column `{}` is not a number, so not a marker: {e}",
                            f.name()
                        ))
                    })
                })
                .collect::<Result<_>>()?;
            for i in 0..batch.num_rows() {
                if ids.is_null(i) {
                    continue;
                }
                let reason = reasons
                    .as_ref()
                    .map(AsArray::as_string::<i32>)
                    .filter(|r| r.is_valid(i))
                    .map(|r| r.value(i).to_owned())
                    .unwrap_or_default();
                let mut v = if rewards.is_null(i) {
                    Verdict::failed(
                        Status::MissingReward,
                        if reason.is_empty() {
                            "the SQL judge's reward is null".to_owned()
                        } else {
                            reason
                        },
                    )
                } else {
                    Verdict::reward(rewards.value(i), reason)
                };
                if v.status == Status::Ok {
                    for (name, values) in &markers {
                        let values = values.as_primitive::<Float64Type>();
                        let x = values.is_valid(i).then(|| values.value(i));
                        match x.map(|x| verdict::marker(name, x)).transpose() {
                            Ok(x) => v.markers.push((name.clone(), x)),
                            Err(bad) => {
                                v = bad;
                                break;
                            }
                        }
                    }
                }
                let id = ids.value(i).to_owned();
                if verdicts.insert(id.clone(), v).is_some() {
                    twice.push(id);
                }
            }
        }
        for id in twice {
            verdicts.insert(
                id,
                Verdict::failed(
                    Status::InvalidResult,
                    "the SQL judge query returned this rollout more than once",
                ),
            );
        }
        Ok(Self { name, verdicts })
    }
}

impl Judge for QueryJudge {
    fn name(&self) -> &str {
        &self.name
    }

    fn reads(&self) -> Option<Vec<String>> {
        // The query read the rows when it ran; a row is looked up by its id.
        Some(vec![col::ROLLOUT_ID.to_owned()])
    }

    fn judge(&mut self, batch: &RecordBatch) -> Result<Vec<Verdict>> {
        let ids = batch
            .column_by_name(col::ROLLOUT_ID)
            .ok_or_else(|| Error::missing_column("grade", col::ROLLOUT_ID, &batch.schema()))?
            .as_string::<i32>();
        Ok((0..batch.num_rows())
            .map(|i| {
                ids.is_valid(i)
                    .then(|| self.verdicts.get(ids.value(i)).cloned())
                    .flatten()
                    .unwrap_or_else(|| {
                        Verdict::failed(
                            Status::MissingReward,
                            "the SQL judge query returned no row for this rollout",
                        )
                    })
            })
            .collect())
    }
}
