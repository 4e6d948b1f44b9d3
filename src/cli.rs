//! The command line, as clap definitions only: no engine types here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::report::table;

/// Evaluate tool-using LLM agents and turn their rollouts into trainer-ready data.
#[derive(Debug, Parser)]
#[command(name = "wai", version, about, long_about = None, max_term_width = 100)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Options every command takes.
    #[command(flatten)]
    pub global: GlobalArgs,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Print one versioned JSON document on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Print only errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Log more (repeat for more); `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Convert rows between JSONL (the reference's row format) and Parquet (schema v1).
    ///
    /// Inputs may be files, folders, globs or object-store URLs (s3://, gs://, az://, http(s)://,
    /// file://), in any mix of JSONL and Parquet. The output format follows `--out`'s extension
    /// unless `--to` says otherwise. The output is written whole or not at all.
    Convert(ConvertArgs),
    /// Run SQL over rows (DataFusion SQL, with JSON functions for the JSON text columns).
    ///
    /// `--table PATH` makes table `rows`; `--table NAME=PATH` names it. Repeat `--table` to add
    /// files (a table may span several). Queries are read-only.
    Sql(SqlArgs),
    /// The whole loop on built-in data, offline: simulate a refund-support agent, grade it with a
    /// program judge of its policy, and print pass@k, failures by tool and tier, and warnings.
    ///
    /// No network and no key. The rows land in a folder of Parquet files to query with `wai sql`.
    Demo(DemoArgs),
    /// Simulate rollouts offline: asks from a covering grid over the tools and policy, played by
    /// an agent against a mock tool world with scheduled faults, one row per rollout.
    ///
    /// Agents: `seeded[:RATE]` (a deterministic demo agent that plants mistakes at RATE) or
    /// `cmd:COMMAND` (any program over a JSON Lines pipe; see the README). The same seed gives
    /// the same rows at any thread count; `--checkpoint` makes a killed run resumable.
    Simulate(SimulateArgs),
    /// What the simulator will make of your tools and policy, and what to fix before
    /// generating thousands of rows.
    Preflight(PreflightArgs),
    /// Which policy rules and tools a set of test asks reaches, and what the asks cannot say.
    #[command(name = "coverage-gap")]
    CoverageGap(CoverageGapArgs),
    /// Write a ready evals folder for an agent you already have: a command-agent wrapper, a
    /// judge, a judge test, `run.sh` (simulate, grade, gate) and a README.
    #[command(name = "init-evals")]
    InitEvals(InitEvalsArgs),
    /// The rows worth training on: RL keeps whole mixed groups, SFT diverse passing
    /// demonstrations; each gate says what it dropped and why.
    Select(SelectArgs),
    /// Rows into what trainers load: OpenAI chat JSONL, TRL, or a Hugging Face Parquet folder.
    ///
    /// Gates before anything is written: every tool call's arguments must round-trip to the
    /// target encoding, and no assistant turn may quote its row's privileged context.
    Export(ExportArgs),
    /// Generate deterministic synthetic rows (tasks of 4 to 8 rollouts, mixed pass rates).
    Gen(GenArgs),
    /// pass@1, pass^k and pass@k with 95% task-bootstrap intervals.
    ///
    /// Tasks group on `task_id`; only rewards of exactly 0 or 1 count (partial rewards are counted
    /// and named in the note; unjudged rows are skipped and counted). Exits 2 when no row has a
    /// binary reward (a hollow run).
    #[command(name = "pass-at")]
    PassAt(PassAtArgs),
    /// Per-marker means with 95% task-bootstrap intervals, and warnings for markers that never vary.
    Markers(MarkersArgs),
    /// Turn foreign traces into rows: OpenAI chat trajectories, τ-bench results, `OTel` GenAI spans.
    ///
    /// The format is detected from each file's first record unless `--format` names it. What has
    /// no column is kept in `extra`; bad records stop the run, or go to `--rejects`.
    Ingest(IngestArgs),
    /// Grade rows with judges: built-in verifiers, SQL, or any program over a pipe.
    ///
    /// Writes every row with its verdict (`reward`, `reason`, `markers`, `judge_name`,
    /// `judge_status`, `judge_meta`) and `lineage` stamped, then prints the pass@k line and the
    /// warnings that would make the number hollow. A judge that fails on a row marks that row
    /// (`error`, `timeout`, `invalid_result`, `missing_reward`); it never becomes 0.
    Grade(GradeArgs),
    /// The CI check on scored rows: the pass@k line and the warnings; exits 1 when pass@1 is below
    /// `--floor`, 2 when the run is hollow, 0 otherwise.
    Gate(GateArgs),
    /// How much a metric moves when the same tasks are run again: run_std, the noise band a
    /// comparison must clear, and a stability word.
    ///
    /// One input is split into runs by `lineage.eval_run` (else `lineage.scoring_run_id`, or `--by`);
    /// several inputs are one run each.
    Variance(VarianceArgs),
    /// Is the change real? Before against after, task by task, with a noise floor.
    ///
    /// Pairs tasks on `task_id`; compares pass@1 and every marker both sides carry (paired
    /// bootstrap interval, sign-flip p-value); reads each delta against the eval's own re-run
    /// noise (`--run-std`, or two or more `lineage.eval_run` values a side). Prints the headline
    /// first: PASS, NO DIFFERENCE, INCONCLUSIVE, NOT COMPARABLE (causes) or FAIL. Exits 1 when the
    /// gate fails (a significant regression, a guarded metric down, arms not comparable).
    Compare(CompareArgs),
    /// Tasks an eval needs to detect a gain, or the gain a task count can detect.
    ///
    /// From the binomial model (`--base`, `--k`), a known per-task sd (`--task-std`), or paired
    /// rows of a previous eval (`--before`, `--after`), which measure the sd pairing buys.
    #[command(name = "holdout-size")]
    HoldoutSize(HoldoutArgs),
    /// Can the judge be trusted? Its agreement with hand labels, and whether that number holds.
    ///
    /// Reads rows that carry `gold_reward` (0/1, from `wai labels attach`) beside the judge's
    /// `reward`: agreement with its Wilson interval, Cohen's kappa, agreement on two held-out
    /// halves of the tasks, length bias, and the disagreements to review. Prints PASS, FAIL,
    /// NOT MEASURED (with how many labels to collect) or INCONCLUSIVE first; exits 1 unless PASS.
    #[command(name = "judge-trust")]
    JudgeTrust(JudgeTrustArgs),
    /// Several judges on the same hand-labeled rows, one table ranked by kappa.
    ///
    /// Each judge (`--judge NAME=SPEC`, repeated) grades its own copy of the rows that carry
    /// `gold_reward`; the table gives agreement with its 95% interval, kappa, the leak rate (gold
    /// failures passed), unsure and unjudged rows, and seconds per row, and names the best judge.
    /// Exits 1 when no judge clears the floors.
    #[command(name = "compare-judges")]
    CompareJudges(CompareJudgesArgs),
    /// Hand labels: attach them to rows as gold (`wai labels attach`).
    #[command(subcommand)]
    Labels(LabelsCommand),
    /// Drop training rows that overlap an eval set: same task, exact text, near copy (word
    /// n-gram coverage), and with `--embedder` close embeddings of another task.
    ///
    /// Streams the training rows past an index of the eval side and writes the rows kept. The
    /// report counts both directions (training rows dropped per rule, eval items touched) and
    /// names every rule that could not run.
    Decontaminate(DecontaminateArgs),
    /// What would a policy trained on this reward learn? Features that separate reward within
    /// a task, against a permutation floor.
    ///
    /// Ranks the hand tier (reply length, tool calls, turns, truncation, surface counts, tools,
    /// markers), `--feature` SQL expressions and the most common words and word pairs by their
    /// within-task correlation with the reward, marks those above the noise floor, and names the
    /// regime: TRAIN, REWARD HACK, POOL EXHAUSTED, NO SIGNAL, DEGENERATE or UNKNOWN. Exits 1 on
    /// REWARD HACK.
    #[command(name = "hack-scan")]
    HackScan(HackScanArgs),
    /// Development: the coverage study of every interval wai prints (docs/statistics.md).
    ///
    /// Simulates eval runs from known truths and prints, per cell, the share of runs whose
    /// interval holds the truth. Seeded and deterministic at any thread count.
    #[command(name = "coverage-study", hide = true)]
    CoverageStudy(CoverageStudyArgs),
}

/// `wai hack-scan`.
#[derive(Debug, Args)]
pub struct HackScanArgs {
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
pub struct DecontaminateArgs {
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
    /// Also list every dropped row in this JSONL file: its position, `rollout_id`, `task_id`,
    /// the rule, the field and what matched (for review; written whole or not at all).
    #[arg(long, value_name = "FILE")]
    pub dropped: Option<std::path::PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: RowsOut,
}

/// The floors a judge must clear against hand labels (`judge-trust`, `compare-judges`).
#[derive(Debug, Args)]
pub struct TrustFloors {
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
pub struct JudgePool {
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
}

/// The variable that lists more names for `--env`.
pub const WAI_ENV: &str = "WAI_ENV";

/// `wai simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The agent's tools: a JSON list of OpenAI function schemas (bare `{name, description,
    /// parameters}` and Anthropic `input_schema` tools are read too).
    #[arg(long, value_name = "TOOLS.json")]
    pub tools: Option<PathBuf>,
    /// The policy (system prompt) text file: its clauses are the grid's rule axis.
    #[arg(long, value_name = "POLICY.md")]
    pub policy: Option<PathBuf>,
    /// Literal asks run first: a text file (one per line) or JSONL with a `prompt` field.
    #[arg(long, value_name = "FILE")]
    pub seeds: Option<PathBuf>,
    /// Who plays the asks: `seeded`, `seeded:RATE` or `cmd:COMMAND`.
    #[arg(long, default_value = "seeded")]
    pub agent: String,
    /// Only these planted mistakes (seeded agent), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "BEHAVIOUR")]
    pub behaviors: Vec<String>,
    /// The output file (`.parquet` or `.jsonl`), written whole at the end.
    #[arg(long, short, value_name = "OUT")]
    pub out: PathBuf,
    /// Every draw's seed: the same seed gives the same rows.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Rows per run.
    #[arg(long, default_value_t = 1000)]
    pub budget: u64,
    /// explore (one rollout per situation) or rl (groups of 8, allocated successively).
    #[arg(long, value_enum, default_value_t = SimMode::Explore)]
    pub mode: SimMode,
    /// How rollouts are allocated to an ask (default: none in explore, successive in rl).
    #[arg(long, value_enum)]
    pub repeat_policy: Option<SimRepeat>,
    /// Rollouts per wave, the unit the schedule is decided in (default: 2048 for the seeded
    /// agent, 64 for a command agent). The same seed and wave give the same rows at any
    /// `--workers`; a checkpoint resumes only under the wave it was written with.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub wave: Option<u64>,
    /// Rollouts per ask (k).
    #[arg(long, value_name = "K")]
    pub repeats: Option<u32>,
    /// Asks per situation (differently worded).
    #[arg(long, value_name = "N")]
    pub phrasings: Option<u32>,
    /// At most this many distinct situations.
    #[arg(long, value_name = "N")]
    pub situations: Option<u64>,
    /// Share of fault cells whose faults are kept (default 0.5; 0.8 in rl).
    #[arg(long, value_name = "SHARE")]
    pub fault_rate: Option<f64>,
    /// Share of hard-tier asks (ambiguous, boundary, adversarial).
    #[arg(long, value_name = "SHARE")]
    pub hard_share: Option<f64>,
    /// Rules (policy clauses) on the grid.
    #[arg(long, default_value_t = crate::stages::simulate::policy::RULE_CAP, value_name = "N")]
    pub rule_cap: usize,
    /// Pin an axis: `NAME=V1,V2` (tool, rule, stance, world_state, tool_condition, history).
    #[arg(long = "axis", value_name = "NAME=V1,V2")]
    pub axes: Vec<String>,
    /// Keep every fault cell a fault cell (default in rl); else most become success cells.
    #[arg(long)]
    pub all_faults: bool,
    /// No open-ended probes (off-topic, injection, gibberish asks) between the grid's asks.
    #[arg(long)]
    pub no_probes: bool,
    /// Replay the tasks of these rows (an earlier run's output) instead of writing asks.
    #[arg(long, value_name = "ROWS")]
    pub tasks: Option<String>,
    /// Runs of the same task set; each row's `eval_run` says which.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub runs: u32,
    /// Append every row to this JSONL file as it lands; a second call with the same file resumes.
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<PathBuf>,
    /// Progress as JSON lines on stderr.
    #[arg(long)]
    pub progress_json: bool,
    /// Command agents: worker processes and the per-ask timeout.
    #[command(flatten)]
    pub pool: JudgePool,
}

