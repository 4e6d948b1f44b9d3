//! A row's task key: the `scenario_id` it names, else its `task_id`, else its prompt (a
//! non-null, non-empty value, as text). Export groups rows by it and select reads asks by it.

use serde_json::{Map, Value};

/// The task key of a row: `scenario_id`, else `task_id`, else the prompt.
pub(crate) fn task_key(row: &Map<String, Value>) -> String {
    ["scenario_id", "task_id", "prompt"]
        .iter()
        .find_map(|k| key_text(row.get(*k)))
        .unwrap_or_default()
}

/// The task key a field gives: a non-null, non-empty value, as text (JSON text if not a string).
pub(crate) fn key_text(v: Option<&Value>) -> Option<String> {
    v.filter(|v| !v.is_null())
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
        .filter(|s| !s.is_empty())
}

/// [`task_key`] of a row read from its columns: `extra`'s `scenario_id`, the task id, the prompt.
/// Borrowed from the row unless `scenario_id` makes it, so the usual key costs no allocation.
pub(crate) fn column_task_key<'a>(
    scenario_id: Option<&Value>,
    task_id: &'a str,
    prompt: Option<&'a str>,
) -> std::borrow::Cow<'a, str> {
    use std::borrow::Cow;
    key_text(scenario_id).map_or_else(
        || {
            Cow::Borrowed(
                Some(task_id)
                    .filter(|t| !t.is_empty())
                    .or_else(|| prompt.filter(|p| !p.is_empty()))
                    .unwrap_or_default(),
            )
        },
        Cow::Owned,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_key_is_the_scenario_then_the_task_then_the_prompt() {
        let row = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            task_key(&row(
                json!({"scenario_id": "s", "task_id": "t", "prompt": "p"})
            )),
            "s"
        );
        assert_eq!(
            task_key(&row(
                json!({"scenario_id": "", "task_id": 7, "prompt": "p"})
            )),
            "7"
        );
        assert_eq!(
            task_key(&row(json!({"scenario_id": null, "prompt": "p"}))),
            "p"
        );
        assert_eq!(task_key(&row(json!({}))), "");
        assert_eq!(
            key_text(Some(&json!({"a": 1}))).as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert_eq!(column_task_key(Some(&json!("s")), "t", Some("p")), "s");
        assert_eq!(column_task_key(Some(&json!("")), "t", Some("p")), "t");
        assert_eq!(column_task_key(None, "", Some("p")), "p");
        assert_eq!(column_task_key(None, "", None), "");
    }
}
