//! The Parquet sink: row groups of [`ROW_GROUP_ROWS`](super::ROW_GROUP_ROWS) rows, free text without
//! dictionaries or statistics, columns encoded in parallel.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_writer::{
    ArrowColumnChunk, ArrowLeafColumn, ArrowRowGroupWriterFactory, compute_leaves,
};
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};
use datafusion::parquet::file::writer::SerializedFileWriter;
use datafusion::parquet::schema::types::ColumnPath;
use rayon::prelude::*;

use super::ROW_GROUP_ROWS;
use super::atomic::{AtomicFile, Writeback};
use super::sink::Sink;
use crate::error::{Error, Result};
use crate::pipeline::read::SpliceSource;
use crate::schema::col;

/// The free-text leaf columns of the row schema (Parquet column paths). They are written
/// without a dictionary (their values rarely repeat within a page, and zstd takes the repeats)
/// and without statistics (the minimum and maximum of free text prune nothing, and computing
/// them compares every value): about 10% less time to write a file of rows, and a file a little
/// smaller.
pub const FREE_TEXT: [&str; 11] = [
    "messages.list.item.content",
    "messages.list.item.tool_calls.list.item.arguments",
    "messages.list.item.tool_calls.list.item.arguments_text",
    "steps.list.item.arguments",
    "steps.list.item.result",
    "steps.list.item.text",
    "steps.list.item.user",
    "final_text",
    "privileged",
    "judge_meta",
    "extra",
];

/// The text leaf columns that keep their dictionary (their values repeat: roles, tool names,
/// call ids, a task's prompt and lineage) but are written without statistics: no query prunes a
/// row group by them (a list's items and a JSON text are not pruned on; prompts are in rollout
/// order, so a row group's minimum and maximum span nearly every prompt), and their minimum and
/// maximum cost a comparison per value, about 4% of the instructions of rewriting a file of rows.
pub const UNPRUNED: [&str; 13] = [
    "prompt",
    "messages.list.item.role",
    "messages.list.item.name",
    "messages.list.item.tool_call_id",
    "messages.list.item.tool_calls.list.item.id",
    "messages.list.item.tool_calls.list.item.name",
    "steps.list.item.tool",
    "tools_used.list.item",
    "dims.entries.key",
    "dims.entries.value",
    "markers.entries.key",
    "lineage",
    "sampling",
];

/// A leaf column's path from its dotted name.
fn leaf_path(leaf: &str) -> ColumnPath {
    ColumnPath::from(leaf.split('.').map(str::to_owned).collect::<Vec<_>>())
}

/// Writes row batches to a Parquet file (zstd level 1), its column chunks encoded in parallel:
/// rows are gathered into a row group of [`ROW_GROUP_ROWS`], then every leaf column of the group
/// is encoded and compressed on its own rayon task, and the chunks are appended in schema order.
pub struct ParquetSink {
    writer: SerializedFileWriter<Writeback>,
    factory: ArrowRowGroupWriterFactory,
    schema: datafusion::arrow::datatypes::SchemaRef,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    row_groups: usize,
    out: AtomicFile,
}

impl ParquetSink {
    /// Starts a Parquet file at `path` with `schema`.
    pub fn create(path: &Path, schema: datafusion::arrow::datatypes::SchemaRef) -> Result<Self> {
        let out = AtomicFile::create(path)?;
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
        for leaf in FREE_TEXT {
            let path = leaf_path(leaf);
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_statistics_enabled(path, EnabledStatistics::None);
        }
        // A rollout id is unique: its dictionary would hold every value, overflow and fall back
        // to plain after most of a row group. Its statistics stay (lookups by id use them).
        props = props.set_column_dictionary_enabled(ColumnPath::from(col::ROLLOUT_ID), false);
        for leaf in UNPRUNED {
            props = props.set_column_statistics_enabled(leaf_path(leaf), EnabledStatistics::None);
        }
        let props = props.build();
        // The Arrow writer puts the Arrow schema in the file's metadata; its lower half writes.
        let (writer, factory) =
            ArrowWriter::try_new(out.writer()?, Arc::clone(&schema), Some(props))?
                .into_serialized_writer()?;
        Ok(Self {
            writer,
            factory,
            schema,
            pending: Vec::new(),
            pending_rows: 0,
            row_groups: 0,
            out,
        })
    }

