//! Model agents (`--agent SPEC` for any model spec: `openai:`, `anthropic:`, `endpoint:MODEL@URL`,
//! `ollama:`, `fireworks:`): the model is played multi-turn with the policy as its system
//! prompt and the tools as function schemas, and every tool call it makes is answered by the
//! mock world under the rollout's fault plan, exactly as the other agents' calls are. When the
//! model answers in words, the person it serves may speak again ([`super::user`]): they answer
//! its questions, push back on refusals and react to what it did, or walk away, within the
//! rollout's budget of agent turns; a model plays them (`--user-model`) or the template user
//! does. The rollout ends when the person has nothing more to say, walks away, or the turn or
//! step cap is reached.
//!
//! Calls go through the model layer ([`crate::models`]): its concurrency limit, retries, budget,
//! breaker and response cache. At temperature 0 a rollout's calls are the same requests on a
//! rerun, so a resumed or repeated run takes them from the cache. At a higher temperature each
//! rollout of an ask (and each re-roll) is a sample of its own.
//!
//! Malformed calls are recorded, answered and counted, never a crash: arguments that are not a
//! JSON object get an error result the model sees (and may correct), a tool the world does not
//! have gets the world's `unknown_tool`, and tool markup written as plain text (`<tool_call>`,
//! `"tool_calls"`) is counted in the notes.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use futures::StreamExt;
use regex::Regex;
use serde_json::{Value, json};

use super::agent::{Agent, Job, Step, Trajectory, TurnMeta};
use super::user::{self, Next, Patience};
use super::world::{Memory, World};
use crate::error::{Error, Result};
use crate::models::{CallError, ChatRequest, Message, Model, ToolCall};

/// Rollouts per wave once the waves have grown: a constant, so the schedule does not follow
/// `--concurrency`. Nothing is in flight between two waves, so a small wave leaves the calls
/// idle at each wave's end (at 256 and `--concurrency 64`, 1.41x the latency bound; 1.26x
/// with these waves, docs/benchmarks.md).
pub const MODEL_WAVE: usize = 1024;
/// Rollouts in a model agent's first wave: the waves double from it to [`MODEL_WAVE`] (64, 128,
/// 256, 512, then 1024), so a short run is decided in several steps.
pub const MODEL_FIRST_WAVE: usize = 64;
/// Tool calls one rollout may make by default.
pub const MAX_STEPS: usize = 16;
/// The reply budget of one agent turn by default, in tokens.
pub const MAX_TOKENS: u32 = 1024;
/// Agent turns per rollout on average by default (`--avg-turns`).
pub const AVG_TURNS: f64 = 12.0;
/// The user model's temperature by default.
pub const USER_TEMPERATURE: f64 = 0.7;
/// The reply budget of one line of the user model.
const USER_MAX_TOKENS: u32 = 180;

/// How long one agent call may take unless `--model-timeout` says: the larger of 300 s and a
/// second per four reply tokens (the reference's rule: 300 s at 1,024 tokens, 1,024 s at 4,096).
#[must_use]
pub fn call_timeout(max_tokens: u32) -> std::time::Duration {
    std::time::Duration::from_secs_f64((f64::from(max_tokens) / 4.0).max(300.0))
}

/// Who plays the person a model agent talks to, and how.
#[derive(Debug, Clone)]
pub struct UserOptions {
    /// Whether the person speaks after the opening ask (`--user-model none` says no: the rollout
    /// ends at the agent's first answer in words).
    pub on: bool,
    /// How soon they walk away when asked again.
    pub patience: Patience,
    /// The most agent turns a rollout takes (default: what a 4,096-token context holds after
    /// the tool schemas, [`user::default_max_turns`]).
    pub max_turns: Option<usize>,
    /// Agent turns per rollout on average.
    pub avg_turns: f64,
    /// The user model's temperature.
    pub temperature: f64,
}

impl Default for UserOptions {
    fn default() -> Self {
        Self {
            on: true,
            patience: Patience::default(),
            max_turns: None,
            avg_turns: AVG_TURNS,
            temperature: USER_TEMPERATURE,
        }
    }
}

