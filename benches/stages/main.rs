//! Benches, named by data shape. Data comes from `wai gen` (seeded), made once per run in a
//! temp folder. Run: `cargo bench` (or `cargo bench -- convert` for one group).
//!
//! Every stage bench runs on both row shapes (its last name part, `wai` or `reference`): `wai
//! gen` rows (with `messages`) and the same rows as the reference writes them (`wai gen --shape
//! reference`: no `messages`, arguments as objects, markers as booleans), so a slow path for
//! either shape shows. Each shape's files are made the first time a bench asks for them.
//!
//! Figures the row-store issue asks for:
//! - `convert/jsonl_to_parquet/rows=200k`: input MB/s (divan prints bytes/s from the counter);
//! - `sql/group_by_task/rows=1M`: `SELECT task_id, count(*), avg(reward) FROM rows GROUP BY task_id`;
//! - `sql/scan/rows=1M/cols=task_id,reward` against `cols=all`: what projection pushdown saves.
//!
//! Figures the pass@k issue asks for:
//! - `pass_at/rows=1M/draws=2000`: all three numbers with intervals from a 1M-row Parquet file;
//! - `pass_at/rows=100k/draws=2000`: against the reference on the same rows (`ref_oracle.py pass-at`).
//!
//! Figure the ingest issue asks for:
//! - `ingest/openai_chat/rows=100k`: input MB/s of OpenAI chat records (made from `wai gen` rows).
//!
//! Figures the traces issue asks for (data copied from the fixtures the real libraries wrote,
//! `ingest_data.rs`; set `WAI_BENCH_INGEST_DIR` to keep the files there for timing by hand):
//! - `ingest/inspect_eval/samples=100k`: MB/s of uncompressed sample JSON (target 50 MB/s);
//! - `ingest/otlp/spans=1M`: MB/s of OTLP JSON, traces and logs (target 100 MB/s).
//!
//! Figures the grade issue asks for (the judge over rows already read, verdict columns built;
//! the end-to-end `wai grade` also reads and rewrites every row):
//! - `grade/sql_expr/rows=1M`: a SQL expression judge;
//! - `grade/verifiers/rows=1M`: regex + tool called + length;
//! - `grade/cmd_python/rows=100k/workers=2`: a trivial Python command judge, rows/s end to end;
//! - `grade/end_to_end/rows=100k`: `wai grade` with the verifier stack, Parquet in and out.
//! - `grade/end_to_end_sql/rows=100k`: `wai grade` with a SQL expression, Parquet in and out
//!   (the columns it does not read are copied).
//!
//! Figures the simulate issue asks for:
//! - `simulate/seeded/rollouts=200k`: the seeded agent against the mock world, rows in Parquet
//!   (target: 100k rollouts/s);
//! - `simulate/demo`: `wai demo` end to end (target: under 10 s).
//!
//! Figure the evals issue asks for:
//! - `coverage/coverage_gap/asks=10k/rules=50` (target: under 1 s).
//!
//! Figure the decontaminate issue asks for:
//! - `decontaminate/rows=1M_eval=5k` (target: under 5 s), beside its floor
//!   `convert/parquet_to_parquet/rows=1M` (the same rows read and written, nothing checked).
//!
//! Figures the interval issue asks for (the coverage study, docs/statistics.md):
//! - `coverage_study/cell`: one cell at the study's size (2,000 runs, 2,000 draws);
//! - `coverage_study/full`: every cell (`WAI_COVERAGE_STUDY=full` for the study's size).
//!
//! Figures the models issue asks for: `models.rs`.
//!
//! Figures the batch-job issue asks for (small here; `benches/lake/moonshot.sh` for millions):
//! - `lake/run/pipeline/rows=200k` against `lake/run/separate_commands/rows=200k`: the pipeline
//!   as one `wai run` and as nine commands.
//!
//! Figure the report issue asks for (`benches/report/render.sh` gives the page's size and how
//! long headless Chromium takes to draw it):
//! - `report/rows=1M`: `wai report` of a 1M-row run.
//!
//! Figures the select/export issue asks for:
//! - `training/select_rl/rows=1M` (target: under 3 s);
//! - `training/export_openai/rows=1M` (target: 200 MB/s written).

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use divan::counter::BytesCount;
use divan::{Bencher, black_box};

mod ingest_data;
mod models;

