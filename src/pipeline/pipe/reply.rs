//! Reading a worker's line: a JSON object (Python's bare `NaN` and `Infinity` read as text),
//! and a reply's `id`.

use serde_json::{Map, Value};

/// `text` as a JSON object, if it is one.
pub(crate) fn parse_object(text: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(obj)) => Some(obj),
        // Python's `json.dumps` writes NaN and Infinity bare: the line is a reply all the same,
        // read with those as text, so the verdict is `invalid_result` at once rather than the
        // row waiting out its timeout.
        Err(_) => match serde_json::from_str::<Value>(&quote_non_numbers(text)?) {
            Ok(Value::Object(obj)) => Some(obj),
            _ => None,
        },
        _ => None,
    }
}

/// `text` with the bare `NaN`, `Infinity` and `-Infinity` outside strings quoted, or `None`
/// when it holds none.
fn quote_non_numbers(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 8);
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        let word = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|w| rest.starts_with(w));
        if let Some(w) = word {
            out.push('"');
            out.push_str(w);
            out.push('"');
            rest = &rest[w.len()..];
            changed = true;
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    changed.then_some(out)
}

/// Reads a reply: its `id` and the rest.
pub(crate) fn reply(mut obj: Map<String, Value>) -> Option<(u64, Map<String, Value>)> {
    let id = obj.shift_remove("id")?.as_u64()?;
    Some((id, obj))
}

#[cfg(test)]
mod tests {
    #[test]
    fn bare_non_numbers_are_quoted_outside_strings_only() {
        assert_eq!(
            super::quote_non_numbers(
                r#"{"id": 1, "reward": NaN, "x": -Infinity, "r": "NaN \" Infinity"}"#
            )
            .as_deref(),
            Some(r#"{"id": 1, "reward": "NaN", "x": "-Infinity", "r": "NaN \" Infinity"}"#)
        );
        assert_eq!(
            super::quote_non_numbers(r#"{"id": 1, "reason": "NaN"}"#),
            None
        );
        let obj = super::parse_object(r#"{"id": 3, "reward": NaN}"#).expect("read as a reply");
        assert_eq!(obj["reward"], "NaN");
    }
}
