//! `wai grade` and `wai gate`: verifiers on hand-labelled transcripts, SQL judges, command judges
//! that crash, hang or print garbage, hollow-run warnings, the gate's exit codes.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::cli::outcome;
use crate::support::{fixture, sql_jsonl, wai};

/// Grades `input` with `judges` into `dir/out.parquet`; returns the scored rows (in input order)
/// and the run's JSON report.
fn grade(dir: &Path, input: &Path, judges: &[&str], extra: &[&str]) -> (Vec<Value>, Value) {
    let out = dir.join("out.parquet");
    let mut cmd = wai();
    cmd.arg("--json").arg("grade").arg(input);
    for j in judges {
        cmd.arg("--judge").arg(j);
    }
    let result = cmd.args(extra).arg("-o").arg(&out).output().unwrap();
    assert!(
        result.status.code() == Some(0) || result.status.code() == Some(2),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let report: Value = crate::support::envelope(&result.stdout)["report"].clone();
    let rows = sql_jsonl(
        &[
            "SELECT task_id, rollout_index, reward, reason, judge_status, judge_name, judge_meta, lineage, markers FROM rows",
        ],
        &out,
    );
    (rows, report)
}

/// Grades the transcripts with `judge` into `dir/x.parquet`: exit code, stdout and stderr.
fn grade_outcome(dir: &Path, judge: &str) -> String {
    outcome(
        wai()
            .arg("grade")
            .arg(fixture("grade_transcripts.jsonl"))
            .args(["--judge", judge, "-o"])
            .arg(dir.join("x.parquet")),
        dir,
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn rewards(rows: &[Value]) -> Vec<Option<f64>> {
    rows.iter().map(|r| r["reward"].as_f64()).collect()
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one fixture, every verifier kind asserted in turn"
)]
fn verifiers_score_hand_labelled_transcripts() {
    // Rows (tests/fixtures/grade_transcripts.jsonl): 1 refund allowed and done; 2 refund not
    // allowed, denied; 3 not allowed, refunded anyway, politely; 4 lookup tool faulted, agent
    // says so; 5 polite reply, wrong action (cancel, no lookup); 6 "the answer is 3.14";
    // 7 \boxed{\dfrac{1}{2}}; 8 a JSON reply in a fence.
    let dir = tempfile::tempdir().unwrap();
    let n = None;
    let cases: [(&str, [Option<f64>; 8]); 15] = [
        (
            r#"{ tool_called = "lookup_order" }"#,
            [
                Some(1.0),
                Some(1.0),
                Some(1.0),
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
            ],
        ),
        (
            r#"{ tool_called = { tool = "issue_refund", args = { order_id = "A1", amount = 40.0 } } }"#,
            [
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
            ],
        ),
        (
            r#"{ tool_not_called = "issue_refund" }"#,
            [
                Some(0.0),
                Some(1.0),
                Some(0.0),
                Some(1.0),
                Some(1.0),
                Some(1.0),
                Some(1.0),
                Some(1.0),
            ],
        ),
        (
            r#"{ sequence = { tools = ["lookup_order", "issue_refund"] } }"#,
            [
                Some(1.0),
                Some(0.0),
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
            ],
        ),
        (
            r#"{ sequence = { tools = ["lookup_order"], exact = true } }"#,
            [
                Some(0.0),
                Some(1.0),
                Some(0.0),
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
            ],
        ),
        (
            r#"{ regex = "refund(ed)?" }"#,
            [
                Some(1.0),
                Some(1.0),
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
            ],
        ),
        (
            r#"{ regex = { pattern = "Sorry", case_sensitive = true } }"#,
            [
                Some(0.0),
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
            ],
        ),
        (
            r"{ length = { max = 60 } }",
            [
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(1.0),
                Some(1.0),
                Some(1.0),
                Some(1.0),
            ],
        ),
        // The last line, punctuation and case aside, against privileged.reference.
        (
            r"{ exact = {} }",
            [
                Some(0.0),
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                n,
            ],
        ),
        (
            r"{ math = {} }",
            // The other references are words, not numbers: the check cannot run there.
            [n, n, n, n, n, Some(1.0), Some(1.0), n],
        ),
        (
            r#"{ json_schema = { type = "object", required = ["order_id", "amount"], properties = { amount = { type = "number" } } } }"#,
            [
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(1.0),
            ],
        ),
        // The policy: look the order up, and refund only what the reference says to refund.
        (
            r#"{ all = [ { tool_called = "lookup_order" }, { not = { tool_called = "cancel_order" } }, { regex = "sorry|refunded|try again" } ] }"#,
            [
                Some(1.0),
                Some(1.0),
                Some(1.0),
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
            ],
        ),
        (
            r#"{ any = [ { tool_called = "issue_refund" }, { regex = "try again" } ] }"#,
            [
                Some(1.0),
                Some(0.0),
                Some(1.0),
                Some(1.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
            ],
        ),
        (
            r#"{ not = { regex = "happy to help|lovely day" } }"#,
            [
                Some(1.0),
                Some(1.0),
                Some(0.0),
                Some(1.0),
                Some(0.0),
                Some(1.0),
                Some(1.0),
                Some(1.0),
            ],
        ),
        (
            r#"{ weighted = [ { weight = 1, check = { tool_called = "lookup_order" } }, { weight = 3, check = { tool_not_called = "issue_refund" } } ] }"#,
            [
                Some(0.25),
                Some(1.0),
                Some(0.25),
                Some(1.0),
                Some(0.75),
                Some(0.75),
                Some(0.75),
                Some(0.75),
            ],
        ),
    ];
    for (check, want) in cases {
        let file = write(dir.path(), "judge.toml", &format!("check = {check}\n"));
        let (rows, _) = grade(
            dir.path(),
            &fixture("grade_transcripts.jsonl"),
            &[&format!("verify:{}", file.display())],
            &[],
        );
        assert_eq!(rewards(&rows), want.to_vec(), "{check}");
        for r in &rows {
            let status = r["judge_status"].as_str().unwrap();
            let expected = if r["reward"].is_null() {
                "missing_reward"
            } else {
                "ok"
            };
            assert_eq!(status, expected, "{check}: {r}");
            assert!(
                r["reason"].as_str().is_some_and(|s| !s.is_empty()),
                "{check}: {r}"
            );
        }
    }
}

#[test]
fn a_verifier_file_names_its_judge_and_stamps_lineage() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "policy.toml",
        "name = \"refund-policy\"\nversion = \"3\"\n[check]\ntool_called = \"lookup_order\"\n",
    );
    let (rows, report) = grade(
        dir.path(),
        &fixture("grade_transcripts.jsonl"),
        &[&format!("verify:{}", file.display())],
        &["--run-id", "run-7"],
    );
    assert_eq!(rows[0]["judge_name"], "refund-policy");
    let lineage: Value = serde_json::from_str(rows[0]["lineage"].as_str().unwrap()).unwrap();
    assert_eq!(lineage["scoring_run_id"], "run-7");
    assert_eq!(lineage["source"], "grade");
    assert_eq!(lineage["judge"], "refund-policy");
    assert_eq!(lineage["judge_version"], "3");
    assert!(lineage["parent"].as_str().is_some_and(|p| !p.is_empty()));
    assert_eq!(report["tally"]["passed"], 4);
    assert_eq!(report["tally"]["failed"], 4);

    // Grading again keeps the earlier run's id.
    let again = dir.path().join("again.parquet");
    wai()
        .arg("grade")
        .arg(dir.path().join("out.parquet"))
        .args([
            "--judge",
            &format!("verify:{}", file.display()),
            "--run-id",
            "run-8",
            "-o",
        ])
        .arg(&again)
        .assert()
        .success();
    let rows = sql_jsonl(&["SELECT lineage FROM rows"], &again);
    let lineage: Value = serde_json::from_str(rows[0]["lineage"].as_str().unwrap()).unwrap();
    assert_eq!(lineage["prior_scoring_run_id"], "run-7");
}

#[test]
fn sql_judges_expression_and_query() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("grade_transcripts.jsonl");
    let (rows, _) = grade(
        dir.path(),
        &input,
        &[
            "sql:array_has(tools_used, 'lookup_order') AND NOT array_has(tools_used, 'issue_refund')",
        ],
        &["--no-tools"],
    );
    assert_eq!(
        rewards(&rows),
        [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0].map(Some).to_vec()
    );
    // A query sees every row: here, a rollout passes when it used fewer tools than its task's
    // busiest rollout. Rows it leaves out are missing_reward; a numeric column is a marker.
    let query = write(
        dir.path(),
        "fewer.sql",
        "SELECT rollout_id, \
           CASE WHEN cardinality(tools_used) < max(cardinality(tools_used)) OVER (PARTITION BY task_id) THEN 1 ELSE 0 END AS reward, \
           'fewer calls than the busiest' AS reason, \
           CASE WHEN final_text ILIKE '%sorry%' THEN 1.0 ELSE 0.0 END AS apologised \
         FROM rows WHERE task_id LIKE 'refund-%'",
    );
    let (rows, _) = grade(
        dir.path(),
        &input,
        &[&format!("sql:{}", query.display())],
        &["--no-tools"],
    );
    assert_eq!(
        rewards(&rows),
        vec![
            Some(0.0),
            Some(1.0),
            Some(0.0),
            Some(0.0),
            Some(1.0),
            None,
            None,
            None
        ]
    );
    assert_eq!(rows[1]["markers"]["apologised"], 1.0);
    assert_eq!(rows[5]["judge_status"], "missing_reward");
    assert_eq!(rows[1]["judge_name"], "sql:fewer");
}

