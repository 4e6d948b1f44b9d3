//! `wai decontaminate`: the reference's worked examples, planted copies found and nothing else,
//! and the semantic rule with a column and a command embedder.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{read_jsonl, report_of, wai, write_rows};

/// Runs `wai --json decontaminate TRAIN --against EVAL -o OUT ARGS`: the report and the kept rows.
fn decontaminate(
    dir: &Path,
    train: &[Value],
    eval: &[Value],
    args: &[&str],
) -> (Value, Vec<Value>) {
    let (t, e, out) = (
        dir.join("train.jsonl"),
        dir.join("eval.jsonl"),
        dir.join("clean.jsonl"),
    );
    write_rows(&t, train);
    write_rows(&e, eval);
    let report = report_of(
        wai()
            .args(["--json", "decontaminate"])
            .arg(&t)
            .arg("--against")
            .arg(&e)
            .arg("-o")
            .arg(&out)
            .args(args),
    );
    (report, read_jsonl(&out))
}

fn reference_eval() -> Vec<Value> {
    vec![
        json!({"prompt": "Cancel order 9911.", "scenario_id": "e1"}),
        json!({"prompt": "cancel my order 9911 today because the shoes did not fit me", "answer": "done"}),
    ]
}

#[test]
fn the_reference_examples_are_kept_and_dropped_as_it_does() {
    // The data spec's §5 table; the counts and examples are ref_oracle.py's on these rows.
    let dir = tempfile::tempdir().unwrap();
    let train: Vec<Value> = [
        json!({"prompt": "Where is order 4473?"}),
        json!({"prompt": "Cancel order 9911."}),
        json!({"prompt": "  CANCEL   order 9911.  "}),
        json!({"prompt": "Please cancel my order 9911 today because the shoes did not fit me well at all", "scenario_id": "s2"}),
        json!({"prompt": "I would like to cancel my order 9911 today because the shoes did not fit me"}),
        json!({"prompt": "My order 9911: cancel my order 9911 today because the shoes did not fit me"}),
        json!({"prompt": "x", "scenario_id": "e1"}),
    ]
    .to_vec();
    let (report, kept) = decontaminate(dir.path(), &train, &reference_eval(), &[]);
    for (key, want) in [
        ("n", 7),
        ("n_kept", 3),
        ("n_contaminated", 4),
        ("n_same_task", 1),
        ("n_exact", 2),
        ("n_near", 1),
        ("n_eval_rows", 2),
        ("n_eval_texts", 3),
        ("eval_items_touched", 2),
    ] {
        assert_eq!(report[key], json!(want), "{key}");
    }
    assert_eq!(report["by_field"], json!({"prompt": 3, "task": 1}));
    let examples = report["examples"].as_array().unwrap();
    assert_eq!(
        examples[2],
        json!({"index": 5, "field": "prompt", "match": "cancel my order 9911 today because the shoes", "coverage": 0.8, "similarity": null, "task": null, "eval_prompt": null})
    );
    let prompts: Vec<&str> = kept.iter().map(|r| r["prompt"].as_str().unwrap()).collect();
    assert_eq!(
        prompts,
        [
            "Where is order 4473?",
            "Please cancel my order 9911 today because the shoes did not fit me well at all",
            "I would like to cancel my order 9911 today because the shoes did not fit me"
        ]
    );
    // Over 1 is refused (the reference clamps it to 1 without a word); at 1 only fully covered
    // rows flag, as the reference's clamped run does.
    crate::support::refused(
        crate::support::wai()
            .arg("decontaminate")
            .arg(crate::support::fixture("example_rows.jsonl"))
            .arg("--against")
            .arg(crate::support::fixture("example_rows.jsonl"))
            .args(["--overlap", "1.5", "--out"])
            .arg(dir.path().join("never.jsonl")),
        "1.5 is not in [0, 1]",
    );
    let (report, _) = decontaminate(dir.path(), &train, &reference_eval(), &["--overlap", "1"]);
    assert_eq!(
        (report["n_near"].clone(), report["overlap"].clone()),
        (json!(0), json!(1.0))
    );
    let full =
        vec![json!({"prompt": "Oh: cancel my order 9911 today because the shoes did not fit me"})];
    let (report, _) = decontaminate(dir.path(), &full, &reference_eval(), &["--overlap", "1"]);
    assert_eq!(report["n_near"], json!(0), "one word of 13 is not covered");
    let full = vec![json!({"prompt": "my order 9911 today because the shoes did not fit me"})];
    let (report, _) = decontaminate(dir.path(), &full, &reference_eval(), &["--overlap", "1"]);
    assert_eq!(report["n_near"], json!(1), "every word covered");
    // At --overlap 0 any shared n-gram flags.
    let (report, _) = decontaminate(dir.path(), &train, &reference_eval(), &["--overlap", "0"]);
    assert_eq!(report["n_near"], json!(3));
    // Without an embedder the semantic rule says it did not run.
    assert!(
        report["rules_skipped"]["semantic"]
            .as_str()
            .unwrap()
            .contains("no embedder")
    );
}

