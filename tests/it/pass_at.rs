//! `wai pass-at` and `wai markers` against the reference's vectors, τ-bench's formula, SQL, and
//! themselves under shuffled rows and other thread counts.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{
    fixture, gen_rows, read_jsonl, report_of, sql_jsonl, vectors, wai, write_rows,
};

fn pass_at_json(rows: &Path, args: &[&str]) -> (Value, i32) {
    let out = wai()
        .args(["--json", "pass-at"])
        .arg(rows)
        .args(args)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let doc = crate::support::envelope(&out.stdout)["report"].clone();
    (doc, code)
}

/// Intervals agree within resampling error: the reference's draws are `CPython`'s, ours `ChaCha`'s.
fn close_interval(ours: &Value, theirs: &Value, tol: f64) -> bool {
    match (ours.as_array(), theirs.as_array()) {
        (None, None) => ours.is_null() && theirs.is_null(),
        (Some(a), Some(b)) => a
            .iter()
            .zip(b)
            .all(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() <= tol),
        _ => false,
    }
}

fn strip_intervals(line: &str) -> String {
    let mut out = String::new();
    let mut skip = false;
    for ch in line.chars() {
        match ch {
            '[' => skip = true,
            ']' => skip = false,
            _ if !skip => out.push(ch),
            _ => {}
        }
    }
    out.replace("  ", " ")
}