/// How a model agent plays.
#[derive(Debug, Clone)]
pub struct Options {
    /// The system prompt: the policy, then the scaffold when one is given.
    pub system: String,
    /// Sampling temperature.
    pub temperature: f64,
    /// The reply budget of one turn.
    pub max_tokens: u32,
    /// Tool calls one rollout may make; at the cap the rollout ends (`finish_reason: tool`).
    pub max_steps: usize,
    /// Whether to ask for token log-probabilities (stored per step when the server gives them).
    pub logprobs: bool,
    /// The person on the other side.
    pub user: UserOptions,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            system: String::new(),
            temperature: 0.0,
            max_tokens: MAX_TOKENS,
            max_steps: MAX_STEPS,
            logprobs: false,
            user: UserOptions::default(),
        }
    }
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        if !(self.temperature.is_finite() && (0.0..=2.0).contains(&self.temperature)) {
            return Err(Error::option(
                "temperature",
                format!("must be in [0, 2], not {}", self.temperature),
            ));
        }
        if self.max_tokens < 16 {
            return Err(Error::option(
                "agent_max_tokens",
                format!("must be at least 16, not {}", self.max_tokens),
            ));
        }
        if self.max_steps == 0 || self.max_steps > 256 {
            return Err(Error::option(
                "max_steps",
                format!("must be between 1 and 256, not {}", self.max_steps),
            ));
        }
        if let Some(n) = self.user.max_turns
            && !(1..=256).contains(&n)
        {
            return Err(Error::option(
                "max_turns",
                format!("must be between 1 and 256, not {n}"),
            ));
        }
        if !(self.user.avg_turns.is_finite() && (1.0..=256.0).contains(&self.user.avg_turns)) {
            return Err(Error::option(
                "avg_turns",
                format!("must be between 1 and 256, not {}", self.user.avg_turns),
            ));
        }
        if !(self.user.temperature.is_finite() && (0.0..=2.0).contains(&self.user.temperature)) {
            return Err(Error::option(
                "user_temperature",
                format!("must be in [0, 2], not {}", self.user.temperature),
            ));
        }
        Ok(())
    }
}

/// What went wrong in the model's calls, over the run.
#[derive(Debug, Default)]
struct Malformed {
    arguments: AtomicU64,
    /// Calls written as markup in the reply's text, read as calls.
    markup_calls: AtomicU64,
    unknown_tool: AtomicU64,
    markup: AtomicU64,
    capped: AtomicU64,
}

/// What the person did, over the run.
#[derive(Debug, Default)]
struct People {
    /// Lines the person said after the opening ask.
    lines: AtomicU64,
    /// Lines the user model wrote that could not be used (the template's line went instead).
    rejected: AtomicU64,
    /// User-model calls that failed (the template's line went instead).
    failed: AtomicU64,
    /// Rollouts the person walked away from.
    left: AtomicU64,
    /// Rollouts that ended on the agent's question.
    on_question: AtomicU64,
    /// Rollouts.
    rollouts: AtomicU64,
}

/// A model that plays asks.
pub struct ModelAgent {
    model: Arc<Model>,
    user_model: Option<Arc<Model>>,
    executor: Option<super::execute::Executor>,
    runtime: tokio::runtime::Runtime,
    opts: Options,
    name: String,
    malformed: Malformed,
    people: People,
}

/// Where a rollout stands.
struct Thread {
    messages: Vec<Message>,
    steps: Vec<Step>,
    memory: Memory,
    usage: (u64, u64),
    /// How often the person has spoken, the opening ask included.
    user_turns: usize,
    tool_steps: usize,
    truncated: bool,
}

impl Thread {
    /// Counts the agent turn `answer`'s tokens; what its first step records of them.
    fn account(&mut self, answer: &crate::models::Reply) -> TurnMeta {
        self.usage.0 += answer.usage.input_tokens;
        self.usage.1 += answer.usage.output_tokens;
        let cut = matches!(
            answer.finish_reason.as_deref(),
            Some("length" | "max_tokens")
        );
        self.truncated |= cut;
        TurnMeta {
            logprob: answer.logprobs.map(|(sum, _)| sum),
            n_tokens: answer.logprobs.and_then(|(_, n)| i64::try_from(n).ok()),
            truncated: cut,
        }
    }

    /// A thread that `system` instructs and the ask `opening` opens.
    fn open(system: &str, opening: &str) -> Self {
        let mut messages = Vec::with_capacity(8);
        if !system.is_empty() {
            messages.push(Message::new("system", system.to_owned()));
        }
        messages.push(Message::new("user", opening.to_owned()));
        Self {
            messages,
            steps: Vec::new(),
            memory: Memory::default(),
            usage: (0, 0),
            user_turns: 1,
            tool_steps: 0,
            truncated: false,
        }
    }
}

