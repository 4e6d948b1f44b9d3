//! The JSONL decode alone: rows held in memory, through the streaming reader into row batches
//! (parse, decode into records, Arrow builders), nothing written: the part of `wai convert` and
//! `wai ingest` that JSON in costs. Run: `cargo bench --bench decode`.
//!
//! Two shapes, copies of the fixture rows (`tests/fixtures/example_rows.jsonl`) with a task of
//! their own each eight rows:
//! - `jsonl/shape=gen`: rows with `messages`, as `wai gen` writes them;
//! - `jsonl/shape=reference`: the same rows without `messages`, as the reference writes them.

use std::sync::LazyLock;

use divan::Bencher;
use divan::counter::BytesCount;
use serde_json::Value;
use wai::pipeline::io::{Identity, OnBadRow, ReadCounts, read_jsonl};

// The same allocator as the binary, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// About this many bytes of rows per shape: several of the reader's chunks.
const BYTES: usize = 48 << 20;

fn main() {
    divan::main();
}

/// Copies of the fixture rows, `messages` kept or dropped, up to [`BYTES`].
fn rows(messages: bool) -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/example_rows.jsonl"
    );
    let rows: Vec<Value> = std::fs::read_to_string(path)
        .expect("the fixture")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a row"))
        .collect();
    let mut out = Vec::with_capacity(BYTES + (1 << 20));
    let mut i = 0usize;
    while out.len() < BYTES {
        let mut row = rows[i % rows.len()].clone();
        let obj = row.as_object_mut().expect("an object");
        if !messages {
            obj.shift_remove("messages");
        }
        obj.insert("scenario_id".into(), Value::String(format!("s_{}", i / 8)));
        obj.insert("rollout_index".into(), Value::from(i % 8));
        serde_json::to_writer(&mut out, &row).expect("written");
        out.push(b'\n');
        i += 1;
    }
    out
}

static GEN: LazyLock<Vec<u8>> = LazyLock::new(|| rows(true));
static REFERENCE: LazyLock<Vec<u8>> = LazyLock::new(|| rows(false));

/// Reads `text` into row batches; the rows read.
fn decode(text: &[u8]) -> usize {
    let mut rows = 0;
    read_jsonl(
        "bench.jsonl",
        text,
        &mut Identity::default(),
        &mut OnBadRow::Fail,
        &mut ReadCounts::default(),
        &|_| {},
        &mut |batch| {
            rows += batch.num_rows();
            Ok(())
        },
    )
    .expect("decoded");
    rows
}

#[divan::bench(name = "jsonl/shape=gen", sample_count = 10)]
fn shape_gen(b: Bencher) {
    let text: &[u8] = &GEN;
    b.counter(BytesCount::new(text.len()))
        .bench(|| decode(text));
}

#[divan::bench(name = "jsonl/shape=reference", sample_count = 10)]
fn shape_reference(b: Bencher) {
    let text: &[u8] = &REFERENCE;
    b.counter(BytesCount::new(text.len()))
        .bench(|| decode(text));
}
