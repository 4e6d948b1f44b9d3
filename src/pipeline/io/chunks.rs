//! The streaming JSONL reader: chunks of whole lines, decoded in parallel (rayon), accepted in
//! input order while the next chunk is read.

use std::io::Read;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;

use super::CHUNK_BYTES;
use super::accept::{Accept, Decode, ReadCounts, decode_line, extra_keys, split_array};
use super::identity::Identity;
use super::rejects::OnBadRow;
use crate::error::{Error, Result};
use crate::pipeline::row::{self, BATCH_ROWS, Builder};

/// One record decoded from a chunk: where its bytes are, and whether they made a row.
pub(super) struct Decoded {
    pub(super) line: u64,
    pub(super) span: std::ops::Range<usize>,
    /// `Ok` when the record is a row of its piece's batch (the next one), else why not; `true`
    /// when the record gave its `rollout_id` (`false`: the reader derives it, and the batch
    /// holds `""` there).
    pub(super) result: std::result::Result<bool, row::FieldError>,
    /// The names of the fields in `extra`, when they are counted.
    pub(super) keys: Option<Vec<String>>,
}

/// Records decoded on one task: the rows they made, built (`rollout_id` is `""` where the
/// reader derives it), and every record's fate, in order.
pub(super) struct Piece {
    pub(super) batch: Option<RecordBatch>,
    pub(super) records: Vec<Decoded>,
}

thread_local! {
    /// Each decoding thread's builder, kept so it stays sized for pieces like its last. Taken
    /// out while in use: a task that fails or panics half-way through a row does not put it
    /// back.
    static BUILDER: std::cell::Cell<Option<Builder>> = const { std::cell::Cell::new(None) };
}

/// A piece of more text than this does not leave its builder to its thread: the builder stays
/// sized for the pieces like its last, and one line of hundreds of megabytes would keep that
/// much on each thread for as long as the process runs.
const KEEP_BUILDER_BYTES: usize = 16 << 20;

/// Decodes records (line, byte range in `text`) in parallel into pieces of built rows, in
/// order: each task appends its records to its thread's builder as it decodes them, so a
/// record is freed on the thread that made it, while it is still in cache, and the rows are
/// built in parallel. `threads`, the reading caller's rayon threads, sizes the pieces.
pub(super) fn decode_all(
    text: &[u8],
    records: &[(u64, std::ops::Range<usize>)],
    decode: &Decode<'_>,
    tally: bool,
    threads: usize,
) -> Result<Vec<Piece>> {
    // A few pieces per thread, so a slow one does not hold the others.
    let size = records.len().div_ceil(4 * threads.max(1)).max(64);
    records
        .par_chunks(size.max(1))
        .map(|part| {
            let mut builder = BUILDER.take().unwrap_or_default();
            let mut out = Vec::with_capacity(part.len());
            for (line, span) in part {
                let (result, keys) = match decode(&text[span.clone()]) {
                    Ok(mut r) => {
                        // Read here, in parallel, when they are counted.
                        let keys =
                            tally.then(|| r.extra.as_deref().map(extra_keys).unwrap_or_default());
                        let given = r.rollout_id.is_some();
                        r.rollout_id.get_or_insert_default();
                        builder.push(&r)?;
                        (Ok(given), keys)
                    }
                    Err(e) => (Err(e), None),
                };
                out.push(Decoded {
                    line: *line,
                    span: span.clone(),
                    result,
                    keys,
                });
            }
            let batch = if builder.is_empty() {
                None
            } else {
                Some(builder.finish()?)
            };
            let bytes: usize = part.iter().map(|(_, span)| span.len()).sum();
            if bytes <= KEEP_BUILDER_BYTES {
                BUILDER.set(Some(builder));
            }
            Ok(Piece {
                batch,
                records: out,
            })
        })
        .collect()
}

/// A chunk of records on its way from the reading thread to the decoding one ([`Raw`]), then
/// to the accepting one (decoded).
struct Chunk<T> {
    /// The bytes the records are in.
    text: Arc<Vec<u8>>,
    /// Bytes read from the input since the previous chunk.
    read: u64,
    records: T,
}

