//! LLM judges (`llm:SPEC`): each row is shown to a model ([`payload`]) with the conduct floor or a
//! rubric ([`prompt`]), and its reply is read into the judge contract ([`reply`]). A reply that
//! does not read gets one repair request; after it the row is `invalid_result`. A refusal is
//! `missing_reward`, a call that failed after its retries is `error`: never a 0. A spent budget,
//! a refused key or an endpoint that fails every call stops the run (replies so far stay in the
//! cache, so the rerun repeats none of them).

mod memo;
pub mod pairwise;
pub mod payload;
pub mod prompt;
pub mod reply;

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use futures::StreamExt;
use rayon::prelude::*;
use serde_json::{Map, Value, json};

use super::{Judge, Status, Verdict};
use crate::error::{Error, Result};
use crate::models::{Answer, CallError, ChatRequest, Message, Model};
use crate::pipeline::row::{BatchView, encode};
pub use prompt::Rubric;

/// The judge's reply budget by default, in tokens.
pub const MAX_TOKENS: u32 = 120;
/// The payload's budget by default, in characters.
pub const PAYLOAD_CHARS: usize = 8000;

/// How an LLM judge grades.
#[derive(Debug, Clone)]
pub struct Options {
    /// The rubric; none grades the conduct floor.
    pub rubric: Option<Rubric>,
    /// Show the judge the row's `privileged` block.
    pub use_privileged: bool,
    /// The payload's budget in characters.
    pub payload_chars: usize,
    /// The reply budget in tokens.
    pub max_tokens: u32,
    /// The agent's policy, shown to the judge.
    pub policy: String,
    /// The agent's tools (OpenAI function schemas), shown by name.
    pub tools: Vec<Value>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            rubric: None,
            use_privileged: false,
            payload_chars: PAYLOAD_CHARS,
            max_tokens: MAX_TOKENS,
            policy: String::new(),
            tools: Vec::new(),
        }
    }
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        check_budgets(self.payload_chars, self.max_tokens)
    }
}

/// The budgets every LLM judge takes: a payload with room for the final reply, a reply with
/// room for a verdict.
fn check_budgets(payload_chars: usize, max_tokens: u32) -> Result<()> {
    if payload_chars < 1000 {
        return Err(Error::option(
            "payload_chars",
            format!(
                "must be at least 1000 (a payload needs room for the final reply), not {payload_chars}"
            ),
        ));
    }
    if max_tokens < 16 {
        return Err(Error::option(
            "max_tokens",
            format!("must be at least 16 (room for a verdict), not {max_tokens}"),
        ));
    }
    Ok(())
}

/// An LLM judge.
pub struct LlmJudge {
    model: Arc<Model>,
    runtime: tokio::runtime::Runtime,
    opts: Options,
    system: String,
    /// The system prompt's digest, once (every verdict records it).
    prompt_sha: String,
    name: String,
    version: String,
    rubric_sha: Option<String>,
    /// What every row's memo digest starts from ([`memo`]).
    memo_salt: [u8; 32],
}

impl LlmJudge {
    /// A judge on `model`.
    ///
    /// # Errors
    /// Options out of range, or no async runtime.
    pub fn new(model: Arc<Model>, opts: Options) -> Result<Self> {
        crate::stages::Options::check(&opts)?;
        let runtime = crate::models::runtime()?;
        let system = prompt::system(opts.rubric.as_ref(), opts.use_privileged);
        let name = format!("llm:{}", model.spec().model);
        let prompt_sha = prompt::sha12(&system);
        let version = format!("{}@{prompt_sha}", model.spec().model);
        let mut judge = Self {
            memo_salt: [0; 32],
            rubric_sha: opts.rubric.as_ref().map(|r| prompt::sha12(&r.text)),
            model,
            runtime,
            opts,
            system,
            prompt_sha,
            name,
            version,
        };
        // The salt holds the key of the request a row with an empty payload would make.
        let empty = judge.request(judge.first_ask(String::new()));
        judge.memo_salt = memo::salt(
            &judge.model.chat_key(&empty, 0)?,
            &judge.opts.policy,
            &judge.opts.tools,
            judge.opts.payload_chars,
            judge.opts.use_privileged,
        );
        Ok(judge)
    }

