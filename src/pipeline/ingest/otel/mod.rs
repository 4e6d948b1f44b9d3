//! OpenTelemetry GenAI spans → rows: one row per conversation.
//!
//! Input: OTLP JSON as the collector's file exporter writes it (`resourceSpans[].scopeSpans[]
//! .spans[]`, also `instrumentationLibrarySpans`), one batch per line or one document, or
//! `{"spans": [...]}`, or bare span objects. Attributes are the OTLP list
//! (`[{key, value: {stringValue|intValue|doubleValue|boolValue|arrayValue|kvlistValue}}]`) or a
//! plain object; string values that hold JSON are parsed. `OpenLLMetry`'s indexed attributes
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
//! (or `OpenLLMetry`'s request functions) rides in `extra` as `tool_definitions`.

use serde_json::{Map, Value};

mod group;
mod indexed;
mod row;
mod spans;
mod steps;
#[cfg(test)]
mod tests;
mod typed;

pub use group::{Conversation, group, has_content, renumber, summary};
pub use row::to_row;
use spans::{read_log, read_span};

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

pub(crate) const CONVERSATION: [&str; 5] = [
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

impl Span {
    /// A log record read as a span: its event name, time and attributes, keyed by its trace and
    /// span.
    fn log_record(
        (line, order): (u64, usize),
        (trace, id): (Option<String>, Option<String>),
        event: String,
        start: u64,
        attrs: Map<String, Value>,
    ) -> Self {
        Self {
            line,
            order,
            trace,
            id,
            name: Some(event),
            start,
            attrs,
            events: Vec::new(),
            status_error: false,
            status_message: None,
            from_log: true,
        }
    }
}

/// The spans of one line of OTLP JSON in the canonical shape (`resourceSpans` or
/// `resourceLogs` of attribute lists), read straight into spans numbered from `order` on; `None`
/// when the line is in another shape, for [`spans`] to read it from its parsed value.
pub fn line_spans(text: &[u8], line: u64, order: &mut usize) -> Option<Vec<Span>> {
    typed::spans(text, line, order)
}

#[cfg(any(test, feature = "fuzzing"))]
pub use typed::assert_alike;

/// The spans in one OTLP record (a batch, `{"spans": [...]}`, or a span), taken apart; the
/// record itself when it holds none (for the rejects file).
///
/// # Errors
/// The record, untouched, when it holds no span or log record.
pub fn spans(record: Value, line: u64, order: &mut usize) -> Result<Vec<Span>, Value> {
    let Value::Object(mut doc) = record else {
        return Err(record);
    };
    // Span lists, log lists, or the span the record is, each as the list it holds.
    let mut one: Vec<Value> = Vec::new();
    let lists: Vec<(bool, &mut Vec<Value>)>;
    if doc.contains_key("resourceSpans") || doc.contains_key("resourceLogs") {
        lists = nested(&mut doc);
    } else if matches!(doc.get("spans"), Some(Value::Array(_))) {
        lists = match doc.get_mut("spans") {
            Some(Value::Array(list)) => vec![(false, list)],
            _ => Vec::new(),
        };
    } else if doc.contains_key("traceId")
        || doc.contains_key("spanId")
        || doc.contains_key("trace_id")
    {
        one.push(Value::Object(std::mem::take(&mut doc)));
        lists = vec![(false, &mut one)];
    } else {
        lists = Vec::new();
    }
    if !lists.iter().any(|(_, l)| l.iter().any(Value::is_object)) {
        drop(lists);
        if one.is_empty() {
            return Err(Value::Object(doc));
        }
        return Err(one.swap_remove(0));
    }
    let mut out = Vec::new();
    for (logs, list) in lists {
        for v in std::mem::take(list) {
            let read = if logs {
                read_log(v, line, *order)
            } else {
                read_span(v, line, *order)
            };
            if let Some(s) = read {
                *order += 1;
                out.push(s);
            }
        }
    }
    Ok(out)
}

/// The span lists (`false`) and log record lists (`true`) inside `resourceSpans` and
/// `resourceLogs`, in order.
fn nested(doc: &mut Map<String, Value>) -> Vec<(bool, &mut Vec<Value>)> {
    let mut lists = Vec::new();
    // A document holds spans or logs: spans when it has a list of them.
    let (top, scopes, items, logs) = if matches!(doc.get("resourceSpans"), Some(Value::Array(_))) {
        (
            "resourceSpans",
            ["scopeSpans", "instrumentationLibrarySpans"],
            "spans",
            false,
        )
    } else {
        (
            "resourceLogs",
            ["scopeLogs", "instrumentationLibraryLogs"],
            "logRecords",
            true,
        )
    };
    let Some(Value::Array(resources)) = doc.get_mut(top) else {
        return lists;
    };
    for r in resources {
        let Value::Object(r) = r else { continue };
        // Both scope keys of a resource, in this order.
        let (a, b) = r.iter_mut().fold((None, None), |(a, b), (k, v)| {
            if k == scopes[0] {
                (Some(v), b)
            } else if k == scopes[1] {
                (a, Some(v))
            } else {
                (a, b)
            }
        });
        for scope_list in [a, b].into_iter().flatten() {
            let Value::Array(scope_list) = scope_list else {
                continue;
            };
            for scope in scope_list {
                if let Some(Value::Array(list)) = scope.get_mut(items) {
                    lists.push((logs, list));
                }
            }
        }
    }
    lists
}