#[test]
fn every_reference_vector_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let v = vectors();
    let mut checked = 0;
    for case in v["pass_at"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        if name == "grouping_key_and_reward_fallbacks" {
            continue; // string and boolean rewards are bad rows here: tested below
        }
        let rows = dir.path().join(format!("{name}.jsonl"));
        write_rows(&rows, case["rows"].as_array().unwrap());
        // The reference's interval (and line): our default is Wilson on effective tasks.
        let mut args: Vec<String> = vec!["--interval=percentile".into()];
        let kw = &case["kwargs"];
        if let Some(k) = kw.get("k") {
            args.push(format!("--k={k}"));
        }
        if let Some(m) = kw.get("min_k") {
            args.push(format!("--min-k={m}"));
        }
        if kw.get("unanimous_short") == Some(&Value::Bool(true)) {
            args.push("--unanimous-short".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (doc, code) = pass_at_json(&rows, &args);
        let want = &case["out"];
        let got = &doc["results"][0];
        for key in [
            "k",
            "pass_at_1",
            "pass_pow_k",
            "pass_at_k",
            "headroom",
            "n_groups",
            "n_groups_at_k",
            "n_groups_imputed",
            "n_partial",
            "n_rows",
            "note",
            "config",
        ] {
            assert_eq!(got[key], want[key], "{name}: `{key}`");
        }
        let tol = 0.05; // at most 5 tasks per vector: the percentiles move in steps of 0.05
        for key in ["ci95", "pass_pow_k_ci95", "pass_at_k_ci95"] {
            assert!(
                close_interval(&got[key], &want[key], tol),
                "{name}: `{key}` {} vs {}",
                got[key],
                want[key]
            );
        }
        let line = wai()
            .arg("pass-at")
            .arg(&rows)
            .args(&args)
            .output()
            .unwrap();
        let text = String::from_utf8(line.stdout).unwrap();
        assert_eq!(
            strip_intervals(text.lines().next().unwrap()),
            strip_intervals(case["text"].as_str().unwrap()),
            "{name}"
        );
        assert_eq!(
            code,
            if want["n_groups"] == 0 { 2 } else { 0 },
            "{name}: exit code"
        );
        checked += 1;
    }
    assert_eq!(checked, 18);
}

#[test]
fn intervals_mostly_match_the_reference_to_the_cent() {
    // Resampling error aside, our intervals are the reference's: count exact two-decimal matches.
    let dir = tempfile::tempdir().unwrap();
    let (mut same, mut all) = (0, 0);
    for case in vectors()["pass_at"].as_array().unwrap() {
        if case["name"] == "grouping_key_and_reward_fallbacks"
            || !case["kwargs"].as_object().unwrap().is_empty()
        {
            continue;
        }
        let rows = dir.path().join("rows.jsonl");
        write_rows(&rows, case["rows"].as_array().unwrap());
        let (doc, _) = pass_at_json(&rows, &["--interval=percentile"]);
        for key in ["ci95", "pass_pow_k_ci95", "pass_at_k_ci95"] {
            if let (Some(a), Some(b)) = (
                doc["results"][0][key].as_array(),
                case["out"][key].as_array(),
            ) {
                for (x, y) in a.iter().zip(b) {
                    all += 1;
                    same += usize::from(
                        format!("{:.2}", x.as_f64().unwrap())
                            == format!("{:.2}", y.as_f64().unwrap()),
                    );
                }
            }
        }
    }
    assert!(
        all >= 20 && same * 10 >= all * 8,
        "{same} of {all} bounds equal to two decimals"
    );
}

#[test]
fn one_reward_reader_string_and_boolean_rewards_are_bad_rows() {
    let dir = tempfile::tempdir().unwrap();
    let case = vectors()["pass_at"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "grouping_key_and_reward_fallbacks")
        .unwrap()
        .clone();
    let rows = dir.path().join("rows.jsonl");
    write_rows(&rows, case["rows"].as_array().unwrap());
    let out = wai().arg("pass-at").arg(&rows).output().unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 11: field `reward`"));
    // Without the two bad rows: `qwen_reward` is not read (unjudged), 0.5 is partial.
    let kept: Vec<Value> = case["rows"].as_array().unwrap()[..10].to_vec();
    write_rows(&rows, &kept);
    let (doc, _) = pass_at_json(&rows, &[]);
    let r = &doc["results"][0];
    assert_eq!(
        (
            r["n_groups"].as_u64(),
            r["n_rows"].as_u64(),
            r["n_partial"].as_u64(),
            r["n_unjudged"].as_u64()
        ),
        (Some(4), Some(8), Some(1), Some(1))
    );
    assert_eq!(r["pass_at_1"], json!(0.625)); // s1 0.5, A 1, p1 0, p9 1
}

#[test]
fn tau_bench_pass_hat_k_matches_its_own_formula() {
    let rows = read_jsonl(&fixture("tau_bench_airline_rewards.jsonl"));
    let mut by_task: std::collections::BTreeMap<i64, (u64, u64)> =
        std::collections::BTreeMap::default();
    for r in &rows {
        let e = by_task.entry(r["task_id"].as_i64().unwrap()).or_default();
        e.0 += 1;
        e.1 += u64::from(r["reward"].as_f64() == Some(1.0));
    }
    assert_eq!(by_task.len(), 50);
    let comb =
        |n: u64, k: u64| -> f64 { (0..k).map(|i| (n - i) as f64 / (i + 1) as f64).product() };
    let (doc, code) = pass_at_json(
        &fixture("tau_bench_airline_rewards.jsonl"),
        &["--k", "1,2,3,4", "--min-k", "1"],
    );
    assert_eq!(code, 0);
    for (i, k) in (1..=4u64).enumerate() {
        // τ-bench: pass^k = mean over tasks of C(c, k) / C(n, k).
        let want = by_task
            .values()
            .map(|(n, c)| {
                if *c >= k {
                    comb(*c, k) / comb(*n, k)
                } else {
                    0.0
                }
            })
            .sum::<f64>()
            / 50.0;
        let got = doc["results"][i]["pass_pow_k"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-12, "k={k}: {got} vs {want}");
        assert_eq!(doc["results"][i]["n_groups_at_k"], 50);
    }
}

#[test]
fn sql_udfs_agree_with_the_stage() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.parquet");
    gen_rows(&rows, 5000, 21);
    let (doc, _) = pass_at_json(&rows, &["--k", "4", "--by", "dims.tier"]);
    let sql = sql_jsonl(
        &[
            "--query",
            "pass_at_k_by_slice",
            "--param",
            "key=tier",
            "--param",
            "k=4",
        ],
        &rows,
    );
    assert_eq!(sql.len(), 3);
    for row in sql {
        let slice = doc["slices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["value"] == row["value"])
            .unwrap();
        let r = &slice["results"][0];
        for key in ["pass_at_1", "pass_pow_k", "pass_at_k"] {
            let rounded = (r[key].as_f64().unwrap() * 1e4).round() / 1e4;
            assert!(
                (row[key].as_f64().unwrap() - rounded).abs() < 1e-9,
                "{key}: {} vs {}",
                row[key],
                r[key]
            );
        }
        assert_eq!(row["tasks"], r["n_groups"]);
    }
}

#[test]
fn same_seed_same_numbers_whatever_the_row_order_and_threads() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    gen_rows(&rows, 4000, 3);
    let mut lines: Vec<String> = std::fs::read_to_string(&rows)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.reverse();
    lines.rotate_left(1234);
    let shuffled = dir.path().join("shuffled.jsonl");
    std::fs::write(&shuffled, lines.join("\n") + "\n").unwrap();
    let run = |path: &Path, threads: &str| {
        let out = wai()
            .env("RAYON_NUM_THREADS", threads)
            .args(["--json", "pass-at", "--by", "dims.tool", "--seed", "7"])
            .arg(path)
            .output()
            .unwrap();
        let mut doc: Value = crate::support::envelope(&out.stdout)["report"].clone();
        doc.as_object_mut().unwrap().remove("elapsed_ms");
        doc
    };
    let base = run(&rows, "1");
    assert_eq!(base, run(&shuffled, "3"));
    assert_eq!(base, run(&rows, "2"));
    assert_ne!(base["results"][0]["ci95"], Value::Null);
    let other_seed = wai()
        .args(["--json", "pass-at", "--seed", "8"])
        .arg(&rows)
        .output()
        .unwrap();
    let other: Value = crate::support::envelope(&other_seed.stdout)["report"].clone();
    assert_eq!(
        other["results"][0]["pass_at_1"],
        base["results"][0]["pass_at_1"]
    );
}

