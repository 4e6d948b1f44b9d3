//! One scan for the measures of a `wai run`: while a [`Scope`] is open, a table of local Parquet
//! files that a stage registers ([`super::tables::load_table`]) keeps each column it reads in
//! memory, so the next stage over the same files (pass-at, markers, compare's arm, variance,
//! judge-trust, gate) takes the columns already read instead of reading the files again.
//!
//! A column is read once, in file order, and kept while the columns kept stay under the scope's
//! budget; a scan whose new columns would not fit is read from the files as without a scope
//! (streaming, nothing kept), so a stage over the text (hack-scan) never holds a whole text column.
//! Every scan counts the Parquet bytes (compressed column chunks) it read from disk: a stage whose
//! columns were all kept reads none ([`Scope::read`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use super::source::{Format, Input, Location};
use crate::error::{Error, Result};

/// How much a run's scope keeps, at most: a sixteenth of the default memory limit (half the
/// machine's memory), and no more than 512 MiB.
pub fn budget() -> u64 {
    (super::limits::default_memory() / 16).min(512 << 20)
}

/// What scans under a scope read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// Scans of tables of files (each query's read of a registered table).
    pub scans: u64,
    /// Of those, scans served wholly from columns read before.
    pub from_memory: u64,
    /// Parquet bytes (compressed column chunks) read from disk.
    pub bytes: u64,
}

struct State {
    /// Bytes of columns it may keep (0 once released).
    budget: AtomicU64,
    /// Tables of files, by the files' identity, most recently used last.
    tables: Mutex<Vec<(Key, Arc<Entry>)>>,
    scans: AtomicU64,
    from_memory: AtomicU64,
    bytes: AtomicU64,
}

