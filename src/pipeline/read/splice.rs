//! A local Parquet file of rows rewritten in part: a few of its columns decoded, the others'
//! column chunks copied into the output as they are, without decoding or encoding them.
//!
//! A grade changes the verdict columns of every row and nothing else. Decoding every column of
//! every row and encoding it again was most of a grade's time; copying the chunks of the columns
//! it does not read takes a copy of their compressed bytes.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use datafusion::parquet::column::writer::ColumnCloseResult;
use datafusion::parquet::file::metadata::PageIndexPolicy;
use datafusion::parquet::file::page_index::column_index::ColumnIndexMetaData;
use datafusion::parquet::file::statistics::Statistics;
use datafusion::parquet::file::writer::SerializedRowGroupWriter;
use datafusion::parquet::schema::types::SchemaDescriptor;

use super::guard::{corrupt, guarded};
use crate::error::{Error, Result};
use crate::pipeline::io;
use crate::pipeline::row::BATCH_ROWS;
use crate::pipeline::source::{Format, Input, Location};

/// A local Parquet input whose columns are laid out as the output's, opened for a rewrite in
/// part: its footer and page indexes read once.
pub struct SpliceSource<'a> {
    input: &'a Input,
    file: std::fs::File,
    len: u64,
    meta: ArrowReaderMetadata,
}

impl<'a> SpliceSource<'a> {
    /// `input`, when its chunks can be copied into a file of `schema` whose Parquet columns are
    /// `columns`: a local Parquet file whose Arrow schema is `schema` (the same fields, types and
    /// nullability, in the same order) and whose every leaf column is described as the output's.
    /// `None` for any other input (it is read and written in full).
    ///
    /// # Errors
    /// A local Parquet file that cannot be opened or whose footer does not read.
    pub fn open(
        input: &'a Input,
        schema: &SchemaRef,
        columns: &SchemaDescriptor,
    ) -> Result<Option<Self>> {
        let Location::Local(path) = &input.location else {
            return Ok(None);
        };
        if input.format != Format::Parquet {
            return Ok(None);
        }
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        // Everything the footer says of a chunk is kept, to be written again as it was: its
        // page indexes, and its pages' encodings in full (by default only their mask is kept).
        let options = ArrowReaderOptions::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .with_encoding_stats_as_mask(false);
        let meta = guarded(&input.display, || {
            Ok(ArrowReaderMetadata::load(&file, options)?)
        })?;
        let same_fields = meta.schema().fields().len() == schema.fields().len()
            && meta
                .schema()
                .fields()
                .iter()
                .zip(schema.fields())
                .all(|(a, b)| {
                    a.name() == b.name()
                        && a.data_type() == b.data_type()
                        && a.is_nullable() == b.is_nullable()
                });
        let theirs = meta.parquet_schema();
        let same_leaves = theirs.num_columns() == columns.num_columns()
            && (0..columns.num_columns()).all(|i| theirs.column(i) == columns.column(i));
        if !(same_fields && same_leaves) {
            return Ok(None);
        }
        Ok(Some(Self {
            input,
            file,
            len,
            meta,
        }))
    }

    /// The input, as given.
    pub fn input(&self) -> &Input {
        self.input
    }

    /// How many rows each row group holds.
    pub fn group_rows(&self) -> Vec<usize> {
        self.meta
            .metadata()
            .row_groups()
            .iter()
            .map(|g| usize::try_from(g.num_rows()).unwrap_or(0))
            .collect()
    }

    /// The compressed size of row group `group`: what a progress bar counts for it.
    pub fn group_bytes(&self, group: usize) -> u64 {
        u64::try_from(self.meta.metadata().row_group(group).compressed_size()).unwrap_or(0)
    }

