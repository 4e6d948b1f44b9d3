//! Decoded records into batches: one record's bytes into a row, the rows into batches in input
//! order, bad records set aside; JSON arrays split into their elements.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, Int32Array, RecordBatch, StringArray, StringBuilder, UInt32Array,
};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use rayon::prelude::*;
use serde_json::Value;

use super::chunks::Piece;
use super::identity::Identity;
use super::rejects::{OnBadRow, Reject};
use crate::error::{Error, Result};
use crate::pipeline::row::{self, BATCH_ROWS, Builder, Record};
use crate::schema::{col, row_schema};

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

/// Rows of the row schema built together (on one decoding task, or from records taken one by
/// one), and the accepted ones among them: each one's row in `batch`, and its rollout id when
/// the reader derived it (the batch holds `""` there).
struct Segment {
    batch: RecordBatch,
    rows: Vec<(u32, Option<String>)>,
}

/// Takes decoded records in input order: gives each its identity, keeps it for the batch it
/// falls in, emits full batches, and sets bad records aside (or stops at the first).
///
/// Records come already built into rows ([`Piece`]s, built on the decoding threads), or one by
/// one ([`Accept::take`], built here a batch's worth at a time, on the rayon threads). A batch
/// is then cut from the accepted rows of the pieces in turn: each piece's rows (sliced, or
/// taken past a refused row) are joined and the derived rollout ids put in. A piece whose rows
/// were mostly refused has its accepted ones copied out at once, so that a waiting piece holds
/// not much more than its accepted rows. Batches are cut a few at a time, each on its own rayon
/// task (one per thread, at most [`AT_ONCE`]); rows wait for that only while the text of the
/// rows held is under [`PENDING_BYTES`]; past it, each full batch is cut as soon as a piece
/// fills it. A batch holds [`BATCH_ROWS`] accepted rows, the last one fewer, whichever way they
/// are built, so the file is the same.
///
/// A failure to emit (a full disk) is heard when the batches before it are built: up to
/// [`AT_ONCE`] batches of rows, and the rest of a piece, later than when each row was appended
/// on its own.
pub struct Accept<'a, 'b> {
    /// When set, how many rows carry each field in `extra`.
    pub extra_fields: Option<std::collections::BTreeMap<String, u64>>,
    /// Accepted rows not yet in a batch, in order.
    pending: std::collections::VecDeque<Segment>,
    /// Rows in `pending`.
    pending_rows: usize,
    /// Records taken one by one (identified already), not yet built into a segment.
    loose: Vec<Record>,
    /// Pending rows that make the batches built at once.
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
            pending: std::collections::VecDeque::new(),
            pending_rows: 0,
            loose: Vec::new(),
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
        self.take_one(file, line, (text.len(), &|| text.to_vec()), result)
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
        self.take_one(file, line, (0, text), result)
    }

    /// [`Accept::take`]: `text` is the record's size in bytes (0 when unknown) and how to make
    /// its text.
    fn take_one(
        &mut self,
        file: &str,
        line: u64,
        text: (usize, &dyn Fn() -> Vec<u8>),
        result: std::result::Result<Record, row::FieldError>,
    ) -> Result<()> {
        let mut record = match result {
            Ok(record) => record,
            Err(e) => return self.set_aside(file, line, text.1, e.field, e.message),
        };
        match self.identity.assign(&mut record)? {
            Ok(()) => {
                if self.extra_fields.is_some() {
                    let keys = record.extra.as_deref().map(extra_keys);
                    self.tally(keys);
                }
                self.loose.push(record);
                self.accepted(text.0)
            }
            Err(reason) => self.set_aside(file, line, text.1, Some("rollout_id".into()), reason),
        }
    }

    /// Counts the names of an accepted row's `extra` fields, when they are counted.
    fn tally(&mut self, keys: Option<Vec<String>>) {
        if let Some(tally) = self.extra_fields.as_mut() {
            for k in keys.unwrap_or_default() {
                *tally.entry(k).or_default() += 1;
            }
        }
    }

    /// Counts one accepted row of `size` bytes of text, and builds the full batches when enough
    /// rows wait.
    fn accepted(&mut self, size: usize) -> Result<()> {
        self.pending_bytes += size;
        self.counts.rows += 1;
        self.build_if_due()
    }

    /// Builds the full batches when enough rows wait: a batch per thread, or one batch once
    /// the text held passes [`PENDING_BYTES`].
    fn build_if_due(&mut self) -> Result<()> {
        let waiting = self.pending_rows + self.loose.len();
        if waiting >= self.build_at
            || (self.pending_bytes >= PENDING_BYTES && waiting >= BATCH_ROWS)
        {
            self.build(false)?;
        }
        Ok(())
    }

    /// Sets a record aside, or fails with it.
    fn set_aside(
        &mut self,
        file: &str,
        line: u64,
        text: &dyn Fn() -> Vec<u8>,
        field: Option<String>,
        reason: String,
    ) -> Result<()> {
        let reject = Reject {
            file: file.to_owned(),
            line,
            field,
            reason,
            kind: None,
            text: String::from_utf8(text())
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        };
        match self.on_bad {
            OnBadRow::Fail => Err(reject.into_error()),
            OnBadRow::Reject(list) => {
                self.counts.rejected += 1;
                list.push(reject);
                Ok(())
            }
        }
    }

    /// Takes the pieces of records decoded by [`decode_all`], in order; `text` holds the bytes
    /// they were decoded from.
    pub(super) fn take_decoded(
        &mut self,
        file: &str,
        text: &[u8],
        pieces: Vec<Piece>,
    ) -> Result<()> {
        for piece in pieces {
            self.take_piece(file, text, piece)?;
        }
        Ok(())
    }

    fn take_piece(&mut self, file: &str, text: &[u8], piece: Piece) -> Result<()> {
        // Rows taken one by one before these go first.
        self.flush_loose()?;
        let built = piece.batch.as_ref().map_or(0, RecordBatch::num_rows);
        let keys = piece.batch.as_ref().map(Keys::of).transpose()?;
        let mut rows = Vec::with_capacity(built);
        // The next row of the piece's batch, and the text of the rows in it.
        let (mut at, mut held) = (0u32, 0);
        for d in piece.records {
            let span = &text[d.span];
            let given = match d.result {
                Err(e) => {
                    self.set_aside(file, d.line, &|| span.to_vec(), e.field, e.message)?;
                    continue;
                }
                Ok(given) => given,
            };
            let i = at as usize;
            let Some(keys) = keys.as_ref().filter(|_| i < built) else {
                return Err(Error::Internal(format!(
                    "`{file}` line {}: a decoded record missing from its built rows",
                    d.line
                )));
            };
            at += 1;
            held += span.len();
            let given = given.then(|| keys.rollout_id.value(i));
            let index = keys
                .rollout_index
                .is_valid(i)
                .then(|| keys.rollout_index.value(i));
            let run = keys.eval_run.is_valid(i).then(|| keys.eval_run.value(i));
            match self
                .identity
                .assign_keys(keys.task_id.value(i), given, index, run)?
            {
                Ok(derived) => {
                    self.tally(d.keys);
                    rows.push((at - 1, derived));
                    self.counts.rows += 1;
                }
                Err(reason) => self.set_aside(
                    file,
                    d.line,
                    &|| span.to_vec(),
                    Some("rollout_id".into()),
                    reason,
                )?,
            }
        }
        if at as usize != built {
            return Err(Error::Internal(format!(
                "`{file}`: {built} rows built from {at} decoded records"
            )));
        }
        if let Some(batch) = piece.batch
            && !rows.is_empty()
        {
            // Rows refused for their ids stay in the piece's batch while it waits: when they
            // are most of it, the accepted ones are copied out and the piece let go, so what
            // waits is never much more than the accepted rows (a file of rows seen before).
            let segment = if rows.len() * 2 < built {
                let at = UInt32Array::from_iter_values(rows.iter().map(|r| r.0));
                let batch = take_record_batch(&batch, &at)?;
                held = held * rows.len() / built;
                let rows = (0u32..).zip(rows.into_iter().map(|r| r.1)).collect();
                Segment { batch, rows }
            } else {
                Segment { batch, rows }
            };
            // The text of every row the waiting batch holds, refused ones included.
            self.pending_bytes += held;
            self.pending_rows += segment.rows.len();
            self.pending.push_back(segment);
        }
        self.build_if_due()
    }

    /// Builds the records taken one by one into segments, a batch's worth each, in parallel.
    fn flush_loose(&mut self) -> Result<()> {
        if self.loose.is_empty() {
            return Ok(());
        }
        let built: Vec<Result<RecordBatch>> = self
            .loose
            .par_chunks_mut(BATCH_ROWS)
            .map(|records| {
                let mut builder = Builder::new();
                for r in records {
                    builder.push(r)?;
                    // Freed on this task, while it is still in cache.
                    drop(std::mem::take(r));
                }
                builder.finish()
            })
            .collect();
        self.loose.clear();
        for batch in built {
            let batch = batch?;
            let rows = (0u32..).take(batch.num_rows()).map(|i| (i, None)).collect();
            self.pending_rows += batch.num_rows();
            self.pending.push_back(Segment { batch, rows });
        }
        Ok(())
    }

    /// Cuts the pending rows' full batches (all of them, the last one partial, when `all`), in
    /// parallel, and emits them in order.
    fn build(&mut self, all: bool) -> Result<()> {
        self.flush_loose()?;
        let take = if all {
            self.pending_rows
        } else {
            self.pending_rows / BATCH_ROWS * BATCH_ROWS
        };
        if take == 0 {
            return Ok(());
        }
        // Each batch's parts: a pending segment's batch and the rows of it that go in.
        let mut plans: Vec<Vec<Segment>> = Vec::with_capacity(take.div_ceil(BATCH_ROWS));
        let (mut parts, mut filled, mut left) = (Vec::new(), 0, take);
        while left > 0 {
            let Some(front) = self.pending.front_mut() else {
                return Err(Error::Internal("fewer pending rows than counted".into()));
            };
            let n = front.rows.len().min(BATCH_ROWS - filled).min(left);
            let part = if n == front.rows.len() {
                self.pending.pop_front().unwrap_or_else(|| unreachable!())
            } else {
                Segment {
                    batch: front.batch.clone(),
                    rows: front.rows.drain(..n).collect(),
                }
            };
            parts.push(part);
            filled += n;
            left -= n;
            if filled == BATCH_ROWS || left == 0 {
                plans.push(std::mem::take(&mut parts));
                filled = 0;
            }
        }
        self.pending_rows -= take;
        self.pending_bytes = 0;
        let built: Vec<Result<RecordBatch>> = plans.into_par_iter().map(cut).collect();
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

/// The columns identity reads, of a batch of built rows.
struct Keys<'a> {
    task_id: &'a StringArray,
    rollout_id: &'a StringArray,
    rollout_index: &'a Int32Array,
    eval_run: &'a Int32Array,
}

