//! `wai lake compact`: the small Parquet files runs wrote, packed in run order into files of
//! about a target size; and where a run's rows are read from once they are.
//!
//! A compacted file holds its parts' rows one after another, in the order the manifest lists
//! its parts (run order), so a part is a range of the file's rows. The manifest keeps the map
//! ([`Compacted`]); the runs' records keep naming the files they wrote, and readers ask
//! [`Lake::locate`] where those rows are now. A reader that wants every part of a compacted
//! file reads it whole; one that wants some of them (a compare against one night) gets those
//! rows copied out ([`readable`]).
//!
//! A compaction is atomic: a journal (`_wai/compacting.json`) names the files it will make and
//! replace, the new files are written (each whole or not at all), the manifest naming them is
//! published, the files they replace are removed, and the journal goes. A compaction killed
//! before the manifest lands leaves files no manifest names, and one killed after leaves
//! replaced files still there; no reader that goes by the manifest sees either, and the next
//! compaction removes both by the journal ([`Lake::sweep`]).

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use datafusion::parquet::arrow::arrow_reader::{
    ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use serde::{Deserialize, Serialize};

use super::{Lake, Manifest, now, write_json};
use crate::error::{Error, Result};
use crate::pipeline::io::{ParquetSink, Sink};

/// The folders of rows whose files are compacted (with each results folder).
const ROW_FOLDERS: &[&str] = &["rows", "scored", "guarded", "selected"];

/// A file `wai lake compact` made: the rows of its parts, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compacted {
    /// The file, relative to the lake's root.
    pub path: String,
    /// When it was made (RFC 3339, UTC).
    pub made: String,
    /// The files whose rows it holds, in the order it holds them.
    pub parts: Vec<Part>,
}

/// A file a run wrote, now held by a compacted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// The run that wrote it.
    pub run_id: String,
    /// The file, as the run's record names it (relative to the lake's root).
    pub path: String,
    /// Its rows.
    pub rows: u64,
}

impl Compacted {
    /// Its rows.
    pub fn rows(&self) -> u64 {
        self.parts.iter().map(|p| p.rows).sum()
    }
}

/// Where rows that a run's record names are read from now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// A file of its own: the one asked for.
    File(String),
    /// A whole compacted file, every part of which was asked for, and the rows it holds.
    Compacted {
        /// The compacted file.
        file: String,
        /// Its rows, as the manifest gives them (checked against its footer when read).
        rows: u64,
    },
    /// Some rows of a compacted file: those of the part asked for.
    Rows {
        /// The compacted file.
        file: String,
        /// Its rows that were the part's.
        rows: Range<u64>,
    },
}

impl Lake {
    /// Where the rows of `wanted` are now. Each is a path as [`Lake::path`] gives it (of a file a
    /// run's record names) or any other file, which is its own piece. A compacted file whose
    /// every part is wanted is read whole, in place of its first part (its parts are
    /// consecutive in run order, so the rows keep their order); a part without its fellows is
    /// a range of the compacted file's rows.
    pub fn locate(&self, manifest: &Manifest, wanted: &[String]) -> Vec<Piece> {
        if manifest.compacted.is_empty() {
            return wanted.iter().cloned().map(Piece::File).collect();
        }
        let full = |rel: &str| self.path(rel).display().to_string();
        let mut home: HashMap<String, (usize, Range<u64>)> = HashMap::new();
        for (c, compacted) in manifest.compacted.iter().enumerate() {
            let mut at = 0;
            for part in &compacted.parts {
                home.insert(full(&part.path), (c, at..at + part.rows));
                at += part.rows;
            }
        }
        let asked: HashSet<&str> = wanted.iter().map(String::as_str).collect();
        let whole: Vec<bool> = (manifest.compacted.iter())
            .map(|c| {
                c.parts
                    .iter()
                    .all(|p| asked.contains(full(&p.path).as_str()))
            })
            .collect();
        let mut given = vec![false; manifest.compacted.len()];
        let mut pieces = Vec::with_capacity(wanted.len());
        for path in wanted {
            match home.get(path) {
                None => pieces.push(Piece::File(path.clone())),
                Some((c, _)) if whole[*c] => {
                    if !std::mem::replace(&mut given[*c], true) {
                        pieces.push(Piece::Compacted {
                            file: full(&manifest.compacted[*c].path),
                            rows: manifest.compacted[*c].rows(),
                        });
                    }
                }
                Some((c, rows)) => pieces.push(Piece::Rows {
                    file: full(&manifest.compacted[*c].path),
                    rows: rows.clone(),
                }),
            }
        }
        pieces
    }
}

