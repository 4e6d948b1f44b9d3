//! Command agents: any program that plays asks over a JSON Lines pipe, on the same worker pool,
//! timeout and restart rules as command judges ([`crate::pipeline::pipe`]).
//!
//! Protocol, one JSON object per line:
//! - wai → agent: `{"id": N, "ask": "...", "task_id": "...", "rollout_index": 0, "eval_run": 0,
//!   "seed": 0, "tools": ["lookup_order", ...]}`: the ask and the tools, nothing the row marks
//!   privileged (the world state and the fault plan stay in wai's mock world, which answers the
//!   calls);
//! - agent → wai, any number of times while it works: `{"id": N, "call": {"tool": "...",
//!   "arguments": {...}}}`; wai answers from the mock world (scheduled faults included) with
//!   `{"id": N, "result": {...}}`;
//! - agent → wai, once, to finish: `{"id": N, "final_text": "...", "steps": [...]?}`. Without
//!   `steps`, the calls wai answered are the steps; with them, a step without a `result` is
//!   answered by the world. `{"id": N, "error": "..."}` says the rollout failed.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::agent::{Agent, Job, Step, Trajectory};
use super::world::{Memory, World};
use crate::error::Result;
use crate::pipeline::pipe::{Answer, Failure, Options, Pool};

/// A pool of workers running one agent command.
pub struct CommandAgent {
    pool: Pool,
    name: String,
    issued: u64,
}

impl CommandAgent {
    /// Starts the pool.
    pub fn start(opts: Options) -> Result<Self> {
        let pool = Pool::start(opts)?;
        let name = format!("cmd:{}", pool.name());
        Ok(Self {
            pool,
            name,
            issued: 0,
        })
    }
}

fn step_of(s: &Value) -> Step {
    Step {
        tool: s.get("tool").and_then(Value::as_str).map(str::to_owned),
        arguments: s.get("arguments").cloned().unwrap_or_else(|| json!({})),
        result: s.get("result").cloned().unwrap_or(Value::Null),
        text: s.get("text").and_then(Value::as_str).map(str::to_owned),
        injected: None,
        texts: None,
        user: s.get("user").and_then(Value::as_str).map(str::to_owned),
        meta: super::agent::TurnMeta {
            logprob: s.get("logprob").and_then(Value::as_f64),
            n_tokens: s.get("n_tokens").and_then(Value::as_i64),
            truncated: s.get("truncated").and_then(Value::as_bool) == Some(true),
        },
    }
}