impl ModelAgent {
    /// An agent on `model`.
    ///
    /// # Errors
    /// Options out of range, or no async runtime.
    pub fn new(model: Arc<Model>, opts: Options) -> Result<Self> {
        crate::stages::Options::check(&opts)?;
        let runtime = crate::models::runtime()?;
        let name = model.spec().model.clone();
        Ok(Self {
            model,
            user_model: None,
            executor: None,
            runtime,
            opts,
            name,
            malformed: Malformed::default(),
            people: People::default(),
        })
    }

    /// The same agent, with the user's program answering its tool calls (`--execute`) after the
    /// scheduled faults.
    #[must_use]
    pub fn with_executor(mut self, program: super::execute::Executor) -> Self {
        self.executor = Some(program);
        self
    }

    /// The same agent, with `model` playing the person (`--user-model`) instead of the template
    /// user.
    #[must_use]
    pub fn with_user_model(mut self, model: Arc<Model>) -> Self {
        self.user_model = Some(model);
        self
    }

    /// Which sample of its request a call is: at temperature 0 every rollout asks the same
    /// question the same way (sample 0, or the re-roll's number, so a re-roll after an unusable
    /// reply is asked afresh); above it, each rollout and re-roll draws its own.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a share in [0, 1) scaled into u32"
    )]
    fn sample(&self, job: &Job<'_>) -> u32 {
        if self.opts.temperature <= 0.0 {
            return job.attempt;
        }
        let mixed = super::hash::uniform(&[
            "agent-sample",
            &job.seed.to_string(),
            &job.rollout_index.to_string(),
            &job.eval_run.to_string(),
            &job.attempt.to_string(),
        ]);
        (mixed * f64::from(u32::MAX)) as u32
    }

    /// The draws' key of a rollout's person: the run's seed and the rollout.
    fn person(job: &Job<'_>) -> [String; 5] {
        [
            job.seed.to_string(),
            job.ask.task_id.clone(),
            job.ask.phrasing.to_string(),
            job.rollout_index.to_string(),
            job.eval_run.to_string(),
        ]
    }

    /// The rollout's budget of agent turns: drawn around `--avg-turns` when the person speaks,
    /// the cap when they do not.
    fn budget(&self, key: &[&str], n_tools: usize) -> usize {
        let u = &self.opts.user;
        let cap = u
            .max_turns
            .unwrap_or_else(|| user::default_max_turns(n_tools));
        if !u.on {
            return cap;
        }
        let cap = if u.avg_turns <= 1.0 { 1 } else { cap };
        let mut parts = vec!["turns"];
        parts.extend_from_slice(key);
        let drawn = user::turn_budget(super::hash::draw(&parts), cap, u.avg_turns);
        drawn.max(2).min(cap)
    }

    /// One rollout: agent turns, each answered by the world (calls) or the person (words),
    /// until the person is done or gone, or a cap.
    async fn rollout(
        &self,
        job: &Job<'_>,
        world: &World<'_>,
        tools: &[Value],
    ) -> Result<Trajectory> {
        let mut t = Thread::open(&self.opts.system, &job.ask.text);
        let person = Self::person(job);
        let key: Vec<&str> = person.iter().map(String::as_str).collect();
        let budget = self.budget(&key, tools.len());
        let sample = self.sample(job);
        let mut remaining = budget;
        let mut turn = 0;
        let mut closing_bonus = false;
        let mut last_spoken = String::new();
        self.people.rollouts.fetch_add(1, Ordering::Relaxed);
        let end = |t, final_text, finish, ended_by| self.end(t, final_text, finish, ended_by);
        while remaining > 0 {
            remaining -= 1;
            turn += 1;
            let req = ChatRequest {
                messages: t.messages.clone(),
                tools: tools.to_vec(),
                temperature: self.opts.temperature,
                max_tokens: self.opts.max_tokens,
                logprobs: self.opts.logprobs,
            };
            let answer = match self.model.chat(&req, sample).await {
                Ok(a) => a.reply,
                Err(CallError::Failed(m)) => {
                    return Ok(Trajectory {
                        steps: t.steps.into(),
                        error: Some(format!("the model call failed: {m}")),
                        usage: Some(t.usage),
                        ..Trajectory::default()
                    });
                }
                Err(CallError::Stop(e)) => return Err(e),
            };
            let meta = t.account(&answer);
            let mut answer = answer;
            self.read_markup(&mut answer);
            let text = answer.content.clone().unwrap_or_default();
            let spoken = user::strip_think(&text).trim().to_owned();
            if answer.tool_calls.is_empty() && spoken.is_empty() {
                // An empty turn: the same history again while the budget lasts.
                continue;
            }
            if !answer.tool_calls.is_empty() {
                if !self
                    .calls(&mut t, &answer, spoken, meta, job, world)
                    .await?
                {
                    self.malformed.capped.fetch_add(1, Ordering::Relaxed);
                    return Ok(end(t, String::new(), "tool".into(), None));
                }
                // Words said before the calls are not the answer to what they found.
                last_spoken.clear();
                if remaining == 0 && !closing_bonus {
                    remaining = 1;
                    closing_bonus = true;
                }
                continue;
            }
            // An answer in words.
            if looks_like_markup(&text) {
                self.malformed.markup.fetch_add(1, Ordering::Relaxed);
            }
            let finish = finish(answer.finish_reason.as_deref());
            // An agent that says its last line again after the person spoke is going round.
            let echo = t.user_turns >= 2
                && t.steps.iter().rev().find_map(|s| s.text.as_deref()) == Some(spoken.as_str());
            if echo {
                return Ok(end(t, spoken, finish, None));
            }
            let questions = t
                .steps
                .iter()
                .filter(|s| s.text.as_deref().is_some_and(user::asks))
                .count();
            t.messages.push(Message::new("assistant", spoken.clone()));
            let mut step = Step::said(spoken.clone());
            step.meta = meta;
            t.steps.push(step);
            last_spoken.clone_from(&spoken);
            if !self.opts.user.on {
                return Ok(end(t, spoken, finish, None));
            }
            if t.tool_steps == 0 && user::looks_unfinished(&spoken) && remaining > 0 {
                continue;
            }
            let now = user::Turn {
                key: &key,
                turn,
                user_turns: t.user_turns,
                budget,
                room: remaining > 0,
                line: &spoken,
                questions,
            };
            match user::next(&now, self.opts.user.patience) {
                Next::Done => return Ok(end(t, spoken, finish, None)),
                Next::Leave => return Ok(end(t, spoken, finish, Some("user_left"))),
                Next::Speak => {}
            }
            match self.user_line(job, &t, &spoken, &key, turn, world).await? {
                None => return Ok(end(t, spoken, finish, Some("user_left"))),
                Some(line) => {
                    self.people.lines.fetch_add(1, Ordering::Relaxed);
                    t.messages.push(Message::new("user", line.clone()));
                    t.steps.push(Step::user(line));
                    t.user_turns += 1;
                    // A line of the person's always gets an answer.
                    remaining = remaining.max(1);
                }
            }
        }
        // The budget ran out: on a tool step, the row ends on the call (`finish_reason: tool`).
        let finish = if last_spoken.is_empty() && t.steps.last().is_some_and(|s| s.tool.is_some()) {
            "tool"
        } else {
            "stop"
        };
        Ok(end(t, last_spoken, finish.into(), None))
    }

    /// Calls `answer` wrote as Qwen/Hermes markup in its text (a server without a tool-call
    /// parser), read as its calls, counted.
    fn read_markup(&self, answer: &mut crate::models::Reply) {
        if answer.tool_calls.is_empty()
            && let Some((calls, rest)) = answer
                .content
                .as_deref()
                .map(user::strip_think)
                .as_deref()
                .and_then(text_calls)
        {
            self.malformed
                .markup_calls
                .fetch_add(calls.len() as u64, Ordering::Relaxed);
            answer.tool_calls = calls;
            answer.content = (!rest.is_empty()).then_some(rest);
        }
    }

    /// The trajectory of the finished thread `t`, counted.
    fn end(
        &self,
        t: Thread,
        final_text: String,
        finish: String,
        ended_by: Option<&'static str>,
    ) -> Trajectory {
        let mut t = t;
        // A line of the person's that got no answer (an echo, an empty last reply) is not the
        // row's last word.
        while t.steps.last().is_some_and(|s| s.user.is_some()) {
            t.steps.pop();
        }
        if ended_by.is_some() {
            self.people.left.fetch_add(1, Ordering::Relaxed);
        }
        if user::asks(&final_text) {
            self.people.on_question.fetch_add(1, Ordering::Relaxed);
        }
        Trajectory {
            steps: t.steps.into(),
            final_text,
            finish_reason: Some(if t.truncated { "length".into() } else { finish }),
            ended_by,
            usage: Some(t.usage),
            ..Trajectory::default()
        }
    }

    /// Answers the tool calls of the agent's turn `answer` from the world (the words it said
    /// with them, `spoken`, first), onto `t`; false when the step cap cut the turn.
    ///
    /// # Errors
    /// With `--execute`, a tool program that cannot go on.
    async fn calls(
        &self,
        t: &mut Thread,
        answer: &crate::models::Reply,
        spoken: String,
        mut meta: TurnMeta,
        job: &Job<'_>,
        world: &World<'_>,
    ) -> Result<bool> {
        // Words said with the calls go on the turn's first call, as the reference records them.
        let mut words = (!spoken.is_empty()).then_some(spoken);
        let mut said = Message::new("assistant", answer.content.clone().unwrap_or_default());
        if said.content.as_deref() == Some("") {
            said.content = None;
        }
        said.tool_calls.clone_from(&answer.tool_calls);
        t.messages.push(said);
        for call in &answer.tool_calls {
            if t.tool_steps >= self.opts.max_steps {
                if let Some(w) = words.take() {
                    t.steps.push(Step::said(w));
                }
                return Ok(false);
            }
            let (arguments, result, injected) =
                self.answer(call, job, world, &mut t.memory).await?;
            t.messages.push(Message {
                role: "tool".into(),
                content: Some(result.to_string()),
                tool_calls: Vec::new(),
                tool_call_id: Some(call.id.clone()),
            });
            let mut step = Step::call(&call.name, arguments, result, injected);
            step.meta = std::mem::take(&mut meta);
            step.text = words.take();
            t.steps.push(step);
            t.tool_steps += 1;
        }
        Ok(true)
    }

    /// What the person says to the agent's `line`: the user model's line when one plays them
    /// and it writes a usable one, else the template's; `None` when the user model says they
    /// leave.
    async fn user_line(
        &self,
        job: &Job<'_>,
        t: &Thread,
        line: &str,
        key: &[&str],
        turn: usize,
        world: &World<'_>,
    ) -> Result<Option<String>> {
        let stance = job
            .ask
            .labels
            .iter()
            .find(|(n, _)| *n == "stance")
            .map_or("", |(_, v)| v.as_str());
        let template = || user::template_line(&job.ask.text, line, stance, key, turn);
        let Some(model) = &self.user_model else {
            return Ok(Some(template()));
        };
        let may_leave = self.opts.user.patience.may_leave();
        let names: Vec<&str> = world.tools().iter().map(|t| t.name.as_str()).collect();
        let thread = thread_text(&t.messages);
        let req = ChatRequest {
            messages: vec![
                Message::new("system", user::user_system(&names, may_leave)),
                Message::new(
                    "user",
                    user::user_prompt(&job.ask.text, &thread, user::asks(line)),
                ),
            ],
            tools: Vec::new(),
            temperature: self.opts.user.temperature,
            max_tokens: USER_MAX_TOKENS,
            logprobs: false,
        };
        let sample = if self.opts.user.temperature <= 0.0 {
            job.attempt
        } else {
            let turn = turn.to_string();
            let mut parts = vec!["user-sample"];
            parts.extend_from_slice(key);
            parts.push(&turn);
            #[allow(clippy::cast_possible_truncation, reason = "the low 32 bits of a draw")]
            let s = super::hash::draw(&parts) as u32;
            s
        };
        let written = match model.chat(&req, sample).await {
            Ok(a) => a.reply.content.unwrap_or_default(),
            Err(CallError::Failed(_)) => {
                self.people.failed.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(template()));
            }
            Err(CallError::Stop(e)) => return Err(e),
        };
        let previous = t
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .and_then(|m| m.content.as_deref())
            .unwrap_or("");
        match user::accept(&written, previous, may_leave) {
            Some(Next::Leave) => Ok(None),
            Some(_) => Ok(Some(user::strip_think(&written).trim().to_owned())),
            None => {
                self.people.rejected.fetch_add(1, Ordering::Relaxed);
                Ok(Some(template()))
            }
        }
    }

    /// The world's answer to `call`, or the error the model is shown when its arguments are not
    /// a JSON object.
    ///
    /// # Errors
    /// With `--execute`, a tool program that cannot go on.
    async fn answer(
        &self,
        call: &ToolCall,
        job: &Job<'_>,
        world: &World<'_>,
        memory: &mut Memory,
    ) -> Result<(Value, Value, Option<super::world::Fault>)> {
        let text = call.arguments.trim();
        let parsed = if text.is_empty() {
            Ok(json!({}))
        } else {
            serde_json::from_str::<Value>(text)
        };
        match parsed {
            Ok(arguments @ Value::Object(_)) => {
                if !world.tools().iter().any(|t| t.name == call.name) {
                    self.malformed.unknown_tool.fetch_add(1, Ordering::Relaxed);
                }
                let Some(program) = &self.executor else {
                    let a = world.call(job.scene, memory, &call.name, &arguments);
                    return Ok((arguments, a.result, a.injected));
                };
                // The scheduled faults first; the program answers the rest.
                if let Some(a) = world.scheduled_fault(job.scene, memory, &call.name, &arguments) {
                    return Ok((arguments, a.result, a.injected));
                }
                let rollout = json!({
                    "prompt": job.ask.text,
                    "rollout_index": job.rollout_index,
                    "seed": job.seed,
                });
                let result = program.call(&call.name, &arguments, rollout).await?;
                Ok((arguments, result, None))
            }
            Ok(other) => {
                self.malformed.arguments.fetch_add(1, Ordering::Relaxed);
                Ok((
                    json!({"_raw": other}),
                    json!({"status": "error", "reason": "invalid_arguments", "detail": "the arguments must be a JSON object"}),
                    None,
                ))
            }
            Err(e) => {
                self.malformed.arguments.fetch_add(1, Ordering::Relaxed);
                Ok((
                    json!({"_raw": call.arguments}),
                    json!({"status": "error", "reason": "invalid_arguments", "detail": format!("the arguments are not JSON: {e}")}),
                    None,
                ))
            }
        }
    }
}

