//! Writing rows: the output's format from its name, a sink on its own thread, the streaming
//! loop every row-to-row command runs (read, transform, write whole or not at all, rejects), and
//! its rewrite in part for a pass that changes a few columns (the others' chunks copied).

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

/// [`stream_rows`] for a pass that reads only the fields `reads` of each row (`None`: all of
/// them) and changes only the fields `writes`. Over local Parquet files laid out as the output,
/// each row group is decoded in the fields `reads` and the required ones alone (`each` gets
/// batches with every other column null, writes the `writes` fields without reading them, and
/// gives back batches of the same rows), the `writes` fields are encoded from what `each` gives,
/// and every other column chunk is copied from the input as it is: the output holds the same
/// rows as [`stream_rows`] writes, in the inputs' row groups (a row group is held in memory in
/// the columns decoded: for wai's files, [`io::ROW_GROUP_ROWS`] rows).
///
/// Otherwise (`reads` is `None`, the output is not Parquet, or an input is not a local Parquet
/// file with the row schema and readable page indexes) the rows stream as [`stream_rows`]
/// streams them.
///
/// # Errors
/// As [`stream_rows`]; a row group whose pages do not lie where its footer says (a data error
/// naming the file); `each` giving back other rows than it was given.
#[allow(
    clippy::too_many_arguments,
    reason = "stream_rows' arguments and the two column lists"
)]
pub fn splice_rows(
    ctx: &Context,
    inputs: &[source::Input],
    out_path: &Path,
    rejects_path: Option<&Path>,
    format: Format,
    what: &str,
    reads: Option<&[&str]>,
    writes: &[&str],
    each: &mut dyn FnMut(RecordBatch) -> Result<Vec<RecordBatch>>,
) -> Result<ReadCounts> {
    let spliced = match reads {
        Some(reads) => splice_parquet(
            ctx,
            inputs,
            out_path,
            rejects_path,
            format,
            what,
            reads,
            writes,
            each,
        )?,
        None => None,
    };
    match spliced {
        Some(counts) => Ok(counts),
        None => stream_rows(ctx, inputs, out_path, rejects_path, format, what, each),
    }
}

