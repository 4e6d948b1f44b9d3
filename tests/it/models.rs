//! LLM judges and the model layer against the deterministic model server the tests start on
//! 127.0.0.1 (`wai::testing::model_server`): verdicts, the cache, every fault the server can
//! inject, the budget, the circuit breaker, a `kill -9` rerun, secrets, and spec errors.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use wai::testing::model_server::{Config, Fault, ModelServer};

use crate::support::{envelope, sql_jsonl, wai, write_rows};

/// Rows whose final reply says PASS on even indexes (the server scores them 1), FAIL on odd.
fn rows(dir: &Path, n: usize, word: impl Fn(usize) -> String) -> PathBuf {
    rows_named(dir, "rows.jsonl", n, word)
}

fn rows_named(dir: &Path, name: &str, n: usize, word: impl Fn(usize) -> String) -> PathBuf {
    let rows: Vec<Value> = (0..n)
        .map(|i| {
            json!({"task_id": format!("t{}", i / 2), "rollout_id": format!("r{i}"), "prompt": format!("ask {i}"),
                   "steps": [{"tool": "lookup", "arguments": {"id": i}, "result": {"status": "ok"}}],
                   "final_text": word(i)})
        })
        .collect();
    let path = dir.join(name);
    write_rows(&path, &rows);
    path
}

fn pass_fail(i: usize) -> String {
    if i.is_multiple_of(2) {
        format!("PASS {i}")
    } else {
        format!("FAIL {i}")
    }
}

/// `wai --json grade ROWS --judge llm:endpoint:judge-m@URL ...` with the cache in `dir/cache`.
fn grade(dir: &Path, input: &Path, server: &ModelServer, extra: &[&str]) -> std::process::Output {
    wai()
        .arg("--json")
        .arg("grade")
        .arg(input)
        .arg("--judge")
        .arg(format!("llm:endpoint:judge-m@{}", server.url()))
        .arg("--cache")
        .arg(dir.join("cache"))
        .args(["--no-tools", "--retry-wait", "0.001"])
        .args(extra)
        .arg("-o")
        .arg(dir.join("out.parquet"))
        .env_remove("VLLM_API_KEY")
        .output()
        .unwrap()
}

fn scored(dir: &Path) -> Vec<Value> {
    sql_jsonl(
        &[
            "SELECT rollout_id, reward, reason, judge_status, judge_name, judge_meta FROM rows ORDER BY rollout_id",
        ],
        &dir.join("out.parquet"),
    )
}

fn ok(out: &std::process::Output) {
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn meta(row: &Value) -> Value {
    match &row["judge_meta"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    }
}

#[test]
fn an_llm_judge_grades_each_row_and_a_rerun_calls_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config::default());
    let input = rows(dir.path(), 10, pass_fail);
    let out = grade(dir.path(), &input, &server, &[]);
    ok(&out);
    let rows = scored(dir.path());
    assert_eq!(rows.len(), 10);
    for r in &rows {
        let i: usize = r["rollout_id"].as_str().unwrap()[1..].parse().unwrap();
        assert_eq!(
            r["reward"],
            if i.is_multiple_of(2) { 1.0 } else { 0.0 },
            "{r}"
        );
        assert_eq!(r["judge_status"], "ok");
        assert_eq!(r["judge_name"], "llm:judge-m");
        let m = meta(r);
        assert_eq!(m["model"], "judge-m");
        assert_eq!(m["cached"], false);
        assert_eq!(m["rubric"], "conduct_floor");
        assert!(
            m["tokens_in"].as_u64().unwrap() > 0 && m["prompt_sha"].as_str().unwrap().len() == 12,
            "{m}"
        );
    }
    assert_eq!(server.requests(), 10);
    let report = envelope(&out.stdout);
    assert!(
        report["report"]["notes"]
            .to_string()
            .contains("graded the conduct floor only"),
        "{report}"
    );

    let again = grade(dir.path(), &input, &server, &[]);
    ok(&again);
    assert_eq!(server.requests(), 10, "every reply came from the cache");
    assert!(scored(dir.path()).iter().all(|r| meta(r)["cached"] == true));
}