/// A sentence of words from a vocabulary no generated prompt uses, unique to `i`.
fn benchmark_item(i: usize) -> String {
    const WORDS: [&str; 12] = [
        "quartz", "lantern", "meadow", "cobalt", "harbor", "violet", "ember", "glacier", "saffron",
        "tundra", "willow", "zephyr",
    ];
    let w = |k: usize| WORDS[(i * 7 + k * 5) % WORDS.len()];
    format!(
        "Benchmark item {i}: estimate the {} yield of the {} {} basin using the {} method and report it",
        w(1),
        w(2),
        w(3),
        w(4)
    )
}

#[test]
fn planted_copies_are_found_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("gen.jsonl");
    let run = wai()
        .args(["-q", "gen", "--rows", "2000", "--seed", "5", "-o"])
        .arg(&rows)
        .output()
        .unwrap();
    assert!(run.status.success());
    let mut train = read_jsonl(&rows);
    let eval: Vec<Value> = (0..60)
        .map(|i| json!({"task_id": format!("bench-{i}"), "prompt": benchmark_item(i)}))
        .collect();
    // Planted: 20 light edits of eval items (case, spacing, a greeting, punctuation) under
    // training task ids; 20 rows that share only a short phrase with one must stay.
    let mut planted = Vec::new();
    for i in 0..20 {
        let text = benchmark_item(i * 3);
        let edited = match i % 4 {
            0 => text.to_uppercase(),
            1 => format!("Hi there! {text}"),
            2 => format!("{text}, thanks."),
            _ => text.replace(' ', "  "),
        };
        planted.push(train.len());
        train.push(json!({"task_id": format!("train-plant-{i}"), "prompt": edited}));
    }
    for i in 0..20 {
        train.push(json!({"task_id": format!("train-near-miss-{i}"),
            "prompt": format!("Can you estimate the yield for me? I read about item {i} in a blog and I am curious about basins")}));
    }
    let (report, kept) = decontaminate(dir.path(), &train, &eval, &[]);
    assert_eq!(report["n_contaminated"], json!(20), "{report:#}");
    assert_eq!(report["n_same_task"], json!(0));
    assert_eq!(report["eval_items_touched"], json!(20));
    let flagged: Vec<u64> = report["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    assert_eq!(
        flagged,
        planted.iter().map(|&i| i as u64).collect::<Vec<_>>()
    );
    assert_eq!(kept.len(), train.len() - 20);
}

/// A deterministic embedder: each word hashed into one of 64 dimensions (a bag of words), so a
/// reordering of a text is the same vector.
const EMBEDDER: &str = r#"
import hashlib, json, sys
for line in sys.stdin:
    req = json.loads(line)
    out = []
    for t in req["texts"]:
        v = [0.0] * 64
        for w in "".join(c if c.isalnum() else " " for c in t.lower()).split():
            v[int(hashlib.md5(w.encode()).hexdigest(), 16) % 64] += 1.0
        out.append(v)
    print(json.dumps({"id": req["id"], "vectors": out}), flush=True)
"#;

