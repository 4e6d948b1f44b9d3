//! Read-only SQL over tables of rows: `--table` specs into named tables, `--param` values into
//! placeholders, and a query's result streamed to a file (Parquet, written as it comes) or
//! gathered for a table, CSV, JSON Lines or the `--json` document.

use std::io::Write;
use std::path::Path;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use datafusion::execution::memory_pool::MemoryConsumer;

use super::context::Context;
use super::io::AtomicFile;
use super::limits::{self, Limits};
use super::session;
use crate::error::{Error, Result};
use crate::report::table;

/// The table name a bare `--table PATH` gets.
pub const DEFAULT_TABLE: &str = "rows";

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Splits `--table` specs (`NAME=PATH` or `PATH`) into (name, paths) in order of first
/// appearance.
pub fn table_specs(specs: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for spec in specs {
        let (name, path) = match spec.split_once('=') {
            Some((name, path)) if is_identifier(name) => (name.to_owned(), path.to_owned()),
            _ => (DEFAULT_TABLE.to_owned(), spec.clone()),
        };
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, paths)) => paths.push(path),
            None => out.push((name, vec![path])),
        }
    }
    out
}

/// The `--param NAME=VALUE` values as placeholders' values; every name in `wanted` must be
/// given.
pub fn params(given: &[String], wanted: &[&str]) -> Result<Vec<(String, ScalarValue)>> {
    let mut out = Vec::new();
    for p in given {
        let Some((name, value)) = p.split_once('=') else {
            return Err(Error::Usage(format!(
                "`--param {p}`: write it as NAME=VALUE"
            )));
        };
        let name = name.trim_start_matches('$');
        out.push((name.to_owned(), ScalarValue::Utf8(Some(value.to_owned()))));
    }
    for w in wanted {
        if !out.iter().any(|(n, _)| n == w) {
            return Err(Error::Usage(format!(
                "this query needs `--param {w}=VALUE`"
            )));
        }
    }
    Ok(out)
}

/// Where a query's result goes.
pub enum Destination<'a> {
    /// A file, in this format (Parquet is written as batches come).
    File(&'a Path, table::Format),
    /// The `--json` document (returned as a JSON array of objects).
    Json,
    /// This writer, in this format.
    Writer(&'a mut dyn Write, table::Format),
}

/// Runs `sql` (read-only, with `values` bound to its placeholders) over `context`'s tables and
/// sends its result to `to`, within `limits`: the rows gathered for a table, CSV, JSON Lines or
/// the `--json` document are counted in the session's memory pool (a Parquet file is written as
/// batches come), and past the timeout the query stops between batches. Returns the result's row
/// count and, for [`Destination::Json`], the result.
///
/// # Errors
/// SQL that does not plan, a failed query, a limit passed (a usage error that names it), or a
/// failed write.
pub fn run_query(
    ctx: &Context,
    context: &SessionContext,
    sql: &str,
    values: Vec<(String, ScalarValue)>,
    to: Destination<'_>,
    limits: &Limits,
) -> Result<(u64, Option<serde_json::Value>)> {
    let deadline = limits.timeout.map(|t| tokio::time::Instant::now() + t);
    // Within the deadline, if there is one.
    let within = |work: std::pin::Pin<Box<dyn Future<Output = Result<_>> + '_>>| {
        ctx.runtime.block_on(async {
            match deadline {
                Some(d) => tokio::time::timeout_at(d, work)
                    .await
                    .unwrap_or_else(|_| Err(limits::over_time(limits))),
                None => work.await,
            }
        })
    };
    let stream = within(Box::pin(async {
        session::bounded_sql(sql, "the query")?;
        let frame = context.sql_with_options(sql, session::read_only()).await?;
        let frame = if values.is_empty() {
            frame
        } else {
            frame.with_param_values(values)?
        };
        Ok(frame.execute_stream().await?)
    }))
    .map_err(|e| limits::over_memory(e, limits))?;
    gather(ctx, context, stream, to, limits, deadline).map_err(|e| limits::over_memory(e, limits))
}

