//! A deterministic model server on 127.0.0.1 for tests and benchmarks: OpenAI's
//! `/v1/chat/completions`, `/v1/embeddings` and `/v1/models`, and Anthropic's `/v1/messages`.
//! Its replies are a function of the request, so a test knows the verdict to expect, and it
//! can be told to fail a share of requests in each way a real server does. Chat completions
//! stream as server-sent events when the request asks (`stream: true`).
//!
//! What it answers, from the last user message:
//! - as an ask writer (a system prompt that opens with
//!   [`crate::stages::simulate::llm_writer::WRITER_SYSTEM_OPENING`]): `Hi, ` and the message it
//!   was given, or that message after tool markup when the model is `bad-writer`;
//! - as the person a model agent serves (a system prompt that opens with
//!   [`crate::stages::simulate::user::USER_SYSTEM_OPENING`]): `[leaves]` when the agent has asked
//!   twice, else `It is order A1001.` to a question, else `Did it go through?`;
//! - with tools offered and no tool result yet: a call of the first tool, whose first parameter
//!   gets the id the last message names (`A1001`, `ORD-7`), if it names one; when it names none,
//!   a question (`Which order is this about?`) if the system prompt says `ASK_FOR_ID`, else the
//!   call with `{}`; a question every time (numbered), and never a call, if it says
//!   `ALWAYS_ASK`; the call as `<tool_call>` markup in the text if it says `MARKUP_CALLS`, as
//!   Llama's `<function=NAME>` tags if it says `LLAMA_CALLS`;
//! - after a tool result: `done: <the result>`;
//! - `REFUSE`: a refusal; `GARBLE`: prose, never the contract; `GARBLE_ONCE`: prose, then the
//!   contract once asked again; `NAN`: a verdict whose score is `NaN`;
//! - a pairwise question (a JSON object with `A` and `B`): the side whose record holds `BETTER`
//!   wins, a tie when both or neither do; `BIASED` anywhere makes it answer `A` whatever the
//!   sides say (a judge that favours a position);
//! - otherwise a judge verdict: `{"reason": ..., "score": 1}` when the text holds `PASS`, else 0.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A way to fail.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// 429 with `Retry-After` (seconds).
    RateLimited(f64),
    /// 500.
    ServerError,
    /// Never answer.
    Hang,
    /// Start a 200 reply and close the connection in the middle of its body.
    CloseMidBody,
    /// 200 with a body that is not JSON.
    Malformed,
    /// 401 whose body echoes the request's `Authorization` header.
    EchoKey,
}

/// How the server behaves.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Added to every answer.
    pub latency: Duration,
    /// Faults and the share of requests each hits (the first that fires wins), spread evenly
    /// over the request count, so the same run fails the same requests.
    pub faults: Vec<(Fault, f64)>,
}

#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    /// Requests in their latency now, and the most there were at once.
    waiting: AtomicU64,
    most_waiting: AtomicU64,
    answered: AtomicU64,
    bodies: Mutex<HashMap<[u8; 32], u64>>,
    keys: Mutex<Vec<String>>,
}

struct Shared {
    config: Config,
    tally: Tally,
}

/// A running server; it stops when dropped.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ModelServer {
    /// Starts a server on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no port can be bound or no runtime started (a test machine problem).
    #[must_use]
    pub fn start(config: Config) -> Self {
        let shared = Arc::new(Shared {
            config,
            tally: Tally::default(),
        });
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let state = Arc::clone(&shared);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime for the model server");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("a free port");
                addr_tx
                    .send(listener.local_addr().expect("an address"))
                    .expect("the caller waits");
                let app = Router::new()
                    .route("/v1/chat/completions", post(chat))
                    .route("/v1/messages", post(messages))
                    .route("/v1/embeddings", post(embeddings))
                    .route("/v1/models", get(models))
                    .with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await
                    .expect("the model server runs");
            });
        });
        let addr = addr_rx.recv().expect("the server's address");
        Self {
            addr,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// The API base: `http://127.0.0.1:PORT/v1`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Requests received.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.shared.tally.requests.load(Ordering::SeqCst)
    }

    /// The most requests that were in their latency at once (with a latency set): how many
    /// calls a client had out together.
    #[must_use]
    pub fn most_at_once(&self) -> u64 {
        self.shared.tally.most_waiting.load(Ordering::SeqCst)
    }

    /// Requests answered with a whole 200 reply.
    #[must_use]
    pub fn answered(&self) -> u64 {
        self.shared.tally.answered.load(Ordering::SeqCst)
    }

    /// Request bodies answered more than once.
    ///
    /// # Panics
    /// When the tally's lock is poisoned.
    #[must_use]
    pub fn answered_twice(&self) -> u64 {
        self.shared
            .tally
            .bodies
            .lock()
            .expect("the tally")
            .values()
            .filter(|n| **n > 1)
            .count() as u64
    }

    /// Every `Authorization` or `x-api-key` header seen.
    ///
    /// # Panics
    /// When the tally's lock is poisoned.
    #[must_use]
    pub fn keys_seen(&self) -> Vec<String> {
        self.shared.tally.keys.lock().expect("the tally").clone()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // A hung handler would keep the thread: leave it to the process's end.
        drop(self.thread.take());
    }
}

