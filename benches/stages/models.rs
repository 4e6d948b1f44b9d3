//! The model layer's figures, against the deterministic model server (`wai::testing::model_server`)
//! on 127.0.0.1:
//! - `models/grade_llm/rows=20k/concurrency=64`: `wai grade --judge llm:` at 20 ms per call, no
//!   cache: rows/s (target 2,000; the ceiling is 64 / 0.02 s = 3,200);
//! - `models/grade_llm_cached/rows=100k`: the same grade answered from the cache (target 50,000
//!   rows/s);
//! - `models/call/cache=on|off`: one chat call at a time to a server with no latency: the wall
//!   time per call, an upper bound on the client's CPU per call (target under 200 µs);
//! - `models/simulate_model/rollouts=10k/concurrency=64/WAVE` (the default waves, 64 doubling to
//!   1024, then one size for every wave: 256, the old default, and 1024):
//!   `wai simulate --agent endpoint:` on the demo world at 20 ms per call, no cache, no simulated
//!   person (`--user-model none`); each rollout is two turns (a tool call, then the reply), so the
//!   latency bound is 10k × 2 × 0.02 s / 64 = 6.25 s (target within 1.25× of it).

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use divan::Bencher;
use divan::counter::ItemsCount;
use wai::models::{ChatRequest, Message, Model, ModelSpec, Settings};
use wai::testing::model_server::{Config, ModelServer};

use super::{path, run};

struct Data {
    _dir: tempfile::TempDir,
    rows_20k: PathBuf,
    rows_100k: PathBuf,
    cache: PathBuf,
    out: PathBuf,
}

static SLOW: LazyLock<ModelServer> = LazyLock::new(|| {
    ModelServer::start(Config {
        latency: Duration::from_millis(20),
        faults: Vec::new(),
    })
});
static FAST: LazyLock<ModelServer> = LazyLock::new(|| ModelServer::start(Config::default()));

fn judge(server: &ModelServer) -> String {
    format!("llm:endpoint:judge-m@{}", server.url())
}

static DATA: LazyLock<Data> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let rows_20k = super::generate(d, "llm-20k.parquet", 20_000, 3, &[]);
    let rows_100k = super::generate(d, "llm-100k.parquet", 100_000, 3, &[]);
    let cache = d.join("cache");
    let out = d.join("graded.parquet");
    // Fill the cache once (at no latency) for the cached figure.
    run(&[
        "-q",
        "grade",
        path(&rows_100k),
        "--judge",
        &judge(&FAST),
        "--no-tools",
        "--concurrency",
        "64",
        "--cache",
        path(&cache),
        "-o",
        path(&out),
    ]);
    Data {
        _dir: dir,
        rows_20k,
        rows_100k,
        cache,
        out,
    }
});

#[divan::bench(name = "grade_llm/rows=20k/concurrency=64", sample_count = 3)]
fn grade_llm(b: Bencher) {
    let d = &*DATA;
    let spec = judge(&SLOW);
    b.counter(ItemsCount::new(20_000usize)).bench(|| {
        run(&[
            "-q",
            "grade",
            path(&d.rows_20k),
            "--judge",
            &spec,
            "--no-tools",
            "--concurrency",
            "64",
            "--no-cache",
            "-o",
            path(&d.out),
        ]);
    });
}

/// The cached rerun: every row found by the row memo.
#[divan::bench(name = "grade_llm_cached/rows=100k", sample_count = 5)]
fn grade_llm_cached(b: Bencher) {
    let d = &*DATA;
    // The cache was filled through the other server's URL; the key holds the URL, so use it.
    let spec = judge(&FAST);
    b.counter(ItemsCount::new(100_000usize))
        .bench(|| cached_grade(d, &spec));
}

/// The 100k rows graded by `spec` with the filled cache.
fn cached_grade(d: &Data, spec: &str) {
    run(&[
        "-q",
        "grade",
        path(&d.rows_100k),
        "--judge",
        spec,
        "--no-tools",
        "--concurrency",
        "64",
        "--cache",
        path(&d.cache),
        "-o",
        path(&d.out),
    ]);
}

/// The cached rerun as the first one after the row memo is gone (a cache written by an older
/// wai, or the memo cleared): every request made again and looked up, the memo written anew.
#[divan::bench(name = "grade_llm_cached_no_memo/rows=100k", sample_count = 5)]
fn grade_llm_cached_no_memo(b: Bencher) {
    let d = &*DATA;
    let spec = judge(&FAST);
    let db = d.cache.join(wai::models::cache::FILE);
    b.counter(ItemsCount::new(100_000usize))
        .with_inputs(|| {
            rusqlite::Connection::open(&db)
                .and_then(|c| c.execute("DELETE FROM memo", []))
                .expect("the memo cleared");
        })
        .bench_values(|()| cached_grade(d, &spec));
}

#[divan::bench(name = "call", args = ["off", "on"], sample_count = 5)]
fn call(b: Bencher, cache: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = ModelSpec::parse(&format!("endpoint:judge-m@{}", FAST.url())).expect("a spec");
    let settings = Settings {
        cache: (cache == "on").then(|| dir.path().to_path_buf()),
        ..Settings::default()
    };
    let model = Model::new(spec, settings).expect("a model");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut i = 0u64;
    b.counter(ItemsCount::new(200usize)).bench_local(|| {
        for _ in 0..200 {
            i += 1;
            let req = ChatRequest {
                messages: vec![
                    Message::new("system", "grade"),
                    Message::new("user", format!("row {i} PASS")),
                ],
                tools: Vec::new(),
                temperature: 0.0,
                max_tokens: 120,
                logprobs: false,
            };
            divan::black_box(rt.block_on(model.chat(&req, 0)).expect("a reply"));
        }
    });
}

#[divan::bench(name = "simulate_model/rollouts=10k/concurrency=64", args = ["default", "256", "1024"], sample_count = 3)]
fn simulate_model(b: Bencher, wave: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let tools = dir.path().join("tools.json");
    let policy = dir.path().join("policy.md");
    std::fs::write(
        &tools,
        wai::stages::simulate::demo::tools_json().to_string(),
    )
    .expect("tools");
    std::fs::write(&policy, wai::stages::simulate::demo::POLICY).expect("policy");
    let out = dir.path().join("rows.parquet");
    let agent = format!("endpoint:agent-m@{}", SLOW.url());
    b.counter(ItemsCount::new(10_000usize)).bench(|| {
        run(&[
            "-q",
            "simulate",
            "--tools",
            path(&tools),
            "--policy",
            path(&policy),
            "--agent",
            &agent,
            "--budget",
            "10000",
            // Enough asks and repeats that the budget, not the grid, ends the run.
            "--mode",
            "rl",
            "--repeats",
            "10",
            "--phrasings",
            "16",
            "--concurrency",
            "64",
            // No one answers the agent's reply: two turns a rollout, whatever the person would
            // say.
            "--user-model",
            "none",
            "--no-cache",
            "--out",
            path(&out),
        ]
        .into_iter()
        // The model agent's own waves (64 doubling to 1024), and one size for every wave.
        .chain(if wave == "default" {
            Vec::new()
        } else {
            vec!["--wave", wave]
        })
        .collect::<Vec<_>>());
    });
}