/// Files holding `pieces`' rows, in order: a whole file as it is (a compacted one once its
/// footer gives the rows the manifest does), rows of a compacted file copied out to a Parquet
/// file in `scratch` (once: the same rows asked for again are the same file). `scratch` is
/// needed only when a piece is some rows of a file.
///
/// # Errors
/// A compacted file does not hold its rows or cannot be read, or the copy cannot be written.
pub fn readable(pieces: Vec<Piece>, scratch: Option<&Path>) -> Result<Vec<String>> {
    let mut files = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match piece {
            Piece::File(path) => files.push(path),
            Piece::Compacted { file, rows } => {
                let (_, held) = footer(Path::new(&file))?;
                if held != rows {
                    return Err(changed(Path::new(&file), held, 0..rows));
                }
                files.push(file);
            }
            Piece::Rows { file, rows } => {
                let Some(scratch) = scratch else {
                    return Err(Error::Internal(
                        "rows of a compacted file to copy out and no folder for them".into(),
                    ));
                };
                let name = crate::stages::simulate::hash::sha256_hex(&format!(
                    "{file}\n{}\n{}",
                    rows.start, rows.end
                ));
                let to = scratch.join(format!("rows-{}.parquet", &name[..16]));
                if !to.exists() {
                    copy_rows(Path::new(&file), rows, &to)?;
                }
                files.push(to.display().to_string());
            }
        }
    }
    Ok(files)
}