#[test]
fn markers_match_the_reference_summary() {
    let dir = tempfile::tempdir().unwrap();
    let v = vectors();
    let rows = dir.path().join("rows.jsonl");
    write_rows(&rows, v["marker_summary"]["rows"].as_array().unwrap());
    let doc = report_of(
        wai()
            .args(["--json", "markers", "--interval", "percentile"])
            .arg(&rows),
    );
    for (name, want) in v["marker_summary"]["out"].as_object().unwrap() {
        let got = &doc["markers"][name];
        for key in [
            "metric",
            "n_tasks",
            "n_rows",
            "n_rows_at_1",
            "n_rows_at_0",
            "mean",
            "degenerate",
        ] {
            assert_eq!(got[key], want[key], "{name}: `{key}`");
        }
        assert!(
            close_interval(&got["ci95"], &want["ci95"], 0.05),
            "{name}: {} vs {}",
            got["ci95"],
            want["ci95"]
        );
        assert_eq!(
            got.get("warning").is_some(),
            want.get("warning").is_some(),
            "{name}"
        );
    }
    let text = wai()
        .args(["markers", "--interval", "percentile"])
        .arg(&rows)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("grounded  0.56 [") && text.contains("(5 tasks, 45 rows: 25 at 1, 20 at 0)"),
        "{text}"
    );
}

