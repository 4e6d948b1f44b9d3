//! OTLP spans and log records read into [`Span`]s: attribute lists flattened, values decoded,
//! times in nanoseconds.

use super::Span;
use super::indexed::fold_indexed;
use serde_json::{Map, Value};

/// An OTLP `AnyValue` as the value it holds (a JSON text in a string, parsed), taken apart
/// rather than copied.
fn any_value(v: Value) -> Value {
    let Value::Object(mut obj) = v else {
        return v;
    };
    if matches!(obj.get("stringValue"), Some(Value::String(_))) {
        return match obj.swap_remove("stringValue") {
            Some(Value::String(s)) => json_in_string(s),
            _ => Value::Null,
        };
    }
    if let Some(i) = obj.swap_remove("intValue") {
        return match i {
            Value::String(s) => s.parse::<i64>().map_or(Value::String(s), Value::from),
            other => other,
        };
    }
    for key in ["doubleValue", "boolValue"] {
        if let Some(v) = obj.swap_remove(key) {
            return v;
        }
    }
    if let Some(mut a) = obj.swap_remove("arrayValue") {
        let values = match a.get_mut("values").map(Value::take) {
            Some(Value::Array(vs)) => vs.into_iter().map(any_value).collect(),
            _ => Vec::new(),
        };
        return Value::Array(values);
    }
    if let Some(mut kv) = obj.swap_remove("kvlistValue") {
        return Value::Object(attributes(
            kv.get_mut("values").map_or(Value::Null, Value::take),
        ));
    }
    Value::Object(obj)
}

/// A string attribute: the JSON it holds when it is an object or list in JSON, else itself.
pub(super) fn json_in_string(s: String) -> Value {
    let t = s.trim_start();
    if (t.starts_with('{') || t.starts_with('['))
        && let Ok(parsed) = serde_json::from_str(&s)
    {
        return parsed;
    }
    Value::String(s)
}

/// An attribute list (`[{key, value}]`) or map as a map of plain values, taken apart.
pub(super) fn attributes(v: Value) -> Map<String, Value> {
    match v {
        Value::Array(list) => list
            .into_iter()
            .filter_map(|kv| {
                let Value::Object(mut kv) = kv else {
                    return None;
                };
                let Some(Value::String(key)) = kv.swap_remove("key") else {
                    return None;
                };
                Some((
                    key,
                    any_value(kv.swap_remove("value").unwrap_or(Value::Null)),
                ))
            })
            .collect(),
        Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) if s.trim_start().starts_with(['{', '[']) => {
                        serde_json::from_str(&s).unwrap_or(Value::String(s))
                    }
                    other => other,
                };
                (k, v)
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

pub(super) fn read_span(v: Value, line: u64, order: usize) -> Option<Span> {
    let Value::Object(mut obj) = v else {
        return None;
    };
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
    let events = match obj.swap_remove("events") {
        Some(Value::Array(evs)) => evs
            .into_iter()
            .map(|mut e| {
                let name = match e.get_mut("name").map(Value::take) {
                    Some(Value::String(n)) => n,
                    _ => String::new(),
                };
                let attrs = attributes(e.get_mut("attributes").map_or(Value::Null, Value::take));
                (name, attrs)
            })
            .collect(),
        _ => Vec::new(),
    };
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
    let mut attrs = attributes(obj.swap_remove("attributes").unwrap_or(Value::Null));
    fold_indexed(&mut attrs);
    Some(Span {
        line,
        order,
        trace: text_field(&obj, &["traceId", "trace_id"]),
        id: text_field(&obj, &["spanId", "span_id"]),
        name: text_field(&obj, &["name"]),
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
pub(super) fn read_log(v: Value, line: u64, order: usize) -> Option<Span> {
    let Value::Object(mut obj) = v else {
        return None;
    };
    let start = ["timeUnixNano", "observedTimeUnixNano"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(nanos).filter(|n| *n > 0))
        .unwrap_or(0);
    let mut attrs = attributes(obj.swap_remove("attributes").unwrap_or(Value::Null));
    let event = text_field(&obj, &["eventName"])
        .or_else(|| text_field(&attrs, &["event.name"]))
        .unwrap_or_default();
    if let Some(body) = obj.swap_remove("body").map(any_value) {
        log_body(&mut attrs, &event, body);
    }
    Some(Span::log_record(
        (line, order),
        (
            text_field(&obj, &["traceId", "trace_id"]),
            text_field(&obj, &["spanId", "span_id"]),
        ),
        event,
        start,
        attrs,
    ))
}

/// A log record's body (its `AnyValue`, read) into its attributes: the v1.30 events' message
/// (`gen_ai.user.message` {content}, `gen_ai.choice` {message}) as the input or output list,
/// another map's fields where the attributes lack them, any other value as `log.body`.
pub(super) fn log_body(attrs: &mut Map<String, Value>, event: &str, body: Value) {
    match body {
        Value::Object(fields) => {
            // The v1.30 events: `gen_ai.user.message` {content}, `gen_ai.choice` {message}.
            let role = event
                .strip_prefix("gen_ai.")
                .and_then(|e| e.strip_suffix(".message"));
            if let Some(role) = role {
                let mut m = fields;
                m.entry("role").or_insert_with(|| Value::from(role));
                attrs
                    .entry("gen_ai.input.messages")
                    .or_insert_with(|| Value::Array(vec![Value::Object(m)]));
            } else if event == "gen_ai.choice" && fields.contains_key("message") {
                let mut fields = fields;
                let message = fields.swap_remove("message").unwrap_or(Value::Null);
                attrs
                    .entry("gen_ai.output.messages")
                    .or_insert_with(|| Value::Array(vec![message]));
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
