//! The verdict log of a resumable grade: every verdict appended, as it lands, to a JSON Lines
//! file beside the output (`.OUT.verdicts.jsonl`), so a killed or failed grade loses nothing.
//!
//! The first line names the run: `{"wai_verdicts": 1, "digest": "..."}`, a digest of the
//! judges, the inputs and the options that decide verdicts. Each other line is one verdict:
//! `{"row": N, "rollout_id": "...", "verdict": {...}}` ([`Verdict::to_record`]), `row` counting
//! rows in the order they are read. A rerun with the same digest takes the verdicts it finds
//! (the row and its rollout id must both match) and judges only the rest; another digest starts
//! the log over. A line torn by a kill is cut off. Lines reach the system as they are written
//! (a `kill -9` loses none) and the disk at most a second later. The log is locked while a
//! grade writes it, and removed once the output is in place.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, AsArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::schema::col;
use crate::stages::grade::{Judge as _, Panel, Verdict};

/// How often appended verdicts are synced to the disk.
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// What opening the log found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Verdicts kept from an earlier run.
    pub(crate) resumed: usize,
    /// A log of another run (other judges, inputs or options) was there and was started over.
    pub(crate) started_over: bool,
    /// The last line was torn (the earlier run was killed while writing it) and was cut off.
    pub(crate) torn: bool,
}

/// An open, locked verdict log.
pub(crate) struct VerdictLog {
    path: PathBuf,
    file: File,
    kept: HashMap<u64, (String, Verdict)>,
    last_sync: Instant,
    unsynced: bool,
}

/// The log's line for the verdict of `row`.
fn line(row: u64, rollout_id: &str, verdict: &Verdict) -> String {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        row: u64,
        rollout_id: &'a str,
        verdict: crate::stages::grade::verdict::Record<'a>,
    }
    let line = Line {
        row,
        rollout_id,
        verdict: verdict.record(),
    };
    // A map with string keys and JSON values always serialises.
    let mut text = serde_json::to_string(&line).unwrap_or_default();
    text.push('\n');
    text
}

/// The log's path for output `out`: `.NAME.verdicts.jsonl` beside it (a dot file, so a folder
/// of outputs read as input skips it).
pub(crate) fn path_for(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.with_file_name(format!(".{name}.verdicts.jsonl"))
}

