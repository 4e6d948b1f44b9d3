//! Benches, named by data shape. Data comes from `wai gen` (seeded), made once per run in a
//! temp folder. Run: `cargo bench` (or `cargo bench -- convert` for one group).
//!
//! Figures the row-store issue asks for:
//! - `convert/jsonl_to_parquet/rows=200k`: input MB/s (divan prints bytes/s from the counter);
//! - `sql/group_by_task/rows=1M`: `SELECT task_id, count(*), avg(reward) FROM rows GROUP BY task_id`;
//! - `sql/scan/rows=1M/cols=task_id,reward` against `cols=all`: what projection pushdown saves.
//!
//! Figures the pass@k issue asks for:
//! - `pass_at/rows=1M/draws=2000`: all three numbers with intervals from a 1M-row Parquet file;
//! - `pass_at/rows=100k/draws=2000`: against the reference on the same rows (`ref_oracle.py pass-at`).

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use clap::Parser;
use divan::counter::BytesCount;
use divan::{Bencher, black_box};
use wai::cli::Cli;

fn main() {
    divan::main();
}

struct Data {
    _dir: tempfile::TempDir,
    jsonl_200k: PathBuf,
    parquet_100k: PathBuf,
    parquet_1m: PathBuf,
}

fn run(args: &[&str]) {
    let cli = Cli::parse_from(std::iter::once("wai").chain(args.iter().copied()));
    let mut sink = Vec::new();
    let outcome = wai::commands::run(cli, &mut sink).expect("command runs");
    black_box((outcome.status, sink.len()));
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

static DATA: LazyLock<Data> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("temp dir");
    let jsonl_200k = dir.path().join("rows-200k.jsonl");
    let parquet_1m = dir.path().join("rows-1m.parquet");
    let parquet_100k = dir.path().join("rows-100k.parquet");
    run(&["-q", "gen", "--rows", "200000", "--seed", "1", "-o", path(&jsonl_200k)]);
    run(&["-q", "gen", "--rows", "100000", "--seed", "1", "-o", path(&parquet_100k)]);
    run(&["-q", "gen", "--rows", "1000000", "--seed", "1", "-o", path(&parquet_1m)]);
    Data { _dir: dir, jsonl_200k, parquet_100k, parquet_1m }
});

mod convert {
    use super::*;

    #[divan::bench(name = "jsonl_to_parquet/rows=200k", sample_count = 5)]
    fn jsonl_to_parquet(b: Bencher) {
        let data = &*DATA;
        let bytes = std::fs::metadata(&data.jsonl_200k).expect("input").len();
        let out = data._dir.path().join("out.parquet");
        b.counter(BytesCount::new(bytes)).bench(|| run(&["-q", "convert", path(&data.jsonl_200k), "-o", path(&out)]));
    }

    #[divan::bench(name = "parquet_to_jsonl/rows=1M", sample_count = 2)]
    fn parquet_to_jsonl(b: Bencher) {
        let data = &*DATA;
        let out = data._dir.path().join("out.jsonl");
        b.bench(|| run(&["-q", "convert", path(&data.parquet_1m), "-o", path(&out)]));
    }
}

mod sql {
    use super::*;

    #[divan::bench(name = "group_by_task/rows=1M", sample_count = 10)]
    fn group_by_task(b: Bencher) {
        let data = &*DATA;
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

    #[divan::bench(name = "scan/rows=1M", args = ["task_id,reward", "all"], sample_count = 5)]
    fn scan(b: Bencher, cols: &str) {
        let data = &*DATA;
        let q = if cols == "all" {
            "SELECT count(*) FROM (SELECT * FROM rows) WHERE length(CAST(messages AS VARCHAR)) >= 0"
        } else {
            "SELECT count(*) FROM rows WHERE task_id IS NOT NULL AND (reward IS NULL OR reward >= 0)"
        };
        b.bench(|| run(&["sql", q, "--format", "csv", "-t", path(&data.parquet_1m)]));
    }
}

mod pass_at {
    use super::*;

    #[divan::bench(name = "pass_at/rows=1M/draws=2000", sample_count = 5)]
    fn rows_1m(b: Bencher) {
        let data = &*DATA;
        b.bench(|| run(&["-q", "pass-at", path(&data.parquet_1m)]));
    }

    #[divan::bench(name = "pass_at/rows=100k/draws=2000", sample_count = 10)]
    fn rows_100k(b: Bencher) {
        let data = &*DATA;
        b.bench(|| run(&["-q", "pass-at", path(&data.parquet_100k)]));
    }

    #[divan::bench(name = "markers/rows=1M/draws=2000", sample_count = 5)]
    fn markers_1m(b: Bencher) {
        let data = &*DATA;
        b.bench(|| run(&["-q", "markers", path(&data.parquet_1m)]));
    }
}

mod generate {
    use super::*;

    #[divan::bench(name = "gen/rows=100k/parquet", sample_count = 5)]
    fn gen_parquet(b: Bencher) {
        let out = DATA._dir.path().join("gen.parquet");
        b.bench(|| run(&["-q", "gen", "--rows", "100000", "-o", path(&out)]));
    }
}