#[test]
fn a_command_embedder_catches_a_reordered_copy_the_text_rules_miss() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("embed.py");
    std::fs::write(&script, EMBEDDER).unwrap();
    let spec = format!("cmd:python3 {}", script.display());
    let mut eval = reference_eval();
    eval.push(json!({"prompt": "What is the capital of France?", "scenario_id": "e3"}));
    eval.push(json!({"prompt": "How tall is Mount Everest?", "scenario_id": "e4"}));
    let train = vec![
        json!({"prompt": "because the shoes did not fit me, cancel my order 9911 today", "scenario_id": "t1"}),
        json!({"prompt": "Tell me a joke about penguins.", "scenario_id": "t2"}),
    ];
    let (plain, _) = decontaminate(dir.path(), &train, &eval, &[]);
    assert_eq!(plain["n_contaminated"], json!(0));
    let (report, kept) = decontaminate(dir.path(), &train, &eval, &["--embedder", &spec]);
    assert_eq!(report["n_semantic"], json!(1), "{report:#}");
    assert_eq!(kept.len(), 1);
    let hit = &report["examples"][0];
    assert_eq!(hit["match"], json!("semantic"));
    assert!(hit["similarity"].as_f64().unwrap() > 0.99);
    assert!(report["rules_skipped"].get("semantic").is_none());
    // Three eval prompts with task ids: three pairs of distinct tasks to calibrate on.
    assert!(report["calibration_p99"].is_number(), "{report:#}");
    assert!(
        report["notes"]
            .to_string()
            .contains("distinct tasks read up to")
    );
}

#[test]
fn a_column_embedder_reads_vectors_from_the_rows_and_says_which_rows_had_none() {
    let dir = tempfile::tempdir().unwrap();
    let eval = vec![
        json!({"prompt": "alpha", "task_id": "e1", "emb": [1.0, 0.0]}),
        json!({"prompt": "beta", "task_id": "e2", "emb": [0.0, 1.0]}),
    ];
    let train = vec![
        // Close to e1's vector, another task: flagged.
        json!({"prompt": "gamma", "task_id": "t1", "emb": [0.99, 0.05]}),
        // Close to nothing: kept.
        json!({"prompt": "delta", "task_id": "t2", "emb": [0.7, -0.7]}),
        // No vector: kept, and counted.
        json!({"prompt": "epsilon", "task_id": "t3"}),
    ];
    let (report, kept) = decontaminate(
        dir.path(),
        &train,
        &eval,
        &["--embedder", "column:emb", "--similarity", "0.9"],
    );
    assert_eq!(report["n_semantic"], json!(1), "{report:#}");
    assert_eq!(kept[0]["prompt"], json!("delta"));
    assert_eq!(report["examples"][0]["eval_prompt"], json!("alpha"));
    assert!(
        report["notes"]
            .to_string()
            .contains("1 of 3 training rows have no vector in extra.emb"),
        "{:#}",
        report["notes"]
    );
}

