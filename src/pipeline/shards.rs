//! JSON lines into a folder of Parquet shards (`data/train-0000i-of-0000N.parquet`, at most
//! [`SHARD_BYTES`] of lines each), every shard written whole or not at all.

use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::json::ReaderBuilder;
use datafusion::arrow::json::reader::infer_json_schema;

use super::io::{self, AtomicFile};
use crate::error::{Error, Result};

/// Largest shard, in bytes of lines.
pub const SHARD_BYTES: u64 = 500 * 1024 * 1024;

/// Writes the lines of `jsonl` as shards under `folder/data`, with the schema `schema` makes of
/// the one inferred from the lines; returns it and the shards' names (`data/...`).
///
/// # Errors
/// The lines share no schema (an input error of `stage`), or a shard could not be written.
pub fn write_shards(
    jsonl: &Path,
    folder: &Path,
    stage: &str,
    schema: impl FnOnce(&Schema) -> Schema,
) -> Result<(SchemaRef, Vec<String>)> {
    let open = || std::fs::File::open(jsonl).map_err(|e| Error::io(jsonl, e));
    let (inferred, _) =
        infer_json_schema(std::io::BufReader::new(open()?), None).map_err(|e| Error::Input {
            stage: stage.into(),
            message: format!("the rows do not share one Parquet schema: {e}"),
        })?;
    let schema = Arc::new(schema(&inferred));
    // Shard boundaries by input bytes.
    let total = std::fs::metadata(jsonl)
        .map_err(|e| Error::io(jsonl, e))?
        .len();
    let n_shards = total.div_ceil(SHARD_BYTES).max(1);
    let per_shard = total.div_ceil(n_shards);
    let data = folder.join("data");
    std::fs::create_dir_all(&data).map_err(|e| Error::io(&data, e))?;
    let mut names = Vec::new();
    let mut reader = std::io::BufReader::new(open()?);
    let mut line = Vec::new();
    for s in 0..n_shards {
        let name = format!("train-{s:05}-of-{n_shards:05}.parquet");
        let path = data.join(&name);
        let mut chunk = Vec::new();
        while (chunk.len() as u64) < per_shard {
            line.clear();
            if reader
                .read_until(b'\n', &mut line)
                .map_err(|e| Error::io(jsonl, e))?
                == 0
            {
                break;
            }
            chunk.extend_from_slice(&line);
        }
        write_shard(&path, &schema, chunk)?;
        names.push(format!("data/{name}"));
    }
    Ok((schema, names))
}

/// One shard of `lines`, at `path`.
fn write_shard(path: &Path, schema: &SchemaRef, lines: Vec<u8>) -> Result<()> {
    let file = AtomicFile::create(path)?;
    let on_disk = |e: parquet::errors::ParquetError| io::written_to(path, e.into());
    let mut writer = parquet::arrow::ArrowWriter::try_new(file.writer()?, Arc::clone(schema), None)
        .map_err(on_disk)?;
    let decoder = ReaderBuilder::new(Arc::clone(schema))
        .with_batch_size(4096)
        .build(std::io::Cursor::new(lines))?;
    for batch in decoder {
        writer.write(&batch?).map_err(on_disk)?;
    }
    writer.close().map_err(on_disk)?;
    file.commit()
}

/// Writes `text` to `path`, whole or not at all.
pub fn write_text(path: &Path, text: &str) -> Result<()> {
    let f = AtomicFile::create(path)?;
    f.handle()?
        .write_all(text.as_bytes())
        .map_err(|e| Error::io(path, e))?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_one_shard_with_the_schema_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = dir.path().join("rows.jsonl");
        std::fs::write(&jsonl, "{\"a\":1,\"b\":\"x\"}\n{\"a\":2,\"b\":null}\n").unwrap();
        let (schema, names) = write_shards(&jsonl, dir.path(), "test", |s| {
            Schema::new(
                s.fields()
                    .iter()
                    .rev()
                    .map(|f| f.as_ref().clone())
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap();
        assert_eq!(names, ["data/train-00000-of-00001.parquet"]);
        assert_eq!(schema.field(0).name(), "b");
        let file = std::fs::File::open(dir.path().join(&names[0])).unwrap();
        let rows: usize =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                .unwrap()
                .build()
                .unwrap()
                .map(|b| b.unwrap().num_rows())
                .sum();
        assert_eq!(rows, 2);
        write_text(&dir.path().join("README.md"), "card").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("README.md")).unwrap(),
            "card"
        );
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{\"a\":1}\n{\"a\":\"x\"}\n[").unwrap();
        assert!(write_shards(&bad, dir.path(), "test", Clone::clone).is_err());
    }
}
