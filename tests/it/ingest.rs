//! `wai ingest`: OpenAI chat, τ-bench, `OTel` GenAI spans, auto-detection, rejects.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{fixture, json_eq, read_jsonl, wai};

/// Ingests `input` to JSONL in a temp dir and returns (report, rows).
fn ingest(input: &Path, args: &[&str]) -> (Value, Vec<Value>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rows.jsonl");
    let o = wai()
        .args(["--json", "ingest"])
        .arg(input)
        .arg("-o")
        .arg(&out)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = crate::support::envelope(&o.stdout)["report"].clone();
    let rows = read_jsonl(&out);
    (report, rows, dir)
}

/// Ingests `input` expecting bad data (exit 65) and no output; returns stderr.
fn ingest_fails(input: &Path, dir: &Path) -> String {
    let target = dir.join("x.parquet");
    let out = wai()
        .arg("ingest")
        .arg(input)
        .arg("-o")
        .arg(&target)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(!target.exists(), "no output after a failed run");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn openai_chat_rollouts_become_rows() {
    let dir = tempfile::tempdir().unwrap();
    let rejects = dir.path().join("rejects.jsonl");
    let (report, rows, _d) = ingest(
        &fixture("chat_rollouts.jsonl"),
        &["--rejects", rejects.to_str().unwrap()],
    );
    assert_eq!(report["inputs"][0]["format"], "openai-chat");
    assert_eq!(
        (report["rows"].as_u64(), report["rejected"].as_u64()),
        (Some(4), Some(2))
    );
    let set_aside = read_jsonl(&rejects);
    assert_eq!(
        (
            set_aside[0]["line"].as_u64(),
            set_aside[0]["field"].as_str()
        ),
        (Some(5), Some("reward"))
    );
    assert_eq!(
        (
            set_aside[1]["line"].as_u64(),
            set_aside[1]["field"].as_str()
        ),
        (Some(6), Some("messages"))
    );

    let first = &rows[0];
    assert_eq!(
        first["prompt"], "Refund order A1, please.",
        "the system policy stays out of the prompt"
    );
    assert_eq!(first["final_text"], "Done: A1 is refunded ($40).");
    assert_eq!(first["tools_used"], json!(["lookup_order", "issue_refund"]));
    assert_eq!(
        first["steps"][1],
        json!({"tool": "issue_refund", "arguments": {"order_id": "A1", "amount": 40}, "result": {"status": "ok"}})
    );
    assert_eq!(
        (
            first["task_id"].clone(),
            first["rollout_index"].clone(),
            first["reward"].clone()
        ),
        (json!("refund-A1"), json!(0), json!(1))
    );

    let second = &rows[1];
    assert_eq!(
        second["steps"],
        json!([
            {"text": "Let me check.", "tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"status": "error", "error": "timeout"}},
            {"text": "The lookup timed out. Shall I try again?"},
            {"user": "Yes, try again."},
            {"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"status": "ok", "amount": 40}}
        ])
    );
    assert_eq!(rows[2]["prompt"], "Where is B2?", "content parts");
    assert!(
        rows[2].get("reward").is_none() && rows[3]["reward"].is_null(),
        "missing rewards stay unjudged"
    );

    // The original message lists come back as given.
    let input = read_jsonl(&fixture("chat_rollouts.jsonl"));
    assert!(json_eq(&rows[1]["messages"], &input[1]["messages"]));
    assert_eq!(rows[0]["id"], "run-1", "unknown fields are kept");
}

#[test]
fn a_bad_record_stops_the_run_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = ingest_fails(&fixture("chat_rollouts.jsonl"), dir.path());
    assert!(
        stderr.contains("chat_rollouts.jsonl` line 5: field `reward`"),
        "{stderr}"
    );
}

#[test]
fn tau_bench_results_ingest_and_feed_pass_at() {
    let (report, rows, dir) = ingest(&fixture("tau_bench_airline_sample.json"), &[]);
    assert_eq!(report["inputs"][0]["format"], "tau-bench");
    assert_eq!(
        (report["rows"].as_u64(), report["rejected"].as_u64()),
        (Some(12), Some(0))
    );
    let source: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(fixture("tau_bench_airline_sample.json")).unwrap(),
    )
    .unwrap();
    for (row, rec) in rows.iter().zip(&source) {
        assert_eq!(row["task_id"], rec["task_id"]);
        assert_eq!(row["rollout_index"], rec["trial"]);
        assert!(json_eq(&row["reward"], &rec["reward"]));
        assert!(
            !row["prompt"]
                .as_str()
                .unwrap()
                .contains("Airline Agent Policy")
        );
        assert!(
            json_eq(&row["privileged"]["info"], &rec["info"]),
            "info is privileged"
        );
        assert!(row.get("info").is_none());
    }
    let out = wai()
        .args(["--json", "pass-at", "--k", "4"])
        .arg(dir.path().join("rows.jsonl"))
        .output()
        .unwrap();
    let doc: Value = crate::support::envelope(&out.stdout)["report"].clone();
    assert_eq!(doc["results"][0]["n_groups"], 3);
    assert_eq!(doc["results"][0]["n_groups_at_k"], 3);
}

#[test]
fn the_whole_tau_bench_file_when_shared_is_there() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/external/tau-bench/gpt-4o-airline.json");
    if !path.exists() {
        eprintln!("skipped: ../shared is not here");
        return;
    }
    let (report, rows, _d) = ingest(&path, &[]);
    assert_eq!(
        (report["rows"].as_u64(), report["rejected"].as_u64()),
        (Some(200), Some(0))
    );
    let tasks: std::collections::BTreeSet<String> =
        rows.iter().map(|r| r["task_id"].to_string()).collect();
    assert_eq!(tasks.len(), 50);
    let source: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        rows.iter()
            .zip(&source)
            .all(|(r, s)| json_eq(&r["reward"], &s["reward"]))
    );
}