/// A local OpenAI-compatible `/v1/embeddings` endpoint with the bag-of-words vectors above; it
/// wants `Authorization: Bearer sk-test`. Prints its port, then serves.
const SERVER: &str = r#"
import hashlib, http.server, json, sys
def vec(t):
    v = [0.0] * 64
    for w in "".join(c if c.isalnum() else " " for c in t.lower()).split():
        v[int(hashlib.md5(w.encode()).hexdigest(), 16) % 64] += 1.0
    return v
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/embeddings" or self.headers.get("Authorization") != "Bearer sk-test":
            self.send_response(401); self.end_headers(); self.wfile.write(b'{"error": "bad key"}'); return
        data = [{"index": i, "embedding": vec(t)} for i, t in reversed(list(enumerate(body["input"])))]
        out = json.dumps({"object": "list", "model": body["model"], "data": data}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

#[test]
fn an_openai_compatible_endpoint_embeds_and_a_refusal_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, port) = start_server(dir.path(), "server.py", SERVER);
    let spec = format!("openai:bow-64@http://127.0.0.1:{}/v1", port.trim());
    let mut eval = reference_eval();
    eval.push(json!({"prompt": "What is the capital of France?", "scenario_id": "e3"}));
    let train = vec![
        json!({"prompt": "because the shoes did not fit me, cancel my order 9911 today", "scenario_id": "t1"}),
        json!({"prompt": "Tell me a joke about penguins.", "scenario_id": "t2"}),
    ];
    let (t, e, out) = (
        dir.path().join("train.jsonl"),
        dir.path().join("eval.jsonl"),
        dir.path().join("clean.jsonl"),
    );
    write_rows(&t, &train);
    write_rows(&e, &eval);
    let run = |key: &str| {
        wai()
            .env("OPENAI_API_KEY", key)
            .args(["--json", "decontaminate"])
            .arg(&t)
            .arg("--against")
            .arg(&e)
            .args(["--embedder", &spec, "-o"])
            .arg(&out)
            .output()
            .unwrap()
    };
    let refused = run("sk-wrong");
    let err = String::from_utf8_lossy(&refused.stderr).into_owned();
    let ok = run("sk-test");
    let _ = server.kill();
    let _ = server.wait();
    assert!(!refused.status.success());
    assert!(
        err.contains("HTTP 401") && !err.contains("sk-wrong"),
        "{err}"
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let report: Value = crate::support::envelope(&ok.stdout)["report"].clone();
    assert_eq!(report["n_semantic"], json!(1), "{report:#}");
    assert_eq!(read_jsonl(&out).len(), 1);
}

#[test]
fn every_dropped_row_can_be_listed_for_review() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("dropped.jsonl");
    let train = vec![
        json!({"prompt": "Cancel order 9911.", "rollout_id": "r-exact"}),
        json!({"prompt": "Where is order 4473?", "rollout_id": "r-kept"}),
        json!({"prompt": "x", "scenario_id": "e1", "rollout_id": "r-task"}),
    ];
    let (report, kept) = decontaminate(
        dir.path(),
        &train,
        &reference_eval(),
        &["--dropped", list.to_str().unwrap()],
    );
    assert_eq!(report["n_contaminated"], json!(2));
    assert_eq!(kept.len(), 1);
    let lines = read_jsonl(&list);
    let got: Vec<(&str, &str, u64)> = lines
        .iter()
        .map(|l| {
            (
                l["rollout_id"].as_str().unwrap(),
                l["rule"].as_str().unwrap(),
                l["index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [("r-exact", "exact", 0), ("r-task", "same_task", 2)]);
}

/// A server that refuses every request with a 401 whose body quotes the key it was sent, the
/// way some proxies do.
const ECHO_SERVER: &str = r#"
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        auth = self.headers.get("Authorization", "")
        key = auth.split(" ", 1)[-1]
        body = json.dumps({"error": f"Incorrect API key provided: {key}. You sent Authorization: {auth}"}).encode()
        self.send_response(401); self.end_headers(); self.wfile.write(body)
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

// Issue #29, item 13: an API key was printed when the server echoed it, and URL credentials
// were printed in errors.
#[test]
fn a_key_the_server_echoes_and_url_credentials_are_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, port) = start_server(dir.path(), "echo.py", ECHO_SERVER);
    let (t, e) = (
        dir.path().join("train.jsonl"),
        dir.path().join("eval.jsonl"),
    );
    write_rows(
        &t,
        &[json!({"prompt": "Tell me a joke about penguins.", "scenario_id": "t1"})],
    );
    write_rows(&e, &reference_eval());
    let key = "k3y-live-0123456789abcdef";
    // With credentials in the URL, the client sends them (HTTP basic); without, the key.
    for (verbose, userinfo) in [
        (false, "alice:hunter2-pass@"),
        (true, "alice:hunter2-pass@"),
        (false, ""),
        (true, ""),
    ] {
        let mut cmd = wai();
        cmd.env("OPENAI_API_KEY", key);
        if verbose {
            cmd.arg("-vv");
        }
        let out = cmd
            .arg("decontaminate")
            .arg(&t)
            .arg("--against")
            .arg(&e)
            .args([
                "--embedder",
                &format!("openai:m@http://{userinfo}127.0.0.1:{}/v1", port.trim()),
                "-o",
            ])
            .arg(dir.path().join("clean.jsonl"))
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success());
        assert!(all.contains("HTTP 401"), "{all}");
        assert!(
            all.contains("Incorrect API key provided: [redacted]"),
            "{all}"
        );
        assert!(!all.contains(key), "the key is printed: {all}");
        if !userinfo.is_empty() {
            assert!(all.contains("alice:[redacted]@"), "{all}");
            assert!(!all.contains("hunter2-pass"), "the URL password: {all}");
            assert!(
                !all.contains("YWxpY2U6aHVudGVyMi1wYXNz"),
                "the basic credentials: {all}"
            );
        }
    }
    let _ = server.kill();
    let _ = server.wait();
}

