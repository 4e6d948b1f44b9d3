//! The tasks of earlier rows, for a replay (`tasks` in [`super::Options`]).

use std::collections::HashMap;

use datafusion::arrow::array::RecordBatch;
use serde_json::Value;

use super::options::Pinned;
use super::world::Plan;
use crate::error::Result;
use crate::pipeline::row::{AXES, BatchView, encode};

/// The tasks of `batches`, one per distinct prompt in first-seen order; a task's `rows` is the
/// most rows its prompt had in any one run (`eval_run`). Rows without a prompt are skipped.
///
/// # Errors
/// A batch does not read as rows.
pub fn pinned_tasks(batches: &[RecordBatch]) -> Result<Vec<Pinned>> {
    let mut out: Vec<Pinned> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut per_run: HashMap<(String, i64), u32> = HashMap::new();
    for batch in batches {
        let view = BatchView::new(batch)?;
        for i in 0..batch.num_rows() {
            let row = encode(&view, i)?;
            let Some(prompt) = row
                .get("prompt")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
            else {
                continue;
            };
            // k: the most rows the prompt had in any one run.
            let run = row
                .get("eval_run")
                .and_then(Value::as_i64)
                .or_else(|| {
                    row.get("lineage")
                        .and_then(|l| l.get("eval_run"))
                        .and_then(Value::as_i64)
                })
                .unwrap_or(0);
            let n = per_run.entry((prompt.to_owned(), run)).or_insert(0u32);
            *n += 1;
            if let Some(&j) = index.get(prompt) {
                out[j].rows = out[j].rows.max(*n);
                continue;
            }
            index.insert(prompt.to_owned(), out.len());
            out.push(pinned(prompt, &row));
        }
    }
    Ok(out)
}

/// The task of a row (as [`encode`] gives it) with prompt `prompt`.
fn pinned(prompt: &str, row: &serde_json::Map<String, Value>) -> Pinned {
    let strings = |v: Option<&Value>| -> Vec<(String, String)> {
        v.and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let dims = strings(row.get("scenario_dimensions").or_else(|| row.get("dims")));
    let labels = AXES
        .iter()
        .filter(|a| **a != "world_state")
        .filter_map(|a| {
            row.get(*a)
                .and_then(Value::as_str)
                .map(|v| ((*a).to_owned(), v.to_owned()))
        })
        .collect();
    let world_state = row
        .get("world_state")
        .and_then(Value::as_str)
        .or_else(|| {
            dims.iter()
                .find(|(k, _)| k == "world_state")
                .map(|(_, v)| v.as_str())
        })
        .filter(|w| !matches!(*w, "unspecified" | "unknown" | ""))
        .map(str::to_owned);
    Pinned {
        prompt: prompt.to_owned(),
        task_id: row
            .get("task_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        dims,
        labels,
        plan: row.get("faults").and_then(Plan::from_json),
        world_state,
        writer: row
            .get("writer_model")
            .and_then(Value::as_str)
            .unwrap_or("pinned")
            .to_owned(),
        privileged: row.get("privileged").cloned(),
        rows: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::row::{Builder, Record};

    fn row(task: &str, prompt: &str, run: i32) -> Record {
        Record {
            task_id: task.into(),
            rollout_id: Some(format!("{task}/{run}/{prompt}")),
            prompt: Some(prompt.into()),
            eval_run: Some(run),
            writer_model: Some("template".into()),
            ..Record::default()
        }
    }

    #[test]
    fn one_task_per_prompt_with_the_most_rows_of_any_run() {
        let mut b = Builder::new();
        for r in [
            row("t1", "a", 0),
            row("t1", "a", 0),
            row("t2", "b", 0),
            row("t1", "a", 1),
            row("t3", "", 0),
        ] {
            b.push(&r).unwrap();
        }
        let tasks = pinned_tasks(&[b.finish().unwrap()]).unwrap();
        let got: Vec<(&str, &str, u32)> = tasks
            .iter()
            .map(|t| (t.task_id.as_str(), t.prompt.as_str(), t.rows))
            .collect();
        assert_eq!(got, [("t1", "a", 2), ("t2", "b", 1)]);
        assert_eq!(tasks[0].writer, "template");
    }
}
