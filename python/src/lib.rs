//! `wai._wai`: the Python package's way into the wai engine.
//!
//! Three things, and nothing else: a command run in this process ([`run`], the command line's
//! own code, so a result prints and serialises as the CLI's does); rows held in memory
//! ([`register_arrow`], [`register_json`]: Arrow from any library through the `PyCapsule`
//! interface, named `memory:N` wherever a command takes a path); and Python functions served to
//! the engine's worker pools in this process ([`register_program`]: a judge or an agent). The API
//! users call is the Python package around this (`python/wai/`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{Array, ArrayData, RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyCapsuleMethods};

use wai::pipeline::memory::{self, MemoryRows};
use wai::pipeline::pipe::{self, InProcess, InProcessHandle, Lines, Replies};

/// The error of a command: its exit code (the CLI's), and its message with causes.
fn outcome_error(e: &wai::Error) -> (u8, String) {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str("\n  caused by: ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    (
        e.exit_status().code(),
        wai::report::redact::redact(&text).into_owned(),
    )
}

/// What a command gave: exit code, text, JSON envelope, what it streamed, and its error.
type Ran = (u8, String, String, Py<PyBytes>, Option<String>);

/// Runs one command line (`argv[0]` is the program name) in this process, on a thread of its
/// own, the GIL released. Returns `(exit code, text, json, streamed, error)`: the report as the
/// CLI prints it, its `--json` envelope as text, what the command wrote to stdout (rows or
/// lines), and the error message when the command failed (then the code is the CLI's exit code
/// for it).
///
/// Signals are checked every tenth of a second while it runs: Ctrl-C raises
/// `KeyboardInterrupt` at once and ends the worker processes the command started; the command
/// itself is abandoned (its thread ends at its next failed step or when its work is done, and
/// its result is dropped).
#[pyfunction]
fn run(py: Python<'_>, argv: Vec<String>) -> PyResult<Ran> {
    let (sender, done) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("wai-command".into())
        .spawn(move || {
            let mut streamed = Vec::new();
            let result = wai::run_command_line(argv, &mut streamed);
            let _ = sender.send((result, streamed));
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the command's thread: {e}")))?;
    // A receiver is not shared between threads; the lock lets the wait run without the GIL.
    let done = Mutex::new(done);
    let (result, streamed) = loop {
        let got = py.detach(|| match done.lock() {
            Ok(done) => done.recv_timeout(Duration::from_millis(100)),
            Err(_) => Err(std::sync::mpsc::RecvTimeoutError::Disconnected),
        });
        match got {
            Ok(finished) => break finished,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Err(interrupted) = py.check_signals() {
                    wai::pipeline::signals::end_all_workers();
                    return Err(interrupted);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(
                    "the command's thread ended without a result (a bug in wai)",
                ));
            }
        }
    };
    let streamed = PyBytes::new(py, &streamed).unbind();
    Ok(match result {
        Ok(outcome) => (
            outcome.status.code(),
            outcome.text,
            outcome.json.to_string(),
            streamed,
            None,
        ),
        Err(e) => {
            let (code, message) = outcome_error(&e);
            (code, String::new(), String::new(), streamed, Some(message))
        }
    })
}

/// Rows held in memory under a spec a command takes as a path.
#[pyclass(module = "wai._wai", frozen)]
struct Rows {
    rows: MemoryRows,
}

#[pymethods]
impl Rows {
    /// The spec (`memory:N`).
    #[getter]
    fn spec(&self) -> String {
        self.rows.spec().to_owned()
    }

    fn __len__(&self) -> usize {
        self.rows.num_rows()
    }

    /// The rows as an Arrow stream (the `PyCapsule` interface: `pyarrow.table(rows)` reads it;
    /// the columns are shared, not copied). A requested schema is not honoured: the stream is in
    /// the row schema.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let batches = self.rows.batches().map_err(|e| error_of(py, &e))?;
        let reader =
            RecordBatchIterator::new(batches.into_iter().map(Ok), wai::schema::row_schema());
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }

    /// Where every buffer of every column starts (children included), in column order: for a
    /// test that rows were shared, not copied.
    fn buffer_addresses(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        fn walk(data: &ArrayData, out: &mut Vec<usize>) {
            out.extend(
                data.buffers()
                    .iter()
                    .filter(|b| !b.is_empty())
                    .map(|b| b.as_ptr() as usize),
            );
            for child in data.child_data() {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        for batch in self.rows.batches().map_err(|e| error_of(py, &e))? {
            for column in batch.columns() {
                walk(&column.to_data(), &mut out);
            }
        }
        Ok(out)
    }
}

/// Brings an Arrow stream (anything with `__arrow_c_stream__`: a `pyarrow.Table` or
/// `RecordBatchReader`, a Polars or pandas data frame) into memory as rows, named `display` in
/// messages. Rows already in the row schema keep their buffers.
#[pyfunction]
fn register_arrow(py: Python<'_>, data: &Bound<'_, PyAny>, display: String) -> PyResult<Rows> {
    let reader = import_stream(data)?;
    let schema = reader.schema();
    let batches: Vec<RecordBatch> = reader
        .collect::<Result<_, _>>()
        .map_err(|e| python_error(py, 65, &format!("`{display}`: {e}")))?;
    let rows = py
        .detach(|| memory::register(&display, &schema, &batches))
        .map_err(|e| error_of(py, &e))?;
    Ok(Rows { rows })
}

/// Takes the Arrow stream `data` exports through `__arrow_c_stream__` (the `PyCapsule` interface).
fn import_stream(data: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    let py = data.py();
    let Some(method) = data.getattr_opt("__arrow_c_stream__")? else {
        return Err(python_error(
            py,
            64,
            &format!(
                "a {} is not Arrow data (it has no `__arrow_c_stream__`)",
                data.get_type().name()?
            ),
        ));
    };
    let capsule = method.call0()?;
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| python_error(py, 64, "`__arrow_c_stream__` did not return a capsule"))?;
    let pointer = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
    // SAFETY: the capsule holds an `ArrowArrayStream` (its name says so, as the `PyCapsule`
    // interface requires); `from_raw` moves it out and leaves a released one in its place, which
    // the capsule's destructor then leaves alone.
    let stream = unsafe { FFI_ArrowArrayStream::from_raw(pointer.as_ptr().cast()) };
    ArrowArrayStreamReader::try_new(stream).map_err(|e| python_error(py, 65, &e.to_string()))
}

/// Brings rows given as JSON Lines (the reference's rows, one per line) into memory.
#[pyfunction]
fn register_json(py: Python<'_>, text: &[u8], display: String) -> PyResult<Rows> {
    let text = text.to_vec();
    let rows = py
        .detach(|| memory::register_json(&display, &text))
        .map_err(|e| error_of(py, &e))?;
    Ok(Rows { rows })
}

/// A Python `wai.Error` subclass for the error's exit code (`wai._errors.from_code`).
fn error_of(py: Python<'_>, e: &wai::Error) -> PyErr {
    let (code, message) = outcome_error(e);
    python_error(py, code, &message)
}

/// The `wai.Error` subclass for exit code `code`, with `message`.
fn python_error(py: Python<'_>, code: u8, message: &str) -> PyErr {
    match py
        .import("wai._errors")
        .and_then(|m| m.getattr("from_code"))
        .and_then(|f| f.call1((code, message)))
    {
        Ok(err) => PyErr::from_value(err),
        Err(_) => PyRuntimeError::new_err(message.to_owned()),
    }
}

/// The request lines one worker of a Python program receives.
#[pyclass(module = "wai._wai", frozen)]
struct RequestLines {
    lines: Mutex<Option<Lines>>,
}

#[pymethods]
impl RequestLines {
    /// Waits up to `timeout` seconds (the GIL released) and returns every request line that has
    /// come: `[]` when none came in time, `None` once the worker is ended.
    fn next_batch(&self, py: Python<'_>, timeout: f64) -> Option<Vec<String>> {
        let wait = Duration::from_secs_f64(timeout.clamp(0.0, 3600.0));
        py.detach(|| {
            let guard = self.lines.lock().ok()?;
            guard.as_ref()?.next_batch(wait)
        })
    }
}

/// Where one worker of a Python program sends its reply lines.
#[pyclass(module = "wai._wai", frozen)]
struct ReplyLines {
    replies: Mutex<Replies>,
}

#[pymethods]
impl ReplyLines {
    /// Sends one reply line; `False` once nobody reads them.
    fn send(&self, line: &str) -> bool {
        self.replies.lock().is_ok_and(|r| r.send(line))
    }
}

/// A Python object with `serve(lines, replies)`, run for each worker on a thread of its own.
struct PythonProgram {
    server: Py<PyAny>,
}

impl InProcess for PythonProgram {
    fn serve(&self, lines: Lines, replies: Replies) {
        Python::attach(|py| {
            let lines = RequestLines {
                lines: Mutex::new(Some(lines)),
            };
            let replies = ReplyLines {
                replies: Mutex::new(replies),
            };
            if let Err(e) = self.server.call_method1(py, "serve", (lines, replies)) {
                // The server answers every request itself; an error here is a bug in it, and the
                // pool sees the worker end (its requests are retried, then marked).
                e.print(py);
            }
        });
    }
}

/// A registered Python program: its command is valid while this lives.
#[pyclass(module = "wai._wai", frozen)]
struct Program {
    handle: InProcessHandle,
}

#[pymethods]
impl Program {
    /// The command a judge or agent spec takes (`cmd:` + this).
    #[getter]
    fn command(&self) -> String {
        self.handle.command().to_owned()
    }
}

/// Registers `server` (an object with `serve(lines, replies)`), named `name` in reports.
#[pyfunction]
fn register_program(server: Py<PyAny>, name: String) -> Program {
    let handle = pipe::register(&name, Arc::new(PythonProgram { server }));
    Program { handle }
}

/// Leaves Ctrl-C to the host: a command run from Python does not install the binary's SIGINT
/// handler (which ends the process); Python keeps its own. SIGTERM and SIGHUP still end the
/// worker processes and remove temporary files before the process exits.
#[pyfunction]
fn leave_signals_to_host(py: Python<'_>) -> PyResult<()> {
    wai::pipeline::signals::leave_to_host().map_err(|e| error_of(py, &e))
}

/// The version of the engine.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The module.
#[pymodule]
fn _wai(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(register_arrow, m)?)?;
    m.add_function(wrap_pyfunction!(register_json, m)?)?;
    m.add_function(wrap_pyfunction!(register_program, m)?)?;
    m.add_function(wrap_pyfunction!(leave_signals_to_host, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_class::<Rows>()?;
    m.add_class::<RequestLines>()?;
    m.add_class::<ReplyLines>()?;
    m.add_class::<Program>()?;
    Ok(())
}