    /// Encodes the gathered rows as one row group.
    fn flush(&mut self) -> Result<()> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let batches = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        let chunks = self.encode(&batches, &|_| true)?;
        let mut row_group = self.writer.next_row_group()?;
        for chunk in chunks.into_iter().flatten() {
            chunk.append_to_row_group(&mut row_group)?;
        }
        row_group.close()?;
        Ok(())
    }

    /// The next row group's leaf columns of the fields `wanted` picks (by position), encoded
    /// from `batches`, each leaf on its own rayon task; `None` for the leaves of other fields.
    fn encode(
        &mut self,
        batches: &[RecordBatch],
        wanted: &(dyn Fn(usize) -> bool + Sync),
    ) -> Result<Vec<Option<ArrowColumnChunk>>> {
        let writers = self.factory.create_column_writers(self.row_groups)?;
        self.row_groups += 1;
        // Each field's leaves for every batch, the fields in parallel.
        let fields = self.schema.fields();
        let by_field: Vec<Option<Vec<Vec<ArrowLeafColumn>>>> = (0..fields.len())
            .into_par_iter()
            .map(|c| {
                if !wanted(c) {
                    return Ok(None);
                }
                batches
                    .iter()
                    .map(|b| Ok(compute_leaves(&fields[c], b.column(c))?))
                    .collect::<Result<Vec<_>>>()
                    .map(Some)
            })
            .collect::<Result<_>>()?;
        // Leaf k of the file: its piece of every batch, in order.
        let descr = self.writer.schema_descr();
        let mut per_leaf: Vec<Option<Vec<ArrowLeafColumn>>> = Vec::with_capacity(writers.len());
        for (c, field) in by_field.into_iter().enumerate() {
            let Some(field) = field else {
                let leaves = (0..descr.num_columns())
                    .filter(|&k| descr.get_column_root_idx(k) == c)
                    .count();
                per_leaf.extend(std::iter::repeat_with(|| None).take(leaves));
                continue;
            };
            let mut leaves: Vec<Vec<ArrowLeafColumn>> = Vec::new();
            for batch_leaves in field {
                if leaves.is_empty() {
                    leaves.resize_with(batch_leaves.len(), Vec::new);
                }
                for (k, leaf) in batch_leaves.into_iter().enumerate() {
                    leaves[k].push(leaf);
                }
            }
            per_leaf.extend(leaves.into_iter().map(Some));
        }
        if per_leaf.len() != writers.len() {
            return Err(Error::Internal(format!(
                "{} leaf columns for {} column writers",
                per_leaf.len(),
                writers.len()
            )));
        }
        writers
            .into_par_iter()
            .zip(per_leaf)
            .map(|(mut w, leaves)| {
                let Some(leaves) = leaves else {
                    return Ok(None);
                };
                for leaf in &leaves {
                    w.write(leaf)?;
                }
                Ok(Some(w.close()?))
            })
            .collect()
    }

    /// Writes row group `group` of `source` with the fields `replaced` marks (by position)
    /// encoded from `batches` (that group's rows, in order, with the file's schema) and every
    /// other column chunk copied from `source` as it is. Rows gathered for a row group of their
    /// own are written first.
    ///
    /// # Errors
    /// A chunk of `source` that lies outside it, or a failed encoding or write.
    pub fn splice_group(
        &mut self,
        source: &SpliceSource<'_>,
        group: usize,
        batches: &[RecordBatch],
        replaced: &[bool],
    ) -> Result<()> {
        let path = self.out.path().to_path_buf();
        self.flush().map_err(|e| written_to(&path, e))?;
        let batches = batches
            .iter()
            .map(|b| self.aligned(b))
            .collect::<Result<Vec<_>>>()?;
        let chunks = self.encode(&batches, &|c| replaced.get(c).copied().unwrap_or(false))?;
        let mut row_group = self.writer.next_row_group()?;
        for (leaf, chunk) in chunks.into_iter().enumerate() {
            match chunk {
                Some(chunk) => chunk
                    .append_to_row_group(&mut row_group)
                    .map_err(|e| written_to(&path, e.into()))?,
                None => source
                    .append_chunk(&mut row_group, group, leaf)
                    .map_err(|e| written_to(&path, e))?,
            }
        }
        row_group.close().map_err(|e| written_to(&path, e.into()))?;
        Ok(())
    }
}