#[test]
fn eval_variance_matches_the_reference_vector() {
    // The reference's vector: three runs of 5 tasks, split by lineage.eval_run.
    let got = report_of(
        wai()
            .args(["--json", "variance"])
            .arg(fixture("eval_variance_runs.jsonl")),
    );
    let want = serde_json::json!({"metric": "pass_at_1", "n_runs": 3,
        "means": {"0": 0.4667, "1": 0.4667, "2": 0.6667}, "mean": 0.5333, "run_std": 0.1155,
        "run_std_by_metric": {"pass_at_1": 0.1155, "marker:grounded": 0.2524},
        "run_std_points": 11.55, "noise_band": 0.7027, "noise_band_df": 2,
        "stability": "high_variance", "tasks_in_every_run": 5, "notes": []});
    for (k, v) in want.as_object().unwrap() {
        assert_eq!(&got[k], v, "{k}");
    }
    // One file per run: two runs of the same tasks, and a row without a run key left out.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("eval_variance_runs.jsonl")).unwrap();
    let run = |n: u8| -> String {
        text.lines()
            .filter(|l| l.contains(&format!("\"eval_run\": {n}}}")))
            .fold(String::new(), |mut text, l| {
                text.push_str(l);
                text.push('\n');
                text
            })
    };
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    std::fs::write(&a, run(0)).unwrap();
    std::fs::write(&b, run(1)).unwrap();
    let got = report_of(wai().args(["--json", "variance"]).arg(&a).arg(&b));
    assert_eq!(
        got["means"],
        serde_json::json!({"run_1": 0.4667, "run_2": 0.4667})
    );
    assert_eq!(
        (got["run_std"].as_f64(), got["noise_band_df"].as_u64()),
        (Some(0.0), Some(1))
    );
    assert_eq!(got["stability"], "very_stable");
    assert!(
        got["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("2 run(s): two is a difference")
    );
    let mut with_unkeyed = run(0) + &run(1);
    with_unkeyed.push_str("{\"task_id\": \"t0\", \"reward\": 1}\n");
    std::fs::write(&a, with_unkeyed).unwrap();
    let got = report_of(wai().args(["--json", "variance"]).arg(&a));
    assert!(
        got["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("1 row(s) without a run key"),
        "{got}"
    );
}

#[test]
fn few_tasks_say_the_interval_is_approximate_and_percentile_is_the_reference() {
    // 8 tasks of 4 rollouts, with a marker on every row: under 20 tasks, every default interval
    // carries the warning; `--interval percentile` prints the reference's line, same numbers.
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<Value> = (0..32)
        .map(|i| {
            json!({"task_id": format!("t{}", i / 4), "prompt": "q", "final_text": "a",
                "reward": f64::from(u8::from(i % 3 != 0)),
                "markers": {"polite": f64::from(u8::from(i % 5 == 0))}})
        })
        .collect();
    let path = dir.path().join("rows.jsonl");
    write_rows(&path, &rows);
    let (wilson, _) = pass_at_json(&path, &[]);
    let (reference, _) = pass_at_json(&path, &["--interval", "percentile"]);
    let (w, r) = (&wilson["results"][0], &reference["results"][0]);
    assert_eq!(
        (&w["interval"], &r["interval"]),
        (&json!("wilson"), &json!("percentile"))
    );
    assert_eq!(w["interval_approximate"], json!(true));
    assert_eq!(r["interval_approximate"], json!(true));
    for key in ["pass_at_1", "pass_pow_k", "pass_at_k", "headroom"] {
        assert_eq!(w[key], r[key], "{key}");
    }
    assert_ne!(w["ci95"], r["ci95"]);
    let text = |args: &[&str]| {
        let out = wai().arg("pass-at").arg(&path).args(args).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(
        text(&[]).contains("; interval approximate: 8 tasks (intervals cover 93% or more from 20)"),
        "{}",
        text(&[])
    );
    assert!(!text(&["--interval", "percentile"]).contains("approximate"));
    let markers = report_of(wai().args(["--json", "markers"]).arg(&path));
    assert_eq!(markers["interval"], json!("wilson"));
    assert_eq!(
        markers["markers"]["polite"]["interval_approximate"],
        json!(true)
    );
    assert!(
        markers["markers"]["polite"]["note"]
            .as_str()
            .unwrap()
            .starts_with("interval approximate: 8 tasks")
    );
}

#[test]
fn a_number_within_three_tasks_of_an_end_says_so_and_percentile_keeps_the_reference_line() {
    // 40 tasks of 4 rollouts; every task passes at least once but task 0, 7 pass all 4, and the
    // marker fires once (task 1): pass@4 is 1 task from 100%, the marker 1.0 effective tasks
    // from 0% (one task at 0.25 counts 4 times over: n_eff = 163), pass^4 7 tasks from 0%.
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<Value> = (0..160)
        .map(|i| {
            let (task, roll) = (i / 4, i % 4);
            let pass = task != 0 && (roll == 0 || task % 5 == 0 || (task + roll) % 3 == 0);
            json!({"task_id": format!("t{task:02}"), "prompt": "q", "final_text": "a",
                "reward": f64::from(u8::from(pass)),
                "markers": {"rare": f64::from(u8::from(task == 1 && roll == 0))}})
        })
        .collect();
    let path = dir.path().join("rows.jsonl");
    write_rows(&path, &rows);
    let (wilson, _) = pass_at_json(&path, &[]);
    let w = &wilson["results"][0];
    assert_eq!(w["pass_at_k"], json!(0.975));
    assert_eq!(w["interval_near_end"], json!(["pass_at_k"]));
    assert_eq!(w["interval_approximate"], json!(false));
    let (reference, _) = pass_at_json(&path, &["--interval", "percentile"]);
    assert_eq!(
        reference["results"][0]["interval_near_end"],
        json!(["pass_at_k"])
    );
    let text = |args: &[&str]| {
        let out = wai().arg("pass-at").arg(&path).args(args).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let line = text(&[]);
    assert!(
        line.contains("; interval approximate near an end: pass@4 (1 of 40 tasks failed))"),
        "{line}"
    );
    assert!(!text(&["--interval", "percentile"]).contains("approximate"));
    let markers = report_of(wai().args(["--json", "markers"]).arg(&path));
    let rare = &markers["markers"]["rare"];
    assert_eq!(rare["interval_near_end"], json!(true));
    assert!(
        rare["note"].as_str().unwrap()
            == "interval approximate near an end: rare (1.0 of 163 effective tasks fired)",
        "{rare}"
    );
}

/// Slices are read at the overall k unless a k is asked for (#30 item 11): a slice of long
/// groups printed its own k (pass^28 beside an overall pass^4).
#[test]
fn slices_use_the_overall_k() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = Vec::new();
    for (task, tier, n) in [
        ("a", "easy", 4),
        ("b", "easy", 4),
        ("c", "long", 28),
        ("d", "long", 28),
    ] {
        for i in 0..n {
            rows.push(serde_json::json!({"task_id": task, "rollout_index": i, "reward": i64::from(i % 3 != 0), "dims": {"tier": tier}}));
        }
    }
    let path = dir.path().join("rows.jsonl");
    crate::support::write_rows(&path, &rows);
    let r = crate::support::report_of(
        crate::support::wai()
            .args(["--json", "pass-at"])
            .arg(&path)
            .args(["--by", "dims.tier"]),
    );
    assert_eq!(r["results"][0]["k"], 4, "{r}");
    let slices = r["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 2);
    for s in slices {
        assert_eq!(s["results"][0]["k"], 4, "slice {}: {r}", s["value"]);
    }
    // Asked for, a k is every slice's.
    let r = crate::support::report_of(
        crate::support::wai()
            .args(["--json", "pass-at"])
            .arg(&path)
            .args(["--by", "dims.tier", "--k", "2"]),
    );
    for s in r["slices"].as_array().unwrap() {
        assert_eq!(s["results"][0]["k"], 2);
    }
}

// Issue #30, item 15: the demo's marker table printed the share of rows (0.939) and `wai
// markers` the per-task mean (0.81) for one marker, neither saying which.
#[test]
fn the_demo_marker_table_and_wai_markers_say_their_unit_and_agree_per_task() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    let out =
        crate::support::succeeded(wai().args(["demo", "--budget", "400", "--dir"]).arg(&demo));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("`rate` is the share of the rows a rule applies to")
            && text.contains("`task_mean` is the mean of the per-task rates")
            && text.contains("| task_mean |"),
        "{text}"
    );
    let scored = demo.join("scored.parquet");
    let per_task = crate::support::sql_jsonl(&["--query", "marker_rates"], &scored);
    let markers = report_of(wai().args(["--json", "markers"]).arg(&scored));
    assert!(!per_task.is_empty());
    for row in &per_task {
        let name = row["marker"].as_str().unwrap();
        let mean = markers["markers"][name]["mean"].as_f64().unwrap();
        let task_mean = row["task_mean"].as_f64().unwrap();
        assert!(
            (task_mean - mean).abs() < 5e-4 + 1e-9,
            "{name}: {task_mean} vs {mean}"
        );
        assert_eq!(row["tasks"], markers["markers"][name]["n_tasks"], "{name}");
    }
    let out = crate::support::succeeded(wai().arg("markers").arg(&scored));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("per task: "), "{text}");
}

// Issue #35, item 3: pass@k's sufficient statistics. Counts saved from some rows and added to the
// rest measure what all the rows give at once, slices and intervals included; counts sliced
// otherwise are refused, naming the file.
#[test]
fn saved_counts_added_to_the_other_rows_give_what_all_rows_give() {
    let dir = tempfile::tempdir().unwrap();
    let all = dir.path().join("all.jsonl");
    gen_rows(&all, 900, 21);
    let rows = read_jsonl(&all);
    // Disjoint halves that share tasks (every other row), and a third with the same tasks.
    let (a, b): (Vec<_>, Vec<_>) = rows
        .iter()
        .cloned()
        .enumerate()
        .partition(|(i, _)| i % 3 != 0);
    let strip = |v: Vec<(usize, Value)>| v.into_iter().map(|(_, r)| r).collect::<Vec<_>>();
    let (a_path, b_path) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    write_rows(&a_path, &strip(a));
    write_rows(&b_path, &strip(b));
    let counts = dir.path().join("counts/a.json");
    let by = ["--by", "dims.tier", "--k", "1,4"];
    let (_, code) = pass_at_json(
        &a_path,
        &[&by[..], &["--save-counts", counts.to_str().unwrap()]].concat(),
    );
    assert_eq!(code, 0);
    let (added, code) = pass_at_json(
        &b_path,
        &[&by[..], &["--add-counts", counts.to_str().unwrap()]].concat(),
    );
    assert_eq!(code, 0);
    let (whole, _) = pass_at_json(&all, &by);
    assert_eq!(added, whole);
    assert!(whole["slices"].as_array().unwrap().len() >= 2, "{whole}");
    // Counts of other slicings are refused before a row is read.
    let out = wai()
        .args(["pass-at", "--add-counts"])
        .arg(&counts)
        .arg(&b_path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a.json") && err.contains("sliced by"), "{err}");
}
