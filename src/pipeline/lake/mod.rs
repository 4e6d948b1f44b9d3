//! The lake: a folder of rows, scored rows, exports and results that `wai run` adds to and never
//! rewrites, with a manifest (`_wai/manifest.json`) naming what each committed run read and wrote.
//!
//! A run's files are written first (each whole or not at all) and published last, when the run's
//! record lands in the manifest (a temporary file renamed over it): a reader that goes by the
//! manifest never sees half a run. A run in progress keeps its state in `_wai/pending/`, one file
//! per pipeline, rewritten (the same way) after each stage, so a killed run resumes at its next
//! stage. One run at a time holds the lake (`_wai/lock`, released by the system if it dies).
//! `docs/lake.md` describes the layout.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::pipeline::io::AtomicFile;

mod compact;

pub use compact::{Compacted, Compaction, Made, Pack, Part, Piece, readable};

/// What `_wai/lake.json` says a lake is.
const FORMAT: &str = "wai-lake";
/// The layout's version: a lake of a later one is refused, not misread.
pub const VERSION: u32 = 1;
/// The manifest's version: 2 once `wai lake compact` has packed files (its `compacted` map),
/// so a wai that would drop the map when it commits a run refuses the lake instead.
pub const MANIFEST_VERSION: u32 = 2;

/// The folders a lake holds, besides `_wai/`.
pub const FOLDERS: &[&str] = &[
    "rows", "scored", "guarded", "selected", "exports", "results", "counts",
];

/// A lake's root, opened.
#[derive(Debug, Clone)]
pub struct Lake {
    root: PathBuf,
}

/// `_wai/lake.json`.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    format: String,
    version: u32,
}

/// `_wai/manifest.json`: every committed run, oldest first.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Manifest {
    /// 1, or [`MANIFEST_VERSION`] once files are compacted.
    pub version: u32,
    /// The runs.
    pub runs: Vec<RunRecord>,
    /// Files `wai lake compact` made, each holding the rows of several files the runs name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compacted: Vec<Compacted>,
}

/// One run of a pipeline, as committed (or, in `_wai/pending/`, as far as it got).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// `YYYYMMDDTHHMMSSZ-` and the pipeline's digest's first 8 hex digits.
    pub run_id: String,
    /// The pipeline file, as named on the command line.
    pub pipeline: String,
    /// The digest of the pipeline's inputs spec and stages (not its gates): runs of one digest
    /// share their history (the files they have seen, the rows their measures read).
    pub pipeline_digest: String,
    /// When it started (RFC 3339, UTC).
    pub started: String,
    /// When it was committed.
    #[serde(default)]
    pub finished: Option<String>,
    /// The input files this run read for the first time.
    pub inputs: Vec<SeenFile>,
    /// Its stages, in order, as far as they got.
    pub stages: Vec<StageRecord>,
    /// The gates, as evaluated when it committed.
    #[serde(default)]
    pub gates: Vec<GateRecord>,
    /// The exit status it ended with.
    #[serde(default)]
    pub exit: i32,
}

/// An input file as a run first read it: a later run that finds it changed refuses to go on
/// (the lake's inputs are added to, never rewritten).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenFile {
    /// The file, as the inputs spec found it.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time, in nanoseconds since the epoch, where the system gives one.
    pub modified_ns: Option<u64>,
}

/// One stage of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageRecord {
    /// Its name in the pipeline (unique there).
    pub name: String,
    /// The command it ran (`grade`, `pass-at`, ...).
    pub kind: String,
    /// The command's exit status.
    pub status: i32,
    /// Wall time.
    pub elapsed_s: f64,
    /// The rows it read, where its report says.
    #[serde(default)]
    pub rows: Option<u64>,
    /// The bytes it read from disk: for a measure or compare, the Parquet column chunks its
    /// queries read (none for columns an earlier stage of the run read and kept); for a data
    /// stage, the size of the files it read.
    #[serde(default)]
    pub bytes_read: u64,
    /// For a measure or compare: its queries' scans of tables of files, and how many of them
    /// took only columns kept from earlier stages of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scans: Option<Scans>,
    /// The files it wrote, relative to the lake's root.
    pub outputs: Vec<String>,
    /// Its results file, relative to the lake's root.
    pub results: String,
    /// The command's first line of text, for the summary.
    #[serde(default)]
    pub headline: String,
    /// Why the stage did not run (no earlier run to compare with, no new rows), if it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Its report (kept while the run is pending, for gates and a resumed run; the committed
    /// record leaves it to the results file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Value>,
}

