//! Calls to a model: one HTTP client (connections reused, HTTP/2 where the server offers it), a
//! concurrency limit, retries with backoff, a per-call timeout, the run's budget, a circuit
//! breaker, and the response cache in front of it all.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::cache::{self, Cache};
use super::spec::ModelSpec;
use super::wire::{self, ChatRequest, Reply};
use crate::error::{Error, Result};
use crate::report::redact::redact;

/// How calls are made.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Calls in flight at once, per model.
    pub concurrency: usize,
    /// How long one call may take.
    pub timeout: Duration,
    /// Retries of a call that failed in a way that may pass (429, 5xx, a reset, a timeout).
    pub retries: u32,
    /// Requests the run may send, retries included (cached replies are free).
    pub max_calls: Option<u64>,
    /// Tokens (prompt and reply) the run may spend, as the servers report them.
    pub max_cost_tokens: Option<u64>,
    /// The cache folder, or none to call every time.
    pub cache: Option<std::path::PathBuf>,
    /// Plain http to a host that is not this machine.
    pub allow_http: bool,
    /// Calls in a row that may fail (after their retries) before the run stops.
    pub breaker: u32,
    /// The first retry's wait; each further retry doubles it (capped at 30 s), with jitter.
    pub backoff: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            concurrency: 16,
            timeout: Duration::from_mins(2),
            retries: 5,
            max_calls: None,
            max_cost_tokens: None,
            cache: Some(cache::default_dir()),
            allow_http: false,
            breaker: 20,
            backoff: Duration::from_millis(500),
        }
    }
}

/// Why a call gave no reply.
#[derive(Debug)]
pub enum CallError {
    /// This call failed, after its retries; other calls may still work (the row records it).
    Failed(String),
    /// The run must stop: the budget is spent, the endpoint fails every call, or it refused
    /// the key.
    Stop(Error),
}

impl CallError {
    /// The failure as an error of the run.
    pub fn into_error(self) -> Error {
        match self {
            Self::Failed(m) => Error::Unavailable(m),
            Self::Stop(e) => e,
        }
    }
}

/// What the calls did.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests sent, retries included.
    pub requests: AtomicU64,
    /// Replies taken from the cache.
    pub cached: AtomicU64,
    /// Retries.
    pub retries: AtomicU64,
    /// Calls that failed after their retries.
    pub failed: AtomicU64,
    /// Prompt tokens reported.
    pub input_tokens: AtomicU64,
    /// Reply tokens reported.
    pub output_tokens: AtomicU64,
    /// Failed calls since the last success.
    failing: AtomicU64,
}

/// What the calls did, read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    /// Requests sent, retries included.
    pub requests: u64,
    /// Replies taken from the cache.
    pub cached: u64,
    /// Retries.
    pub retries: u64,
    /// Calls that failed after their retries.
    pub failed: u64,
    /// Prompt tokens reported.
    pub input_tokens: u64,
    /// Reply tokens reported.
    pub output_tokens: u64,
}

/// A reply and how it was had.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The reply.
    pub reply: Reply,
    /// Whether it came from the cache.
    pub cached: bool,
    /// How long the call took (0 from the cache).
    pub latency: Duration,
}

/// What [`Model::cached_chats`] found: an answer or none per request, and the requests' keys.
pub type CachedChats = (Vec<Option<Answer>>, Vec<[u8; 32]>);

/// A model to call.
pub struct Model {
    spec: ModelSpec,
    key: Option<String>,
    http: reqwest::Client,
    limit: Semaphore,
    settings: Settings,
    cache: Option<Cache>,
    counters: Counters,
    tripped: AtomicBool,
}

/// A reply body cut for a message, with secrets taken out.
fn excerpt(body: &[u8], key: Option<&str>) -> String {
    let text = String::from_utf8_lossy(body);
    let mut text: String = text.chars().take(300).collect();
    if let Some(k) = key.filter(|k| !k.is_empty()) {
        text = text.replace(k, crate::report::redact::REDACTED);
    }
    redact(&text).into_owned()
}

