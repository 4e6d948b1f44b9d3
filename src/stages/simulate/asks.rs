//! Asks as people write them down: one per line of a text file (lines starting with `#` are
//! comments), the `prompt` of each JSONL record, or a JSON array of strings or records.

use serde_json::Value;

use crate::error::{Error, Result};

/// The asks of `text`, read as JSONL when `jsonl` (each record's `prompt`), else one per
/// non-blank line that is not a `#` comment; `file` names the text in errors.
///
/// # Errors
/// A JSONL line is not JSON, or has no string `prompt`.
pub fn parse_asks(text: &str, jsonl: bool, file: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || (!jsonl && line.trim_start().starts_with('#')) {
            continue;
        }
        if !jsonl {
            out.push(line.trim().to_owned());
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| Error::BadRow {
            file: file.to_owned(),
            line: i as u64 + 1,
            field: None,
            message: format!("not JSON: {e}"),
        })?;
        let Some(p) = v.get("prompt").and_then(Value::as_str) else {
            return Err(Error::BadRow {
                file: file.to_owned(),
                line: i as u64 + 1,
                field: Some("prompt".into()),
                message: "missing or not a string".into(),
            });
        };
        out.push(p.to_owned());
    }
    Ok(out)
}

/// The asks of a JSON array: its strings, and the `prompt` of its objects (other items are
/// skipped); `None` when `value` is not an array.
pub fn ask_array(value: &Value) -> Option<Vec<String>> {
    let Value::Array(items) = value else {
        return None;
    };
    Some(
        items
            .iter()
            .filter_map(|i| {
                i.as_str()
                    .or_else(|| i.get("prompt").and_then(Value::as_str))
                    .map(str::to_owned)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_skips_comments_and_blanks_and_jsonl_reads_prompts() {
        let asks = parse_asks("# note\n\n  refund A1 \nwhere is A2?\n", false, "a.txt").unwrap();
        assert_eq!(asks, ["refund A1", "where is A2?"]);
        let asks = parse_asks(
            "{\"prompt\": \"x\"}\n\n{\"prompt\": \"# y\"}\n",
            true,
            "a.jsonl",
        )
        .unwrap();
        assert_eq!(asks, ["x", "# y"]);
        let e = parse_asks("{\"q\": 1}\n", true, "a.jsonl").unwrap_err();
        assert!(e.to_string().contains("prompt"), "{e}");
    }

    #[test]
    fn arrays_hold_strings_or_records() {
        let v = serde_json::json!(["a", {"prompt": "b"}, 3]);
        assert_eq!(ask_array(&v).unwrap(), ["a", "b"]);
        assert!(ask_array(&serde_json::json!({"prompt": "a"})).is_none());
    }
}
