//! OTLP spans and log records read into [`Span`]s: attribute lists flattened, values decoded,
//! times in nanoseconds.

use super::Span;
use super::indexed::fold_indexed;
use serde_json::{Map, Value};

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

pub(super) fn attributes(v: &Value) -> Map<String, Value> {
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

pub(super) fn text_field(obj: &Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| match obj.get(*k)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

pub(super) fn first<'a>(attrs: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
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

pub(super) fn read_span(v: &Value, line: u64, order: usize) -> Option<Span> {
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
pub(super) fn read_log(v: &Value, line: u64, order: usize) -> Option<Span> {
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
