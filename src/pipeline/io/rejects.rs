//! Records set aside: what a bad row is, what the reader does with it, the rejects file, and
//! the identity (rollout ids) every kept row is given.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::hash::BuildHasher;
use std::io::{BufWriter, Write};

use sha2::{Digest, Sha256};

use super::atomic::AtomicFile;
use super::sink::Sink;
use crate::error::{Error, Result};
use crate::pipeline::row::Record;

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
    digest[..6].iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// Row identity across a whole read: given `rollout_id`s must be unique, derived ones are made so.
#[derive(Default)]
pub struct Identity {
    seen: HashSet<u128>,
    per_task: HashMap<String, u32>,
    /// For a derived id that was taken, the last salt a row of its task and index took: the
    /// next such row starts after it. Every salt up to it is taken (each row took the first
    /// free one, and ids are never given back), so this gives the ids a search from 1 gives,
    /// without trying every earlier salt again: rows that share a task and index (every row of
    /// a task at `rollout_index` 0, say) cost a hash each, not one per row before them.
    salted: HashMap<u128, u32>,
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
        let position = if let Some(seen) = self.per_task.get_mut(&record.task_id) {
            *seen += 1;
            *seen - 1
        } else {
            self.per_task.insert(record.task_id.clone(), 1);
            0
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
        let base = self.fingerprint(&id);
        if !self.seen.insert(base) {
            let mut n = self.salted.get(&base).copied().unwrap_or(0);
            loop {
                n += 1;
                let salt = n.to_string();
                let mut salted = parts.clone();
                salted.push(&salt);
                id = short_hash(&salted);
                if self.seen.insert(self.fingerprint(&id)) {
                    break;
                }
            }
            self.salted.insert(base, n);
        }
        record.rollout_id = Some(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Rows sharing a task and an index take the first free salt each, as a search from salt 1
    /// gives: the ids are the reference's salted hashes in order, whatever else took a salt.
    #[test]
    fn rows_sharing_a_task_and_index_take_the_first_free_salts_in_order() {
        let mut ids = Identity::default();
        // An id given outright takes salt 3 of the shared (task, index) before any row needs it.
        let mut given = Record {
            task_id: "t".into(),
            rollout_id: Some(short_hash(&["t", "0", "3"])),
            ..Record::default()
        };
        ids.assign(&mut given).unwrap();
        let mut got = Vec::new();
        for _ in 0..300 {
            let mut r = Record {
                task_id: "t".into(),
                rollout_index: Some(0),
                ..Record::default()
            };
            ids.assign(&mut r).unwrap();
            got.push(r.rollout_id.unwrap());
        }
        let mut want = vec![short_hash(&["t", "0"])];
        want.extend(
            (1..=300)
                .filter(|n| *n != 3)
                .map(|n| short_hash(&["t", "0", &n.to_string()])),
        );
        assert_eq!(got, want);
    }
}