/// Records read but not decoded yet: each one's line and byte range in the chunk's text.
type Raw = Chunk<Vec<(u64, std::ops::Range<usize>)>>;

/// Reads chunks of whole records from `reader`, sending each down `tx`; stops quietly when the
/// receiver is gone (it failed, and says why). Buffers come back through `spare`. It runs on a
/// thread of its own, so the next chunk is read from the disk while this one is decoded: a
/// cold file read in turn with the decoding made the whole read a fifth slower.
fn read_raw(
    name: &str,
    mut reader: impl Read,
    tx: &std::sync::mpsc::SyncSender<Raw>,
    spare: &std::sync::mpsc::Receiver<Vec<u8>>,
) -> Result<()> {
    let fresh = || Vec::with_capacity(CHUNK_BYTES + (64 << 10));
    let mut buf: Vec<u8> = fresh();
    let mut next_line: u64 = 1;
    let mut eof = false;
    let mut first = true;
    while !eof {
        // Fill to about CHUNK_BYTES, then cut at the last newline.
        let start_len = buf.len();
        // A line longer than a chunk doubles the buffer until it fits.
        let target = if start_len < CHUNK_BYTES {
            CHUNK_BYTES
        } else {
            start_len * 2
        };
        // Read into the spare capacity, not into bytes zeroed first: filling a chunk with
        // zeros cost a tenth of this thread's time, every byte of the input written twice.
        let want = target - start_len;
        buf.reserve(want);
        let got = (&mut reader)
            .take(want as u64)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io(name, e))?;
        // Short only at the end of the input.
        eof = got < want;
        let mut read = got as u64;
        if first && buf.starts_with(super::BOM) {
            // A byte-order mark is no part of the first record.
            buf.drain(..super::BOM.len());
        }
        if first && buf.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            // A JSON array: read it whole, then take its elements, a batch at a time.
            // Counted from the buffer's own length: a byte-order mark was taken off it.
            let before = buf.len();
            reader
                .read_to_end(&mut buf)
                .map_err(|e| Error::io(name, e))?;
            read += (buf.len() - before) as u64;
            let elements: Vec<(u64, std::ops::Range<usize>)> = split_array(&buf)
                .map_err(|e| Error::BadRow {
                    file: name.to_owned(),
                    line: 1,
                    field: None,
                    message: e.message,
                })?
                .into_iter()
                .map(|(line, el)| (line, span_in(&buf, el)))
                .collect();
            let text = Arc::new(buf);
            for batch in elements.chunks(BATCH_ROWS) {
                let raw = Raw {
                    text: Arc::clone(&text),
                    read: std::mem::take(&mut read),
                    records: batch.to_vec(),
                };
                if tx.send(raw).is_err() {
                    return Ok(());
                }
            }
            return Ok(());
        }
        first = false;
        let cut = if eof {
            buf.len()
        } else {
            match memchr::memrchr(b'\n', &buf) {
                Some(i) => i + 1,
                None => continue,
            }
        };
        let mut lines = Vec::new();
        let mut at = 0;
        let ends = memchr::memchr_iter(b'\n', &buf[..cut])
            .chain((cut > 0 && buf[cut - 1] != b'\n').then_some(cut));
        for end in ends {
            let l = &buf[at..end];
            // Lines of white space only are skipped.
            if !l.iter().all(u8::is_ascii_whitespace) {
                lines.push((next_line, at..end));
            }
            at = end + 1;
            next_line += 1;
        }
        // The partial line after the cut starts the next buffer.
        let mut next = spare.try_recv().unwrap_or_else(|_| fresh());
        next.clear();
        next.extend_from_slice(&buf[cut..]);
        buf.truncate(cut);
        let raw = Raw {
            text: Arc::new(std::mem::replace(&mut buf, next)),
            read,
            records: lines,
        };
        if tx.send(raw).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Decodes the chunks coming down `rx` in parallel, sending each down `tx` in order; stops
