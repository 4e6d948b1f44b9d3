//! `wai judge-trust` against the reference's `judge_trust` vectors: every number equal, except
//! where the reference passes a judge it has not measured (each such case says why).

use serde_json::{Value, json};

use crate::support::{refused, vectors, wai, write_rows};

/// Runs `wai --json judge-trust ROWS ARGS`: the report and the exit code.
fn judge_trust(rows: &[Value], args: &[&str]) -> (Value, i32) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.jsonl");
    write_rows(&path, rows);
    let out = wai()
        .args(["--json", "judge-trust"])
        .arg(&path)
        .args(args)
        .output()
        .unwrap();
    let doc = crate::support::envelope(&out.stdout)["report"].clone();
    (doc, out.status.code().unwrap_or(-1))
}

/// The rows of the `judge_trust` vector case `name`.
fn case_rows(name: &str) -> Vec<Value> {
    vectors()["judge_trust"]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name}"))["rows"]
        .as_array()
        .unwrap()
        .clone()
}

/// `rows` written as `rows.jsonl` in `dir`.
fn rows_file(dir: &std::path::Path, rows: &[Value]) -> std::path::PathBuf {
    let path = dir.join("rows.jsonl");
    write_rows(&path, rows);
    path
}

fn close(a: &Value, b: &Value, what: &str) {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => assert!(
            (x - y).abs() <= 1e-12 * y.abs().max(1.0),
            "{what}: {x} vs the reference's {y}"
        ),
        _ => assert_eq!(a, b, "{what}"),
    }
}

/// The agreement fields both sides report.
fn same_agreement(ours: &Value, theirs: &Value, what: &str, degenerate: bool) {
    for key in [
        "n",
        "n_skipped",
        "agreement",
        "confusion",
        "pass_when_gold_fail",
        "fail_when_gold_pass",
        "judge_pass_rate",
        "gold_pass_rate",
        "gold_kind",
    ] {
        close(&ours[key], &theirs[key], &format!("{what}.{key}"));
    }
    match (ours["ci95"].as_array(), theirs["ci95"].as_array()) {
        (Some(a), Some(b)) => {
            close(&a[0], &b[0], &format!("{what}.ci95[0]"));
            close(&a[1], &b[1], &format!("{what}.ci95[1]"));
        }
        (a, b) => assert_eq!(a, b, "{what}.ci95"),
    }
    if degenerate {
        // One gold value and a judge that gives it too: kappa is 0/0, not the reference's 1.0.
        assert_eq!(ours["kappa"], Value::Null, "{what}.kappa");
    } else {
        close(&ours["kappa"], &theirs["kappa"], &format!("{what}.kappa"));
    }
}

#[test]
fn every_judge_trust_vector_agrees_with_the_reference() {
    let v = vectors();
    let mut seen = 0;
    for case in v["judge_trust"]["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        if name == "string_rewards_allow_model_gold" {
            continue; // a string reward is refused on read; tested below
        }
        let mut args = Vec::new();
        if case["kwargs"]["allow_model_gold"] == json!(true) {
            args.push("--allow-model-gold");
        }
        let rows = case["rows"].as_array().unwrap();
        let (ours, code) = judge_trust(rows, &args);
        let theirs = &case["out"];
        let degenerate = theirs["gold_degenerate"] == json!(true);
        for key in [
            "n_rows",
            "n_labeled",
            "gold_kind",
            "gold_degenerate",
            "skipped",
        ] {
            close(&ours[key], &theirs[key], &format!("{name}: {key}"));
        }
        same_agreement(
            &ours["agreement"],
            &theirs["agreement"],
            &format!("{name}: agreement"),
            degenerate,
        );
        for half in ["a", "b"] {
            let h = &theirs["held_out_halves"][half];
            let c = &h["confusion"];
            let one_valued = c["tp"].as_u64().unwrap() + c["fn"].as_u64().unwrap()
                == h["n"].as_u64().unwrap()
                || c["fp"].as_u64().unwrap() + c["tn"].as_u64().unwrap()
                    == h["n"].as_u64().unwrap();
            let undefined =
                one_valued && c["fp"] == json!(0) && c["fn"] == json!(0) && h["n"] != json!(0);
            same_agreement(
                &ours["held_out_halves"][half],
                h,
                &format!("{name}: half {half}"),
                undefined,
            );
        }
        let (ls, theirs_ls) = (&ours["length_sensitivity"], &theirs["length_sensitivity"]);
        close(
            &ls["max_gap"],
            &theirs_ls["max_gap"],
            &format!("{name}: max_gap"),
        );
        assert_eq!(
            ls["flagged"], theirs_ls["flagged"],
            "{name}: length flagged"
        );
        for side in ["gold_1", "gold_0"] {
            let t = theirs_ls[side].as_object().unwrap();
            for (key, value) in t {
                close(&ls[side][key], value, &format!("{name}: {side}.{key}"));
            }
        }
        assert_eq!(
            ours["disagreements"].as_array().unwrap().len(),
            theirs["disagreements"].as_array().unwrap().len(),
            "{name}: disagreements"
        );
        // The gate: the reference's passes on a one-valued gold set and on a halves gap are
        // bugs (measure spec §9, items 4 and 5); every other verdict is the reference's.
        let want_ok = match name {
            "all_gold_one_degenerate" | "halves_gap_only_ok_true" => false,
            _ => theirs["ok"].as_bool().unwrap(),
        };
        assert_eq!(ours["ok"], json!(want_ok), "{name}: ok\n{ours:#}");
        assert_eq!(code, i32::from(!want_ok), "{name}: exit code");
        // The label count the reference asks for is ours too.
        for w in theirs["warnings"].as_array().unwrap() {
            let w = w.as_str().unwrap();
            if let Some(at) = w.find("Label about ") {
                let need: String = w[at..]
                    .chars()
                    .filter(char::is_ascii_digit)
                    .take(3)
                    .collect();
                let ours_text = ours["warnings"].to_string();
                assert!(
                    ours_text.contains(&format!("Label about {need} rows")),
                    "{name}: {ours_text}"
                );
            }
        }
        seen += 1;
    }
    assert_eq!(seen, 16);
}

