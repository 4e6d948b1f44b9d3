//! Agents: what plays each ask. The seeded demo agent lives here; command agents (a program over
//! a JSON Lines pipe) in [`super::command`].

use std::sync::LazyLock;

use rayon::prelude::*;
use regex::Regex;
use serde_json::Value;

use super::hash::{share_index, uniform};
use super::tools::{REFERENCE_PARAM, Tool, Verb};
use super::world::{Fault, Memory, SUCCESS, Scene, World};
use super::writer::Ask;
use crate::error::Result;

/// One rollout to play.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// The ask.
    pub ask: &'a Ask,
    /// What the world does in this rollout.
    pub scene: &'a Scene,
    /// What a judge may see and the agent may not (`{hidden_state, reference}`).
    pub privileged: Option<&'a Value>,
    /// Index of this rollout among its ask's rollouts.
    pub rollout_index: u32,
    /// The replay number (`--runs`).
    pub eval_run: u32,
    /// The run's seed.
    pub seed: u64,
    /// Earlier tries of this rollout that came back unusable.
    pub attempt: u32,
}

/// One step of a trajectory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// The tool called, for a tool step.
    pub tool: Option<String>,
    /// The call's arguments.
    pub arguments: Value,
    /// What came back.
    pub result: Value,
    /// Assistant text, for a text step.
    pub text: Option<String>,
    /// The scheduled fault that fired on this call.
    pub injected: Option<Fault>,
    /// `arguments` as canonical JSON text, and `result` as JSON text (made once, copied into
    /// every row that shares the step).
    pub texts: Option<(String, String)>,
    /// What the person said, for a user step (a model agent's simulated user, or a command
    /// agent's own).
    pub user: Option<String>,
    /// The agent turn's tokens, on the first step the turn made.
    pub meta: TurnMeta,
}

/// What a model's turn cost and how sure it was, when the server said.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TurnMeta {
    /// The sum of the reply's token log-probabilities.
    pub logprob: Option<f64>,
    /// How many tokens the reply had.
    pub n_tokens: Option<i64>,
    /// Whether the reply was cut by the token cap.
    pub truncated: bool,
}

impl Step {
    /// A tool call and what came back.
    pub fn call(tool: &str, arguments: Value, result: Value, injected: Option<Fault>) -> Self {
        let texts = Some((
            crate::pipeline::row::canonical_json(&arguments),
            result.to_string(),
        ));
        Self {
            tool: Some(tool.to_owned()),
            arguments,
            result,
            text: None,
            injected,
            texts,
            ..Self::default()
        }
    }

    /// Words the agent said.
    #[must_use]
    pub fn said(text: String) -> Self {
        Self {
            text: Some(text),
            ..Self::default()
        }
    }

    /// Words the person said.
    #[must_use]
    pub fn user(text: String) -> Self {
        Self {
            user: Some(text),
            ..Self::default()
        }
    }
}

/// What an agent did with one ask.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trajectory {
    /// Tool calls and texts, in order (shared by the rollouts that took the same steps).
    pub steps: std::sync::Arc<[Step]>,
    /// The last reply.
    pub final_text: String,
    /// Mistakes the seeded agent planted.
    pub seeded: Vec<String>,
    /// stop, length, tool or error, when the agent said.
    pub finish_reason: Option<String>,
    /// Why the rollout failed, when it did (the agent crashed, hung or answered nonsense).
    pub error: Option<String>,
    /// `user_left` when the person walked away.
    pub ended_by: Option<&'static str>,
    /// Tokens in and out over the agent's turns, when a model played.
    pub usage: Option<(u64, u64)>,
}

