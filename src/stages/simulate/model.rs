//! Model agents (`--agent SPEC` for any model spec: `openai:`, `anthropic:`, `endpoint:MODEL@URL`,
//! `ollama:`, `fireworks:`): the model is played multi-turn with the policy as its system
//! prompt and the tools as function schemas, and every tool call it makes is answered by the
//! mock world under the rollout's fault plan, exactly as the other agents' calls are. The
//! rollout ends when the model answers without a call, or at the step cap.
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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use serde_json::{Value, json};

use super::agent::{Agent, Job, Step, Trajectory};
use super::world::{Memory, World};
use crate::error::{Error, Result};
use crate::models::{CallError, ChatRequest, Message, Model, ToolCall};

/// Rollouts per wave: a constant, so the schedule does not follow `--concurrency`.
pub const MODEL_WAVE: usize = 256;
/// Tool calls one rollout may make by default.
pub const MAX_STEPS: usize = 16;
/// The reply budget of one agent turn by default, in tokens.
pub const MAX_TOKENS: u32 = 1024;

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
}

impl Default for Options {
    fn default() -> Self {
        Self {
            system: String::new(),
            temperature: 0.0,
            max_tokens: MAX_TOKENS,
            max_steps: MAX_STEPS,
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
        Ok(())
    }
}

/// What went wrong in the model's calls, over the run.
#[derive(Debug, Default)]
struct Malformed {
    arguments: AtomicU64,
    unknown_tool: AtomicU64,
    markup: AtomicU64,
    capped: AtomicU64,
}

/// A model that plays asks.
pub struct ModelAgent {
    model: Arc<Model>,
    runtime: tokio::runtime::Runtime,
    opts: Options,
    name: String,
    malformed: Malformed,
}

impl ModelAgent {
    /// An agent on `model`.
    ///
    /// # Errors
    /// Options out of range, or no async runtime.
    pub fn new(model: Arc<Model>, opts: Options) -> Result<Self> {
        crate::stages::Options::check(&opts)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("wai-agent")
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("a runtime for model calls: {e}")))?;
        let name = model.spec().model.clone();
        Ok(Self {
            model,
            runtime,
            opts,
            name,
            malformed: Malformed::default(),
        })
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