impl VerdictLog {
    /// Opens (or creates) the log for output `out` under `digest`, locks it, and reads what an
    /// earlier run with the same digest left.
    ///
    /// # Errors
    /// Another grade holds the log (a usage error), or it cannot be read or written.
    pub(crate) fn open(out: &Path, digest: &str) -> Result<(Self, Found)> {
        let path = path_for(out);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Usage(format!(
                    "another grade is writing `{}` (its verdict log `{}` is locked); wait for it to end, or write elsewhere",
                    out.display(),
                    path.display()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| Error::io(&path, e))?;
        let mut found = Found::default();
        let mut kept = HashMap::new();
        let header = json!({"wai_verdicts": 1, "digest": digest}).to_string();
        let mut lines = bytes.split_inclusive(|b| *b == b'\n');
        let ours = lines
            .next()
            .is_some_and(|first| first.strip_suffix(b"\n") == Some(header.as_bytes()));
        let mut good_end = 0;
        if ours {
            good_end = header.len() + 1;
            for line in lines {
                let whole = line.ends_with(b"\n");
                let record = whole
                    .then(|| serde_json::from_slice::<Value>(line).ok())
                    .flatten()
                    .and_then(|v| {
                        let row = v.get("row")?.as_u64()?;
                        let id = v.get("rollout_id")?.as_str()?.to_owned();
                        Some((row, id, Verdict::from_record(v.get("verdict")?)?))
                    });
                let Some((row, id, verdict)) = record else {
                    // A line the kill cut short (or garbled): it and what follows are dropped.
                    found.torn = true;
                    break;
                };
                kept.insert(row, (id, verdict));
                good_end += line.len();
            }
        } else if !bytes.is_empty() {
            found.started_over = true;
        }
        if good_end != bytes.len() || !ours {
            let keep = if ours { good_end as u64 } else { 0 };
            file.set_len(keep).map_err(|e| Error::io(&path, e))?;
        }
        if !ours {
            file.write_all(format!("{header}\n").as_bytes())
                .map_err(|e| Error::io(&path, e))?;
        }
        found.resumed = kept.len();
        Ok((
            Self {
                path,
                file,
                kept,
                last_sync: Instant::now(),
                unsynced: !ours,
            },
            found,
        ))
    }

    /// The verdict an earlier run left for `row`, if its rollout id is `rollout_id`.
    pub(crate) fn take(&mut self, row: u64, rollout_id: &str) -> Option<Verdict> {
        match self.kept.remove(&row) {
            Some((id, v)) if id == rollout_id => Some(v),
            _ => None,
        }
    }

    /// Appends the verdict of `row` (one write, so the line reaches the system whole).
    pub(crate) fn append(&mut self, row: u64, rollout_id: &str, verdict: &Verdict) -> Result<()> {
        self.write(line(row, rollout_id, verdict).as_bytes())
    }

    /// Appends the verdicts of many rows, known at once: the lines made on all cores, then
    /// written in one write.
    pub(crate) fn append_many(&mut self, entries: &[(u64, &str, &Verdict)]) -> Result<()> {
        use rayon::prelude::*;
        if entries.is_empty() {
            return Ok(());
        }
        let lines: Vec<String> = entries
            .par_iter()
            .map(|(row, id, v)| line(*row, id, v))
            .collect();
        self.write(lines.concat().as_bytes())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all(bytes)
            .map_err(|e| Error::io(&self.path, e))?;
        self.unsynced = true;
        if self.last_sync.elapsed() >= SYNC_EVERY {
            self.sync()?;
        }
        Ok(())
    }

    /// Syncs what was appended to the disk.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if self.unsynced {
            self.file
                .sync_data()
                .map_err(|e| Error::io(&self.path, e))?;
            self.unsynced = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Removes the log: the output it served is in place.
    pub(crate) fn remove(self) -> Result<()> {
        std::fs::remove_file(&self.path).map_err(|e| Error::io(&self.path, e))
    }

    /// Where the log is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// The verdicts of `batch` (whose first row is row `first` of the run): those in the log are
/// taken from it, the rest judged, each appended to the log as it lands. `judged` counts the
/// rows judged now.
pub(crate) fn judge_missing(
    panel: &mut Panel,
    verdict_log: &mut VerdictLog,
    batch: &RecordBatch,
    first: u64,
    judged: &mut u64,
) -> Result<Vec<Verdict>> {
    let ids = batch
        .column_by_name(col::ROLLOUT_ID)
        .ok_or_else(|| Error::missing_column("grade", col::ROLLOUT_ID, &batch.schema()))?
        .as_string::<i32>();
    let id = |i: usize| if ids.is_valid(i) { ids.value(i) } else { "" };
    let n = batch.num_rows();
    let mut verdicts: Vec<Option<Verdict>> = (0..n)
        .map(|i| verdict_log.take(first + i as u64, id(i)))
        .collect();
    let missing: Vec<u32> = (0..n)
        .filter(|i| verdicts[*i].is_none())
        .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
        .collect();
    if !missing.is_empty() {
        let part = if missing.len() == n {
            batch.clone()
        } else {
            take_record_batch(batch, &UInt32Array::from(missing.clone()))?
        };
        let fresh = if panel.lands_one_by_one() {
            let mut failed = None;
            let fresh = panel.judge_landing(&part, &mut |i, v| {
                let row = missing[i] as usize;
                if failed.is_none()
                    && let Err(e) = verdict_log.append(first + row as u64, id(row), v)
                {
                    failed = Some(e);
                }
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            fresh
        } else {
            // Known all at once at the batch's end: logged all at once.
            let fresh = panel.judge(&part)?;
            let entries: Vec<(u64, &str, &Verdict)> = missing
                .iter()
                .zip(&fresh)
                .map(|(&row, v)| (first + u64::from(row), id(row as usize), v))
                .collect();
            verdict_log.append_many(&entries)?;
            fresh
        };
        verdict_log.sync()?;
        *judged += fresh.len() as u64;
        for (i, v) in fresh.into_iter().enumerate() {
            verdicts[missing[i] as usize] = Some(v);
        }
    }
    verdicts
        .into_iter()
        .map(|v| v.ok_or_else(|| Error::Internal("a row was left without a verdict".into())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::grade::Status;

    #[test]
    fn a_log_resumes_under_its_digest_cuts_a_torn_line_and_starts_over_under_another() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("scored.parquet");
        let (mut log, found) = VerdictLog::open(&out, "d1").unwrap();
        assert_eq!((found.resumed, found.started_over), (0, false));
        log.append(0, "r0", &Verdict::ok(1.0, "fine")).unwrap();
        log.append(1, "r1", &Verdict::failed(Status::Timeout, "hung"))
            .unwrap();
        drop(log);
        let path = path_for(&out);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"row\": 2, \"rollout_id\": \"r2\", \"verd");
        std::fs::write(&path, &text).unwrap();

        let (mut log, found) = VerdictLog::open(&out, "d1").unwrap();
        assert_eq!((found.resumed, found.torn), (2, true));
        assert_eq!(log.take(0, "r0"), Some(Verdict::ok(1.0, "fine")));
        assert_eq!(log.take(1, "other"), None, "the rollout id must match");
        // A second grade on the same output is refused while this one holds the log.
        let Err(Error::Usage(message)) = VerdictLog::open(&out, "d1") else {
            panic!("a second open must be refused");
        };
        assert!(message.contains("another grade is writing"), "{message}");
        drop(log);
        assert!(!std::fs::read_to_string(&path).unwrap().contains("verd\n"));

        let (log, found) = VerdictLog::open(&out, "d2").unwrap();
        assert_eq!((found.resumed, found.started_over), (0, true));
        log.remove().unwrap();
        assert!(!path.exists());
    }
}
