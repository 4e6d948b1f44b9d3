//! `wai export`: the reference's example exports record for record, the gates, the TRL shapes and
//! the datasets folder.

use std::path::Path;

use serde_json::Value;

use crate::support::{fixture, read_jsonl, succeeded, wai};

/// The passes of the reference's scored example rows.
fn passes(dir: &Path) -> std::path::PathBuf {
    let rows: Vec<Value> = read_jsonl(&fixture("example_scored.jsonl"))
        .into_iter()
        .filter(|r| r["reward"] == 1)
        .collect();
    let path = dir.join("passes.jsonl");
    crate::support::write_rows(&path, &rows);
    path
}

/// Tool-call arguments parsed, so a comparison does not hang on their spacing (the reference
/// writes `{"order_id": "A1001","reason": "x"}`; we write compact JSON).
fn parsed_args(mut r: Value) -> Value {
    for key in ["messages", "prompt", "completion"] {
        if let Some(msgs) = r.get_mut(key).and_then(Value::as_array_mut) {
            for m in msgs {
                for c in m
                    .get_mut("tool_calls")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    let a = &mut c["function"]["arguments"];
                    if let Some(s) = a.as_str() {
                        *a = serde_json::from_str(s).unwrap();
                    }
                }
            }
        }
    }
    r
}

#[test]
fn exports_match_the_reference_record_for_record() {
    let dir = tempfile::tempdir().unwrap();
    let input = passes(dir.path());
    for (format, reference) in [
        ("openai", "example_export_openai_head.jsonl"),
        ("trl", "example_export_trl_head.jsonl"),
    ] {
        let out = dir.path().join(format!("{format}.jsonl"));
        let report = crate::support::report_of(
            wai()
                .args(["--json", "export"])
                .arg(&input)
                .args(["--format", format, "--system-prompt"])
                .arg(fixture("example_policy.md"))
                .arg("--tools")
                .arg(fixture("example_tools.json"))
                .arg("--out")
                .arg(&out),
        );
        assert_eq!(report["n"], 155);
        assert_eq!(report["groups"], 48);
        assert_eq!(report["tool_call_roundtrip"]["checked"], 155);
        // Two assistant turns a row, each trained.
        assert_eq!(report["trained_messages"], 310);
        assert_eq!(report["trl_trained_messages"], 310);
        let mut ours = read_jsonl(&out);
        let mut theirs = read_jsonl(&fixture(reference));
        // The reference carries the world's hidden state and the fault plan onto training rows;
        // they are teacher-only and stay on the row.
        for r in &mut theirs {
            let o = r.as_object_mut().unwrap();
            o.shift_remove("world_state");
            o.shift_remove("faults");
        }
        if format == "openai" {
            // The fine-tuning file holds what OpenAI reads (messages, tools); the rest of each of
            // the reference's lines is in the metadata file, line for line. The reference's
            // `loss_mask` (read by no trainer) is `weight` on the assistant messages, and tool
            // messages carry no `name` (not in OpenAI's schema).
            let meta = read_jsonl(&dir.path().join("openai.meta.jsonl"));
            assert_eq!(meta.len(), ours.len());
            for (line, meta) in ours.iter_mut().zip(meta) {
                let keys: Vec<&String> = line.as_object().unwrap().keys().collect();
                assert_eq!(keys, ["messages", "tools"]);
                line.as_object_mut()
                    .unwrap()
                    .extend(meta.as_object().unwrap().clone());
            }
            for r in &mut theirs {
                let mask = r
                    .as_object_mut()
                    .unwrap()
                    .shift_remove("loss_mask")
                    .unwrap();
                for (m, on) in r["messages"]
                    .as_array_mut()
                    .unwrap()
                    .iter_mut()
                    .zip(mask.as_array().unwrap())
                {
                    let m = m.as_object_mut().unwrap();
                    if m["role"] == "assistant" {
                        m.insert("weight".into(), on.clone());
                    } else {
                        assert_eq!(on, 0);
                    }
                    if m["role"] == "tool" {
                        m.shift_remove("name");
                    }
                }
            }
            // The fine-tuning file's key order puts `tools` before the metadata, as theirs.
            for r in &mut ours {
                let o = r.as_object_mut().unwrap();
                let tools = o.shift_remove("tools").unwrap();
                o.shift_insert(1, "tools".into(), tools);
            }
        }
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            let (a, b) = (parsed_args(a.clone()), parsed_args(b.clone()));
            assert_eq!(a, b, "{format} row {i}");
            let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(&a), keys(&b), "{format} row {i}: key order");
        }
        // OpenAI arguments are JSON strings; TRL's are objects.
        let args = &ours[0]["messages"][2]["tool_calls"][0]["function"]["arguments"];
        assert_eq!(args.is_string(), format == "openai", "{args}");
    }
}

