//! What the fuzz targets share: running a command line on a file of fuzzed bytes, the rows the
//! judging targets judge, and the rule every reader keeps.
//!
//! The rule: bad input is an error, never a panic (libFuzzer reports a panic as a crash), and
//! never a bug (exit 70): a data error (exit 65) names the file it is about (a missing column
//! names the column).

use std::path::Path;

use arrow::array::RecordBatch;
use wai::pipeline::io;
use wai::{Error, ExitStatus};

/// Holds `result`, the outcome of reading the input called `file`, to the rule.
///
/// # Panics
/// When the rule is broken: a bug (exit 70), or a data error that does not name `file`.
pub fn check<T>(result: &Result<T, Error>, file: &str) {
    let Err(e) = result else { return };
    let status = e.exit_status();
    let text = e.to_string();
    assert!(
        status != ExitStatus::Internal,
        "bad input made a bug (exit 70): {text}"
    );
    // A missing column names the column and what the rows carry, not the file (a stage's
    // schema check sees a table, not files): left as it is for now.
    if status == ExitStatus::DataError && !matches!(e, Error::MissingColumn { .. }) {
        assert!(
            text.contains(file),
            "a data error does not name the file `{file}`: {text}"
        );
    }
}

/// Writes `data` to a file called `name` in a fresh folder, runs wai with the arguments `args`
/// makes of its path (and of an output path beside it) in this process, and holds the outcome to
/// the rule.
pub fn run_on_file(name: &str, data: &[u8], args: impl Fn(&str, &str) -> Vec<String>) {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let input = dir.path().join(name);
    std::fs::write(&input, data).expect("write the input");
    let out = dir.path().join("out.parquet");
    let (input, out) = (path_text(&input), path_text(&out));
    let mut line = vec!["wai".to_owned(), "--quiet".to_owned()];
    line.extend(args(&input, &out));
    let result = wai::run_command_line(line, &mut std::io::sink());
    check(&result, &input);
}

fn path_text(path: &Path) -> String {
    path.to_str().expect("a UTF-8 scratch path").to_owned()
}

/// The hand-labelled transcripts of the grade tests (`tests/fixtures/grade_transcripts.jsonl`),
/// as row batches.
///
/// # Panics
/// If the fixture does not read (it does).
pub fn transcripts() -> Vec<RecordBatch> {
    const ROWS: &[u8] = include_bytes!("../../tests/fixtures/grade_transcripts.jsonl");
    io::jsonl_batches("grade_transcripts.jsonl", ROWS).expect("the fixture reads")
}

/// Lets a panic raised inside the Parquet decoder unwind to the read boundary that turns it into
/// a data error (exit 65), as the `wai` binary does; every other panic still aborts at once, as
/// libFuzzer wants, to be reported as a crash with its stack.
///
/// libfuzzer-sys installs a panic hook that aborts before any unwinding, so without this every
/// corrupt page that the parquet crate asserts on (rather than returning an error) would count as
/// a crash of wai's. A decoder panic that escapes wai's boundary is still a crash: the fuzz
/// target's own guard aborts on any panic that reaches it. Call it first in the target's body;
/// only the first call does anything.
pub fn let_decoder_panics_unwind() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let fuzzer = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !wai::pipeline::read::decoder_panic(info) {
                fuzzer(info);
            }
        }));
    });
}

/// Ignores SIGPIPE for the whole process, as every Rust program's runtime does before `main`:
/// libFuzzer's own `main` does not, so a worker that exits before reading its input would kill
/// the fuzzer with the signal instead of giving wai's writer the error it handles. Only the first
/// call does anything.
pub fn ignore_sigpipe() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: SIG_IGN is a valid disposition for SIGPIPE, set once before any worker starts;
        // no handler code runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
    });
}
