//! Hand labels onto rows: `wai labels attach`.
//!
//! Labels come as JSON Lines (one object per line), a JSON array of objects, or a `{key: 0/1}`
//! map. A label names its row by `key`, else by `rollout_id`, else by `task_id` (or
//! `scenario_id`) with `rollout_index`, else by `prompt` with `final_text`. A key is matched
//! against each row's `rollout_id`, its `task_id#rollout_index`, its bare `task_id` (which names a
//! task's only rollout) and its prompt and reply. The value is `label`, else `reward`, else
//! `gold_reward`: a JSON number 0 or 1 (a string `"1"` is invalid, as in the reference).
//!
//! Each matched label is appended to the row's `extra.gold_labels` (who, what kind, when), and the
//! row's `gold_reward` is the majority of those labels, with `gold_kind` naming who wrote them; a
//! tie leaves `gold_reward` unset and is counted. Nothing is written when a key names more than one
//! row (the error names the rows and the key that would pick one), or when no label names a row.
//! The reference's `row_key` digest (SHA-1 of prompt and reply) is not accepted as a key: pass the
//! prompt and reply themselves.
//!
//! The two passes (match the labels' keys to rows, then label the rows) are a stage in [`stage`].

pub mod stage;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::Int32Type;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::schema::col;
use crate::stages::judge_trust::gold_kind_of;

pub use stage::{Inputs, Labeled, Labeling, LabelsStage, Matching, Options};

/// The kinds a label may have.
pub const KINDS: [&str; 3] = ["human", "program", "model"];
/// The key of the label records inside `extra`.
pub const GOLD_LABELS: &str = "gold_labels";

/// A kind as given: `verifier` reads as `program`; anything else outside [`KINDS`] is refused.
///
/// # Errors
/// An unknown kind.
pub fn kind(text: &str) -> Result<String> {
    let k = if text == "verifier" { "program" } else { text };
    if KINDS.contains(&k) {
        Ok(k.to_owned())
    } else {
        Err(Error::Usage(format!(
            "label kind `{text}` is not one of human, program, model (verifier reads as program)"
        )))
    }
}

/// One label, read.
#[derive(Debug, Clone)]
pub struct Label {
    /// The key naming its row (none when the label names no row in any accepted way).
    pub key: Option<String>,
    /// 0 or 1; `None` when the value is missing or not a JSON number 0/1.
    pub value: Option<u8>,
    /// Who labeled.
    pub annotator: String,
    /// human, program or model.
    pub kind: String,
    /// When (RFC 3339).
    pub ts: String,
    /// A note, kept with the label.
    pub note: Option<String>,
}

/// Fields of a label object: an object with any of them is a label, not a `{key: 0/1}` map.
const LABEL_FIELDS: [&str; 12] = [
    "key",
    "label",
    "reward",
    "gold_reward",
    "rollout_id",
    "task_id",
    "scenario_id",
    "rollout_index",
    "prompt",
    "final_text",
    "annotator",
    "kind",
];

/// The key of a label object: `key`, else `rollout_id`, else `task_id#rollout_index`, else the
/// prompt and reply.
fn label_key(obj: &Map<String, Value>) -> Option<String> {
    let text = |v: &Value| match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    if let Some(k) = obj.get("key").and_then(text) {
        return Some(k);
    }
    if let Some(k) = obj.get("rollout_id").and_then(text) {
        return Some(k);
    }
    // Rows take `scenario_id` as their task id when they have one.
    let task = obj
        .get("scenario_id")
        .and_then(text)
        .or_else(|| obj.get("task_id").and_then(text));
    if let (Some(t), Some(i)) = (task, obj.get("rollout_index").and_then(Value::as_i64)) {
        return Some(format!("{t}#{i}"));
    }
    obj.get("prompt").and_then(Value::as_str).map(|p| {
        prompt_key(
            p,
            obj.get("final_text").and_then(Value::as_str).unwrap_or(""),
        )
    })
}

/// The key of a prompt and reply (unit separator between them).
fn prompt_key(prompt: &str, reply: &str) -> String {
    format!("prompt:{prompt}\u{1f}{reply}")
}

/// A 0/1 JSON number (the reference's strict reader): anything else is invalid.
fn value01(v: Option<&Value>) -> Option<u8> {
    let v = v.filter(|v| v.is_number())?.as_f64()?;
    if v == 0.0 {
        Some(0)
    } else if v == 1.0 {
        Some(1)
    } else {
        None
    }
}

