//! The streaming JSONL reader: chunks of whole lines, decoded in parallel (rayon), accepted in
//! input order while the next chunk is read.

use std::io::Read;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;

use super::CHUNK_BYTES;
use super::accept::{Accept, Decode, ReadCounts, decode_line, extra_keys, split_array};
use super::rejects::{Identity, OnBadRow};
use crate::error::{Error, Result};
use crate::pipeline::row::{self, BATCH_ROWS, Record};

/// One record decoded from a chunk: where its bytes are, and what they gave.
pub(super) struct Decoded {
    pub(super) line: u64,
    pub(super) span: std::ops::Range<usize>,
    pub(super) result: std::result::Result<Record, row::FieldError>,
    /// The names of the fields in `extra`, when they are counted.
    pub(super) keys: Option<Vec<String>>,
}

/// Decodes records (line, byte range in `text`) in parallel, keeping their order.
pub(super) fn decode_all(
    text: &[u8],
    records: Vec<(u64, std::ops::Range<usize>)>,
    decode: &Decode<'_>,
    tally: bool,
) -> Vec<Decoded> {
    records
        .into_par_iter()
        .with_min_len(64)
        .map(|(line, span)| {
            let result = decode(&text[span.clone()]);
            // Read here, in parallel, when they are counted.
            let keys = match (&result, tally) {
                (Ok(r), true) => Some(r.extra.as_deref().map(extra_keys).unwrap_or_default()),
                _ => None,
            };
            Decoded {
                line,
                span,
                result,
                keys,
            }
        })
        .collect()
}

/// A decoded chunk on its way from the reading thread to the accepting one.
struct Chunk {
    /// The bytes the records came from.
    text: Arc<Vec<u8>>,
    /// Bytes read from the input since the previous chunk.
    read: u64,
    decoded: Vec<Decoded>,
}

/// Reads and decodes chunks of `reader`, sending each down `tx`; stops quietly when the
/// receiver is gone (it failed, and says why). Buffers come back through `spare`.
fn produce(
    name: &str,
    mut reader: impl Read,
    decode: &Decode<'_>,
    tally: bool,
    tx: &std::sync::mpsc::SyncSender<Chunk>,
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
        buf.resize(target, 0);
        let mut filled = start_len;
        while filled < buf.len() {
            let n = reader
                .read(&mut buf[filled..])
                .map_err(|e| Error::io(name, e))?;
            if n == 0 {
                eof = true;
                break;
            }
            filled += n;
        }
        buf.truncate(filled);
        let mut read = (filled - start_len) as u64;
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
                let decoded = decode_all(&text, batch.to_vec(), decode, tally);
                let chunk = Chunk {
                    text: Arc::clone(&text),
                    read: std::mem::take(&mut read),
                    decoded,
                };
                if tx.send(chunk).is_err() {
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
        let decoded = decode_all(&buf, lines, decode, tally);
        let chunk = Chunk {
            text: Arc::new(std::mem::replace(&mut buf, next)),
            read,
            decoded,
        };
        if tx.send(chunk).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Where `part` (a slice of `whole`) sits in `whole`.
fn span_in(whole: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}

/// Reads records from `reader` (JSON Lines, or one JSON array) and hands each, decoded by
/// `decode`, to `accept` in input order. One thread reads and decodes (in parallel, chunk by
/// chunk) while this one appends the previous chunk, so neither waits for the other.
pub fn read_records(
    name: &str,
    reader: impl Read + Send,
    decode: &Decode<'_>,
    accept: &mut Accept<'_, '_>,
    progress: &dyn Fn(u64),
) -> Result<()> {
    let tally = accept.extra_fields.is_some();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(1);
    let (give_back, spare) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || produce(name, reader, decode, tally, &tx, &spare));
        let accepted = (|| {
            for chunk in &rx {
                accept.counts.bytes += chunk.read;
                progress(chunk.read);
                accept.take_decoded(name, &chunk.text, chunk.decoded)?;
                if let Ok(buf) = Arc::try_unwrap(chunk.text) {
                    // The reader may be gone already; then the buffer is just freed.
                    let _ = give_back.send(buf);
                }
            }
            Ok(())
        })();
        // Stop the reader if this side failed, then hear from it.
        drop(rx);
        let read = producer
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the reading thread panicked".into())));
        accepted.and(read)
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

/// Every row of JSON Lines `text` (named `name` in errors), in order, in row-schema batches: a
/// bad line is an error naming it.
///
/// # Errors
/// A line that is not a row.
pub fn jsonl_batches(name: &str, text: &[u8]) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    read_jsonl(
        name,
        text,
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
}
