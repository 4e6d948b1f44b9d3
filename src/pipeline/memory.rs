//! Rows a program holds in memory (the Python package's data frames and lists of dicts), named
//! so that every command takes them where it takes a path.
//!
//! [`register`] and [`register_json`] keep rows under a spec `memory:N` until the returned
//! [`MemoryRows`] is dropped. A command that measures (pass-at, markers, compare, hack-scan,
//! SQL, ...) reads them as a table ([`table`]) that brings a column to the row schema when a
//! query first reads it, once: columns that already have the row schema's types are shared, not
//! copied, and columns a query does not read are never touched. A command that streams rows
//! from files (select, export, grade, decontaminate, labels) reads a Parquet copy written once,
//! the first time one asks ([`input`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::{MemTable, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use rayon::prelude::*;

use super::io::{self, ParquetSink, Sink};
use super::scratch::Scratch;
use super::source::{Format, Input, Location};
use crate::error::{Error, Result};
use crate::schema::{col, row_schema};

/// How a spec names rows in memory.
pub const SCHEME: &str = "memory:";

/// Rows in memory, registered: their spec is valid until this is dropped.
#[derive(Debug)]
pub struct MemoryRows {
    id: u64,
    spec: String,
    rows: usize,
}

impl MemoryRows {
    /// The spec a command takes in place of a path (`memory:N`).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// How many rows.
    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// The rows, in the row schema (every column made, if a query has not made it yet).
    ///
    /// # Errors
    /// A column that does not convert to the row schema's type.
    pub fn batches(&self) -> Result<Vec<RecordBatch>> {
        entry(&self.spec)?.all()
    }
}

impl Drop for MemoryRows {
    fn drop(&mut self) {
        if let Ok(mut tables) = TABLES.lock() {
            tables.remove(&self.id);
        }
    }
}

/// One registered table: the batches as they came, each row-schema column made from them the
/// first time a query reads it.
struct Entry {
    display: String,
    /// The batches as given (rows already: their own schema; from JSON: the row schema).
    raw: Vec<RecordBatch>,
    /// For each column of the row schema, its arrays (one per batch), once made.
    columns: Vec<OnceLock<Vec<ArrayRef>>>,
    /// The Parquet copy for commands that stream files, written on first use (a failure is not
    /// kept: the next command tries again).
    file: Mutex<Option<Copy>>,
}

/// A Parquet copy of rows in memory: its scratch folder (removed with it), path and size.
type Copy = (Scratch, PathBuf, u64);

static TABLES: LazyLock<Mutex<HashMap<u64, Arc<Entry>>>> = LazyLock::new(Mutex::default);
static NEXT: AtomicU64 = AtomicU64::new(1);

/// Whether `spec` names rows in memory.
pub fn is_memory(spec: &str) -> bool {
    spec.starts_with(SCHEME)
}

fn entry(spec: &str) -> Result<Arc<Entry>> {
    let gone = || {
        Error::Usage(format!(
            "`{spec}` names rows in memory that are no longer registered"
        ))
    };
    let id: u64 = spec
        .strip_prefix(SCHEME)
        .and_then(|n| n.parse().ok())
        .ok_or_else(gone)?;
    TABLES
        .lock()
        .ok()
        .and_then(|t| t.get(&id).cloned())
        .ok_or_else(gone)
}

impl Entry {
    /// The row schema's columns `which` (indexes), each as one array per batch, made the first
    /// time they are asked for.
    fn columns(&self, which: &[usize]) -> Result<Vec<Vec<ArrayRef>>> {
        let schema = row_schema();
        which
            .par_iter()
            .map(|&i| {
                if let Some(made) = self.columns[i].get() {
                    return Ok(made.clone());
                }
                let field = schema.field(i);
                let made = self
                    .raw
                    .iter()
                    .map(|b| io::conform_column(b, field, &self.display))
                    .collect::<Result<Vec<_>>>()?;
                Ok(self.columns[i].get_or_init(|| made).clone())
            })
            .collect()
    }