impl State {
    fn read(&self) -> Read {
        Read {
            scans: self.scans.load(Ordering::Relaxed),
            from_memory: self.from_memory.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    /// The columns kept, in bytes, over every table.
    fn kept(&self) -> u64 {
        self.tables.lock().map_or(0, |t| {
            t.iter()
                .map(|(_, e)| e.kept_bytes.load(Ordering::Relaxed))
                .sum()
        })
    }

    /// Lets go of the columns of the tables other than `keep`, least recently used first, until
    /// `need` more bytes fit; lets go of none when they would not fit even then. A table let go
    /// drops its columns now (a session that registered it may live on) and keeps none again.
    fn make_room(&self, keep: &Arc<Entry>, need: u64) {
        let own = keep.kept_bytes.load(Ordering::Relaxed);
        let budget = self.budget.load(Ordering::Relaxed);
        if own.saturating_add(need) > budget {
            return;
        }
        let Ok(mut tables) = self.tables.lock() else {
            return;
        };
        let mut total: u64 = (tables.iter())
            .map(|(_, e)| e.kept_bytes.load(Ordering::Relaxed))
            .sum();
        while total.saturating_add(need) > budget {
            // The least recently used table with columns kept and not being read right now.
            let found = tables.iter().enumerate().find_map(|(i, (_, e))| {
                if Arc::ptr_eq(e, keep) || e.kept_bytes.load(Ordering::Relaxed) == 0 {
                    return None;
                }
                e.kept.try_lock().ok().map(|mut kept| {
                    kept.clear();
                    e.evicted.store(true, Ordering::Relaxed);
                    (i, e.kept_bytes.swap(0, Ordering::Relaxed))
                })
            });
            let Some((i, freed)) = found else {
                return;
            };
            tables.remove(i);
            total = total.saturating_sub(freed);
        }
    }
}

thread_local! {
    /// The open scope of this thread: a run's stages register their tables on the thread that
    /// runs them, and another thread (a test beside it) sees no scope.
    static STATE: std::cell::RefCell<Option<Arc<State>>> = const { std::cell::RefCell::new(None) };
}

/// Shares the scans of tables registered on this thread while it lives; columns kept are let go
/// when it is dropped (it stays on the thread that opened it).
#[derive(Debug)]
pub struct Scope(std::marker::PhantomData<*const ()>);

impl Scope {
    /// Opens a scope keeping at most `budget` bytes of columns (Arrow memory).
    ///
    /// # Errors
    /// A scope is open already.
    pub fn open(budget: u64) -> Result<Self> {
        STATE.with_borrow_mut(|state| {
            if state.is_some() {
                return Err(Error::Internal("a shared scan is open already".into()));
            }
            *state = Some(Arc::new(State {
                budget: AtomicU64::new(budget),
                tables: Mutex::new(Vec::new()),
                scans: AtomicU64::new(0),
                from_memory: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
            }));
            Ok(Self(std::marker::PhantomData))
        })
    }

    /// What scans have read since the scope opened.
    pub fn read(&self) -> Read {
        current().map_or_else(Read::default, |s| s.read())
    }

    /// Lets go of every column kept, now (a session that registered a table may live on), and
    /// keeps none from now on: for the stages of a run after the last one that could take them.
    /// Scans are still counted. Returns the bytes let go.
    pub fn release(&self) -> u64 {
        let Some(state) = current() else { return 0 };
        // Nothing kept from now on; then what is kept goes.
        state.budget.store(0, Ordering::Relaxed);
        let Ok(mut tables) = state.tables.lock() else {
            return 0;
        };
        let mut freed = 0;
        for (_, e) in tables.drain(..) {
            e.evicted.store(true, Ordering::Relaxed);
            // A table being read right now (none is, between stages) keeps what that read keeps
            // until the session that registered it is dropped.
            if let Ok(mut kept) = e.kept.try_lock() {
                kept.clear();
                freed += e.kept_bytes.swap(0, Ordering::Relaxed);
            }
        }
        drop(tables);
        freed
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        STATE.with_borrow_mut(|state| *state = None);
    }
}

fn current() -> Option<Arc<State>> {
    STATE.with_borrow(Clone::clone)
}

/// A file as it is now: its path, length and modification time.
type Key = Vec<(std::path::PathBuf, u64, Option<std::time::SystemTime>)>;

/// One table of files under a scope.
struct Entry {
    schema: SchemaRef,
    rows: usize,
    /// Per top-level column: its Parquet bytes compressed (what reading it costs) and
    /// uncompressed (about what it takes in memory).
    sizes: Vec<(u64, u64)>,
    /// The columns read and kept, by index: their arrays in file order. Reads of one table take
    /// turns, so a column is never read twice at once.
    kept: tokio::sync::Mutex<BTreeMap<usize, Vec<ArrayRef>>>,
    /// What `kept` takes in memory.
    kept_bytes: AtomicU64,
    /// Let go to make room for another table: keeps nothing from now on.
    evicted: std::sync::atomic::AtomicBool,
}

/// `table` (the files `inputs`, as registered) shared under the open scope, or `table` itself
/// when no scope is open or an input is not a local Parquet file.
///
/// # Errors
/// A footer that cannot be read.
pub fn share(inputs: &[Input], table: Arc<ListingTable>) -> Result<Arc<dyn TableProvider>> {
    let Some(state) = current() else {
        return Ok(table);
    };
    // On a cluster each stage's scan runs on the workers: a scan kept here would keep the plan
    // local.
    if super::cluster::current().is_some() {
        return Ok(table);
    }
    let mut key = Key::with_capacity(inputs.len());
    for input in inputs {
        let (Format::Parquet, Location::Local(path)) = (input.format, &input.location) else {
            return Ok(table);
        };
        let abs = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
        let meta = std::fs::metadata(&abs).map_err(|e| Error::io(&abs, e))?;
        key.push((abs, meta.len(), meta.modified().ok()));
    }
    let found = {
        let mut tables = state
            .tables
            .lock()
            .map_err(|_| Error::Internal("the shared scan is poisoned".into()))?;
        let i = tables.iter().position(|(k, _)| *k == key);
        i.map(|i| {
            // Most recently used last.
            let found = tables.remove(i);
            let entry = Arc::clone(&found.1);
            tables.push(found);
            entry
        })
    };
    let entry = if let Some(entry) = found {
        entry
    } else {
        let entry = Arc::new(entry_of(&key, table.schema())?);
        state
            .tables
            .lock()
            .map_err(|_| Error::Internal("the shared scan is poisoned".into()))?
            .push((key, Arc::clone(&entry)));
        entry
    };
    Ok(Arc::new(Shared {
        state,
        entry,
        files: table,
    }))
}

/// A new table of the files `key`: its columns' sizes, read from their footers.
fn entry_of(key: &Key, schema: SchemaRef) -> Result<Entry> {
    let mut sizes = vec![(0u64, 0u64); schema.fields().len()];
    let mut rows = 0usize;
    for (path, _, _) in key {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let meta = datafusion::parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&file)
            .map_err(|e| Error::Input {
                stage: "read".into(),
                message: format!("`{}`: its Parquet footer: {e}", path.display()),
            })?;
        for group in meta.row_groups() {
            rows += usize::try_from(group.num_rows()).unwrap_or(0);
            for chunk in group.columns() {
                let Some(top) = chunk.column_path().parts().first() else {
                    continue;
                };
                if let Ok(i) = schema.index_of(top) {
                    sizes[i].0 += u64::try_from(chunk.compressed_size()).unwrap_or(0);
                    // Text decoded takes its bytes whole (a dictionary page holds each distinct
                    // value once): the writer's count of them, where it wrote one, else the
                    // pages' size; and 8 bytes a value for offsets, numbers and validity.
                    let text = chunk
                        .unencoded_byte_array_data_bytes()
                        .and_then(|b| u64::try_from(b).ok());
                    let pages = u64::try_from(chunk.uncompressed_size()).unwrap_or(0);
                    let values = u64::try_from(chunk.num_values()).unwrap_or(0);
                    sizes[i].1 += text.map_or(pages, |t| t.max(pages)) + values * 8;
                }
            }
        }
    }
    Ok(Entry {
        schema,
        rows,
        sizes,
        kept: tokio::sync::Mutex::new(BTreeMap::new()),
        kept_bytes: AtomicU64::new(0),
        evicted: std::sync::atomic::AtomicBool::new(false),
    })
}

/// A table of files whose columns are read once and kept, under a scope.
struct Shared {
    state: Arc<State>,
    entry: Arc<Entry>,
    files: Arc<ListingTable>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("rows", &self.entry.rows)
            .finish_non_exhaustive()
    }
}

