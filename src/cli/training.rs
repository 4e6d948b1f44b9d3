//! Training data: `select`, `export`, `decontaminate`, `hack-scan`.

use super::shared::{ModelArgs, RowsOut, at_least_one, open_share, positive_share, share};
use clap::Args;
use std::path::PathBuf;

/// `wai hack-scan`.
#[derive(Debug, Args)]
pub(crate) struct HackScanArgs {
    /// Scored rows, several rollouts per task (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(required = true, value_name = "SCORED")]
    pub inputs: Vec<String>,
    /// What the reward should pay for: substrings of feature names (`tool:lookup_order`,
    /// `marker:grounded`, `lookup`), comma-separated. Without it no hack can be named.
    #[arg(long, value_delimiter = ',', value_name = "SUBSTR,...")]
    pub endorsed: Vec<String>,
    /// A feature of your own: `NAME=SQL_EXPR` over the row (a number or a boolean; null is
    /// absent). Repeat for several.
    #[arg(long = "feature", value_name = "NAME=SQL_EXPR")]
    pub features: Vec<String>,
    /// Leave out the automatic words, word pairs and conjunctions.
    #[arg(long)]
    pub no_auto: bool,
    /// Most common words and word pairs in the automatic tier.
    #[arg(long, default_value_t = 200, value_parser = at_least_one)]
    pub top_k: usize,
    /// Within-task shuffles behind the noise floor (at least 20: fewer cannot place a 5% floor).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(20..=100_000))]
    pub perms: u32,
    /// Fewest rows a feature must be present on to be ranked.
    #[arg(long, default_value_t = 20, value_parser = at_least_one)]
    pub min_obs: usize,
    /// Strongest indicators whose pairwise conjunctions (`A AND B`) are tried.
    #[arg(long, default_value_t = 12)]
    pub seeds: usize,
    /// The floor's level: a feature above it clears chance at this rate.
    #[arg(long, default_value_t = 0.05, value_parser = open_share)]
    pub alpha: f64,
    /// The seed of the shuffles.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Ranked features in the report (0 lists all).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
}

/// `wai decontaminate`.
#[derive(Debug, Args)]
pub(crate) struct DecontaminateArgs {
    /// Training rows (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(required = true, value_name = "TRAIN")]
    pub inputs: Vec<String>,
    /// The eval set: rows, or plain JSONL with a `prompt` field (repeat for several).
    #[arg(long, required = true, value_name = "EVAL")]
    pub against: Vec<String>,
    /// Training-row fields compared with the eval texts, in order (`prompt`, `final_text`,
    /// `reason`).
    #[arg(long, value_delimiter = ',', default_value = "prompt")]
    pub fields: Vec<String>,
    /// Words per n-gram.
    #[arg(long, default_value_t = 8, value_parser = at_least_one)]
    pub n: usize,
    /// The share of a row's words one eval text must cover (0: any shared n-gram).
    #[arg(long, default_value_t = 0.8, value_parser = share)]
    pub overlap: f64,
    /// The semantic rule's embedder: `column:NAME` (vectors in each row's `extra.NAME`),
    /// `cmd:COMMAND` (texts in, vectors out over JSON Lines) or `openai:MODEL@URL` (an
    /// OpenAI-compatible embeddings endpoint; key from `OPENAI_API_KEY`).
    #[arg(long, value_name = "SPEC")]
    pub embedder: Option<String>,
    /// The cosine similarity that flags (with `--embedder`).
    #[arg(long, default_value_t = 0.85, value_parser = positive_share)]
    pub similarity: f64,
    /// Seconds an embedder may take on one batch.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// An `openai:` embedder: allow plain http to a server that is not this machine.
    #[arg(long)]
    pub allow_http: bool,
    /// An `openai:` embedder: the response cache folder (default `$WAI_CACHE_DIR`, else
    /// `~/.cache/wai`), so a rerun embeds nothing twice.
    #[arg(long, value_name = "DIR")]
    pub cache: Option<std::path::PathBuf>,
    /// An `openai:` embedder: call every time; neither read nor write the cache.
    #[arg(long, conflicts_with = "cache")]
    pub no_cache: bool,
    /// Also list every dropped row in this JSONL file: its position, `rollout_id`, `task_id`,
    /// the rule, the field and what matched (for review; written whole or not at all).
    #[arg(long, value_name = "FILE")]
    pub dropped: Option<std::path::PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: RowsOut,
    /// Where the lexical rules run.
    #[command(flatten)]
    pub cluster: crate::cli::ClusterArgs,
}