/// The fault this request hits, if any.
fn fault_for(shared: &Shared, n: u64) -> Option<Fault> {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "request counts are small"
    )]
    let hits =
        |share: f64| ((n + 1) as f64 * share).floor() as u64 > (n as f64 * share).floor() as u64;
    shared
        .config
        .faults
        .iter()
        .find(|(_, share)| hits(*share))
        .map(|(f, _)| *f)
}

/// Counts the request; the fault response, when it hits one.
async fn admit(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let n = shared.tally.requests.fetch_add(1, Ordering::SeqCst);
    for name in [header::AUTHORIZATION.as_str(), "x-api-key"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            shared
                .tally
                .keys
                .lock()
                .expect("the tally")
                .push(v.to_owned());
        }
    }
    if !shared.config.latency.is_zero() {
        /// Counts a request out of its latency however it ends (a client may go).
        struct Out<'a>(&'a AtomicU64);
        impl Drop for Out<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let now = shared.tally.waiting.fetch_add(1, Ordering::SeqCst) + 1;
        let _out = Out(&shared.tally.waiting);
        shared.tally.most_waiting.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(shared.config.latency).await;
    }
    Some(match fault_for(shared, n)? {
        Fault::RateLimited(after) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, after.to_string())],
            "slow down",
        )
            .into_response(),
        Fault::ServerError => {
            (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded").into_response()
        }
        Fault::Hang => {
            tokio::time::sleep(Duration::from_hours(1)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Fault::CloseMidBody => {
            let parts: Vec<Result<&'static [u8], std::io::Error>> = vec![
                Ok(b"{\"choices\": [{\"message\": {\"content\": \"hal"),
                Err(std::io::Error::other("cut")),
            ];
            Response::new(Body::from_stream(futures::stream::iter(parts)))
        }
        Fault::Malformed => (StatusCode::OK, "{\"choices\": [oops").into_response(),
        Fault::EchoKey => {
            let seen = headers
                .get(header::AUTHORIZATION)
                .or_else(|| headers.get("x-api-key"))
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none");
            (
                StatusCode::UNAUTHORIZED,
                format!("{{\"error\": {{\"message\": \"invalid key {seen}\"}}}}"),
            )
                .into_response()
        }
    })
}

fn answered(shared: &Shared, body: &[u8]) {
    shared.tally.answered.fetch_add(1, Ordering::SeqCst);
    let key: [u8; 32] = Sha256::digest(body).into();
    *shared
        .tally
        .bodies
        .lock()
        .expect("the tally")
        .entry(key)
        .or_insert(0) += 1;
}

/// The text of a message's content (a string, or Anthropic's blocks).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| {
                b.get("text")
                    .and_then(Value::as_str)
                    .or_else(|| b.get("content").and_then(Value::as_str))
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// An id in an ask: letters, an optional dash, digits.
static ID: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"\b[A-Z]+-?\d+\b").expect("a valid pattern"));

