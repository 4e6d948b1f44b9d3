//! One module per subcommand: each turns typed arguments into work and a report.
//!
//! Commands write data to the `out` they are given and return a [`Outcome`]: a report (text for
//! people, a versioned JSON document for programs) and an exit status. `main.rs` prints it.

pub(crate) mod cache;
pub(crate) mod collect;
mod compare;
pub(crate) mod compare_judges;
pub(crate) mod convert;
pub(crate) mod coverage;
pub(crate) mod coverage_study;
pub(crate) mod decontaminate;
pub(crate) mod demo;
pub(crate) mod export;
pub(crate) mod gate;
pub(crate) mod generate;
pub(crate) mod grade;
pub(crate) mod hack_scan;
pub(crate) mod holdout;
pub(crate) mod ingest;
pub(crate) mod init_evals;
pub(crate) mod judge_trust;
pub(crate) mod labels;
pub(crate) mod lake;
pub(crate) mod markers;
pub(crate) mod pass_at;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod select;
pub(crate) mod simulate;
pub(crate) mod sql;
pub(crate) mod variance;

use std::io::{IsTerminal, Write};

use crate::cli::{Cli, Command};
use crate::error::{ExitStatus, Result};
pub(crate) use crate::pipeline::context::Context;
pub(crate) use crate::pipeline::scratch::scratch;
use crate::pipeline::session;
pub(crate) use crate::pipeline::tables::{all_rows, load_table, rows_session};

/// What a command hands back to be printed (and what [`crate::run_command_line`] returns).
#[derive(Debug)]
pub struct Outcome {
    /// Lines for a person.
    pub text: String,
    /// The `--json` document (the envelope, `docs/json.md`).
    pub json: serde_json::Value,
    /// How the process ends.
    pub status: ExitStatus,
}

/// Keys of a report whose strings are the user's data (policy rules, asks, replies, judge
/// reasons, slice values, names, paths): the key-to-flag spelling never touches them, whatever
/// they quote.
const DATA_KEYS: &[&str] = &[
    "inputs",
    "outputs",
    "rules",
    "rule",
    "per_ask",
    "asks",
    "ask",
    "summary",
    "disagreements",
    "final_text",
    "reason",
    "prompt",
    "value",
    "values",
    "judge",
    "judges",
    "judge_name",
    "audited",
    "name",
    "names",
    "path",
];

impl Outcome {
    /// The outcome with the option keys its report's own sentences name (`` `key` ``, as a stage
    /// writes them) spelled as the flags that set them (see [`flags_named`]): in the `--json`
    /// document outside [`DATA_KEYS`], and in the text only where it prints one of those
    /// sentences, so a policy rule or a reply that quotes `` `budget` `` is printed as written.
    pub(crate) fn flags_named(mut self, flags: &[(&str, &str)]) -> Self {
        let mut sentences = Vec::new();
        advice_in(&self.json, flags, &mut sentences);
        // Longest first: a sentence that holds another is spelled whole.
        sentences.sort_by_key(|s| std::cmp::Reverse(s.len()));
        sentences.dedup();
        for sentence in &sentences {
            self.text = self.text.replace(sentence, &flags_named(sentence, flags));
        }
        flags_named_in(&mut self.json, flags);
        self
    }

    /// The outcome with fixed phrases of its text (a heading that names an option) replaced:
    /// `phrases` pairs each phrase as the stage prints it with the command line's.
    pub(crate) fn phrases_named(mut self, phrases: &[(&str, &str)]) -> Self {
        for (phrase, named) in phrases {
            self.text = self.text.replace(phrase, named);
        }
        self
    }
}

/// The strings of `value` outside [`DATA_KEYS`] that name one of `flags`' keys.
fn advice_in(value: &serde_json::Value, flags: &[(&str, &str)], out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) if flags.iter().any(|(key, _)| s.contains(key)) => {
            out.push(s.clone());
        }
        serde_json::Value::Array(items) => {
            for item in items {
                advice_in(item, flags, out);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                if !DATA_KEYS.contains(&key.as_str()) {
                    advice_in(item, flags, out);
                }
            }
        }
        _ => {}
    }
}

