//! Reads resolved inputs, whatever their format, as row-schema batches (their text as views
//! into the decoded pages, for the readings that keep them).

use datafusion::arrow::array::RecordBatch;
use datafusion::parquet::arrow::ParquetRecordBatchStreamBuilder;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, GenericListArray, OffsetSizeTrait, RecordBatchOptions,
    StructArray, new_null_array,
};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, FieldRef, Fields, Schema, SchemaRef};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
};
#[allow(deprecated)]
use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
use datafusion::parquet::schema::types::SchemaDescriptor;
use futures::StreamExt;

use super::io::{self, Identity, OnBadRow, ReadCounts};
use super::row::BATCH_ROWS;
use super::source::{self, Format, Input, Location};
use crate::error::{Error, Result};

/// Runs a reading of the Parquet file `display`, so that a file that does not decode is a data
/// error naming it: the decoder's errors, and its panics (the parquet crate asserts on some
/// corrupt pages rather than returning an error), become one. Errors the reading's consumer
/// returns pass through as they are.
pub(crate) fn guarded<T>(display: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        guarded_errors(display, read)
    })) {
        Ok(r) => r,
        Err(panic) => Err(corrupt(display, panic_text(&*panic))),
    }
}

/// The decoder's errors of a reading of `display` as a data error naming the file.
fn guarded_errors<T>(display: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    match read() {
        Err(Error::Parquet(e)) => Err(corrupt(display, e.to_string())),
        Err(Error::Arrow(e @ datafusion::arrow::error::ArrowError::ParquetError(_))) => {
            Err(corrupt(display, e.to_string()))
        }
        other => other,
    }
}

fn corrupt(display: &str, why: String) -> Error {
    Error::Input {
        stage: "read".into(),
        message: format!("`{display}` is not a readable Parquet file ({why})"),
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let why = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    format!("its decoder failed: {why}")
}

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
        self.meta
            .metadata()
            .row_groups()
            .iter()
            .map(|g| usize::try_from(g.num_rows()).unwrap_or(0))
            .collect()
    }
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
    ) -> Result<(Vec<RecordBatch>, Vec<(usize, usize)>)> {
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
                Some(e) => Err(e),
                None => r,
            },
            Err(panic) if in_consumer.get() => std::panic::resume_unwind(panic),
            Err(panic) => Err(corrupt(&input.display, panic_text(&*panic))),
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

/// What a decoding thread sends: a batch of its row group, or the row group's end.
enum Piece {
    Batch(RecordBatch),
    End,
}

/// What to read of a Parquet file: which rows, which leaf columns (`None`: all).
#[derive(Clone, Copy, Default)]
struct Plan<'a> {
    rows: Option<&'a [bool]>,
    leaves: Option<&'a [&'a str]>,
    /// Text stays as views (the consumer reads [`crate::pipeline::row::Text`]).
    views: bool,
}

impl Plan<'_> {
    /// Some rows or some columns, not the whole file.
    fn is_partial(&self) -> bool {
        self.rows.is_some() || self.leaves.is_some()
    }

    /// Text is decoded as views (see [`decoding`]).
    fn decodes_views(&self) -> bool {
        self.views || self.is_partial()
    }
}