#[test]
fn the_gates_refuse_leaks_and_string_wrapped_arguments() {
    let dir = tempfile::tempdir().unwrap();
    // The scored rows hold planted leaks (the seeded agent quotes its hidden context).
    let out = dir.path().join("all.jsonl");
    let failed = wai()
        .arg("export")
        .arg(fixture("example_scored.jsonl"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(65), "bad data");
    assert!(String::from_utf8_lossy(&failed.stderr).contains("privileged_leak: 8 of 200 rows"));
    assert!(!out.exists(), "nothing written");
    let doc = crate::support::json_of(
        wai()
            .args(["--json", "export"])
            .arg(fixture("example_scored.jsonl"))
            .arg("--no-validate")
            .arg("--out")
            .arg(&out),
    );
    let report = &doc["report"];
    assert_eq!(report["privileged_leaks"]["n_leaked"], 8);
    assert!(doc["warnings"].to_string().contains("reward below 0.5"));
    // A call whose arguments are a string that is not JSON cannot round-trip.
    let bad = dir.path().join("bad.jsonl");
    crate::support::write_rows(
        &bad,
        &[
            serde_json::json!({"prompt": "p", "messages": [{"role": "user", "content": "p"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "order A1"}}]}, {"role": "assistant", "content": "ok"}], "final_text": "ok"}),
        ],
    );
    let failed = wai()
        .arg("export")
        .arg(&bad)
        .arg("--out")
        .arg(dir.path().join("b.jsonl"))
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(65));
    assert!(
        String::from_utf8_lossy(&failed.stderr).contains("tool_call_roundtrip_invalid: 1 of 1")
    );
}

#[test]
fn trl_final_mask_splits_prompt_and_completion_and_unroll_makes_a_row_per_turn() {
    let dir = tempfile::tempdir().unwrap();
    let input = passes(dir.path());
    let out = dir.path().join("final.jsonl");
    succeeded(
        wai()
            .arg("export")
            .arg(&input)
            .args(["--format", "trl", "--mask-mode", "final", "--out"])
            .arg(&out),
    );
    let rows = read_jsonl(&out);
    assert_eq!(rows.len(), 155);
    for r in &rows {
        let completion = r["completion"].as_array().unwrap();
        assert_eq!(completion[0]["role"], "assistant");
        assert!(
            r["prompt"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["role"] != "system"),
            "no system prompt was given"
        );
        assert!(r.get("messages").is_none() && r.get("loss_mask").is_none());
        assert!(r["prompt_text"].is_string());
    }
    let out = dir.path().join("unrolled.jsonl");
    succeeded(
        wai()
            .arg("export")
            .arg(&input)
            .args(["--unroll", "--out"])
            .arg(&out),
    );
    let rows = read_jsonl(&out);
    assert_eq!(rows.len(), 310, "two assistant turns per row");
    let meta = read_jsonl(&dir.path().join("unrolled.meta.jsonl"));
    for (r, meta) in rows.iter().zip(&meta) {
        let weights: Vec<&Value> = r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .map(|m| &m["weight"])
            .collect();
        assert_eq!(weights.iter().filter(|w| **w == 1).count(), 1);
        assert_eq!(*weights.last().unwrap(), 1);
        assert_eq!(
            r["messages"].as_array().unwrap().last().unwrap()["role"],
            "assistant"
        );
        assert!(meta["lineage"]["unrolled_from"]["prompt_sha1"].is_string());
    }
    // `--unroll` already trains each turn in its own row: with a final mask it is refused.
    crate::support::refused(
        wai()
            .arg("export")
            .arg(&input)
            .args(["--unroll", "--mask-mode", "final", "--out"])
            .arg(dir.path().join("never.jsonl")),
        "--unroll and --mask-mode final do not combine",
    );
    assert!(!dir.path().join("never.jsonl").exists());
}