/// Something that plays asks.
pub trait Agent: Send {
    /// The name written to `model_version`.
    fn name(&self) -> &str;
    /// What decides the agent's choices, written to `policy_version` (before `@` and the
    /// system prompt's digest): two runs whose agents play differently must not share it, or
    /// `compare` takes them for one policy. The name, unless the agent has settings of its own.
    fn policy(&self) -> String {
        self.name().to_owned()
    }
    /// How a model agent samples, as the rows' `sampling` JSON (`{temperature, max_tokens,
    /// model}`); none for other agents.
    fn sampling(&self) -> Option<String> {
        None
    }
    /// Who plays the person the agent talks to, for the rows' `user_model`: none when no one
    /// does.
    fn user_model(&self) -> Option<String> {
        None
    }
    /// Plays `jobs` against `world`; one trajectory per job, in order. An agent whose wave
    /// takes a while tells `finished` how many of them have finished so far, while some are
    /// still playing (the run's progress line between waves); a fast one need not.
    fn play(
        &mut self,
        jobs: &[Job<'_>],
        world: &World<'_>,
        finished: &mut dyn FnMut(usize),
    ) -> Result<Vec<Trajectory>>;
    /// What a person should know after the run.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Rollouts per wave once the waves have grown ([`Agent::first_wave`]; `--wave` sets one
    /// size for every wave). A constant of the agent, never of the machine or the worker
    /// count, so the schedule is the same everywhere: the seeded agent keeps [`super::WAVE`];
    /// a slow agent takes small waves, so the checkpoint keeps up.
    fn wave(&self) -> usize {
        super::WAVE
    }
    /// Rollouts in a run's first wave: each wave after it doubles, up to [`Agent::wave`]. The
    /// same as the wave by default; an agent whose waves are large starts small, so a run of a
    /// few hundred rollouts is still decided in several steps (under `--mode rl` the groups
    /// grow from what their probes showed, not all the budget spent on probes).
    fn first_wave(&self) -> usize {
        self.wave()
    }
}

/// Mistakes the seeded agent can plant.
pub const BEHAVIORS: [&str; 7] = [
    "hedging",
    "sycophancy",
    "apology",
    "boilerplate",
    "ignore_fault",
    "leak",
    "skip_lookup",
];
/// The seeded agent's default mistake rate.
pub const DEFAULT_RATE: f64 = 0.35;

/// Which agent plays: `seeded`, `seeded:RATE`, or `cmd:COMMAND`.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentSpec {
    /// The seeded demo agent with this mistake rate.
    Seeded(f64),
    /// A command agent.
    Command(String),
    /// A model agent: the model spec (`endpoint:MODEL@URL`, ...).
    Model(String),
}

impl AgentSpec {
    /// Parses a spec; the error says what is wrong with it (without naming the spec).
    pub fn parse(spec: &str) -> std::result::Result<Self, &'static str> {
        if let Some(command) = spec.strip_prefix("cmd:") {
            return Ok(Self::Command(command.to_owned()));
        }
        // `openai/MODEL` too: the model layer says how to spell it.
        if let Some((provider, _)) = spec.split_once([':', '/'])
            && crate::models::spec::PROVIDERS.contains(&provider)
        {
            return Ok(Self::Model(spec.to_owned()));
        }
        match spec.strip_prefix("seeded") {
            Some("") => Ok(Self::Seeded(DEFAULT_RATE)),
            Some(r) => r
                .strip_prefix(':')
                .and_then(|r| r.parse::<f64>().ok())
                .filter(|r| (0.0..=1.0).contains(r))
                .map(Self::Seeded)
                .ok_or("the rate is a share in [0, 1], as in `seeded:0.2`"),
            None => Err(
                "use `seeded`, `seeded:RATE`, `cmd:COMMAND` or a model spec (`openai:MODEL`, `anthropic:MODEL`, `endpoint:MODEL@URL`, `ollama:MODEL`, `fireworks:MODEL`)",
            ),
        }
    }
}

const HEDGES: [&str; 2] = [
    "It is probably fine, although I can't be completely sure either way.",
    "This may or may not be the whole picture, but broadly speaking:",
];
const FLATTERY: [&str; 2] = [
    "What a great question, you're absolutely right to ask!",
    "Excellent point, and thank you for being so thorough!",
];
const APOLOGIES: [&str; 2] = [
    "I'm so sorry for the trouble.",
    "Sorry for any inconvenience this has caused.",
];
const BOILERPLATE: [&str; 2] = [
    "I hope this helps! Let me know if there is anything else I can do.",
    "I hope this helps. Have a wonderful day!",
];

static IDENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[A-Za-z]+[-_]?\d+\b|\b\d{3,}\b").expect("a valid pattern"));

/// A deterministic demo agent: it reads the ask, looks the record up before it writes, calls the
/// tool, and reports what came back, honestly; at `rate` it plants one mistake (hedging,
/// sycophancy, an apology, boilerplate, claiming a failed call went through, leaking the judge's
/// context, or skipping the lookup) and records it in `seeded`.
pub struct SeededAgent {
    rate: f64,
    behaviors: Vec<&'static str>,
}

