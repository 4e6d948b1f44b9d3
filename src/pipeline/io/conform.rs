//! Batches of another schema brought to the row schema: missing columns as nulls, known ones cast.

use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch, new_null_array};

use super::parquet::column_fits;
use crate::error::{Error, Result};
use crate::schema::{col, row_schema};

/// Gives a batch read from a Parquet file the row schema: missing nullable columns become
/// nulls, castable types are cast, extra columns are dropped.
pub fn conform(batch: &RecordBatch, source: &str) -> Result<RecordBatch> {
    conform_to(batch, source, &row_schema())
}

/// [`conform`] to `schema`, the row schema or a layout of it (its text as views).
pub fn conform_to(
    batch: &RecordBatch,
    source: &str,
    schema: &datafusion::arrow::datatypes::SchemaRef,
) -> Result<RecordBatch> {
    use rayon::prelude::*;
    let schema = Arc::clone(schema);
    // Column by column, on every core: a cast of a big text column is the whole cost.
    let columns = schema
        .fields()
        .par_iter()
        .map(|field| conform_column(batch, field, source))
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// The column `field` of the row schema (or a layout of it) from `batch`, as [`conform_to`]
/// makes it: the batch's own column when its type is the field's, relabeled when only the
/// names of list items or map entries differ, cast when the type converts, nulls when the batch
/// has no such column; a reward outside [0, 1] is an error.
///
/// # Errors
/// A column whose type does not convert, a value that does not, a required column missing, or
/// a reward outside [0, 1].
pub fn conform_column(
    batch: &RecordBatch,
    field: &datafusion::arrow::datatypes::Field,
    source: &str,
) -> Result<datafusion::arrow::array::ArrayRef> {
    use datafusion::arrow::datatypes::DataType;
    let wrong = |found: &DataType, why: String| Error::Input {
        stage: "read".into(),
        message: format!(
            "`{source}`: column `{}` is {found}, not {}{why}",
            field.name(),
            field.data_type()
        ),
    };
    let column = match batch.column_by_name(field.name()) {
        Some(c) if c.data_type() == field.data_type() => Arc::clone(c),
        // Another writer's names for list items and map entries (`element`, `entries`): the
        // same values, relabeled without a copy.
        Some(c) if same_layout(c.data_type(), field.data_type()) => {
            datafusion::arrow::array::make_array(relabel(c.to_data(), field.data_type())?)
        }
        Some(c) => {
            // The same rules as JSONL: a number column takes numbers (not text, not booleans: a
            // string reward is not read as a number, nor a boolean as 1/0); a text column takes
            // text. A value that does not convert is an error, never a null.
            let (to, from) = (field.data_type(), c.data_type());
            if !column_fits(to, from) {
                return Err(wrong(from, String::new()));
            }
            let options = datafusion::arrow::compute::CastOptions {
                safe: false,
                ..Default::default()
            };
            datafusion::arrow::compute::cast_with_options(c, to, &options)
                .map_err(|e| wrong(from, format!(": {e}")))?
        }
        None if field.is_nullable() => new_null_array(field.data_type(), batch.num_rows()),
        None => {
            return Err(Error::missing_column(
                format!("read `{source}`"),
                field.name(),
                &batch.schema(),
            ));
        }
    };
    if !field.is_nullable() && column.null_count() > 0 {
        return Err(Error::Input {
            stage: "read".into(),
            message: format!(
                "`{source}`: column `{}` has {} empty values; every row needs one",
                field.name(),
                column.null_count()
            ),
        });
    }
    // Rewards follow the judge contract, as in JSONL: 0 or 1, or a partial score in [0, 1].
    if [col::REWARD, col::GOLD_REWARD].contains(&field.name().as_str())
        && let Some(values) = column
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Float64Array>()
        && let Some(x) = values.iter().flatten().find(|x| !(0.0..=1.0).contains(x))
    {
        return Err(Error::Input {
            stage: "read".into(),
            message: format!(
                "`{source}`: column `{}` holds {x}: a reward is 0 or 1, or a partial score in [0, 1]",
                field.name()
            ),
        });
    }
    Ok(column)
}

/// Whether `from` and `to` hold values laid out alike: equal but for the names and metadata of
/// list items and map entries (struct fields must have the same names, in the same order, and
/// every field the same nullability).
fn same_layout(
    from: &datafusion::arrow::datatypes::DataType,
    to: &datafusion::arrow::datatypes::DataType,
) -> bool {
    use datafusion::arrow::datatypes::DataType as T;
    match (from, to) {
        (T::List(a), T::List(b))
        | (T::LargeList(a), T::LargeList(b))
        | (T::Map(a, _), T::Map(b, _)) => {
            a.is_nullable() == b.is_nullable()
                && same_layout(a.data_type(), b.data_type())
                && match (from, to) {
                    (T::Map(_, x), T::Map(_, y)) => x == y,
                    _ => true,
                }
        }
        (T::Struct(a), T::Struct(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(a, b)| {
                    a.name() == b.name()
                        && a.is_nullable() == b.is_nullable()
                        && same_layout(a.data_type(), b.data_type())
                })
        }
        _ => from == to,
    }
}

/// `data` under type `to`, which [`same_layout`] found to hold the same values: its buffers
/// shared, its children relabeled in turn.
fn relabel(
    data: datafusion::arrow::array::ArrayData,
    to: &datafusion::arrow::datatypes::DataType,
) -> Result<datafusion::arrow::array::ArrayData> {
    use datafusion::arrow::datatypes::DataType as T;
    if data.data_type() == to {
        return Ok(data);
    }
    let child_types: Vec<&T> = match to {
        T::List(f) | T::LargeList(f) | T::Map(f, _) => vec![f.data_type()],
        T::Struct(fields) => fields.iter().map(|f| f.data_type()).collect(),
        _ => Vec::new(),
    };
    let children = data
        .child_data()
        .iter()
        .zip(child_types)
        .map(|(child, t)| relabel(child.clone(), t))
        .collect::<Result<Vec<_>>>()?;
    Ok(data
        .into_builder()
        .data_type(to.clone())
        .child_data(children)
        .build()?)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::pipeline::row::testing::{batch_of, fixture};

    #[test]
    fn missing_columns_are_nulls_and_wrong_kinds_are_refused() {
        let full = batch_of(fixture("example_rows.jsonl"));
        let schema = full.schema();
        // The required columns and the reward, then a column the row schema does not have.
        let kept: Vec<usize> = (0..schema.fields().len())
            .filter(|&i| !schema.field(i).is_nullable() || schema.field(i).name() == col::REWARD)
            .collect();
        let part = full.project(&kept).expect("projected");
        let mut fields: Vec<Field> = part
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("not_a_row_column", DataType::Int64, true));
        let mut columns = part.columns().to_vec();
        columns.push(Arc::new(Int64Array::from(vec![1; part.num_rows()])));
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("batch");
        let rows = conform(&batch, "t").expect("conformed");
        assert_eq!(rows.schema(), row_schema());
        assert_eq!(rows.num_rows(), full.num_rows());
        let steps = rows.column_by_name(col::STEPS).expect("steps");
        assert_eq!(steps.null_count(), full.num_rows());
        assert_eq!(
            rows.column_by_name(col::REWARD),
            full.column_by_name(col::REWARD)
        );
        // A reward given as text is refused, naming the file and the column.
        let at = part.schema().index_of(col::REWARD).expect("reward");
        let mut fields: Vec<Field> = (part.schema().fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        fields[at] = Field::new(col::REWARD, DataType::Utf8, true);
        let mut columns = part.columns().to_vec();
        columns[at] = Arc::new(StringArray::from(vec!["1"; part.num_rows()]));
        let wrong = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("batch");
        let err = conform(&wrong, "t")
            .expect_err("text is not a reward")
            .to_string();
        assert!(err.contains("`t`: column `reward` is Utf8"), "{err}");
    }

    #[test]
    fn list_items_named_otherwise_are_relabeled_not_copied() {
        use datafusion::arrow::datatypes::Fields;
        let full = batch_of(fixture("example_rows.jsonl"));
        let schema = full.schema();
        // `steps` as another writer names its items (`element`), the values the same.
        let steps_at = schema.index_of(col::STEPS).expect("steps");
        let DataType::List(item) = schema.field(steps_at).data_type() else {
            panic!("steps is a list");
        };
        let renamed = DataType::List(Arc::new(item.as_ref().clone().with_name("element")));
        let data = full.column(steps_at).to_data();
        let values_at = data.child_data()[0].child_data()[0].buffers()[1].as_ptr();
        let other = data
            .into_builder()
            .data_type(renamed.clone())
            .build()
            .expect("relabeled");
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields[steps_at] = fields[steps_at].clone().with_data_type(renamed);
        let mut columns = full.columns().to_vec();
        columns[steps_at] = datafusion::arrow::array::make_array(other);
        let batch = RecordBatch::try_new(Arc::new(Schema::new(Fields::from(fields))), columns)
            .expect("batch");
        let rows = conform(&batch, "t").expect("conformed");
        assert_eq!(rows.schema(), row_schema());
        let steps = rows.column(steps_at).to_data();
        assert_eq!(
            steps.child_data()[0].child_data()[0].buffers()[1].as_ptr(),
            values_at,
            "the step texts are the same bytes"
        );
        assert_eq!(
            rows.column(steps_at).as_ref(),
            full.column(steps_at).as_ref()
        );
        // A struct whose fields are named otherwise is not the same layout: it is not relabeled.
        let a = DataType::Struct(Fields::from(vec![Field::new("a", DataType::Utf8, true)]));
        let b = DataType::Struct(Fields::from(vec![Field::new("b", DataType::Utf8, true)]));
        assert!(!same_layout(&a, &b));
    }
}