// The same allocator as the binary, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The generated data's folders (one a shape), removed when the benches end (a static's
/// `TempDir` is never dropped, and each run left 3 GB in the temp folder).
static DATA_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
/// The trace files' folder, removed likewise unless `WAI_BENCH_INGEST_DIR` named it.
static TRACES_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn main() {
    struct Cleanup;
    impl Drop for Cleanup {
        fn drop(&mut self) {
            if let Ok(dirs) = DATA_DIRS.lock() {
                for dir in dirs.iter() {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            if let Some(dir) = TRACES_DIR.get() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
    // Dropped on return and on a panic's unwinding alike.
    let _cleanup = Cleanup;
    divan::main();
}

struct Data {
    dir: tempfile::TempDir,
    jsonl_200k: PathBuf,
    chat_100k: PathBuf,
    parquet_100k: PathBuf,
    parquet_1m: PathBuf,
    parquet_100k_b: PathBuf,
    parquet_1m_b: PathBuf,
    parquet_1m_gold: PathBuf,
    parquet_1m_shortcut: PathBuf,
    eval_5k: PathBuf,
}

fn run(args: &[&str]) {
    let mut sink = Vec::new();
    let outcome = wai::run_command_line(
        std::iter::once("wai").chain(args.iter().copied()),
        &mut sink,
    )
    .expect("command runs");
    black_box((outcome.status, sink.len()));
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// The row shapes every stage bench runs on (`wai gen --shape`).
const SHAPES: [&str; 2] = ["wai", "reference"];

/// `wai gen --rows ROWS --seed SEED --shape SHAPE [EXTRA...] -o dir/NAME`, returning the path.
fn generate(dir: &Path, name: &str, rows: usize, seed: u64, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let (rows, seed) = (rows.to_string(), seed.to_string());
    let shape = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| SHAPES.iter().find(|s| n.ends_with(&format!("-{s}"))))
        .copied()
        .unwrap_or("wai");
    let mut args = vec![
        "-q", "gen", "--rows", &rows, "--seed", &seed, "--shape", shape,
    ];
    args.extend_from_slice(extra);
    args.extend(["-o", path(&out)]);
    run(&args);
    out
}

/// `wai gen` rows (with `messages`).
static DATA: LazyLock<Data> = LazyLock::new(|| make_data("wai"));
/// The same rows in the reference's shape.
static REFERENCE: LazyLock<Data> = LazyLock::new(|| make_data("reference"));

/// The data of `shape` (`wai` or `reference`).
fn data(shape: &str) -> &'static Data {
    if shape == "reference" {
        &REFERENCE
    } else {
        &DATA
    }
}

/// Makes the bench files of one shape in a fresh folder (its name ends in the shape).
fn make_data(shape: &str) -> Data {
    let dir = tempfile::Builder::new()
        .suffix(&format!("-{shape}"))
        .tempdir()
        .expect("temp dir");
    if let Ok(mut dirs) = DATA_DIRS.lock() {
        dirs.push(dir.path().to_path_buf());
    }
    let d = dir.path();
    let jsonl_200k = generate(d, "rows-200k.jsonl", 200_000, 1, &[]);
    let parquet_100k = generate(d, "rows-100k.parquet", 100_000, 1, &[]);
    let parquet_1m = generate(d, "rows-1m.parquet", 1_000_000, 1, &[]);
    // Second arms for compare: the same task ids, other draws.
    let parquet_100k_b = generate(d, "rows-100k-b.parquet", 100_000, 2, &[]);
    let parquet_1m_b = generate(d, "rows-1m-b.parquet", 1_000_000, 2, &[]);
    // Scored rows with about 5k gold labels, for judge trust.
    let parquet_1m_gold = generate(
        d,
        "rows-1m-gold.parquet",
        1_000_000,
        3,
        &["--gold", "0.005"],
    );
    // A reward that follows a planted word, for the hack scan.
    let parquet_1m_shortcut = generate(
        d,
        "rows-1m-shortcut.parquet",
        1_000_000,
        4,
        &["--shortcut", "absolutely"],
    );
    // An eval set of 5k prompts under their own task ids (plain JSONL, as a benchmark ships).
    let eval_5k_rows = generate(d, "eval-5k.parquet", 5_000, 7, &[]);
    let eval_5k = dir.path().join("eval-5k.jsonl");
    run(&[
        "-q",
        "sql",
        "-t",
        path(&eval_5k_rows),
        "SELECT concat('ev-', task_id) AS task_id, prompt FROM rows",
        "--format",
        "jsonl",
        "--out",
        path(&eval_5k),
    ]);
    // Chat records are made of `messages`: only `wai gen` rows have them.
    let chat_100k = dir.path().join("chat-100k.jsonl");
    if shape == "wai" {
        write_chat(&jsonl_200k, &chat_100k, 100_000);
    }
    // The generated gigabytes reach the disk now, not while the first benches are timed.
    for entry in std::fs::read_dir(d).expect("data dir").flatten() {
        if let Ok(file) = std::fs::File::open(entry.path()) {
            let _ = file.sync_all();
        }
    }
    Data {
        dir,
        jsonl_200k,
        chat_100k,
        parquet_100k,
        parquet_1m,
        parquet_100k_b,
        parquet_1m_b,
        parquet_1m_gold,
        parquet_1m_shortcut,
        eval_5k,
    }
}

/// Rewrites `wai gen` rows as OpenAI chat records: a system turn, tool calls with JSON-string
/// arguments in the nested `function` shape, tool results by `tool_call_id`.
fn write_chat(rows: &Path, out: &Path, n: usize) {
    use serde_json::{Value, json};
    use std::io::{BufRead, Write};
    let reader = std::io::BufReader::new(std::fs::File::open(rows).expect("rows"));
    let mut w = std::io::BufWriter::new(std::fs::File::create(out).expect("chat file"));
    for line in reader.lines().take(n) {
        let row: Value = serde_json::from_str(&line.expect("line")).expect("row");
        let mut messages = vec![
            json!({"role": "system", "content": "You are the support agent of an online store. Look up orders before acting."}),
        ];
        for m in row["messages"].as_array().into_iter().flatten() {
            let mut m = m.clone();
            if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for c in calls.iter_mut() {
                    *c = json!({"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"].to_string()}});
                }
            }
            messages.push(m);
        }
        let rec = json!({"task_id": row["task_id"], "trial": row["rollout_index"], "reward": row["reward"], "model": "demo-agent-v1", "messages": messages});
        writeln!(w, "{rec}").expect("write");
    }
    w.flush().expect("flush");
}

