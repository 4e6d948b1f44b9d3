//! Tests of the readers: widening, large types, leaves under any list naming, and parallel
//! reads that keep row order.
#![allow(
    clippy::cast_possible_wrap,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "row numbers in these tests are far below 2^31"
)]

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, ListArray, StringArray, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Int64Type, Schema};

use super::local::*;
use super::picks::*;
use super::plan::*;
use super::reader::*;
use super::widen::*;
use crate::error::Error;
use crate::pipeline::io::{self, OnBadRow};
use crate::pipeline::io::{ParquetSink, ROW_GROUP_ROWS, Sink};
use crate::pipeline::row::BATCH_ROWS;
use datafusion::arrow::array::{ArrayRef, RecordBatch, new_null_array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::FieldRef;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};

/// The kept null arrays a widening slices are what a fresh one would be, at every length
/// (shorter, as long, longer than what is kept, and past the bound), for every column type
/// of the row schema.
#[test]
fn kept_nulls_equal_fresh_ones() {
    let schema = row_schema_with_views();
    for n in [
        0,
        3,
        BATCH_ROWS,
        BATCH_ROWS + 1,
        5 * BATCH_ROWS,
        (1 << 20) + 1,
        7,
    ] {
        for f in schema.fields() {
            let kept = nulls(f.data_type(), n);
            let fresh = new_null_array(f.data_type(), n);
            assert_eq!(kept.data_type(), f.data_type(), "{}", f.name());
            assert_eq!(kept.len(), n, "{}", f.name());
            assert_eq!(kept.null_count(), n, "{} at {n}", f.name());
            assert_eq!(kept.to_data(), fresh.to_data(), "{} at {n}", f.name());
        }
    }
}

/// A file written with large text and large lists (as Polars writes them) is read as the
/// row schema three ways: whole, whole with text views, and some leaves with text views;
/// the views say what the plain strings say.
#[test]
fn large_types_read_as_the_row_schema_with_views_or_not() {
    use crate::pipeline::row::testing::{ROW_FIXTURES, batch_of, fixture};
    use crate::pipeline::source::{Format, Input, Location};
    use datafusion::arrow::compute::concat_batches;
    fn large(t: &DataType) -> DataType {
        let field =
            |f: &FieldRef| Arc::new(f.as_ref().clone().with_data_type(large(f.data_type())));
        match t {
            DataType::Utf8 => DataType::LargeUtf8,
            DataType::List(f) => DataType::LargeList(field(f)),
            DataType::Struct(fs) => DataType::Struct(fs.iter().map(field).collect()),
            other => other.clone(),
        }
    }
    let batch = batch_of(ROW_FIXTURES.iter().flat_map(|f| fixture(f)));
    let schema = Arc::new(Schema::new(
        batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_data_type(large(f.data_type())))
            .collect::<Vec<_>>(),
    ));
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| cast(c, f.data_type()).expect("cast"))
        .collect();
    let wide = RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch");
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("large.parquet");
    let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).expect("file"),
        schema,
        None,
    )
    .expect("writer");
    w.write(&wide).expect("written");
    w.close().expect("closed");
    let input = Input {
        display: "large".into(),
        location: Location::Local(path),
        format: Format::Parquet,
        size: None,
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut reader = Reader::new(runtime.handle().clone(), OnBadRow::Fail, Box::new(|_| {}));
    let plain_of = |b: &RecordBatch| io::conform(b, "large").expect("plain");
    let mut whole = Vec::new();
    reader
        .read(&input, &mut |b| {
            whole.push(b);
            Ok(())
        })
        .expect("whole");
    let whole = concat_batches(&crate::schema::row_schema(), &whole).expect("concat");
    assert_eq!(whole, batch);
    let mut views = Vec::new();
    reader
        .read_views(&input, &mut |b| {
            assert_eq!(b.schema(), row_schema_with_views());
            views.push(plain_of(&b));
            Ok(())
        })
        .expect("views");
    let views = concat_batches(&crate::schema::row_schema(), &views).expect("concat");
    assert_eq!(views, batch);
    let mut leaves = Vec::new();
    // The row ids are required: a projection leaves out only what can be null.
    let picked = ["task_id", "rollout_id", "prompt", "messages.content"];
    reader
        .read_leaves(&input, &picked, &mut |b| {
            assert_eq!(b.schema(), row_schema_with_views());
            leaves.push(plain_of(&b));
            Ok(())
        })
        .expect("leaves");
    let leaves = concat_batches(&crate::schema::row_schema(), &leaves).expect("concat");
    assert_eq!(
        leaves.column_by_name("prompt"),
        batch.column_by_name("prompt")
    );
    let content = |b: &RecordBatch| {
        let m = b
            .column_by_name("messages")
            .expect("messages")
            .as_list::<i32>();
        let c = m
            .values()
            .as_struct()
            .column_by_name("content")
            .expect("content");
        Arc::clone(c)
    };
    assert_eq!(&content(&leaves), &content(&batch));
    assert_eq!(
        leaves
            .column_by_name("final_text")
            .expect("column")
            .null_count(),
        batch.num_rows()
    );
}

