//! `init-evals` planning: from what was found in (or given for) a project, the files of a ready
//! evals folder and what to say about each choice. The command finds the files and writes the
//! plan; this module only composes text.
//!
//! Inputs: the agent (a command, a function given or guessed, or none), the tools, the policy
//! and the seed asks, each with where it came from. Output: the files (name and text), what was
//! picked and why, and what is left to do.

mod templates;

use serde::Serialize;
use serde_json::{Value, json};

use self::templates::{
    JUDGE_PY, RUN_SH, TEST_JUDGE_PY, WAI_AGENT, WAI_JUDGE, agent_py, labels, shell_quote,
};
use crate::error::Result;
use crate::stages::simulate::tools::{Tool, described_ids};
use crate::stages::simulate::writer::intent;
use crate::stages::{Session, Stage};

/// An agent function: `(file or module, function, tool runner)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPick {
    /// A file path (relative to the project root) or a dotted module.
    pub module: String,
    /// The function that takes the ask.
    pub function: String,
    /// The module's tool runner (`run_tool`, ...), when it has one.
    pub runner: Option<String>,
    /// `module` is a file.
    pub is_file: bool,
    /// The file's folder is a package (it has an `__init__.py`).
    pub in_package: bool,
}

/// The agent, and how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentSource {
    /// A command agent already (`cmd:COMMAND`, as given).
    Command(String),
    /// A function named on the command line.
    Given(AgentPick),
    /// A function found in the project.
    Guessed(AgentPick),
    /// None found.
    None,
}

/// Something read, and how it was found: given (`path` as named), guessed (`path` relative to
/// the project), or not found.
#[derive(Debug, Clone, PartialEq)]
pub enum Found<T> {
    /// Named on the command line.
    Given(String, T),
    /// Found in the project.
    Guessed(String, T),
    /// Not found.
    None,
}

/// Options of the stage.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// The evals folder, as named (for the README and the next steps).
    pub dir: String,
}

impl crate::stages::Options for Options {}

/// What the stage reads: the project's root and what was found in it.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The project's root folder (where the agent runs from).
    pub root: String,
    /// The agent.
    pub agent: AgentSource,
    /// The tools.
    pub tools: Found<Vec<Tool>>,
    /// The policy text.
    pub policy: Found<String>,
    /// The seed asks, with the file they came from (as named).
    pub seeds: Option<(String, Vec<String>)>,
}

/// One file of the folder.
#[derive(Debug, Clone, PartialEq)]
pub struct File {
    /// Its name in the folder.
    pub name: &'static str,
    /// Its text.
    pub text: String,
}

/// The folder to write, and what was picked and is left to do.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The files, in writing order (the `--json` report lists their names).
    #[serde(serialize_with = "names")]
    pub files: Vec<File>,
    /// What is left to do by hand.
    pub todo: Vec<String>,
    /// What was picked, how, and which flag overrides it.
    pub picked: Vec<String>,
}

/// The files' names.
fn names<S: serde::Serializer>(files: &[File], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_seq(files.iter().map(|f| f.name))
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "wai init-evals")?;
        for p in &self.picked {
            writeln!(f, "  {p}")?;
        }
        Ok(())
    }
}

/// The init-evals stage: plans the folder (not relational; it writes nothing).
pub struct InitEvalsStage;

impl Stage for InitEvalsStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "init-evals";

    fn run(
        _session: &Session,
        inputs: Inputs,
        options: &Options,
    ) -> impl Future<Output = Result<Report>> {
        std::future::ready(Ok(plan(&inputs, options)))
    }
}

