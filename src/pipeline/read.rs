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
                read_local_parquet(path, &mut |batch| take(batch, &mut self.counts))?;
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

/// What a decoding thread sends: a batch of its row group, or the row group's end.
enum Piece {
    Batch(RecordBatch),
    End,
}

/// Reads a local Parquet file's batches in file order, decoding row groups on several threads at
/// once: thread `k` decodes row groups `k, k + n, ...`, each into its own small buffer, and the
/// batches are taken from the threads in turn, so decoding runs ahead of the consumer by about
/// one row group per thread.
fn read_local_parquet(
    path: &std::path::Path,
    take: &mut dyn FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    use datafusion::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
    let open = || std::fs::File::open(path).map_err(|e| Error::io(path, e));
    let meta = ArrowReaderMetadata::load(&open()?, ArrowReaderOptions::default())?;
    let groups = meta.metadata().num_row_groups();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(groups);
    if threads <= 1 {
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(open()?, meta)
            .with_batch_size(BATCH_ROWS)
            .build()?;
        for batch in reader {
            take(batch?)?;
        }
        return Ok(());
    }
    let per_group = meta
        .metadata()
        .row_groups()
        .iter()
        .map(|g| {
            usize::try_from(g.num_rows())
                .unwrap_or(0)
                .div_ceil(BATCH_ROWS)
        })
        .max()
        .unwrap_or(1);
    std::thread::scope(|scope| {
        let receivers: Vec<std::sync::mpsc::Receiver<Result<Piece>>> = (0..threads)
            .map(|k| {
                let (tx, rx) = std::sync::mpsc::sync_channel(per_group + 1);
                let meta = meta.clone();
                let open = &open;
                scope.spawn(move || {
                    for group in (k..groups).step_by(threads) {
                        let decoded = (|| -> Result<()> {
                            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
                                open()?,
                                meta.clone(),
                            )
                            .with_batch_size(BATCH_ROWS)
                            .with_row_groups(vec![group])
                            .build()?;
                            for batch in reader {
                                if tx.send(Ok(Piece::Batch(batch?))).is_err() {
                                    return Ok(());
                                }
                            }
                            Ok(())
                        })();
                        // A closed receiver means the consumer stopped.
                        let end = match decoded {
                            Ok(()) => Ok(Piece::End),
                            Err(e) => Err(e),
                        };
                        let failed = end.is_err();
                        if tx.send(end).is_err() || failed {
                            return;
                        }
                    }
                });
                rx
            })
            .collect();
        for group in 0..groups {
            let rx = &receivers[group % threads];
            loop {
                match rx.recv() {
                    Ok(Ok(Piece::Batch(b))) => take(b)?,
                    Ok(Ok(Piece::End)) => break,
                    Ok(Err(e)) => return Err(e),
                    Err(_) => {
                        return Err(Error::Internal(format!(
                            "a Parquet decoding thread stopped early on `{}`",
                            path.display()
                        )));
                    }
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{
        Array, AsArray, Int64Array, ListArray, StringArray, StructArray,
    };
    use datafusion::arrow::datatypes::{DataType, Field, Fields, Int64Type, Schema};

    use super::*;
    use crate::pipeline::io::{ParquetSink, ROW_GROUP_ROWS, Sink};

    /// Rows `from..to`: a number and a list of one or two `{text}` structs saying it.
    fn rows(schema: &Arc<Schema>, from: i64, to: i64) -> RecordBatch {
        let fields = Fields::from(vec![Field::new("text", DataType::Utf8, true)]);
        let mut texts = Vec::new();
        let mut offsets = vec![0i32];
        for n in from..to {
            texts.push(Some(format!("row {n}")));
            if n % 2 == 0 {
                texts.push(None);
            }
            offsets.push(i32::try_from(texts.len()).expect("small"));
        }
        let items = StructArray::new(
            fields.clone(),
            vec![Arc::new(StringArray::from(texts))],
            None,
        );
        let list = ListArray::new(
            Arc::new(Field::new_struct("item", fields, true)),
            datafusion::arrow::buffer::OffsetBuffer::new(offsets.into()),
            Arc::new(items),
            None,
        );
        RecordBatch::try_new(
            Arc::clone(schema),
            vec![
                Arc::new(Int64Array::from_iter_values(from..to)),
                Arc::new(list),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn parallel_parquet_writes_and_reads_keep_row_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("n.parquet");
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new(
                "items",
                DataType::List(Arc::new(Field::new_struct(
                    "item",
                    vec![Field::new("text", DataType::Utf8, true)],
                    true,
                ))),
                true,
            ),
        ]));
        let total = ROW_GROUP_ROWS as i64 * 2 + 12_345;
        let mut sink = Box::new(ParquetSink::create(&path, Arc::clone(&schema)).expect("sink"));
        // Batches that straddle row groups.
        let mut at = 0;
        while at < total {
            let to = (at + 10_007).min(total);
            sink.write(&rows(&schema, at, to)).expect("written");
            at = to;
        }
        sink.finish().expect("finished");
        let meta =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).expect("file"))
                .expect("footer");
        assert_eq!(meta.metadata().num_row_groups(), 3);
        assert_eq!(meta.schema().as_ref(), schema.as_ref());
        let mut next = 0i64;
        read_local_parquet(&path, &mut |b| {
            let n = b.column(0).as_primitive::<Int64Type>();
            let items = b.column(1).as_list::<i32>();
            for i in 0..b.num_rows() {
                assert_eq!(n.value(i), next, "rows out of order");
                let item = items.value(i);
                let text = item.as_struct().column(0).as_string::<i32>();
                assert_eq!(text.value(0), format!("row {next}"));
                assert_eq!(text.len(), if next % 2 == 0 { 2 } else { 1 });
                next += 1;
            }
            Ok(())
        })
        .expect("read");
        assert_eq!(next, total);
        // Columns in another order are written by name.
        let swapped = dir.path().join("swapped.parquet");
        let mut sink = Box::new(ParquetSink::create(&swapped, Arc::clone(&schema)).expect("sink"));
        let b = rows(&schema, 0, 10);
        let reordered = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                schema.field(1).clone(),
                schema.field(0).clone(),
            ])),
            vec![Arc::clone(b.column(1)), Arc::clone(b.column(0))],
        )
        .expect("batch");
        sink.write(&reordered).expect("written");
        sink.finish().expect("finished");
        let mut first = None;
        read_local_parquet(&swapped, &mut |b| {
            first.get_or_insert(b.column(0).as_primitive::<Int64Type>().value(3));
            Ok(())
        })
        .expect("read");
        assert_eq!(first, Some(3));
        // A consumer that stops early stops the decoding threads.
        let mut seen = 0;
        let stopped = read_local_parquet(&path, &mut |_| {
            seen += 1;
            Err(Error::Internal("enough".into()))
        });
        assert!(stopped.is_err());
        assert_eq!(seen, 1);
    }
}