/// The batches of `stream` into `to` (see [`run_query`]).
fn gather(
    ctx: &Context,
    context: &SessionContext,
    mut stream: datafusion::physical_plan::SendableRecordBatchStream,
    to: Destination<'_>,
    limits: &Limits,
    deadline: Option<tokio::time::Instant>,
) -> Result<(u64, Option<serde_json::Value>)> {
    let schema = stream.schema();
    let mut rows = 0u64;
    let mut next = || -> Option<Result<RecordBatch>> {
        ctx.runtime.block_on(async {
            match deadline {
                Some(d) => match tokio::time::timeout_at(d, stream.next()).await {
                    Ok(batch) => batch.map(|r| r.map_err(Error::from)),
                    Err(_) => Some(Err(limits::over_time(limits))),
                },
                None => stream.next().await.map(|r| r.map_err(Error::from)),
            }
        })
    };
    if let Destination::File(path, table::Format::Parquet) = to {
        let file = AtomicFile::create(path)?;
        let mut w = ArrowWriter::try_new(file.writer()?, schema, None)?;
        while let Some(batch) = next() {
            let batch = batch?;
            rows += batch.num_rows() as u64;
            w.write(&batch)?;
        }
        w.close()?;
        file.commit()?;
        return Ok((rows, None));
    }
    // The gathered result is held to the memory limit with everything else the query holds.
    let held =
        MemoryConsumer::new("the gathered result").register(&context.runtime_env().memory_pool);
    let mut batches = Vec::new();
    while let Some(batch) = next() {
        let batch = batch?;
        held.try_grow(batch.get_array_memory_size())?;
        rows += batch.num_rows() as u64;
        batches.push(batch);
    }
    let mut result = None;
    match to {
        Destination::File(path, format) => {
            let file = AtomicFile::create(path)?;
            let mut w = std::io::BufWriter::new(file.writer()?);
            table::write(format, &schema, &batches, &mut w)?;
            w.flush().map_err(|e| Error::io(path, e))?;
            drop(w);
            file.commit()?;
        }
        Destination::Json => {
            let mut buf = Vec::new();
            table::write(table::Format::Json, &schema, &batches, &mut buf)?;
            result =
                Some(serde_json::from_slice(&buf).unwrap_or(serde_json::Value::Array(Vec::new())));
        }
        Destination::Writer(out, format) => {
            table::write(format, &schema, &batches, out).map_err(closed_stdout)?;
        }
    }
    Ok((rows, result))
}

/// A write to stdout that failed because its reader went away (`wai sql ... | head`), as the
/// closed pipe the binary ends on quietly, whichever writer (table, CSV, JSON) met it.
fn closed_stdout(e: Error) -> Error {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    let mut closed = false;
    while let Some(s) = source {
        closed |= s
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || s.to_string().contains("Broken pipe");
        source = s.source();
    }
    if closed {
        Error::io(
            "<stdout>",
            std::io::Error::from(std::io::ErrorKind::BrokenPipe),
        )
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_specs_name_and_group() {
        let specs = ["a.parquet", "t=b.parquet", "s3://x/y?v=1", "a2.parquet"].map(String::from);
        assert_eq!(
            table_specs(&specs),
            vec![
                (
                    "rows".to_owned(),
                    vec![
                        "a.parquet".to_owned(),
                        "s3://x/y?v=1".to_owned(),
                        "a2.parquet".to_owned()
                    ]
                ),
                ("t".to_owned(), vec!["b.parquet".to_owned()]),
            ]
        );
    }

    #[test]
    fn params_bind_by_name_and_the_wanted_must_be_given() {
        let given = ["$task=a".to_owned(), "n=3".to_owned()];
        let values = params(&given, &["task"]).expect("bound");
        assert_eq!(values[0].0, "task");
        assert_eq!(values[1].1, ScalarValue::Utf8(Some("3".into())));
        assert!(params(&given, &["missing"]).is_err());
        assert!(params(&["bare".to_owned()], &[]).is_err());
    }
}
