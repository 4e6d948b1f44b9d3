//! Batches of another schema brought to the row schema: missing columns as nulls, known ones cast.

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, new_null_array};

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
    use datafusion::arrow::datatypes::DataType;
    let schema = Arc::clone(schema);
    let mut columns = Vec::with_capacity(schema.fields().len());
    let wrong =
        |field: &datafusion::arrow::datatypes::Field, found: &DataType, why: String| Error::Input {
            stage: "read".into(),
            message: format!(
                "`{source}`: column `{}` is {found}, not {}{why}",
                field.name(),
                field.data_type()
            ),
        };
    for field in schema.fields() {
        match batch.column_by_name(field.name()) {
            Some(c) if c.data_type() == field.data_type() => columns.push(Arc::clone(c)),
            Some(c) => {
                // The same rules as JSONL: a number column takes numbers (not text, not
                // booleans: a string reward is not read as a number, nor a boolean as 1/0);
                // a text column takes text. A value that does not convert is an error, never a
                // null.
                let (to, from) = (field.data_type(), c.data_type());
                if !column_fits(to, from) {
                    return Err(wrong(field, from, String::new()));
                }
                let options = datafusion::arrow::compute::CastOptions {
                    safe: false,
                    ..Default::default()
                };
                columns.push(
                    datafusion::arrow::compute::cast_with_options(c, to, &options)
                        .map_err(|e| wrong(field, from, format!(": {e}")))?,
                );
            }
            None if field.is_nullable() => {
                columns.push(new_null_array(field.data_type(), batch.num_rows()));
            }
            None => {
                return Err(Error::missing_column(
                    format!("read `{source}`"),
                    field.name(),
                    &batch.schema(),
                ));
            }
        }
    }
    // Rewards follow the judge contract, as in JSONL: 0 or 1, or a partial score in [0, 1].
    for name in [col::REWARD, col::GOLD_REWARD] {
        if let Some(i) = schema.index_of(name).ok()
            && let Some(values) = columns[i]
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Float64Array>()
            && let Some(x) = values.iter().flatten().find(|x| !(0.0..=1.0).contains(x))
        {
            return Err(Error::Input {
                stage: "read".into(),
                message: format!(
                    "`{source}`: column `{name}` holds {x}: a reward is 0 or 1, or a partial score in [0, 1]"
                ),
            });
        }
    }
    Ok(RecordBatch::try_new(schema, columns)?)
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
}
