//! The exit codes of `docs/exit-codes.md`, checked against the binary: every row of its family
//! table is a real case run here, and no case exits with a code the table does not give its
//! family.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use wai::testing::model_server::{Config, Fault, ModelServer};

use crate::support::{fixture, gen_rows, wai};

/// The (family, code) rows of the doc's family table.
fn documented() -> BTreeSet<(String, i32)> {
    let doc = include_str!("../../docs/exit-codes.md");
    let table = doc
        .split("## By command family")
        .nth(1)
        .expect("docs/exit-codes.md has a family table");
    let mut rows = BTreeSet::new();
    let mut family = String::new();
    for line in table.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Ok(code) = cells[3].parse::<i32>() else {
            continue; // the header
        };
        if !cells[1].is_empty() {
            cells[1].clone_into(&mut family);
        }
        rows.insert((family.clone(), code));
    }
    rows
}

/// One case: its family, the code it must exit with, and the command.
struct Case {
    family: &'static str,
    code: i32,
    cmd: assert_cmd::Command,
}

fn case(family: &'static str, code: i32, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Case {
    let mut cmd = wai();
    for a in args {
        cmd.arg(a);
    }
    Case { family, code, cmd }
}

/// The inputs the cases share, written into `dir`.
struct Files {
    scored: PathBuf,
    unjudged: PathBuf,
    tools: PathBuf,
    policy: PathBuf,
    bad_line: PathBuf,
    corrupt: PathBuf,
    no_format: PathBuf,
    missing: PathBuf,
    no_folder: PathBuf,
    worse: PathBuf,
    labels: PathBuf,
    not_json_tools: PathBuf,
    not_json_seeds: PathBuf,
    no_rollouts: PathBuf,
    wrong_type: PathBuf,
    unknown: PathBuf,
}

fn files(dir: &Path) -> Files {
    let write = |name: &str, text: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let scored = fixture("example_scored.jsonl");
    let worse: Vec<String> = std::fs::read_to_string(&scored)
        .unwrap()
        .lines()
        .map(|l| {
            let mut row: serde_json::Value = serde_json::from_str(l).unwrap();
            row["reward"] = 0.0.into();
            row.to_string()
        })
        .collect();
    Files {
        scored,
        unjudged: fixture("example_rows.jsonl"),
        tools: fixture("example_tools.json"),
        policy: fixture("example_policy.md"),
        bad_line: write(
            "bad.jsonl",
            b"{\"prompt\": \"a\", \"steps\": [], \"final_text\": \"x\"}\nnot json\n",
        ),
        corrupt: write(
            "corrupt.parquet",
            b"PAR1garbagegarbagegarbage\x05\x00\x00\x00PAR1",
        ),
        no_format: write("rows.txt", b"hello\n"),
        missing: dir.join("not-there.jsonl"),
        no_folder: dir.join("no-such-folder").join("out.jsonl"),
        worse: write("worse.jsonl", (worse.join("\n") + "\n").as_bytes()),
        labels: write("labels.jsonl", b"{\"key\": \"nope\", \"label\": 1}\n"),
        not_json_tools: write("tools.json", b"[1"),
        not_json_seeds: write("seeds.jsonl", b"not json\n"),
        no_rollouts: write(
            "http.jsonl",
            br#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t1", "spanId": "s1", "name": "GET /"}]}]}]}"#,
        ),
        unknown: write("odd.jsonl", b"{\"hello\": 1}\n"),
        wrong_type: write(
            "chat.jsonl",
            br#"{"task_id": "t", "reward": "high", "messages": [{"role": "user", "content": "q"}]}"#,
        ),
    }
}

/// The cases of the readers family: each through three commands that read rows.
fn readers(f: &Files, dir: &Path) -> Vec<Case> {
    let glob = dir.join("*.nomatch.jsonl");
    let unreachable = "http://127.0.0.1:9/rows.jsonl";
    let out = dir.join("read.jsonl");
    let mut cases = Vec::new();
    for (code, input) in [
        (64, f.no_format.as_os_str()),
        (65, f.bad_line.as_os_str()),
        (65, f.corrupt.as_os_str()),
        (66, f.missing.as_os_str()),
        (66, glob.as_os_str()),
    ] {
        cases.push(case("readers", code, &[&"pass-at", &input]));
        cases.push(case("readers", code, &[&"convert", &input, &"-o", &out]));
        cases.push(case("readers", code, &[&"select", &input, &"-o", &out]));
    }
    cases.push(case("readers", 74, &[&"pass-at", &unreachable]));
    cases
}