/// Reads labels from `text` (from `origin`, for errors): JSON Lines, an array of objects, or a
/// `{key: 0/1}` map.
///
/// # Errors
/// Unreadable JSON or an item that is not an object, naming the line; an unknown kind.
pub fn parse(
    text: &str,
    origin: &str,
    default_kind: &str,
    default_annotator: Option<&str>,
    now: &str,
) -> Result<Vec<Label>> {
    let shapes = "labels are JSON Lines of objects ({\"key\": ..., \"label\": 0/1}), a JSON array of such objects, or a {\"KEY\": 0/1} map";
    let items: Vec<(usize, Value)> = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => items.into_iter().map(|v| (0, v)).collect(),
        Ok(Value::Object(obj))
            if !LABEL_FIELDS.iter().any(|f| obj.contains_key(*f))
                && obj.values().all(|v| v.is_number() || v.is_null()) =>
        {
            obj.into_iter()
                .map(|(k, v)| {
                    let mut m = Map::new();
                    m.insert("key".into(), Value::String(k));
                    m.insert("label".into(), v);
                    (0, Value::Object(m))
                })
                .collect()
        }
        _ => {
            let mut items = Vec::new();
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let v: Value = serde_json::from_str(line).map_err(|e| Error::Input {
                    stage: "labels attach".into(),
                    message: format!("`{origin}` line {}: {e}; {shapes}", i + 1),
                })?;
                items.push((i + 1, v));
            }
            items
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (line, item) in items {
        let Value::Object(obj) = item else {
            let at = if line > 0 {
                format!(" line {line}")
            } else {
                String::new()
            };
            return Err(Error::Usage(format!(
                "`{origin}`{at}: a label is not an object; {shapes}"
            )));
        };
        let value = ["label", "reward", "gold_reward"]
            .iter()
            .find_map(|k| obj.get(*k))
            .and_then(|v| value01(Some(v)));
        let kind = match obj.get("kind").and_then(Value::as_str) {
            Some(k) => self::kind(k)?,
            None => self::kind(default_kind)?,
        };
        out.push(Label {
            key: label_key(&obj),
            value,
            annotator: obj
                .get("annotator")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| default_annotator.map(str::to_owned))
                .unwrap_or_else(|| "unknown".to_owned()),
            kind,
            ts: obj
                .get("ts")
                .and_then(Value::as_str)
                .map_or_else(|| now.to_owned(), str::to_owned),
            note: obj.get("note").and_then(Value::as_str).map(str::to_owned),
        });
    }
    Ok(out)
}

/// Which rows each wanted key names (by `rollout_id`), and a readable name for each row.
#[derive(Debug, Default)]
pub struct Index {
    wanted: HashSet<String>,
    rows: HashMap<String, Vec<String>>,
    names: HashMap<String, String>,
    /// A few `task#index` keys of the rows, for the message when labels name none.
    pub sample_keys: BTreeSet<String>,
}

impl Index {
    /// An index of the keys `labels` use.
    pub fn new(labels: &[Label]) -> Self {
        Self {
            wanted: labels.iter().filter_map(|l| l.key.clone()).collect(),
            ..Self::default()
        }
    }

    /// Adds the rows of `batch`.
    ///
    /// # Errors
    /// A batch without the row columns.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        let text = |name: &str| -> Result<&StringArray> {
            Ok(batch
                .column_by_name(name)
                .ok_or_else(|| Error::missing_column("labels attach", name, &batch.schema()))?
                .as_string::<i32>())
        };
        let (rollout, task, prompt, reply) = (
            text(col::ROLLOUT_ID)?,
            text(col::TASK_ID)?,
            text(col::PROMPT)?,
            text(col::FINAL_TEXT)?,
        );
        let index = batch
            .column_by_name(col::ROLLOUT_INDEX)
            .map(|a| a.as_primitive::<Int32Type>().clone());
        // Only the key forms some label uses are built: most rows match nothing, so a row costs
        // a few set lookups of borrowed text, not a handful of new strings.
        let want_prompts = self.wanted.iter().any(|k| k.starts_with("prompt:"));
        let want_composite = self.wanted.iter().any(|k| k.contains('#'));
        for i in 0..batch.num_rows() {
            let id = rollout.value(i);
            let t = task.value(i);
            let composite = || {
                index
                    .as_ref()
                    .filter(|a| a.is_valid(i))
                    .map(|a| format!("{t}#{}", a.value(i)))
            };
            if self.sample_keys.len() < 3 {
                self.sample_keys
                    .insert(composite().unwrap_or_else(|| id.to_owned()));
            }
            let mut keys: Vec<String> = Vec::new();
            for k in [id, t] {
                if self.wanted.contains(k) && !keys.iter().any(|x| x == k) {
                    keys.push(k.to_owned());
                }
            }
            if want_composite {
                keys.extend(composite().filter(|c| self.wanted.contains(c)));
            }
            if want_prompts && prompt.is_valid(i) {
                let r = if reply.is_valid(i) {
                    reply.value(i)
                } else {
                    ""
                };
                let k = prompt_key(prompt.value(i), r);
                if self.wanted.contains(&k) {
                    keys.push(k);
                }
            }
            for k in keys {
                let rows = self.rows.entry(k).or_default();
                if !rows.iter().any(|r| r == id) {
                    rows.push(id.to_owned());
                }
                self.names
                    .entry(id.to_owned())
                    .or_insert_with(|| composite().unwrap_or_else(|| id.to_owned()));
            }
        }
        Ok(())
    }
}