#[test]
fn headlines_say_measured_or_not() {
    let case = case_rows;
    let text = |rows: &[Value]| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.jsonl");
        write_rows(&path, rows);
        let out = wai().arg("judge-trust").arg(&path).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(
        text(&case("perfect_16_pass"))
            .starts_with("PASS\nagreement 100% (95% 81%..100%, n=16), kappa 1.00\n")
    );
    let short = text(&case("perfect_14_label_more"));
    assert!(short.starts_with("FAIL\n"), "{short}");
    assert!(short.contains("Label about 16 rows (2 more"), "{short}");
    let none = text(&case("no_gold"));
    assert!(none.starts_with("NOT MEASURED\n"), "{none}");
    assert!(none.contains("no row has a gold label"), "{none}");
    assert!(text(&case("model_gold")).starts_with("NOT MEASURED\n"));
    let one = text(&case("all_gold_one_degenerate"));
    assert!(
        one.starts_with("NOT MEASURED\n") && one.contains("kappa undefined"),
        "{one}"
    );
    assert!(text(&case("halves_gap_only_ok_true")).starts_with("FAIL\n"));
    assert!(
        text(&case("fractional_over_floor"))
            .starts_with("INCONCLUSIVE: 3 of 20 labeled rows skipped (15%")
    );
}

#[test]
fn a_string_reward_is_refused_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = rows_file(dir.path(), &case_rows("string_rewards_allow_model_gold"));
    let out = wai()
        .arg("judge-trust")
        .arg(&path)
        .arg("--allow-model-gold")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 1") && err.contains("`reward`"), "{err}");
}

#[test]
fn task_halves_follow_the_sha256_of_the_task() {
    // The halves vector through the command: one labeled row per task lands in the named half.
    let v = vectors();
    for t in v["judge_trust"]["task_halves"].as_array().unwrap() {
        let task = t["task"].as_str().unwrap();
        if task.is_empty() {
            continue; // a row without a task id is refused on read (it names no task)
        }
        let rows =
            vec![json!({"task_id": task, "reward": 1, "gold_reward": 1, "gold_kind": "human"})];
        let (ours, _) = judge_trust(&rows, &[]);
        let half = if t["half"] == json!(0) { "a" } else { "b" };
        assert_eq!(ours["held_out_halves"][half]["n"], json!(1), "{task}");
    }
}

/// The reference's length judge (`reward 1 if len(final_text) >= 90 or 'refunded' in the lowered
/// reply`) as a SQL expression judge.
const LENGTH_JUDGE: &str = "sql:CASE WHEN length(final_text) >= 90 OR lower(final_text) LIKE '%refunded%' THEN 1.0 ELSE 0.0 END";

