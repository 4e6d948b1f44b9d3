//! Grading: judges give each row a [`Verdict`], written into the verdict columns (`reward`,
//! `reason`, `markers`, `judge_name`, `judge_status`, `judge_meta`) with `lineage` stamped.
//!
//! Judges work batch by batch, so grading streams: built-in verifiers ([`verify`]), SQL
//! expressions and queries ([`sql`]), and programs over a JSON Lines pipe ([`command`]). A grade is
//! a stage ([`grader`]: fed batch by batch, or over rows in memory); after it, [`warnings`] says
//! what would make the number hollow.

pub mod command;
pub mod gate;
pub mod grader;
pub mod llm;
pub mod sql;
pub mod verdict;
pub mod verify;
pub mod warnings;

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Float64Builder, MapArray, MapBuilder, RecordBatch,
    StringArray, StringBuilder,
};
use datafusion::arrow::datatypes::{ArrowNativeType, Float64Type};
use rayon::prelude::*;
use serde_json::{Map, Value};
use std::fmt::Write as _;

pub use grader::{GradeStage, Graded, Grader, Inputs, Options, Report};
pub use verdict::{Status, Verdict};

use crate::error::{Error, Result};
use crate::pipeline::row::map_names;
use crate::schema::col;
use crate::stages::json_string::write_json_string;

/// The columns a grade writes: [`apply`] replaces these and leaves every other column of a row
/// as it was.
pub const WRITES: [&str; 7] = [
    col::REWARD,
    col::REASON,
    col::JUDGE_NAME,
    col::JUDGE_STATUS,
    col::JUDGE_META,
    col::MARKERS,
    col::LINEAGE,
];

/// The columns [`apply`] reads of a row besides the judges': the id stamped into `lineage` as
/// its parent, and the markers and lineage it adds to.
pub const APPLY_READS: [&str; 3] = [col::ROLLOUT_ID, col::MARKERS, col::LINEAGE];

/// A judge over batches of rows.
pub trait Judge: Send {
    /// The name written to `judge_name` and `lineage.judge`.
    fn name(&self) -> &str;

    /// The version written to `lineage.judge_version`, when the judge has one.
    fn version(&self) -> Option<&str> {
        None
    }

    /// One verdict per row of `batch`, in order.
    fn judge(&mut self, batch: &RecordBatch) -> Result<Vec<Verdict>>;

    /// The row columns the judge reads (top-level names), when it reads only some: a caller may
    /// then give it batches with every other column null. `None`, the default: the whole row.
    fn reads(&self) -> Option<Vec<String>> {
        None
    }

    /// Whether [`Judge::judge_landing`] hands verdicts over one by one before the batch is done
    /// (a command judge, as its workers answer); otherwise they are all known at the batch's end,
    /// and a caller may take them from [`Judge::judge`] at once.
    fn lands_one_by_one(&self) -> bool {
        false
    }

    /// As [`Judge::judge`], handing each verdict to `landed` (with its row in `batch`) as soon as
    /// it is known, so a caller can keep it before the batch is done. By default, after the
    /// batch; a command judge hands each one over as its worker answers.
    fn judge_landing(
        &mut self,
        batch: &RecordBatch,
        landed: &mut dyn FnMut(usize, &Verdict),
    ) -> Result<Vec<Verdict>> {
        let verdicts = self.judge(batch)?;
        for (i, v) in verdicts.iter().enumerate() {
            landed(i, v);
        }
        Ok(verdicts)
    }

    /// What the judge noticed that a person should know (after the run).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Several judges as one: a row passes only as well as its worst judge (the minimum reward);
/// the first judge that could not score a row decides that row's status.
pub struct Panel {
    judges: Vec<Box<dyn Judge>>,
    name: String,
    version: Option<String>,
}

impl Panel {
    /// The panel of `judges` (at least one).
    pub fn new(judges: Vec<Box<dyn Judge>>) -> Self {
        let name = judges
            .iter()
            .map(|j| j.name())
            .collect::<Vec<_>>()
            .join(" + ");
        let versions: Vec<&str> = judges.iter().filter_map(|j| j.version()).collect();
        let version = (!versions.is_empty()).then(|| versions.join(" + "));
        Self {
            judges,
            name,
            version,
        }
    }
}

impl Judge for Panel {
    fn name(&self) -> &str {
        &self.name
    }

    fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    fn notes(&self) -> Vec<String> {
        self.judges.iter().flat_map(|j| j.notes()).collect()
    }

    fn reads(&self) -> Option<Vec<String>> {
        let mut all: Vec<String> = Vec::new();
        for j in &self.judges {
            for c in j.reads()? {
                if !all.contains(&c) {
                    all.push(c);
                }
            }
        }
        Some(all)
    }

    fn lands_one_by_one(&self) -> bool {
        // A row's verdict is known only when every judge has given its own.
        self.judges.len() == 1 && self.judges[0].lands_one_by_one()
    }

    fn judge_landing(
        &mut self,
        batch: &RecordBatch,
        landed: &mut dyn FnMut(usize, &Verdict),
    ) -> Result<Vec<Verdict>> {
        if self.judges.len() == 1 {
            return self.judges[0].judge_landing(batch, landed);
        }
        // A row's verdict is known only when every judge has given its own.
        let verdicts = self.judge(batch)?;
        for (i, v) in verdicts.iter().enumerate() {
            landed(i, v);
        }
        Ok(verdicts)
    }

    fn judge(&mut self, batch: &RecordBatch) -> Result<Vec<Verdict>> {
        if self.judges.len() == 1 {
            return self.judges[0].judge(batch);
        }
        let mut each = Vec::with_capacity(self.judges.len());
        for j in &mut self.judges {
            let name = j.name().to_owned();
            each.push((name, j.judge(batch)?));
        }
        Ok((0..batch.num_rows())
            .map(|i| combine(each.iter().map(|(name, vs)| (name.as_str(), &vs[i]))))
            .collect())
    }
}

/// One verdict from several judges' verdicts on a row.
fn combine<'a>(parts: impl Iterator<Item = (&'a str, &'a Verdict)>) -> Verdict {
    let mut out: Option<Verdict> = None;
    let mut meta = Map::new();
    let mut markers: Vec<(String, Option<f64>)> = Vec::new();
    for (name, v) in parts {
        meta.insert(name.to_owned(), Value::Object(v.meta.clone()));
        for (k, x) in &v.markers {
            match markers.iter_mut().find(|(m, _)| m == k) {
                Some(slot) => slot.1 = *x,
                None => markers.push((k.clone(), *x)),
            }
        }
        let prefixed = |v: &Verdict| Verdict {
            reason: format!("{name}: {}", v.reason),
            ..v.clone()
        };
        out = Some(match out {
            None => prefixed(v),
            Some(prev) if prev.status != Status::Ok => prev,
            Some(_) if v.status != Status::Ok => prefixed(v),
            Some(prev) if v.reward < prev.reward => prefixed(v),
            Some(prev) => prev,
        });
    }
    let mut v = out.unwrap_or_else(|| Verdict::failed(Status::MissingReward, "no judge"));
    v.meta = meta;
    v.markers = markers;
    v
}

/// How rows were scored, stamped into `lineage`.
#[derive(Debug, Clone)]
pub struct Stamp {
    /// The judge's name.
    pub judge: String,
    /// Its version.
    pub version: Option<String>,
    /// This scoring run.
    pub run_id: String,
    /// `grade` or `eval`.
    pub source: &'static str,
}

/// Counts of a grade, by status.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Tally {
    /// Rows graded.
    pub rows: u64,
    /// Rows with a reward of 1.
    pub passed: u64,
    /// Rows with a reward of 0.
    pub failed: u64,
    /// Rows with a reward strictly between 0 and 1.
    pub partial: u64,
    /// Rows per `judge_status`.
    pub by_status: std::collections::BTreeMap<&'static str, u64>,
    /// The first reason given for each status other than ok.
    pub first_reason: std::collections::BTreeMap<&'static str, String>,
}