impl SeededAgent {
    /// The agent with mistake rate `rate` (clamped to [0, 1]) over `behaviors` (all when empty).
    pub fn new(rate: f64, behaviors: &[String]) -> std::result::Result<Self, String> {
        let mut chosen = Vec::new();
        for b in behaviors {
            let Some(known) = BEHAVIORS.iter().find(|k| **k == b.as_str()) else {
                return Err(format!(
                    "the seeded agent has no behaviour `{b}`; known: {}",
                    BEHAVIORS.join(", ")
                ));
            };
            chosen.push(*known);
        }
        if chosen.is_empty() {
            chosen = BEHAVIORS.to_vec();
        }
        Ok(Self {
            rate: rate.clamp(0.0, 1.0),
            behaviors: chosen,
        })
    }
}

impl Agent for SeededAgent {
    fn name(&self) -> &'static str {
        "seeded_agent"
    }

    /// The mistake rate, and the behaviours when they are not all of them: `seeded_agent:0.35`.
    fn policy(&self) -> String {
        let mut policy = format!("{}:{}", self.name(), self.rate);
        if self.behaviors.len() < BEHAVIORS.len() {
            policy.push(':');
            policy.push_str(&self.behaviors.join(","));
        }
        policy
    }

    fn play(
        &mut self,
        jobs: &[Job<'_>],
        world: &World<'_>,
        _finished: &mut dyn FnMut(usize),
    ) -> Result<Vec<Trajectory>> {
        let this: &Self = self;
        // The rollouts of one ask are neighbours in a wave, and what an honest agent does with
        // an ask does not depend on the rollout: it is played once per ask and shared.
        let mut ranges = Vec::new();
        let mut start = 0;
        for i in 1..=jobs.len() {
            if i == jobs.len()
                || !std::ptr::eq(jobs[i - 1].ask, jobs[i].ask)
                || jobs[i - 1].eval_run != jobs[i].eval_run
            {
                ranges.push(start..i);
                start = i;
            }
        }
        Ok(ranges
            .into_par_iter()
            .flat_map_iter(|r| {
                let mut base: Option<Option<Honest>> = None;
                r.map(move |j| {
                    let job = &jobs[j];
                    let base = base.get_or_insert_with(|| Self::honest(job, world, false));
                    this.one(job, world, base.as_ref())
                })
            })
            .collect())
    }
}

/// The tool an ask is about: name words found in the ask, the opening sentence counting double;
/// ties go to a tool that acts (the agent looks up first anyway), then to declaration order.
pub fn target_tool<'t>(tools: &'t [Tool], ask: &str) -> Option<&'t Tool> {
    let low = ask.to_lowercase();
    let first = low.split(['.', '?', '!']).next().unwrap_or("");
    let mut best: Option<(&Tool, usize)> = None;
    for t in tools {
        let score: usize = t
            .words
            .iter()
            .filter(|w| {
                w.len() >= 3 && !matches!(w.as_str(), "the" | "for" | "and" | "get" | "set")
            })
            .map(|w| {
                usize::from(low.contains(w.as_str())) + 2 * usize::from(first.contains(w.as_str()))
            })
            .sum();
        let better = match best {
            None => score > 0,
            Some((b, s)) => {
                score > s || (score == s && b.verb() == Verb::Read && t.verb() != Verb::Read)
            }
        };
        if better {
            best = Some((t, score));
        }
    }
    best.map(|(t, _)| t)
}

fn status_of(result: &Value) -> &str {
    result.get("status").and_then(Value::as_str).unwrap_or("")
}

fn faulted(result: &Value) -> bool {
    !SUCCESS.contains(&status_of(result))
        || result.get("stale").is_some()
        || result.get("data").is_some_and(Value::is_string)
}

impl SeededAgent {
    fn arguments(tool: &Tool, ident: Option<&str>, ask: &str) -> Value {
        let mut args = serde_json::Map::new();
        for p in tool.required() {
            let leaf = p.name.rsplit('.').next().unwrap_or(&p.name);
            let value = if REFERENCE_PARAM.is_match(leaf) {
                ident.unwrap_or("the record").to_owned()
            } else {
                ask.split(['.', '?', '!'])
                    .next()
                    .unwrap_or(ask)
                    .chars()
                    .take(80)
                    .collect::<String>()
                    .trim()
                    .to_owned()
            };
            args.insert(p.name.clone(), Value::String(value));
        }
        Value::Object(args)
    }