/// The memo (a digest of each row and the judge's settings, beside its request's key) lets a
/// rerun skip making requests; a row, a rubric or a model that changed is asked again, and
/// `cache clear` takes the memo with the replies.
#[test]
fn a_rerun_finds_rows_by_the_memo_and_asks_again_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config::default());
    let input = rows(dir.path(), 10, pass_fail);
    ok(&grade(dir.path(), &input, &server, &[]));
    assert_eq!(server.requests(), 10);
    let first = scored(dir.path());
    let again = grade(dir.path(), &input, &server, &[]);
    ok(&again);
    assert_eq!(server.requests(), 10);
    assert!(
        envelope(&again.stdout)["report"]["notes"]
            .to_string()
            .contains("0 requests (0 retries, 0 failed), 10 replies from the cache"),
        "{}",
        envelope(&again.stdout)
    );
    // The same verdicts, read from the cache.
    let second = scored(dir.path());
    let strip = |rows: &[Value]| -> Vec<Value> {
        rows.iter()
            .map(|r| {
                let mut m = meta(r);
                m["cached"] = json!(null);
                m["latency_ms"] = json!(null);
                json!([
                    r["rollout_id"],
                    r["reward"],
                    r["reason"],
                    r["judge_status"],
                    m
                ])
            })
            .collect()
    };
    assert_eq!(strip(&first), strip(&second));
    assert!(second.iter().all(|r| meta(r)["cached"] == true));
    // One row's reply changed (r3 now passes): that row alone is asked again.
    let changed = rows(dir.path(), 10, |i| {
        if i == 3 {
            "PASS 3".into()
        } else {
            pass_fail(i)
        }
    });
    ok(&grade(dir.path(), &changed, &server, &[]));
    assert_eq!(server.requests(), 11);
    let r3 = scored(dir.path())
        .into_iter()
        .find(|r| r["rollout_id"] == "r3")
        .unwrap();
    assert_eq!(
        (r3["reward"].clone(), meta(&r3)["cached"].clone()),
        (json!(1.0), json!(false))
    );
    // A rubric makes every request another: every row is asked, then found.
    let rubric = ["--rubric", "Pass a reply that says PASS."];
    ok(&grade(dir.path(), &changed, &server, &rubric));
    assert_eq!(server.requests(), 21);
    ok(&grade(dir.path(), &changed, &server, &rubric));
    assert_eq!(server.requests(), 21);
    // Clearing the cache clears the memo: the rows are asked again.
    let cache = dir.path().join("cache");
    let cleared = crate::support::report_of(
        wai()
            .args(["--json", "cache", "clear", "--cache"])
            .arg(&cache),
    );
    assert_eq!(cleared["removed"], 21);
    ok(&grade(dir.path(), &changed, &server, &[]));
    assert_eq!(server.requests(), 31);
}

#[test]
fn every_fault_the_server_injects_is_retried_and_no_row_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config {
        latency: Duration::ZERO,
        faults: vec![
            (Fault::RateLimited(0.0), 0.2),
            (Fault::ServerError, 0.15),
            (Fault::CloseMidBody, 0.1),
            (Fault::Malformed, 0.1),
        ],
    });
    let input = rows(dir.path(), 30, pass_fail);
    let out = grade(dir.path(), &input, &server, &["--retries", "8"]);
    ok(&out);
    let rows = scored(dir.path());
    assert_eq!(rows.len(), 30);
    assert!(rows.iter().all(|r| r["judge_status"] == "ok"), "{rows:?}");
    assert!(
        server.requests() > 30,
        "some requests failed and were retried: {}",
        server.requests()
    );
    assert_eq!(server.answered(), 30);
}