/// `text` (a stage's note or warning) with each option key it names, as a stage spells it
/// (`` `budget` ``, backticks and all), replaced by the flag that sets it (`--budget`): `flags`
/// pairs each key's spelling with its flag's, in the order they are replaced.
pub(crate) fn flags_named(text: &str, flags: &[(&str, &str)]) -> String {
    flags
        .iter()
        .fold(text.to_owned(), |text, (key, flag)| text.replace(key, flag))
}

/// [`flags_named`] over each of `texts` (a report's warnings or notes), in place.
pub(crate) fn flags_named_each(texts: &mut [String], flags: &[(&str, &str)]) {
    for text in texts {
        *text = flags_named(text, flags);
    }
}

/// A stage's error with the option keys its message names spelled as their flags (see
/// [`flags_named`]); the key of an [`crate::Error::Option`] itself is named by `name_the_flag`.
/// Only usage and option errors: a data error quotes the data (a row, an id) and is left as it
/// is.
pub(crate) fn error_flags_named(e: crate::Error, flags: &[(&str, &str)]) -> crate::Error {
    match e {
        crate::Error::Usage(message) => crate::Error::Usage(flags_named(&message, flags)),
        crate::Error::Option { key, message } => crate::Error::Option {
            key,
            message: flags_named(&message, flags),
        },
        e => e,
    }
}

/// [`flags_named`] over every string of a `--json` document (or of a serialized report) outside
/// [`DATA_KEYS`].
pub(crate) fn flags_named_in(value: &mut serde_json::Value, flags: &[(&str, &str)]) {
    match value {
        serde_json::Value::String(s) if flags.iter().any(|(key, _)| s.contains(key)) => {
            *s = flags_named(s, flags);
        }
        serde_json::Value::Array(items) => {
            for item in items {
                flags_named_in(item, flags);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                if !DATA_KEYS.contains(&key.as_str()) {
                    flags_named_in(item, flags);
                }
            }
        }
        _ => {}
    }
}

/// Runs the parsed command line, writing data to `out`.
/// The limits `--memory-limit` and `--query-timeout` set, checked.
pub(crate) fn limits(args: &crate::cli::QueryLimits) -> Result<crate::pipeline::limits::Limits> {
    /// The longest timeout taken: a week.
    const MAX_TIMEOUT: f64 = 7.0 * 86_400.0;
    let mut limits = crate::pipeline::limits::Limits::default();
    if let Some(m) = args.memory_limit {
        limits.memory = m;
    }
    if let Some(t) = args.query_timeout {
        if !(t > 0.0 && t <= MAX_TIMEOUT) {
            return Err(crate::Error::Usage(format!(
                "--query-timeout must be more than 0 and at most {MAX_TIMEOUT} seconds (a week), not {t}"
            )));
        }
        limits.timeout = Some(std::time::Duration::from_secs_f64(t));
    }
    Ok(limits)
}