/// The projection of the leaf columns named by their field paths, lists looked through
/// (`messages.content`, `messages.tool_calls.name`), whatever names the file's writer gave its
/// list wrappers (`list.item`, `list.element`, ...): the leaves are walked in the Arrow schema,
/// in the order the Parquet schema holds them. `None` (read every column) when the two do not
/// line up.
fn projection(
    parquet: &SchemaDescriptor,
    arrow: &Schema,
    leaves: &[&str],
) -> Option<ProjectionMask> {
    fn walk(path: &str, ty: &DataType, out: &mut Vec<String>) {
        match ty {
            DataType::Struct(fields) => {
                for f in fields {
                    walk(&format!("{path}.{}", f.name()), f.data_type(), out);
                }
            }
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::ListView(f)
            | DataType::LargeListView(f)
            | DataType::FixedSizeList(f, _) => walk(path, f.data_type(), out),
            DataType::Map(entries, _) => walk(path, entries.data_type(), out),
            _ => out.push(path.to_owned()),
        }
    }
    let mut paths = Vec::with_capacity(parquet.num_columns());
    for f in arrow.fields() {
        walk(f.name(), f.data_type(), &mut paths);
    }
    if paths.len() != parquet.num_columns() {
        return None;
    }
    let included: Vec<bool> = paths.iter().map(|p| leaves.contains(&p.as_str())).collect();
    // A field left out wholly is filled with nulls, so it must take them.
    let mut next = included.iter().copied();
    for f in arrow.fields() {
        let (any, _, fillable) = fill_check(f.data_type(), &mut next);
        if !fillable || (!any && !f.is_nullable()) {
            return None;
        }
    }
    let picked = (0..included.len()).filter(|&i| included[i]);
    Some(ProjectionMask::leaves(parquet, picked))
}

/// For a field of type `ty` whose leaves' inclusion `next` yields in order: whether any of its
/// leaves is included, whether all are, and whether every part of it left out wholly can be
/// filled with nulls (a struct read in part fills its left-out children; a part left out
/// wholly is filled by its parent; a map or another kind of list is read whole or not at all).
fn fill_check(ty: &DataType, next: &mut impl Iterator<Item = bool>) -> (bool, bool, bool) {
    match ty {
        DataType::Struct(fields) => {
            let parts: Vec<((bool, bool, bool), bool)> = fields
                .iter()
                .map(|f| (fill_check(f.data_type(), next), f.is_nullable()))
                .collect();
            let any = parts.iter().any(|((a, _, _), _)| *a);
            let all = parts.iter().all(|((_, l, _), _)| *l);
            let ok = parts.iter().all(|((_, _, o), _)| *o)
                && (!any || parts.iter().all(|((a, _, _), nullable)| *a || *nullable));
            (any, all, ok)
        }
        DataType::List(f) | DataType::LargeList(f) => fill_check(f.data_type(), next),
        DataType::Map(f, _)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _) => {
            let (any, all, ok) = fill_check(f.data_type(), next);
            (any, all, ok && (!any || all))
        }
        _ => {
            let included = next.next().unwrap_or(false);
            (included, included, true)
        }
    }
}

/// `batch` with the columns and types of `full`: the columns and nested fields a projection left
/// out are null, and text decoded as views is copied out to plain strings when `full` says so
/// (a batch that already fits is returned as it is).
fn widen(batch: &RecordBatch, full: &SchemaRef) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let columns = widen_columns(full.fields(), n, |name| batch.column_by_name(name))?;
    let options = RecordBatchOptions::new().with_row_count(Some(n));
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(full),
        columns,
        &options,
    )?)
}

/// The columns of `fields` (of `n` rows): each one `column` gives, widened to its field's type,
/// else nulls.
fn widen_columns<'a>(
    fields: &Fields,
    n: usize,
    column: impl Fn(&str) -> Option<&'a ArrayRef>,
) -> Result<Vec<ArrayRef>> {
    fields
        .iter()
        .map(|f| match column(f.name()) {
            Some(c) => widen_array(c, f.data_type()),
            None => Ok(nulls(f.data_type(), n)),
        })
        .collect()
}

/// `n` nulls of type `t`: a slice of one null array per type kept by the thread, grown as
/// needed. A partial reading widens every batch with a score of null columns (and nested
/// ones as long as their lists' items), and allocating and zeroing them anew for each batch
/// was a tenth of a first reading's page faults.
fn nulls(t: &DataType, n: usize) -> ArrayRef {
    thread_local! {
        static NULLS: std::cell::RefCell<std::collections::HashMap<DataType, ArrayRef>> =
            std::cell::RefCell::default();
    }
    // What a thread keeps is bounded: longer runs of nulls are made each time.
    const KEPT: usize = 1 << 20;
    if n > KEPT {
        return new_null_array(t, n);
    }
    NULLS.with_borrow_mut(|kept| {
        if let Some(a) = kept.get(t)
            && a.len() >= n
        {
            return a.slice(0, n);
        }
        let grown = n
            .max(BATCH_ROWS)
            .max(kept.get(t).map_or(0, |a| 2 * a.len()))
            .min(KEPT);
        let a = new_null_array(t, grown);
        kept.insert(t.clone(), Arc::clone(&a));
        a.slice(0, n)
    })
}

