//! `wai worker` and `--cluster` (issue #40): three workers started here on 127.0.0.1 give every
//! listed command the answer it gives alone, with work really sent to them; a worker that dies
//! mid-query, one that does not answer and one of another version are named, and nothing is
//! written.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::support::{gen_rows, refused, wai};

/// A `wai worker` process on 127.0.0.1, killed when dropped; counts the plan fragments it logs.
struct Worker {
    child: Child,
    url: String,
    tasks: Arc<AtomicUsize>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Worker {
    fn start(extra: &[&str], env: &[(&'static str, String)]) -> Self {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("wai"))
            .args(["worker", "--listen", "127.0.0.1:0"])
            .args(extra)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wai worker");
        let stderr = child.stderr.take().expect("stderr");
        let tasks = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let counted = Arc::clone(&tasks);
        // The log is read to its end, so the worker never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let Ok(event) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                match event["event"].as_str() {
                    Some("listening") => {
                        let _ = tx.send(event["address"].as_str().unwrap_or_default().to_owned());
                    }
                    Some("task") => {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    _ => {}
                }
            }
        });
        // Held before waiting: a worker that never listens is killed as the test fails.
        let mut worker = Self {
            child,
            url: String::new(),
            tasks,
        };
        worker.url = rx
            .recv_timeout(Duration::from_mins(1))
            .expect("the worker says where it listens");
        worker
    }

    fn tasks(&self) -> usize {
        self.tasks.load(Ordering::SeqCst)
    }
}

/// `wai gen` rows as Parquet in `dir` (workers read Parquet in place; JSONL is converted here).
fn parquet_rows(dir: &Path, name: &str, rows: u64, seed: u64) -> std::path::PathBuf {
    let jsonl = dir.join(format!("{name}.jsonl"));
    gen_rows(&jsonl, rows, seed);
    let parquet = dir.join(format!("{name}.parquet"));
    wai()
        .arg("convert")
        .arg(&jsonl)
        .arg("-o")
        .arg(&parquet)
        .assert()
        .success();
    parquet
}

fn cluster(workers: &[Worker]) -> String {
    workers
        .iter()
        .map(|w| w.url.clone())
        .collect::<Vec<_>>()
        .join(",")
}

/// A command's `--json` document without what differs between any two runs (the wall times, and
/// `run_id` where it is named in paths and text) and what `wai run` read itself (`bytes_read`,
/// `scans`: on a cluster the workers read).
fn normalized(stdout: &[u8]) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for key in ["elapsed_s", "bytes_read", "scans"] {
                    m.remove(key);
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut doc: Value = serde_json::from_slice(stdout).expect("one JSON document");
    let run_id = doc["report"]["run_id"].as_str().map(str::to_owned);
    strip(&mut doc);
    let mut text = doc.to_string();
    if let Some(id) = run_id {
        text = text.replace(&id, "RUN");
    }
    // A headline's own wall time ("graded 20000 rows ... in 1.2 s").
    let took = regex::Regex::new(r" in [0-9]+(\.[0-9]+)? s\b").expect("regex");
    serde_json::from_str(&took.replace_all(&text, " in T s")).expect("JSON")
}

/// Runs `args` in `dir` alone and on the cluster (into `dir/local` and `dir/cluster`), and holds
/// the reports and every file named in `outputs` equal; returns the fragments the workers took.
fn same_answer(dir: &Path, args: &[&str], outputs: &[&str], workers: &[Worker]) -> usize {
    let before: usize = workers.iter().map(Worker::tasks).sum();
    let mut docs = Vec::new();
    for (name, extra) in [
        ("local", Vec::new()),
        (
            "cluster",
            vec![
                "--cluster".to_owned(),
                cluster(workers),
                "--cluster-split".into(),
                "1000".into(),
            ],
        ),
    ] {
        let at = dir.join(name);
        std::fs::create_dir_all(&at).unwrap();
        let out = wai()
            .current_dir(&at)
            .arg("--json")
            .args(args)
            .args(&extra)
            .output()
            .unwrap();
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{name} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        docs.push((out.status.code(), normalized(&out.stdout)));
    }
    assert_eq!(docs[0], docs[1], "{args:?}: the cluster's report differs");
    for file in outputs {
        let a = std::fs::read(dir.join("local").join(file)).unwrap();
        let b = std::fs::read(dir.join("cluster").join(file)).unwrap();
        assert!(a == b, "{args:?}: `{file}` differs on the cluster");
    }
    let after: usize = workers.iter().map(Worker::tasks).sum();
    after - before
}