/// `Retry-After` as a wait: seconds, or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(s) = v.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(600.0)));
    }
    let when = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let wait = when
        .signed_duration_since(chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    Some(wait.min(Duration::from_mins(10)))
}

/// What one attempt came to.
enum Attempt {
    Ok(Vec<u8>),
    /// May pass if tried again (after the server's wait, when it gave one).
    Again(String, Option<Duration>),
    Failed(String),
    Stop(Error),
}

impl Model {
    /// A model from `spec`, checked (its key, plain http), with its cache opened.
    ///
    /// # Errors
    /// A missing key, plain http elsewhere without `allow_http`, bad settings, or a cache that
    /// cannot be opened.
    pub fn new(spec: ModelSpec, settings: Settings) -> Result<Self> {
        spec.check(settings.allow_http)?;
        if settings.concurrency == 0 {
            return Err(Error::option("concurrency", "must be at least 1"));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(settings.timeout.min(Duration::from_secs(30)))
            .pool_idle_timeout(Duration::from_secs(90))
            .user_agent(concat!("wai/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Internal(format!("an HTTP client: {e}")))?;
        let cache = settings.cache.as_deref().map(Cache::open).transpose()?;
        Ok(Self {
            key: spec.key(),
            spec,
            http,
            limit: Semaphore::new(settings.concurrency),
            settings,
            cache,
            counters: Counters::default(),
            tripped: AtomicBool::new(false),
        })
    }

    /// The spec.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// What the calls did so far.
    pub fn tally(&self) -> Tally {
        let c = &self.counters;
        Tally {
            requests: c.requests.load(Ordering::Relaxed),
            cached: c.cached.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            input_tokens: c.input_tokens.load(Ordering::Relaxed),
            output_tokens: c.output_tokens.load(Ordering::Relaxed),
        }
    }

    /// A chat reply to `req`; `sample` tells repeats of one request apart (each its own cache
    /// entry), so at temperature 0 pass 0.
    ///
    /// # Errors
    /// [`CallError::Failed`] for this call, [`CallError::Stop`] for the run.
    pub async fn chat(&self, req: &ChatRequest, sample: u32) -> Result<Answer, CallError> {
        let body = self.chat_body(req);
        let (bytes, cached, latency) = self
            .call(&self.spec.chat_url(), &body, sample, true)
            .await?;
        self.answer(&bytes, cached, latency)
    }

    /// [`Model::chat`] for a request [`Model::cached_chats`] found no reply to: sent without
    /// looking in the cache again (the reply is stored as always).
    ///
    /// # Errors
    /// As [`Model::chat`].
    pub async fn chat_missed(&self, req: &ChatRequest, sample: u32) -> Result<Answer, CallError> {
        let body = self.chat_body(req);
        let (bytes, cached, latency) = self
            .call(&self.spec.chat_url(), &body, sample, false)
            .await?;
        self.answer(&bytes, cached, latency)
    }

    /// The replies the cache holds for `reqs` (each with its `sample`), in order: `None` for
    /// a request it does not hold (or without a cache). The requests are made ready and the
    /// replies read on all cores, the lookups made in one pass; a reply that cannot be read
    /// is `None` too (the call then reports it).
    ///
    /// # Errors
    /// The cache cannot be read.
    ///
    /// With the answers come the requests' cache keys (empty without a cache).
    pub fn cached_chats(&self, reqs: &[(ChatRequest, u32)]) -> Result<CachedChats> {
        use rayon::prelude::*;
        let Some(cache) = &self.cache else {
            return Ok((vec![None; reqs.len()], Vec::new()));
        };
        let keys: Vec<[u8; 32]> = reqs
            .par_iter()
            .map(|(req, sample)| self.chat_key(req, *sample))
            .collect::<Result<_>>()?;
        let answers = self.answers(cache.get_many(&keys)?);
        self.count_cached(answers.iter().filter(|a| a.is_some()).count() as u64);
        Ok((answers, keys))
    }

    /// The cache key of the chat request `req` with sample index `sample`.
    ///
    /// # Errors
    /// The body cannot be written (not expected).
    pub fn chat_key(&self, req: &ChatRequest, sample: u32) -> Result<[u8; 32]> {
        let bytes = serde_json::to_vec(&self.chat_body(req))
            .map_err(|e| Error::Internal(format!("a request body: {e}")))?;
        Ok(self.key_of(&self.spec.chat_url(), &bytes, sample))
    }

    /// The replies the memo leads to from `rows` (see [`Cache::memo_replies`]), in order, read
    /// on all cores; `None` without a cache. The caller counts those it uses
    /// ([`Model::count_cached`]).
    ///
    /// # Errors
    /// The cache cannot be read.
    pub fn memo_replies(&self, rows: &[[u8; 32]]) -> Result<Vec<Option<Answer>>> {
        let Some(cache) = &self.cache else {
            return Ok(vec![None; rows.len()]);
        };
        Ok(self.answers(cache.memo_replies(rows)?))
    }

    /// Stored reply bodies read as answers, on all cores (one that cannot be read is `None`: a
    /// call then reports it).
    fn answers(&self, bodies: Vec<Option<Vec<u8>>>) -> Vec<Option<Answer>> {
        use rayon::prelude::*;
        bodies
            .into_par_iter()
            .map(|b| b.and_then(|b| self.answer(&b, true, Duration::ZERO).ok()))
            .collect()
    }

    /// Counts `n` replies taken from the cache by [`Model::memo_replies`].
    pub fn count_cached(&self, n: u64) {
        self.counters.cached.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether the model has a response cache (and so a memo).
    pub fn has_cache(&self) -> bool {
        self.cache.is_some()
    }

    /// Records in the memo that each row digest's first request has the key beside it (see
    /// [`Cache::memo_put_many`]); nothing without a cache.
    ///
    /// # Errors
    /// The cache cannot be written.
    pub fn memo_put_many(&self, pairs: &[([u8; 32], [u8; 32])]) -> Result<()> {
        match &self.cache {
            Some(cache) => {
                cache.memo_put_many(pairs, self.spec.provider.as_str(), &self.spec.model)
            }
            None => Ok(()),
        }
    }

    /// The request body of `req` in the provider's dialect.
    fn chat_body(&self, req: &ChatRequest) -> Value {
        if self.spec.provider.is_anthropic() {
            wire::anthropic_body(&self.spec.model, req)
        } else {
            wire::openai_body(&self.spec.model, req)
        }
    }

    /// The cache key of the request `bytes` to `url`.
    fn key_of(&self, url: &str, bytes: &[u8], sample: u32) -> [u8; 32] {
        cache::key(
            self.spec.provider.as_str(),
            &self.spec.model,
            url,
            bytes,
            sample,
        )
    }

    /// The reply a body holds, read, counted when it is fresh.
    fn answer(&self, bytes: &[u8], cached: bool, latency: Duration) -> Result<Answer, CallError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            CallError::Failed(format!("{}: the reply is not JSON ({e})", self.spec.host()))
        })?;
        let reply = if self.spec.provider.is_anthropic() {
            wire::anthropic_reply(&value)
        } else {
            wire::openai_reply(&value)
        }
        .map_err(|m| CallError::Failed(format!("{}: {m}", self.spec.host())))?;
        if !cached {
            self.counters
                .input_tokens
                .fetch_add(reply.usage.input_tokens, Ordering::Relaxed);
            self.counters
                .output_tokens
                .fetch_add(reply.usage.output_tokens, Ordering::Relaxed);
        }
        Ok(Answer {
            reply,
            cached,
            latency,
        })
    }

    /// Embeddings of `texts`, in order.
    ///
    /// # Errors
    /// As [`Model::chat`]; Anthropic serves no embeddings (a usage error).
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, CallError> {
        if self.spec.provider.is_anthropic() {
            return Err(CallError::Stop(Error::Usage(format!(
                "`{}`: Anthropic serves no embeddings; use an OpenAI-compatible embedder",
                self.spec.text
            ))));
        }
        let body = json!({"model": self.spec.model, "input": texts});
        let (bytes, _, _) = self
            .call(&self.spec.embeddings_url(), &body, 0, true)
            .await?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            CallError::Failed(format!("{}: the reply is not JSON ({e})", self.spec.host()))
        })?;
        wire::embeddings_reply(&value, texts.len())
            .map_err(|m| CallError::Failed(format!("{}: {m}", self.spec.host())))
    }

    /// The reply body to `body` at `url`: from the cache (unless `look` is false: the caller
    /// looked already), or from the server (then stored).
    async fn call(
        &self,
        url: &str,
        body: &Value,
        sample: u32,
        look: bool,
    ) -> Result<(Vec<u8>, bool, Duration), CallError> {
        let bytes = serde_json::to_vec(body)
            .map_err(|e| CallError::Stop(Error::Internal(format!("a request body: {e}"))))?;
        let key = self.key_of(url, &bytes, sample);
        if look
            && let Some(c) = &self.cache
            && let Some(hit) = c.get(&key).map_err(CallError::Stop)?
        {
            self.counters.cached.fetch_add(1, Ordering::Relaxed);
            return Ok((hit, true, Duration::ZERO));
        }
        let _permit = self
            .limit
            .acquire()
            .await
            .map_err(|_| CallError::Stop(Error::Internal("the call limit closed".into())))?;
        let started = Instant::now();
        let reply = self.send(url, &bytes, &key).await;
        match reply {
            Ok(reply) => {
                self.counters.failing.store(0, Ordering::Relaxed);
                if let Some(c) = &self.cache {
                    c.put(&key, self.spec.provider.as_str(), &self.spec.model, &reply)
                        .map_err(CallError::Stop)?;
                }
                Ok((reply, false, started.elapsed()))
            }
            Err(CallError::Failed(m)) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                let failing = self.counters.failing.fetch_add(1, Ordering::Relaxed) + 1;
                if failing >= u64::from(self.settings.breaker) {
                    self.tripped.store(true, Ordering::Relaxed);
                    return Err(CallError::Stop(Error::Unavailable(format!(
                        "`{}` failed {failing} calls in a row (the last: {m}); stopped rather than fail every row. Rows graded so far are kept in the cache: fix the endpoint and run again",
                        self.spec.text
                    ))));
                }
                Err(CallError::Failed(m))
            }
            Err(stop) => Err(stop),
        }
    }

    /// Sends `bytes`, retrying what may pass.
    async fn send(&self, url: &str, bytes: &[u8], key: &[u8; 32]) -> Result<Vec<u8>, CallError> {
        let mut attempt = 0u32;
        loop {
            if self.tripped.load(Ordering::Relaxed) {
                return Err(CallError::Stop(Error::Unavailable(format!(
                    "`{}` failed every call; stopped",
                    self.spec.text
                ))));
            }
            self.spend()?;
            let outcome = self.attempt(url, bytes).await;
            let (why, wait) = match outcome {
                Attempt::Ok(b) => return Ok(b),
                Attempt::Failed(m) => return Err(CallError::Failed(m)),
                Attempt::Stop(e) => return Err(CallError::Stop(e)),
                Attempt::Again(why, wait) => (why, wait),
            };
            if attempt >= self.settings.retries {
                let tries = attempt + 1;
                return Err(CallError::Failed(format!("{why} (after {tries} tries)")));
            }
            let backoff = self
                .settings
                .backoff
                .saturating_mul(1 << attempt.min(16))
                .min(Duration::from_secs(30));
            // Jitter from the request's own hash: calls that failed together do not retry together.
            let jitter = 0.5 + f64::from(key[attempt as usize % key.len()]) / 510.0;
            let wait = wait.unwrap_or_else(|| backoff.mul_f64(jitter));
            tracing::debug!(target: "wai::models", "{why}; retrying in {:.2}s", wait.as_secs_f64());
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// Counts a request against the budget.
    fn spend(&self) -> Result<(), CallError> {
        let sent = self.counters.requests.fetch_add(1, Ordering::Relaxed);
        if let Some(max) = self.settings.max_calls
            && sent >= max
        {
            return Err(CallError::Stop(Error::Budget(format!(
                "`--max-calls {max}` is spent ({max} requests sent to `{}`); replies so far are in the cache, so a rerun with a larger budget repeats none of them",
                self.spec.text
            ))));
        }
        if let Some(max) = self.settings.max_cost_tokens {
            let used = self.counters.input_tokens.load(Ordering::Relaxed)
                + self.counters.output_tokens.load(Ordering::Relaxed);
            if used >= max {
                return Err(CallError::Stop(Error::Budget(format!(
                    "`--max-cost-tokens {max}` is spent ({used} tokens reported by `{}`); replies so far are in the cache, so a rerun with a larger budget repeats none of them",
                    self.spec.text
                ))));
            }
        }
        Ok(())
    }

    /// One request.
    async fn attempt(&self, url: &str, bytes: &[u8]) -> Attempt {
        let host = self.spec.host();
        let mut request = self
            .http
            .post(url)
            .timeout(self.settings.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes.to_vec());
        if let Some(k) = &self.key {
            request = if self.spec.provider.is_anthropic() {
                request
                    .header("x-api-key", k)
                    .header("anthropic-version", "2023-06-01")
            } else {
                request.bearer_auth(k)
            };
        } else if self.spec.provider.is_anthropic() {
            request = request.header("anthropic-version", "2023-06-01");
        }
        let secs = self.settings.timeout.as_secs_f64();
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Attempt::Again(format!("{host} did not answer within {secs}s"), None);
            }
            Err(e) if e.is_connect() => {
                return Attempt::Again(format!("{host} is unreachable (no connection)"), None);
            }
            Err(e) => {
                return Attempt::Again(
                    format!("{host}: the request failed ({})", redact(&e.to_string())),
                    None,
                );
            }
        };
        let status = response.status();
        let wait = retry_after(response.headers());
        let body = match response.bytes().await {
            Ok(b) => b.to_vec(),
            Err(e) if e.is_timeout() => {
                return Attempt::Again(
                    format!("{host} did not finish its reply within {secs}s"),
                    None,
                );
            }
            Err(_) => {
                return Attempt::Again(
                    format!("{host} closed the connection in the middle of its reply"),
                    None,
                );
            }
        };
        let code = status.as_u16();
        match code {
            200..=299 => {
                if serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
                    return Attempt::Again(
                        format!(
                            "{host} answered HTTP {code} with a body that is not JSON: {}",
                            excerpt(&body, self.key.as_deref())
                        ),
                        None,
                    );
                }
                Attempt::Ok(body)
            }
            401 | 403 => Attempt::Stop(Error::Unavailable(format!(
                "`{}`: {host} refused the key (HTTP {code}){}: {}",
                self.spec.text,
                self.spec
                    .provider
                    .key_var()
                    .map_or(String::new(), |v| format!("; check {v}")),
                excerpt(&body, self.key.as_deref())
            ))),
            404 => Attempt::Stop(Error::Unavailable(format!(
                "{host} answered HTTP 404 for `{url}` (no such model `{}` or path): {}",
                self.spec.model,
                excerpt(&body, self.key.as_deref())
            ))),
            408 | 409 | 425 | 429 | 500..=599 => Attempt::Again(
                format!(
                    "{host} answered HTTP {code}: {}",
                    excerpt(&body, self.key.as_deref())
                ),
                wait,
            ),
            _ => Attempt::Failed(format!(
                "{host} refused the request (HTTP {code}): {}",
                excerpt(&body, self.key.as_deref())
            )),
        }
    }
}

/// A shared model.
pub type Shared = Arc<Model>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(reqwest::header::RETRY_AFTER, "1.5".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert(
            reqwest::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(
            retry_after(&h),
            Some(Duration::ZERO),
            "a date in the past: no wait"
        );
        h.insert(reqwest::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn an_echoed_key_never_reaches_a_message() {
        let body = br#"{"error": "bad key sk-live-abcdefghijkl for Bearer tok123456789"}"#;
        let text = excerpt(body, Some("sk-live-abcdefghijkl"));
        assert!(!text.contains("sk-live"), "{text}");
        assert!(!text.contains("tok123456789"), "{text}");
    }
}