#[test]
fn a_hung_call_times_out_and_its_row_is_an_error_not_a_zero() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config {
        latency: Duration::ZERO,
        faults: vec![(Fault::Hang, 1.0)],
    });
    let input = rows(dir.path(), 2, pass_fail);
    let out = grade(
        dir.path(),
        &input,
        &server,
        &["--model-timeout", "0.3", "--retries", "1"],
    );
    ok(&out);
    let rows = scored(dir.path());
    for r in &rows {
        assert_eq!(r["judge_status"], "error", "{r}");
        assert!(r["reward"].is_null(), "{r}");
        assert!(
            r["reason"]
                .as_str()
                .unwrap()
                .contains("did not answer within 0.3s"),
            "{r}"
        );
    }
}

#[test]
fn an_endpoint_that_fails_every_call_stops_the_run_after_a_few() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config {
        latency: Duration::ZERO,
        faults: vec![(Fault::ServerError, 1.0)],
    });
    let input = rows(dir.path(), 200, pass_fail);
    let out = grade(
        dir.path(),
        &input,
        &server,
        &["--retries", "0", "--concurrency", "4"],
    );
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    // 20 in a row trip it; calls already in flight (at most 3 more) may fail with them.
    let failed: u32 = err
        .split("failed ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        (20..=23).contains(&failed) && err.contains("calls in a row"),
        "{err}"
    );
    assert!(
        server.requests() < 40,
        "stopped early, not after 200 calls: {}",
        server.requests()
    );
    assert!(
        !dir.path().join("out.parquet").exists(),
        "no half-written output"
    );
}

#[test]
fn a_spent_budget_stops_cleanly_and_the_rerun_repeats_no_call() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config::default());
    let input = rows(dir.path(), 20, pass_fail);
    let out = grade(
        dir.path(),
        &input,
        &server,
        &["--max-calls", "5", "--concurrency", "1"],
    );
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--max-calls 5"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.requests(), 5);
    let again = grade(dir.path(), &input, &server, &[]);
    ok(&again);
    assert_eq!(
        server.requests(),
        20,
        "the 5 answered calls came from the cache"
    );
    assert_eq!(server.answered_twice(), 0);
    assert_eq!(scored(dir.path()).len(), 20);
}

#[test]
fn refusals_garbage_and_nan_are_told_apart_and_garbage_gets_one_repair() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config::default());
    let words = ["REFUSE", "GARBLE", "GARBLE_ONCE PASS", "NAN", "PASS"];
    let input = rows(dir.path(), words.len(), |i| words[i].to_owned());
    let out = grade(dir.path(), &input, &server, &[]);
    ok(&out);
    let rows = scored(dir.path());
    let status: Vec<&str> = rows
        .iter()
        .map(|r| r["judge_status"].as_str().unwrap())
        .collect();
    assert_eq!(
        status,
        [
            "missing_reward",
            "invalid_result",
            "ok",
            "invalid_result",
            "ok"
        ]
    );
    assert_eq!(rows[2]["reward"], 1.0);
    assert_eq!(meta(&rows[2])["repaired"], true);
    // REFUSE: one call; GARBLE: a call and its repair; GARBLE_ONCE: two; NAN: two; PASS: one.
    assert_eq!(server.requests(), 8);
    // Rerun: the replies that settle a row and those that asked for a repair all come from the
    // cache, and give the same verdicts.
    let again = grade(dir.path(), &input, &server, &[]);
    ok(&again);
    assert_eq!(server.requests(), 8, "every reply came from the cache");
    let rerun = scored(dir.path());
    for (a, b) in rows.iter().zip(&rerun) {
        for field in ["judge_status", "reward", "reason"] {
            assert_eq!(a[field], b[field], "{field}: {a} vs {b}");
        }
        assert_eq!(meta(b)["cached"], true, "{b}");
        assert_eq!(meta(a)["tokens_in"], meta(b)["tokens_in"], "{b}");
        assert_eq!(meta(a).get("repaired"), meta(b).get("repaired"), "{b}");
    }
    // Half new rows: the cached ones call nothing, the new ones one call each.
    let more = rows_named(dir.path(), "more.jsonl", 10, |i| {
        if i < words.len() {
            words[i].to_owned()
        } else {
            format!("PASS new {i}")
        }
    });
    ok(&grade(dir.path(), &more, &server, &[]));
    assert_eq!(server.requests(), 8 + 5);
}