/// How a stage's queries read their tables, under a run's shared scan.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Scans {
    /// Scans of tables of files.
    pub scans: u64,
    /// Of those, scans served wholly from columns kept from earlier.
    pub from_memory: u64,
}

/// A gate and its verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateRecord {
    /// The gate as written.
    pub gate: String,
    /// The value it read (null when the path named nothing).
    pub value: Value,
    /// Whether it held.
    pub passed: bool,
}

/// The time now, as the lake writes it.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Writes `value` as pretty JSON to `path`, whole or not at all.
fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let file = AtomicFile::create(path)?;
    let text = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::Internal(format!("`{}` does not serialize: {e}", path.display())))?;
    file.file()
        .write_all(&text)
        .map_err(|e| Error::io(path, e))?;
    file.commit()
}

/// Removes the file `path`; whether it was there.
fn remove_if_there(path: &Path) -> Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Reads `path` as JSON: a file that is not is a data error naming it.
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_slice(&text).map_err(|e| Error::Input {
        stage: "lake".into(),
        message: format!("`{}` is not a lake file wai can read: {e}", path.display()),
    })
}

impl Lake {
    /// Makes a lake at `root` (an empty or missing folder), or opens the one there. Returns the
    /// lake and whether it was made now.
    ///
    /// # Errors
    /// `root` holds files but no lake; the folders cannot be made.
    pub fn init(root: &Path) -> Result<(Self, bool)> {
        let lake = Self {
            root: root.to_path_buf(),
        };
        if lake.marker_path().exists() {
            return Self::open(root).map(|l| (l, false));
        }
        // A folder holding only a lake's own folders is a lake whose making was stopped: it is
        // made again. Anything else in it is the user's.
        let skeleton = |e: &std::fs::DirEntry| {
            let name = e.file_name().to_string_lossy().into_owned();
            // `collected/` and `raw/` are the collector's, made only in a lake.
            ["_wai", "collected", "raw"].contains(&name.as_str())
                || FOLDERS.contains(&name.as_str())
        };
        let holds = std::fs::read_dir(root).is_ok_and(|d| d.flatten().any(|e| !skeleton(&e)));
        if holds {
            return Err(Error::Usage(format!(
                "`{}` holds files but is not a lake: name an empty or new folder",
                root.display()
            )));
        }
        for folder in ["_wai", "_wai/pending"].iter().chain(FOLDERS) {
            let path = root.join(folder);
            std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        }
        write_json(
            &lake.manifest_path(),
            &Manifest {
                version: VERSION,
                ..Manifest::default()
            },
        )?;
        // The marker last: a folder without it was not finished and is made again.
        write_json(
            &lake.marker_path(),
            &Marker {
                format: FORMAT.into(),
                version: VERSION,
            },
        )?;
        Ok((lake, true))
    }