/// Decontaminating the training rows against themselves drops every row by `same_task`: the
/// report says how many eval tasks were touched (it said "0 eval items touched") and warns
/// that everything went (#30 item 15).
#[test]
fn a_total_drop_is_called_out_and_the_tasks_it_touched_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("clean.jsonl");
    let r = crate::support::report_of(
        crate::support::wai()
            .args(["--json", "decontaminate"])
            .arg(crate::support::fixture("example_rows.jsonl"))
            .arg("--against")
            .arg(crate::support::fixture("example_rows.jsonl"))
            .arg("--out")
            .arg(&out),
    );
    assert_eq!(r["n_kept"], 0, "{r}");
    assert_eq!(r["eval_tasks_touched"], 50, "{r}");
    assert!(
        r["notes"]
            .to_string()
            .contains("every training row was dropped (200 of 200)"),
        "{r}"
    );
}

/// The `--json` envelope names what was read and written: the kept rows with their count, the
/// dropped list, and the notes as coded warnings.
#[test]
fn the_envelope_lists_the_inputs_the_outputs_and_coded_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let (t, e, out, list) = (
        dir.path().join("train.jsonl"),
        dir.path().join("eval.jsonl"),
        dir.path().join("clean.jsonl"),
        dir.path().join("dropped.jsonl"),
    );
    write_rows(
        &t,
        &[
            json!({"prompt": "Cancel order 9911."}),
            json!({"prompt": "Where is order 4473?"}),
        ],
    );
    write_rows(&e, &reference_eval());
    let run = wai()
        .args(["--json", "decontaminate"])
        .arg(&t)
        .arg("--against")
        .arg(&e)
        .arg("-o")
        .arg(&out)
        .arg("--dropped")
        .arg(&list)
        .output()
        .unwrap();
    assert!(run.status.success());
    let doc = crate::support::envelope(&run.stdout);
    assert_eq!(
        doc["inputs"],
        json!([t.display().to_string(), e.display().to_string()])
    );
    assert_eq!(
        doc["outputs"],
        json!([
            {"path": out.display().to_string(), "kind": "rows", "rows": 1},
            {"path": list.display().to_string(), "kind": "file", "rows": 1},
        ])
    );
    let codes: Vec<&str> = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["same_task_skipped", "no_embedder"]);
    assert_eq!(doc["report"]["n_kept"], json!(1));
}

/// The `--dropped` list is an output like the others: naming an input for it is refused before
/// anything is read, and the input is left as it was.
#[test]
fn the_dropped_list_never_replaces_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train.jsonl");
    let rows = crate::support::fixture("example_rows.jsonl");
    std::fs::copy(&rows, &train).unwrap();
    let before = std::fs::read(&train).unwrap();
    let out = wai()
        .arg("decontaminate")
        .arg(&train)
        .arg("--against")
        .arg(&rows)
        .arg("--dropped")
        .arg(&train)
        .arg("-o")
        .arg(dir.path().join("clean.jsonl"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("is an input"), "{err}");
    assert_eq!(std::fs::read(&train).unwrap(), before);
    assert!(!dir.path().join("clean.jsonl").exists());
}

/// Starts the Python server `source` (written to `dir/name`) and returns it with the port it
/// printed on its first line.
fn start_server(dir: &std::path::Path, name: &str, source: &str) -> (std::process::Child, String) {
    use std::io::BufRead;
    let script = dir.join(name);
    std::fs::write(&script, source).unwrap();
    let mut server = std::process::Command::new("python3")
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    (server, port)
}
