//! A run's checkpoint: a JSONL file of every row landed so far, locked while the run holds it,
//! appended to one wave at a time, and read back (a torn last line cut off) to resume.

use std::io::Write;
use std::path::{Path, PathBuf};

use datafusion::arrow::array::RecordBatch;

use crate::error::{Error, Result};
use crate::pipeline::io::{decode_line, render_jsonl};
use crate::pipeline::row::Record;

/// An open, locked checkpoint.
pub struct Checkpoint {
    file: std::fs::File,
    path: PathBuf,
}

impl Checkpoint {
    /// Opens `path` for appending and takes its advisory lock, or says which run holds it.
    ///
    /// # Errors
    /// Another process holds the lock (a usage error: two runs on one checkpoint), or the file
    /// cannot be opened.
    pub fn lock(path: &Path) -> Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Self {
                file,
                path: path.to_owned(),
            }),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::Usage(format!(
                "the checkpoint `{}` is in use by another run; wait for it to end, or give this run its own --checkpoint",
                path.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rows already in it, and whether its last line was torn (and cut off).
    ///
    /// # Errors
    /// A whole line does not decode as a row, or the file cannot be read or mended.
    pub fn read(&self) -> Result<(Vec<Record>, bool)> {
        read_checkpoint(&self.path)
    }

    /// Appends the rows of `batch` that `fresh` marks new, in one write: a kill leaves at most
    /// one torn line, cut on resume.
    ///
    /// # Errors
    /// The rows do not render, or the write failed.
    pub fn append(&mut self, batch: &RecordBatch, fresh: &[bool]) -> Result<()> {
        if !fresh.iter().any(|f| *f) {
            return Ok(());
        }
        let lines = render_jsonl(batch)?;
        let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for (line, new) in lines.iter().zip(fresh) {
            if *new {
                buf.extend_from_slice(line.as_bytes());
                buf.push(b'\n');
            }
        }
        self.file
            .write_all(&buf)
            .map_err(|e| Error::io(self.path.as_path(), e))
    }
}

/// The rows already in a checkpoint; a torn last line (the run was killed while writing it) is
/// cut off so the file can be appended to.
fn read_checkpoint(path: &Path) -> Result<(Vec<Record>, bool)> {
    if !path.exists() {
        return Ok((Vec::new(), false));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let (records, good_end, torn) = decode(&bytes, path)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    if torn {
        file.set_len(good_end as u64)
            .map_err(|e| Error::io(path, e))?;
    } else if good_end > 0 && bytes.last() != Some(&b'\n') {
        drop(file);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        f.write_all(b"\n").map_err(|e| Error::io(path, e))?;
    }
    Ok((records, torn))
}

/// The rows of a checkpoint's bytes, where its good part ends, and whether the last line was
/// torn (does not decode and has no newline).
fn decode(bytes: &[u8], path: &Path) -> Result<(Vec<Record>, usize, bool)> {
    let mut records = Vec::new();
    let mut good_end = 0usize;
    let mut start = 0usize;
    let mut line_no = 0u64;
    while start < bytes.len() {
        line_no += 1;
        let end = memchr::memchr(b'\n', &bytes[start..]).map(|i| start + i);
        let line = &bytes[start..end.unwrap_or(bytes.len())];
        if !line.iter().all(u8::is_ascii_whitespace) {
            match decode_line(line) {
                Ok(r) => records.push(r),
                Err(_) if end.is_none() => return Ok((records, good_end, true)),
                Err(e) => {
                    return Err(Error::BadRow {
                        file: path.display().to_string(),
                        line: line_no,
                        field: e.field,
                        message: e.message,
                    });
                }
            }
        }
        if let Some(e) = end {
            start = e + 1;
            good_end = start;
        } else {
            // A whole last line without its newline: keep it and add the newline.
            good_end = bytes.len();
            start = bytes.len();
        }
    }
    Ok((records, good_end, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_cut_and_a_whole_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck.jsonl");
        let row = r#"{"task_id":"t1","rollout_id":"t1/0/0"}"#;
        std::fs::write(&path, format!("{row}\n{{\"task_id\":\"t")).unwrap();
        let ck = Checkpoint::lock(&path).unwrap();
        let (rows, torn) = ck.read().unwrap();
        assert_eq!((rows.len(), torn), (1, true));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{row}\n"));
        std::fs::write(&path, row).unwrap();
        let (rows, torn) = ck.read().unwrap();
        assert_eq!((rows.len(), torn), (1, false));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{row}\n"));
    }

    #[test]
    fn a_bad_whole_line_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck.jsonl");
        std::fs::write(&path, "{\"task_id\":\"t1\"}\nnot json\n").unwrap();
        let e = Checkpoint::lock(&path).unwrap().read().unwrap_err();
        assert!(matches!(e, Error::BadRow { line: 2, .. }), "{e}");
    }
}
