//! The write-ahead log and the record of what has been written from it.
//!
//! `_wai/collect/wal/SEQ.jsonl`: segments of one OTLP/JSON document per line (each one trace's
//! part of a request), the line's sequence number its segment's first plus its line index, so a
//! segment is valid `wai ingest --format otel` input. A line is acknowledged only once it and
//! the lines before it are fsynced. `_wai/collect/written.jsonl` records which sequence numbers
//! each row partition holds: an intent (`part`, `seqs`) before the partition is written and
//! `done` after, so a restart replays exactly the lines no partition holds.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::otlp::{self, Piece};
use crate::error::{Error, Result};

/// Where a collector keeps its state, under the lake.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The lake's root.
    pub lake: PathBuf,
}

impl Layout {
    /// `_wai/collect`.
    pub fn home(&self) -> PathBuf {
        self.lake.join("_wai").join("collect")
    }
    /// The segments' folder.
    pub fn wal(&self) -> PathBuf {
        self.home().join("wal")
    }
    /// The record of written partitions.
    pub fn written(&self) -> PathBuf {
        self.home().join("written.jsonl")
    }
    /// Where a partition's input is staged.
    pub fn staging(&self) -> PathBuf {
        self.home().join("staging")
    }
    /// Items and conversations set aside.
    pub fn rejects(&self) -> PathBuf {
        self.home().join("rejects")
    }
    /// Where segments go once written, with `--keep-raw`.
    pub fn raw(&self) -> PathBuf {
        self.lake.join("raw").join("otlp")
    }
    /// The folders, made.
    ///
    /// # Errors
    /// A folder cannot be made.
    pub fn make(&self) -> Result<()> {
        for dir in [self.wal(), self.staging(), self.rejects()] {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        Ok(())
    }
}

/// Inclusive ranges of sequence numbers, sorted and apart.
pub type Ranges = Vec<(u64, u64)>;

/// `seqs` (sorted) as ranges.
pub fn ranges(seqs: &[u64]) -> Ranges {
    let mut out: Ranges = Vec::new();
    for &s in seqs {
        match out.last_mut() {
            Some((_, hi)) if *hi + 1 == s => *hi = s,
            _ => out.push((s, s)),
        }
    }
    out
}

fn covers(ranges: &[(u64, u64)], seq: u64) -> bool {
    let i = ranges.partition_point(|(_, hi)| *hi < seq);
    ranges.get(i).is_some_and(|(lo, _)| *lo <= seq)
}

/// A line of `written.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum Mark {
    Intent { part: String, seqs: Ranges },
    Done { done: String, rows: u64 },
    Next { next_seq: u64 },
}

/// Syncs a folder, so the names made or removed in it survive a power cut.
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// The record of written partitions, appended to.
pub struct Marks {
    path: PathBuf,
    file: File,
}

impl Marks {
    fn open(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
        })
    }

    fn put(&mut self, mark: &Mark) -> Result<()> {
        // Each record starts a line of its own: a record a failed write cut short stays alone
        // on its line (and is not read), never glued to the next.
        let mut line = vec![b'\n'];
        line.extend(serde_json::to_vec(mark).map_err(|e| Error::Internal(e.to_string()))?);
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Records that `part` (relative to the lake) is about to hold `seqs`.
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn intent(&mut self, part: &str, seqs: Ranges) -> Result<()> {
        self.put(&Mark::Intent {
            part: part.to_owned(),
            seqs,
        })
    }

    /// Records that `part` was written with `rows` rows (none: it was not kept).
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn done(&mut self, part: &str, rows: u64) -> Result<()> {
        self.put(&Mark::Done {
            done: part.to_owned(),
            rows,
        })
    }
}

/// A segment's first sequence number, from its name.
fn segment_seq(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_suffix(".jsonl")?.parse().ok()
}

/// A segment's path.
pub fn segment_path(layout: &Layout, first: u64) -> PathBuf {
    layout.wal().join(format!("{first:020}.jsonl"))
}

/// Puts a segment all of whose lines are written away: into `raw/otlp/` with `keep_raw`,
/// else removed.
///
/// # Errors
/// It cannot be moved or removed.
pub fn retire(layout: &Layout, first: u64, keep_raw: bool) -> Result<()> {
    let path = segment_path(layout, first);
    if !path.exists() {
        return Ok(());
    }
    if keep_raw {
        let raw = layout.raw();
        std::fs::create_dir_all(&raw).map_err(|e| Error::io(&raw, e))?;
        let to = raw.join(format!("{first:020}.jsonl"));
        std::fs::rename(&path, &to).map_err(|e| Error::io(&path, e))
    } else {
        std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))
    }
}