/// What attaching did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Labels read.
    pub labels: u64,
    /// Labels that named one row.
    pub matched: u64,
    /// Labels that named no row.
    pub unmatched: u64,
    /// The first ten keys that named no row.
    pub unmatched_keys: Vec<String>,
    /// Labels whose value is not a JSON number 0/1.
    pub invalid: u64,
    /// Rows given a label.
    pub rows_labeled: u64,
    /// Rows whose labels split evenly (`gold_reward` left unset).
    pub ties: u64,
    /// Who labeled the rows touched (these labels and the ones they already carried), sorted.
    pub annotators: Vec<String>,
    /// What to read.
    pub warnings: Vec<String>,
}

/// The labels each row gets, by `rollout_id`.
pub type Plan = HashMap<String, Vec<Label>>;

/// Matches `labels` to rows through `index`.
///
/// # Errors
/// A key that names several rows (nothing is written; the message names the rows and the key
/// that picks one), or labels of which none names a row.
pub fn resolve(labels: Vec<Label>, index: &Index) -> Result<(Plan, Report)> {
    let mut report = Report {
        labels: labels.len() as u64,
        ..Report::default()
    };
    let mut plan: Plan = HashMap::new();
    let mut ambiguous: Vec<(String, Vec<String>)> = Vec::new();
    let mut annotators = BTreeSet::new();
    for label in labels {
        if label.value.is_none() {
            report.invalid += 1;
            continue;
        }
        let rows = label.key.as_ref().and_then(|k| index.rows.get(k));
        match rows.map(Vec::as_slice) {
            None | Some([]) => {
                report.unmatched += 1;
                if report.unmatched_keys.len() < 10 {
                    report
                        .unmatched_keys
                        .push(label.key.clone().unwrap_or_default());
                }
            }
            Some([one]) => {
                report.matched += 1;
                annotators.insert(label.annotator.clone());
                plan.entry(one.clone()).or_default().push(label);
            }
            Some(many) => {
                let key = label.key.clone().unwrap_or_default();
                if !ambiguous.iter().any(|(k, _)| *k == key) {
                    ambiguous.push((key, many.to_vec()));
                }
            }
        }
    }
    if !ambiguous.is_empty() {
        let detail: Vec<String> = ambiguous
            .iter()
            .take(5)
            .map(|(key, rows)| {
                let names: Vec<String> = rows
                    .iter()
                    .take(4)
                    .map(|r| {
                        let name = index.names.get(r).map_or(r.as_str(), String::as_str);
                        if name == r {
                            format!("'{r}'")
                        } else {
                            format!("'{name}' (rollout_id '{r}')")
                        }
                    })
                    .collect();
                let names_composite = rows
                    .iter()
                    .filter_map(|r| index.names.get(r))
                    .collect::<HashSet<_>>()
                    .len()
                    == rows.len();
                let fix = if names_composite && !key.contains('#') {
                    "write the key as '<task_id>#<rollout_index>'"
                } else {
                    "these rows share it (rows pooled from several runs?): key each label by its row's rollout_id, or give each row its own rollout_id before labeling"
                };
                format!("'{key}' names {} rows ({}): {fix}", rows.len(), names.join(", "))
            })
            .collect();
        return Err(Error::Input {
            stage: "labels attach".into(),
            message: format!(
                "{} label key(s) name more than one row, so a label cannot say which row it belongs to; no row was changed. {}.",
                ambiguous.len(),
                detail.join("; ")
            ),
        });
    }
    let forms = "a key is the row's rollout_id, '<task_id>#<rollout_index>' (a bare task_id names its one rollout), or a prompt with its final_text";
    let examples: Vec<String> = index.sample_keys.iter().map(|k| format!("'{k}'")).collect();
    if report.unmatched > 0 {
        let first: Vec<String> = report
            .unmatched_keys
            .iter()
            .take(3)
            .map(|k| format!("'{k}'"))
            .collect();
        let text = format!(
            "{} label(s) named no row (first keys: {}); {forms}; these rows carry keys like {}",
            report.unmatched,
            first.join(", "),
            examples.join(", ")
        );
        if report.matched == 0 {
            return Err(Error::Input {
                stage: "labels attach".into(),
                message: format!("no label names a row: {text}"),
            });
        }
        report.warnings.push(text);
    }
    if report.matched == 0 {
        return Err(Error::Input {
            stage: "labels attach".into(),
            message: format!(
                "no label has a 0/1 value ({} invalid): a label's value is `label`, `reward` or `gold_reward`, a JSON number 0 or 1",
                report.invalid
            ),
        });
    }
    report.annotators = annotators.into_iter().collect();
    Ok((plan, report))
}

