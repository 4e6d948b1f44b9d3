//! One module per subcommand: each turns typed arguments into work and a report.
//!
//! Commands write data to the `out` they are given and return a [`Outcome`]: a report (text for
//! people, a versioned JSON document for programs) and an exit status. `main.rs` prints it.

pub mod compare;
pub mod compare_judges;
pub mod convert;
pub mod coverage;
pub mod coverage_study;
pub mod decontaminate;
pub mod demo;
pub mod export;
pub mod gate;
pub mod generate;
pub mod grade;
pub mod hack_scan;
pub mod holdout;
pub mod ingest;
pub mod init_evals;
pub mod judge_trust;
pub mod labels;
pub mod markers;
pub mod pass_at;
pub mod select;
pub mod simulate;
pub mod sql;
pub mod variance;

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use datafusion::prelude::SessionContext;

use crate::cli::{Cli, Command};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::{OnBadRow, ParquetSink, Sink};
use crate::pipeline::read::Reader;
use crate::pipeline::session;
use crate::pipeline::source::{self, Format, Input};
use crate::schema::row_schema;

/// What a command hands back to be printed.
pub struct Outcome {
    /// Lines for a person.
    pub text: String,
    /// The `--json` document.
    pub json: serde_json::Value,
    /// How the process ends.
    pub status: ExitStatus,
}

/// The `--json` document of `command`: `version`, `command`, then every key of `report`.
pub fn document(command: &str, report: &impl serde::Serialize) -> serde_json::Value {
    let mut doc = serde_json::json!({"version": 1, "command": command});
    if let (Some(obj), Ok(serde_json::Value::Object(r))) =
        (doc.as_object_mut(), serde_json::to_value(report))
    {
        obj.extend(r);
    }
    doc
}

/// Shared state of one invocation.
pub struct Context {
    /// The async runtime (object stores, DataFusion).
    pub runtime: tokio::runtime::Runtime,
    /// Whether a progress bar may be drawn.
    pub progress: bool,
    /// Whether the report is the `--json` document (data goes into it, not beside it).
    pub json: bool,
}

impl Context {
    /// A progress bar over `total` bytes, hidden unless stderr is a terminal and output is text.
    pub fn bytes_bar(&self, total: Option<u64>, what: &str) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_owned());
        bar
    }

    /// A progress bar over `total` items, hidden unless stderr is a terminal and output is text.
    pub fn count_bar(&self, total: u64, what: &str) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let style =
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_owned());
        bar
    }
}

/// Runs the parsed command line, writing data to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<Outcome> {
    // A signal ends the workers this run starts, and the run.
    crate::pipeline::signals::install()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::Error::Internal(format!("cannot start the async runtime: {e}")))?;
    let progress = !cli.global.json && !cli.global.quiet && std::io::stderr().is_terminal();
    let ctx = Context {
        runtime,
        progress,
        json: cli.global.json,
    };
    let done = match cli.command {
        Command::Convert(args) => convert::run(&ctx, &args),
        Command::Sql(args) => sql::run(&ctx, &args, out),
        Command::Gen(args) => generate::run(&ctx, &args),
        Command::Simulate(args) => simulate::run(&ctx, &args),
        Command::Demo(args) => demo::run(&ctx, &args),
        Command::Export(args) => export::run(&ctx, &args),
        Command::Select(args) => select::run(&ctx, &args),
        Command::Preflight(args) => coverage::preflight(&args),
        Command::CoverageGap(args) => coverage::coverage_gap(&ctx, &args),
        Command::InitEvals(args) => init_evals::run(&args),
        Command::PassAt(args) => pass_at::run(&ctx, &args),
        Command::Markers(args) => markers::run(&ctx, &args),
        Command::Ingest(args) => ingest::run(&ctx, &args),
        Command::Grade(args) => grade::run(&ctx, &args),
        Command::Gate(args) => gate::run(&ctx, &args),
        Command::Variance(args) => variance::run(&ctx, &args),
        Command::Compare(args) => compare::run(&ctx, &args),
        Command::HoldoutSize(args) => holdout::run(&ctx, &args),
        Command::JudgeTrust(args) => judge_trust::run(&ctx, &args),
        Command::CompareJudges(args) => compare_judges::run(&ctx, &args),
        Command::Labels(command) => labels::run(&ctx, &command),
        Command::Decontaminate(args) => decontaminate::run(&ctx, &args),
        Command::HackScan(args) => hack_scan::run(&ctx, &args),
        Command::CoverageStudy(args) => coverage_study::run(&args),
    };
    done.map_err(name_the_files)
}

