//! The crate's error type, grouped by who must act, and the process exit status.
//!
//! Variants say whose move it is: the user's data ([`Error::BadRow`], [`Error::Input`],
//! [`Error::MissingColumn`]), the user's options ([`Error::Usage`]), the environment
//! ([`Error::MissingInput`], [`Error::Io`], [`Error::Store`]), or us ([`Error::Internal`]).
//! [`Error::exit_status`] maps each to the sysexits code of DESIGN.md §9.

use std::path::PathBuf;
use std::process::ExitCode;

use datafusion::error::DataFusionError;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `wai`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// One input record is malformed: its file, line and (when known) field are named.
    #[error("{}", bad_row_message(.file, *.line, .field.as_deref(), .message))]
    BadRow {
        /// The file or URL the record came from.
        file: String,
        /// 1-based line number.
        line: u64,
        /// The offending field, dotted for nested fields (`steps[2].arguments`).
        field: Option<String>,
        /// What is wrong with it.
        message: String,
    },
    /// The user's data does not fit a stage.
    #[error("stage `{stage}`: {message}")]
    Input {
        /// The stage or command that found the problem.
        stage: String,
        /// What is wrong.
        message: String,
    },
    /// A stage's input lacks a column it needs.
    #[error("stage `{stage}`: missing column `{column}`; found {}", backticked(.found))]
    MissingColumn {
        /// The stage that needs the column.
        stage: String,
        /// The missing column.
        column: String,
        /// The columns the input has.
        found: Vec<String>,
    },
    /// The command line or an option is wrong.
    #[error("{0}")]
    Usage(String),
    /// A stage's option is out of range or contradicts another: named by its key in the stage's
    /// `Options` (the command line names it by its flag instead).
    #[error("option `{key}` {message}")]
    Option {
        /// The option's key, as the `Options` struct (and a pipeline file) spells it.
        key: String,
        /// What is wrong, and what would be right, as it reads after the option's name (`must be at
        /// least 1`).
        message: String,
    },
    /// An input path or URL matched nothing.
    #[error("no input at `{path}`")]
    MissingInput {
        /// What was asked for.
        path: String,
    },
    /// A file system operation failed.
    #[error("I/O error on `{}`", .path.display())]
    Io {
        /// The path being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An object store request failed.
    #[error("object store error on `{url}`")]
    Store {
        /// The URL being read.
        url: String,
        /// The underlying error.
        #[source]
        source: object_store::Error,
    },
    /// The query engine failed.
    #[error(transparent)]
    Engine(#[from] DataFusionError),
    /// An Arrow kernel failed.
    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// A Parquet file could not be read or written.
    #[error(transparent)]
    Parquet(#[from] datafusion::parquet::errors::ParquetError),
    /// A bug in `wai`.
    #[error(
        "internal error: {0}. This is a bug in wai; please report it with the command that triggered it"
    )]
    Internal(String),

    /// A model endpoint cannot serve the run: it refused the key, has no such model, or failed
    /// every call (the circuit breaker).
    #[error("{0}")]
    Unavailable(String),

    /// The run's model budget (`--max-calls`, `--max-cost-tokens`) is spent; what was done is
    /// kept.
    #[error("{0}")]
    Budget(String),
}

fn bad_row_message(file: &str, line: u64, field: Option<&str>, message: &str) -> String {
    match field {
        Some(field) => format!("`{file}` line {line}: field `{field}`: {message}"),
        None => format!("`{file}` line {line}: {message}"),
    }
}