mod convert {
    use super::{Bencher, BytesCount, SHAPES, data, path, run};

    #[divan::bench(name = "jsonl_to_parquet/rows=200k", sample_count = 5, args = SHAPES)]
    fn jsonl_to_parquet(b: Bencher, shape: &str) {
        let data = data(shape);
        let bytes = std::fs::metadata(&data.jsonl_200k).expect("input").len();
        let out = data.dir.path().join("out.parquet");
        b.counter(BytesCount::new(bytes))
            .bench(|| run(&["-q", "convert", path(&data.jsonl_200k), "-o", path(&out)]));
    }

    /// Parquet to Parquet, every row: what decontamination (which reads and rewrites every
    /// kept row) cannot go below.
    #[divan::bench(name = "parquet_to_parquet/rows=1M", sample_count = 5, args = SHAPES)]
    fn parquet_to_parquet(b: Bencher, shape: &str) {
        let data = data(shape);
        let out = data.dir.path().join("out-1m.parquet");
        b.bench(|| run(&["-q", "convert", path(&data.parquet_1m), "-o", path(&out)]));
    }

    #[divan::bench(name = "parquet_to_jsonl/rows=1M", sample_count = 2, args = SHAPES)]
    fn parquet_to_jsonl(b: Bencher, shape: &str) {
        let data = data(shape);
        let out = data.dir.path().join("out.jsonl");
        b.bench(|| run(&["-q", "convert", path(&data.parquet_1m), "-o", path(&out)]));
    }
}

mod sql {
    use super::{Bencher, SHAPES, data, path, run};

    #[divan::bench(name = "group_by_task/rows=1M", sample_count = 10, args = SHAPES)]
    fn group_by_task(b: Bencher, shape: &str) {
        let data = data(shape);
        b.bench(|| {
            run(&[
                "sql",
                "SELECT task_id, count(*), avg(reward) FROM rows GROUP BY task_id",
                "--format",
                "csv",
                "-t",
                path(&data.parquet_1m),
            ]);
        });
    }

    #[divan::bench(
        name = "scan/rows=1M",
        args = ["task_id,reward/wai", "all/wai", "task_id,reward/reference", "all/reference"],
        sample_count = 5
    )]
    fn scan(b: Bencher, cols_shape: &str) {
        let (cols, shape) = cols_shape.split_once('/').unwrap_or((cols_shape, "wai"));
        let data = data(shape);
        let q = if cols == "all" {
            "SELECT sum(cardinality(messages)) + sum(cardinality(steps)) + sum(length(final_text)) + sum(length(extra)) FROM rows"
        } else {
            "SELECT count(*) FROM rows WHERE task_id IS NOT NULL AND (reward IS NULL OR reward >= 0)"
        };
        b.bench(|| run(&["sql", q, "--format", "csv", "-t", path(&data.parquet_1m)]));
    }
}

mod pass_at {
    use super::{Bencher, SHAPES, data, path, run};