pub(crate) fn run(cli: Cli, out: &mut dyn Write) -> Result<Outcome> {
    // A signal ends the workers this run starts, and the run; a collector ends itself on one,
    // after writing what it holds.
    if !matches!(
        cli.command,
        crate::cli::Command::Collect(_) | crate::cli::Command::Worker(_)
    ) {
        crate::pipeline::signals::install()?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::Error::Internal(format!("cannot start the async runtime: {e}")))?;
    let progress = !cli.global.json && !cli.global.quiet && std::io::stderr().is_terminal();
    let ctx = Context {
        runtime,
        progress,
        json: cli.global.json,
        quiet: cli.global.quiet,
    };
    let started = std::time::Instant::now();
    session::forget_files();
    // A decoder panic of an earlier run in this process is not this run's.
    let _ = crate::pipeline::read::take_decoder_panic();
    // A decoder panic on this thread (a query's stream polled here, not in a task) unwinds to
    // here: the data error naming the files. Any other panic is a bug and goes on as one.
    // `--cluster`: every worker answers with this version before any row is read, and the
    // sessions of this run are distributed; a failure names the workers gone silent.
    let cluster = match cluster_args(&cli.command) {
        Some(args) => crate::pipeline::cluster::Cluster::parse(&args.cluster, args.cluster_split)?,
        None => None,
    };
    // Only a command given a cluster touches the process's one (the Python package may run
    // another command in this process); it is left when `joined` drops, a panic included.
    let joined = cluster
        .as_ref()
        .map(|c| crate::pipeline::cluster::join(c, &ctx.runtime))
        .transpose()?;
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        dispatch(cli.command, &ctx, out)
    }))
    .unwrap_or_else(|panic| match crate::pipeline::read::take_decoder_panic() {
        Some(why) => Err(decoder_failed(&why)),
        None => std::panic::resume_unwind(panic),
    });
    drop(joined);
    let done = match (done, &cluster) {
        (Err(e), Some(cluster)) => Err(ctx
            .runtime
            .block_on(crate::pipeline::cluster::explain(cluster, e))),
        (done, _) => done,
    };
    let mut outcome = done.map_err(name_the_flag).map_err(name_the_files)?;
    outcome.json = enveloped(outcome.json, started.elapsed());
    Ok(outcome)
}

/// A Parquet input whose decoder panicked where no reading of wai's could catch it, as the data
/// error naming the files the run read.
fn decoder_failed(why: &str) -> crate::Error {
    let message = match files_read() {
        Some(files) => format!(
            "a Parquet input is not readable (its decoder failed: {why}); the query read {files}"
        ),
        None => format!("a Parquet input is not readable (its decoder failed: {why})"),
    };
    crate::Error::Input {
        stage: "read".into(),
        message,
    }
}

/// The files this run's queries read, as errors name them (the first three, then how many more),
/// or none when it read none.
fn files_read() -> Option<String> {
    let files = session::registered_files();
    if files.is_empty() {
        return None;
    }
    let shown: Vec<String> = files.iter().take(3).map(|f| format!("`{f}`")).collect();
    let more = if files.len() > 3 {
        format!(" and {} more", files.len() - 3)
    } else {
        String::new()
    };
    Some(format!("{}{more}", shown.join(", ")))
}

/// The `--cluster` options of the commands that take them.
fn cluster_args(command: &Command) -> Option<&crate::cli::ClusterArgs> {
    Some(match command {
        Command::Sql(a) => &a.cluster,
        Command::PassAt(a) => &a.cluster,
        Command::Markers(a) => &a.cluster,
        Command::Compare(a) => &a.cluster,
        Command::Variance(a) => &a.cluster,
        Command::JudgeTrust(a) => &a.cluster,
        Command::Grade(a) => &a.cluster,
        Command::Decontaminate(a) => &a.cluster,
        Command::Run(a) => &a.cluster,
        _ => return None,
    })
}

