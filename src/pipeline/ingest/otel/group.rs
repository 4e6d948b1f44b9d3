//! Spans into conversations: log records joined to their spans, spans grouped by conversation
//! id (else their trace's), in start-time order.

use std::collections::HashMap;

use super::spans::{first, text_field};
use super::{CONVERSATION, INPUT, OUTPUT, OtelFields, Span, TOOL_ARGS, TOOL_NAME, TOOL_RESULT};
use serde_json::{Value, json};

/// The text of one message in either form: `content` (a string or parts) or `parts`.
pub(super) fn message_text(m: &Value) -> Option<String> {
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

pub(super) fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

pub(super) fn unit_score(v: &Value) -> Option<f64> {
    let x = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    (0.0..=1.0).contains(&x).then_some(x)
}

pub(super) fn score_value(x: f64) -> Value {
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

pub(super) fn is_tool(s: &Span) -> bool {
    first(&s.attrs, &TOOL_ARGS).is_some()
        || first(&s.attrs, &TOOL_NAME).is_some()
        || s.attrs.get("gen_ai.operation.name").and_then(Value::as_str) == Some("execute_tool")
}

/// Whether a span speaks the GenAI conventions (or carries the reward or task attribute).
pub(super) fn is_genai(s: &Span, fields: &OtelFields) -> bool {
    s.attrs.keys().any(|k| {
        k.starts_with("gen_ai.")
            || k.starts_with("llm.")
            || k.starts_with("tool.")
            || *k == fields.reward_attr
            || *k == fields.task_attr
    })
}
