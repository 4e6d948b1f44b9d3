//! Tests of the `OTel` reader: the reference example, the parts form, out-of-order spans and
//! traces, calls inside messages, indexed attributes.

use serde_json::{Value, json};

use super::indexed::fold_indexed;
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

fn span(trace: &str, start: u64, attrs: &[Value]) -> Value {
    json!({"traceId": trace, "spanId": format!("s{start}"), "name": "chat", "startTimeUnixNano": start.to_string(), "attributes": attrs})
}

#[test]
fn the_reference_example_and_the_parts_form() {
    let batch = json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        span("t1", 300, &[
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
        span("t1", 100, &[
            kv("gen_ai.request.model", json!("gpt-x")),
            kv("gen_ai.input.messages", json!(r#"[{"role": "system", "content": "policy"}, {"role": "user", "content": "Refund A1001 please"}]"#)),
            kv("gen_ai.usage.input_tokens", json!(5)), kv("gen_ai.usage.output_tokens", json!(2)),
        ]),
    ]}]}]});
    let mut order = 0;
    let convs = group(spans(batch.clone(), 1, &mut order).unwrap());
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
    let convs = group(spans(parts.clone(), 1, &mut order).unwrap());
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
    let convs = group(spans(record.clone(), 3, &mut order).unwrap());
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
    let convs = group(spans(record.clone(), 1, &mut order).unwrap());
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

#[test]
fn a_document_whose_resource_spans_is_no_list_is_read_for_its_logs() {
    // `resourceSpans: null` beside real log records: the logs are read, as before the reader
    // took documents apart in place.
    let doc = json!({"resourceSpans": null, "resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"traceId": "t9", "spanId": "s1", "timeUnixNano": "5",
         "attributes": [kv("event.name", json!("gen_ai.user.message"))],
         "body": {"stringValue": "hello"}}
    ]}]}]});
    let mut order = 0;
    let got = spans(doc, 1, &mut order).unwrap();
    assert_eq!(got.len(), 1);
    // And one with neither list is handed back whole, for the rejects file.
    let none = json!({"resourceSpans": "x"});
    assert_eq!(spans(none.clone(), 1, &mut order).unwrap_err(), none);
}