fn measure(f: &Files, dir: &Path) -> Vec<Case> {
    let (scored, planted) = (&f.scored, fixture("hack_scan_planted.jsonl"));
    let _ = dir;
    vec![
        case("measure", 0, &[&"pass-at", scored]),
        case("measure", 0, &[&"markers", scored]),
        case("measure", 1, &[&"compare", scored, &f.worse]),
        case(
            "measure",
            1,
            &[&"hack-scan", &planted, &"--endorsed", &"tool:lookup_order"],
        ),
        case("measure", 2, &[&"pass-at", &f.unjudged]),
        case("measure", 64, &[&"pass-at", scored, &"--draws", &"0"]),
        case(
            "measure",
            64,
            &[&"holdout-size", &"--base", &"2", &"--effect", &"0.1"],
        ),
        case(
            "measure",
            64,
            &[&"hack-scan", scored, &"--feature", &"x=final_text"],
        ),
        case("measure", 65, &[&"pass-at", scored, &"--by", &"dims.nope"]),
        case("measure", 65, &[&"markers", scored, &"--name", &"nope"]),
        case("measure", 66, &[&"compare", scored, &f.missing]),
    ]
}

/// A model server that refuses every key, and one that answers every call.
static REFUSING: std::sync::LazyLock<ModelServer> = std::sync::LazyLock::new(|| {
    ModelServer::start(Config {
        latency: Duration::ZERO,
        faults: vec![(Fault::EchoKey, 1.0)],
    })
});
static ANSWERING: std::sync::LazyLock<ModelServer> =
    std::sync::LazyLock::new(|| ModelServer::start(Config::default()));

/// The grade family's cases with an LLM judge: a server that refuses the key, a spent budget.
fn grade_models(f: &Files, dir: &Path) -> Vec<Case> {
    let rows = &f.unjudged;
    vec![
        case(
            "grade",
            69,
            &[
                &"grade",
                rows,
                &"--judge",
                &format!("llm:endpoint:m@{}", REFUSING.url()),
                &"--no-cache",
                &"--no-tools",
                &"-o",
                &dir.join("refused.jsonl"),
            ],
        ),
        case(
            "grade",
            75,
            &[
                &"grade",
                rows,
                &"--judge",
                &format!("llm:endpoint:m@{}", ANSWERING.url()),
                &"--no-cache",
                &"--max-calls",
                &"1",
                &"--concurrency",
                &"1",
                &"--no-tools",
                &"-o",
                &dir.join("budget.jsonl"),
            ],
        ),
    ]
}

fn grade(f: &Files, dir: &Path) -> Vec<Case> {
    let out = dir.join("graded.jsonl");
    let (rows, scored) = (&f.unjudged, &f.scored);
    vec![
        case(
            "grade",
            0,
            &[
                &"grade",
                rows,
                &"--judge",
                &"sql:1.0",
                &"--no-tools",
                &"-o",
                &out,
            ],
        ),
        case(
            "grade",
            1,
            &[
                &"grade",
                rows,
                &"--judge",
                &"sql:0.0",
                &"--no-tools",
                &"--gate",
                &"0.9",
                &"-o",
                &dir.join("failed.jsonl"),
            ],
        ),
        case(
            "grade",
            1,
            &[&"gate", scored, &"--floor", &"0.99", &"--no-tools"],
        ),
        case(
            "grade",
            2,
            &[&"gate", rows, &"--floor", &"0.5", &"--no-tools"],
        ),
        case(
            "grade",
            64,
            &[&"grade", rows, &"--judge", &"nope:1", &"-o", &out],
        ),
        case(
            "grade",
            65,
            &[
                &"labels",
                &"attach",
                rows,
                &f.labels,
                &"-o",
                &dir.join("l.jsonl"),
            ],
        ),
        case(
            "grade",
            65,
            &[&"compare-judges", rows, &"--judge", &"a=sql:1.0"],
        ),
        case(
            "grade",
            66,
            &[
                &"grade",
                rows,
                &"--judge",
                &format!("verify:{}", f.missing.with_extension("toml").display()),
                &"-o",
                &out,
            ],
        ),
        case(
            "grade",
            66,
            &[
                &"labels",
                &"attach",
                rows,
                &f.missing,
                &"-o",
                &dir.join("l.jsonl"),
            ],
        ),
        case(
            "grade",
            74,
            &[
                &"grade",
                rows,
                &"--judge",
                &"sql:1.0",
                &"--no-tools",
                &"-o",
                &f.no_folder,
            ],
        ),
    ]
}