    #[divan::bench(name = "pass_at/rows=1M/draws=2000", sample_count = 5, args = SHAPES)]
    fn rows_1m(b: Bencher, shape: &str) {
        let data = data(shape);
        b.bench(|| run(&["-q", "pass-at", path(&data.parquet_1m)]));
    }

    #[divan::bench(name = "pass_at/rows=100k/draws=2000", sample_count = 10, args = SHAPES)]
    fn rows_100k(b: Bencher, shape: &str) {
        let data = data(shape);
        b.bench(|| run(&["-q", "pass-at", path(&data.parquet_100k)]));
    }

    #[divan::bench(name = "markers/rows=1M/draws=2000", sample_count = 5, args = SHAPES)]
    fn markers_1m(b: Bencher, shape: &str) {
        let data = data(shape);
        b.bench(|| run(&["-q", "markers", path(&data.parquet_1m)]));
    }
}

mod report {
    use super::{Bencher, SHAPES, data, path, run};

    /// `wai report` of 1M scored rows: pass@k with every default slice, markers, failures by
    /// tool and tier, and the transcript browser's 1,000 sampled rows, written as one page.
    #[divan::bench(name = "report/rows=1M", sample_count = 3, args = SHAPES)]
    fn rows_1m(b: Bencher, shape: &str) {
        let data = data(shape);
        let out = data.dir.path().join("report.html");
        b.bench(|| run(&["-q", "report", path(&data.parquet_1m), "--out", path(&out)]));
    }
}

mod compare {
    use super::{Bencher, SHAPES, data, path, run};

    #[divan::bench(name = "compare/rows=1M_vs_1M", sample_count = 3, args = SHAPES)]
    fn rows_1m(b: Bencher, shape: &str) {
        let data = data(shape);
        b.bench(|| {
            run(&[
                "-q",
                "compare",
                path(&data.parquet_1m),
                path(&data.parquet_1m_b),
            ]);
        });
    }

    #[divan::bench(name = "compare/rows=100k_vs_100k", sample_count = 5, args = SHAPES)]
    fn rows_100k(b: Bencher, shape: &str) {
        let data = data(shape);
        b.bench(|| {
            run(&[
                "-q",
                "compare",
                path(&data.parquet_100k),
                path(&data.parquet_100k_b),
            ]);
        });
    }
}

mod decontaminate {
    use super::{Bencher, SHAPES, data, path, run};

    #[divan::bench(name = "decontaminate/rows=1M_eval=5k", sample_count = 5, args = SHAPES)]
    fn rows_1m(b: Bencher, shape: &str) {
        let data = data(shape);
        let out = data.dir.path().join("clean-1m.parquet");
        b.bench(|| {
            run(&[
                "-q",
                "decontaminate",
                path(&data.parquet_1m),
                "--against",
                path(&data.eval_5k),
                "-o",
                path(&out),
            ]);
        });
    }
}

mod judge_trust {
    use super::{Bencher, SHAPES, data, path, run};

    #[divan::bench(name = "judge_trust/rows=1M_labels=5k", sample_count = 5, args = SHAPES)]
    fn rows_1m(b: Bencher, shape: &str) {
        let data = data(shape);
        b.bench(|| run(&["-q", "judge-trust", path(&data.parquet_1m_gold)]));
    }
}

mod hack_scan {
    use super::{Bencher, SHAPES, data, path, run};

    // 1M rows, 6 per task: 9 hand features, 6 tools, 3 markers, 200 words and pairs (216
    // columns, 150 features after aliases and conjunctions), 100 shuffles.
    #[divan::bench(name = "hack_scan/rows=1M/perms=100", sample_count = 3, args = SHAPES)]
    fn rows_1m(b: Bencher, shape: &str) {
        let data = data(shape);
        b.bench(|| {
            run(&[
                "-q",
                "hack-scan",
                path(&data.parquet_1m_shortcut),
                "--endorsed",
                "absolutely",
            ]);
        });
    }
}

/// The trace files of the ingest benches: an inspect `.eval` log of 100k samples, OTLP traces
/// and logs of 1M spans, and the bytes of JSON each holds.
struct Traces {
    dir: PathBuf,
    eval: PathBuf,
    eval_bytes: u64,
    otlp: (PathBuf, PathBuf),
    otlp_bytes: u64,
}

