//! Rows in memory for tests and examples: from JSON rows in the reference's format, or from the
//! synthetic generator, as record batches or as a data frame in a [`Session`].
//!
//! Built for the crate's own unit tests, and for anyone else with the `testing` feature
//! (`wai = { features = ["testing"] }`): the integration tests and the examples use it.

#[cfg(feature = "testing")]
pub mod model_server;

use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::DataFrame;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::pipeline::io::Identity;
use crate::pipeline::row::{Builder, decode};
use crate::stages::Session;

/// One batch of the row schema holding `rows` (each a JSON object in the reference's row
/// format, as a JSONL line would hold it), with `rollout_id`s derived where absent as a read
/// derives them.
///
/// # Errors
/// A row that is not a valid row: the error names its index and field.
pub fn batch(rows: &[serde_json::Value]) -> Result<RecordBatch> {
    let mut builder = Builder::new();
    let mut identity = Identity::default();
    for (i, row) in rows.iter().enumerate() {
        let bad = |field: Option<String>, message: String| Error::BadRow {
            file: "<memory>".into(),
            line: i as u64 + 1,
            field,
            message,
        };
        let mut record = decode(row.clone()).map_err(|e| bad(e.field, e.message))?;
        identity
            .assign(&mut record)?
            .map_err(|m| bad(Some("rollout_id".into()), m))?;
        builder.push(&record)?;
    }
    builder.finish()
}

/// `rows` synthetic rows made with `seed` (what `wai gen --rows ROWS --seed SEED` writes), in
/// batches.
///
/// # Errors
/// A row the builder refuses (a bug).
pub fn generated(rows: u64, seed: u64) -> Result<Vec<RecordBatch>> {
    generated_as(rows, seed, crate::synth::Shape::Wai)
}

/// [`generated`] in the given shape (`wai gen --shape SHAPE`).
///
/// # Errors
/// A row the builder refuses (a bug).
pub fn generated_as(rows: u64, seed: u64, shape: crate::synth::Shape) -> Result<Vec<RecordBatch>> {
    let opts = crate::synth::Options {
        rows,
        seed,
        shortcut: None,
        gold: 0.0,
        shape,
    };
    let mut builder = Builder::new();
    let mut out = Vec::new();
    crate::synth::generate(&opts, |records| {
        for r in &records {
            builder.push(r)?;
            if builder.len() >= crate::pipeline::row::BATCH_ROWS {
                out.push(builder.finish()?);
            }
        }
        Ok(())
    })?;
    if !builder.is_empty() {
        out.push(builder.finish()?);
    }
    Ok(out)
}

/// `batches` as a data frame in `session` (in memory, one partition).
///
/// # Errors
/// The batches do not share one schema.
pub fn frame(session: &Session, batches: Vec<RecordBatch>) -> Result<DataFrame> {
    Ok(session.context().read_batches(batches)?)
}

// The fixtures of `tests/fixtures`, for tests in this crate and beside it.

/// The row fixtures of every shape: the reference's rows, odd rows, chat and trace imports,
/// public benchmark rewards.
pub const ROW_FIXTURES: [&str; 8] = [
    "example_scored.jsonl",
    "example_rows.jsonl",
    "odd_rows.jsonl",
    "chat_rollouts.jsonl",
    "hack_scan_planted.jsonl",
    "grade_transcripts.jsonl",
    "tau_bench_airline_rewards.jsonl",
    "eval_variance_runs.jsonl",
];

/// `rows` as one batch (rows ingest would set aside are left out; a missing rollout id is
/// made up from the position). Lenient where [`batch`] is strict: for fixtures of odd shapes.
///
/// # Panics
/// The builder refuses a decoded row (a bug).
pub fn batch_of(rows: impl IntoIterator<Item = Value>) -> RecordBatch {
    let mut b = Builder::new();
    for (n, v) in rows.into_iter().enumerate() {
        let Ok(mut record) = decode(v) else { continue };
        record.rollout_id.get_or_insert_with(|| format!("r{n}"));
        b.push(&record).expect("pushed");
    }
    b.finish().expect("batch")
}

/// The rows of a JSONL file in `tests/fixtures`.
///
/// # Panics
/// The file is not there or a line is not JSON (a broken fixture).
pub fn fixture(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("fixture");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn json_rows_and_generated_rows_become_frames() {
        let one = batch(&[serde_json::json!({"prompt": "hi", "reward": 1.0})]).unwrap();
        assert_eq!(one.num_rows(), 1);
        let err = batch(&[serde_json::json!({"prompt": "hi", "reward": "yes"})]).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        let rows = generated(300, 1).unwrap();
        assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 300);
        let session = Session::new().unwrap();
        let n = frame(&session, rows).unwrap().count().await.unwrap();
        assert_eq!(n, 300);
    }
}