fn simulate(f: &Files, dir: &Path) -> Vec<Case> {
    let out = dir.join("sim.jsonl");
    let world = |extra: &[&dyn AsRef<std::ffi::OsStr>], out: &Path| {
        let mut cmd = wai();
        cmd.args(["simulate", "--budget", "20", "--out"]).arg(out);
        for a in extra {
            cmd.arg(a);
        }
        cmd
    };
    let mut cases = vec![
        Case {
            family: "simulate",
            code: 0,
            cmd: world(&[&"--tools", &f.tools, &"--policy", &f.policy], &out),
        },
        Case {
            family: "simulate",
            code: 64,
            cmd: world(
                &[
                    &"--tools",
                    &f.tools,
                    &"--policy",
                    &f.policy,
                    &"--repeats",
                    &"0",
                ],
                &out,
            ),
        },
        Case {
            family: "simulate",
            code: 65,
            cmd: world(
                &[&"--tools", &f.not_json_tools, &"--policy", &f.policy],
                &out,
            ),
        },
        Case {
            family: "simulate",
            code: 65,
            cmd: world(
                &[
                    &"--tools",
                    &f.tools,
                    &"--policy",
                    &f.policy,
                    &"--seeds",
                    &f.not_json_seeds,
                ],
                &out,
            ),
        },
        Case {
            family: "simulate",
            code: 66,
            cmd: world(&[&"--tools", &f.missing, &"--policy", &f.policy], &out),
        },
        Case {
            family: "simulate",
            code: 66,
            cmd: world(&[&"--tools", &f.tools, &"--policy", &f.missing], &out),
        },
        Case {
            family: "simulate",
            code: 74,
            cmd: world(
                &[&"--tools", &f.tools, &"--policy", &f.policy],
                &f.no_folder,
            ),
        },
    ];
    cases.push(case("simulate", 64, &[&"demo", &"--rate", &"2"]));
    cases
}

fn export(f: &Files, dir: &Path) -> Vec<Case> {
    let out = dir.join("train.jsonl");
    let rows = &f.unjudged;
    vec![
        case("export", 0, &[&"export", rows, &"-o", &out]),
        case(
            "export",
            2,
            &[&"select", rows, &"-o", &dir.join("sel.jsonl")],
        ),
        case(
            "export",
            64,
            &[&"select", &f.scored, &"--min-reward", &"NaN", &"-o", &out],
        ),
        case(
            "export",
            64,
            &[&"export", rows, &"--format", &"nope", &"-o", &out],
        ),
        case("export", 65, &[&"export", &f.scored, &"-o", &out]),
        case(
            "export",
            66,
            &[&"export", rows, &"--system-prompt", &f.missing, &"-o", &out],
        ),
        case(
            "export",
            66,
            &[&"export", rows, &"--tools", &f.missing, &"-o", &out],
        ),
        case("export", 74, &[&"export", rows, &"-o", &f.no_folder]),
        case("export", 74, &[&"select", &f.scored, &"-o", &f.no_folder]),
    ]
}

fn decontaminate(f: &Files, dir: &Path) -> Vec<Case> {
    let out = dir.join("clean.jsonl");
    let rows = &f.unjudged;
    let d = |code, against: &dyn AsRef<std::ffi::OsStr>, extra: &[&str], out: &Path| {
        let mut c = case(
            "decontaminate",
            code,
            &[&"decontaminate", rows, &"--against", against, &"-o", &out],
        );
        c.cmd.args(extra);
        c
    };
    vec![
        d(0, &f.scored, &[], &out),
        d(64, &f.scored, &["--overlap", "2"], &out),
        d(65, &f.bad_line, &[], &out),
        d(66, &f.missing, &[], &out),
        d(74, &f.scored, &[], &f.no_folder),
    ]
}

fn ingest(f: &Files, dir: &Path) -> Vec<Case> {
    let out = dir.join("ingested.jsonl");
    vec![
        case(
            "ingest",
            0,
            &[&"convert", &f.unjudged, &"-o", &dir.join("rows.parquet")],
        ),
        case("ingest", 2, &[&"ingest", &f.no_rollouts, &"-o", &out]),
        case(
            "ingest",
            64,
            &[&"convert", &f.unjudged, &"-o", &dir.join("rows.weird")],
        ),
        case("ingest", 65, &[&"ingest", &f.wrong_type, &"-o", &out]),
        case("ingest", 65, &[&"ingest", &f.unknown, &"-o", &out]),
        case("ingest", 66, &[&"ingest", &f.missing, &"-o", &out]),
        case(
            "ingest",
            74,
            &[&"ingest", &f.wrong_type, &"-o", &f.no_folder],
        ),
    ]
}