    /// Opens the lake at `root`.
    ///
    /// # Errors
    /// No lake there (missing input, with the command that makes one); a lake of a later layout.
    pub fn open(root: &Path) -> Result<Self> {
        let lake = Self {
            root: root.to_path_buf(),
        };
        if !lake.marker_path().exists() {
            return Err(Error::Usage(format!(
                "`{}` is not a lake (no `_wai/lake.json`): make one with `wai lake init {}`",
                root.display(),
                root.display()
            )));
        }
        let marker: Marker = read_json(&lake.marker_path())?;
        if marker.format != FORMAT || marker.version > VERSION {
            return Err(Error::Input {
                stage: "lake".into(),
                message: format!(
                    "`{}` is a lake of layout {} {}; this wai reads {FORMAT} {VERSION}",
                    root.display(),
                    marker.format,
                    marker.version
                ),
            });
        }
        Ok(lake)
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `rel` (a path the manifest names) under the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn marker_path(&self) -> PathBuf {
        self.root.join("_wai").join("lake.json")
    }

    fn manifest_path(&self) -> PathBuf {
        self.root.join("_wai").join("manifest.json")
    }

    fn pending_path(&self, digest: &str) -> PathBuf {
        self.root
            .join("_wai")
            .join("pending")
            .join(format!("{digest}.json"))
    }

    /// Holds the lake for this process: a second `wai run` on it waits for nothing and fails.
    ///
    /// # Errors
    /// Another run holds it.
    pub fn lock(&self) -> Result<std::fs::File> {
        hold(&self.root.join("_wai").join("lock"), || {
            format!(
                "another `wai run` or `wai lake compact` is writing the lake `{}`: wait for it to end",
                self.root.display()
            )
        })
    }

    /// The manifest.
    ///
    /// # Errors
    /// It cannot be read.
    pub fn manifest(&self) -> Result<Manifest> {
        let manifest: Manifest = read_json(&self.manifest_path())?;
        if manifest.version > MANIFEST_VERSION {
            return Err(Error::Input {
                stage: "lake".into(),
                message: format!(
                    "`{}` is of manifest version {}; this wai reads {MANIFEST_VERSION}",
                    self.manifest_path().display(),
                    manifest.version
                ),
            });
        }
        Ok(manifest)
    }

    /// Publishes `run` (its reports left to the results files) and forgets its pending state.
    ///
    /// # Errors
    /// The manifest cannot be read or written.
    pub fn commit(&self, mut run: RunRecord) -> Result<()> {
        let mut manifest = self.manifest()?;
        for stage in &mut run.stages {
            stage.report = None;
        }
        let digest = run.pipeline_digest.clone();
        // A run committed again (killed between its commit and forgetting its pending state)
        // keeps its place: compacted files hold runs' rows in manifest order.
        match manifest.runs.iter().position(|r| r.run_id == run.run_id) {
            Some(at) => manifest.runs[at] = run,
            None => manifest.runs.push(run),
        }
        write_json(&self.manifest_path(), &manifest)?;
        self.drop_pending(&digest)
    }

    /// The pending run of pipeline `digest`, if one was started and not committed.
    ///
    /// # Errors
    /// Its state cannot be read.
    pub fn pending(&self, digest: &str) -> Result<Option<RunRecord>> {
        let path = self.pending_path(digest);
        if !path.exists() {
            return Ok(None);
        }
        read_json(&path).map(Some)
    }

    /// Forgets the pending run of pipeline `digest` (`wai run --restart`): the files it wrote
    /// stay, unpublished, and the next run starts over.
    ///
    /// # Errors
    /// Its state cannot be removed.
    pub fn drop_pending(&self, digest: &str) -> Result<()> {
        remove_if_there(&self.pending_path(digest)).map(drop)
    }

    /// Saves a run's state as far as it got.
    ///
    /// # Errors
    /// It cannot be written.
    pub fn save_pending(&self, run: &RunRecord) -> Result<()> {
        let folder = self.root.join("_wai").join("pending");
        std::fs::create_dir_all(&folder).map_err(|e| Error::io(&folder, e))?;
        write_json(&self.pending_path(&run.pipeline_digest), run)
    }

    /// Every pending run, for `wai lake status`.
    pub fn pending_runs(&self) -> Vec<RunRecord> {
        let folder = self.root.join("_wai").join("pending");
        let Ok(entries) = std::fs::read_dir(&folder) else {
            return Vec::new();
        };
        let mut runs: Vec<RunRecord> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|e| read_json(&e.path()).ok())
            .collect();
        runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        runs
    }
}

/// The folder a results table's files go in: `results/<kind>/`, dashes as underscores.
pub fn results_folder(kind: &str) -> String {
    format!("results/{}", kind.replace('-', "_"))
}

/// One value of a results row, typed.
enum Kind {
    Bool,
    Int,
    Float,
    Text,
}

fn kind_of(value: &Value) -> Option<Kind> {
    match value {
        Value::Null => None,
        Value::Bool(_) => Some(Kind::Bool),
        Value::Number(n) if n.is_i64() => Some(Kind::Int),
        Value::Number(_) => Some(Kind::Float),
        _ => Some(Kind::Text),
    }
}