#[test]
fn parquet_is_a_datasets_folder() {
    let dir = tempfile::tempdir().unwrap();
    let input = passes(dir.path());
    let out = dir.path().join("ds");
    succeeded(
        wai()
            .arg("export")
            .arg(&input)
            .args(["--format", "parquet", "--tools"])
            .arg(fixture("example_tools.json"))
            .arg("--out")
            .arg(&out),
    );
    assert!(out.join("data/train-00000-of-00001.parquet").exists());
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        card.contains("path: data/train-*")
            && card.contains("`messages` (list of json)")
            && card.contains("`tools` (list of json)")
            && card.contains("`lineage` (json)")
            && card.contains("`datasets` 4.8.0 or later")
            && card.contains("assistant_only_loss=True"),
        "{card}"
    );
    let rows = crate::support::sql_jsonl(
        &["SELECT count(*) AS n FROM rows"],
        &out.join("data/train-00000-of-00001.parquet"),
    );
    assert_eq!(rows[0]["n"], 155);
}

#[test]
fn select_gate_counts_equal_the_references_on_its_example() {
    // The reference's select(scored, mode="rl") and mode="sft" on the worked example
    // (shared/data/example_reports.json).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rl.jsonl");
    let r = crate::support::report_of(
        wai()
            .args(["--json", "select"])
            .arg(fixture("example_scored.jsonl"))
            .arg("--out")
            .arg(&out),
    );
    assert_eq!(r["n"], 200);
    assert_eq!(r["n_selected"], 66);
    assert_eq!(r["privileged_leaks_dropped"], 8);
    assert_eq!(r["n_after_gates"], 192);
    assert_eq!(r["duplicates_dropped"], 89);
    assert_eq!(r["duplicate_asks"], 44);
    assert_eq!(r["unanimous_groups_dropped"], 25);
    assert_eq!(r["collapsed_groups_dropped"], 13);
    assert_eq!(r["groups_selected"], 25);
    assert_eq!(
        r["fault_kinds"],
        serde_json::json!({"already_done": 3, "deny": 3, "malformed": 1, "no fault": 6, "not_found": 7, "stale": 4, "timeout": 1})
    );
    assert_eq!(r["hack_scan"]["regime"], "train");
    let rows = read_jsonl(&out);
    assert_eq!(rows.len(), 66);
    // Whole groups, each mixed.
    let mut groups: std::collections::BTreeMap<String, Vec<f64>> =
        std::collections::BTreeMap::new();
    for row in &rows {
        groups
            .entry(row["scenario_id"].as_str().unwrap().to_owned())
            .or_default()
            .push(row["reward"].as_f64().unwrap());
    }
    assert_eq!(groups.len(), 25);
    assert!(
        groups
            .values()
            .all(|r| r.contains(&0.0) && r.contains(&1.0)),
        "{groups:?}"
    );
    let out = dir.path().join("sft.jsonl");
    let r = crate::support::report_of(
        wai()
            .args(["--json", "select", "--mode", "sft"])
            .arg(fixture("example_scored.jsonl"))
            .arg("--out")
            .arg(&out),
    );
    assert_eq!(r["n_selected"], 48);
    assert_eq!(r["n_eligible"], 48);
    assert_eq!(r["n_not_pass"], 37);
    assert_eq!(r["n_junk"], 0);
    assert_eq!(r["behaviors"], serde_json::json!([18, 18]));
    let rows = read_jsonl(&out);
    assert!(rows.iter().all(|r| r["reward"] == 1));
    // The selection exports cleanly: the leaking rows are gone.
    succeeded(
        wai()
            .arg("export")
            .arg(&out)
            .arg("--out")
            .arg(dir.path().join("sft.train.jsonl")),
    );
}