impl Agent for CommandAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn notes(&self) -> Vec<String> {
        self.pool.noise_note().into_iter().collect()
    }

    /// A fixed size, whatever `--workers`: the schedule (which asks get more rollouts) is
    /// decided between waves, so a size that followed the workers would give other rows at
    /// another worker count.
    fn wave(&self) -> usize {
        super::COMMAND_WAVE
    }

    fn play(
        &mut self,
        jobs: &[Job<'_>],
        world: &World<'_>,
        finished: &mut dyn FnMut(usize),
    ) -> Result<Vec<Trajectory>> {
        let first = self.issued;
        self.issued += jobs.len() as u64;
        let tools: Vec<&str> = world.tools().iter().map(|t| t.name.as_str()).collect();
        let mut text = Vec::with_capacity(jobs.len() * 256);
        let mut lines = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            let start = text.len();
            let request = json!({
                "id": first + i as u64,
                "ask": job.ask.text,
                "task_id": job.ask.task_id,
                "rollout_index": job.rollout_index,
                "eval_run": job.eval_run,
                "seed": job.seed,
                "tools": tools,
            });
            serde_json::to_writer(&mut text, &request)
                .map_err(|e| crate::error::Error::Internal(format!("encoding a request: {e}")))?;
            text.push(b'\n');
            lines.push(start..text.len());
        }
        let text = Arc::new(text);
        let mut memories: Vec<Memory> = vec![Memory::default(); jobs.len()];
        let mut recorded: Vec<Vec<Step>> = vec![Vec::new(); jobs.len()];
        let timeout = self.pool.timeout().as_secs_f64();
        let mut settled = 0;
        let n = jobs.len();
        let answers = self.pool.run(
            &text,
            &lines,
            first,
            &mut |row, msg: Option<&Map<String, Value>>| {
                let Some(msg) = msg else {
                    // The ask goes to a fresh worker: it starts again in a fresh world.
                    memories[row] = Memory::default();
                    recorded[row].clear();
                    return Value::Null;
                };
                let call = msg.get("call").cloned().unwrap_or(Value::Null);
                let Some(tool) = call.get("tool").and_then(Value::as_str) else {
                    return json!({"status": "error", "reason": "a call needs a `tool`"});
                };
                let arguments = call.get("arguments").cloned().unwrap_or_else(|| json!({}));
                let answer = world.call(jobs[row].scene, &mut memories[row], tool, &arguments);
                recorded[row].push(Step::call(
                    tool,
                    arguments,
                    answer.result.clone(),
                    answer.injected,
                ));
                answer.result
            },
            &mut |_, _| {
                settled += 1;
                if settled < n {
                    finished(settled);
                }
            },
        )?;
        Ok(answers
            .into_iter()
            .enumerate()
            .map(|(i, a)| match a {
                Answer::Reply(obj) => {
                    if let Some(e) = obj.get("error").filter(|e| !e.is_null()) {
                        return Trajectory { error: Some(format!("the agent said: {}", e.as_str().map_or_else(|| e.to_string(), str::to_owned))), ..Trajectory::default() };
                    }
                    let Some(final_text) = obj.get("final_text").and_then(Value::as_str) else {
                        return Trajectory { error: Some("the agent's answer has no `final_text` string".into()), ..Trajectory::default() };
                    };
                    let steps = match obj.get("steps").and_then(Value::as_array) {
                        None => std::mem::take(&mut recorded[i]),
                        Some(given) => given
                            .iter()
                            .map(|s| {
                                let mut step = step_of(s);
                                // A call the agent made through the world keeps what fired on it.
                                if let Some(tool) = &step.tool
                                    && !step.result.is_null()
                                    && let Some(r) = recorded[i].iter().find(|r| r.tool.as_ref() == Some(tool) && r.arguments == step.arguments && r.result == step.result)
                                {
                                    step.injected = r.injected;
                                }
                                if let (Some(tool), Value::Null) = (&step.tool, &step.result) {
                                    // Replay the call the agent made against the world: same answer.
                                    let made = recorded[i].iter().find(|r| r.tool.as_ref() == Some(tool) && r.arguments == step.arguments);
                                    if let Some(r) = made {
                                        step.result = r.result.clone();
                                        step.injected = r.injected;
                                    } else {
                                        let answer = world.call(jobs[i].scene, &mut memories[i], tool, &step.arguments);
                                        step.result = answer.result;
                                        step.injected = answer.injected;
                                    }
                                }
                                step
                            })
                            .collect(),
                    };
                    Trajectory {
                        steps: steps.into(),
                        final_text: final_text.to_owned(),
                        seeded: obj.get("seeded").and_then(Value::as_array).map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default(),
                        finish_reason: obj.get("finish_reason").and_then(Value::as_str).filter(|f| matches!(*f, "stop" | "length" | "tool" | "error")).map(str::to_owned),
                        ended_by: (obj.get("ended_by").and_then(Value::as_str) == Some("user_left")).then_some("user_left"),
                        ..Trajectory::default()
                    }
                }
                Answer::Failed(why, tail) => Trajectory {
                    error: Some(match why {
                        Failure::Died => format!("the agent process exited on this ask{}", if tail.is_empty() { String::new() } else { format!("; stderr: {tail}") }),
                        Failure::Hung => format!("the agent took longer than {timeout} s on this ask"),
                        Failure::Garbage(line) => format!("the agent answered with an object that carries no request id of its own: {line}"),
                    }),
                    ..Trajectory::default()
                },
            })
            .collect())
    }
}