#[test]
fn a_bad_sql_judge_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = grade_outcome(dir.path(), "sql:no_such_column = 1");
    assert!(out.starts_with("exit_code: 64\n"), "{out}");
    assert!(out.contains("no_such_column"), "{out}");
    assert!(
        !dir.path().join("x.parquet").exists(),
        "nothing half-written"
    );
    // A text column is not a marker: an error, not a marker that is null everywhere.
    let out = grade_outcome(
        dir.path(),
        "sql:SELECT rollout_id, 1 AS reward, task_id AS task FROM rows",
    );
    assert!(out.starts_with("exit_code: 64\n"), "{out}");
    assert!(out.contains("column `task` is not a number"), "{out}");
    // A stack that checks nothing is refused.
    let empty = write(dir.path(), "empty.toml", "check = { weighted = [] }\n");
    let out = grade_outcome(dir.path(), &format!("verify:{}", empty.display()));
    assert!(out.starts_with("exit_code: 64\n"), "{out}");
    assert!(out.contains("check nothing"), "{out}");
}

/// A Python command judge: passes rows that mention a refund, and misbehaves on the row whose
/// reply contains `trigger`.
fn python_judge(dir: &Path, misbehave: &str) -> String {
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let script = format!(
        r#"import os, sys, time
sys.path.insert(0, {helper:?})
from wai_judge import serve

def judge(row):
    text = row.get("final_text") or ""
    if "lovely day" in text:
        {misbehave}
    return {{"reward": float("refund" in text.lower()), "reason": "looked for a refund",
            "markers": {{"polite": 1.0 if "please" in text.lower() else 0.0}}}}

serve(judge)
"#,
        helper = helper.display().to_string()
    );
    let path = write(dir, "judge.py", &script);
    format!("cmd:python3 {}", path.display())
}