#[test]
fn re_judging_and_probes_agree_with_the_reference() {
    // The reference run on every row (sample 50 of 50), so no random draw is involved.
    let want: Value = serde_json::from_str(
        &std::fs::read_to_string(crate::support::fixture("judge_trust_probes.json")).unwrap(),
    )
    .unwrap();
    let rows = case_rows("judge_callable_perturbation_and_probes");
    let rubric = want["kwargs"]["rubric"].as_str().unwrap();
    let (ours, code) = judge_trust(
        &rows,
        &[
            "--judge",
            LENGTH_JUDGE,
            "--probes",
            "all",
            "--rubric",
            rubric,
            "--sample",
            "50",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(ours["perturbation"], want["perturbation"]);
    for (name, theirs) in want["probes"]["probes"].as_object().unwrap() {
        for (key, value) in theirs.as_object().unwrap() {
            close(
                &ours["probes"]["probes"][name][key],
                value,
                &format!("{name}.{key}"),
            );
        }
    }
    assert_eq!(ours["exploitable_by"], want["exploitable_by"]);
    assert_eq!(ours["flags"]["exploitable"], json!(true));
    assert_eq!(ours["flags"]["reads_filler"], json!(true));
    // Every probe warning of the reference, word for word.
    let warnings = ours["warnings"].to_string();
    for w in want["warnings"].as_array().unwrap() {
        let w = w.as_str().unwrap();
        if w.starts_with("judge is exploitable") || w.contains("neutral filler") {
            assert!(warnings.contains(w), "missing: {w}");
        }
    }
}

#[test]
fn a_probe_that_fires_fails_the_judge_without_labels() {
    // No gold at all: trust is unmeasured, but an exploit is a finding.
    let rows: Vec<Value> = (0..30)
        .map(|i| json!({"task_id": format!("t{i}"), "final_text": "short", "reward": 0}))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = rows_file(dir.path(), &rows);
    let plain = wai().arg("judge-trust").arg(&path).output().unwrap();
    assert!(String::from_utf8_lossy(&plain.stdout).starts_with("NOT MEASURED\n"));
    let probed = wai()
        .arg("judge-trust")
        .arg(&path)
        .args(["--judge", LENGTH_JUDGE, "--probes", "filler,refusal"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&probed.stdout);
    assert_eq!(probed.status.code(), Some(1), "{text}");
    assert!(text.starts_with("FAIL\n"), "{text}");
    assert!(
        text.contains("filler") && text.contains("EXPLOITABLE"),
        "{text}"
    );
}

#[test]
fn a_query_judge_cannot_re_judge_edited_rows() {
    let rows = vec![json!({"task_id": "t", "final_text": "x", "reward": 1})];
    let dir = tempfile::tempdir().unwrap();
    let path = rows_file(dir.path(), &rows);
    refused(
        wai()
            .arg("judge-trust")
            .arg(&path)
            .args(["--judge", "sql:SELECT rollout_id, 1.0 AS reward FROM rows"]),
        "cannot re-judge edited rows",
    );
}

#[test]
fn compare_judges_ranks_by_kappa_and_names_the_best() {
    let dir = tempfile::tempdir().unwrap();
    let path = rows_file(
        dir.path(),
        &case_rows("judge_callable_perturbation_and_probes"),
    );
    let run = |judges: &[String]| {
        let mut cmd = wai();
        cmd.args(["--json", "compare-judges"]).arg(&path);
        for j in judges {
            cmd.args(["--judge", j]);
        }
        let out = cmd.output().unwrap();
        let doc: Value = crate::support::envelope(&out.stdout)["report"].clone();
        (doc, out.status.code())
    };
    let (doc, code) = run(&[
        format!("len={LENGTH_JUDGE}"),
        "never=sql:0.0".to_owned(),
        "gold=sql:gold_reward".to_owned(),
    ]);
    assert_eq!(code, Some(0), "{doc:#}");
    let names: Vec<&str> = doc["judges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["gold", "len", "never"]);
    assert_eq!(doc["best"], json!("gold"));
    // The length judge scores as judge-trust scores it on the same rows.
    let len = &doc["judges"][1];
    assert_eq!(len["agreement"], json!(0.7));
    assert_eq!(len["kappa"], json!(0.3655));
    assert_eq!(len["leak"], json!(0.3571));
    assert_eq!(len["ok"], json!(false));
    // Without a judge that clears the floors: the top of the ranking, and exit 1.
    let (doc, code) = run(&[format!("len={LENGTH_JUDGE}"), "never=sql:0.0".to_owned()]);
    assert_eq!(code, Some(1));
    assert_eq!(doc["best"], json!("len"));
    assert_eq!(doc["ok"], json!(false));
}

#[test]
fn compare_judges_needs_labels_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.jsonl");
    write_rows(&path, &[json!({"task_id": "t", "reward": 1})]);
    // Rows without gold labels: a data condition (65), with the command that fixes it.
    let out = wai()
        .arg("compare-judges")
        .arg(&path)
        .args(["--judge", "a=sql:1.0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{err}");
    assert!(err.contains("wai labels attach"), "{err}");
    refused(
        wai()
            .arg("compare-judges")
            .arg(&path)
            .args(["--judge", "sql:1.0"]),
        "NAME=SPEC",
    );
}

#[test]
fn rows_graded_by_another_judge_do_not_measure_the_one_under_audit() {
    let rows: Vec<Value> = (0..20)
        .map(|i| {
            json!({"task_id": format!("t{i}"), "final_text": "x".repeat(100), "reward": 1,
                   "gold_reward": 1 - i % 2, "gold_kind": "human", "judge_name": "rules"})
        })
        .collect();
    let (ours, code) = judge_trust(&rows, &["--judge", "sql:1.0"]);
    assert_eq!(code, 1);
    assert_eq!(ours["flags"]["foreign_judge"], json!(true));
    assert!(
        ours["warnings"]
            .to_string()
            .contains("20 of 20 labeled rows were graded by `rules`"),
        "{:#}",
        ours["warnings"]
    );
}

#[test]
fn compare_judges_reads_who_wrote_the_gold_off_the_rows() {
    let rows: Vec<Value> = (0..40)
        .map(|i| json!({"task_id": format!("t{i}"), "reward": i % 2, "gold_reward": i % 2, "gold_kind": "model"}))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = rows_file(dir.path(), &rows);
    let out = wai()
        .args(["--json", "compare-judges"])
        .arg(&path)
        .args(["--judge", "same=sql:reward"])
        .output()
        .unwrap();
    let doc: Value = crate::support::envelope(&out.stdout)["report"].clone();
    assert_eq!(out.status.code(), Some(1), "{doc:#}");
    assert_eq!(doc["gold_kind"], json!("model"));
    assert_eq!(doc["judges"][0]["ok"], json!(false));
    assert!(doc["warnings"].to_string().contains("--allow-model-gold"));
}

#[test]
fn re_judging_compares_the_judge_with_itself_not_with_the_verdicts_on_the_rows() {
    // Judge X passed every row; the judge under audit (Y, a length rule) fails the short
    // replies and gives the same verdict every time. Y's flips are Y's own: none on an
    // identical re-judge, and filler lifts exactly its 10 short failures (none down), against
    // its own pass rate of 50% (X's verdicts on the rows would say 100% and 50% flips).
    let rows: Vec<Value> = (0..20)
        .map(|i| {
            let text = if i % 2 == 0 {
                "x".repeat(100)
            } else {
                "short".to_owned()
            };
            json!({"task_id": format!("t{i}"), "final_text": text, "reward": 1,
                   "judge_name": "x"})
        })
        .collect();
    let y = "sql:CASE WHEN length(final_text) >= 50 THEN 1.0 ELSE 0.0 END";
    let (ours, code) = judge_trust(&rows, &["--judge", y, "--probes", "filler,refusal"]);
    assert_eq!(code, 1, "{ours:#}");
    let p = &ours["perturbation"];
    assert_eq!(p["consistency_flip_rate"], json!(0.0), "{p:#}");
    assert_eq!(p["flagged_consistency"], json!(false), "{p:#}");
    assert_eq!(p["filler_flip_rate"], json!(0.5), "{p:#}");
    assert_eq!(p["filler_flips_up"], json!(10), "{p:#}");
    assert_eq!(p["filler_flips_down"], json!(0), "{p:#}");
    let filler = &ours["probes"]["probes"]["filler"];
    assert_eq!(filler["pass_before"], json!(0.5), "{filler:#}");
    assert_eq!(filler["denominator"], json!(10), "{filler:#}");
    assert_eq!(
        ours["probes"]["probes"]["refusal"]["pass_before"],
        json!(0.5)
    );
    let warnings = ours["warnings"].to_string();
    assert!(!warnings.contains("identical re-judge"), "{warnings}");
    assert!(
        warnings.contains("50% of verdicts flip when neutral filler"),
        "{warnings}"
    );
}
