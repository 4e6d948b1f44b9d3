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
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
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
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
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