/// `wai simulate --mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SimMode {
    /// Broad coverage.
    Explore,
    /// Groups for RL.
    Rl,
}

/// `wai simulate --repeat-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SimRepeat {
    /// All repeats at once, each situation once per phrasing.
    None,
    /// All repeats at once.
    Fixed,
    /// Two first, then fill mixed groups.
    Successive,
}

/// `wai select`.
#[derive(Debug, Args)]
pub struct SelectArgs {
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
    /// The selected rows (`.parquet` or `.jsonl`), in training order; pairs are JSONL.
    #[arg(long, short, value_name = "OUT")]
    pub out: PathBuf,
}

/// `wai select --mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SelectMode {
    /// Whole mixed groups.
    Rl,
    /// Passing demonstrations.
    Sft,
    /// Chosen/rejected pairs of replies to the same ask (JSONL of pairs, for `wai export --format dpo`).
    Preference,
}

/// `wai select --truncated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SelectTruncated {
    /// Drop them.
    Drop,
    /// Keep them as riders.
    Keep,
    /// Keep them with reward 0.
    Penalize,
}

/// `wai export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
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
pub enum ExportFormat {
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
pub enum ExportMask {
    /// Every assistant turn.
    Assistant,
    /// The last assistant turn.
    Final,
}

/// `wai preflight`.
#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// The agent's tools (a JSON list of OpenAI function schemas; bare and Anthropic shapes too).
    #[arg(long, value_name = "TOOLS.json")]
    pub tools: PathBuf,
    /// The policy (system prompt) text file.
    #[arg(long, value_name = "POLICY.md")]
    pub policy: Option<PathBuf>,
    /// Rules on the grid.
    #[arg(long, default_value_t = crate::stages::simulate::policy::RULE_CAP, value_name = "N")]
    pub rule_cap: usize,
    /// The rows you mean to simulate: warns when the grid does not fit.
    #[arg(long, value_name = "ROWS")]
    pub budget: Option<u64>,
    /// Rollouts per ask you mean to run.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub repeats: u32,
}