/// The folder for `inputs`.
pub fn plan(inputs: &Inputs, opts: &Options) -> Report {
    let mut picked: Vec<String> = Vec::new();
    let mut todo: Vec<String> = Vec::new();
    let (agent_spec, agent_file) = agent(inputs, &mut picked, &mut todo);
    let tools = tools(&inputs.tools, &mut picked, &mut todo);
    let functions: Vec<Value> = tools
        .iter()
        .map(|t| json!({"type": "function", "function": t.function}))
        .collect();
    let policy = policy(&inputs.policy, &mut picked, &mut todo);
    let (seeds, ids) = seeds(inputs, tools, &mut picked, &mut todo);
    let run_sh = RUN_SH.replace("AGENT_SPEC", &shell_quote(&agent_spec));
    let readme = format!(
        "# Evals for your agent (written by `wai init-evals`)\n\n{}\n\nThree commands, in order:\n\n```sh\npython3 {d}/test_judge.py        # the judge against hand-labelled transcripts (no agent, a second)\nsh {d}/run.sh                     # play each seed ask K=4 times, grade, gate at pass@1 >= 0.9 (exit 1 below, 2 hollow)\nwai sql --query failures_by_tool_tier --table {d}/out/scored.parquet   # what failed, by tool and tier\n```\n\nFiles: `agent.py` (your agent over wai's pipe; `wai_agent.py` is the protocol), `judge.py` (edit it to hold your policy; `wai_judge.py` is the protocol), `labels.jsonl` + `test_judge.py` (add a transcript whenever the judge is wrong), `run.sh` (knobs: `K`, `GATE`, `SEED`, `WAI`), `tools.json`, `policy.md`, `seeds.txt`.\n\nMore situations than the seeds: `wai simulate --tools tools.json --policy policy.md --seeds seeds.txt --agent 'cmd:python3 agent.py' --mode rl --budget 2000 --out out/rows.parquet` writes asks over every rule, stance and scheduled fault. Which rules your asks miss: `wai coverage-gap seeds.txt --tools tools.json --policy policy.md`.\n",
        picked
            .iter()
            .map(|p| format!("- {p}"))
            .collect::<Vec<_>>()
            .join("\n"),
        d = opts.dir
    );
    let first_id = ids.first().cloned().unwrap_or_else(|| "A1001".into());
    let mut files: Vec<(&'static str, String)> = vec![
        ("judge.py", JUDGE_PY.to_owned()),
        ("labels.jsonl", labels(&first_id)),
        ("test_judge.py", TEST_JUDGE_PY.to_owned()),
        ("run.sh", run_sh),
        ("README.md", readme),
        (
            "tools.json",
            serde_json::to_string_pretty(&functions).unwrap_or_else(|_| "[]".into()) + "\n",
        ),
        ("policy.md", policy),
        ("seeds.txt", seeds),
        ("wai_agent.py", WAI_AGENT.to_owned()),
        ("wai_judge.py", WAI_JUDGE.to_owned()),
    ];
    if let Some(a) = agent_file {
        files.insert(0, ("agent.py", a));
    }
    Report {
        files: files
            .into_iter()
            .map(|(name, text)| File { name, text })
            .collect(),
        todo,
        picked,
    }
}

/// What is left to do when the agent's tool runner was not found.
const ROUTE_TODO: &str =
    "agent.py: route the agent's tool calls through wai_agent.call_tool (see the TODO)";

