//! Command judges: any program that reads one request per line on stdin and writes one verdict
//! per line on stdout, run as a pool of long-lived workers ([`crate::pipeline::pipe`]).
//!
//! Protocol: each request is `{"id": N, "row": {...}}` (the row in the reference's format); each
//! reply is a verdict object with the same `id` (`{"id": N, "reward": 1, "reason": "..."}`), in
//! any order. A reply `{"id": N, "error": "..."}` marks the row `error`.
//!
//! Failures stay with their row: the row a worker died, hung or printed garbage on gets `error`
//! (with the tail of the worker's stderr), `timeout` or `invalid_result`, and the others are
//! graded as if nothing happened.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;
use serde_json::{Value, json};

use super::{Judge, Status, Verdict};
use crate::error::{Error, Result};
pub use crate::pipeline::pipe::Options;
use crate::pipeline::pipe::{Answer, Failure, Pool};
use crate::pipeline::row::{BatchView, encode_keeping, wide};

/// A pool of workers running one judge command.
pub struct CommandJudge {
    pool: Pool,
    /// The request text of the batch being judged.
    text: Arc<Vec<u8>>,
    /// Request ids handed out so far.
    issued: u64,
}

impl CommandJudge {
    /// Starts the pool.
    pub fn start(opts: Options) -> Result<Self> {
        Ok(Self {
            pool: Pool::start(opts)?,
            text: Arc::new(Vec::new()),
            issued: 0,
        })
    }
}

/// The rows of a batch as request lines (`{"id": i, "row": {...}}`), encoded in parallel into
/// `text` (reused from batch to batch when no worker still holds it); returns each line's range.
fn requests(
    batch: &RecordBatch,
    first_id: u64,
    text: &mut Arc<Vec<u8>>,
) -> Result<Vec<std::ops::Range<usize>>> {
    const CHUNK: usize = 256;
    let view = BatchView::new(batch)?;
    let rows: Vec<usize> = (0..batch.num_rows()).collect();
    let chunks: Vec<(Vec<u8>, Vec<usize>)> = rows
        .par_chunks(CHUNK)
        .map(|chunk| {
            let mut out = Vec::with_capacity(chunk.len() * 2048);
            let mut ends = Vec::with_capacity(chunk.len());
            for &i in chunk {
                let (row, verbatim) = encode_keeping(&view, i)?;
                let id = first_id + i as u64;
                out.extend_from_slice(format!("{{\"id\":{id},\"row\":").as_bytes());
                if verbatim.is_empty() {
                    serde_json::to_writer(&mut out, &row)
                        .map_err(|e| Error::Internal(format!("encoding a request: {e}")))?;
                } else {
                    // Numbers no 64-bit type holds reach the judge as they were read.
                    out.extend_from_slice(wide::object_text(&row, &verbatim).as_bytes());
                }
                out.extend_from_slice(b"}\n");
                ends.push(out.len());
            }
            Ok((out, ends))
        })
        .collect::<Result<_>>()?;
    // A worker still holding the last batch's text keeps it; this batch gets a new one.
    if Arc::get_mut(text).is_none() {
        *text = Arc::new(Vec::new());
    }
    let buf =
        Arc::get_mut(text).ok_or_else(|| Error::Internal("a fresh buffer is shared".into()))?;
    buf.clear();
    let mut ranges = Vec::with_capacity(batch.num_rows());
    for (chunk, ends) in chunks {
        let base = buf.len();
        let mut start = base;
        for end in ends {
            ranges.push(start..base + end);
            start = base + end;
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(ranges)
}

impl Judge for CommandJudge {
    fn name(&self) -> &str {
        self.pool.name()
    }

    fn notes(&self) -> Vec<String> {
        self.pool.noise_note().into_iter().collect()
    }

    fn judge(&mut self, batch: &RecordBatch) -> Result<Vec<Verdict>> {
        self.judge_landing(batch, &mut |_, _| {})
    }

    fn lands_one_by_one(&self) -> bool {
        true
    }

    fn judge_landing(
        &mut self,
        batch: &RecordBatch,
        landed: &mut dyn FnMut(usize, &Verdict),
    ) -> Result<Vec<Verdict>> {
        let n = batch.num_rows();
        // Ids run on across batches, so a late reply to an earlier batch cannot pass for one
        // of this batch's.
        let first = self.issued;
        self.issued += n as u64;
        let lines = requests(batch, first, &mut self.text)?;
        let text = Arc::clone(&self.text);
        let timeout = self.pool.timeout().as_secs_f64();
        let verdict = |a: &Answer| match a {
            Answer::Reply(obj) => Verdict::from_json(Value::Object(obj.clone())),
            Answer::Failed(why, tail) => failed_verdict(why, timeout, tail),
        };
        let mut verdicts: Vec<Option<Verdict>> = vec![None; n];
        let answers = self.pool.run(
            &text,
            &lines,
            first,
            &mut |_, _| Value::Null,
            &mut |i, a| {
                let v = verdict(a);
                landed(i, &v);
                verdicts[i] = Some(v);
            },
        )?;
        Ok(answers
            .iter()
            .zip(verdicts)
            .map(|(a, v)| v.unwrap_or_else(|| verdict(a)))
            .collect())
    }
}

/// The verdict of a row the judge failed on.
fn failed_verdict(why: &Failure, timeout_s: f64, stderr_tail: &str) -> Verdict {
    let tail = if stderr_tail.is_empty() {
        String::new()
    } else {
        format!("; stderr: {stderr_tail}")
    };
    match why {
        Failure::Died => Verdict::failed(
            Status::Error,
            format!("the judge process exited on this row{tail}"),
        )
        .with_meta("stderr", Value::String(stderr_tail.to_owned())),
        Failure::Hung => Verdict::failed(
            Status::Timeout,
            format!("the judge took longer than {timeout_s} s on this row"),
        )
        .with_meta("timeout_s", json!(timeout_s)),
        Failure::Garbage(line) => Verdict::failed(
            Status::InvalidResult,
            format!(
                "the judge answered with an object that carries no request id of its own: {line}"
            ),
        ),
    }
}