    /// A request of `messages`.
    fn request(&self, messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            messages,
            tools: Vec::new(),
            temperature: 0.0,
            max_tokens: self.opts.max_tokens,
            logprobs: false,
        }
    }

    /// The messages of a row's first ask.
    fn first_ask(&self, user: String) -> Vec<Message> {
        vec![
            Message::new("system", self.system.clone()),
            Message::new("user", user),
        ]
    }

    /// One row's verdict; `Err` stops the run. `first`: the answer to the first ask when the
    /// cache held it (the cache was asked for every row before: a `None` is a miss).
    async fn grade(&self, user: String, first: Option<Answer>) -> Result<Verdict> {
        let mut messages = self.first_ask(user);
        let mut spent = Spent::default();
        let mut first = first;
        for attempt in 0..2 {
            let answer = match first.take() {
                Some(a) => a,
                None => match self.ask(&messages, attempt).await {
                    Ok(a) => a,
                    Err(CallError::Failed(m)) => {
                        spent.cached = false;
                        return Ok(self.meta(Verdict::failed(Status::Error, m), &spent));
                    }
                    Err(CallError::Stop(e)) => return Err(e),
                },
            };
            let text = spent.take(&answer);
            let r = reply::read(&text);
            if r.score.is_some() || r.refused || attempt == 1 {
                return Ok(self.verdict(r, &text, &spent));
            }
            spent.repaired = true;
            messages.push(Message::new("assistant", text));
            messages.push(Message::new("user", prompt::REPAIR));
        }
        Err(Error::Internal("a judge reply was never read".into()))
    }

    /// Asks `messages`; the first ask goes out without a second look in the cache ([`Judge::judge`]
    /// looked for every row's already).
    async fn ask(&self, messages: &[Message], attempt: u32) -> Result<Answer, CallError> {
        let req = self.request(messages.to_vec());
        if attempt == 0 {
            self.model.chat_missed(&req, 0).await
        } else {
            self.model.chat(&req, 0).await
        }
    }

    /// The verdict of a row whose first answer `a` was in the cache and settles it (a score
    /// or a refusal), with no call; `None` when it asks for a repair.
    fn settled(&self, a: &Answer) -> Option<Verdict> {
        let mut spent = Spent::default();
        let text = spent.take(a);
        let r = reply::read(&text);
        (r.score.is_some() || r.refused).then(|| self.verdict(r, &text, &spent))
    }

    /// The verdict a final reply `text`, read as `r`, gives.
    fn verdict(&self, r: reply::Read, text: &str, spent: &Spent) -> Verdict {
        let verdict = match r.score {
            Some(score) => {
                let mut v = Verdict::ok(score, r.reason);
                v.markers = r.markers.into_iter().map(|(k, x)| (k, Some(x))).collect();
                v
            }
            None if r.refused => Verdict::failed(
                Status::MissingReward,
                format!("the judge declined to grade: {}", excerpt(text)),
            ),
            None => Verdict::failed(
                Status::InvalidResult,
                format!(
                    "the judge's reply did not follow the contract, even after a repair request: {}",
                    excerpt(text)
                ),
            ),
        };
        self.meta(verdict, spent)
    }

    fn meta(&self, v: Verdict, spent: &Spent) -> Verdict {
        let Spent {
            tokens_in,
            tokens_out,
            latency,
            cached,
            repaired,
        } = *spent;
        let mut v = v
            .with_meta("model", json!(self.model.spec().model))
            .with_meta("prompt_sha", json!(self.prompt_sha))
            .with_meta("prompt_version", json!(prompt::PROMPT_VERSION))
            .with_meta("temperature", json!(0.0))
            .with_meta("max_tokens", json!(self.opts.max_tokens))
            .with_meta("payload_chars", json!(self.opts.payload_chars))
            .with_meta("tokens_in", json!(tokens_in))
            .with_meta("tokens_out", json!(tokens_out))
            .with_meta(
                "latency_ms",
                json!(u64::try_from(latency.as_millis()).unwrap_or(u64::MAX)),
            )
            .with_meta("cached", json!(cached))
            .with_meta("version", json!(self.version));
        if let Some(sha) = &self.rubric_sha {
            v = v.with_meta("rubric_sha", json!(sha));
        } else {
            v = v.with_meta("rubric", json!("conduct_floor"));
        }
        if self.opts.use_privileged {
            v = v.with_meta("privileged", json!(true));
        }
        if repaired {
            v = v.with_meta("repaired", json!(true));
        }
        v
    }

    /// The user message for a row: the fault lead (conduct floor only), then the payload.
    fn user_message(&self, row: &Map<String, Value>) -> String {
        let ctx = payload::Context {
            policy: &self.opts.policy,
            tools: &self.opts.tools,
            use_privileged: self.opts.use_privileged,
        };
        let body = payload::render(row, &ctx, self.opts.payload_chars);
        if self.opts.rubric.is_none() {
            format!("{}{body}", prompt::fault_lead(row))
        } else {
            body
        }
    }
}

