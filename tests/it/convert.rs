//! `wai convert`: lossless round trips, bad input, atomic outputs.

use serde_json::Value;

use crate::support::{fixture, gen_rows, json_eq, read_jsonl, sql_jsonl, wai};

/// Fields `convert` may add to a row: the identity it derives.
const ADDED: [&str; 4] = ["task_id", "rollout_id", "prompt", "tools_used"];

fn round_trip(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let parquet = dir.path().join("rows.parquet");
    let back = dir.path().join("back.jsonl");
    wai()
        .args(["convert"])
        .arg(fixture(name))
        .arg("--out")
        .arg(&parquet)
        .assert()
        .success();
    wai()
        .args(["convert"])
        .arg(&parquet)
        .arg("--out")
        .arg(&back)
        .assert()
        .success();
    let original = read_jsonl(&fixture(name));
    let restored = read_jsonl(&back);
    assert_eq!(original.len(), restored.len(), "{name}: row count");
    for (i, (a, b)) in original.iter().zip(&restored).enumerate() {
        let (Value::Object(a), Value::Object(b)) = (a, b) else {
            panic!("{name}: line {} is not an object", i + 1)
        };
        for (key, value) in a {
            let got = b
                .get(key)
                .unwrap_or_else(|| panic!("{name} line {}: field `{key}` lost", i + 1));
            assert!(
                json_eq(value, got),
                "{name} line {}: field `{key}` changed:\n  in:  {value}\n  out: {got}",
                i + 1
            );
        }
        for key in b.keys() {
            assert!(
                a.contains_key(key) || ADDED.contains(&key.as_str()),
                "{name} line {}: unexpected field `{key}`",
                i + 1
            );
        }
    }
}

#[test]
fn example_rows_round_trip_field_by_field() {
    round_trip("example_rows.jsonl");
}

#[test]
fn example_scored_round_trip_field_by_field() {
    round_trip("example_scored.jsonl");
}

#[test]
fn parquet_round_trip_of_generated_rows_is_identical() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    gen_rows(&a, 3000, 5);
    let p = dir.path().join("a.parquet");
    let b = dir.path().join("b.jsonl");
    wai()
        .arg("convert")
        .arg(&a)
        .arg("-o")
        .arg(&p)
        .assert()
        .success();
    wai()
        .arg("convert")
        .arg(&p)
        .arg("-o")
        .arg(&b)
        .assert()
        .success();
    assert_eq!(
        std::fs::read_to_string(&a).unwrap(),
        std::fs::read_to_string(&b).unwrap()
    );
}

#[test]
fn task_ids_follow_the_reference_key() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        concat!(
            "{\"scenario_id\": \"s1\", \"prompt\": \"p\"}\n",
            "{\"task_id\": \"t9\", \"prompt\": \"p\"}\n",
            "{\"prompt\": \"What is 2 + 3?\", \"messages\": [{\"role\": \"user\", \"content\": \"What is 2 + 3?\"}]}\n",
            "{\"prompt\": \"What is 2 + 3?\", \"rollout_index\": 0}\n",
            "{\"scenario_id\": \"\", \"task_id\": \"\", \"prompt\": \"What is 2 + 3?\"}\n",
            "{\"scenario_id\": null, \"task_id\": 0, \"prompt\": \"What is 2 + 3?\"}\n",
        ),
    )
    .unwrap();
    let out = dir.path().join("out.parquet");
    wai()
        .arg("convert")
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .assert()
        .success();
    let rows = sql_jsonl(&["SELECT task_id, rollout_id FROM rows"], &out);
    let ids: Vec<&str> = rows
        .iter()
        .map(|r| r["task_id"].as_str().unwrap())
        .collect();
    // Empty strings fall through to the prompt; the numeric task id 0 is the task "0".
    assert_eq!(
        ids,
        [
            "s1",
            "t9",
            "task_1ea26256ebae",
            "task_1ea26256ebae",
            "task_1ea26256ebae",
            "0"
        ]
    );
    let rollout_ids: std::collections::HashSet<&str> = rows
        .iter()
        .map(|r| r["rollout_id"].as_str().unwrap())
        .collect();
    assert_eq!(rollout_ids.len(), 6, "rollout ids are unique");
}