impl<'a> Keys<'a> {
    fn of(batch: &'a RecordBatch) -> Result<Self> {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| Error::Internal(format!("built rows without `{name}`")))
        };
        let text = |name: &str| -> Result<&'a StringArray> {
            column(name)?
                .as_any()
                .downcast_ref()
                .ok_or_else(|| Error::Internal(format!("`{name}` built as other than text")))
        };
        let int = |name: &str| -> Result<&'a Int32Array> {
            column(name)?
                .as_any()
                .downcast_ref()
                .ok_or_else(|| Error::Internal(format!("`{name}` built as other than Int32")))
        };
        Ok(Self {
            task_id: text(col::TASK_ID)?,
            rollout_id: text(col::ROLLOUT_ID)?,
            rollout_index: int(col::ROLLOUT_INDEX)?,
            eval_run: int(col::EVAL_RUN)?,
        })
    }
}

/// One batch from its parts: each part's rows (a slice when they run on, else taken), joined,
/// with the derived rollout ids put in.
fn cut(parts: Vec<Segment>) -> Result<RecordBatch> {
    let schema = row_schema();
    let rows: usize = parts.iter().map(|p| p.rows.len()).sum();
    let mut ids = StringBuilder::with_capacity(rows, rows * 16);
    let mut pieces = Vec::with_capacity(parts.len());
    for part in &parts {
        let (Some(first), Some(last)) = (part.rows.first(), part.rows.last()) else {
            continue;
        };
        let piece = if (last.0 - first.0) as usize + 1 == part.rows.len() {
            part.batch.slice(first.0 as usize, part.rows.len())
        } else {
            let at = UInt32Array::from_iter_values(part.rows.iter().map(|r| r.0));
            take_record_batch(&part.batch, &at)?
        };
        let given = Keys::of(&piece)?.rollout_id;
        for (i, (_, derived)) in part.rows.iter().enumerate() {
            ids.append_value(derived.as_deref().unwrap_or_else(|| given.value(i)));
        }
        pieces.push(piece);
    }
    drop(parts);
    let joined = concat_batches(&schema, &pieces)?;
    drop(pieces);
    let at = schema.index_of(col::ROLLOUT_ID)?;
    let mut columns = joined.columns().to_vec();
    columns[at] = Arc::new(ids.finish());
    Ok(RecordBatch::try_new(schema, columns)?)
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

    /// Rows read in pieces built on the decoding threads come out as the same batches as the
    /// same records taken one by one: ids given, derived and salted; rows refused for their id
    /// or their text in the middle of a piece; batches cut across pieces; records taken one by
    /// one between two reads into the same batches; at 1, 2 and 3 threads.
    #[test]
    fn pieces_give_the_batches_records_taken_one_by_one_give() {
        use std::fmt::Write as _;

        // (batches, rejects' lines and fields, rows)
        type Got = (Vec<RecordBatch>, Vec<(u64, Option<String>)>, u64);

        let mut text = String::new();
        for i in 0..3 * BATCH_ROWS + 500 {
            let task = i / 5;
            let _ = match i % 7 {
                // A run of rows nearly all refused (row 0's id again): their pieces' few
                // accepted rows are copied out while they wait.
                _ if (10_000..14_000).contains(&i) && i % 10 != 0 => writeln!(
                    text,
                    r#"{{"task_id": "t{task}", "rollout_id": "r0", "prompt": "again {i}"}}"#
                ),
                // Given ids, every 13th one an earlier row's (refused).
                0 | 1 => writeln!(
                    text,
                    r#"{{"task_id": "t{task}", "rollout_id": "r{}", "prompt": "ask {i}", "reward": 1}}"#,
                    if i % 13 == 0 { i / 2 } else { i }
                ),
                // A bad row.
                2 if i % 3 == 0 => writeln!(text, r#"{{"task_id": "t{task}", "reward": "x"}}"#),
                // Derived ids, some sharing a task and an index (salted).
                _ => writeln!(
                    text,
                    r#"{{"task_id": "t{}", "rollout_index": {}, "prompt": "ask {i}", "steps": [{{"tool": "a", "arguments": {{"k": {i}}}}}]}}"#,
                    task % 50,
                    i % 3
                ),
            };
        }
        let text = text.into_bytes();
        let lines: Vec<&[u8]> = text
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        let extra = Record {
            task_id: "loose".into(),
            prompt: Some("made".into()),
            ..Record::default()
        };

        let run = |threads: usize, pieces: bool| -> Got {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut batches = Vec::new();
                let mut rejects = Vec::new();
                let mut identity = Identity::default();
                let mut on_bad = OnBadRow::Reject(&mut rejects);
                let mut counts = ReadCounts::default();
                let mut emit = |b: RecordBatch| {
                    batches.push(b);
                    Ok(())
                };
                let mut accept = Accept::new(&mut identity, &mut on_bad, &mut counts, &mut emit);
                for round in 0..2 {
                    if pieces {
                        crate::pipeline::io::read_records(
                            "in.jsonl",
                            &text[..],
                            &decode_line,
                            &mut accept,
                            &|_| {},
                        )
                        .unwrap();
                    } else {
                        let mut line = 0;
                        for l in text.split(|b| *b == b'\n') {
                            line += 1;
                            if !l.is_empty() {
                                accept.take("in.jsonl", line, l, decode_line(l)).unwrap();
                            }
                        }
                    }
                    for i in 0..(round * 100 + 3) {
                        accept.take("made", i, b"{}", Ok(extra.clone())).unwrap();
                    }
                }
                accept.finish().unwrap();
                let rows = counts.rows;
                let rejected = rejects.iter().map(|r| (r.line, r.field.clone())).collect();
                (batches, rejected, rows)
            })
        };
        let want = run(1, false);
        assert!(lines.len() > 3 * BATCH_ROWS);
        // Refused for their ids and for their text, in both reads.
        assert!(want.1.iter().any(|r| r.1.as_deref() == Some("rollout_id")));
        assert!(want.1.iter().any(|r| r.1.as_deref() == Some("reward")));
        assert!(want.0.len() >= 5, "{}", want.0.len());
        for threads in [1, 2, 3] {
            let got = run(threads, true);
            assert_eq!(got.1, want.1, "{threads} threads: the rejects");
            assert_eq!(got.2, want.2, "{threads} threads: the rows");
            assert_eq!(got.0.len(), want.0.len(), "{threads} threads: the batches");
            for (i, (g, w)) in got.0.iter().zip(&want.0).enumerate() {
                assert_eq!(g, w, "{threads} threads: batch {i}");
            }
        }
    }

    /// An id a decoder gives as `""` is a given id, checked as any other (a second one is
    /// refused), not one the reader derives.
    #[test]
    fn an_empty_given_id_is_checked_not_derived() {
        let decode = |line: &[u8]| {
            decode_line(line).map(|mut r| {
                r.rollout_id = Some(String::new());
                r
            })
        };
        let text =
            b"{\"task_id\": \"t\", \"prompt\": \"a\"}\n{\"task_id\": \"t\", \"prompt\": \"b\"}\n";
        let (mut identity, mut rejects) = (Identity::default(), Vec::new());
        let mut on_bad = OnBadRow::Reject(&mut rejects);
        let (mut counts, mut batches) = (ReadCounts::default(), Vec::new());
        let mut emit = |b: RecordBatch| {
            batches.push(b);
            Ok(())
        };
        let mut accept = Accept::new(&mut identity, &mut on_bad, &mut counts, &mut emit);
        crate::pipeline::io::read_records("in.jsonl", &text[..], &decode, &mut accept, &|_| {})
            .unwrap();
        accept.finish().unwrap();
        assert_eq!((counts.rows, counts.rejected), (1, 1));
        assert_eq!(rejects[0].line, 2);
        let ids = batches[0].column_by_name("rollout_id").unwrap();
        let ids = ids.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(ids.value(0), "");
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