#[test]
fn preference_pairs_become_dpo_rows() {
    let dir = tempfile::tempdir().unwrap();
    let pairs = dir.path().join("pairs.jsonl");
    let r = crate::support::report_of(
        wai()
            .args(["--json", "select", "--mode", "preference"])
            .arg(fixture("example_scored.jsonl"))
            .arg("--out")
            .arg(&pairs),
    );
    assert_eq!(r["pairs"], 25);
    assert_eq!(r["leaks_dropped"], 8);
    for p in read_jsonl(&pairs) {
        assert!(p["margin"].as_f64().unwrap() >= 1.0);
        assert_eq!(
            p["chosen"]["prompt"], p["rejected"]["prompt"],
            "pairs answer the same ask"
        );
        assert_eq!(p["chosen"]["scenario_id"], p["rejected"]["scenario_id"]);
    }
    // Split over two files (one JSONL, one Parquet), the rows make the same pairs: pairing reads
    // every row's summary, then the paired rows whole, wherever they sit.
    let text = std::fs::read_to_string(fixture("example_scored.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let (first, second) = lines.split_at(lines.len() / 2 + 7);
    let head = dir.path().join("head.jsonl");
    let tail = dir.path().join("tail.jsonl");
    std::fs::write(&head, first.join("\n") + "\n").unwrap();
    std::fs::write(&tail, second.join("\n") + "\n").unwrap();
    let tail_parquet = dir.path().join("tail.parquet");
    succeeded(wai().arg("convert").arg(&tail).arg("-o").arg(&tail_parquet));
    let split = dir.path().join("split-pairs.jsonl");
    succeeded(
        wai()
            .args(["select", "--mode", "preference"])
            .arg(&head)
            .arg(&tail_parquet)
            .arg("--out")
            .arg(&split),
    );
    assert_eq!(
        std::fs::read_to_string(&split).unwrap(),
        std::fs::read_to_string(&pairs).unwrap()
    );
    let out = dir.path().join("dpo.jsonl");
    succeeded(
        wai()
            .arg("export")
            .arg(&pairs)
            .args(["--format", "dpo", "--out"])
            .arg(&out),
    );
    let rows = read_jsonl(&out);
    assert_eq!(rows.len(), 25);
    for r in &rows {
        assert_eq!(r["chosen"][0]["role"], "assistant");
        assert_eq!(r["rejected"][0]["role"], "assistant");
        assert_ne!(r["chosen"], r["rejected"]);
        for m in r["prompt"].as_array().unwrap() {
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                assert!(
                    c["function"]["arguments"].is_object(),
                    "TRL wants arguments as objects"
                );
            }
        }
    }
    // Length matching picks the rejected reply closest in length.
    let matched = dir.path().join("matched.jsonl");
    succeeded(
        wai()
            .args(["select", "--mode", "preference", "--length-match"])
            .arg(fixture("example_scored.jsonl"))
            .arg("--out")
            .arg(&matched),
    );
    let delta = |p: &std::path::Path| {
        read_jsonl(p)
            .iter()
            .map(|x| x["length_delta"].as_i64().unwrap().abs())
            .sum::<i64>()
    };
    assert!(
        delta(&matched) <= delta(&pairs),
        "{} > {}",
        delta(&matched),
        delta(&pairs)
    );
}

#[test]
fn every_format_loads_with_the_datasets_library() {
    // `.ci/run` makes a virtualenv with `datasets` from PyPI and names its python here.
    let Some(python) = std::env::var_os("WAI_DATASETS_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set WAI_DATASETS_PYTHON (see .ci/run)"
        );
        eprintln!("skipped: set WAI_DATASETS_PYTHON to a python with `datasets` installed");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The worked example's passes, then rows whose arguments vary in keys and types (an empty
    // object, nested lists with nulls, a number where other rows have text, two calls a turn).
    let input = passes(dir.path());
    let mut text = std::fs::read_to_string(&input).unwrap();
    text.push_str(&std::fs::read_to_string(fixture("export_edge_rows.jsonl")).unwrap());
    std::fs::write(&input, text).unwrap();
    let tools = fixture("example_tools.json");
    let export = |format: &str, extra: &[&str], out: &str| {
        let path = dir.path().join(out);
        succeeded(
            wai()
                .arg("export")
                .arg(&input)
                .args(["--format", format, "--tools"])
                .arg(&tools)
                .args(extra)
                .arg("--out")
                .arg(&path),
        );
        path
    };
    let openai = export("openai", &[], "openai.jsonl");
    let trl = export("trl", &[], "trl.jsonl");
    let last = export("trl", &["--mask-mode", "final"], "final.jsonl");
    let parquet = export("parquet", &[], "ds");
    let pairs = dir.path().join("pairs.jsonl");
    succeeded(
        wai()
            .args(["select", "--mode", "preference"])
            .arg(fixture("example_scored.jsonl"))
            .arg("--out")
            .arg(&pairs),
    );
    let dpo = dir.path().join("dpo.jsonl");
    succeeded(
        wai()
            .arg("export")
            .arg(&pairs)
            .args(["--format", "dpo", "--out"])
            .arg(&dpo),
    );
    let out = std::process::Command::new(python)
        .arg(fixture("datasets_check.py"))
        .args([&openai, &trl, &last, &dpo, &parquet])
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HOME", dir.path().join("hf"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("loads every export format value for value"),
        "{stdout}"
    );
}

