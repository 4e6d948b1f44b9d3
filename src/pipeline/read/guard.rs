//! Readings of Parquet files that do not decode become data errors naming the file: the
//! decoder's errors and its panics alike.

use std::sync::Mutex;

use crate::error::{Error, Result};

/// The crates whose assertions a corrupt Parquet file reaches: the decoder, the Arrow arrays it
/// builds from what it decoded, and the byte buffers it slices.
const DECODER_CRATES: &[&str] = &[
    "/parquet-",
    "/arrow-array-",
    "/arrow-data-",
    "/arrow-buffer-",
    "/bytes-",
];

/// The words of the last decoder panic that no reading of wai's caught yet.
static DECODER_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Whether the panic `info` was raised inside a crate that decodes Parquet (its assertions on a
/// corrupt file, not a bug of wai's); when it was, its words are kept for the error that names
/// the file.
///
/// A panic hook calls this: the `wai` binary's, which prints nothing for such a panic, and the
/// fuzz targets', which let it unwind. Most decoder panics unwind to a reading of wai's that
/// turns them into a data error on the spot; one raised in a task DataFusion spawned ends the
/// task, and the query fails with a join error that says only "task panicked". The words kept
/// here let the command's error say what the decoder found, and name the files it read.
pub fn decoder_panic(info: &std::panic::PanicHookInfo<'_>) -> bool {
    let in_decoder = info.location().is_some_and(|l| {
        let file = l.file().replace('\\', "/");
        file.contains("/src/") && DECODER_CRATES.iter().any(|c| file.contains(c))
    });
    if in_decoder {
        let why = panic_words(info.payload());
        if let Ok(mut last) = DECODER_PANIC.lock() {
            *last = Some(why);
        }
    }
    in_decoder
}

/// The words of the decoder panic [`decoder_panic`] kept, once.
pub(crate) fn take_decoder_panic() -> Option<String> {
    DECODER_PANIC.lock().ok().and_then(|mut last| last.take())
}

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
    format!("its decoder failed: {}", panic_words(panic))
}

fn panic_words(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