/// Rows `rows` of the Parquet file `from`, written to `to`.
fn copy_rows(from: &Path, rows: Range<u64>, to: &Path) -> Result<()> {
    let file = std::fs::File::open(from).map_err(|e| Error::io(from, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)?;
    let schema = std::sync::Arc::clone(builder.schema());
    let count = |n: u64| {
        usize::try_from(n).map_err(|_| Error::Internal(format!("{n} rows do not fit a usize")))
    };
    let selection = RowSelection::from(vec![
        RowSelector::skip(count(rows.start)?),
        RowSelector::select(count(rows.end - rows.start)?),
    ]);
    let reader = builder.with_row_selection(selection).build()?;
    let mut sink = ParquetSink::create(to, schema)?;
    let mut written = 0;
    for batch in reader {
        let batch = batch?;
        written += batch.num_rows() as u64;
        sink.write(&batch)?;
    }
    if written != rows.end - rows.start {
        return Err(changed(from, written, rows));
    }
    Box::new(sink).finish()
}

/// The error of a compacted file that gave `held` of the rows `rows` the manifest places in it.
fn changed(file: &Path, held: u64, rows: Range<u64>) -> Error {
    Error::Input {
        stage: "lake".into(),
        message: format!(
            "`{}` gave {held} of the rows {}..{} the lake's manifest places in it: the compacted file was changed or cut short",
            file.display(),
            rows.start,
            rows.end
        ),
    }
}

/// One file to make: consecutive units of one folder's files, packed.
#[derive(Debug, Clone)]
pub struct Pack {
    /// The file it makes, relative to the lake's root.
    pub path: String,
    /// The files it reads, in order (relative): runs' own files and earlier compacted files.
    pub reads: Vec<String>,
    /// Which of `reads` are compacted files (their records are replaced).
    replaces: Vec<usize>,
    /// The runs' files whose rows it holds.
    pub parts: Vec<Part>,
    /// The bytes it reads.
    pub bytes: u64,
    /// Whether it packs results files (their columns merged).
    results: bool,
}

impl Pack {
    /// Its rows.
    pub fn rows(&self) -> u64 {
        self.parts.iter().map(|p| p.rows).sum()
    }
}

/// A physical file in a folder's run-ordered sequence: a run's own file, or a compacted one.
struct Unit {
    file: String,
    compacted: Option<usize>,
    parts: Vec<Part>,
    bytes: u64,
    schema: SchemaRef,
}

/// What a compaction did (or, dry, would do).
#[derive(Debug, Clone, Serialize)]
pub struct Compaction {
    /// The files made (or to make).
    pub made: Vec<Made>,
    /// The files they replace, now removed.
    pub replaced: usize,
    /// Leftovers of a compaction that was stopped, removed.
    pub swept: usize,
}

/// A file a compaction made.
#[derive(Debug, Clone, Serialize)]
pub struct Made {
    /// Relative to the lake's root.
    pub path: String,
    /// The files it replaces.
    pub files: usize,
    /// The runs' files whose rows it holds.
    pub parts: usize,
    /// Its rows.
    pub rows: u64,
    /// The bytes of the files it replaces.
    pub bytes_before: u64,
    /// Its own bytes (0 on a dry run).
    pub bytes: u64,
}

/// The folder a file a run's record names belongs to, for compaction: a rows folder's Parquet
/// file by its folder, pipeline and stage; a results file by its folder.
fn group_of(rel: &str, digest: &str, stage: &str, results: bool) -> Option<String> {
    if results {
        let folder = Path::new(rel).parent()?.to_str()?;
        return Some(format!("{folder}\n"));
    }
    let folder = rel.split('/').next()?;
    (ROW_FOLDERS.contains(&folder) && Path::new(rel).extension().is_some_and(|e| e == "parquet"))
        .then(|| format!("{folder}\n{digest}\n{stage}"))
}

/// A Parquet file's Arrow schema and rows, from its footer.
fn footer(path: &Path) -> Result<(SchemaRef, u64)> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| crate::pipeline::io::written_to(path, e.into()))?;
    let rows = builder.metadata().file_metadata().num_rows();
    Ok((
        std::sync::Arc::clone(builder.schema()),
        u64::try_from(rows).unwrap_or(0),
    ))
}

impl Lake {
    /// The files a compaction to `target` bytes would make: in each folder (a results folder;
    /// a rows folder's files of one pipeline's stage), runs of consecutive files under half
    /// the target and of the same columns, packed in run order up to the target; a run of one
    /// file is left as it is.
    ///
    /// # Errors
    /// A file the manifest names cannot be read.
    pub fn plan_compaction(&self, manifest: &Manifest, target: u64) -> Result<Vec<Pack>> {
        // Each folder's files, in run order, each with the compacted file holding it.
        let mut home: HashMap<&str, usize> = HashMap::new();
        for (c, compacted) in manifest.compacted.iter().enumerate() {
            for part in &compacted.parts {
                home.insert(part.path.as_str(), c);
            }
        }
        let mut folders: Vec<(String, Vec<(&str, &str)>)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for run in &manifest.runs {
            for stage in &run.stages {
                let files = (stage.outputs.iter().map(|o| (o, false)))
                    .chain(std::iter::once((&stage.results, true)));
                for (rel, results) in files {
                    let Some(group) = group_of(rel, &run.pipeline_digest, &stage.name, results)
                    else {
                        continue;
                    };
                    let at = *index.entry(group.clone()).or_insert_with(|| {
                        folders.push((group, Vec::new()));
                        folders.len() - 1
                    });
                    folders[at].1.push((run.run_id.as_str(), rel.as_str()));
                }
            }
        }
        let mut packs = Vec::new();
        for (group, files) in &folders {
            let units = self.units(manifest, &home, files)?;
            packs.extend(pack(group, units, target));
        }
        Ok(packs)
    }