static TRACES: LazyLock<Traces> = LazyLock::new(|| {
    let dir = if let Some(d) = std::env::var_os("WAI_BENCH_INGEST_DIR") {
        std::fs::create_dir_all(&d).expect("WAI_BENCH_INGEST_DIR");
        PathBuf::from(d)
    } else {
        let d = tempfile::tempdir().expect("temp dir").keep();
        let _ = TRACES_DIR.set(d.clone());
        d
    };
    let eval = dir.join("samples-100k.eval");
    let eval_bytes = ingest_data::write_eval(&eval, 100_000);
    let otlp = (
        dir.join("spans-1m.traces.jsonl"),
        dir.join("spans-1m.logs.jsonl"),
    );
    let otlp_bytes = ingest_data::write_otlp(&otlp.0, &otlp.1, 1_000_000);
    for p in [&eval, &otlp.0, &otlp.1] {
        if let Ok(file) = std::fs::File::open(p) {
            let _ = file.sync_all();
        }
    }
    Traces {
        dir,
        eval,
        eval_bytes,
        otlp,
        otlp_bytes,
    }
});

mod ingest {
    use super::{Bencher, BytesCount, DATA, TRACES, path, run};

    #[divan::bench(name = "inspect_eval/samples=100k", sample_count = 3)]
    fn inspect_eval(b: Bencher) {
        let t = &*TRACES;
        let out = t.dir.join("inspect-rows.parquet");
        b.counter(BytesCount::new(t.eval_bytes))
            .bench(|| run(&["-q", "ingest", path(&t.eval), "-o", path(&out)]));
    }

    #[divan::bench(name = "otlp/spans=1M", sample_count = 3)]
    fn otlp(b: Bencher) {
        let t = &*TRACES;
        let out = t.dir.join("otlp-rows.parquet");
        b.counter(BytesCount::new(t.otlp_bytes)).bench(|| {
            run(&[
                "-q",
                "ingest",
                path(&t.otlp.0),
                path(&t.otlp.1),
                "-o",
                path(&out),
            ]);
        });
    }

    /// Chat records (made from `wai gen` rows' messages; an ingest format, one shape).
    #[divan::bench(name = "openai_chat/rows=100k", sample_count = 5)]
    fn openai_chat(b: Bencher) {
        let data = &*DATA;
        let bytes = std::fs::metadata(&data.chat_100k).expect("input").len();
        let out = data.dir.path().join("ingested.parquet");
        b.counter(BytesCount::new(bytes))
            .bench(|| run(&["-q", "ingest", path(&data.chat_100k), "-o", path(&out)]));
    }
}

mod generate {
    use super::{Bencher, SHAPES, data, path, run};

    #[divan::bench(name = "gen/rows=100k/parquet", sample_count = 5, args = SHAPES)]
    fn gen_parquet(b: Bencher, shape: &str) {
        let out = data(shape).dir.path().join("gen.parquet");
        b.bench(|| {
            run(&[
                "-q",
                "gen",
                "--rows",
                "100000",
                "--shape",
                shape,
                "-o",
                path(&out),
            ]);
        });
    }
}

mod grade {
    use std::sync::LazyLock;

    use datafusion::arrow::array::RecordBatch;
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use divan::counter::ItemsCount;
    use wai::stages::grade::sql::ExpressionJudge;
    use wai::stages::grade::verify::VerifierJudge;
    use wai::stages::grade::{Judge, Stamp, apply};

    use super::{Bencher, SHAPES, black_box, data, path, run};

    /// The 1M generated rows of each shape, read once.
    static ROWS_1M: LazyLock<Vec<RecordBatch>> = LazyLock::new(|| read_1m("wai"));
    static ROWS_1M_REFERENCE: LazyLock<Vec<RecordBatch>> = LazyLock::new(|| read_1m("reference"));

    fn read_1m(shape: &str) -> Vec<RecordBatch> {
        let file = std::fs::File::open(&data(shape).parquet_1m).expect("rows");
        ParquetRecordBatchReaderBuilder::try_new(file)
            .expect("parquet")
            .with_batch_size(8192)
            .build()
            .expect("reader")
            .map(|b| b.expect("batch"))
            .collect()
    }

    fn rows_1m(shape: &str) -> &'static [RecordBatch] {
        if shape == "reference" {
            &ROWS_1M_REFERENCE
        } else {
            &ROWS_1M
        }
    }

    const STACK: &str = r#"