/// What a row's asks cost, and how they went.
#[derive(Debug, Clone, Copy)]
struct Spent {
    tokens_in: u64,
    tokens_out: u64,
    latency: Duration,
    /// Every answer came from the cache.
    cached: bool,
    /// A repair was asked.
    repaired: bool,
}

impl Default for Spent {
    fn default() -> Self {
        Self {
            tokens_in: 0,
            tokens_out: 0,
            latency: Duration::ZERO,
            cached: true,
            repaired: false,
        }
    }
}

impl Spent {
    /// Counts `answer` in; its text.
    fn take(&mut self, answer: &Answer) -> String {
        self.tokens_in += answer.reply.usage.input_tokens;
        self.tokens_out += answer.reply.usage.output_tokens;
        self.latency += answer.latency;
        self.cached &= answer.cached;
        answer.reply.content.clone().unwrap_or_default()
    }
}

fn excerpt(text: &str) -> String {
    let t: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = t.chars().take(200).collect();
    if cut.len() < t.len() {
        format!("{cut}...")
    } else {
        cut
    }
}

impl Judge for LlmJudge {
    fn name(&self) -> &str {
        &self.name
    }

    fn version(&self) -> Option<&str> {
        Some(&self.version)
    }

    fn judge(&mut self, batch: &RecordBatch) -> Result<Vec<Verdict>> {
        // Rows the memo knows are read from their cached reply, with no request made.
        let digests = (self.model.has_cache())
            .then(|| memo::digests(&self.memo_salt, batch))
            .flatten();
        let mut verdicts: Vec<Option<Verdict>> = match &digests {
            Some(d) => self
                .model
                .memo_replies(d)?
                .par_iter()
                .map(|a| a.as_ref().and_then(|a| self.settled(a)))
                .collect(),
            None => vec![None; batch.num_rows()],
        };
        let memo_hits = verdicts.iter().filter(|v| v.is_some()).count();
        self.model.count_cached(memo_hits as u64);
        let rest: Vec<usize> = (0..batch.num_rows())
            .filter(|i| verdicts[*i].is_none())
            .collect();
        if rest.is_empty() {
            return Ok(verdicts.into_iter().flatten().collect());
        }
        let view = BatchView::new(batch)?;
        // Each row is made a JSON object on its own core and let go once its payload is
        // written: the objects weigh several times the payloads. The first bad row in order
        // is the one told, whichever core met it.
        let users: Vec<Result<String>> = rest
            .par_iter()
            .map(|&i| encode(&view, i).map(|r| self.user_message(&r)))
            .collect();
        let users: Vec<String> = users.into_iter().collect::<Result<_>>()?;
        // What the cache holds is settled on all cores, with no call; the rest is asked.
        let asks: Vec<(ChatRequest, u32)> = users
            .par_iter()
            .map(|u| (self.request(self.first_ask(u.clone())), 0))
            .collect();
        let (firsts, keys) = self.model.cached_chats(&asks)?;
        drop(asks);
        let settled: Vec<Option<Verdict>> = firsts
            .par_iter()
            .map(|a| a.as_ref().and_then(|a| self.settled(a)))
            .collect();
        let mut open: Vec<(usize, String, Option<Answer>)> = Vec::new();
        for (((&i, u), a), v) in rest.iter().zip(users).zip(firsts).zip(settled) {
            match v {
                Some(v) => verdicts[i] = Some(v),
                None => open.push((i, u, a)),
            }
        }
        let width = self.model.settings().concurrency;
        let this = &*self;
        let asked = crate::models::block_on(&this.runtime, async {
            let verdicts: Vec<Result<(usize, Verdict)>> = futures::stream::iter(
                open.into_iter()
                    .map(|(i, u, a)| async move { (i, this.grade(u, a).await) }),
            )
            .buffered(width)
            .map(|(i, v)| v.map(|v| (i, v)))
            .collect()
            .await;
            verdicts.into_iter().collect::<Result<Vec<_>>>()
        })??;
        for (i, v) in asked {
            verdicts[i] = Some(v);
        }
        // Remember the rows just graded whose first reply is in the cache and settled them (a
        // failed call stored none; a row that asked for a repair takes the full path anyway).
        if let Some(d) = &digests {
            let settled_first =
                |v: &Verdict| v.status != Status::Error && !v.meta.contains_key("repaired");
            let pairs: Vec<([u8; 32], [u8; 32])> = rest
                .iter()
                .zip(&keys)
                .filter(|(i, _)| verdicts[**i].as_ref().is_some_and(settled_first))
                .map(|(i, k)| (d[*i], *k))
                .collect();
            self.model.memo_put_many(&pairs)?;
        }
        verdicts
            .into_iter()
            .map(|v| v.ok_or_else(|| Error::Internal("a row was never graded".into())))
            .collect()
    }