/// The agent's spec for `run.sh` and the wrapper to write, if one is needed.
fn agent(
    inputs: &Inputs,
    picked: &mut Vec<String>,
    todo: &mut Vec<String>,
) -> (String, Option<String>) {
    let root = inputs.root.as_str();
    match &inputs.agent {
        AgentSource::Command(cmd) => {
            picked.push(format!(
                "agent: `{cmd}` (a command agent already; no wrapper written)"
            ));
            // run.sh runs from the evals folder: the command runs from the project's.
            let command = cmd.strip_prefix("cmd:").unwrap_or(cmd);
            (format!("cmd:cd {} && {command}", shell_quote(root)), None)
        }
        AgentSource::Given(pick) => {
            let (module, function) = (&pick.module, &pick.function);
            picked.push(format!("agent: {module}:{function} (`agent`)"));
            let file = agent_py(
                pick,
                &format!("Agent: {module}:{function} (given with --agent)."),
                root,
            );
            if pick.runner.is_none() {
                todo.push(ROUTE_TODO.into());
            }
            ("cmd:python3 agent.py".into(), Some(file))
        }
        AgentSource::Guessed(pick) => {
            let note = format!(
                "agent: {}:{} (guessed: a function named {} taking the ask; `agent` FILE.py:FUNCTION overrides){}",
                pick.module,
                pick.function,
                pick.function,
                pick.runner
                    .as_ref()
                    .map(|r| format!("; its tool runner `{r}` is routed through wai's mock world"))
                    .unwrap_or_default()
            );
            if pick.runner.is_none() {
                todo.push(ROUTE_TODO.into());
            }
            let file = agent_py(
                pick,
                &format!(
                    "Guessed: {}:{}. Another agent: wai init-evals --agent FILE.py:FUNCTION --force",
                    pick.module, pick.function
                ),
                root,
            );
            picked.push(note);
            ("cmd:python3 agent.py".into(), Some(file))
        }
        AgentSource::None => {
            let pick = AgentPick {
                module: "my_agent.py".into(),
                function: "answer".into(),
                runner: None,
                is_file: true,
                in_package: false,
            };
            let file = agent_py(
                &pick,
                "TODO: no agent function was found; point AGENT at yours (a function that takes the ask and returns the reply).",
                root,
            );
            picked.push("agent: none found (a function named answer, respond, chat, run, handle, reply or ask taking one argument); agent.py is a stub: pass `agent` FILE.py:FUNCTION".into());
            todo.push("agent.py: point it at your agent".into());
            ("cmd:python3 agent.py".into(), Some(file))
        }
    }
}

/// The tools, said where they came from.
fn tools<'i>(
    found: &'i Found<Vec<Tool>>,
    picked: &mut Vec<String>,
    todo: &mut Vec<String>,
) -> &'i [Tool] {
    match found {
        Found::Given(p, tools) => {
            picked.push(format!("tools: {p} ({} tools, `tools`)", tools.len()));
            tools
        }
        Found::Guessed(p, tools) => {
            picked.push(format!("tools: {p} ({} tools; guessed: the first JSON file that reads as a tool list; `tools` FILE overrides)", tools.len()));
            tools
        }
        Found::None => {
            picked.push("tools: none found (no JSON file reads as a tool list); tools.json is an empty list: pass `tools` FILE".into());
            todo.push("tools.json: your tools as OpenAI function schemas".into());
            &[]
        }
    }
}

/// The policy text, said where it came from (a stub when there is none).
fn policy(found: &Found<String>, picked: &mut Vec<String>, todo: &mut Vec<String>) -> String {
    match found {
        Found::Given(p, text) => {
            picked.push(format!("policy: {p} (`policy`)"));
            text.clone()
        }
        Found::Guessed(p, text) => {
            picked.push(format!(
                "policy: {p} (guessed by its name; `policy` FILE overrides)"
            ));
            text.clone()
        }
        Found::None => {
            picked.push("policy: none found (policy.md, system_prompt.txt, ...); policy.md is a stub: pass `policy` FILE".into());
            todo.push("policy.md: your system prompt".into());
            "# TODO: your agent's system prompt (its policy). Each clause becomes a rule the grid tests.\n".into()
        }
    }
}