[check]
all = [
  { regex = "refund(ed)?|sorry" },
  { tool_called = "lookup_order" },
  { length = { max = 600 } },
]
"#;

    fn judge_all(b: Bencher, shape: &str, judge: &mut dyn Judge) {
        let batches = rows_1m(shape);
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let stamp = Stamp {
            judge: judge.name().to_owned(),
            version: None,
            run_id: "bench".into(),
            source: "grade",
        };
        b.counter(ItemsCount::new(rows)).bench_local(|| {
            for batch in batches {
                let verdicts = judge.judge(batch).expect("judged");
                black_box(apply(batch, &verdicts, &stamp).expect("applied"));
            }
        });
    }

    #[divan::bench(name = "sql_expr/rows=1M", sample_count = 5, args = SHAPES)]
    fn sql_expr(b: Bencher, shape: &str) {
        let mut judge = ExpressionJudge::new(
            "sql:expr".into(),
            "final_text ILIKE '%refund%' AND array_has(tools_used, 'lookup_order')",
        )
        .expect("planned");
        judge_all(b, shape, &mut judge);
    }

    #[divan::bench(name = "verifiers/rows=1M", sample_count = 5, args = SHAPES)]
    fn verifiers(b: Bencher, shape: &str) {
        let mut judge = VerifierJudge::parse(STACK, "bench", "stack").expect("parsed");
        judge_all(b, shape, &mut judge);
    }

    #[divan::bench(name = "cmd_python/rows=100k/workers=2", sample_count = 3, args = SHAPES)]
    fn cmd_python(b: Bencher, shape: &str) {
        let dir = data(shape).dir.path();
        let rows = &data(shape).parquet_100k;
        let helper = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
        let script = dir.join("trivial_judge.py");
        std::fs::write(
            &script,
            format!(
                "import sys\nsys.path.insert(0, {:?})\nfrom wai_judge import serve\nserve(lambda row: {{'reward': float('refund' in (row.get('final_text') or ''))}})\n",
                helper.display().to_string()
            ),
        )
        .expect("script");
        let judge = format!("cmd:python3 {}", script.display());
        let out = dir.join("graded-cmd.parquet");
        b.counter(ItemsCount::new(100_000usize)).bench(|| {
            run(&[
                "-q",
                "grade",
                path(rows),
                "--judge",
                &judge,
                "--workers",
                "2",
                "-o",
                path(&out),
            ]);
        });
    }

    /// A SQL judge reads a few columns: the grade decodes those and copies the other columns'
    /// chunks.
    #[divan::bench(name = "end_to_end_sql/rows=100k", sample_count = 5, args = SHAPES)]
    fn end_to_end_sql(b: Bencher, shape: &str) {
        let out = data(shape).dir.path().join("graded-sql.parquet");
        b.counter(ItemsCount::new(100_000usize)).bench(|| {
            run(&[
                "-q",
                "grade",
                path(&data(shape).parquet_100k),
                "--judge",
                "sql:final_text ILIKE '%refund%' AND array_has(tools_used, 'lookup_order')",
                "-o",
                path(&out),
            ]);
        });
    }

    #[divan::bench(name = "end_to_end/rows=100k", sample_count = 5, args = SHAPES)]
    fn end_to_end(b: Bencher, shape: &str) {
        let dir = data(shape).dir.path();
        let file = dir.join("stack.toml");
        std::fs::write(&file, STACK).expect("judge file");
        let judge = format!("verify:{}", file.display());
        let out = dir.join("graded.parquet");
        b.counter(ItemsCount::new(100_000usize)).bench(|| {
            run(&[
                "-q",
                "grade",
                path(&data(shape).parquet_100k),
                "--judge",
                &judge,
                "-o",
                path(&out),
            ]);
        });
    }
}

mod simulate {
    use divan::Bencher;
    use divan::counter::ItemsCount;

    use super::{path, run};

    /// The demo world's files in a fresh folder.
    fn world() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        std::fs::write(
            d.join("tools.json"),
            wai::stages::simulate::demo::tools_json().to_string(),
        )
        .expect("tools");
        std::fs::write(d.join("policy.md"), wai::stages::simulate::demo::POLICY).expect("policy");
        std::fs::write(
            d.join("seeds.txt"),
            wai::stages::simulate::demo::SEEDS.join("\n"),
        )
        .expect("seeds");
        dir
    }

    /// The seeded agent against the mock world, 200k rollouts (groups of 8), landed in Parquet.
    #[divan::bench(name = "seeded/rollouts=200k", sample_count = 3)]
    fn seeded(b: Bencher) {
        let dir = world();
        let d = dir.path();
        let (tools, policy, seeds, out) = (
            d.join("tools.json"),
            d.join("policy.md"),
            d.join("seeds.txt"),
            d.join("rows.parquet"),
        );
        b.counter(ItemsCount::new(200_000usize)).bench(|| {
            run(&[
                "-q",
                "simulate",
                "--tools",
                path(&tools),
                "--policy",
                path(&policy),
                "--seeds",
                path(&seeds),
                "--budget",
                "200000",
                "--mode",
                "rl",
                "--repeat-policy",
                "fixed",
                "--repeats",
                "8",
                "--phrasings",
                "200",
                "--out",
                path(&out),
            ]);
        });
    }

    /// `wai demo`: simulate 4000 rollouts, grade, pass@k, failures and markers.
    #[divan::bench(name = "demo", sample_count = 3)]
    fn demo(b: Bencher) {
        let dir = tempfile::tempdir().expect("temp dir");
        b.bench(|| run(&["-q", "demo", "--dir", path(dir.path())]));
    }
}