impl Tally {
    /// Counts `verdicts`.
    pub fn add(&mut self, verdicts: &[Verdict]) {
        for v in verdicts {
            self.rows += 1;
            *self.by_status.entry(v.status.as_str()).or_default() += 1;
            if v.status != Status::Ok {
                self.first_reason
                    .entry(v.status.as_str())
                    .or_insert_with(|| v.reason.chars().take(200).collect());
            }
            match v.reward {
                Some(1.0) => self.passed += 1,
                Some(0.0) => self.failed += 1,
                Some(_) => self.partial += 1,
                None => {}
            }
        }
    }

    /// Rows the judge could not score.
    pub fn unjudged(&self) -> u64 {
        self.rows - self.by_status.get("ok").copied().unwrap_or(0)
    }
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| Error::missing_column("grade", name, &batch.schema()))
}

/// `batch` with the verdict columns replaced by `verdicts` and `lineage` stamped. The row's own
/// markers stay unless the judge sets the same name.
pub fn apply(batch: &RecordBatch, verdicts: &[Verdict], stamp: &Stamp) -> Result<RecordBatch> {
    if verdicts.len() != batch.num_rows() {
        return Err(Error::Internal(format!(
            "a judge gave {} verdicts for {} rows",
            verdicts.len(),
            batch.num_rows()
        )));
    }
    let n = batch.num_rows();
    let old_markers: &MapArray = column(batch, col::MARKERS)?.as_map();
    let old_lineage: &StringArray = column(batch, col::LINEAGE)?.as_string();
    let rollout: &StringArray = column(batch, col::ROLLOUT_ID)?.as_string();

    let reward: Float64Array = verdicts.iter().map(|v| v.reward).collect();
    let reason: StringArray = verdicts
        .iter()
        .map(|v| (!v.reason.is_empty()).then_some(v.reason.as_str()))
        .collect();
    let judge_name: StringArray = std::iter::repeat_n(Some(stamp.judge.as_str()), n).collect();
    let judge_status: StringArray = verdicts.iter().map(|v| Some(v.status.as_str())).collect();
    let judge_meta: Vec<Option<String>> = verdicts
        .par_iter()
        .map(|v| {
            // A map with string keys and JSON values always serialises.
            (!v.meta.is_empty()).then(|| serde_json::to_string(&v.meta).unwrap_or_default())
        })
        .collect();
    let judge_meta = StringArray::from(judge_meta);

    let mut markers = MapBuilder::new(
        Some(map_names()),
        StringBuilder::new(),
        Float64Builder::new(),
    );
    let old_keys = old_markers.keys().as_string::<i32>();
    let old_values = old_markers.values().as_primitive::<Float64Type>();
    let old_offsets = old_markers.value_offsets();
    for (i, v) in verdicts.iter().enumerate() {
        if !old_markers.is_valid(i) && v.markers.is_empty() {
            markers.append(false)?;
            continue;
        }
        // The row's markers, each replaced by the judge's of the same name; then the judge's new
        // ones.
        let (start, end) = (old_offsets[i].as_usize(), old_offsets[i + 1].as_usize());
        let own = if old_markers.is_valid(i) {
            start..end
        } else {
            0..0
        };
        for j in own.clone() {
            let name = old_keys.value(j);
            let value = match v.markers.iter().find(|(m, _)| m == name) {
                Some((_, x)) => *x,
                None => old_values.is_valid(j).then(|| old_values.value(j)),
            };
            markers.keys().append_value(name);
            markers.values().append_option(value);
        }
        for (name, x) in &v.markers {
            if !own.clone().any(|j| old_keys.value(j) == name) {
                markers.keys().append_value(name);
                markers.values().append_option(*x);
            }
        }
        markers.append(true)?;
    }

    let mut lineage = StringBuilder::with_capacity(n, n * 160);
    // Rows of a run mostly share their lineage text, and their stamped lineage differs only in
    // its `parent`: the stamped text is made once for a run of rows with the same old text, in
    // two parts around the parent's id, and each row's id is written between them.
    let mut parts: Option<(Option<&str>, bool, String, String)> = None;
    for i in 0..n {
        let text = old_lineage.is_valid(i).then(|| old_lineage.value(i));
        let has_id = rollout.is_valid(i);
        let (before, after) = match &parts {
            Some((t, h, before, after)) if *t == text && *h == has_id => (before, after),
            _ => {
                let (before, after) = stamped_lineage(text, has_id, stamp);
                let kept = parts.insert((text, has_id, before, after));
                (&kept.2, &kept.3)
            }
        };
        lineage.write_str(before).map_err(fmt_error)?;
        if has_id {
            write_json_string(&mut lineage, rollout.value(i)).map_err(fmt_error)?;
        }
        lineage.write_str(after).map_err(fmt_error)?;
        lineage.append_value("");
    }

    let schema = batch.schema();
    let mut columns = batch.columns().to_vec();
    let replace = |columns: &mut Vec<ArrayRef>, name: &str, array: ArrayRef| -> Result<()> {
        let i = schema
            .index_of(name)
            .map_err(|_| Error::missing_column("grade", name, &schema))?;
        columns[i] = array;
        Ok(())
    };
    replace(&mut columns, col::REWARD, Arc::new(reward))?;
    replace(&mut columns, col::REASON, Arc::new(reason))?;
    replace(&mut columns, col::JUDGE_NAME, Arc::new(judge_name))?;
    replace(&mut columns, col::JUDGE_STATUS, Arc::new(judge_status))?;
    replace(&mut columns, col::JUDGE_META, Arc::new(judge_meta))?;
    replace(&mut columns, col::MARKERS, Arc::new(markers.finish()))?;
    replace(&mut columns, col::LINEAGE, Arc::new(lineage.finish()))?;
    Ok(RecordBatch::try_new(Arc::clone(&schema), columns)?)
}