/// Rows 1 to 8 of the transcripts, as the well-behaved judge grades them.
const REFUND_MENTIONED: [f64; 8] = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0];

fn check_others(rows: &[Value]) {
    for (i, r) in rows.iter().enumerate() {
        if i == 2 {
            continue;
        }
        assert_eq!(r["judge_status"], "ok", "row {i}: {r}");
        assert_eq!(r["reward"].as_f64(), Some(REFUND_MENTIONED[i]), "row {i}");
    }
}

/// Grades the transcripts with a Python judge that does `misbehave` on row 3 (index 2), and
/// checks that only that row is marked `status`, with no reward, and every other row is graded
/// as if nothing happened. Returns the rows and the report.
fn misbehaving(misbehave: &str, extra: &[&str], status: &str) -> (Vec<Value>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let judge = python_judge(dir.path(), misbehave);
    let (rows, report) = grade(
        dir.path(),
        &fixture("grade_transcripts.jsonl"),
        &[&judge],
        extra,
    );
    assert_eq!(rows[2]["judge_status"], status, "{}", rows[2]);
    assert!(
        rows[2]["reward"].is_null(),
        "never coerced to 0: {}",
        rows[2]
    );
    check_others(&rows);
    (rows, report)
}

fn reason(row: &Value) -> &str {
    row["reason"].as_str().unwrap()
}

#[test]
fn a_command_judge_that_raises_marks_only_that_row() {
    let (rows, report) = misbehaving(
        "raise ValueError('no policy for this')",
        &["--workers", "2"],
        "error",
    );
    assert!(
        reason(&rows[2]).contains("ValueError: no policy for this"),
        "{}",
        rows[2]
    );
    assert_eq!(rows[0]["markers"]["polite"], 0.0);
    assert_eq!(report["tally"]["by_status"]["error"], 1);
}

#[test]
fn a_command_judge_that_crashes_is_restarted_and_the_row_marked() {
    let (rows, _) = misbehaving(
        "sys.stderr.write('segfault-ish: out of cheese\\n'); sys.stderr.flush(); os._exit(3)",
        &["--workers", "2"],
        "error",
    );
    assert!(
        reason(&rows[2]).contains("out of cheese"),
        "the stderr tail: {}",
        rows[2]
    );
}

#[test]
fn a_command_judge_that_hangs_times_out_on_that_row() {
    misbehaving(
        "time.sleep(60)",
        &["--workers", "2", "--timeout", "1"],
        "timeout",
    );
}

