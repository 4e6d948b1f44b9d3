//! Rollouts before traces, and evals for an agent: `simulate`, `demo`, `preflight`, `coverage-gap`, `init-evals`, `coverage-study`.

use super::shared::{JudgePool, share};
use clap::Args;
use std::path::PathBuf;

/// `wai simulate`'s flags for the loop around the agent: the writer of the asks and the grader
/// that steers.
#[derive(Debug, Args)]
pub(crate) struct LoopArgs {
    /// Who words the asks: `template` (offline), or a model spec: a model rewrites each
    /// templated ask as a person in its situation would put it, keeping its facts; an ask it
    /// words badly is the template's, counted.
    #[arg(long, default_value = "template", value_name = "SPEC")]
    pub writer: String,
    /// Grade rows as they land with this judge (`verify:FILE.toml`, `sql:EXPR`, `cmd:COMMAND`,
    /// `llm:MODEL-SPEC`): the rows carry its verdicts, and a failed row's situation is asked
    /// again in new words (`failure_mutation`), so the budget moves toward what it catches.
    #[arg(long, value_name = "JUDGE")]
    pub grade: Option<String>,
    /// With --grade: grade only, without asking failed situations again.
    #[arg(long, requires = "grade")]
    pub no_mutate: bool,
}

/// `wai simulate`'s flags for model agents (`--agent SPEC`): a usage error with any other agent.
#[derive(Debug, Args)]
pub(crate) struct ModelAgentArgs {
    /// Model agents: generation-only guidance (a text file) added to the system prompt after the
    /// policy; it is not the policy the rows record, and never reaches an export or an eval.
    #[arg(long, value_name = "FILE")]
    pub scaffold: Option<PathBuf>,
    /// Model agents: the sampling temperature (0 makes reruns free from the cache).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Model agents: the reply budget of one turn, in tokens.
    #[arg(long, default_value_t = crate::stages::simulate::model::MAX_TOKENS, value_name = "TOKENS")]
    pub agent_max_tokens: u32,
    /// Model agents: tool calls one rollout may make; at the cap it ends.
    #[arg(long, default_value_t = crate::stages::simulate::model::MAX_STEPS, value_name = "N")]
    pub max_steps: usize,
    /// Model agents: who plays the person the agent serves after the opening ask: a model spec,
    /// `template` (offline lines from the ask's situation), or `none` (the rollout ends at the
    /// agent's first answer in words).
    #[arg(long, default_value = "template", value_name = "SPEC")]
    pub user_model: String,
    /// Model agents: how soon the person walks away when the agent asks again: `short`,
    /// `normal`, `endless`, or the chances at the second and later questions (`0.35,0.6`).
    #[arg(long, default_value = "normal", value_name = "LEVEL")]
    pub patience: String,
    /// Model agents: the most agent turns one rollout takes (default: what a 4,096-token context
    /// holds after the tool schemas, 8 to 16).
    #[arg(long, value_name = "N")]
    pub max_turns: Option<usize>,
    /// Model agents: agent turns per rollout on average (each rollout's budget is drawn around
    /// it); 1 plays one reply per ask.
    #[arg(long, default_value_t = crate::stages::simulate::model::AVG_TURNS, value_name = "N")]
    pub avg_turns: f64,
    /// Model agents: the user model's sampling temperature.
    #[arg(long, default_value_t = crate::stages::simulate::model::USER_TEMPERATURE)]
    pub user_temperature: f64,
    /// Model agents: the user's real world answers the tool calls, `cmd:PROGRAM` over a JSON
    /// Lines pipe (`{id, tool, arguments, rollout}` in, `{id, result}` out), after the scheduled
    /// faults; on the pool of `--workers` and `--timeout`.
    #[arg(long, value_name = "cmd:PROGRAM")]
    pub execute: Option<String>,
    /// Model agents: ask for token log-probabilities and store them per step (`logprob`,
    /// `n_tokens`) and per row, when the server gives them.
    #[arg(long)]
    pub logprobs: bool,
}

/// `wai simulate`.
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
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
    /// Who plays the asks: `seeded`, `seeded:RATE`, `cmd:COMMAND`, or a model spec
    /// (`openai:MODEL`, `anthropic:MODEL`, `endpoint:MODEL@URL`, `ollama:MODEL`,
    /// `fireworks:MODEL`), played multi-turn with the policy and the tools.
    #[arg(long, default_value = "seeded")]
    pub agent: String,
    /// How a model agent plays, and who plays the person it serves.
    #[command(flatten)]
    pub model_agent: ModelAgentArgs,
    /// Who writes the asks and who grades the rows as they land.
    #[command(flatten)]
    pub loop_args: LoopArgs,
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
    /// Rollouts per wave, the unit the schedule is decided in, one size for every wave
    /// (default: 2048 for the seeded agent, 64 for a command agent, and for a model agent 64
    /// doubling each wave to 1024). The same seed and wave give the same rows at any
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
pub(crate) enum SimMode {
    /// Broad coverage.
    Explore,
    /// Groups for RL.
    Rl,
}

/// `wai simulate --repeat-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SimRepeat {
    /// All repeats at once, each situation once per phrasing.
    None,
    /// All repeats at once.
    Fixed,
    /// Two first, then fill mixed groups.
    Successive,
}

/// `wai preflight`.
#[derive(Debug, Args)]
pub(crate) struct PreflightArgs {
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
pub(crate) struct CoverageGapArgs {
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
pub(crate) struct InitEvalsArgs {
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
pub(crate) struct DemoArgs {
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

/// `wai coverage-study`.
#[derive(Debug, Args)]
pub(crate) struct CoverageStudyArgs {
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