    /// Batches of the row schema's columns `which`.
    fn batches_of(&self, which: &[usize]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let schema = Arc::new(row_schema().project(which)?);
        let columns = self.columns(which)?;
        let batches = self
            .raw
            .iter()
            .enumerate()
            .map(|(b, raw)| {
                let options = RecordBatchOptions::new().with_row_count(Some(raw.num_rows()));
                RecordBatch::try_new_with_options(
                    Arc::clone(&schema),
                    columns.iter().map(|c| Arc::clone(&c[b])).collect(),
                    &options,
                )
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok((schema, batches))
    }

    /// Every row, in the row schema.
    fn all(&self) -> Result<Vec<RecordBatch>> {
        let every: Vec<usize> = (0..row_schema().fields().len()).collect();
        Ok(self.batches_of(&every)?.1)
    }
}

/// Rows in memory as a DataFusion table in the row schema, which makes only the columns a
/// query reads (a measure over a wide frame casts `task_id` and `reward`, not the text).
#[derive(Debug)]
struct Lazy(Arc<Entry>);

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("display", &self.display)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl TableProvider for Lazy {
    fn schema(&self) -> SchemaRef {
        row_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let every: Vec<usize> = (0..row_schema().fields().len()).collect();
        let which = projection.map_or(every.as_slice(), Vec::as_slice);
        let (schema, batches) = self
            .0
            .batches_of(which)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        MemTable::try_new(schema, vec![batches])?
            .scan(state, None, filters, limit)
            .await
    }
}

/// The table DataFusion reads for the rows `spec` names: only the columns a query reads are
/// brought to the row schema.
///
/// # Errors
/// `spec` names no registered rows.
pub fn table(spec: &str) -> Result<(String, Arc<dyn TableProvider>)> {
    let e = entry(spec)?;
    Ok((e.display.clone(), Arc::new(Lazy(e))))
}

fn keep(display: &str, batches: Vec<RecordBatch>) -> Result<MemoryRows> {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let rows = batches.iter().map(RecordBatch::num_rows).sum();
    let entry = Entry {
        display: display.to_owned(),
        raw: batches,
        columns: (0..row_schema().fields().len())
            .map(|_| OnceLock::new())
            .collect(),
        file: Mutex::new(None),
    };
    TABLES
        .lock()
        .map_err(|_| Error::Internal("the table of rows in memory is poisoned".into()))?
        .insert(id, Arc::new(entry));
    Ok(MemoryRows {
        id,
        spec: format!("{SCHEME}{id}"),
        rows,
    })
}

/// Registers Arrow batches of rows, named `display` in messages.
///
/// Batches that carry `task_id` and `rollout_id` are rows already (a table read from wai's
/// Parquet, or one a program made in the row schema): each column's type is checked now, and
/// the column is made when first read: cast where its type differs from the row schema's (text
/// as views, large lists), shared where it does not; missing nullable columns are nulls. Batches without them are the
/// reference's rows in another form (a data frame made from its dicts): they are read as JSON
/// rows are, ids derived as a read derives them, and an error names the row (`line N` is row N,
/// counted from 1).
///
/// # Errors
/// A column whose type does not fit the row schema's, or a row a JSON reading would refuse.
pub fn register(display: &str, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<MemoryRows> {
    let is_rows = schema.field_with_name(col::TASK_ID).is_ok()
        && schema.field_with_name(col::ROLLOUT_ID).is_ok();
    if is_rows {
        // Kept as they came: a column is brought to the row schema when a query first reads it.
        // Its type is checked now, so a column that cannot be rows stops here, named.
        check_types(display, schema)?;
        return keep(display, batches.to_vec());
    }
    let mut text = Vec::new();
    {
        let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(&mut text);
        for batch in batches {
            writer.write(batch).map_err(|e| Error::Input {
                stage: "read".into(),
                message: format!("`{display}`: cannot read its rows as JSON: {e}"),
            })?;
        }
        writer.finish().map_err(|e| Error::Input {
            stage: "read".into(),
            message: format!("`{display}`: cannot read its rows as JSON: {e}"),
        })?;
    }
    register_json(display, &text)
}

/// Refuses a column the row schema has whose type cannot become the row schema's.
fn check_types(display: &str, schema: &SchemaRef) -> Result<()> {
    let rows = row_schema();
    for field in schema.fields() {
        if let Ok(want) = rows.field_with_name(field.name())
            && want.data_type() != field.data_type()
            && !io::column_fits(want.data_type(), field.data_type())
        {
            return Err(Error::Input {
                stage: "read".into(),
                message: format!(
                    "`{display}`: column `{}` is {}, not {}",
                    field.name(),
                    field.data_type(),
                    want.data_type()
                ),
            });
        }
    }
    Ok(())
}

/// Registers rows given as JSON Lines text (the reference's row format, one row per line),
/// read as a JSONL file is.
///
/// # Errors
/// A row a JSONL reading refuses (the error names the line and field).
pub fn register_json(display: &str, text: &[u8]) -> Result<MemoryRows> {
    keep(display, io::jsonl_batches(display, text)?)
}

/// The rows `spec` names as a Parquet input, for commands that stream files: written to a
/// scratch folder the first time, then reused while the rows are registered. The copy goes with
/// the registration: keep the [`MemoryRows`] alive until the command that reads it has ended.
///
/// # Errors
/// `spec` names no registered rows, or the copy cannot be written.
pub fn input(spec: &str) -> Result<Input> {
    let e = entry(spec)?;
    let mut file = e
        .file
        .lock()
        .map_err(|_| Error::Internal("a copy of rows in memory is poisoned".into()))?;
    if file.is_none() {
        let scratch = super::scratch::scratch()?;
        let path = scratch.path().join("rows.parquet");
        let mut sink = Box::new(ParquetSink::create(&path, row_schema())?);
        for batch in e.all()? {
            sink.write(&batch)?;
        }
        sink.finish()?;
        let size = std::fs::metadata(&path)
            .map_err(|err| Error::io(&path, err))?
            .len();
        *file = Some((scratch, path, size));
    }
    let Some((_, path, size)) = file.as_ref() else {
        return Err(Error::Internal(
            "a copy of rows in memory went missing".into(),
        ));
    };
    Ok(Input {
        display: e.display.clone(),
        location: Location::Local(path.clone()),
        format: Format::Parquet,
        size: Some(*size),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_rows_get_ids_and_unregister_when_dropped() {
        let rows = register_json(
            "rows (list)",
            b"{\"prompt\": \"a\", \"final_text\": \"x\", \"reward\": 1.0}\n{\"prompt\": \"a\", \"final_text\": \"y\", \"reward\": 0.0}\n",
        )
        .expect("registered");
        let spec = rows.spec().to_owned();
        let (display, _) = table(&spec).expect("found");
        let batches = rows.batches().expect("rows");
        assert_eq!(display, "rows (list)");
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 2);
        // Rows made from them again are rows already: their columns are shared, not copied.
        let again = register(&display, &row_schema(), &batches).expect("again");
        let shared = again.batches().expect("rows");
        assert!(std::ptr::eq(
            shared[0].column(0).to_data().buffers()[1].as_ptr(),
            batches[0].column(0).to_data().buffers()[1].as_ptr()
        ));
        let file = input(&spec).expect("a Parquet copy");
        assert_eq!(file.format, Format::Parquet);
        drop(rows);
        let err = table(&spec).expect_err("dropped");
        assert!(err.to_string().contains("no longer registered"), "{err}");
    }

    #[test]
    fn a_bad_row_is_named() {
        let err = register_json(
            "rows (list)",
            b"{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"reward\": \"high\"}\n",
        )
        .expect_err("a text reward");
        let text = err.to_string();
        assert!(
            text.contains("rows (list)") && text.contains("line 2"),
            "{text}"
        );
    }
}