/// Runs `command`.
pub(crate) fn dispatch(command: Command, ctx: &Context, out: &mut dyn Write) -> Result<Outcome> {
    match command {
        Command::Convert(args) => convert::run(ctx, &args),
        Command::Sql(args) => sql::run(ctx, &args, out),
        Command::Cache(args) => cache::run(&args),
        Command::Gen(args) => generate::run(ctx, &args),
        Command::Simulate(args) => simulate::run(ctx, &args),
        Command::Demo(args) => demo::run(ctx, &args),
        Command::Export(args) => export::run(ctx, &args),
        Command::Select(args) => select::run(ctx, &args),
        Command::Preflight(args) => coverage::preflight(&args),
        Command::CoverageGap(args) => coverage::coverage_gap(ctx, &args),
        Command::InitEvals(args) => init_evals::run(&args),
        Command::PassAt(args) => pass_at::run(ctx, &args),
        Command::Markers(args) => markers::run(ctx, &args),
        Command::Ingest(args) => ingest::run(ctx, &args),
        Command::Grade(args) => grade::run(ctx, &args),
        Command::Gate(args) => gate::run(ctx, &args),
        Command::Variance(args) => variance::run(ctx, &args),
        Command::Compare(args) => compare::run(ctx, &args),
        Command::HoldoutSize(args) => holdout::run(ctx, &args),
        Command::JudgeTrust(args) => judge_trust::run(ctx, &args),
        Command::CompareJudges(args) => compare_judges::run(ctx, &args),
        Command::Labels(command) => labels::run(ctx, &command),
        Command::Decontaminate(args) => decontaminate::run(ctx, &args),
        Command::HackScan(args) => hack_scan::run(ctx, &args),
        Command::CoverageStudy(args) => coverage_study::run(&args),
        Command::Run(args) => run::run(ctx, &args),
        Command::Lake(command) => lake::run(ctx, &command),
        Command::Collect(args) => collect::run(ctx, &args),
        Command::Worker(args) => worker(ctx, &args),
        Command::Report(args) => report::run(ctx, &args),
    }
}

/// Runs `wai worker` until a signal stops it.
fn worker(ctx: &Context, args: &crate::cli::WorkerArgs) -> Result<Outcome> {
    let (address, taken) = crate::pipeline::cluster::worker::serve(
        &ctx.runtime,
        &crate::pipeline::cluster::worker::Serve {
            listen: args.listen.clone(),
            report_version: args.report_version.clone(),
            die_on_task: args.die_on_task,
        },
    )?;
    let json = crate::report::envelope::Envelope::new(
        "worker",
        serde_json::json!({ "address": address, "tasks": taken }),
    )
    .to_json()?;
    Ok(Outcome {
        text: format!(
            "served {} on {address}",
            crate::report::plural(taken, "plan fragment"),
        ),
        json,
        status: ExitStatus::Success,
    })
}

/// The `--json` envelope (`docs/json.md`) with the run's wall time filled in.
fn enveloped(mut doc: serde_json::Value, elapsed: std::time::Duration) -> serde_json::Value {
    if let Some(obj) = doc.as_object_mut() {
        obj.insert(
            "elapsed_s".into(),
            serde_json::Value::from(elapsed.as_secs_f64()),
        );
    }
    doc
}

/// A stage's option error names the option by its key; on the command line it is a flag. The
/// flag is the key with dashes (every option key is spelled so).
fn name_the_flag(e: crate::Error) -> crate::Error {
    match e {
        crate::Error::Option { key, message } => {
            crate::Error::Usage(format!("`--{}` {message}", key.replace('_', "-")))
        }
        e => e,
    }
}

/// The error of wai's a query carried out of a table it read (`DataFusionError::External`,
/// maybe under a context), or `e` as it is.
fn unwrap_ours(e: crate::Error) -> crate::Error {
    use datafusion::error::DataFusionError;
    let carried = |inner: &DataFusionError| match inner {
        DataFusionError::External(b) => b.is::<crate::Error>(),
        _ => false,
    };
    match e {
        crate::Error::Engine(DataFusionError::Context(_, inner)) if carried(&inner) => {
            unwrap_ours(crate::Error::Engine(*inner))
        }
        crate::Error::Engine(DataFusionError::External(inner)) => {
            match inner.downcast::<crate::Error>() {
                Ok(ours) => *ours,
                Err(other) => crate::Error::Engine(DataFusionError::External(other)),
            }
        }
        e => e,
    }
}

