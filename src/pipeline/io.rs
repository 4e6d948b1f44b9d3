//! Reading and writing rows: the streaming JSONL decoder, Parquet and JSONL sinks, atomic
//! outputs and the rejects file.
//!
//! Memory stays bounded: JSONL is read in chunks of about [`CHUNK_BYTES`] of whole lines,
//! decoded in parallel (rayon), and appended to [`BATCH_ROWS`]-row batches in input order; Parquet
//! is written in row groups of [`ROW_GROUP_ROWS`] rows. Every output is written to a temporary file
//! beside its destination and renamed into place only when complete.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, new_null_array};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_writer::{
    ArrowColumnChunk, ArrowLeafColumn, ArrowRowGroupWriterFactory, compute_leaves,
};
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};
use datafusion::parquet::file::writer::SerializedFileWriter;
use datafusion::parquet::schema::types::ColumnPath;
use rayon::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::row::{self, BATCH_ROWS, BatchView, Builder, Record};
use crate::error::{Error, Result};
use crate::schema::{col, row_schema};

/// Bytes of JSONL decoded per parallel chunk.
pub const CHUNK_BYTES: usize = 4 << 20;
/// Rows per Parquet row group: small enough to bound the writer's memory, large enough to scan fast.
pub const ROW_GROUP_ROWS: usize = 65_536;

/// Whether a file name is one of wai's temporary outputs (`.NAME.XXXXXX.tmp`).
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// How old a temporary file of wai's must be before a later run beside it removes it: older
/// than any run that could still be writing it.
const STALE: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// Removes what killed runs left in `dir`: wai's temporary files and folders whose name starts
/// with `prefix`, last changed more than a day ago. Best effort: what cannot be removed stays.
pub fn remove_stale(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Only the names wai's temporary files and staging folders take: PREFIX then six
        // random characters (then `.tmp` for a file), nothing a user or a live log is called.
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let random = rest.strip_suffix(".tmp").unwrap_or(rest);
        if random.len() != 6 || !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > STALE));
        if !old {
            continue;
        }
        let path = entry.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if removed.is_ok() {
            tracing::info!(path = %path.display(), "removed a stale temporary file of an earlier run");
        }
    }
}

/// A file written whole or not at all: a temporary file beside `path`, renamed on
/// [`AtomicFile::commit`], deleted if dropped uncommitted. Temporary files of this output that
/// killed runs left (older than a day) are removed when it starts.
pub struct AtomicFile {
    path: PathBuf,
    temp: tempfile::NamedTempFile,
}

impl AtomicFile {
    /// Starts writing `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(Error::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the output's folder does not exist",
                ),
            ));
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let prefix = format!(".{name}.");
        remove_stale(dir, &prefix);
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        // A finished output is an ordinary file (not the 0600 of a temporary one).
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
        let temp = builder.tempfile_in(dir).map_err(|e| Error::io(path, e))?;
        super::signals::add_temp(temp.path());
        Ok(Self {
            path: path.to_path_buf(),
            temp,
        })
    }

    /// The open temporary file.
    pub fn file(&self) -> &std::fs::File {
        self.temp.as_file()
    }

    /// A second handle on the temporary file, for writers that take ownership.
    pub fn handle(&self) -> Result<std::fs::File> {
        self.temp
            .as_file()
            .try_clone()
            .map_err(|e| Error::io(&self.path, e))
    }

    /// A handle for writing a large output front to back (see [`Writeback`]).
    pub fn writer(&self) -> Result<Writeback> {
        Writeback::new(self.handle()?, &self.path)
    }

    /// The destination path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes and renames the file into place.
    pub fn commit(self) -> Result<()> {
        self.temp
            .as_file()
            .sync_all()
            .map_err(|e| Error::io(&self.path, e))?;
        super::signals::remove_temp(self.temp.path());
        self.temp
            .persist(&self.path)
            .map_err(|e| Error::io(&self.path, e.error))?;
        Ok(())
    }
}

/// A file handle that hands a large output's pages to the disk while it is still being written:
/// every [`Writeback::WINDOW`] bytes, a helper thread asks the system to write out what the file
/// holds so far (`fdatasync`), so the `fsync` of [`AtomicFile::commit`] finds little left to do.
/// Without it, a 1.5 GB export spent its last second waiting for the disk. The helper's errors
/// are left to that final `fsync`, which reports them.
pub struct Writeback {
    file: std::fs::File,
    kick: Option<std::sync::mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    since: u64,
    window: u64,
    requests: u64,
}

impl Writeback {
    /// Bytes written between two requests.
    pub const WINDOW: u64 = 64 << 20;

    /// Writes to `file` (named `path` in errors).
    pub fn new(file: std::fs::File, path: &Path) -> Result<Self> {
        Self::with_window(file, path, Self::WINDOW)
    }

    /// Writes to `file`, asking for a write-out every `window` bytes.
    pub fn with_window(file: std::fs::File, path: &Path, window: u64) -> Result<Self> {
        let helper = file.try_clone().map_err(|e| Error::io(path, e))?;
        // One request waits at most: a request made while the disk is busy is folded into it.
        let (kick, requests) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::spawn(move || {
            for () in requests {
                let _ = helper.sync_data();
            }
        });
        Ok(Self {
            file,
            kick: Some(kick),
            thread: Some(thread),
            since: 0,
            window: window.max(1),
            requests: 0,
        })
    }

    /// How many write-outs were asked for.
    pub fn requests(&self) -> u64 {
        self.requests
    }
}

