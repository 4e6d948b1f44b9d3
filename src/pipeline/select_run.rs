//! The two readings of a streaming selection (`wai select`): the inputs resolved, JSONL
//! converted to Parquet in scratch space and pinned; a first reading of what choosing needs of
//! every row, a second of the chosen rows whole (memory follows the selection, not the input);
//! then the output written, rows on a thread of their own while the caller works on them.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;

use super::context::Context;
use super::io::{AtomicFile, OnBadRow, Sink};
use super::read::Reader;
use super::row::BatchView;
use super::scratch::{Scratch, scratch};
use super::source::{self, Format, Input, Pin};
use super::summaries::{Fill, General, read_summaries};
use crate::error::{Error, Result};

/// Rows read by position: the batches, and each position's `(batch, row)` in them.
pub type Positioned = (Vec<RecordBatch>, Vec<(usize, usize)>);

/// What a streaming selection reads and writes through; [`TwoPass`] is the files' one.
pub trait Readings {
    /// The first reading: every row's summary, in the inputs' order (see [`read_summaries`]).
    ///
    /// # Errors
    /// A read failure.
    fn summaries<T: Send>(
        &mut self,
        leaves: &[&str],
        fill: &Fill<'_, T>,
        general: &General<'_, T>,
    ) -> Result<Vec<T>>;

    /// The first reading, whole rows: `each(view, i)` of every row, in the inputs' order.
    ///
    /// # Errors
    /// A read failure, or what `each` returns.
    fn each_row<T: Send>(
        &mut self,
        each: &(dyn Fn(&BatchView<'_>, usize) -> Result<T> + Sync),
    ) -> Result<Vec<T>>;

    /// The second and last reading: the rows at `positions` (ascending, in the first reading's
    /// numbering), whole, as batches and each position's `(batch, row)`.
    ///
    /// # Errors
    /// A read failure, or an input that changed since the first reading.
    fn rows_at(&mut self, positions: &[usize]) -> Result<Positioned>;

    /// Writes `rows` to the output on a thread of their own while `during` runs here; what
    /// `during` gave, once both are done.
    ///
    /// # Errors
    /// The output could not be written.
    fn write_while<F: Future>(
        &mut self,
        rows: &[RecordBatch],
        during: Option<F>,
    ) -> Result<Option<F::Output>>;

    /// Writes `items` to the output as JSON Lines, atomically.
    ///
    /// # Errors
    /// The output could not be written.
    fn write_lines<S: serde::Serialize>(&mut self, items: &[S]) -> Result<()>;
}

/// What the output of a streaming selection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Rows, in this format.
    Rows(Format),
    /// JSON Lines of records that are not rows (pairs).
    Lines,
}

/// The files of a streaming selection: its inputs as Parquet, pinned between the readings.
pub struct TwoPass<'c> {
    ctx: &'c Context,
    out: PathBuf,
    written: Written,
    inputs: Vec<Input>,
    pins: Vec<Option<Pin>>,
    reader: Option<Reader<'static>>,
    file_rows: Vec<usize>,
    sink: Option<Box<dyn Sink>>,
    started: Instant,
    _scratch: Scratch,
}

impl<'c> TwoPass<'c> {
    /// Resolves `specs` (none of them `out`) and converts JSONL ones to Parquet in scratch
    /// space, so that the readings can pick columns and rows.
    ///
    /// # Errors
    /// An input that does not resolve or convert, or `out` among them.
    pub fn open(ctx: &'c Context, specs: &[String], out: &Path, written: Written) -> Result<Self> {
        let started = Instant::now();
        let resolved = ctx.runtime.block_on(source::resolve(specs))?;
        super::output::not_an_input(out, &resolved)?;
        let scratch = scratch()?;
        let inputs = super::tables::as_parquet(ctx, resolved, scratch.path())?;
        // Both readings must read the same files.
        let pins = source::pin(&inputs)?;
        let reader = Reader::new(
            ctx.runtime.handle().clone(),
            OnBadRow::Fail,
            Box::new(|_| {}),
        );
        Ok(Self {
            ctx,
            out: out.to_path_buf(),
            written,
            inputs,
            pins,
            reader: Some(reader),
            file_rows: Vec::new(),
            sink: None,
            started,
            _scratch: scratch,
        })
    }
}