/// [`splice_rows`] over local Parquet files laid out as the output; `Ok(None)`, with nothing
/// read or written, for inputs or an output it cannot splice.
#[allow(
    clippy::too_many_arguments,
    reason = "stream_rows' arguments and the two column lists"
)]
fn splice_parquet(
    ctx: &Context,
    inputs: &[source::Input],
    out_path: &Path,
    rejects_path: Option<&Path>,
    format: Format,
    what: &str,
    reads: &[&str],
    writes: &[&str],
    each: &mut dyn FnMut(RecordBatch) -> Result<Vec<RecordBatch>>,
) -> Result<Option<ReadCounts>> {
    use super::read::SpliceSource;
    use datafusion::parquet::arrow::ArrowSchemaConverter;

    if format != Format::Parquet {
        return Ok(None);
    }
    let schema = row_schema();
    let columns = ArrowSchemaConverter::new().convert(&schema)?;
    let mut sources = Vec::with_capacity(inputs.len());
    for input in inputs {
        match SpliceSource::open(input, &schema, &columns)? {
            Some(s) => sources.push(s),
            None => return Ok(None),
        }
    }
    let position = |name: &str| {
        schema
            .index_of(name)
            .map_err(|_| Error::Internal(format!("`{name}` is not a row column")))
    };
    // The columns written are not decoded: `each` replaces them without reading them.
    let mut decoded = reads
        .iter()
        .map(|c| position(c))
        .collect::<Result<Vec<_>>>()?;
    // The columns every row has are decoded too: a batch of the row schema holds them.
    decoded.extend((0..schema.fields().len()).filter(|&i| !schema.field(i).is_nullable()));
    decoded.sort_unstable();
    decoded.dedup();
    let mut replaced = vec![false; schema.fields().len()];
    for c in writes {
        replaced[position(c)?] = true;
    }

    let total = inputs.iter().map(|i| i.size).sum::<Option<u64>>();
    let bar = ctx.bytes_bar(total, what);
    let mut out = ParquetSink::create(out_path, std::sync::Arc::clone(&schema))?;
    let rejects_file = rejects_path.map(io::AtomicFile::create).transpose()?;
    let mut counts = ReadCounts::default();
    for source in &sources {
        let input = source.input();
        tracing::info!(input = %input.display, bytes = ?input.size, "reading in part, copying the rest");
        super::session::note_read(&input.display);
        let mut counted = 0;
        for (group, rows) in source.group_rows().into_iter().enumerate() {
            let bytes = source.group_bytes(group);
            counted += bytes;
            bar.inc(bytes);
            if rows == 0 {
                // Nothing to write: the full rewrite writes no row group for it either.
                continue;
            }
            let mut done = Vec::new();
            for batch in source.read_group(group, &decoded, &schema)? {
                done.extend(each(batch)?);
            }
            let given: usize = done.iter().map(RecordBatch::num_rows).sum();
            if given != rows {
                return Err(Error::Internal(format!(
                    "`{}`: {given} rows given back for the {rows} of row group {group}",
                    input.display
                )));
            }
            out.splice_group(source, group, &done, &replaced)?;
            counts.rows += rows as u64;
        }
        // The footer and whatever else lies between the row groups.
        bar.inc(input.size.unwrap_or(0).saturating_sub(counted));
        counts.bytes += input.size.unwrap_or(0);
    }
    // A Parquet input sets no row aside: the rejects file, when asked for, is empty.
    io::finish_with_rejects(Box::new(out), rejects_file.map(|f| (f, &[][..])))?;
    bar.finish_and_clear();
    Ok(Some(counts))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, AsArray, StringArray};
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::file::properties::WriterProperties;

    use super::*;
    use crate::pipeline::io::OnBadRow;
    use crate::pipeline::row::testing::{batch_of, fixture};
    use crate::pipeline::source::{Input, Location};
    use crate::schema::col;

    fn input(path: &Path) -> Input {
        Input {
            display: path.display().to_string(),
            location: Location::Local(path.to_path_buf()),
            format: Format::Parquet,
            size: std::fs::metadata(path).ok().map(|m| m.len()),
        }
    }

    /// `batch` written by another writer than wai's, in row groups of `rows` rows.
    fn written(path: &Path, batch: &RecordBatch, rows: usize) {
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(rows))
            .build();
        let file = std::fs::File::create(path).expect("file");
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).expect("writer");
        w.write(batch).expect("written");
        w.close().expect("closed");
    }

    fn read_back(ctx: &Context, path: &Path) -> RecordBatch {
        let mut reader = Reader::new(
            ctx.runtime.handle().clone(),
            OnBadRow::Fail,
            Box::new(|_| {}),
        );
        let mut all = Vec::new();
        reader
            .read(&input(path), &mut |b| {
                all.push(b);
                Ok(())
            })
            .expect("read back");
        datafusion::arrow::compute::concat_batches(&row_schema(), &all).expect("one batch")
    }

    /// `reason` made from `rollout_id`: what the pass in these tests writes.
    fn reasons(batch: &RecordBatch) -> RecordBatch {
        let ids = batch
            .column_by_name(col::ROLLOUT_ID)
            .expect("ids")
            .as_string::<i32>();
        let reason: StringArray = ids
            .iter()
            .map(|id| id.map(|id| format!("saw {id}")))
            .collect();
        let mut columns = batch.columns().to_vec();
        columns[batch.schema().index_of(col::REASON).expect("reason")] = Arc::new(reason);
        RecordBatch::try_new(batch.schema(), columns).expect("batch")
    }

    /// Rows in three row groups, rewritten in part: the pass sees only the columns it reads and
    /// writes, the output holds every row as it was but for the column written, in the input's
    /// three row groups. An input laid out otherwise, or a JSONL output, is not rewritten in
    /// part, and nothing is written.
    #[test]
    fn a_rewrite_in_part_copies_every_other_column() {
        let dir = tempfile::tempdir().expect("dir");
        let rows = batch_of(fixture("example_scored.jsonl"));
        let n = rows.num_rows();
        let from = dir.path().join("rows.parquet");
        written(&from, &rows, n.div_ceil(3));
        let ctx = Context::new().expect("context");
        let out = dir.path().join("out.parquet");
        let mut seen = 0;
        let counts = splice_parquet(
            &ctx,
            &[input(&from)],
            &out,
            None,
            Format::Parquet,
            "test",
            &[col::ROLLOUT_ID],
            &[col::REASON],
            &mut |batch| {
                seen += batch.num_rows();
                let text = batch.column_by_name(col::FINAL_TEXT).expect("final_text");
                assert_eq!(text.null_count(), batch.num_rows(), "a column not read");
                Ok(vec![reasons(&batch)])
            },
        )
        .expect("rewritten")
        .expect("in part");
        assert_eq!((counts.rows, seen), (n as u64, n));
        assert_eq!(read_back(&ctx, &out), reasons(&rows));
        let groups = datafusion::parquet::file::reader::SerializedFileReader::new(
            std::fs::File::open(&out).expect("out"),
        )
        .map(|r| datafusion::parquet::file::reader::FileReader::metadata(&r).num_row_groups())
        .expect("footer");
        assert_eq!(groups, 3);

        // Another layout (a column fewer), or a JSONL output: the caller streams.
        let fewer = dir.path().join("fewer.parquet");
        let mut narrow = rows.clone();
        narrow.remove_column(rows.schema().index_of(col::EXTRA).expect("extra"));
        written(&fewer, &narrow, n);
        let none = dir.path().join("none.parquet");
        for (from, format) in [(&fewer, Format::Parquet), (&from, Format::Jsonl)] {
            let done = splice_parquet(
                &ctx,
                &[input(from)],
                &none,
                None,
                format,
                "test",
                &[col::ROLLOUT_ID],
                &[col::REASON],
                &mut |_| panic!("no row is read"),
            )
            .expect("no error");
            assert!(done.is_none());
            assert!(!none.exists());
        }
    }
}