/// `wai coverage-gap`.
#[derive(Debug, Args)]
pub struct CoverageGapArgs {
    /// The asks: a text file (one per line, `#` comments), JSONL with a `prompt` field, or rows
    /// (Parquet, a folder or a URL).
    #[arg(value_name = "ASKS")]
    pub asks: String,
    /// The agent's tools.
    #[arg(long, value_name = "TOOLS.json")]
    pub tools: PathBuf,
    /// The policy (system prompt) text file.
    #[arg(long, value_name = "POLICY.md")]
    pub policy: Option<PathBuf>,
    /// Graded rows of a run: rows per rule (`dims.rule`), and the rules no row exercised.
    #[arg(long, value_name = "SCORED")]
    pub rows: Option<String>,
    /// Match only the first N rules.
    #[arg(long, value_name = "N")]
    pub rule_cap: Option<usize>,
}

/// `wai init-evals`.
#[derive(Debug, Args)]
pub struct InitEvalsArgs {
    /// Your agent: `module:function` or `path/to/file.py:function` (a function that takes the
    /// ask and returns the reply), or `cmd:COMMAND` (a command agent already). Guessed when absent.
    #[arg(long, value_name = "SPEC")]
    pub agent: Option<String>,
    /// The tools file. Guessed when absent (a JSON file that reads as a tool list).
    #[arg(long, value_name = "TOOLS.json")]
    pub tools: Option<PathBuf>,
    /// The policy (system prompt) file. Guessed when absent (`policy.md`, `system_prompt.txt`, ...).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Seed asks (one per line). Written from the ids in the tool descriptions when absent.
    #[arg(long, value_name = "FILE")]
    pub seeds: Option<PathBuf>,
    /// Where the evals folder goes.
    #[arg(long, default_value = "evals", value_name = "DIR")]
    pub dir: PathBuf,
    /// Overwrite files that exist.
    #[arg(long)]
    pub force: bool,
}