/// The reply's finish reason in the row's words: `stop`, `length`, `tool` or `error`.
fn finish(reason: Option<&str>) -> String {
    match reason {
        Some("length" | "max_tokens") => "length",
        Some("tool_calls" | "tool_use" | "function_call") => "tool",
        _ => "stop",
    }
    .to_owned()
}

/// The thread as a person reads it: who said what, each call by name and arguments, each result
/// cut to 300 characters (the system prompt is not theirs to see).
fn thread_text(messages: &[Message]) -> Vec<(String, String)> {
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let text = m.content.clone().unwrap_or_default();
        match m.role.as_str() {
            "user" => out.push(("You said".to_owned(), text)),
            "assistant" => {
                if !text.trim().is_empty() {
                    out.push(("The agent replied".to_owned(), text));
                }
                for c in &m.tool_calls {
                    out.push((
                        "The agent used".to_owned(),
                        format!("{}({})", c.name, c.arguments),
                    ));
                }
            }
            "tool" => out.push(("Result".to_owned(), text.chars().take(300).collect())),
            _ => {}
        }
    }
    out
}

static TOOL_CALL_BLOCK: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?s)<tool_call>(.*?)</tool_call>").expect("a valid pattern")
});

/// The calls a reply wrote as Qwen/Hermes markup (`<tool_call>{"name": ..., "arguments":
/// ...}</tool_call>`, or chunks after unclosed tags), and its text without them; none when it
/// wrote no call that reads. A chunk that is not a JSON object with a `name` (or `tool`) is not
/// a call; its arguments are `arguments` or `args`, decoded when given as JSON text.
fn text_calls(content: &str) -> Option<(Vec<ToolCall>, String)> {
    if !content.contains("<tool_call>") {
        return None;
    }
    let closed: Vec<&str> = TOOL_CALL_BLOCK
        .captures_iter(content)
        .filter_map(|c| c.get(1).map(|m| m.as_str()))
        .collect();
    let chunks: Vec<&str> = if closed.is_empty() {
        content.split("<tool_call>").skip(1).collect()
    } else {
        closed
    };
    let calls: Vec<ToolCall> = chunks
        .iter()
        .enumerate()
        .filter_map(|(i, chunk)| {
            let v: Value = serde_json::from_str(chunk.trim()).ok()?;
            let name = v
                .get("name")
                .or_else(|| v.get("tool"))?
                .as_str()?
                .to_owned();
            let arguments = match v.get("arguments").or_else(|| v.get("args")) {
                Some(Value::String(text)) => serde_json::from_str::<Value>(text)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({})),
                Some(a @ Value::Object(_)) => a.clone(),
                _ => json!({}),
            };
            Some(ToolCall {
                id: format!("call_{i}"),
                name,
                arguments: arguments.to_string(),
            })
        })
        .collect();
    if calls.is_empty() {
        return None;
    }
    let rest = TOOL_CALL_BLOCK.replace_all(content, "");
    let rest = rest
        .split("<tool_call>")
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    Some((calls, rest))
}