/// `rows` (flat JSON objects) as one batch: a column per key, in order of first appearance,
/// typed by its values (booleans, integers, floats, else text; integers beside floats are
/// floats; arrays and objects are JSON text). A key with no value in any row is a column of
/// nulls without a type.
///
/// # Errors
/// Arrow refuses the columns (it does not, for these builders).
pub fn results_batch(rows: &[Map<String, Value>]) -> Result<RecordBatch> {
    let mut keys: Vec<&String> = Vec::new();
    for row in rows {
        for key in row.keys() {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for key in keys {
        let values: Vec<&Value> = rows
            .iter()
            .map(|r| r.get(key).unwrap_or(&Value::Null))
            .collect();
        let kinds: Vec<Kind> = values.iter().filter_map(|v| kind_of(v)).collect();
        if kinds.is_empty() {
            // Kept, untyped: a later run's value gives it its type (see [`read_merged`]), and a
            // query naming it reads nulls rather than failing.
            fields.push(Field::new(key.as_str(), DataType::Null, true));
            columns.push(datafusion::arrow::array::new_null_array(
                &DataType::Null,
                rows.len(),
            ));
            continue;
        }
        let all = |f: fn(&Kind) -> bool| kinds.iter().all(f);
        let (data_type, column): (DataType, ArrayRef) = if all(|k| matches!(k, Kind::Bool)) {
            let mut b = BooleanBuilder::new();
            for v in &values {
                b.append_option(v.as_bool());
            }
            (DataType::Boolean, Arc::new(b.finish()))
        } else if all(|k| matches!(k, Kind::Int)) {
            let mut b = Int64Builder::new();
            for v in &values {
                b.append_option(v.as_i64());
            }
            (DataType::Int64, Arc::new(b.finish()))
        } else if all(|k| matches!(k, Kind::Int | Kind::Float)) {
            let mut b = Float64Builder::new();
            for v in &values {
                b.append_option(v.as_f64());
            }
            (DataType::Float64, Arc::new(b.finish()))
        } else {
            let mut b = StringBuilder::new();
            for v in &values {
                match v {
                    Value::Null => b.append_null(),
                    Value::String(s) => b.append_value(s),
                    v => b.append_value(v.to_string()),
                }
            }
            (DataType::Utf8, Arc::new(b.finish()))
        };
        fields.push(Field::new(key.as_str(), data_type, true));
        columns.push(column);
    }
    let options =
        datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.len()));
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &options,
    )?)
}

/// Writes `batch` to `path` as Parquet, whole or not at all.
///
/// # Errors
/// The file cannot be written.
pub fn write_parquet(path: &Path, batch: &RecordBatch) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let file = AtomicFile::create(path)?;
    let mut writer =
        datafusion::parquet::arrow::ArrowWriter::try_new(file.handle()?, batch.schema(), None)?;
    writer.write(batch)?;
    writer.close()?;
    file.commit()
}

/// Reads the Parquet files `paths` as one table: their schemas merged by column name (a column
/// one file lacks is null there; integers beside floats are floats; other mixes are text).
///
/// # Errors
/// A file cannot be read.
pub fn read_merged(paths: &[PathBuf]) -> Result<(Arc<Schema>, Vec<RecordBatch>)> {
    let mut batches = Vec::new();
    for path in paths {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let reader =
            datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                file,
            )?
            .build()?;
        for batch in reader {
            batches.push(batch?);
        }
    }
    let mut fields: Vec<Field> = Vec::new();
    for batch in &batches {
        for field in batch.schema().fields() {
            match fields.iter_mut().find(|f| f.name() == field.name()) {
                None => fields.push(field.as_ref().clone().with_nullable(true)),
                Some(have) if have.data_type() == field.data_type() => {}
                Some(_) if field.data_type() == &DataType::Null => {}
                Some(have) if have.data_type() == &DataType::Null => {
                    *have = field.as_ref().clone().with_nullable(true);
                }
                Some(have) => {
                    let numeric = |t: &DataType| matches!(t, DataType::Int64 | DataType::Float64);
                    let to = if numeric(have.data_type()) && numeric(field.data_type()) {
                        DataType::Float64
                    } else {
                        DataType::Utf8
                    };
                    *have = Field::new(have.name(), to, true);
                }
            }
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let mut columns = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let column = match batch.column_by_name(field.name()) {
                Some(c) => datafusion::arrow::compute::cast(c, field.data_type())?,
                None => {
                    datafusion::arrow::array::new_null_array(field.data_type(), batch.num_rows())
                }
            };
            columns.push(column);
        }
        let options = datafusion::arrow::array::RecordBatchOptions::new()
            .with_row_count(Some(batch.num_rows()));
        out.push(RecordBatch::try_new_with_options(
            Arc::clone(&schema),
            columns,
            &options,
        )?);
    }
    Ok((schema, out))
}