/// `schema` with its text (at any depth, through lists and structs) as views.
fn with_views(schema: &Schema) -> Schema {
    fn field(f: &FieldRef) -> FieldRef {
        Arc::new(f.as_ref().clone().with_data_type(view(f.data_type())))
    }
    fn view(t: &DataType) -> DataType {
        match t {
            DataType::Utf8 => DataType::Utf8View,
            DataType::List(f) => DataType::List(field(f)),
            DataType::Struct(fields) => DataType::Struct(fields.iter().map(field).collect()),
            other => other.clone(),
        }
    }
    Schema::new_with_metadata(
        schema.fields().iter().map(field).collect::<Fields>(),
        schema.metadata().clone(),
    )
}

/// The row schema with its text as views: what a reading that keeps views gives.
pub(crate) fn row_schema_with_views() -> SchemaRef {
    static SCHEMA: std::sync::LazyLock<SchemaRef> =
        std::sync::LazyLock::new(|| Arc::new(with_views(&crate::schema::row_schema())));
    Arc::clone(&SCHEMA)
}

/// The metadata to decode a file with, and the schema its batches are widened to.
///
/// Text is decoded as views into the decoded pages for a partial reading (picked rows, or some
/// leaf columns), whose [`widen`] then copies out only the rows kept (a sieved row group is
/// decoded whole and most of it dropped), and for a reading whose consumer reads views
/// ([`Plan::views`]), which copies no text at all. Plain strings copy every value as it is
/// decoded, into buffers grown by doubling (views in select's sieved second reading took 3.6%
/// off the whole command's instructions). A whole reading that gives plain strings is decoded
/// as plain strings: copying out of views costs as much. A schema that cannot be read as views
/// is read as it is.
fn decoding(meta: ArrowReaderMetadata, plan: &Plan<'_>) -> (ArrowReaderMetadata, SchemaRef) {
    let file_schema = Arc::clone(meta.schema());
    if !plan.decodes_views() {
        return (meta, file_schema);
    }
    let views = Arc::new(with_views(meta.schema()));
    let meta = ArrowReaderMetadata::try_new(
        Arc::clone(meta.metadata()),
        ArrowReaderOptions::new().with_schema(views),
    )
    .unwrap_or(meta);
    let full = if plan.views {
        Arc::clone(meta.schema())
    } else {
        file_schema
    };
    (meta, full)
}

/// `array` as `to`: struct fields it lacks (at any depth, through lists) are null.
fn widen_array(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    if array.data_type() == to {
        return Ok(Arc::clone(array));
    }
    match (array.data_type(), to) {
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let s = array.as_struct();
            let children = widen_columns(fields, s.len(), |name| s.column_by_name(name))?;
            Ok(Arc::new(StructArray::try_new(
                fields.clone(),
                children,
                s.nulls().cloned(),
            )?))
        }
        // Text a partial reading decoded as views (see `decoding`).
        (DataType::Utf8View, DataType::Utf8) => Ok(cast(array, to)?),
        (DataType::List(_), DataType::List(field)) => widen_list::<i32>(array, field),
        // Files from other writers (Polars, for one) hold lists as large lists.
        (DataType::LargeList(_), DataType::LargeList(field)) => widen_list::<i64>(array, field),
        (from, to) => Err(Error::Internal(format!(
            "a column read as {from} cannot stand for {to}"
        ))),
    }
}