/// Tool markup written as plain text instead of a call (the agent's replies, the person's and
/// the writer's lines are all held to it): a call's tags (Qwen/Hermes, Llama, a chat API's
/// JSON), or a tool's schema recited (the reference's rule: `"name": "…"`, then within 500
/// characters `"description":`, then within 500 more `"parameters":`).
pub(super) fn looks_like_markup(text: &str) -> bool {
    [
        "<tool_call>",
        "</tool_call>",
        "<function=",
        "\"tool_calls\"",
        "<|python_tag|>",
    ]
    .iter()
    .any(|m| text.contains(m))
        || schema_recited(text)
}

/// A tool's schema in `text`: a name, its description and its parameters, each near the last.
fn schema_recited(text: &str) -> bool {
    static NAME: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#""name"\s*:\s*""#).expect("a valid pattern"));
    /// What follows `needle` when it starts within [`SCHEMA_REACH`] of the start of `text`.
    fn near<'t>(text: &'t str, needle: &str) -> Option<&'t str> {
        let window = &text[..text.floor_char_boundary(SCHEMA_REACH + needle.len())];
        window.find(needle).map(|i| &text[i + needle.len()..])
    }
    text.contains("\"parameters\"")
        && NAME.find_iter(text).any(|m| {
            near(&text[m.end()..], "\"description\":")
                .is_some_and(|rest| near(rest, "\"parameters\":").is_some())
        })
}