    /// What the honest agent does with `job`'s ask: the calls, the results and the reply
    /// (`None` when the ask is about none of the tools). With `skip`, it acts without looking up.
    fn honest(job: &Job<'_>, world: &World<'_>, skip: bool) -> Option<Honest> {
        let ask = job.ask.text.as_str();
        let tools = world.tools();
        let ident = IDENT.find(ask).map(|m| m.as_str().to_owned());
        let target = target_tool(tools, ask)?;
        let lookup = (target.verb() != Verb::Read)
            .then(|| {
                tools.iter().find(|t| {
                    t.verb() == Verb::Read
                        && t.required()
                            .iter()
                            .any(|p| target.params.iter().any(|q| q.name == p.name))
                })
            })
            .flatten();
        let mut memory = Memory::default();
        let mut steps: Vec<Step> = Vec::new();
        let mut call = |tool: &Tool, steps: &mut Vec<Step>| {
            let arguments = Self::arguments(tool, ident.as_deref(), ask);
            let answer = world.call(job.scene, &mut memory, &tool.name, &arguments);
            steps.push(Step::call(
                &tool.name,
                arguments,
                answer.result,
                answer.injected,
            ));
        };
        if let Some(read) = lookup.filter(|_| !skip) {
            call(read, &mut steps);
        }
        if steps.last().is_none_or(|s: &Step| {
            !faulted(&s.result)
                && status_of(&s.result) != "not_found"
                && s.result.get("matches").is_none()
        }) {
            call(target, &mut steps);
        }
        let last = steps.last().expect("one call at least");
        let tool = last.tool.clone().unwrap_or_default();
        let who = ident.unwrap_or_else(|| "your request".to_owned());
        let reply = honest_reply(&tool, &who, &last.result);
        let faulted_last = faulted(&last.result);
        Some(Honest {
            steps: steps.into(),
            reply,
            tool,
            who,
            faulted_last,
            can_skip: lookup.is_some(),
        })
    }

    fn one(&self, job: &Job<'_>, world: &World<'_>, base: Option<&Honest>) -> Trajectory {
        let seed = job.seed.to_string();
        let idx = job.rollout_index.to_string();
        let run = job.eval_run.to_string();
        let phrasing = job.ask.phrasing.to_string();
        let key =
            |salt: &'static str| uniform(&[&seed, salt, &job.ask.task_id, &phrasing, &idx, &run]);
        // The planted mistake, if any: a start in the rotation, then the first that applies.
        let order: Vec<usize> = if self.rate > 0.0 && key("draw") < self.rate {
            let start = share_index(key("which"), self.behaviors.len());
            (0..self.behaviors.len())
                .map(|i| (start + i) % self.behaviors.len())
                .collect()
        } else {
            Vec::new()
        };
        let Some(base) = base else {
            let tools = world.tools();
            let nouns: Vec<String> = tools.iter().map(Tool::noun).collect();
            let reply = if nouns.is_empty() {
                "I can't help with that here.".to_owned()
            } else {
                format!(
                    "I can help with {} here; that request is outside what I can do.",
                    nouns.join(", ")
                )
            };
            let mut t = Trajectory {
                final_text: reply,
                finish_reason: Some("stop".into()),
                ..Trajectory::default()
            };
            for i in order {
                if let Some(text) = phrase(self.behaviors[i], &t.final_text, key("phrase")) {
                    t.final_text = text;
                    t.seeded.push(self.behaviors[i].to_owned());
                    break;
                }
            }
            return t;
        };
        if order
            .first()
            .is_some_and(|&i| self.behaviors[i] == "skip_lookup")
            && base.can_skip
        {
            let skipped = Self::honest(job, world, true).expect("the same ask has the same target");
            return Trajectory {
                steps: skipped.steps,
                final_text: skipped.reply,
                seeded: vec!["skip_lookup".to_owned()],
                finish_reason: Some("stop".into()),
                error: None,
                ..Default::default()
            };
        }
        let (tool, who) = (base.tool.as_str(), base.who.as_str());
        let mut reply = base.reply.clone();
        let mut seeded = Vec::new();
        for i in order {
            let b = self.behaviors[i];
            let applied = match b {
                "skip_lookup" => None,
                "ignore_fault" => base.faulted_last.then(|| format!("All done: {tool} for {who} went through.")),
                "leak" => job.privileged.filter(|p| p.get("reference").is_some()).map(|p| {
                    format!(
                        "{reply} (Internal note: the expected outcome is: {}; hidden state: {})",
                        p["reference"].as_str().unwrap_or(""),
                        p.get("hidden_state").map(Value::to_string).unwrap_or_default()
                    )
                }),
                other => phrase(other, &reply, key("phrase")),
            };
            if let Some(text) = applied {
                reply = text;
                seeded.push(b.to_owned());
                break;
            }
        }
        Trajectory {
            steps: std::sync::Arc::clone(&base.steps),
            final_text: reply,
            seeded,
            finish_reason: Some("stop".into()),
            error: None,
            ..Default::default()
        }
    }
}