/// A list `array` whose items are widened to `field`'s type.
fn widen_list<O: OffsetSizeTrait>(array: &ArrayRef, field: &FieldRef) -> Result<ArrayRef> {
    let l = array.as_list::<O>();
    Ok(Arc::new(GenericListArray::<O>::try_new(
        Arc::clone(field),
        l.offsets().clone(),
        widen_array(l.values(), field.data_type())?,
        l.nulls().cloned(),
    )?))
}

/// The rows picked from one Parquet file, by row group.
struct Picks<'a> {
    rows: &'a [bool],
    /// Each row group's first row and row count.
    spans: Vec<(usize, usize)>,
}

impl<'a> Picks<'a> {
    fn new(
        meta: &datafusion::parquet::file::metadata::ParquetMetaData,
        rows: &'a [bool],
        display: &str,
    ) -> Result<Self> {
        let mut spans = Vec::with_capacity(meta.num_row_groups());
        let mut at = 0;
        for g in meta.row_groups() {
            let n = usize::try_from(g.num_rows()).unwrap_or(0);
            spans.push((at, n));
            at += n;
        }
        if at != rows.len() {
            return Err(Error::Input {
                stage: "read".into(),
                message: format!(
                    "`{display}` has {at} rows where it had {} when first read: it changed in between",
                    rows.len()
                ),
            });
        }
        Ok(Self { rows, spans })
    }

    /// Whether row group `g` has a picked row.
    fn wanted(&self, g: usize) -> bool {
        let (start, n) = self.spans[g];
        self.rows[start..start + n].contains(&true)
    }

    /// The row groups with a picked row, in order.
    fn groups(&self) -> Vec<usize> {
        (0..self.spans.len()).filter(|&g| self.wanted(g)).collect()
    }

    /// Whether row group `g`'s picks are few runs (at least 256 rows a run on average), which
    /// the decoder skips between faster than it decodes them.
    fn sparse(&self, g: usize) -> bool {
        let (start, n) = self.spans[g];
        let marks = &self.rows[start..start + n];
        let runs = usize::from(marks.first() == Some(&true))
            + marks.windows(2).filter(|w| !w[0] && w[1]).count();
        runs * 256 <= n
    }

    /// Row group `g`'s picks as a filter over its rows.
    fn filter(&self, g: usize) -> BooleanArray {
        let (start, n) = self.spans[g];
        BooleanArray::from(self.rows[start..start + n].to_vec())
    }

    /// How row groups `groups` are read, in order: the selection the decoder skips by (a sparse
    /// group's picks; every row of a dense group), and the sieve over the rows it yields (a dense
    /// group's picks), `None` when every group is sparse. Local files read one group at a time
    /// and remote ones all wanted groups at once, by this one rule.
    fn plan(&self, groups: &[usize]) -> (RowSelection, Option<Sieve>) {
        let mut selection = Vec::with_capacity(groups.len());
        let mut after: Vec<bool> = Vec::new();
        for &g in groups {
            let picks = self.filter(g);
            if self.sparse(g) {
                after.resize(after.len() + picks.true_count(), true);
                selection.push(picks);
            } else {
                after.extend(picks.values().iter());
                selection.push(BooleanArray::from(vec![true; picks.len()]));
            }
        }
        let sieve = after.contains(&false).then(|| Sieve {
            keep: BooleanArray::from(after),
            at: 0,
        });
        (RowSelection::from_filters(&selection), sieve)
    }
}

/// The rows to keep of the batches a reading yields, in order: `keep[at..]` is over the rows not
/// yet seen.
struct Sieve {
    keep: BooleanArray,
    at: usize,
}

impl Sieve {
    /// The kept rows of the next batch, `None` when it keeps none.
    fn pass(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let n = batch.num_rows();
        let kept = filter_record_batch(batch, &self.keep.slice(self.at, n))?;
        self.at += n;
        Ok((kept.num_rows() > 0).then_some(kept))
    }
}