/// An eval set that every lexical rule finds in `rows` (JSONL): a task of theirs, exact copies
/// of prompts, and prompts with a word added; returns its path.
fn eval_set(dir: &Path, rows: &Path) -> String {
    let mut tasks: Vec<(String, String)> = Vec::new();
    for line in std::fs::read_to_string(rows).unwrap().lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        let task = row["task_id"].as_str().unwrap().to_owned();
        if tasks.last().is_none_or(|(t, _)| *t != task) {
            tasks.push((task, row["prompt"].as_str().unwrap().to_owned()));
        }
    }
    let mut lines = Vec::new();
    for (i, (task, prompt)) in tasks.iter().enumerate().step_by(37) {
        lines.push(match i % 3 {
            0 => serde_json::json!({"task_id": task, "prompt": "a task of its own"}),
            1 => serde_json::json!({"prompt": prompt.to_uppercase()}),
            _ => serde_json::json!({"prompt": format!("{prompt} Thanks a lot in advance.")}),
        });
    }
    assert!(lines.len() > 10);
    let path = dir.join("eval.jsonl");
    let text: String = lines.iter().map(|l| l.to_string() + "\n").collect();
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn every_listed_command_gives_the_local_answer_on_three_workers() {
    let dir = tempfile::tempdir().unwrap();
    // Files of more than one row group (8,192 rows): a scan of one row group is one task, which
    // the engine keeps here.
    let a = parquet_rows(dir.path(), "a", 20_000, 1)
        .display()
        .to_string();
    let b = parquet_rows(dir.path(), "b", 20_000, 2)
        .display()
        .to_string();
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&[], &[])).collect();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec![
                "sql",
                "-t",
                &a,
                "SELECT task_id, count(*) AS n, sum(reward) AS passed, min(rollout_id) AS first FROM rows WHERE reward IS NOT NULL GROUP BY task_id ORDER BY task_id",
            ],
            vec![],
        ),
        (vec!["pass-at", &a, "--by", "dims.tier"], vec![]),
        (vec!["markers", &a], vec![]),
        (vec!["compare", &a, &b], vec![]),
        (vec!["variance", &a, &b], vec![]),
        (vec!["judge-trust", &a], vec![]),
        (
            vec![
                "grade",
                &a,
                "--no-tools",
                "--judge",
                "sql:CASE WHEN length(final_text) > 200 THEN 1 ELSE 0 END",
                "-o",
                "graded.parquet",
            ],
            vec!["graded.parquet"],
        ),
        (
            vec![
                "grade",
                &a,
                "--no-tools",
                "--judge",
                "sql:SELECT rollout_id, CASE WHEN reward > 0 THEN 1 ELSE 0 END AS reward, 'by query' AS reason FROM rows",
                "-o",
                "graded-query.parquet",
            ],
            vec!["graded-query.parquet"],
        ),
    ];
    for (args, outputs) in &cases {
        let taken = same_answer(dir.path(), args, outputs, &workers);
        assert!(taken > 0, "{args:?}: no plan fragment reached a worker");
    }
    // Every worker took part.
    for w in &workers {
        assert!(w.tasks() > 0, "worker {} took no fragment", w.url);
    }

    // `wai run`: the same lake, run by run; the results tables equal but for the run's id.
    for name in ["local", "cluster"] {
        let at = dir.path().join(name);
        std::fs::create_dir_all(at.join("in")).unwrap();
        std::fs::copy(dir.path().join("a.jsonl"), at.join("in/night1.jsonl")).unwrap();
        crate::run::pipeline(&at, "nightly.toml", "lake");
    }
    let taken = same_answer(dir.path(), &["run", "nightly.toml"], &[], &workers);
    assert!(taken > 0, "wai run sent no plan fragment to a worker");
    let tables = |name: &str| -> Vec<Value> {
        let mut queries: Vec<String> = [
            "results_pass_at",
            "results_markers",
            "results_compare",
            "results_grade",
        ]
        .iter()
        .map(|t| format!("SELECT * EXCLUDE (run_id, run_time, input_digest, bytes_read, elapsed_s) FROM {t} ORDER BY 1, 2, 3"))
        .collect();
        queries.push("SELECT * FROM scored ORDER BY rollout_id".into());
        queries
            .iter()
            .flat_map(|q| crate::run::query(&dir.path().join(name), "lake", q))
            .collect()
    };
    let (local, on_cluster) = (tables("local"), tables("cluster"));
    assert!(!local.is_empty());
    assert_eq!(local, on_cluster, "the lake's tables differ on the cluster");
}