    /// Row group `group`'s rows with only the fields `fields` (their positions in the schema)
    /// decoded, as `schema` batches: every other column null.
    ///
    /// # Errors
    /// A group that does not decode (a data error naming the file), or a value the schema does
    /// not take (a reward outside [0, 1]).
    pub fn read_group(
        &self,
        group: usize,
        fields: &[usize],
        schema: &SchemaRef,
    ) -> Result<Vec<RecordBatch>> {
        let display = &self.input.display;
        let mask = ProjectionMask::roots(self.meta.parquet_schema(), fields.iter().copied());
        let batches = guarded(display, || {
            let file = self.file.try_clone().map_err(|e| Error::io(display, e))?;
            ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.meta.clone())
                .with_batch_size(BATCH_ROWS)
                .with_row_groups(vec![group])
                .with_projection(mask)
                .build()?
                .map(|b| Ok(b?))
                .collect::<Result<Vec<_>>>()
        })?;
        batches
            .iter()
            .map(|b| io::conform_to(b, display, schema))
            .collect()
    }

    /// Appends leaf column `leaf` of row group `group` to `row_group`, its bytes copied.
    ///
    /// # Errors
    /// A chunk that lies outside the file (a data error naming it), or a failed write.
    pub fn append_chunk<W: std::io::Write + Send>(
        &self,
        row_group: &mut SerializedRowGroupWriter<'_, W>,
        group: usize,
        leaf: usize,
    ) -> Result<()> {
        let metadata = self.meta.metadata();
        let rows = metadata.row_group(group);
        let chunk = rows.column(leaf);
        let start = chunk
            .dictionary_page_offset()
            .unwrap_or_else(|| chunk.data_page_offset());
        let inside = u64::try_from(start)
            .ok()
            .zip(u64::try_from(chunk.compressed_size()).ok())
            .and_then(|(s, n)| s.checked_add(n))
            .is_some_and(|end| end <= self.len);
        if !inside {
            return Err(corrupt(
                &self.input.display,
                &format!(
                    "column `{}` of row group {group} lies outside the file",
                    chunk.column_path()
                ),
            ));
        }
        let index = |g: usize| -> Option<ColumnIndexMetaData> {
            let found = metadata.column_index()?.get(g)?.get(leaf)?;
            (!matches!(found, ColumnIndexMetaData::NONE)).then(|| found.clone())
        };
        let mut copied = chunk.clone();
        if let Some(stats) = chunk.statistics() {
            // As the writer does: the deprecated `min` and `max` beside `min_value` and
            // `max_value` where the column sorts signed (a reading drops that flag).
            let signed = chunk.column_descr().sort_order().is_signed();
            copied = copied
                .into_builder()
                .set_statistics(as_written(stats.clone(), signed))
                .build()?;
        }
        let close = ColumnCloseResult {
            bytes_written: u64::try_from(chunk.compressed_size()).unwrap_or(0),
            rows_written: u64::try_from(rows.num_rows()).unwrap_or(0),
            metadata: copied,
            bloom_filter: None,
            column_index: index(group),
            offset_index: metadata
                .offset_index()
                .and_then(|o| o.get(group)?.get(leaf).cloned()),
        };
        row_group.append_column(&self.file, close)?;
        Ok(())
    }

    /// The field (position in the schema) that leaf column `leaf` belongs to.
    pub fn field_of(&self, leaf: usize) -> usize {
        self.meta.parquet_schema().get_column_root_idx(leaf)
    }
}

/// `stats` read from a footer, with the deprecated `min` and `max` written again or not as
/// `signed` says.
fn as_written(stats: Statistics, signed: bool) -> Statistics {
    match stats {
        Statistics::Boolean(s) => Statistics::Boolean(s.with_backwards_compatible_min_max(signed)),
        Statistics::Int32(s) => Statistics::Int32(s.with_backwards_compatible_min_max(signed)),
        Statistics::Int64(s) => Statistics::Int64(s.with_backwards_compatible_min_max(signed)),
        Statistics::Int96(s) => Statistics::Int96(s.with_backwards_compatible_min_max(signed)),
        Statistics::Float(s) => Statistics::Float(s.with_backwards_compatible_min_max(signed)),
        Statistics::Double(s) => Statistics::Double(s.with_backwards_compatible_min_max(signed)),
        Statistics::ByteArray(s) => {
            Statistics::ByteArray(s.with_backwards_compatible_min_max(signed))
        }
        Statistics::FixedLenByteArray(s) => {
            Statistics::FixedLenByteArray(s.with_backwards_compatible_min_max(signed))
        }
    }
}
