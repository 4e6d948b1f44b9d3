//! Every command's `--json` document is the envelope of `docs/json.schema.json`.

use std::path::Path;

use crate::support::{envelope, fixture, wai};

/// Runs `wai --json ARGS` in `dir` and holds what it printed to the schema, whatever the exit
/// status (a failed gate still prints its envelope).
fn check(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = wai()
        .current_dir(dir)
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0..=2)),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = envelope(&out.stdout);
    let command = args[0];
    assert!(
        doc["command"].as_str().unwrap().starts_with(command),
        "{args:?}: {}",
        doc["command"]
    );
    doc
}

/// Every command, its arguments split on `|`: `{F}` is the fixtures folder. In order: later
/// commands read what earlier ones wrote.
const COMMANDS: &[&str] = &[
    "gen|--rows|2000|--seed|1|-o|a.parquet",
    "gen|--rows|2000|--seed|2|-o|b.parquet",
    "gen|--rows|400|--seed|3|-o|eval.parquet",
    "demo|--dir|demo|--budget|400",
    "convert|a.parquet|-o|a.jsonl",
    "ingest|{F}/chat_rollouts.jsonl|-o|chat.parquet|--rejects|chat.rej",
    "ingest|{F}/tau_bench_airline_sample.json|-o|tau.parquet",
    "sql|SELECT count(*) AS n FROM rows|--table|a.parquet",
    "sql|--list",
    "pass-at|a.parquet|--by|dims.tier",
    "markers|a.parquet",
    "gate|demo/scored.parquet|--floor|0.5|--no-tools",
    "variance|a.parquet|b.parquet",
    "compare|a.parquet|b.parquet",
    "holdout-size|--effect|0.05",
    "hack-scan|a.parquet|--perms|20",
    "judge-trust|{F}/example_scored.jsonl|--judge|sql:reward > 0.5",
    "compare-judges|gold.jsonl|--judge|a=sql:reward > 0.5|--judge|b=sql:reward > 0.9",
    "labels|attach|{F}/example_scored.jsonl|{F}/example_scored.jsonl|-o|labelled.parquet",
    "grade|a.parquet|--judge|sql:length(final_text) > 40|-o|g.parquet|--no-tools",
    "decontaminate|a.parquet|--against|eval.parquet|-o|clean.parquet",
    "select|a.parquet|-o|sft.jsonl|--mode|sft|--target|200",
    "select|a.parquet|-o|pref.jsonl|--mode|preference|--target|200",
    "export|sft.jsonl|-o|ft.jsonl|--format|openai",
    "export|pref.jsonl|-o|dpo.jsonl|--format|dpo",
    "preflight|--tools|{F}/example_tools.json|--policy|{F}/example_policy.md",
    "coverage-gap|{F}/example_scored.jsonl|--tools|{F}/example_tools.json",
    "simulate|--tools|{F}/example_tools.json|--policy|{F}/example_policy.md|--budget|100|-o|sim.parquet",
    "init-evals|--tools|{F}/example_tools.json|--policy|{F}/example_policy.md|--dir|evals",
    "cache|stats|--cache|model-cache",
    "cache|clear|--cache|model-cache",
    "run|pipe.toml",
    "lake|status|lake",
    "lake|compact|lake|--dry-run",
    "lake|compact|lake",
    "lake|init|lake2",
    "collect|--lake|clake|--listen|127.0.0.1:0|--once|--idle|100ms",
    "report|demo/scored.parquet|lake|--out|page.html",
];

#[test]
fn every_command_prints_the_envelope() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Rows with hand labels, for compare-judges.
    let gold: Vec<serde_json::Value> = (0..40)
        .map(|i| {
            serde_json::json!({"task_id": format!("t{i}"), "prompt": "q", "final_text": "a".repeat(i % 7),
                "reward": i % 2, "gold_reward": (i / 2) % 2, "gold_kind": "human"})
        })
        .collect();
    crate::support::write_rows(&d.join("gold.jsonl"), &gold);
    std::fs::write(
        d.join("pipe.toml"),
        "lake = \"lake\"\n[input]\npaths = [\"gold.jsonl\"]\n[[stage]]\nrun = \"pass-at\"\n",
    )
    .unwrap();
    // A collector's log holding one span (as a killed collector leaves it): `--once` replays
    // it, writes its row and stops.
    let wal = d.join("clake/_wai/collect/wal");
    std::fs::create_dir_all(&wal).unwrap();
    let span = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"chat","startTimeUnixNano":"1796400000000000000","attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},{"key":"gen_ai.input.messages","value":{"stringValue":"[{\"role\":\"user\",\"content\":\"hi\"}]"}}]}]}]}]}"#;
    std::fs::write(wal.join("00000000000000000000.jsonl"), format!("{span}\n")).unwrap();
    let fixtures = fixture("");
    let fixtures = fixtures.to_str().unwrap().trim_end_matches('/');
    let mut seen = std::collections::BTreeSet::new();
    for line in COMMANDS {
        let line = line.replace("{F}", fixtures);
        let args: Vec<&str> = line.split('|').collect();
        let doc = check(d, &args);
        seen.insert(args[0].to_owned());
        if args[0] == "gen" {
            assert!(doc["outputs"][0]["rows"].as_u64().unwrap() > 0, "{doc}");
        }
        if args[0] == "export" {
            assert!(!doc["outputs"].as_array().unwrap().is_empty(), "{doc}");
        }
    }
    // A worker prints its document when a signal stops it.
    seen.insert(worker_document());
    // Every command of `wai --help` is here but `help` and the hidden coverage study.
    let help = wai().arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(listed.len() >= 23, "{listed:?}");
    for c in &listed {
        assert!(seen.contains(*c), "`wai {c}` has no --json case here");
    }
}

/// `wai --json worker`, stopped by SIGTERM once it listens: its document, held to the schema.
fn worker_document() -> String {
    use std::io::BufRead as _;
    /// Killed when dropped, should an assertion fail first.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Child(
        std::process::Command::new(assert_cmd::cargo::cargo_bin("wai"))
            .args(["--json", "worker", "--listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // The log is read to its end (a closed pipe is no way to stop a worker).
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("\"listening\"") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(std::time::Duration::from_mins(1))
        .expect("the worker listens");
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.0.stdout.take().unwrap(), &mut stdout).unwrap();
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let doc = envelope(stdout.as_bytes());
    assert_eq!(doc["command"], "worker", "{doc}");
    assert_eq!(doc["report"]["tasks"], 0, "{doc}");
    "worker".into()
}
