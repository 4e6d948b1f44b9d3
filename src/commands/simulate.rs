//! `wai simulate`: asks from the grid, played by an agent against the mock world, landed as rows.

use std::io::Write;

use serde::Serialize;

use super::{Context, Outcome};
use crate::cli::{SimMode, SimRepeat, SimulateArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::checkpoint::Checkpoint;
use crate::pipeline::world_files::{read_asks, read_policy, read_tools, tasks_of};
use crate::report::envelope::{Envelope, Output};
use crate::stages::Session;
use crate::stages::simulate::{
    self, Inputs, Mode, Options, Progress, RepeatPolicy, Report, SimulateStage,
};

/// The option keys the simulation's warnings and errors name, and the flags that set them.
pub(super) const FLAGS: &[(&str, &str)] = &[
    ("`axes`", "--axis"),
    ("`budget`", "--budget"),
    ("`checkpoint`", "--checkpoint"),
    ("`fault_rate`", "--fault-rate"),
    ("`repeats`", "--repeats"),
    ("`rule_cap`", "--rule-cap"),
    ("`seeds`", "--seeds"),
    ("`wave`", "--wave"),
];

/// The option keys the run's notes name, and the flags that set them.
const NOTE_FLAGS: &[(&str, &str)] = &[("`wave`", "--wave"), ("`workers`", "--workers")];

/// The `--json` report: the stage's, with the command's notes; as text, with where the rows went.
#[derive(Serialize)]
struct Doc<'a> {
    #[serde(flatten)]
    report: &'a Report,
    notes: &'a [String],
    #[serde(skip)]
    args: &'a SimulateArgs,
}

impl std::fmt::Display for Doc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (rows, out) = (self.report.rows, self.args.out.display());
        write!(f, "{}", self.report.to_string().trim_end())?;
        write!(f, "\nwrote {rows} rows to `{out}`")?;
        if let Some(p) = &self.args.checkpoint {
            write!(f, " (checkpoint `{}`)", p.display())?;
        }
        self.notes.iter().try_for_each(|n| write!(f, "\nnote: {n}"))
    }
}

/// The stage's options from the command line (the files named are read here).
fn options(ctx: &Context, args: &SimulateArgs) -> Result<Options> {
    let tools = match &args.tools {
        Some(p) => read_tools(p)?,
        None => Vec::new(),
    };
    let mut opts = Options::new(tools, read_policy(args.policy.as_deref())?);
    if let Some(p) = &args.seeds {
        opts.seeds = read_asks(p)?;
    }
    opts.seed = args.seed;
    opts.budget = args.budget;
    opts.mode = match args.mode {
        SimMode::Explore => Mode::Explore,
        SimMode::Rl => Mode::Rl,
    };
    opts.repeat_policy = args.repeat_policy.map(|p| match p {
        SimRepeat::None => RepeatPolicy::None,
        SimRepeat::Fixed => RepeatPolicy::Fixed,
        SimRepeat::Successive => RepeatPolicy::Successive,
    });
    opts.repeats = args.repeats;
    opts.phrasings = args.phrasings;
    opts.situations = args.situations;
    opts.fault_rate = args.fault_rate;
    opts.hard_share = args.hard_share;
    opts.rule_cap = args.rule_cap;
    opts.prefer_success = args.all_faults.then_some(false);
    opts.probes = !args.no_probes;
    opts.runs = args.runs;
    opts.wave = args.wave.map(|w| usize::try_from(w).unwrap_or(usize::MAX));
    for a in &args.axes {
        let (name, values) = a
            .split_once('=')
            .ok_or_else(|| Error::Usage(format!("--axis `{a}`: write NAME=V1,V2")))?;
        let values: Vec<String> = values
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect();
        opts.axes.push((name.trim().to_owned(), values));
    }
    if let Some(spec) = &args.tasks {
        opts.tasks = Some(tasks_of(
            spec,
            &super::all_rows(ctx, std::slice::from_ref(spec))?,
        )?);
    }
    Ok(opts)
}