#[test]
fn odd_rows_after_review() {
    let dir = tempfile::tempdir().unwrap();
    // Rows of different shapes share one datasets folder; a failed build leaves the old one.
    let odd = dir.path().join("odd.jsonl");
    crate::support::write_rows(
        &odd,
        &[
            serde_json::json!({"task_id": "a", "prompt": "p", "final_text": "x", "reward": 1, "lineage": {"parent": "x"}, "faults": {}, "world_state": "entity missing"}),
            serde_json::json!({"task_id": "a", "prompt": "p", "final_text": "y", "reward": 0.5, "lineage": {"parent": 3}, "world_state": {"odd": true}, "length": 3}),
        ],
    );
    let ds = dir.path().join("ds");
    succeeded(
        wai()
            .arg("export")
            .arg(&odd)
            .args(["--format", "parquet", "--tools"])
            .arg(fixture("example_tools.json"))
            .arg("--out")
            .arg(&ds),
    );
    let rows = crate::support::sql_jsonl(
        &["SELECT count(*) AS n FROM rows"],
        &ds.join("data/train-00000-of-00001.parquet"),
    );
    assert_eq!(rows[0]["n"], 2);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".ds.")),
        "no staging folder left: {names:?}"
    );
    // Without text (no reply, no calls), rows are not duplicates of each other; integer task
    // ids group like their text.
    let bare = dir.path().join("bare.jsonl");
    crate::support::write_rows(
        &bare,
        &[
            serde_json::json!({"task_id": 0, "prompt": "p one", "reward": 1}),
            serde_json::json!({"task_id": 0, "prompt": "p two", "reward": 0}),
            serde_json::json!({"task_id": 1, "prompt": "p three", "reward": 1}),
            serde_json::json!({"task_id": 1, "prompt": "p four", "reward": 1}),
        ],
    );
    let r = crate::support::report_of(
        wai()
            .args(["--json", "select"])
            .arg(&bare)
            .arg("--out")
            .arg(dir.path().join("s.jsonl")),
    );
    assert_eq!(r["duplicates_dropped"], 0);
    assert_eq!(r["n_selected"], 2, "task 0 is mixed, task 1 unanimous: {r}");
    // Pairs that make the same call under different ids part at the reply, not at the call.
    let call = |id: &str, reply: &str, reward: f64| {
        serde_json::json!({"task_id": "t", "prompt": "Where is A1?", "reward": reward,
        "messages": [{"role": "user", "content": "Where is A1?"}, {"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function", "function": {"name": "lookup", "arguments": "{\"id\":\"A1\"}"}}]},
                     {"role": "tool", "content": "{\"status\":\"ok\"}", "tool_call_id": id}, {"role": "assistant", "content": reply}], "final_text": reply})
    };
    let rows = dir.path().join("pair_rows.jsonl");
    crate::support::write_rows(
        &rows,
        &[
            call("call_abc", "A1 is open.", 1.0),
            call("call_xyz", "Done!", 0.0),
        ],
    );
    let pairs = dir.path().join("pairs.jsonl");
    succeeded(
        wai()
            .args(["select", "--mode", "preference"])
            .arg(&rows)
            .arg("--out")
            .arg(&pairs),
    );
    let dpo = dir.path().join("dpo.jsonl");
    succeeded(
        wai()
            .arg("export")
            .arg(&pairs)
            .args(["--format", "dpo", "--mask-mode", "final", "--out"])
            .arg(&dpo),
    );
    let out = read_jsonl(&dpo);
    assert_eq!(out[0]["prompt"].as_array().unwrap().len(), 3, "{}", out[0]);
    assert_eq!(
        out[0]["chosen"],
        serde_json::json!([{"role": "assistant", "content": "A1 is open."}])
    );
}