/// Rows `from..to`: a number and a list of one or two `{text}` structs saying it.
fn rows(schema: &Arc<Schema>, from: i64, to: i64) -> RecordBatch {
    let fields = Fields::from(vec![Field::new("text", DataType::Utf8, true)]);
    let mut texts = Vec::new();
    let mut offsets = vec![0i32];
    for n in from..to {
        texts.push(Some(format!("row {n}")));
        if n % 2 == 0 {
            texts.push(None);
        }
        offsets.push(i32::try_from(texts.len()).expect("small"));
    }
    let items = StructArray::new(
        fields.clone(),
        vec![Arc::new(StringArray::from(texts))],
        None,
    );
    let list = ListArray::new(
        Arc::new(Field::new_struct("item", fields, true)),
        datafusion::arrow::buffer::OffsetBuffer::new(offsets.into()),
        Arc::new(items),
        None,
    );
    RecordBatch::try_new(
        Arc::clone(schema),
        vec![
            Arc::new(Int64Array::from_iter_values(from..to)),
            Arc::new(list),
        ],
    )
    .expect("batch")
}

#[test]
fn leaves_are_found_whatever_the_writer_named_its_lists() {
    use datafusion::parquet::arrow::ArrowSchemaConverter;
    let calls = Field::new_struct(
        "element",
        vec![
            Field::new("id", DataType::Utf8, true),
            Field::new("name", DataType::LargeUtf8, true),
        ],
        true,
    );
    let turn = Field::new_struct(
        "element",
        vec![
            Field::new("role", DataType::Utf8, true),
            Field::new("tool_calls", DataType::LargeList(Arc::new(calls)), true),
            Field::new("content", DataType::Utf8, true),
        ],
        true,
    );
    let schema = Schema::new(vec![
        Field::new("task_id", DataType::Utf8, false),
        Field::new("messages", DataType::List(Arc::new(turn)), true),
        Field::new("final_text", DataType::Utf8, true),
    ]);
    let parquet = ArrowSchemaConverter::new()
        .convert(&schema)
        .expect("schema");
    // Leaves: task_id, role, tool_calls.id, tool_calls.name, content, final_text.
    assert_eq!(parquet.num_columns(), 6);
    assert!(parquet.column(4).path().string().contains("element"));
    let mask = projection(
        &parquet,
        &schema,
        &["task_id", "messages.content", "messages.tool_calls.name"],
    )
    .expect("a projection");
    let picked: Vec<usize> = (0..6).filter(|&i| mask.leaf_included(i)).collect();
    assert_eq!(picked, vec![0, 3, 4]);
    // A field that cannot hold nulls is never left out (the file is then read whole): a
    // top-level one, or a struct's child when the struct is read in part.
    assert!(projection(&parquet, &schema, &["messages.content"]).is_none());
    let strict = Schema::new(vec![
        Field::new("task_id", DataType::Utf8, false),
        Field::new(
            "messages",
            DataType::List(Arc::new(Field::new_struct(
                "item",
                vec![
                    Field::new("role", DataType::Utf8, false),
                    Field::new("content", DataType::Utf8, true),
                ],
                true,
            ))),
            true,
        ),
    ]);
    let parquet_strict = ArrowSchemaConverter::new()
        .convert(&strict)
        .expect("schema");
    assert!(projection(&parquet_strict, &strict, &["task_id", "messages.content"]).is_none());
    assert!(projection(&parquet_strict, &strict, &["task_id", "messages.role"]).is_some());
    assert!(projection(&parquet_strict, &strict, &["task_id"]).is_some());
    // Every leaf select's first reading asks for is in a row file, so it is projected.
    let rows = crate::schema::row_schema();
    let parquet = ArrowSchemaConverter::new().convert(&rows).expect("schema");
    let mask = projection(&parquet, &rows, &crate::stages::select::LEAVES).expect("lined up");
    let picked = (0..parquet.num_columns())
        .filter(|&i| mask.leaf_included(i))
        .count();
    assert_eq!(picked, crate::stages::select::LEAVES.len());
}