/// Reads a local Parquet file's batches in file order (only the rows `rows` marks, when given),
/// decoding row groups on several threads at once: thread `k` decodes row groups `k, k + n, ...`,
/// each into its own small buffer, and the batches are taken from the threads in turn, so
/// decoding runs ahead of the consumer by about one row group per thread.
#[allow(clippy::too_many_lines)]
fn read_local_parquet_rows(
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
                let decode_group = &decode_group;
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

/// Decodes the row groups of the local Parquet file `path` (its footer `meta`) as `plan` says (its leaves, not
/// its rows), groups in parallel (each on one thread, taken in turn), passing each batch, its
/// group and the position of its first row in the group to `each` on that thread; the rows
/// read.
fn par_local_parquet_batches(
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
            for batch in group_reader(path, &meta, group, mask.as_ref())?.build()? {
                if failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let batch = widen(&batch?, &full)?;
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{
        Array, AsArray, Int64Array, ListArray, StringArray, StructArray,
    };
    use datafusion::arrow::datatypes::{DataType, Field, Fields, Int64Type, Schema};

    use super::*;
    use crate::pipeline::io::{ParquetSink, ROW_GROUP_ROWS, Sink};

    /// The kept null arrays a widening slices are what a fresh one would be, at every length
    /// (shorter, as long, longer than what is kept, and past the bound), for every column type
    /// of the row schema.
    #[test]
    fn kept_nulls_equal_fresh_ones() {
        let schema = row_schema_with_views();
        for n in [
            0,
            3,
            BATCH_ROWS,
            BATCH_ROWS + 1,
            5 * BATCH_ROWS,
            (1 << 20) + 1,
            7,
        ] {
            for f in schema.fields() {
                let kept = nulls(f.data_type(), n);
                let fresh = new_null_array(f.data_type(), n);
                assert_eq!(kept.data_type(), f.data_type(), "{}", f.name());
                assert_eq!(kept.len(), n, "{}", f.name());
                assert_eq!(kept.null_count(), n, "{} at {n}", f.name());
                assert_eq!(kept.to_data(), fresh.to_data(), "{} at {n}", f.name());
            }
        }
    }

    /// A file written with large text and large lists (as Polars writes them) is read as the
    /// row schema three ways: whole, whole with text views, and some leaves with text views;
    /// the views say what the plain strings say.
    #[test]
    fn large_types_read_as_the_row_schema_with_views_or_not() {
        use crate::pipeline::row::testing::{ROW_FIXTURES, batch_of, fixture};
        use crate::pipeline::source::{Format, Input, Location};
        use datafusion::arrow::compute::concat_batches;
        fn large(t: &DataType) -> DataType {
            let field =
                |f: &FieldRef| Arc::new(f.as_ref().clone().with_data_type(large(f.data_type())));
            match t {
                DataType::Utf8 => DataType::LargeUtf8,
                DataType::List(f) => DataType::LargeList(field(f)),
                DataType::Struct(fs) => DataType::Struct(fs.iter().map(field).collect()),
                other => other.clone(),
            }
        }
        let batch = batch_of(ROW_FIXTURES.iter().flat_map(|f| fixture(f)));
        let schema = Arc::new(Schema::new(
            batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_data_type(large(f.data_type())))
                .collect::<Vec<_>>(),
        ));
        let columns = batch
            .columns()
            .iter()
            .zip(schema.fields())
            .map(|(c, f)| cast(c, f.data_type()).expect("cast"))
            .collect();
        let wide = RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch");
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("large.parquet");
        let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
            std::fs::File::create(&path).expect("file"),
            schema,
            None,
        )
        .expect("writer");
        w.write(&wide).expect("written");
        w.close().expect("closed");
        let input = Input {
            display: "large".into(),
            location: Location::Local(path),
            format: Format::Parquet,
            size: None,
        };
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let mut reader = Reader::new(runtime.handle().clone(), OnBadRow::Fail, Box::new(|_| {}));
        let plain_of = |b: &RecordBatch| io::conform(b, "large").expect("plain");
        let mut whole = Vec::new();
        reader
            .read(&input, &mut |b| {
                whole.push(b);
                Ok(())
            })
            .expect("whole");
        let whole = concat_batches(&crate::schema::row_schema(), &whole).expect("concat");
        assert_eq!(whole, batch);
        let mut views = Vec::new();
        reader
            .read_views(&input, &mut |b| {
                assert_eq!(b.schema(), row_schema_with_views());
                views.push(plain_of(&b));
                Ok(())
            })
            .expect("views");
        let views = concat_batches(&crate::schema::row_schema(), &views).expect("concat");
        assert_eq!(views, batch);
        let mut leaves = Vec::new();
        // The row ids are required: a projection leaves out only what can be null.
        let picked = ["task_id", "rollout_id", "prompt", "messages.content"];
        reader
            .read_leaves(&input, &picked, &mut |b| {
                assert_eq!(b.schema(), row_schema_with_views());
                leaves.push(plain_of(&b));
                Ok(())
            })
            .expect("leaves");
        let leaves = concat_batches(&crate::schema::row_schema(), &leaves).expect("concat");
        assert_eq!(
            leaves.column_by_name("prompt"),
            batch.column_by_name("prompt")
        );
        let content = |b: &RecordBatch| {
            let m = b
                .column_by_name("messages")
                .expect("messages")
                .as_list::<i32>();
            let c = m
                .values()
                .as_struct()
                .column_by_name("content")
                .expect("content");
            Arc::clone(c)
        };
        assert_eq!(&content(&leaves), &content(&batch));
        assert_eq!(
            leaves
                .column_by_name("final_text")
                .expect("column")
                .null_count(),
            batch.num_rows()
        );
    }

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
    fn leaves_are_found_whatever_the_writer_named_its_lists() {
        use datafusion::parquet::arrow::ArrowSchemaConverter;
        let calls = Field::new_struct(
            "element",
            vec![
                Field::new("id", DataType::Utf8, true),
                Field::new("name", DataType::LargeUtf8, true),
            ],
            true,
        );
        let turn = Field::new_struct(
            "element",
            vec![
                Field::new("role", DataType::Utf8, true),
                Field::new("tool_calls", DataType::LargeList(Arc::new(calls)), true),
                Field::new("content", DataType::Utf8, true),
            ],
            true,
        );
        let schema = Schema::new(vec![
            Field::new("task_id", DataType::Utf8, false),
            Field::new("messages", DataType::List(Arc::new(turn)), true),
            Field::new("final_text", DataType::Utf8, true),
        ]);
        let parquet = ArrowSchemaConverter::new()
            .convert(&schema)
            .expect("schema");
        // Leaves: task_id, role, tool_calls.id, tool_calls.name, content, final_text.
        assert_eq!(parquet.num_columns(), 6);
        assert!(parquet.column(4).path().string().contains("element"));
        let mask = projection(
            &parquet,
            &schema,
            &["task_id", "messages.content", "messages.tool_calls.name"],
        )
        .expect("a projection");
        let picked: Vec<usize> = (0..6).filter(|&i| mask.leaf_included(i)).collect();
        assert_eq!(picked, vec![0, 3, 4]);
        // A field that cannot hold nulls is never left out (the file is then read whole): a
        // top-level one, or a struct's child when the struct is read in part.
        assert!(projection(&parquet, &schema, &["messages.content"]).is_none());
        let strict = Schema::new(vec![
            Field::new("task_id", DataType::Utf8, false),
            Field::new(
                "messages",
                DataType::List(Arc::new(Field::new_struct(
                    "item",
                    vec![
                        Field::new("role", DataType::Utf8, false),
                        Field::new("content", DataType::Utf8, true),
                    ],
                    true,
                ))),
                true,
            ),
        ]);
        let parquet_strict = ArrowSchemaConverter::new()
            .convert(&strict)
            .expect("schema");
        assert!(projection(&parquet_strict, &strict, &["task_id", "messages.content"]).is_none());
        assert!(projection(&parquet_strict, &strict, &["task_id", "messages.role"]).is_some());
        assert!(projection(&parquet_strict, &strict, &["task_id"]).is_some());
        // Every leaf select's first reading asks for is in a row file, so it is projected.
        let rows = crate::schema::row_schema();
        let parquet = ArrowSchemaConverter::new().convert(&rows).expect("schema");
        let mask = projection(&parquet, &rows, &crate::stages::select::LEAVES).expect("lined up");
        let picked = (0..parquet.num_columns())
            .filter(|&i| mask.leaf_included(i))
            .count();
        assert_eq!(picked, crate::stages::select::LEAVES.len());
    }

    #[test]
    fn widening_fills_the_left_out_fields_of_lists_of_structs() {
        use datafusion::arrow::array::LargeListArray;
        let text = Field::new("text", DataType::Utf8, true);
        let score = Field::new("score", DataType::Int64, true);
        let read = StructArray::new(
            Fields::from(vec![text.clone()]),
            vec![Arc::new(StringArray::from(vec!["a", "b", "c"]))],
            None,
        );
        let offsets = datafusion::arrow::buffer::OffsetBuffer::<i64>::from_lengths([2, 0, 1]);
        let item = |fields: Vec<Field>| Arc::new(Field::new_struct("item", fields, true));
        let projected: ArrayRef = Arc::new(LargeListArray::new(
            item(vec![text.clone()]),
            offsets,
            Arc::new(read),
            None,
        ));
        let full = DataType::LargeList(item(vec![text, score]));
        let wide = widen_array(&projected, &full).expect("widened");
        assert_eq!(wide.data_type(), &full);
        let items = wide.as_list::<i64>().values().as_struct();
        assert_eq!(items.column(0).as_string::<i32>().value(2), "c");
        assert_eq!(items.column(1).null_count(), 3);
        assert_eq!(wide.as_list::<i64>().value_length(0), 2);
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
        read_local_parquet_rows(&path, "n", Plan::default(), &mut |b| {
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
        // Groups decoded and consumed in parallel: each batch says where it is in its group.
        let seen = std::sync::Mutex::new(Vec::new());
        let footer = || {
            ArrowReaderMetadata::load(
                &std::fs::File::open(&path).expect("file"),
                ArrowReaderOptions::default(),
            )
            .expect("footer")
        };
        let read = par_local_parquet_batches(&path, footer(), Plan::default(), &|group, at, b| {
            let n = b.column(0).as_primitive::<Int64Type>();
            let first = group as i64 * ROW_GROUP_ROWS as i64 + at as i64;
            for i in 0..b.num_rows() {
                assert_eq!(n.value(i), first + i as i64, "group {group} at {at}");
            }
            seen.lock().expect("lock").push((first, b.num_rows()));
            Ok(())
        })
        .expect("read");
        assert_eq!(read, total as u64);
        let mut seen = seen.into_inner().expect("lock");
        seen.sort_unstable();
        let mut covered = 0i64;
        for (first, n) in seen {
            assert_eq!(first, covered, "a gap or an overlap");
            covered += n as i64;
        }
        assert_eq!(covered, total);
        // A consumer's error ends the reading with it.
        let failed = par_local_parquet_batches(&path, footer(), Plan::default(), &|_, _, _| {
            Err(Error::Internal("enough".into()))
        });
        assert!(matches!(failed, Err(Error::Internal(m)) if m == "enough"));
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
        read_local_parquet_rows(&swapped, "n", Plan::default(), &mut |b| {
            first.get_or_insert(b.column(0).as_primitive::<Int64Type>().value(3));
            Ok(())
        })
        .expect("read");
        assert_eq!(first, Some(3));
        // A consumer that stops early stops the decoding threads.
        let mut seen = 0;
        let stopped = read_local_parquet_rows(&path, "n", Plan::default(), &mut |_| {
            seen += 1;
            Err(Error::Internal("enough".into()))
        });
        assert!(stopped.is_err());
        assert_eq!(seen, 1);
        let mut picked_ways: Vec<Vec<usize>> = Vec::new();
        // Picked rows: in order, with every unpicked row and the untouched middle group skipped;
        // many short runs in the first and last groups (decoded and filtered), then a few long
        // ones in the last (skipped by the decoder).
        let dense: Vec<bool> = (0..total)
            .map(|n| {
                let group = n / ROW_GROUP_ROWS as i64;
                group != 1 && (n % 97 < 3 || n == total - 1 || n == 0)
            })
            .collect();
        let sparse: Vec<bool> = (0..total)
            .map(|n| (n > 2 * ROW_GROUP_ROWS as i64 + 100 && n % 5000 < 700) || n == 7)
            .collect();
        for marks in [dense, sparse] {
            let groups: Vec<usize> = {
                let meta = ParquetRecordBatchReaderBuilder::try_new(
                    std::fs::File::open(&path).expect("file"),
                )
                .expect("footer");
                let picks = Picks::new(meta.metadata(), &marks, "n").expect("picks");
                (0..3)
                    .filter(|&g| picks.wanted(g) && picks.sparse(g))
                    .collect()
            };
            let want: Vec<i64> = (0..total).filter(|&n| marks[n as usize]).collect();
            let mut got = Vec::new();
            read_local_parquet_rows(
                &path,
                "n",
                Plan {
                    rows: Some(&marks),
                    ..Plan::default()
                },
                &mut |b| {
                    // Text decoded as views comes back as plain strings, the file's types.
                    assert_eq!(b.schema().as_ref(), schema.as_ref());
                    let n = b.column(0).as_primitive::<Int64Type>();
                    let items = b.column(1).as_list::<i32>();
                    for i in 0..b.num_rows() {
                        let item = items.value(i);
                        let text = item.as_struct().column(0).as_string::<i32>();
                        assert_eq!(text.value(0), format!("row {}", n.value(i)));
                        got.push(n.value(i));
                    }
                    Ok(())
                },
            )
            .expect("picked");
            assert_eq!(got, want);
            picked_ways.push(groups);
        }
        // Both ways were taken: the dense picks filtered, the sparse ones skipped.
        assert_eq!(picked_ways, vec![vec![], vec![0, 2]]);
        let marks = vec![true; total as usize];
        // A file that does not have the rows it had is refused.
        let short = read_local_parquet_rows(
            &path,
            "n",
            Plan {
                rows: Some(&marks[1..]),
                ..Plan::default()
            },
            &mut |_| Ok(()),
        );
        let refused = short.unwrap_err().to_string();
        assert!(refused.contains("changed"), "{refused}");
        // The error names the input as given, not the file read for it.
        assert!(refused.contains("`n`"), "{refused}");
        // All wanted groups at once (as a remote file is read): a dense group, a skipped one, a
        // sparse one, by one selection and the sieve after it.
        let mixed: Vec<bool> = (0..total)
            .map(|n| match n / ROW_GROUP_ROWS as i64 {
                0 => n % 97 < 3,
                1 => false,
                _ => n % 5000 < 700,
            })
            .collect();
        let file = || std::fs::File::open(&path).expect("file");
        let builder = ParquetRecordBatchReaderBuilder::try_new(file()).expect("footer");
        let picks = Picks::new(builder.metadata(), &mixed, "n").expect("picks");
        let groups = picks.groups();
        assert_eq!(groups, vec![0, 2]);
        assert!(!picks.sparse(0) && picks.sparse(2));
        let (selection, sieve) = picks.plan(&groups);
        let mut sieve = sieve.expect("a dense group is sieved");
        let mut got: Vec<i64> = Vec::new();
        for batch in builder
            .with_batch_size(1000)
            .with_row_groups(groups)
            .with_row_selection(selection)
            .build()
            .expect("reader")
        {
            if let Some(kept) = sieve.pass(&batch.expect("batch")).expect("sieve") {
                got.extend(kept.column(0).as_primitive::<Int64Type>().values().iter());
            }
        }
        let want: Vec<i64> = (0..total).filter(|&n| mixed[n as usize]).collect();
        assert_eq!(got, want);
    }
}
