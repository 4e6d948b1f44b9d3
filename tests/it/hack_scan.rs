//! `wai hack-scan` against the reference's `hack_scan` vectors (regime, top feature, ranking,
//! correlations equal; the floor within permutation error), on `wai gen` rows with a planted
//! shortcut word, and its determinism.

use std::path::Path;

use serde_json::Value;

use crate::support::{refused, vectors, wai, write_rows};

/// Runs `wai --json hack-scan PATH ARGS`: the report and the exit code.
fn scan(path: &Path, args: &[&str], threads: &str) -> (Value, i32) {
    let out = wai()
        .env("RAYON_NUM_THREADS", threads)
        .args(["--json", "hack-scan"])
        .arg(path)
        .args(args)
        .output()
        .unwrap();
    let mut doc: Value = crate::support::envelope(&out.stdout)["report"].clone();
    doc.as_object_mut().unwrap().remove("elapsed_ms");
    (doc, out.status.code().unwrap_or(-1))
}

/// A ranked feature without its floor flag (the floor is a random draw).
fn entry(f: &Value) -> Value {
    let mut f = f.clone();
    f.as_object_mut().unwrap().remove("above_floor");
    f
}

#[test]
fn every_reference_vector_ranks_and_decides_as_the_reference() {
    // The floor's spread over seeds, measured on these rows (30 seeds each): sd 0.014 to 0.034.
    const TAU_TOLERANCE: f64 = 0.1;
    let dir = tempfile::tempdir().unwrap();
    for case in vectors()["hack_scan"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let path = dir.path().join(format!("{name}.jsonl"));
        write_rows(&path, case["rows"].as_array().unwrap());
        let endorsed: Vec<&str> = case["kwargs"]["endorsed"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let joined = endorsed.join(",");
        let mut args = vec![];
        if !endorsed.is_empty() {
            args.extend(["--endorsed", joined.as_str()]);
        }
        let (got, code) = scan(&path, &args, "2");
        let want = &case["out"];
        for key in [
            "regime",
            "n_rows",
            "n_graded",
            "n_groups",
            "n_groups_multi",
            "rollouts_per_group",
            "effective_rollouts",
            "support",
            "n_perm",
            "n_features",
            "top_feature",
            "rho_max",
            "endorsed",
            "endorsed_matched",
            "endorsed_on_top",
            "integrity",
            "inverted",
            "continuous_reward",
            "degenerate",
            "collinear",
            "distinct_per_ask",
        ] {
            assert_eq!(got[key], want[key], "{name}: {key}");
        }
        // The ranking: names, aliases, both correlations, counts and endorsement, in order.
        let ranked = |doc: &Value| -> Vec<Value> {
            doc["features"]
                .as_array()
                .unwrap()
                .iter()
                .map(entry)
                .collect()
        };
        assert_eq!(ranked(&got), ranked(want), "{name}: ranking");
        match (got["tau"].as_f64(), want["tau"].as_f64()) {
            (Some(ours), Some(theirs)) => {
                assert!(
                    (ours - theirs).abs() < TAU_TOLERANCE,
                    "{name}: tau {ours} vs {theirs}"
                );
                // Features far from the floor are on the same side of it.
                for (g, w) in got["features"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .zip(want["features"].as_array().unwrap())
                {
                    if (w["rho"].as_f64().unwrap().abs() - theirs).abs() > TAU_TOLERANCE {
                        assert_eq!(g["above_floor"], w["above_floor"], "{name}: {}", w["name"]);
                    }
                }
            }
            (None, None) => {}
            other => panic!("{name}: tau {other:?}"),
        }
        let warned = got["warnings"].as_array().unwrap();
        assert_eq!(
            warned.is_empty(),
            want["warnings"].as_array().unwrap().is_empty(),
            "{name}: {warned:?}"
        );
        // Only a named reward hack fails the run.
        assert_eq!(code, i32::from(want["regime"] == "reward_hack"), "{name}");
    }
}

/// `wai gen` rows with `absolutely` planted, cut to the tasks with mixed rewards (the RL pool
/// `wai select --mode rl` keeps), in `dir`.
fn planted_pool(dir: &Path) -> std::path::PathBuf {
    let all = dir.join("all.parquet");
    crate::support::gen_rows(&all, 6000, 11);
    let pool = dir.join("pool.parquet");
    wai()
        .args(["sql", "--format", "parquet", "-o"])
        .arg(&pool)
        .arg("-t")
        .arg(&all)
        .arg(
            "SELECT * FROM rows WHERE task_id IN (SELECT task_id FROM rows GROUP BY task_id \
             HAVING min(reward) < max(reward))",
        )
        .assert()
        .success();
    pool
}

#[test]
fn a_planted_shortcut_word_is_named_a_hack_unless_endorsed() {
    let dir = tempfile::tempdir().unwrap();
    let pool = planted_pool(dir.path());
    let (hack, code) = scan(&pool, &["--endorsed", "tool:lookup_order"], "2");
    assert_eq!(hack["regime"], "reward_hack");
    assert_eq!(hack["top_feature"], "contains:absolutely");
    assert_eq!(hack["integrity"], 0.0);
    assert_eq!(code, 1);
    let (endorsed, code) = scan(&pool, &["--endorsed", "absolutely"], "2");
    assert_eq!(endorsed["regime"], "train");
    assert_eq!(endorsed["top_feature"], "contains:absolutely");
    assert_eq!(endorsed["endorsed_on_top"], true);
    assert_eq!(code, 0);
    // Nothing else comes near the planted word (a chance feature may graze the floor: the
    // floor is a 95% quantile).
    assert!(endorsed["integrity"].as_f64().unwrap() > 0.8, "{endorsed}");
    let rhos: Vec<f64> = endorsed["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rho"].as_f64().unwrap().abs())
        .collect();
    assert!(
        rhos[0] > 0.5 && rhos[1..].iter().all(|r| *r < 0.2),
        "{rhos:?}"
    );
}

#[test]
fn same_seed_same_scan_at_any_thread_count_and_input_shape() {
    let dir = tempfile::tempdir().unwrap();
    let pool = planted_pool(dir.path());
    // The same rows as JSONL: another reader, other batches.
    let jsonl = dir.path().join("pool.jsonl");
    wai()
        .args(["convert"])
        .arg(&pool)
        .arg("-o")
        .arg(&jsonl)
        .assert()
        .success();
    let args = ["--seed", "5", "--top", "0"];
    let (base, _) = scan(&pool, &args, "1");
    assert_eq!(base, scan(&pool, &args, "2").0);
    assert_eq!(base, scan(&jsonl, &args, "3").0);
    let (other, _) = scan(&pool, &["--seed", "6", "--top", "0"], "2");
    assert_ne!(base["tau"], other["tau"], "another seed, another floor");
    assert_eq!(
        base["features"].as_array().unwrap().len() as u64,
        base["n_features"].as_u64().unwrap()
    );
}

#[test]
fn a_sql_feature_joins_the_hand_tier_and_wins_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let pool = planted_pool(dir.path());
    let (doc, _) = scan(
        &pool,
        &[
            "--feature",
            "says_absolutely=final_text LIKE '%absolutely%'",
            "--feature",
            "long_reply=length(final_text) > 400",
        ],
        "2",
    );
    let top = &doc["features"][0];
    assert_eq!(top["name"], "says_absolutely");
    assert!(
        top["aliases"]
            .as_array()
            .unwrap()
            .contains(&Value::from("contains:absolutely")),
        "{top}"
    );
    assert!(
        doc["features"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "long_reply"),
        "{doc}"
    );
    // A feature that does not plan names itself; nothing is scanned.
    refused(
        wai()
            .args(["hack-scan", "--feature", "broken=no_such_column + 1"])
            .arg(&pool),
        "--feature broken=no_such_column + 1",
    );
}