#[test]
fn widening_fills_the_left_out_fields_of_lists_of_structs() {
    use datafusion::arrow::array::LargeListArray;
    let text = Field::new("text", DataType::Utf8, true);
    let score = Field::new("score", DataType::Int64, true);
    let read = StructArray::new(
        Fields::from(vec![text.clone()]),
        vec![Arc::new(StringArray::from(vec!["a", "b", "c"]))],
        None,
    );
    let offsets = datafusion::arrow::buffer::OffsetBuffer::<i64>::from_lengths([2, 0, 1]);
    let item = |fields: Vec<Field>| Arc::new(Field::new_struct("item", fields, true));
    let projected: ArrayRef = Arc::new(LargeListArray::new(
        item(vec![text.clone()]),
        offsets,
        Arc::new(read),
        None,
    ));
    let full = DataType::LargeList(item(vec![text, score]));
    let wide = widen_array(&projected, &full).expect("widened");
    assert_eq!(wide.data_type(), &full);
    let items = wide.as_list::<i64>().values().as_struct();
    assert_eq!(items.column(0).as_string::<i32>().value(2), "c");
    assert_eq!(items.column(1).null_count(), 3);
    assert_eq!(wide.as_list::<i64>().value_length(0), 2);
}

/// Rows `n` with `items`, a list of structs of text.
fn numbered_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new(
            "items",
            DataType::List(Arc::new(Field::new_struct(
                "item",
                vec![Field::new("text", DataType::Utf8, true)],
                true,
            ))),
            true,
        ),
    ]))
}

/// Writes `n.parquet` in `dir`: three row groups of rows `n` (with `items`, a list of structs of
/// text), in batches that straddle row groups. Returns its path, schema and row count.
fn written_rows(dir: &std::path::Path) -> (std::path::PathBuf, Arc<Schema>, i64) {
    let path = dir.join("n.parquet");
    let schema = numbered_schema();
    let total = ROW_GROUP_ROWS as i64 * 2 + 12_345;
    let mut sink = Box::new(ParquetSink::create(&path, Arc::clone(&schema)).expect("sink"));
    // Batches that straddle row groups.
    let mut at = 0;
    while at < total {
        let to = (at + 10_007).min(total);
        sink.write(&rows(&schema, at, to)).expect("written");
        at = to;
    }
    sink.finish().expect("finished");
    (path, schema, total)
}