/// What a restart finds: the lines no partition holds, and where to go on.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Lines to assemble again: sequence number, segment, piece.
    pub pieces: Vec<(u64, u64, Piece)>,
    /// The segments still holding such lines (each closed: new lines go to a new segment).
    pub segments: Vec<u64>,
    /// The next sequence number.
    pub next_seq: u64,
    /// Lines found written already.
    pub skipped: u64,
    /// A torn last line cut off (it was never acknowledged).
    pub torn: bool,
}

/// Reads the log and the record back, cuts a torn last line, retires segments wholly written,
/// and rewrites the record with only what is still needed. Returns the record, open for
/// appending, and what is to be assembled again.
///
/// # Errors
/// A line inside a segment that is not a piece (the log was damaged, not torn): exit 65, naming
/// the file and line; files that cannot be read or written.
pub fn recover(layout: &Layout, keep_raw: bool) -> Result<(Marks, Replayed)> {
    layout.make()?;
    let written = layout.written();
    let mut intents: Vec<(String, Ranges)> = Vec::new();
    let mut done: BTreeMap<String, u64> = BTreeMap::new();
    let mut next_seq = 0u64;
    if let Ok(file) = File::open(&written) {
        for line in BufReader::new(file).lines() {
            let line = line.map_err(|e| Error::read(&written, e))?;
            // A torn last record is one that was never relied on.
            match serde_json::from_str::<Mark>(&line) {
                Ok(Mark::Intent { part, seqs }) => {
                    if let Some((_, hi)) = seqs.last() {
                        next_seq = next_seq.max(hi + 1);
                    }
                    intents.push((part, seqs));
                }
                Ok(Mark::Done { done: part, rows }) => {
                    done.insert(part, rows);
                }
                Ok(Mark::Next { next_seq: n }) => next_seq = next_seq.max(n),
                Err(_) => {}
            }
        }
    }
    // A partition counts when its `done` was recorded, or its file is there (written, then
    // stopped before `done`).
    let mut covered: Ranges = Vec::new();
    let mut kept_intents = Vec::new();
    for (part, seqs) in intents {
        let rows = match done.get(&part) {
            Some(rows) => Some(*rows),
            None => layout.lake.join(&part).exists().then_some(1),
        };
        if let Some(rows) = rows {
            covered.extend(seqs.iter().copied());
            kept_intents.push((part, seqs, rows));
        }
    }
    covered.sort_unstable();
    let mut segments: Vec<(u64, PathBuf)> = std::fs::read_dir(layout.wal())
        .map_err(|e| Error::read(layout.wal(), e))?
        .flatten()
        .map(|e| e.path())
        .filter_map(|p| segment_seq(&p).map(|s| (s, p)))
        .collect();
    segments.sort();
    let mut out = Replayed::default();
    for (first, path) in &segments {
        let mut text = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut text))
            .map_err(|e| Error::read(path, e))?;
        // A segment's last line cut short was never acknowledged: the crash came mid-write, or
        // a write failed (and the segment was closed).
        if !text.is_empty() && !text.ends_with(b"\n") {
            let keep = text.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Error::io(path, e))?;
            f.set_len(keep as u64)
                .and_then(|()| f.sync_all())
                .map_err(|e| Error::io(path, e))?;
            text.truncate(keep);
            out.torn = true;
        }
        let mut open = 0u64;
        let mut seq = *first;
        let lines = line_count(&text);
        for (n, line) in text.split(|b| *b == b'\n').enumerate() {
            if n as u64 == lines {
                break;
            }
            if covers(&covered, seq) {
                out.skipped += 1;
            } else {
                let piece = otlp::reread(line).map_err(|m| bad(path, n as u64 + 1, &m))?;
                out.pieces.push((seq, *first, piece));
                open += 1;
            }
            seq += 1;
        }
        next_seq = next_seq.max(seq);
        if open == 0 {
            retire(layout, *first, keep_raw)?;
        } else {
            out.segments.push(*first);
        }
    }
    out.next_seq = next_seq;
    rewrite_record(
        layout,
        &kept_intents,
        out.segments.first().copied().unwrap_or(next_seq),
        next_seq,
    )?;
    // Staged inputs of partitions that were not finished are made again.
    if let Ok(dir) = std::fs::read_dir(layout.staging()) {
        for e in dir.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Ok((Marks::open(&written)?, out))
}

