//! Row identity across a whole read: given `rollout_id`s must be unique, derived ones are made
//! so, in bounded memory.
//!
//! Every row's rollout id, and every task's row count so far, is remembered to the end of the
//! read, by a 128-bit fingerprint (`SipHash` with a key drawn per read, twice: a false duplicate
//! needs both halves to collide). In memory alone that was about 40 bytes a row (400 MB at 10M
//! rows, growing with the file); now each of the three maps (ids, tasks, salts) holds at most
//! [`MEMORY_ENTRIES`] entries (about 50 MB, and 44 MB more for a moment while a full one is
//! sorted) and puts the rest in sorted runs in a scratch folder ([`counts`]), keeping about 1.3
//! bytes a key in memory for them. A read that never fills a map never touches the disk.

mod counts;

use std::fmt::Write as _;
use std::hash::BuildHasher;

use sha2::{Digest, Sha256};

use self::counts::KeyCounts;
use crate::error::Result;
use crate::pipeline::row::Record;

/// Entries each map holds in memory before it spills: 7/8 of 2<sup>21</sup>, what a hash table
/// of 2<sup>21</sup> slots holds before it grows (24 bytes an entry: about 50 MB).
pub const MEMORY_ENTRIES: usize = 1_835_008;

/// `_short_hash` of the reference: the first 12 hex digits of SHA-256 of the parts joined by `|`.
fn short_hash(parts: &[&str]) -> String {
    let digest = Sha256::digest(parts.join("|").as_bytes());
    digest[..6].iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// Row identity across a whole read: given `rollout_id`s must be unique, derived ones are made so.
pub struct Identity {
    /// The fingerprints of the ids given so far (their counts unused).
    seen: KeyCounts,
    /// Rows so far per task, by the task id's fingerprint.
    per_task: KeyCounts,
    /// For a derived id that was taken, the last salt a row of its task and index took: the
    /// next such row starts after it. Every salt up to it is taken (each row took the first
    /// free one, and ids are never given back), so this gives the ids a search from 1 gives,
    /// without trying every earlier salt again: rows that share a task and index (every row of
    /// a task at `rollout_index` 0, say) cost a hash each, not one per row before them.
    salted: KeyCounts,
    hasher: std::hash::RandomState,
}

impl Default for Identity {
    fn default() -> Self {
        Self::with_memory(MEMORY_ENTRIES)
    }
}

impl Identity {
    /// An identity whose three maps hold at most `entries` entries each in memory.
    pub fn with_memory(entries: usize) -> Self {
        Self {
            seen: KeyCounts::new("rollout-ids", entries),
            per_task: KeyCounts::new("task-rows", entries),
            salted: KeyCounts::new("salts", entries),
            hasher: std::hash::RandomState::new(),
        }
    }

    fn fingerprint(&self, id: &str) -> u128 {
        // Two independent 64-bit hashes: a false "duplicate" needs both to collide.
        (u128::from(self.hasher.hash_one(id)) << 64)
            | u128::from(self.hasher.hash_one((id, 0x9e37_79b9_u32)))
    }

    /// Sets `record.rollout_id` if absent, and checks uniqueness: [`Identity::assign_keys`] of
    /// the record's keys.
    pub fn assign(&mut self, record: &mut Record) -> Result<std::result::Result<(), String>> {
        let derived = self.assign_keys(
            &record.task_id,
            record.rollout_id.as_deref(),
            record.rollout_index,
            record.eval_run,
        )?;
        Ok(derived.map(|id| {
            if let Some(id) = id {
                record.rollout_id = Some(id);
            }
        }))
    }

    /// Checks a row's given id (`rollout_id`) is new, or derives one that is. The derived id
    /// (`Some`) is the reference's `_short_hash(task_id, index)` (with `eval_run` when it is not
    /// 0); `index` is `rollout_index`, else the row's position within its task so far. The
    /// inner error says why the row cannot be kept (its id is an earlier row's); the outer one
    /// is the scratch folder's.
    pub fn assign_keys(
        &mut self,
        task_id: &str,
        rollout_id: Option<&str>,
        rollout_index: Option<i32>,
        eval_run: Option<i32>,
    ) -> Result<std::result::Result<Option<String>, String>> {
        let position = self.per_task.bump(self.fingerprint(task_id))?;
        if let Some(id) = rollout_id {
            let fp = self.fingerprint(id);
            return Ok(if self.seen.insert_new(fp)? {
                Ok(None)
            } else {
                Err(format!(
                    "duplicate rollout_id `{id}`: an earlier row has it"
                ))
            });
        }
        let index = rollout_index
            .map_or(i64::from(position), i64::from)
            .to_string();
        let run = eval_run.unwrap_or(0).to_string();
        let mut parts = vec![task_id, index.as_str()];
        if run != "0" {
            parts.push(&run);
        }
        let mut id = short_hash(&parts);
        let base = self.fingerprint(&id);
        if !self.seen.insert_new(base)? {
            let mut n = self.salted.get(base)?.unwrap_or(0);
            loop {
                n += 1;
                let salt = n.to_string();
                let mut salted = parts.clone();
                salted.push(&salt);
                id = short_hash(&salted);
                let fp = self.fingerprint(&id);
                if self.seen.insert_new(fp)? {
                    break;
                }
            }
            self.salted.set(base, n)?;
        }
        Ok(Ok(Some(id)))
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
        ids.assign(&mut a).unwrap().unwrap();
        // sha256("task_1ea26256ebae|0")[:12], the reference's `wai.rows` rollout id.
        assert_eq!(
            a.rollout_id.as_deref(),
            Some(short_hash(&["task_1ea26256ebae", "0"]).as_str())
        );
        let mut b = Record {
            rollout_id: None,
            ..a.clone()
        };
        ids.assign(&mut b).unwrap().unwrap();
        assert_ne!(a.rollout_id, b.rollout_id);
        let mut c = Record {
            rollout_id: a.rollout_id.clone(),
            ..a.clone()
        };
        assert!(
            ids.assign(&mut c)
                .unwrap()
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
        ids.assign(&mut given).unwrap().unwrap();
        let mut got = Vec::new();
        for _ in 0..300 {
            let mut r = Record {
                task_id: "t".into(),
                rollout_index: Some(0),
                ..Record::default()
            };
            ids.assign(&mut r).unwrap().unwrap();
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

    /// With maps of 3 entries in memory (spilled and merged hundreds of times), every row gets
    /// the id, or the refusal, it gets with everything in memory: tasks coming back long after
    /// they went to disk, given ids repeated, derived ids taken by given ones, salts.
    #[test]
    fn ids_are_the_same_when_the_maps_spill() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let (mut whole, mut spilled) = (Identity::default(), Identity::with_memory(3));
        let mut refused = 0;
        for _ in 0..3000 {
            let task = format!("t{}", rng.random_range(0..40));
            let index = rng.random_range(0..3);
            let rollout_id = match rng.random_range(0..6) {
                // A derived id given outright (so a later row must salt).
                0 => Some(short_hash(&[&task, &index.to_string()])),
                1 => Some(format!("id{}", rng.random_range(0..300))),
                _ => None,
            };
            let record = Record {
                task_id: task,
                rollout_id,
                rollout_index: rng.random_bool(0.5).then_some(index),
                eval_run: Some(rng.random_range(0..2)),
                ..Record::default()
            };
            let (mut a, mut b) = (record.clone(), record);
            let got = whole.assign(&mut a).unwrap();
            assert_eq!(got, spilled.assign(&mut b).unwrap());
            assert_eq!(a.rollout_id, b.rollout_id);
            refused += usize::from(got.is_err());
        }
        assert!(refused > 100, "{refused}");
        // Some derived ids were salted.
        assert!(whole.salted.shape().0 > 0);
        let (_, levels) = spilled.seen.shape();
        assert!(levels.len() >= 2, "{levels:?}");
        assert!(!spilled.per_task.shape().1.is_empty());
        assert!(!spilled.salted.shape().1.is_empty());
    }

    /// A row refused for its id still takes its place in the task: the next derived id is
    /// the third position's, as before the maps could spill.
    #[test]
    fn a_refused_row_still_counts_toward_its_tasks_positions() {
        for memory in [1, MEMORY_ENTRIES] {
            let mut ids = Identity::with_memory(memory);
            let mut first = Record {
                task_id: "t".into(),
                rollout_id: Some("x".into()),
                ..Record::default()
            };
            ids.assign(&mut first).unwrap().unwrap();
            assert!(ids.assign(&mut first.clone()).unwrap().is_err());
            let mut derived = Record {
                task_id: "t".into(),
                ..Record::default()
            };
            ids.assign(&mut derived).unwrap().unwrap();
            assert_eq!(
                derived.rollout_id.as_deref(),
                Some(short_hash(&["t", "2"]).as_str())
            );
        }
    }
}
