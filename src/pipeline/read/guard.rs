//! Readings of Parquet files that do not decode become data errors naming the file: the
//! decoder's errors and its panics alike.

use crate::error::{Error, Result};

/// Runs a reading of the Parquet file `display`, so that a file that does not decode is a data
/// error naming it: the decoder's errors, and its panics (the parquet crate asserts on some
/// corrupt pages rather than returning an error), become one. Errors the reading's consumer
/// returns pass through as they are.
pub(super) fn guarded<T>(display: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        guarded_errors(display, read)
    })) {
        Ok(r) => r,
        Err(panic) => Err(corrupt(display, &panic_text(&*panic))),
    }
}

/// The decoder's errors of a reading of `display` as a data error naming the file.
pub(super) fn guarded_errors<T>(display: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    match read() {
        Err(Error::Parquet(e)) => Err(corrupt(display, &e.to_string())),
        Err(Error::Arrow(e @ datafusion::arrow::error::ArrowError::ParquetError(_))) => {
            Err(corrupt(display, &e.to_string()))
        }
        other => other,
    }
}

pub(super) fn corrupt(display: &str, why: &str) -> Error {
    Error::Input {
        stage: "read".into(),
        message: format!("`{display}` is not a readable Parquet file ({why})"),
    }
}

pub(super) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let why = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    format!("its decoder failed: {why}")
}