/// `wai select`.
#[derive(Debug, Args)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "each bool is a flag of the command line"
)]
pub(crate) struct SelectArgs {
    /// Scored rows (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(required = true, value_name = "SCORED")]
    pub inputs: Vec<String>,
    /// rl (whole mixed groups) or sft (passing demonstrations).
    #[arg(long, value_enum, default_value_t = SelectMode::Rl)]
    pub mode: SelectMode,
    /// Rows wanted (RL takes whole groups, so the last may overshoot).
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    pub target: usize,
    /// RL: the band on a task's pass rate, `LO,HI`.
    #[arg(long, value_delimiter = ',', value_name = "LO,HI", default_values_t = [0.2, 0.8])]
    pub band: Vec<f64>,
    /// RL: truncated rows are dropped, kept (as riders that do not vote) or kept with reward 0.
    #[arg(long, value_enum, default_value_t = SelectTruncated::Drop)]
    pub truncated: SelectTruncated,
    /// SFT: the lowest reward of a demonstration.
    #[arg(long, default_value_t = 1.0, value_parser = share)]
    pub min_reward: f64,
    /// The agent has no tools (the do-nothing gate is off).
    #[arg(long)]
    pub no_tools: bool,
    /// RL: what the reward should pay for, for the hack scan of the selection (substrings of
    /// feature names).
    #[arg(long, value_delimiter = ',', value_name = "SUBSTR")]
    pub endorsed: Vec<String>,
    /// Preference: the smallest reward gap between chosen and rejected.
    #[arg(long, default_value_t = 1.0)]
    pub min_margin: f64,
    /// Preference: pairs per ask at most.
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub max_pairs_per_prompt: usize,
    /// Preference: the rejected reply closest in length to the chosen one.
    #[arg(long)]
    pub length_match: bool,
    /// Preference: a pairwise judge (`pairwise:MODEL-SPEC`, e.g. `pairwise:openai:gpt-4.1-mini`)
    /// asked which side of each pair served the person better; the pairs carry its verdict.
    #[arg(long, value_name = "pairwise:SPEC")]
    pub judge: Option<String>,
    /// Preference: ask the pairwise judge once per pair, not again with the sides swapped.
    #[arg(long, requires = "judge")]
    pub no_swap: bool,
    /// Preference: keep only the pairs where the pairwise judge picked the chosen reply.
    #[arg(long, requires = "judge")]
    pub keep_agreed: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub models: ModelArgs,
    /// The selected rows (`.parquet` or `.jsonl`), in training order; pairs are JSONL.
    #[arg(long, short, value_name = "OUT")]
    pub out: PathBuf,
}

/// `wai select --mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SelectMode {
    /// Whole mixed groups.
    Rl,
    /// Passing demonstrations.
    Sft,
    /// Chosen/rejected pairs of replies to the same ask (JSONL of pairs, for `wai export --format dpo`).
    Preference,
}

/// `wai select --truncated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SelectTruncated {
    /// Drop them.
    Drop,
    /// Keep them as riders.
    Keep,
    /// Keep them with reward 0.
    Penalize,
}

/// `wai export`.
#[derive(Debug, Args)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "each bool is a flag of the command line"
)]
pub(crate) struct ExportArgs {
    /// Rows (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(required = true, value_name = "ROWS")]
    pub inputs: Vec<String>,
    /// The wire shape.
    #[arg(long, value_enum, default_value_t = ExportFormat::Openai)]
    pub format: ExportFormat,
    /// The output: a JSONL file (openai, trl) or a folder (parquet).
    #[arg(long, short, value_name = "OUT")]
    pub out: PathBuf,
    /// The system prompt (a text file), prepended to every conversation.
    #[arg(long, value_name = "FILE")]
    pub system_prompt: Option<PathBuf>,
    /// The tools (a JSON list of OpenAI function schemas; bare and Anthropic shapes too), written
    /// on every row.
    #[arg(long, value_name = "TOOLS.json")]
    pub tools: Option<PathBuf>,
    /// What the loss covers: every assistant turn, or the last.
    #[arg(long, value_enum, default_value_t = ExportMask::Assistant)]
    pub mask_mode: ExportMask,
    /// One sample per assistant turn (the loss on that turn only).
    #[arg(long)]
    pub unroll: bool,
    /// Keep `<think>...</think>` blocks in assistant turns.
    #[arg(long)]
    pub keep_think: bool,
    /// Cut tool outputs longer than this many characters.
    #[arg(long, value_name = "N")]
    pub max_tool_output_chars: Option<usize>,
    /// Write even when a gate fails; the report says what failed.
    #[arg(long)]
    pub no_validate: bool,
    /// Replace an existing output folder (`--format parquet`) that is not empty; its contents
    /// are deleted.
    #[arg(long)]
    pub force: bool,
}

/// `wai export --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    /// OpenAI chat fine-tuning JSONL (`weight` on assistant messages), with the rows'
    /// metadata line for line in `NAME.meta.jsonl`.
    Openai,
    /// TRL rows (arguments as objects; prompt/completion with --mask-mode final or --unroll).
    Trl,
    /// A Hugging Face datasets folder of Parquet shards with a dataset card (the TRL rows).
    Parquet,
    /// prompt/chosen/rejected rows from `wai select --mode preference` pairs.
    Dpo,
}

/// `wai export --mask-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportMask {
    /// Every assistant turn.
    Assistant,
    /// The last assistant turn.
    Final,
}