impl Readings for TwoPass<'_> {
    fn summaries<T: Send>(
        &mut self,
        leaves: &[&str],
        fill: &Fill<'_, T>,
        general: &General<'_, T>,
    ) -> Result<Vec<T>> {
        let reader = self
            .reader
            .as_mut()
            .ok_or_else(|| Error::Internal("select: read after the last reading".into()))?;
        let (infos, file_rows) = read_summaries(reader, &self.inputs, leaves, fill, general)?;
        self.file_rows = file_rows;
        tracing::debug!(rows = infos.len(), elapsed = ?self.started.elapsed(), "select: summaries read");
        Ok(infos)
    }

    fn each_row<T: Send>(
        &mut self,
        each: &(dyn Fn(&BatchView<'_>, usize) -> Result<T> + Sync),
    ) -> Result<Vec<T>> {
        let reader = self
            .reader
            .as_mut()
            .ok_or_else(|| Error::Internal("select: read after the last reading".into()))?;
        let mut infos: Vec<T> = Vec::new();
        let mut file_rows = Vec::with_capacity(self.inputs.len());
        for input in &self.inputs {
            let before = infos.len();
            reader.read(input, &mut |batch| {
                let view = BatchView::new(&batch)?;
                let part: Vec<T> = (0..batch.num_rows())
                    .into_par_iter()
                    .map(|i| each(&view, i))
                    .collect::<Result<_>>()?;
                infos.extend(part);
                Ok(())
            })?;
            file_rows.push(infos.len() - before);
        }
        self.file_rows = file_rows;
        Ok(infos)
    }

    fn rows_at(&mut self, positions: &[usize]) -> Result<Positioned> {
        tracing::debug!(chosen = positions.len(), elapsed = ?self.started.elapsed(), "select: rows chosen");
        source::unchanged(&self.inputs, &self.pins, "select")?;
        let mut reader = self
            .reader
            .take()
            .ok_or_else(|| Error::Internal("select: read after the last reading".into()))?;
        let read = reader.read_positions(&self.inputs, &self.file_rows, positions)?;
        source::unchanged(&self.inputs, &self.pins, "select")?;
        tracing::debug!(batches = read.0.len(), elapsed = ?self.started.elapsed(), "select: chosen rows read");
        drop(reader);
        if let Written::Rows(format) = self.written {
            self.sink = Some(super::rows_out::sink(&self.out, format)?);
        }
        Ok(read)
    }

    fn write_while<F: Future>(
        &mut self,
        rows: &[RecordBatch],
        during: Option<F>,
    ) -> Result<Option<F::Output>> {
        let mut sink = self
            .sink
            .take()
            .ok_or_else(|| Error::Internal("select: rows without an output".into()))?;
        tracing::debug!(elapsed = ?self.started.elapsed(), "select: rows in training order");
        let started = self.started;
        let (written, done) = std::thread::scope(|scope| {
            let writer = scope.spawn(move || -> Result<()> {
                for out in rows {
                    sink.write(out)?;
                }
                let finished = sink.finish();
                tracing::debug!(elapsed = ?started.elapsed(), "select: rows written");
                finished
            });
            let done = during.map(|f| self.ctx.runtime.block_on(f));
            tracing::debug!(elapsed = ?started.elapsed(), "select: selection scanned");
            let written = writer
                .join()
                .unwrap_or_else(|_| Err(Error::Internal("the select writer panicked".into())));
            (written, done)
        });
        written?;
        Ok(done)
    }

    fn write_lines<S: serde::Serialize>(&mut self, items: &[S]) -> Result<()> {
        let out = &self.out;
        let file = AtomicFile::create(out)?;
        let mut w = std::io::BufWriter::new(file.writer()?);
        for item in items {
            serde_json::to_writer(&mut w, item)
                .map_err(|e| Error::Internal(format!("writing a pair: {e}")))?;
            w.write_all(b"\n").map_err(|e| Error::io(out, e))?;
        }
        w.flush().map_err(|e| Error::io(out, e))?;
        drop(w);
        file.commit()
    }
}
