//! The [`Reader`]: reads resolved inputs, whatever their format, as row-schema batches, and
//! [`LocalParquet`], a local Parquet file opened once for its footer.

use datafusion::arrow::array::RecordBatch;
use datafusion::parquet::arrow::ParquetRecordBatchStreamBuilder;

use datafusion::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
#[allow(deprecated)]
use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
use futures::StreamExt;

use super::guard::{corrupt, guarded, guarded_errors, panic_text};
use super::local::{par_local_parquet_batches, read_local_parquet_rows};
use super::picks::Picks;
use super::plan::{Plan, projection};
use super::widen::{decoding, row_schema_with_views, widen};
use crate::error::{Error, Result};
use crate::pipeline::io::{self, Identity, OnBadRow, ReadCounts};
use crate::pipeline::row::{BATCH_ROWS, NOT_JSON_STAGE};
use crate::pipeline::source::{self, Format, Input, Location};

/// Batches read, and for each position asked for, its batch and row in them.
type Positioned = (Vec<RecordBatch>, Vec<(usize, usize)>);

/// A local Parquet input with its footer, read once: what sizes a reading's output and what
/// [`Reader::par_leaves`] decodes with.
pub struct LocalParquet<'a> {
    input: &'a Input,
    path: &'a std::path::Path,
    meta: ArrowReaderMetadata,
}

impl<'a> LocalParquet<'a> {
    /// `input` with its footer; `None` for any other input (a remote footer costs a request,
    /// and the remote reading has its own).
    ///
    /// # Errors
    /// A local Parquet file that cannot be opened or has no readable footer.
    pub fn open(input: &'a Input) -> Result<Option<Self>> {
        let Location::Local(path) = &input.location else {
            return Ok(None);
        };
        if input.format != Format::Parquet {
            return Ok(None);
        }
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let meta = guarded(&input.display, || {
            Ok(ArrowReaderMetadata::load(
                &file,
                ArrowReaderOptions::default(),
            )?)
        })?;
        Ok(Some(Self { input, path, meta }))
    }

    /// How many rows each row group holds.
    pub fn group_rows(&self) -> Vec<usize> {
        group_rows(self.meta.metadata())
    }
}

