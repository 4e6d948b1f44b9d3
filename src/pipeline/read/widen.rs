//! Batches of a projection widened back to the row schema: the left-out columns and struct
//! fields as nulls, large types cast to the row schema's (or its views).

use datafusion::arrow::array::RecordBatch;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, GenericListArray, OffsetSizeTrait, RecordBatchOptions, StructArray,
    new_null_array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef, Fields, Schema, SchemaRef};
use datafusion::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};

use super::plan::Plan;
use crate::error::{Error, Result};
use crate::pipeline::row::BATCH_ROWS;

/// `batch` with the columns and types of `full`: the columns and nested fields a projection left
/// out are null, and text decoded as views is copied out to plain strings when `full` says so
/// (a batch that already fits is returned as it is).
pub(super) fn widen(batch: &RecordBatch, full: &SchemaRef) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let columns = widen_columns(full.fields(), n, |name| batch.column_by_name(name))?;
    let options = RecordBatchOptions::new().with_row_count(Some(n));
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(full),
        columns,
        &options,
    )?)
}

/// The columns of `fields` (of `n` rows): each one `column` gives, widened to its field's type,
/// else nulls.
fn widen_columns<'a>(
    fields: &Fields,
    n: usize,
    column: impl Fn(&str) -> Option<&'a ArrayRef>,
) -> Result<Vec<ArrayRef>> {
    fields
        .iter()
        .map(|f| match column(f.name()) {
            Some(c) => widen_array(c, f.data_type()),
            None => Ok(nulls(f.data_type(), n)),
        })
        .collect()
}

/// `n` nulls of type `t`: a slice of one null array per type kept by the thread, grown as
/// needed. A partial reading widens every batch with a score of null columns (and nested
/// ones as long as their lists' items), and allocating and zeroing them anew for each batch
/// was a tenth of a first reading's page faults.
pub(super) fn nulls(t: &DataType, n: usize) -> ArrayRef {
    thread_local! {
        static NULLS: std::cell::RefCell<std::collections::HashMap<DataType, ArrayRef>> =
            std::cell::RefCell::default();
    }
    // What a thread keeps is bounded: longer runs of nulls are made each time.
    const KEPT: usize = 1 << 20;
    if n > KEPT {
        return new_null_array(t, n);
    }
    NULLS.with_borrow_mut(|kept| {
        if let Some(a) = kept.get(t)
            && a.len() >= n
        {
            return a.slice(0, n);
        }
        let grown = n
            .max(BATCH_ROWS)
            .max(kept.get(t).map_or(0, |a| 2 * a.len()))
            .min(KEPT);
        let a = new_null_array(t, grown);
        kept.insert(t.clone(), Arc::clone(&a));
        a.slice(0, n)
    })
}

/// `schema` with its text (at any depth, through lists and structs) as views.
fn with_views(schema: &Schema) -> Schema {
    fn field(f: &FieldRef) -> FieldRef {
        Arc::new(f.as_ref().clone().with_data_type(view(f.data_type())))
    }
    fn view(t: &DataType) -> DataType {
        match t {
            DataType::Utf8 => DataType::Utf8View,
            DataType::List(f) => DataType::List(field(f)),
            DataType::Struct(fields) => DataType::Struct(fields.iter().map(field).collect()),
            other => other.clone(),
        }
    }
    Schema::new_with_metadata(
        schema.fields().iter().map(field).collect::<Fields>(),
        schema.metadata().clone(),
    )
}

/// The row schema with its text as views: what a reading that keeps views gives.
pub(crate) fn row_schema_with_views() -> SchemaRef {
    static SCHEMA: std::sync::LazyLock<SchemaRef> =
        std::sync::LazyLock::new(|| Arc::new(with_views(&crate::schema::row_schema())));
    Arc::clone(&SCHEMA)
}

/// The metadata to decode a file with, and the schema its batches are widened to.
///
/// Text is decoded as views into the decoded pages for a partial reading (picked rows, or some
/// leaf columns), whose [`widen`] then copies out only the rows kept (a sieved row group is
/// decoded whole and most of it dropped), and for a reading whose consumer reads views
/// ([`Plan::views`]), which copies no text at all. Plain strings copy every value as it is
/// decoded, into buffers grown by doubling (views in select's sieved second reading took 3.6%
/// off the whole command's instructions). A whole reading that gives plain strings is decoded
/// as plain strings: copying out of views costs as much. A schema that cannot be read as views
/// is read as it is.
pub(super) fn decoding(
    meta: ArrowReaderMetadata,
    plan: &Plan<'_>,
) -> (ArrowReaderMetadata, SchemaRef) {
    let file_schema = Arc::clone(meta.schema());
    if !plan.decodes_views() {
        return (meta, file_schema);
    }
    let views = Arc::new(with_views(meta.schema()));
    let meta = ArrowReaderMetadata::try_new(
        Arc::clone(meta.metadata()),
        ArrowReaderOptions::new().with_schema(views),
    )
    .unwrap_or(meta);
    let full = if plan.views {
        Arc::clone(meta.schema())
    } else {
        file_schema
    };
    (meta, full)
}

/// `array` as `to`: struct fields it lacks (at any depth, through lists) are null.
pub(super) fn widen_array(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    if array.data_type() == to {
        return Ok(Arc::clone(array));
    }
    match (array.data_type(), to) {
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let s = array.as_struct();
            let children = widen_columns(fields, s.len(), |name| s.column_by_name(name))?;
            Ok(Arc::new(StructArray::try_new(
                fields.clone(),
                children,
                s.nulls().cloned(),
            )?))
        }
        // Text a partial reading decoded as views (see `decoding`).
        (DataType::Utf8View, DataType::Utf8) => Ok(cast(array, to)?),
        (DataType::List(_), DataType::List(field)) => widen_list::<i32>(array, field),
        // Files from other writers (Polars, for one) hold lists as large lists.
        (DataType::LargeList(_), DataType::LargeList(field)) => widen_list::<i64>(array, field),
        (from, to) => Err(Error::Internal(format!(
            "a column read as {from} cannot stand for {to}"
        ))),
    }
}

/// A list `array` whose items are widened to `field`'s type.
fn widen_list<O: OffsetSizeTrait>(array: &ArrayRef, field: &FieldRef) -> Result<ArrayRef> {
    let l = array.as_list::<O>();
    Ok(Arc::new(GenericListArray::<O>::try_new(
        Arc::clone(field),
        l.offsets().clone(),
        widen_array(l.values(), field.data_type())?,
        l.nulls().cloned(),
    )?))
}