    /// A folder's files as the files that hold them now, in order.
    fn units(
        &self,
        manifest: &Manifest,
        home: &HashMap<&str, usize>,
        files: &[(&str, &str)],
    ) -> Result<Vec<Option<Unit>>> {
        let mut units: Vec<Option<Unit>> = Vec::new();
        let mut seen: HashSet<usize> = HashSet::new();
        for &(run_id, rel) in files {
            if let Some(&c) = home.get(rel) {
                if matches!(units.last(), Some(Some(u)) if u.compacted == Some(c)) {
                    continue;
                }
                if !seen.insert(c) {
                    // Its parts are no longer consecutive (a run between them): it is not read
                    // twice, and nothing is packed across the gap.
                    units.push(None);
                    continue;
                }
                let compacted = &manifest.compacted[c];
                let path = self.path(&compacted.path);
                let (schema, _) = footer(&path)?;
                let bytes = std::fs::metadata(&path)
                    .map_err(|e| Error::io(&path, e))?
                    .len();
                units.push(Some(Unit {
                    file: compacted.path.clone(),
                    compacted: Some(c),
                    parts: compacted.parts.clone(),
                    bytes,
                    schema,
                }));
                continue;
            }
            let path = self.path(rel);
            // A file that is not there (removed by hand) breaks the sequence.
            let meta = std::fs::metadata(&path)
                .ok()
                .filter(std::fs::Metadata::is_file);
            let Some(meta) = meta else {
                units.push(None);
                continue;
            };
            let (schema, rows) = footer(&path)?;
            units.push(Some(Unit {
                file: rel.to_owned(),
                compacted: None,
                parts: vec![Part {
                    run_id: run_id.to_owned(),
                    path: rel.to_owned(),
                    rows,
                }],
                bytes: meta.len(),
                schema,
            }));
        }
        Ok(units)
    }

    /// Compacts the lake to files of about `target` bytes (or, `dry`, says what it would do),
    /// holding the lake as a run does.
    ///
    /// # Errors
    /// A run holds the lake; a file cannot be read or written.
    pub fn compact(&self, target: u64, dry: bool) -> Result<Compaction> {
        let _lock = if dry { None } else { Some(self.lock()?) };
        let mut manifest = self.manifest()?;
        let swept = if dry { 0 } else { self.sweep(&manifest)? };
        let packs = self.plan_compaction(&manifest, target)?;
        if !dry && !packs.is_empty() {
            // What this compaction makes and replaces, before anything is made: a stopped one
            // is undone (or finished) from it, and nothing else under `compacted=` is touched.
            write_json(
                &self.journal_path(),
                &Journal {
                    made: packs.iter().map(|p| p.path.clone()).collect(),
                    replaced: packs.iter().flat_map(|p| p.reads.clone()).collect(),
                },
            )?;
        }
        let mut made = Vec::with_capacity(packs.len());
        for pack in &packs {
            let bytes = if dry { 0 } else { self.write_pack(pack)? };
            made.push(Made {
                path: pack.path.clone(),
                files: pack.reads.len(),
                parts: pack.parts.len(),
                rows: pack.rows(),
                bytes_before: pack.bytes,
                bytes,
            });
        }
        if dry || packs.is_empty() {
            return Ok(Compaction {
                made,
                replaced: 0,
                swept,
            });
        }
        // Publish: the replaced compacted files' records go, the new ones come.
        let gone: HashSet<usize> = packs.iter().flat_map(|p| p.replaces.clone()).collect();
        let mut kept: Vec<Compacted> = (manifest.compacted.iter().enumerate())
            .filter(|(c, _)| !gone.contains(c))
            .map(|(_, c)| c.clone())
            .collect();
        let stamp = now();
        kept.extend(packs.iter().map(|p| Compacted {
            path: p.path.clone(),
            made: stamp.clone(),
            parts: p.parts.clone(),
        }));
        manifest.compacted = kept;
        manifest.version = manifest.version.max(super::MANIFEST_VERSION);
        write_json(&self.manifest_path(), &manifest)?;
        // Then the files they replace (never one just made).
        let mut replaced = 0;
        for rel in packs.iter().flat_map(|p| &p.reads) {
            if !packs.iter().any(|p| &p.path == rel) {
                replaced += usize::from(self.remove(rel)?);
            }
        }
        self.forget_journal()?;
        Ok(Compaction {
            made,
            replaced,
            swept,
        })
    }

