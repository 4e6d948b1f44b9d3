//! OpenTelemetry GenAI spans → rows: one row per conversation.
//!
//! Input: OTLP JSON as the collector's file exporter writes it (`resourceSpans[].scopeSpans[]
//! .spans[]`, also `instrumentationLibrarySpans`), one batch per line or one document, or
//! `{"spans": [...]}`, or bare span objects. Attributes are the OTLP list
//! (`[{key, value: {stringValue|intValue|doubleValue|boolValue|arrayValue|kvlistValue}}]`) or a
//! plain object; string values that hold JSON are parsed. OpenLLMetry's indexed attributes
//! (`gen_ai.prompt.N.*`, `gen_ai.completion.N.*`, `llm.request.functions.N.*`) are folded into
//! message lists and tool definitions first.
//!
//! Grouping: each trace maps to the first conversation id (`gen_ai.conversation.id`,
//! `conversation.id`, `session.id`, `gen_ai.session.id`, `thread.id`) any of its spans carries;
//! a span groups by its own conversation id, else its trace's, else its trace id. Within a group,
//! spans run in start-time order (input order breaks ties).
//!
//! Per group: a tool span (a tool-arguments attribute, a `gen_ai.tool.name`, or
//! `gen_ai.operation.name = execute_tool`) is a step `{tool, arguments, result, tool_call_id}`,
//! and so is each tool call inside a message (OpenAI `tool_calls`, or `tool_call` parts), its
//! result from the `tool` message or `tool_call_response` part of the same call id (else the
//! first call waiting). A call is one step however often it is seen (each client call repeats
//! the history; the tool span that ran it fills its step, its arguments and result winning);
//! calls without an id are told apart by name and arguments; a failed tool
//! (`gen_ai.tool.status` error/failed/failure, or span status ERROR) whose result is not an
//! object with a `status` gets `{status: "error", output, error: <exception.message>}`. Other
//! spans give user messages (the first distinct one is the prompt, later ones user steps) and
//! assistant messages (the last one is the final text), in the older `content` form or the
//! current `parts` form. Usage is summed; the reward is the first value in [0, 1] of the reward
//! attribute (`--reward-attr`) or of a `gen_ai.evaluation.result` event's score; the task id comes
//! from `--task-attr` when a span carries it (else the prompt keys the task, as in the
//! reference). The conversation id is the row's `rollout_id`; the first `gen_ai.tool.definitions`
//! (or OpenLLMetry's request functions) rides in `extra` as `tool_definitions`.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

/// What the `OTel` reader looks for beyond the GenAI conventions.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OtelFields {
    /// The attribute holding the reward.
    pub reward_attr: String,
    /// The attribute holding the task id.
    pub task_attr: String,
    /// The attribute holding the repeat index.
    pub index_attr: String,
}

impl Default for OtelFields {
    fn default() -> Self {
        Self {
            reward_attr: "whileai.reward".into(),
            task_attr: "whileai.task_id".into(),
            index_attr: "whileai.rollout_index".into(),
        }
    }
}

const CONVERSATION: [&str; 5] = [
    "gen_ai.conversation.id",
    "conversation.id",
    "session.id",
    "gen_ai.session.id",
    "thread.id",
];
const INPUT: [&str; 3] = [
    "gen_ai.input.messages",
    "gen_ai.prompt",
    "llm.input_messages",
];
const OUTPUT: [&str; 3] = [
    "gen_ai.output.messages",
    "gen_ai.completion",
    "llm.output_messages",
];
const TOOL_ARGS: [&str; 3] = [
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.input",
    "tool.input",
];
const TOOL_RESULT: [&str; 3] = [
    "gen_ai.tool.call.result",
    "gen_ai.tool.output",
    "tool.output",
];
const TOOL_NAME: [&str; 2] = ["gen_ai.tool.name", "tool.name"];
const USAGE_IN: [&str; 4] = [
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "llm.usage.prompt_tokens",
];
const USAGE_OUT: [&str; 4] = [
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "llm.usage.completion_tokens",
];

/// One span, read.
#[derive(Debug, Clone)]
pub struct Span {
    /// The input line it came from.
    pub line: u64,
    order: usize,
    trace: Option<String>,
    /// The span id.
    pub id: Option<String>,
    name: Option<String>,
    start: u64,
    attrs: Map<String, Value>,
    events: Vec<(String, Map<String, Value>)>,
    status_error: bool,
    status_message: Option<String>,
    /// A log record (content the instrumentation wrote beside its span), not a span.
    from_log: bool,
}

