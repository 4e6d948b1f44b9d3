//! The fast path of the `OTel` reader: a line in the canonical OTLP JSON shape (`resourceSpans`
//! or `resourceLogs`, attribute lists, `AnyValue`s with one key) read straight into [`Span`]s
//! by typed deserialization, without first building the document as a JSON value and taking
//! it apart (most of the general path's time: a map for every attribute and every `AnyValue`).
//!
//! It gives the spans the general path ([`super::spans`]) gives, or nothing: a key OTLP does not
//! name (so also every other spelling the general path reads: `trace_id`,
//! `instrumentationLibrarySpans`, `startedMs`, ...), a value of an unusual type, a key twice, a
//! document without spans or a line that is a list sends the line to the general path whole.
//! The values it does not read are still walked as strictly as parsing them would (their
//! strings, numbers and depth), so a line the general path cannot parse is never read here. A
//! test holds the two equal on every fixture and on lines made to hit each rule, and so does the
//! `otlp_json` fuzz target on any bytes.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::Span;
use super::spans::{json_in_string, log_body};

/// A value OTLP defines that the spans do not take (`kind`, `resource`, `endTimeUnixNano`, ...),
/// walked as strictly as parsing it into a JSON value would: its strings and keys checked (UTF-8,
/// escapes), its numbers in range, its depth counted. serde's own `IgnoredAny` skips without
/// these checks.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Skip;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_unit<E>(self) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Skip)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
                while map.next_key::<Skip>()?.is_some() {
                    map.next_value::<Skip>()?;
                }
                Ok(Skip)
            }
        }
        d.deserialize_any(V)
    }
}

/// A struct read from a JSON object only: serde's derived structs also read a list, by
/// position, where the general path skips a list.
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

