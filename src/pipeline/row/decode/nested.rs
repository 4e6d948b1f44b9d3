//! The nested fields: markers, messages and their tool calls, steps, and `tools_used`, each
//! with whether the column alone gives it back exactly.

use serde_json::Value;

use super::canonical::{canonical_arguments, expected};
use super::{FieldError, Res};
use crate::pipeline::row::{Message, Step, ToolCall};

/// Marker names and their values.
type Markers = Vec<(String, Option<f64>)>;

pub(super) fn markers(v: &Value) -> Res<(Markers, bool)> {
    let Value::Object(map) = v else {
        return Err(expected("markers", "an object of numbers", v));
    };
    let mut faithful = true;
    let mut out = Vec::with_capacity(map.len());
    for (name, value) in map {
        let parsed = match value {
            Value::Null => None,
            Value::Number(n) => n.as_f64(),
            Value::Bool(b) => {
                faithful = false;
                Some(if *b { 1.0 } else { 0.0 })
            }
            Value::String(s) => {
                faithful = false;
                Some(s.trim().parse::<f64>().map_err(|_| {
                    FieldError::at(format!("markers.{name}"), format!("`{s}` is not a number"))
                })?)
            }
            other => {
                return Err(expected(
                    &format!("markers.{name}"),
                    "a number or null",
                    other,
                ));
            }
        };
        out.push((name.clone(), parsed));
    }
    Ok((out, faithful))
}

/// Reads a nested field that must be text when it is there: a string, or null (kept in `extra`);
/// a number, a boolean, an array or an object is a bad row naming the field.
pub(super) fn text_field(
    field: &dyn Fn() -> String,
    v: &Value,
    faithful: &mut bool,
) -> Res<Option<String>> {
    match v {
        Value::String(s) => Ok(Some(s.clone())),
        Value::Null => {
            *faithful = false;
            Ok(None)
        }
        other => Err(expected(&field(), "a string", other)),
    }
}

/// Checks tool-call arguments: an object, a JSON string (the wire shape), an array (what a model
/// wrote as positional arguments, kept so the export gate can name it), or null. A bare number
/// or boolean is no arguments at all.
pub(super) fn arguments_shape(field: &dyn Fn() -> String, v: &Value) -> Res<()> {
    match v {
        Value::Number(_) | Value::Bool(_) => Err(expected(
            &field(),
            "an object of arguments or a JSON string",
            v,
        )),
        _ => Ok(()),
    }
}

/// Reads one string field of a nested object; anything but a string makes the parent unfaithful.
pub(super) fn soft_string(v: &Value, faithful: &mut bool) -> Option<String> {
    if let Value::String(s) = v {
        Some(s.clone())
    } else {
        *faithful = false;
        None
    }
}

pub(super) fn tool_call(at: &str, v: &Value, faithful: &mut bool) -> Res<ToolCall> {
    let Value::Object(map) = v else {
        *faithful = false;
        return Ok(ToolCall::default());
    };
    let mut call = ToolCall::default();
    let (mut wire, mut typed) = (false, false);
    for (k, value) in map {
        match k.as_str() {
            "id" => call.id = soft_string(value, faithful),
            "name" => call.name = text_field(&|| format!("{at}.name"), value, faithful)?,
            "arguments" => {
                arguments_shape(&|| format!("{at}.arguments"), value)?;
                let (text, same) = canonical_arguments(value);
                *faithful &= same;
                call.arguments = Some(text);
            }
            "type" => {
                typed = true;
                *faithful &= value.as_str() == Some("function");
            }
            "function" => {
                // The OpenAI wire shape: {id, type, function: {name, arguments}}. Its arguments
                // string is kept as written beside the canonical text; any other shape of
                // `function` stays whole in `extra`.
                wire = true;
                let Value::Object(f) = value else {
                    *faithful = false;
                    continue;
                };
                for (fk, fv) in f {
                    match (fk.as_str(), fv) {
                        ("name", Value::String(name)) => call.name = Some(name.clone()),
                        ("name", other) if !other.is_null() => {
                            return Err(expected(
                                &format!("{at}.function.name"),
                                "a string",
                                other,
                            ));
                        }
                        ("arguments", args) => {
                            arguments_shape(&|| format!("{at}.function.arguments"), args)?;
                            call.arguments = Some(canonical_arguments(args).0);
                            match args {
                                Value::String(text) => call.arguments_text = Some(text.clone()),
                                _ => *faithful = false,
                            }
                        }
                        _ => *faithful = false,
                    }
                }
            }
            _ => *faithful = false,
        }
    }
    // The way back picks the wire shape from `arguments_text`: a wire call without `type`, or
    // a flat call with it, would come back in the other shape.
    if wire != typed || (wire && (call.name.is_none() || call.arguments_text.is_none())) {
        *faithful = false;
    }
    Ok(call)
}

