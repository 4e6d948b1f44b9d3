//! JSON object → [`Record`].

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{Message, Record, Step, ToolCall};
use crate::schema::SCHEMA_VERSION;

/// The conversation labels the reference carries as top-level keys; they feed `dims`.
pub const AXES: [&str; 15] = [
    "tier",
    "ask_family",
    "intent_known",
    "tool_known",
    "stance",
    "tone",
    "length",
    "ask",
    "vagueness",
    "phrasing",
    "pressure",
    "user",
    "texture",
    "history",
    "world_state",
];

/// Why one record could not be read: the field (dotted path) and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The field, e.g. `steps[1].n_tokens`; `None` when the record as a whole is wrong.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    fn at(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    fn whole(message: impl Into<String>) -> Self {
        Self {
            field: None,
            message: message.into(),
        }
    }
}

type Res<T> = Result<T, FieldError>;

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
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn expected(field: &str, what: &str, v: &Value) -> FieldError {
    FieldError::at(field, format!("expected {what}, found {}", kind(v)))
}

/// `task_` + the first 12 hex digits of SHA-256 of the prompt (the reference's `wai.rows` id).
pub fn prompt_task_id(prompt: &str) -> String {
    let digest = Sha256::digest(prompt.as_bytes());
    let mut out = String::with_capacity(17);
    out.push_str("task_");
    for byte in &digest[..6] {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// Compact JSON text with object keys sorted at every depth: one text per value, whatever order
/// or shape the value arrived in.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Canonical arguments text. A JSON string holding JSON (the OpenAI wire shape) is parsed first;
/// the second value says whether rendering the text back gives the input unchanged.
fn canonical_arguments(v: &Value) -> (String, bool) {
    if let Value::String(s) = v
        && let Ok(parsed) = serde_json::from_str::<Value>(s)
        && parsed.is_object()
    {
        return (canonical_json(&parsed), false);
    }
    (canonical_json(v), true)
}

/// A grouping key: null and `""` fall through to the next source; numbers are ids as text (the
/// reference also lets `0` fall through, which merges task 0 of a benchmark with prompt-less rows).
fn key_text(field: &str, v: &Value) -> Res<Option<String>> {
    Ok(match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        other => return Err(expected(field, "a string or a number", other)),
    })
}

fn string(field: &str, v: &Value) -> Res<Option<String>> {
    match v {
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(expected(field, "a string", other)),
    }
}

fn number(field: &str, v: &Value) -> Res<Option<f64>> {
    match v {
        Value::Number(n) => Ok(n.as_f64()),
        other => Err(expected(field, "a number or null", other)),
    }
}

fn int32(field: &str, v: &Value) -> Res<Option<i32>> {
    match v.as_i64() {
        Some(i) => i32::try_from(i)
            .map(Some)
            .map_err(|_| FieldError::at(field, format!("{i} is out of range"))),
        None => Err(expected(field, "an integer", v)),
    }
}

/// A value for a `Map<Utf8, Utf8>` dimension: strings as they are, scalars as JSON text.
fn dim_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn set_dim(dims: &mut Vec<(String, String)>, key: &str, value: String) {
    match dims.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => dims.push((key.to_owned(), value)),
    }
}

/// A reward is 0 or 1, or a partial score in [0, 1] (the judge contract).
fn check_share(field: &str, v: Option<f64>) -> Res<()> {
    match v {
        Some(x) if !(0.0..=1.0).contains(&x) => Err(FieldError::at(
            field,
            format!("{x} is outside [0, 1]: a reward is 0 or 1, or a partial score in [0, 1]"),
        )),
        _ => Ok(()),
    }
}

/// `dims` as a row's fields give it: the conversation axes (top-level keys), overridden by
/// `scenario_dimensions`, overridden by an explicit `dims` object. `None` when there are none.
pub fn derive_dims(obj: &Map<String, Value>) -> Option<Vec<(String, String)>> {
    let mut dims: Vec<(String, String)> = Vec::new();
    for (k, v) in obj {
        if AXES.contains(&k.as_str())
            && let Some(text) = dim_text(v)
        {
            dims.push((k.clone(), text));
        }
    }
    for source in ["scenario_dimensions", "dims"] {
        if let Some(Value::Object(map)) = obj.get(source) {
            for (k, v) in map {
                if let Some(text) = dim_text(v) {
                    set_dim(&mut dims, k, text);
                }
            }
        }
    }
    (!dims.is_empty()).then_some(dims)
}