fn any_value(v: &Value) -> Value {
    let Some(obj) = v.as_object() else {
        return v.clone();
    };
    if let Some(s) = obj.get("stringValue").and_then(Value::as_str) {
        let t = s.trim_start();
        if (t.starts_with('{') || t.starts_with('['))
            && let Ok(parsed) = serde_json::from_str(s)
        {
            return parsed;
        }
        return Value::String(s.to_owned());
    }
    if let Some(i) = obj.get("intValue") {
        return match i {
            Value::String(s) => s.parse::<i64>().map_or_else(|_| i.clone(), Value::from),
            other => other.clone(),
        };
    }
    if let Some(d) = obj.get("doubleValue") {
        return d.clone();
    }
    if let Some(b) = obj.get("boolValue") {
        return b.clone();
    }
    if let Some(a) = obj.get("arrayValue") {
        let values = a
            .get("values")
            .and_then(Value::as_array)
            .map(|vs| vs.iter().map(any_value).collect())
            .unwrap_or_default();
        return Value::Array(values);
    }
    if let Some(kv) = obj.get("kvlistValue") {
        return Value::Object(attributes(kv.get("values").unwrap_or(&Value::Null)));
    }
    v.clone()
}

fn attributes(v: &Value) -> Map<String, Value> {
    match v {
        Value::Array(list) => list
            .iter()
            .filter_map(|kv| {
                Some((
                    kv.get("key")?.as_str()?.to_owned(),
                    any_value(kv.get("value").unwrap_or(&Value::Null)),
                ))
            })
            .collect(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) if s.trim_start().starts_with(['{', '[']) => {
                        serde_json::from_str(s).unwrap_or_else(|_| v.clone())
                    }
                    other => other.clone(),
                };
                (k.clone(), v)
            })
            .collect(),
        _ => Map::new(),
    }
}

fn text_field(obj: &Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| match obj.get(*k)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

fn first<'a>(attrs: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter()
        .find_map(|k| attrs.get(*k).filter(|v| !v.is_null()))
}

