//! The command line, as clap definitions only: no engine types here.
//!
//! The doc comments here are the `--help` text, read in a terminal where backticks show as
//! backticks: names such as `run_std` or `world_state` stay bare there.
#![allow(
    clippy::doc_markdown,
    reason = "doc comments are the --help text, where backticks would print"
)]

use clap::{Args, Parser, Subcommand};

mod data;
mod lake;
mod measure;
mod shared;
mod simulate;
mod training;

pub(crate) use data::{CacheAction, CacheArgs, ConvertArgs, GenArgs, IngestArgs, SqlArgs};
pub(crate) use lake::{CollectArgs, LakeCommand, LakeCompactArgs, ReportArgs, RunArgs, WorkerArgs};
pub(crate) use measure::{
    CompareArgs, CompareJudgesArgs, GateArgs, GradeArgs, HoldoutArgs, JudgeTrustArgs,
    LabelsAttachArgs, LabelsCommand, MarkersArgs, PassAtArgs, VarianceArgs,
};
pub(crate) use shared::{
    ClusterArgs, HollowArgs, JudgePool, ModelArgs, QueryLimits, TrustFloors, WAI_ENV,
};
pub(crate) use simulate::{
    CoverageGapArgs, CoverageStudyArgs, DemoArgs, InitEvalsArgs, LoopArgs, ModelAgentArgs,
    PreflightArgs, SimMode, SimRepeat, SimulateArgs,
};
pub(crate) use training::{
    DecontaminateArgs, ExportArgs, ExportFormat, ExportMask, HackScanArgs, SelectArgs, SelectMode,
    SelectTruncated,
};

/// Evaluate tool-using LLM agents and turn their rollouts into trainer-ready data.
#[derive(Debug, Parser)]
#[command(name = "wai", version, about, long_about = None, max_term_width = 100)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Options every command takes.
    #[command(flatten)]
    pub global: GlobalArgs,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
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
pub(crate) enum Command {
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
    /// The model response cache: what it holds (`stats`), and emptying it (`clear`).
    ///
    /// Every reply a model server gives is kept, keyed by a hash of the exact request, so a rerun
    /// or a resumed run repeats no finished call.
    Cache(CacheArgs),
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
    Simulate(Box<SimulateArgs>),
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
    /// The batch job over a lake: a pipeline file's stages (ingest, grade, measures, compare,
    /// guard, select, export) on the input files no earlier run read, every report landed as
    /// rows for `wai sql --lake`, gates checked.
    ///
    /// A killed run resumes at its stage when started again; a run with no new input file does
    /// nothing. Exits 1 when a gate (or a stage's own check) fails, 2 when a stage is hollow.
    Run(RunArgs),
    /// A lake: make one (`init`), see what it holds (`status`).
    #[command(subcommand)]
    Lake(LakeCommand),
    /// Receive OpenTelemetry traces over OTLP/HTTP and land them in a lake as rows.
    ///
    /// Point an app's OTLP exporter at it (`OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318`):
    /// each request is fsynced to a write-ahead log before it is acknowledged, spans are
    /// assembled into conversations, and a conversation quiet for `--idle` lands as a row in
    /// `LAKE/collected/date=DAY/`, for `wai run`. Stops on SIGTERM or SIGINT after writing what
    /// it holds (exit 0); a killed collector replays its log when started again.
    Collect(CollectArgs),
    /// Execute DataFusion plan fragments for commands given `--cluster` (Arrow Flight over gRPC).
    ///
    /// Logs JSON lines on stderr: `listening` with the address to give `--cluster`, `task` for
    /// each fragment taken. Reads the paths and object-store URLs the coordinator's plans name,
    /// with this process's environment for store credentials. Stops on SIGTERM or SIGINT (exit 0).
    Worker(WorkerArgs),
    /// One self-contained HTML page of a run, to look at: pass@k with intervals, pass@1 by
    /// slice, failures by tool and tier, policy rules, compare, judge trust, hack scan, the
    /// funnels of guard and select, trends over a lake's runs, and a transcript browser.
    ///
    /// INPUT is scored rows (files, folders, globs, URLs), a lake folder (its runs' results), or
    /// the `--json` document of an earlier command (`wai --json compare A B > compare.json`).
    /// The page needs no network: CSS, script, charts and data are inside it. Exits 0 when the
    /// page is written, whatever the numbers say (`wai gate` is the check).
    Report(ReportArgs),
}
