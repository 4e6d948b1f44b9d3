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
use datafusion::parquet::file::reader::ChunkReader as _;
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
    /// The footer with its page indexes, for the chunks copied.
    meta: ArrowReaderMetadata,
    /// The footer alone, for the columns decoded: read as every other reading reads them (a
    /// damaged page index does not change what decodes).
    plain: ArrowReaderMetadata,
}

impl<'a> SpliceSource<'a> {
    /// `input`, when its chunks can be copied into a file of `schema` whose Parquet columns are
    /// `columns`: a local Parquet file whose Arrow schema is `schema` (the same fields, types and
    /// nullability, in the same order) and whose every leaf column is described as the output's.
    /// `None` for any other input (it is read and written in full).
    ///
    /// A file whose footer or page indexes do not read is `None` too: the full rewrite reads it
    /// as before, and says what is wrong with it.
    ///
    /// # Errors
    /// A local file that cannot be opened.
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
        // A footer or page index that does not read: the full rewrite reads the file as before,
        // and names what is wrong with it.
        let options = ArrowReaderOptions::new()
            .with_encoding_stats_as_mask(false)
            .with_page_index_policy(PageIndexPolicy::Optional);
        let Ok(meta) = guarded(&input.display, || {
            Ok(ArrowReaderMetadata::load(&file, options.clone())?)
        }) else {
            return Ok(None);
        };
        // The same footer without its page indexes, for decoding.
        let bare = meta
            .metadata()
            .as_ref()
            .clone()
            .into_builder()
            .set_column_index(None)
            .set_offset_index(None)
            .build();
        let plain = ArrowReaderMetadata::try_new(std::sync::Arc::new(bare), options)?;
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
            plain,
        }))
    }

    /// The input, as given.
    pub fn input(&self) -> &Input {
        self.input
    }

    /// How many rows each row group holds.
    pub fn group_rows(&self) -> Vec<usize> {
        super::reader::group_rows(self.meta.metadata())
    }

    /// The compressed size of row group `group`: what a progress bar counts for it.
    pub fn group_bytes(&self, group: usize) -> u64 {
        u64::try_from(self.meta.metadata().row_group(group).compressed_size()).unwrap_or(0)
    }

    /// Row group `group`'s rows with only the fields `fields` (their positions in the schema)
    /// decoded, as `schema` batches: every other column null.
    ///
    /// # Errors
    /// A group that does not decode, or holds other than the rows its footer says (a data
    /// error naming the file), or a value the schema does not take (a reward outside [0, 1]).
    pub fn read_group(
        &self,
        group: usize,
        fields: &[usize],
        schema: &SchemaRef,
    ) -> Result<Vec<RecordBatch>> {
        let display = &self.input.display;
        let mask = ProjectionMask::roots(self.plain.parquet_schema(), fields.iter().copied());
        let batches = guarded(display, || {
            let file = self.file.try_clone().map_err(|e| Error::io(display, e))?;
            ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.plain.clone())
                .with_batch_size(BATCH_ROWS)
                .with_row_groups(vec![group])
                .with_projection(mask)
                .build()?
                .map(|b| Ok(b?))
                .collect::<Result<Vec<_>>>()
        })?;
        let decoded: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let said = self.meta.metadata().row_group(group).num_rows();
        if i64::try_from(decoded).ok() != Some(said) {
            return Err(corrupt(
                display,
                &format!("row group {group} holds {decoded} rows; its footer says {said}"),
            ));
        }
        batches
            .iter()
            .map(|b| io::conform_to(b, display, schema))
            .collect()
    }

    /// Appends leaf column `leaf` of row group `group` to `row_group`, its bytes copied.
    ///
    /// # Errors
    /// A chunk, or a page its offset index places, that lies outside the file or the chunk (a
    /// data error naming the file), a failed read of the input (naming it), or a failed write.
    pub fn append_chunk<W: std::io::Write + Send>(
        &self,
        row_group: &mut SerializedRowGroupWriter<'_, W>,
        group: usize,
        leaf: usize,
    ) -> Result<()> {
        let metadata = self.meta.metadata();
        let rows = metadata.row_group(group);
        let chunk = rows.column(leaf);
        let offsets = metadata
            .offset_index()
            .and_then(|o| o.get(group)?.get(leaf).cloned());
        let damaged = |what: &str| {
            corrupt(
                &self.input.display,
                &format!(
                    "column `{}` of row group {group}: {what}",
                    chunk.column_path()
                ),
            )
        };
        let (start, end) = bounds(self.len, chunk, offsets.as_ref())
            .ok_or_else(|| damaged("its pages lie outside it or outside the file"))?;
        let length = usize::try_from(end - start).map_err(|_| damaged("too large"))?;
        // Read here, so a failed read names the input (a read inside the writer's copy would
        // be reported against the output).
        let bytes = self.file.get_bytes(start, length).map_err(|e| match e {
            datafusion::parquet::errors::ParquetError::External(inner) => {
                match inner.downcast::<std::io::Error>() {
                    Ok(io) => Error::io(&self.input.display, *io),
                    Err(other) => damaged(&other.to_string()),
                }
            }
            other => damaged(&other.to_string()),
        })?;
        let column_index = metadata
            .column_index()
            .and_then(|c| c.get(group)?.get(leaf))
            .filter(|c| !matches!(c, ColumnIndexMetaData::NONE))
            .cloned();
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
            column_index,
            offset_index: offsets,
        };
        row_group.append_column(&Span { start, bytes }, close)?;
        Ok(())
    }
}

