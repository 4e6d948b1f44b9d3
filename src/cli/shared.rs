//! Argument groups and value parsers several commands share.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// The floors a judge must clear against hand labels (`judge-trust`, `compare-judges`).
#[derive(Debug, Args)]
pub(crate) struct TrustFloors {
    /// The floor on agreement's 95% lower bound.
    #[arg(long, default_value_t = 0.8)]
    pub min_agreement: f64,
    /// The floor on Cohen's kappa.
    #[arg(long, default_value_t = 0.6)]
    pub min_kappa: f64,
    /// Count labels from a model (or of unknown origin) as gold.
    #[arg(long)]
    pub allow_model_gold: bool,
}

/// How command judges run (`grade`, `judge-trust`, `compare-judges`).
#[derive(Debug, Args)]
pub(crate) struct JudgePool {
    /// Command judges and agents: worker processes.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Command judges and agents: seconds a worker may take over one row or ask.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub timeout: f64,
    /// Command judges and agents: also pass this environment variable on (repeatable, or a
    /// comma-separated list in `WAI_ENV`). They start with a minimal environment: `PATH`,
    /// `HOME`, `LANG`, `LC_*`, `TMPDIR`, `PYTHON*`, `VIRTUAL_ENV` and a few more, no keys.
    #[arg(long = "env", value_name = "NAME", env = crate::cli::WAI_ENV, value_delimiter = ',')]
    pub env: Vec<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub models: ModelArgs,
}

/// How model calls are made (LLM judges `llm:SPEC`, model agents, model embedders).
#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    /// Models: calls in flight at once, per model.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub concurrency: usize,
    /// Models: seconds one call may take (default: 120 for judges; for a model agent the larger
    /// of 300 and a quarter of `--agent-max-tokens`, the reference's rule).
    #[arg(long, value_name = "SECONDS")]
    pub model_timeout: Option<f64>,
    /// Models: retries of a call that failed in a way that may pass (429, 5xx, a reset, a
    /// timeout), with exponential backoff and jitter, honouring `Retry-After`.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub retries: u32,
    /// Models: seconds before the first retry (each further retry doubles it, up to 30 s, with
    /// jitter; a server's `Retry-After` wins).
    #[arg(long, default_value_t = 0.5, value_name = "SECONDS")]
    pub retry_wait: f64,
    /// Models: stop cleanly (exit 75) after this many requests, retries included; cached replies
    /// are free, so a rerun goes on where this one stopped.
    #[arg(long, value_name = "N")]
    pub max_calls: Option<u64>,
    /// Models: stop cleanly (exit 75) once the servers report this many tokens, prompt and reply.
    #[arg(long, value_name = "TOKENS")]
    pub max_cost_tokens: Option<u64>,
    /// Models: the response cache folder (default `$WAI_CACHE_DIR`, else `~/.cache/wai`).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Models: call every time; neither read nor write the cache.
    #[arg(long, conflicts_with = "cache")]
    pub no_cache: bool,
    /// Models: allow plain http to a server that is not this machine.
    #[arg(long)]
    pub allow_http: bool,
    /// LLM judges: show the judge each row's privileged block (reference answer, hidden state).
    #[arg(long)]
    pub use_privileged: bool,
    /// LLM judges: the payload's budget in characters.
    #[arg(long, default_value_t = crate::stages::grade::llm::PAYLOAD_CHARS, value_name = "CHARS")]
    pub payload_chars: usize,
    /// LLM judges: the reply budget in tokens.
    #[arg(long, default_value_t = crate::stages::grade::llm::MAX_TOKENS, value_name = "TOKENS")]
    pub max_tokens: u32,
    /// LLM judges: the agent's policy (a file), shown to the judge.
    #[arg(long, value_name = "FILE")]
    pub judge_policy: Option<PathBuf>,
}

/// What a user's SQL may take (`sql`, and SQL judges in `grade`).
#[derive(Debug, Args)]
pub(crate) struct QueryLimits {
    /// Memory the query may hold (sorts, joins, aggregates, the rows gathered for printing, one
    /// function's output): a size such as 2G or 512M. Default: half the machine's memory.
    #[arg(long, value_name = "SIZE", value_parser = crate::pipeline::limits::parse_size)]
    pub memory_limit: Option<u64>,
    /// Seconds the query may run before it is stopped (exit 64). Default: no limit.
    #[arg(long, value_name = "SECONDS")]
    pub query_timeout: Option<f64>,
}

