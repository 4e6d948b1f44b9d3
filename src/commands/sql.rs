//! `wai sql`: DataFusion SQL over rows, read-only, with canned queries.
//!
//! Parquet inputs are scanned in place (projection and predicate pushdown apply). JSONL inputs are
//! first converted, streaming, to Parquet in a scratch folder that is removed afterwards.

use std::io::Write;

use serde_json::{Value, json};

use super::{Context, Outcome};
use crate::cli::SqlArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::query::{self, Destination};
use crate::pipeline::session;
use crate::queries;
use crate::report::envelope::{Envelope, Output};
use crate::report::plural;
use crate::report::table;

/// What `--json` reports for a query.
#[derive(serde::Serialize)]
struct Report<'a> {
    /// The canned query's name, if one ran.
    query: Option<&'a str>,
    /// The tables the query could read.
    tables: Vec<String>,
    /// Rows in the result.
    rows: u64,
    /// The result, when it went into the document.
    result: Option<Value>,
}

/// `wai sql --list`: the canned queries and their parameters.
fn list() -> Result<Outcome> {
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
                let names: Vec<String> = params.iter().map(|p| format!("${p}")).collect();
                format!(" (params: {})", names.join(", "))
            };
            format!("{:width$}  {}{params}", q.name, q.description())
        })
        .collect::<Vec<_>>()
        .join("\n");
    let queries: Vec<Value> = (queries::QUERIES.iter())
        .map(|q| json!({"name": q.name, "description": q.description(), "params": q.params()}))
        .collect();
    let json = to_json(Envelope::new("sql", json!({ "queries": queries })))?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}

/// The query to run and the parameters it needs: the one given, or a canned one by name.
fn query_of(args: &SqlArgs) -> Result<(String, Vec<&'static str>)> {
    match (&args.sql, &args.canned) {
        (Some(sql), None) => Ok((sql.clone(), Vec::new())),
        (None, Some(name)) => {
            let q = queries::find(name).ok_or_else(|| {
                let names: Vec<String> = queries::QUERIES
                    .iter()
                    .map(|q| format!("`{}`", q.name))
                    .collect();
                Error::Usage(format!(
                    "no canned query `{name}`; there are {}",
                    names.join(", ")
                ))
            })?;
            Ok((q.sql.to_owned(), q.params()))
        }
        _ => Err(Error::Usage("give a QUERY or `--query NAME`".into())),
    }
}

fn to_json<R: serde::Serialize>(envelope: Envelope<R>) -> Result<Value> {
    serde_json::to_value(envelope)
        .map_err(|e| Error::Internal(format!("the sql report does not serialize: {e}")))
}

/// Registers a lake's tables in `context`: each results folder as `results_<stage>` (its committed
/// files, their columns merged), and each rows folder (`rows`, `scored`, `guarded`, `selected`)
/// as a table of its committed files. Files of runs not committed are not read.
pub(crate) fn lake_tables(
    ctx: &Context,
    context: &datafusion::execution::context::SessionContext,
    root: &std::path::Path,
    scratch: &std::path::Path,
) -> Result<Vec<String>> {
    use crate::pipeline::lake::{self, Lake};
    let lake = Lake::open(root)?;
    let manifest = lake.manifest()?;
    let mut results: std::collections::BTreeMap<String, Vec<String>> =
        std::collections::BTreeMap::new();
    let mut rows: std::collections::BTreeMap<String, Vec<String>> =
        std::collections::BTreeMap::new();
    for run in &manifest.runs {
        for stage in &run.stages {
            let table = format!("results_{}", stage.kind.replace('-', "_"));
            results
                .entry(table)
                .or_default()
                .push(lake.path(&stage.results).display().to_string());
            for out in &stage.outputs {
                let folder = out.split('/').next().unwrap_or_default();
                if lake::FOLDERS.contains(&folder)
                    && !matches!(folder, "exports" | "results")
                    && std::path::Path::new(out)
                        .extension()
                        .is_some_and(|e| e == "parquet")
                {
                    rows.entry(folder.to_owned())
                        .or_default()
                        .push(lake.path(out).display().to_string());
                }
            }
        }
    }
    // Files `wai lake compact` packed are read from the files that hold them now.
    let now = |files: &[String]| lake::readable(lake.locate(&manifest, files), Some(scratch));
    let mut names = Vec::new();
    for (name, files) in results {
        let files: Vec<std::path::PathBuf> = now(&files)?
            .into_iter()
            .map(std::path::PathBuf::from)
            .collect();
        let (schema, batches) = lake::read_merged(&files)?;
        let table = datafusion::datasource::MemTable::try_new(schema, vec![batches])?;
        context.register_table(name.as_str(), std::sync::Arc::new(table))?;
        names.push(name);
    }
    for (name, files) in rows {
        let files = now(&files)?;
        super::load_table(ctx, context, &name, &files, scratch)?;
        names.push(name);
    }
    Ok(names)
}

/// Runs `wai sql`.
pub(crate) fn run(ctx: &Context, args: &SqlArgs, stdout: &mut dyn Write) -> Result<Outcome> {
    if args.list {
        return list();
    }
    let (sql, wanted) = query_of(args)?;
    if args.format == table::Format::Parquet && args.out.is_none() {
        return Err(Error::Usage("`--format parquet` needs `--out FILE`".into()));
    }
    let values = query::params(&args.params, &wanted)?;
    let limits = super::limits(&args.limits)?;
    let context = session::limited_context(None, &limits)?;
    let scratch = super::scratch()?;
    let mut tables = Vec::new();
    if let Some(root) = &args.lake {
        tables.extend(lake_tables(ctx, &context, root, scratch.path())?);
    }
    for (name, paths) in query::table_specs(&args.tables) {
        // Rows in memory are no file an output could land on (and resolving them writes a copy).
        if let Some(out) = &args.out
            && !paths.iter().all(|p| crate::pipeline::memory::is_memory(p))
        {
            let inputs = ctx
                .runtime
                .block_on(crate::pipeline::source::resolve(&paths))?;
            crate::pipeline::output::not_an_input(out, &inputs)?;
        }
        super::load_table(ctx, &context, &name, &paths, scratch.path())?;
        tables.push(name);
    }
    let to = match &args.out {
        Some(path) => Destination::File(path, args.format),
        None if ctx.json => Destination::Json,
        None => Destination::Writer(stdout, args.format),
    };
    let (rows, result) = query::run_query(ctx, &context, &sql, values, to, &limits)?;
    let text = match &args.out {
        Some(path) => format!("wrote {} to `{}`", plural(rows, "row"), path.display()),
        None => String::new(),
    };
    let report = Report {
        query: args.canned.as_deref(),
        tables,
        rows,
        result,
    };
    let mut envelope = Envelope::new("sql", report).inputs(&args.tables);
    if let Some(path) = &args.out {
        envelope = envelope.output(Output::new(path.display(), "rows").rows(rows));
    }
    let json = to_json(envelope)?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
