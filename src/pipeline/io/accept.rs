//! Decoded records into batches: one record's bytes into a row, the rows into batches in input
//! order, bad records set aside; JSON arrays split into their elements.

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;
use serde_json::Value;

use super::chunks::Decoded;
use super::identity::Identity;
use super::rejects::{OnBadRow, Reject};
use crate::error::Result;
use crate::pipeline::row::{self, BATCH_ROWS, Builder, Record};

/// Counters of one read.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ReadCounts {
    /// Rows read and kept.
    pub rows: u64,
    /// Records set aside.
    pub rejected: u64,
    /// Bytes read.
    pub bytes: u64,
}

/// Decodes one JSONL line of the reference's row format.
pub fn decode_line(line: &[u8]) -> std::result::Result<Record, row::FieldError> {
    row::decode_text(line)
}

/// Parses one JSON text, with the reader's message on failure.
pub fn parse_json(text: &[u8]) -> std::result::Result<Value, row::FieldError> {
    serde_json::from_slice(text).map_err(|e| row::FieldError {
        field: None,
        message: format!("not valid JSON: {e}"),
    })
}

/// Turns one record's bytes into a row.
pub type Decode<'a> = dyn Fn(&[u8]) -> std::result::Result<Record, row::FieldError> + Sync + 'a;

/// Batches built at once, at most.
const AT_ONCE: usize = 4;

/// Text of pending records past which each full batch is built as it fills (rows of long
/// transcripts: 8,192 of them may be hundreds of megabytes).
const PENDING_BYTES: usize = 64 << 20;

/// Takes decoded records in input order: gives each its identity, keeps it for the batch it
/// falls in, emits full batches, and sets bad records aside (or stops at the first).
///
/// Batches are built a few at a time, each on its own rayon task (one per thread, at most
/// [`AT_ONCE`]): appending records to Arrow builders is a tenth of a JSONL conversion's CPU, and
/// on one thread it held the decoding back. Records wait for that only while their text is under
/// [`PENDING_BYTES`]; past it, each full batch is built as it fills. A batch holds [`BATCH_ROWS`]
/// accepted rows, the last one fewer, whichever way they are built, so the file is the same.
///
/// A failure to emit (a full disk) is heard when the batches before it are built: up to
/// [`AT_ONCE`] batches of rows later than when each row was appended on its own.
pub struct Accept<'a, 'b> {
    /// When set, how many rows carry each field in `extra`.
    pub extra_fields: Option<std::collections::BTreeMap<String, u64>>,
    /// Accepted records not yet in a batch.
    pending: Vec<Record>,
    /// One builder per batch built at once, kept so each stays sized for batches like its last.
    builders: Vec<Builder>,
    /// Pending records that make the batches built at once.
    build_at: usize,
    /// The text the pending records were read from, in bytes, about (the records left over
    /// after a build are not counted).
    pending_bytes: usize,
    identity: &'a mut Identity,
    on_bad: &'a mut OnBadRow<'b>,
    pub(super) counts: &'a mut ReadCounts,
    emit: &'a mut dyn FnMut(RecordBatch) -> Result<()>,
}

impl<'a, 'b> Accept<'a, 'b> {
    /// Starts accepting records.
    pub fn new(
        identity: &'a mut Identity,
        on_bad: &'a mut OnBadRow<'b>,
        counts: &'a mut ReadCounts,
        emit: &'a mut dyn FnMut(RecordBatch) -> Result<()>,
    ) -> Self {
        Self {
            extra_fields: None,
            pending: Vec::new(),
            builders: Vec::new(),
            build_at: BATCH_ROWS * rayon::current_num_threads().clamp(1, AT_ONCE),
            pending_bytes: 0,
            identity,
            on_bad,
            counts,
            emit,
        }
    }

    /// Takes one record decoded from `text` at `file` line `line`.
    pub fn take(
        &mut self,
        file: &str,
        line: u64,
        text: &[u8],
        result: std::result::Result<Record, row::FieldError>,
    ) -> Result<()> {
        self.take_keyed(file, line, (text.len(), &|| text.to_vec()), result, None)
    }

    /// [`Accept::take`], with the record's text made only when it is set aside (a record made
    /// rather than read, whose text costs a serialization).
    pub fn take_made(
        &mut self,
        file: &str,
        line: u64,
        text: &dyn Fn() -> Vec<u8>,
        result: std::result::Result<Record, row::FieldError>,
    ) -> Result<()> {
        // A made record's size is not known without its text: the row count bounds them.
        self.take_keyed(file, line, (0, text), result, None)
    }

