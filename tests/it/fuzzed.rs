//! What the fuzz targets (`fuzz/`, CONTRIBUTING.md) found, each as a test of the binary: bad
//! input is exit 65 naming the file, never a panic and never "a bug" (70).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};

use crate::support::{fixture, succeeded, wai};

/// Runs `wai ARGS[0] input ARGS[1..]` in `dir` and holds it to exit 65 with a message naming
/// `input` that holds every one of `says`; returns the message.
fn refused(dir: &Path, input: &Path, args: &[&str], says: &[&str]) -> String {
    let out = wai()
        .current_dir(dir)
        .arg(args[0])
        .arg(input)
        .args(&args[1..])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(65), "{args:?}: {err}");
    let name = input.file_name().unwrap().to_string_lossy();
    assert!(err.contains(&*name), "{args:?} names the file: {err}");
    for s in says {
        assert!(err.contains(s), "{args:?} says {s}: {err}");
    }
    assert!(!err.contains("panicked") && !err.contains("a bug"), "{err}");
    err
}

/// The grade tests' transcripts as a Parquet file written by wai, in `dir`.
fn transcripts_parquet(dir: &Path) -> PathBuf {
    let path = dir.join("rows.parquet");
    succeeded(
        wai()
            .arg("convert")
            .arg(fixture("grade_transcripts.jsonl"))
            .arg("--out")
            .arg(&path),
    );
    path
}

/// `path`'s batches with the text column `column` replaced by `value` in every row, written to
/// `out` (as another writer than wai could write them).
fn with_text(path: &Path, column: &str, value: &str, out: &Path) {
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    let schema = batches[0].schema();
    let at = schema.index_of(column).unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(out).unwrap(), schema, None)
            .unwrap();
    for batch in batches {
        let mut columns = batch.columns().to_vec();
        columns[at] = Arc::new(StringArray::from(vec![value; batch.num_rows()])) as ArrayRef;
        w.write(&RecordBatch::try_new(batch.schema(), columns).unwrap())
            .unwrap();
    }
    w.close().unwrap();
}

/// A Parquet row file whose JSON text columns hold text that is not JSON (found by the
/// `parquet_inputs` target: a flipped byte in a page of `steps.arguments`) was "a bug in wai"
/// (exit 70, "a JSON text column holds invalid JSON", no file named). It is the file's fault:
/// exit 65 naming the file, the column and the row.
#[test]
fn json_text_columns_that_hold_no_json_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let rows = transcripts_parquet(dir.path());
    for (column, says) in [
        (
            "privileged",
            "the `privileged` column holds text that is not JSON",
        ),
        ("extra", "the `extra` column holds text that is not JSON"),
    ] {
        let bad = dir.path().join(format!("bad_{column}.parquet"));
        with_text(&rows, column, "{not json", &bad);
        for args in [
            &["convert", "--out", "x.jsonl"][..],
            &["export", "--no-validate", "--out", "x.jsonl"],
        ] {
            refused(dir.path(), &bad, args, &[says, "row `"]);
        }
    }
}

/// Four of the Parquet files of `docs/upstream/arrow-rs-parquet-panics.md`, each of which makes
/// the parquet crate panic (a footer length past the start of the file; a dictionary page of
/// bit width 33; a map whose children decode to unequal lengths; a footer whose `ARROW:schema`
/// holds a field without a type, which the arrow-ipc crate panics on): the row readers stop with
/// exit 65 naming the file and what the decoder said, never exit 101, and print no panic; the
/// last file through DataFusion's schema inference as well.
#[test]
fn files_that_panic_the_parquet_crate_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    for (name, says) in [
        (
            "footer_length_past_start.parquet",
            "its footer claims 386 bytes of a 390-byte file",
        ),
        (
            "dictionary_bit_width_33.parquet",
            "assertion failed: num_bits <= size_of::<T>() * 8",
        ),
        (
            "map_children_unequal.parquet",
            "Not all children array length are the same!",
        ),
        (
            "arrow_schema_field_without_type.parquet",
            "not implemented: Type NONE not supported",
        ),
    ] {
        let file = dir.path().join(name);
        std::fs::copy(fixture(&format!("parquet-panics/{name}")), &file).unwrap();
        for args in [
            &["convert", "--out", "x.jsonl"][..],
            &["select", "--out", "x.parquet"],
        ] {
            refused(
                dir.path(),
                &file,
                args,
                &["not a readable Parquet file", says],
            );
        }
    }
    // The footer's Arrow schema is read by DataFusion's schema inference too (`pass-at`, `sql`).
    let file = dir.path().join("arrow_schema_field_without_type.parquet");
    refused(
        dir.path(),
        &file,
        &["pass-at"],
        &[
            "a Parquet footer is not readable",
            "its decoder failed: not implemented: Type NONE not supported",
        ],
    );
    sql_refused(
        dir.path(),
        &file,
        "SELECT count(*) FROM rows",
        "Type NONE not supported",
    );
}

/// Runs `wai sql QUERY --table rows=input` in `dir` and holds it to exit 65 with a message
/// naming `input` that says `says`, and no panic.
fn sql_refused(dir: &Path, input: &Path, query: &str, says: &str) {
    let out = wai()
        .current_dir(dir)
        .args(["sql", query, "--table"])
        .arg(format!("rows={}", input.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{err}");
    let name = input.file_name().unwrap().to_string_lossy();
    assert!(
        err.contains(&*name) && err.contains(says) && !err.contains("panicked"),
        "{err}"
    );
}

/// Found by the `parquet_inputs` fuzz target on its first CI run: a corrupt page makes the bytes
/// crate panic ("range end out of bounds") inside a read task DataFusion spawned, where no
/// reading of wai's can catch it; the query then failed with "task panicked", and the commands
/// that query their input exited 70 ("a bug in wai"). They now stop with exit 65, naming the file
/// and what the decoder said.
#[test]
fn a_decoder_panic_inside_a_query_task_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bytes_slice_in_datafusion_task.parquet");
    std::fs::copy(
        fixture("parquet-panics/bytes_slice_in_datafusion_task.parquet"),
        &file,
    )
    .unwrap();
    refused(
        dir.path(),
        &file,
        &["pass-at"],
        &[
            "not readable",
            "its decoder failed",
            "range end out of bounds",
        ],
    );
    // Read by `wai sql`, the same panic is raised on the thread that polls the query, not in a
    // task: it exited 101 with nothing said.
    sql_refused(
        dir.path(),
        &file,
        "SELECT * FROM rows",
        "its decoder failed: range end out of bounds",
    );
}

/// Found by the `jsonl_rows` fuzz target: a JSON array after a byte-order mark made the reader's
/// byte count subtract past zero (a panic in a debug build, a wrong count in release).
#[test]
fn a_json_array_after_a_byte_order_mark_reads() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bom_array.json");
    std::fs::write(
        &input,
        b"\xef\xbb\xbf[{\"task_id\": \"t\", \"prompt\": \"a\", \"final_text\": \"b\"}]\n",
    )
    .unwrap();
    let out = crate::support::wai()
        .args(["--json", "convert"])
        .arg(&input)
        .arg("-o")
        .arg(dir.path().join("out.parquet"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = crate::support::envelope(&out.stdout);
    assert_eq!(doc["outputs"][0]["rows"], 1, "{doc}");
}