#[test]
fn parallel_parquet_writes_and_reads_keep_row_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, schema, total) = written_rows(dir.path());
    let meta = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).expect("file"))
        .expect("footer");
    assert_eq!(meta.metadata().num_row_groups(), 3);
    assert_eq!(meta.schema().as_ref(), schema.as_ref());
    let mut next = 0i64;
    read_local_parquet_rows(&path, "n", Plan::default(), &mut |b| {
        let n = b.column(0).as_primitive::<Int64Type>();
        let items = b.column(1).as_list::<i32>();
        for i in 0..b.num_rows() {
            assert_eq!(n.value(i), next, "rows out of order");
            let item = items.value(i);
            let text = item.as_struct().column(0).as_string::<i32>();
            assert_eq!(text.value(0), format!("row {next}"));
            assert_eq!(text.len(), if next % 2 == 0 { 2 } else { 1 });
            next += 1;
        }
        Ok(())
    })
    .expect("read");
    assert_eq!(next, total);
    // Groups decoded and consumed in parallel: each batch says where it is in its group.
    let seen = std::sync::Mutex::new(Vec::new());
    let footer = || {
        ArrowReaderMetadata::load(
            &std::fs::File::open(&path).expect("file"),
            ArrowReaderOptions::default(),
        )
        .expect("footer")
    };
    let read = par_local_parquet_batches(&path, footer(), Plan::default(), &|group, at, b| {
        let n = b.column(0).as_primitive::<Int64Type>();
        let first = group as i64 * ROW_GROUP_ROWS as i64 + at as i64;
        for i in 0..b.num_rows() {
            assert_eq!(n.value(i), first + i as i64, "group {group} at {at}");
        }
        seen.lock().expect("lock").push((first, b.num_rows()));
        Ok(())
    })
    .expect("read");
    assert_eq!(read, total as u64);
    let mut seen = seen.into_inner().expect("lock");
    seen.sort_unstable();
    let mut covered = 0i64;
    for (first, n) in seen {
        assert_eq!(first, covered, "a gap or an overlap");
        covered += n as i64;
    }
    assert_eq!(covered, total);
    // A consumer's error ends the reading with it.
    let failed = par_local_parquet_batches(&path, footer(), Plan::default(), &|_, _, _| {
        Err(Error::Internal("enough".into()))
    });
    assert!(matches!(failed, Err(Error::Internal(m)) if m == "enough"));
}

#[test]
fn columns_in_another_order_are_written_by_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let schema = numbered_schema();
    // Columns in another order are written by name.
    let swapped = dir.path().join("swapped.parquet");
    let mut sink = Box::new(ParquetSink::create(&swapped, Arc::clone(&schema)).expect("sink"));
    let b = rows(&schema, 0, 10);
    let reordered = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            schema.field(1).clone(),
            schema.field(0).clone(),
        ])),
        vec![Arc::clone(b.column(1)), Arc::clone(b.column(0))],
    )
    .expect("batch");
    sink.write(&reordered).expect("written");
    sink.finish().expect("finished");
    let mut first = None;
    read_local_parquet_rows(&swapped, "n", Plan::default(), &mut |b| {
        first.get_or_insert(b.column(0).as_primitive::<Int64Type>().value(3));
        Ok(())
    })
    .expect("read");
    assert_eq!(first, Some(3));
}

#[test]
fn a_consumer_that_stops_early_stops_the_decoding_threads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, _, _) = written_rows(dir.path());
    // A consumer that stops early stops the decoding threads.
    let mut seen = 0;
    let stopped = read_local_parquet_rows(&path, "n", Plan::default(), &mut |_| {
        seen += 1;
        Err(Error::Internal("enough".into()))
    });
    assert!(stopped.is_err());
    assert_eq!(seen, 1);
}