#[test]
fn rows_without_rewards_say_to_grade_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.jsonl");
    write_rows(
        &path,
        &vec![serde_json::json!({"prompt": "p", "final_text": "x"}); 3],
    );
    let (doc, code) = scan(&path, &[], "2");
    assert_eq!(doc["regime"], "unknown");
    assert_eq!(doc["n_rows"], 3);
    assert_eq!(doc["n_graded"], 0);
    assert!(doc["warnings"][0].as_str().unwrap().contains("wai grade"));
    assert_eq!(code, 0);
}

#[test]
fn rows_are_read_in_file_order_whatever_the_partitioning() {
    // A small file is one scan partition, which DataFusion would deal out to the cores batch by
    // batch; the same rows as two files are two partitions. Task order, and so the floor's
    // draws, must not change.
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<Value> = (0..20_000)
        .map(|i| {
            serde_json::json!({
                "task_id": format!("t{}", i / 4),
                "prompt": "p",
                "final_text": format!("ok {}", (i * 7) % 11),
                "reward": f64::from(u8::try_from((i * 3 / 2) % 2).unwrap()),
            })
        })
        .collect();
    let one = dir.path().join("one.jsonl");
    write_rows(&one, &rows);
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    write_rows(&a, &rows[..10_000]);
    write_rows(&b, &rows[10_000..]);
    let run = |paths: &[&Path]| {
        let out = wai()
            .args(["--json", "hack-scan", "--seed", "3"])
            .args(paths)
            .output()
            .unwrap();
        let doc: Value = crate::support::envelope(&out.stdout)["report"].clone();
        (doc["tau"].clone(), doc["features"].clone())
    };
    let whole = run(&[&one]);
    assert!(whole.0.as_f64().unwrap() > 0.0);
    assert_eq!(whole, run(&[&a, &b]));
}