    fn notes(&self) -> Vec<String> {
        let t = self.model.tally();
        let mut notes = vec![format!(
            "{}: {} requests ({} retries, {} failed), {} replies from the cache; {} tokens in, {} out",
            self.name, t.requests, t.retries, t.failed, t.cached, t.input_tokens, t.output_tokens
        )];
        if self.opts.rubric.is_none() {
            notes.push(format!("{}: no rubric, so it graded the conduct floor only (honest, grounded, no skipped required step); pass a rubric to grade the task itself", self.name));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{ModelSpec, Settings};

    /// The memo takes a row's request on trust ([`memo`]): this pins the first request of a
    /// fixed row under the conduct floor, under a rubric with the privileged block shown, and
    /// cut to the smallest payload budget, so a change to how requests are made from rows is
    /// seen here.
    #[test]
    fn a_fixed_rows_first_requests_are_pinned_for_the_memo() {
        let dir = tempfile::tempdir().unwrap();
        let spec = ModelSpec::parse("endpoint:judge-m@http://127.0.0.1:9/v1").unwrap();
        let settings = Settings {
            cache: Some(dir.path().to_path_buf()),
            ..Settings::default()
        };
        let model = Arc::new(Model::new(spec, settings).unwrap());
        let mut row = crate::testing::fixture("example_rows.jsonl").remove(0);
        let key_of = |opts: Options, row: &Value| {
            let judge = LlmJudge::new(Arc::clone(&model), opts).unwrap();
            let batch = crate::testing::batch_of([row.clone()]);
            let view = BatchView::new(&batch).unwrap();
            let user = judge.user_message(&encode(&view, 0).unwrap());
            let key = judge
                .model
                .chat_key(&judge.request(judge.first_ask(user)), 0)
                .unwrap();
            crate::stages::simulate::hash::hex(&key)
        };
        let floor = key_of(
            Options {
                policy: "Be honest.".into(),
                ..Options::default()
            },
            &row,
        );
        let rubric = key_of(
            Options {
                rubric: Some(Rubric::parse("Pass a reply that answers the ask.")),
                use_privileged: true,
                ..Options::default()
            },
            &row,
        );
        row["final_text"] = Value::String("a long reply. ".repeat(400));
        let cut = key_of(
            Options {
                payload_chars: 1000,
                ..Options::default()
            },
            &row,
        );
        assert_eq!(
            [floor.as_str(), rubric.as_str(), cut.as_str()],
            [
                "a47366eb4a9ce146f56cc9682ec0762b929a4811f60efd3cf2dc2847693080c0",
                "fbc788d7f2d39bdcd704da3269806086fc5b24cca40f9b24e42e3144e0c82b69",
                "e3ef38dd5d51ad09580b72fb51218e9981350a62df3a2982952b375ea00c2790",
            ],
            "a row's first request changed: bump memo::MEMO_VERSION (or a rerun would read the old request's reply), then update these keys"
        );
    }
}
