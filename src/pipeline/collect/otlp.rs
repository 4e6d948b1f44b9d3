//! OTLP request bodies taken apart: decoded (protobuf or OTLP/JSON, as `opentelemetry-proto`
//! maps them), each span checked, and the kept ones cut into one OTLP/JSON document per trace,
//! the unit the write-ahead log holds and conversations are assembled from.

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use prost::Message as _;

use crate::pipeline::ingest::otel::CONVERSATION;

/// What a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `POST /v1/traces`.
    Traces,
    /// `POST /v1/logs`.
    Logs,
}

impl Signal {
    /// How its items are named in messages.
    pub fn items(self) -> &'static str {
        match self {
            Self::Traces => "spans",
            Self::Logs => "log records",
        }
    }
}

/// How a body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

/// One trace's part of a request (or one log record without a trace): an OTLP/JSON document,
/// and what assembling needs to know of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// The keys that tie it to a conversation: `t:TRACE_ID`, `c:CONVERSATION_ID`. None for a
    /// log record without trace or conversation (it is a conversation of its own).
    pub keys: Vec<String>,
    /// The earliest start time it holds (Unix nanoseconds; 0 when none is set).
    pub start_ns: u64,
    /// How many spans or log records it holds.
    pub items: u64,
    /// The OTLP/JSON document (`{"resourceSpans": ...}` or `{"resourceLogs": ...}`), one line.
    pub line: Vec<u8>,
}

/// An item set aside: why, and the item as OTLP/JSON.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// Why it was not kept.
    pub reason: String,
    /// The span or log record.
    pub item: serde_json::Value,
}

/// A request taken apart.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The kept items, a piece per trace.
    pub pieces: Vec<Piece>,
    /// The items set aside.
    pub rejected: Vec<Rejected>,
    /// How many items the request held.
    pub items: u64,
}

/// Decodes a body.
///
/// # Errors
/// A message saying why the body is not a request of `signal` in `encoding`.
pub fn decode(signal: Signal, encoding: Encoding, body: &[u8]) -> Result<Decoded, String> {
    match (signal, encoding) {
        (Signal::Traces, Encoding::Protobuf) => ExportTraceServiceRequest::decode(body)
            .map_err(|e| format!("not an OTLP protobuf trace request: {e}"))
            .map(split_traces),
        (Signal::Traces, Encoding::Json) => from_json(body)
            .map_err(|e| format!("not an OTLP/JSON trace request: {e}"))
            .map(split_traces),
        (Signal::Logs, Encoding::Protobuf) => ExportLogsServiceRequest::decode(body)
            .map_err(|e| format!("not an OTLP protobuf logs request: {e}"))
            .map(split_logs),
        (Signal::Logs, Encoding::Json) => from_json(body)
            .map_err(|e| format!("not an OTLP/JSON logs request: {e}"))
            .map(split_logs),
    }
}

/// An OTLP/JSON request. OTLP/JSON writes enums as numbers; protobuf's own JSON mapping (what
/// `MessageToDict` and some SDKs write) as names: those are taken too.
fn from_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(body).or_else(|first| {
        let mut doc: serde_json::Value = serde_json::from_slice(body)?;
        if !enums_to_numbers(&mut doc) {
            return Err(first);
        }
        serde_json::from_value(doc)
    })
}

