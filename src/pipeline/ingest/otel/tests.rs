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