fn sql(f: &Files, dir: &Path) -> Vec<Case> {
    let _ = dir;
    let count = "SELECT count(*) FROM rows";
    let q = |code, query: &[&str], table: &Path, extra: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut c = case("sql", code, &[&"sql"]);
        c.cmd.args(query).arg("--table").arg(table);
        for a in extra {
            c.cmd.arg(a);
        }
        c
    };
    vec![
        q(0, &[count], &f.unjudged, &[]),
        q(64, &["SELEC nope"], &f.unjudged, &[]),
        q(64, &["DROP TABLE rows"], &f.unjudged, &[]),
        q(64, &["--query", "nope"], &f.unjudged, &[]),
        q(65, &[count], &f.bad_line, &[]),
        q(66, &[count], &f.missing, &[]),
        q(74, &[count], &f.unjudged, &[&"-o", &f.no_folder]),
    ]
}

/// `wai run` and `wai lake`: each case a pipeline over its own lake in its own folder.
fn batch(f: &Files, dir: &Path) -> Vec<Case> {
    let pipeline = |name: &str, input: &Path, gate: &str| {
        let folder = dir.join(format!("batch-{name}"));
        std::fs::create_dir_all(&folder).unwrap();
        let text = format!(
            "lake = \"lake\"\ngates = [{gate:?}]\n[input]\npaths = [{:?}]\n[[stage]]\nrun = \"pass-at\"\n",
            input.display().to_string()
        );
        std::fs::write(folder.join("p.toml"), text).unwrap();
        folder
    };
    let run = |code, folder: &Path| {
        let mut c = case("batch", code, &[&"run", &"p.toml"]);
        c.cmd.current_dir(folder);
        c
    };
    let ok = pipeline("ok", &f.scored, "pass_at.pass_at_1 >= 0");
    let failed = pipeline("failed", &f.scored, "pass_at.pass_at_1 > 1");
    let hollow = pipeline("hollow", &f.unjudged, "pass_at.n_rows >= 0");
    let bad = pipeline("bad", &f.scored, "pass_at.pass_at_1 >= 0");
    std::fs::write(
        bad.join("p.toml"),
        std::fs::read_to_string(bad.join("p.toml")).unwrap() + "bye = [\"x\"]\n",
    )
    .unwrap();
    // A night read `changing.jsonl`; then it was rewritten.
    let changing = dir.join("changing.jsonl");
    std::fs::copy(&f.scored, &changing).unwrap();
    let changed = pipeline("changed", &changing, "pass_at.pass_at_1 >= 0");
    wai()
        .current_dir(&changed)
        .args(["run", "p.toml"])
        .assert()
        .success();
    let mut text = std::fs::read_to_string(&changing).unwrap();
    let first = text.lines().next().unwrap().to_owned();
    text.push_str(&first);
    text.push('\n');
    std::fs::write(&changing, text).unwrap();
    let nothing = pipeline(
        "nothing",
        &dir.join("no-such-folder/*.jsonl"),
        "pass_at.k >= 0",
    );
    vec![
        run(0, &ok),
        run(1, &failed),
        run(2, &hollow),
        run(64, &bad),
        case("batch", 64, &[&"lake", &"status", &dir]),
        run(65, &changed),
        run(66, &nothing),
    ]
}

fn report(f: &Files, dir: &Path) -> Vec<Case> {
    let page = dir.join("page.html");
    let r = |code, input: &dyn AsRef<std::ffi::OsStr>, out: &Path| {
        case("report", code, &[&"report", input, &"--out", &out])
    };
    vec![
        r(0, &f.scored, &page),
        r(64, &f.scored, &dir.join("page.txt")),
        r(65, &f.not_json_tools, &page),
        r(66, &f.missing, &page),
        r(74, &f.scored, &dir.join("no-such-folder").join("page.html")),
    ]
}

/// Starts `cmd`, waits until `started` holds a line (the worker is busy), sends `signal`, and
/// returns the exit code.
fn stopped(mut cmd: Command, started: &Path, signal: &str) -> i32 {
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_mins(1);
    while !started.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let sent = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    child.wait().unwrap().code().unwrap_or(-1)
}

