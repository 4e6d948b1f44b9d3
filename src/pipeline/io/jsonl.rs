//! The JSONL sink: row batches rendered in the reference's row format.

use std::io::{BufWriter, Write};
use std::path::Path;

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;
use serde_json::Value;

use super::atomic::{AtomicFile, Writeback};
use super::sink::Sink;
use crate::error::{Error, Result};
use crate::pipeline::row::{self, BatchView};

/// Writes row batches as JSONL in the reference's row format.
pub struct JsonlSink {
    writer: BufWriter<Writeback>,
    out: AtomicFile,
}

impl JsonlSink {
    /// Starts a JSONL file at `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let out = AtomicFile::create(path)?;
        Ok(Self {
            writer: BufWriter::with_capacity(1 << 20, out.writer()?),
            out,
        })
    }
}

/// Renders every row of a batch as one JSON line each, in parallel, in order.
pub fn render_jsonl(batch: &RecordBatch) -> Result<Vec<String>> {
    let view = BatchView::new(batch)?;
    (0..batch.num_rows())
        .into_par_iter()
        .with_min_len(256)
        .map(|i| {
            let (obj, verbatim) = row::encode_keeping(&view, i)?;
            if !verbatim.is_empty() {
                // Numbers no 64-bit type holds, written as they were read.
                return Ok(row::wide::object_text(&obj, &verbatim));
            }
            serde_json::to_string(&Value::Object(obj))
                .map_err(|e| Error::Internal(format!("serialising a row: {e}")))
        })
        .collect()
}

impl Sink for JsonlSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let path = self.out.path().to_path_buf();
        for line in render_jsonl(batch)? {
            self.writer
                .write_all(line.as_bytes())
                .map_err(|e| Error::io(&path, e))?;
            self.writer
                .write_all(b"\n")
                .map_err(|e| Error::io(&path, e))?;
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<()> {
        let Self { writer, out } = *self;
        let path = out.path().to_path_buf();
        writer
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))?;
        out.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::row::testing::{batch_of, fixture};

    #[test]
    fn rows_render_in_order_and_the_file_appears_on_finish() {
        let rows = fixture("example_rows.jsonl");
        let batch = batch_of(rows.clone());
        let lines = render_jsonl(&batch).expect("rendered");
        assert_eq!(lines.len(), rows.len());
        let tasks = batch
            .column_by_name(crate::schema::col::TASK_ID)
            .expect("task_id");
        let tasks = datafusion::arrow::array::AsArray::as_string::<i32>(tasks.as_ref());
        for (i, line) in lines.iter().enumerate() {
            let back: Value = serde_json::from_str(line).expect("JSON");
            assert_eq!(back["task_id"], tasks.value(i), "row {i} in order");
        }
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("out.jsonl");
        let mut sink = Box::new(JsonlSink::create(&path).expect("sink"));
        sink.write(&batch).expect("written");
        assert!(!path.exists(), "nothing is in place before the finish");
        sink.finish().expect("finished");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, lines.join("\n") + "\n");
    }
}