#[test]
fn a_key_reaches_the_server_and_nothing_else_whatever_it_echoes() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "sk-test-5ecret-abcdefghijklmnop";
    let server = ModelServer::start(Config {
        latency: Duration::ZERO,
        faults: vec![(Fault::EchoKey, 1.0)],
    });
    let input = rows(dir.path(), 3, pass_fail);
    let out = wai()
        .args(["-vv", "grade"])
        .arg(&input)
        .arg("--judge")
        .arg(format!("llm:endpoint:judge-m@{}", server.url()))
        .arg("--cache")
        .arg(dir.path().join("cache"))
        .args(["--no-tools", "-o"])
        .arg(dir.path().join("out.parquet"))
        .env("VLLM_API_KEY", secret)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "a refused key stops the run");
    assert_eq!(
        server.keys_seen().first().map(String::as_str),
        Some(format!("Bearer {secret}").as_str())
    );
    for text in [&out.stdout, &out.stderr] {
        let text = String::from_utf8_lossy(text);
        assert!(!text.contains("5ecret"), "{text}");
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused the key (HTTP 401)"));
    let cache = std::fs::read(dir.path().join("cache/models.sqlite")).unwrap_or_default();
    assert!(!cache.windows(6).any(|w| w == b"5ecret"));
}

#[test]
fn anthropic_messages_are_spoken_and_map_to_the_same_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config::default());
    let input = rows(dir.path(), 4, pass_fail);
    let out = wai()
        .arg("grade")
        .arg(&input)
        .args([
            "--judge",
            "llm:anthropic:claude-test",
            "--no-tools",
            "--cache",
        ])
        .arg(dir.path().join("cache"))
        .arg("-o")
        .arg(dir.path().join("out.parquet"))
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", "anthropic-test-key-123")
        .output()
        .unwrap();
    ok(&out);
    let rewards: Vec<f64> = scored(dir.path())
        .iter()
        .map(|r| r["reward"].as_f64().unwrap())
        .collect();
    assert_eq!(rewards, [1.0, 0.0, 1.0, 0.0]);
    assert_eq!(
        server.keys_seen()[0],
        "anthropic-test-key-123",
        "sent as x-api-key"
    );
}