/// A Parquet file that does not decode inside a query (DataFusion's error names no file): the
/// error says which files the queries read.
fn name_the_files(e: crate::Error) -> crate::Error {
    let engine_parquet = matches!(&e, crate::Error::Engine(_) | crate::Error::Arrow(_))
        && e.exit_status() == ExitStatus::DataError;
    if !engine_parquet {
        return e;
    }
    let files = session::registered_files();
    if files.is_empty() {
        return e;
    }
    let shown: Vec<String> = files.iter().take(3).map(|f| format!("`{f}`")).collect();
    let more = files.len().saturating_sub(3);
    crate::Error::Input {
        stage: "read".into(),
        message: format!(
            "a Parquet input is not readable ({e}); the query read {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
    }
}

/// Converts JSONL inputs to Parquet files in `scratch`, so every table is scanned as Parquet.
pub(crate) fn as_parquet(
    ctx: &Context,
    inputs: Vec<Input>,
    scratch: &std::path::Path,
) -> Result<Vec<Input>> {
    let mut out = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.into_iter().enumerate() {
        if input.format == Format::Parquet {
            out.push(input);
            continue;
        }
        let path = scratch.join(format!("input-{i}.parquet"));
        let mut sink = Box::new(ParquetSink::create(&path, row_schema())?);
        let mut reader = Reader::new(
            ctx.runtime.handle().clone(),
            OnBadRow::Fail,
            Box::new(|_| {}),
        );
        reader.read(&input, &mut |batch| sink.write(&batch))?;
        drop(reader);
        sink.finish()?;
        let size = std::fs::metadata(&path)
            .map_err(|e| Error::io(&path, e))?
            .len();
        out.push(Input {
            display: input.display,
            location: source::Location::Local(path),
            format: Format::Parquet,
            size: Some(size),
        });
    }
    Ok(out)
}

/// Resolves `specs` and registers them in `context` as one table `name`. JSONL inputs are
/// converted, streaming, to Parquet files in `scratch` first (bad lines stop with an error).
pub fn load_table(
    ctx: &Context,
    context: &SessionContext,
    name: &str,
    specs: &[String],
    scratch: &std::path::Path,
) -> Result<()> {
    let inputs = ctx.runtime.block_on(source::resolve(specs))?;
    // One folder per table: tables loaded into one scratch must not share converted files.
    let folder = scratch.join(format!("table-{name}"));
    std::fs::create_dir_all(&folder).map_err(|e| Error::io(&folder, e))?;
    let inputs = as_parquet(ctx, inputs, &folder)?;
    ctx.runtime
        .block_on(session::register_parquet(context, name, &inputs))
}

/// A session with `inputs` registered as table `rows`, and the scratch folder its converted
/// JSONL inputs live in (keep it alive as long as the session).
pub fn rows_session(ctx: &Context, inputs: &[String]) -> Result<(SessionContext, Scratch)> {
    let context = session::new_context(None)?;
    let scratch = scratch()?;
    load_table(ctx, &context, "rows", inputs, scratch.path())?;
    Ok((context, scratch))
}

/// Every row of `inputs`, in file order (for stages that need the whole table in memory).
pub fn all_rows(
    ctx: &Context,
    inputs: &[String],
) -> Result<Vec<datafusion::arrow::array::RecordBatch>> {
    let (context, _scratch) = rows_session(ctx, inputs)?;
    ctx.runtime.block_on(session::collect_in_file_order(
        &context,
        "SELECT * FROM rows",
    ))
}

/// A scratch folder under the system's temporary folder, removed when dropped. While a run
/// holds it, it holds a lock on `.lock` inside it, so a later run can tell a killed run's
/// scratch folder (left behind, its lock free) from a live one and remove it.
pub struct Scratch {
    dir: tempfile::TempDir,
    _lock: std::fs::File,
}

impl Scratch {
    /// The folder.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// Makes a [`Scratch`] folder, first removing those killed runs left (`wai-*` folders whose
/// lock nobody holds).
pub fn scratch() -> Result<Scratch> {
    let tmp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for entry in entries.flatten() {
            let path = entry.path();
            // A folder made in the last minute may be a run between making it and locking it.
            let young = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() < 60));
            let ours =
                entry.file_name().to_string_lossy().starts_with("wai-") && path.is_dir() && !young;
            let Ok(lock) = std::fs::File::open(path.join(".lock")) else {
                continue;
            };
            if ours && lock.try_lock().is_ok() {
                drop(lock);
                if std::fs::remove_dir_all(&path).is_ok() {
                    tracing::info!(path = %path.display(), "removed the scratch folder of a killed run");
                }
            }
        }
    }
    let dir = tempfile::Builder::new()
        .prefix("wai-")
        .tempdir()
        .map_err(|e| Error::io(&tmp, e))?;
    let lock_path = dir.path().join(".lock");
    let lock = std::fs::File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
    lock.lock().map_err(|e| Error::io(&lock_path, e))?;
    // A signal removes it too.
    crate::pipeline::signals::add_temp(dir.path());
    Ok(Scratch { dir, _lock: lock })
}