#[test]
fn otel_spans_become_one_row_per_conversation() {
    let (report, rows, _d) = ingest(&fixture("otel_spans.jsonl"), &[]);
    assert_eq!(report["inputs"][0]["format"], "otel");
    assert_eq!(report["rows"], 3);
    let one = &rows[0];
    assert_eq!(one["task_id"], "refund-A1001");
    assert_eq!(one["rollout_id"], "conv-1");
    assert_eq!(one["prompt"], "Refund A1001 please");
    assert_eq!(
        one["steps"],
        json!([
            {"tool": "lookup_order", "arguments": {"order_id": "A1001"}, "result": {"status": "error", "output": null, "error": "db down"}},
            {"user": "any news?"}
        ])
    );
    assert_eq!(
        (
            one["final_text"].clone(),
            one["reward"].clone(),
            one["ts"].clone()
        ),
        (json!("Refunded."), json!(1), json!(1000))
    );
    assert_eq!(
        one["usage"],
        json!({"input_tokens": 12, "output_tokens": 5})
    );
    assert_eq!(one["agent_name"], "support");
    // The `parts` form, which the reference drops, and a reward from an evaluation event.
    let two = &rows[1];
    assert_eq!(
        (two["prompt"].clone(), two["final_text"].clone()),
        (json!("Where is order B2?"), json!("It ships tomorrow."))
    );
    assert_eq!(
        (two["reward"].clone(), two["reason"].clone()),
        (json!(0), json!("no lookup was made"))
    );
    // No conversation id: the trace is the conversation; no reward: unjudged.
    let three = &rows[2];
    assert_eq!(three["rollout_id"], "cc03");
    assert!(three.get("reward").is_none());
}

#[test]
fn auto_detection_names_what_it_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    let odd = dir.path().join("odd.jsonl");
    std::fs::write(&odd, "{\"hello\": 1}\n").unwrap();
    let stderr = ingest_fails(&odd, dir.path());
    assert!(
        stderr.contains("cannot tell the format of")
            && stderr.contains("OTLP spans")
            && stderr.contains("--format"),
        "{stderr}"
    );
    // Named explicitly, the reference's rows ingest as `convert` reads them.
    let (report, rows, _d) = ingest(&fixture("example_rows.jsonl"), &["--format", "whileai"]);
    assert_eq!((report["rows"].as_u64(), rows.len()), (Some(200), 200));
    let (report, _, _d) = ingest(&fixture("example_rows.jsonl"), &[]);
    assert_eq!(report["inputs"][0]["format"], "whileai");
}