#[test]
fn bad_specs_and_missing_keys_stop_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let input = rows(dir.path(), 2, pass_fail);
    for (spec, needle, env) in [
        ("llm:openai/gpt-4.1-mini", "`openai:gpt-4.1-mini`", None),
        (
            "llm:gpt-4.1-mini",
            "`endpoint:gpt-4.1-mini@http://HOST:PORT/v1`",
            None,
        ),
        ("llm:openai:gpt-4.1-mini", "set OPENAI_API_KEY", None),
        (
            "llm:endpoint:m@http://10.1.2.3:8000/v1",
            "--allow-http",
            None,
        ),
        (
            "llm:endpoint:m@http://127.0.0.1:9/v1",
            "--payload-chars",
            Some("10"),
        ),
    ] {
        let mut cmd = wai();
        cmd.arg("grade")
            .arg(&input)
            .args(["--judge", spec, "--no-tools", "-o"])
            .arg(dir.path().join("o.parquet"))
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL");
        if let Some(chars) = env {
            cmd.args(["--payload-chars", chars]);
        }
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(64),
            "{spec}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{spec}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_run_killed_mid_grade_repeats_no_finished_call() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config {
        latency: Duration::from_millis(40),
        faults: vec![],
    });
    let n = 60u64;
    let input = rows(dir.path(), usize::try_from(n).unwrap(), pass_fail);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("wai"))
        .arg("grade")
        .arg(&input)
        .arg("--judge")
        .arg(format!("llm:endpoint:judge-m@{}", server.url()))
        .arg("--cache")
        .arg(dir.path().join("cache"))
        .args(["--no-tools", "--concurrency", "2", "-o"])
        .arg(dir.path().join("out.parquet"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while server.answered() < 12 && started.elapsed() < Duration::from_mins(1) {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // A request the client sent just before it died may not have been read by the server yet
    // (on a loaded machine, its thread lags): it would be counted after `before` and look like a
    // repeated call. The count is taken once it has stopped moving.
    let mut before = server.requests();
    let settle = std::time::Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let now = server.requests();
        if now == before || settle.elapsed() > Duration::from_secs(10) {
            break;
        }
        before = now;
    }
    assert!(before < n, "killed before the end ({before} requests)");
    let stats = crate::support::report_of(
        wai()
            .args(["--json", "cache", "stats", "--cache"])
            .arg(dir.path().join("cache")),
    );
    let cached = stats["entries"].as_u64().unwrap();
    assert!(cached >= 10, "{stats}");
    let out = grade(dir.path(), &input, &server, &["--concurrency", "2"]);
    ok(&out);
    assert_eq!(
        server.requests() - before,
        n - cached,
        "the rerun asked only for what was not cached"
    );
    assert_eq!(scored(dir.path()).len(), 60);
}

#[test]
fn cache_stats_and_clear() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config::default());
    let input = rows(dir.path(), 3, pass_fail);
    ok(&grade(dir.path(), &input, &server, &[]));
    let cache = dir.path().join("cache");
    let stats = crate::support::report_of(
        wai()
            .args(["--json", "cache", "stats", "--cache"])
            .arg(&cache),
    );
    assert_eq!(stats["entries"], 3);
    assert_eq!(stats["models"], json!([["endpoint:judge-m", 3]]));
    let cleared = crate::support::report_of(
        wai()
            .args(["--json", "cache", "clear", "--cache"])
            .arg(&cache),
    );
    assert_eq!(cleared["removed"], 3);
    let stats = crate::support::report_of(
        wai()
            .args(["--json", "cache", "stats", "--cache"])
            .arg(&cache),
    );
    assert_eq!(stats["entries"], 0);
}

/// Two replies per ask, the first rewarded 1 and the second 0; `texts[t]` are the final replies
/// (chosen, rejected) of ask `t`, and `prompts[t]` its ask.
fn pair_rows(dir: &Path, asks: &[(&str, &str, &str)]) -> PathBuf {
    let mut rows = Vec::new();
    for (t, (prompt, chosen, rejected)) in asks.iter().enumerate() {
        for (i, (text, reward)) in [(chosen, 1.0), (rejected, 0.0)].into_iter().enumerate() {
            rows.push(json!({"task_id": format!("t{t}"), "rollout_id": format!("r{t}-{i}"), "prompt": prompt,
                "steps": [{"tool": "lookup", "arguments": {"id": t}, "result": {"status": "ok"}}],
                "final_text": text, "reward": reward, "judge_status": "ok"}));
        }
    }
    let path = dir.join("scored.jsonl");
    write_rows(&path, &rows);
    path
}

/// `wai --json select ROWS --mode preference --judge pairwise:endpoint:judge-m@URL ...`.
fn select_pairs(
    dir: &Path,
    input: &Path,
    server: &ModelServer,
    extra: &[&str],
) -> std::process::Output {
    wai()
        .arg("--json")
        .arg("select")
        .arg(input)
        .args(["--mode", "preference", "--judge"])
        .arg(format!("pairwise:endpoint:judge-m@{}", server.url()))
        .arg("--cache")
        .arg(dir.join("cache"))
        .args(["--retry-wait", "0.001"])
        .args(extra)
        .arg("-o")
        .arg(dir.join("pairs.jsonl"))
        .env_remove("VLLM_API_KEY")
        .output()
        .unwrap()
}