/// Lines of OTLP JSON, each with whether the fast path reads it (`true`) or leaves it to the
/// general path: each rule of the general path's reading, once.
fn edge_lines() -> Vec<(bool, String)> {
    let kv_raw = |key: &str, value: Value| json!({"key": key, "value": value});
    let spans_doc = |spans: Value| json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]});
    let logs_doc =
        |records: Value| json!({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]});
    let read = [
        // The usual shape, with every AnyValue kind and a JSON text in a string.
        spans_doc(
            json!([{"traceId": "t1", "spanId": "s1", "name": "chat", "startTimeUnixNano": "100",
            "kind": "SPAN_KIND_CLIENT", "flags": 256, "status": {},
            "attributes": [
                kv("gen_ai.conversation.id", json!("c1")),
                kv("gen_ai.input.messages", json!(r#" [{"role": "user", "content": "hi"}]"#)),
                kv("not.json", json!("{broken")),
                kv_raw("n", json!({"intValue": "12"})),
                kv_raw("n.big", json!({"intValue": "99999999999999999999"})),
                kv_raw("n.word", json!({"intValue": "twelve"})),
                kv_raw("n.num", json!({"intValue": -3})),
                kv_raw("d", json!({"doubleValue": 0.5})),
                kv_raw("d.nan", json!({"doubleValue": "NaN"})),
                kv_raw("b", json!({"boolValue": true})),
                kv_raw("a", json!({"arrayValue": {"values": [{"stringValue": "x"}, {"intValue": "2"}, 7, [1]]}})),
                kv_raw("a.none", json!({"arrayValue": {}})),
                kv_raw("a.null", json!({"arrayValue": {"values": null}})),
                kv_raw("m", json!({"kvlistValue": {"values": [kv("inner", json!("v")), kv_raw("deep", json!({"kvlistValue": {"values": null}}))]}})),
                kv_raw("m.none", json!({"kvlistValue": {}})),
                kv_raw("bytes", json!({"bytesValue": "AAE="})),
                kv_raw("empty", json!({})),
                kv_raw("s.num", json!({"stringValue": 5})),
                kv_raw("plain", json!("as is")),
                kv_raw("list", json!([1, {"stringValue": "y"}])),
                kv_raw("null", Value::Null),
                json!({"key": "missing"}),
                kv("twice", json!("first")),
                kv("twice", json!("second")),
            ]}]),
        ),
        // Times, statuses and events of every kind the general path reads.
        spans_doc(json!([
            {"traceId": "t2", "spanId": "s2", "startTimeUnixNano": 7, "status": {"code": 2, "message": "boom"},
             "events": [{"name": "exception", "attributes": [kv("exception.message", json!("db down"))]}, {}, {"name": ""}],
             "attributes": [kv("gen_ai.tool.name", json!("lookup"))]},
            {"traceId": "", "spanId": "s3", "name": "", "startTimeUnixNano": -5, "status": {"code": "STATUS_CODE_ERROR"}},
            {"traceId": null, "startTimeUnixNano": 1.5, "status": {"code": "error", "message": ""}, "events": null, "attributes": null},
            {"startTimeUnixNano": "soon", "status": {"code": 1}},
            {}
        ])),
        // OpenLLMetry's indexed attributes, folded.
        spans_doc(json!([{"traceId": "t4", "spanId": "s4", "attributes": [
            kv("gen_ai.prompt.0.role", json!("user")), kv("gen_ai.prompt.0.content", json!("hello")),
            kv("gen_ai.completion.0.content", json!("hi there"))]}])),
        // Log records: times, event names and every body.
        logs_doc(json!([
            {"traceId": "t5", "spanId": "s5", "timeUnixNano": "0", "observedTimeUnixNano": "9",
             "eventName": "gen_ai.user.message", "body": {"kvlistValue": {"values": [kv("content", json!("hello"))]}}},
            {"timeUnixNano": "3", "attributes": [kv("event.name", json!("gen_ai.choice"))],
             "body": {"kvlistValue": {"values": [kv_raw("message", json!({"kvlistValue": {"values": [kv("content", json!("hi"))]}}))]}}},
            {"eventName": "", "body": {"kvlistValue": {"values": [kv("k", json!("v"))]}}},
            {"eventName": "other", "body": {"stringValue": "plain text"}},
            {"body": null}, {"body": {}}, {}
        ])),
        // Both lists: the spans are read.
        json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "s6"}]}]}],
               "resourceLogs": [{"scopeLogs": [{"logRecords": [{"spanId": "l6"}]}]}]}),
        json!({"resourceSpans": null, "resourceLogs": [{"scopeLogs": [{"logRecords": [{"spanId": "l7"}]}]}]}),
        json!({"resourceSpans": [{"scopeSpans": null}, {"scopeSpans": [{"spans": null}, {"spans": [{"spanId": "s8"}]}]}]}),
    ];
    let general = [
        // Other spellings of keys.
        spans_doc(json!([{"trace_id": "t1", "spanId": "s1"}])),
        spans_doc(json!([{"spanId": "s1", "startedMs": 5}])),
        spans_doc(json!([{"spanId": "s1", "start_time_unix_nano": "5"}])),
        json!({"resourceSpans": [{"instrumentationLibrarySpans": [{"spans": [{"spanId": "s1"}]}]}]}),
        logs_doc(json!([{"span_id": "s1"}])),
        // Values of other types.
        spans_doc(json!([{"traceId": 12, "spanId": "s1"}])),
        spans_doc(json!([{"spanId": "s1", "name": 3}])),
        spans_doc(json!([{"spanId": "s1", "status": {"code": true}}])),
        spans_doc(json!([{"spanId": "s1", "status": {"message": 4}}])),
        spans_doc(json!([{"spanId": "s1", "startTimeUnixNano": true}])),
        spans_doc(json!([{"spanId": "s1", "events": {}}])),
        spans_doc(json!([{"spanId": "s1", "events": [{"name": 5}]}])),
        spans_doc(json!([{"spanId": "s1", "attributes": {"plain": "map"}}])),
        spans_doc(
            json!([{"spanId": "s1", "attributes": [{"key": 5, "value": {"stringValue": "x"}}]}]),
        ),
        spans_doc(
            json!([{"spanId": "s1", "attributes": [kv_raw("two", json!({"stringValue": "x", "intValue": "1"}))]}]),
        ),
        spans_doc(
            json!([{"spanId": "s1", "attributes": [kv_raw("a", json!({"arrayValue": {"values": "x"}}))]}]),
        ),
        spans_doc(
            json!([{"spanId": "s1", "attributes": [kv_raw("m", json!({"kvlistValue": {"values": {"k": "v"}}}))]}]),
        ),
        logs_doc(json!([{"eventName": 7}])),
        // Lists where objects belong.
        spans_doc(json!([["t1", "s1", "chat"]])),
        spans_doc(json!([{"spanId": "s1", "status": [2, "boom"]}])),
        spans_doc(json!([{"spanId": "s1", "attributes": [["k", {"stringValue": "v"}]]}])),
        json!({"resourceSpans": [[[{"spanId": "s1"}]]]}),
        json!([{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "s1"}]}]}]}]),
        // No span at all, and the other document forms.
        spans_doc(json!([])),
        json!({"resourceSpans": [{"scopeSpans": [{"spans": [1, 2]}]}]}),
        json!({"spans": [{"traceId": "t1", "spanId": "s1"}]}),
        json!({"traceId": "t1", "spanId": "s1"}),
        json!({"resourceSpans": "x"}),
    ];
    let mut lines: Vec<(bool, String)> = read.iter().map(|d| (true, d.to_string())).collect();
    lines.extend(general.iter().map(|d| (false, d.to_string())));
    lines.extend(raw_edge_lines());
    lines
}