/// Rows per batch of a scan with no column (a count).
const COUNT_BATCH: usize = 8192;

fn external(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl Shared {
    /// The columns `missing` of the files, in file order, whatever the session's settings:
    /// planned as a query, so a large file is read by every core, each a contiguous range.
    async fn read(&self, missing: &[usize]) -> datafusion::error::Result<Vec<Vec<ArrayRef>>> {
        // In file order: planned here even when the process's sessions are distributed.
        let ctx = super::cluster::here(&super::session::new_context(None).map_err(external)?);
        super::session::keep_file_order(&ctx)
            .await
            .map_err(external)?;
        let names: Vec<&str> = (missing.iter())
            .map(|&i| self.entry.schema.field(i).name().as_str())
            .collect();
        let files: Arc<dyn TableProvider> = Arc::clone(&self.files) as _;
        let partitions = ctx
            .read_table(files)?
            .select_columns(&names)?
            .collect_partitioned()
            .await?;
        let mut columns: Vec<Vec<ArrayRef>> = vec![Vec::new(); missing.len()];
        for batch in partitions.into_iter().flatten() {
            for (c, array) in columns.iter_mut().zip(batch.columns()) {
                c.push(Arc::clone(array));
            }
        }
        Ok(columns)
    }
}

/// The columns `arrays` (each a list of arrays in file order, cut anywhere) as batches of
/// `schema`, cut where any column is cut.
fn aligned(
    schema: &SchemaRef,
    rows: usize,
    arrays: &[&Vec<ArrayRef>],
) -> datafusion::error::Result<Vec<RecordBatch>> {
    let mut cuts: Vec<usize> = Vec::new();
    if arrays.is_empty() {
        cuts.extend((COUNT_BATCH..rows).step_by(COUNT_BATCH));
    }
    for column in arrays {
        let mut at = 0;
        for a in *column {
            at += a.len();
            cuts.push(at);
        }
    }
    cuts.push(rows);
    cuts.sort_unstable();
    cuts.dedup();
    let mut batches = Vec::with_capacity(cuts.len());
    // Per column: which array, and where in it, the next batch starts.
    let mut at: Vec<(usize, usize)> = vec![(0, 0); arrays.len()];
    let mut start = 0;
    for &end in cuts.iter().filter(|&&c| c > 0) {
        let len = end - start;
        let mut columns = Vec::with_capacity(arrays.len());
        for (column, (i, offset)) in arrays.iter().zip(at.iter_mut()) {
            while *i < column.len() && *offset == column[*i].len() {
                *i += 1;
                *offset = 0;
            }
            let array = column.get(*i).ok_or_else(|| {
                DataFusionError::Internal("a kept column is shorter than its table".into())
            })?;
            columns.push(array.slice(*offset, len));
            *offset += len;
        }
        let options = RecordBatchOptions::new().with_row_count(Some(len));
        batches.push(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            columns,
            &options,
        )?);
        start = end;
    }
    Ok(batches)
}