/// `batch` with the planned labels attached: appended to `extra.gold_labels` (cleared first with
/// `replace`), and `gold_reward` and `gold_kind` set by majority. Counts labeled rows and ties into
/// `report`.
///
/// # Errors
/// A batch without the row columns.
pub fn apply(
    batch: &RecordBatch,
    plan: &Plan,
    replace: bool,
    report: &mut Report,
) -> Result<RecordBatch> {
    let column = |name: &str| -> Result<&ArrayRef> {
        batch
            .column_by_name(name)
            .ok_or_else(|| Error::missing_column("labels attach", name, &batch.schema()))
    };
    let rollout = column(col::ROLLOUT_ID)?.as_string::<i32>();
    let extra = column(col::EXTRA)?.as_string::<i32>();
    let gold =
        column(col::GOLD_REWARD)?.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
    let kind = column(col::GOLD_KIND)?.as_string::<i32>();
    let n = batch.num_rows();
    let (mut new_extra, mut new_gold, mut new_kind) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for i in 0..n {
        let Some(labels) = plan.get(rollout.value(i)) else {
            new_extra.push(extra.is_valid(i).then(|| extra.value(i).to_owned()));
            new_gold.push(gold.is_valid(i).then(|| gold.value(i)));
            new_kind.push(kind.is_valid(i).then(|| kind.value(i).to_owned()));
            continue;
        };
        report.rows_labeled += 1;
        let mut obj = match extra
            .is_valid(i)
            .then(|| serde_json::from_str::<Value>(extra.value(i)))
        {
            Some(Ok(Value::Object(o))) => o,
            _ => Map::new(),
        };
        let mut records = match obj.remove(GOLD_LABELS) {
            Some(Value::Array(a)) if !replace => a,
            _ => Vec::new(),
        };
        for l in labels {
            let mut r = Map::new();
            r.insert("label".into(), Value::from(l.value.unwrap_or(0)));
            r.insert("annotator".into(), Value::String(l.annotator.clone()));
            r.insert("kind".into(), Value::String(l.kind.clone()));
            r.insert("ts".into(), Value::String(l.ts.clone()));
            if let Some(note) = &l.note {
                r.insert("note".into(), Value::String(note.clone()));
            }
            records.push(Value::Object(r));
        }
        // The majority over every record the row carries (0/1 JSON numbers only).
        let (mut ones, mut zeros) = (0, 0);
        let mut kinds = Vec::new();
        for r in &records {
            if let Some(a) = r.get("annotator").and_then(Value::as_str)
                && let Err(at) = report.annotators.binary_search_by(|x| x.as_str().cmp(a))
            {
                report.annotators.insert(at, a.to_owned());
            }
            match value01(r.get("label")) {
                Some(1) => ones += 1,
                Some(_) => zeros += 1,
                None => continue,
            }
            kinds.push(r.get("kind").and_then(Value::as_str).map(str::to_owned));
        }
        if ones == zeros {
            report.ties += 1;
            new_gold.push(None);
            new_kind.push(None);
        } else {
            new_gold.push(Some(if ones > zeros { 1.0 } else { 0.0 }));
            new_kind.push(gold_kind_of(kinds.iter().map(Option::as_deref)));
        }
        obj.insert(GOLD_LABELS.into(), Value::Array(records));
        new_extra.push(Some(Value::Object(obj).to_string()));
    }
    let schema = batch.schema();
    let mut columns = batch.columns().to_vec();
    for (name, array) in [
        (
            col::EXTRA,
            Arc::new(StringArray::from(new_extra)) as ArrayRef,
        ),
        (
            col::GOLD_REWARD,
            Arc::new(Float64Array::from(new_gold)) as ArrayRef,
        ),
        (
            col::GOLD_KIND,
            Arc::new(StringArray::from(new_kind)) as ArrayRef,
        ),
    ] {
        let i = schema
            .index_of(name)
            .map_err(|_| Error::missing_column("labels attach", name, &schema))?;
        columns[i] = array;
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "attached {} of {} labels to {} rows ({} named no row, {} invalid, {} ties); annotators: {}",
            self.matched,
            self.labels,
            self.rows_labeled,
            self.unmatched,
            self.invalid,
            self.ties,
            if self.annotators.is_empty() {
                "none".to_owned()
            } else {
                self.annotators.join(", ")
            }
        )?;
        for w in &self.warnings {
            writeln!(f, "! {w}")?;
        }
        Ok(())
    }
}