    /// [`Accept::take`], with the record's `extra` field names when they were read already.
    /// `text` is the record's size in bytes (0 when unknown) and how to make its text.
    fn take_keyed(
        &mut self,
        file: &str,
        line: u64,
        (size, text): (usize, &dyn Fn() -> Vec<u8>),
        result: std::result::Result<Record, row::FieldError>,
        keys: Option<Vec<String>>,
    ) -> Result<()> {
        let bad = |field: Option<String>, reason: String| Reject {
            file: file.to_owned(),
            line,
            field,
            reason,
            kind: None,
            text: String::from_utf8(text())
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        };
        let reject = match result {
            Ok(mut record) => match self.identity.assign(&mut record)? {
                Ok(()) => {
                    if let Some(tally) = self.extra_fields.as_mut() {
                        let keys = keys.unwrap_or_else(|| {
                            record.extra.as_deref().map(extra_keys).unwrap_or_default()
                        });
                        for k in keys {
                            *tally.entry(k).or_default() += 1;
                        }
                    }
                    self.pending.push(record);
                    self.pending_bytes += size;
                    self.counts.rows += 1;
                    if self.pending.len() >= self.build_at
                        || (self.pending_bytes >= PENDING_BYTES && self.pending.len() >= BATCH_ROWS)
                    {
                        self.build(false)?;
                    }
                    None
                }
                Err(reason) => Some(bad(Some("rollout_id".into()), reason)),
            },
            Err(e) => Some(bad(e.field, e.message)),
        };
        if let Some(r) = reject {
            match self.on_bad {
                OnBadRow::Fail => return Err(r.into_error()),
                OnBadRow::Reject(list) => {
                    self.counts.rejected += 1;
                    list.push(r);
                }
            }
        }
        Ok(())
    }

    /// Takes records decoded by [`decode_all`], in order; `text` holds the bytes they were
    /// decoded from.
    pub(super) fn take_decoded(
        &mut self,
        file: &str,
        text: &[u8],
        decoded: Vec<Decoded>,
    ) -> Result<()> {
        for d in decoded {
            let span = &text[d.span];
            self.take_keyed(
                file,
                d.line,
                (span.len(), &|| span.to_vec()),
                d.result,
                d.keys,
            )?;
        }
        Ok(())
    }

    /// Builds the pending records' full batches (all of them, the last one partial, when `all`),
    /// in parallel, and emits them in order.
    fn build(&mut self, all: bool) -> Result<()> {
        let take = if all {
            self.pending.len()
        } else {
            self.pending.len() / BATCH_ROWS * BATCH_ROWS
        };
        if take == 0 {
            return Ok(());
        }
        let batches = take.div_ceil(BATCH_ROWS);
        if self.builders.len() < batches {
            self.builders.resize_with(batches, Builder::new);
        }
        let built: Vec<Result<RecordBatch>> = self.pending[..take]
            .par_chunks_mut(BATCH_ROWS)
            .zip(self.builders.par_iter_mut())
            .map(|(rows, builder)| {
                for r in rows {
                    builder.push(r)?;
                    // Freed on this task, while it is still in cache.
                    drop(std::mem::take(r));
                }
                builder.finish()
            })
            .collect();
        // What is drained was emptied above (a default record owns nothing); the vector keeps
        // its room for the next batches.
        self.pending.drain(..take);
        self.pending_bytes = 0;
        for batch in built {
            (self.emit)(batch?)?;
        }
        Ok(())
    }

    /// Emits what is left: the last, partial batch.
    pub fn finish(mut self) -> Result<()> {
        self.build(true)
    }
}

/// The top-level keys of a JSON object text (values are skipped, not built).
#[allow(
    clippy::zero_sized_map_values,
    reason = "the values are skipped (`IgnoredAny`): only the keys are read"
)]
pub fn extra_keys(text: &str) -> Vec<String> {
    serde_json::from_str::<std::collections::BTreeMap<String, serde::de::IgnoredAny>>(text)
        .map(|m| m.into_keys().collect())
        .unwrap_or_default()
}

