//! Tables a run reads: inputs resolved, JSONL converted to Parquet in scratch space, registered
//! in a session.

use datafusion::prelude::SessionContext;

use super::context::Context;
use super::io::{OnBadRow, ParquetSink, Sink};
use super::read::Reader;
use super::scratch::{Scratch, scratch};
use super::session;
use super::source::{self, Format, Input};
use crate::error::{Error, Result};
use crate::schema::row_schema;

/// Converts JSONL inputs to Parquet files in `scratch`, so every table is scanned as Parquet.
pub fn as_parquet(
    ctx: &Context,
    inputs: Vec<Input>,
    scratch: &std::path::Path,
) -> Result<Vec<Input>> {
    let mut out = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.into_iter().enumerate() {
        if input.format == Format::Parquet {
            out.push(input);
            continue;
        }
        let path = scratch.join(format!("input-{i}.parquet"));
        let mut sink = Box::new(ParquetSink::create(&path, row_schema())?);
        let mut reader = Reader::new(
            ctx.runtime.handle().clone(),
            OnBadRow::Fail,
            Box::new(|_| {}),
        );
        reader.read(&input, &mut |batch| sink.write(&batch))?;
        drop(reader);
        sink.finish()?;
        let size = std::fs::metadata(&path)
            .map_err(|e| Error::io(&path, e))?
            .len();
        out.push(Input {
            display: input.display,
            location: source::Location::Local(path),
            format: Format::Parquet,
            size: Some(size),
        });
    }
    Ok(out)
}

/// Resolves `specs` and registers them in `context` as one table `name`. JSONL inputs are
/// converted, streaming, to Parquet files in `scratch` first (bad lines stop with an error).
pub fn load_table(
    ctx: &Context,
    context: &SessionContext,
    name: &str,
    specs: &[String],
    scratch: &std::path::Path,
) -> Result<()> {
    // Rows in memory are a table of their own, their columns shared (`pipeline::memory`).
    if let [spec] = specs
        && super::memory::is_memory(spec)
    {
        let (display, table) = super::memory::table(spec)?;
        if let Ok(mut files) = session::REGISTERED.lock() {
            files.push(display);
        }
        context.register_table(name, table)?;
        return Ok(());
    }
    let inputs = ctx.runtime.block_on(source::resolve(specs))?;
    // One folder per table: tables loaded into one scratch must not share converted files.
    let folder = scratch.join(format!("table-{name}"));
    std::fs::create_dir_all(&folder).map_err(|e| Error::io(&folder, e))?;
    let inputs = as_parquet(ctx, inputs, &folder)?;
    ctx.runtime
        .block_on(session::register_parquet(context, name, &inputs))
}

/// A session with `inputs` registered as table `rows`, and the scratch folder its converted
/// JSONL inputs live in (keep it alive as long as the session).
pub fn rows_session(ctx: &Context, inputs: &[String]) -> Result<(SessionContext, Scratch)> {
    let context = session::new_context(None)?;
    let scratch = scratch()?;
    load_table(ctx, &context, "rows", inputs, scratch.path())?;
    Ok((context, scratch))
}

/// As [`rows_session`], for a user's query: the session is held to `limits`' memory.
pub fn limited_rows_session(
    ctx: &Context,
    inputs: &[String],
    limits: &super::limits::Limits,
) -> Result<(SessionContext, Scratch)> {
    let context = session::limited_context(None, limits)?;
    let scratch = scratch()?;
    load_table(ctx, &context, "rows", inputs, scratch.path())?;
    Ok((context, scratch))
}

/// Every row of `inputs`, in file order (for stages that need the whole table in memory).
pub fn all_rows(
    ctx: &Context,
    inputs: &[String],
) -> Result<Vec<datafusion::arrow::array::RecordBatch>> {
    let (context, _scratch) = rows_session(ctx, inputs)?;
    ctx.runtime.block_on(session::collect_in_file_order(
        &context,
        "SELECT * FROM rows",
    ))
}
