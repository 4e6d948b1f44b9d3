//! Every command's `--json` document is the envelope of `docs/json.schema.json`.

use std::path::Path;

use crate::support::{envelope, fixture, wai};

/// Runs `wai --json ARGS` in `dir` and holds what it printed to the schema, whatever the exit
/// status (a failed gate still prints its envelope).
fn check(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = wai()
        .current_dir(dir)
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0..=2)),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = envelope(&out.stdout);
    let command = args[0];
    assert!(
        doc["command"].as_str().unwrap().starts_with(command),
        "{args:?}: {}",
        doc["command"]
    );
    doc
}

#[test]
fn every_command_prints_the_envelope() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tools = fixture("example_tools.json");
    let policy = fixture("example_policy.md");
    let (tools, policy) = (tools.to_str().unwrap(), policy.to_str().unwrap());
    let scored = fixture("example_scored.jsonl");
    let scored = scored.to_str().unwrap();
    let chat = fixture("chat_rollouts.jsonl");
    let tau = fixture("tau_bench_airline_sample.json");

    let gold: Vec<serde_json::Value> = (0..40)
        .map(|i| {
            serde_json::json!({"task_id": format!("t{i}"), "prompt": "q", "final_text": "a".repeat(i % 7),
                "reward": i % 2, "gold_reward": (i / 2) % 2, "gold_kind": "human"})
        })
        .collect();
    crate::support::write_rows(&d.join("gold.jsonl"), &gold);
    let doc = check(
        d,
        &["gen", "--rows", "2000", "--seed", "1", "-o", "a.parquet"],
    );
    assert_eq!(doc["outputs"][0]["rows"], 2000);
    check(
        d,
        &["gen", "--rows", "2000", "--seed", "2", "-o", "b.parquet"],
    );
    check(
        d,
        &["gen", "--rows", "400", "--seed", "3", "-o", "eval.parquet"],
    );
    check(d, &["demo", "--dir", "demo", "--budget", "400"]);
    check(d, &["convert", "a.parquet", "-o", "a.jsonl"]);
    check(
        d,
        &[
            "ingest",
            chat.to_str().unwrap(),
            "-o",
            "chat.parquet",
            "--rejects",
            "chat.rej",
        ],
    );
    check(d, &["ingest", tau.to_str().unwrap(), "-o", "tau.parquet"]);
    check(
        d,
        &[
            "sql",
            "SELECT count(*) AS n FROM rows",
            "--table",
            "a.parquet",
        ],
    );
    check(d, &["sql", "--list"]);
    check(d, &["pass-at", "a.parquet", "--by", "dims.tier"]);
    check(d, &["markers", "a.parquet"]);
    check(
        d,
        &[
            "gate",
            "demo/scored.parquet",
            "--floor",
            "0.5",
            "--no-tools",
        ],
    );
    check(d, &["variance", "a.parquet", "b.parquet"]);
    check(d, &["compare", "a.parquet", "b.parquet"]);
    check(d, &["holdout-size", "--effect", "0.05"]);
    check(d, &["hack-scan", "a.parquet", "--perms", "20"]);
    check(d, &["judge-trust", scored, "--judge", "sql:reward > 0.5"]);
    check(
        d,
        &[
            "compare-judges",
            "gold.jsonl",
            "--judge",
            "a=sql:reward > 0.5",
            "--judge",
            "b=sql:reward > 0.9",
        ],
    );
    check(
        d,
        &["labels", "attach", scored, scored, "-o", "labelled.parquet"],
    );
    check(
        d,
        &[
            "grade",
            "a.parquet",
            "--judge",
            "sql:length(final_text) > 40",
            "-o",
            "g.parquet",
            "--no-tools",
        ],
    );
    check(
        d,
        &[
            "decontaminate",
            "a.parquet",
            "--against",
            "eval.parquet",
            "-o",
            "clean.parquet",
        ],
    );
    check(
        d,
        &[
            "select",
            "a.parquet",
            "-o",
            "sft.jsonl",
            "--mode",
            "sft",
            "--target",
            "200",
        ],
    );
    check(
        d,
        &[
            "select",
            "a.parquet",
            "-o",
            "pref.jsonl",
            "--mode",
            "preference",
            "--target",
            "200",
        ],
    );
    let doc = check(
        d,
        &[
            "export",
            "sft.jsonl",
            "-o",
            "ft.jsonl",
            "--format",
            "openai",
        ],
    );
    assert!(!doc["outputs"].as_array().unwrap().is_empty());
    check(
        d,
        &["export", "pref.jsonl", "-o", "dpo.jsonl", "--format", "dpo"],
    );
    check(d, &["preflight", "--tools", tools, "--policy", policy]);
    check(
        d,
        &["coverage-gap", scored, "--tools", tools, "--policy", policy],
    );
    check(
        d,
        &[
            "simulate",
            "--tools",
            tools,
            "--policy",
            policy,
            "--budget",
            "100",
            "-o",
            "sim.parquet",
        ],
    );
    check(
        d,
        &[
            "init-evals",
            "--tools",
            tools,
            "--policy",
            policy,
            "--dir",
            "evals",
        ],
    );
}