#[async_trait::async_trait]
impl TableProvider for Shared {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.entry.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// The files' own answer, never exact: a filter is applied above the scan too, so rows from
    /// memory are filtered, and a scan of the files still prunes row groups and decodes late.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::error::Result<Vec<TableProviderFilterPushDown>> {
        Ok(self
            .files
            .supports_filters_pushdown(filters)?
            .into_iter()
            .map(|p| match p {
                TableProviderFilterPushDown::Exact => TableProviderFilterPushDown::Inexact,
                other => other,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let every: Vec<usize> = (0..self.entry.schema.fields().len()).collect();
        let which = projection.map_or(every.as_slice(), Vec::as_slice);
        let shared = &self.state;
        shared.scans.fetch_add(1, Ordering::Relaxed);
        let mut kept = self.entry.kept.lock().await;
        let missing: Vec<usize> = (which.iter().copied())
            .filter(|i| !kept.contains_key(i))
            .collect();
        if missing.is_empty() {
            shared.from_memory.fetch_add(1, Ordering::Relaxed);
        } else {
            let need: u64 = missing.iter().map(|&i| self.entry.sizes[i].1).sum();
            shared.make_room(&self.entry, need);
            let budget = shared.budget.load(Ordering::Relaxed);
            // A budget of 0 keeps nothing, not even columns the footers size at 0.
            if self.entry.evicted.load(Ordering::Relaxed)
                || budget == 0
                || shared.kept().saturating_add(need) > budget
            {
                // Too much to keep: read from the files as a table without a scope would.
                drop(kept);
                let bytes: u64 = which.iter().map(|&i| self.entry.sizes[i].0).sum();
                tracing::debug!(
                    need,
                    budget,
                    parquet_bytes = bytes,
                    "shared scan: too much to keep, read from the files"
                );
                shared.bytes.fetch_add(bytes, Ordering::Relaxed);
                return self.files.scan(state, projection, filters, limit).await;
            }
            let read = self.read(&missing).await?;
            let bytes: u64 = missing.iter().map(|&i| self.entry.sizes[i].0).sum();
            shared.bytes.fetch_add(bytes, Ordering::Relaxed);
            for (i, arrays) in missing.iter().zip(read) {
                let size: usize = arrays.iter().map(Array::get_array_memory_size).sum();
                tracing::debug!(
                    column = self.entry.schema.field(*i).name(),
                    parquet_bytes = self.entry.sizes[*i].0,
                    kept_bytes = size,
                    "shared scan: read and kept"
                );
                self.entry
                    .kept_bytes
                    .fetch_add(u64::try_from(size).unwrap_or(u64::MAX), Ordering::Relaxed);
                kept.insert(*i, arrays);
            }
        }
        let schema = Arc::new(self.entry.schema.project(which)?);
        let arrays: Vec<&Vec<ArrayRef>> = which.iter().filter_map(|i| kept.get(i)).collect();
        let batches = aligned(&schema, self.entry.rows, &arrays)?;
        drop(kept);
        // Contiguous runs of the rows, one per partition, in file order (as the files' own
        // ranges are read).
        // Exactly as many partitions as the session wants: with fewer, DataFusion would deal the
        // batches out again by size and lose the files' order.
        let parts = state.config().target_partitions().max(1);
        let per = batches.len().div_ceil(parts).max(1);
        let mut partitions: Vec<Vec<RecordBatch>> =
            batches.chunks(per).map(<[RecordBatch]>::to_vec).collect();
        partitions.resize(parts.max(partitions.len()), Vec::new());
        MemTable::try_new(schema, partitions)?
            .scan(state, None, filters, limit)
            .await
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{AsArray, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;

    #[test]
    fn columns_cut_differently_line_up_row_for_row() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let n: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(0..3)),
            Arc::new(Int64Array::from_iter_values(3..10)),
        ];
        let s: Vec<ArrayRef> = [0..5, 5..6, 6..10]
            .into_iter()
            .map(|r| Arc::new(StringArray::from_iter_values(r.map(|i| i.to_string()))) as ArrayRef)
            .collect();
        let batches = aligned(&schema, 10, &[&n, &s]).unwrap();
        assert_eq!(
            batches
                .iter()
                .map(RecordBatch::num_rows)
                .collect::<Vec<_>>(),
            [3, 2, 1, 4]
        );
        for b in &batches {
            let (n, s) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_string::<i32>(),
            );
            for i in 0..b.num_rows() {
                assert_eq!(n.value(i).to_string(), s.value(i));
            }
        }
        // No column (a count): the rows, in batches.
        let none = aligned(&Arc::new(Schema::empty()), 20_000, &[]).unwrap();
        assert_eq!(
            none.iter().map(RecordBatch::num_rows).sum::<usize>(),
            20_000
        );
    }