#[test]
fn group_fields_follow_the_rows_own_task_key() {
    // A numeric scenario id groups its rows (ingest keeps it as the task id, so the first pass's
    // key and the row's own key agree).
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    let row = |scenario: serde_json::Value, reward: i64| {
        serde_json::json!({"task_id": "t", "scenario_id": scenario, "prompt": "Where is A1?",
            "messages": [{"role": "user", "content": "Where is A1?"}, {"role": "assistant", "content": "Shipped."}],
            "final_text": "Shipped.", "reward": reward})
    };
    crate::support::write_rows(
        &rows,
        &[
            row(serde_json::json!(7), 1),
            row(serde_json::json!(7), 0),
            row(serde_json::json!("s"), 1),
        ],
    );
    let out = dir.path().join("train.jsonl");
    succeeded(wai().arg("export").arg(&rows).arg("--out").arg(&out));
    // The group fields are metadata: beside the fine-tuning file, line for line.
    let lines = read_jsonl(&dir.path().join("train.meta.jsonl"));
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["k"], 2, "{}", lines[0]);
    assert_eq!(lines[0]["n1"], 1);
    assert_eq!(lines[0]["group_id"], lines[1]["group_id"]);
    assert_eq!(lines[2]["k"], 1);
    assert_ne!(lines[2]["group_id"], lines[0]["group_id"]);
}