#[test]
fn a_command_judge_that_prints_garbage_marks_that_row_invalid() {
    // A log line on stdout is ignored (and counted); a verdict that is not one is invalid.
    let (_, report) = misbehaving(
        "os.write(1, b'I think this one is fine!\\n'); return 'pass'",
        &["--workers", "1"],
        "invalid_result",
    );
    assert!(
        report["notes"][0]
            .as_str()
            .unwrap()
            .contains("I think this one is fine!"),
        "{report}"
    );
    // An object that answers no request breaks the protocol: the row that caused it is invalid.
    misbehaving(
        "os.write(1, b'{\"verdict\": \"fine\"}\\n'); return 1",
        &["--workers", "2"],
        "invalid_result",
    );
}

#[test]
fn a_judge_command_that_never_starts_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = grade_outcome(dir.path(), "cmd:echo 'no such interpreter' >&2; exit 127");
    assert!(out.starts_with("exit_code: 65\n"), "{out}");
    assert!(out.contains("stops before answering any row"), "{out}");
    assert!(out.contains("no such interpreter"), "{out}");
}

#[test]
fn warnings_say_what_makes_a_run_hollow() {
    let dir = tempfile::tempdir().unwrap();
    let tools = write(
        dir.path(),
        "tools.json",
        r#"[{"type": "function", "function": {"name": "lookup_order"}},
            {"type": "function", "function": {"name": "issue_refund"}},
            {"type": "function", "function": {"name": "escalate"}}]"#,
    );
    let judge = python_judge(dir.path(), "pass");
    let (_, report) = grade(
        dir.path(),
        &fixture("grade_transcripts.jsonl"),
        &[&judge],
        &["--tools", tools.to_str().unwrap()],
    );
    let kinds: Vec<&str> = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["silent_rows", "tool_never_called"], "{report}");
    let never = &report["warnings"][1]["text"];
    assert!(
        never
            .as_str()
            .unwrap()
            .starts_with("1 of 3 declared tools were never called (escalate)")
    );
    assert_eq!(report["hollow"], false);

    // No row calls a tool: hollow. Every row fails the same way: a note, not hollow.
    let (_, report) = grade(
        dir.path(),
        &fixture("grade_transcripts.jsonl"),
        &["sql:CASE WHEN task_id = 'x' THEN 1 ELSE 0 END", "sql:1"],
        &[],
    );
    let found: Vec<(&str, bool)> = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["kind"].as_str().unwrap(), w["hollow"].as_bool().unwrap()))
        .collect();
    assert!(found.contains(&("unanimous", false)), "{found:?}");
    assert_eq!(report["hollow"], false);
}