#[test]
fn decontaminate_gives_the_local_answer_on_three_workers() {
    let dir = tempfile::tempdir().unwrap();
    let a = parquet_rows(dir.path(), "a", 20_000, 1)
        .display()
        .to_string();
    let eval = eval_set(dir.path(), &dir.path().join("a.jsonl"));
    // Rows of another seed as JSONL, one line of them broken.
    let mixed = dir.path().join("mixed.jsonl");
    gen_rows(&dir.path().join("b.jsonl"), 500, 2);
    let b_lines = std::fs::read_to_string(dir.path().join("b.jsonl")).unwrap();
    let mut lines: Vec<&str> = b_lines.lines().collect();
    lines.insert(7, "{\"task_id\": \"broken\", ");
    std::fs::write(&mixed, lines.join("\n") + "\n").unwrap();
    let mixed = mixed.display().to_string();
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&[], &[])).collect();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec![
                "decontaminate",
                &a,
                "--against",
                &eval,
                "--fields",
                "prompt,final_text",
                "-o",
                "kept.parquet",
                "--dropped",
                "dropped.jsonl",
            ],
            vec!["kept.parquet", "dropped.jsonl"],
        ),
        // A JSONL input beside the Parquet one (screened here, its bad line set aside), and a
        // compared field the rows leave null.
        (
            vec![
                "decontaminate",
                &a,
                &mixed,
                "--against",
                &eval,
                "--fields",
                "prompt,reason",
                "--rejects",
                "rejects.jsonl",
                "--to",
                "jsonl",
                "-o",
                "kept.jsonl",
                "--dropped",
                "dropped-mixed.jsonl",
            ],
            vec!["kept.jsonl", "rejects.jsonl", "dropped-mixed.jsonl"],
        ),
    ];
    for (args, outputs) in &cases {
        let taken = same_answer(dir.path(), args, outputs, &workers);
        assert!(taken > 0, "{args:?}: no plan fragment reached a worker");
    }
    // Decontamination found rows by every lexical rule (alone and on the cluster, equally).
    let dropped = std::fs::read_to_string(dir.path().join("local/dropped.jsonl")).unwrap();
    for rule in ["same_task", "exact", "near"] {
        assert!(
            dropped.contains(&format!("\"rule\":\"{rule}\"")),
            "no row dropped by {rule}"
        );
    }
    let rejects = std::fs::read_to_string(dir.path().join("cluster/rejects.jsonl")).unwrap();
    assert_eq!(rejects.lines().count(), 1, "{rejects}");
}

#[test]
fn a_lake_on_s3_is_read_by_the_workers() {
    let Some(moto) = crate::s3::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let parquet = parquet_rows(dir.path(), "rows", 2000, 3);
    crate::s3::put(&moto, "lake/rows/part-0.parquet", &parquet);
    let (env, _) = crate::s3::s3_env(&moto);
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&[], &env)).collect();
    let url = format!("s3://{}/lake/rows/", crate::s3::BUCKET);
    let run = |cluster: Option<String>| -> Value {
        let mut cmd = wai();
        crate::s3::with_s3(&mut cmd, &moto);
        cmd.args(["--json", "pass-at", &url, "--by", "dims.tier"]);
        if let Some(c) = cluster {
            cmd.args(["--cluster", &c, "--cluster-split", "1000"]);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        normalized(&out.stdout)
    };
    let local = run(None);
    let before: usize = workers.iter().map(Worker::tasks).sum();
    assert_eq!(local, run(Some(cluster(&workers))));
    let after: usize = workers.iter().map(Worker::tasks).sum();
    assert!(after > before, "no fragment reached a worker");
}

/// The exit code and stderr of a `wai sql --out` on a cluster, and whether anything was written.
fn queried_on(cluster: &str) -> (Option<i32>, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let parquet = parquet_rows(dir.path(), "rows", 500, 4);
    let out_file = dir.path().join("result.parquet");
    let out = wai()
        .arg("sql")
        .arg("-t")
        .arg(&parquet)
        .arg("SELECT task_id, count(*) AS n FROM rows GROUP BY task_id ORDER BY task_id")
        .arg("-o")
        .arg(&out_file)
        .args(["--cluster", cluster, "--cluster-split", "1000"])
        .output()
        .unwrap();
    let written = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| !matches!(e.file_name().to_str(), Some("rows.jsonl" | "rows.parquet")));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        written,
    )
}

