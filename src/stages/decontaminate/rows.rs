//! Reading rows as the rules read them (text columns, recorded task ids, an eval row's extra
//! texts), and the kept rows as slices of their batch.

use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch, StringArray};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::pipeline::row::prompt_task_id;

/// The text column `name` of `batch`.
pub(super) fn text_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    Ok(batch
        .column_by_name(name)
        .ok_or_else(|| Error::missing_column("decontaminate", name, &batch.schema()))?
        .as_string::<i32>())
}

/// Row `i` of `a`, unless null.
pub(super) fn cell(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

/// The task id a row recorded: its `task_id`, unless that was derived from the prompt.
pub(super) fn recorded<'a>(task: Option<&'a str>, prompt: Option<&str>) -> Option<&'a str> {
    let t = task.filter(|t| !t.is_empty())?;
    let derived =
        t.len() == 17 && t.starts_with("task_") && prompt.is_some_and(|p| prompt_task_id(p) == t);
    (!derived).then_some(t)
}

/// The top-level `answer` and `reference` of an eval row (kept in `extra`), when they are text or
/// numbers.
pub(super) fn eval_extras(extra: Option<&str>) -> Vec<String> {
    let Some(Ok(Value::Object(obj))) = extra.map(serde_json::from_str::<Value>) else {
        return Vec::new();
    };
    ["answer", "reference"]
        .iter()
        .filter_map(|k| match obj.get(*k)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            // A zero is falsy to the reference, so it is no text.
            Value::Number(n) if n.as_f64() != Some(0.0) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

/// The kept rows of `batch` as zero-copy slices, one per run of kept rows, in order: the
/// writer encodes them where a filter would first copy every column of the batch.
pub fn kept_runs(batch: &RecordBatch, keep: &BooleanArray) -> Vec<RecordBatch> {
    let mut runs = Vec::new();
    let mut start = None;
    for (i, k) in keep.values().iter().enumerate() {
        match (k, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                runs.push(batch.slice(s, i - s));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        runs.push(batch.slice(s, batch.num_rows() - s));
    }
    runs
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int32Array};
    use datafusion::arrow::compute::{concat_batches, filter_record_batch};

    use super::*;

    #[test]
    fn kept_runs_are_the_filtered_rows_in_order() {
        let values: Vec<i32> = (0..50).collect();
        let batch =
            RecordBatch::try_from_iter([("v", Arc::new(Int32Array::from(values)) as ArrayRef)])
                .unwrap();
        for pattern in [
            vec![true; 50],
            vec![false; 50],
            (0..50).map(|i| i % 7 != 0).collect(),
            (0..50).map(|i| i % 2 == 0).collect(),
            (0..50).map(|i| !(3..=45).contains(&i)).collect(),
            (0..50)
                .map(|i| (10..20).contains(&i))
                .collect::<Vec<bool>>(),
        ] {
            let keep = BooleanArray::from(pattern.clone());
            let runs = kept_runs(&batch, &keep);
            assert!(runs.iter().all(|r| r.num_rows() > 0));
            let want = filter_record_batch(&batch, &keep).unwrap();
            let got = concat_batches(&batch.schema(), &runs).unwrap();
            assert_eq!(got, want, "{pattern:?}");
        }
    }

    #[test]
    fn a_task_id_derived_from_the_prompt_is_not_recorded() {
        let prompt = "Cancel order 9911.";
        let derived = prompt_task_id(prompt);
        assert_eq!(recorded(Some(&derived), Some(prompt)), None);
        assert_eq!(recorded(Some(&derived), Some("another")), Some(&*derived));
        assert_eq!(recorded(Some("e1"), Some(prompt)), Some("e1"));
        assert_eq!(recorded(Some(""), Some(prompt)), None);
        assert_eq!(recorded(None, Some(prompt)), None);
    }

    #[test]
    fn an_eval_rows_answer_and_reference_are_texts_unless_empty_or_zero() {
        assert_eq!(
            eval_extras(Some(r#"{"answer": "done", "reference": 42}"#)),
            ["done", "42"]
        );
        assert!(eval_extras(Some(r#"{"answer": "", "reference": 0}"#)).is_empty());
        assert!(eval_extras(Some("not json")).is_empty());
        assert!(eval_extras(None).is_empty());
    }
}