/// What to answer: `Ok(text)`, or `Err((tool name, arguments as JSON text))` for a call.
fn decide(model: &str, messages: &[Value], tools: &[Value]) -> Result<String, (String, String)> {
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let role = last.get("role").and_then(Value::as_str).unwrap_or("");
    let text = text_of(last.get("content").unwrap_or(&Value::Null));
    let is_result = role == "tool"
        || last
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|b| b.iter().any(|b| b["type"] == "tool_result"));
    if is_result {
        return Ok(format!("done: {text}"));
    }
    let system = messages
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)))
        .unwrap_or_default();
    if system.starts_with(crate::stages::simulate::llm_writer::WRITER_SYSTEM_OPENING) {
        let given = text
            .split_once("The message to rewrite:\n")
            .map_or(text.as_str(), |(_, m)| m);
        return Ok(if model == "bad-writer" {
            format!("<tool_call>{{\"name\": \"x\"}}</tool_call> {given}")
        } else {
            format!("Hi, {given}")
        });
    }
    if system.starts_with(crate::stages::simulate::user::USER_SYSTEM_OPENING) {
        let questions = text
            .lines()
            .filter(|l| l.starts_with("The agent replied") && l.contains('?'))
            .count();
        let last_agent = text
            .lines()
            .rev()
            .find(|l| l.starts_with("The agent"))
            .unwrap_or("");
        return Ok(if questions >= 2 {
            "[leaves]".into()
        } else if last_agent.contains('?') {
            "It is order A1001.".into()
        } else {
            "Did it go through?".into()
        });
    }
    if !tools.is_empty() && system.contains("ALWAYS_ASK") {
        // Numbered, so no question repeats the one before.
        let asked = messages
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            .count();
        return Ok(format!(
            "Could you tell me which order this is about? (question {})",
            asked + 1
        ));
    }
    if let Some(tool) = tools.first() {
        let f = tool.get("function").unwrap_or(tool);
        let name = f.get("name").and_then(Value::as_str).unwrap_or("tool");
        // The id the ask names (`A1001`, `ORD-7`) goes to the tool's first parameter.
        let arguments = match (
            ID.find(&text),
            f.pointer("/parameters/properties")
                .or_else(|| f.pointer("/input_schema/properties"))
                .and_then(Value::as_object)
                .and_then(|p| p.keys().next()),
        ) {
            (Some(id), Some(param)) => json!({param.as_str(): id.as_str()}),
            (None, _) if system.contains("ASK_FOR_ID") => {
                return Ok("Which order is this about?".into());
            }
            _ => json!({}),
        };
        if system.contains("LLAMA_CALLS") {
            // Llama's own tags, which wai does not read as a call.
            return Ok(format!("<function={name}>{arguments}</function>"));
        }
        if system.contains("MARKUP_CALLS") {
            // A server without a tool parser: the call as Hermes markup in the text.
            return Ok(format!(
                "Checking.\n<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {arguments}}}\n</tool_call>"
            ));
        }
        return Err((name.to_owned(), arguments.to_string()));
    }
    let asked_again = messages
        .iter()
        .any(|m| m.get("role").and_then(Value::as_str) == Some("assistant"));
    let all: String = messages
        .iter()
        .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(if all.contains("REFUSE") {
        "I'm sorry, but I can't grade this conversation.".to_owned()
    } else if all.contains("GARBLE_ONCE") && !asked_again
        || all.contains("GARBLE") && !all.contains("GARBLE_ONCE")
    {
        "The agent seems fine overall, I think.".to_owned()
    } else if let Some(winner) = pairwise(&text) {
        format!("{{\"winner\": \"{winner}\", \"reason\": \"the test server's rule\"}}")
    } else if all.contains("NAN") {
        "{\"reason\": \"not a number\", \"score\": NaN}".to_owned()
    } else if all.contains("PASS") {
        "{\"reason\": \"the reply says PASS\", \"score\": 1}".to_owned()
    } else {
        "{\"reason\": \"the reply does not say PASS\", \"score\": 0}".to_owned()
    })
}

/// The answer to a pairwise question (`{"request", "A", "B"}`), when `text` is one.
fn pairwise(text: &str) -> Option<&'static str> {
    let q: Value = serde_json::from_str(text).ok()?;
    let (a, b) = (q.get("A")?.to_string(), q.get("B")?.to_string());
    if text.contains("BIASED") {
        return Some("A");
    }
    Some(match (a.contains("BETTER"), b.contains("BETTER")) {
        (true, false) => "A",
        (false, true) => "B",
        _ => "tie",
    })
}

/// A 400 with an error object in the shape both APIs use.
fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": {"message": message, "type": "invalid_request_error"}})),
    )
        .into_response()
}

