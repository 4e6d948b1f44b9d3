//! The nested fields: markers, messages and their tool calls, steps, and `tools_used`, each
//! with whether the column alone gives it back exactly.

use super::canonical::{canonical_arguments, expected};
use super::json::{Json, Members, Node};
use super::{FieldError, Res};
use crate::pipeline::row::{Message, Step, ToolCall};

/// Marker names and their values.
type Markers = Vec<(String, Option<f64>)>;

pub(super) fn markers<J: Json>(v: &J) -> Res<(Markers, bool)> {
    let Node::Object(map) = v.node() else {
        return Err(expected("markers", "an object of numbers", v));
    };
    let mut faithful = true;
    let mut out = Vec::with_capacity(map.count());
    for (name, value) in map.members() {
        let parsed = match value.node() {
            Node::Null => None,
            Node::Number(n) => n.as_f64(),
            Node::Bool(b) => {
                faithful = false;
                Some(if b { 1.0 } else { 0.0 })
            }
            Node::String(s) => {
                faithful = false;
                Some(s.trim().parse::<f64>().map_err(|_| {
                    FieldError::at(format!("markers.{name}"), format!("`{s}` is not a number"))
                })?)
            }
            _ => {
                return Err(expected(
                    &format!("markers.{name}"),
                    "a number or null",
                    value,
                ));
            }
        };
        out.push((name.to_owned(), parsed));
    }
    Ok((out, faithful))
}

/// Reads a nested field that must be text when it is there: a string, or null (kept in `extra`);
/// a number, a boolean, an array or an object is a bad row naming the field.
pub(super) fn text_field<J: Json>(
    field: &dyn Fn() -> String,
    v: &J,
    faithful: &mut bool,
) -> Res<Option<String>> {
    match v.node() {
        Node::String(s) => Ok(Some(s.to_owned())),
        Node::Null => {
            *faithful = false;
            Ok(None)
        }
        _ => Err(expected(&field(), "a string", v)),
    }
}

/// Checks tool-call arguments: an object, a JSON string (the wire shape), an array (what a model
/// wrote as positional arguments, kept so the export gate can name it), or null. A bare number
/// or boolean is no arguments at all.
pub(super) fn arguments_shape<J: Json>(field: &dyn Fn() -> String, v: &J) -> Res<()> {
    match v.node() {
        Node::Number(_) | Node::Bool(_) => Err(expected(
            &field(),
            "an object of arguments or a JSON string",
            v,
        )),
        _ => Ok(()),
    }
}

/// Reads one string field of a nested object; anything but a string makes the parent unfaithful.
pub(super) fn soft_string<J: Json>(v: &J, faithful: &mut bool) -> Option<String> {
    if let Node::String(s) = v.node() {
        Some(s.to_owned())
    } else {
        *faithful = false;
        None
    }
}

pub(super) fn tool_call<J: Json>(at: &str, v: &J, faithful: &mut bool) -> Res<ToolCall> {
    let Node::Object(map) = v.node() else {
        *faithful = false;
        return Ok(ToolCall::default());
    };
    let mut call = ToolCall::default();
    let (mut wire, mut typed) = (false, false);
    for (k, value) in map.members() {
        match k {
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
                let Node::Object(f) = value.node() else {
                    *faithful = false;
                    continue;
                };
                for (fk, fv) in f.members() {
                    match (fk, fv.node()) {
                        ("name", Node::String(name)) => call.name = Some(name.to_owned()),
                        ("name", other) if !matches!(other, Node::Null) => {
                            return Err(expected(&format!("{at}.function.name"), "a string", fv));
                        }
                        ("arguments", args) => {
                            arguments_shape(&|| format!("{at}.function.arguments"), fv)?;
                            call.arguments = Some(canonical_arguments(fv).0);
                            match args {
                                Node::String(text) => call.arguments_text = Some(text.to_owned()),
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
pub fn content_of<J: Json>(content: &J) -> Option<String> {
    match content.node() {
        Node::String(s) => Some(s.to_owned()),
        Node::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| match p.node() {
                    Node::String(s) => Some(s),
                    Node::Object(o) => o
                        .member("text")
                        .or_else(|| o.member("content"))
                        .and_then(Json::as_str),
                    _ => None,
                })
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

pub(super) fn content_text<J: Json>(v: &J, faithful: &mut bool) -> Option<String> {
    match v.node() {
        Node::String(s) => Some(s.to_owned()),
        Node::Array(_) => {
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

pub(super) fn messages<J: Json>(v: &J) -> Res<(Vec<Message>, bool)> {
    let Node::Array(items) = v.node() else {
        return Err(expected("messages", "an array of messages", v));
    };
    let mut faithful = true;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Node::Object(map) = item.node() else {
            return Err(expected(&format!("messages[{i}]"), "an object", item));
        };
        let mut m = Message::default();
        let mut null_content = false;
        for (k, value) in map.members() {
            let field = || format!("messages[{i}].{k}");
            match k {
                "role" => m.role = text_field(&field, value, &mut faithful)?,
                "content" if value.is_null() => null_content = true,
                "content" => m.content = content_text(value, &mut faithful),
                "name" => m.name = soft_string(value, &mut faithful),
                "tool_call_id" => m.tool_call_id = soft_string(value, &mut faithful),
                "tool_calls" => match value.node() {
                    Node::Array(calls) => {
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

pub(super) fn steps<J: Json>(v: &J) -> Res<(Vec<Step>, bool)> {
    let Node::Array(items) = v.node() else {
        return Err(expected("steps", "an array of steps", v));
    };
    let mut faithful = true;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Node::Object(map) = item.node() else {
            return Err(expected(&format!("steps[{i}]"), "an object", item));
        };
        let mut s = Step::default();
        for (k, value) in map.members() {
            let field = || format!("steps[{i}].{k}");
            match k {
                "tool" => s.tool = text_field(&field, value, &mut faithful)?,
                "arguments" => {
                    arguments_shape(&field, value)?;
                    let (text, same) = canonical_arguments(value);
                    faithful &= same;
                    s.arguments = Some(text);
                }
                "result" => s.result = Some(value.text()),
                "text" => s.text = soft_string(value, &mut faithful),
                "user" => s.user = soft_string(value, &mut faithful),
                "truncated" => match value.node() {
                    Node::Bool(b) => s.truncated = Some(b),
                    _ => faithful = false,
                },
                "logprob" => match value.node() {
                    Node::Number(n) => s.logprob = n.as_f64(),
                    Node::Null => faithful = false,
                    _ => return Err(expected(&field(), "a number", value)),
                },
                "n_tokens" => match value.node() {
                    Node::Number(n) => {
                        s.n_tokens = Some(
                            n.as_i64()
                                .ok_or_else(|| expected(&field(), "an integer", value))?,
                        );
                    }
                    Node::Null => faithful = false,
                    _ => return Err(expected(&field(), "an integer", value)),
                },
                _ => faithful = false,
            }
        }
        out.push(s);
    }
    Ok((out, faithful))
}

pub(super) fn tools_used<J: Json>(v: &J) -> Res<Vec<String>> {
    let Node::Array(items) = v.node() else {
        return Err(expected("tools_used", "an array of strings", v));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item.node() {
            Node::String(s) => Ok(s.to_owned()),
            _ => Err(expected(&format!("tools_used[{i}]"), "a string", item)),
        })
        .collect()
}