/// How far apart a recited schema's parts may be.
const SCHEMA_REACH: usize = 500;

impl Agent for ModelAgent {
    fn name(&self) -> &str {
        &self.name
    }

    /// The model, where it is served, and how it samples: two runs that differ in any of these
    /// are different policies to `compare`.
    fn policy(&self) -> String {
        let spec = self.model.spec();
        let mut policy = format!(
            "{}:{}@{} t={} max_tokens={} max_steps={}",
            spec.provider.as_str(),
            spec.model,
            spec.host(),
            self.opts.temperature,
            self.opts.max_tokens,
            self.opts.max_steps
        );
        if let Some(program) = &self.executor {
            let _ = write!(policy, " world={}", program.name());
        }
        let u = &self.opts.user;
        if u.on {
            let _ = write!(
                policy,
                " user={} patience={},{} max_turns={} avg_turns={}",
                self.user_model().unwrap_or_default(),
                u.patience.second,
                u.patience.later,
                u.max_turns
                    .map_or_else(|| "auto".to_owned(), |n| n.to_string()),
                u.avg_turns
            );
            if self.user_model.is_some() {
                let _ = write!(policy, " user_t={}", u.temperature);
            }
        }
        policy
    }

    /// `{temperature, max_tokens, model}`, as the reference's rows say it.
    fn sampling(&self) -> Option<String> {
        Some(
            json!({
                "temperature": self.opts.temperature,
                "max_tokens": self.opts.max_tokens,
                "model": self.name,
            })
            .to_string(),
        )
    }