#[test]
fn a_pairwise_judge_asks_both_orders_and_a_position_bias_shows_as_flips() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(Config::default());
    let input = pair_rows(
        dir.path(),
        &[
            ("refund order 1", "refunded, BETTER", "could not refund"),
            ("refund order 2", "refunded", "refunded properly, BETTER"),
            ("refund order 3", "done", "done too"),
            // The server answers A to anything that says BIASED: a judge that favours a position.
            ("BIASED refund order 4", "refunded, BETTER", "no"),
        ],
    );
    let out = select_pairs(dir.path(), &input, &server, &[]);
    ok(&out);
    assert_eq!(
        server.requests(),
        8,
        "each of the 4 pairs is asked in both orders"
    );
    let pairs = crate::support::read_jsonl(&dir.path().join("pairs.jsonl"));
    assert_eq!(pairs.len(), 4);
    let verdict = |t: usize| {
        pairs
            .iter()
            .find(|p| p["chosen"]["task_id"] == format!("t{t}"))
            .map(|p| p["pairwise"].clone())
            .unwrap()
    };
    assert_eq!(verdict(0)["winner"], "chosen");
    assert_eq!(verdict(0)["position_consistent"], true);
    assert_eq!(verdict(1)["winner"], "rejected");
    assert_eq!(verdict(2)["winner"], "tie");
    assert_eq!(verdict(2)["position_consistent"], true);
    assert_eq!(verdict(3)["winner"], "tie", "a flip is a tie");
    assert_eq!(verdict(3)["position_consistent"], false);
    assert_eq!(verdict(3)["swapped"], true);
    assert!(
        verdict(0)["judge"]
            .as_str()
            .unwrap()
            .starts_with("judge-m@")
    );
    assert!(
        pairs
            .iter()
            .all(|p| p["tie"] == (p["pairwise"]["winner"] == "tie"))
    );

    let report = envelope(&out.stdout);
    let p = &report["report"]["pairwise"];
    assert_eq!(p["pairs"], 4);
    assert_eq!(p["judged"], 4);
    assert_eq!(p["failed"], 0);
    assert_eq!(p["agrees_with_scores"]["value"], 0.25);
    assert_eq!(p["agrees_with_scores"]["n"], 4);
    assert_eq!(p["prefers_rejected"]["value"], 0.25);
    assert_eq!(p["tie_rate"]["value"], 0.5);
    assert_eq!(p["position_flip_rate"]["value"], 0.25);
    let [lo, hi] = [
        &p["position_flip_rate"]["ci95"][0],
        &p["position_flip_rate"]["ci95"][1],
    ]
    .map(|v| v.as_f64().unwrap());
    assert!(lo < 0.25 && hi > 0.25, "{p}");
    assert_eq!(p["disagreements"].as_array().unwrap().len(), 3, "{p}");
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("when the sides were swapped in 1 of 4 pairs"),
        "{warnings}"
    );
    assert!(
        warnings.contains("preferred the rejected reply in 1 of 4"),
        "{warnings}"
    );

    // A rerun asks nothing; asking once per pair needs only the first order, which is cached.
    ok(&select_pairs(dir.path(), &input, &server, &[]));
    ok(&select_pairs(dir.path(), &input, &server, &["--no-swap"]));
    assert_eq!(server.requests(), 8, "every answer came from the cache");
    let once = crate::support::read_jsonl(&dir.path().join("pairs.jsonl"));
    assert_eq!(
        once.iter()
            .filter(|p| p["pairwise"]["swapped"] == false)
            .count(),
        4
    );
    let biased = once
        .iter()
        .find(|p| p["chosen"]["task_id"] == "t3")
        .unwrap();
    assert_eq!(
        biased["pairwise"]["winner"], "chosen",
        "asked once, the bias goes unseen"
    );
    assert_eq!(biased["pairwise"]["position_consistent"], Value::Null);

    // Keeping only what the judge agreed with.
    let kept = select_pairs(dir.path(), &input, &server, &["--keep-agreed"]);
    ok(&kept);
    let kept_pairs = crate::support::read_jsonl(&dir.path().join("pairs.jsonl"));
    assert_eq!(kept_pairs.len(), 1);
    assert_eq!(kept_pairs[0]["chosen"]["task_id"], "t0");
    assert_eq!(envelope(&kept.stdout)["report"]["pairwise"]["dropped"], 3);
}