    /// Writes `pack`'s file; returns its size.
    fn write_pack(&self, pack: &Pack) -> Result<u64> {
        let to = self.path(&pack.path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        if pack.results {
            // Results files: their columns merged, as `wai sql --lake` reads them.
            let paths: Vec<PathBuf> = pack.reads.iter().map(|r| self.path(r)).collect();
            let (schema, batches) = super::read_merged(&paths)?;
            let batch = datafusion::arrow::compute::concat_batches(&schema, &batches)?;
            if batch.num_rows() as u64 != pack.rows() {
                return Err(self.short(pack, batch.num_rows() as u64));
            }
            super::write_parquet(&to, &batch)?;
            return Ok(std::fs::metadata(&to).map_err(|e| Error::io(&to, e))?.len());
        }
        let mut sink: Option<ParquetSink> = None;
        let mut written = 0;
        for rel in &pack.reads {
            let path = self.path(rel);
            let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| crate::pipeline::io::written_to(&path, e.into()))?;
            if sink.is_none() {
                sink = Some(ParquetSink::create(
                    &to,
                    std::sync::Arc::clone(builder.schema()),
                )?);
            }
            let Some(out) = sink.as_mut() else {
                return Err(Error::Internal("no compacted file to write".into()));
            };
            for batch in builder.build()? {
                let batch = batch?;
                written += batch.num_rows() as u64;
                out.write(&batch)?;
            }
        }
        let Some(sink) = sink else {
            return Err(Error::Internal("a pack of no files".into()));
        };
        if written != pack.rows() {
            return Err(self.short(pack, written));
        }
        Box::new(sink).finish()?;
        Ok(std::fs::metadata(&to).map_err(|e| Error::io(&to, e))?.len())
    }

    /// The error of a pack whose files held `written` rows, not the manifest's count.
    fn short(&self, pack: &Pack, written: u64) -> Error {
        Error::Input {
            stage: "lake".into(),
            message: format!(
                "the files packed into `{}` hold {written} rows, not the {} their footers and the manifest say: nothing was changed",
                self.path(&pack.path).display(),
                pack.rows()
            ),
        }
    }