/// `eval_run` as a row's fields give it: the top-level key, else `lineage.eval_run`, else 0.
pub fn derive_eval_run(obj: &Map<String, Value>) -> i32 {
    let from = |v: Option<&Value>| {
        v.and_then(Value::as_i64)
            .and_then(|i| i32::try_from(i).ok())
    };
    from(obj.get("eval_run"))
        .or_else(|| from(obj.get("lineage").and_then(|l| l.get("eval_run"))))
        .unwrap_or(0)
}

fn markers(v: &Value) -> Res<(Vec<(String, Option<f64>)>, bool)> {
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
fn text_field(field: &dyn Fn() -> String, v: &Value, faithful: &mut bool) -> Res<Option<String>> {
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
fn arguments_shape(field: &dyn Fn() -> String, v: &Value) -> Res<()> {
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
fn soft_string(v: &Value, faithful: &mut bool) -> Option<String> {
    if let Value::String(s) = v {
        Some(s.clone())
    } else {
        *faithful = false;
        None
    }
}

fn tool_call(at: &str, v: &Value, faithful: &mut bool) -> Res<ToolCall> {
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

fn content_text(v: &Value, faithful: &mut bool) -> Option<String> {
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

fn messages(v: &Value) -> Res<(Vec<Message>, bool)> {
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

fn steps(v: &Value) -> Res<(Vec<Step>, bool)> {
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

fn tools_used(v: &Value) -> Res<Vec<String>> {
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

/// Decodes one JSON row. `rollout_id` stays `None` when the row has none: the reader derives it
/// from the rows seen before.
pub fn decode(value: Value) -> Res<Record> {
    let Value::Object(obj) = value else {
        return Err(FieldError::whole(format!(
            "expected a JSON object, found {}",
            kind(&value)
        )));
    };
    if obj.is_empty() {
        return Err(FieldError::whole("empty row"));
    }
    let mut r = Record::default();
    let mut extra = Map::new();
    let mut scenario_key = None;
    let mut task_key = None;
    let mut given_task_id: Option<Value> = None;
    let mut stamped = false;
    for key in ["dims", "scenario_dimensions"] {
        if let Some(v) = obj.get(key).filter(|v| !v.is_null() && !v.is_object()) {
            return Err(expected(key, "an object of dimension names to values", v));
        }
    }
    let dims = derive_dims(&obj);
    let eval_run = derive_eval_run(&obj);

    for (k, v) in obj {
        // Each arm either moves the value into a column (faithfully) or leaves it for `extra`.
        let keep: bool = match k.as_str() {
            "task_id" => {
                task_key = key_text("task_id", &v)?;
                given_task_id = Some(v);
                continue;
            }
            "scenario_id" => {
                scenario_key = key_text("scenario_id", &v)?;
                true
            }
            "schema_version" => {
                match &v {
                    Value::String(s) if s == SCHEMA_VERSION => stamped = true,
                    Value::String(s) if s == "0" => {}
                    other => {
                        return Err(FieldError::at(
                            "schema_version",
                            format!("unknown schema version {other}; known: \"0\", \"1\""),
                        ));
                    }
                }
                true
            }
            "eval_run" => {
                if !v.is_null() {
                    int32("eval_run", &v)?;
                }
                true
            }
            _ if v.is_null() => {
                // An explicit null comes back as an explicit null, from `extra`.
                true
            }
            "rollout_id" => {
                r.rollout_id = key_text("rollout_id", &v)?;
                !matches!(v, Value::String(_))
            }
            "rollout_index" => {
                r.rollout_index = int32("rollout_index", &v)?;
                false
            }
            "prompt" => {
                r.prompt = string("prompt", &v)?;
                false
            }
            "final_text" => {
                r.final_text = string("final_text", &v)?;
                false
            }
            "finish_reason" => {
                r.finish_reason = string("finish_reason", &v)?;
                false
            }
            "reason" => {
                r.reason = string("reason", &v)?;
                false
            }
            "judge_name" => {
                r.judge_name = string("judge_name", &v)?;
                false
            }
            "judge_status" => {
                r.judge_status = string("judge_status", &v)?;
                false
            }
            "gold_kind" => {
                r.gold_kind = string("gold_kind", &v)?;
                false
            }
            "category" => {
                r.category = string("category", &v)?;
                false
            }
            "model_version" => {
                r.model_version = string("model_version", &v)?;
                false
            }
            "policy_version" => {
                r.policy_version = string("policy_version", &v)?;
                false
            }
            "writer_model" => {
                r.writer_model = string("writer_model", &v)?;
                false
            }
            "user_model" => {
                r.user_model = string("user_model", &v)?;
                false
            }
            "reward" => {
                if v.is_boolean() {
                    return Err(FieldError::at(
                        "reward",
                        "expected a number or null, found a boolean (write 1 or 0)",
                    ));
                }
                r.reward = number("reward", &v)?;
                check_share("reward", r.reward)?;
                false
            }
            "gold_reward" => {
                if v.is_boolean() {
                    return Err(FieldError::at(
                        "gold_reward",
                        "expected a number or null, found a boolean (write 1 or 0)",
                    ));
                }
                r.gold_reward = number("gold_reward", &v)?;
                check_share("gold_reward", r.gold_reward)?;
                false
            }
            "markers" => {
                let (m, faithful) = markers(&v)?;
                r.markers = Some(m);
                !faithful
            }
            "messages" => {
                let (m, faithful) = messages(&v)?;
                r.messages = Some(m);
                !faithful
            }
            "steps" => {
                let (s, faithful) = steps(&v)?;
                r.steps = Some(s);
                !faithful
            }
            "tools_used" => {
                r.tools_used = Some(tools_used(&v)?);
                false
            }
            "privileged" => {
                r.privileged = Some(v.to_string());
                false
            }
            "judge_meta" => {
                r.judge_meta = Some(v.to_string());
                false
            }
            "lineage" => {
                r.lineage = Some(v.to_string());
                false
            }
            "sampling" => {
                r.sampling = Some(v.to_string());
                false
            }
            _ => true,
        };
        if keep {
            extra.insert(k, v);
        }
    }

    if stamped {
        for (field, present) in [
            ("prompt", r.prompt.is_some() || extra.contains_key("prompt")),
            ("steps", r.steps.is_some() || extra.contains_key("steps")),
            (
                "final_text",
                r.final_text.is_some() || extra.contains_key("final_text"),
            ),
        ] {
            if !present {
                return Err(FieldError::at(
                    field,
                    "missing (required on schema_version \"1\" rows)",
                ));
            }
        }
    }

    if r.prompt.is_none() {
        r.prompt = r.messages.as_ref().and_then(|ms| {
            ms.iter()
                .find(|m| m.role.as_deref() == Some("user"))
                .and_then(|m| m.content.clone())
        });
    }
    if r.tools_used.is_none() {
        r.tools_used = r
            .steps
            .as_ref()
            .map(|steps| steps.iter().filter_map(|s| s.tool.clone()).collect());
    }

    r.task_id = match (scenario_key, task_key, r.prompt.as_deref()) {
        (Some(s), _, _) => s,
        (None, Some(t), _) => t,
        (None, None, Some(p)) if !p.is_empty() => prompt_task_id(p),
        _ => {
            return Err(FieldError::at(
                "prompt",
                "missing: a row needs `scenario_id`, `task_id` or `prompt` to be grouped by task",
            ));
        }
    };
    if let Some(given) = given_task_id
        && given.as_str() != Some(r.task_id.as_str())
    {
        extra.insert("task_id".to_owned(), given);
    }

    r.eval_run = Some(eval_run);
    r.dims = dims;
    r.extra = (!extra.is_empty()).then(|| Value::Object(extra).to_string());
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn task_key_follows_scenario_then_task_then_prompt() {
        let r = decode(json!({"scenario_id": "s1", "task_id": "t1", "prompt": "p"})).unwrap();
        assert_eq!(r.task_id, "s1");
        // The differing task_id is kept so it comes back.
        assert_eq!(
            r.extra.as_deref(),
            Some(r#"{"scenario_id":"s1","task_id":"t1"}"#)
        );
        let r = decode(json!({"scenario_id": "", "task_id": "t1", "prompt": "p"})).unwrap();
        assert_eq!(r.task_id, "t1");
        assert_eq!(r.extra.as_deref(), Some(r#"{"scenario_id":""}"#));
        let r = decode(json!({"prompt": "What is 2 + 3?"})).unwrap();
        assert_eq!(r.task_id, "task_1ea26256ebae");
    }

    #[test]
    fn arguments_are_canonical_whatever_their_shape() {
        let as_string = decode(json!({"prompt": "p", "steps": [
            {"tool": "t", "arguments": "{\"b\": 1, \"a\": \"x\"}", "result": "ok"}]}))
        .unwrap();
        let as_object = decode(json!({"prompt": "p", "steps": [
            {"tool": "t", "arguments": {"a": "x", "b": 1}, "result": "ok"}]}))
        .unwrap();
        let flat_call = decode(json!({"prompt": "p", "messages": [{"role": "assistant",
            "tool_calls": [{"function": {"name": "t", "arguments": "{\"a\":\"x\",\"b\":1}"}}]}]}))
        .unwrap();
        let want = r#"{"a":"x","b":1}"#;
        assert_eq!(as_string.steps.unwrap()[0].arguments.as_deref(), Some(want));
        assert_eq!(as_object.steps.unwrap()[0].arguments.as_deref(), Some(want));
        let msgs = flat_call.messages.unwrap();
        let call = &msgs[0].tool_calls.as_ref().unwrap()[0];
        assert_eq!(call.arguments.as_deref(), Some(want));
        assert_eq!(call.name.as_deref(), Some("t"));
        // The string and nested shapes are kept verbatim for the way back.
        assert!(as_string.extra.unwrap().contains("\"steps\""));
        assert!(flat_call.extra.unwrap().contains("\"messages\""));
        assert!(as_object.extra.is_none());
    }

    #[test]
    fn only_the_exact_wire_shape_is_kept_in_columns_alone() {
        let call = |c: Value| {
            decode(json!({"prompt": "p", "messages": [
                {"role": "assistant", "content": null, "tool_calls": [c]}]}))
            .unwrap()
        };
        let wire = call(json!({"id": "c", "type": "function",
            "function": {"name": "t", "arguments": "{\"b\": 1, \"a\": 2}"}}));
        assert!(wire.extra.is_none());
        let c = &wire.messages.unwrap()[0].tool_calls.clone().unwrap()[0];
        assert_eq!(c.arguments.as_deref(), Some(r#"{"a":2,"b":1}"#));
        assert_eq!(c.arguments_text.as_deref(), Some(r#"{"b": 1, "a": 2}"#));
        for odd in [
            json!({"type": "custom", "function": {"name": "t", "arguments": "{}"}}),
            json!({"type": "function", "name": "t", "arguments": {}}),
            json!({"type": "function", "function": {"name": "t", "arguments": {}}}),
            json!({"type": "function", "function": {"name": "t", "arguments": "{}", "x": 1}}),
            json!({"type": "function", "function": {"arguments": "{}"}}),
        ] {
            assert!(
                call(odd.clone()).extra.is_some(),
                "{odd} must stay whole in extra"
            );
        }
        // `content: null` comes back beside tool calls only; missing content beside them would
        // come back as null.
        let missing = decode(json!({"prompt": "p", "messages": [{"role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}]}))
        .unwrap();
        assert!(missing.extra.is_some());
        let null_alone =
            decode(json!({"prompt": "p", "messages": [{"role": "user", "content": null}]}))
                .unwrap();
        assert!(null_alone.extra.is_some());
    }

    #[test]
    fn wrong_types_name_the_field() {
        let e = decode(json!({"prompt": "p", "reward": "1"})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("reward"));
        let e = decode(json!({"prompt": "p", "reward": true})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("reward"));
        let e =
            decode(json!({"prompt": "p", "steps": [{"tool": "t", "n_tokens": "x"}]})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("steps[0].n_tokens"));
        let e = decode(json!({"schema_version": "1", "prompt": "p", "steps": []})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("final_text"));
        let e = decode(json!({"final_text": "x"})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("prompt"));
        let e = decode(json!([1])).unwrap_err();
        assert_eq!(e.field, None);
    }

    #[test]
    fn dims_gather_axes_and_scenario_dimensions() {
        let r = decode(
            json!({"prompt": "p", "tier": "ordinary", "intent_known": true,
            "scenario_dimensions": {"tool": "lookup_order", "tier": "hard"}}),
        )
        .unwrap();
        assert_eq!(
            r.dims.unwrap(),
            vec![
                ("tier".to_owned(), "hard".to_owned()),
                ("intent_known".to_owned(), "true".to_owned()),
                ("tool".to_owned(), "lookup_order".to_owned()),
            ]
        );
    }

    #[test]
    fn explicit_nulls_are_kept() {
        let r = decode(json!({"prompt": "p", "user_model": null, "reward": null})).unwrap();
        assert_eq!(r.user_model, None);
        assert_eq!(
            r.extra.as_deref(),
            Some(r#"{"user_model":null,"reward":null}"#)
        );
    }
}