#[test]
fn a_worker_that_dies_mid_query_is_named_and_nothing_is_written() {
    let healthy: Vec<Worker> = (0..2).map(|_| Worker::start(&[], &[])).collect();
    let dying = Worker::start(&["--die-on-task"], &[]);
    let (code, err, written) = queried_on(&format!("{},{}", cluster(&healthy), dying.url));
    assert_eq!(code, Some(69), "{err}");
    assert!(
        err.contains(&format!("worker {} stopped answering", dying.url)),
        "{err}"
    );
    for w in &healthy {
        assert!(!err.contains(&format!("worker {} ", w.url)), "{err}");
    }
    assert!(!written, "a failed query left an output behind");
}

#[test]
fn a_worker_of_another_version_or_none_at_all_is_refused_before_any_work() {
    let good = Worker::start(&[], &[]);
    let old = Worker::start(&["--report-version", "wai 0.0.1"], &[]);
    let (code, err, written) = queried_on(&format!("{},{}", good.url, old.url));
    assert_eq!(code, Some(69), "{err}");
    assert!(
        err.contains(&format!("worker {} runs wai 0.0.1, this is wai ", old.url)),
        "{err}"
    );
    assert!(!written);
    assert_eq!(
        good.tasks() + old.tasks(),
        0,
        "work was sent before the check"
    );

    // An address nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = format!("http://127.0.0.1:{port}");
    let (code, err, written) = queried_on(&format!("{},{gone}", good.url));
    assert_eq!(code, Some(69), "{err}");
    assert!(
        err.contains(&format!("worker {gone} does not answer")),
        "{err}"
    );
    assert!(!written);
}

#[test]
fn the_workers_hold_a_query_to_the_coordinators_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let parquet = parquet_rows(dir.path(), "rows", 20_000, 6);
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&[], &[])).collect();
    // A grouping that keeps every row's text: past 1 MiB, within 1 GiB.
    let query =
        "SELECT rollout_id, max(final_text) AS t FROM rows GROUP BY rollout_id ORDER BY rollout_id";
    let run = |limit: &str, on: Option<&str>| {
        let mut cmd = wai();
        cmd.arg("sql").arg("-t").arg(&parquet).args([
            query,
            "--format",
            "csv",
            "--memory-limit",
            limit,
        ]);
        if let Some(c) = on {
            cmd.args(["--cluster", c, "--cluster-split", "1000"]);
        }
        cmd.output().unwrap()
    };
    let on = cluster(&workers);
    for place in [None, Some(on.as_str())] {
        let out = run("1M", place);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{place:?}: {err}");
        assert!(
            err.contains("more memory than --memory-limit 1.0 MiB"),
            "{err}"
        );
    }
    assert!(
        workers.iter().any(|w| w.tasks() > 0),
        "no fragment reached a worker"
    );
    let (local, far) = (run("1G", None), run("1G", Some(&on)));
    assert!(
        far.status.success(),
        "{}",
        String::from_utf8_lossy(&far.stderr)
    );
    assert_eq!(local.stdout, far.stdout);
}

#[test]
fn cluster_options_are_checked_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    gen_rows(&rows, 50, 5);
    for (cluster, needle) in [
        ("ftp://127.0.0.1:1", "not a worker's address"),
        ("https://127.0.0.1:1", "no TLS yet"),
        ("not a url", "is not a URL"),
        ("http://127.0.0.1:1/plans", "has a path"),
        ("http://127.0.0.1:1,http://127.0.0.1:1", "is named twice"),
    ] {
        refused(
            wai().arg("pass-at").arg(&rows).args(["--cluster", cluster]),
            needle,
        );
    }
    refused(
        wai().arg("pass-at").arg(&rows).args([
            "--cluster",
            "http://127.0.0.1:1",
            "--cluster-split",
            "0",
        ]),
        "--cluster-split must be at least 1 byte",
    );
    // `WAI_CLUSTER` is read as the flag is.
    refused(
        wai()
            .arg("pass-at")
            .arg(&rows)
            .env("WAI_CLUSTER", "ftp://127.0.0.1:1"),
        "not a worker's address",
    );
}