/// The model agent's flags, given for an agent that is not a model, are a usage error rather
/// than ignored.
#[allow(
    clippy::float_cmp,
    reason = "a flag left at its default is exactly the default"
)]
fn model_flags_need_a_model(args: &SimulateArgs) -> Result<()> {
    use crate::stages::simulate::agent::AgentSpec;
    use crate::stages::simulate::model;
    if matches!(AgentSpec::parse(&args.agent), Ok(AgentSpec::Model(_))) {
        return Ok(());
    }
    let given = [
        ("--scaffold", args.model_agent.scaffold.is_some()),
        ("--temperature", args.model_agent.temperature != 0.0),
        (
            "--agent-max-tokens",
            args.model_agent.agent_max_tokens != model::MAX_TOKENS,
        ),
        (
            "--max-steps",
            args.model_agent.max_steps != model::MAX_STEPS,
        ),
        ("--user-model", args.model_agent.user_model != "template"),
        ("--patience", args.model_agent.patience != "normal"),
        ("--max-turns", args.model_agent.max_turns.is_some()),
        (
            "--avg-turns",
            args.model_agent.avg_turns != model::AVG_TURNS,
        ),
        (
            "--user-temperature",
            args.model_agent.user_temperature != model::USER_TEMPERATURE,
        ),
        ("--logprobs", args.model_agent.logprobs),
        ("--execute", args.model_agent.execute.is_some()),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((flag, _)) => Err(Error::Usage(format!(
            "{flag} is for model agents (`--agent endpoint:MODEL@URL`, `openai:MODEL`, ...), not `--agent {}`",
            args.agent
        ))),
        None => Ok(()),
    }
}

/// A model agent's options (the policy, then the scaffold, as its system prompt), the user
/// model's spec and the tool program's command line, checked.
fn model_agent(
    a: &crate::cli::ModelAgentArgs,
    policy: &str,
) -> Result<(
    crate::stages::simulate::model::Options,
    Option<String>,
    Option<String>,
)> {
    let mut system = policy.to_owned();
    if let Some(path) = &a.scaffold {
        let scaffold = crate::pipeline::world_files::read_text(path)?;
        if !scaffold.trim().is_empty() {
            system = format!("{}\n\n{}", system.trim_end(), scaffold.trim());
        }
    }
    let patience = crate::stages::simulate::user::Patience::parse(&a.patience)
        .map_err(|e| Error::Usage(format!("--patience {e}")))?;
    let user_spec = match a.user_model.trim() {
        "none" | "template" => None,
        spec => Some(spec.to_owned()),
    };
    let model = crate::stages::simulate::model::Options {
        system: system.trim().to_owned(),
        temperature: a.temperature,
        max_tokens: a.agent_max_tokens,
        max_steps: a.max_steps,
        logprobs: a.logprobs,
        user: crate::stages::simulate::model::UserOptions {
            on: a.user_model.trim() != "none",
            patience,
            max_turns: a.max_turns,
            avg_turns: a.avg_turns,
            temperature: a.user_temperature,
        },
    };
    let execute = match a.execute.as_deref() {
        None => None,
        Some(spec) => Some(
            spec.strip_prefix("cmd:")
                .filter(|c| !c.trim().is_empty())
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "--execute `{spec}`: the tool world is a program, `cmd:PROGRAM` (as in `cmd:python3 world.py`)"
                    ))
                })?
                .to_owned(),
        ),
    };
    Ok((model, user_spec, execute))
}

/// The LLM writer `spec` names (`--writer`), or none for `template`.
fn model_writer(
    spec: &str,
    workers: &crate::pipeline::judges::Workers,
) -> Result<Option<crate::stages::simulate::llm_writer::ModelWriter>> {
    if spec.trim() == "template" {
        return Ok(None);
    }
    let spec = crate::models::ModelSpec::parse(spec.trim())
        .map_err(|e| Error::Usage(format!("--writer: {e}")))?;
    let model = crate::models::Model::new(spec, workers.models.settings.clone())?;
    Ok(Some(crate::stages::simulate::llm_writer::ModelWriter::new(
        std::sync::Arc::new(model),
    )?))
}

/// The grader in the loop (`--grade`) on `judge`: it grades each batch as it lands, and fails the
/// rows short of a full pass (what `wai grade` counts as passed).
fn steer<'a>(
    judge: &'a mut dyn crate::stages::grade::Judge,
    args: &crate::cli::LoopArgs,
    seed: u64,
) -> crate::stages::simulate::Steer<'a> {
    let stamp = crate::stages::grade::Stamp {
        judge: judge.name().to_owned(),
        version: judge.version().map(str::to_owned),
        run_id: format!("simulate_{seed}"),
        source: "grade",
    };
    crate::stages::simulate::Steer {
        name: args.grade.clone().unwrap_or_default(),
        grade: Box::new(move |batch| {
            let verdicts = judge.judge(&batch)?;
            let failed = verdicts
                .iter()
                .map(|v| v.reward.is_some_and(|r| r < 1.0))
                .collect();
            Ok((
                crate::stages::grade::apply(&batch, &verdicts, &stamp)?,
                failed,
            ))
        }),
        mutate: !args.no_mutate,
    }
}

