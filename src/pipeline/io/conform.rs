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