/// Rewrites the record with the partitions that cover lines at or past `low`, and `next_seq`.
fn rewrite_record(
    layout: &Layout,
    kept_intents: &[(String, Ranges, u64)],
    low: u64,
    next_seq: u64,
) -> Result<()> {
    let written = layout.written();
    // The record keeps the partitions that cover lines of segments still here.
    let tmp = layout.home().join(".written.jsonl.tmp");
    {
        let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let mut text = Vec::new();
        for (part, seqs, rows) in kept_intents {
            if seqs.last().is_some_and(|(_, hi)| *hi >= low) {
                for mark in [
                    Mark::Intent {
                        part: part.clone(),
                        seqs: seqs.clone(),
                    },
                    Mark::Done {
                        done: part.clone(),
                        rows: *rows,
                    },
                ] {
                    text.extend(serde_json::to_vec(&mark).unwrap_or_default());
                    text.push(b'\n');
                }
            }
        }
        text.extend(serde_json::to_vec(&Mark::Next { next_seq }).unwrap_or_default());
        text.push(b'\n');
        f.write_all(&text)
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::rename(&tmp, &written).map_err(|e| Error::io(&written, e))?;
    sync_dir(&layout.home())?;
    Ok(())
}

fn line_count(text: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', text).count() as u64
}

fn bad(path: &Path, line: u64, message: &str) -> Error {
    Error::BadRow {
        file: path.display().to_string(),
        line,
        field: None,
        message: format!(
            "the collector's log is damaged: {message}; move the file aside to start without it"
        ),
    }
}

/// The live log: appends lines to the open segment, fsyncs, rotates.
pub struct Wal {
    layout: Layout,
    file: Option<(u64, File)>,
    next_seq: u64,
    size: u64,
    max_segment: u64,
    /// Segments closed since the last call to [`Wal::take_closed`].
    closed: BTreeSet<u64>,
}

impl Wal {
    /// A log whose next line is `next_seq`, in a new segment.
    pub fn new(layout: Layout, next_seq: u64, max_segment: u64) -> Self {
        Self {
            layout,
            file: None,
            next_seq,
            size: 0,
            max_segment,
            closed: BTreeSet::new(),
        }
    }

    /// Where the open segment ends, and the next sequence number: what [`Wal::undo`] goes
    /// back to.
    pub fn mark(&self) -> (u64, u64) {
        (self.size, self.next_seq)
    }

    /// Cuts the open segment back to `mark` after a failed batch (its lines were never
    /// acknowledged), then closes it.
    pub fn undo(&mut self, mark: (u64, u64)) {
        if let Some((_, file)) = &self.file {
            let _ = file.set_len(mark.0).and_then(|()| file.sync_data());
        }
        self.next_seq = mark.1;
        self.close();
    }

    /// Appends `pieces`' lines (not yet synced); returns each one's sequence number and segment.
    ///
    /// # Errors
    /// The segment cannot be made or written.
    pub fn append(&mut self, pieces: &[Piece]) -> Result<Vec<(u64, u64)>> {
        if self.file.is_none() {
            let path = segment_path(&self.layout, self.next_seq);
            let f = OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(&path)
                .map_err(|e| Error::io(&path, e))?;
            sync_dir(&self.layout.wal())?;
            self.file = Some((self.next_seq, f));
            self.size = 0;
        }
        let Some((first, file)) = self.file.as_mut() else {
            return Ok(Vec::new());
        };
        let mut text = Vec::with_capacity(pieces.iter().map(|p| p.line.len() + 1).sum());
        let mut at = Vec::with_capacity(pieces.len());
        for p in pieces {
            text.extend_from_slice(&p.line);
            text.push(b'\n');
            at.push((self.next_seq, *first));
            self.next_seq += 1;
        }
        let path = segment_path(&self.layout, *first);
        file.write_all(&text).map_err(|e| Error::io(&path, e))?;
        self.size += text.len() as u64;
        Ok(at)
    }

    /// Makes every appended line durable, then closes the segment if it is full.
    ///
    /// # Errors
    /// The segment cannot be synced.
    pub fn sync(&mut self) -> Result<()> {
        if let Some((first, file)) = &self.file {
            file.sync_data()
                .map_err(|e| Error::io(segment_path(&self.layout, *first), e))?;
            if self.size >= self.max_segment {
                self.closed.insert(*first);
                self.file = None;
            }
        }
        Ok(())
    }

    /// Closes the open segment (at shutdown).
    pub fn close(&mut self) {
        if let Some((first, _)) = self.file.take() {
            self.closed.insert(first);
        }
    }

    /// The segments closed since the last call.
    pub fn take_closed(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.closed).into_iter().collect()
    }

    /// Bytes in the open segment.
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// Appends items set aside to the day's rejects file, synced.
///
/// # Errors
/// It cannot be written.
pub fn reject(layout: &Layout, lines: &[Vec<u8>]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let day = chrono::Utc::now().format("%Y-%m-%d");
    let path = layout.rejects().join(format!("{day}.jsonl"));
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    let mut text = Vec::new();
    for l in lines {
        text.extend_from_slice(l);
        text.push(b'\n');
    }
    f.write_all(&text)
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io(&path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_what_they_hold() {
        let r = ranges(&[1, 2, 3, 7, 9, 10]);
        assert_eq!(r, vec![(1, 3), (7, 7), (9, 10)]);
        for s in [1, 2, 3, 7, 9, 10] {
            assert!(covers(&r, s));
        }
        for s in [0, 4, 6, 8, 11] {
            assert!(!covers(&r, s));
        }
    }
}
