//! `wai sql`: canned queries, JSON functions, pushdown, read-only, output formats.

use std::collections::BTreeMap;

use crate::support::{fixture, gen_rows, read_jsonl, sql_jsonl, wai};

#[test]
fn every_canned_query_runs_on_generated_and_reference_rows() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.parquet");
    gen_rows(&rows, 2000, 4);
    for table in [rows.as_path(), fixture("example_scored.jsonl").as_path()] {
        // The lake's queries read a lake's tables: tests/it/run.rs runs them on one.
        for q in wai::queries::QUERIES
            .iter()
            .filter(|q| !q.name.starts_with("lake_"))
        {
            let mut cmd = wai();
            cmd.args(["sql", "--query", q.name, "--table"]).arg(table);
            for p in q.params() {
                let value = if p == "k" { "2" } else { "tier" };
                cmd.args(["--param", &format!("{p}={value}")]);
            }
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "{} on {}: {}",
                q.name,
                table.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            assert!(
                text.lines().last().unwrap_or("").ends_with("rows") || text.ends_with("row\n"),
                "{text}"
            );
        }
    }
}

#[test]
fn pass_rate_by_dim_agrees_with_a_naive_count() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    gen_rows(&rows, 3000, 9);
    let mut naive: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in read_jsonl(&rows) {
        let tier = r["dims"]["tier"].as_str().unwrap().to_owned();
        let e = naive.entry(tier).or_default();
        e.0 += 1;
        e.1 += u64::from(r["reward"] == 1);
    }
    let got = sql_jsonl(
        &["--query", "pass_rate_by_dim", "--param", "key=tier"],
        &rows,
    );
    assert_eq!(got.len(), naive.len());
    for row in got {
        let (n, passes) = naive[row["value"].as_str().unwrap()];
        assert_eq!(row["rollouts"], n);
        assert_eq!(row["passes"], passes);
        let (lo, hi) = wai::stats::wilson::interval(passes as f64, n as f64, 1.96).unwrap();
        assert_eq!(
            row["pass_low"].as_f64(),
            Some((lo * 1000.0).round() / 1000.0)
        );
        assert_eq!(
            row["pass_high"].as_f64(),
            Some((hi * 1000.0).round() / 1000.0)
        );
    }
}

#[test]
fn json_functions_read_json_text_columns() {
    let got = sql_jsonl(
        &["SELECT json_get_str(lineage, 'source') AS source, count(*) AS n FROM rows GROUP BY 1"],
        &fixture("example_scored.jsonl"),
    );
    assert_eq!(got, vec![serde_json::json!({"source": "eval", "n": 200})]);
}

#[test]
fn two_named_tables_join() {
    let got = wai()
        .args([
            "sql",
            "SELECT count(*) AS n FROM a JOIN b USING (rollout_id)",
            "--format",
            "csv",
            "-t",
        ])
        .arg(format!("a={}", fixture("example_rows.jsonl").display()))
        .arg("-t")
        .arg(format!("b={}", fixture("example_rows.jsonl").display()))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(got.stdout).unwrap(), "n\n200\n");
}

#[test]
fn reading_task_id_and_reward_does_not_read_messages() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.parquet");
    gen_rows(&rows, 20_000, 1);
    let size = std::fs::metadata(&rows).unwrap().len();
    let out = wai()
        .args([
            "sql",
            "EXPLAIN ANALYZE SELECT task_id, avg(reward) FROM rows GROUP BY task_id",
            "--format",
            "csv",
            "-t",
        ])
        .arg(&rows)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("projection=[task_id, reward]"), "{text}");
    let scanned: u64 = text
        .split("bytes_scanned=")
        .nth(1)
        .and_then(|s| {
            s.split(|c: char| !c.is_ascii_digit() && c != '.' && c != 'K' && c != 'M')
                .next()
        })
        .map(parse_size)
        .expect("bytes_scanned metric");
    assert!(scanned * 10 < size, "scanned {scanned} of {size} bytes");
}

fn parse_size(s: &str) -> u64 {
    let (num, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1e3),
        Some('M') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a size as DataFusion prints it: positive, saturating past u64::MAX is fine"
    )]
    let bytes = (num.parse::<f64>().unwrap_or(f64::MAX) * mult) as u64;
    bytes
}

#[test]
fn queries_cannot_write_or_create() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("x.csv");
    for q in [
        format!("COPY (SELECT 1) TO '{}'", target.display()),
        "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'".to_owned(),
        "SET datafusion.execution.batch_size = 1".to_owned(),
    ] {
        let out = wai()
            .args(["sql", &q, "-t"])
            .arg(fixture("example_rows.jsonl"))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(64),
            "{q}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!target.exists());
}