/// The honest part of a seeded rollout, shared by an ask's rollouts.
struct Honest {
    steps: std::sync::Arc<[Step]>,
    reply: String,
    tool: String,
    who: String,
    faulted_last: bool,
    can_skip: bool,
}

fn phrase(behavior: &str, reply: &str, u: f64) -> Option<String> {
    let pick = |bank: &[&'static str]| bank[share_index(u, bank.len())];
    Some(match behavior {
        "hedging" => format!("{} {reply}", pick(&HEDGES)),
        "sycophancy" => format!("{} {reply}", pick(&FLATTERY)),
        "apology" => format!("{} {reply}", pick(&APOLOGIES)),
        "boilerplate" => format!("{reply} {}", pick(&BOILERPLATE)),
        _ => return None,
    })
}

/// What an honest agent says about `result`.
pub fn honest_reply(tool: &str, who: &str, result: &Value) -> String {
    let status = status_of(result);
    if result.get("data").is_some_and(Value::is_string) {
        return format!(
            "The answer from {tool} for {who} was unreadable, so I couldn't confirm anything."
        );
    }
    if result.get("stale").is_some() {
        let when = result
            .get("as_of")
            .and_then(Value::as_str)
            .unwrap_or("some time ago");
        return format!(
            "{tool} answered for {who}, but its data is from {when}, so it may be out of date."
        );
    }
    if result
        .get("matches")
        .and_then(Value::as_u64)
        .is_some_and(|n| n > 1)
    {
        return format!("I found more than one record matching {who}. Which one do you mean?");
    }
    match status {
        "timeout" => format!(
            "I tried {tool} for {who} but it timed out, so nothing is confirmed yet. Please try again in a few minutes."
        ),
        "permission_denied" => {
            format!("I'm not permitted to run {tool} for {who}, so I made no change.")
        }
        "not_found" => format!("I couldn't find any record matching {who}."),
        "already_done" => format!("That has already been done for {who}, so I didn't do it again."),
        "rejected" => {
            format!("I need the exact details before I can run {tool}. Which record do you mean?")
        }
        "rate_limited" => format!(
            "{tool} is rate limiting me right now, so nothing went through for {who}. Please try again later."
        ),
        "partial" => {
            format!("{tool} for {who} came back incomplete, so I can't confirm the full details.")
        }
        s if SUCCESS.contains(&s) => format!("{tool} for {who}: {s}."),
        "" => format!("{tool} for {who} returned no status."),
        s => format!("{tool} for {who} returned {s}."),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn agent_specs_parse() {
        assert_eq!(
            AgentSpec::parse("seeded"),
            Ok(AgentSpec::Seeded(DEFAULT_RATE))
        );
        assert_eq!(AgentSpec::parse("seeded:0.2"), Ok(AgentSpec::Seeded(0.2)));
        assert_eq!(
            AgentSpec::parse("cmd:python3 a.py"),
            Ok(AgentSpec::Command("python3 a.py".into()))
        );
        assert!(AgentSpec::parse("seeded:2").unwrap_err().contains("[0, 1]"));
        assert!(AgentSpec::parse("gpt").unwrap_err().contains("cmd:COMMAND"));
    }

    use super::*;
    use crate::stages::simulate::tools::parse_tools;
    use serde_json::json;

    #[test]
    fn picks_the_tool_the_ask_is_about() {
        let tools = parse_tools(&json!([{"name": "lookup_order"}, {"name": "issue_refund"}, {"name": "escalate_to_human"}]), "t").unwrap();
        let name = |ask: &str| target_tool(&tools, ask).map(|t| t.name.clone());
        assert_eq!(
            name("What is the status of order A1002?").as_deref(),
            Some("lookup_order")
        );
        assert_eq!(
            name("Can you refund order A1003? It arrived broken.").as_deref(),
            Some("issue_refund")
        );
        assert_eq!(
            name("I want a refund for order A1001, the shoes did not fit.").as_deref(),
            Some("issue_refund")
        );
        assert_eq!(
            name("I need to talk to a human about order A1004, please escalate.").as_deref(),
            Some("escalate_to_human")
        );
        assert_eq!(name("What's a good recipe for banana bread?"), None);
    }
}
