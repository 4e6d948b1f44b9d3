//! Records set aside: what a bad row is, what the reader does with it, and the rejects file.

use std::io::{BufWriter, Write};

use super::atomic::AtomicFile;
use super::sink::Sink;
use crate::error::{Error, Result};

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