#[test]
fn results_go_to_files_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    for (format, name) in [
        ("csv", "r.csv"),
        ("json", "r.json"),
        ("jsonl", "r.jsonl"),
        ("parquet", "r.parquet"),
        ("table", "r.txt"),
    ] {
        let out = dir.path().join(name);
        wai()
            .args([
                "sql",
                "SELECT task_id, reward, markers FROM rows ORDER BY rollout_id LIMIT 5",
                "--format",
                format,
                "-o",
            ])
            .arg(&out)
            .arg("-t")
            .arg(fixture("example_scored.jsonl"))
            .assert()
            .success();
        assert!(std::fs::metadata(&out).unwrap().len() > 0, "{format}");
    }
    // The Parquet result reads back as a table.
    let got = sql_jsonl(
        &["SELECT count(*) AS n FROM rows"],
        &dir.path().join("r.parquet"),
    );
    assert_eq!(got[0]["n"], 5);
}

/// Statements deep enough to overflow the planner's stack are refused before planning (exit
/// 64, saying what to write instead), in `wai sql`, SQL judges and hack-scan features; one just
/// under the limit still runs.
#[test]
fn deep_sql_is_refused_not_a_stack_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.parquet");
    crate::support::succeeded(
        crate::support::wai()
            .arg("convert")
            .arg(crate::support::fixture("example_scored.jsonl"))
            .arg("--out")
            .arg(&rows),
    );
    let ors = |n: usize| {
        (0..n)
            .map(|i| format!("reward = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ")
    };
    let sums = vec!["1"; 20_000].join("+");
    for query in [
        format!("SELECT count(*) FROM rows WHERE {}", ors(4000)),
        format!("SELECT {sums} AS x FROM rows"),
    ] {
        crate::support::refused(
            crate::support::wai()
                .arg("sql")
                .arg(&query)
                .arg("--table")
                .arg(&rows),
            "the limit is 1000",
        );
    }
    crate::support::refused(
        crate::support::wai()
            .arg("grade")
            .arg(&rows)
            .arg("--judge")
            .arg(format!("sql:{}", ors(4000)))
            .args(["--no-tools", "--out"])
            .arg(dir.path().join("g.parquet")),
        "the limit is 1000",
    );
    crate::support::refused(
        crate::support::wai()
            .arg("hack-scan")
            .arg(&rows)
            .arg("--feature")
            .arg(format!("x={sums}")),
        "the limit is 1000",
    );
    // A text feature is a usage error at once, not a failure row by row.
    crate::support::refused(
        crate::support::wai()
            .arg("hack-scan")
            .arg(&rows)
            .args(["--feature", "x=final_text"]),
        "not a number or a boolean",
    );
    let out = crate::support::succeeded(
        crate::support::wai()
            .arg("sql")
            .arg(format!(
                "SELECT count(*) AS n FROM rows WHERE {}",
                ors(1000)
            ))
            .args(["--format", "csv", "--table"])
            .arg(&rows),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("200"));
}

/// The canned queries' shares are fractions, not integer divisions that print 0 (#30 item 13).
#[test]
fn canned_shares_are_fractions() {
    for (query, column, group) in [
        ("judge_status", "share", None),
        ("tool_errors", "share_of_tool_calls", Some("tool")),
    ] {
        let rows: Vec<serde_json::Value> = String::from_utf8(
            crate::support::succeeded(
                crate::support::wai()
                    .args(["sql", "--query", query, "--format", "jsonl", "--table"])
                    .arg(crate::support::fixture("example_scored.jsonl")),
            )
            .stdout,
        )
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
        let mut sums: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
        for r in &rows {
            let key = group.map_or(String::new(), |g| r[g].as_str().unwrap().to_owned());
            *sums.entry(key).or_default() += r[column].as_f64().unwrap();
        }
        for (k, s) in sums {
            assert!(
                (s - 1.0).abs() < 0.01,
                "{query}: the shares of {k:?} sum to {s}"
            );
        }
    }
}

/// Runs `wai ARGS` in an empty folder: the exit code, stderr, and whether the folder stayed
/// empty.
fn in_empty_dir(args: &[&str]) -> (Option<i32>, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let out = wai().current_dir(dir.path()).args(args).output().unwrap();
    let empty = std::fs::read_dir(dir.path()).unwrap().next().is_none();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        empty,
    )
}