/// `wai demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where the Parquet outputs go.
    #[arg(long, default_value = "wai-demo", value_name = "DIR")]
    pub dir: PathBuf,
    /// Rollouts to simulate.
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(1..))]
    pub budget: u64,
    /// The seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The seeded agent's mistake rate.
    #[arg(long, default_value_t = crate::stages::simulate::agent::DEFAULT_RATE, value_parser = share)]
    pub rate: f64,
}

/// `wai compare-judges`.
#[derive(Debug, Args)]
pub struct CompareJudgesArgs {
    /// Rows with gold labels (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(required = true, value_name = "SCORED")]
    pub inputs: Vec<String>,
    /// A judge: `NAME=SPEC` with SPEC `verify:FILE.toml`, `sql:EXPR` or `cmd:COMMAND`
    /// (repeat for each judge).
    #[arg(long = "judge", required = true, value_name = "NAME=SPEC")]
    pub judges: Vec<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub floors: TrustFloors,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pool: JudgePool,
}

/// `wai labels ...`.
#[derive(Debug, Subcommand)]
pub enum LabelsCommand {
    /// Attach labels to rows: each row's `gold_reward` becomes the majority of its labels, with
    /// `gold_kind` saying who wrote them and every label kept in `extra.gold_labels`.
    ///
    /// LABELS is JSON Lines (`{"key": ..., "label": 0/1, "annotator": ...}`), a JSON array of such
    /// objects, or a `{"KEY": 0/1}` map. A key is a row's `rollout_id`, `task_id#rollout_index`,
    /// or a bare `task_id` naming its only rollout; a label may instead carry `rollout_id`,
    /// `task_id` with `rollout_index`, or `prompt` with `final_text`. Nothing is written when a key
    /// names more than one row, or when no label names a row.
    Attach(LabelsAttachArgs),
}

