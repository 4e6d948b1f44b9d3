//! Group fields: `group_id, k, n0, n1, reward_mean, reward_std` over the rows
//! being exported, stamped on each training row when some task repeats.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use std::fmt::Write as _;

use foldhash::HashMap;
use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use crate::error::Result;
use crate::stages::task_key::task_key;

/// The query that reads every row's task key ([`task_key`] from the columns) and reward, for
/// [`Groups::add_keys`]: run over the rows as `rows`, in file order.
pub const GROUP_KEYS: &str = "SELECT coalesce(nullif(json_get_str(extra, 'scenario_id'), ''), task_id) AS key, reward FROM rows";

/// `sha1hex(key)[:12]`: the reference's export group id.
pub fn group_id(key: &str) -> String {
    let d = Sha1::digest(key.as_bytes());
    d.iter()
        .take(6)
        .fold(String::with_capacity(12), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Group fields over the rows being exported: `task key → (k, n0, n1, mean, std)`.
#[derive(Debug, Clone, Default)]
pub struct Groups {
    stats: HashMap<String, (u64, u64, u64, f64, f64, u64)>,
    repeats: bool,
    /// Each task's group id and its group fields as written in a JSON object (`,"group_id":…`),
    /// made once, on first use, after the last [`Groups::add`].
    written: std::sync::OnceLock<HashMap<String, (String, Vec<u8>)>>,
}

impl Groups {
    /// The groups of every row, from the batches of [`GROUP_KEYS`].
    pub fn of_keys(batches: &[RecordBatch]) -> Result<Self> {
        let mut groups = Self::default();
        for b in batches {
            groups.add_keys(b)?;
        }
        Ok(groups)
    }

    /// Adds the rows of a batch of [`GROUP_KEYS`] (a key and a reward).
    pub fn add_keys(&mut self, b: &RecordBatch) -> Result<()> {
        let key = datafusion::arrow::compute::cast(b.column(0), &DataType::Utf8)?;
        let key = key.as_string::<i32>();
        let reward = b.column(1).as_primitive::<Float64Type>();
        for i in 0..b.num_rows() {
            self.add(key.value(i), reward.is_valid(i).then(|| reward.value(i)));
        }
        Ok(())
    }

    /// Adds a row of task `key` (its `scenario_id`, else `task_id`, else prompt) and reward.
    pub fn add(&mut self, key: &str, reward: Option<f64>) {
        if !self.stats.contains_key(key) {
            self.stats.insert(key.to_owned(), (0, 0, 0, 0.0, 0.0, 0));
        }
        let Some(e) = self.stats.get_mut(key) else {
            return;
        };
        e.0 += 1;
        if e.0 > 1 {
            self.repeats = true;
        }
        if let Some(r) = reward {
            e.1 += u64::from(r < 0.5);
            e.2 += u64::from(r > 0.5);
            e.3 += r;
            e.4 += r * r;
            e.5 += 1;
        }
    }

    /// Task `key`'s group id and group fields as [`Groups::fields`] gives them, written as the
    /// members of a JSON object, each after a comma; `None` when no task repeats.
    pub(crate) fn written(&self, key: &str) -> Option<(&str, &[u8])> {
        if !self.repeats {
            return None;
        }
        let all = self.written.get_or_init(|| {
            self.stats
                .keys()
                .map(|key| {
                    let mut id = String::new();
                    let mut bytes = Vec::with_capacity(128);
                    for (k, v) in self.fields(key) {
                        if k == "group_id" {
                            v.as_str().unwrap_or_default().clone_into(&mut id);
                        }
                        bytes.push(b',');
                        // Writing JSON to a Vec cannot fail.
                        let _ = serde_json::to_writer(&mut bytes, k);
                        bytes.push(b':');
                        let _ = serde_json::to_writer(&mut bytes, &v);
                    }
                    (key.clone(), (id, bytes))
                })
                .collect()
        });
        all.get(key).map(|(id, b)| (id.as_str(), b.as_slice()))
    }

    /// Stamps `group_id, k, n0, n1, reward_mean, reward_std` when some task repeats.
    pub(super) fn stamp(&self, row: &Map<String, Value>, out: &mut Map<String, Value>) {
        for (k, v) in self.fields(&task_key(row)) {
            out.insert(k.into(), v);
        }
    }

    /// The group fields of task `key`, when some task repeats.
    pub(crate) fn fields(&self, key: &str) -> Vec<(&'static str, Value)> {
        if !self.repeats {
            return Vec::new();
        }
        let Some(&(k, n0, n1, sum, sq, n)) = self.stats.get(key) else {
            return Vec::new();
        };
        let (mean, std) = if n > 0 {
            let mean = sum / n as f64;
            let var = (sq / n as f64 - mean * mean).max(0.0);
            (json!(mean), json!(var.sqrt()))
        } else {
            (Value::Null, Value::Null)
        };
        vec![
            ("group_id", Value::String(group_id(key))),
            ("k", json!(k)),
            ("n0", json!(n0)),
            ("n1", json!(n1)),
            ("reward_mean", mean),
            ("reward_std", std),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Float64Array, StringArray};

    use super::*;

    #[test]
    fn groups_stamp_their_fields_only_when_a_task_repeats() {
        let batch = RecordBatch::try_from_iter([
            ("key", Arc::new(StringArray::from(vec!["a", "a", "b"])) as _),
            (
                "reward",
                Arc::new(Float64Array::from(vec![Some(1.0), Some(0.0), None])) as _,
            ),
        ])
        .unwrap();
        let mut groups = Groups::of_keys(&[batch.slice(2, 1)]).unwrap();
        assert!(groups.fields("b").is_empty(), "no task repeats yet");
        groups.add_keys(&batch.slice(0, 2)).unwrap();
        let fields: Map<String, Value> = groups
            .fields("a")
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(
            Value::Object(fields),
            json!({"group_id": group_id("a"), "k": 2, "n0": 1, "n1": 1, "reward_mean": 0.5, "reward_std": 0.5})
        );
        let (id, written) = groups.written("b").unwrap();
        assert_eq!(id, group_id("b"));
        assert!(String::from_utf8_lossy(written).contains(r#","reward_mean":null"#));
        assert_eq!(group_id("a").len(), 12);
    }
}