#[test]
fn bad_line_stops_with_file_line_field_and_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.jsonl");
    std::fs::write(
        &input,
        "{\"prompt\": \"a\", \"reward\": 1}\n{\"prompt\": \"b\", \"reward\": \"high\"}\n",
    )
    .unwrap();
    let out = dir.path().join("out.parquet");
    let assert = wai()
        .arg("convert")
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(65);
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
    assert!(
        stderr.contains("line 2: field `reward`: expected a number or null, found a string"),
        "{stderr}"
    );
    assert!(!out.exists(), "no half file");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "only the input remains: {leftovers:?}");
}

#[test]
fn rejects_file_sets_bad_lines_aside_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.jsonl");
    std::fs::write(
        &input,
        "{\"prompt\": \"a\", \"reward\": 1}\n{oops\n{\"prompt\": \"b\", \"steps\": [{\"tool\": \"t\", \"n_tokens\": 1.5}]}\n{\"prompt\": \"c\"}\n",
    )
    .unwrap();
    let out = dir.path().join("out.parquet");
    let rejects = dir.path().join("rejects.jsonl");
    let assert = wai()
        .args(["--json", "convert"])
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .arg("--rejects")
        .arg(&rejects)
        .assert()
        .success();
    let report: Value = crate::support::envelope(&assert.get_output().stdout)["report"].clone();
    assert_eq!(
        (report["rows"].as_u64(), report["rejected"].as_u64()),
        (Some(2), Some(2))
    );
    let set_aside = read_jsonl(&rejects);
    assert_eq!(set_aside.len(), 2);
    assert_eq!(set_aside[0]["line"], 2);
    assert_eq!(set_aside[0]["text"], "{oops");
    assert_eq!(set_aside[1]["field"], "steps[0].n_tokens");
    assert!(out.exists());
}

#[test]
fn folders_and_globs_are_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("lake");
    std::fs::create_dir(&sub).unwrap();
    gen_rows(&sub.join("part-0.jsonl"), 50, 1);
    std::fs::copy(fixture("example_rows.jsonl"), sub.join("part-1.jsonl")).unwrap();
    for input in [
        sub.display().to_string(),
        format!("{}/*.jsonl", sub.display()),
    ] {
        let out = dir.path().join("all.parquet");
        let assert = wai()
            .args(["--json", "convert", &input, "-o"])
            .arg(&out)
            .assert()
            .success();
        let report: Value = crate::support::envelope(&assert.get_output().stdout)["report"].clone();
        assert_eq!(report["rows"], 250, "{input}");
    }
}

#[test]
fn odd_shapes_round_trip_through_extra() {
    // Content parts, OpenAI-nested tool calls, string arguments, unknown keys in messages and
    // steps, boolean and string markers, explicit nulls, numeric ids, non-ASCII text, a field
    // named `extra`.
    round_trip("odd_rows.jsonl");
}

