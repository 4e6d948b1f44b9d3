//! Rows a program holds in memory (the Python package's data frames and lists of dicts), named
//! so that every command takes them where it takes a path.
//!
//! [`register`] and [`register_json`] bring rows to the row schema once and keep them under a
//! spec `memory:N` until the returned [`MemoryRows`] is dropped. A command that measures
//! (pass-at, markers, compare, hack-scan, SQL, ...) registers them as an in-memory table: columns
//! that already have the row schema's types are shared, not copied. A command that streams rows
//! from files (select, export, grade, decontaminate, labels) reads a Parquet copy written once,
//! the first time one asks ([`input`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
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

    /// The rows, in the row schema.
    pub fn batches(&self) -> Vec<RecordBatch> {
        entry(&self.spec).map_or_else(|_| Vec::new(), |e| e.batches.as_ref().clone())
    }
}

impl Drop for MemoryRows {
    fn drop(&mut self) {
        if let Ok(mut tables) = TABLES.lock() {
            tables.remove(&self.id);
        }
    }
}

/// One registered table.
struct Entry {
    display: String,
    batches: Arc<Vec<RecordBatch>>,
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

fn keep(display: &str, batches: Vec<RecordBatch>) -> Result<MemoryRows> {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let rows = batches.iter().map(RecordBatch::num_rows).sum();
    let entry = Entry {
        display: display.to_owned(),
        batches: Arc::new(batches),
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
/// Parquet, or one a program made in the row schema): each column is checked and, where its type
/// differs from the row schema's (text as views, large lists), cast; a column of the right type is
/// shared, not copied; missing nullable columns are nulls. Batches without them are the
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
        // Batches as they come (a slice of a list column would cast the whole list's values):
        // each is conformed column by column on every core.
        let conformed = batches
            .par_iter()
            .map(|b| io::conform(b, display))
            .collect::<Result<Vec<_>>>()?;
        return keep(display, conformed);
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

/// Registers rows given as JSON Lines text (the reference's row format, one row per line),
/// read as a JSONL file is.
///
/// # Errors
/// A row a JSONL reading refuses (the error names the line and field).
pub fn register_json(display: &str, text: &[u8]) -> Result<MemoryRows> {
    keep(display, io::jsonl_batches(display, text)?)
}

/// The rows `spec` names, with how they are named in messages.
///
/// # Errors
/// `spec` names no registered rows.
pub fn rows(spec: &str) -> Result<(String, SchemaRef, Arc<Vec<RecordBatch>>)> {
    let e = entry(spec)?;
    Ok((e.display.clone(), row_schema(), Arc::clone(&e.batches)))
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
        for batch in e.batches.iter() {
            sink.write(batch)?;
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
        let (display, _, batches) = super::rows(&spec).expect("found");
        assert_eq!(display, "rows (list)");
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 2);
        // Rows made from them again are rows already: their columns are shared, not copied.
        let again = register(&display, &row_schema(), &batches).expect("again");
        let (_, _, shared) = super::rows(again.spec()).expect("found");
        assert!(std::ptr::eq(
            shared[0].column(0).to_data().buffers()[1].as_ptr(),
            batches[0].column(0).to_data().buffers()[1].as_ptr()
        ));
        let file = input(&spec).expect("a Parquet copy");
        assert_eq!(file.format, Format::Parquet);
        drop(rows);
        let err = super::rows(&spec).expect_err("dropped");
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