/// `seeds.txt`: the asks given, or asks written from the ids the tool descriptions name; and
/// those ids.
fn seeds(
    inputs: &Inputs,
    tools: &[Tool],
    picked: &mut Vec<String>,
    todo: &mut Vec<String>,
) -> (String, Vec<String>) {
    let ids = described_ids(tools);
    let seeds = match &inputs.seeds {
        Some((p, asks)) => {
            picked.push(format!("seeds: {p} (`seeds`)"));
            format!(
                "# One ask per line; `#` starts a comment.\n{}\n",
                asks.iter()
                    .map(|a| a.replace('\n', " "))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        }
        None if !ids.is_empty() && !tools.is_empty() => {
            let asks: Vec<String> = ids
                .iter()
                .take(3)
                .enumerate()
                .map(|(i, id)| {
                    let t = &tools[i % tools.len()];
                    format!("I need help with {id}: could you {}?", intent(t))
                })
                .chain(
                    tools
                        .iter()
                        .skip(ids.len().min(3))
                        .map(|t| format!("Could you {} for me? It's {}.", intent(t), ids[0])),
                )
                .collect();
            picked.push(format!("seeds: {} asks written from the ids in the tool descriptions ({}); replace them with real asks", asks.len(), ids.iter().take(3).cloned().collect::<Vec<_>>().join(", ")));
            format!(
                "# One ask per line; `#` starts a comment. Replace these with asks your agent really gets.\n{}\n",
                asks.join("\n")
            )
        }
        None => {
            todo.push("seeds.txt: a few real asks".into());
            picked.push("seeds: no ids in the tool descriptions; seeds.txt holds generic asks: replace them".into());
            let asks: Vec<String> = tools
                .iter()
                .map(|t| format!("Could you {} for me?", intent(t)))
                .collect();
            format!(
                "# TODO: one real ask per line.\n{}\n",
                if asks.is_empty() {
                    "Can you help me with my account?".to_owned()
                } else {
                    asks.join("\n")
                }
            )
        }
    };
    (seeds, ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::simulate::tools::parse_tools;

    fn inputs(agent: AgentSource) -> Inputs {
        let tools = parse_tools(
            &json!([{"name": "lookup_order", "description": "Orders on file: A1001, A1002."}]),
            "t",
        )
        .unwrap();
        Inputs {
            root: "/p".into(),
            agent,
            tools: Found::Given("tools.json".into(), tools),
            policy: Found::None,
            seeds: None,
        }
    }

    fn file<'r>(report: &'r Report, name: &str) -> &'r str {
        &report.files.iter().find(|f| f.name == name).unwrap().text
    }

    #[test]
    fn a_command_agent_gets_no_wrapper_and_runs_from_the_project() {
        let opts = Options {
            dir: "evals".into(),
        };
        let r = plan(
            &inputs(AgentSource::Command("cmd:python3 bot.py".into())),
            &opts,
        );
        assert!(r.files.iter().all(|f| f.name != "agent.py"));
        // The spec is quoted for the shell, the root inside it too.
        assert!(
            file(&r, "run.sh").contains(r"'cmd:cd '\''/p'\'' && python3 bot.py'"),
            "{}",
            file(&r, "run.sh")
        );
        assert_eq!(r.picked.len(), 4);
        assert_eq!(r.todo, ["policy.md: your system prompt"]);
        assert!(file(&r, "policy.md").starts_with("# TODO"));
        assert!(
            file(&r, "seeds.txt").contains("A1001"),
            "{}",
            file(&r, "seeds.txt")
        );
        assert!(file(&r, "README.md").contains("python3 evals/test_judge.py"));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["files"][0], "judge.py");
    }

    #[test]
    fn a_function_without_a_runner_is_wrapped_with_a_todo() {
        let pick = AgentPick {
            module: "pkg/bot.py".into(),
            function: "answer".into(),
            runner: None,
            is_file: true,
            in_package: true,
        };
        let opts = Options { dir: "e".into() };
        let r = plan(&inputs(AgentSource::Guessed(pick)), &opts);
        assert_eq!(r.files[0].name, "agent.py");
        // A file in a package is imported as a module of the package.
        assert!(file(&r, "agent.py").contains("importlib.import_module(\"pkg.bot\")"));
        assert!(r.todo[0].starts_with("agent.py: route"));
        assert!(r.picked[0].contains("(guessed:"));
        let r = plan(&inputs(AgentSource::None), &opts);
        assert!(
            r.todo
                .contains(&"agent.py: point it at your agent".to_owned())
        );
    }
}