#[test]
fn a_pairwise_judge_that_fails_leaves_no_winner_and_no_silent_verdict() {
    let dir = tempfile::tempdir().unwrap();
    // Every other request fails with a 500 that retries do not outlast (no retries).
    let server = ModelServer::start(Config {
        faults: vec![(Fault::ServerError, 0.5)],
        ..Config::default()
    });
    let input = pair_rows(
        dir.path(),
        &[
            ("a", "BETTER", "x"),
            ("b", "BETTER", "x"),
            ("c", "BETTER", "x"),
            ("d", "BETTER", "x"),
        ],
    );
    let out = select_pairs(dir.path(), &input, &server, &["--retries", "0"]);
    ok(&out);
    let report = envelope(&out.stdout);
    let p = &report["report"]["pairwise"];
    let pairs = crate::support::read_jsonl(&dir.path().join("pairs.jsonl"));
    // A pair with one order answered takes that answer, without a consistency reading.
    for pair in &pairs {
        let v = &pair["pairwise"];
        match v["winner"].as_str() {
            Some(w) => assert_eq!(w, "chosen", "{v}"),
            None => assert!(v["reasons"].to_string().contains("error: "), "{v}"),
        }
        if v["reasons"].to_string().contains("error: ") {
            assert_eq!(v["position_consistent"], Value::Null, "{v}");
        }
    }
    assert_eq!(
        p["judged"].as_u64().unwrap() + p["failed"].as_u64().unwrap(),
        4,
        "{p}"
    );
}

#[test]
fn a_pairwise_judge_is_refused_where_it_does_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    let input = pair_rows(dir.path(), &[("a", "x", "y")]);
    let out = dir.path().join("out.jsonl");
    crate::support::refused(
        wai()
            .arg("select")
            .arg(&input)
            .args(["--judge", "pairwise:endpoint:m@http://127.0.0.1:9/v1", "-o"])
            .arg(&out),
        "needs `--mode preference`",
    );
    crate::support::refused(
        wai()
            .arg("select")
            .arg(&input)
            .args([
                "--mode",
                "preference",
                "--judge",
                "llm:endpoint:m@http://127.0.0.1:9/v1",
                "-o",
            ])
            .arg(&out),
        "--judge pairwise:MODEL-SPEC",
    );
    crate::support::refused(
        wai()
            .arg("select")
            .arg(&input)
            .args([
                "--mode",
                "preference",
                "--judge",
                "pairwise:gpt-4.1-mini",
                "-o",
            ])
            .arg(&out),
        "gpt-4.1-mini",
    );
    assert!(
        !out.exists(),
        "nothing is written when the options are refused"
    );
}

/// The python of a virtualenv with the `openai` and `anthropic` SDKs and the `LiteLLM` proxy from
/// PyPI (`.ci/run` makes it), or none outside CI.
fn models_python() -> Option<PathBuf> {
    let python = std::env::var_os("WAI_MODELS_PYTHON");
    if python.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set WAI_MODELS_PYTHON (see .ci/run)"
        );
        #[allow(clippy::print_stderr, reason = "a skipped test says why")]
        {
            eprintln!(
                "skipped: set WAI_MODELS_PYTHON to a python with openai, anthropic and litellm[proxy]"
            );
        }
    }
    python.map(PathBuf::from)
}

