//! Spans into conversations: log records joined to their spans, spans grouped by conversation
//! id (else their trace's), in start-time order.

use std::collections::HashMap;

use rayon::prelude::*;

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
    let (logs, real): (Vec<Span>, Vec<Span>) = spans.into_iter().partition(|s| s.from_log);
    let mut logs = logs;
    logs.sort_by_key(|s| (s.start, s.order));
    // Each log record's span, by trace and span id (the later of two spans of one id).
    let targets: Vec<Option<usize>> = {
        let mut at: HashMap<(Option<&str>, &str), usize> = HashMap::with_capacity(real.len());
        for (i, s) in real.iter().enumerate() {
            if let Some(id) = &s.id {
                at.insert((s.trace.as_deref(), id), i);
            }
        }
        logs.iter()
            .map(|log| {
                let id = log.id.as_deref()?;
                at.get(&(log.trace.as_deref(), id)).copied()
            })
            .collect()
    };
    // Each span's log records, in time order; the others stay records of their own.
    let mut joined: Vec<Vec<Span>> = std::iter::repeat_with(Vec::new).take(real.len()).collect();
    let mut alone = Vec::new();
    for (log, target) in logs.into_iter().zip(targets) {
        match target {
            Some(i) => joined[i].push(log),
            None => alone.push(log),
        }
    }
    let mut out = real;
    out.par_iter_mut()
        .zip(joined)
        .with_min_len(256)
        .for_each(|(span, logs)| {
            for log in logs {
                fill_from(span, log);
            }
        });
    out.extend(alone);
    out
}

/// Fills `span` from a log record written beside it: attributes it lacks, and input and output
/// messages appended.
fn fill_from(span: &mut Span, log: Span) {
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
    let convs: Vec<Option<String>> = spans
        .iter()
        .map(|s| text_field(&s.attrs, &CONVERSATION))
        .collect();
    // Each span's conversation, numbered in order of first appearance.
    let (mut ids, mut number): (Vec<String>, Vec<usize>) =
        (Vec::new(), Vec::with_capacity(spans.len()));
    {
        let mut trace_conv: HashMap<&str, &str> = HashMap::new();
        for (s, c) in spans.iter().zip(&convs) {
            if let (Some(t), Some(c)) = (&s.trace, c) {
                trace_conv.entry(t.as_str()).or_insert(c.as_str());
            }
        }
        let mut at: HashMap<String, usize> = HashMap::new();
        for (s, c) in spans.iter().zip(&convs) {
            let key: std::borrow::Cow<'_, str> = match (c, &s.trace) {
                (Some(c), _) => c.as_str().into(),
                (None, Some(t)) => trace_conv.get(t.as_str()).copied().unwrap_or(t).into(),
                (None, None) => format!("line-{}", s.line).into(),
            };
            let n = if let Some(n) = at.get(key.as_ref()) {
                *n
            } else {
                let key = key.into_owned();
                at.insert(key.clone(), ids.len());
                ids.push(key);
                ids.len() - 1
            };
            number.push(n);
        }
    }
    let mut groups: Vec<Vec<Span>> = std::iter::repeat_with(Vec::new).take(ids.len()).collect();
    for (s, n) in spans.into_iter().zip(number) {
        groups[n].push(s);
    }
    ids.into_iter()
        .zip(groups)
        .map(|(id, mut spans)| {
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