/// Where `chunk` lies in a file of `len` bytes (from its first page to its end), when it and every
/// page its offset index places lie inside the file and inside the chunk: its dictionary
/// page first, then its data pages.
fn bounds(
    len: u64,
    chunk: &datafusion::parquet::file::metadata::ColumnChunkMetaData,
    offsets: Option<&datafusion::parquet::file::page_index::offset_index::OffsetIndexMetaData>,
) -> Option<(u64, u64)> {
    let data = u64::try_from(chunk.data_page_offset()).ok()?;
    let start = match chunk.dictionary_page_offset() {
        Some(d) => u64::try_from(d).ok().filter(|&d| d < data)?,
        None => data,
    };
    let end = start.checked_add(u64::try_from(chunk.compressed_size()).ok()?)?;
    if data >= end || end > len {
        return None;
    }
    for page in offsets.map_or(&[][..], |o| o.page_locations()) {
        let at = u64::try_from(page.offset).ok()?;
        let past = at.checked_add(u64::try_from(page.compressed_page_size).ok()?)?;
        if at < data || past > end {
            return None;
        }
    }
    Some((start, end))
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

/// A chunk's bytes, read at `start` of a file: what the writer copies from, as from the file.
struct Span {
    start: u64,
    bytes: bytes::Bytes,
}

impl datafusion::parquet::file::reader::Length for Span {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl Span {
    /// The bytes from file offset `start` to the chunk's end.
    fn from(&self, start: u64) -> datafusion::parquet::errors::Result<bytes::Bytes> {
        let from = start
            .checked_sub(self.start)
            .and_then(|f| usize::try_from(f).ok())
            .filter(|&f| f <= self.bytes.len())
            .ok_or_else(|| {
                datafusion::parquet::errors::ParquetError::General(format!(
                    "offset {start} outside the chunk read at {}",
                    self.start
                ))
            })?;
        Ok(self.bytes.slice(from..))
    }
}

impl datafusion::parquet::file::reader::ChunkReader for Span {
    type T = bytes::buf::Reader<bytes::Bytes>;

    fn get_read(&self, start: u64) -> datafusion::parquet::errors::Result<Self::T> {
        use bytes::Buf as _;
        Ok(self.from(start)?.reader())
    }

    fn get_bytes(
        &self,
        start: u64,
        length: usize,
    ) -> datafusion::parquet::errors::Result<bytes::Bytes> {
        let rest = self.from(start)?;
        if length > rest.len() {
            return Err(datafusion::parquet::errors::ParquetError::EOF(format!(
                "{length} bytes asked at {start}, {} in the chunk",
                rest.len()
            )));
        }
        Ok(rest.slice(..length))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::parquet::file::metadata::ColumnChunkMetaData;
    use datafusion::parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
    use datafusion::parquet::file::reader::ChunkReader;
    use datafusion::parquet::schema::parser::parse_message_type;

    use super::*;

    fn chunk(dictionary: Option<i64>, data: i64, size: i64) -> ColumnChunkMetaData {
        let schema = parse_message_type("message m { required int64 x; }").expect("schema");
        let descr = SchemaDescriptor::new(Arc::new(schema));
        ColumnChunkMetaData::builder(descr.column(0))
            .set_dictionary_page_offset(dictionary)
            .set_data_page_offset(data)
            .set_total_compressed_size(size)
            .build()
            .expect("chunk")
    }

    fn pages(at: &[(i64, i32)]) -> OffsetIndexMetaData {
        OffsetIndexMetaData {
            page_locations: at
                .iter()
                .map(|&(offset, compressed_page_size)| PageLocation {
                    offset,
                    compressed_page_size,
                    first_row_index: 0,
                })
                .collect(),
            unencoded_byte_array_data_bytes: None,
        }
    }

    /// A chunk is copied only when it lies in the file, its dictionary page comes first and
    /// every page its offset index places lies inside it: a damaged footer is refused, never an
    /// overflow or a copy of another chunk's bytes.
    #[test]
    fn a_chunk_is_copied_only_from_where_it_lies() {
        let len = 1_000;
        let good = chunk(Some(100), 150, 300);
        assert_eq!(
            bounds(len, &good, Some(&pages(&[(150, 100), (250, 150)]))),
            Some((100, 400))
        );
        assert_eq!(bounds(len, &chunk(None, 10, 20), None), Some((10, 30)));
        for (c, p) in [
            (chunk(None, 900, 200), None),           // past the file's end
            (chunk(Some(200), 150, 300), None),      // the dictionary after the data
            (chunk(None, -5, 10), None),             // a negative offset
            (chunk(None, 10, -1), None),             // a negative size
            (chunk(None, i64::MAX, i64::MAX), None), // an overflow
            (chunk(Some(100), 150, 300), Some(pages(&[(90, 10)]))), // a page before the data
            (chunk(Some(100), 150, 300), Some(pages(&[(350, 60)]))), // a page past the end
            (chunk(None, 10, 20), Some(pages(&[(i64::MAX, i32::MAX)]))),
        ] {
            assert_eq!(bounds(len, &c, p.as_ref()), None, "{c:?} {p:?}");
        }
    }

    /// The writer reads a copied chunk at its offsets in the file, and nothing outside it.
    #[test]
    fn a_span_reads_at_file_offsets() {
        let span = Span {
            start: 100,
            bytes: bytes::Bytes::from_static(b"abcdef"),
        };
        assert_eq!(span.get_bytes(102, 3).expect("inside").as_ref(), b"cde");
        assert_eq!(span.get_bytes(106, 0).expect("at the end").as_ref(), b"");
        assert!(span.get_bytes(104, 3).is_err());
        assert!(span.get_bytes(99, 1).is_err());
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut span.get_read(101).expect("reader"), &mut rest)
            .expect("read");
        assert_eq!(rest, b"bcdef");
    }
}