    /// Removes the rows runs copied out of compacted files (`_wai/extracted/`): called with the
    /// lake held, when no run is reading them.
    ///
    /// # Errors
    /// They cannot be removed.
    pub fn clear_extracted(&self) -> Result<()> {
        let path = self.path("_wai/extracted");
        match std::fs::remove_dir_all(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// Removes the file `rel`, and its folder if that is left empty; whether it was there.
    fn remove(&self, rel: &str) -> Result<bool> {
        let path = self.path(rel);
        let removed = super::remove_if_there(&path)?;
        if let (true, Some(parent)) = (removed, path.parent()) {
            // Only an empty folder goes; one holding anything stays.
            let _ = std::fs::remove_dir(parent);
        }
        Ok(removed)
    }

    /// Where a compaction under way says what it makes and replaces.
    fn journal_path(&self) -> PathBuf {
        self.root.join("_wai").join("compacting.json")
    }

    /// Forgets the journal of a compaction that ended (or was undone).
    fn forget_journal(&self) -> Result<()> {
        super::remove_if_there(&self.journal_path()).map(drop)
    }

    /// Removes what a stopped compaction left (returns how many files went):
    /// - by its journal: stopped before its manifest landed, the files it made (and their
    ///   temporary files); after, the files it replaced;
    /// - runs' files a published compacted file holds, when that file is there with all its
    ///   rows.
    ///
    /// A compacted file neither the manifest nor a journal names (a manifest put back from a
    /// copy older than a compaction) may hold the only copy of runs' rows: it is left alone.
    ///
    /// # Errors
    /// The journal cannot be read, or a file cannot be removed.
    pub fn sweep(&self, manifest: &Manifest) -> Result<usize> {
        self.clear_extracted()?;
        let named: HashSet<&str> = manifest.compacted.iter().map(|c| c.path.as_str()).collect();
        let mut swept = 0;
        if self.journal_path().exists() {
            let journal: Journal = super::read_json(&self.journal_path())?;
            let published = journal.made.iter().all(|m| named.contains(m.as_str()));
            if published {
                for rel in journal
                    .replaced
                    .iter()
                    .filter(|r| !named.contains(r.as_str()))
                {
                    swept += usize::from(self.remove(rel)?);
                }
            } else {
                for rel in journal.made.iter().filter(|m| !named.contains(m.as_str())) {
                    swept += self.remove_with_temporaries(rel)?;
                }
            }
            self.forget_journal()?;
        }
        for compacted in &manifest.compacted {
            let path = self.path(&compacted.path);
            let whole = path.exists() && footer(&path).is_ok_and(|(_, n)| n == compacted.rows());
            if !whole {
                tracing::warn!(file = %path.display(), "a compacted file is missing or short: the files it replaced are kept");
                continue;
            }
            for part in &compacted.parts {
                swept += usize::from(self.remove(&part.path)?);
            }
        }
        Ok(swept)
    }

    /// Removes `rel`, the temporary files of its writing, and its `compacted=` folder if that
    /// is left empty; how many files went.
    fn remove_with_temporaries(&self, rel: &str) -> Result<usize> {
        let path = self.path(rel);
        let mut removed = usize::from(self.remove(rel)?);
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok(removed);
        };
        let prefix = format!(".{}.", name.to_string_lossy());
        for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if file.starts_with(&prefix) && crate::pipeline::io::is_temporary(&file) {
                std::fs::remove_file(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
                removed += 1;
            }
        }
        if parent
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("compacted="))
        {
            let _ = std::fs::remove_dir(parent);
        }
        Ok(removed)
    }
}

/// `_wai/compacting.json`: what a compaction under way makes and replaces (relative paths).
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    made: Vec<String>,
    replaced: Vec<String>,
}

/// Packs a folder's units: consecutive small units whose columns go together, up to
/// `target`.
fn pack(group: &str, units: Vec<Option<Unit>>, target: u64) -> Vec<Pack> {
    let small = target / 2;
    let results = is_results(group);
    let mut packs = Vec::new();
    let mut open: Vec<Unit> = Vec::new();
    let mut columns: Vec<Field> = Vec::new();
    // What is open is closed, and the columns it gathered go with it.
    let close = |open: &mut Vec<Unit>, columns: &mut Vec<Field>, packs: &mut Vec<Pack>| {
        if open.len() >= 2 {
            packs.push(pack_of(group, open));
        }
        open.clear();
        columns.clear();
    };
    for unit in units {
        let Some(unit) = unit.filter(|u| u.bytes < small) else {
            close(&mut open, &mut columns, &mut packs);
            continue;
        };
        let bytes: u64 = open.iter().map(|u| u.bytes).sum();
        let fits = open.first().is_none_or(|first| {
            bytes + unit.bytes <= target
                && if results {
                    merges(&mut columns.clone(), &unit.schema)
                } else {
                    first.schema.fields() == unit.schema.fields()
                }
        });
        if !fits {
            close(&mut open, &mut columns, &mut packs);
        }
        // Into nothing open, any file's columns go.
        merges(&mut columns, &unit.schema);
        open.push(unit);
    }
    close(&mut open, &mut columns, &mut packs);
    packs
}

/// Whether `group` is a results folder (whose files' columns are merged, as `wai sql --lake`
/// reads them) rather than a rows folder (whose files must have the same columns).
fn is_results(group: &str) -> bool {
    group.ends_with('\n')
}