/// Whether two model specs name one model on one server.
fn same_model(a: &str, b: &str) -> bool {
    use crate::models::ModelSpec;
    match (ModelSpec::parse(a), ModelSpec::parse(b)) {
        (Ok(a), Ok(b)) => {
            a.provider == b.provider && a.model == b.model && a.base_url == b.base_url
        }
        _ => a == b,
    }
}

/// Runs `wai simulate`.
pub(crate) fn run(ctx: &Context, args: &SimulateArgs) -> Result<Outcome> {
    let opts = options(ctx, args)?;
    model_flags_need_a_model(args)?;
    let (model, user_spec, execute) = model_agent(&args.model_agent, &opts.policy)?;
    let workers = crate::pipeline::judges::pool(&args.pool)?;
    let writer = model_writer(&args.loop_args.writer, &workers)?;
    let mut judge = args
        .loop_args
        .grade
        .as_deref()
        .map(|spec| crate::pipeline::judges::row_judge(spec, &workers))
        .transpose()?;
    let format = crate::pipeline::rows_out::output_format(&args.out, None)?;
    // The checkpoint is locked before it is read and held to the end: a second run on it would
    // play the same rollouts again.
    let mut checkpoint = args
        .checkpoint
        .as_deref()
        .map(Checkpoint::lock)
        .transpose()?;
    let mut agent = crate::pipeline::agents::agent(
        &args.agent,
        &args.behaviors,
        &workers,
        &model,
        crate::pipeline::agents::ModelExtras {
            user: user_spec.as_deref(),
            execute: execute.as_deref(),
        },
    )?;
    let (resumed, torn) = match &checkpoint {
        Some(c) => c.read()?,
        None => (Vec::new(), false),
    };
    let mut sink = crate::pipeline::rows_out::sink(&args.out, format)?;
    let bar = ctx.count_bar(args.budget * u64::from(args.runs.max(1)), "rollouts");
    let steer = judge
        .as_mut()
        .map(|judge| steer(judge.as_mut(), &args.loop_args, args.seed));
    let inputs = Inputs {
        steer,
        writer: writer.as_ref(),
        agent: agent.as_mut(),
        resumed,
        land: Box::new(|batch, fresh| {
            sink.write(&batch)?;
            checkpoint
                .as_mut()
                .map_or(Ok(()), |c| c.append(&batch, fresh))
        }),
        progress: Box::new(|p: &Progress| {
            bar.set_position(u64::from(p.run) * args.budget + p.rows);
            bar.set_message(p.line.clone());
            if args.progress_json {
                // A closed stderr stops the lines, not the run.
                let _ = writeln!(
                    std::io::stderr(),
                    "{}",
                    serde_json::to_string(p).unwrap_or_default()
                );
            }
        }),
    };
    let session = Session::from_context(datafusion::prelude::SessionContext::new());
    let mut report = futures::executor::block_on(crate::stages::run::<SimulateStage<'_>>(
        &session, inputs, &opts,
    ))
    .map_err(|e| super::error_flags_named(e, FLAGS))?;
    if args.loop_args.writer.trim() != "template" && same_model(&args.loop_args.writer, &args.agent)
    {
        report.warnings.push(format!(
            "same_model: `{}` words the asks and plays them, so the asks lean toward what it already handles; pass --writer with another model (or `template`)",
            args.loop_args.writer
        ));
    }
    if let Some(user) = &user_spec
        && same_model(user, &args.agent)
    {
        report.warnings.push(format!(
            "same_model: `{user}` plays both the agent and the person it serves, so the person's lines share the agent's blind spots; pass --user-model with another model (or `template`)"
        ));
    }
    super::flags_named_each(&mut report.warnings, FLAGS);
    bar.finish_and_clear();
    sink.finish()?;
    let command = args.agent.starts_with("cmd:").then_some(workers.workers);
    let mut notes = agent.notes();
    if let Some(w) = &writer {
        notes.extend(w.notes());
    }
    notes.extend(
        simulate::run_notes(&opts, agent.wave(), command, torn)
            .iter()
            .map(|n| super::flags_named(n, NOTE_FLAGS)),
    );
    let doc = Doc {
        report: &report,
        notes: &notes,
        args,
    };
    let text = doc.to_string();
    let mut envelope = Envelope::new("simulate", doc)
        .output(Output::new(args.out.display(), "rows").rows(report.rows))
        .warnings(report.warnings.iter().map(String::as_str));
    if let Some(p) = &args.checkpoint {
        envelope = envelope.output(Output::new(p.display(), "checkpoint"));
    }
    Ok(Outcome {
        text,
        json: envelope.to_json()?,
        status: if report.rows == 0 {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}
