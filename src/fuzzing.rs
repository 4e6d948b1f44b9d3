//! What the fuzz targets in `fuzz/` reach that is not otherwise public (feature `fuzzing`).
//!
//! Every other target calls the library's own entry points (the JSONL reader, the command line,
//! the worker pool, the verifier); these are the few steps that have none: each is the exact
//! chain the library runs, with nothing added.

use serde_json::Value;

use crate::pipeline::pipe;
use crate::stages::grade::Verdict;

/// What a command judge makes of one line its worker printed (as the pool reads it, trailing
/// whitespace trimmed): `Some` verdict when the line is a reply (an object with an `id`), read
/// by the verdict contract; `None` when the pool would not take it as a reply (a log line, or
/// garbage, which the pool answers with a restart).
pub fn judge_line(line: &str) -> Option<Verdict> {
    let object = pipe::parse_object(line.trim_end())?;
    let (_, rest) = pipe::reply(object)?;
    Some(Verdict::from_json(Value::Object(rest)))
}

/// Holds the `OTel` reader's fast path (one line of canonical OTLP JSON read by typed
/// deserialization) to its general path (the line parsed, then taken apart) on each line of
/// `data`: when the fast path reads a line, both give the same spans.
///
/// # Panics
/// When they differ.
pub fn otlp_lines_alike(data: &[u8]) {
    for line in data.split(|b| *b == b'\n') {
        crate::pipeline::ingest::otel::assert_alike(line);
    }
}
