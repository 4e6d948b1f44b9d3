//! `wai convert`: rows between JSONL and Parquet, streaming, written whole or not at all.

use std::path::Path;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use serde_json::json;

use super::{Context, Outcome};
use crate::cli::{ConvertArgs, RowFormat, RowsOut};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::{self, Background, JsonlSink, OnBadRow, ParquetSink, ReadCounts, Sink};
use crate::pipeline::read::Reader;
use crate::pipeline::source::{self, Format};
use crate::report::plural;
use crate::schema::row_schema;

/// The format `path` should be written in.
pub fn output_format(path: &Path, to: Option<RowFormat>) -> Result<Format> {
    if let Some(to) = to {
        let asked = match to {
            RowFormat::Jsonl => Format::Jsonl,
            RowFormat::Parquet => Format::Parquet,
        };
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
/// `output` in `format`, whole or not at all. Bad rows stop the run, or go to `--rejects`.
pub fn stream_rows(
    ctx: &Context,
    inputs: &[source::Input],
    output: &RowsOut,
    format: Format,
    what: &str,
    each: &mut dyn FnMut(RecordBatch) -> Result<Vec<RecordBatch>>,
) -> Result<ReadCounts> {
    let total = inputs.iter().map(|i| i.size).sum::<Option<u64>>();
    let bar = ctx.bytes_bar(total, what);
    let mut out = sink(&output.out, format)?;
    // The rejects file is opened before any work, so a place it cannot be written fails first.
    let rejects_file = output
        .rejects
        .as_deref()
        .map(io::AtomicFile::create)
        .transpose()?;
    let mut rejects = Vec::new();
    let on_bad = if output.rejects.is_some() {
        OnBadRow::Reject(&mut rejects)
    } else {
        OnBadRow::Fail
    };
    let mut reader = Reader::new(
        ctx.runtime.handle().clone(),
        on_bad,
        Box::new(|n| bar.inc(n)),
    );
    for input in inputs {
        reader.read(input, &mut |batch| {
            for piece in each(batch)? {
                out.write(&piece)?;
            }
            Ok(())
        })?;
    }
    let counts = reader.counts;
    drop(reader);
    io::finish_with_rejects(out, rejects_file.map(|f| (f, rejects.as_slice())))?;
    bar.finish_and_clear();
    Ok(counts)
}

/// Runs `wai convert`.
pub fn run(ctx: &Context, args: &ConvertArgs) -> Result<Outcome> {
    let started = Instant::now();
    let format = output_format(&args.output.out, args.output.to)?;
    let inputs = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    crate::pipeline::output::rows_apart(&args.output.out, args.output.rejects.as_deref(), &inputs)?;
    tracing::info!(inputs = inputs.len(), output = %args.output.out.display(), "converting");
    let counts = stream_rows(
        ctx,
        &inputs,
        &args.output,
        format,
        "converting",
        &mut |batch| Ok(vec![batch]),
    )?;
    let elapsed = started.elapsed();
    let mut text = format!(
        "wrote {} to `{}` ({}) from {} in {:.1} s",
        plural(counts.rows, "row"),
        args.output.out.display(),
        match format {
            Format::Parquet => "parquet",
            Format::Jsonl => "jsonl",
        },
        plural(inputs.len() as u64, "input"),
        elapsed.as_secs_f64(),
    );
    if let Some(path) = &args.output.rejects {
        text.push_str(&format!(
            "\n{} set aside in `{}`",
            plural(counts.rejected, "bad line"),
            path.display()
        ));
    }
    let json = json!({
        "version": 1,
        "command": "convert",
        "inputs": inputs.iter().map(|i| i.display.clone()).collect::<Vec<_>>(),
        "output": args.output.out.display().to_string(),
        "format": format,
        "rows": counts.rows,
        "rejected": counts.rejected,
        "rejects_file": args.output.rejects.as_ref().map(|p| p.display().to_string()),
        "bytes_in": counts.bytes,
        "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    });
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