/// Every format, every mask, on the worked example's selections and on the demo's: the
/// harness loads each file with `datasets`, runs two steps of TRL's `SFTTrainer` (`DPOTrainer`
/// for pairs) on a tiny random model with a chat template that marks assistant turns, and
/// holds the tokens TRL labels, row for row, to the tokens of the turns the export says it
/// trains (and those turns' count to the report's). OpenAI lines are also held to the
/// fine-tuning file rules.
#[test]
fn every_format_trains_in_trl_what_its_report_claims() {
    // `.ci/run` makes a virtualenv with torch, transformers, trl and datasets from PyPI.
    let Some(python) = std::env::var_os("WAI_TRL_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set WAI_TRL_PYTHON (see .ci/run)"
        );
        eprintln!(
            "skipped: set WAI_TRL_PYTHON to a python with torch, transformers, trl and datasets"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The demo's run, with its tools and policy.
    let demo = dir.path().join("demo");
    succeeded(wai().args(["demo", "--budget", "400", "--dir"]).arg(&demo));
    let sources = [
        (
            "example",
            fixture("example_scored.jsonl"),
            fixture("example_tools.json"),
            fixture("example_policy.md"),
        ),
        (
            "demo",
            demo.join("scored.parquet"),
            demo.join("tools.json"),
            demo.join("policy.md"),
        ),
    ];
    let mut manifest = Vec::new();
    for (name, scored, tools, policy) in &sources {
        let sft = dir.path().join(format!("{name}.sft.jsonl"));
        succeeded(
            wai()
                .args(["select", "--mode", "sft"])
                .arg(scored)
                .arg("--out")
                .arg(&sft),
        );
        let pairs = dir.path().join(format!("{name}.pairs.jsonl"));
        succeeded(
            wai()
                .args(["select", "--mode", "preference"])
                .arg(scored)
                .arg("--out")
                .arg(&pairs),
        );
        let runs: [(&str, &[&str], &std::path::PathBuf); 9] = [
            ("openai", &[], &sft),
            ("openai", &["--mask-mode", "final"], &sft),
            ("openai", &["--unroll"], &sft),
            ("trl", &[], &sft),
            ("trl", &["--mask-mode", "final"], &sft),
            ("trl", &["--unroll"], &sft),
            ("parquet", &[], &sft),
            ("parquet", &["--mask-mode", "final"], &sft),
            ("dpo", &[], &pairs),
        ];
        for (k, (format, extra, input)) in runs.iter().enumerate() {
            let out = dir.path().join(format!(
                "{name}.{k}.{format}{}",
                if *format == "parquet" { "" } else { ".jsonl" }
            ));
            let report = crate::support::report_of(
                wai()
                    .args(["--json", "export"])
                    .arg(input)
                    .args(["--format", format])
                    .args(*extra)
                    .arg("--tools")
                    .arg(tools)
                    .arg("--system-prompt")
                    .arg(policy)
                    .arg("--out")
                    .arg(&out),
            );
            assert!(
                report["n"].as_u64().unwrap() > 0,
                "{name} {format} {extra:?}: {report}"
            );
            manifest.push(serde_json::json!({
                "name": format!("{name} {format} {}", extra.join(" ")).trim().to_owned(),
                "format": format, "path": out, "report": report,
            }));
        }
    }
    let manifest_path = dir.path().join("manifest.json");
    std::fs::write(
        &manifest_path,
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
    let out = std::process::Command::new(python)
        .arg(fixture("trl/trl_check.py"))
        .arg(&manifest_path)
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("HF_HOME", dir.path().join("hf"))
        .env("WANDB_DISABLED", "true")
        .env("TOKENIZERS_PARALLELISM", "false")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("every format trains what its report claims"),
        "{stdout}"
    );
}

#[test]
fn rows_a_trainer_cannot_train_are_cut_or_dropped_with_a_count_and_the_first_row() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    crate::support::write_rows(
        &rows,
        &[
            // Ends on a tool result the agent never answered.
            serde_json::json!({"rollout_id": "r-tool-end", "task_id": "a", "prompt": "Refund A1", "reward": 1,
                "messages": [{"role": "user", "content": "Refund A1"},
                    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "refund", "arguments": "{\"id\":\"A1\"}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "{\"status\":\"ok\"}"}]}),
            // No assistant turn at all.
            serde_json::json!({"rollout_id": "r-silent", "task_id": "b", "prompt": "Hello?", "reward": 1,
                "messages": [{"role": "user", "content": "Hello?"}]}),
            serde_json::json!({"rollout_id": "r-fine", "task_id": "c", "prompt": "Hi", "reward": 1,
                "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}], "final_text": "Hello."}),
        ],
    );
    for (format, out) in [("openai", "o.jsonl"), ("trl", "t.jsonl"), ("parquet", "ds")] {
        let out = dir.path().join(out);
        let doc = crate::support::json_of(
            wai()
                .args(["--json", "export"])
                .arg(&rows)
                .args(["--format", format, "--mask-mode", "final", "--out"])
                .arg(&out),
        );
        let r = &doc["report"];
        assert_eq!(r["n"], 2, "{format}: {r}");
        assert_eq!(r["no_completion_dropped"], 1, "{format}");
        assert_eq!(
            r["trailing_turns_cut"],
            serde_json::json!({"rows": 1, "turns": 1})
        );
        let warnings = doc["warnings"].to_string();
        assert!(
            warnings.contains("first: row `r-silent`")
                && warnings.contains("first: row `r-tool-end`"),
            "{format}: {warnings}"
        );
    }
    // The trl completion of the row that ended on a tool is the call, not the tool's answer.
    let trl = read_jsonl(&dir.path().join("t.jsonl"));
    assert_eq!(trl[0]["completion"].as_array().unwrap().len(), 1);
    assert_eq!(trl[0]["completion"][0]["tool_calls"][0]["id"], "c1");
    // The openai metadata file has a line for each line of the fine-tuning file.
    assert_eq!(read_jsonl(&dir.path().join("o.meta.jsonl")).len(), 2);
}

/// An exact-match task: the reference is the answer. A correct reply is the task, not a leak (it
/// is selected and exported); the verifier's reason never quotes the reference; a judge's reason
/// that quotes it, or a privileged field under any key, is caught wherever it is exported.
#[test]
fn a_correct_answer_is_not_a_leak_and_a_quoted_reference_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    let mut all = Vec::new();
    for task in 0..3 {
        for (k, reply) in [
            "VAULTANSWERSECRET42",
            "I do not know the code.",
            "VAULTANSWERSECRET42",
            "It might be 1234-ABCD.",
        ]
        .iter()
        .enumerate()
        {
            all.push(serde_json::json!({
                "rollout_id": format!("t{task}-{k}"), "task_id": format!("t{task}"), "rollout_index": k,
                "prompt": format!("Task {task}: what is the vault code? Answer with the code alone."),
                "messages": [{"role": "user", "content": format!("Task {task}: what is the vault code? Answer with the code alone.")},
                             {"role": "assistant", "content": reply}],
                "final_text": reply,
                "privileged": {"reference": "VAULTANSWERSECRET42", "rubric": {"note": "the code is on the vault's door"}}}));
        }
    }
    crate::support::write_rows(&rows, &all);
    let verifier = dir.path().join("exact.toml");
    std::fs::write(
        &verifier,
        "reference = \"privileged.reference\"\n[check]\nexact = {}\n",
    )
    .unwrap();
    let scored = dir.path().join("scored.jsonl");
    succeeded(
        wai()
            .arg("grade")
            .arg(&rows)
            .arg("--judge")
            .arg(format!("verify:{}", verifier.display()))
            .arg("--no-tools")
            .arg("--out")
            .arg(&scored),
    );
    let graded = read_jsonl(&scored);
    for r in &graded {
        assert!(
            !r["reason"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains("vaultanswersecret42"),
            "a verifier reason quotes the reference: {}",
            r["reason"]
        );
    }
    // RL keeps every (mixed) group: the passes give the answer the task asks for.
    let selected = dir.path().join("rl.jsonl");
    let r = crate::support::report_of(
        wai()
            .args(["--json", "select"])
            .arg(&scored)
            .args(["--out"])
            .arg(&selected),
    );
    assert_eq!(r["privileged_leaks_dropped"], 0, "{r}");
    // Each task's two identical right answers count once.
    assert_eq!(r["duplicates_dropped"], 3, "{r}");
    assert_eq!(r["n_selected"], 9, "{r}");
    for format in ["openai", "trl"] {
        succeeded(
            wai()
                .arg("export")
                .arg(&selected)
                .args(["--format", format, "--out"])
                .arg(dir.path().join(format!("ok.{format}.jsonl"))),
        );
    }
    // A judge's reason that quotes the reference is a leak, on every format.
    let mut quoting = graded.clone();
    quoting[1]["reason"] = serde_json::json!("wrong: the code is VAULTANSWERSECRET42");
    // And a privileged string under any key, said in an earlier turn.
    quoting[4]["messages"] = serde_json::json!([
        {"role": "user", "content": "Task 1: what is the vault code? Answer with the code alone."},
        {"role": "assistant", "content": "The code is on the vault's door, so let me think."},
        {"role": "user", "content": "And?"},
        {"role": "assistant", "content": "VAULTANSWERSECRET42"}]);
    let bad = dir.path().join("bad.jsonl");
    crate::support::write_rows(&bad, &quoting);
    for format in ["openai", "trl", "parquet"] {
        let out = dir.path().join(if format == "parquet" {
            "bad-ds".to_owned()
        } else {
            format!("bad.{format}.jsonl")
        });
        let failed = wai()
            .arg("export")
            .arg(&bad)
            .args(["--format", format, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&failed.stderr);
        assert_eq!(failed.status.code(), Some(65), "{format}: {err}");
        assert!(
            err.contains("privileged_leak: 2 of 12 rows") && err.contains("`t0-1`"),
            "{format}: {err}"
        );
        assert!(!out.exists(), "{format}: nothing written");
    }
}

// Issue #30, item 15: select counted "chosen longer" in characters of the whole reply, export
// in bytes of the turns past the shared prefix, so non-ASCII replies gave two numbers.
#[test]
fn select_and_export_count_chosen_longer_alike() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    let mut lines = Vec::new();
    // Chosen replies are shorter in characters and longer in bytes.
    for (t, (good, bad)) in [
        ("ééééé", "abcdefg"),
        ("çàè ok", "plain!!"),
        ("a much longer reply", "short"),
    ]
    .into_iter()
    .enumerate()
    {
        for (i, (reply, reward)) in [(good, 1.0), (bad, 0.0)].into_iter().enumerate() {
            lines.push(serde_json::json!({"task_id": format!("t{t}"), "rollout_index": i, "prompt": format!("ask {t}"),
                "steps": [{"text": reply}], "final_text": reply, "reward": reward, "judge_status": "ok"}));
        }
    }
    crate::support::write_rows(&rows, &lines);
    let pairs = dir.path().join("pairs.jsonl");
    let selected = crate::support::report_of(
        wai()
            .args(["--json", "select", "--mode", "preference"])
            .arg(&rows)
            .arg("--out")
            .arg(&pairs),
    );
    assert_eq!(selected["pairs"], 3);
    assert_eq!(selected["chosen_longer"], 1, "{selected}");
    let exported = crate::support::report_of(
        wai()
            .args(["--json", "export", "--format", "dpo", "--out"])
            .arg(dir.path().join("dpo.jsonl"))
            .arg(&pairs),
    );
    assert_eq!(exported["pairs"], 3);
    let frac = exported["chosen_longer_frac"].as_f64().unwrap();
    assert!((frac - 1.0 / 3.0).abs() < 1e-9, "{exported}");
    let text = succeeded(
        wai()
            .args(["export", "--format", "dpo", "--out"])
            .arg(dir.path().join("dpo2.jsonl"))
            .arg(&pairs),
    );
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("chosen longer in 1"), "{text}");
}
