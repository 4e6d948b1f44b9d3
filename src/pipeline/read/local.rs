//! Local Parquet files read row group by row group on several threads, their batches handed
//! on in file order.

use datafusion::arrow::array::RecordBatch;

use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};

use super::picks::Picks;
use super::plan::{Piece, Plan, projection};
use super::widen::{decoding, widen};
use crate::error::{Error, Result};
use crate::pipeline::row::BATCH_ROWS;

/// Reads a local Parquet file's batches in file order (only the rows `rows` marks, when given),
/// decoding row groups on several threads at once: thread `k` decodes row groups `k, k + n, ...`,
/// each into its own small buffer, and the batches are taken from the threads in turn, so
/// decoding runs ahead of the consumer by about one row group per thread.
pub(super) fn read_local_parquet_rows(
    path: &std::path::Path,
    display: &str,
    plan: Plan<'_>,
    take: &mut dyn FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let open = || std::fs::File::open(path).map_err(|e| Error::io(path, e));
    let meta = ArrowReaderMetadata::load(&open()?, ArrowReaderOptions::default())?;
    let (meta, full) = decoding(meta, &plan);
    let picks = plan
        .rows
        .map(|r| Picks::new(meta.metadata(), r, display))
        .transpose()?;
    let picks = picks.as_ref();
    let mask = plan
        .leaves
        .and_then(|l| projection(meta.parquet_schema(), meta.schema(), l));
    // Decodes row group `group`, passing its (picked) rows to `send` until it says stop. Picks
    // that are few runs are skipped by the decoder; many short runs (as a sample of every tenth
    // row) cost the decoder more to skip than to decode, so the group is decoded and filtered.
    let decode_group = |group: usize, send: &mut dyn FnMut(RecordBatch) -> bool| -> Result<()> {
        // A group without a picked row is not even opened.
        if picks.is_some_and(|p| !p.wanted(group)) {
            return Ok(());
        }
        let mut builder = group_reader(path, &meta, group, mask.as_ref())?;
        let mut sieve = None;
        if let Some(p) = picks {
            let (selection, after) = p.plan(&[group]);
            builder = builder.with_row_selection(selection);
            sieve = after;
        }
        for batch in builder.build()? {
            let mut batch = batch?;
            if let Some(s) = &mut sieve {
                match s.pass(&batch)? {
                    Some(kept) => batch = kept,
                    None => continue,
                }
            }
            // Partial batches get the file's columns and types on the decoding thread
            // (widening a whole batch returns it as it is).
            batch = widen(&batch, &full)?;
            if !send(batch) {
                break;
            }
        }
        Ok(())
    };
    let groups = meta.metadata().num_row_groups();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(groups);
    if threads <= 1 {
        return decode_in_turn(groups, &decode_group, take);
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
    decode_on_threads(path, groups, threads, per_group, &decode_group, take)
}

/// Decodes one row group, passing its (picked) rows to `send` until it says stop.
type DecodeGroup<'a> = dyn Fn(usize, &mut dyn FnMut(RecordBatch) -> bool) -> Result<()> + Sync + 'a;

/// Decodes the `groups` row groups one after another on this thread.
fn decode_in_turn(
    groups: usize,
    decode_group: &DecodeGroup<'_>,
    take: &mut dyn FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let mut failed = None;
    for group in 0..groups {
        decode_group(group, &mut |batch| match take(batch) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(())
}

/// Decodes the `groups` row groups on `threads` threads (group `g` on thread `g % threads`,
/// each queueing up to a group's `per_group` batches ahead), handing the batches to `take` in
/// file order.
fn decode_on_threads(
    path: &std::path::Path,
    groups: usize,
    threads: usize,
    per_group: usize,
    decode_group: &DecodeGroup<'_>,
    take: &mut dyn FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    std::thread::scope(|scope| {
        let receivers: Vec<std::sync::mpsc::Receiver<Result<Piece>>> = (0..threads)
            .map(|k| {
                let (tx, rx) = std::sync::mpsc::sync_channel(per_group + 1);
                scope.spawn(move || {
                    for group in (k..groups).step_by(threads) {
                        let decoded = decode_group(group, &mut |batch| {
                            tx.send(Ok(Piece::Batch(batch))).is_ok()
                        });
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

/// A reader of row group `group` of the local Parquet file `path` (its footer `meta`), in
/// batches of [`BATCH_ROWS`], decoding only `mask`'s leaves when given.
fn group_reader(
    path: &std::path::Path,
    meta: &ArrowReaderMetadata,
    group: usize,
    mask: Option<&ProjectionMask>,
) -> Result<ParquetRecordBatchReaderBuilder<std::fs::File>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta.clone())
        .with_batch_size(BATCH_ROWS)
        .with_row_groups(vec![group]);
    Ok(match mask {
        Some(m) => builder.with_projection(m.clone()),
        None => builder,
    })
}

/// Runs one step of a decoder on a decoding thread: a panic of the parquet crate there (it
/// asserts on some corrupt pages) is the file's, a Parquet error that the reading's guard names
/// the file by, not a thread lost to a bug. The consumer runs outside it.
fn decoder_guard<T>(step: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(step)).unwrap_or_else(|panic| {
        let _ = super::guard::take_decoder_panic();
        Err(Error::Parquet(
            datafusion::parquet::errors::ParquetError::General(super::guard::panic_text(&*panic)),
        ))
    })
}

/// Decodes the row groups of the local Parquet file `path` (its footer `meta`) as `plan` says (its leaves, not
/// its rows), groups in parallel (each on one thread, taken in turn), passing each batch, its
/// group and the position of its first row in the group to `each` on that thread; the rows
/// read.
pub(super) fn par_local_parquet_batches(
    path: &std::path::Path,
    meta: ArrowReaderMetadata,
    plan: Plan<'_>,
    each: &(dyn Fn(usize, usize, RecordBatch) -> Result<()> + Sync),
) -> Result<u64> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (meta, full) = decoding(meta, &plan);
    let mask = plan
        .leaves
        .and_then(|l| projection(meta.parquet_schema(), meta.schema(), l));
    let groups = meta.metadata().num_row_groups();
    let rows: i64 = meta
        .metadata()
        .row_groups()
        .iter()
        .map(datafusion::parquet::file::metadata::RowGroupMetaData::num_rows)
        .sum();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let work = || -> Result<()> {
        loop {
            let group = next.fetch_add(1, Ordering::Relaxed);
            if group >= groups || failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            let mut at = 0;
            let mut batches =
                decoder_guard(|| Ok(group_reader(path, &meta, group, mask.as_ref())?.build()?))?;
            while let Some(batch) = decoder_guard(|| Ok(batches.next().transpose()?))? {
                if failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let batch = widen(&batch, &full)?;
                let n = batch.num_rows();
                each(group, at, batch)?;
                at += n;
            }
        }
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(groups)
        .max(1);
    std::thread::scope(|scope| {
        let running: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let done = work();
                    if done.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    done
                })
            })
            .collect();
        let mut first_error = None;
        for r in running {
            let done = r.join().unwrap_or_else(|_| {
                Err(Error::Internal(format!(
                    "a Parquet decoding thread panicked on `{}`",
                    path.display()
                )))
            });
            if let Err(e) = done {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    })?;
    Ok(u64::try_from(rows).unwrap_or(0))
}