    #[test]
    fn rows_from_memory_keep_the_files_order_at_any_core_count() {
        // Three files of 10,000 rows: batches of 8,192 and 1,808 each. With fewer partitions than
        // the session's, DataFusion deals the batches out again by size.
        let dir = tempfile::tempdir().unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let mut inputs = Vec::new();
        for f in 0..3i64 {
            let path = dir.path().join(format!("part-{f}.parquet"));
            let file = std::fs::File::create(&path).unwrap();
            let mut w =
                datafusion::parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None)
                    .unwrap();
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from_iter_values(
                    f * 10_000..(f + 1) * 10_000,
                ))],
            )
            .unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
            inputs.push(Input {
                display: path.display().to_string(),
                location: Location::Local(path),
                format: Format::Parquet,
                size: None,
            });
        }
        // And one file of 1.5M rows (12 MB, past the 10 MiB below which a file is not split) in
        // row groups of 100,000: read in byte ranges, one per core.
        let one = dir.path().join("one.parquet");
        {
            let props = datafusion::parquet::file::properties::WriterProperties::builder()
                .set_max_row_group_row_count(Some(100_000))
                .set_dictionary_enabled(false)
                .build();
            let file = std::fs::File::create(&one).unwrap();
            let mut w =
                datafusion::parquet::arrow::ArrowWriter::try_new(file, schema.clone(), Some(props))
                    .unwrap();
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from_iter_values(0..1_500_000))],
            )
            .unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
        }
        let single = vec![Input {
            display: one.display().to_string(),
            location: Location::Local(one),
            format: Format::Parquet,
            size: None,
        }];
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _scope = Scope::open(1 << 30).unwrap();
        for (parts, inputs) in [1, 2, 4, 7]
            .into_iter()
            .flat_map(|p| [(p, &inputs), (p, &single)])
        {
            for _ in 0..2 {
                let ctx = crate::pipeline::session::new_context(Some(parts)).unwrap();
                rt.block_on(crate::pipeline::session::register_parquet(
                    &ctx, "t", inputs,
                ))
                .unwrap();
                let got: Vec<i64> = rt
                    .block_on(crate::pipeline::session::collect_in_file_order(
                        &ctx,
                        "SELECT n FROM t",
                    ))
                    .unwrap()
                    .iter()
                    .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                    .collect();
                let rows = if inputs.len() == 1 { 1_500_000 } else { 30_000 };
                assert_eq!(got, (0..rows).collect::<Vec<_>>(), "{parts} partitions");
            }
        }
        assert!(current().unwrap().from_memory.load(Ordering::Relaxed) >= 14);
    }

    #[test]
    fn a_column_is_read_once_and_a_scan_past_the_budget_streams() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.parquet");
        let batches = crate::testing::batch_of(crate::testing::fixture("example_rows.jsonl"));
        let mut sink =
            Box::new(crate::pipeline::io::ParquetSink::create(&path, batches.schema()).unwrap());
        crate::pipeline::io::Sink::write(&mut *sink, &batches).unwrap();
        crate::pipeline::io::Sink::finish(sink).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let path_cell = std::cell::RefCell::new(path.clone());
        let count = |sql: &str| -> (i64, Read) {
            let ctx = crate::pipeline::session::new_context(None).unwrap();
            let path = path_cell.borrow().clone();
            let input = Input {
                display: path.display().to_string(),
                location: Location::Local(path),
                format: Format::Parquet,
                size: None,
            };
            rt.block_on(crate::pipeline::session::register_parquet(
                &ctx,
                "rows",
                &[input],
            ))
            .unwrap();
            let got = rt
                .block_on(async { ctx.sql(sql).await?.collect().await })
                .unwrap();
            let n = got[0].column(0).as_primitive::<Int64Type>().value(0);
            (n, current().map_or_else(Read::default, |s| s.read()))
        };
        let sql = "SELECT count(DISTINCT task_id) FROM rows WHERE reward > 0.5";
        let (want, _) = count(sql);
        {
            let scope = Scope::open(1 << 30).unwrap();
            let (first, after_first) = count(sql);
            let (second, after_second) = count(sql);
            assert_eq!((first, second), (want, want));
            assert_eq!(after_first.scans, 1);
            assert!(after_first.bytes > 0);
            assert_eq!(after_second.bytes, after_first.bytes, "read once");
            assert_eq!(after_second.from_memory, 1);
            assert!(Scope::open(1).is_err(), "one scope at a time");
            // Released: the columns go now, and the next scans read the files, keeping nothing.
            let kept = current().unwrap().kept();
            assert!(kept > 0);
            assert_eq!(scope.release(), kept);
            assert_eq!(current().unwrap().kept(), 0);
            let (third, after_third) = count(sql);
            let (_, after_fourth) = count(sql);
            assert_eq!(third, want);
            assert_eq!(after_third.from_memory, 1, "not from memory");
            assert_eq!(
                after_third.bytes,
                2 * after_first.bytes,
                "read from the files"
            );
            assert_eq!(
                after_fourth.bytes,
                3 * after_first.bytes,
                "and kept nothing"
            );
            assert_eq!(current().unwrap().kept(), 0);
            assert_eq!(scope.release(), 0);
            drop(scope);
        }
        // Room for one table's columns: a second table's let the first go, whose next scan
        // reads the files again.
        let kept_one = {
            let _scope = Scope::open(1 << 30).unwrap();
            count(sql);
            current().unwrap().kept()
        };
        let other = dir.path().join("other.parquet");
        std::fs::copy(&path, &other).unwrap();
        {
            let _scope = Scope::open(kept_one + kept_one / 2).unwrap();
            let (_, first) = count(sql);
            *path_cell.borrow_mut() = other.clone();
            let (n, _) = count(sql);
            assert_eq!(n, want);
            *path_cell.borrow_mut() = path.clone();
            let state = current().unwrap();
            assert_eq!(state.tables.lock().unwrap().len(), 1, "the first let go");
            assert!(state.kept() <= kept_one + kept_one / 2);
            let (_, again) = count(sql);
            assert_eq!(
                again.from_memory, first.from_memory,
                "read from the files again"
            );
        }
        // Past the budget: nothing kept, each scan reads the files.
        let _scope = Scope::open(0).unwrap();
        let (first, a) = count(sql);
        let (second, b) = count(sql);
        assert_eq!((first, second), (want, want));
        assert_eq!((a.from_memory, b.from_memory), (0, 0));
        assert_eq!(b.bytes, 2 * a.bytes);
    }
}
