//! Reading the small result batches of a stage's queries: cells and columns by name, cast to the
//! type wanted.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};

use crate::error::{Error, Result};

/// A count read from SQL (null or negative is 0).
pub(crate) fn count(v: Option<i64>) -> u64 {
    v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0)
}

/// The cells of a result batch, by column name.
pub(crate) struct Cells<'a>(pub &'a RecordBatch);

impl Cells<'_> {
    /// A column, cast to `ty`.
    pub(crate) fn column(&self, name: &str, ty: &DataType) -> Result<ArrayRef> {
        let a = self
            .0
            .column_by_name(name)
            .ok_or_else(|| Error::Internal(format!("no column `{name}`")))?;
        Ok(datafusion::arrow::compute::cast(a, ty)?)
    }

    pub(crate) fn int(&self, name: &str, i: usize) -> Result<Option<i64>> {
        let a = self.column(name, &DataType::Int64)?;
        let a = a.as_primitive::<Int64Type>();
        Ok(a.is_valid(i).then(|| a.value(i)))
    }

    pub(crate) fn count(&self, name: &str, i: usize) -> Result<u64> {
        Ok(count(self.int(name, i)?))
    }

    pub(crate) fn float(&self, name: &str, i: usize) -> Result<Option<f64>> {
        let a = self.column(name, &DataType::Float64)?;
        let a = a.as_primitive::<Float64Type>();
        Ok(a.is_valid(i).then(|| a.value(i)))
    }

    pub(crate) fn text(&self, name: &str, i: usize) -> Result<Option<String>> {
        let a = self.column(name, &DataType::Utf8)?;
        let a = a.as_string::<i32>();
        Ok(a.is_valid(i).then(|| a.value(i).to_owned()))
    }

    /// Every non-null value of a column, as text.
    pub(crate) fn texts(&self, name: &str) -> Result<Vec<String>> {
        let a = self.column(name, &DataType::Utf8)?;
        Ok(a.as_string::<i32>()
            .iter()
            .flatten()
            .map(str::to_owned)
            .collect())
    }

    /// The sorted strings of a list cell (empty when null).
    pub(crate) fn sorted_list(&self, name: &str, i: usize) -> Result<Vec<String>> {
        let a = self
            .0
            .column_by_name(name)
            .ok_or_else(|| Error::Internal(format!("no column `{name}`")))?
            .as_list::<i32>();
        if !a.is_valid(i) {
            return Ok(Vec::new());
        }
        let values = datafusion::arrow::compute::cast(&a.value(i), &DataType::Utf8)?;
        let mut out: Vec<String> = values
            .as_string::<i32>()
            .iter()
            .flatten()
            .map(str::to_owned)
            .collect();
        out.sort();
        Ok(out)
    }

    /// (distinct values, the value) of a field the query counted as `{name}_n` beside `name`.
    pub(crate) fn agreed(&self, name: &str, i: usize) -> Result<(u64, Option<String>)> {
        Ok((self.count(&format!("{name}_n"), i)?, self.text(name, i)?))
    }
}