fn tokens(s: &str) -> u64 {
    (s.len() as u64).div_ceil(4)
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(fault) = admit(&shared, &headers).await {
        return fault;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let Some(messages) = req["messages"].as_array().cloned() else {
        return bad_request("`messages` must be a list");
    };
    let tools = req["tools"].as_array().cloned().unwrap_or_default();
    let prompt_tokens = tokens(&req["messages"].to_string());
    let (message, finish) = match decide(req["model"].as_str().unwrap_or(""), &messages, &tools) {
        Ok(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Err((tool, arguments)) => (
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{}", messages.len()), "type": "function", "function": {"name": tool, "arguments": arguments}}]}),
            "tool_calls",
        ),
    };
    let completion_tokens = tokens(&message.to_string());
    let mut choice = json!({"index": 0, "message": message, "finish_reason": finish});
    if req["logprobs"] == true {
        choice["logprobs"] =
            json!({"content": [{"token": "x", "logprob": -0.5}, {"token": "y", "logprob": -0.25}]});
    }
    answered(&shared, &body);
    if req["stream"] == true {
        return stream(&req, &message, finish, prompt_tokens, completion_tokens);
    }
    axum::Json(json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": req["model"],
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
    }))
    .into_response()
}

/// The reply as OpenAI's server-sent events (`stream: true`): the role, the content in pieces
/// or each tool call (its name, then its arguments), the finish reason, the usage when
/// `stream_options.include_usage` asks, and `[DONE]`.
fn stream(
    req: &Value,
    message: &Value,
    finish: &str,
    prompt_tokens: u64,
    completion_tokens: u64,
) -> Response {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "model": req["model"],
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if let Some(text) = message["content"].as_str() {
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(8) {
            events.push(chunk(
                json!({"content": piece.iter().collect::<String>()}),
                Value::Null,
            ));
        }
    }
    for (i, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                    "function": {"name": call["function"]["name"], "arguments": ""}}]}),
            Value::Null,
        ));
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "function": {"arguments": call["function"]["arguments"]}}]}),
            Value::Null,
        ));
    }
    events.push(chunk(json!({}), json!(finish)));
    if req["stream_options"]["include_usage"] == true {
        events.push(json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "model": req["model"], "choices": [],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}}));
    }
    let mut body = String::new();
    for e in &events {
        let _ = write!(body, "data: {e}\n\n");
    }
    body.push_str("data: [DONE]\n\n");
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream")],
        body,
    )
        .into_response()
}

async fn messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(fault) = admit(&shared, &headers).await {
        return fault;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    if headers.get("anthropic-version").is_none() {
        return (
            StatusCode::BAD_REQUEST,
            "{\"error\": {\"message\": \"anthropic-version header is required\"}}",
        )
            .into_response();
    }
    let Some(mut messages) = req["messages"].as_array().cloned() else {
        return bad_request("`messages` must be a list");
    };
    if let Some(system) = req["system"].as_str() {
        messages.insert(0, json!({"role": "system", "content": system}));
    }
    let tools = req["tools"].as_array().cloned().unwrap_or_default();
    let (content, stop) = match decide(req["model"].as_str().unwrap_or(""), &messages, &tools) {
        Ok(text) => (json!([{"type": "text", "text": text}]), "end_turn"),
        Err((tool, arguments)) => (
            json!([{"type": "tool_use", "id": format!("toolu_{}", messages.len()), "name": tool,
                    "input": serde_json::from_str::<Value>(&arguments).unwrap_or_else(|_| json!({}))}]),
            "tool_use",
        ),
    };
    answered(&shared, &body);
    axum::Json(json!({
        "id": "msg_test", "type": "message", "role": "assistant", "model": req["model"],
        "content": content, "stop_reason": stop,
        "usage": {"input_tokens": tokens(&req["messages"].to_string()), "output_tokens": tokens(&content.to_string())},
    }))
    .into_response()
}

async fn embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(fault) = admit(&shared, &headers).await {
        return fault;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let inputs: Vec<String> = match &req["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(xs) => xs
            .iter()
            .map(|x| x.as_str().unwrap_or_default().to_owned())
            .collect(),
        _ => Vec::new(),
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let d = Sha256::digest(t.to_lowercase().as_bytes());
            let v: Vec<f64> = d
                .iter()
                .take(8)
                .map(|b| f64::from(*b) / 255.0 - 0.5)
                .collect();
            json!({"object": "embedding", "index": i, "embedding": v})
        })
        .collect();
    answered(&shared, &body);
    axum::Json(json!({"object": "list", "data": data, "model": req["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}})).into_response()
}

async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(fault) = admit(&shared, &headers).await {
        return fault;
    }
    axum::Json(json!({"object": "list", "data": [{"id": "judge-m", "object": "model"}]}))
        .into_response()
}
