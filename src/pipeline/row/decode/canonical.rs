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
    let mut out = Vec::with_capacity(128);
    write_canonical(v, &mut out);
    utf8(out)
}

/// Text `serde_json` wrote (always UTF-8).
pub(super) fn utf8(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Appends `v` as `serde_json` writes it, compact. Writing to memory cannot fail, and every value
/// a parser built serializes (its keys are strings, its numbers finite).
fn write_json<T: serde::Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(out, v);
}

/// Appends `v` as compact JSON text, the bytes `serde_json` writes for it: members in their
/// order, strings through [`write_str`]. Written here, not by `serde_json`'s serializer, whose
/// byte-at-a-time string loop was most of the cost of writing row values back.
pub(super) fn write_text<J: Json>(v: &J, out: &mut Vec<u8>) {
    write_value(v, false, out);
}

/// [`write_text`], or with every object's members sorted by key (`sorted`: the canonical text).
fn write_value<J: Json>(v: &J, sorted: bool, out: &mut Vec<u8>) {
    match v.node() {
        Node::Null => out.extend_from_slice(b"null"),
        Node::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        Node::Number(n) => write_json(&n, out),
        Node::String(s) => write_str(s, out),
        Node::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, sorted, out);
            }
            out.push(b']');
        }
        Node::Object(map) if sorted => {
            let mut members: Vec<(&str, &J)> = map.members().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            write_object(members, sorted, out);
        }
        Node::Object(map) => write_object(map.members(), sorted, out),
    }
}

/// Appends an object of these members, in this order (each value as [`write_value`] with
/// `sorted`).
pub(super) fn write_object<'a, J: Json + 'a>(
    members: impl IntoIterator<Item = (&'a str, &'a J)>,
    sorted: bool,
    out: &mut Vec<u8>,
) {
    out.push(b'{');
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(k, out);
        out.push(b':');
        write_value(v, sorted, out);
    }
    out.push(b'}');
}

/// Appends `s` as a JSON string, as `serde_json` writes it: copied whole between quotes when
/// nothing in it needs an escape (nearly every string of row text), else by the export's writer.
pub(super) fn write_str(s: &str, out: &mut Vec<u8>) {
    use crate::stages::json_string::{needs_no_escape, push_json_string};
    if needs_no_escape(s) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        push_json_string(out, s);
    }
}

/// Appends the canonical text of `v` to `out`, written straight into it (no text per key or
/// leaf).
pub(super) fn write_canonical<J: Json>(v: &J, out: &mut Vec<u8>) {
    write_value(v, true, out);
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::super::json::plain;
    use super::super::json::tests::any_value;
    use super::write_text;

    /// Checks one value: `write_text` of it, as `serde_json`'s value and as the fast parser's
    /// (where it reads the text as `serde_json` does: not a float of 2^63 or more in size, nor a
    /// `-0.0`, which it reads as `0.0`; such texts go to `serde_json`), against `serde_json`'s
    /// serializer. Returns whether the fast parser's
    /// value was checked.
    fn check(v: &Value) -> Result<bool, TestCaseError> {
        let want = serde_json::to_string(v).expect("JSON");
        let mut from_serde = Vec::new();
        write_text(v, &mut from_serde);
        prop_assert_eq!(String::from_utf8(from_serde).expect("UTF-8"), want.clone());
        let sonic: sonic_rs::Value = sonic_rs::from_str(&want).expect("JSON");
        if !plain(&sonic, want.as_bytes()) {
            return Ok(false);
        }
        let mut from_sonic = Vec::new();
        write_text(&sonic, &mut from_sonic);
        prop_assert_eq!(String::from_utf8(from_sonic).expect("UTF-8"), want);
        Ok(true)
    }

    #[test]
    fn text_is_what_serde_json_writes_from_either_parser() {
        // Values the fast parser reads otherwise, wherever they sit, are left to serde_json.
        for v in [json!(-0.0), json!([-0.0]), json!({"a": -0.0}), json!(1e300)] {
            assert!(!check(&v).expect("written as serde_json writes it"), "{v}");
        }
        assert!(check(&json!([0.0, "x\n", {"k": 1}])).expect("written as serde_json writes it"));
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(512));
        let fast = std::cell::Cell::new(0);
        runner
            .run(&any_value(), |v| {
                fast.set(fast.get() + usize::from(check(&v)?));
                Ok(())
            })
            .expect("every value written as serde_json writes it");
        // Not vacuous: most texts are ones the fast parser takes.
        assert!(
            fast.get() > 256,
            "{} of 512 from the fast parser",
            fast.get()
        );
    }
}
