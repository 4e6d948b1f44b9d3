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