fn nanos(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn read_span(v: &Value, line: u64, order: usize) -> Option<Span> {
    let obj = v.as_object()?;
    let start = ["startTimeUnixNano", "start_time_unix_nano"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(nanos))
        .or_else(|| {
            ["startedMs", "started_ms", "startTimeMs"]
                .iter()
                .find_map(|k| obj.get(*k).and_then(nanos))
                .map(|ms| ms * 1_000_000)
        })
        .unwrap_or(0);
    let events = obj
        .get("events")
        .and_then(Value::as_array)
        .map(|evs| {
            evs.iter()
                .map(|e| {
                    let name = e
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    (
                        name,
                        attributes(e.get("attributes").unwrap_or(&Value::Null)),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let status_error = obj
        .get("status")
        .and_then(|s| s.get("code"))
        .is_some_and(|c| {
            matches!(c, Value::Number(n) if n.as_u64() == Some(2))
                || c.as_str().is_some_and(|s| {
                    s.eq_ignore_ascii_case("STATUS_CODE_ERROR") || s.eq_ignore_ascii_case("ERROR")
                })
        });
    let status_message = obj
        .get("status")
        .and_then(|s| s.get("message"))
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map(str::to_owned);
    let mut attrs = attributes(obj.get("attributes").unwrap_or(&Value::Null));
    fold_indexed(&mut attrs);
    Some(Span {
        line,
        order,
        trace: text_field(obj, &["traceId", "trace_id"]),
        id: text_field(obj, &["spanId", "span_id"]),
        name: text_field(obj, &["name"]),
        start,
        attrs,
        events,
        status_error,
        status_message,
        from_log: false,
    })
}

/// One OTLP log record as a span-like record: its attributes, and its body's fields when the
/// body is a map (the older event shape carries content there), keyed by its trace and span.
fn read_log(v: &Value, line: u64, order: usize) -> Option<Span> {
    let obj = v.as_object()?;
    let start = ["timeUnixNano", "observedTimeUnixNano"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(nanos).filter(|n| *n > 0))
        .unwrap_or(0);
    let mut attrs = attributes(obj.get("attributes").unwrap_or(&Value::Null));
    let event = text_field(obj, &["eventName"])
        .or_else(|| text_field(&attrs, &["event.name"]))
        .unwrap_or_default();
    if let Some(body) = obj.get("body").map(any_value) {
        match body {
            Value::Object(fields) => {
                // The v1.30 events: `gen_ai.user.message` {content}, `gen_ai.choice` {message}.
                let role = event
                    .strip_prefix("gen_ai.")
                    .and_then(|e| e.strip_suffix(".message"));
                if let Some(role) = role {
                    let mut m = fields.clone();
                    m.entry("role").or_insert_with(|| Value::from(role));
                    attrs
                        .entry("gen_ai.input.messages")
                        .or_insert_with(|| Value::Array(vec![Value::Object(m)]));
                } else if event == "gen_ai.choice"
                    && let Some(message) = fields.get("message")
                {
                    attrs
                        .entry("gen_ai.output.messages")
                        .or_insert_with(|| Value::Array(vec![message.clone()]));
                } else {
                    for (k, v) in fields {
                        attrs.entry(k).or_insert(v);
                    }
                }
            }
            Value::Null => {}
            other => {
                attrs.entry("log.body").or_insert(other);
            }
        }
    }
    Some(Span {
        line,
        order,
        trace: text_field(obj, &["traceId", "trace_id"]),
        id: text_field(obj, &["spanId", "span_id"]),
        name: Some(event),
        start,
        attrs,
        events: Vec::new(),
        status_error: false,
        status_message: None,
        from_log: true,
    })
}

/// Folds OpenLLMetry's indexed attributes into the message lists the other shapes carry:
/// `gen_ai.prompt.N.{role,content,tool_call_id}` and `gen_ai.prompt.N.tool_calls.M.{id,name,
/// arguments}` become `gen_ai.prompt` (OpenAI-style messages), `gen_ai.completion.N.*` becomes
/// `gen_ai.completion` (its `finish_reason`s `gen_ai.response.finish_reasons` when that is
/// missing), and `llm.request.functions.N.{name,description,parameters}` becomes
/// `gen_ai.tool.definitions`. The indexed keys are removed.
fn fold_indexed(attrs: &mut Map<String, Value>) {
    use std::collections::BTreeMap;
    if !attrs.keys().any(|k| {
        k.starts_with("gen_ai.prompt.")
            || k.starts_with("gen_ai.completion.")
            || k.starts_with("llm.request.functions.")
    }) {
        return;
    }
    type Indexed = BTreeMap<usize, (Map<String, Value>, BTreeMap<usize, Map<String, Value>>)>;
    let mut lists: [Indexed; 3] = Default::default();
    let prefixes = [
        "gen_ai.prompt.",
        "gen_ai.completion.",
        "llm.request.functions.",
    ];
    let keys: Vec<String> = attrs.keys().cloned().collect();
    for key in keys {
        let Some((which, rest)) = prefixes
            .iter()
            .enumerate()
            .find_map(|(i, p)| Some((i, key.strip_prefix(p)?)))
        else {
            continue;
        };
        let Some((n, field)) = rest
            .split_once('.')
            .and_then(|(n, f)| Some((n.parse::<usize>().ok()?, f.to_owned())))
        else {
            continue;
        };
        let Some(value) = attrs.shift_remove(&key) else {
            continue;
        };
        let entry = lists[which].entry(n).or_default();
        match field
            .strip_prefix("tool_calls.")
            .and_then(|r| r.split_once('.'))
            .and_then(|(m, f)| Some((m.parse::<usize>().ok()?, f)))
        {
            Some((m, f)) => {
                entry.1.entry(m).or_default().insert(f.to_owned(), value);
            }
            None => {
                entry.0.insert(field, value);
            }
        }
    }
    let [prompt, completion, functions] = lists;
    let messages = |list: Indexed| -> Vec<Value> {
        list.into_values()
            .map(|(mut m, calls)| {
                if !calls.is_empty() {
                    m.insert(
                        "tool_calls".into(),
                        Value::Array(calls.into_values().map(Value::Object).collect()),
                    );
                }
                Value::Object(m)
            })
            .collect()
    };
    if !prompt.is_empty() {
        let list = messages(prompt);
        attrs.entry("gen_ai.prompt").or_insert(Value::Array(list));
    }
    if !completion.is_empty() {
        let list = messages(completion);
        let reasons: Vec<Value> = list
            .iter()
            .filter_map(|m| m.get("finish_reason").filter(|r| r.is_string()).cloned())
            .collect();
        if !reasons.is_empty() {
            attrs
                .entry("gen_ai.response.finish_reasons")
                .or_insert(Value::Array(reasons));
        }
        attrs
            .entry("gen_ai.completion")
            .or_insert(Value::Array(list));
    }
    if !functions.is_empty() {
        let defs = functions
            .into_values()
            .map(|(mut f, _)| {
                f.insert("type".into(), Value::from("function"));
                Value::Object(f)
            })
            .collect();
        attrs
            .entry("gen_ai.tool.definitions")
            .or_insert(Value::Array(defs));
    }
}

/// A tool call inside a message: its id, name and arguments.
struct Call {
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
/// or flat `{id, name, arguments}` as OpenLLMetry folds them), and the current conventions'
/// `tool_call` parts (in `parts`, or in `content` as a list).
fn calls_in(m: &Value) -> Vec<Call> {
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
fn results_in(m: &Value) -> Vec<(Option<String>, Value)> {
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
struct Steps {
    list: Vec<Value>,
    by_id: HashMap<String, usize>,
    by_call: HashMap<String, Vec<usize>>,
    /// Steps a tool span has filled.
    spanned: Vec<bool>,
    tools_used: Vec<Value>,
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
    fn message_call(&mut self, c: Call) {
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
    fn message_result(&mut self, id: Option<String>, result: Value) {
        let at = match &id {
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
    fn span_call(
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

    fn user(&mut self, text: String) {
        self.list.push(json!({"user": text}));
        self.spanned.push(false);
    }
}

/// The spans in one OTLP record (a batch, `{"spans": [...]}`, or a span).
pub fn spans(record: &Value, line: u64, order: &mut usize) -> Vec<Span> {
    let mut out = Vec::new();
    let mut push = |v: &Value, out: &mut Vec<Span>| {
        if let Some(s) = read_span(v, line, *order) {
            *order += 1;
            out.push(s);
        }
    };
    if let Some(resources) = record.get("resourceSpans").and_then(Value::as_array) {
        for r in resources {
            for key in ["scopeSpans", "instrumentationLibrarySpans"] {
                for scope in r.get(key).and_then(Value::as_array).into_iter().flatten() {
                    for s in scope
                        .get("spans")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        push(s, &mut out);
                    }
                }
            }
        }
    } else if let Some(resources) = record.get("resourceLogs").and_then(Value::as_array) {
        for r in resources {
            for key in ["scopeLogs", "instrumentationLibraryLogs"] {
                for scope in r.get(key).and_then(Value::as_array).into_iter().flatten() {
                    for l in scope
                        .get("logRecords")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(s) = read_log(l, line, *order) {
                            *order += 1;
                            out.push(s);
                        }
                    }
                }
            }
        }
    } else if let Some(list) = record.get("spans").and_then(Value::as_array) {
        for s in list {
            push(s, &mut out);
        }
    } else if record.get("traceId").is_some()
        || record.get("spanId").is_some()
        || record.get("trace_id").is_some()
    {
        push(record, &mut out);
    }
    out
}

/// The text of one message in either form: `content` (a string or parts) or `parts`.
fn message_text(m: &Value) -> Option<String> {
    let from_parts = |parts: &Value| -> Option<String> {
        let texts: Vec<String> = parts
            .as_array()?
            .iter()
            .filter(|p| {
                p.get("type")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t == "text")
            })
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                _ => p
                    .get("content")
                    .or_else(|| p.get("text"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
            .collect();
        (!texts.is_empty()).then(|| texts.join(" "))
    };
    match m {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(parts @ Value::Array(_)) => from_parts(parts),
            _ => o.get("parts").and_then(from_parts),
        },
        _ => None,
    }
}

fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn unit_score(v: &Value) -> Option<f64> {
    let x = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    (0.0..=1.0).contains(&x).then_some(x)
}

fn score_value(x: f64) -> Value {
    if x == 0.0 || x == 1.0 {
        #[allow(clippy::cast_possible_truncation)]
        Value::from(x as i64)
    } else {
        Value::from(x)
    }
}

/// A conversation: its id, its spans, the line of its first span.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The conversation (or trace) id.
    pub id: String,
    /// Its spans in start order.
    pub spans: Vec<Span>,
}

/// Joins log records to the spans they were written beside (same trace and span id): their
/// attributes fill what the span lacks, input and output messages appending. A log record
/// without its span stays a record of its own.
fn join_logs(spans: Vec<Span>) -> Vec<Span> {
    let mut at: HashMap<(Option<String>, String), usize> = HashMap::new();
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    let (logs, real): (Vec<Span>, Vec<Span>) = spans.into_iter().partition(|s| s.from_log);
    for s in real {
        if let Some(id) = &s.id {
            at.insert((s.trace.clone(), id.clone()), out.len());
        }
        out.push(s);
    }
    let mut logs = logs;
    logs.sort_by_key(|s| (s.start, s.order));
    for log in logs {
        let key = log.id.clone().map(|id| (log.trace.clone(), id));
        match key.and_then(|k| at.get(&k).copied()) {
            Some(i) => {
                let span = &mut out[i];
                for (k, v) in log.attrs {
                    let list_key = INPUT.contains(&k.as_str()) || OUTPUT.contains(&k.as_str());
                    match (span.attrs.get_mut(&k), v) {
                        (Some(Value::Array(have)), Value::Array(more)) if list_key => {
                            have.extend(more);
                        }
                        (None, v) => {
                            span.attrs.insert(k, v);
                        }
                        _ => {}
                    }
                }
            }
            None => out.push(log),
        }
    }
    out
}

/// Numbers spans in the order they were read (input order breaks ties of start time).
pub fn renumber(spans: &mut [Span]) {
    for (i, s) in spans.iter_mut().enumerate() {
        s.order = i;
    }
}

/// What a conversation set aside holds, for the rejects file: its id and its spans' ids and
/// names (the first 100).
pub fn summary(conv: &Conversation) -> Value {
    let spans: Vec<Value> = conv
        .spans
        .iter()
        .take(100)
        .map(|s| json!({"span_id": s.id, "name": s.name}))
        .collect();
    json!({"conversation": conv.id, "n_spans": conv.spans.len(), "spans": spans})
}

/// Whether a conversation's spans carry any message content.
pub fn has_content(conv: &Conversation) -> bool {
    conv.spans.iter().any(|s| {
        first(&s.attrs, &INPUT).is_some()
            || first(&s.attrs, &OUTPUT).is_some()
            || first(&s.attrs, &TOOL_ARGS).is_some()
            || first(&s.attrs, &TOOL_RESULT).is_some()
    })
}

/// Groups spans (and the log records written beside them) into conversations, in order of
/// first appearance.
pub fn group(spans: Vec<Span>) -> Vec<Conversation> {
    let spans = join_logs(spans);
    let conv_of = |s: &Span| text_field(&s.attrs, &CONVERSATION);
    let mut trace_conv: HashMap<String, String> = HashMap::new();
    for s in &spans {
        if let (Some(t), Some(c)) = (&s.trace, conv_of(s)) {
            trace_conv.entry(t.clone()).or_insert(c);
        }
    }
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<Span>> = HashMap::new();
    for s in spans {
        let key = conv_of(&s)
            .or_else(|| s.trace.as_ref().and_then(|t| trace_conv.get(t).cloned()))
            .or_else(|| s.trace.clone())
            .unwrap_or_else(|| format!("line-{}", s.line));
        let entry = groups.entry(key.clone()).or_default();
        if entry.is_empty() {
            order.push(key);
        }
        entry.push(s);
    }
    order
        .into_iter()
        .map(|id| {
            let mut spans = groups.remove(&id).unwrap_or_default();
            spans.sort_by_key(|s| (s.start, s.order));
            Conversation { id, spans }
        })
        .collect()
}

fn is_tool(s: &Span) -> bool {
    first(&s.attrs, &TOOL_ARGS).is_some()
        || first(&s.attrs, &TOOL_NAME).is_some()
        || s.attrs.get("gen_ai.operation.name").and_then(Value::as_str) == Some("execute_tool")
}

/// Whether a span speaks the GenAI conventions (or carries the reward or task attribute).
fn is_genai(s: &Span, fields: &OtelFields) -> bool {
    s.attrs.keys().any(|k| {
        k.starts_with("gen_ai.")
            || k.starts_with("llm.")
            || k.starts_with("tool.")
            || *k == fields.reward_attr
            || *k == fields.task_attr
    })
}

/// The row of one conversation, or `None` when no span of it speaks the GenAI conventions
/// (a trace of other work). A conversation without message content still gives a row, marked
/// `no_content: true`.
pub fn to_row(conv: &Conversation, fields: &OtelFields) -> Option<Value> {
    if !conv.spans.iter().any(|s| is_genai(s, fields)) {
        return None;
    }
    let (mut prompt, mut seen, mut final_text) =
        (None::<String>, Vec::<String>::new(), None::<String>);
    let mut steps = Steps::default();
    let mut definitions = None::<Value>;
    let mut agent_named = false;
    let (mut usage_in, mut usage_out, mut any_usage) = (0u64, 0u64, false);
    let (mut reward, mut reason, mut model, mut task, mut agent) = (
        None,
        None::<String>,
        None::<String>,
        None::<Value>,
        None::<String>,
    );
    let mut ts = 0u64;
    let (mut finish, mut index) = (None::<String>, None::<i64>);
    for s in &conv.spans {
        if s.start > 0 && (ts == 0 || s.start < ts) {
            ts = s.start;
        }
        let count = |keys: &[&str]| {
            first(&s.attrs, keys).and_then(|v| match v {
                Value::Number(n) => n.as_u64(),
                Value::String(t) => t.parse().ok(),
                _ => None,
            })
        };
        if let Some(n) = count(&USAGE_IN) {
            usage_in += n;
            any_usage = true;
        }
        if let Some(n) = count(&USAGE_OUT) {
            usage_out += n;
            any_usage = true;
        }
        if reward.is_none() {
            reward = s.attrs.get(&fields.reward_attr).and_then(unit_score);
        }
        for (name, attrs) in &s.events {
            if name == "gen_ai.evaluation.result"
                && reward.is_none()
                && let Some(x) = attrs
                    .get("gen_ai.evaluation.score.value")
                    .or_else(|| attrs.get("gen_ai.evaluation.score"))
                    .and_then(unit_score)
            {
                reward = Some(x);
                reason = attrs
                    .get("gen_ai.evaluation.explanation")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
        }
        if model.is_none() {
            model = text_field(&s.attrs, &["gen_ai.response.model", "gen_ai.request.model"]);
        }
        if let Some(Value::Array(reasons)) = s.attrs.get("gen_ai.response.finish_reasons")
            && let Some(Value::String(r)) = reasons.last()
        {
            finish = Some(r.clone());
        }
        if index.is_none() {
            index = s
                .attrs
                .get(&fields.index_attr)
                .and_then(|v| v.as_i64().or_else(|| v.as_str()?.parse().ok()));
        }
        if task.is_none() {
            task = s
                .attrs
                .get(&fields.task_attr)
                .filter(|v| !v.is_null())
                .cloned();
        }
        if definitions.is_none() {
            definitions = s
                .attrs
                .get("gen_ai.tool.definitions")
                .filter(|d| d.as_array().is_some_and(|l| !l.is_empty()))
                .cloned();
        }
        // The agent's own span names it (the Agents SDK's bridge gives its client spans a
        // default name).
        let op = s.attrs.get("gen_ai.operation.name").and_then(Value::as_str);
        if agent.is_none() || matches!(op, Some("invoke_agent" | "create_agent")) && !agent_named {
            if let Some(a) = text_field(&s.attrs, &["gen_ai.agent.name"]) {
                agent_named = matches!(op, Some("invoke_agent" | "create_agent"));
                agent = Some(a);
            }
        }
        if is_tool(s) {
            let name = text_field(&s.attrs, &TOOL_NAME)
                .or_else(|| s.name.clone())
                .unwrap_or_else(|| "tool".into());
            let arguments = first(&s.attrs, &TOOL_ARGS).cloned();
            let mut result = first(&s.attrs, &TOOL_RESULT)
                .cloned()
                .unwrap_or(Value::Null);
            let failed = s.status_error
                || s.attrs
                    .get("gen_ai.tool.status")
                    .and_then(Value::as_str)
                    .is_some_and(|t| {
                        matches!(t.to_lowercase().as_str(), "error" | "failed" | "failure")
                    });
            if failed && result.get("status").is_none() {
                let mut wrapped = Map::new();
                wrapped.insert("status".into(), Value::from("error"));
                wrapped.insert("output".into(), result);
                let error = s
                    .events
                    .iter()
                    .find_map(|(_, a)| a.get("exception.message").and_then(Value::as_str))
                    .or(s.status_message.as_deref());
                if let Some(e) = error {
                    wrapped.insert("error".into(), Value::from(e));
                }
                result = Value::Object(wrapped);
            }
            let id = text_field(&s.attrs, &["gen_ai.tool.call.id"]);
            steps.span_call(id, name, arguments, result);
            continue;
        }
        for (key, default_role) in [(&INPUT, "user"), (&OUTPUT, "assistant")] {
            let Some(list) = first(&s.attrs, key) else {
                continue;
            };
            let one;
            let list: &[Value] = match list {
                Value::Array(l) => l,
                other => {
                    one = [other.clone()];
                    &one
                }
            };
            for m in list {
                for c in calls_in(m) {
                    steps.message_call(c);
                }
                for (id, result) in results_in(m) {
                    steps.message_result(id, result);
                }
                let role = m
                    .get("role")
                    .and_then(Value::as_str)
                    .unwrap_or(default_role);
                let Some(text) = message_text(m).filter(|t| !t.trim().is_empty()) else {
                    continue;
                };
                if role == "user" && default_role == "user" {
                    let key = normalise(&text);
                    if seen.contains(&key) {
                        continue;
                    }
                    seen.push(key);
                    if prompt.is_none() {
                        prompt = Some(text);
                    } else {
                        steps.user(text);
                    }
                } else if role == "assistant" && default_role == "assistant" {
                    final_text = Some(text);
                }
            }
        }
    }
    let content = has_content(conv);
    // A conversation without content (the instrumentation's default) still is a rollout: its
    // task, reward, model, usage and tools make a row, marked so.
    let mut row = Map::new();
    if !content {
        row.insert("no_content".into(), Value::Bool(true));
    }
    row.insert("prompt".into(), Value::from(prompt.unwrap_or_default()));
    row.insert("steps".into(), Value::Array(steps.list));
    row.insert(
        "final_text".into(),
        Value::from(final_text.unwrap_or_default()),
    );
    row.insert("tools_used".into(), Value::Array(steps.tools_used));
    if let Some(d) = definitions {
        row.insert("tool_definitions".into(), d);
    }
    if let Some(t) = task {
        row.insert("task_id".into(), t);
    }
    row.insert("rollout_id".into(), Value::from(conv.id.clone()));
    row.insert("conversation_id".into(), Value::from(conv.id.clone()));
    if ts > 0 {
        row.insert("ts".into(), Value::from(ts));
    }
    if let Some(r) = reward {
        row.insert("reward".into(), score_value(r));
    }
    if let Some(r) = reason {
        row.insert("reason".into(), Value::from(r));
    }
    if let Some(m) = model {
        row.insert("model_version".into(), Value::from(m));
    }
    if let Some(a) = agent {
        row.insert("agent_name".into(), Value::from(a));
    }
    if let Some(f) = finish {
        row.insert("finish_reason".into(), Value::from(f));
    }
    if let Some(i) = index {
        row.insert("rollout_index".into(), Value::from(i));
    }
    if any_usage {
        row.insert(
            "usage".into(),
            json!({"input_tokens": usage_in, "output_tokens": usage_out}),
        );
    }
    row.insert("schema_version".into(), Value::from("1"));
    Some(Value::Object(row))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: Value) -> Value {
        let v = match value {
            Value::String(s) => json!({"stringValue": s}),
            Value::Number(n) if n.is_i64() => json!({"intValue": n.to_string()}),
            Value::Number(n) => json!({"doubleValue": n}),
            other => other,
        };
        json!({"key": key, "value": v})
    }

    fn span(trace: &str, start: u64, attrs: Vec<Value>) -> Value {
        json!({"traceId": trace, "spanId": format!("s{start}"), "name": "chat", "startTimeUnixNano": start.to_string(), "attributes": attrs})
    }

    #[test]
    fn the_reference_example_and_the_parts_form() {
        let batch = json!({"resourceSpans": [{"scopeSpans": [{"spans": [
            span("t1", 300, vec![
                kv("gen_ai.conversation.id", json!("conv-1")),
                kv("gen_ai.input.messages", json!(r#"[{"role": "user", "content": "Refund A1001 please"}, {"role": "user", "content": "any news?"}]"#)),
                kv("gen_ai.output.messages", json!(r#"[{"role": "assistant", "content": "Refunded."}]"#)),
                kv("whileai.reward", json!(1.0)),
                kv("gen_ai.usage.input_tokens", json!(7)), kv("gen_ai.usage.output_tokens", json!(3)),
            ]),
            {"traceId": "t1", "spanId": "s2", "name": "execute_tool lookup_order", "startTimeUnixNano": "200",
             "attributes": [kv("gen_ai.tool.name", json!("lookup_order")), kv("gen_ai.tool.call.arguments", json!(r#"{"order_id": "A1001"}"#)),
                            kv("gen_ai.tool.call.result", json!(r#"{"amount": 40}"#)), kv("gen_ai.tool.status", json!("error"))],
             "events": [{"name": "exception", "attributes": [kv("exception.message", json!("db down"))]}]},
            span("t1", 100, vec![
                kv("gen_ai.request.model", json!("gpt-x")),
                kv("gen_ai.input.messages", json!(r#"[{"role": "system", "content": "policy"}, {"role": "user", "content": "Refund A1001 please"}]"#)),
                kv("gen_ai.usage.input_tokens", json!(5)), kv("gen_ai.usage.output_tokens", json!(2)),
            ]),
        ]}]}]});
        let mut order = 0;
        let convs = group(spans(&batch, 1, &mut order));
        assert_eq!(convs.len(), 1);
        let row = to_row(&convs[0], &OtelFields::default()).unwrap();
        assert_eq!(row["prompt"], "Refund A1001 please");
        assert_eq!(
            row["steps"],
            json!([
                {"tool": "lookup_order", "arguments": {"order_id": "A1001"}, "result": {"status": "error", "output": {"amount": 40}, "error": "db down"}},
                {"user": "any news?"}
            ])
        );
        assert_eq!(
            (
                row["final_text"].clone(),
                row["reward"].clone(),
                row["ts"].clone()
            ),
            (json!("Refunded."), json!(1), json!(100))
        );
        assert_eq!(
            row["usage"],
            json!({"input_tokens": 12, "output_tokens": 5})
        );
        assert_eq!(row["model_version"], "gpt-x");

        // The current convention's `parts` form (the reference reads none of it) and an
        // evaluation event carrying the reward.
        let parts = json!({"spans": [{"traceId": "t9", "spanId": "a", "startTimeUnixNano": 5, "attributes": {
            "gen_ai.input.messages": r#"[{"role": "user", "parts": [{"type": "text", "content": "Where is A2?"}]}]"#,
            "gen_ai.output.messages": r#"[{"role": "assistant", "parts": [{"type": "text", "content": "It ships today."}]}]"#},
            "events": [{"name": "gen_ai.evaluation.result", "attributes": {"gen_ai.evaluation.score.value": 0.0, "gen_ai.evaluation.explanation": "wrong order"}}]}]});
        let convs = group(spans(&parts, 1, &mut order));
        let row = to_row(&convs[0], &OtelFields::default()).unwrap();
        assert_eq!(
            (row["prompt"].clone(), row["final_text"].clone()),
            (json!("Where is A2?"), json!("It ships today."))
        );
        assert_eq!(
            (
                row["reward"].clone(),
                row["reason"].clone(),
                row["rollout_id"].clone()
            ),
            (json!(0), json!("wrong order"), json!("t9"))
        );
    }

    #[test]
    fn out_of_order_spans_and_traces_joined_by_conversation() {
        let s = |trace: &str, start: u64, attrs: Value| json!({"traceId": trace, "spanId": start.to_string(), "startTimeUnixNano": start, "attributes": attrs});
        let record = json!({"spans": [
            s("tB", 50, json!({"gen_ai.output.messages": r#"[{"role": "assistant", "content": "second answer"}]"#})),
            s("tA", 10, json!({"gen_ai.conversation.id": "c1", "gen_ai.input.messages": "hello"})),
            s("tB", 40, json!({"gen_ai.conversation.id": "c1", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"})),
            s("tA", 20, json!({"gen_ai.output.messages": r#"[{"role": "assistant", "content": "first answer"}]"#})),
        ]});
        let mut order = 0;
        let convs = group(spans(&record, 3, &mut order));
        assert_eq!(convs.len(), 1, "both traces carry conversation c1");
        let row = to_row(&convs[0], &OtelFields::default()).unwrap();
        assert_eq!(row["prompt"], "hello");
        assert_eq!(row["final_text"], "second answer");
        assert_eq!(
            row["steps"],
            json!([{"tool": "search", "arguments": {}, "result": null}])
        );
        assert!(
            row.get("reward").is_none(),
            "a missing reward stays missing"
        );
    }

    #[test]
    fn calls_inside_messages_become_steps_once() {
        // Two bare client calls of one trace, no tool span: the first reply calls a tool (no
        // call id), the second request repeats that call in its history with the result.
        let call = r#"{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": "{\"q\": \"x\"}"}}]}"#;
        let record = json!({"spans": [
            {"traceId": "t", "spanId": "b", "startTimeUnixNano": 20, "attributes": {
                "gen_ai.input.messages": format!(r#"[{{"role": "user", "content": "find x"}}, {call}, {{"role": "tool", "content": "{{\"hits\": 2}}"}}]"#),
                "gen_ai.output.messages": r#"[{"role": "assistant", "content": "2 hits"}]"#}},
            {"traceId": "t", "spanId": "a", "startTimeUnixNano": 10, "attributes": {
                "gen_ai.input.messages": r#"[{"role": "user", "content": "find x"}]"#,
                "gen_ai.output.messages": format!("[{call}]"),
                "gen_ai.tool.definitions": r#"[{"type": "function", "name": "search"}]"#}},
        ]});
        let mut order = 0;
        let convs = group(spans(&record, 1, &mut order));
        let row = to_row(&convs[0], &OtelFields::default()).unwrap();
        assert_eq!(
            row["steps"],
            json!([{"tool": "search", "arguments": {"q": "x"}, "result": {"hits": 2}}])
        );
        assert_eq!(
            (&row["prompt"], &row["final_text"], &row["tools_used"]),
            (&json!("find x"), &json!("2 hits"), &json!(["search"]))
        );
        assert_eq!(
            row["tool_definitions"],
            json!([{"type": "function", "name": "search"}])
        );
    }

    #[test]
    fn indexed_attributes_fold_into_messages() {
        let mut attrs: Map<String, Value> = [
            ("gen_ai.prompt.1.role", json!("tool")),
            ("gen_ai.prompt.1.tool_call_id", json!("c1")),
            ("gen_ai.prompt.1.content", json!({"ok": true})),
            ("gen_ai.prompt.0.role", json!("user")),
            ("gen_ai.prompt.0.content", json!("hi")),
            ("gen_ai.completion.0.role", json!("assistant")),
            ("gen_ai.completion.0.finish_reason", json!("tool_calls")),
            ("gen_ai.completion.0.tool_calls.0.id", json!("c2")),
            ("gen_ai.completion.0.tool_calls.0.name", json!("f")),
            ("llm.request.functions.0.name", json!("f")),
            ("gen_ai.system", json!("openai")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        fold_indexed(&mut attrs);
        assert_eq!(
            attrs["gen_ai.prompt"],
            json!([{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1", "content": {"ok": true}}])
        );
        assert_eq!(
            attrs["gen_ai.completion"],
            json!([{"role": "assistant", "finish_reason": "tool_calls", "tool_calls": [{"id": "c2", "name": "f"}]}])
        );
        assert_eq!(
            attrs["gen_ai.response.finish_reasons"],
            json!(["tool_calls"])
        );
        assert_eq!(
            attrs["gen_ai.tool.definitions"],
            json!([{"name": "f", "type": "function"}])
        );
        assert!(!attrs.keys().any(|k| k.starts_with("gen_ai.prompt.")));
        assert_eq!(attrs["gen_ai.system"], "openai");
    }
}
