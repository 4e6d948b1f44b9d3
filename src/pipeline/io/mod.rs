//! Reading and writing rows: the streaming JSONL decoder, Parquet and JSONL sinks, atomic
//! outputs and the rejects file.
//!
//! Memory stays bounded: JSONL is read in chunks of about [`CHUNK_BYTES`] of whole lines,
//! decoded and built into rows in parallel (rayon), given their identities in input order, and
//! cut into [`BATCH_ROWS`](crate::pipeline::row::BATCH_ROWS)-row batches a few at a time (one
//! per rayon thread, at most 4, fewer when the rows are long), emitted in input order; Parquet
//! is written in row groups of [`ROW_GROUP_ROWS`] rows. Every output is written to a temporary
//! file beside its destination and renamed into place only when complete.

mod accept;
mod atomic;
mod chunks;
mod conform;
mod identity;
mod jsonl;
mod parquet;
mod rejects;
mod sink;

pub use accept::{Accept, Decode, ReadCounts, decode_line, extra_keys, parse_json, split_array};
pub use atomic::{AtomicFile, Writeback, is_temporary, remove_stale};
pub use chunks::{jsonl_batches, read_jsonl, read_records};
pub use conform::{conform, conform_column, conform_to};
pub use identity::{Identity, MEMORY_ENTRIES};
pub use jsonl::{JsonlSink, render_jsonl};
pub use parquet::{FREE_TEXT, ParquetSink, UNPRUNED, column_fits, written_to};
pub use rejects::{OnBadRow, Reject, finish_with_rejects, write_rejects};
pub use sink::{Background, Sink};

/// The UTF-8 byte-order mark some editors (and Windows tools) write at the start of a text file.
pub const BOM: &[u8] = b"\xEF\xBB\xBF";

/// `text` without a leading UTF-8 byte-order mark: every JSON and JSONL reader reads a file
/// from the first byte after it.
pub fn strip_bom(text: &[u8]) -> &[u8] {
    text.strip_prefix(BOM).unwrap_or(text)
}

/// Bytes of JSONL decoded per parallel chunk.
pub const CHUNK_BYTES: usize = 4 << 20;
/// Rows per Parquet row group: small enough to bound the writer's memory, large enough to scan fast.
pub const ROW_GROUP_ROWS: usize = 65_536;