/// Rewrites the enum names OTLP carries (span kind, status code, severity number) as their
/// numbers, wherever they are; whether any was.
fn enums_to_numbers(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    const KINDS: [&str; 6] = [
        "UNSPECIFIED",
        "INTERNAL",
        "SERVER",
        "CLIENT",
        "PRODUCER",
        "CONSUMER",
    ];
    const CODES: [&str; 3] = ["UNSET", "OK", "ERROR"];
    const LEVELS: [&str; 6] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"];
    let number = |key: &str, name: &str| -> Option<u64> {
        let find =
            |list: &[&str], rest: &str| list.iter().position(|k| *k == rest).map(|i| i as u64);
        match key {
            "kind" => find(&KINDS, name.strip_prefix("SPAN_KIND_")?),
            "code" => find(&CODES, name.strip_prefix("STATUS_CODE_")?),
            "severityNumber" => {
                let rest = name.strip_prefix("SEVERITY_NUMBER_")?;
                if rest == "UNSPECIFIED" {
                    return Some(0);
                }
                let level = rest.trim_end_matches(|c: char| c.is_ascii_digit());
                let step: u64 = rest[level.len()..].parse().unwrap_or(1);
                let at = LEVELS.iter().position(|l| *l == level)? as u64;
                (1..=4).contains(&step).then_some(at * 4 + step)
            }
            _ => None,
        }
    };
    match v {
        Value::Object(map) => {
            let mut any = false;
            for (k, x) in map.iter_mut() {
                if let Value::String(name) = x
                    && let Some(n) = number(k, name)
                {
                    *x = Value::from(n);
                    any = true;
                } else {
                    any |= enums_to_numbers(x);
                }
            }
            any
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |any, x| enums_to_numbers(x) | any),
        _ => false,
    }
}

/// Reads one line of the write-ahead log back into the piece it was.
///
/// # Errors
/// The line is not an OTLP/JSON document of one piece.
pub fn reread(line: &[u8]) -> Result<Piece, String> {
    use serde_json::Value;
    // Read as plain JSON, as `wai ingest` reads it: what serde wrote of any value (a NaN as
    // `null`, an empty value as `{}`) reads back.
    let doc: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let (top, scopes, items, time) = if doc.get("resourceLogs").is_some() {
        (
            "resourceLogs",
            "scopeLogs",
            "logRecords",
            ["timeUnixNano", "observedTimeUnixNano"],
        )
    } else {
        (
            "resourceSpans",
            "scopeSpans",
            "spans",
            ["startTimeUnixNano", "startTimeUnixNano"],
        )
    };
    let number = |v: Option<&Value>| -> u64 {
        match v {
            Some(Value::String(s)) => s.parse().unwrap_or(0),
            Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
            _ => 0,
        }
    };
    let list = |v: &Value, key: &str| -> Vec<Value> {
        v.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut part: Part<()> = Part::default();
    let mut trace = String::new();
    for r in list(&doc, top) {
        for s in list(&r, scopes) {
            for item in list(&s, items) {
                let t = item.get("traceId").and_then(Value::as_str).unwrap_or("");
                if !t.is_empty() && t.bytes().any(|b| b != b'0') {
                    if !trace.is_empty() && trace != t {
                        return Err(format!(
                            "a log line holds one trace's items; this one holds `{trace}` and `{t}`"
                        ));
                    }
                    t.clone_into(&mut trace);
                }
                let start = match number(item.get(time[0])) {
                    0 => number(item.get(time[1])),
                    n => n,
                };
                let conv = CONVERSATION.iter().find_map(|key| {
                    let attrs = item.get("attributes")?.as_array()?;
                    let kv = attrs
                        .iter()
                        .find(|kv| kv.get("key").and_then(Value::as_str) == Some(key))?;
                    let v = kv.get("value")?;
                    match (v.get("stringValue"), v.get("intValue")) {
                        (Some(Value::String(s)), _) if !s.is_empty() => Some(s.clone()),
                        (_, Some(n @ (Value::String(_) | Value::Number(_)))) => {
                            Some(n.as_str().map_or_else(|| n.to_string(), str::to_owned))
                        }
                        _ => None,
                    }
                });
                part.note(start, conv);
            }
        }
    }
    if part.items == 0 {
        return Err(format!("no span or log record under `{top}`"));
    }
    Ok(Piece {
        keys: part.keys(&trace),
        start_ns: part.start_ns,
        items: part.items,
        line: line.to_vec(),
    })
}

/// How deep a value nests (arrays and key-value lists in one another).
fn value_depth(v: &AnyValue) -> usize {
    match &v.value {
        Some(any_value::Value::ArrayValue(a)) => {
            1 + a.values.iter().map(value_depth).max().unwrap_or(0)
        }
        Some(any_value::Value::KvlistValue(k)) => 1 + attrs_depth(&k.values),
        _ => 0,
    }
}

fn attrs_depth(attrs: &[KeyValue]) -> usize {
    attrs
        .iter()
        .filter_map(|kv| kv.value.as_ref())
        .map(value_depth)
        .max()
        .unwrap_or(0)
}

/// The most a value may nest: each level is three levels of the log's JSON, under about a dozen
/// of the document's own, and JSON readers (`wai ingest`'s too) stop at 128.
const MAX_NESTING: usize = 32;

/// Why an item's values cannot go into the log, if they cannot: the deepest of `lists` and
/// `depth` (its resource's, its body's).
fn too_deep<'a>(depth: usize, lists: impl IntoIterator<Item = &'a [KeyValue]>) -> Option<String> {
    let depth = lists.into_iter().map(attrs_depth).fold(depth, usize::max);
    (depth > MAX_NESTING)
        .then(|| format!("its values nest {depth} levels deep, more than {MAX_NESTING}"))
}

