//! The batch job and its lake: `run`, `lake`.

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// `wai run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The pipeline file (TOML: `lake`, `[input] paths`, `[[stage]]` tables, `gates`; see
    /// docs/lake.md).
    #[arg(value_name = "PIPELINE")]
    pub pipeline: PathBuf,
    /// Print the plan (the new files, what each stage reads and writes, its command line) and
    /// do nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run even when no input file is new (the measures over every row so far, again).
    #[arg(long)]
    pub again: bool,
    /// Drop this pipeline's stopped run, if one is pending, and start a new one (its files
    /// stay, never published).
    #[arg(long)]
    pub restart: bool,
}

/// `wai lake`.
#[derive(Debug, Subcommand)]
pub(crate) enum LakeCommand {
    /// Make an empty lake in a new or empty folder (`wai run` makes one too).
    Init(LakeDirArgs),
    /// What a lake holds: its runs, their stages and gates, and any run left pending.
    Status(LakeDirArgs),
}

/// A lake's folder.
#[derive(Debug, Args)]
pub(crate) struct LakeDirArgs {
    /// The lake's folder.
    #[arg(value_name = "LAKE")]
    pub lake: PathBuf,
}