/// quietly when the receiver is gone.
fn decode_chunks(
    rx: &std::sync::mpsc::Receiver<Raw>,
    decode: &Decode<'_>,
    (tally, threads): (bool, usize),
    tx: &std::sync::mpsc::SyncSender<Chunk<Result<Vec<Piece>>>>,
) {
    for raw in rx {
        let chunk = Chunk {
            records: decode_all(&raw.text, &raw.records, decode, tally, threads),
            text: raw.text,
            read: raw.read,
        };
        if tx.send(chunk).is_err() {
            return;
        }
    }
}

/// Where `part` (a slice of `whole`) sits in `whole`.
fn span_in(whole: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}

/// Reads records from `reader` (JSON Lines, or one JSON array) and hands each, decoded by
/// `decode`, to `accept` in input order. One thread reads chunks, one decodes them (in
/// parallel, chunk by chunk), and this one accepts the chunk before, so none waits for another.
pub fn read_records(
    name: &str,
    reader: impl Read + Send,
    decode: &Decode<'_>,
    accept: &mut Accept<'_, '_>,
    progress: &dyn Fn(u64),
) -> Result<()> {
    let tally = accept.extra_fields.is_some();
    // The decoding thread is no rayon thread: its pieces are sized for the caller's pool.
    let threads = rayon::current_num_threads();
    let (raw_tx, raw_rx) = std::sync::mpsc::sync_channel::<Raw>(1);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk<Result<Vec<Piece>>>>(1);
    let (give_back, spare) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        let reading = scope.spawn(move || read_raw(name, reader, &raw_tx, &spare));
        let decoding = scope.spawn(move || decode_chunks(&raw_rx, decode, (tally, threads), &tx));
        let accepted = (|| {
            for chunk in &rx {
                accept.counts.bytes += chunk.read;
                progress(chunk.read);
                accept.take_decoded(name, &chunk.text, chunk.records?)?;
                if let Ok(buf) = Arc::try_unwrap(chunk.text) {
                    // The reader may be gone already; then the buffer is just freed.
                    let _ = give_back.send(buf);
                }
            }
            Ok(())
        })();
        // Stop the reader and the decoder if this side failed, then hear from them.
        drop(rx);
        let read = reading
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the reading thread panicked".into())));
        let decoded = decoding
            .join()
            .map_err(|_| Error::Internal("the decoding thread panicked".into()));
        accepted.and(read).and(decoded)
    })
}

/// Streams JSONL rows (the reference's row format) from `reader` into `emit`, one row-schema
/// batch at a time.
pub fn read_jsonl(
    name: &str,
    reader: impl Read + Send,
    identity: &mut Identity,
    on_bad: &mut OnBadRow<'_>,
    counts: &mut ReadCounts,
    progress: &dyn Fn(u64),
    emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let mut accept = Accept::new(identity, on_bad, counts, emit);
    read_records(name, reader, &decode_line, &mut accept, progress)?;
    accept.finish()
}