#[test]
fn picked_rows_are_read_in_order_whether_filtered_or_skipped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, schema, total) = written_rows(dir.path());
    let mut picked_ways: Vec<Vec<usize>> = Vec::new();
    // Picked rows: in order, with every unpicked row and the untouched middle group skipped;
    // many short runs in the first and last groups (decoded and filtered), then a few long
    // ones in the last (skipped by the decoder).
    let dense: Vec<bool> = (0..total)
        .map(|n| {
            let group = n / ROW_GROUP_ROWS as i64;
            group != 1 && (n % 97 < 3 || n == total - 1 || n == 0)
        })
        .collect();
    let sparse: Vec<bool> = (0..total)
        .map(|n| (n > 2 * ROW_GROUP_ROWS as i64 + 100 && n % 5000 < 700) || n == 7)
        .collect();
    for marks in [dense, sparse] {
        let groups: Vec<usize> = {
            let meta =
                ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).expect("file"))
                    .expect("footer");
            let picks = Picks::new(meta.metadata(), &marks, "n").expect("picks");
            (0..3)
                .filter(|&g| picks.wanted(g) && picks.sparse(g))
                .collect()
        };
        let want: Vec<i64> = (0..total).filter(|&n| marks[n as usize]).collect();
        let mut got = Vec::new();
        read_local_parquet_rows(
            &path,
            "n",
            Plan {
                rows: Some(&marks),
                ..Plan::default()
            },
            &mut |b| {
                // Text decoded as views comes back as plain strings, the file's types.
                assert_eq!(b.schema().as_ref(), schema.as_ref());
                let n = b.column(0).as_primitive::<Int64Type>();
                let items = b.column(1).as_list::<i32>();
                for i in 0..b.num_rows() {
                    let item = items.value(i);
                    let text = item.as_struct().column(0).as_string::<i32>();
                    assert_eq!(text.value(0), format!("row {}", n.value(i)));
                    got.push(n.value(i));
                }
                Ok(())
            },
        )
        .expect("picked");
        assert_eq!(got, want);
        picked_ways.push(groups);
    }
    // Both ways were taken: the dense picks filtered, the sparse ones skipped.
    assert_eq!(picked_ways, vec![vec![], vec![0, 2]]);
    let marks = vec![true; total as usize];
    // A file that does not have the rows it had is refused.
    let short = read_local_parquet_rows(
        &path,
        "n",
        Plan {
            rows: Some(&marks[1..]),
            ..Plan::default()
        },
        &mut |_| Ok(()),
    );
    let refused = short.unwrap_err().to_string();
    assert!(refused.contains("changed"), "{refused}");
    // The error names the input as given, not the file read for it.
    assert!(refused.contains("`n`"), "{refused}");
}

#[test]
fn all_wanted_groups_at_once_by_one_selection_and_the_sieve() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, _, total) = written_rows(dir.path());
    // All wanted groups at once (as a remote file is read): a dense group, a skipped one, a
    // sparse one, by one selection and the sieve after it.
    let mixed: Vec<bool> = (0..total)
        .map(|n| match n / ROW_GROUP_ROWS as i64 {
            0 => n % 97 < 3,
            1 => false,
            _ => n % 5000 < 700,
        })
        .collect();
    let file = || std::fs::File::open(&path).expect("file");
    let builder = ParquetRecordBatchReaderBuilder::try_new(file()).expect("footer");
    let picks = Picks::new(builder.metadata(), &mixed, "n").expect("picks");
    let groups = picks.groups();
    assert_eq!(groups, vec![0, 2]);
    assert!(!picks.sparse(0) && picks.sparse(2));
    let (selection, sieve) = picks.plan(&groups);
    let mut sieve = sieve.expect("a dense group is sieved");
    let mut got: Vec<i64> = Vec::new();
    for batch in builder
        .with_batch_size(1000)
        .with_row_groups(groups)
        .with_row_selection(selection)
        .build()
        .expect("reader")
    {
        if let Some(kept) = sieve.pass(&batch.expect("batch")).expect("sieve") {
            got.extend(kept.column(0).as_primitive::<Int64Type>().values().iter());
        }
    }
    let want: Vec<i64> = (0..total).filter(|&n| mixed[n as usize]).collect();
    assert_eq!(got, want);
}