mod coverage {
    use divan::Bencher;
    use divan::counter::ItemsCount;

    use super::{path, run};

    const NOUNS: [&str; 10] = [
        "order",
        "refund",
        "invoice",
        "account",
        "password",
        "delivery",
        "address",
        "subscription",
        "payment",
        "voucher",
    ];
    const VERBS: [&str; 10] = [
        "check", "cancel", "update", "confirm", "escalate", "verify", "reset", "refund", "change",
        "review",
    ];

    /// `wai coverage-gap` on 10k asks against a 50-rule policy (the issue's figure: under 1 s).
    #[divan::bench(name = "coverage_gap/asks=10k/rules=50", sample_count = 5)]
    fn gap(b: Bencher) {
        use std::fmt::Write as _;

        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        std::fs::write(
            d.join("tools.json"),
            wai::stages::simulate::demo::tools_json().to_string(),
        )
        .expect("tools");
        let policy = (0..50).fold(String::new(), |mut text, i| {
            let _ = writeln!(
                text,
                "{}. Always {} the {} before you {} the {}, unless the amount is over ${}.",
                i + 1,
                VERBS[i % 10],
                NOUNS[i % 10],
                VERBS[(i / 10 + 3) % 10],
                NOUNS[(i * 7 + 1) % 10],
                50 + i * 10
            );
            text
        });
        std::fs::write(d.join("policy.md"), policy).expect("policy");
        let asks = (0..10_000).fold(String::new(), |mut text, i| {
            let _ = writeln!(
                text,
                "Hi, can you {} my {} A{:04}? It has been {} days and I need it sorted.",
                VERBS[i % 10],
                NOUNS[(i / 10) % 10],
                i,
                i % 40
            );
            text
        });
        std::fs::write(d.join("asks.txt"), asks).expect("asks");
        let (tools, policy, asks) = (
            d.join("tools.json"),
            d.join("policy.md"),
            d.join("asks.txt"),
        );
        b.counter(ItemsCount::new(10_000usize)).bench(|| {
            run(&[
                "-q",
                "coverage-gap",
                path(&asks),
                "--tools",
                path(&tools),
                "--policy",
                path(&policy),
            ]);
        });
    }
}

mod training {
    use divan::Bencher;
    use divan::counter::{BytesCount, ItemsCount};

    use super::{SHAPES, data, path, run};

    /// `wai select --mode rl` on 1M rows (target: under 3 s; the reference takes about 120 s on
    /// 100k).
    #[divan::bench(name = "select_rl/rows=1M", sample_count = 2, args = SHAPES)]
    fn select_rl(b: Bencher, shape: &str) {
        let data = data(shape);
        let out = data.dir.path().join("selected.parquet");
        b.counter(ItemsCount::new(1_000_000usize)).bench(|| {
            run(&[
                "-q",
                "select",
                path(&data.parquet_1m),
                "--target",
                "100000",
                "-o",
                path(&out),
            ]);
        });
    }

    /// `wai export --format openai` of 1M rows to JSONL (target: 200 MB/s written).
    #[divan::bench(name = "export_openai/rows=1M", sample_count = 2, args = SHAPES)]
    fn export_openai(b: Bencher, shape: &str) {
        let data = data(shape);
        let out = data.dir.path().join("train.jsonl");
        run(&["-q", "export", path(&data.parquet_1m), "-o", path(&out)]);
        let bytes = std::fs::metadata(&out).map_or(0, |m| m.len());
        b.counter(BytesCount::new(bytes))
            .bench(|| run(&["-q", "export", path(&data.parquet_1m), "-o", path(&out)]));
    }
}

/// `wai run` (docs/lake.md): the moonshot's pipeline on 200k rows, against the same nine
/// commands run one after another on the same files. `benches/lake/moonshot.sh` runs it on
/// millions of rows as separate processes, with peak memory.
mod lake {
    use divan::Bencher;
    use divan::counter::ItemsCount;

    use super::{SHAPES, data, path, run};