impl ParquetSink {
    /// `batch` with its columns in the file's order, picked by name (the encoder goes by
    /// position, and a table read from a file keeps that file's order).
    fn aligned(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let same_order = batch.num_columns() == self.schema.fields().len()
            && batch
                .schema()
                .fields()
                .iter()
                .zip(self.schema.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if same_order {
            return Ok(batch.clone());
        }
        let columns = self
            .schema
            .fields()
            .iter()
            .map(|f| {
                let c = batch.column_by_name(f.name()).ok_or_else(|| {
                    Error::Internal(format!(
                        "a batch without column `{}` written to a Parquet file",
                        f.name()
                    ))
                })?;
                if c.data_type() != f.data_type() {
                    return Err(Error::Internal(format!(
                        "column `{}` is {} in a batch written to a Parquet file of {}",
                        f.name(),
                        c.data_type(),
                        f.data_type()
                    )));
                }
                Ok(Arc::clone(c))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// Whether a column of type `from` may be read as the row schema's `to`: numbers as numbers
/// (never text or booleans: a string or boolean `reward` is not a number), text from text or
/// any scalar (a numeric task id is its text, as in JSONL), nested as nested (converted, and an
/// error where a value does not convert). The one rule for JSONL's converted batches and for
/// Parquet tables registered for SQL.
pub fn column_fits(
    to: &datafusion::arrow::datatypes::DataType,
    from: &datafusion::arrow::datatypes::DataType,
) -> bool {
    use datafusion::arrow::datatypes::DataType;
    let text = |t: &DataType| {
        matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
            || matches!(t, DataType::Dictionary(_, v) if matches!(**v, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
    };
    let scalar = |t: &DataType| t.is_numeric() || text(t) || *t == DataType::Boolean;
    *from == DataType::Null
        || (to.is_numeric() && from.is_numeric())
        || (text(to) && scalar(from))
        || (!scalar(to) && !scalar(from))
}

/// A Parquet writer's error as what it is: a failed write to `path` (a full disk, a closed
/// device) is an I/O error naming the file, not a Parquet one ("External: No space left on
/// device", exit 65, no file named).
pub fn written_to(path: &Path, e: Error) -> Error {
    use datafusion::parquet::errors::ParquetError;
    let external = match &e {
        Error::Parquet(ParquetError::External(inner)) => Some(inner.as_ref()),
        Error::Arrow(datafusion::arrow::error::ArrowError::ExternalError(inner)) => {
            Some(inner.as_ref())
        }
        _ => None,
    };
    match external.and_then(|inner| inner.downcast_ref::<std::io::Error>()) {
        Some(io) => Error::io(path, std::io::Error::new(io.kind(), io.to_string())),
        None => e,
    }
}

impl Sink for ParquetSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut batch = self.aligned(batch)?;
        while batch.num_rows() > 0 {
            let room = ROW_GROUP_ROWS - self.pending_rows;
            let take = room.min(batch.num_rows());
            self.pending.push(batch.slice(0, take));
            self.pending_rows += take;
            batch = batch.slice(take, batch.num_rows() - take);
            if self.pending_rows == ROW_GROUP_ROWS {
                let path = self.out.path().to_path_buf();
                self.flush().map_err(|e| written_to(&path, e))?;
            }
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        let path = self.out.path().to_path_buf();
        self.flush().map_err(|e| written_to(&path, e))?;
        let Self { writer, out, .. } = *self;
        writer.close().map_err(|e| written_to(&path, e.into()))?;
        out.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::io::conform;
    use crate::schema::row_schema;

    #[test]
    fn free_text_has_no_dictionary_and_unpruned_text_no_statistics() {
        use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};

        use crate::pipeline::row::testing::{batch_of, fixture};
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("rows.parquet");
        let batch = batch_of(fixture("example_scored.jsonl"));
        let mut sink = Box::new(ParquetSink::create(&path, row_schema()).expect("sink"));
        sink.write(&batch).expect("written");
        sink.finish().expect("finished");
        let file =
            SerializedFileReader::new(std::fs::File::open(&path).expect("file")).expect("footer");
        let group = file.metadata().row_group(0);
        let (mut found, mut unpruned) = (0, 0);
        for chunk in group.columns() {
            let path = chunk.column_path().string();
            if FREE_TEXT.contains(&path.as_str()) {
                found += 1;
                assert!(chunk.statistics().is_none(), "{path} has statistics");
                assert!(
                    chunk.dictionary_page_offset().is_none(),
                    "{path} has a dictionary"
                );
            } else if UNPRUNED.contains(&path.as_str()) {
                unpruned += 1;
                assert!(chunk.statistics().is_none(), "{path} has statistics");
                assert!(
                    chunk.dictionary_page_offset().is_some(),
                    "{path} lost its dictionary"
                );
            } else if path == "rollout_id" {
                assert!(
                    chunk.statistics().is_some(),
                    "rollout_id lost its statistics"
                );
                assert!(
                    chunk.dictionary_page_offset().is_none(),
                    "rollout_id has a dictionary"
                );
            } else if path == "reward" {
                assert!(chunk.statistics().is_some(), "reward lost its statistics");
            } else if path == "task_id" {
                assert!(chunk.statistics().is_some(), "task_id lost its statistics");
                assert!(
                    chunk.dictionary_page_offset().is_some(),
                    "task_id lost its dictionary"
                );
            }
        }
        // Every name in the lists is a leaf of the row schema.
        assert_eq!(found, FREE_TEXT.len());
        assert_eq!(unpruned, UNPRUNED.len());
        // And the rows read back as written.
        let back = crate::pipeline::session::new_context(Some(1)).expect("session");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let batches = rt
            .block_on(async {
                back.register_parquet(
                    "t",
                    path.to_str().expect("path"),
                    datafusion::prelude::ParquetReadOptions::default(),
                )
                .await?;
                back.sql("SELECT * FROM t").await?.collect().await
            })
            .expect("read");
        let read = datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches)
            .expect("one batch");
        assert_eq!(conform(&read, "t").expect("conformed"), batch);
    }
}