/// The text of a message's content: a string, or its text parts (strings, or objects with a
/// `text` or `content` string) joined by newlines; `None` for anything else or no text part.
pub fn content_of(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| match p {
                    Value::String(s) => Some(s.as_str()),
                    Value::Object(o) => o
                        .get("text")
                        .or_else(|| o.get("content"))
                        .and_then(Value::as_str),
                    _ => None,
                })
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

pub(super) fn content_text(v: &Value, faithful: &mut bool) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(_) => {
            // Content parts: keep the text parts, joined; the original stays in `extra`.
            *faithful = false;
            Some(content_of(v).unwrap_or_default())
        }
        _ => {
            *faithful = false;
            None
        }
    }
}

pub(super) fn messages(v: &Value) -> Res<(Vec<Message>, bool)> {
    let Value::Array(items) = v else {
        return Err(expected("messages", "an array of messages", v));
    };
    let mut faithful = true;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(expected(&format!("messages[{i}]"), "an object", item));
        };
        let mut m = Message::default();
        let mut null_content = false;
        for (k, value) in map {
            let field = || format!("messages[{i}].{k}");
            match k.as_str() {
                "role" => m.role = text_field(&field, value, &mut faithful)?,
                "content" if value.is_null() => null_content = true,
                "content" => m.content = content_text(value, &mut faithful),
                "name" => m.name = soft_string(value, &mut faithful),
                "tool_call_id" => m.tool_call_id = soft_string(value, &mut faithful),
                "tool_calls" => match value {
                    Value::Array(calls) => {
                        m.tool_calls = Some(
                            calls
                                .iter()
                                .enumerate()
                                .map(|(c, call)| {
                                    tool_call(
                                        &format!("messages[{i}].tool_calls[{c}]"),
                                        call,
                                        &mut faithful,
                                    )
                                })
                                .collect::<Res<_>>()?,
                        );
                    }
                    _ => faithful = false,
                },
                _ => faithful = false,
            }
        }
        // The way back writes `content: null` on a message with tool calls and no text (the
        // OpenAI convention), and only there.
        faithful &= null_content == (m.tool_calls.is_some() && m.content.is_none());
        out.push(m);
    }
    Ok((out, faithful))
}

pub(super) fn steps(v: &Value) -> Res<(Vec<Step>, bool)> {
    let Value::Array(items) = v else {
        return Err(expected("steps", "an array of steps", v));
    };
    let mut faithful = true;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(expected(&format!("steps[{i}]"), "an object", item));
        };
        let mut s = Step::default();
        for (k, value) in map {
            let field = || format!("steps[{i}].{k}");
            match k.as_str() {
                "tool" => s.tool = text_field(&field, value, &mut faithful)?,
                "arguments" => {
                    arguments_shape(&field, value)?;
                    let (text, same) = canonical_arguments(value);
                    faithful &= same;
                    s.arguments = Some(text);
                }
                "result" => s.result = Some(value.to_string()),
                "text" => s.text = soft_string(value, &mut faithful),
                "user" => s.user = soft_string(value, &mut faithful),
                "truncated" => match value {
                    Value::Bool(b) => s.truncated = Some(*b),
                    _ => faithful = false,
                },
                "logprob" => match value {
                    Value::Number(n) => s.logprob = n.as_f64(),
                    Value::Null => faithful = false,
                    other => return Err(expected(&field(), "a number", other)),
                },
                "n_tokens" => match value {
                    Value::Number(n) => {
                        s.n_tokens = Some(
                            n.as_i64()
                                .ok_or_else(|| expected(&field(), "an integer", value))?,
                        );
                    }
                    Value::Null => faithful = false,
                    other => return Err(expected(&field(), "an integer", other)),
                },
                _ => faithful = false,
            }
        }
        out.push(s);
    }
    Ok((out, faithful))
}

pub(super) fn tools_used(v: &Value) -> Res<Vec<String>> {
    let Value::Array(items) = v else {
        return Err(expected("tools_used", "an array of strings", v));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(s.clone()),
            other => Err(expected(&format!("tools_used[{i}]"), "a string", other)),
        })
        .collect()
}
