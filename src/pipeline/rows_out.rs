//! Writing rows: the output's format from its name, a sink on its own thread, and the streaming
//! loop every row-to-row command runs (read, transform, write whole or not at all, rejects).

use std::path::Path;

use datafusion::arrow::array::RecordBatch;

use super::context::Context;
use super::io::{self, Background, JsonlSink, OnBadRow, ParquetSink, ReadCounts, Sink};
use super::read::Reader;
use super::source::{self, Format};
use crate::error::{Error, Result};
use crate::schema::row_schema;

/// The format `path` should be written in.
pub fn output_format(path: &Path, to: Option<Format>) -> Result<Format> {
    if let Some(asked) = to {
        // The name says a format too: the two must agree.
        if let Some(named) = Format::from_name(&path.to_string_lossy())
            && named != asked
        {
            return Err(Error::Usage(format!(
                "`{}` is named as {} but --to asks for {}: name the output for the format it is in",
                path.display(),
                named.name(),
                asked.name()
            )));
        }
        return Ok(asked);
    }
    if source::is_url(&path.to_string_lossy()) {
        return Err(Error::Usage(format!(
            "cannot write to `{}`: outputs are local files for now; write locally and copy",
            path.display()
        )));
    }
    Format::from_name(&path.to_string_lossy()).ok_or_else(|| {
        Error::Usage(format!(
            "cannot tell the output format of `{}`: name it `.parquet` or `.jsonl`, or pass `--to`",
            path.display()
        ))
    })
}

/// Opens a sink for `path` in `format`, writing on its own thread.
pub fn sink(path: &Path, format: Format) -> Result<Box<dyn Sink>> {
    let inner: Box<dyn Sink> = match format {
        Format::Parquet => Box::new(ParquetSink::create(path, row_schema())?),
        Format::Jsonl => Box::new(JsonlSink::create(path)?),
    };
    Ok(Box::new(Background::spawn(inner)))
}

/// Reads `inputs` as row batches, passes each through `each`, and writes what it returns to
/// `out_path` in `format`, whole or not at all. Bad rows stop the run, or go to `rejects_path`.
pub fn stream_rows(
    ctx: &Context,
    inputs: &[source::Input],
    out_path: &Path,
    rejects_path: Option<&Path>,
    format: Format,
    what: &str,
    each: &mut dyn FnMut(RecordBatch) -> Result<Vec<RecordBatch>>,
) -> Result<ReadCounts> {
    stream_rows_with(
        ctx,
        inputs,
        out_path,
        rejects_path,
        format,
        what,
        &mut |_, batch| each(batch),
        &|| Ok(()),
    )
}

/// [`stream_rows`], with `each` told which input (its index) a batch came from, and `last_check`
/// run once every row is read, before the output is put in place: an error there leaves nothing
/// written.
#[allow(
    clippy::too_many_arguments,
    reason = "stream_rows' arguments and two hooks"
)]
pub fn stream_rows_with(
    ctx: &Context,
    inputs: &[source::Input],
    out_path: &Path,
    rejects_path: Option<&Path>,
    format: Format,
    what: &str,
    each: &mut dyn FnMut(usize, RecordBatch) -> Result<Vec<RecordBatch>>,
    last_check: &dyn Fn() -> Result<()>,
) -> Result<ReadCounts> {
    let total = inputs.iter().map(|i| i.size).sum::<Option<u64>>();
    let bar = ctx.bytes_bar(total, what);
    let mut out = sink(out_path, format)?;
    // The rejects file is opened before any work, so a place it cannot be written fails first.
    let rejects_file = rejects_path.map(io::AtomicFile::create).transpose()?;
    let mut rejects = Vec::new();
    let on_bad = if rejects_path.is_some() {
        OnBadRow::Reject(&mut rejects)
    } else {
        OnBadRow::Fail
    };
    let mut reader = Reader::new(
        ctx.runtime.handle().clone(),
        on_bad,
        Box::new(|n| bar.inc(n)),
    );
    for (i, input) in inputs.iter().enumerate() {
        reader.read(input, &mut |batch| {
            for piece in each(i, batch)? {
                out.write(&piece)?;
            }
            Ok(())
        })?;
    }
    let counts = reader.counts;
    drop(reader);
    last_check()?;
    io::finish_with_rejects(out, rejects_file.map(|f| (f, rejects.as_slice())))?;
    bar.finish_and_clear();
    Ok(counts)
}