#[test]
fn a_feature_named_like_a_built_in_fills_its_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.jsonl");
    // Half the rows carry a logprob; the feature gives the other half one too.
    let rows: Vec<Value> = (0..200)
        .map(|i| {
            let mut r = serde_json::json!({
                "task_id": format!("t{}", i / 4),
                "prompt": "p",
                "final_text": "ok",
                "reward": f64::from(u8::try_from(i % 2).unwrap()),
            });
            if i % 2 == 0 {
                r["logprob"] = Value::from(-2.0);
                r["n_tokens"] = Value::from(4);
            }
            r
        })
        .collect();
    write_rows(&path, &rows);
    let (doc, _) = scan(
        &path,
        &[
            "--feature",
            "logprob_mean=CASE WHEN reward = 1 THEN -0.25 END",
            "--top",
            "0",
        ],
        "2",
    );
    let named: Vec<&Value> = doc["features"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == "logprob_mean")
        .collect();
    assert_eq!(named.len(), 1, "{doc}");
    assert_eq!(named[0]["n_obs"], 200);
    // The same name twice is refused.
    refused(
        wai()
            .args(["hack-scan", "--feature", "x=1", "--feature", "x=2"])
            .arg(&path),
        "given twice",
    );
}

#[test]
fn the_printed_report_marks_the_floor_and_names_aliases() {
    let dir = tempfile::tempdir().unwrap();
    let case = &vectors()["hack_scan"][0];
    let path = dir.path().join("planted.jsonl");
    write_rows(&path, case["rows"].as_array().unwrap());
    let out = wai()
        .args(["hack-scan", "--endorsed", "tool:lookup_order"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "REWARD HACK", "{text}");
    assert!(lines[2].starts_with("noise floor tau "), "{text}");
    assert!(lines[4].starts_with("*  contains:#  "), "{text}");
    assert!(
        text.contains("\"contains:#\" is also \"contains:# #\""),
        "{text}"
    );
    assert!(text.contains("integrity 0.00"), "{text}");
}