/// A Parquet file that does not decode inside a query (DataFusion's error names no file): the
/// error says which files the queries read.
/// A row whose JSON text column holds no JSON, found after the row left its reader: the error
/// says which Parquet files the run read (only a Parquet file can hold one).
fn name_the_files(e: crate::Error) -> crate::Error {
    // An error of wai's raised inside a query (rows in memory made at scan time) is itself, not
    // an engine error.
    let e = unwrap_ours(e);
    let engine = matches!(&e, crate::Error::Engine(_) | crate::Error::Arrow(_));
    // A decoder panic in a task DataFusion spawned ends the task, and the query with a join error
    // ("task ... panicked"), a bug by its looks; the panic hook kept the decoder's words.
    let decoder = if engine
        && e.exit_status() == ExitStatus::Internal
        && e.to_string().contains("panicked")
    {
        crate::pipeline::read::take_decoder_panic()
    } else {
        None
    };
    let engine_parquet = decoder.is_some() || (engine && e.exit_status() == ExitStatus::DataError);
    let not_json = matches!(&e, crate::Error::Input { stage, .. }
        if stage == crate::pipeline::row::NOT_JSON_STAGE);
    if !engine_parquet && !not_json {
        return e;
    }
    if let Some(why) = decoder {
        return decoder_failed(&why);
    }
    let single = session::registered_files().len() == 1;
    let Some(files) = files_read() else {
        return e;
    };
    let message = match e {
        crate::Error::Input { message, .. } if single => format!("{files}: {message}"),
        crate::Error::Input { message, .. } => {
            format!("{message}; the rows came from {files}")
        }
        e => format!("a Parquet input is not readable ({e}); the query read {files}"),
    };
    crate::Error::Input {
        stage: "read".into(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAGS: &[(&str, &str)] = &[("`budget`", "--budget"), ("`axes`", "--axis")];

    #[test]
    fn keys_are_spelled_as_their_flags_in_text_json_and_errors() {
        assert_eq!(
            flags_named("raise `budget` or pin `axes` tool=...", FLAGS),
            "raise --budget or pin --axis tool=..."
        );
        // A word without backticks is not a key.
        assert_eq!(flags_named("the budget", FLAGS), "the budget");
        let mut doc = serde_json::json!({"w": ["`budget` 100"], "n": 3, "o": {"t": "`axes`"}});
        flags_named_in(&mut doc, FLAGS);
        assert_eq!(
            doc,
            serde_json::json!({"w": ["--budget 100"], "n": 3, "o": {"t": "--axis"}})
        );
        let e = error_flags_named(crate::Error::Usage("start a new `budget`".into()), FLAGS);
        assert_eq!(e.to_string(), "start a new --budget");
        // A data error quotes the data: left as it is.
        let e = crate::Error::Input {
            stage: "s".into(),
            message: "row `budget` is torn".into(),
        };
        assert!(
            error_flags_named(e, FLAGS)
                .to_string()
                .contains("row `budget`")
        );
    }

    #[test]
    fn the_users_words_are_never_respelled() {
        // A policy rule and a reply that quote a key, beside the stage's own advice.
        let report = serde_json::json!({
            "rules": ["never exceed the customer's `budget`"],
            "disagreements": [{"final_text": "your `axes` are fine"}],
            "warnings": ["raise `budget`"],
        });
        let text = "rule: never exceed the customer's `budget`\nreply: your `axes` are fine\n\
                    warning: raise `budget`"
            .to_owned();
        let outcome = Outcome {
            text,
            json: serde_json::json!({"report": report}),
            status: ExitStatus::Success,
        }
        .flags_named(FLAGS);
        assert_eq!(
            outcome.text,
            "rule: never exceed the customer's `budget`\nreply: your `axes` are fine\n\
             warning: raise --budget"
        );
        assert_eq!(
            outcome.json["report"]["rules"][0],
            "never exceed the customer's `budget`"
        );
        assert_eq!(
            outcome.json["report"]["disagreements"][0]["final_text"],
            "your `axes` are fine"
        );
        assert_eq!(outcome.json["report"]["warnings"][0], "raise --budget");
    }
}