/// `wai labels attach`.
#[derive(Debug, Args)]
pub struct LabelsAttachArgs {
    /// Rows (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(value_name = "ROWS")]
    pub rows: String,
    /// The labels file.
    #[arg(value_name = "LABELS")]
    pub labels: PathBuf,
    /// Who wrote the labels (a label's own `kind` wins): human, program or model.
    #[arg(long, default_value = "human")]
    pub kind: String,
    /// The annotator of labels that name none.
    #[arg(long, value_name = "NAME")]
    pub annotator: Option<String>,
    /// Drop the labels a row already carries before attaching these.
    #[arg(long)]
    pub replace: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: RowsOut,
}

/// `wai judge-trust`.
#[derive(Debug, Args)]
pub struct JudgeTrustArgs {
    /// Scored rows with gold labels (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(required = true, value_name = "SCORED")]
    pub inputs: Vec<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub floors: TrustFloors,
    /// The pass-rate gap between short and long replies that flags length bias.
    #[arg(long, default_value_t = 0.15)]
    pub length_gap_flag: f64,
    /// The share of labeled rows the judge may leave fractional before the check is void.
    #[arg(long, default_value_t = 0.10)]
    pub max_skipped_share: f64,
    /// The judge under audit (`verify:FILE.toml`, `sql:EXPR`, `cmd:COMMAND`; repeat to combine):
    /// re-judges a sample as-is and with neutral filler (consistency, length bias).
    #[arg(long = "judge", value_name = "SPEC")]
    pub judges: Vec<String>,
    /// Exploit probes to run with the judge: `all`, or names from filler, keyword_stuffing,
    /// success_claim, prompt_echo, sycophancy, empty_format, refusal.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "all|NAME,...",
        requires = "judges"
    )]
    pub probes: Vec<String>,
    /// The rubric the keyword probe draws its words from (text, or a file): default, each row's
    /// system message.
    #[arg(long, value_name = "TEXT|FILE")]
    pub rubric: Option<String>,
    /// Graded rows re-judged (chosen by a seeded hash of their `rollout_id`).
    #[arg(long, default_value_t = 40)]
    pub sample: usize,
    /// The seed of that choice.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The flip (or exploit) rate that flags.
    #[arg(long, default_value_t = 0.10)]
    pub flip_flag: f64,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pool: JudgePool,
}