/// Holds the lock file at `path` (made if missing) until the returned file is dropped; the
/// system lets it go if the process dies. Another holder: a usage error saying `busy()`.
///
/// # Errors
/// Another process holds it; the file cannot be made.
pub fn hold(path: &Path, busy: impl FnOnce() -> String) -> Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Usage(busy())),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn results_columns_are_typed_by_their_values() {
        let rows = [
            obj(json!({"a": 1, "b": 0.5, "c": true, "d": "x", "e": null, "f": [1, 2]})),
            obj(json!({"a": 2, "b": 1, "g": "late"})),
        ];
        let batch = results_batch(&rows).expect("batch");
        let schema = batch.schema();
        let types: Vec<(&str, &DataType)> = schema
            .fields()
            .iter()
            .map(|f| (f.name().as_str(), f.data_type()))
            .collect();
        assert_eq!(
            types,
            [
                ("a", &DataType::Int64),
                ("b", &DataType::Float64),
                ("c", &DataType::Boolean),
                ("d", &DataType::Utf8),
                ("e", &DataType::Null),
                ("f", &DataType::Utf8),
                ("g", &DataType::Utf8),
            ]
        );
        assert_eq!(batch.num_rows(), 2);
    }

    #[test]
    fn files_of_other_columns_read_as_one_table() {
        let dir = tempfile::tempdir().expect("tempdir");
        let one = dir.path().join("one.parquet");
        let two = dir.path().join("two.parquet");
        write_parquet(
            &one,
            &results_batch(&[obj(json!({"n": 3, "w": "a"}))]).expect("b"),
        )
        .expect("write");
        write_parquet(
            &two,
            &results_batch(&[obj(json!({"n": 2.5, "z": true, "w": null}))]).expect("b"),
        )
        .expect("write");
        let (schema, batches) = read_merged(&[one, two]).expect("read");
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["n", "w", "z"]);
        assert_eq!(schema.field(0).data_type(), &DataType::Float64);
        // A column of nulls takes the type another file gives it.
        assert_eq!(schema.field(1).data_type(), &DataType::Utf8);
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 2);
        assert!(batches[0].column(2).is_null(0));
    }

    #[test]
    fn a_lake_is_made_once_and_a_folder_of_files_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("lake");
        let (_, made) = Lake::init(&root).expect("init");
        assert!(made);
        let (lake, made) = Lake::init(&root).expect("again");
        assert!(!made);
        assert!(lake.manifest().expect("manifest").runs.is_empty());
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).expect("mkdir");
        std::fs::write(other.join("x.txt"), "x").expect("write");
        assert!(Lake::init(&other).is_err());
        // Stopped after its folders and before its marker: made again.
        let stopped = dir.path().join("stopped");
        std::fs::create_dir_all(stopped.join("_wai/pending")).expect("mkdir");
        std::fs::create_dir_all(stopped.join("scored")).expect("mkdir");
        assert!(Lake::init(&stopped).expect("made again").1);
        // So is one the collector wrote into before its marker was lost.
        let collected = dir.path().join("collected");
        std::fs::create_dir_all(collected.join("collected/date=2026-12-06")).expect("mkdir");
        std::fs::create_dir_all(collected.join("raw/otlp")).expect("mkdir");
        std::fs::create_dir_all(collected.join("_wai/collect")).expect("mkdir");
        assert!(Lake::init(&collected).expect("made again").1);
        assert!(Lake::open(&other).is_err());
    }

    #[test]
    fn a_run_committed_again_keeps_its_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (lake, _) = Lake::init(&dir.path().join("lake")).expect("init");
        let run = |id: &str| RunRecord {
            run_id: id.into(),
            pipeline: "p.toml".into(),
            pipeline_digest: "d".into(),
            started: now(),
            finished: None,
            inputs: Vec::new(),
            stages: Vec::new(),
            gates: Vec::new(),
            exit: 0,
        };
        for id in ["a", "b", "a"] {
            lake.commit(run(id)).expect("commit");
        }
        let ids: Vec<String> = (lake.manifest().expect("manifest").runs.into_iter())
            .map(|r| r.run_id)
            .collect();
        assert_eq!(ids, ["a", "b"]);
    }
}