/// Adds `schema`'s columns to `columns` when they go together as results files do without
/// changing a value: each column of one type in both (or all nulls in one). Returns whether
/// they did; `columns` is unchanged when they did not.
fn merges(columns: &mut Vec<Field>, schema: &SchemaRef) -> bool {
    let mut merged = columns.clone();
    for field in schema.fields() {
        match merged.iter_mut().find(|f| f.name() == field.name()) {
            None => merged.push(field.as_ref().clone().with_nullable(true)),
            Some(have) if have.data_type() == field.data_type() => {}
            Some(_) if field.data_type() == &DataType::Null => {}
            Some(have) if have.data_type() == &DataType::Null => {
                *have = field.as_ref().clone().with_nullable(true);
            }
            Some(_) => return false,
        }
    }
    *columns = merged;
    true
}

/// The pack of `units` (two or more) of folder `group`.
fn pack_of(group: &str, units: &[Unit]) -> Pack {
    let parts: Vec<Part> = units.iter().flat_map(|u| u.parts.clone()).collect();
    let first = parts.first().map_or("", |p| p.run_id.as_str()).to_owned();
    let digest = crate::stages::simulate::hash::sha256_hex(
        &(parts.iter().map(|p| p.path.as_str()).collect::<Vec<_>>()).join("\n"),
    );
    let tag = format!("compacted={first}-{}", &digest[..16]);
    let mut fields = group.split('\n');
    let folder = fields.next().unwrap_or_default();
    let path = match (fields.next(), fields.next()) {
        // A rows folder: one pipeline's stage.
        (Some(_), Some(stage)) => format!("{folder}/{tag}/{stage}.parquet"),
        // A results folder.
        _ => format!("{folder}/{tag}.parquet"),
    };
    Pack {
        path,
        reads: units.iter().map(|u| u.file.clone()).collect(),
        replaces: units.iter().filter_map(|u| u.compacted).collect(),
        bytes: units.iter().map(|u| u.bytes).sum(),
        parts,
        results: is_results(group),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        let part = |run: &str, path: &str, rows| Part {
            run_id: run.into(),
            path: path.into(),
            rows,
        };
        Manifest {
            compacted: vec![Compacted {
                path: "scored/compacted=r1-x/grade.parquet".into(),
                made: String::new(),
                parts: vec![
                    part("r1", "scored/run=r1/grade.parquet", 10),
                    part("r2", "scored/run=r2/grade.parquet", 20),
                    part("r3", "scored/run=r3/grade.parquet", 30),
                ],
            }],
            ..Manifest::default()
        }
    }

    #[test]
    fn a_part_is_read_from_its_compacted_file_whole_or_as_its_rows() {
        let lake = Lake {
            root: PathBuf::from("/lake"),
        };
        let m = manifest();
        let at = |rel: &str| lake.path(rel).display().to_string();
        let packed = at("scored/compacted=r1-x/grade.parquet");
        let run = |n: u32| at(&format!("scored/run=r{n}/grade.parquet"));
        // Every part: the compacted file once, where the first part was.
        assert_eq!(
            lake.locate(&m, &["/in/a.jsonl".into(), run(1), run(2), run(3), run(4)]),
            [
                Piece::File("/in/a.jsonl".into()),
                Piece::Compacted {
                    file: packed.clone(),
                    rows: 60
                },
                Piece::File(run(4)),
            ]
        );
        // Some parts: their rows.
        assert_eq!(
            lake.locate(&m, &[run(2)]),
            [Piece::Rows {
                file: packed.clone(),
                rows: 10..30
            }]
        );
        assert_eq!(
            lake.locate(&m, &[run(1), run(3), run(4)]),
            [
                Piece::Rows {
                    file: packed.clone(),
                    rows: 0..10
                },
                Piece::Rows {
                    file: packed,
                    rows: 30..60
                },
                Piece::File(run(4)),
            ]
        );
        // No compaction: every file is its own.
        assert_eq!(
            lake.locate(&Manifest::default(), &[run(1)]),
            [Piece::File(run(1))]
        );
    }

    #[test]
    fn results_columns_merge_only_where_no_value_changes() {
        let schema = |fields: Vec<(&str, DataType)>| -> SchemaRef {
            std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(
                (fields.into_iter())
                    .map(|(n, t)| Field::new(n, t, true))
                    .collect::<Vec<_>>(),
            ))
        };
        let mut columns = Vec::new();
        assert!(merges(
            &mut columns,
            &schema(vec![("a", DataType::Int64), ("b", DataType::Null)])
        ));
        // A column of nulls takes the other's type; a new column is added.
        assert!(merges(
            &mut columns,
            &schema(vec![("b", DataType::Utf8), ("c", DataType::Float64)])
        ));
        assert_eq!(
            (columns.iter())
                .map(|f| (f.name().as_str(), f.data_type().clone()))
                .collect::<Vec<_>>(),
            [
                ("a", DataType::Int64),
                ("b", DataType::Utf8),
                ("c", DataType::Float64)
            ]
        );
        // An integer beside a float would be read as a float: refused, and nothing added.
        let before = columns.clone();
        assert!(!merges(
            &mut columns,
            &schema(vec![("d", DataType::Utf8), ("a", DataType::Float64)])
        ));
        assert_eq!(columns, before);
    }

    #[test]
    fn a_file_name_says_its_folder_and_first_run() {
        let p = |path: &str| Part {
            run_id: path.split('/').nth(1).unwrap_or_default().into(),
            path: path.into(),
            rows: 1,
        };
        let unit = |path: &str| Unit {
            file: path.into(),
            compacted: None,
            parts: vec![p(path)],
            bytes: 5,
            schema: std::sync::Arc::new(datafusion::arrow::datatypes::Schema::empty()),
        };
        let rows = pack_of(
            "scored\nDIGEST\ngrade",
            &[
                unit("scored/r1/grade.parquet"),
                unit("scored/r2/grade.parquet"),
            ],
        );
        assert!(
            rows.path.starts_with("scored/compacted=r1-") && rows.path.ends_with("/grade.parquet"),
            "{}",
            rows.path
        );
        assert!(!rows.results);
        let results = pack_of(
            "results/pass_at\n",
            &[unit("results/r1/x.parquet"), unit("results/r2/x.parquet")],
        );
        assert!(
            results.path.starts_with("results/pass_at/compacted=r1-")
                && results.path.ends_with(".parquet"),
            "{}",
            results.path
        );
        assert!(results.results);
        assert_eq!(results.bytes, 10);
    }

    #[test]
    fn a_break_in_a_results_folder_forgets_the_columns_before_it() {
        let unit = |name: &str, kind: DataType, bytes: u64| {
            Some(Unit {
                file: name.into(),
                compacted: None,
                parts: vec![Part {
                    run_id: name.into(),
                    path: name.into(),
                    rows: 1,
                }],
                bytes,
                schema: std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
                    Field::new("a", kind, true),
                ])),
            })
        };
        let target = 100;
        let reads = |units| -> Vec<Vec<String>> {
            pack("results/x\n", units, target)
                .into_iter()
                .map(|p| p.reads)
                .collect()
        };
        // An integer column, a file too large to pack, then a float one and an integer one:
        // those two would change a value packed together.
        let units = vec![
            unit("u0", DataType::Int64, 1),
            unit("big", DataType::Int64, 90),
            unit("u1", DataType::Float64, 1),
            unit("u2", DataType::Int64, 1),
        ];
        assert!(reads(units).is_empty());
        // A missing file breaks the run too; files of one type on either side pack.
        let units = vec![
            unit("u0", DataType::Int64, 1),
            unit("u1", DataType::Int64, 1),
            None,
            unit("u2", DataType::Float64, 1),
            unit("u3", DataType::Float64, 1),
            unit("u4", DataType::Null, 1),
        ];
        assert_eq!(reads(units), [vec!["u0", "u1"], vec!["u2", "u3", "u4"]]);
        // Up to the target, not past it.
        let units = (0..5)
            .map(|i| unit(&format!("u{i}"), DataType::Int64, 30))
            .collect();
        assert_eq!(reads(units), [vec!["u0", "u1", "u2"], vec!["u3", "u4"]]);
    }
}