// Every message of OTLP's JSON mapping the fast path reads, with each field it defines: a field
// it does not define sends the line to the general path.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(rename = "resourceSpans")]
    resource_spans: Option<Vec<Obj<ResourceSpans>>>,
    #[serde(rename = "resourceLogs")]
    resource_logs: Option<Vec<Obj<ResourceLogs>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceSpans {
    #[serde(rename = "scopeSpans")]
    scopes: Option<Vec<Obj<ScopeSpans>>>,
    #[serde(rename = "resource")]
    _resource: Option<Skip>,
    #[serde(rename = "schemaUrl")]
    _schema: Option<Skip>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeSpans {
    spans: Option<Vec<Obj<SpanJson>>>,
    #[serde(rename = "scope")]
    _scope: Option<Skip>,
    #[serde(rename = "schemaUrl")]
    _schema: Option<Skip>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceLogs {
    #[serde(rename = "scopeLogs")]
    scopes: Option<Vec<Obj<ScopeLogs>>>,
    #[serde(rename = "resource")]
    _resource: Option<Skip>,
    #[serde(rename = "schemaUrl")]
    _schema: Option<Skip>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeLogs {
    #[serde(rename = "logRecords")]
    records: Option<Vec<Obj<LogJson>>>,
    #[serde(rename = "scope")]
    _scope: Option<Skip>,
    #[serde(rename = "schemaUrl")]
    _schema: Option<Skip>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpanJson {
    #[serde(rename = "traceId")]
    trace: Option<String>,
    #[serde(rename = "spanId")]
    id: Option<String>,
    name: Option<String>,
    #[serde(rename = "startTimeUnixNano")]
    start: Option<Nanos>,
    events: Option<Vec<Obj<EventJson>>>,
    status: Option<Obj<StatusJson>>,
    attributes: Option<Attrs>,
    #[serde(rename = "traceState")]
    _trace_state: Option<Skip>,
    #[serde(rename = "parentSpanId")]
    _parent: Option<Skip>,
    #[serde(rename = "flags")]
    _flags: Option<Skip>,
    #[serde(rename = "kind")]
    _kind: Option<Skip>,
    #[serde(rename = "endTimeUnixNano")]
    _end: Option<Skip>,
    #[serde(rename = "droppedAttributesCount")]
    _dropped_attributes: Option<Skip>,
    #[serde(rename = "droppedEventsCount")]
    _dropped_events: Option<Skip>,
    #[serde(rename = "links")]
    _links: Option<Skip>,
    #[serde(rename = "droppedLinksCount")]
    _dropped_links: Option<Skip>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventJson {
    name: Option<String>,
    attributes: Option<Attrs>,
    #[serde(rename = "timeUnixNano")]
    _time: Option<Skip>,
    #[serde(rename = "droppedAttributesCount")]
    _dropped_attributes: Option<Skip>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusJson {
    code: Option<Code>,
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogJson {
    #[serde(rename = "traceId")]
    trace: Option<String>,
    #[serde(rename = "spanId")]
    id: Option<String>,
    #[serde(rename = "timeUnixNano")]
    time: Option<Nanos>,
    #[serde(rename = "observedTimeUnixNano")]
    observed: Option<Nanos>,
    #[serde(rename = "eventName")]
    event: Option<String>,
    attributes: Option<Attrs>,
    body: Option<AnyValue>,
    #[serde(rename = "severityNumber")]
    _severity_number: Option<Skip>,
    #[serde(rename = "severityText")]
    _severity_text: Option<Skip>,
    #[serde(rename = "flags")]
    _flags: Option<Skip>,
    #[serde(rename = "droppedAttributesCount")]
    _dropped_attributes: Option<Skip>,
}

/// A time in Unix nanoseconds as the general path reads it: a whole number not below 0, or a
/// string of one; `None` for other numbers and strings.
struct Nanos(Option<u64>);

impl<'de> Deserialize<'de> for Nanos {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Nanos;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a time")
            }
            fn visit_u64<E>(self, n: u64) -> Result<Nanos, E> {
                Ok(Nanos(Some(n)))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Nanos, E> {
                Ok(Nanos(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Nanos, E> {
                Ok(Nanos(None))
            }
            fn visit_str<E>(self, s: &str) -> Result<Nanos, E> {
                Ok(Nanos(s.parse().ok()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A status code: whether it says error (2, or `STATUS_CODE_ERROR` or `ERROR` in any case).
struct Code(bool);

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Code;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a status code")
            }
            fn visit_u64<E>(self, n: u64) -> Result<Code, E> {
                Ok(Code(n == 2))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Code, E> {
                Ok(Code(false))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Code, E> {
                Ok(Code(false))
            }
            fn visit_str<E>(self, s: &str) -> Result<Code, E> {
                Ok(Code(
                    s.eq_ignore_ascii_case("STATUS_CODE_ERROR") || s.eq_ignore_ascii_case("ERROR"),
                ))
            }
        }
        d.deserialize_any(V)
    }
}

/// An attribute list (`[{key, value}]`) as a map of plain values; null is an empty map.
struct Attrs(Map<String, Value>);

impl<'de> Deserialize<'de> for Attrs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Attrs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an attribute list")
            }
            fn visit_unit<E>(self) -> Result<Attrs, E> {
                Ok(Attrs(Map::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Attrs, A::Error> {
                let mut map = Map::new();
                while let Some(kv) = seq.next_element::<Obj<KeyValue>>()? {
                    // A key twice keeps its first place and its last value, as the general
                    // path's collecting into a map does.
                    map.insert(kv.0.key, kv.0.value.map_or(Value::Null, |v| v.0));
                }
                Ok(Attrs(map))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyValue {
    key: String,
    value: Option<AnyValue>,
}

/// An OTLP `AnyValue` as the value it holds, read as the general path's `any_value` reads it: a
/// JSON text in a string parsed, an `intValue` string made a number, lists and maps of them
/// unwrapped. A value that is no object is itself; an object of no key is an empty object, and
/// of one other key (`bytesValue`) that object as it is. Two keys go to the general path.
struct AnyValue(Value);

impl<'de> Deserialize<'de> for AnyValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyVisitor)
    }
}

struct AnyVisitor;

impl<'de> Visitor<'de> for AnyVisitor {
    type Value = AnyValue;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an OTLP AnyValue")
    }

    fn visit_bool<E>(self, b: bool) -> Result<AnyValue, E> {
        Ok(AnyValue(Value::Bool(b)))
    }

    fn visit_u64<E>(self, n: u64) -> Result<AnyValue, E> {
        Ok(AnyValue(Value::from(n)))
    }

    fn visit_i64<E>(self, n: i64) -> Result<AnyValue, E> {
        Ok(AnyValue(Value::from(n)))
    }

    fn visit_f64<E: de::Error>(self, x: f64) -> Result<AnyValue, E> {
        // serde_json reads no number it cannot hold; a value that is not finite is not JSON.
        serde_json::Number::from_f64(x)
            .map(|n| AnyValue(Value::Number(n)))
            .ok_or_else(|| E::custom("not a JSON number"))
    }

    fn visit_str<E>(self, s: &str) -> Result<AnyValue, E> {
        Ok(AnyValue(Value::String(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<AnyValue, E> {
        Ok(AnyValue(Value::String(s)))
    }

    fn visit_unit<E>(self) -> Result<AnyValue, E> {
        Ok(AnyValue(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<AnyValue, A::Error> {
        // A list where an `AnyValue` belongs is kept as it is.
        Value::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(AnyValue)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyValue, A::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Ok(AnyValue(Value::Object(Map::new())));
        };
        let value = match key.as_str() {
            "stringValue" => match map.next_value::<Value>()? {
                Value::String(s) => json_in_string(s),
                other => Value::Object(Map::from_iter([(key, other)])),
            },
            "intValue" => match map.next_value::<Value>()? {
                Value::String(s) => s.parse::<i64>().map_or(Value::String(s), Value::from),
                other => other,
            },
            "doubleValue" | "boolValue" => map.next_value::<Value>()?,
            "arrayValue" => {
                let list = map.next_value::<Obj<ArrayValue>>()?.0;
                Value::Array(list.values.unwrap_or_default())
            }
            "kvlistValue" => {
                let list = map.next_value::<Obj<KvList>>()?.0;
                Value::Object(list.values.map(|a| a.0).unwrap_or_default())
            }
            _ => {
                let other = map.next_value::<Value>()?;
                Value::Object(Map::from_iter([(key, other)]))
            }
        };
        if map.next_key::<Skip>()?.is_some() {
            return Err(de::Error::custom("an AnyValue of two keys"));
        }
        Ok(AnyValue(value))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ArrayValue {
    #[serde(deserialize_with = "any_values")]
    #[serde(default)]
    values: Option<Vec<Value>>,
}

/// An `arrayValue`'s values, each read as an `AnyValue`; null is none.
fn any_values<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Value>>, D::Error> {
    let list = Option::<Vec<AnyValue>>::deserialize(d)?;
    Ok(list.map(|l| l.into_iter().map(|v| v.0).collect()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvList {
    values: Option<Attrs>,
}

/// The spans and log records of one line of OTLP JSON in the canonical shape, numbered from
/// `order` on; `None` when the line is not in that shape (the general path reads it).
pub(super) fn spans(text: &[u8], line: u64, order: &mut usize) -> Option<Vec<Span>> {
    let Obj(doc) = serde_json::from_slice::<Obj<Doc>>(text).ok()?;
    let mut out = Vec::new();
    if let Some(resources) = doc.resource_spans {
        for scope in resources
            .into_iter()
            .flat_map(|r| r.0.scopes.unwrap_or_default())
        {
            for s in scope.0.spans.unwrap_or_default() {
                out.push(span(s.0, line, *order));
                *order += 1;
            }
        }
    } else {
        for scope in doc
            .resource_logs?
            .into_iter()
            .flat_map(|r| r.0.scopes.unwrap_or_default())
        {
            for r in scope.0.records.unwrap_or_default() {
                out.push(log(r.0, line, *order));
                *order += 1;
            }
        }
    }
    // A document of no span is the general path's to set aside, with its text.
    (!out.is_empty()).then_some(out)
}

fn nonempty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

fn span(s: SpanJson, line: u64, order: usize) -> Span {
    let events = s
        .events
        .unwrap_or_default()
        .into_iter()
        .map(|Obj(e)| {
            (
                e.name.unwrap_or_default(),
                e.attributes.map(|a| a.0).unwrap_or_default(),
            )
        })
        .collect();
    let (status_error, status_message) = s.status.map_or((false, None), |Obj(st)| {
        (st.code.is_some_and(|c| c.0), nonempty(st.message))
    });
    let mut attrs = s.attributes.map(|a| a.0).unwrap_or_default();
    super::indexed::fold_indexed(&mut attrs);
    Span {
        line,
        order,
        trace: nonempty(s.trace),
        id: nonempty(s.id),
        name: nonempty(s.name),
        start: s.start.and_then(|n| n.0).unwrap_or(0),
        attrs,
        events,
        status_error,
        status_message,
        from_log: false,
    }
}

fn log(r: LogJson, line: u64, order: usize) -> Span {
    let start = [r.time, r.observed]
        .into_iter()
        .find_map(|t| t.and_then(|n| n.0).filter(|n| *n > 0))
        .unwrap_or(0);
    let mut attrs = r.attributes.map(|a| a.0).unwrap_or_default();
    let event = nonempty(r.event)
        .or_else(|| super::spans::text_field(&attrs, &["event.name"]))
        .unwrap_or_default();
    if let Some(body) = r.body {
        log_body(&mut attrs, &event, body.0);
    }
    Span::log_record(
        (line, order),
        (nonempty(r.trace), nonempty(r.id)),
        event,
        start,
        attrs,
    )
}

/// The spans the general path reads from one line (its parsed value, or each element of a list),
/// and whether every item it holds gave spans.
#[cfg(any(test, feature = "fuzzing"))]
fn general(text: &[u8], line: u64) -> Option<(Vec<Span>, bool)> {
    let items = match serde_json::from_slice::<Value>(text).ok()? {
        Value::Array(items) => items,
        other => vec![other],
    };
    let (mut spans, mut all) = (Vec::new(), true);
    let mut order = 0;
    for item in items {
        match super::spans(item, line, &mut order) {
            Ok(found) => spans.extend(found),
            Err(_) => all = false,
        }
    }
    Some((spans, all))
}

/// Holds the fast path to the general one on one line: when it reads the line, the general path
/// reads the same spans from it, every item giving some.
///
/// # Panics
/// When the two differ.
#[cfg(any(test, feature = "fuzzing"))]
pub fn assert_alike(text: &[u8]) {
    let Some(fast) = spans(text, 1, &mut 0) else {
        return;
    };
    let Some((slow, all)) = general(text, 1) else {
        panic!("the fast path read a line the general path cannot parse");
    };
    assert!(all, "the general path set an item of the line aside");
    assert_eq!(format!("{fast:#?}"), format!("{slow:#?}"));
}