#[test]
fn odd_shapes_fill_the_columns() {
    let dir = tempfile::tempdir().unwrap();
    let parquet = dir.path().join("odd.parquet");
    wai()
        .arg("convert")
        .arg(fixture("odd_rows.jsonl"))
        .arg("-o")
        .arg(&parquet)
        .assert()
        .success();
    let rows = sql_jsonl(
        &[
            "SELECT task_id, rollout_id, eval_run, prompt, messages[3]['tool_calls'][1]['arguments'] AS call_args, \
             steps[1]['arguments'] AS step_args, markers['polite'] AS polite, markers['fast'] AS fast, \
             element_at(dims, 'turns')[1] AS turns, dims['tier'] AS tier FROM rows ORDER BY prompt",
        ],
        &parquet,
    );
    assert_eq!(
        rows[0]["prompt"], "Refund A1?",
        "the prompt comes from the first user message's text parts"
    );
    assert_eq!(rows[0]["call_args"], r#"{"order_id":"A1"}"#);
    assert_eq!(rows[0]["rollout_id"], "12345");
    assert_eq!(rows[1]["step_args"], r#"{"order_id":"A2"}"#);
    assert_eq!(
        (rows[1]["polite"].as_f64(), rows[1]["fast"].as_f64()),
        (Some(1.0), Some(1.0))
    );
    assert_eq!(
        (
            rows[1]["eval_run"].as_i64(),
            rows[1]["turns"].as_str(),
            rows[1]["tier"].as_str()
        ),
        (Some(2), Some("3"), Some("hard"))
    );
    assert_eq!(
        rows[2]["eval_run"], 1,
        "eval_run falls back to lineage.eval_run"
    );
    // An empty scenario_id falls through; a task_id of 0 is the task "0".
    assert_eq!(rows[2]["task_id"], "0");

    // A call in the OpenAI wire shape fills the columns (canonical arguments beside the
    // string as written) and needs no copy of its messages in `extra`.
    let wire = sql_jsonl(
        &["SELECT messages[2]['tool_calls'][1]['arguments'] AS args, \
             messages[2]['tool_calls'][1]['arguments_text'] AS text, extra \
             FROM rows WHERE task_id = 'wire'"],
        &parquet,
    );
    assert_eq!(wire[0]["args"], r#"{"order_id":"A9","verbose":true}"#);
    assert_eq!(wire[0]["text"], r#"{"order_id": "A9",  "verbose": true}"#);
    assert!(wire[0]["extra"].is_null(), "{}", wire[0]["extra"]);
}

#[test]
fn output_does_not_depend_on_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    gen_rows(&input, 20_000, 11);
    let mut outputs = Vec::new();
    for threads in ["1", "2", "3"] {
        let parquet = dir.path().join(format!("t{threads}.parquet"));
        let back = dir.path().join(format!("t{threads}.jsonl"));
        wai()
            .env("RAYON_NUM_THREADS", threads)
            .arg("convert")
            .arg(&input)
            .arg("-o")
            .arg(&parquet)
            .assert()
            .success();
        wai()
            .env("RAYON_NUM_THREADS", threads)
            .arg("convert")
            .arg(&parquet)
            .arg("-o")
            .arg(&back)
            .assert()
            .success();
        outputs.push(std::fs::read(&back).unwrap());
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(outputs[0], std::fs::read(&input).unwrap());
}

/// Corrupt Parquet never crashes wai: footers that point past the file, bytes flipped in pages
/// and footers, truncated files. Each command ends with success (a flip that touched nothing
/// read) or exit 65 naming the file, never a panic (101), an abort (134) or "a bug" (70).
#[test]
fn corrupt_parquet_is_bad_input_never_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.parquet");
    crate::support::succeeded(
        crate::support::wai()
            .arg("convert")
            .arg(crate::support::fixture("example_scored.jsonl"))
            .arg("--out")
            .arg(&good),
    );
    let bytes = std::fs::read(&good).unwrap();
    let n = bytes.len();
    let mut mutants: Vec<Vec<u8>> = Vec::new();
    // The footer length past the start, zero, and just too long.
    let small = |x: usize| u32::try_from(x).expect("a small file");
    for len in [u32::MAX, small(n * 10), 0, small(n - 7)] {
        let mut b = bytes.clone();
        b[n - 8..n - 4].copy_from_slice(&len.to_le_bytes());
        mutants.push(b);
    }
    // Truncated.
    for cut in [4, n / 2, n - 9] {
        mutants.push(bytes[..cut].to_vec());
    }
    // Bytes flipped, seeded: runs in the pages and in the footer.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..14 {
        let mut b = bytes.clone();
        let at = 4 + usize::try_from(next() % (n as u64 - 12)).expect("in the file");
        for k in 0..=usize::try_from(next() % 24).expect("small") {
            if at + k < n - 8 {
                b[at + k] ^= (next() & 0xff) as u8 | 1;
            }
        }
        mutants.push(b);
    }
    for (m, b) in mutants.iter().enumerate() {
        let path = dir.path().join(format!("m{m}.parquet"));
        std::fs::write(&path, b).unwrap();
        for args in [
            vec!["pass-at"],
            vec!["hack-scan"],
            vec!["convert", "--out", "OUT.jsonl"],
            vec!["select", "--out", "OUT.parquet"],
            vec!["export", "--no-validate", "--out", "OUT.jsonl"],
            // Reads a few columns and copies the chunks of the others.
            vec![
                "grade",
                "--judge",
                "sql:reward > 0.5",
                "--out",
                "OUT.parquet",
            ],
        ] {
            let out = crate::support::wai()
                .current_dir(dir.path())
                .arg(args[0])
                .arg(&path)
                .args(&args[1..])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let code = out.status.code();
            assert!(
                matches!(code, Some(0 | 1 | 2 | 65)),
                "mutant {m}, {args:?}: exit {code:?}\n{err}"
            );
            if code == Some(65) {
                assert!(
                    err.contains(&format!("m{m}.parquet")),
                    "mutant {m}, {args:?}: names the file\n{err}"
                );
            }
            assert!(!err.contains("panicked"), "mutant {m}, {args:?}: {err}");
        }
    }
}

/// Wrong-typed fields are bad rows naming the field, in JSONL and Parquet alike (#30 item 7):
/// a number where a tool name, a role or a call name goes, arguments that are a number, dims
/// that are not an object, a reward outside [0, 1]; a Parquet `reward` column of text or
/// booleans (it was silently null, or read as 1/0) in every reader.
#[test]
fn wrong_types_are_bad_rows_in_both_formats() {
    use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    for (row, field) in [
        (
            r#"{"task_id":"a","reward":1,"steps":[{"tool":7}]}"#,
            "steps[0].tool",
        ),
        (
            r#"{"task_id":"a","reward":1,"messages":[{"role":5,"content":"x"}]}"#,
            "messages[0].role",
        ),
        (r#"{"task_id":"a","reward":1,"dims":[1]}"#, "dims"),
        (
            r#"{"task_id":"a","reward":1,"steps":[{"tool":"t","arguments":5}]}"#,
            "steps[0].arguments",
        ),
        (
            r#"{"task_id":"a","reward":1,"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":3,"arguments":"{}"}}]}]}"#,
            "messages[0].tool_calls[0].function.name",
        ),
        (r#"{"task_id":"a","reward":-1}"#, "reward"),
        (r#"{"task_id":"a","gold_reward":1.5}"#, "gold_reward"),
    ] {
        let path = dir.path().join("row.jsonl");
        std::fs::write(&path, format!("{row}\n")).unwrap();
        let out = crate::support::wai()
            .arg("convert")
            .arg(&path)
            .arg("--out")
            .arg(dir.path().join("out.parquet"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{row}: {err}");
        assert!(
            err.contains(&format!("line 1: field `{field}`")),
            "{row}: {err}"
        );
    }
    // A null tool name is no wrong type: kept, as before.
    let fine = dir.path().join("fine.jsonl");
    std::fs::write(
        &fine,
        "{\"task_id\":\"a\",\"reward\":0.5,\"steps\":[{\"tool\":null}]}\n",
    )
    .unwrap();
    crate::support::succeeded(
        crate::support::wai()
            .arg("convert")
            .arg(&fine)
            .arg("--out")
            .arg(dir.path().join("fine.parquet")),
    );
    // Parquet columns of the wrong kind, made by hand with arrow-rs.
    for (name, reward) in [
        (
            "text",
            Arc::new(StringArray::from(vec!["1", "x"])) as ArrayRef,
        ),
        (
            "bool",
            Arc::new(BooleanArray::from(vec![true, false])) as ArrayRef,
        ),
        (
            "range",
            Arc::new(Float64Array::from(vec![2.0, 0.0])) as ArrayRef,
        ),
    ] {
        let batch = RecordBatch::try_from_iter([
            (
                "task_id",
                Arc::new(StringArray::from(vec!["a", "a"])) as ArrayRef,
            ),
            (
                "rollout_id",
                Arc::new(StringArray::from(vec!["1", "2"])) as ArrayRef,
            ),
            ("reward", reward),
        ])
        .unwrap();
        let path = dir.path().join(format!("{name}.parquet"));
        let out = std::fs::File::create(&path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(out, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let commands: &[&[&str]] = if name == "range" {
            // Statistics of a query's table are not read value by value; readers of rows are.
            &[
                &["convert", "--out", "x.jsonl"],
                &["select", "--out", "x.parquet"],
            ]
        } else {
            &[
                &["pass-at"],
                &["convert", "--out", "x.jsonl"],
                &["select", "--out", "x.parquet"],
                &["hack-scan"],
            ]
        };
        for args in commands {
            let out = crate::support::wai()
                .current_dir(dir.path())
                .arg(args[0])
                .arg(&path)
                .args(&args[1..])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(65), "{name} {args:?}: {err}");
            assert!(err.contains("column `reward`"), "{name} {args:?}: {err}");
        }
    }
}

/// Numbers no 64-bit type holds (#30 item 8): verbatim in `extra` through Parquet and back, and
/// refused with the line and the field where a column would round them.
#[test]
fn wide_numbers_are_kept_verbatim_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("wide.jsonl");
    std::fs::write(
        &input,
        concat!(
            r#"{"prompt": "a", "size": 18446744073709551616, "tiny": 1e-400, "huge": -1e400, "#,
            r#""zero": -0.0, "nested": {"n": [1, 18446744073709551616]}, "fine": 0.0}"#,
            "\n",
            r#"{"prompt": "b", "reward": 1}"#,
            "\n"
        ),
    )
    .unwrap();
    let parquet = dir.path().join("rows.parquet");
    let back = dir.path().join("back.jsonl");
    wai()
        .arg("convert")
        .arg(&input)
        .arg("-o")
        .arg(&parquet)
        .assert()
        .success();
    wai()
        .arg("convert")
        .arg(&parquet)
        .arg("-o")
        .arg(&back)
        .assert()
        .success();
    let text = std::fs::read_to_string(&back).unwrap();
    let first = text.lines().next().unwrap();
    for kept in [
        r#""size":18446744073709551616"#,
        r#""tiny":1e-400"#,
        r#""huge":-1e400"#,
        r#""zero":-0.0"#,
        r#""nested":{"n":[1,18446744073709551616]}"#,
        r#""fine":0.0"#,
    ] {
        assert!(first.contains(kept), "{kept} in {first}");
    }
    // The stored text holds them too (what `wai sql` reads).
    let rows = sql_jsonl(&["SELECT extra FROM rows ORDER BY prompt"], &parquet);
    let extra = rows[0]["extra"].as_str().unwrap();
    assert!(
        extra.contains(r#""size":18446744073709551616"#) && extra.contains(r#""huge":-1e400"#),
        "{extra}"
    );
    // A field with a column refuses them, naming the line and the field.
    for (row, field, literal) in [
        (r#"{"prompt": "c", "reward": 1e400}"#, "reward", "1e400"),
        (
            r#"{"prompt": "c", "steps": [{"tool": "t", "logprob": -1e-400}]}"#,
            "steps[0].logprob",
            "-1e-400",
        ),
        (
            r#"{"prompt": "c", "rollout_index": 18446744073709551616}"#,
            "rollout_index",
            "18446744073709551616",
        ),
    ] {
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, format!("{{\"prompt\": \"ok\"}}\n{row}\n")).unwrap();
        let out = dir.path().join("bad.parquet");
        let assert = wai()
            .arg("convert")
            .arg(&bad)
            .arg("-o")
            .arg(&out)
            .assert()
            .code(65);
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert!(
            stderr.contains(&format!(
                "line 2: field `{field}`: `{literal}` is beyond a 64-bit number"
            )),
            "{stderr}"
        );
        assert!(!out.exists(), "no half file");
    }
}
