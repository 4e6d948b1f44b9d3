//! A batch of rows into JSON lines, in parallel and in order: OpenAI rows straight from their
//! columns ([`Wire`]) where they can be, every other row the general way (the row as a JSON
//! object, converted by [`training_rows`]), with each row's facts for the report.

use std::sync::OnceLock;

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;
use serde_json::{Map, Value};

use super::datasets::for_parquet;
use super::{
    Format, Groups, Options, RowFacts, Side, Wire, WireCache, split_openai, training_rows,
};
use crate::error::{Error, Result};
use crate::pipeline::io;
use crate::pipeline::row::{BatchView, Text, encode};

/// Rows converted together (their lines in one buffer).
const CHUNK_ROWS: usize = 256;

/// What the report needs of a row besides its facts.
#[derive(Debug, Clone, Default)]
pub struct RowMeta {
    /// Training rows written.
    pub written: u64,
    /// The side facts (system prompt, tools, group, reward, provenance).
    pub side: Side,
    /// Its rollout id, when it failed a gate (for the report's first failure or warning).
    pub where_: String,
}

/// A chunk of converted rows: their lines, their metadata lines (OpenAI), each row's facts.
#[derive(Debug, Default)]
pub struct Chunk {
    /// The training rows' lines.
    pub lines: Vec<u8>,
    /// The metadata lines beside them (OpenAI rows), line for line.
    pub meta: Vec<u8>,
    /// Each input row's facts.
    pub rows: Vec<(RowFacts, RowMeta)>,
    /// Rows converted the general way (the row as a JSON object).
    pub object_path: u64,
}

/// Whether rows are read as text views: OpenAI rows are written straight from them; the other
/// formats, unrolled rows and a datasets folder take the general way for every row, so they read
/// plain strings.
pub fn reads_views(opts: &Options) -> bool {
    Wire::serves(opts) && !opts.datasets
}

/// Converts a batch (read as text views when [`reads_views`] says so): its chunks, in order.
pub fn convert_batch(batch: &RecordBatch, opts: &Options, groups: &Groups) -> Result<Vec<Chunk>> {
    let views = reads_views(opts);
    let wire = Wire::of(batch)?;
    let rollout = batch
        .column_by_name(crate::schema::col::ROLLOUT_ID)
        .and_then(|a| Text::of(a.as_ref()));
    let n = batch.num_rows();
    // The general path reads plain text: a batch of views (whose rows take it rarely) is copied
    // out once, when a row first needs it.
    let plain = if views {
        None
    } else {
        Some(BatchView::new(batch)?)
    };
    let copied: OnceLock<Result<RecordBatch>> = OnceLock::new();
    let general = General {
        batch,
        plain: plain.as_ref(),
        copied: &copied,
        opts,
        groups,
    };
    (0..n.div_ceil(CHUNK_ROWS))
        .into_par_iter()
        .map(|c| {
            let mut chunk = Chunk {
                lines: Vec::with_capacity(CHUNK_ROWS * 2048),
                meta: Vec::with_capacity(if views { CHUNK_ROWS * 1024 } else { 0 }),
                rows: Vec::new(),
                object_path: 0,
            };
            let mut cache = WireCache::default();
            chunk.rows = (c * CHUNK_ROWS..((c + 1) * CHUNK_ROWS).min(n))
                .map(|i| {
                    let fast = if views {
                        wire.write_row(
                            i,
                            opts,
                            groups,
                            &mut cache,
                            &mut chunk.lines,
                            &mut chunk.meta,
                        )
                        .map_err(|e| row_named(e, rollout.and_then(|r| r.get(i))))?
                    } else {
                        None
                    };
                    let (facts, written, side) = if let Some((facts, side)) = fast {
                        (facts, 1, side)
                    } else {
                        chunk.object_path += 1;
                        general.row(i, &mut chunk.lines, &mut chunk.meta)?
                    };
                    // Which row: only for the report's first failure or warning.
                    let where_ = if facts.invalid_calls > 0
                        || facts.leak.is_some()
                        || facts.trailing_cut > 0
                        || facts.no_completion
                    {
                        rollout.and_then(|r| r.get(i)).unwrap_or("?").to_owned()
                    } else {
                        String::new()
                    };
                    Ok((
                        facts,
                        RowMeta {
                            written,
                            side,
                            where_,
                        },
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(chunk)
        })
        .collect()
}

/// A JSON text column that holds no JSON, said of the row (as the general path's reader says it).
fn row_named(e: Error, rollout_id: Option<&str>) -> Error {
    match e {
        Error::Input { stage, message } if stage == crate::pipeline::row::NOT_JSON_STAGE => {
            Error::Input {
                stage,
                message: format!("row `{}`: {message}", rollout_id.unwrap_or("?")),
            }
        }
        other => other,
    }
}

/// The general path over one batch.
struct General<'a> {
    batch: &'a RecordBatch,
    /// The batch with plain strings, when it was read so.
    plain: Option<&'a BatchView<'a>>,
    /// The batch copied out to plain strings, once a row of a batch of views needs it.
    copied: &'a OnceLock<Result<RecordBatch>>,
    opts: &'a Options,
    groups: &'a Groups,
}

impl General<'_> {
    /// Row `i` as a JSON object, converted; its lines go to `bytes` (and `meta`).
    fn row(
        &self,
        i: usize,
        bytes: &mut Vec<u8>,
        meta: &mut Vec<u8>,
    ) -> Result<(RowFacts, u64, Side)> {
        let copied_view;
        let view = if let Some(view) = self.plain {
            view
        } else {
            let b = self
                .copied
                .get_or_init(|| io::conform(self.batch, "export"))
                .as_ref()
                .map_err(again)?;
            copied_view = BatchView::new(b)?;
            &copied_view
        };
        let row = encode(view, i)?;
        let (rows, facts) = training_rows(&row, self.opts, self.groups);
        let mut side = Side::default();
        for r in &rows {
            side.with_system |= r
                .get("messages")
                .or_else(|| r.get("prompt"))
                .and_then(Value::as_array)
                .and_then(|m| m.first())
                .is_some_and(|m| m["role"] == "system");
            side.with_tools |= r.get("tools").is_some();
            if let Some(g) = r.get("group_id").and_then(Value::as_str) {
                side.group = Some(g.to_owned());
            }
            self.write(r, bytes, meta)?;
        }
        row_side(&row, &mut side);
        Ok((facts, rows.len() as u64, side))
    }

    /// Writes a training row's line (and its metadata line).
    fn write(&self, r: &Map<String, Value>, bytes: &mut Vec<u8>, meta: &mut Vec<u8>) -> Result<()> {
        let failed = |e: serde_json::Error| Error::Internal(format!("writing a row: {e}"));
        if self.opts.datasets {
            serde_json::to_writer(&mut *bytes, &for_parquet(r)).map_err(failed)?;
        } else if self.opts.format == Format::Openai {
            let (line, row_meta) = split_openai(r);
            serde_json::to_writer(&mut *bytes, &line).map_err(failed)?;
            serde_json::to_writer(&mut *meta, &row_meta).map_err(failed)?;
            meta.push(b'\n');
        } else {
            serde_json::to_writer(&mut *bytes, r).map_err(failed)?;
        }
        bytes.push(b'\n');
        Ok(())
    }
}

/// The side facts a row gives of itself: its reward and provenance, whether it calls tools.
fn row_side(row: &Map<String, Value>, side: &mut Side) {
    side.reward = row.get("reward").and_then(Value::as_f64);
    side.eval_sourced = row
        .get("lineage")
        .and_then(|l| l.get("source"))
        .and_then(Value::as_str)
        == Some("eval");
    side.calls_tools = row
        .get("tools_used")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
        || row
            .get("steps")
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|x| x.get("tool").is_some()));
    side.has_policy_sha = row
        .get("lineage")
        .and_then(|l| l.get("system_prompt_sha"))
        .is_some();
}

