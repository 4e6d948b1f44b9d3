//! Reads resolved inputs, whatever their format, as row-schema batches.

use datafusion::arrow::array::RecordBatch;
use datafusion::parquet::arrow::ParquetRecordBatchStreamBuilder;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
#[allow(deprecated)]
use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
use futures::StreamExt;

use super::io::{self, Identity, OnBadRow, ReadCounts};
use super::row::BATCH_ROWS;
use super::source::{self, Format, Input, Location};
use crate::error::{Error, Result};

/// Reads inputs one after another, keeping row identity across all of them.
pub struct Reader<'a> {
    handle: tokio::runtime::Handle,
    identity: Identity,
    on_bad: OnBadRow<'a>,
    /// What was read so far.
    pub counts: ReadCounts,
    progress: Box<dyn Fn(u64) + 'a>,
}

impl<'a> Reader<'a> {
    /// A reader that blocks on `handle` for remote inputs (so it must not run on a runtime worker).
    pub fn new(
        handle: tokio::runtime::Handle,
        on_bad: OnBadRow<'a>,
        progress: Box<dyn Fn(u64) + 'a>,
    ) -> Self {
        Self {
            handle,
            identity: Identity::default(),
            on_bad,
            counts: ReadCounts::default(),
            progress,
        }
    }

    /// Reads one input, passing each batch to `emit`.
    pub fn read(
        &mut self,
        input: &Input,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        tracing::info!(input = %input.display, format = ?input.format, bytes = ?input.size, "reading");
        match input.format {
            Format::Jsonl => {
                let reader = source::open(input, &self.handle)?;
                io::read_jsonl(
                    &input.display,
                    reader,
                    &mut self.identity,
                    &mut self.on_bad,
                    &mut self.counts,
                    &*self.progress,
                    emit,
                )
            }
            Format::Parquet => self.read_parquet(input, emit),
        }
    }

    // `ParquetObjectReader` is deprecated in parquet 59 in favour of a hand-written
    // `AsyncFileReader`; it still works, and replacing it is tracked for the next upgrade.
    #[allow(deprecated)]
    fn read_parquet(
        &mut self,
        input: &Input,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let mut take = |batch: RecordBatch, counts: &mut ReadCounts| -> Result<()> {
            counts.rows += batch.num_rows() as u64;
            emit(io::conform(&batch, &input.display)?)
        };
        match &input.location {
            Location::Local(path) => {
                let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
                let reader = ParquetRecordBatchReaderBuilder::try_new(file)?
                    .with_batch_size(BATCH_ROWS)
                    .build()?;
                for batch in reader {
                    take(batch?, &mut self.counts)?;
                }
            }
            Location::Remote { store, path, .. } => {
                let mut object = ParquetObjectReader::new(store.clone(), path.clone());
                if let Some(size) = input.size {
                    object = object.with_file_size(size);
                }
                let mut stream = self.handle.block_on(async {
                    ParquetRecordBatchStreamBuilder::new(object)
                        .await?
                        .with_batch_size(BATCH_ROWS)
                        .build()
                })?;
                while let Some(batch) = self.handle.block_on(stream.next()) {
                    take(batch?, &mut self.counts)?;
                }
            }
        }
        if let Some(size) = input.size {
            self.counts.bytes += size;
            (self.progress)(size);
        }
        Ok(())
    }
}
