//! Resuming from a checkpoint: rollout ids say where a landed row sits in the schedule, and a
//! checkpoint's rows resume only under the settings they were written with.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::pipeline::row::Record;

/// A resumed row, keyed by its rollout id (`task/phrasing/index[@run]`), which says where it
/// sits in the schedule.
pub type ResumeKey = String;

/// The id of rollout `index` of phrasing `phrasing` of `task`, in run `run`.
pub fn rollout_id(task: &str, phrasing: u32, index: u32, run: u32) -> String {
    if run > 0 {
        format!("{task}/{phrasing}/{index}@{run}")
    } else {
        format!("{task}/{phrasing}/{index}")
    }
}

/// The key of a landed row.
pub fn resume_key(r: &Record) -> ResumeKey {
    r.rollout_id.clone().unwrap_or_default()
}

/// A row read back from a checkpoint, with what the schedule needs of it, read once: the
/// settings digest it was written under, which try of its rollout it was, its behaviour
/// signature. Its lineage is marked `resumed`.
pub(super) struct Resumed {
    /// The row.
    pub(super) record: Record,
    /// The settings digest it was written under.
    pub(super) settings: Option<String>,
    /// Which try of its rollout it was.
    pub(super) attempt: u32,
    /// Its behaviour signature.
    pub(super) signature: u64,
}

impl Resumed {
    /// Reads what the schedule needs of `record`.
    pub(super) fn of(mut record: Record) -> Self {
        let mut lineage: Map<String, Value> = record
            .lineage
            .as_deref()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_default();
        let settings = lineage
            .get("settings")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let attempt = lineage
            .get("attempt")
            .and_then(Value::as_u64)
            .and_then(|a| u32::try_from(a).ok())
            .unwrap_or(0);
        lineage.insert("resumed".into(), Value::Bool(true));
        record.lineage = Some(Value::Object(lineage).to_string());
        let signature = record
            .extra
            .as_deref()
            .and_then(|e| serde_json::from_str::<Value>(e).ok())
            .and_then(|e| {
                e.get("behavior_signature")
                    .and_then(Value::as_str)
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
            })
            .unwrap_or(0);
        Self {
            record,
            settings,
            attempt,
            signature,
        }
    }
}

/// The rows of a checkpoint by rollout id, each checked to be written under `settings`.
///
/// # Errors
/// A row was written under other settings.
pub(super) fn index(rows: Vec<Record>, settings: &str) -> Result<HashMap<ResumeKey, Resumed>> {
    let resumed: Vec<Resumed> = rows.into_iter().map(Resumed::of).collect();
    if let Some(r) = resumed
        .iter()
        .find(|r| r.settings.as_deref() != Some(settings))
    {
        return Err(Error::Usage(format!(
            "the checkpoint's rows were written by a run with other settings (row `{}`): the seed, agent, tools, policy, seeds, allocation and `wave` must be the same to resume; start a new `checkpoint` file",
            r.record.rollout_id.as_deref().unwrap_or("?")
        )));
    }
    Ok(resumed
        .into_iter()
        .map(|r| (resume_key(&r.record), r))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, lineage: &str) -> Record {
        Record {
            task_id: "t".into(),
            rollout_id: Some(id.into()),
            lineage: Some(lineage.into()),
            extra: Some(r#"{"behavior_signature":"00000000002a"}"#.into()),
            ..Record::default()
        }
    }

    #[test]
    fn rollout_ids_name_the_run_after_the_first() {
        assert_eq!(rollout_id("t", 1, 2, 0), "t/1/2");
        assert_eq!(rollout_id("t", 1, 2, 3), "t/1/2@3");
    }

    #[test]
    fn a_resumed_row_reads_its_settings_attempt_and_signature() {
        let r = Resumed::of(record("t/0/0", r#"{"settings":"abc","attempt":2}"#));
        assert_eq!(r.settings.as_deref(), Some("abc"));
        assert_eq!((r.attempt, r.signature), (2, 42));
        let lineage: Value = serde_json::from_str(r.record.lineage.as_deref().unwrap()).unwrap();
        assert_eq!(lineage["resumed"], true);
    }

    #[test]
    fn rows_resume_only_under_their_settings() {
        let rows = vec![
            record("t/0/0", r#"{"settings":"abc"}"#),
            record("t/0/1", r#"{"settings":"abc"}"#),
        ];
        let index = index(rows.clone(), "abc").unwrap();
        assert_eq!(index.len(), 2);
        assert!(index.contains_key("t/0/1"));
        let e = index_err(rows, "abd");
        assert!(e.contains("row `t/0/0`"), "{e}");
    }

    fn index_err(rows: Vec<Record>, settings: &str) -> String {
        index(rows, settings)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }
}
