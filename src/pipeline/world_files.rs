//! The files that describe an agent's world: its tools (a JSON tool list), its policy (text),
//! and asks (text, JSONL or a JSON array). Reading is here; parsing is the simulate stage's.

use std::path::Path;

use datafusion::arrow::array::RecordBatch;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::stages::simulate::asks::{ask_array, parse_asks};
use crate::stages::simulate::tools::{Tool, parse_tools};
use crate::stages::simulate::{Pinned, pinned_tasks};

/// The text of `path`, without a leading byte-order mark (a file that is not there is a missing
/// input).
///
/// # Errors
/// The file cannot be read.
pub fn read_text(path: &Path) -> Result<String> {
    let mut text = std::fs::read_to_string(path).map_err(|e| Error::read(path, e))?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// The policy at `path`, or none (an empty text).
///
/// # Errors
/// The file cannot be read.
pub fn read_policy(path: Option<&Path>) -> Result<String> {
    path.map_or_else(|| Ok(String::new()), read_text)
}

/// A tools or asks file whose content is wrong: bad input data (exit 65), as a bad row is.
fn bad_file(message: String) -> Error {
    Error::Input {
        stage: "read".into(),
        message,
    }
}

/// The JSON of `path`.
fn read_json(path: &Path) -> Result<Value> {
    let text = read_text(path)?;
    serde_json::from_str(&text)
        .map_err(|e| bad_file(format!("`{}` is not JSON: {e}", path.display())))
}

/// Reads a tool file.
///
/// # Errors
/// The file cannot be read (exit 66 when it is not there), is not JSON, or is not a tool list
/// (exit 65).
pub fn read_tools(path: &Path) -> Result<Vec<Tool>> {
    parse_tools(&read_json(path)?, &path.display().to_string())
}

/// Reads asks: one per line of a text file (lines starting with `#` are comments), or the
/// `prompt` of each JSONL record (`.jsonl`, `.ndjson`).
///
/// # Errors
/// The file cannot be read, or a JSONL line is not a record with a `prompt`.
pub fn read_asks(path: &Path) -> Result<Vec<String>> {
    let text = read_text(path)?;
    let jsonl = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("ndjson"));
    parse_asks(&text, jsonl, &path.display().to_string())
}

/// Reads a JSON array of asks: strings, or objects with a `prompt`; `spec` names it in errors.
///
/// # Errors
/// The file cannot be read, is not JSON, or is not an array.
pub fn read_ask_array(path: &Path, spec: &str) -> Result<Vec<String>> {
    let text = read_text(path)?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| bad_file(format!("`{spec}` is not JSON: {e}")))?;
    ask_array(&v).ok_or_else(|| {
        bad_file(format!(
            "`{spec}`: expected a JSON array of asks (strings or objects with a `prompt`)"
        ))
    })
}

/// The tool names of `path` (`--tools` of `wai gate` and `wai grade`): an OpenAI function-schema list (`[{"type": "function", "function": {"name":
/// ...}}]`, or `{"name": ...}` objects, or plain names), or an object with a `tools` list.
///
/// # Errors
/// The file cannot be read, is not JSON, or names no tool.
pub fn read_tool_names(path: &Path) -> Result<Vec<String>> {
    let text = read_text(path)?;
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        bad_file(format!(
            "the tools file `{}` is not JSON: {e}",
            path.display()
        ))
    })?;
    let list = match &value {
        Value::Array(items) => items.as_slice(),
        Value::Object(o) => o
            .get("tools")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice),
        _ => &[],
    };
    let mut names = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let name = match item {
            Value::String(s) => Some(s.as_str()),
            Value::Object(o) => o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str),
            _ => None,
        };
        match name {
            Some(n) => names.push(n.to_owned()),
            None => {
                return Err(bad_file(format!(
                    "the tools file `{}`: tool {i} has no `function.name` or `name`",
                    path.display()
                )));
            }
        }
    }
    if names.is_empty() {
        return Err(bad_file(format!(
            "the tools file `{}` lists no tools (expected a list of OpenAI function schemas)",
            path.display()
        )));
    }
    Ok(names)
}

/// Reads asks from `spec`: a JSON array, a text or JSONL file (as [`read_asks`]), or rows
/// (Parquet, a folder, a URL), whose prompts are the asks.
///
/// # Errors
/// The file or rows cannot be read, or do not hold asks.
pub fn asks_of(ctx: &crate::pipeline::context::Context, spec: &str) -> Result<Vec<String>> {
    use datafusion::arrow::array::AsArray;
    let path = Path::new(spec);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_lowercase();
    let local = path.is_file();
    if local && ext == "json" {
        return read_ask_array(path, spec);
    }
    if local && ext != "parquet" {
        return read_asks(path);
    }
    let (context, _scratch) = crate::pipeline::tables::rows_session(ctx, &[spec.to_owned()])?;
    let batches = ctx
        .runtime
        .block_on(crate::pipeline::session::collect_in_file_order(
            &context,
            "SELECT prompt FROM rows WHERE prompt IS NOT NULL",
        ))?;
    let mut out = Vec::new();
    for b in &batches {
        let prompts = datafusion::arrow::compute::cast(
            b.column(0),
            &datafusion::arrow::datatypes::DataType::Utf8,
        )?;
        out.extend(
            prompts
                .as_string::<i32>()
                .iter()
                .flatten()
                .map(str::to_owned),
        );
    }
    Ok(out)
}

/// The tasks of `rows` (read from `spec`, `--tasks`), one per distinct prompt in first-seen
/// order.
///
/// # Errors
/// A row's prompt cannot be read, or no row has one.
pub fn tasks_of(spec: &str, rows: &[RecordBatch]) -> Result<Vec<Pinned>> {
    let tasks = pinned_tasks(rows)?;
    if tasks.is_empty() {
        return Err(Error::Input {
            stage: "simulate".into(),
            message: format!("--tasks `{spec}` has no rows with a prompt"),
        });
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_come_from_schemas_objects_or_plain_names() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let list = file(
            "a.json",
            r#"[{"type": "function", "function": {"name": "lookup"}}, {"name": "refund"}, "escalate"]"#,
        );
        assert_eq!(
            read_tool_names(&list).unwrap(),
            ["lookup", "refund", "escalate"]
        );
        let wrapped = file("b.json", r#"{"tools": ["x"]}"#);
        assert_eq!(read_tool_names(&wrapped).unwrap(), ["x"]);
        let empty = file("c.json", "[]");
        let err = read_tool_names(&empty).unwrap_err().to_string();
        assert!(err.contains("lists no tools"), "{err}");
        let nameless = file("d.json", "[{}]");
        let err = read_tool_names(&nameless).unwrap_err().to_string();
        assert!(
            err.contains("tool 0 has no `function.name` or `name`"),
            "{err}"
        );
    }

    #[test]
    fn rows_without_a_prompt_give_no_tasks() {
        let rows = crate::pipeline::row::testing::batch_of([
            serde_json::json!({"task_id": "a", "final_text": "x"}),
        ]);
        let err = tasks_of("old.jsonl", &[rows]).unwrap_err().to_string();
        assert!(
            err.contains("--tasks `old.jsonl` has no rows with a prompt"),
            "{err}"
        );
    }
}