#[test]
fn the_openai_and_anthropic_sdks_read_the_test_server_as_the_real_services() {
    let Some(python) = models_python() else {
        return;
    };
    let server = ModelServer::start(Config::default());
    let out = std::process::Command::new(python)
        .arg(crate::support::fixture("models/clients_check.py"))
        .arg(server.url())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `LiteLLM` proxy (a real OpenAI-compatible server, from PyPI) on a free port of 127.0.0.1,
/// answering `judge-m` with a fixed verdict and `judge-busy` with 429s, behind `master_key`;
/// killed when dropped.
struct LiteLlm {
    child: std::process::Child,
    port: u16,
}

impl LiteLlm {
    fn start(python: &Path, dir: &Path, master_key: &str) -> Self {
        let config = dir.join("litellm.yaml");
        std::fs::write(
            &config,
            "model_list:\n  - model_name: judge-m\n    litellm_params:\n      model: openai/judge-m\n      api_key: unused\n      mock_response: '{\"reason\": \"mocked by litellm\", \"score\": 1}'\n  - model_name: judge-busy\n    litellm_params:\n      model: openai/judge-busy\n      api_key: unused\n      mock_response: litellm.RateLimitError\n",
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let litellm = python.parent().unwrap().join("litellm");
        let child = std::process::Command::new(litellm)
            .arg("--config")
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .env("LITELLM_MASTER_KEY", master_key)
            // Nothing from the network: the model cost map is the packaged one.
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("NO_PROXY", "*")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("litellm.log")).unwrap())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_mins(2),
                "LiteLLM did not listen within 120 s: {}",
                std::fs::read_to_string(dir.join("litellm.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Self { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

impl Drop for LiteLlm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_llm_judge_grades_through_a_real_openai_compatible_server() {
    let Some(python) = models_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let master = "sk-wai-litellm-master-0123456789";
    let proxy = LiteLlm::start(&python, dir.path(), master);
    let input = rows(dir.path(), 6, pass_fail);
    let judge = |model: &str, key: &str, extra: &[&str]| {
        wai()
            .arg("--json")
            .arg("grade")
            .arg(&input)
            .arg("--judge")
            .arg(format!("llm:endpoint:{model}@{}", proxy.url()))
            .arg("--no-cache")
            .args(["--no-tools", "--retry-wait", "0.01"])
            .args(extra)
            .arg("-o")
            .arg(dir.path().join("out.parquet"))
            .env("VLLM_API_KEY", key)
            .output()
            .unwrap()
    };
    let out = judge("judge-m", master, &[]);
    ok(&out);
    let graded = scored(dir.path());
    assert_eq!(graded.len(), 6);
    for r in &graded {
        assert_eq!(r["judge_status"], "ok", "{r}");
        assert_eq!(r["reward"], 1.0, "{r}");
        assert_eq!(r["reason"], "mocked by litellm", "{r}");
        assert!(meta(r)["tokens_in"].as_u64().unwrap() > 0, "{r}");
    }

    // A key the proxy does not know: without a key database LiteLLM answers every call 400 ("No
    // connected db."), not 401. Each row is an `error` that says so, never a 0; the run is
    // hollow (exit 2); and the key is printed nowhere, in the output, the report or the rows.
    let wrong = "sk-wai-not-the-master-key-987654";
    let refused = judge("judge-m", wrong, &[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    let rows = scored(dir.path());
    assert!(
        rows.iter().all(|r| r["judge_status"] == "error"
            && r["reward"].is_null()
            && r["reason"].as_str().unwrap().contains("400")),
        "{rows:?}"
    );
    let everything = format!(
        "{err}{}{}",
        String::from_utf8_lossy(&refused.stdout),
        serde_json::to_string(&rows).unwrap()
    );
    assert!(!everything.contains(wrong), "{everything}");

    // A model the proxy answers with 429s: retried, then recorded as errors, never as zeros.
    let busy = judge("judge-busy", master, &["--retries", "1"]);
    let err = String::from_utf8_lossy(&busy.stderr);
    if matches!(busy.status.code(), Some(0 | 2)) {
        assert!(
            scored(dir.path())
                .iter()
                .all(|r| r["judge_status"] == "error" && r["reward"].is_null()),
            "{err}"
        );
    } else {
        // Six rows failing in a row may trip the breaker: a clear stop, not a crash.
        assert_eq!(busy.status.code(), Some(69), "{err}");
    }
}
