//! `wai run` and its lake: a pipeline end to end, incremental runs measuring what one full run
//! does, a run killed with SIGKILL at several stages and resumed to the same outputs, and the
//! results read back with `wai sql --lake`.

use std::io::BufRead as _;
use std::path::Path;

use serde_json::Value;

use crate::support::{gen_rows, refused, succeeded, wai};

/// `wai gen` rows whose rollout ids start with `prefix` (each night's traces are other rollouts
/// of the same tasks).
pub(crate) fn gen_night(path: &Path, rows: u64, seed: u64, prefix: &str) {
    gen_rows(path, rows, seed);
    let renamed: Vec<Value> = crate::support::read_jsonl(path)
        .into_iter()
        .map(|mut row| {
            let id = row["rollout_id"].as_str().unwrap_or_default().to_owned();
            row["rollout_id"] = Value::String(format!("{prefix}{id}"));
            row
        })
        .collect();
    crate::support::write_rows(path, &renamed);
}

/// A nightly pipeline over `in/*.jsonl` into `lake`.
pub(crate) fn pipeline(dir: &Path, name: &str, lake: &str) {
    let text = format!(
        r#"lake = "{lake}"
gates = ["pass_at.pass_at_1 >= 0.2", "compare.ok", "hack_scan.regime != 'reward_hack'"]

[input]
paths = ["in/*.jsonl"]

[[stage]]
run = "grade"
judge = ["sql:CASE WHEN reward > 0.5 THEN 1 ELSE 0 END"]

[[stage]]
run = "pass-at"
by = ["dims.tier"]
over = "all"

[[stage]]
run = "markers"
over = "all"

[[stage]]
run = "pass-at"
name = "tonight"

[[stage]]
run = "compare"
baseline = "previous"

[[stage]]
run = "hack-scan"
seed = 3
over = "all"

[[stage]]
run = "select"
mode = "rl"

[[stage]]
run = "export"
format = "openai"
"#
    );
    std::fs::write(dir.join(name), text).unwrap();
}