/// Every row of JSON Lines read from `reader` (named `name` in errors), in order, in row-schema
/// batches: a bad line is an error naming it.
///
/// # Errors
/// A line that is not a row.
pub fn jsonl_batches(name: &str, reader: impl Read + Send) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    read_jsonl(
        name,
        reader,
        &mut Identity::default(),
        &mut OnBadRow::Fail,
        &mut ReadCounts::default(),
        &|_| {},
        &mut |b| {
            batches.push(b);
            Ok(())
        },
    )?;
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoder that panics, and a sink that fails past the first chunk, end the read with an
    /// error: the reading and decoding threads stop, nothing hangs.
    #[test]
    fn a_panicking_decoder_or_a_failing_sink_ends_the_read() {
        let text = b"{\"prompt\": \"a\"}\n{\"prompt\": \"boom\"}\n";
        let decode = |line: &[u8]| {
            assert!(!line.windows(4).any(|w| w == b"boom"), "a decoder bug");
            decode_line(line)
        };
        let (mut identity, mut on_bad) = (Identity::default(), OnBadRow::Fail);
        let mut counts = ReadCounts::default();
        let mut emit = |_: RecordBatch| Ok(());
        let mut accept = Accept::new(&mut identity, &mut on_bad, &mut counts, &mut emit);
        let err = read_records("in.jsonl", &text[..], &decode, &mut accept, &|_| {}).unwrap_err();
        assert!(
            err.to_string().contains("decoding thread panicked"),
            "{err}"
        );

        // Many chunks' worth of rows; the sink refuses the first batch.
        let line = format!("{{\"prompt\": \"{}\"}}\n", "x".repeat(100));
        let many = line.repeat(3 * CHUNK_BYTES / line.len());
        let mut emitted = 0;
        let err = read_jsonl(
            "in.jsonl",
            many.as_bytes(),
            &mut Identity::default(),
            &mut OnBadRow::Fail,
            &mut ReadCounts::default(),
            &|_| {},
            &mut |_| {
                emitted += 1;
                Err(Error::Internal("the disk is full".into()))
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("the disk is full"), "{err}");
        assert_eq!(emitted, 1);
    }

    #[test]
    fn bad_lines_fail_or_are_set_aside() {
        let text = b"{\"prompt\": \"a\"}\nnot json\n{\"prompt\": \"b\", \"reward\": \"x\"}\n";
        let mut counts = ReadCounts::default();
        let err = read_jsonl(
            "in.jsonl",
            &text[..],
            &mut Identity::default(),
            &mut OnBadRow::Fail,
            &mut counts,
            &|_| {},
            &mut |_| Ok(()),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`in.jsonl` line 2: not valid JSON"),
            "{err}"
        );
        let mut rejects = Vec::new();
        let mut rows = 0;
        let mut counts = ReadCounts::default();
        read_jsonl(
            "in.jsonl",
            &text[..],
            &mut Identity::default(),
            &mut OnBadRow::Reject(&mut rejects),
            &mut counts,
            &|_| {},
            &mut |b| {
                rows += b.num_rows();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(rows, 1);
        assert_eq!(counts.rejected, 2);
        assert_eq!(
            (rejects[1].line, rejects[1].field.as_deref()),
            (3, Some("reward"))
        );
    }

    /// A reader that gives a few bytes a call (a pipe, a network stream), a line longer than
    /// two chunks, blank lines and a last line without its newline: every row is read once, in
    /// order, whole, and a bad line is still named by its number.
    #[test]
    fn short_reads_and_a_line_past_two_chunks_read_whole() {
        use std::fmt::Write as _;

        use datafusion::arrow::array::{Array, StringArray};
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(7919);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let long = "y".repeat(2 * CHUNK_BYTES + 1000);
        let mut text = String::new();
        for i in 0..2000 {
            let prompt = if i == 700 { long.as_str() } else { "p" };
            let _ = writeln!(text, "{{\"task_id\": \"t{i}\", \"prompt\": \"{prompt}\"}}");
            if i % 500 == 0 {
                text.push_str("  \n");
            }
        }
        text.push_str("{\"task_id\": \"last\", \"prompt\": \"z\"}");
        let batches = jsonl_batches("in.jsonl", Trickle(text.as_bytes())).unwrap();
        let tasks: Vec<String> = batches
            .iter()
            .flat_map(|b| {
                let col = b.column(0).as_any().downcast_ref::<StringArray>();
                let col = col.expect("task_id is text");
                (0..col.len())
                    .map(|i| col.value(i).to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut want: Vec<String> = (0..2000).map(|i| format!("t{i}")).collect();
        want.push("last".into());
        assert_eq!(tasks, want);
        let prompts = batches[0]
            .column_by_name("prompt")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(prompts.value(700).len(), long.len());

        // Row t2 is bad: line 4, after the blank line 2.
        let bad = text.replace("\"t2\", \"prompt\": \"p\"}", "\"t2\", \"prompt\": 5}");
        let err = jsonl_batches("in.jsonl", Trickle(bad.as_bytes())).unwrap_err();
        assert!(err.to_string().starts_with("`in.jsonl` line 4: "), "{err}");
    }
}