    /// The user model, `template`, or none when the person does not speak.
    fn user_model(&self) -> Option<String> {
        if !self.opts.user.on {
            return None;
        }
        Some(
            self.user_model
                .as_ref()
                .map_or_else(|| "template".to_owned(), |m| m.spec().model.clone()),
        )
    }

    fn wave(&self) -> usize {
        MODEL_WAVE
    }

    fn first_wave(&self) -> usize {
        MODEL_FIRST_WAVE
    }

    fn play(
        &mut self,
        jobs: &[Job<'_>],
        world: &World<'_>,
        finished: &mut dyn FnMut(usize),
    ) -> Result<Vec<Trajectory>> {
        let tools: Vec<Value> = world
            .tools()
            .iter()
            .map(|t| json!({"type": "function", "function": t.function}))
            .collect();
        let width = self.model.settings().concurrency;
        let this = &*self;
        let tools = &tools;
        let n = jobs.len();
        // The futures made here, not in the async block: a closure there would ask for a
        // lifetime more general than the borrows the compiler can prove `Send`.
        let rollouts: Vec<_> = jobs
            .iter()
            .enumerate()
            .map(|(i, job)| {
                let rollout = this.rollout(job, world, tools);
                async move { (i, rollout.await) }
            })
            .collect();
        // As they finish, not in order: a slow rollout holds no slot of the others'. The
        // trajectories go back in the jobs' order.
        let work = |tx: std::sync::mpsc::Sender<usize>| async move {
            // Every rollout is let finish (a stop keeps the replies already paid for in the
            // cache), and the first error in job order is the one told.
            let mut played: Vec<Option<Result<Trajectory>>> = (0..n).map(|_| None).collect();
            let mut stream = futures::stream::iter(rollouts).buffer_unordered(width);
            let mut done = 0;
            while let Some((i, t)) = stream.next().await {
                played[i] = Some(t);
                done += 1;
                if done < n {
                    // A watcher gone is no reason to stop.
                    let _ = tx.send(done);
                }
            }
            played.into_iter().flatten().collect::<Result<Vec<_>>>()
        };
        crate::models::block_on_watched(&this.runtime, work, finished)?
    }

    fn notes(&self) -> Vec<String> {
        let t = self.model.tally();
        let mut notes = vec![format!(
            "agent {}: {} requests ({} retries, {} failed), {} replies from the cache; {} tokens in, {} out",
            self.name, t.requests, t.retries, t.failed, t.cached, t.input_tokens, t.output_tokens
        )];
        let m = &self.malformed;
        let read = m.markup_calls.load(Ordering::Relaxed);
        if read > 0 {
            notes.push(format!(
                "agent {}: {read} calls written as <tool_call> markup in the reply's text were read as calls (serve the model with a tool-call parser to have them native)",
                self.name
            ));
        }
        let (args, unknown, markup, capped) = (
            m.arguments.load(Ordering::Relaxed),
            m.unknown_tool.load(Ordering::Relaxed),
            m.markup.load(Ordering::Relaxed),
            m.capped.load(Ordering::Relaxed),
        );
        let p = &self.people;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        if self.opts.user.on && load(&p.rollouts) > 0 {
            notes.push(format!(
                "the person ({}): {} lines after the opening ask over {} rollouts; {} rollouts ended on the agent's question, {} of them because the person walked away",
                self.user_model().unwrap_or_default(),
                load(&p.lines),
                load(&p.rollouts),
                load(&p.on_question),
                load(&p.left)
            ));
            if load(&p.rejected) + load(&p.failed) > 0 {
                notes.push(format!(
                    "the user model: {} lines it wrote could not be used and {} calls failed; the template user said those lines",
                    load(&p.rejected),
                    load(&p.failed)
                ));
            }
            if let Some(m) = &self.user_model {
                let t = m.tally();
                notes.push(format!(
                    "user model {}: {} requests ({} retries, {} failed), {} replies from the cache",
                    m.spec().model,
                    t.requests,
                    t.retries,
                    t.failed,
                    t.cached
                ));
            }
        }
        if args + unknown + markup + capped > 0 {
            notes.push(format!(
                "agent {}: {args} calls with arguments that are not a JSON object, {unknown} calls of a tool the world does not have, {markup} replies with tool markup as text, {capped} rollouts cut at `max_steps` calls",
                self.name
            ));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_calls_wait_at_least_five_minutes() {
        assert_eq!(call_timeout(1024).as_secs(), 300);
        assert_eq!(call_timeout(4096).as_secs(), 1024);
    }

    #[test]
    fn calls_written_as_markup_read_as_calls() {
        let (calls, rest) = text_calls(
            "Let me look.\n<tool_call>\n{\"name\": \"lookup_order\", \"arguments\": {\"order_id\": \"A1\"}}\n</tool_call>",
        )
        .unwrap();
        assert_eq!(rest, "Let me look.");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "lookup_order");
        assert_eq!(calls[0].arguments, r#"{"order_id":"A1"}"#);
        // Arguments as JSON text, `tool` for the name, an unclosed tag.
        let (calls, _) =
            text_calls(r#"<tool_call>{"tool": "refund", "args": "{\"id\": 2}"}"#).unwrap();
        assert_eq!(
            (calls[0].name.as_str(), calls[0].arguments.as_str()),
            ("refund", r#"{"id":2}"#)
        );
        // No name, not JSON, no markup: no call.
        assert!(text_calls("<tool_call>{\"x\": 1}</tool_call>").is_none());
        assert!(text_calls("<tool_call>nope</tool_call>").is_none());
        assert!(text_calls("Your order shipped.").is_none());
    }

    #[test]
    fn finish_reasons_map_to_the_row_words() {
        assert_eq!(finish(Some("stop")), "stop");
        assert_eq!(finish(Some("max_tokens")), "length");
        assert_eq!(finish(Some("tool_use")), "tool");
        assert_eq!(finish(None), "stop");
        assert!(looks_like_markup(
            "sure <tool_call>{\"name\": \"x\"}</tool_call>"
        ));
        assert!(!looks_like_markup("Your order shipped."));
        assert!(looks_like_markup("done</tool_call>"));
        let schema = r#"I can use {"name": "lookup_order", "description": "Finds an order.", "parameters": {"type": "object"}}"#;
        assert!(looks_like_markup(schema));
        // Far apart, the parts are not one schema; a name alone is not one either.
        let apart = format!(
            r#"{{"name": "a", "description": "d", {} "parameters": {{}}}}"#,
            "x".repeat(600)
        );
        assert!(!looks_like_markup(&apart));
        assert!(!looks_like_markup(
            r#"My "name": "Ana", a "description": of it"#
        ));
    }
}
