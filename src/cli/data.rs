//! Rows in and out: `convert`, `ingest`, `sql`, `gen`.

use super::shared::{QueryLimits, RowsOut};
use crate::report::table;
use clap::Args;
use std::path::PathBuf;

/// `wai ingest`.
#[derive(Debug, Args)]
pub(crate) struct IngestArgs {
    /// Input files, folders, globs or URLs (JSON Lines, JSON arrays, OTLP JSON, inspect_ai logs).
    #[arg(required = true, value_name = "IN")]
    pub inputs: Vec<String>,
    /// Where the rows go.
    #[command(flatten)]
    pub output: RowsOut,
    /// The input format.
    #[arg(long, value_enum, default_value_t = crate::pipeline::ingest::Format::Auto)]
    pub format: crate::pipeline::ingest::Format,
    /// Chat records: where the task id is (a dotted path; default `task_id`).
    #[arg(long, value_name = "PATH")]
    pub task_field: Option<String>,
    /// Chat records: where the repeat index is (default `trial`).
    #[arg(long, value_name = "PATH")]
    pub trial_field: Option<String>,
    /// Chat records: where the reward is (default `reward`).
    #[arg(long, value_name = "PATH")]
    pub reward_field: Option<String>,
    /// Chat records: where the message list is (default `messages`; `traj` for τ-bench).
    #[arg(long, value_name = "PATH")]
    pub messages_field: Option<String>,
    /// Chat records: a field (dotted path) to move under `privileged`, never exported (repeatable).
    #[arg(long, value_name = "PATH")]
    pub privileged: Vec<String>,
    /// `OTel`: the span attribute holding the reward.
    #[arg(long, default_value = "whileai.reward", value_name = "ATTR")]
    pub reward_attr: String,
    /// `OTel`: the span attribute holding the task id (else the prompt keys the task).
    #[arg(long, default_value = "whileai.task_id", value_name = "ATTR")]
    pub task_attr: String,
    /// inspect_ai logs: the scorer whose value is the reward (else the first the eval lists).
    #[arg(long, value_name = "NAME")]
    pub score: Option<String>,
}

/// `wai convert`.
#[derive(Debug, Args)]
pub(crate) struct ConvertArgs {
    /// Input files, folders, globs or URLs.
    #[arg(required = true, value_name = "IN")]
    pub inputs: Vec<String>,
    /// Where the rows go.
    #[command(flatten)]
    pub output: RowsOut,
}

/// `wai sql`.
#[derive(Debug, Args)]
pub(crate) struct SqlArgs {
    /// The query (DataFusion SQL). Omit it with `--query` or `--list`.
    #[arg(value_name = "QUERY", required_unless_present_any = ["canned", "list"])]
    pub sql: Option<String>,
    /// A table: `PATH` (named `rows`) or `NAME=PATH`. PATH is a file, folder, glob or URL.
    #[arg(long = "table", short = 't', value_name = "[NAME=]PATH")]
    pub tables: Vec<String>,
    /// A lake (from `wai run`): its results tables (`results_pass_at`, `results_compare`, ...)
    /// and rows (`rows`, `scored`, `guarded`, `selected`), as its committed runs wrote them.
    #[arg(long, value_name = "LAKE")]
    pub lake: Option<PathBuf>,
    /// Run a canned query from `queries/` by name (see `--list`).
    #[arg(
        long = "query",
        short = 'Q',
        value_name = "NAME",
        conflicts_with = "sql"
    )]
    pub canned: Option<String>,
    /// A query parameter, `NAME=VALUE`, bound to `$NAME` (never spliced into the SQL).
    #[arg(long = "param", short = 'p', value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// List the canned queries with their descriptions.
    #[arg(long)]
    pub list: bool,
    /// The output format.
    #[arg(long, value_enum, default_value_t = table::Format::Table)]
    pub format: table::Format,
    /// Write the result to this file (whole or not at all) instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// What the query may take.
    #[command(flatten)]
    pub limits: QueryLimits,
    /// Where DataFusion plans run.
    #[command(flatten)]
    pub cluster: crate::cli::ClusterArgs,
}

/// `wai gen`.
#[derive(Debug, Args)]
pub(crate) struct GenArgs {
    /// How many rows.
    #[arg(long, short = 'n', default_value_t = 1000)]
    pub rows: u64,
    /// The seed: the same seed gives the same rows.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The output file (`.parquet` or `.jsonl`).
    #[arg(long, short, value_name = "OUT")]
    pub out: PathBuf,
    /// Plant this word in most passing replies and few failing ones (a reward hack to find).
    #[arg(long, value_name = "WORD")]
    pub shortcut: Option<String>,
    /// Share of rows that get a gold label (agreeing with the reward 90% of the time).
    #[arg(long, default_value_t = 0.0, value_name = "SHARE")]
    pub gold: f64,
    /// The rows' shape: `wai` (with `messages`) or `reference` (as the reference's simulate and
    /// evaluate write rows: no `messages`, arguments as objects, markers as booleans).
    #[arg(long, value_enum, default_value_t = crate::synth::Shape::Wai)]
    pub shape: crate::synth::Shape,
}

/// `wai cache`.
#[derive(Debug, Args)]
pub(crate) struct CacheArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: CacheAction,
}

/// What `wai cache` does.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum CacheAction {
    /// What the model response cache holds: replies, bytes, and replies per model.
    Stats {
        /// The cache folder (default `$WAI_CACHE_DIR`, else `~/.cache/wai`).
        #[arg(long, value_name = "DIR")]
        cache: Option<PathBuf>,
    },
    /// Remove stored replies: all, or one model's (`--model PROVIDER:MODEL`).
    Clear {
        /// The cache folder (default `$WAI_CACHE_DIR`, else `~/.cache/wai`).
        #[arg(long, value_name = "DIR")]
        cache: Option<PathBuf>,
        /// Only this model's replies, as `stats` lists it (`openai:gpt-4.1-mini`,
        /// `endpoint:Qwen/Qwen3-8B`).
        #[arg(long, value_name = "PROVIDER:MODEL")]
        model: Option<String>,
    },
}
