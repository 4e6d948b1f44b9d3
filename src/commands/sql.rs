//! `wai sql`: DataFusion SQL over rows, read-only, with canned queries.
//!
//! Parquet inputs are scanned in place (projection and predicate pushdown apply). JSONL inputs are
//! first converted, streaming, to Parquet in a scratch folder that is removed afterwards.

use std::io::Write;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::parquet::arrow::ArrowWriter;
use futures::StreamExt;
use serde_json::json;

use super::{Context, Outcome};
use crate::cli::SqlArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::AtomicFile;
use crate::pipeline::session;
use crate::queries;
use crate::report::plural;
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

/// Splits `--table` specs into (name, paths) in order of first appearance.
fn table_specs(specs: &[String]) -> Vec<(String, Vec<String>)> {
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

fn list() -> Outcome {
    let width = queries::QUERIES
        .iter()
        .map(|q| q.name.len())
        .max()
        .unwrap_or(0);
    let text = queries::QUERIES
        .iter()
        .map(|q| {
            let params = q.params();
            let params = if params.is_empty() {
                String::new()
            } else {
                format!(
                    " (params: {})",
                    params
                        .iter()
                        .map(|p| format!("${p}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            format!("{:width$}  {}{params}", q.name, q.description())
        })
        .collect::<Vec<_>>()
        .join("\n");
    let json = json!({
        "version": 1,
        "command": "sql",
        "queries": queries::QUERIES.iter().map(|q| json!({
            "name": q.name, "description": q.description(), "params": q.params(),
        })).collect::<Vec<_>>(),
    });
    Outcome {
        text,
        json,
        status: ExitStatus::Success,
    }
}

fn params(args: &SqlArgs, wanted: &[&str]) -> Result<Vec<(String, ScalarValue)>> {
    let mut out = Vec::new();
    for p in &args.params {
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

/// Runs `wai sql`.
pub fn run(ctx: &Context, args: &SqlArgs, stdout: &mut dyn Write) -> Result<Outcome> {
    if args.list {
        return Ok(list());
    }
    let started = Instant::now();
    let (sql, wanted) = match (&args.sql, &args.canned) {
        (Some(sql), None) => (sql.clone(), Vec::new()),
        (None, Some(name)) => {
            let q = queries::find(name).ok_or_else(|| {
                Error::Usage(format!(
                    "no canned query `{name}`; there are {}",
                    queries::QUERIES
                        .iter()
                        .map(|q| format!("`{}`", q.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            (q.sql.to_owned(), q.params())
        }
        _ => return Err(Error::Usage("give a QUERY or `--query NAME`".into())),
    };
    if args.format == table::Format::Parquet && args.out.is_none() {
        return Err(Error::Usage("`--format parquet` needs `--out FILE`".into()));
    }
    let values = params(args, &wanted)?;
    let context = session::new_context(None)?;
    let scratch = super::scratch()?;
    let mut tables = Vec::new();
    for (name, paths) in table_specs(&args.tables) {
        if let Some(out) = &args.out {
            let inputs = ctx
                .runtime
                .block_on(crate::pipeline::source::resolve(&paths))?;
            crate::pipeline::output::not_an_input(out, &inputs)?;
        }
        super::load_table(ctx, &context, &name, &paths, scratch.path())?;
        tables.push(name);
    }
    let frame = ctx.runtime.block_on(async {
        session::bounded_sql(&sql, "the query")?;
        Ok::<_, crate::Error>(context.sql_with_options(&sql, session::read_only()).await?)
    })?;
    let frame = if values.is_empty() {
        frame
    } else {
        frame.with_param_values(values)?
    };
    let schema = std::sync::Arc::new(frame.schema().as_arrow().clone());
    let mut stream = ctx.runtime.block_on(frame.execute_stream())?;
    let mut rows = 0u64;
    let mut result: Option<serde_json::Value> = None;
    let mut next = || -> Option<Result<RecordBatch>> {
        ctx.runtime
            .block_on(stream.next())
            .map(|r| r.map_err(Error::from))
    };
    match (&args.out, args.format) {
        (Some(path), table::Format::Parquet) => {
            let file = AtomicFile::create(path)?;
            let mut w = ArrowWriter::try_new(file.writer()?, schema, None)?;
            while let Some(batch) = next() {
                let batch = batch?;
                rows += batch.num_rows() as u64;
                w.write(&batch)?;
            }
            w.close()?;
            file.commit()?;
        }
        (out, format) => {
            let mut batches = Vec::new();
            while let Some(batch) = next() {
                let batch = batch?;
                rows += batch.num_rows() as u64;
                batches.push(batch);
            }
            match out {
                Some(path) => {
                    let file = AtomicFile::create(path)?;
                    let mut w = std::io::BufWriter::new(file.writer()?);
                    table::write(format, &schema, &batches, &mut w)?;
                    w.flush().map_err(|e| Error::io(path, e))?;
                    drop(w);
                    file.commit()?;
                }
                None if ctx.json => {
                    let mut buf = Vec::new();
                    table::write(table::Format::Json, &schema, &batches, &mut buf)?;
                    result = Some(
                        serde_json::from_slice(&buf)
                            .unwrap_or(serde_json::Value::Array(Vec::new())),
                    );
                }
                None => table::write(format, &schema, &batches, stdout)?,
            }
        }
    }
    let text = match &args.out {
        Some(path) => format!("wrote {} to `{}`", plural(rows, "row"), path.display()),
        None => String::new(),
    };
    let json = json!({
        "version": 1, "command": "sql", "query": args.canned, "tables": tables, "rows": rows,
        "output": args.out.as_ref().map(|p| p.display().to_string()),
        "result": result,
        "elapsed_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    });
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
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
}