/// Splits a JSON array text into its elements, each with the line it starts on. Strings (and
/// their escapes) are skipped over, so brackets inside them do not count.
pub fn split_array(text: &[u8]) -> std::result::Result<Vec<(u64, &[u8])>, row::FieldError> {
    let err = |line: u64, message: &str| row::FieldError {
        field: None,
        message: format!("line {line}: {message}"),
    };
    let mut out = Vec::new();
    let mut line = 1u64;
    let mut i = 0;
    let skip_ws = |i: &mut usize, line: &mut u64| {
        while *i < text.len() && text[*i].is_ascii_whitespace() {
            if text[*i] == b'\n' {
                *line += 1;
            }
            *i += 1;
        }
    };
    skip_ws(&mut i, &mut line);
    if text.get(i) != Some(&b'[') {
        return Err(err(line, "expected a JSON array"));
    }
    i += 1;
    loop {
        skip_ws(&mut i, &mut line);
        match text.get(i) {
            None => return Err(err(line, "the array is not closed")),
            Some(b']') => return Ok(out),
            Some(b',') if !out.is_empty() => {
                i += 1;
                skip_ws(&mut i, &mut line);
            }
            _ => {}
        }
        let (start, start_line) = (i, line);
        let (mut depth, mut in_string, mut escaped) = (0i64, false, false);
        while i < text.len() {
            let b = text[i];
            if b == b'\n' {
                line += 1;
            }
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
            } else {
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' if depth > 0 => depth -= 1,
                    b',' | b']' if depth == 0 => break,
                    _ => {}
                }
            }
            i += 1;
            if depth == 0 && !in_string && matches!(b, b'}' | b']') {
                break;
            }
        }
        let element = text[start..i].trim_ascii_end();
        if element.is_empty() {
            return Err(err(start_line, "an empty array element"));
        }
        out.push((start_line, element));
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, StringArray};

    use super::*;

    /// Rows go into batches of `BATCH_ROWS` accepted rows in input order, however many are
    /// built at once (one per thread) and wherever a row is set aside; rows of long text are
    /// built a batch at a time.
    #[test]
    fn batches_hold_accepted_rows_in_order_at_any_thread_count() {
        let n = 3 * BATCH_ROWS + 17;
        // Every 1000th row repeats the id of the row before it, and is set aside.
        let id = |i: usize| format!("r{}", if i % 1000 == 999 { i - 1 } else { i });
        let expected: Vec<String> = (0..n).filter(|i| i % 1000 != 999).map(id).collect();
        let long = vec![b' '; PENDING_BYTES / BATCH_ROWS + 1];
        // (threads, bytes of text a row, full batches emitted before `finish`)
        for (threads, size, early) in [(1, 2, 2), (2, 2, 2), (3, 2, 0), (3, long.len(), 2)] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let (batches, rejected) = pool.install(|| {
                let mut batches = Vec::new();
                let mut rejects = Vec::new();
                let mut identity = Identity::default();
                let mut on_bad = OnBadRow::Reject(&mut rejects);
                let mut counts = ReadCounts::default();
                let emitted = std::cell::Cell::new(0);
                let mut emit = |b: RecordBatch| {
                    emitted.set(emitted.get() + 1);
                    batches.push(b);
                    Ok(())
                };
                let mut accept = Accept::new(&mut identity, &mut on_bad, &mut counts, &mut emit);
                for i in 0..n {
                    let record = Record {
                        task_id: format!("t{}", i / 8),
                        rollout_id: Some(id(i)),
                        prompt: Some(format!("ask {i}")),
                        ..Record::default()
                    };
                    let text = &long[..size];
                    accept
                        .take("in.jsonl", i as u64 + 1, text, Ok(record))
                        .unwrap();
                }
                assert_eq!(
                    emitted.get(),
                    early,
                    "{threads} threads, {size} bytes a row"
                );
                accept.finish().unwrap();
                assert_eq!(counts.rows, expected.len() as u64);
                (batches, rejects.len())
            });
            assert_eq!(rejected, n - expected.len(), "{threads} threads");
            let sizes: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
            let (last, full) = sizes.split_last().unwrap();
            assert!(
                full.iter().all(|&s| s == BATCH_ROWS),
                "{threads}: {sizes:?}"
            );
            assert_eq!(*last, expected.len() - full.len() * BATCH_ROWS);
            let ids: Vec<String> = batches
                .iter()
                .flat_map(|b| {
                    let col = b.column_by_name("rollout_id").unwrap();
                    let col = col.as_any().downcast_ref::<StringArray>().unwrap();
                    (0..col.len())
                        .map(|i| col.value(i).to_owned())
                        .collect::<Vec<_>>()
                })
                .collect();
            assert_eq!(ids, expected, "{threads} threads");
        }
    }

    #[test]
    fn arrays_split_into_elements_with_their_lines() {
        let text = b" [\n {\"a\": \"],{\\\"\"},\n  {\"b\": [1, {\"c\": 2}]} ,\n 3, \"x\"\n]";
        let got = split_array(text).unwrap();
        let got: Vec<(u64, &str)> = got
            .iter()
            .map(|(l, t)| (*l, std::str::from_utf8(t).unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![
                (2, r#"{"a": "],{\""}"#),
                (3, r#"{"b": [1, {"c": 2}]}"#),
                (4, "3"),
                (4, r#""x""#)
            ]
        );
        assert!(split_array(b"[{}").is_err());
        assert_eq!(split_array(b"[]").unwrap().len(), 0);
    }
}