/// How many rows each row group of a file holds, by its footer.
pub(super) fn group_rows(
    meta: &datafusion::parquet::file::metadata::ParquetMetaData,
) -> Vec<usize> {
    meta.row_groups()
        .iter()
        .map(|g| usize::try_from(g.num_rows()).unwrap_or(0))
        .collect()
}

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

    /// Reads only the rows of one Parquet input that `rows` marks (`rows[i]` for the file's row
    /// `i`, one mark per row of the file), passing them to `emit` in file order. Pages are still
    /// read, but the unmarked rows' values are skipped rather than decoded, and row groups with
    /// no marked row are not read at all: for a second pass over a file that takes a few of its
    /// rows. `counts.rows` counts the rows emitted.
    ///
    /// # Errors
    /// A JSONL input (convert it first), a file whose row count is not `rows.len()` (it changed
    /// since it was counted), or a read failure.
    pub fn read_rows(
        &mut self,
        input: &Input,
        rows: &[bool],
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let plan = Plan {
            rows: Some(rows),
            ..Plan::default()
        };
        self.read_part(input, plan, "rows", emit)
    }

    /// The rows at `positions` of `inputs` read one after another (`counts[i]` rows in input
    /// `i`, Parquet files all; each position once, in any order), read whole with
    /// [`Self::read_rows`]: the batches, in input order, and where each row landed (`at[k]` is
    /// the batch and row of `positions[k]`). For a second reading of rows a first one chose.
    ///
    /// # Errors
    /// A read failure, an input that changed since it was counted, or a position beyond the
    /// inputs.
    pub fn read_positions(
        &mut self,
        inputs: &[Input],
        counts: &[usize],
        positions: &[usize],
    ) -> Result<Positioned> {
        let changed = || Error::Input {
            stage: "read".into(),
            message: "an input changed while it was read (a second reading saw other rows)".into(),
        };
        // (position, k), in input order: the order the reading meets them.
        let mut order: Vec<(usize, usize)> = positions.iter().copied().zip(0..).collect();
        order.sort_unstable();
        let mut taken = Vec::new();
        let mut at = vec![(0, 0); positions.len()];
        let (mut start, mut next) = (0, 0);
        for (input, &n) in inputs.iter().zip(counts) {
            let first = next;
            while next < order.len() && order[next].0 < start + n {
                next += 1;
            }
            let picks = &order[first..next];
            if !picks.is_empty() {
                let mut marks = vec![false; n];
                for &(p, _) in picks {
                    marks[p - start] = true;
                }
                let mut met = 0;
                self.read_rows(input, &marks, &mut |batch| {
                    for j in 0..batch.num_rows() {
                        let &(_, k) = picks.get(met).ok_or_else(changed)?;
                        at[k] = (taken.len(), j);
                        met += 1;
                    }
                    taken.push(batch);
                    Ok(())
                })?;
                if met != picks.len() {
                    return Err(changed());
                }
            }
            start += n;
        }
        if next != order.len() {
            return Err(Error::Internal(format!(
                "row {} asked of inputs of {start} rows",
                order[next].0
            )));
        }
        Ok((taken, at))
    }

    /// Reads one Parquet input whole, its text as views into the decoded pages (the row schema,
    /// its text read as [`crate::pipeline::row::Text`]): no text is copied out of the pages.
    ///
    /// # Errors
    /// A JSONL input (convert it first), or a read failure.
    pub fn read_views(
        &mut self,
        input: &Input,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let plan = Plan {
            views: true,
            ..Plan::default()
        };
        self.read_part(input, plan, "rows with text views", emit)
    }

    /// Decodes the leaf columns `leaves` of a local Parquet file (as [`Reader::read_leaves`]
    /// gives them) and passes each batch, with its row group and the position of its first row
    /// in the group, to `each` on the thread that decoded it: row groups are decoded in parallel
    /// and a group's batches in order, but batches of different groups come in any order. A
    /// consumer that places its results by row (as one that fills a vector sized from
    /// [`LocalParquet::group_rows`]) does its work beside the decoding, and no decoder waits on
    /// a consumer thread.
    ///
    /// # Errors
    /// A read failure, or the first error `each` returns (the other threads stop at their
    /// next batch).
    pub fn par_leaves(
        &mut self,
        file: &LocalParquet<'_>,
        leaves: &[&str],
        each: &(dyn Fn(usize, usize, RecordBatch) -> Result<()> + Sync),
    ) -> Result<()> {
        let plan = Plan {
            leaves: Some(leaves),
            views: true,
            ..Plan::default()
        };
        let schema = row_schema_with_views();
        let display = &file.input.display;
        crate::pipeline::session::note_read(display);
        let rows = guarded(display, || {
            par_local_parquet_batches(file.path, file.meta.clone(), plan, &|group, at, batch| {
                each(group, at, io::conform_to(&batch, display, &schema)?)
            })
        })?;
        self.counts.rows += rows;
        Ok(())
    }

    /// Reads one Parquet input decoding only the leaf columns `leaves` names (field paths with
    /// lists looked through, as `messages.content`); the batches still have the row schema, with
    /// every other column, and every other field of a nested one, null, and their text as views
    /// (read it as [`crate::pipeline::row::Text`]). For a pass that reads a few of the columns of
    /// every row.
    ///
    /// # Errors
    /// A JSONL input (convert it first), a required column left out, or a read failure.
    pub fn read_leaves(
        &mut self,
        input: &Input,
        leaves: &[&str],
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let plan = Plan {
            leaves: Some(leaves),
            views: true,
            ..Plan::default()
        };
        self.read_part(input, plan, "columns", emit)
    }

    /// Reads the part of a Parquet `input` that `plan` says (`what` is picked, for the error).
    fn read_part(
        &mut self,
        input: &Input,
        plan: Plan<'_>,
        what: &str,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        if input.format != Format::Parquet {
            return Err(Error::Internal(format!(
                "`{}`: {what} are picked from Parquet files only",
                input.display
            )));
        }
        self.read_parquet_rows(input, plan, emit)
    }

    fn read_parquet(
        &mut self,
        input: &Input,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        self.read_parquet_rows(input, Plan::default(), emit)
    }

    fn read_parquet_rows(
        &mut self,
        input: &Input,
        plan: Plan<'_>,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        crate::pipeline::session::note_read(&input.display);
        // The consumer's errors, and its panics, are not the file's: they pass through as they
        // are (an error is kept aside and a marker stands in for it; a panic is resumed).
        let held: std::cell::RefCell<Option<Error>> = std::cell::RefCell::new(None);
        let in_consumer = std::cell::Cell::new(false);
        let mut consume = |batch: RecordBatch| -> Result<()> {
            in_consumer.set(true);
            let r = emit(batch);
            in_consumer.set(false);
            r.map_err(|e| {
                *held.borrow_mut() = Some(e);
                Error::Internal("the reading's consumer stopped it".into())
            })
        };
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            guarded_errors(&input.display, || {
                self.read_parquet_rows_unguarded(input, plan, &mut consume)
            })
        }));
        match read {
            Ok(r) => match held.into_inner() {
                // A row the consumer could not encode is the file's: it is named.
                Some(Error::Input { stage, message }) if stage == NOT_JSON_STAGE => {
                    Err(Error::Input {
                        stage: "read".into(),
                        message: format!("`{}`: {message}", input.display),
                    })
                }
                Some(e) => Err(e),
                None => r,
            },
            Err(panic) if in_consumer.get() => std::panic::resume_unwind(panic),
            Err(panic) => Err(corrupt(&input.display, &panic_text(&*panic))),
        }
    }

    // `ParquetObjectReader` is deprecated in parquet 59 in favour of a hand-written
    // `AsyncFileReader`; it still works, and replacing it is tracked for the next upgrade.
    #[allow(deprecated)]
    fn read_parquet_rows_unguarded(
        &mut self,
        input: &Input,
        plan: Plan<'_>,
        emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let schema = if plan.views {
            row_schema_with_views()
        } else {
            crate::schema::row_schema()
        };
        let mut take = |batch: RecordBatch, counts: &mut ReadCounts| -> Result<()> {
            counts.rows += batch.num_rows() as u64;
            emit(io::conform_to(&batch, &input.display, &schema)?)
        };
        match &input.location {
            Location::Local(path) => {
                read_local_parquet_rows(path, &input.display, plan, &mut |batch| {
                    take(batch, &mut self.counts)
                })?;
            }
            Location::Remote { store, path, .. } => {
                let mut object = ParquetObjectReader::new(store.clone(), path.clone());
                if let Some(size) = input.size {
                    object = object.with_file_size(size);
                }
                let (mut stream, full, mut sieve) = self.handle.block_on(async {
                    let meta =
                        ArrowReaderMetadata::load_async(&mut object, ArrowReaderOptions::new())
                            .await?;
                    let (meta, full) = decoding(meta, &plan);
                    let mut builder =
                        ParquetRecordBatchStreamBuilder::new_with_metadata(object, meta)
                            .with_batch_size(BATCH_ROWS);
                    let mut sieve = None;
                    if let Some(rows) = plan.rows {
                        let picks = Picks::new(builder.metadata(), rows, &input.display)?;
                        let groups = picks.groups();
                        let (selection, after) = picks.plan(&groups);
                        sieve = after;
                        builder = builder
                            .with_row_groups(groups)
                            .with_row_selection(selection);
                    }
                    if let Some(mask) = plan
                        .leaves
                        .and_then(|l| projection(builder.parquet_schema(), builder.schema(), l))
                    {
                        builder = builder.with_projection(mask);
                    }
                    Ok::<_, Error>((builder.build()?, full, sieve))
                })?;
                while let Some(batch) = self.handle.block_on(stream.next()) {
                    let mut batch = batch?;
                    if let Some(s) = &mut sieve {
                        match s.pass(&batch)? {
                            Some(kept) => batch = kept,
                            None => continue,
                        }
                    }
                    // Widening a whole batch returns it as it is.
                    let batch = widen(&batch, &full)?;
                    take(batch, &mut self.counts)?;
                }
            }
        }
        // A reading of picked rows goes over a file read before: its bytes are counted once.
        if let (Some(size), None) = (input.size, plan.rows) {
            self.counts.bytes += size;
            (self.progress)(size);
        }
        Ok(())
    }
}
