//! Readings of Parquet files that do not decode become data errors naming the file: the
//! decoder's errors and its panics alike.

use std::sync::Mutex;

use crate::error::{Error, Result};

/// The crates whose assertions a corrupt Parquet file reaches: the decoder, the Arrow schema it
/// reads from the footer's `ARROW:schema` (an IPC flatbuffer, whose reader panics on a field
/// without a type), the Arrow arrays it builds from what it decoded, and the byte buffers it
/// slices.
const DECODER_CRATES: &[&str] = &[
    "/parquet-",
    "/arrow-ipc-",
    "/flatbuffers-",
    "/arrow-array-",
    "/arrow-data-",
    "/arrow-buffer-",
    "/bytes-",
];

/// The words of the last decoder panic that no reading of wai's caught yet.
static DECODER_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Whether the panic `info` was raised by a Parquet decoding (its assertions on a corrupt file,
/// not a bug of wai's); when it was, its words are kept for the error that names the file.
///
/// A panic counts when it is raised in the parquet crate, or in the arrow, flatbuffers or bytes
/// crates while the parquet crate is on the stack (it reads the footer's Arrow schema, slices the
/// bytes it read and builds arrays of them). wai's own code calls arrow's panicking accessors too
/// (`as_string`, `value(i)`): a panic there, with no parquet frame under it, is a bug and prints
/// as one.
///
/// A panic hook calls this: the `wai` binary's, which prints nothing for such a panic, and the
/// fuzz targets', which let it unwind. Most decoder panics unwind to a reading of wai's that
/// turns them into a data error on the spot; one raised in a task DataFusion spawned ends the
/// task, and the query fails with a join error that says only "task panicked", and one raised
/// where DataFusion polls the query unwinds to the command. The words kept here let the
/// command's error say what the decoder found, and name the files it read.
pub fn decoder_panic(info: &std::panic::PanicHookInfo<'_>) -> bool {
    let Some(file) = info.location().map(|l| l.file().replace('\\', "/")) else {
        return false;
    };
    if !file.contains("/src/") || !DECODER_CRATES.iter().any(|c| file.contains(c)) {
        return false;
    }
    if !file.contains("/parquet-") && !parquet_on_stack() {
        return false;
    }
    let why = panic_words(info.payload());
    if let Ok(mut last) = DECODER_PANIC.lock() {
        *last = Some(why);
    }
    true
}

/// Whether a frame of the parquet crate is on this thread's stack (symbols as the backtrace
/// resolves them: `parquet::...` or `<parquet::... as ...>`). Only a panic pays for the look.
fn parquet_on_stack() -> bool {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    trace.lines().any(|line| {
        let symbol = line
            .trim_start()
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start_matches(": ");
        symbol.starts_with("parquet::") || symbol.starts_with("<parquet::")
    })
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
        Err(panic) => {
            // Caught and named here: not a later error's.
            let _ = take_decoder_panic();
            Err(corrupt(display, &panic_text(&*panic)))
        }
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

pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    format!("its decoder failed: {}", panic_words(panic))
}

fn panic_words(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_without_the_parquet_crate_is_not_a_decoding() {
        // wai's own frames (`wai::pipeline::io::parquet::...` among them) are not the crate's.
        assert!(!parquet_on_stack());
        assert!(take_decoder_panic().is_none());
    }
}
