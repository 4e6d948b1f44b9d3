//! Query results in the format asked for.
//!
//! The terminal table truncates long cells (a `messages` value can be megabytes) to
//! [`MAX_CELL`] characters; every other format writes values whole. CSV has no nested types, so
//! list, struct and map columns are written as their display text.

use std::io::Write;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::arrow::util::pretty::pretty_format_batches;

use crate::error::{Error, Result};

/// Longest cell shown in a terminal table, in characters.
pub const MAX_CELL: usize = 60;

/// An output format for query results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// An aligned table for a terminal.
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON array of objects.
    Json,
    /// One JSON object per line.
    Jsonl,
    /// Apache Parquet (needs `--out`).
    Parquet,
}

fn nested(dt: &DataType) -> bool {
    dt.is_nested() || matches!(dt, DataType::Map(..))
}

/// Rewrites columns of `keep(type) == false` as display text, optionally cut to `limit` chars.
fn as_text(batch: &RecordBatch, all: bool, limit: Option<usize>) -> Result<RecordBatch> {
    let opts = FormatOptions::default().with_null("");
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        if !(all || nested(field.data_type())) {
            fields.push(Arc::clone(field));
            columns.push(Arc::clone(column));
            continue;
        }
        let fmt = ArrayFormatter::try_new(column.as_ref(), &opts)?;
        let values: StringArray = (0..column.len())
            .map(|i| {
                if column.is_null(i) {
                    return None;
                }
                let mut s = fmt.value(i).to_string();
                if let Some(limit) = limit
                    && s.chars().count() > limit
                {
                    s = s.chars().take(limit.saturating_sub(1)).collect::<String>() + "…";
                }
                Some(s)
            })
            .collect();
        fields.push(Arc::new(Field::new(field.name(), DataType::Utf8, true)));
        columns.push(Arc::new(values));
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// Writes `batches` (of `schema`) to `out` as `format`. Parquet is written by the caller.
pub fn write(
    format: Format,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    out: &mut dyn Write,
) -> Result<()> {
    let io = |e: std::io::Error| Error::io("<output>", e);
    match format {
        Format::Table => {
            let shown: Vec<RecordBatch> = batches
                .iter()
                .map(|b| as_text(b, true, Some(MAX_CELL)))
                .collect::<Result<_>>()?;
            let text = if shown.is_empty() {
                let empty = RecordBatch::new_empty(Arc::clone(schema));
                pretty_format_batches(&[as_text(&empty, true, None)?])?
            } else {
                pretty_format_batches(&shown)?
            };
            let n: usize = batches.iter().map(RecordBatch::num_rows).sum();
            writeln!(out, "{text}").map_err(io)?;
            writeln!(out, "{n} row{}", if n == 1 { "" } else { "s" }).map_err(io)?;
        }
        Format::Csv => {
            let mut w = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(out);
            for b in batches {
                w.write(&as_text(b, false, None)?)?;
            }
            if batches.is_empty() {
                w.write(&as_text(
                    &RecordBatch::new_empty(Arc::clone(schema)),
                    false,
                    None,
                )?)?;
            }
        }
        Format::Json => {
            let mut w = datafusion::arrow::json::ArrayWriter::new(out);
            let refs: Vec<&RecordBatch> = batches.iter().collect();
            w.write_batches(&refs)?;
            w.finish()?;
        }
        Format::Jsonl => {
            let mut w = datafusion::arrow::json::LineDelimitedWriter::new(out);
            let refs: Vec<&RecordBatch> = batches.iter().collect();
            w.write_batches(&refs)?;
            w.finish()?;
        }
        Format::Parquet => {
            return Err(Error::Usage("`--format parquet` needs `--out FILE`".into()));
        }
    }
    Ok(())
}