    /// The pipeline, in a fresh folder of the shape's data: JSONL in, then every stage.
    fn pipeline(shape: &str) -> std::path::PathBuf {
        let data = data(shape);
        let d = data.dir.path();
        let text = format!(
            r#"lake = "{lake}"
[input]
paths = ["{input}"]
[[stage]]
run = "convert"
[[stage]]
run = "grade"
judge = ["sql:CASE WHEN reward > 0.5 THEN 1 ELSE 0 END"]
[[stage]]
run = "pass-at"
by = ["dims.tier"]
[[stage]]
run = "markers"
[[stage]]
run = "compare"
baseline = "{baseline}"
[[stage]]
run = "hack-scan"
[[stage]]
run = "decontaminate"
against = ["{eval}"]
[[stage]]
run = "select"
mode = "rl"
[[stage]]
run = "export"
format = "openai"
"#,
            lake = path(&d.join("lake")),
            input = path(&data.jsonl_200k),
            baseline = path(&data.parquet_100k_b),
            eval = path(&data.eval_5k),
        );
        let file = d.join("pipeline.toml");
        std::fs::write(&file, text).expect("pipeline file");
        file
    }

    /// The whole pipeline as one `wai run`, into a new lake each time.
    #[divan::bench(name = "run/pipeline/rows=200k", sample_count = 3, args = SHAPES)]
    fn whole(b: Bencher, shape: &str) {
        let file = pipeline(shape);
        let lake = data(shape).dir.path().join("lake");
        b.counter(ItemsCount::new(200_000usize))
            .with_inputs(|| {
                let _ = std::fs::remove_dir_all(&lake);
            })
            .bench_values(|()| run(&["-q", "run", path(&file)]));
    }

    /// The same work as nine commands, each reading its input from the file the last wrote.
    #[divan::bench(name = "run/separate_commands/rows=200k", sample_count = 3, args = SHAPES)]
    fn separate(b: Bencher, shape: &str) {
        let data = data(shape);
        let d = data.dir.path();
        let (rows, scored, kept, selected, train) = (
            d.join("sep-rows.parquet"),
            d.join("sep-scored.parquet"),
            d.join("sep-kept.parquet"),
            d.join("sep-selected.parquet"),
            d.join("sep-train.jsonl"),
        );
        b.counter(ItemsCount::new(200_000usize)).bench(|| {
            run(&["-q", "convert", path(&data.jsonl_200k), "-o", path(&rows)]);
            let judge = "sql:CASE WHEN reward > 0.5 THEN 1 ELSE 0 END";
            run(&[
                "-q",
                "grade",
                path(&rows),
                "--judge",
                judge,
                "-o",
                path(&scored),
            ]);
            run(&["-q", "pass-at", path(&scored), "--by", "dims.tier"]);
            run(&["-q", "markers", path(&scored)]);
            run(&["-q", "compare", path(&data.parquet_100k_b), path(&scored)]);
            run(&["-q", "hack-scan", path(&scored)]);
            let against = path(&data.eval_5k);
            run(&[
                "-q",
                "decontaminate",
                path(&scored),
                "--against",
                against,
                "-o",
                path(&kept),
            ]);
            run(&[
                "-q",
                "select",
                path(&kept),
                "--mode",
                "rl",
                "-o",
                path(&selected),
            ]);
            run(&[
                "-q",
                "export",
                path(&selected),
                "--format",
                "openai",
                "-o",
                path(&train),
            ]);
        });
    }
}

/// The coverage study (docs/statistics.md). `coverage_study/cell=...` times one cell at the
/// study's size; `coverage_study/full` runs every cell at 2,000 runs and 2,000 draws and writes
/// the table to `target/coverage-study.md` when `WAI_COVERAGE_STUDY=full` is set (about 35 min on
/// 2 cores; otherwise it runs 50 runs a cell, to keep `cargo bench` short).
mod coverage_study {
    use super::{Bencher, black_box};
    use wai::study;

    #[divan::bench(
        name = "coverage_study/cell",
        args = ["pass/u/k=4/n=100", "compare/u/k=4/n=100/effect=0", "marker/easy/k=8/n=5000"],
        sample_count = 1
    )]
    fn cell(b: Bencher, key: &str) {
        let cell = study::cells()
            .into_iter()
            .find(|c| c.key() == key)
            .expect("a cell of the study");
        b.bench(|| black_box(study::run_cell(&cell, 2000, 2000, 0)));
    }

    #[divan::bench(name = "coverage_study/full", sample_count = 1)]
    fn full(b: Bencher) {
        let full = std::env::var("WAI_COVERAGE_STUDY").is_ok_and(|v| v == "full");
        let opts = study::Options {
            runs: if full { 2000 } else { 50 },
            runs_largest: None,
            draws: 2000,
            seed: 0,
            cells: Vec::new(),
        };
        b.bench(|| {
            let rows = study::run(&opts, |_, _| {});
            if full {
                let _ = std::fs::write("target/coverage-study.md", study::markdown(&rows));
            }
            black_box(rows)
        });
    }
}