/// The response body for a request of `signal` that set `rejected` items aside, in `encoding`.
pub fn response(signal: Signal, encoding: Encoding, rejected: u64, message: &str) -> Vec<u8> {
    let rejected = i64::try_from(rejected).unwrap_or(i64::MAX);
    let message = message.to_owned();
    match signal {
        Signal::Traces => {
            let r = ExportTraceServiceResponse {
                partial_success: (rejected > 0).then_some(ExportTracePartialSuccess {
                    rejected_spans: rejected,
                    error_message: message,
                }),
            };
            match encoding {
                Encoding::Protobuf => r.encode_to_vec(),
                Encoding::Json => serde_json::to_vec(&r).unwrap_or_default(),
            }
        }
        Signal::Logs => {
            let r = ExportLogsServiceResponse {
                partial_success: (rejected > 0).then_some(ExportLogsPartialSuccess {
                    rejected_log_records: rejected,
                    error_message: message,
                }),
            };
            match encoding {
                Encoding::Protobuf => r.encode_to_vec(),
                Encoding::Json => serde_json::to_vec(&r).unwrap_or_default(),
            }
        }
    }
}

/// A `google.rpc.Status` (what OTLP/HTTP answers a failed request with).
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
pub struct Status {
    /// A `google.rpc.Code`.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What went wrong.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// A failed request's body, in `encoding`.
pub fn status(encoding: Encoding, code: i32, message: &str) -> Vec<u8> {
    let s = Status {
        code,
        message: message.to_owned(),
    };
    match encoding {
        Encoding::Protobuf => s.encode_to_vec(),
        Encoding::Json => serde_json::to_vec(&s).unwrap_or_default(),
    }
}

/// Why an id is not one, if it is not: `want` bytes, not all zero.
fn bad_id(id: &[u8], want: usize, what: &str) -> Option<String> {
    if id.len() != want {
        Some(format!("its {what} is {} bytes, not {want}", id.len()))
    } else if id.iter().all(|b| *b == 0) {
        Some(format!("its {what} is all zeros"))
    } else {
        None
    }
}

/// The conversation id an item's attributes name, if any.
fn conversation(attrs: &[KeyValue]) -> Option<String> {
    CONVERSATION.iter().find_map(|key| {
        let kv = attrs.iter().find(|kv| kv.key == *key)?;
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) if !s.is_empty() => Some(s.clone()),
            any_value::Value::IntValue(n) => Some(n.to_string()),
            _ => None,
        }
    })
}