/// An error a batch's rows share, given again to each row that meets it: an input's fault stays
/// one (its exit status), anything else is internal.
fn again(e: &Error) -> Error {
    match e {
        Error::Input { stage, message } => Error::Input {
            stage: stage.clone(),
            message: message.clone(),
        },
        Error::MissingColumn {
            stage,
            column,
            found,
        } => Error::MissingColumn {
            stage: stage.clone(),
            column: column.clone(),
            found: found.clone(),
        },
        other => Error::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::row::testing::{batch_of, fixture};

    #[test]
    fn a_shared_error_keeps_its_kind_for_every_row() {
        let input = Error::Input {
            stage: "export".into(),
            message: "column `prompt` cannot be read as Utf8".into(),
        };
        let again_input = again(&input);
        assert!(matches!(&again_input, Error::Input { stage, .. } if stage == "export"));
        assert_eq!(again_input.to_string(), input.to_string());
        let missing = Error::missing_column("export", "prompt", &crate::schema::row_schema());
        let again_missing = again(&missing);
        assert!(
            matches!(&again_missing, Error::MissingColumn { column, .. } if column == "prompt")
        );
        assert_eq!(again_missing.to_string(), missing.to_string());
        let io = Error::io("x.parquet", std::io::Error::other("gone"));
        assert!(matches!(again(&io), Error::Internal(ref m) if m == &io.to_string()));
    }

    #[test]
    fn a_batch_gives_one_fact_per_row_and_its_lines_in_order() {
        let name = crate::pipeline::row::testing::ROW_FIXTURES[0];
        let batch = batch_of(fixture(name));
        let mut groups = Groups::default();
        for i in 0..batch.num_rows() {
            groups.add(&format!("t{i}"), None);
        }
        for format in [Format::Openai, Format::Trl] {
            let opts = Options {
                format,
                ..Options::default()
            };
            let chunks = convert_batch(&batch, &opts, &groups).expect("converted");
            let rows: usize = chunks.iter().map(|c| c.rows.len()).sum();
            assert_eq!(rows, batch.num_rows(), "{format:?}");
            let written: u64 = chunks
                .iter()
                .flat_map(|c| &c.rows)
                .map(|r| r.1.written)
                .sum();
            let lines: usize = chunks
                .iter()
                .map(|c| memchr::memchr_iter(b'\n', &c.lines).count())
                .sum();
            assert_eq!(lines as u64, written, "{format:?}");
            let meta: usize = chunks
                .iter()
                .map(|c| memchr::memchr_iter(b'\n', &c.meta).count())
                .sum();
            assert_eq!(
                meta as u64,
                if format == Format::Openai { written } else { 0 }
            );
        }
    }
}
