//! `wai labels attach`: the reference's `attach_labels` vectors, the refusals that change nothing,
//! and labels feeding `wai judge-trust`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::{read_jsonl, report_of, succeeded, vectors, wai, write_rows};

#[test]
fn the_attach_labels_vector_agrees_with_the_reference() {
    let v = vectors();
    let case = &v["judge_trust"]["attach_labels"];
    let dir = tempfile::tempdir().unwrap();
    let (rows, labels, out) = (
        dir.path().join("rows.jsonl"),
        dir.path().join("labels.jsonl"),
        dir.path().join("out.jsonl"),
    );
    write_rows(&rows, case["rows"].as_array().unwrap());
    write_rows(&labels, case["labels"].as_array().unwrap());
    let report = report_of(
        wai()
            .args(["--json", "labels", "attach"])
            .arg(&rows)
            .arg(&labels)
            .args(["--annotator", "default-ann", "--kind", "human", "-o"])
            .arg(&out),
    );
    let theirs = &case["report"];
    for key in [
        "labels",
        "matched",
        "unmatched",
        "unmatched_keys",
        "invalid",
        "rows_labeled",
        "ties",
        "annotators",
    ] {
        assert_eq!(report[key], theirs[key], "{key}");
    }
    assert_eq!(report["warnings"].as_array().unwrap().len(), 2);
    let got = read_jsonl(&out);
    let want = case["out_rows"].as_array().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g["gold_reward"].as_f64(), w["gold_reward"].as_f64(), "{w}");
        assert_eq!(
            g["gold_kind"],
            w.get("gold_kind").cloned().unwrap_or(Value::Null),
            "{w}"
        );
        // The label records, less the time they were written.
        let strip = |labels: &Value| -> Vec<Value> {
            labels
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    let mut l = l.clone();
                    l.as_object_mut().unwrap().remove("ts");
                    l
                })
                .collect()
        };
        assert_eq!(strip(&g["gold_labels"]), strip(&w["gold_labels"]), "{w}");
    }
}

/// Runs `wai labels attach ROWS LABELS -o OUT`: the exit code, stderr, and whether OUT exists.
fn attach(rows: &[Value], labels: &str) -> (i32, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let (r, l, out) = (
        dir.path().join("rows.jsonl"),
        dir.path().join("labels.json"),
        dir.path().join("out.parquet"),
    );
    write_rows(&r, rows);
    std::fs::write(&l, labels).unwrap();
    let run = wai()
        .args(["labels", "attach"])
        .arg(&r)
        .arg(&l)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    (
        run.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&run.stderr).into_owned(),
        out.exists(),
    )
}

/// Runs `wai labels attach INPUT LABELS ARGS -o dir/OUT` with `labels` written beside it, which
/// must succeed: the output path and what it printed.
fn attach_ok(
    dir: &Path,
    input: &Path,
    labels: &str,
    out: &str,
    args: &[&str],
) -> (PathBuf, String) {
    let path = dir.join(format!("{out}.labels"));
    std::fs::write(&path, labels).unwrap();
    let out = dir.join(out);
    let run = succeeded(
        wai()
            .args(["labels", "attach"])
            .arg(input)
            .arg(&path)
            .args(args)
            .arg("-o")
            .arg(&out),
    );
    (out, String::from_utf8_lossy(&run.stdout).into_owned())
}

#[test]
fn a_key_naming_several_rows_changes_nothing() {
    let v = vectors();
    let case = &v["judge_trust"]["attach_labels_ambiguous_bare_scenario"];
    let (code, err, written) = attach(
        case["rows"].as_array().unwrap(),
        &case["labels"].to_string(),
    );
    // The labels do not fit the rows: a data error (65), not a usage one.
    assert_eq!(code, 65, "{err}");
    assert!(!written);
    assert!(
        err.contains("'s1' names 2 rows") && err.contains("'<task_id>#<rollout_index>'"),
        "{err}"
    );
    assert!(err.contains("no row was changed"), "{err}");
}