/// `wai --json sql --lake LAKE QUERY`'s rows.
pub(crate) fn query(dir: &Path, lake: &str, sql: &str) -> Vec<Value> {
    let out = succeeded(
        wai()
            .current_dir(dir)
            .args(["--json", "sql", "--lake", lake, sql]),
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["report"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The manifest of the lake at `dir/lake`.
pub(crate) fn manifest(dir: &Path, lake: &str) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(dir.join(lake).join("_wai/manifest.json")).unwrap(),
    )
    .unwrap()
}

/// The export the lake's last run wrote.
pub(crate) fn last_export(dir: &Path, lake: &str) -> String {
    let m = manifest(dir, lake);
    let run = m["runs"].as_array().unwrap().last().unwrap();
    let export = run["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "export")
        .unwrap();
    std::fs::read_to_string(dir.join(lake).join(export["outputs"][0].as_str().unwrap())).unwrap()
}

/// Runs the canned lake queries on the lake of [`a_pipeline_runs_every_stage_lands_its_results_and_then_is_up_to_date`]
/// (two nights and an empty run between them) and checks their row counts.
fn canned_lake_queries(d: &Path) {
    for q in wai::queries::QUERIES
        .iter()
        .filter(|q| q.name.starts_with("lake_"))
    {
        let out = succeeded(
            wai()
                .current_dir(d)
                .args(["--json", "sql", "--lake", "lake", "--query", q.name]),
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows = doc["report"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let want = match q.name {
            // Two nights x (overall + 3 tiers, and tonight's overall), and the empty run's
            // measure of every row so far (overall + 3 tiers).
            "lake_pass_at_trend" => 14,
            // A compare each run (the first night's and the empty run's skipped).
            "lake_compare_history" => 3,
            _ => 2, // one scoring run a night with rows
        };
        assert_eq!(rows.len(), want, "{}: {rows:?}", q.name);
    }
}

#[test]
fn a_pipeline_runs_every_stage_lands_its_results_and_then_is_up_to_date() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    gen_rows(&d.join("in/a.jsonl"), 600, 1);
    pipeline(d, "nightly.toml", "lake");
    let dry = succeeded(
        wai()
            .current_dir(d)
            .args(["run", "nightly.toml", "--dry-run"]),
    );
    let dry = String::from_utf8_lossy(&dry.stdout).into_owned();
    assert!(
        dry.contains("new: 1 file") && dry.contains("in/a.jsonl"),
        "{dry}"
    );
    assert!(dry.contains("wai pass-at --by=dims.tier"), "{dry}");
    assert!(!d.join("lake").exists(), "a dry run makes nothing");

    let out = succeeded(wai().current_dir(d).args(["run", "nightly.toml"]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("PASS pass_at.pass_at_1 >= 0.2"), "{text}");
    // The first night has no previous run: the compare is skipped, not failed.
    assert!(text.contains("SKIP compare.ok"), "{text}");
    assert!(!last_export(d, "lake").is_empty());

    // Per slice and overall, with intervals and n, as rows.
    let rows = query(
        d,
        "lake",
        "SELECT slice, pass_at_1, ci_low, ci_high, n_groups FROM results_pass_at WHERE stage = 'pass_at' ORDER BY slice NULLS FIRST",
    );
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(rows[0]["slice"].is_null());
    for r in &rows {
        let (lo, p, hi) = (
            r["ci_low"].as_f64().unwrap(),
            r["pass_at_1"].as_f64().unwrap(),
            r["ci_high"].as_f64().unwrap(),
        );
        assert!(
            lo <= p && p <= hi && r["n_groups"].as_i64().unwrap() > 0,
            "{r}"
        );
    }
    let scored = query(d, "lake", "SELECT count(*) AS n FROM scored");
    assert_eq!(scored[0]["n"], 600);

    // Touched (its time moved, not its rows): still read before.
    let file = std::fs::File::options()
        .append(true)
        .open(d.join("in/a.jsonl"))
        .unwrap();
    file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    let again = succeeded(wai().current_dir(d).args(["run", "nightly.toml"]));
    assert!(String::from_utf8_lossy(&again.stdout).contains("up to date"));
    assert_eq!(manifest(d, "lake")["runs"].as_array().unwrap().len(), 1);
    // `--again` with nothing new: the stages that read new rows are skipped, the run commits,
    // and nothing is left pending.
    let forced = succeeded(
        wai()
            .current_dir(d)
            .args(["run", "nightly.toml", "--again"]),
    );
    let forced = String::from_utf8_lossy(&forced.stdout).into_owned();
    assert!(
        forced.contains("skipped: no new rows in this run"),
        "{forced}"
    );
    assert!(
        std::fs::read_dir(d.join("lake/_wai/pending"))
            .unwrap()
            .next()
            .is_none()
    );
    let m = manifest(d, "lake");
    assert_eq!(m["runs"].as_array().unwrap().len(), 2);
    // ... and the second night compares against the first night's rows, not the empty run's.
    let runs = m["runs"].as_array().unwrap().clone();
    let forced_run = runs[1]["run_id"].as_str().unwrap().to_owned();

    // The second night: one new file, compared against the first night's rows.
    gen_night(&d.join("in/b.jsonl"), 600, 2, "night2-");
    let out = succeeded(wai().current_dir(d).args(["run", "nightly.toml"]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("1 file new") && text.contains("PASS compare.ok"),
        "{text}"
    );
    let compare = query(
        d,
        "lake",
        "SELECT ok, n_paired_tasks FROM results_compare WHERE ok IS NOT NULL",
    );
    assert_eq!(compare.len(), 1, "{compare:?}");
    assert!(
        query(
            d,
            "lake",
            &format!("SELECT ok FROM results_compare WHERE run_id = '{forced_run}'")
        )[0]["ok"]
            .is_null()
    );
    // `over = "all"` measures both nights' rows, the default only tonight's.
    let n = query(
        d,
        "lake",
        "SELECT stage, n_rows FROM results_pass_at WHERE slice IS NULL AND n_rows IS NOT NULL ORDER BY run_time, stage",
    );
    let n: Vec<(String, i64)> = n
        .iter()
        .map(|r| {
            (
                r["stage"].as_str().unwrap().to_owned(),
                r["n_rows"].as_i64().unwrap(),
            )
        })
        .collect();
    // (The empty `--again` run measured every row so far again: 600.)
    let want = [
        ("pass_at", 600),
        ("tonight", 600),
        ("pass_at", 600),
        ("pass_at", 1200),
        ("tonight", 600),
    ];
    assert_eq!(n, want.map(|(s, n)| (s.to_owned(), n)));
    canned_lake_queries(d);
    let status = succeeded(wai().current_dir(d).args(["lake", "status", "lake"]));
    assert!(String::from_utf8_lossy(&status.stdout).contains("3 runs committed"));
}

#[test]
fn incremental_runs_measure_what_one_full_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    gen_rows(&d.join("in/a.jsonl"), 500, 11);
    pipeline(d, "nightly.toml", "nightly");
    let first = succeeded(wai().current_dir(d).args(["run", "nightly.toml"]));
    gen_night(&d.join("in/b.jsonl"), 700, 12, "night2-");
    let second = succeeded(wai().current_dir(d).args(["run", "nightly.toml"]));
    // Progress (JSON lines off a terminal): a second night's starts carry the time left at the
    // first night's pace; the first night's cannot.
    let starts = |out: &std::process::Output| -> Vec<Value> {
        (out.stderr.lines())
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
            .filter(|e| e["event"] == "start")
            .collect()
    };
    assert!(starts(&first).iter().all(|e| e["eta_s"].is_null()));
    let eta: Vec<f64> = (starts(&second).iter())
        .map(|e| e["eta_s"].as_f64().unwrap())
        .collect();
    assert_eq!(eta.len(), 8, "{eta:?}");
    assert!(
        eta[0] > 0.0 && eta.windows(2).all(|w| w[0] >= w[1]),
        "{eta:?}"
    );
    // pass-at over every row reads tonight's rows only, and adds the first night's stored
    // counts; markers over every row reads both nights' files.
    let files = |stage: &str| {
        (starts(&second).iter())
            .find(|e| e["stage"] == stage)
            .map(|e| e["files"].clone())
    };
    assert_eq!(files("pass_at"), Some(1.into()));
    assert_eq!(files("markers"), Some(2.into()));
    let counts: Vec<String> = (manifest(d, "nightly")["runs"].as_array().unwrap().iter())
        .flat_map(|r| r["stages"].as_array().unwrap().clone())
        .filter(|s| s["name"] == "pass_at")
        .filter_map(|s| s["outputs"][0].as_str().map(str::to_owned))
        .collect();
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(
        counts.iter().all(|c| c.starts_with("counts/pass_at/")),
        "{counts:?}"
    );
    // The same two files at once, into another lake.
    pipeline(d, "full.toml", "full");
    succeeded(wai().current_dir(d).args(["run", "full.toml"]));
    let last = |lake: &str| {
        manifest(d, lake)["runs"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for (table, columns) in [
        (
            "results_pass_at",
            "slice, k, pass_at_1, ci_low, ci_high, pass_pow_k, pass_at_k, n_groups, n_rows",
        ),
        (
            "results_markers",
            "marker, mean, ci_low, ci_high, n_tasks, n_rows",
        ),
        (
            "results_hack_scan",
            "regime, n_rows, n_groups, top_feature, rho_max",
        ),
    ] {
        let sql = |lake: &str| {
            format!(
                "SELECT {columns} FROM {table} WHERE run_id = '{}' AND stage <> 'tonight' ORDER BY 1 NULLS FIRST",
                last(lake)
            )
        };
        let incremental = query(d, "nightly", &sql("nightly"));
        let full = query(d, "full", &sql("full"));
        assert!(!full.is_empty(), "{table}");
        assert_eq!(
            incremental, full,
            "{table}: two nights against one run over both files"
        );
    }
    assert_eq!(manifest(d, "nightly")["runs"].as_array().unwrap().len(), 2);
}

/// Starts `wai run PIPELINE` in `dir` and kills it with SIGKILL when it reports `event` for
/// `stage` (its progress lines on stderr); returns whether it was still running then.
fn kill_at(dir: &Path, pipeline: &str, stage: &str, event: &str) -> bool {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("wai"))
        .current_dir(dir)
        .args(["run", pipeline])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = std::io::BufReader::new(child.stderr.take().unwrap());
    for line in err.lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v["stage"] == stage && v["event"] == event {
            child.kill().unwrap(); // SIGKILL
            break;
        }
    }
    let status = child.wait().unwrap();
    !status.success()
}

#[test]
fn a_run_killed_at_any_stage_resumes_to_the_same_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    gen_rows(&d.join("in/a.jsonl"), 800, 5);
    pipeline(d, "whole.toml", "whole");
    succeeded(wai().current_dir(d).args(["run", "whole.toml"]));
    let whole = last_export(d, "whole");
    let whole_results = query(
        d,
        "whole",
        "SELECT stage, status, rows_read FROM results_select",
    );
    for (i, (stage, event)) in [
        ("grade", "start"),
        ("pass_at", "done"),
        ("select", "start"),
        ("export", "done"),
    ]
    .into_iter()
    .enumerate()
    {
        let lake = format!("killed{i}");
        let file = format!("{lake}.toml");
        pipeline(d, &file, &lake);
        assert!(
            kill_at(d, &file, stage, event),
            "{stage} {event}: the run ended before the kill"
        );
        assert!(
            std::fs::read_dir(d.join(&lake).join("_wai/pending"))
                .unwrap()
                .next()
                .is_some(),
            "{stage} {event}: the killed run is pending"
        );
        assert_eq!(
            manifest(d, &lake)["runs"].as_array().unwrap().len(),
            0,
            "nothing committed yet"
        );
        // The last is started over (`--restart`) instead of resumed: the same outputs too.
        let restart = i == 3;
        let mut cmd = wai();
        cmd.current_dir(d).args(["run", &file]);
        if restart {
            cmd.arg("--restart");
        }
        let out = succeeded(&mut cmd);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            text.contains("(resumed)"),
            !restart,
            "{stage} {event}: {text}"
        );
        assert_eq!(
            last_export(d, &lake),
            whole,
            "{stage} {event}: the export differs"
        );
        let runs = manifest(d, &lake)["runs"].as_array().unwrap().len();
        assert_eq!(runs, 1, "{stage} {event}: one run, nothing duplicated");
        for table in [
            "results_grade",
            "results_pass_at",
            "results_select",
            "results_export",
        ] {
            let n = query(
                d,
                &lake,
                &format!("SELECT count(DISTINCT run_id) AS n, count(*) AS rows FROM {table}"),
            );
            assert_eq!(n[0]["n"], 1, "{stage} {event}: {table} {n:?}");
        }
        assert_eq!(
            query(
                d,
                &lake,
                "SELECT stage, status, rows_read FROM results_select"
            ),
            whole_results
        );
        // And the resumed run's scored rows are the whole run's, once.
        assert_eq!(
            query(d, &lake, "SELECT count(*) AS n FROM scored")[0]["n"],
            800
        );
    }
}

#[test]
fn a_bad_pipeline_is_refused_before_any_work_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    gen_rows(&d.join("in/a.jsonl"), 50, 1);
    pipeline(d, "p.toml", "lake");
    let text = std::fs::read_to_string(d.join("p.toml")).unwrap();
    std::fs::write(
        d.join("bad.toml"),
        text.replace("mode = \"rl\"", "mdoe = \"rl\""),
    )
    .unwrap();
    let line = 1 + text.lines().position(|l| l == "mode = \"rl\"").unwrap();
    refused(
        wai().current_dir(d).args(["run", "bad.toml"]),
        &format!("bad.toml, line {line}: `mdoe` is not an option of `wai select`"),
    );
    std::fs::write(d.join("bad.toml"), text.replace("seed = 3", "seed = \"x\"")).unwrap();
    refused(
        wai().current_dir(d).args(["run", "bad.toml"]),
        "stage `hack_scan`",
    );
    std::fs::write(
        d.join("bad.toml"),
        text.replace("compare.ok", "comparre.ok"),
    )
    .unwrap();
    refused(
        wai().current_dir(d).args(["run", "bad.toml"]),
        "no stage `comparre`",
    );
    assert!(!d.join("lake").exists(), "nothing was made");
}

#[test]
fn a_failed_gate_exits_1_and_still_commits_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    gen_rows(&d.join("in/a.jsonl"), 200, 1);
    pipeline(d, "p.toml", "lake");
    let text = std::fs::read_to_string(d.join("p.toml")).unwrap();
    std::fs::write(d.join("p.toml"), text.replace(">= 0.2", ">= 0.99")).unwrap();
    let out = wai()
        .current_dir(d)
        .args(["run", "p.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL pass_at.pass_at_1 >= 0.99"));
    let m = manifest(d, "lake");
    assert_eq!(m["runs"][0]["exit"], 1);
    // The same pipeline without the gate, on rows no judge graded: exit 2, said why.
    let text = std::fs::read_to_string(d.join("p.toml")).unwrap();
    let hollow = text
        .replace("\"pass_at.pass_at_1 >= 0.99\", ", "")
        .replace("\"lake\"", "\"lake2\"")
        .replace(
            "run = \"grade\"\njudge = [\"sql:CASE WHEN reward > 0.5 THEN 1 ELSE 0 END\"]",
            "run = \"grade\"\njudge = [\"sql:NULL\"]",
        );
    std::fs::write(d.join("hollow.toml"), hollow).unwrap();
    let out = wai()
        .current_dir(d)
        .args(["run", "hollow.toml"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        said.contains("stage `pass_at` is hollow (exit 2)"),
        "{said}"
    );
    assert_eq!(m["runs"][0]["gates"][0]["passed"], false);
}

#[test]
fn the_example_pipeline_runs_on_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    succeeded(wai().current_dir(d).args(["-q", "demo", "--budget", "600"]));
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/nightly.toml");
    let out = succeeded(wai().current_dir(d).args(["run", example]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(text.matches("\n  PASS ").count(), 3, "{text}");
    assert!(text.contains("markers; lowest `"), "{text}");
    let again = succeeded(wai().current_dir(d).args(["run", example]));
    assert!(String::from_utf8_lossy(&again.stdout).starts_with("up to date"));
    let trend = query(
        d,
        "wai-lake",
        "SELECT stage, n_rows FROM results_pass_at WHERE slice IS NULL ORDER BY stage",
    );
    assert_eq!(trend.len(), 2, "{trend:?}");
    assert_eq!(trend[0]["n_rows"], 600);
}

// Issue #35, item 6: the measures of a run read the rows once. A stage over the same rows as an
// earlier one takes its columns from memory and reads no byte; what each reads is reported, and
// every measure gives what its command gives alone.
#[test]
fn a_runs_measures_share_one_scan_and_give_what_the_commands_give() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    gen_rows(&d.join("in/a.jsonl"), 800, 5);
    pipeline(d, "nightly.toml", "lake");
    succeeded(wai().current_dir(d).args(["run", "nightly.toml"]));
    let m = manifest(d, "lake");
    let stages = m["runs"][0]["stages"].as_array().unwrap().clone();
    let stage = |name: &str| stages.iter().find(|s| s["name"] == name).unwrap().clone();
    // The first measure reads columns from the scored file (its first query's)...
    let first = stage("pass_at");
    assert!(first["bytes_read"].as_u64().unwrap() > 0, "{first}");
    assert!(
        first["scans"]["from_memory"].as_u64().unwrap() < first["scans"]["scans"].as_u64().unwrap(),
        "{first}"
    );
    // ... a measure of the same columns reads none, from memory ...
    let again = stage("tonight");
    assert_eq!(again["bytes_read"], 0, "{again}");
    let scans = again["scans"]["scans"].as_u64().unwrap();
    assert!(
        scans > 0 && again["scans"]["from_memory"] == scans,
        "{again}"
    );
    // ... and a data stage reports the size of the files it streamed.
    let select = stage("select");
    assert!(select.get("scans").is_none(), "{select}");
    let scored_rel = stage("grade")["outputs"][0].as_str().unwrap().to_owned();
    let scored = d.join("lake").join(&scored_rel);
    assert_eq!(
        select["bytes_read"].as_u64().unwrap(),
        std::fs::metadata(&scored).unwrap().len()
    );
    // The bytes a measure read are at most its file's, and the file's column chunks it named.
    assert!(first["bytes_read"].as_u64().unwrap() < std::fs::metadata(&scored).unwrap().len());

    // Each measure as its own command on the same rows, without a run's shared scan.
    let alone = |args: &[&str]| -> Value {
        let out = wai()
            .current_dir(d)
            .arg("--json")
            .args(args)
            .arg(&scored)
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["report"].clone()
    };
    let run_id = m["runs"][0]["run_id"].as_str().unwrap().to_owned();
    let pass_at = alone(&["pass-at", "--by", "dims.tier"]);
    let rows = query(
        d,
        "lake",
        &format!(
            "SELECT pass_at_1, ci_low, ci_high, n_groups FROM results_pass_at WHERE run_id = '{run_id}' AND stage = 'pass_at' AND slice IS NULL"
        ),
    );
    let overall = &pass_at["results"][0];
    assert_eq!(
        rows[0]["pass_at_1"], overall["pass_at_1"],
        "{rows:?} {overall}"
    );
    assert_eq!(rows[0]["ci_low"], overall["ci95"][0], "{rows:?} {overall}");
    assert_eq!(rows[0]["ci_high"], overall["ci95"][1], "{rows:?} {overall}");
    assert_eq!(rows[0]["n_groups"], overall["n_groups"]);
    let markers = alone(&["markers"]);
    let rows = query(
        d,
        "lake",
        &format!(
            "SELECT marker, mean, ci_low, ci_high, n_tasks FROM results_markers WHERE run_id = '{run_id}' ORDER BY marker"
        ),
    );
    assert!(!rows.is_empty());
    for r in &rows {
        let m = &markers["markers"][r["marker"].as_str().unwrap()];
        assert_eq!(
            (&r["mean"], &r["ci_low"], &r["ci_high"], &r["n_tasks"]),
            (&m["mean"], &m["ci95"][0], &m["ci95"][1], &m["n_tasks"]),
            "{r}"
        );
    }
    let hack = alone(&["hack-scan", "--seed", "3"]);
    let rows = query(
        d,
        "lake",
        &format!("SELECT regime, rho_max, n_rows FROM results_hack_scan WHERE run_id = '{run_id}'"),
    );
    assert_eq!(
        (&rows[0]["regime"], &rows[0]["rho_max"], &rows[0]["n_rows"]),
        (&hack["regime"], &hack["rho_max"], &hack["n_rows"])
    );
    a_run_keeping_nothing_gives_the_same(d);
}

/// The pipeline of [`a_runs_measures_share_one_scan_and_give_what_the_commands_give`] again with
/// nothing kept: every measure reads its files, and every result is the same as in `lake`.
fn a_run_keeping_nothing_gives_the_same(d: &Path) {
    pipeline(d, "unshared.toml", "unshared");
    let text = std::fs::read_to_string(d.join("unshared.toml")).unwrap();
    std::fs::write(
        d.join("unshared.toml"),
        format!("shared_scan_mib = 0\n{text}"),
    )
    .unwrap();
    succeeded(wai().current_dir(d).args(["run", "unshared.toml"]));
    let m = manifest(d, "unshared");
    let tonight = (m["runs"][0]["stages"].as_array().unwrap().iter())
        .find(|s| s["name"] == "tonight")
        .unwrap()
        .clone();
    assert!(tonight["bytes_read"].as_u64().unwrap() > 0, "{tonight}");
    assert_eq!(tonight["scans"]["from_memory"], 0, "{tonight}");
    for (table, columns) in [
        (
            "results_pass_at",
            "stage, slice, k, pass_at_1, ci_low, ci_high, pass_pow_k, pass_at_k, n_groups, n_rows",
        ),
        (
            "results_markers",
            "marker, mean, ci_low, ci_high, n_tasks, n_rows",
        ),
        (
            "results_hack_scan",
            "regime, n_rows, n_groups, top_feature, rho_max",
        ),
        ("results_compare", "ok, headline_word"),
    ] {
        let sql = format!("SELECT {columns} FROM {table} ORDER BY 1, 2 NULLS FIRST");
        assert_eq!(
            query(d, "lake", &sql),
            query(d, "unshared", &sql),
            "{table}"
        );
    }
}

// A run whose stored counts are gone: the next night reads that run's rows again and counts them
// into its own file, so the measure stays what one run over every night gives.
#[test]
fn a_lost_counts_file_is_made_good_by_the_next_night() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    gen_rows(&d.join("in/a.jsonl"), 400, 31);
    pipeline(d, "nightly.toml", "nightly");
    succeeded(wai().current_dir(d).args(["run", "nightly.toml"]));
    let first = manifest(d, "nightly")["runs"][0].clone();
    let lost = (first["stages"].as_array().unwrap().iter())
        .find(|s| s["name"] == "pass_at")
        .and_then(|s| s["outputs"][0].as_str())
        .unwrap()
        .to_owned();
    std::fs::remove_file(d.join("nightly").join(&lost)).unwrap();
    gen_night(&d.join("in/b.jsonl"), 500, 32, "night2-");
    let second = succeeded(wai().current_dir(d).args(["run", "nightly.toml"]));
    let start = (second.stderr.lines())
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
        .find(|e| e["event"] == "start" && e["stage"] == "pass_at")
        .unwrap();
    assert_eq!(start["files"], 2, "{start}");
    let made = (manifest(d, "nightly")["runs"][1]["stages"]
        .as_array()
        .unwrap()
        .iter())
    .find(|s| s["name"] == "pass_at")
    .and_then(|s| s["outputs"][0].as_str())
    .unwrap()
    .to_owned();
    let file: Value =
        serde_json::from_slice(&std::fs::read(d.join("nightly").join(made)).unwrap()).unwrap();
    assert_eq!(
        file["covers"].as_array().unwrap().len(),
        2,
        "{}",
        file["covers"]
    );
    pipeline(d, "full.toml", "full");
    succeeded(wai().current_dir(d).args(["run", "full.toml"]));
    let sql = "SELECT slice, pass_at_1, ci_low, ci_high, n_groups, n_rows FROM results_pass_at WHERE stage = 'pass_at' ORDER BY run_time DESC, slice NULLS FIRST LIMIT 4";
    assert_eq!(query(d, "nightly", sql), query(d, "full", sql));
}