/// A function that could build one huge value from small arguments is refused before it runs
/// (DataFusion's memory pool does not see one function's output: `repeat('x', 2000000000)`
/// reached 7.8 GB before it failed), and the bound reads the arguments, so everyday calls pass
/// (#30 item 4).
#[test]
fn functions_that_would_build_a_huge_value_are_refused_before_they_run() {
    for (sql, says) in [
        (
            "select repeat('x', 2000000000)",
            "`repeat` could build a value of 1.9 GiB",
        ),
        ("select lpad('x', 1000000000)", "`lpad` could build"),
        ("select rpad('x', 1000000000, 'yz')", "`rpad` could build"),
        (
            "select array_repeat(1, 1000000000)",
            "`array_repeat` could build",
        ),
        (
            "select array_resize([1], 1000000000, 0)",
            "`array_resize` could build",
        ),
        ("select range(1, 2000000000)", "`range` could build"),
        (
            "select generate_series(1, 2000000000)",
            "`generate_series` could build",
        ),
        (
            "select replace(repeat('x', 10000000), 'x', repeat('y', 100))",
            "`replace` could build",
        ),
        (
            "select regexp_replace(repeat('x', 10000000), 'x', repeat('y', 100), 'g')",
            "`regexp_replace` could build",
        ),
    ] {
        let started = std::time::Instant::now();
        let (code, err, empty) = in_empty_dir(&["sql", "--out", "r.csv", "--format", "csv", sql]);
        assert_eq!(code, Some(64), "{sql}: {err}");
        assert!(err.contains(says), "{sql}: {err}");
        assert!(
            err.contains("one value may hold at most 256.0 MiB"),
            "{sql}: {err}"
        );
        assert!(empty, "{sql} wrote its output");
        assert!(
            started.elapsed().as_secs() < 20,
            "{sql} ran before it was refused"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.parquet");
    gen_rows(&rows, 300, 1);
    let got = sql_jsonl(
        &[
            "SELECT count(*) AS n FROM rows WHERE length(repeat(final_text, 3)) = 3 * length(final_text) \
             AND length(replace(final_text, 'a', 'bb')) >= length(final_text) \
             AND length(regexp_replace(final_text, '\\s+', ' ', 'g')) <= length(final_text) \
             AND length(lpad(task_id, 40, '-')) = 40 AND cardinality(range(0, 10)) = 10",
        ],
        &rows,
    );
    assert_eq!(got[0]["n"], 300);
}

/// `--memory-limit` holds the operators and the rows gathered for printing; past it the query
/// stops with a usage error naming the limit, and nothing is written. A Parquet output streams,
/// so the same rows fit (#30 item 4).
#[test]
fn a_query_over_its_memory_limit_stops_and_says_which_limit() {
    let big = "select value, value * 2 AS twice from generate_series(1, 2000000)";
    let (code, err, empty) = in_empty_dir(&[
        "sql",
        "--memory-limit",
        "4M",
        "--out",
        "r.csv",
        "--format",
        "csv",
        big,
    ]);
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("more memory than --memory-limit 4.0 MiB allows"),
        "{err}"
    );
    assert!(empty, "a refused query wrote its output");
    // A grouped query whose repartitioning would spill from both inputs at once, which
    // deadlocked DataFusion 55 about one run in three (apache/datafusion#24883): it fails on the
    // memory, every time, and never runs into the timeout.
    let grouped =
        "select value % 500000 AS k, count(*) AS n from generate_series(1, 3000000) group by k";
    for _ in 0..6 {
        let (code, err, _) = in_empty_dir(&[
            "sql",
            "--memory-limit",
            "1M",
            "--query-timeout",
            "60",
            grouped,
        ]);
        assert_eq!(code, Some(64), "{err}");
        assert!(err.contains("--memory-limit 1.0 MiB"), "{err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.parquet");
    let done = wai()
        .args([
            "sql",
            "--memory-limit",
            "4M",
            "--format",
            "parquet",
            "--out",
        ])
        .arg(&out)
        .arg(big)
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(String::from_utf8_lossy(&done.stdout).contains("2000000 rows"));
    for (size, says) in [
        ("0", "at least 1 byte"),
        ("2X", "is not a size"),
        ("G", "is not a size"),
    ] {
        let (code, err, _) = in_empty_dir(&["sql", "--memory-limit", size, "select 1"]);
        assert_eq!(code, Some(64), "{size}: {err}");
        assert!(err.contains(says), "{size}: {err}");
    }
}

/// `--query-timeout` stops a query between batches, as a usage error naming the limit (#30 item 4).
#[test]
fn a_query_past_its_timeout_stops() {
    let started = std::time::Instant::now();
    let (code, err, empty) = in_empty_dir(&[
        "sql",
        "--query-timeout",
        "0.5",
        "--out",
        "r.csv",
        "--format",
        "csv",
        "select count(*) from generate_series(1, 100000000000)",
    ]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("ran past --query-timeout 0.5 s"), "{err}");
    assert!(empty);
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
    for t in ["0", "-1", "NaN", "1e9"] {
        let flag = format!("--query-timeout={t}");
        let (code, err, _) = in_empty_dir(&["sql", &flag, "select 1"]);
        assert_eq!(code, Some(64), "{t}: {err}");
        assert!(
            err.contains("--query-timeout must be more than 0"),
            "{t}: {err}"
        );
    }
}