/// A worker script that notes it has a request, then hangs.
fn busy(dir: &Path, name: &str) -> (String, PathBuf) {
    let started = dir.join(format!("{name}.started"));
    let script = dir.join(format!("{name}.py"));
    std::fs::write(
        &script,
        format!(
            "import sys, time\nfor line in sys.stdin:\n    open({:?}, 'w').write('x')\n    time.sleep(300)\n",
            started.display().to_string()
        ),
    )
    .unwrap();
    (format!("cmd:python3 {}", script.display()), started)
}

/// A port held open for the whole test: `wai worker` cannot listen on it.
static TAKEN: std::sync::LazyLock<std::net::TcpListener> =
    std::sync::LazyLock::new(|| std::net::TcpListener::bind("127.0.0.1:0").unwrap());

fn cluster(f: &Files, _dir: &Path) -> Vec<Case> {
    let scored = &f.scored;
    // A port nothing listens on: bound, then let go.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let taken = TAKEN.local_addr().unwrap().to_string();
    vec![
        case(
            "cluster",
            64,
            &[&"pass-at", scored, &"--cluster", &"https://127.0.0.1:1"],
        ),
        case(
            "cluster",
            69,
            &[
                &"pass-at",
                scored,
                &"--cluster",
                &format!("http://127.0.0.1:{free}"),
            ],
        ),
        case("cluster", 74, &[&"worker", &"--listen", &taken]),
    ]
}

fn signals(f: &Files, dir: &Path) -> Vec<(&'static str, i32, i32)> {
    let rows = dir.join("forty.jsonl");
    gen_rows(&rows, 40, 1);
    let (judge, judging) = busy(dir, "judge");
    let mut grade = Command::new(assert_cmd::cargo::cargo_bin("wai"));
    grade
        .arg("grade")
        .arg(&rows)
        .args(["--judge", &judge, "--no-tools", "-o"])
        .arg(dir.join("stopped.jsonl"));
    let (agent, playing) = busy(dir, "agent");
    let mut simulate = Command::new(assert_cmd::cargo::cargo_bin("wai"));
    simulate
        .args(["simulate", "--budget", "20", "--agent", &agent, "--tools"])
        .arg(&f.tools)
        .arg("--policy")
        .arg(&f.policy)
        .arg("--out")
        .arg(dir.join("stopped-sim.jsonl"));
    vec![
        ("grade", 143, stopped(grade, &judging, "-TERM")),
        ("simulate", 130, stopped(simulate, &playing, "-INT")),
    ]
}

#[test]
fn every_code_of_the_family_table_is_what_the_binary_exits_with() {
    let dir = tempfile::tempdir().unwrap();
    let f = files(dir.path());
    let mut cases = Vec::new();
    for family in [
        readers,
        measure,
        grade,
        grade_models,
        simulate,
        export,
        decontaminate,
        ingest,
        sql,
        batch,
        report,
        cluster,
    ] {
        cases.extend(family(&f, dir.path()));
    }
    let mut seen = BTreeSet::new();
    let mut wrong = Vec::new();
    for mut c in cases {
        let what = format!("{:?}", c.cmd);
        let out = c.cmd.output().unwrap();
        let got = out.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if got != c.code || (got > 2 && !stderr.starts_with("error: ")) {
            wrong.push(format!(
                "{} {what}: exit {got}, the table says {}: {stderr}",
                c.family, c.code
            ));
        }
        seen.insert((c.family.to_owned(), c.code));
    }
    for (family, code, got) in signals(&f, dir.path()) {
        if got != code {
            wrong.push(format!("{family}: a signal gave {got}, not {code}"));
        }
        seen.insert((family.to_owned(), code));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every row of the table is run here, and every case run here is a row of the table.
    let documented = documented();
    assert_eq!(
        seen, documented,
        "docs/exit-codes.md and these cases disagree"
    );
    assert!(
        documented.iter().all(|(_, code)| *code != 70),
        "70 is a bug, no one's row"
    );
}

#[test]
fn the_readme_gives_the_codes_of_the_table() {
    let readme = include_str!("../../README.md");
    let doc = include_str!("../../docs/exit-codes.md");
    for (code, word) in [
        ("0", "success"),
        ("1", "a gate or check failed"),
        ("2", "the run is hollow"),
        ("64", "usage error"),
        ("65", "bad input data"),
        ("66", "missing input"),
        ("69", "a model endpoint cannot serve the run"),
        ("70", "internal error"),
        ("74", "I/O error"),
        ("75", "the model budget"),
    ] {
        assert!(
            readme.contains(&format!("{code} {word}")),
            "README: {code} {word}"
        );
        assert!(
            doc.contains(&format!("| {code} | {word}")),
            "docs/exit-codes.md: {code} {word}"
        );
    }
}
