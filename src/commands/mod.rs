//! One module per subcommand: each turns typed arguments into work and a report.
//!
//! Commands write data to the `out` they are given and return a [`Outcome`]: a report (text for
//! people, a versioned JSON document for programs) and an exit status. `main.rs` prints it.

pub mod convert;
pub mod generate;
pub mod sql;

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::{Cli, Command};
use crate::error::{ExitStatus, Result};

/// What a command hands back to be printed.
pub struct Outcome {
    /// Lines for a person.
    pub text: String,
    /// The `--json` document.
    pub json: serde_json::Value,
    /// How the process ends.
    pub status: ExitStatus,
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
}

/// Runs the parsed command line, writing data to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::Error::Internal(format!("cannot start the async runtime: {e}")))?;
    let progress = !cli.global.json && !cli.global.quiet && std::io::stderr().is_terminal();
    let ctx = Context { runtime, progress, json: cli.global.json };
    match cli.command {
        Command::Convert(args) => convert::run(&ctx, &args),
        Command::Sql(args) => sql::run(&ctx, &args, out),
        Command::Gen(args) => generate::run(&ctx, &args),
    }
}

/// `1 row`, `2 rows`.
pub(crate) fn plural(n: u64, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}