/// Where DataFusion plans run (`sql`, the measures, `grade`, `run`).
#[derive(Debug, Args)]
pub(crate) struct ClusterArgs {
    /// Run the table-level work (scans, filters, per-task aggregates, joins) on these `wai
    /// worker`s: http://HOST:PORT, an address this host reaches each worker at, comma-separated
    /// or repeated. Each must run this wai's version. Results are the same as without.
    #[arg(
        long,
        value_name = "URL,...",
        env = "WAI_CLUSTER",
        value_delimiter = ','
    )]
    pub cluster: Vec<String>,
    /// With `--cluster`: bytes of Parquet one worker task scans (smaller spreads a small input
    /// over more workers).
    #[arg(long, value_name = "BYTES", default_value_t = crate::pipeline::cluster::DEFAULT_SPLIT_BYTES)]
    pub cluster_split: u64,
}

/// The variable that lists more names for `--env`.
pub(crate) const WAI_ENV: &str = "WAI_ENV";

/// What makes a run hollow, for `grade` and `gate`.
#[derive(Debug, Args)]
pub(crate) struct HollowArgs {
    /// The tools the agent was given (a JSON list of OpenAI function schemas): warns about each
    /// one no row called.
    #[arg(long, value_name = "TOOLS.json")]
    pub tools: Option<PathBuf>,
    /// The agent has no tools by design: no row calling a tool is not a hollow run.
    #[arg(long, conflicts_with = "tools")]
    pub no_tools: bool,
    /// The share of rows the judge may leave without an ok verdict (error, timeout, invalid
    /// result, missing reward, never judged) before the run is hollow.
    #[arg(long, default_value_t = crate::stages::grade::warnings::JUDGE_FAILURE_SHARE, value_name = "SHARE")]
    pub max_judge_failures: f64,
    /// The least share of rows with an ok verdict: below it the run is hollow.
    #[arg(long, default_value_t = crate::stages::grade::warnings::MIN_GRADED_SHARE, value_name = "SHARE")]
    pub min_graded: f64,
    /// The k of pass^k and pass@k in the printed line (default: the smallest group size).
    #[arg(long, value_delimiter = ',', value_name = "K")]
    pub k: Vec<u32>,
    /// Bootstrap seed for the intervals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `--interval` of `pass-at` and `markers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum IntervalArg {
    /// Wilson score interval on the effective number of tasks (covers 93% or more from 20 tasks).
    Wilson,
    /// Student-t interval on the per-task values.
    T,
    /// The reference's percentile bootstrap over tasks (undercovers under 100 tasks).
    Percentile,
}

impl From<IntervalArg> for crate::stats::interval::Method {
    fn from(a: IntervalArg) -> Self {
        match a {
            IntervalArg::Wilson => Self::Wilson,
            IntervalArg::T => Self::T,
            IntervalArg::Percentile => Self::Percentile,
        }
    }
}

/// `--interval` of `compare` (differences are not shares, so Wilson does not apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DeltaIntervalArg {
    /// Student-t interval on the paired per-task differences.
    T,
    /// The reference's paired percentile bootstrap over tasks.
    Percentile,
}

impl From<DeltaIntervalArg> for crate::stats::interval::Method {
    fn from(a: DeltaIntervalArg) -> Self {
        match a {
            DeltaIntervalArg::T => Self::T,
            DeltaIntervalArg::Percentile => Self::Percentile,
        }
    }
}

/// A row file format, for `--to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RowFormat {
    /// JSON Lines in the reference's row format.
    Jsonl,
    /// Parquet in the row schema.
    Parquet,
}

impl From<RowFormat> for crate::pipeline::source::Format {
    fn from(f: RowFormat) -> Self {
        match f {
            RowFormat::Jsonl => Self::Jsonl,
            RowFormat::Parquet => Self::Parquet,
        }
    }
}

/// Where a command writes rows, and where bad input records go.
#[derive(Debug, Args)]
pub(crate) struct RowsOut {
    /// The output file (`.parquet` or `.jsonl`).
    #[arg(long, short, value_name = "OUT")]
    pub out: PathBuf,
    /// The output format, when `--out`'s extension does not say.
    #[arg(long, value_enum)]
    pub to: Option<RowFormat>,
    /// Set bad records aside in this JSONL file (with file, line, field and reason) and go on,
    /// instead of stopping at the first.
    #[arg(long, value_name = "FILE")]
    pub rejects: Option<PathBuf>,
}

/// A share: a number in [0, 1] (NaN is none).
pub(super) fn share(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} is not in [0, 1]"))
    }
}

/// A share above 0: (0, 1].
pub(super) fn positive_share(s: &str) -> Result<f64, String> {
    match share(s)? {
        v if v > 0.0 => Ok(v),
        _ => Err(format!("{s} is not in (0, 1]")),
    }
}

/// A rate strictly between 0 and 1.
pub(super) fn open_share(s: &str) -> Result<f64, String> {
    match share(s)? {
        v if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!("{s} is not in (0, 1)")),
    }
}

/// A count of one or more.
pub(super) fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        Ok(_) => Err("0 is not allowed here: give 1 or more".into()),
        Err(_) => Err(format!("`{s}` is not a whole number")),
    }
}
