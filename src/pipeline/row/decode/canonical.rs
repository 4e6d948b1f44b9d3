//! JSON compared and written canonically: equality with numbers as numbers, canonical text
//! (sorted keys) for tool-call arguments, and the task id derived from a prompt.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::FieldError;
use super::json::{Json, Members, Node};

/// JSON equality as Python's `==` sees parsed JSON: numbers by value (`1 == 1.0`), objects
/// regardless of key order.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// What a JSON value is, for messages: `null`, `a number`, `an object`, ...
pub fn kind<J: Json>(v: &J) -> &'static str {
    match v.node() {
        Node::Null => "null",
        Node::Bool(_) => "a boolean",
        Node::Number(_) => "a number",
        Node::String(_) => "a string",
        Node::Array(_) => "an array",
        Node::Object(_) => "an object",
    }
}

pub(super) fn expected<J: Json>(field: &str, what: &str, v: &J) -> FieldError {
    FieldError::at(field, format!("expected {what}, found {}", kind(v)))
}

/// `task_` + the first 12 hex digits of SHA-256 of the prompt (the reference's `wai.rows` id).
pub fn prompt_task_id(prompt: &str) -> String {
    let digest = Sha256::digest(prompt.as_bytes());
    let mut out = String::with_capacity(17);
    out.push_str("task_");
    for byte in &digest[..6] {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// Compact JSON text with object keys sorted at every depth: one text per value, whatever order
/// or shape the value arrived in.
pub fn canonical_json<J: Json>(v: &J) -> String {
    let mut out = Vec::new();
    write_canonical(v, &mut out);
    utf8(out)
}

/// Text `serde_json` wrote (always UTF-8).
pub(super) fn utf8(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Appends `v` as `serde_json` writes it, compact. Writing to memory cannot fail, and every value
/// a parser built serializes (its keys are strings, its numbers finite).
pub(super) fn write_json<T: serde::Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(out, v);
}

/// Appends the canonical text of `v` to `out`, written straight into it (no text per key or
/// leaf).
pub(super) fn write_canonical<J: Json>(v: &J, out: &mut Vec<u8>) {
    match v.node() {
        Node::Object(map) => {
            let mut members: Vec<(&str, &J)> = map.members().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(k, out);
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Node::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        _ => write_json(v, out),
    }
}

/// Canonical arguments text. A JSON string holding JSON (the OpenAI wire shape) is parsed first;
/// the second value says whether rendering the text back gives the input unchanged.
pub(super) fn canonical_arguments<J: Json>(v: &J) -> (String, bool) {
    if let Some(s) = v.as_str()
        && let Ok(parsed) = serde_json::from_str::<Value>(s)
        && parsed.is_object()
    {
        return (canonical_json(&parsed), false);
    }
    (canonical_json(v), true)
}