#[test]
fn a_broken_otel_file_sets_the_rest_aside() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("spans.jsonl");
    let good = std::fs::read_to_string(fixture("otel_spans.jsonl")).unwrap();
    let first = good.lines().next().unwrap();
    std::fs::write(&input, format!("{first}\n{{\"resourceSpans\": [oops\n")).unwrap();
    let rejects = dir.path().join("r.jsonl");
    let (report, rows, _d) = ingest(
        &input,
        &["--format", "otel", "--rejects", rejects.to_str().unwrap()],
    );
    assert_eq!(
        (
            report["rows"].as_u64(),
            report["rejected"].as_u64(),
            rows.len()
        ),
        (Some(1), Some(1), 1)
    );
    assert_eq!(read_jsonl(&rejects)[0]["line"], 2);
}

/// The `inspect_ai` log `tests/fixtures/ingest/make_fixtures.py` made (inspect-ai 0.3.285, three
/// samples, four epochs, a tool that fails on some calls, a C/I scorer and a C/P/I one).
fn inspect_log(name: &str) -> std::path::PathBuf {
    fixture(&format!("ingest/inspect/{name}"))
}

#[test]
fn inspect_eval_logs_become_rows() {
    let (report, rows, _d) = ingest(&inspect_log("orders.eval"), &[]);
    assert_eq!(report["inputs"][0]["format"], "inspect");
    assert_eq!(report["rows"], 12);
    let first = &rows[0];
    assert_eq!(
        (
            &first["task_id"],
            &first["rollout_index"],
            &first["prompt"],
            &first["final_text"]
        ),
        (
            &json!("A1"),
            &json!(0),
            &json!("Where is order A1?"),
            &json!("Order A1 has shipped.")
        )
    );
    assert_eq!(
        first["steps"],
        json!([{"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": "order A1: shipped"}])
    );
    assert_eq!(
        (
            &first["reward"],
            &first["model_version"],
            &first["category"],
            &first["finish_reason"]
        ),
        (
            &json!(1),
            &json!("openai/fake-model"),
            &json!("orders"),
            &json!("stop")
        )
    );
    assert_eq!(first["privileged"], json!({"reference": "shipped"}));
    assert_eq!(
        first["metadata"],
        json!({"tier": "easy"}),
        "metadata rides in extra"
    );
    assert!(first.get("events").is_none() && first.get("events_data").is_none());
    // The third sample's tool failed: its step carries inspect's error, the answer scores I.
    let failed = &rows[2];
    assert_eq!(
        failed["steps"][0]["result"],
        json!({"status": "error", "error": "database timeout", "output": ""})
    );
    assert_eq!(failed["reward"], json!(0));
    let ids: std::collections::HashSet<&str> = rows
        .iter()
        .map(|r| r["rollout_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 12, "each sample's uuid is its rollout id");

    // `--score` picks the other scorer: P reads as 0.5.
    let (_, graded, _d) = ingest(&inspect_log("orders.eval"), &["--score", "graded"]);
    assert_eq!(
        (&graded[2]["reward"], &graded[2]["judge_name"]),
        (&json!(0.5), &json!("graded"))
    );
}

#[test]
fn inspect_json_logs_and_sample_lines_read_as_the_archive_does() {
    let (_, archive, _d) = ingest(&inspect_log("orders.eval"), &[]);
    for name in ["orders.json", "orders_samples.jsonl"] {
        let (report, rows, _d) = ingest(&inspect_log(name), &[]);
        assert_eq!(report["inputs"][0]["format"], "inspect", "{name}");
        assert_eq!(rows.len(), 3, "{name}: the first epoch");
        for (row, want) in rows.iter().zip(&archive) {
            for key in [
                "task_id",
                "rollout_id",
                "prompt",
                "steps",
                "final_text",
                "reward",
            ] {
                assert_eq!(row[key], want[key], "{name}: {key}");
            }
        }
    }
}

#[test]
fn pass_at_on_an_inspect_log_equals_inspects_reducers() {
    let (_, _, dir) = ingest(&inspect_log("orders.eval"), &[]);
    let rows = dir.path().join("rows.jsonl");
    let numbers: Value = serde_json::from_str(
        &std::fs::read_to_string(inspect_log("orders_inspect_numbers.json")).unwrap(),
    )
    .unwrap();
    let o = wai()
        .args(["--json", "pass-at", "--k", "2", "--min-k", "2"])
        .arg(&rows)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = crate::support::envelope(&o.stdout)["report"].clone();
    let r = &report["results"][0];
    let inspect = &numbers["includes"];
    for (ours, theirs) in [
        ("pass_at_1", "pass_at_1"),
        ("pass_at_1", "mean"),
        ("pass_at_k", "pass_at_2"),
        ("pass_pow_k", "pass_k_2"),
    ] {
        let (a, b) = (r[ours].as_f64().unwrap(), inspect[theirs].as_f64().unwrap());
        assert!(
            (a - b).abs() < 1e-12,
            "{ours} {a} against inspect's {theirs} {b}"
        );
    }
}

#[test]
fn an_eval_log_is_read_by_ingest_alone() {
    // A folder holding an `.eval` log beside rows: ingest reads the log, other commands read
    // the rows and skip the log; naming the log to another command says to ingest it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(inspect_log("orders.eval"), dir.path().join("orders.eval")).unwrap();
    std::fs::copy(
        fixture("example_scored.jsonl"),
        dir.path().join("rows.jsonl"),
    )
    .unwrap();
    let o = wai()
        .args(["--json", "pass-at", "--k", "2", "--min-k", "2"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = crate::support::envelope(&o.stdout)["report"].clone();
    assert_eq!(
        report["results"][0]["n_groups"], 50,
        "the rows, not the log"
    );
    let o = wai()
        .args(["pass-at", "--k", "2"])
        .arg(dir.path().join("orders.eval"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("is an inspect_ai log") && stderr.contains("wai ingest"),
        "{stderr}"
    );
    // The same archive under another name is still no rows (its first bytes say zip).
    let renamed = dir.path().join("log.bin");
    std::fs::copy(inspect_log("orders.eval"), &renamed).unwrap();
    let o = wai()
        .args(["pass-at", "--k", "2"])
        .arg(&renamed)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64));
    // ingest on the folder reads both: the log's 12 samples and the 200 rows.
    let (report, rows, _d) = ingest(dir.path(), &[]);
    assert_eq!(report["inputs"].as_array().unwrap().len(), 2);
    assert_eq!(rows.len(), 212);
}

#[test]
fn pass_at_below_the_floor_names_the_flag_that_lowers_it() {
    let (_, _, dir) = ingest(&inspect_log("orders.eval"), &[]);
    let o = wai()
        .args(["pass-at", "--k", "2"])
        .arg(dir.path().join("rows.jsonl"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("pass `--min-k 2`"), "{out}");
}

/// OTLP JSON that opentelemetry-instrumentation-openai-v2 2.4b0 (opentelemetry-sdk 1.45.2,
/// the latest GenAI conventions) wrote for four rollouts: `tests/fixtures/ingest/make_fixtures.py`.
fn otel_fixture(name: &str) -> std::path::PathBuf {
    fixture(&format!("ingest/otel/{name}"))
}

#[test]
fn otel_content_on_spans_in_logs_or_nowhere() {
    let check = |rows: &[Value], content: bool| {
        assert_eq!(rows.len(), 4);
        let tasks: Vec<&Value> = rows.iter().map(|r| &r["task_id"]).collect();
        assert_eq!(
            tasks,
            [
                &json!("task-A1"),
                &json!("task-A1"),
                &json!("task-B2"),
                &json!("task-B2")
            ]
        );
        let index: Vec<&Value> = rows.iter().map(|r| &r["rollout_index"]).collect();
        assert_eq!(index, [&json!(0), &json!(1), &json!(0), &json!(1)]);
        let rewards: Vec<&Value> = rows.iter().map(|r| &r["reward"]).collect();
        assert_eq!(rewards, [&json!(1), &json!(1), &json!(1), &json!(0)]);
        for r in rows {
            assert_eq!(
                r["model_version"], "fake-model-2024-01-01",
                "the response's model"
            );
            assert_eq!(r["finish_reason"], "stop");
            assert_eq!(r["tools_used"], json!(["lookup_order"]));
        }
        // The failed tool's message is in its span status.
        assert_eq!(rows[3]["steps"][0]["result"]["error"], "database timeout");
        if content {
            assert_eq!(rows[2]["prompt"], "Where is order B2?");
            assert_eq!(rows[3]["final_text"], "Sorry, the lookup failed.");
            assert_eq!(rows[0]["steps"][0]["arguments"], json!({"order_id": "A1"}));
            assert!(rows.iter().all(|r| r.get("no_content").is_none()));
        } else {
            assert!(
                rows.iter().all(|r| r["no_content"] == json!(true)),
                "{rows:?}"
            );
        }
    };
    let (_, rows, _d) = ingest(&otel_fixture("openai_v2_span_only.traces.jsonl"), &[]);
    check(&rows, true);
    let (report, rows, _d) = ingest(&otel_fixture("openai_v2_no_content.traces.jsonl"), &[]);
    check(&rows, false);
    assert_eq!(report["no_content"], 4);
    assert!(
        report["warnings"][0]
            .as_str()
            .unwrap()
            .contains("4 conversations carried no message content")
    );

    // event_only: the content is in log records, joined to their spans across the two files.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rows.jsonl");
    let o = wai()
        .arg("ingest")
        .arg(otel_fixture("openai_v2_event_only.traces.jsonl"))
        .arg(otel_fixture("openai_v2_event_only.logs.jsonl"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    check(&read_jsonl(&out), true);
    // A logs file alone gives the conversations' text, and their steps from the tool calls
    // inside the messages (the tool spans are in the other file).
    let (report, rows, _d) = ingest(&otel_fixture("openai_v2_event_only.logs.jsonl"), &[]);
    assert_eq!(report["inputs"][0]["format"], "otel");
    assert_eq!(rows[3]["final_text"], "Sorry, the lookup failed.");
    assert_eq!(
        rows[0]["steps"],
        json!([{"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"order_id": "A1", "status": "shipped"}, "tool_call_id": "call_2"}])
    );
    assert_eq!(rows[3]["steps"][0]["result"], "error: database timeout");
    // With the spans, the tool span and the message call are one step, carrying its call id.
    let (_, rows, _d) = ingest(&otel_fixture("openai_v2_span_only.traces.jsonl"), &[]);
    for r in &rows {
        assert_eq!(r["steps"].as_array().unwrap().len(), 1, "{r}");
        assert_eq!(r["steps"][0]["tool_call_id"], "call_2");
    }
}

#[test]
fn the_older_event_shape_reads_from_its_log_records() {
    // openai-v2 2.1b0 with the v1.30 conventions: each message a log record of its own
    // (`gen_ai.system.message`, `gen_ai.user.message`, `gen_ai.assistant.message`,
    // `gen_ai.tool.message`, `gen_ai.choice`) with the content in its body, written through
    // the Events API; no tool span.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rows.jsonl");
    let o = wai()
        .arg("ingest")
        .arg(otel_fixture("openai_v2_v1_30_content.traces.jsonl"))
        .arg(otel_fixture("openai_v2_v1_30_content.logs.jsonl"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = read_jsonl(&out);
    assert_eq!(rows.len(), 4);
    let tasks: Vec<&str> = rows
        .iter()
        .map(|r| r["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["task-A1", "task-A1", "task-B2", "task-B2"]);
    let rewards: Vec<&Value> = rows.iter().map(|r| &r["reward"]).collect();
    assert_eq!(rewards, [&json!(1), &json!(1), &json!(1), &json!(0)]);
    assert_eq!(rows[2]["prompt"], "Where is order B2?");
    assert_eq!(rows[3]["final_text"], "Sorry, the lookup failed.");
    assert_eq!(
        rows[0]["steps"],
        json!([{"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"order_id": "A1", "status": "shipped"}, "tool_call_id": "call_2"}])
    );
    // The tool's answer is the tool message's text: without a tool span there is no status.
    assert_eq!(rows[3]["steps"][0]["result"], "error: database timeout");
    for r in &rows {
        assert_eq!(r["model_version"], "fake-model-2024-01-01");
        assert_eq!(r["finish_reason"], "stop");
        assert!(r.get("no_content").is_none(), "{r}");
    }
}

#[test]
fn an_otel_file_without_rollouts_is_hollow() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("http.jsonl");
    std::fs::write(
        &input,
        r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t1", "spanId": "s1", "name": "GET /", "attributes": [{"key": "http.method", "value": {"stringValue": "GET"}}]}]}]}]}"#,
    )
    .unwrap();
    let o = wai()
        .arg("ingest")
        .arg(&input)
        .arg("-o")
        .arg(dir.path().join("rows.jsonl"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("1 trace had no GenAI span") && out.contains("hollow"),
        "{out}"
    );
}

/// OTLP JSON that `OpenLLMetry`'s opentelemetry-instrumentation-openai wrote for the same four
/// rollouts, no tool spans (the tool calls are only inside the messages): 0.47.5 in indexed
/// attributes (`gen_ai.prompt.N.*`, `gen_ai.completion.N.tool_calls.M.*`,
/// `llm.request.functions.N.*`), 0.62.4 in the latest conventions' message lists with
/// `gen_ai.tool.definitions`.
#[test]
fn openllmetry_spans_indexed_or_as_message_lists() {
    for name in [
        "openllmetry_indexed.traces.jsonl",
        "openllmetry_messages.traces.jsonl",
    ] {
        let (report, rows, _d) = ingest(&otel_fixture(name), &[]);
        assert_eq!(report["inputs"][0]["format"], "otel", "{name}");
        assert_eq!(rows.len(), 4, "{name}");
        let tasks: Vec<&Value> = rows.iter().map(|r| &r["task_id"]).collect();
        assert_eq!(
            tasks,
            [
                &json!("task-A1"),
                &json!("task-A1"),
                &json!("task-B2"),
                &json!("task-B2")
            ],
            "{name}"
        );
        let rewards: Vec<&Value> = rows.iter().map(|r| &r["reward"]).collect();
        assert_eq!(
            rewards,
            [&json!(1), &json!(1), &json!(1), &json!(0)],
            "{name}"
        );
        let first = &rows[0];
        assert_eq!(first["prompt"], "Where is order A1?", "{name}");
        assert_eq!(first["final_text"], "Order A1 has shipped.", "{name}");
        assert_eq!(
            first["steps"],
            json!([{"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"order_id": "A1", "status": "shipped"}, "tool_call_id": "call_2"}]),
            "{name}: the call in the first reply and its result in the second request are one step"
        );
        assert_eq!(first["tools_used"], json!(["lookup_order"]), "{name}");
        assert_eq!(
            (&first["model_version"], &first["finish_reason"]),
            (&json!("fake-model-2024-01-01"), &json!("stop")),
            "{name}"
        );
        assert_eq!(
            first["usage"],
            json!({"input_tokens": 20, "output_tokens": 10}),
            "{name}"
        );
        assert_eq!(
            first["tool_definitions"][0]["name"], "lookup_order",
            "{name}: the request's tools ride in extra"
        );
        assert_eq!(
            first["tool_definitions"][0]["parameters"]["required"],
            json!(["order_id"]),
            "{name}"
        );
        assert_eq!(
            rows[3]["steps"][0]["result"], "error: database timeout",
            "{name}"
        );
        assert_eq!(rows[3]["final_text"], "Sorry, the lookup failed.", "{name}");
    }
}

/// OTLP JSON that the OpenAI Agents SDK (openai-agents 0.24.0, offline against the fake server
/// through the chat completions API, its export to OpenAI off) wrote through OpenTelemetry's
/// bridge (opentelemetry-instrumentation-openai-agents-v2 0.1.0): `invoke_agent`, `chat` and
/// `execute_tool` spans under a root span of ours.
#[test]
fn agents_sdk_spans_become_rows() {
    let (report, rows, _d) = ingest(&otel_fixture("openai_agents.traces.jsonl"), &[]);
    assert_eq!(report["inputs"][0]["format"], "otel");
    assert_eq!(rows.len(), 4);
    let rewards: Vec<&Value> = rows.iter().map(|r| &r["reward"]).collect();
    assert_eq!(rewards, [&json!(1), &json!(1), &json!(1), &json!(0)]);
    let first = &rows[0];
    assert_eq!(
        (&first["task_id"], &first["prompt"], &first["final_text"]),
        (
            &json!("task-A1"),
            &json!("Where is order A1?"),
            &json!("Order A1 has shipped.")
        )
    );
    assert_eq!(
        first["steps"],
        json!([{"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"order_id": "A1", "status": "shipped"}, "tool_call_id": "call_2"}]),
        "the tool span (no call id) and the call in the history are one step"
    );
    assert_eq!(
        first["agent_name"], "orders",
        "the invoke_agent span names the agent"
    );
    assert_eq!(
        first["usage"],
        json!({"input_tokens": 20, "output_tokens": 10})
    );
    let failed = &rows[3]["steps"][0]["result"];
    assert_eq!(failed["status"], "error");
    assert_eq!(failed["output"], "error: database timeout");
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("database timeout"),
        "the span status's message: {failed}"
    );
}

#[test]
fn every_record_that_gives_no_row_is_counted_by_reason() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("mixed.jsonl");
    let good = std::fs::read_to_string(fixture("otel_spans.jsonl")).unwrap();
    let first = good.lines().next().unwrap();
    let http = r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t-http", "spanId": "s1", "name": "GET /", "attributes": [{"key": "http.method", "value": {"stringValue": "GET"}}]}]}]}]}"#;
    let empty = r#"{"resourceSpans": []}"#;
    std::fs::write(
        &input,
        format!("{first}\n{http}\n{empty}\n{{\"resourceSpans\": [oops\n"),
    )
    .unwrap();
    let rejects = dir.path().join("r.jsonl");
    let (report, rows, _d) = ingest(
        &input,
        &["--format", "otel", "--rejects", rejects.to_str().unwrap()],
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(
        report["not_rows"],
        json!({"no_spans": 1, "not_genai": 1, "not_json": 1})
    );
    let set_aside = read_jsonl(&rejects);
    let kinds: Vec<(&str, u64)> = set_aside
        .iter()
        .map(|r| (r["kind"].as_str().unwrap(), r["line"].as_u64().unwrap()))
        .collect();
    assert_eq!(kinds, [("not_json", 4), ("no_spans", 3), ("not_genai", 2)]);
    assert!(
        set_aside[2]["reason"]
            .as_str()
            .unwrap()
            .contains("trace `t-http`"),
        "{set_aside:?}"
    );
    assert!(set_aside[2]["text"].as_str().unwrap().contains("GET /"));

    // Without a rejects file the run still counts them, and says how to keep them; the bad
    // JSON alone stops it.
    let clean = dir.path().join("clean.jsonl");
    std::fs::write(&clean, format!("{first}\n{http}\n{empty}\n")).unwrap();
    let out = dir.path().join("rows.jsonl");
    let o = wai()
        .arg("ingest")
        .arg(&clean)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("records that gave no row, by reason: no_spans 1, not_genai 1")
            && text.contains("--rejects FILE"),
        "{text}"
    );
    // Bad chat records are counted by reason too.
    let (report, _, _d) = ingest(
        &fixture("chat_rollouts.jsonl"),
        &["--rejects", dir.path().join("c.jsonl").to_str().unwrap()],
    );
    assert_eq!(report["not_rows"], json!({"bad_field": 2}));
}

#[test]
fn auto_detection_reads_a_first_record_of_any_size() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.jsonl");
    let long = "x".repeat(1_500_000);
    let first = json!({"task_id": "t1", "reward": 1.0, "messages": [
        {"role": "user", "content": long}, {"role": "assistant", "content": "ok"}]});
    let second = json!({"task_id": "t2", "reward": 0.0, "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]});
    std::fs::write(&big, format!("{first}\n{second}\n")).unwrap();
    let (report, rows, _d) = ingest(&big, &[]);
    assert_eq!(report["inputs"][0]["format"], "openai-chat");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["prompt"].as_str().map(str::len), Some(1_500_000));
    // The same record as the first element of a JSON array.
    let array = dir.path().join("big.json");
    std::fs::write(&array, format!("[{first},\n{second}]")).unwrap();
    let (report, rows, _d) = ingest(&array, &[]);
    assert_eq!(report["inputs"][0]["format"], "openai-chat");
    assert_eq!(rows.len(), 2);
}

#[test]
fn auto_detection_reads_openai_exports_as_chat() {
    // The reference's OpenAI export keeps the row's prompt, scenario_id and schema_version
    // beside the messages; auto read it as a row and failed on its missing steps.
    let (report, rows, _d) = ingest(&fixture("example_export_openai_head.jsonl"), &[]);
    assert_eq!(report["inputs"][0]["format"], "openai-chat");
    assert_eq!(rows.len(), 30);
    assert!(rows.iter().all(|r| r["steps"].is_array()), "{}", rows[0]);
    // wai's own export, alone and joined line for line to its metadata.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("train.jsonl");
    crate::support::succeeded(
        wai()
            .args(["export", "--format", "openai", "-o"])
            .arg(&out)
            .arg(fixture("example_rows.jsonl")),
    );
    let (report, rows, _d) = ingest(&out, &[]);
    assert_eq!(report["inputs"][0]["format"], "openai-chat");
    assert_eq!(rows.len(), 200);
    let meta = read_jsonl(&dir.path().join("train.meta.jsonl"));
    let joined: Vec<String> = read_jsonl(&out)
        .into_iter()
        .zip(meta)
        .map(|(mut line, meta)| {
            let (line_obj, meta) = (line.as_object_mut().unwrap(), meta.as_object().unwrap());
            line_obj.extend(meta.clone());
            line.to_string()
        })
        .collect();
    let with_meta = dir.path().join("with_meta.jsonl");
    std::fs::write(&with_meta, joined.join("\n")).unwrap();
    let (report, rows, _d) = ingest(&with_meta, &[]);
    assert_eq!(report["inputs"][0]["format"], "openai-chat");
    assert_eq!(rows.len(), 200);
    assert!(rows[0]["prompt"].is_string());
}

#[test]
fn a_byte_order_mark_is_read_past_by_every_json_reader() {
    let dir = tempfile::tempdir().unwrap();
    let bom = |name: &str, text: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, [b"\xEF\xBB\xBF".as_slice(), text].concat()).unwrap();
        path
    };
    let chat = std::fs::read(fixture("chat_rollouts.jsonl")).unwrap();
    let first_four: Vec<&[u8]> = chat.split(|b| *b == b'\n').take(4).collect();
    let chat = bom("chat.jsonl", &first_four.join(&b'\n'));
    let (report, rows, _d) = ingest(&chat, &[]);
    assert_eq!(report["inputs"][0]["format"], "openai-chat");
    assert_eq!(rows.len(), 4);
    let (_, named, _d) = ingest(&chat, &["--format", "openai-chat"]);
    assert_eq!(named.len(), 4);
    // The rows readers (convert, and every command reading JSONL), and a tools file.
    let rows = bom(
        "rows.data",
        &std::fs::read(fixture("example_scored.jsonl")).unwrap(),
    );
    let report = crate::support::report_of(wai().args(["--json", "pass-at"]).arg(&rows));
    assert_eq!(report["results"][0]["n_rows"], 200, "{report}");
    let tools = bom(
        "tools.json",
        &std::fs::read(fixture("example_tools.json")).unwrap(),
    );
    let out = dir.path().join("train.jsonl");
    crate::support::succeeded(
        wai()
            .args(["export", "--tools"])
            .arg(&tools)
            .arg("-o")
            .arg(&out)
            .arg(fixture("example_rows.jsonl")),
    );
    assert!(read_jsonl(&out)[0]["tools"].is_array());
}

#[test]
fn a_dotted_privileged_path_moves_the_nested_field_out_of_the_training_text() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("chat.jsonl");
    let rec = json!({"task_id": "t1", "reward": 1.0, "meta": {"gold": "GOLD-ANSWER-7731", "src": "s"},
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]});
    std::fs::write(&input, format!("{rec}\n")).unwrap();
    let (_, rows, d) = ingest(&input, &["--privileged", "meta.gold"]);
    assert_eq!(
        rows[0]["privileged"],
        json!({"meta": {"gold": "GOLD-ANSWER-7731"}}),
        "{}",
        rows[0]
    );
    assert_eq!(rows[0]["meta"], json!({"src": "s"}));
    let out = dir.path().join("train.jsonl");
    crate::support::succeeded(
        wai()
            .args(["export", "-o"])
            .arg(&out)
            .arg(d.path().join("rows.jsonl")),
    );
    let exported = std::fs::read_to_string(&out).unwrap();
    assert!(!exported.contains("GOLD-ANSWER-7731"), "{exported}");
}