#[test]
fn gate_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let scored = fixture("example_scored.jsonl");
    let run = |floor: &str| {
        outcome(
            wai().arg("gate").arg(&scored).args(["--floor", floor]),
            dir.path(),
        )
    };
    insta::assert_snapshot!(run("0.7"), @r"
    exit_code: 0
    ----- stdout -----
    pass@1 0.78 [0.70..0.84] | pass^4 (pass_pow_k) 0.40 [0.27..0.54] | pass@4 0.96 [0.86..1.00] | headroom 0.18 (50 groups, k=4; interval approximate near an end: pass@4 (2 of 50 tasks failed))
    == warnings (fix these before you report the number)
      ! marker 'looked_up_before_refund' was 0 on all 8 rows it applied to; a rate that never moves says nothing about the agent. Add a seed ask that goes the other way, or drop it from the report.
    GATE: pass pass@1 0.78 >= 0.70
    ----- stderr -----
    ");
    insta::assert_snapshot!(run("0.9"), @r"
    exit_code: 1
    ----- stdout -----
    pass@1 0.78 [0.70..0.84] | pass^4 (pass_pow_k) 0.40 [0.27..0.54] | pass@4 0.96 [0.86..1.00] | headroom 0.18 (50 groups, k=4; interval approximate near an end: pass@4 (2 of 50 tasks failed))
    == warnings (fix these before you report the number)
      ! marker 'looked_up_before_refund' was 0 on all 8 rows it applied to; a rate that never moves says nothing about the agent. Add a seed ask that goes the other way, or drop it from the report.
    GATE: FAIL pass@1 0.78 < 0.90
    ----- stderr -----
    ");
    // Graded rows where no rollout called a tool: hollow, whatever the floor.
    let hollow = write(
        dir.path(),
        "hollow.jsonl",
        &crate::support::jsonl((0..8).map(|i| {
            format!(
                "{{\"task_id\": \"t{}\", \"prompt\": \"q\", \"steps\": [], \"final_text\": \"a\", \"reward\": {}, \"judge_status\": \"ok\"}}",
                i % 2,
                i % 2
            )
        })),
    );
    insta::assert_snapshot!(outcome(wai().arg("gate").arg(&hollow).args(["--floor", "0.1"]), dir.path()), @r"
    exit_code: 2
    ----- stdout -----
    pass@1 0.50 | pass^4 (pass_pow_k) 0.50 | pass@4 0.50 | headroom 0.00 (2 groups, k=4; no interval on pass@1: 2 tasks, and a bootstrap needs 3; it resamples tasks, so run more tasks, or give each row its own task_id when the rows are separate items)
    == warnings (fix these before you report the number)
      !! 0 of 8 rows called a tool, so this score says nothing about tool use. Put the ids your world has (order numbers, account names) in the tool descriptions or in the seeds, and check the agent wrapper records its steps (or pass --no-tools for an agent without tools).
    GATE: not evaluated; the run is hollow (see the warnings marked !!)
    ----- stderr -----
    ");
    // Without tools by design, the same rows are gated on their pass rate.
    let out = outcome(
        wai()
            .arg("gate")
            .arg(&hollow)
            .args(["--floor", "0.1", "--no-tools"]),
        dir.path(),
    );
    assert!(out.starts_with("exit_code: 0\n"), "{out}");
}

#[test]
fn a_batch_spreads_over_every_worker() {
    // Few rows and a slow judge (an LLM) must not queue behind one worker: each worker reports
    // its process id, and both appear.
    let dir = tempfile::tempdir().unwrap();
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let script = write(
        dir.path(),
        "pid.py",
        &format!(
            "import os, sys\nsys.path.insert(0, {:?})\nfrom wai_judge import serve\nserve(lambda row: {{'reward': 1, 'pid': os.getpid()}})\n",
            helper.display().to_string()
        ),
    );
    let (rows, _) = grade(
        dir.path(),
        &fixture("grade_transcripts.jsonl"),
        &[&format!("cmd:python3 {}", script.display())],
        &["--workers", "2", "--no-tools"],
    );
    let pids: std::collections::BTreeSet<i64> = rows
        .iter()
        .map(|r| {
            let meta: Value = serde_json::from_str(r["judge_meta"].as_str().unwrap()).unwrap();
            meta["pid"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
}

/// `n` rows of one task each, each calling a tool; `reward(i)` gives row i's reward and status.
fn scored_rows(
    dir: &Path,
    name: &str,
    n: usize,
    verdict: impl Fn(usize) -> (Value, &'static str),
) -> PathBuf {
    let text = crate::support::jsonl((0..n).map(|i| {
        let (reward, status) = verdict(i);
        serde_json::json!({
            "task_id": format!("t{i}"), "prompt": "q", "final_text": "a",
            "steps": [{"tool": "lookup_order", "arguments": {}, "result": {}}],
            "reward": reward, "judge_status": status,
        })
    }));
    write(dir, name, &text)
}

// Issue #29, item 15: 3,999 of 4,000 rows unjudged passed the gate at pass@1 1.00.
#[test]
fn the_gate_counts_every_row_without_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let gate = |path: &Path, extra: &[&str]| {
        outcome(
            wai()
                .arg("gate")
                .arg(path)
                .args(["--floor", "0.5"])
                .args(extra),
            dir.path(),
        )
    };
    // One row judged, 39 never judged (no status, no reward).
    let few = scored_rows(dir.path(), "few.jsonl", 40, |i| {
        if i == 0 {
            (1.0.into(), "ok")
        } else {
            (Value::Null, "")
        }
    });
    let text = std::fs::read_to_string(&few)
        .unwrap()
        .replace(r#","judge_status":"""#, "");
    std::fs::write(&few, text).unwrap();
    let out = gate(&few, &[]);
    assert!(out.starts_with("exit_code: 2\n"), "{out}");
    assert!(out.contains("no verdict on 39 of 40 rows"), "{out}");
    assert!(out.contains("39 missing_reward"), "{out}");
    // A judge that declines 58% of rows is hollow too, though nothing `failed`.
    let declined = scored_rows(dir.path(), "declined.jsonl", 100, |i| {
        if i < 58 {
            (Value::Null, "missing_reward")
        } else {
            (1.0.into(), "ok")
        }
    });
    let out = gate(&declined, &[]);
    assert!(out.starts_with("exit_code: 2\n"), "{out}");
    assert!(out.contains("no verdict on 58 of 100 rows"), "{out}");
    // With the failure share raised, the graded floor still holds: 42% graded is under 90%.
    let out = gate(&declined, &["--max-judge-failures", "0.6"]);
    assert!(out.starts_with("exit_code: 2\n"), "{out}");
    assert!(
        out.contains("only 42 of 100 rows have an ok verdict"),
        "{out}"
    );
    // Both lowered: the 42 judged rows are gated on their pass rate.
    let out = gate(
        &declined,
        &["--max-judge-failures", "0.6", "--min-graded", "0.4"],
    );
    assert!(out.starts_with("exit_code: 0\n"), "{out}");
    // 5% unjudged is within both defaults.
    let most = scored_rows(dir.path(), "most.jsonl", 100, |i| {
        if i < 5 {
            (Value::Null, "missing_reward")
        } else {
            (1.0.into(), "ok")
        }
    });
    let out = gate(&most, &[]);
    assert!(out.starts_with("exit_code: 0\n"), "{out}");
}

// Issue #29, item 16: `grade` exits 2 on a hollow run, with or without `--gate`.
#[test]
fn grade_exits_2_on_a_hollow_run_without_gate() {
    let dir = tempfile::tempdir().unwrap();
    let judge = python_judge(dir.path(), "pass");
    let script = std::fs::read_to_string(judge.trim_start_matches("cmd:python3 ")).unwrap();
    // Declines every row that does not mention a refund (5 of 8).
    let declining = write(
        dir.path(),
        "declining.py",
        &script.replace(
            "    return {\"reward\"",
            "    if \"refund\" not in text.lower():\n        return {\"reward\": None, \"reason\": \"not sure\"}\n    return {\"reward\"",
        ),
    );
    let out = outcome(
        wai()
            .arg("grade")
            .arg(fixture("grade_transcripts.jsonl"))
            .args([
                "--judge",
                &format!("cmd:python3 {}", declining.display()),
                "-o",
            ])
            .arg(dir.path().join("x.parquet")),
        dir.path(),
    );
    assert!(out.starts_with("exit_code: 2\n"), "{out}");
    assert!(out.contains("no verdict on 5 of 8 rows"), "{out}");
}

// Issue #29, item 16: a judge that hangs on every row was waited on for `--timeout` a row.
#[test]
fn a_judge_that_hangs_on_every_row_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let rows = scored_rows(dir.path(), "rows.jsonl", 200, |_| {
        (Value::Null, "missing_reward")
    });
    let judge = write(
        dir.path(),
        "hang.py",
        "import sys, time\nfor line in sys.stdin:\n    time.sleep(3600)\n",
    );
    let started = std::time::Instant::now();
    let out = outcome(
        wai()
            .arg("grade")
            .arg(&rows)
            .args(["--judge", &format!("cmd:python3 {}", judge.display())])
            .args(["--timeout", "0.3", "-o"])
            .arg(dir.path().join("x.parquet")),
        dir.path(),
    );
    assert!(out.starts_with("exit_code: 65\n"), "{out}");
    assert!(out.contains("timed out 8 times in a row"), "{out}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "stopped early, not after 200 timeouts: {:?}",
        started.elapsed()
    );
    assert!(!dir.path().join("x.parquet").exists());
}

// Issue #29, item 17: `grade --gate 2` wrote its output, then failed on the floor.
#[test]
fn grade_checks_every_option_before_reading_a_row() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("judged.txt");
    let judge = write(
        dir.path(),
        "count.py",
        &format!(
            "import json, sys\nfor line in sys.stdin:\n    open({:?}, 'a').write('x')\n    print(json.dumps({{'id': json.loads(line)['id'], 'reward': 1}}), flush=True)\n",
            counter.display().to_string()
        ),
    );
    let judge = format!("cmd:python3 {}", judge.display());
    let out = dir.path().join("x.parquet");
    for (bad, needle) in [
        (
            &["--gate", "2"][..],
            "the floor must be a pass rate in [0, 1], not 2",
        ),
        (
            &["--max-judge-failures=-1"][..],
            "--max-judge-failures must be a share",
        ),
        (&["--min-graded", "1.5"][..], "--min-graded must be a share"),
        (
            &["--tools", "/no/such/tools.json"][..],
            "/no/such/tools.json",
        ),
    ] {
        let result = wai()
            .arg("grade")
            .arg(fixture("grade_transcripts.jsonl"))
            .args(["--judge", &judge])
            .args(bad)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&result.stderr);
        // A bad option is a usage error (64); a file that is not there, a missing input (66).
        let want = if bad[0] == "--tools" { 66 } else { 64 };
        assert_eq!(result.status.code(), Some(want), "{bad:?}: {err}");
        assert!(err.contains(needle), "{bad:?}: {err}");
        assert!(!out.exists(), "{bad:?}: nothing written");
        assert!(!counter.exists(), "{bad:?}: no row judged");
    }
}

/// The lines of a file, or none when it does not exist.
fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Waits until the file at `path` stops growing (orphaned judge workers of a killed run finish
/// the request they hold, then die on the closed pipe).
fn settled(path: &Path) -> Vec<String> {
    let mut last = lines_of(path);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = lines_of(path);
        if now == last {
            return now;
        }
        last = now;
    }
}

// Issue #29, item 3: a kill lost every verdict (19,820 of 20,000 in one test).
#[test]
fn a_killed_grade_resumes_and_judges_only_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    crate::support::gen_rows(&rows, 120, 3);
    let args = |out: &Path, count: &Path| -> Vec<String> {
        vec![
            "grade".into(),
            rows.display().to_string(),
            "--judge".into(),
            format!(
                "cmd:python3 {} {} 0.02",
                fixture("judges/slow_judge.py").display(),
                count.display()
            ),
            "--workers".into(),
            "2".into(),
            "--no-tools".into(),
            "-o".into(),
            out.display().to_string(),
        ]
    };
    // The uninterrupted run.
    // (The count file is on the judge's command line, so every run names the same one.)
    let clean = dir.path().join("clean.parquet");
    let count = dir.path().join("count.txt");
    let out = wai().args(args(&clean, &count)).output().unwrap();
    assert!(matches!(out.status.code(), Some(0 | 2)), "{out:?}");
    assert_eq!(lines_of(&count).len(), 120);
    std::fs::remove_file(&count).unwrap();

    // A run killed with SIGKILL after some verdicts landed in the log.
    let scored = dir.path().join("scored.parquet");
    let log = dir.path().join(".scored.parquet.verdicts.jsonl");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("wai"))
        .args(args(&scored, &count))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while lines_of(&log).len() < 30 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(!scored.exists(), "a killed grade leaves no output");
    let judged_before = settled(&count);
    let logged: std::collections::BTreeSet<String> = lines_of(&log)
        .iter()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["rollout_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        (29..120).contains(&logged.len()),
        "killed mid-way, with {} verdicts logged",
        logged.len()
    );

    // The rerun judges only the rows without a verdict, and ends with the same file.
    let out = wai()
        .arg("--json")
        .args(args(&scored, &count))
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 2)), "{out:?}");
    let report: Value = crate::support::envelope(&out.stdout)["report"].clone();
    assert_eq!(
        report["resumed"].as_u64(),
        Some(logged.len() as u64),
        "{report}"
    );
    let judged_after: Vec<String> = lines_of(&count)[judged_before.len()..].to_vec();
    assert_eq!(
        judged_after.len(),
        120 - logged.len(),
        "only what is missing"
    );
    for id in &judged_after {
        assert!(!logged.contains(id), "`{id}` was judged again");
    }
    assert!(
        std::fs::read(&scored).unwrap() == std::fs::read(&clean).unwrap(),
        "the resumed output is the uninterrupted run's, byte for byte"
    );
    assert!(
        !log.exists(),
        "the log is removed once the output is in place"
    );

    // A log left under other judges is started over, with a note.
    std::fs::write(&log, "{\"wai_verdicts\":1,\"digest\":\"other\"}\n").unwrap();
    let again = dir.path().join("again.parquet");
    std::fs::rename(&log, dir.path().join(".again.parquet.verdicts.jsonl")).unwrap();
    let out = wai()
        .arg("--json")
        .args(args(&again, &count))
        .output()
        .unwrap();
    let report: Value = crate::support::envelope(&out.stdout)["report"].clone();
    assert!(
        report["notes"].to_string().contains("it was started over"),
        "{report}"
    );
    assert!(std::fs::read(&again).unwrap() == std::fs::read(&clean).unwrap());
}