impl Write for Writeback {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.since += n as u64;
        if self.since >= self.window {
            self.since = 0;
            self.requests += 1;
            if let Some(kick) = &self.kick {
                let _ = kick.try_send(());
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Drop for Writeback {
    fn drop(&mut self) {
        drop(self.kick.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where batches go.
pub trait Sink: Send {
    /// Writes one batch of the row schema.
    fn write(&mut self, batch: &RecordBatch) -> Result<()>;
    /// Completes the output (renames it into place).
    fn finish(self: Box<Self>) -> Result<()>;
}

/// Runs another sink on its own thread, so encoding and compressing one batch overlaps reading
/// the next. Batches queue up to [`Background::QUEUE`] deep; the first error stops the writer and
/// comes back from the next `write` or from `finish`.
pub struct Background {
    sender: Option<std::sync::mpsc::SyncSender<Job>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

/// What the writer thread is told.
enum Job {
    /// Write this batch.
    Write(RecordBatch),
    /// Complete the output. A writer whose channel closes without it drops its output unfinished,
    /// so a failed run leaves no file behind.
    Finish,
}

impl Background {
    /// Batches waiting for the writer at most.
    pub const QUEUE: usize = 4;

    /// Starts `inner` on a writer thread.
    pub fn spawn(mut inner: Box<dyn Sink>) -> Self {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Job>(Self::QUEUE);
        let thread = std::thread::spawn(move || {
            for job in receiver {
                match job {
                    Job::Write(batch) => inner.write(&batch)?,
                    Job::Finish => return inner.finish(),
                }
            }
            Ok(())
        });
        Self {
            sender: Some(sender),
            thread: Some(thread),
        }
    }

    fn join(&mut self) -> Result<()> {
        self.sender = None;
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| Error::Internal("the writer thread panicked".into()))?,
            None => Ok(()),
        }
    }
}

impl Sink for Background {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let sent = self
            .sender
            .as_ref()
            .is_some_and(|s| s.send(Job::Write(batch.clone())).is_ok());
        if sent {
            return Ok(());
        }
        // The writer stopped: its error says why.
        self.join()?;
        Err(Error::Internal(
            "the writer thread stopped without an error".into(),
        ))
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        if let Some(s) = &self.sender {
            // A closed channel means the writer already stopped; `join` returns its error.
            let _ = s.send(Job::Finish);
        }
        self.join()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Unfinished (an error elsewhere): stop the writer; its temporary file is removed.
        self.sender = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The free-text leaf columns of the row schema (Parquet column paths). They are written
/// without a dictionary (their values rarely repeat within a page, and zstd takes the repeats)
/// and without statistics (the minimum and maximum of free text prune nothing, and computing
/// them compares every value): about 10% less time to write a file of rows, and a file a little
/// smaller.
pub const FREE_TEXT: [&str; 11] = [
    "messages.list.item.content",
    "messages.list.item.tool_calls.list.item.arguments",
    "messages.list.item.tool_calls.list.item.arguments_text",
    "steps.list.item.arguments",
    "steps.list.item.result",
    "steps.list.item.text",
    "steps.list.item.user",
    "final_text",
    "privileged",
    "judge_meta",
    "extra",
];

/// The text leaf columns that keep their dictionary (their values repeat: roles, tool names,
/// call ids, a task's prompt and lineage) but are written without statistics: no query prunes a
/// row group by them (a list's items and a JSON text are not pruned on; prompts are in rollout
/// order, so a row group's minimum and maximum span nearly every prompt), and their minimum and
/// maximum cost a comparison per value, about 4% of the instructions of rewriting a file of rows.
pub const UNPRUNED: [&str; 13] = [
    "prompt",
    "messages.list.item.role",
    "messages.list.item.name",
    "messages.list.item.tool_call_id",
    "messages.list.item.tool_calls.list.item.id",
    "messages.list.item.tool_calls.list.item.name",
    "steps.list.item.tool",
    "tools_used.list.item",
    "dims.entries.key",
    "dims.entries.value",
    "markers.entries.key",
    "lineage",
    "sampling",
];

/// A leaf column's path from its dotted name.
fn leaf_path(leaf: &str) -> ColumnPath {
    ColumnPath::from(leaf.split('.').map(str::to_owned).collect::<Vec<_>>())
}

/// Writes row batches to a Parquet file (zstd level 1), its column chunks encoded in parallel:
/// rows are gathered into a row group of [`ROW_GROUP_ROWS`], then every leaf column of the group
/// is encoded and compressed on its own rayon task, and the chunks are appended in schema order.
pub struct ParquetSink {
    writer: SerializedFileWriter<Writeback>,
    factory: ArrowRowGroupWriterFactory,
    schema: datafusion::arrow::datatypes::SchemaRef,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    row_groups: usize,
    out: AtomicFile,
}

impl ParquetSink {
    /// Starts a Parquet file at `path` with `schema`.
    pub fn create(path: &Path, schema: datafusion::arrow::datatypes::SchemaRef) -> Result<Self> {
        let out = AtomicFile::create(path)?;
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
        for leaf in FREE_TEXT {
            let path = leaf_path(leaf);
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_statistics_enabled(path, EnabledStatistics::None);
        }
        // A rollout id is unique: its dictionary would hold every value, overflow and fall back
        // to plain after most of a row group. Its statistics stay (lookups by id use them).
        props = props.set_column_dictionary_enabled(ColumnPath::from(col::ROLLOUT_ID), false);
        for leaf in UNPRUNED {
            props = props.set_column_statistics_enabled(leaf_path(leaf), EnabledStatistics::None);
        }
        let props = props.build();
        // The Arrow writer puts the Arrow schema in the file's metadata; its lower half writes.
        let (writer, factory) =
            ArrowWriter::try_new(out.writer()?, Arc::clone(&schema), Some(props))?
                .into_serialized_writer()?;
        Ok(Self {
            writer,
            factory,
            schema,
            pending: Vec::new(),
            pending_rows: 0,
            row_groups: 0,
            out,
        })
    }

    /// Encodes the gathered rows as one row group.
    fn flush(&mut self) -> Result<()> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let batches = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        let writers = self.factory.create_column_writers(self.row_groups)?;
        self.row_groups += 1;
        // Each field's leaves for every batch, the fields in parallel.
        let fields = self.schema.fields();
        let by_field: Vec<Vec<Vec<ArrowLeafColumn>>> = (0..fields.len())
            .into_par_iter()
            .map(|c| {
                batches
                    .iter()
                    .map(|b| Ok(compute_leaves(&fields[c], b.column(c))?))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        // Leaf k of the file: its piece of every batch, in order.
        let mut per_leaf: Vec<Vec<ArrowLeafColumn>> = Vec::with_capacity(writers.len());
        for field in by_field {
            let mut leaves: Vec<Vec<ArrowLeafColumn>> = Vec::new();
            for batch_leaves in field {
                if leaves.is_empty() {
                    leaves.resize_with(batch_leaves.len(), Vec::new);
                }
                for (k, leaf) in batch_leaves.into_iter().enumerate() {
                    leaves[k].push(leaf);
                }
            }
            per_leaf.extend(leaves);
        }
        if per_leaf.len() != writers.len() {
            return Err(Error::Internal(format!(
                "{} leaf columns for {} column writers",
                per_leaf.len(),
                writers.len()
            )));
        }
        let chunks: Vec<ArrowColumnChunk> = writers
            .into_par_iter()
            .zip(per_leaf)
            .map(|(mut w, leaves)| {
                for leaf in &leaves {
                    w.write(leaf)?;
                }
                Ok(w.close()?)
            })
            .collect::<Result<_>>()?;
        let mut row_group = self.writer.next_row_group()?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut row_group)?;
        }
        row_group.close()?;
        Ok(())
    }
}

impl ParquetSink {
    /// `batch` with its columns in the file's order, picked by name (the encoder goes by
    /// position, and a table read from a file keeps that file's order).
    fn aligned(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let same_order = batch.num_columns() == self.schema.fields().len()
            && batch
                .schema()
                .fields()
                .iter()
                .zip(self.schema.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if same_order {
            return Ok(batch.clone());
        }
        let columns = self
            .schema
            .fields()
            .iter()
            .map(|f| {
                let c = batch.column_by_name(f.name()).ok_or_else(|| {
                    Error::Internal(format!(
                        "a batch without column `{}` written to a Parquet file",
                        f.name()
                    ))
                })?;
                if c.data_type() != f.data_type() {
                    return Err(Error::Internal(format!(
                        "column `{}` is {} in a batch written to a Parquet file of {}",
                        f.name(),
                        c.data_type(),
                        f.data_type()
                    )));
                }
                Ok(Arc::clone(c))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// Whether a column of type `from` may be read as the row schema's `to`: numbers as numbers
/// (never text or booleans: a string or boolean `reward` is not a number), text from text or
/// any scalar (a numeric task id is its text, as in JSONL), nested as nested (converted, and an
/// error where a value does not convert). The one rule for JSONL's converted batches and for
/// Parquet tables registered for SQL.
pub fn column_fits(
    to: &datafusion::arrow::datatypes::DataType,
    from: &datafusion::arrow::datatypes::DataType,
) -> bool {
    use datafusion::arrow::datatypes::DataType;
    let text = |t: &DataType| {
        matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
            || matches!(t, DataType::Dictionary(_, v) if matches!(**v, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
    };
    let scalar = |t: &DataType| t.is_numeric() || text(t) || *t == DataType::Boolean;
    *from == DataType::Null
        || (to.is_numeric() && from.is_numeric())
        || (text(to) && scalar(from))
        || (!scalar(to) && !scalar(from))
}

/// A Parquet writer's error as what it is: a failed write to `path` (a full disk, a closed
/// device) is an I/O error naming the file, not a Parquet one ("External: No space left on
/// device", exit 65, no file named).
pub fn written_to(path: &Path, e: Error) -> Error {
    use datafusion::parquet::errors::ParquetError;
    let external = match &e {
        Error::Parquet(ParquetError::External(inner)) => Some(inner.as_ref()),
        Error::Arrow(datafusion::arrow::error::ArrowError::ExternalError(inner)) => {
            Some(inner.as_ref())
        }
        _ => None,
    };
    match external.and_then(|inner| inner.downcast_ref::<std::io::Error>()) {
        Some(io) => Error::io(path, std::io::Error::new(io.kind(), io.to_string())),
        None => e,
    }
}

impl Sink for ParquetSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut batch = self.aligned(batch)?;
        while batch.num_rows() > 0 {
            let room = ROW_GROUP_ROWS - self.pending_rows;
            let take = room.min(batch.num_rows());
            self.pending.push(batch.slice(0, take));
            self.pending_rows += take;
            batch = batch.slice(take, batch.num_rows() - take);
            if self.pending_rows == ROW_GROUP_ROWS {
                let path = self.out.path().to_path_buf();
                self.flush().map_err(|e| written_to(&path, e))?;
            }
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        let path = self.out.path().to_path_buf();
        self.flush().map_err(|e| written_to(&path, e))?;
        let Self { writer, out, .. } = *self;
        writer.close().map_err(|e| written_to(&path, e.into()))?;
        out.commit()
    }
}

/// Writes row batches as JSONL in the reference's row format.
pub struct JsonlSink {
    writer: BufWriter<Writeback>,
    out: AtomicFile,
}

impl JsonlSink {
    /// Starts a JSONL file at `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let out = AtomicFile::create(path)?;
        Ok(Self {
            writer: BufWriter::with_capacity(1 << 20, out.writer()?),
            out,
        })
    }
}

/// Renders every row of a batch as one JSON line each, in parallel, in order.
pub fn render_jsonl(batch: &RecordBatch) -> Result<Vec<String>> {
    let view = BatchView::new(batch)?;
    (0..batch.num_rows())
        .into_par_iter()
        .with_min_len(256)
        .map(|i| {
            let obj = row::encode(&view, i)?;
            serde_json::to_string(&Value::Object(obj))
                .map_err(|e| Error::Internal(format!("serialising a row: {e}")))
        })
        .collect()
}

impl Sink for JsonlSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let path = self.out.path().to_path_buf();
        for line in render_jsonl(batch)? {
            self.writer
                .write_all(line.as_bytes())
                .map_err(|e| Error::io(&path, e))?;
            self.writer
                .write_all(b"\n")
                .map_err(|e| Error::io(&path, e))?;
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<()> {
        let Self { writer, out } = *self;
        let path = out.path().to_path_buf();
        writer
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))?;
        out.commit()
    }
}

/// One record set aside, with where it came from and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reject {
    /// The input file or URL.
    pub file: String,
    /// 1-based line number.
    pub line: u64,
    /// The offending field, if one.
    pub field: Option<String>,
    /// What is wrong.
    pub reason: String,
    /// Why, in one word, when the command sorts what it set aside (`wai ingest`: `bad_field`,
    /// `not_json`, `duplicate_rollout_id`, `not_genai`, `no_spans`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// The line as it was read.
    pub text: String,
}

impl Reject {
    /// The error this reject would have been without a rejects file.
    pub fn into_error(self) -> Error {
        Error::BadRow {
            file: self.file,
            line: self.line,
            field: self.field,
            message: self.reason,
        }
    }
}

/// What to do with a record that cannot be read.
pub enum OnBadRow<'a> {
    /// Stop with an error naming file, line and field.
    Fail,
    /// Set it aside and go on.
    Reject(&'a mut Vec<Reject>),
}

/// Writes rejects as JSONL into `out`, flushed to disk, not yet renamed into place.
pub fn write_rejects(out: AtomicFile, rejects: &[Reject]) -> Result<AtomicFile> {
    let path = out.path().to_path_buf();
    let mut w = BufWriter::new(out.handle()?);
    for r in rejects {
        serde_json::to_writer(&mut w, r).map_err(|e| Error::io(&path, e.into()))?;
        w.write_all(b"\n").map_err(|e| Error::io(&path, e))?;
    }
    w.into_inner()
        .map_err(|e| Error::io(&path, e.into_error()))?
        .sync_all()
        .map_err(|e| Error::io(&path, e))?;
    Ok(out)
}

/// Finishes a run's outputs together: the rejects (when asked for) are written in full first,
/// then the main output is committed, then the rejects are renamed into place. A run that cannot
/// record what it set aside commits nothing.
pub fn finish_with_rejects(
    main: Box<dyn Sink>,
    rejects: Option<(AtomicFile, &[Reject])>,
) -> Result<()> {
    let written = match rejects {
        Some((file, list)) => Some(write_rejects(file, list)?),
        None => None,
    };
    main.finish()?;
    if let Some(f) = written {
        f.commit()?;
    }
    Ok(())
}

/// `_short_hash` of the reference: the first 12 hex digits of SHA-256 of the parts joined by `|`.
fn short_hash(parts: &[&str]) -> String {
    let digest = Sha256::digest(parts.join("|").as_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// Row identity across a whole read: given `rollout_id`s must be unique, derived ones are made so.
#[derive(Default)]
pub struct Identity {
    seen: HashSet<u128>,
    per_task: HashMap<String, u32>,
    hasher: std::hash::RandomState,
}

impl Identity {
    fn fingerprint(&self, id: &str) -> u128 {
        // Two independent 64-bit hashes: a false "duplicate" needs both to collide.

        (u128::from(self.hasher.hash_one(id)) << 64)
            | u128::from(self.hasher.hash_one((id, 0x9e37_79b9_u32)))
    }

    /// Sets `record.rollout_id` if absent, and checks uniqueness. The derived id is the
    /// reference's `_short_hash(task_id, index)` (with `eval_run` when it is not 0); `index` is
    /// `rollout_index`, else the row's position within its task so far.
    pub fn assign(&mut self, record: &mut Record) -> std::result::Result<(), String> {
        // Look up before inserting, so the task id is copied once per task, not once per row.
        let position = match self.per_task.get_mut(&record.task_id) {
            Some(seen) => {
                *seen += 1;
                *seen - 1
            }
            None => {
                self.per_task.insert(record.task_id.clone(), 1);
                0
            }
        };
        if let Some(id) = &record.rollout_id {
            return if self.seen.insert(self.fingerprint(id)) {
                Ok(())
            } else {
                Err(format!(
                    "duplicate rollout_id `{id}`: an earlier row has it"
                ))
            };
        }
        let index = record
            .rollout_index
            .map_or(i64::from(position), i64::from)
            .to_string();
        let run = record.eval_run.unwrap_or(0).to_string();
        let mut parts = vec![record.task_id.as_str(), index.as_str()];
        if run != "0" {
            parts.push(&run);
        }
        let mut id = short_hash(&parts);
        let mut n = 0u32;
        while !self.seen.insert(self.fingerprint(&id)) {
            n += 1;
            let salt = n.to_string();
            let mut salted = parts.clone();
            salted.push(&salt);
            id = short_hash(&salted);
        }
        record.rollout_id = Some(id);
        Ok(())
    }
}

/// Counters of one read.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ReadCounts {
    /// Rows read and kept.
    pub rows: u64,
    /// Records set aside.
    pub rejected: u64,
    /// Bytes read.
    pub bytes: u64,
}

/// Decodes one JSONL line of the reference's row format.
pub fn decode_line(line: &[u8]) -> std::result::Result<Record, row::FieldError> {
    row::decode(parse_json(line)?)
}

/// Parses one JSON text, with the reader's message on failure.
pub fn parse_json(text: &[u8]) -> std::result::Result<Value, row::FieldError> {
    serde_json::from_slice(text).map_err(|e| row::FieldError {
        field: None,
        message: format!("not valid JSON: {e}"),
    })
}

/// Turns one record's bytes into a row.
pub type Decode<'a> = dyn Fn(&[u8]) -> std::result::Result<Record, row::FieldError> + Sync + 'a;

/// Takes decoded records in input order: gives each its identity, appends it to the batch under
/// construction, emits full batches, and sets bad records aside (or stops at the first).
pub struct Accept<'a, 'b> {
    /// When set, how many rows carry each field in `extra`.
    pub extra_fields: Option<std::collections::BTreeMap<String, u64>>,
    builder: Builder,
    identity: &'a mut Identity,
    on_bad: &'a mut OnBadRow<'b>,
    counts: &'a mut ReadCounts,
    emit: &'a mut dyn FnMut(RecordBatch) -> Result<()>,
}

impl<'a, 'b> Accept<'a, 'b> {
    /// Starts accepting records.
    pub fn new(
        identity: &'a mut Identity,
        on_bad: &'a mut OnBadRow<'b>,
        counts: &'a mut ReadCounts,
        emit: &'a mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Self {
        Self {
            extra_fields: None,
            builder: Builder::new(),
            identity,
            on_bad,
            counts,
            emit,
        }
    }

    /// Takes one record decoded from `text` at `file` line `line`.
    pub fn take(
        &mut self,
        file: &str,
        line: u64,
        text: &[u8],
        result: std::result::Result<Record, row::FieldError>,
    ) -> Result<()> {
        self.take_keyed(file, line, text, result, None)
    }

    /// [`Accept::take`], with the record's `extra` field names when they were read already.
    fn take_keyed(
        &mut self,
        file: &str,
        line: u64,
        text: &[u8],
        result: std::result::Result<Record, row::FieldError>,
        keys: Option<Vec<String>>,
    ) -> Result<()> {
        let bad = |field: Option<String>, reason: String| Reject {
            file: file.to_owned(),
            line,
            field,
            reason,
            kind: None,
            text: String::from_utf8_lossy(text).into_owned(),
        };
        let reject = match result {
            Ok(mut record) => match self.identity.assign(&mut record) {
                Ok(()) => {
                    if let Some(tally) = self.extra_fields.as_mut() {
                        let keys = keys.unwrap_or_else(|| {
                            record.extra.as_deref().map(extra_keys).unwrap_or_default()
                        });
                        for k in keys {
                            *tally.entry(k).or_default() += 1;
                        }
                    }
                    self.builder.push(&record)?;
                    self.counts.rows += 1;
                    if self.builder.len() >= BATCH_ROWS {
                        (self.emit)(self.builder.finish()?)?;
                    }
                    None
                }
                Err(reason) => Some(bad(Some("rollout_id".into()), reason)),
            },
            Err(e) => Some(bad(e.field, e.message)),
        };
        if let Some(r) = reject {
            match self.on_bad {
                OnBadRow::Fail => return Err(r.into_error()),
                OnBadRow::Reject(list) => {
                    self.counts.rejected += 1;
                    list.push(r);
                }
            }
        }
        Ok(())
    }

    /// Takes records decoded by [`decode_all`], in order; `text` holds the bytes they were
    /// decoded from.
    fn take_decoded(&mut self, file: &str, text: &[u8], decoded: Vec<Decoded>) -> Result<()> {
        for d in decoded {
            self.take_keyed(file, d.line, &text[d.span], d.result, d.keys)?;
        }
        Ok(())
    }

    /// Emits the last, partial batch.
    pub fn finish(mut self) -> Result<()> {
        if !self.builder.is_empty() {
            (self.emit)(self.builder.finish()?)?;
        }
        Ok(())
    }
}

/// The top-level keys of a JSON object text (values are skipped, not built).
pub fn extra_keys(text: &str) -> Vec<String> {
    serde_json::from_str::<std::collections::BTreeMap<String, serde::de::IgnoredAny>>(text)
        .map(|m| m.into_keys().collect())
        .unwrap_or_default()
}

/// Splits a JSON array text into its elements, each with the line it starts on. Strings (and
/// their escapes) are skipped over, so brackets inside them do not count.
pub fn split_array(text: &[u8]) -> std::result::Result<Vec<(u64, &[u8])>, row::FieldError> {
    let err = |line: u64, message: &str| row::FieldError {
        field: None,
        message: format!("line {line}: {message}"),
    };
    let mut out = Vec::new();
    let mut line = 1u64;
    let mut i = 0;
    let skip_ws = |i: &mut usize, line: &mut u64| {
        while *i < text.len() && text[*i].is_ascii_whitespace() {
            if text[*i] == b'\n' {
                *line += 1;
            }
            *i += 1;
        }
    };
    skip_ws(&mut i, &mut line);
    if text.get(i) != Some(&b'[') {
        return Err(err(line, "expected a JSON array"));
    }
    i += 1;
    loop {
        skip_ws(&mut i, &mut line);
        match text.get(i) {
            None => return Err(err(line, "the array is not closed")),
            Some(b']') => return Ok(out),
            Some(b',') if !out.is_empty() => {
                i += 1;
                skip_ws(&mut i, &mut line);
            }
            _ => {}
        }
        let (start, start_line) = (i, line);
        let (mut depth, mut in_string, mut escaped) = (0i64, false, false);
        while i < text.len() {
            let b = text[i];
            if b == b'\n' {
                line += 1;
            }
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
            } else {
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' if depth > 0 => depth -= 1,
                    b',' | b']' if depth == 0 => break,
                    _ => {}
                }
            }
            i += 1;
            if depth == 0 && !in_string && matches!(b, b'}' | b']') {
                break;
            }
        }
        let element = text[start..i].trim_ascii_end();
        if element.is_empty() {
            return Err(err(start_line, "an empty array element"));
        }
        out.push((start_line, element));
    }
}

/// One record decoded from a chunk: where its bytes are, and what they gave.
struct Decoded {
    line: u64,
    span: std::ops::Range<usize>,
    result: std::result::Result<Record, row::FieldError>,
    /// The names of the fields in `extra`, when they are counted.
    keys: Option<Vec<String>>,
}

/// Decodes records (line, byte range in `text`) in parallel, keeping their order.
fn decode_all(
    text: &[u8],
    records: Vec<(u64, std::ops::Range<usize>)>,
    decode: &Decode<'_>,
    tally: bool,
) -> Vec<Decoded> {
    records
        .into_par_iter()
        .with_min_len(64)
        .map(|(line, span)| {
            let result = decode(&text[span.clone()]);
            // Read here, in parallel, when they are counted.
            let keys = match (&result, tally) {
                (Ok(r), true) => Some(r.extra.as_deref().map(extra_keys).unwrap_or_default()),
                _ => None,
            };
            Decoded {
                line,
                span,
                result,
                keys,
            }
        })
        .collect()
}

/// A decoded chunk on its way from the reading thread to the accepting one.
struct Chunk {
    /// The bytes the records came from.
    text: Arc<Vec<u8>>,
    /// Bytes read from the input since the previous chunk.
    read: u64,
    decoded: Vec<Decoded>,
}

/// Reads and decodes chunks of `reader`, sending each down `tx`; stops quietly when the
/// receiver is gone (it failed, and says why). Buffers come back through `spare`.
fn produce(
    name: &str,
    mut reader: impl Read,
    decode: &Decode<'_>,
    tally: bool,
    tx: &std::sync::mpsc::SyncSender<Chunk>,
    spare: &std::sync::mpsc::Receiver<Vec<u8>>,
) -> Result<()> {
    let fresh = || Vec::with_capacity(CHUNK_BYTES + (64 << 10));
    let mut buf: Vec<u8> = fresh();
    let mut next_line: u64 = 1;
    let mut eof = false;
    let mut first = true;
    while !eof {
        // Fill to about CHUNK_BYTES, then cut at the last newline.
        let start_len = buf.len();
        // A line longer than a chunk doubles the buffer until it fits.
        let target = if start_len < CHUNK_BYTES {
            CHUNK_BYTES
        } else {
            start_len * 2
        };
        buf.resize(target, 0);
        let mut filled = start_len;
        while filled < buf.len() {
            let n = reader
                .read(&mut buf[filled..])
                .map_err(|e| Error::io(name, e))?;
            if n == 0 {
                eof = true;
                break;
            }
            filled += n;
        }
        buf.truncate(filled);
        let mut read = (filled - start_len) as u64;
        if first && buf.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            // A JSON array: read it whole, then take its elements, a batch at a time.
            reader
                .read_to_end(&mut buf)
                .map_err(|e| Error::io(name, e))?;
            read += (buf.len() - filled) as u64;
            let elements: Vec<(u64, std::ops::Range<usize>)> = split_array(&buf)
                .map_err(|e| Error::BadRow {
                    file: name.to_owned(),
                    line: 1,
                    field: None,
                    message: e.message,
                })?
                .into_iter()
                .map(|(line, el)| (line, span_in(&buf, el)))
                .collect();
            let text = Arc::new(buf);
            for batch in elements.chunks(BATCH_ROWS) {
                let decoded = decode_all(&text, batch.to_vec(), decode, tally);
                let chunk = Chunk {
                    text: Arc::clone(&text),
                    read: std::mem::take(&mut read),
                    decoded,
                };
                if tx.send(chunk).is_err() {
                    return Ok(());
                }
            }
            return Ok(());
        }
        first = false;
        let cut = if eof {
            buf.len()
        } else {
            match memchr::memrchr(b'\n', &buf) {
                Some(i) => i + 1,
                None => continue,
            }
        };
        let mut lines = Vec::new();
        let mut at = 0;
        let ends = memchr::memchr_iter(b'\n', &buf[..cut])
            .chain((cut > 0 && buf[cut - 1] != b'\n').then_some(cut));
        for end in ends {
            let l = &buf[at..end];
            // Lines of white space only are skipped.
            if !l.iter().all(u8::is_ascii_whitespace) {
                lines.push((next_line, at..end));
            }
            at = end + 1;
            next_line += 1;
        }
        // The partial line after the cut starts the next buffer.
        let mut next = spare.try_recv().unwrap_or_else(|_| fresh());
        next.clear();
        next.extend_from_slice(&buf[cut..]);
        buf.truncate(cut);
        let decoded = decode_all(&buf, lines, decode, tally);
        let chunk = Chunk {
            text: Arc::new(std::mem::replace(&mut buf, next)),
            read,
            decoded,
        };
        if tx.send(chunk).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Where `part` (a slice of `whole`) sits in `whole`.
fn span_in(whole: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}

/// Reads records from `reader` (JSON Lines, or one JSON array) and hands each, decoded by
/// `decode`, to `accept` in input order. One thread reads and decodes (in parallel, chunk by
/// chunk) while this one appends the previous chunk, so neither waits for the other.
pub fn read_records(
    name: &str,
    reader: impl Read + Send,
    decode: &Decode<'_>,
    accept: &mut Accept<'_, '_>,
    progress: &dyn Fn(u64),
) -> Result<()> {
    let tally = accept.extra_fields.is_some();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(1);
    let (give_back, spare) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || produce(name, reader, decode, tally, &tx, &spare));
        let accepted = (|| {
            for chunk in &rx {
                accept.counts.bytes += chunk.read;
                progress(chunk.read);
                accept.take_decoded(name, &chunk.text, chunk.decoded)?;
                if let Ok(buf) = Arc::try_unwrap(chunk.text) {
                    // The reader may be gone already; then the buffer is just freed.
                    let _ = give_back.send(buf);
                }
            }
            Ok(())
        })();
        // Stop the reader if this side failed, then hear from it.
        drop(rx);
        let produced = producer
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the reading thread panicked".into())));
        accepted.and(produced)
    })
}

/// Streams JSONL rows (the reference's row format) from `reader` into `emit`, one row-schema
/// batch at a time.
pub fn read_jsonl(
    name: &str,
    reader: impl Read + Send,
    identity: &mut Identity,
    on_bad: &mut OnBadRow<'_>,
    counts: &mut ReadCounts,
    progress: &dyn Fn(u64),
    emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let mut accept = Accept::new(identity, on_bad, counts, emit);
    read_records(name, reader, &decode_line, &mut accept, progress)?;
    accept.finish()
}

/// Gives a batch read from a Parquet file the row schema: missing nullable columns become
/// nulls, castable types are cast, extra columns are dropped.
pub fn conform(batch: &RecordBatch, source: &str) -> Result<RecordBatch> {
    conform_to(batch, source, &row_schema())
}

/// [`conform`] to `schema`, the row schema or a layout of it (its text as views).
pub fn conform_to(
    batch: &RecordBatch,
    source: &str,
    schema: &datafusion::arrow::datatypes::SchemaRef,
) -> Result<RecordBatch> {
    use datafusion::arrow::datatypes::DataType;
    let schema = Arc::clone(schema);
    let mut columns = Vec::with_capacity(schema.fields().len());
    let wrong =
        |field: &datafusion::arrow::datatypes::Field, found: &DataType, why: String| Error::Input {
            stage: "read".into(),
            message: format!(
                "`{source}`: column `{}` is {found}, not {}{why}",
                field.name(),
                field.data_type()
            ),
        };
    for field in schema.fields() {
        match batch.column_by_name(field.name()) {
            Some(c) if c.data_type() == field.data_type() => columns.push(Arc::clone(c)),
            Some(c) => {
                // The same rules as JSONL: a number column takes numbers (not text, not
                // booleans: a string reward is not read as a number, nor a boolean as 1/0);
                // a text column takes text. A value that does not convert is an error, never a
                // null.
                let (to, from) = (field.data_type(), c.data_type());
                if !column_fits(to, from) {
                    return Err(wrong(field, from, String::new()));
                }
                let options = datafusion::arrow::compute::CastOptions {
                    safe: false,
                    ..Default::default()
                };
                columns.push(
                    datafusion::arrow::compute::cast_with_options(c, to, &options)
                        .map_err(|e| wrong(field, from, format!(": {e}")))?,
                );
            }
            None if field.is_nullable() => {
                columns.push(new_null_array(field.data_type(), batch.num_rows()))
            }
            None => {
                return Err(Error::missing_column(
                    format!("read `{source}`"),
                    field.name(),
                    &batch.schema(),
                ));
            }
        }
    }
    // Rewards follow the judge contract, as in JSONL: 0 or 1, or a partial score in [0, 1].
    for name in [col::REWARD, col::GOLD_REWARD] {
        if let Some(i) = schema.index_of(name).ok()
            && let Some(values) = columns[i]
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Float64Array>()
            && let Some(x) = values.iter().flatten().find(|x| !(0.0..=1.0).contains(x))
        {
            return Err(Error::Input {
                stage: "read".into(),
                message: format!(
                    "`{source}`: column `{name}` holds {x}: a reward is 0 or 1, or a partial score in [0, 1]"
                ),
            });
        }
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_writes_everything_and_asks_for_write_outs_as_windows_fill() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("out.jsonl");
        let out = AtomicFile::create(&path).expect("create");
        let mut w =
            Writeback::with_window(out.handle().expect("handle"), &path, 2500).expect("writeback");
        let mut line = [b'x'; 1000];
        line[999] = b'\n';
        for _ in 0..10 {
            w.write_all(&line).expect("write");
        }
        // Lines of 1,000 bytes, a request once 2,500 have gathered: at 3,000, 6,000 and 9,000.
        assert_eq!(w.requests(), 3);
        drop(w);
        out.commit().expect("commit");
        let back = std::fs::read(&path).expect("read");
        assert_eq!(back.len(), 10_000);
        assert!(back.chunks(1000).all(|c| c == line));
    }

    #[test]
    fn derived_ids_follow_the_reference_and_stay_unique() {
        let mut ids = Identity::default();
        let mut a = Record {
            task_id: "task_1ea26256ebae".into(),
            rollout_index: Some(0),
            eval_run: Some(0),
            ..Record::default()
        };
        ids.assign(&mut a).unwrap();
        // sha256("task_1ea26256ebae|0")[:12], the reference's `wai.rows` rollout id.
        assert_eq!(
            a.rollout_id.as_deref(),
            Some(short_hash(&["task_1ea26256ebae", "0"]).as_str())
        );
        let mut b = Record {
            rollout_id: None,
            ..a.clone()
        };
        ids.assign(&mut b).unwrap();
        assert_ne!(a.rollout_id, b.rollout_id);
        let mut c = Record {
            rollout_id: a.rollout_id.clone(),
            ..a.clone()
        };
        assert!(
            ids.assign(&mut c)
                .unwrap_err()
                .contains("duplicate rollout_id")
        );
    }

    #[test]
    fn arrays_split_into_elements_with_their_lines() {
        let text = b" [\n {\"a\": \"],{\\\"\"},\n  {\"b\": [1, {\"c\": 2}]} ,\n 3, \"x\"\n]";
        let got = split_array(text).unwrap();
        let got: Vec<(u64, &str)> = got
            .iter()
            .map(|(l, t)| (*l, std::str::from_utf8(t).unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![
                (2, r#"{"a": "],{\""}"#),
                (3, r#"{"b": [1, {"c": 2}]}"#),
                (4, "3"),
                (4, r#""x""#)
            ]
        );
        assert!(split_array(b"[{}").is_err());
        assert_eq!(split_array(b"[]").unwrap().len(), 0);
    }

    #[test]
    fn bad_lines_fail_or_are_set_aside() {
        let text = b"{\"prompt\": \"a\"}\nnot json\n{\"prompt\": \"b\", \"reward\": \"x\"}\n";
        let mut counts = ReadCounts::default();
        let err = read_jsonl(
            "in.jsonl",
            &text[..],
            &mut Identity::default(),
            &mut OnBadRow::Fail,
            &mut counts,
            &|_| {},
            &mut |_| Ok(()),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`in.jsonl` line 2: not valid JSON"),
            "{err}"
        );
        let mut rejects = Vec::new();
        let mut rows = 0;
        let mut counts = ReadCounts::default();
        read_jsonl(
            "in.jsonl",
            &text[..],
            &mut Identity::default(),
            &mut OnBadRow::Reject(&mut rejects),
            &mut counts,
            &|_| {},
            &mut |b| {
                rows += b.num_rows();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(rows, 1);
        assert_eq!(counts.rejected, 2);
        assert_eq!(
            (rejects[1].line, rejects[1].field.as_deref()),
            (3, Some("reward"))
        );
    }

    #[test]
    fn free_text_has_no_dictionary_and_unpruned_text_no_statistics() {
        use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};

        use crate::pipeline::row::testing::{batch_of, fixture};
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("rows.parquet");
        let batch = batch_of(fixture("example_scored.jsonl"));
        let mut sink = Box::new(ParquetSink::create(&path, row_schema()).expect("sink"));
        sink.write(&batch).expect("written");
        sink.finish().expect("finished");
        let file =
            SerializedFileReader::new(std::fs::File::open(&path).expect("file")).expect("footer");
        let group = file.metadata().row_group(0);
        let (mut found, mut unpruned) = (0, 0);
        for chunk in group.columns() {
            let path = chunk.column_path().string();
            if FREE_TEXT.contains(&path.as_str()) {
                found += 1;
                assert!(chunk.statistics().is_none(), "{path} has statistics");
                assert!(
                    chunk.dictionary_page_offset().is_none(),
                    "{path} has a dictionary"
                );
            } else if UNPRUNED.contains(&path.as_str()) {
                unpruned += 1;
                assert!(chunk.statistics().is_none(), "{path} has statistics");
                assert!(
                    chunk.dictionary_page_offset().is_some(),
                    "{path} lost its dictionary"
                );
            } else if path == "rollout_id" {
                assert!(
                    chunk.statistics().is_some(),
                    "rollout_id lost its statistics"
                );
                assert!(
                    chunk.dictionary_page_offset().is_none(),
                    "rollout_id has a dictionary"
                );
            } else if path == "reward" {
                assert!(chunk.statistics().is_some(), "reward lost its statistics");
            } else if path == "task_id" {
                assert!(chunk.statistics().is_some(), "task_id lost its statistics");
                assert!(
                    chunk.dictionary_page_offset().is_some(),
                    "task_id lost its dictionary"
                );
            }
        }
        // Every name in the lists is a leaf of the row schema.
        assert_eq!(found, FREE_TEXT.len());
        assert_eq!(unpruned, UNPRUNED.len());
        // And the rows read back as written.
        let back = crate::pipeline::session::new_context(Some(1)).expect("session");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let batches = rt
            .block_on(async {
                back.register_parquet("t", path.to_str().expect("path"), Default::default())
                    .await?;
                back.sql("SELECT * FROM t").await?.collect().await
            })
            .expect("read");
        let read = datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches)
            .expect("one batch");
        assert_eq!(conform(&read, "t").expect("conformed"), batch);
    }
}