/// `wai compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Rows of the before arm (files, folders, globs or URLs; JSONL or Parquet).
    #[arg(value_name = "BEFORE")]
    pub before: String,
    /// Rows of the after arm.
    #[arg(value_name = "AFTER")]
    pub after: String,
    /// The metric the gate reads: `pass_at_1` or `marker:NAME` (default: pass@1).
    #[arg(long, value_name = "METRIC")]
    pub target: Option<String>,
    /// Metrics that must not drop past the noise (names or `marker:NAME`, comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "METRIC")]
    pub must_not_regress: Vec<String>,
    /// Metrics where a drop is the win, beside the stock ones (refusal, hedging, ...).
    #[arg(long, value_delimiter = ',', value_name = "METRIC")]
    pub lower_is_better: Vec<String>,
    /// The slice table: a column, `dims.KEY`, or `none` (default: `category` when both arms
    /// share two or more of its values).
    #[arg(long, value_name = "COLUMN|dims.KEY|none")]
    pub by: Option<String>,
    /// A metric that must not rise without the target (over-optimisation check).
    #[arg(long, value_name = "METRIC")]
    pub proxy: Option<String>,
    /// The eval's re-run sd (from `wai variance`): one number for every metric, or
    /// `METRIC=X,...`.
    #[arg(long, value_name = "X|METRIC=X,...")]
    pub run_std: Option<String>,
    /// How many re-runs `--run-std` came from (the band then uses t at df = N - 1).
    #[arg(long, value_name = "N")]
    pub run_std_runs: Option<u32>,
    /// A column or `lineage` key naming each row's training seed: adds the seed-to-seed variance
    /// of trained arms to the headline interval.
    #[arg(long, value_name = "KEY")]
    pub train_runs: Option<String>,
    /// Trim each shared task to the same number of rollouts a side (seeded choice of rows).
    #[arg(long)]
    pub balance_rollouts: bool,
    /// Settings that differ on purpose, the change under test (prompt_hash, judge_version,
    /// temperature, max_tokens, user_model, writer_model): a note, not NOT COMPARABLE.
    #[arg(long, value_delimiter = ',', value_name = "SETTING")]
    pub changed: Vec<String>,
    /// Two-sided false-positive rate (intervals at 1 - alpha).
    #[arg(long, default_value_t = 0.05)]
    pub alpha: f64,
    /// Power of the sizing line.
    #[arg(long, default_value_t = 0.8)]
    pub power: f64,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Bootstrap replicates and sign flips.
    #[arg(long, default_value_t = 2000)]
    pub draws: u32,
    /// How the paired intervals are made (docs/statistics.md has the coverage of each).
    #[arg(long, value_enum, default_value_t = DeltaIntervalArg::T)]
    pub interval: DeltaIntervalArg,
}

/// `wai coverage-study`.
#[derive(Debug, Args)]
pub struct CoverageStudyArgs {
    /// Simulated eval runs a cell.
    #[arg(long, default_value_t = 2000)]
    pub runs: u32,
    /// Simulated runs of the 5,000-task cells (default: `--runs`).
    #[arg(long)]
    pub runs_largest: Option<u32>,
    /// Bootstrap replicates and sign flips a simulated run.
    #[arg(long, default_value_t = crate::stats::bootstrap::DRAWS)]
    pub draws: u32,
    /// The seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Only cells whose key contains one of these (`pass/u/k=4`, `n=10`, `compare`), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub cells: Vec<String>,
    /// Also write every row as JSON Lines here.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
}

