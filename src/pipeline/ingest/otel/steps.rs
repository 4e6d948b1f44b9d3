//! Tool calls into steps: the calls inside messages and the tool spans that ran them, one step
//! per call however often it is seen, each result joined to its call.

use std::collections::HashMap;

use super::group::message_text;
use super::spans::text_field;
use serde_json::{Map, Value, json};

/// A tool call inside a message: its id, name and arguments.
pub(super) struct Call {
    id: Option<String>,
    name: String,
    arguments: Value,
}

/// A JSON text parsed, anything else as it is.
fn maybe_json(v: &Value) -> Value {
    match v {
        Value::String(s) if s.trim_start().starts_with(['{', '[']) => {
            serde_json::from_str(s).unwrap_or_else(|_| v.clone())
        }
        other => other.clone(),
    }
}

/// The tool calls of one message: OpenAI's `tool_calls` (`{id, function: {name, arguments}}`,
/// or flat `{id, name, arguments}` as `OpenLLMetry` folds them), and the current conventions'
/// `tool_call` parts (in `parts`, or in `content` as a list).
pub(super) fn calls_in(m: &Value) -> Vec<Call> {
    let mut out = Vec::new();
    let call = |c: &Value| -> Option<Call> {
        let f = c.get("function").filter(|f| f.is_object()).unwrap_or(c);
        Some(Call {
            id: text_field(c.as_object()?, &["id", "call_id"]),
            name: f.get("name")?.as_str()?.to_owned(),
            arguments: f.get("arguments").map_or_else(|| json!({}), maybe_json),
        })
    };
    for c in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.extend(call(c));
    }
    for key in ["parts", "content"] {
        for p in m.get(key).and_then(Value::as_array).into_iter().flatten() {
            if p.get("type").and_then(Value::as_str) == Some("tool_call") {
                out.extend(call(p));
            }
        }
    }
    out
}

/// The tool results of one message: a `tool` message's content by its `tool_call_id`, and the
/// current conventions' `tool_call_response` parts by their `id`.
pub(super) fn results_in(m: &Value) -> Vec<(Option<String>, Value)> {
    let mut out = Vec::new();
    let Some(obj) = m.as_object() else {
        return out;
    };
    let mut from_parts = false;
    for key in ["parts", "content"] {
        for p in obj.get(key).and_then(Value::as_array).into_iter().flatten() {
            if p.get("type").and_then(Value::as_str) == Some("tool_call_response") {
                from_parts = true;
                let result = p
                    .get("response")
                    .or_else(|| p.get("result"))
                    .map_or(Value::Null, maybe_json);
                out.push((p.as_object().and_then(|p| text_field(p, &["id"])), result));
            }
        }
    }
    if !from_parts && obj.get("role").and_then(Value::as_str) == Some("tool") {
        let result = match obj.get("content") {
            Some(c @ Value::Array(_)) => message_text(m).map_or_else(|| c.clone(), Value::from),
            Some(c) => maybe_json(c),
            None => Value::Null,
        };
        out.push((text_field(obj, &["tool_call_id", "id"]), result));
    }
    out
}

/// The steps of one conversation as they are built. A call is one step however often it is
/// seen (each client call repeats the history; the tool span that ran it is another sighting):
/// steps are found by call id, else by name and arguments (a tool span without a call id fills
/// the step of the same call that no span has filled yet).
#[derive(Default)]
pub(super) struct Steps {
    pub(super) list: Vec<Value>,
    by_id: HashMap<String, usize>,
    by_call: HashMap<String, Vec<usize>>,
    /// Steps a tool span has filled.
    spanned: Vec<bool>,
    pub(super) tools_used: Vec<Value>,
}

impl Steps {
    fn call_key(name: &str, arguments: &Value) -> String {
        format!("{name}\u{0}{arguments}")
    }

    fn push(&mut self, id: Option<String>, name: String, arguments: Value, result: Value) -> usize {
        let i = self.list.len();
        self.by_call
            .entry(Self::call_key(&name, &arguments))
            .or_default()
            .push(i);
        let mut step = Map::new();
        step.insert("tool".into(), Value::from(name.clone()));
        step.insert("arguments".into(), arguments);
        step.insert("result".into(), result);
        if let Some(id) = id {
            self.by_id.insert(id.clone(), i);
            step.insert("tool_call_id".into(), Value::from(id));
        }
        self.tools_used.push(Value::from(name));
        self.list.push(Value::Object(step));
        self.spanned.push(false);
        i
    }

    /// A call inside a message: a new step, or nothing when it is one already (by id; or, for
    /// a call without id or a step without one, by name and arguments).
    pub(super) fn message_call(&mut self, c: Call) {
        if let Some(id) = &c.id
            && self.by_id.contains_key(id)
        {
            return;
        }
        let same = self
            .by_call
            .get(&Self::call_key(&c.name, &c.arguments))
            .and_then(|at| {
                at.iter()
                    .copied()
                    .find(|&i| c.id.is_none() || self.list[i].get("tool_call_id").is_none())
            });
        match (same, c.id) {
            (Some(i), Some(id)) => {
                self.list[i]["tool_call_id"] = Value::from(id.clone());
                self.by_id.insert(id, i);
            }
            (Some(_), None) => {}
            (None, id) => {
                self.push(id, c.name, c.arguments, Value::Null);
            }
        }
    }

    /// A result inside a message: fills its call's step (by id, else the first call waiting).
    pub(super) fn message_result(&mut self, id: Option<&str>, result: Value) {
        let at = match id {
            Some(id) => self.by_id.get(id).copied(),
            None => self
                .list
                .iter()
                .position(|s| s.get("tool").is_some() && s.get("result") == Some(&Value::Null)),
        };
        if let Some(i) = at
            && self.list[i]["result"].is_null()
        {
            self.list[i]["result"] = result;
        }
    }

    /// A tool span: fills the step of its call (its arguments and result win when it has
    /// them), else a new step.
    pub(super) fn span_call(
        &mut self,
        id: Option<String>,
        name: String,
        arguments: Option<Value>,
        result: Value,
    ) {
        let at = match &id {
            Some(id) => self.by_id.get(id).copied(),
            None => arguments.as_ref().and_then(|a| {
                self.by_call
                    .get(&Self::call_key(&name, a))?
                    .iter()
                    .copied()
                    .find(|&i| !self.spanned[i])
            }),
        };
        let i = match at {
            Some(i) => {
                let step = &mut self.list[i];
                if let Some(a) = arguments {
                    step["arguments"] = a;
                }
                if !result.is_null() {
                    step["result"] = result;
                }
                i
            }
            None => self.push(id, name, arguments.unwrap_or_else(|| json!({})), result),
        };
        self.spanned[i] = true;
    }

    pub(super) fn user(&mut self, text: &str) {
        self.list.push(json!({"user": text}));
        self.spanned.push(false);
    }
}
