//! Export: rows into what trainers load.
//!
//! What it computes: each row becomes one training row (OpenAI chat messages with a system
//! prompt, `tools`, assistant `tool_calls` with ids and JSON-string arguments, tool turns with
//! `tool_call_id`, a loss mask) and carries its reward, reason and provenance; the TRL shape
//! decodes the arguments back to objects and, for a final-turn mask or unrolled turns, splits rows
//! into prompt and completion so the trainer trains what the mask says. Preference pairs become
//! DPO prompt/chosen/rejected rows ([`dpo`]).
//!
//! Inputs: the rows, batch by batch in file order ([`Inputs`]), and the group fields read over
//! all of them first ([`Groups`]). Outputs: JSON lines handed to the caller's sink (the line and,
//! for OpenAI rows, its metadata line), and a [`Report`]. Two gates are read before anything is
//! kept: every tool call's arguments must round-trip to the target encoding, and nothing exported
//! may quote the row's privileged context; the report lists what failed
//! ([`Report::gate_failures`]) and the caller decides whether to keep the lines.
//!
//! Parts: `arguments` (tool-call arguments decoded), `exported` (what the leak gate reads of a
//! training row), [`groups`] (group fields), [`rows`] (one row into training rows),
//! `columns` (the same, written straight from the columns), [`convert`] (a batch into lines),
//! [`tally`] and [`report`] (the counts, gates and warnings), [`datasets`] (a datasets folder's
//! schema and card), [`dpo`] (pairs).

use datafusion::arrow::array::RecordBatch;
use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};

pub use columns::{Side, Wire, WireCache};
pub use convert::{Chunk, RowMeta, convert_batch, reads_views};
pub use groups::{GROUP_KEYS, Groups, group_id};
pub use report::{Failure, Hint, Report, Warning};
pub use rows::{CARRY, RowFacts, split_openai, training_rows};
pub use tally::Tally;

mod arguments;
mod columns;
pub mod convert;
pub mod datasets;
pub mod dpo;
mod exported;
pub mod groups;
mod rebuilt;
pub mod report;
pub mod rows;
pub mod tally;
#[cfg(test)]
mod tests;
mod wire_cache;
mod wire_line;

/// The wire shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// OpenAI chat-completions rows with a loss mask.
    Openai,
    /// TRL conversational (or prompt/completion) rows.
    Trl,
}

/// What the loss covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MaskMode {
    /// Every assistant turn.
    Assistant,
    /// The last assistant turn only.
    Final,
}

/// Export settings.
#[derive(Debug, Clone)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent switches, each a flag of its own"
)]
pub struct Options {
    /// Prepended as a system message.
    pub system_prompt: Option<String>,
    /// OpenAI tool envelopes written on every row.
    pub tools: Option<Vec<Value>>,
    /// Remove `<think>...</think>` blocks from assistant turns.
    pub strip_think: bool,
    /// What the loss covers.
    pub mask_mode: MaskMode,
    /// One sample per assistant turn.
    pub unroll: bool,
    /// Cut tool outputs longer than this.
    pub max_tool_output_chars: Option<usize>,
    /// The wire shape.
    pub format: Format,
    /// The lines become a datasets folder (Parquet): free-form fields are written as JSON text
    /// so rows of every shape share one schema.
    pub datasets: bool,
    /// Keep the lines even when a gate fails (the failures become warnings).
    pub no_validate: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            system_prompt: None,
            tools: None,
            strip_think: true,
            mask_mode: MaskMode::Assistant,
            unroll: false,
            max_tool_output_chars: None,
            format: Format::Openai,
            datasets: false,
            no_validate: false,
        }
    }
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        if self.unroll && self.mask_mode == MaskMode::Final {
            return Err(Error::option(
                "unroll",
                "does not combine with a final `mask_mode`: unrolling already trains each assistant turn in a row of its own, and a final mask trains only the last turn of each whole conversation",
            ));
        }
        Ok(())
    }
}

/// Pushes every batch of rows, in order, to the function it is given.
pub type Rows = Box<dyn FnOnce(&mut dyn FnMut(RecordBatch) -> Result<()>) -> Result<()>>;

/// Takes each chunk's lines and, for OpenAI rows, their metadata lines, in order.
pub type Lines = Box<dyn FnMut(Vec<u8>, Vec<u8>) -> Result<()>>;

/// What the stage reads: the rows (pushed batch by batch) and the group fields over all of them,
/// and where their lines go.
pub struct Inputs {
    /// The group fields, read over every row before the first is converted.
    pub groups: Groups,
    /// The rows.
    pub rows: Rows,
    /// Where the lines go.
    pub lines: Lines,
}

/// The stage: rows into training rows, their lines to a sink, the gates and the counts.
pub struct ExportStage;

impl crate::stages::Stage for ExportStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "export";

    async fn run(
        _session: &crate::stages::Session,
        inputs: Inputs,
        options: &Options,
    ) -> Result<Report> {
        let Inputs {
            groups,
            rows,
            mut lines,
        } = inputs;
        let mut tally = Tally::default();
        let (mut read, mut object_path) = (0u64, 0u64);
        rows(&mut |batch| {
            read += batch.num_rows() as u64;
            for Chunk {
                lines: l,
                meta,
                rows,
                object_path: general,
            } in convert_batch(&batch, options, &groups)?
            {
                object_path += general;
                for (facts, row) in rows {
                    tally.add(&facts, row);
                }
                lines(l, meta)?;
            }
            Ok(())
        })?;
        tracing::info!(
            rows = read,
            object_path,
            "rows converted from the columns; rows converted as JSON objects (other formats, unrolled, a tool_trace for steps, an opener, an extra field over a column)"
        );
        Ok(Report::of(&tally, options))
    }
}
