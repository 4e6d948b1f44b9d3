//! `wai init-evals`: a ready evals folder for an agent you already have.
//!
//! It finds (or is told) the agent function, the tools file and the policy, and writes: a
//! command-agent wrapper (`agent.py`, on `wai_agent.py`), a judge (`judge.py`, on
//! `wai_judge.py`), hand-labelled transcripts and a judge test that needs no agent, `run.sh`
//! (simulate with fixed repeats, grade, gate) and a README. It reads files without running them,
//! says what it guessed and which flag overrides it, and never overwrites without `--force`.

use std::fmt::Write as _;
use std::path::Path;

use super::Outcome;
use crate::cli::InitEvalsArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::project::{
    guess_agent, guess_policy, guess_tools, in_package, relative, runner_of, write_folder,
};
use crate::pipeline::world_files::{read_asks, read_text, read_tools};
use crate::report::envelope::{Envelope, Output};
use crate::stages::init_evals::{AgentPick, AgentSource, Found, InitEvalsStage, Inputs, Options};
use crate::stages::{Session, run as run_stage};

/// The agent `--agent` names, or the one found under `root`.
fn agent(spec: Option<&str>, root: &Path, out: &Path) -> Result<AgentSource> {
    let Some(spec) = spec else {
        return Ok(guess_agent(root, out).map_or(AgentSource::None, AgentSource::Guessed));
    };
    if spec.starts_with("cmd:") {
        return Ok(AgentSource::Command(spec.to_owned()));
    }
    let (module, function) = spec
        .rsplit_once(':')
        .filter(|(m, f)| !m.is_empty() && !f.is_empty())
        .ok_or_else(|| {
            Error::Usage(format!(
                "--agent `{spec}`: write module:function, path/to/file.py:function or cmd:COMMAND"
            ))
        })?;
    #[allow(
        clippy::case_sensitive_file_extension_comparisons,
        reason = "a Python module is `.py`, as Python spells it"
    )]
    let is_file = module.ends_with(".py");
    Ok(AgentSource::Given(AgentPick {
        module: module.to_owned(),
        function: function.to_owned(),
        runner: if is_file {
            runner_of(root, module)?
        } else {
            None
        },
        is_file,
        in_package: is_file && in_package(root, module),
    }))
}

/// The stage's inputs: what the flags name, else what the project holds.
fn inputs(args: &InitEvalsArgs, root: &Path, out: &Path) -> Result<Inputs> {
    let agent = agent(args.agent.as_deref(), root, out)?;
    let tools = match &args.tools {
        Some(p) => Found::Given(p.display().to_string(), read_tools(p)?),
        None => guess_tools(root, out).map_or(Found::None, |(p, tools)| {
            Found::Guessed(relative(&p, root), tools)
        }),
    };
    let policy = match &args.policy {
        Some(p) => Found::Given(p.display().to_string(), read_text(p)?),
        None => match guess_policy(root, out) {
            Some(p) => Found::Guessed(relative(&p, root), read_text(&p)?),
            None => Found::None,
        },
    };
    let seeds = match &args.seeds {
        Some(p) => Some((p.display().to_string(), read_asks(p)?)),
        None => None,
    };
    Ok(Inputs {
        root: root.display().to_string(),
        agent,
        tools,
        policy,
        seeds,
    })
}

/// The option keys the picked lines name, and the flags that set them.
const FLAGS: &[(&str, &str)] = &[
    ("`agent`", "--agent"),
    ("`policy`", "--policy"),
    ("`seeds`", "--seeds"),
    ("`tools`", "--tools"),
];

/// Runs `wai init-evals` in the current folder.
pub(crate) fn run(args: &InitEvalsArgs) -> Result<Outcome> {
    let root = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let out = if args.dir.is_absolute() {
        args.dir.clone()
    } else {
        root.join(&args.dir)
    };
    let d = args.dir.display();
    let opts = Options { dir: d.to_string() };
    let session = Session::from_context(datafusion::prelude::SessionContext::new());
    let inputs = inputs(args, &root, &out)?;
    let mut report =
        futures::executor::block_on(run_stage::<InitEvalsStage>(&session, inputs, &opts))?;
    super::flags_named_each(&mut report.picked, FLAGS);
    let existing: Vec<&str> = report
        .files
        .iter()
        .map(|f| f.name)
        .filter(|n| out.join(n).exists())
        .collect();
    if !existing.is_empty() && !args.force {
        return Err(Error::Usage(format!(
            "`{d}` already has {}; move them, or pass --force to overwrite",
            existing.join(", ")
        )));
    }
    write_folder(&out, &report.files)?;
    let names: Vec<&str> = report.files.iter().map(|f| f.name).collect();
    let mut text = report.to_string();
    let _ = writeln!(
        text,
        "wrote {} files to `{d}`: {}",
        names.len(),
        names.join(", ")
    );
    for t in &report.todo {
        let _ = writeln!(text, "todo: {t}");
    }
    let _ = write!(
        text,
        "next:\n  python3 {d}/test_judge.py\n  sh {d}/run.sh\n  wai sql --query failures_by_tool_tier --table {d}/out/scored.parquet"
    );
    let envelope = Envelope::new("init-evals", &report).output(Output::new(&d, "folder"));
    Ok(Outcome {
        text,
        json: envelope.to_json()?,
        status: ExitStatus::Success,
    })
}