/// A judge that prints NaN (Python's `json.dumps(float("nan"))`) gives `invalid_result` at
/// once: the line was read as "not JSON" and ignored, so every row waited out its timeout
/// (#30 item 14).
#[test]
fn a_nan_verdict_is_invalid_at_once_not_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("nan_judge.py");
    std::fs::write(
        &script,
        "import json, sys\nfor line in sys.stdin:\n    req = json.loads(line)\n    print(json.dumps({\"id\": req[\"id\"], \"reward\": float(\"nan\"), \"reason\": \"NaN in a string stays\"}), flush=True)\n",
    )
    .unwrap();
    let (rows, _) = grade(
        dir.path(),
        &fixture("grade_transcripts.jsonl"),
        &[&format!("cmd:python3 {}", script.display())],
        &["--timeout", "30", "--no-tools"],
    );
    assert!(!rows.is_empty());
    for r in &rows {
        assert_eq!(r["judge_status"], "invalid_result", "{r}");
        assert!(r["reward"].is_null());
    }
}

/// SQL judges run under the query limits: a function that would build a huge value is refused
/// (an expression judge and a query judge alike), a query judge past `--memory-limit` or
/// `--query-timeout` stops, each a usage error, and no output is written (the expression judge,
/// which fails on its first batch, keeps its verdict log for a resume, as every failed grade
/// does) (#30 item 4).
#[test]
fn sql_judges_run_under_the_query_limits() {
    let rows = fixture("example_rows.jsonl");
    for (judge, extra, says) in [
        (
            "sql:length(repeat(final_text, 2000000000)) > 0",
            vec![],
            "`repeat` could build a value of",
        ),
        (
            "sql:SELECT rollout_id, length(repeat('x', 2000000000)) AS reward FROM rows",
            vec![],
            "`repeat` could build a value of",
        ),
        (
            "sql:SELECT r.rollout_id, 1.0 AS reward FROM rows r, generate_series(1, 100000000000) g \
             WHERE g.value < 0",
            vec!["--query-timeout", "0.5"],
            "ran past --query-timeout 0.5 s",
        ),
        (
            "sql:SELECT rollout_id, 1.0 AS reward FROM rows r, generate_series(1, 20000) g \
             ORDER BY g.value * length(r.final_text) DESC",
            vec!["--memory-limit", "1M"],
            "more memory than --memory-limit 1.0 MiB allows",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = wai()
            .current_dir(dir.path())
            .arg("grade")
            .arg(&rows)
            .args(["--judge", judge, "--out", "scored.parquet"])
            .args(&extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{judge}: {err}");
        assert!(err.contains(says), "{judge}: {err}");
        let written: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name != ".scored.parquet.verdicts.jsonl")
            .collect();
        assert!(written.is_empty(), "{judge} wrote {written:?}");
        assert!(!err.contains("External error"), "{err}");
    }
}

/// A number no 64-bit type holds, kept in `extra`, reaches a command judge as it was read (it
/// was rounded to `1.8446744073709552e19` in the request; #30 item 8).
#[test]
fn a_command_judge_sees_wide_numbers_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("wide.jsonl");
    std::fs::write(
        &input,
        "{\"task_id\": \"t\", \"prompt\": \"p\", \"final_text\": \"f\", \"big\": 18446744073709551616}\n",
    )
    .unwrap();
    let judge = dir.path().join("judge.py");
    std::fs::write(
        &judge,
        "import sys, json\nfor line in sys.stdin:\n    i = json.loads(line)['id']\n    ok = '18446744073709551616' in line\n    print(json.dumps({'id': i, 'reward': 1 if ok else 0, 'reason': line[:200]}), flush=True)\n",
    )
    .unwrap();
    let (rows, _) = grade(
        dir.path(),
        &input,
        &[&format!("cmd:python3 {}", judge.display())],
        &["--no-tools"],
    );
    assert_eq!(rows[0]["reward"], 1.0, "{}", rows[0]);
}