#[test]
fn pooled_rows_sharing_a_key_are_refused_until_each_has_its_own_rollout_id() {
    // Two eval runs of one task: `t#0` names both rows.
    let rows = vec![
        json!({"task_id": "t", "rollout_index": 0, "eval_run": 0, "reward": 1}),
        json!({"task_id": "t", "rollout_index": 0, "eval_run": 1, "reward": 0}),
    ];
    let (code, err, written) = attach(&rows, r#"{"t#0": 1}"#);
    // The labels do not fit the rows: a data error (65), not a usage one.
    assert_eq!(code, 65, "{err}");
    assert!(!written);
    assert!(
        err.contains("'t#0' names 2 rows") && err.contains("rollout_id"),
        "{err}"
    );
}

#[test]
fn labels_that_name_no_row_are_an_error_that_spells_the_key_forms() {
    let rows = vec![json!({"task_id": "t", "rollout_index": 0, "reward": 1})];
    let (code, err, written) = attach(&rows, r#"{"nope": 1, "other": 0}"#);
    // The labels do not fit the rows: a data error (65), not a usage one.
    assert_eq!(code, 65, "{err}");
    assert!(!written);
    assert!(err.contains("no label names a row"), "{err}");
    assert!(
        err.contains("'<task_id>#<rollout_index>'") && err.contains("'t#0'"),
        "{err}"
    );
}

#[test]
fn sixteen_human_labels_make_a_judge_pass_and_fifteen_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<Value> = (0..16)
        .map(|i| json!({"task_id": format!("t{i}"), "rollout_index": 0, "reward": i % 2, "final_text": "x".repeat(10 + i)}))
        .collect();
    let path = dir.path().join("rows.jsonl");
    write_rows(&path, &rows);
    for (n, want) in [(15, 1), (16, 0)] {
        let labels: serde_json::Map<String, Value> =
            (0..n).map(|i| (format!("t{i}#0"), json!(i % 2))).collect();
        let (out, _) = attach_ok(
            dir.path(),
            &path,
            &Value::Object(labels).to_string(),
            &format!("labeled-{n}.parquet"),
            &[],
        );
        let trust = wai().arg("judge-trust").arg(&out).output().unwrap();
        let text = String::from_utf8_lossy(&trust.stdout);
        assert_eq!(trust.status.code(), Some(want), "{n} labels:\n{text}");
        if n == 15 {
            assert!(text.contains("Label about 16 rows (1 more"), "{text}");
        }
    }
}

#[test]
fn a_one_line_label_file_is_a_label_and_replace_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    write_rows(
        &rows,
        &[
            json!({"task_id": "t", "rollout_id": "r1", "reward": 1}),
            json!({"task_id": "u", "rollout_id": "r2", "reward": 0}),
        ],
    );
    let attach = |input: &Path, labels: &str, out: &str, args: &[&str]| {
        attach_ok(dir.path(), input, labels, out, args)
    };
    // One JSON Lines label that names its row by rollout_id (not a {key: 0/1} map).
    let (one, _) = attach(
        &rows,
        r#"{"rollout_id": "r1", "reward": 1, "annotator": "ana"}"#,
        "one.jsonl",
        &[],
    );
    let got = read_jsonl(&one);
    assert_eq!(got[0]["gold_reward"].as_f64(), Some(1.0));
    assert_eq!(got[1]["gold_reward"], Value::Null);
    // A second annotator disagrees: a tie, gold unset; the report names both annotators.
    let (tie, said) = attach(&one, r#"{"r1": 0}"#, "tie.jsonl", &["--annotator", "bo"]);
    assert!(said.contains("annotators: ana, bo"), "{said}");
    let got = read_jsonl(&tie);
    assert_eq!(got[0]["gold_reward"], Value::Null);
    assert_eq!(got[0]["gold_labels"].as_array().unwrap().len(), 2);
    // A third breaks it; --replace instead keeps only the new label.
    let (third, _) = attach(&tie, r#"{"r1": 0}"#, "third.jsonl", &["--annotator", "cy"]);
    assert_eq!(read_jsonl(&third)[0]["gold_reward"].as_f64(), Some(0.0));
    let (replaced, _) = attach(&tie, r#"{"r1": 1}"#, "replaced.jsonl", &["--replace"]);
    let got = read_jsonl(&replaced);
    assert_eq!(got[0]["gold_reward"].as_f64(), Some(1.0));
    assert_eq!(got[0]["gold_labels"].as_array().unwrap().len(), 1);
}