/// Lines written as text: what JSON values cannot hold (a key twice, text the general path cannot
/// parse) and the fields OTLP defines that no span takes.
fn raw_edge_lines() -> Vec<(bool, String)> {
    let mut lines = Vec::new();
    // Lines the general path cannot parse, whatever the fast path's fields: a lone surrogate,
    // a number out of range and nesting past serde_json's limit, each in a value no span takes.
    lines.push((
        false,
        r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"s","kind":"\ud800"}]}]}]}"#.into(),
    ));
    lines.push((false, r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"s","endTimeUnixNano":1e400}]}]}]}"#.into()));
    lines.push((
        false,
        format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"spanId":"s","links":{}{}}}]}}]}}]}}"#,
            "[".repeat(130),
            "]".repeat(130)
        ),
    ));
    lines.push((false, r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"stringValue":"\udc00"}}]},"scopeSpans":[{"spans":[{"spanId":"s"}]}]}]}"#.into()));
    // A key OTLP does not name, beside spans the general path reads.
    lines.push((
        false,
        r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"s","custom":1}]}]}]}"#.into(),
    ));
    // The spec's other fields, which no span takes, are read past.
    lines.push((true, r#"{"resourceSpans":[{"resource":{"attributes":[],"droppedAttributesCount":0},"schemaUrl":"","scopeSpans":[{"scope":{"name":"x","version":"1"},"schemaUrl":"","spans":[{"spanId":"s","traceState":"","parentSpanId":"p","flags":256,"kind":2,"endTimeUnixNano":"9","droppedAttributesCount":0,"droppedEventsCount":0,"droppedLinksCount":0,"links":[{"traceId":"t","spanId":"u","attributes":[]}],"events":[{"timeUnixNano":"3","name":"e","attributes":[],"droppedAttributesCount":0}]}]}]}]}"#.into()));
    lines.push((true, r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"severityNumber":9,"severityText":"INFO","flags":1,"droppedAttributesCount":0,"eventName":"gen_ai.choice","attributes":[{"key":"event.name","value":{"stringValue":"other"}}],"body":{"kvlistValue":{"values":[{"key":"message","value":{"stringValue":"hi"}}]}}}]}]}],"resourceSpans":null}"#.into()));
    // An empty list of spans is the document's: its log records are not read.
    lines.push((
        false,
        r#"{"resourceSpans":[],"resourceLogs":[{"scopeLogs":[{"logRecords":[{"spanId":"l"}]}]}]}"#
            .into(),
    ));
    // A key twice, which serde_json's maps keep the last of.
    lines.push((
        false,
        r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "a", "spanId": "b"}]}]}]}"#
            .into(),
    ));
    lines.push((false, r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "a", "attributes": [{"key": "k", "value": {"stringValue": "a", "stringValue": "b"}}]}]}]}]}"#.into()));
    lines
}

#[test]
fn the_fast_path_reads_what_the_general_one_reads() {
    for (fast, line) in edge_lines() {
        let mut order = 0;
        let got = line_spans(line.as_bytes(), 1, &mut order);
        assert_eq!(got.is_some(), fast, "{line}");
        assert_alike(line.as_bytes());
    }
    // Every line of every fixture: the real exporters' output takes the fast path.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ingest/otel");
    let (mut lines, mut fast) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read(entry.unwrap().path()).unwrap();
        for line in text
            .split(|b| *b == b'\n')
            .filter(|l| !l.trim_ascii().is_empty())
        {
            assert_alike(line);
            lines += 1;
            fast += usize::from(line_spans(line, 1, &mut 0).is_some());
        }
    }
    assert!(lines >= 9, "{lines} fixture lines");
    assert_eq!(fast, lines, "every fixture line takes the fast path");
    // A byte that is no UTF-8, in a value no span takes: the general path cannot parse it.
    let bad = b"{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"spanId\":\"s\",\"kind\":\"\xff\"}]}]}]}";
    assert!(line_spans(bad, 1, &mut 0).is_none());
    assert_alike(bad);
}