fn backticked(names: &[String]) -> String {
    if names.is_empty() {
        return "no columns".to_owned();
    }
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Error {
    /// A stage's input lacks `column`; the message lists the columns `found` has.
    pub fn missing_column(
        stage: impl Into<String>,
        column: impl Into<String>,
        found: &datafusion::arrow::datatypes::Schema,
    ) -> Self {
        Self::MissingColumn {
            stage: stage.into(),
            column: column.into(),
            found: found.fields().iter().map(|f| f.name().clone()).collect(),
        }
    }

    /// A failed read of an input file: a file that is not there is a missing input (exit 66),
    /// anything else an I/O error naming it (74).
    pub fn read(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        let path = path.as_ref();
        if source.kind() == std::io::ErrorKind::NotFound {
            Self::MissingInput {
                path: path.display().to_string(),
            }
        } else {
            Self::io(path, source)
        }
    }

    /// An option of a stage is wrong: `key` is its name in the stage's `Options`.
    pub fn option(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Option {
            key: key.into(),
            message: message.into(),
        }
    }

    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// The exit status this error ends the process with.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            // The Parquet reader's errors also come back through arrow: a file that does not
            // decode.
            Self::BadRow { .. }
            | Self::Input { .. }
            | Self::MissingColumn { .. }
            | Self::Parquet(_)
            | Self::Arrow(datafusion::arrow::error::ArrowError::ParquetError(_)) => {
                ExitStatus::DataError
            }
            Self::Usage(_) | Self::Option { .. } => ExitStatus::Usage,
            Self::MissingInput { .. } => ExitStatus::NoInput,
            Self::Io { .. } => ExitStatus::IoError,
            Self::Store { source, .. } => match source {
                object_store::Error::NotFound { .. } => ExitStatus::NoInput,
                _ => ExitStatus::IoError,
            },
            Self::Engine(e) => engine_status(e),
            Self::Arrow(_) | Self::Internal(_) => ExitStatus::Internal,
            Self::Unavailable(_) => ExitStatus::Unavailable,
            Self::Budget(_) => ExitStatus::TempFail,
        }
    }
}

/// A query the user wrote that does not plan is a usage error; a file that does not parse is a
/// data error; the rest is ours.
fn engine_status(e: &DataFusionError) -> ExitStatus {
    match e {
        DataFusionError::SQL(..)
        | DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::NotImplemented(_)
        | DataFusionError::Configuration(_) => ExitStatus::Usage,
        DataFusionError::ParquetError(_) => ExitStatus::DataError,
        DataFusionError::ArrowError(inner, _)
            if matches!(
                **inner,
                datafusion::arrow::error::ArrowError::ParquetError(_)
            ) =>
        {
            ExitStatus::DataError
        }
        DataFusionError::IoError(_) | DataFusionError::ObjectStore(_) => ExitStatus::IoError,
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            engine_status(inner)
        }
        DataFusionError::Shared(inner) => engine_status(inner),
        DataFusionError::External(inner) => match inner.downcast_ref::<Error>() {
            Some(ours) => ours.exit_status(),
            None => ExitStatus::Internal,
        },
        _ => ExitStatus::Internal,
    }
}

/// How the process ends (DESIGN.md §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: success.
    Success,
    /// 1: a gate or check failed.
    Failure,
    /// 2: the run is hollow.
    Hollow,
    /// 64: usage error.
    Usage,
    /// 65: bad input data.
    DataError,
    /// 66: missing input.
    NoInput,
    /// 69: a model endpoint cannot serve the run.
    Unavailable,
    /// 70: internal error.
    Internal,
    /// 74: I/O error.
    IoError,
    /// 75: the model budget is spent; run again with a larger one to go on.
    TempFail,
}

impl ExitStatus {
    /// The numeric code.
    pub fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Failure => 1,
            Self::Hollow => 2,
            Self::Usage => 64,
            Self::DataError => 65,
            Self::NoInput => 66,
            Self::Unavailable => 69,
            Self::Internal => 70,
            Self::IoError => 74,
            Self::TempFail => 75,
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        ExitCode::from(status.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_row_names_file_line_and_field() {
        let e = Error::BadRow {
            file: "rows.jsonl".into(),
            line: 12,
            field: Some("reward".into()),
            message: "expected a number or null, found a string".into(),
        };
        assert_eq!(
            e.to_string(),
            "`rows.jsonl` line 12: field `reward`: expected a number or null, found a string"
        );
        assert_eq!(e.exit_status().code(), 65);
    }

    #[test]
    fn sql_errors_are_usage_errors() {
        let e = Error::Engine(DataFusionError::Plan("no table".into()));
        assert_eq!(e.exit_status(), ExitStatus::Usage);
    }
}
