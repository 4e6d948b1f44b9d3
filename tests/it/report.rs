//! `wai report`: the page's data against each stage's own report, every input kind, sampling,
//! hostile rows, and the page itself in headless Chromium (`WAI_BROWSER_PYTHON`, a python with
//! Playwright's client, and `WAI_CHROMIUM`; `.ci/run` installs both; skipped without them).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::{fixture, gen_rows, json_of, succeeded, wai, write_rows};

/// The JSON a page embeds (`#wai-data`).
fn page_data(page: &Path) -> Value {
    let html = std::fs::read_to_string(page).unwrap();
    let open = "<script id=\"wai-data\" type=\"application/json\">";
    let start = html.find(open).expect("the page embeds its data") + open.len();
    let end = start + html[start..].find("</script>").unwrap();
    serde_json::from_str(&html[start..end]).unwrap()
}

/// The anchors of the sections a `wai --json report` document says it drew.
fn sections_of(doc: &Value) -> Vec<&str> {
    doc["report"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

/// `wai --json ARGS`'s report.
fn report_of(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Value {
    let mut cmd = wai();
    cmd.arg("--json");
    for a in args {
        cmd.arg(a);
    }
    let out = cmd.output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    doc["report"].clone()
}

/// Writes `wai --json ARGS`'s whole document to `path` (exit code not checked: a FAIL verdict
/// still writes its document).
fn document(path: &Path, args: &[&dyn AsRef<std::ffi::OsStr>]) -> PathBuf {
    let mut cmd = wai();
    cmd.arg("--json");
    for a in args {
        cmd.arg(a);
    }
    let out = cmd.output().unwrap();
    assert!(
        serde_json::from_slice::<Value>(&out.stdout).is_ok(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(path, &out.stdout).unwrap();
    path.to_path_buf()
}

fn demo(dir: &Path) -> PathBuf {
    succeeded(
        wai()
            .args(["demo", "--budget", "600", "--dir"])
            .arg(dir.join("demo")),
    );
    dir.join("demo")
}

#[test]
fn the_demo_page_holds_each_stages_own_figures() {
    let dir = tempfile::tempdir().unwrap();
    let demo = demo(dir.path());
    let scored = demo.join("scored.parquet");
    let data = page_data(&demo.join("report.html"));
    assert_eq!(data["version"], 1);

    // pass@k and its slices: what `wai pass-at --by ...` prints for the same slices.
    let page_pass = &data["pass_at"][0]["report"];
    let by: Vec<String> = page_pass["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["by"].as_str().unwrap().to_owned())
        .fold(Vec::new(), |mut v, b| {
            if !v.contains(&b) {
                v.push(b);
            }
            v
        });
    assert_eq!(by[0], "dims.tier", "tier is drawn first");
    assert!(by.len() >= 2, "{by:?}");
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"pass-at", &scored];
    let flags: Vec<String> = by.iter().map(|b| format!("--by={b}")).collect();
    for f in &flags {
        args.push(f);
    }
    let cli = report_of(&args);
    assert_eq!(page_pass["results"], cli["results"]);
    assert_eq!(page_pass["slices"], cli["slices"]);

    // The warnings are the gate's.
    let gate = report_of(&[&"gate", &scored, &"--floor", &"0"]);
    let gate_words: Vec<&str> = gate["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["text"].as_str().unwrap())
        .collect();
    let page_words: Vec<&str> = data["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["message"].as_str().unwrap())
        .collect();
    assert!(!gate_words.is_empty());
    for w in &gate_words {
        assert!(page_words.contains(w), "{w} missing from {page_words:?}");
    }

    // Markers: `wai markers`.
    let markers = report_of(&[&"markers", &scored]);
    assert_eq!(data["markers"][0]["report"]["markers"], markers["markers"]);
    assert!(!markers["markers"].as_object().unwrap().is_empty());

    // Failures: the canned query.
    let failures = crate::support::sql_jsonl(&["--query", "failures_by_tool_tier"], &scored);
    assert_eq!(data["failures"]["report"], Value::from(failures));

    // 600 rows fit: every row is carried, failures first, each with its tool calls.
    let t = &data["transcripts"];
    assert_eq!(t["n_rows"], 600);
    assert_eq!(t["n_shown"], 600);
    let rows = t["rows"].as_array().unwrap();
    let failed = rows
        .iter()
        .take_while(|r| r["reward"].as_f64().is_some_and(|x| x < 1.0))
        .count();
    assert_eq!(
        failed as u64,
        t["counts"]["total"]["fail"].as_u64().unwrap()
    );
    assert!(
        rows[failed..]
            .iter()
            .all(|r| r["reward"].as_f64() == Some(1.0))
    );
    let call = rows
        .iter()
        .flat_map(|r| r["turns"].as_array().unwrap())
        .find(|t| t["kind"] == "tool")
        .expect("a row with a tool call");
    assert!(call["args"].as_str().unwrap().contains('{'), "{call}");
    assert!(call["result"].as_str().unwrap().contains('{'), "{call}");
    // A fault the world injected is named on the call it answered.
    assert!(
        rows.iter()
            .flat_map(|r| r["turns"].as_array().unwrap())
            .any(|t| t["fault"].is_string()),
        "no injected fault named on a call"
    );

    // The page draws one forest plot per slice, one mark per value.
    let html = std::fs::read_to_string(demo.join("report.html")).unwrap();
    let tiers = page_pass["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["by"] == "dims.tier")
        .count();
    let plot = html
        .split("<div class=\"forest-plot\" data-by=\"dims.tier\">")
        .nth(1)
        .unwrap();
    let plot = &plot[..plot.find("</svg>").unwrap()];
    assert_eq!(plot.matches("<g class=\"mark\"").count(), tiers);
    let outside = html.replace("http://www.w3.org/2000/svg", "");
    assert!(
        !outside.contains("http://") && !outside.contains("https://"),
        "the page names no address to fetch"
    );
}

#[test]
fn documents_and_a_lake_each_make_their_section() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rows = d.join("rows.jsonl");
    gen_rows(&rows, 400, 3);
    let worse = d.join("worse.jsonl");
    gen_rows(&worse, 400, 4);
    let compare = document(&d.join("compare.json"), &[&"compare", &rows, &worse]);
    let trust = document(&d.join("trust.json"), &[&"judge-trust", &rows]);
    let hack = document(&d.join("hack.json"), &[&"hack-scan", &rows]);
    let select = document(
        &d.join("select.json"),
        &[
            &"select",
            &rows,
            &"--mode",
            &"rl",
            &"-o",
            &d.join("sel.jsonl"),
        ],
    );
    let decon = document(
        &d.join("decon.json"),
        &[
            &"decontaminate",
            &rows,
            &"--against",
            &worse,
            &"-o",
            &d.join("clean.jsonl"),
        ],
    );
    let sql = document(
        &d.join("sql.json"),
        &[&"sql", &"SELECT 1 AS one", &"--table", &rows],
    );
    // A lake with two nights of a pass-at stage: a file lands, a run; another, a run.
    let lake = d.join("lake");
    std::fs::create_dir_all(d.join("in")).unwrap();
    std::fs::write(
        d.join("p.toml"),
        format!(
            "lake = {:?}\n[input]\npaths = [{:?}]\n[[stage]]\nrun = \"pass-at\"\nby = [\"dims.category\"]\n",
            lake.display().to_string(),
            d.join("in/*.jsonl").display().to_string()
        ),
    )
    .unwrap();
    std::fs::copy(&rows, d.join("in/night1.jsonl")).unwrap();
    succeeded(wai().arg("run").arg(d.join("p.toml")));
    std::fs::copy(&worse, d.join("in/night2.jsonl")).unwrap();
    succeeded(wai().arg("run").arg(d.join("p.toml")));

    let page = d.join("page.html");
    let doc = json_of(
        wai()
            .arg("--json")
            .arg("report")
            .args([&compare, &trust, &hack, &select, &decon, &sql, &lake])
            .arg("--out")
            .arg(&page),
    );
    let sections = sections_of(&doc);
    for s in ["compare", "judge-trust", "hack-scan", "funnel", "trend"] {
        assert!(sections.contains(&s), "{s} not in {sections:?}");
    }
    assert!(!sections.contains(&"transcripts"), "no rows were given");
    assert_eq!(doc["report"]["not_shown"][0]["command"], "sql");
    assert_eq!(doc["outputs"][0]["path"], page.display().to_string());

    let data = page_data(&page);
    let cli_compare: Value =
        serde_json::from_str(&std::fs::read_to_string(&compare).unwrap()).unwrap();
    assert_eq!(data["compare"][0]["report"], cli_compare["report"]);
    let runs: std::collections::BTreeSet<&str> = data["trend"][0]["pass_at"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "two runs drawn over time");
    let html = std::fs::read_to_string(&page).unwrap();
    let word = cli_compare["report"]["headline_word"].as_str().unwrap();
    assert!(html.contains(word), "{word}");
    let regime = data["hack_scan"][0]["report"]["regime"].as_str().unwrap();
    assert!(html.contains(&format!(">{regime}</span>")));
    // The funnel ends at what select kept.
    let kept = data["select"][0]["report"]["n_selected"].as_u64().unwrap();
    assert!(html.contains(&format!("{kept} kept (")), "{kept}");

    // A `.json` that is no wai document is refused, naming it; nothing is written.
    let stray = d.join("stray.json");
    std::fs::write(&stray, "{\"rows\": []}").unwrap();
    let again = d.join("again.html");
    let out = wai()
        .arg("report")
        .arg(&stray)
        .arg("--out")
        .arg(&again)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stray.json"));
    assert!(!again.exists());
}

#[test]
fn a_large_run_is_sampled_failures_first_and_alike_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.parquet");
    gen_rows(&rows, 3000, 5);
    let page = |name: &str, seed: &str, threads: &str| {
        let out = dir.path().join(name);
        succeeded(
            wai()
                .env("RAYON_NUM_THREADS", threads)
                .arg("report")
                .arg(&rows)
                .args(["--max-rows", "100", "--seed", seed, "--out"])
                .arg(&out),
        );
        out
    };
    let a = page("a.html", "0", "1");
    let b = page("b.html", "0", "2");
    let c = page("c.html", "1", "2");
    let bytes = |p: &Path| std::fs::read(p).unwrap();
    assert_eq!(bytes(&a), bytes(&b), "same seed, same page");
    let data = page_data(&a);
    let t = &data["transcripts"];
    assert_eq!(t["n_rows"], 3000);
    assert_eq!(t["n_shown"], 100);
    let count = |which: &str, stratum: &str| t["counts"][which][stratum].as_u64().unwrap();
    let (fail, pass, unjudged) = (
        count("total", "fail"),
        count("total", "pass"),
        count("total", "unjudged"),
    );
    assert!(fail > 100 && pass > 100, "both strata are large: {t}");
    // 60/30/10, and the places an empty stratum leaves shared in proportion.
    let want = if unjudged == 0 { (67, 33) } else { (60, 30) };
    assert_eq!(
        (count("shown", "fail"), count("shown", "pass")),
        want,
        "{}",
        t["counts"]
    );
    assert!(t["sampling"].as_str().unwrap().contains("seeded with 0"));
    let ids = |p: &Path| -> Vec<String> {
        page_data(p)["transcripts"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_ne!(ids(&a), ids(&c), "another seed, another sample");
    let html = std::fs::read_to_string(&a).unwrap();
    assert!(html.contains("This page holds 100 of 3000 rows"));
}

#[test]
fn rows_that_share_ids_are_sampled_alike_in_any_input_order() {
    // Two `wai gen` files of other seeds: the same task ids and rollout ids, other rows.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    gen_rows(&a, 1500, 1);
    gen_rows(&b, 1500, 2);
    let page = |name: &str, first: &Path, second: &Path| {
        let out = dir.path().join(name);
        succeeded(
            wai()
                .arg("report")
                .arg(first)
                .arg(second)
                .args(["--max-rows", "100", "--out"])
                .arg(&out),
        );
        page_data(&out)["transcripts"].clone()
    };
    let ab = page("ab.html", &a, &b);
    let ba = page("ba.html", &b, &a);
    assert_eq!(
        ab, ba,
        "the sample is a function of the rows, not of their order"
    );
    let rows = ab["rows"].as_array().unwrap();
    assert!(rows.len() <= 100, "{}", rows.len());
    let keys: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), rows.len(), "every row has its own key");
    assert!(
        rows.iter()
            .any(|r| r["key"].as_str().unwrap().contains('#')),
        "rows sharing an id are both carried, told apart"
    );
    assert_eq!(ab["n_rows"], 3000);
}

/// Rows whose every text is markup or script, and a key-shaped secret.
fn hostile_rows(path: &Path) {
    let rows: Vec<Value> = (0..4)
        .map(|i| {
            json!({
                "task_id": format!("t<b>{}</b>", i % 2),
                "rollout_index": i,
                "prompt": format!("<script>alert({i})</script> refund <img src=x onerror=alert('p{i}')>"),
                "steps": [{"tool": "<svg onload=alert(9)>", "arguments": {"q": "</script><script>alert(3)</script>"},
                           "result": {"error": "<iframe src=javascript:alert(4)>"}}],
                "final_text": "done sk-abcdefghijklmnop1234 </textarea><b onmouseover=alert(5)>x</b>",
                "reward": f64::from(i % 2),
                "reason": "<a href=javascript:alert(6)>why</a>",
                "dims": {"tier": "<i>hard</i>"},
                "markers": {"<u>rule</u>": 0.0},
            })
        })
        .collect();
    write_rows(path, &rows);
}

/// A configured secret (an environment variable whose name ends in `_KEY`).
const SECRET: &str = "zz-configured-secret-0123456789";

#[test]
fn hostile_rows_are_text_on_the_page_and_secrets_are_not_there() {
    let dir = tempfile::tempdir().unwrap();
    // The secret is in the rows' folder name (every section names its input) and in a row's
    // prompt where `--max-chars 80` cuts it.
    let folder = dir.path().join(SECRET);
    std::fs::create_dir_all(&folder).unwrap();
    let rows = folder.join("hostile.jsonl");
    hostile_rows(&rows);
    let mut text = std::fs::read_to_string(&rows).unwrap();
    let straddling = json!({"task_id": "s", "rollout_index": 0, "reward": 0.0,
        "prompt": format!("{}{SECRET} and more", "x".repeat(70)), "final_text": "ok"});
    text.push_str(&straddling.to_string());
    text.push('\n');
    std::fs::write(&rows, text).unwrap();
    let page = dir.path().join("page.html");
    succeeded(
        wai()
            .env("WAI_REPORT_TEST_KEY", SECRET)
            .arg("report")
            .arg(&rows)
            .args(["--max-chars", "80", "--out"])
            .arg(&page),
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("zz-configured"),
        "a configured secret or a prefix of it reached the page"
    );
    assert!(html.contains("[redacted]"));
    for raw in [
        "<script>alert",
        "<img src=x",
        "<svg onload",
        "<iframe",
        "<b onmouseover",
        "<a href=javascript",
        "<i>hard</i>",
        "<u>rule</u>",
    ] {
        assert!(!html.contains(raw), "{raw} reached the page as markup");
    }
    assert!(
        !html.contains("sk-abcdefghijklmnop1234"),
        "a key-shaped word reached the page"
    );
    // The words are there, as data.
    let data = page_data(&page);
    let hostile = data["transcripts"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["task"] == "t<b>0</b>")
        .expect("a hostile row is carried")
        .clone();
    assert!(
        hostile["prompt"]
            .as_str()
            .unwrap()
            .contains("<script>alert(")
    );
    if let Some(browser) = Browser::from_env() {
        let seen = browser.check(
            &page,
            dir.path(),
            &json!({"search": "refund", "id": hostile["key"], "bad_hash": "#row=%E0%A4%A"}),
        );
        assert_eq!(seen["dialogs"], json!([]), "no script from a row ran");
        assert_eq!(seen["page_errors"], json!([]));
        assert_eq!(seen["console_errors"], json!([]));
        assert_eq!(
            seen["bad_hash_errors"],
            json!([]),
            "a malformed address is no error"
        );
        let text = seen["row_text"].as_str().unwrap();
        assert!(
            text.contains("<script>alert("),
            "the prompt is shown as text: {text}"
        );
        assert!(text.contains("<svg onload=alert(9)>"), "{text}");
    }
}

/// A python with Playwright's client and Debian's chromium, when the environment names both.
struct Browser {
    python: String,
    chromium: String,
}

impl Browser {
    /// The browser, or `None` (a skip) outside CI; CI must name both.
    fn from_env() -> Option<Self> {
        let found = std::env::var("WAI_BROWSER_PYTHON")
            .ok()
            .zip(std::env::var("WAI_CHROMIUM").ok());
        assert!(
            found.is_some() || std::env::var_os("CI").is_none(),
            "CI must set WAI_BROWSER_PYTHON and WAI_CHROMIUM (see .ci/run)"
        );
        found.map(|(python, chromium)| Self { python, chromium })
    }

    /// Runs `browser_check.py` on `page` with `expect`; screenshots go to `shots`.
    fn check(&self, page: &Path, shots: &Path, expect: &Value) -> Value {
        let mut expect = expect.clone();
        expect["chromium"] = Value::from(self.chromium.clone());
        let expect_path = shots.join("expect.json");
        std::fs::create_dir_all(shots).unwrap();
        std::fs::write(&expect_path, expect.to_string()).unwrap();
        let out = std::process::Command::new(&self.python)
            .arg(fixture("report/browser_check.py"))
            .arg(page.canonicalize().unwrap())
            .arg(shots)
            .arg(&expect_path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "browser_check.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Where a test's screenshots are kept (the test's artefacts).
fn shots(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("report-screenshots")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_demo_page_renders_in_chromium_and_its_browser_finds_a_failing_row() {
    let Some(browser) = Browser::from_env() else {
        eprintln!("skipped: set WAI_BROWSER_PYTHON and WAI_CHROMIUM (bash .ci/run does)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let demo = demo(dir.path());
    let page = demo.join("report.html");
    let data = page_data(&page);
    // A failing row with tool calls whose prompt no other row shares.
    let rows = data["transcripts"]["rows"].as_array().unwrap();
    let prompt_count = |p: &str| rows.iter().filter(|r| r["prompt"] == p).count();
    let row = rows
        .iter()
        .find(|r| {
            r["reward"] == 0.0
                && r["tools"].as_array().unwrap().len() >= 2
                && prompt_count(r["prompt"].as_str().unwrap()) <= 20
        })
        .expect("a failing row that called two tools");
    let tiers = data["pass_at"][0]["report"]["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["by"] == "dims.tier")
        .count();
    let shots = shots("demo");
    let seen = browser.check(
        &page,
        &shots,
        &json!({"slices": ["dims.tier"], "search": row["prompt"], "id": row["id"]}),
    );
    assert_eq!(seen["console_errors"], json!([]), "{seen}");
    assert_eq!(seen["page_errors"], json!([]), "{seen}");
    assert_eq!(seen["requests"], json!([]), "the page fetched nothing");
    let sections = seen["sections"].as_array().unwrap();
    let ids: Vec<&str> = sections.iter().map(|s| s["id"].as_str().unwrap()).collect();
    for id in [
        "warnings",
        "headline",
        "slices",
        "failures",
        "markers",
        "transcripts",
    ] {
        assert!(ids.contains(&id), "{id} not rendered: {ids:?}");
    }
    for s in sections {
        assert!(s["height"].as_f64().unwrap() > 20.0, "{s} has no height");
    }
    assert_eq!(seen["marks"]["dims.tier"], tiers, "one mark per tier");
    assert!(seen["heat_cells"].as_u64().unwrap() >= 4);
    assert_eq!(seen["listed"], 100, "the first page of the list");
    let found: Vec<&str> = seen["found_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(found.contains(&row["id"].as_str().unwrap()), "{found:?}");
    let calls = seen["tool_calls"].as_array().unwrap();
    for tool in row["tools"].as_array().unwrap() {
        let tool = tool.as_str().unwrap();
        assert!(
            calls
                .iter()
                .any(|c| c.as_str().unwrap().contains(&format!("tool call: {tool}"))),
            "{tool} not shown: {calls:?}"
        );
    }
    assert!(seen["hash"].as_str().unwrap().starts_with("#row="));
    for shot in ["page.png", "page-full.png", "row.png"] {
        assert!(
            std::fs::metadata(shots.join(shot)).unwrap().len() > 10_000,
            "{shot}"
        );
    }
}

#[test]
fn a_judges_disagreement_links_to_its_task_in_chromium() {
    let Some(browser) = Browser::from_env() else {
        eprintln!("skipped: set WAI_BROWSER_PYTHON and WAI_CHROMIUM (bash .ci/run does)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    gen_rows(&rows, 400, 7);
    let trust = document(&dir.path().join("trust.json"), &[&"judge-trust", &rows]);
    let page = dir.path().join("page.html");
    succeeded(
        wai()
            .arg("report")
            .arg(&rows)
            .arg(&trust)
            .args(["--max-rows", "50", "--out"])
            .arg(&page),
    );
    let data = page_data(&page);
    let task = data["judge_trust"][0]["report"]["disagreements"][0]["task"]
        .as_str()
        .expect("the judge disagrees with a label somewhere")
        .to_owned();
    // Every linked task's rows were carried even in a sample of 50: two of each (or all it has).
    let carried = data["transcripts"]["rows"].as_array().unwrap();
    let all = crate::support::read_jsonl(&rows);
    for d in data["judge_trust"][0]["report"]["disagreements"]
        .as_array()
        .unwrap()
    {
        let t = d["task"].as_str().unwrap();
        let has = all.iter().filter(|r| r["task_id"] == t).count();
        let shown = carried.iter().filter(|r| r["task"] == t).count();
        assert!(
            shown >= has.min(2),
            "task {t}: {shown} of {has} rows carried"
        );
    }
    let seen = browser.check(&page, &shots("judge-trust"), &json!({"task_link": task}));
    assert_eq!(seen["console_errors"], json!([]), "{seen}");
    assert!(
        seen["task_link_row"].as_str().unwrap().contains(&task),
        "{seen}"
    );
}

#[test]
fn rows_without_the_optional_columns_still_make_a_page() {
    // A Parquet file another writer made: ids, an integer reward and a prompt, nothing else.
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    gen_rows(&rows, 200, 9);
    let narrow = dir.path().join("narrow.parquet");
    succeeded(
        wai()
            .arg("sql")
            .arg("SELECT task_id, rollout_id, CAST(reward AS BIGINT) AS reward, prompt FROM rows")
            .arg("--table")
            .arg(&rows)
            .args(["--format", "parquet", "--out"])
            .arg(&narrow),
    );
    let page = dir.path().join("page.html");
    let doc = json_of(
        wai()
            .arg("--json")
            .arg("report")
            .arg(&narrow)
            .arg("--out")
            .arg(&page),
    );
    let sections = sections_of(&doc);
    assert_eq!(sections, ["warnings", "headline", "transcripts"]);
    let data = page_data(&page);
    assert_eq!(data["warnings"][0]["code"], "not_checked");
    assert_eq!(data["transcripts"]["n_rows"], 200);
    let cli = crate::support::report_of(wai().arg("--json").arg("pass-at").arg(&narrow));
    assert_eq!(data["pass_at"][0]["report"]["results"], cli["results"]);
    // `wai gate` on the same file names the column it cannot read (65), not a bug (70).
    let out = wai()
        .arg("gate")
        .arg(&narrow)
        .args(["--floor", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stage `gate`: column `reward`"));
}