/// `wai holdout-size`.
#[derive(Debug, Args)]
pub struct HoldoutArgs {
    /// The gain to detect (a pass-rate difference in (0, 1)).
    #[arg(long, value_name = "GAIN", required_unless_present = "tasks")]
    pub effect: Option<f64>,
    /// Instead: the gain this many tasks can detect.
    #[arg(long, value_name = "N")]
    pub tasks: Option<usize>,
    /// The base pass rate (read from `--before` when given).
    #[arg(long, default_value_t = 0.6)]
    pub base: f64,
    /// Rollouts per task (read from `--before` when given).
    #[arg(long, default_value_t = 4)]
    pub k: u32,
    /// Power.
    #[arg(long, default_value_t = 0.8)]
    pub power: f64,
    /// Two-sided false-positive rate.
    #[arg(long, default_value_t = 0.05)]
    pub alpha: f64,
    /// A known per-task sd of the difference (read off a compare interval).
    #[arg(long, value_name = "SD")]
    pub task_std: Option<f64>,
    /// Rows of a previous eval: base rate, k and their spread.
    #[arg(long, value_name = "ROWS")]
    pub before: Option<String>,
    /// Rows of the same tasks after a change: the paired sd.
    #[arg(long, value_name = "ROWS", requires = "before")]
    pub after: Option<String>,
    /// Seed of the range's bootstrap.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `wai variance`.
#[derive(Debug, Args)]
pub struct VarianceArgs {
    /// Rows of two or more runs of one task set (one input split by run key, or one input per
    /// run).
    #[arg(required = true, value_name = "RUN")]
    pub inputs: Vec<String>,
    /// The metric: `pass_at_1` or `marker:NAME`.
    #[arg(long, default_value = "pass_at_1")]
    pub metric: String,
    /// The run key: a column, else a key of `lineage` (default `lineage.eval_run`,
    /// then `lineage.scoring_run_id`).
    #[arg(long, value_name = "KEY")]
    pub by: Option<String>,
}

/// What makes a run hollow, for `grade` and `gate`.
#[derive(Debug, Args)]
pub struct HollowArgs {
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

/// `wai grade`.
#[derive(Debug, Args)]
pub struct GradeArgs {
    /// Rows: files, folders, globs or URLs.
    #[arg(required = true, value_name = "ROWS")]
    pub inputs: Vec<String>,
    /// A judge: `verify:FILE.toml` (built-in verifiers), `sql:EXPR` (the reward as a SQL
    /// expression over a row), `sql:QUERY` or `sql:FILE.sql` (a query over table `rows` returning
    /// `rollout_id, reward[, reason, markers...]`), `cmd:COMMAND` (a program reading one JSON
    /// request per line). Repeat to combine: a row scores its worst judge's reward.
    #[arg(long = "judge", required = true, value_name = "SPEC")]
    pub judges: Vec<String>,
    /// Where the scored rows go.
    #[command(flatten)]
    pub output: RowsOut,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub pool: JudgePool,
    /// The judge version stamped into `lineage.judge_version` (a verifier file's `version` wins).
    #[arg(long, value_name = "VERSION")]
    pub judge_version: Option<String>,
    /// This scoring run's id in `lineage.scoring_run_id` (default: a hash of the judges and
    /// inputs, so the same grade gives the same file).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Also gate: exit 1 when pass@1 is below this floor, 2 when the run is hollow.
    #[arg(long, value_name = "FLOOR")]
    pub gate: Option<f64>,
    /// What makes the run hollow.
    #[command(flatten)]
    pub hollow: HollowArgs,
}

/// `wai gate`.
#[derive(Debug, Args)]
pub struct GateArgs {
    /// Scored rows: files, folders, globs or URLs.
    #[arg(required = true, value_name = "SCORED")]
    pub inputs: Vec<String>,
    /// The lowest pass@1 that passes.
    #[arg(long, value_name = "FLOOR")]
    pub floor: f64,
    /// What makes the run hollow.
    #[command(flatten)]
    pub hollow: HollowArgs,
}

/// `wai ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
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

/// `wai pass-at`.
#[derive(Debug, Args)]
pub struct PassAtArgs {
    /// Rows: files, folders, globs or URLs.
    #[arg(required = true, value_name = "ROWS")]
    pub inputs: Vec<String>,
    /// The k of pass^k and pass@k; a list (`1,2,3,4`) prints a line for each. Default: the
    /// smallest group size of 2 or more.
    #[arg(long, value_delimiter = ',', value_name = "K")]
    pub k: Vec<u32>,
    /// pass^k and pass@k are n/a for k below this.
    #[arg(long, default_value_t = crate::stages::pass_at::MIN_K)]
    pub min_k: u32,
    /// Also print one line per value of a column or `dims.KEY` (repeatable).
    #[arg(long, value_name = "COLUMN|dims.KEY")]
    pub by: Vec<String>,
    /// Count tasks with fewer than k verdicts that all agree at their unanimous value.
    #[arg(long)]
    pub unanimous_short: bool,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Bootstrap replicates (read by `--interval percentile`).
    #[arg(long, default_value_t = crate::stats::bootstrap::DRAWS)]
    pub draws: u32,
    /// How the intervals are made (docs/statistics.md has the coverage of each).
    #[arg(long, value_enum, default_value_t = IntervalArg::Wilson)]
    pub interval: IntervalArg,
}

/// `--interval` of `pass-at` and `markers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IntervalArg {
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
pub enum DeltaIntervalArg {
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

/// `wai markers`.
#[derive(Debug, Args)]
pub struct MarkersArgs {
    /// Rows: files, folders, globs or URLs.
    #[arg(required = true, value_name = "ROWS")]
    pub inputs: Vec<String>,
    /// Only these markers (repeatable); default: every marker seen.
    #[arg(long = "name", value_name = "MARKER")]
    pub names: Vec<String>,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Bootstrap replicates (read by `--interval percentile`).
    #[arg(long, default_value_t = crate::stats::bootstrap::DRAWS)]
    pub draws: u32,
    /// How the intervals are made (docs/statistics.md has the coverage of each).
    #[arg(long, value_enum, default_value_t = IntervalArg::Wilson)]
    pub interval: IntervalArg,
}

/// A row file format, for `--to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RowFormat {
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

/// `wai convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Input files, folders, globs or URLs.
    #[arg(required = true, value_name = "IN")]
    pub inputs: Vec<String>,
    /// Where the rows go.
    #[command(flatten)]
    pub output: RowsOut,
}

/// Where a command writes rows, and where bad input records go.
#[derive(Debug, Args)]
pub struct RowsOut {
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

/// `wai sql`.
#[derive(Debug, Args)]
pub struct SqlArgs {
    /// The query (DataFusion SQL). Omit it with `--query` or `--list`.
    #[arg(value_name = "QUERY", required_unless_present_any = ["canned", "list"])]
    pub sql: Option<String>,
    /// A table: `PATH` (named `rows`) or `NAME=PATH`. PATH is a file, folder, glob or URL.
    #[arg(long = "table", short = 't', value_name = "[NAME=]PATH")]
    pub tables: Vec<String>,
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
}

/// `wai gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
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
}

/// A share: a number in [0, 1] (NaN is none).
fn share(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} is not in [0, 1]"))
    }
}

/// A share above 0: (0, 1].
fn positive_share(s: &str) -> Result<f64, String> {
    match share(s)? {
        v if v > 0.0 => Ok(v),
        _ => Err(format!("{s} is not in (0, 1]")),
    }
}

/// A rate strictly between 0 and 1.
fn open_share(s: &str) -> Result<f64, String> {
    match share(s)? {
        v if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!("{s} is not in (0, 1)")),
    }
}

/// A count of one or more.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        Ok(_) => Err("0 is not allowed here: give 1 or more".into()),
        Err(_) => Err(format!("`{s}` is not a whole number")),
    }
}
