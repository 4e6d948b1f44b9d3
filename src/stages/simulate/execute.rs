//! The user's real world (`--execute cmd:PROGRAM`): a program that answers a model agent's tool
//! calls over the JSON Lines pipe of command judges and agents, on the same worker pool, timeout
//! and restart rules ([`crate::pipeline::pipe`]).
//!
//! Protocol, one JSON object per line:
//! - wai → program: `{"id": N, "tool": "...", "arguments": {...}, "rollout": {"prompt": "...",
//!   "rollout_index": 0, "seed": 0}}`;
//! - program → wai: `{"id": N, "result": ...}`. An object is the result as it is; any other
//!   value is `{"status": "ok", "result": VALUE}`; `{"id": N, "error": "..."}` is `{"status":
//!   "error", "reason": "..."}`.
//!
//! The scheduled faults come first: a call the rollout's fault plan hits is answered by the mock
//! world's fault and never reaches the program. The world's own rules (its records, unknown
//! tools, placeholders) do not apply: the program is the world.
//!
//! The model agent's rollouts run concurrently and each call is one request, so the calls are
//! gathered: one thread owns the pool and sends it every call that is waiting, as one batch, while
//! the next calls queue. A batch is answered when all of it is, so a call that hangs until
//! `--timeout` holds up the calls batched with it and those queued behind. Which calls share a
//! batch, and their ids, follow timing: a program that keeps state between calls sees them in an
//! order that can differ between runs (a program that answers each call from its arguments alone
//! gives the same rows every time).

use std::sync::{Arc, Mutex, mpsc};

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::pipeline::pipe::{Answer, Failure, Options, Pool};

/// The most calls sent as one batch.
const BATCH: usize = 512;

/// One call waiting for its answer.
struct Call {
    request: Value,
    reply: tokio::sync::oneshot::Sender<Result<Value>>,
}

/// A program that answers tool calls.
pub struct Executor {
    name: String,
    calls: Mutex<Option<mpsc::Sender<Call>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Executor {
    /// Starts the program's pool.
    ///
    /// # Errors
    /// An empty command, or one that does not start.
    pub fn start(opts: Options) -> Result<Self> {
        let pool = Pool::start(opts)?;
        let name = format!("cmd:{}", pool.name());
        let timeout = pool.timeout().as_secs_f64();
        let (sender, receiver) = mpsc::channel::<Call>();
        let thread = std::thread::Builder::new()
            .name("wai-execute".into())
            .spawn(move || serve(pool, &receiver, timeout))
            .map_err(|e| Error::Internal(format!("a thread for the tool program: {e}")))?;
        Ok(Self {
            name,
            calls: Mutex::new(Some(sender)),
            thread: Some(thread),
        })
    }

    /// The program, as `cmd:NAME`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program's answer to a call of `tool` with `arguments`, in the rollout `rollout`
    /// (`{prompt, rollout_index, seed}`).
    ///
    /// # Errors
    /// The program's workers keep dying or hang on every call: the run cannot go on.
    pub async fn call(&self, tool: &str, arguments: &Value, rollout: Value) -> Result<Value> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = json!({"tool": tool, "arguments": arguments, "rollout": rollout});
        let sent = self
            .calls
            .lock()
            .ok()
            .and_then(|c| c.as_ref().map(|c| c.send(Call { request, reply }).is_ok()));
        if sent != Some(true) {
            return Err(Error::Internal("the tool program's thread is gone".into()));
        }
        answer
            .await
            .map_err(|_| Error::Internal("the tool program's thread is gone".into()))?
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        if let Ok(mut c) = self.calls.lock() {
            c.take();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The pool's thread: every call waiting goes out as one batch; a pool that cannot go on fails
/// this batch and every later call with its error.
fn serve(mut pool: Pool, calls: &mpsc::Receiver<Call>, timeout: f64) {
    let mut issued = 0u64;
    // Why the pool cannot go on, once it cannot: every later call fails with it.
    let mut broken: Option<String> = None;
    while let Ok(first) = calls.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match calls.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        if let Some(why) = &broken {
            for c in batch {
                let _ = c.reply.send(Err(stopped(why)));
            }
            continue;
        }
        let mut text = Vec::with_capacity(batch.len() * 256);
        let mut lines = Vec::with_capacity(batch.len());
        for (i, c) in batch.iter_mut().enumerate() {
            let start = text.len();
            if let Value::Object(o) = &mut c.request {
                o.insert("id".into(), json!(issued + i as u64));
            }
            // A `Value` always encodes.
            let _ = serde_json::to_writer(&mut text, &c.request);
            text.push(b'\n');
            lines.push(start..text.len());
        }
        let text = Arc::new(text);
        let answers = pool.run(
            &text,
            &lines,
            issued,
            // A tool program answers; it makes no calls of its own.
            &mut |_, _| json!({"status": "error", "reason": "a tool program answers calls; it cannot make one"}),
            &mut |_, _| {},
        );
        issued += batch.len() as u64;
        match answers {
            Ok(answers) => {
                for (c, a) in batch.into_iter().zip(answers) {
                    let _ = c.reply.send(Ok(result_of(a, timeout)));
                }
            }
            Err(e) => {
                let why = match &e {
                    Error::Input { message, .. } => message.clone(),
                    e => e.to_string(),
                };
                let mut batch = batch.into_iter();
                if let Some(first) = batch.next() {
                    let _ = first.reply.send(Err(e));
                }
                for c in batch {
                    let _ = c.reply.send(Err(stopped(&why)));
                }
                broken = Some(why);
            }
        }
    }
}

/// The error of a call after the pool stopped.
fn stopped(why: &str) -> Error {
    Error::Input {
        stage: "simulate".into(),
        message: why.to_owned(),
    }
}

/// A call's result from the program's answer.
fn result_of(answer: Answer, timeout: f64) -> Value {
    match answer {
        Answer::Reply(obj) => reply_result(obj),
        Answer::Failed(why, tail) => {
            let reason = match why {
                Failure::Died => format!(
                    "the tool program exited on this call{}",
                    if tail.is_empty() {
                        String::new()
                    } else {
                        format!("; stderr: {tail}")
                    }
                ),
                Failure::Hung => format!("the tool program took longer than {timeout} s"),
                Failure::Garbage(line) => {
                    format!("the tool program answered with an object of no call's id: {line}")
                }
            };
            json!({"status": "error", "reason": reason})
        }
    }
}

fn reply_result(mut obj: Map<String, Value>) -> Value {
    if let Some(e) = obj.remove("error").filter(|e| !e.is_null()) {
        let reason = e.as_str().map_or_else(|| e.to_string(), str::to_owned);
        return json!({"status": "error", "reason": reason});
    }
    match obj.remove("result") {
        Some(r @ Value::Object(_)) => r,
        Some(Value::Null) | None => {
            json!({"status": "error", "reason": "the tool program's answer has no `result`"})
        }
        Some(other) => json!({"status": "ok", "result": other}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_results() {
        let obj = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            reply_result(obj(json!({"result": {"status": "ok", "n": 1}}))),
            json!({"status": "ok", "n": 1})
        );
        assert_eq!(
            reply_result(obj(json!({"result": 7}))),
            json!({"status": "ok", "result": 7})
        );
        assert_eq!(
            reply_result(obj(json!({"error": "no such order"}))),
            json!({"status": "error", "reason": "no such order"})
        );
        assert_eq!(reply_result(obj(json!({})))["status"], "error");
        assert_eq!(
            result_of(Answer::Failed(Failure::Hung, String::new()), 2.0)["reason"],
            "the tool program took longer than 2 s"
        );
    }
}