fn fmt_error(e: std::fmt::Error) -> Error {
    Error::Internal(format!("writing a lineage: {e}"))
}

/// The lineage a grade stamps on a row whose lineage was `text`, as JSON text: `text`'s object
/// (none, or not an object: an empty one) with `scoring_run_id`, `source`, `judge`, `parent`
/// (when the row has an id), `judge_version` (when the stamp has one) and
/// `prior_scoring_run_id` (the earlier run's, when it was another) set. The text is in two
/// parts, the parent's id (a JSON string) going between them; without an id, the second part
/// is empty.
fn stamped_lineage(text: Option<&str>, has_id: bool, stamp: &Stamp) -> (String, String) {
    let mut obj = match text.map(serde_json::from_str::<Value>) {
        Some(Ok(Value::Object(o))) => o,
        _ => Map::new(),
    };
    let prior = obj.get("scoring_run_id").cloned();
    obj.insert("scoring_run_id".into(), Value::String(stamp.run_id.clone()));
    obj.insert("source".into(), Value::String(stamp.source.into()));
    obj.insert("judge".into(), Value::String(stamp.judge.clone()));
    if has_id {
        // Its place in the object; the id goes there.
        obj.insert("parent".into(), Value::Null);
    }
    if let Some(version) = &stamp.version {
        obj.insert("judge_version".into(), Value::String(version.clone()));
    }
    if let Some(prior) = prior.filter(|p| p.as_str() != Some(stamp.run_id.as_str())) {
        obj.insert("prior_scoring_run_id".into(), prior);
    }
    let (mut before, mut after) = (String::from("{"), String::new());
    let mut past_parent = false;
    for (k, (key, value)) in obj.iter().enumerate() {
        let part = if past_parent { &mut after } else { &mut before };
        if k > 0 {
            part.push(',');
        }
        // Writing to a `String` does not fail.
        let _ = write_json_string(part, key);
        part.push(':');
        if has_id && key == "parent" {
            past_parent = true;
        } else {
            part.push_str(&value.to_string());
        }
    }
    if past_parent {
        after.push('}');
    } else {
        before.push('}');
    }
    (before, after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_record_reads_back_exactly() {
        let mut v = Verdict::ok(0.1 + 0.2, "close to a third")
            .with_meta("pid", serde_json::json!(42))
            .with_meta("why", serde_json::json!({"b": [1.5, null], "a": "x"}));
        v.markers = vec![("polite".into(), Some(1.0)), ("honest".into(), None)];
        for v in [v, Verdict::failed(Status::Timeout, "hung")] {
            let line = v.to_record().to_string();
            let back = Verdict::from_record(&serde_json::from_str(&line).unwrap()).unwrap();
            assert_eq!(back, v);
            assert_eq!(back.to_record().to_string(), line);
        }
        assert_eq!(
            Verdict::from_record(&serde_json::json!({"reward": 1})),
            None
        );
    }

    /// A lineage stamped in two parts around the parent's id reads as the whole object built
    /// and written at once: ids that need escaping, a row without an id, old lineages that
    /// already name a parent or a run (this one or another), that are not objects, or none.
    #[test]
    fn a_lineage_stamped_in_parts_is_the_whole_object() {
        let olds = [
            None,
            Some(r#"{"source":"simulate","model":"m1"}"#),
            Some(r#"{"parent":"x","scoring_run_id":"run-0","z":[1,{"a":"\"q"}]}"#),
            Some(r#"{"scoring_run_id":"run-1"}"#),
            Some("[1, 2]"),
            Some("not json"),
        ];
        let ids = [
            Some("r-1"),
            Some("quote\"back\\slash\u{1}tab\t"),
            Some("é→"),
            None,
        ];
        for version in [None, Some("v2".to_owned())] {
            let stamp = Stamp {
                judge: "sql:x".into(),
                version: version.clone(),
                run_id: "run-1".into(),
                source: "grade",
            };
            for old in olds {
                for id in ids {
                    let mut obj = match old.map(serde_json::from_str::<Value>) {
                        Some(Ok(Value::Object(o))) => o,
                        _ => Map::new(),
                    };
                    let prior = obj.get("scoring_run_id").cloned();
                    obj.insert("scoring_run_id".into(), "run-1".into());
                    obj.insert("source".into(), "grade".into());
                    obj.insert("judge".into(), "sql:x".into());
                    if let Some(id) = id {
                        obj.insert("parent".into(), id.into());
                    }
                    if let Some(v) = &version {
                        obj.insert("judge_version".into(), v.clone().into());
                    }
                    if let Some(p) = prior.filter(|p| p.as_str() != Some("run-1")) {
                        obj.insert("prior_scoring_run_id".into(), p);
                    }
                    let whole = Value::Object(obj).to_string();
                    let (before, after) = stamped_lineage(old, id.is_some(), &stamp);
                    let mut parts = before;
                    if let Some(id) = id {
                        write_json_string(&mut parts, id).unwrap();
                    }
                    parts.push_str(&after);
                    assert_eq!(parts, whole, "{old:?} {id:?}");
                }
            }
        }
    }

    #[test]
    fn a_panel_takes_the_worst_and_the_first_failure() {
        let pass = Verdict::ok(1.0, "fine");
        let fail = Verdict::ok(0.0, "wrong tool");
        let broken = Verdict::failed(Status::Timeout, "hung");
        let v = combine([("a", &pass), ("b", &fail)].into_iter());
        assert_eq!((v.reward, v.reason.as_str()), (Some(0.0), "b: wrong tool"));
        let v = combine([("a", &fail), ("b", &broken)].into_iter());
        assert_eq!((v.status, v.reward), (Status::Timeout, None));
        assert_eq!(v.reason, "b: hung");
    }
}
