//! The binary's entry: logging, printing the outcome, reporting errors. The library's public
//! way in for programs that want a command's report without a process
//! ([`run_command_line`]).

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::Cli;
use crate::report::redact::{Redacting, redact, redact_json};
use crate::{Error, ExitStatus};

pub use crate::commands::Outcome;

/// Runs one command line (`args[0]` is the program name) in this process without printing:
/// data a command streams goes to `out`, and its report comes back as an [`Outcome`] (the text,
/// the `--json` envelope, the exit status), secrets redacted as the binary prints them. `--help`
/// and `--version` come back as an outcome holding their text. For benches and programs that
/// want a command's report; stages are the way in for everything else ([`crate::stages::run`]).
/// The first call installs the signal handler the binary has (a signal ends the workers a
/// command started, and the process).
///
/// # Errors
/// The command line does not parse (a usage error), or the command failed.
pub fn run_command_line<I, T>(args: I, out: &mut dyn Write) -> crate::Result<Outcome>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // `--help` and `--version` are answers, not errors.
        Err(e) if !e.use_stderr() => {
            return Ok(Outcome {
                text: e.to_string(),
                json: serde_json::Value::Null,
                status: ExitStatus::Success,
            });
        }
        Err(e) => return Err(Error::Usage(e.to_string())),
    };
    let mut outcome = crate::commands::run(cli, out)?;
    redact_json(&mut outcome.json);
    outcome.text = redact(&outcome.text).into_owned();
    Ok(outcome)
}

fn init_logging(quiet: bool, verbose: u8) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("wai={level}")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Log lines pass through the redactor: a server's reply quoted in a log keeps no key.
        .with_writer(|| Redacting(std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Prints `e` and its causes, secrets redacted (a server's error may quote the key it was sent).
/// A closed stderr (`wai ... 2>&1 | head -1`) loses the message, not the exit status: nothing
/// here panics on a write that fails.
fn report_error(e: &Error) {
    let mut err = std::io::stderr().lock();
    let mut shown = e.to_string();
    let _ = writeln!(err, "error: {}", redact(&shown));
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        // Some libraries repeat their source's text in their own message: print each text once.
        let text = cause.to_string();
        if !shown.contains(&text) {
            let _ = writeln!(err, "  caused by: {}", redact(&text));
            shown = text;
        }
        source = cause.source();
    }
}

/// The `wai` binary's whole run: parse the process's command line, run it, print the report (text
/// or the `--json` envelope, secrets redacted), and return the exit status. `main.rs` calls this
/// and nothing else.
pub fn run_main() -> ExitCode {
    quiet_decoder_panics();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(ExitStatus::Usage)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    init_logging(cli.global.quiet, cli.global.verbose);
    let (json, quiet) = (cli.global.json, cli.global.quiet);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match crate::commands::run(cli, &mut out) {
        Ok(mut outcome) => {
            // Reports are redacted too: a note or warning may quote what a server said.
            redact_json(&mut outcome.json);
            let printed = if json {
                writeln!(out, "{}", outcome.json)
            } else if !quiet && !outcome.text.is_empty() {
                writeln!(out, "{}", redact(&outcome.text))
            } else {
                Ok(())
            };
            // A closed pipe (`wai sql ... | head`) is not an error.
            if let Err(e) = printed.and_then(|()| out.flush())
                && e.kind() != std::io::ErrorKind::BrokenPipe
            {
                report_error(&Error::io("<stdout>", e));
                return ExitStatus::IoError.into();
            }
            outcome.status.into()
        }
        // A pipe closed while the command wrote its rows (`wai sql ... | head`) ends the run
        // as a closed pipe after the report does: quietly.
        Err(Error::Io { path, source })
            if source.kind() == std::io::ErrorKind::BrokenPipe
                && path.to_str() == Some("<stdout>") =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = out.flush();
            report_error(&e);
            e.exit_status().into()
        }
    }
}

/// The parquet crate (and the crates under it) asserts on some corrupt pages and footers rather
/// than returning an error; wai's readings catch those panics and report the file as a data error
/// (exit 65) with the decoder's words (`pipeline::read`). The default hook would print a
/// "panicked at" line and a backtrace first, as for a crash: a panic raised inside a decoder crate
/// prints nothing (its words are kept for the error), and every other panic (a bug in wai) prints
/// as before.
fn quiet_decoder_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !crate::pipeline::read::decoder_panic(info) {
            default(info);
        }
    }));
}