    /// One rollout: turns until the model answers without a call, or the step cap.
    async fn rollout(
        &self,
        job: &Job<'_>,
        world: &World<'_>,
        tools: &[Value],
    ) -> Result<Trajectory> {
        let mut messages = Vec::with_capacity(8);
        if !self.opts.system.is_empty() {
            messages.push(Message::new("system", self.opts.system.clone()));
        }
        messages.push(Message::new("user", job.ask.text.clone()));
        let mut memory = Memory::default();
        let mut steps: Vec<Step> = Vec::new();
        let sample = self.sample(job);
        loop {
            let req = ChatRequest {
                messages: messages.clone(),
                tools: tools.to_vec(),
                temperature: self.opts.temperature,
                max_tokens: self.opts.max_tokens,
                logprobs: false,
            };
            let answer = match self.model.chat(&req, sample).await {
                Ok(a) => a.reply,
                Err(CallError::Failed(m)) => {
                    return Ok(Trajectory {
                        steps: steps.into(),
                        error: Some(format!("the model call failed: {m}")),
                        ..Trajectory::default()
                    });
                }
                Err(CallError::Stop(e)) => return Err(e),
            };
            let text = answer.content.clone().unwrap_or_default();
            if answer.tool_calls.is_empty() {
                if looks_like_markup(&text) {
                    self.malformed.markup.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(Trajectory {
                    steps: steps.into(),
                    final_text: text,
                    finish_reason: Some(finish(answer.finish_reason.as_deref())),
                    ..Trajectory::default()
                });
            }
            if !text.trim().is_empty() {
                steps.push(Step {
                    tool: None,
                    arguments: Value::Null,
                    result: Value::Null,
                    text: Some(text.clone()),
                    injected: None,
                    texts: None,
                });
            }
            let mut said = Message::new("assistant", text);
            if said.content.as_deref() == Some("") {
                said.content = None;
            }
            said.tool_calls.clone_from(&answer.tool_calls);
            messages.push(said);
            for call in &answer.tool_calls {
                if steps.iter().filter(|s| s.tool.is_some()).count() >= self.opts.max_steps {
                    self.malformed.capped.fetch_add(1, Ordering::Relaxed);
                    return Ok(Trajectory {
                        steps: steps.into(),
                        finish_reason: Some("tool".into()),
                        ..Trajectory::default()
                    });
                }
                let (arguments, result, injected) = self.answer(call, job, world, &mut memory);
                messages.push(Message {
                    role: "tool".into(),
                    content: Some(result.to_string()),
                    tool_calls: Vec::new(),
                    tool_call_id: Some(call.id.clone()),
                });
                steps.push(Step::call(&call.name, arguments, result, injected));
            }
        }
    }

    /// The world's answer to `call`, or the error the model is shown when its arguments are not
    /// a JSON object.
    fn answer(
        &self,
        call: &ToolCall,
        job: &Job<'_>,
        world: &World<'_>,
        memory: &mut Memory,
    ) -> (Value, Value, Option<super::world::Fault>) {
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
                let a = world.call(job.scene, memory, &call.name, &arguments);
                (arguments, a.result, a.injected)
            }
            Ok(other) => {
                self.malformed.arguments.fetch_add(1, Ordering::Relaxed);
                (
                    json!({"_raw": other}),
                    json!({"status": "error", "reason": "invalid_arguments", "detail": "the arguments must be a JSON object"}),
                    None,
                )
            }
            Err(e) => {
                self.malformed.arguments.fetch_add(1, Ordering::Relaxed);
                (
                    json!({"_raw": call.arguments}),
                    json!({"status": "error", "reason": "invalid_arguments", "detail": format!("the arguments are not JSON: {e}")}),
                    None,
                )
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

/// Tool markup written as plain text instead of a call.
fn looks_like_markup(text: &str) -> bool {
    [
        "<tool_call>",
        "<function=",
        "\"tool_calls\"",
        "<|python_tag|>",
    ]
    .iter()
    .any(|m| text.contains(m))
}

impl Agent for ModelAgent {
    fn name(&self) -> &str {
        &self.name
    }

    /// The model, where it is served, and how it samples: two runs that differ in any of these
    /// are different policies to `compare`.
    fn policy(&self) -> String {
        let spec = self.model.spec();
        format!(
            "{}:{}@{} t={} max_tokens={} max_steps={}",
            spec.provider.as_str(),
            spec.model,
            spec.host(),
            self.opts.temperature,
            self.opts.max_tokens,
            self.opts.max_steps
        )
    }

    fn wave(&self) -> usize {
        MODEL_WAVE
    }

    fn play(&mut self, jobs: &[Job<'_>], world: &World<'_>) -> Result<Vec<Trajectory>> {
        let tools: Vec<Value> = world
            .tools()
            .iter()
            .map(|t| json!({"type": "function", "function": t.function}))
            .collect();
        let width = self.model.settings().concurrency;
        let this = &*self;
        let tools = &tools;
        std::thread::scope(|s| {
            s.spawn(|| {
                this.runtime.block_on(async {
                    let all: Vec<Result<Trajectory>> = futures::stream::iter(
                        jobs.iter().map(|job| this.rollout(job, world, tools)),
                    )
                    .buffered(width)
                    .collect()
                    .await;
                    all.into_iter().collect::<Result<Vec<_>>>()
                })
            })
            .join()
            .map_err(|_| Error::Internal("the model-call thread panicked".into()))?
        })
    }

    fn notes(&self) -> Vec<String> {
        let t = self.model.tally();
        let mut notes = vec![format!(
            "agent {}: {} requests ({} retries, {} failed), {} replies from the cache; {} tokens in, {} out",
            self.name, t.requests, t.retries, t.failed, t.cached, t.input_tokens, t.output_tokens
        )];
        let m = &self.malformed;
        let (args, unknown, markup, capped) = (
            m.arguments.load(Ordering::Relaxed),
            m.unknown_tool.load(Ordering::Relaxed),
            m.markup.load(Ordering::Relaxed),
            m.capped.load(Ordering::Relaxed),
        );
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
    fn finish_reasons_map_to_the_row_words() {
        assert_eq!(finish(Some("stop")), "stop");
        assert_eq!(finish(Some("max_tokens")), "length");
        assert_eq!(finish(Some("tool_use")), "tool");
        assert_eq!(finish(None), "stop");
        assert!(looks_like_markup(
            "sure <tool_call>{\"name\": \"x\"}</tool_call>"
        ));
        assert!(!looks_like_markup("Your order shipped."));
    }
}