/// A grade whose judges read a few columns (SQL expressions and queries) over Parquet rows
/// written by wai copies every other column's chunks instead of decoding and encoding them:
/// its output is byte for byte what a grade of the same rows as JSON Lines writes, and `-v`
/// says which way it went. Rows with markers and lineage of their own keep them.
#[test]
fn a_sql_grade_of_parquet_rows_writes_the_bytes_a_grade_of_jsonl_writes() {
    let dir = tempfile::tempdir().unwrap();
    let query = write(
        dir.path(),
        "busy.sql",
        "SELECT rollout_id, CASE WHEN cardinality(tools_used) > 1 THEN 1 ELSE 0 END AS reward, \
           CASE WHEN final_text ILIKE '%sorry%' THEN 1.0 ELSE 0.0 END AS apologised FROM rows",
    );
    let query = format!("sql:{}", query.display());
    for rows in ["grade_transcripts.jsonl", "example_scored.jsonl"] {
        let jsonl = fixture(rows);
        let parquet = dir.path().join("rows.parquet");
        crate::support::succeeded(wai().arg("convert").arg(&jsonl).arg("-o").arg(&parquet));
        for judges in [
            vec!["sql:array_has(tools_used, 'lookup_order') AND reward > 0.5"],
            vec!["sql:length(final_text) > 40", query.as_str()],
        ] {
            let mut written = Vec::new();
            for input in [&jsonl, &parquet] {
                let out = dir.path().join("out.parquet");
                let mut cmd = wai();
                cmd.arg("-v").arg("grade").arg(input);
                for j in &judges {
                    cmd.arg("--judge").arg(j);
                }
                let run = cmd
                    .args(["--run-id", "night-1", "--no-tools", "-o"])
                    .arg(&out)
                    .output()
                    .unwrap();
                let err = String::from_utf8_lossy(&run.stderr).into_owned();
                assert!(matches!(run.status.code(), Some(0 | 2)), "{err}");
                assert_eq!(
                    err.contains("copying the rest"),
                    input == &parquet,
                    "{rows} {judges:?}: {err}"
                );
                written.push(std::fs::read(&out).unwrap());
            }
            assert!(
                written[0] == written[1],
                "{rows} {judges:?}: the outputs differ"
            );
        }
    }
}