fn hex(id: &[u8]) -> String {
    use std::fmt::Write as _;
    id.iter()
        .fold(String::with_capacity(id.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// What is gathered of one trace while a request is cut.
#[derive(Default)]
struct Part<R> {
    resources: Vec<R>,
    /// The request's (resource, scope) the last item came from: the next item of the same
    /// pair goes into the same entry.
    from: Option<(usize, usize)>,
    conversations: Vec<String>,
    start_ns: u64,
    items: u64,
}

impl<R> Part<R> {
    fn note(&mut self, start_ns: u64, conv: Option<String>) {
        if start_ns > 0 && (self.start_ns == 0 || start_ns < self.start_ns) {
            self.start_ns = start_ns;
        }
        if let Some(c) = conv
            && !self.conversations.contains(&c)
        {
            self.conversations.push(c);
        }
        self.items += 1;
    }

    fn keys(&self, trace: &str) -> Vec<String> {
        let mut keys = Vec::with_capacity(1 + self.conversations.len());
        if !trace.is_empty() {
            keys.push(format!("t:{trace}"));
        }
        keys.extend(self.conversations.iter().map(|c| format!("c:{c}")));
        keys
    }

    /// The scope entry an item from the request's resource `at.0`, scope `at.1` goes into:
    /// the last one when the last item came from the same pair, else a new one (and a new
    /// resource entry when the resource differs too).
    fn scope<S>(
        &mut self,
        at: (usize, usize),
        resource: impl FnOnce() -> R,
        scopes: impl Fn(&mut R) -> &mut Vec<S>,
        scope: impl FnOnce() -> S,
    ) -> &mut S {
        let last = self.from.replace(at);
        if last.is_none_or(|(r, _)| r != at.0) || self.resources.is_empty() {
            self.resources.push(resource());
        }
        let r = self.resources.last_mut().expect("pushed above");
        if last != Some(at) || scopes(r).is_empty() {
            scopes(r).push(scope());
        }
        scopes(r).last_mut().expect("pushed above")
    }
}

/// The parts of a request, one per trace in order of first appearance; items outside any
/// trace (log records without one) each a part of its own.
struct Parts<R> {
    list: Vec<(String, Part<R>)>,
    at: std::collections::HashMap<String, usize>,
}

impl<R: Default> Parts<R> {
    fn new() -> Self {
        Self {
            list: Vec::new(),
            at: std::collections::HashMap::new(),
        }
    }

    fn of(&mut self, trace: String) -> &mut Part<R> {
        let i = if let Some(i) = self.at.get(&trace) {
            *i
        } else {
            if !trace.is_empty() {
                self.at.insert(trace.clone(), self.list.len());
            }
            self.list.push((trace, Part::default()));
            self.list.len() - 1
        };
        &mut self.list[i].1
    }

    /// Each part as a piece: `doc` makes its OTLP document.
    fn pieces<D: serde::Serialize>(self, doc: impl Fn(Vec<R>) -> D) -> Vec<Piece> {
        self.list
            .into_iter()
            .map(|(trace, part)| Piece {
                keys: part.keys(&trace),
                start_ns: part.start_ns,
                items: part.items,
                line: serde_json::to_vec(&doc(part.resources)).unwrap_or_default(),
            })
            .collect()
    }
}

fn split_traces(req: ExportTraceServiceRequest) -> Decoded {
    let mut out = Decoded::default();
    let mut parts: Parts<ResourceSpans> = Parts::new();
    for (ri, rs) in req.resource_spans.into_iter().enumerate() {
        let ResourceSpans {
            resource,
            scope_spans,
            schema_url,
        } = rs;
        let resource_depth = resource.as_ref().map_or(0, |r| attrs_depth(&r.attributes));
        for (si, ss) in scope_spans.into_iter().enumerate() {
            let ScopeSpans {
                scope,
                spans,
                schema_url: scope_schema,
            } = ss;
            for span in spans {
                out.items += 1;
                let why = bad_id(&span.trace_id, 16, "trace id")
                    .or_else(|| bad_id(&span.span_id, 8, "span id"))
                    .or_else(|| {
                        let events = span.events.iter().map(|e| &e.attributes[..]);
                        let links = span.links.iter().map(|l| &l.attributes[..]);
                        too_deep(
                            resource_depth,
                            events.chain(links).chain([&span.attributes[..]]),
                        )
                    });
                if let Some(reason) = why {
                    out.rejected.push(Rejected {
                        reason: format!("span `{}`: {reason}", span.name),
                        item: serde_json::to_value(&span).unwrap_or_default(),
                    });
                    continue;
                }
                let part = parts.of(hex(&span.trace_id));
                part.note(span.start_time_unix_nano, conversation(&span.attributes));
                let entry = part.scope(
                    (ri, si),
                    || ResourceSpans {
                        resource: resource.clone(),
                        scope_spans: Vec::new(),
                        schema_url: schema_url.clone(),
                    },
                    |r| &mut r.scope_spans,
                    || ScopeSpans {
                        scope: scope.clone(),
                        spans: Vec::new(),
                        schema_url: scope_schema.clone(),
                    },
                );
                entry.spans.push(span);
            }
        }
    }
    out.pieces = parts.pieces(|resource_spans| ExportTraceServiceRequest { resource_spans });
    out
}

fn split_logs(req: ExportLogsServiceRequest) -> Decoded {
    let mut out = Decoded::default();
    let mut parts: Parts<ResourceLogs> = Parts::new();
    for (ri, rl) in req.resource_logs.into_iter().enumerate() {
        let ResourceLogs {
            resource,
            scope_logs,
            schema_url,
        } = rl;
        let resource_depth = resource.as_ref().map_or(0, |r| attrs_depth(&r.attributes));
        for (si, sl) in scope_logs.into_iter().enumerate() {
            let ScopeLogs {
                scope,
                log_records,
                schema_url: scope_schema,
            } = sl;
            for record in log_records {
                out.items += 1;
                // Log records may stand outside any trace: no ids, or ids of zeros.
                let traced = !record.trace_id.is_empty() && record.trace_id.iter().any(|b| *b != 0);
                let has_span = !record.span_id.is_empty() && record.span_id.iter().any(|b| *b != 0);
                let body_depth = record.body.as_ref().map_or(0, value_depth);
                let why = too_deep(resource_depth.max(body_depth), [&record.attributes[..]])
                    .or_else(|| {
                        traced
                            .then(|| bad_id(&record.trace_id, 16, "trace id"))
                            .flatten()
                    })
                    .or_else(|| {
                        (traced && has_span)
                            .then(|| bad_id(&record.span_id, 8, "span id"))
                            .flatten()
                    });
                if let Some(reason) = why {
                    out.rejected.push(Rejected {
                        reason: format!("log record: {reason}"),
                        item: serde_json::to_value(&record).unwrap_or_default(),
                    });
                    continue;
                }
                let trace = if traced {
                    hex(&record.trace_id)
                } else {
                    String::new()
                };
                let part = parts.of(trace);
                let time = if record.time_unix_nano > 0 {
                    record.time_unix_nano
                } else {
                    record.observed_time_unix_nano
                };
                part.note(time, conversation(&record.attributes));
                let entry = part.scope(
                    (ri, si),
                    || ResourceLogs {
                        resource: resource.clone(),
                        scope_logs: Vec::new(),
                        schema_url: schema_url.clone(),
                    },
                    |r| &mut r.scope_logs,
                    || ScopeLogs {
                        scope: scope.clone(),
                        log_records: Vec::new(),
                        schema_url: scope_schema.clone(),
                    },
                );
                entry.log_records.push(record);
            }
        }
    }
    out.pieces = parts.pieces(|resource_logs| ExportLogsServiceRequest { resource_logs });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::AnyValue;
    use opentelemetry_proto::tonic::logs::v1::LogRecord;
    use opentelemetry_proto::tonic::trace::v1::Span;

    fn span(trace: u8, id: u8, conv: Option<&str>) -> Span {
        let mut attributes = vec![KeyValue {
            key: "gen_ai.operation.name".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("chat".into())),
            }),
            ..KeyValue::default()
        }];
        if let Some(c) = conv {
            attributes.push(KeyValue {
                key: "gen_ai.conversation.id".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(c.into())),
                }),
                ..KeyValue::default()
            });
        }
        Span {
            trace_id: vec![trace; 16],
            span_id: vec![id; 8],
            name: format!("chat {id}"),
            start_time_unix_nano: 1_700_000_000_000_000_000 + u64::from(id),
            attributes,
            ..Span::default()
        }
    }

    fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        }
    }

    #[test]
    fn a_request_is_cut_a_piece_per_trace_and_bad_ids_are_set_aside() {
        let mut bad = span(3, 9, None);
        bad.span_id = vec![1, 2, 3];
        let mut zeros = span(0, 5, None);
        zeros.trace_id = vec![0; 16];
        let req = request(vec![
            span(1, 1, None),
            span(2, 2, Some("conv-7")),
            bad,
            span(1, 3, None),
            zeros,
        ]);
        let body = req.encode_to_vec();
        let got = decode(Signal::Traces, Encoding::Protobuf, &body).unwrap();
        assert_eq!(got.items, 5);
        assert_eq!(got.pieces.len(), 2);
        assert_eq!(got.pieces[0].keys, vec![format!("t:{}", "01".repeat(16))]);
        assert_eq!(got.pieces[0].items, 2);
        assert_eq!(
            got.pieces[1].keys,
            vec![format!("t:{}", "02".repeat(16)), "c:conv-7".to_owned()]
        );
        assert_eq!(got.rejected.len(), 2);
        assert!(
            got.rejected[0].reason.contains("span id is 3 bytes"),
            "{:?}",
            got.rejected[0]
        );
        assert!(got.rejected[1].reason.contains("all zeros"));
        // The piece is OTLP/JSON with hex ids, which reads back as the same piece.
        let line = String::from_utf8(got.pieces[0].line.clone()).unwrap();
        assert!(
            line.contains(&format!("\"traceId\":\"{}\"", "01".repeat(16))),
            "{line}"
        );
        assert_eq!(reread(line.as_bytes()).unwrap(), got.pieces[0]);
        // The same request as JSON decodes to the same pieces.
        let json = serde_json::to_vec(&req).unwrap();
        let again = decode(Signal::Traces, Encoding::Json, &json).unwrap();
        assert_eq!(again.pieces, got.pieces);
    }

    #[test]
    fn what_serde_writes_of_any_value_reads_back_and_deep_values_are_set_aside() {
        let mut s = span(6, 1, Some("c-9"));
        s.attributes.push(KeyValue {
            key: "x.nan".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::DoubleValue(f64::NAN)),
            }),
            ..KeyValue::default()
        });
        s.attributes.push(KeyValue {
            key: "x.empty".into(),
            value: Some(AnyValue { value: None }),
            ..KeyValue::default()
        });
        let got = decode(
            Signal::Traces,
            Encoding::Protobuf,
            &request(vec![s]).encode_to_vec(),
        )
        .unwrap();
        assert_eq!(got.pieces.len(), 1);
        assert_eq!(reread(&got.pieces[0].line).unwrap(), got.pieces[0]);
        let mut v = AnyValue {
            value: Some(any_value::Value::StringValue("leaf".into())),
        };
        for _ in 0..40 {
            v = AnyValue {
                value: Some(any_value::Value::ArrayValue(
                    opentelemetry_proto::tonic::common::v1::ArrayValue { values: vec![v] },
                )),
            };
        }
        let mut deep = span(7, 1, None);
        deep.attributes.push(KeyValue {
            key: "x.deep".into(),
            value: Some(v),
            ..KeyValue::default()
        });
        let got = decode(
            Signal::Traces,
            Encoding::Protobuf,
            &request(vec![deep, span(8, 2, None)]).encode_to_vec(),
        )
        .unwrap();
        assert_eq!(got.pieces.len(), 1);
        assert_eq!(got.rejected.len(), 1);
        assert!(
            got.rejected[0].reason.contains("nest 40 levels deep"),
            "{:?}",
            got.rejected[0]
        );
    }

    #[test]
    fn garbage_is_an_error_not_an_empty_request() {
        assert!(decode(Signal::Traces, Encoding::Json, b"{\"resourceSpans\": 7}").is_err());
        assert!(decode(Signal::Logs, Encoding::Protobuf, b"\xff\xff\xff\xff").is_err());
        assert!(reread(b"{\"resourceSpans\": []}").is_err());
    }

    #[test]
    fn log_records_without_a_trace_are_pieces_of_their_own() {
        let record = |trace: Vec<u8>| LogRecord {
            trace_id: trace,
            time_unix_nano: 5,
            ..LogRecord::default()
        };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![
                        record(vec![]),
                        record(vec![4; 16]),
                        record(vec![]),
                        record(vec![4; 16]),
                        record(vec![4; 3]),
                    ],
                    ..ScopeLogs::default()
                }],
                ..ResourceLogs::default()
            }],
        };
        let got = decode(Signal::Logs, Encoding::Protobuf, &req.encode_to_vec()).unwrap();
        let keys: Vec<_> = got.pieces.iter().map(|p| p.keys.len()).collect();
        assert_eq!(keys, vec![0, 1, 0]);
        assert_eq!(got.pieces[1].items, 2);
        assert_eq!(got.rejected.len(), 1);
        let back = reread(&got.pieces[1].line).unwrap();
        assert_eq!(back, got.pieces[1]);
    }

    #[test]
    fn pieces_take_the_ingest_readers_fast_path() {
        use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
        use opentelemetry_proto::tonic::trace::v1::{Status, span::Event, status::StatusCode};
        let value = |v: any_value::Value| Some(AnyValue { value: Some(v) });
        let attr = |key: &str, v: Option<AnyValue>| KeyValue {
            key: key.into(),
            value: v,
            ..KeyValue::default()
        };
        let mut s = span(9, 1, Some("c-1"));
        s.attributes.extend([
            attr("n", value(any_value::Value::IntValue(-4))),
            attr("d", value(any_value::Value::DoubleValue(0.25))),
            attr("d.nan", value(any_value::Value::DoubleValue(f64::NAN))),
            attr("b", value(any_value::Value::BoolValue(true))),
            attr("bytes", value(any_value::Value::BytesValue(vec![0, 1]))),
            attr("empty", Some(AnyValue { value: None })),
            attr("none", None),
            attr(
                "gen_ai.input.messages",
                value(any_value::Value::StringValue(
                    r#"[{"role": "user", "content": "hi"}]"#.into(),
                )),
            ),
            attr(
                "list",
                value(any_value::Value::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(any_value::Value::KvlistValue(KeyValueList {
                            values: vec![attr(
                                "k",
                                value(any_value::Value::StringValue("v".into())),
                            )],
                        })),
                    }],
                })),
            ),
        ]);
        s.events.push(Event {
            name: "exception".into(),
            attributes: vec![attr(
                "exception.message",
                value(any_value::Value::StringValue("x".into())),
            )],
            ..Event::default()
        });
        s.status = Some(Status {
            message: "boom".into(),
            code: StatusCode::Error.into(),
        });
        let traces = decode(
            Signal::Traces,
            Encoding::Protobuf,
            &request(vec![s, span(9, 2, None)]).encode_to_vec(),
        )
        .unwrap();
        let logs = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord {
                        trace_id: vec![9; 16],
                        span_id: vec![1; 8],
                        time_unix_nano: 5,
                        event_name: "gen_ai.client.inference.operation.details".into(),
                        attributes: vec![attr(
                            "gen_ai.conversation.id",
                            value(any_value::Value::StringValue("c-1".into())),
                        )],
                        body: Some(AnyValue {
                            value: Some(any_value::Value::KvlistValue(KeyValueList {
                                values: vec![attr(
                                    "content",
                                    value(any_value::Value::StringValue("hello".into())),
                                )],
                            })),
                        }),
                        ..LogRecord::default()
                    }],
                    ..ScopeLogs::default()
                }],
                ..ResourceLogs::default()
            }],
        };
        let logs = decode(Signal::Logs, Encoding::Protobuf, &logs.encode_to_vec()).unwrap();
        let pieces = traces.pieces.iter().chain(&logs.pieces).collect::<Vec<_>>();
        assert_eq!(pieces.len(), 2);
        for piece in pieces {
            let line = String::from_utf8_lossy(&piece.line);
            let spans = crate::pipeline::ingest::otel::line_spans(&piece.line, 1, &mut 0);
            assert!(spans.is_some(), "{line}");
            crate::pipeline::ingest::otel::assert_alike(&piece.line);
        }
    }
}
