//! The binary's exit codes and messages (DESIGN.md §9), as snapshots of the whole result.

use std::path::Path;

use crate::support::{fixture, redact, wai};

/// `exit_code`, stdout and stderr in one reviewable block, temp paths redacted.
pub(crate) fn outcome(cmd: &mut assert_cmd::Command, dir: &Path) -> String {
    let out = cmd.output().expect("runs");
    format!(
        "exit_code: {}\n----- stdout -----\n{}----- stderr -----\n{}",
        out.status.code().unwrap_or(-1),
        redact(&String::from_utf8_lossy(&out.stdout), dir),
        redact(&String::from_utf8_lossy(&out.stderr), dir),
    )
}

#[test]
fn usage_errors_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(wai().args(["convert", "x.jsonl"]), dir.path());
    assert!(out.starts_with("exit_code: 64\n"), "{out}");
    assert!(out.contains("--out <OUT>"), "{out}");
    insta::assert_snapshot!(outcome(wai().args(["sql", "--query", "nope", "-t", "x.parquet"]), dir.path()), @r"
    exit_code: 64
    ----- stdout -----
    ----- stderr -----
    error: no canned query `nope`; there are `failures_by_tool_tier`, `judge_status`, `lake_compare_history`, `lake_judge_versions`, `lake_pass_at_trend`, `marker_rates`, `pass_at_k_by_slice`, `pass_rate_by_dim`, `rewards_by_task`, `tool_errors`
    ");
    let out = outcome(
        wai()
            .args(["convert"])
            .arg(fixture("example_rows.jsonl"))
            .args(["-o", "rows.csv"]),
        dir.path(),
    );
    insta::assert_snapshot!(out, @r"
    exit_code: 64
    ----- stdout -----
    ----- stderr -----
    error: cannot tell the output format of `rows.csv`: name it `.parquet` or `.jsonl`, or pass `--to`
    ");
}

#[test]
fn missing_input_exits_66() {
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(
        wai()
            .current_dir(dir.path())
            .args(["convert", "nope.jsonl", "-o", "x.parquet"]),
        dir.path(),
    );
    insta::assert_snapshot!(out, @r"
    exit_code: 66
    ----- stdout -----
    ----- stderr -----
    error: no input at `nope.jsonl`
    ");
}

#[test]
fn bad_data_exits_65_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.jsonl"),
        "{\"prompt\": \"a\"}\n\n{\"prompt\": \"b\", \"markers\": {\"m\": [1]}}\n",
    )
    .unwrap();
    let out = outcome(
        wai()
            .current_dir(dir.path())
            .args(["convert", "bad.jsonl", "-o", "x.parquet"]),
        dir.path(),
    );
    insta::assert_snapshot!(out, @r"
    exit_code: 65
    ----- stdout -----
    ----- stderr -----
    error: `bad.jsonl` line 3: field `markers.m`: expected a number or null, found an array
    ");
    std::fs::write(
        dir.path().join("v1.jsonl"),
        "{\"schema_version\": \"1\", \"prompt\": \"a\", \"final_text\": \"b\"}\n",
    )
    .unwrap();
    let out = outcome(
        wai()
            .current_dir(dir.path())
            .args(["convert", "v1.jsonl", "-o", "x.parquet"]),
        dir.path(),
    );
    insta::assert_snapshot!(out, @r#"
    exit_code: 65
    ----- stdout -----
    ----- stderr -----
    error: `v1.jsonl` line 1: field `steps`: missing (required on schema_version "1" rows)
    "#);
}

#[test]
fn unwritable_output_exits_74() {
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(
        wai()
            .current_dir(dir.path())
            .arg("convert")
            .arg(fixture("example_rows.jsonl"))
            .args(["-o", "no/such/dir/x.parquet"]),
        dir.path(),
    );
    insta::assert_snapshot!(out, @r"
    exit_code: 74
    ----- stdout -----
    ----- stderr -----
    error: I/O error on `no/such/dir/x.parquet`
      caused by: the output's folder does not exist
    ");
}

#[test]
fn success_reports_on_stdout_and_json_is_one_document() {
    let dir = tempfile::tempdir().unwrap();
    let out = wai()
        .current_dir(dir.path())
        .args([
            "--json",
            "gen",
            "--rows",
            "10",
            "--seed",
            "3",
            "-o",
            "g.parquet",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = crate::support::envelope(&out.stdout);
    assert_eq!(doc["version"], 2);
    assert_eq!(doc["command"], "gen");
    assert_eq!(doc["outputs"][0]["path"], "g.parquet");
    assert_eq!(doc["report"]["rows"], 10);
    let out = outcome(
        wai()
            .current_dir(dir.path())
            .args(["-q", "gen", "--rows", "10", "-o", "h.parquet"]),
        dir.path(),
    );
    insta::assert_snapshot!(out, @r"
    exit_code: 0
    ----- stdout -----
    ----- stderr -----
    ");
}

/// Options that would mean nothing are refused before any work, saying what is valid
/// (#30 item 10): a NaN floor, zero pairs, an overlap past 1, a floor of no shuffles, a mistake
/// rate past 1, an empty budget, zero repeats or phrasings, a marker no row carries.
#[test]
fn meaningless_options_are_usage_errors() {
    let rows = crate::support::fixture("example_scored.jsonl");
    let rows = rows.to_str().unwrap();
    for (args, says) in [
        (
            vec![
                "select",
                rows,
                "--mode",
                "sft",
                "--min-reward",
                "NaN",
                "--out",
                "x.jsonl",
            ],
            "not in [0, 1]",
        ),
        (
            vec![
                "select",
                rows,
                "--mode",
                "preference",
                "--max-pairs-per-prompt",
                "0",
                "--out",
                "x.jsonl",
            ],
            "give 1 or more",
        ),
        (
            vec!["select", rows, "--target", "0", "--out", "x.jsonl"],
            "give 1 or more",
        ),
        (
            vec![
                "decontaminate",
                rows,
                "--against",
                rows,
                "--overlap",
                "2",
                "--out",
                "x.jsonl",
            ],
            "not in [0, 1]",
        ),
        (
            vec![
                "decontaminate",
                rows,
                "--against",
                rows,
                "--n",
                "0",
                "--out",
                "x.jsonl",
            ],
            "give 1 or more",
        ),
        (
            vec!["hack-scan", rows, "--perms", "0"],
            "not in 20..=100000",
        ),
        (vec!["hack-scan", rows, "--alpha", "1"], "not in (0, 1)"),
        (vec!["demo", "--rate", "2"], "not in [0, 1]"),
        (vec!["demo", "--budget", "0"], "0 is not in 1.."),
    ] {
        refused_without_writing(&args, says);
    }
}

/// Runs `wai ARGS` in an empty folder and checks it was refused (64) saying `says`, and wrote
/// nothing.
fn refused_without_writing(args: &[&str], says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::support::wai()
        .current_dir(dir.path())
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "{args:?} wrote something"
    );
}

/// Simulate and holdout-size options that would ask for nothing, or for what cannot be, are
/// refused before any work (#30 item 10): zero repeats or phrasings, a tool that is not given, a
/// gain past a pass rate of 1.
#[test]
fn meaningless_simulate_and_sizing_options_are_usage_errors() {
    let tools = crate::support::fixture("example_tools.json");
    let tools = tools.to_str().unwrap();
    for (args, says) in [
        (
            vec![
                "simulate",
                "--tools",
                tools,
                "--axis",
                "tool=no_such_tool",
                "--out",
                "x.parquet",
            ],
            "axis `tool` has no value `no_such_tool`",
        ),
        (
            vec!["holdout-size", "--base", "0.9", "--effect", "0.3"],
            "the largest gain from that base is 0.100",
        ),
        (
            vec![
                "simulate",
                "--tools",
                tools,
                "--repeats",
                "0",
                "--out",
                "x.parquet",
            ],
            "`--repeats` must be at least 1",
        ),
        (
            vec![
                "simulate",
                "--tools",
                tools,
                "--phrasings",
                "0",
                "--out",
                "x.parquet",
            ],
            "`--phrasings` must be at least 1",
        ),
    ] {
        refused_without_writing(&args, says);
    }
}

/// A marker asked for by name that no row carries is a data condition (65) naming the markers
/// the rows do carry, not an empty marker reported as n/a (#30 item 10).
#[test]
fn a_marker_no_row_carries_is_named_with_those_they_do() {
    let rows = crate::support::fixture("example_scored.jsonl");
    let out = crate::support::wai()
        .args(["markers"])
        .arg(&rows)
        .args(["--name", "no_such_marker"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{err}");
    assert!(
        err.contains("no row carries marker `no_such_marker`"),
        "{err}"
    );
    assert!(err.contains("`no_filler`"), "{err}");
}

/// A closed stderr (`wai ... 2>&1 | head -1`) ends the run with its own exit status, never a
/// panic (#30 item 3).
#[test]
fn a_closed_stderr_is_no_panic() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = std::process::Command::new(assert_cmd::cargo::cargo_bin("wai"))
        .args(["sql", "SELECT 1", "--table", "/no/such/rows.parquet"])
        .stdout(std::process::Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(66),
        "the missing input's status, not a panic's 101"
    );
}

/// A stdout closed while `wai sql` writes its table (`wai sql ... | head -3`) ends the run quietly
/// and successfully, as a closed pipe after the report does; it said "I/O error on `<output>`"
/// (exit 74) when the pipe closed mid-table.
#[test]
fn a_stdout_closed_mid_table_is_a_quiet_end() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    let line = r#"{"task_id": "t", "reward": 1.0, "final_text": "ok"}"#;
    std::fs::write(&rows, format!("{line}\n").repeat(20_000)).unwrap();
    for format in ["table", "csv", "json", "jsonl"] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("wai"))
            .args([
                "sql",
                "SELECT task_id, reward FROM rows",
                "--format",
                format,
                "--table",
            ])
            .arg(&rows)
            .stdout(writer)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{format}: {err}");
        assert!(err.is_empty(), "{format}: {err}");
    }
}

/// Slicing on a `dims` key no row carries is a data condition (65) naming the keys the rows do
/// carry, not one "(unset)" slice that repeats the overall line (#30 item 10).
#[test]
fn a_dims_key_no_row_carries_is_named_with_those_they_do() {
    let rows = crate::support::fixture("example_scored.jsonl");
    let out = crate::support::wai()
        .args(["pass-at"])
        .arg(&rows)
        .args(["--by", "dims.no_such_key"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{err}");
    assert!(err.contains("no row carries `dims.no_such_key`"), "{err}");
    assert!(err.contains("`tier`"), "{err}");
}

/// A run key or a marker no row carries stops `wai variance` with what the rows do carry, not
/// a report of zero runs (#30 item 10).
#[test]
fn variance_names_a_run_key_or_marker_no_row_carries() {
    let rows = crate::support::fixture("eval_variance_runs.jsonl");
    for (args, says) in [
        (
            ["--by", "no_such_key"],
            "no row carries the run key `no_such_key`",
        ),
        (
            ["--metric", "marker:no_such"],
            "no row carries marker `no_such`",
        ),
    ] {
        let out = crate::support::wai()
            .arg("variance")
            .arg(&rows)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Sizes that would run for days or fill memory (a billion bootstrap draws, a hundred thousand
/// worker processes) are refused before any work, saying the bound and why (#30 item 4).
#[test]
fn absurd_sizes_are_refused_with_their_bound() {
    let rows = crate::support::fixture("example_scored.jsonl");
    let rows = rows.to_str().unwrap();
    let tools = crate::support::fixture("example_tools.json");
    let tools = tools.to_str().unwrap();
    let b = "1000000000";
    for (args, says) in [
        (
            vec!["pass-at", rows, "--draws", b],
            "`--draws` must be at most 1,000,000, not 1,000,000,000: each draw resamples every task",
        ),
        (
            vec!["markers", rows, "--draws", b],
            "`--draws` must be at most 1,000,000",
        ),
        (
            vec!["compare", rows, rows, "--draws", b],
            "`--draws` must be at most 1,000,000",
        ),
        (
            vec!["coverage-study", "--draws", b],
            "`--draws` must be at most 1,000,000",
        ),
        (
            vec!["coverage-study", "--runs", b],
            "`--runs` must be at most 100,000",
        ),
        (
            vec![
                "grade",
                rows,
                "--judge",
                "cmd:cat",
                "--workers",
                "100000",
                "--out",
                "x.parquet",
            ],
            "--workers must be at most 256, not 100,000",
        ),
        (
            vec!["judge-trust", rows, "--judge", "sql:1.0", "--sample", b],
            "--sample must be at most 100,000",
        ),
        (
            vec![
                "simulate",
                "--tools",
                tools,
                "--runs",
                b,
                "--out",
                "x.parquet",
            ],
            "`--runs` must be at most 1,000",
        ),
        (
            vec![
                "simulate",
                "--tools",
                tools,
                "--budget",
                b,
                "--out",
                "x.parquet",
            ],
            "`--budget` must be at most 10,000,000",
        ),
        (
            vec!["demo", "--budget", b],
            "`--budget` must be at most 10,000,000",
        ),
        (
            vec!["gen", "--rows", b, "--out", "x.parquet"],
            "`--rows` must be at most 100,000,000",
        ),
    ] {
        refused_without_writing(&args, says);
    }
}
