//! Export: rows into what trainers load. Each row becomes one training row (OpenAI chat
//! messages with a system prompt, `tools`, assistant `tool_calls` with ids and JSON-string
//! arguments, tool turns with `tool_call_id`, a loss mask) and carries its reward, reason and
//! provenance; the TRL shape decodes the arguments back to objects and, for a final-turn mask or
//! unrolled turns, splits rows into prompt and completion so the trainer trains what the mask
//! says. Two gates run before anything is written: every tool call's arguments must round-trip
//! to the target encoding, and no assistant turn may quote the row's privileged context.

use foldhash::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;
use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

pub use columns::{Side, Wire, WireCache};

mod columns;

/// The wire shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// OpenAI chat-completions rows with a loss mask.
    Openai,
    /// TRL conversational (or prompt/completion) rows.
    Trl,
}

/// What the loss covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MaskMode {
    /// Every assistant turn.
    Assistant,
    /// The last assistant turn only.
    Final,
}

/// Export settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Prepended as a system message.
    pub system_prompt: Option<String>,
    /// OpenAI tool envelopes written on every row.
    pub tools: Option<Vec<Value>>,
    /// Remove `<think>...</think>` blocks from assistant turns.
    pub strip_think: bool,
    /// What the loss covers.
    pub mask_mode: MaskMode,
    /// One sample per assistant turn.
    pub unroll: bool,
    /// Cut tool outputs longer than this.
    pub max_tool_output_chars: Option<usize>,
    /// The wire shape.
    pub format: Format,
}

/// Keys carried from a row onto its training row, in this order.
/// `world_state` and `faults` (the world's hidden state and the fault plan) are teacher-only and
/// stay on the row.
pub const CARRY: [&str; 33] = [
    "reward",
    "qwen_reward",
    "reason",
    "prompt",
    "scenario_id",
    "fault_detected",
    "label_source",
    "failure_class",
    "judge_status",
    "judge_name",
    "lineage",
    "logprob",
    "n_tokens",
    "token_logprobs",
    "sampling",
    "policy_version",
    "writer_model",
    "user_model",
    "usage",
    "tier",
    "ask_family",
    "ask",
    "stance",
    "tone",
    "texture",
    "vagueness",
    "phrasing",
    "pressure",
    "user",
    "history",
    "length",
    "intent_known",
    "tool_known",
];

static THINK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?is)<think>.*?</think>\s*").expect("a valid pattern"));

/// Per-row facts the report sums.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowFacts {
    /// Tool calls checked by the round-trip gate.
    pub calls: u64,
    /// Calls whose arguments do not round-trip.
    pub invalid_calls: u64,
    /// Tool outputs cut.
    pub outputs_cut: u64,
    /// Characters cut.
    pub chars_cut: u64,
    /// Assistant turns the format's consumer trains (OpenAI: `weight` 1; TRL: the assistant
    /// turns of `messages` under `assistant_only_loss=True`, or of `completion`).
    pub trained: u64,
    /// Assistant turns it does not train (OpenAI: `weight` 0; TRL: those inside `prompt`).
    pub masked: u64,
    /// Assistant turns TRL's `SFTTrainer` trains in the written rows (it reads no `weight`): for
    /// the TRL shapes the same as `trained`.
    pub trl_trained: u64,
    /// Turns after the last assistant turn (a tool result the agent never answered, a user turn),
    /// cut: a training conversation ends on what the policy wrote.
    pub trailing_cut: u64,
    /// The privileged needle an assistant turn quotes, when it does.
    pub leak: Option<String>,
    /// The row had a privileged block.
    pub privileged: bool,
    /// The row ended on the token cap.
    pub truncated: bool,
    /// The row has no assistant turn to train, and was not written.
    pub no_completion: bool,
}

/// `value` decoded while it is a JSON string (up to three times), as the reference reads
/// arguments: a dict stays a dict, a string that does not decode stays a string.
fn decode_args(v: &Value) -> Value {
    let mut cur = v.clone();
    for _ in 0..3 {
        match &cur {
            Value::String(s) => match serde_json::from_str::<Value>(s) {
                Ok(x) => cur = x,
                Err(_) => break,
            },
            _ => break,
        }
    }
    if cur.is_null() { json!({}) } else { cur }
}

/// The text of a message's content (a string, or a list of text parts).
fn content_text(v: Option<&Value>) -> String {
    v.and_then(crate::pipeline::row::content_of)
        .unwrap_or_default()
}

/// A row's messages: its `messages` when it has some, else the conversation rebuilt from its
/// prompt and steps ([`conversation`]).
pub fn messages_of(row: &Map<String, Value>) -> std::borrow::Cow<'_, [Value]> {
    match row.get("messages").and_then(Value::as_array) {
        Some(m) if !m.is_empty() => std::borrow::Cow::Borrowed(m.as_slice()),
        _ => std::borrow::Cow::Owned(conversation(row)),
    }
}

/// Rebuilds the conversation of a row without `messages` from its prompt and steps (the final
/// reply is always the last turn: the reference dropped it after a differing assistant text).
pub fn conversation(row: &Map<String, Value>) -> Vec<Value> {
    // A row with only a `tool_trace` ([{tool, input, output}]) has its calls as steps.
    if row.get("messages").is_none()
        && row.get("steps").is_none()
        && let Some(trace) = row.get("tool_trace").and_then(Value::as_array)
    {
        let mut with_steps = row.clone();
        let steps: Vec<Value> = trace
            .iter()
            .map(|t| json!({"tool": t.get("tool").cloned().unwrap_or(Value::Null), "arguments": t.get("input").cloned().unwrap_or_else(|| json!({})), "result": t.get("output").cloned().unwrap_or(Value::Null)}))
            .collect();
        with_steps.insert("steps".into(), Value::Array(steps));
        return conversation(&with_steps);
    }
    let mut out = Vec::new();
    if let Some(o) = row
        .get("opener")
        .and_then(Value::as_str)
        .filter(|o| !o.is_empty())
    {
        out.push(json!({"role": "assistant", "content": o}));
    }
    if let Some(p) = row
        .get("prompt")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
    {
        out.push(json!({"role": "user", "content": p}));
    }
    for s in row
        .get("steps")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(u) = s
            .get("user")
            .filter(|u| u.as_str().is_some_and(|x| !x.is_empty()))
        {
            out.push(json!({"role": "user", "content": u}));
        } else if let Some(tool) = s.get("tool").and_then(Value::as_str) {
            let result = match s.get("result") {
                Some(Value::String(r)) => r.clone(),
                Some(r) => r.to_string(),
                None => String::new(),
            };
            out.push(json!({"role": "assistant", "content": s.get("text").and_then(Value::as_str).unwrap_or(""),
                            "tool_calls": [{"name": tool, "arguments": s.get("arguments").cloned().unwrap_or_else(|| json!({}))}]}));
            out.push(json!({"role": "tool", "name": tool, "content": result}));
        } else if let Some(t) = s
            .get("text")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            out.push(json!({"role": "assistant", "content": t}));
        }
    }
    let final_text = row.get("final_text").and_then(Value::as_str).unwrap_or("");
    if !final_text.trim_start().starts_with("<agent error") {
        while out.len() > 1
            && out
                .last()
                .and_then(|m| m.get("role"))
                .and_then(Value::as_str)
                == Some("user")
        {
            out.pop();
        }
    }
    if !final_text.is_empty() {
        let said = out.iter().any(|m| {
            m.get("role").and_then(Value::as_str) == Some("assistant")
                && m.get("content").and_then(Value::as_str) == Some(final_text)
        });
        if !said {
            match out.last_mut() {
                Some(m)
                    if m.get("role").and_then(Value::as_str) == Some("assistant")
                        && m.get("tool_calls").is_none()
                        && content_text(m.get("content")).trim().is_empty() =>
                {
                    m["content"] = Value::String(final_text.to_owned());
                }
                _ => out.push(json!({"role": "assistant", "content": final_text})),
            }
        }
    }
    out
}

/// `s` with white space collapsed to single spaces, trimmed, and lowercased, in one pass.
pub(crate) fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_normalized(s, &mut out);
    out
}

/// Appends `s` normalized as [`normalize`] does (a separating space first when `out` is not
/// empty and `s` has a word).
pub(crate) fn push_normalized(s: &str, out: &mut String) {
    if s.is_ascii() {
        // Already single-spaced and trimmed (the common case): a copy, lowercased.
        let b = s.as_bytes();
        if !b.is_empty()
            && b[0] != b' '
            && b[b.len() - 1] != b' '
            && memchr::memchr3(b'\t', b'\n', b'\r', b).is_none()
            && memchr::memchr(0x0c, b).is_none()
            && memchr::memmem::find(b, b"  ").is_none()
        {
            if !out.is_empty() {
                out.push(' ');
            }
            let at = out.len();
            out.push_str(s);
            out[at..].make_ascii_lowercase();
            return;
        }
        // Byte by byte.
        out.reserve(s.len() + 1);
        let mut space = !out.is_empty();
        for &b in s.as_bytes() {
            if b.is_ascii_whitespace() {
                space = !out.is_empty();
            } else {
                if space {
                    out.push(' ');
                    space = false;
                }
                out.push(char::from(b.to_ascii_lowercase()));
            }
        }
        return;
    }
    let mut space = !out.is_empty();
    let mut started = false;
    for c in s.chars() {
        if c.is_whitespace() {
            space = started || space;
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        started = true;
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            out.extend(c.to_lowercase());
        }
    }
}

/// The needles of a row's privileged block, when it has one.
fn row_needles(row: &Map<String, Value>) -> Option<Needles> {
    row.get("privileged")
        .filter(|p| !p.is_null() && p.as_str() != Some(""))
        .map(Needles::of)
}

/// The privileged text a reply quotes, if any: the final reply and the assistant turns against
/// every string of 12 characters or more in the row's privileged block ([`Needles::quoted`]
/// says which quotes are not leaks). The first value says whether the row had a block.
pub fn leak(row: &Map<String, Value>, messages: &[Value]) -> (bool, Option<String>) {
    let Some(needles) = row_needles(row) else {
        return (false, None);
    };
    let assistant: Vec<String> = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .map(|m| match m.get("content") {
            Some(Value::String(c)) => c.clone(),
            other => content_text(other),
        })
        .collect();
    let final_text = row.get("final_text").and_then(Value::as_str).unwrap_or("");
    let texts: Vec<&str> = std::iter::once(final_text)
        .chain(assistant.iter().map(String::as_str))
        .collect();
    let ask = row.get("prompt").and_then(Value::as_str).unwrap_or("");
    // The final reply, and the last assistant turn when it says the same.
    let mut at = vec![0];
    if assistant.last().is_some_and(|a| a == final_text) {
        at.push(texts.len() - 1);
    }
    (true, needles.quoted(ask, final_text, &at, &texts).cloned())
}

/// Keys of a training row that hold no text of the row's: the tool schemas (given with
/// `--tools`), the ask (never secret), and wai's own stamps.
const NOT_CHECKED: [&str; 5] = [
    "tools",
    "prompt_text",
    "schema_version",
    "group_id",
    "unroll",
];

/// Every text a training row exports, in order, for the leak gate: each turn's text but the
/// tool results (what the world told the agent) and the system prompt (given with
/// `--system-prompt`, not the row's), each call's arguments, and every string of every other
/// field but [`NOT_CHECKED`] ones. The position of each message list's last assistant text goes
/// to `answers` (where the final reply is said).
pub(crate) fn exported_texts<'a>(
    row: &'a Map<String, Value>,
    out: &mut Vec<&'a str>,
    answers: &mut Vec<usize>,
) {
    fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            Value::Object(m) => m.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    for (k, v) in row {
        match (k.as_str(), v) {
            ("messages" | "prompt" | "completion" | "chosen" | "rejected", Value::Array(turns)) => {
                let last = turns.iter().rposition(|m| m["role"] == "assistant");
                for (j, m) in turns.iter().enumerate() {
                    if m["role"] == "tool" || m["role"] == "system" {
                        continue;
                    }
                    if let Some(c) = m.get("content") {
                        if Some(j) == last && c.is_string() {
                            answers.push(out.len());
                        }
                        strings(c, out);
                    }
                    for call in m
                        .get("tool_calls")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        strings(&call["function"]["arguments"], out);
                    }
                }
            }
            (k, _) if NOT_CHECKED.contains(&k) || k == "prompt" => {}
            (_, v) => strings(v, out),
        }
    }
}

/// The needles of a privileged block (its `reference`, `principle` and `hidden_state` strings,
/// normalized, of 12 characters or more), each with a finder for its longest word.
#[derive(Debug, Default)]
pub(crate) struct Needles {
    texts: Vec<String>,
    /// Whether each needle is a reference answer (a string under `privileged.reference`).
    reference: Vec<bool>,
    longest: Vec<memchr::memmem::Finder<'static>>,
}

impl Needles {
    /// Every string anywhere in a privileged block (the block itself when it is a string), of 12
    /// characters or more once normalized.
    pub(crate) fn of(privileged: &Value) -> Self {
        fn walk(v: &Value, reference: bool, out: &mut Vec<(String, bool)>) {
            match v {
                Value::String(s) => {
                    let n = normalize(s);
                    if n.chars().count() >= 12 {
                        out.push((n, reference));
                    }
                }
                Value::Array(a) => a.iter().for_each(|x| walk(x, reference, out)),
                Value::Object(m) => m.values().for_each(|x| walk(x, reference, out)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        match privileged {
            Value::Object(m) => {
                for (k, v) in m {
                    walk(v, k == "reference", &mut found);
                }
            }
            other => walk(other, false, &mut found),
        }
        let (texts, reference): (Vec<String>, Vec<bool>) = found.into_iter().unzip();
        let longest = texts
            .iter()
            .map(|n| {
                let w = n.split(' ').max_by_key(|w| w.len()).unwrap_or("");
                memchr::memmem::Finder::new(w).into_owned()
            })
            .collect();
        Self {
            texts,
            reference,
            longest,
        }
    }

    /// The first needle `texts` quote (all normalized and joined by spaces), where quoting it
    /// leaks it. Two quotes are not leaks:
    /// - a needle the ask itself says (`ask`) is no secret;
    /// - a reference answer in the final reply (`answer`) when the reply gives that answer: its
    ///   last non-empty line, or all of it, equals the reference once case, ASCII punctuation
    ///   and spacing are set aside (what the exact-match verifier passes). That is the task, not
    ///   a leak; the same reference anywhere else (an earlier turn, a reason, a field) is one.
    ///
    /// When every text is ASCII, a needle can only be found if its longest word occurs in the
    /// texts with ASCII case folded, so rows no needle could match are cleared without
    /// normalizing.
    pub(crate) fn quoted(
        &self,
        ask: &str,
        answer: &str,
        answer_at: &[usize],
        texts: &[&str],
    ) -> Option<&String> {
        if self.texts.is_empty() {
            return None;
        }
        if texts.iter().all(|t| t.is_ascii()) {
            thread_local! {
                static FOLDED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
            }
            let possible = FOLDED.with_borrow_mut(|folded| {
                folded.clear();
                for (k, t) in texts.iter().enumerate() {
                    // The reply said twice (as `final_text` and the last turn) is searched once.
                    if k == 0 || *t != texts[0] {
                        folded.extend_from_slice(t.as_bytes());
                        folded.push(b' ');
                    }
                }
                folded.make_ascii_lowercase();
                self.longest.iter().any(|f| f.find(folded).is_some())
            });
            if !possible {
                return None;
            }
        }
        let mut hay = String::new();
        for t in texts {
            push_normalized(t, &mut hay);
        }
        let mut public = String::new();
        push_normalized(ask, &mut public);
        // The texts without the answer, made only when a reference is the answer.
        let mut without_answer: Option<String> = None;
        self.texts
            .iter()
            .zip(&self.reference)
            .find(|(n, is_reference)| {
                let n = n.as_str();
                if !hay.contains(n) || public.contains(n) {
                    return false;
                }
                if **is_reference && gives_the_answer(answer, n) {
                    let rest = without_answer.get_or_insert_with(|| {
                        // Only where the final reply is said: the same words in an earlier turn
                        // or a field are still a leak.
                        let mut rest = String::new();
                        for (k, t) in texts.iter().enumerate() {
                            if !(answer_at.contains(&k) && *t == answer) {
                                push_normalized(t, &mut rest);
                            }
                        }
                        rest
                    });
                    return rest.contains(n);
                }
                true
            })
            .map(|(n, _)| n)
    }
}

/// Whether `reply` gives `reference` as its answer: its last non-empty line, or all of it,
/// equals the reference with case, ASCII punctuation and spacing set aside.
fn gives_the_answer(reply: &str, reference: &str) -> bool {
    let plain = crate::stages::grade::verify::normalize;
    let want = plain(reference);
    !want.is_empty()
        && (reply
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| plain(l) == want)
            || plain(reply) == want)
}

/// The needles of the last privileged text seen (rows of a task share it), for readers that
/// go through rows in order.
#[derive(Default)]
pub struct NeedleCache {
    privileged: String,
    /// `None`: the text is not a JSON object.
    needles: Option<Needles>,
}

impl NeedleCache {
    /// The needles of `privileged` (JSON text), `None` when it is null or empty.
    pub(crate) fn needles(&mut self, privileged: &str) -> crate::error::Result<Option<&Needles>> {
        if self.privileged != privileged || self.privileged.is_empty() {
            let v = crate::pipeline::row::json_text(privileged, "privileged")?;
            self.needles = (!v.is_null() && v.as_str() != Some("")).then(|| Needles::of(&v));
            privileged.clone_into(&mut self.privileged);
        }
        Ok(self.needles.as_ref())
    }
}

/// The task key of a row: `scenario_id`, else `task_id`, else the prompt.
fn task_key(row: &Map<String, Value>) -> String {
    ["scenario_id", "task_id", "prompt"]
        .iter()
        .find_map(|k| key_text(row.get(*k)))
        .unwrap_or_default()
}

/// The task key a field gives: a non-null, non-empty value, as text (JSON text if not a string).
pub(crate) fn key_text(v: Option<&Value>) -> Option<String> {
    v.filter(|v| !v.is_null())
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
        .filter(|s| !s.is_empty())
}

/// [`task_key`] of a row read from its columns: `extra`'s `scenario_id`, the task id, the prompt.
/// Borrowed from the row unless `scenario_id` makes it, so the usual key costs no allocation.
pub(crate) fn column_task_key<'a>(
    scenario_id: Option<&Value>,
    task_id: &'a str,
    prompt: Option<&'a str>,
) -> std::borrow::Cow<'a, str> {
    use std::borrow::Cow;
    key_text(scenario_id).map_or_else(
        || {
            Cow::Borrowed(
                Some(task_id)
                    .filter(|t| !t.is_empty())
                    .or_else(|| prompt.filter(|p| !p.is_empty()))
                    .unwrap_or_default(),
            )
        },
        Cow::Owned,
    )
}

/// `sha1hex(key)[:12]`: the reference's export group id.
pub fn group_id(key: &str) -> String {
    let d = Sha1::digest(key.as_bytes());
    d.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// Group fields over the rows being exported: `task key → (k, n0, n1, mean, std)`.
#[derive(Debug, Clone, Default)]
pub struct Groups {
    stats: HashMap<String, (u64, u64, u64, f64, f64, u64)>,
    repeats: bool,
    /// Each task's group id and its group fields as written in a JSON object (`,"group_id":…`),
    /// made once, on first use, after the last [`Groups::add`].
    written: std::sync::OnceLock<HashMap<String, (String, Vec<u8>)>>,
}

impl Groups {
    /// Adds a row of task `key` (its `scenario_id`, else `task_id`, else prompt) and reward.
    pub fn add(&mut self, key: &str, reward: Option<f64>) {
        if !self.stats.contains_key(key) {
            self.stats.insert(key.to_owned(), (0, 0, 0, 0.0, 0.0, 0));
        }
        let Some(e) = self.stats.get_mut(key) else {
            return;
        };
        e.0 += 1;
        if e.0 > 1 {
            self.repeats = true;
        }
        if let Some(r) = reward {
            e.1 += u64::from(r < 0.5);
            e.2 += u64::from(r > 0.5);
            e.3 += r;
            e.4 += r * r;
            e.5 += 1;
        }
    }

    /// Task `key`'s group id and group fields as [`Groups::fields`] gives them, written as the
    /// members of a JSON object, each after a comma; `None` when no task repeats.
    pub(crate) fn written(&self, key: &str) -> Option<(&str, &[u8])> {
        if !self.repeats {
            return None;
        }
        let all = self.written.get_or_init(|| {
            self.stats
                .keys()
                .map(|key| {
                    let mut id = String::new();
                    let mut bytes = Vec::with_capacity(128);
                    for (k, v) in self.fields(key) {
                        if k == "group_id" {
                            id = v.as_str().unwrap_or_default().to_owned();
                        }
                        bytes.push(b',');
                        // Writing JSON to a Vec cannot fail.
                        let _ = serde_json::to_writer(&mut bytes, k);
                        bytes.push(b':');
                        let _ = serde_json::to_writer(&mut bytes, &v);
                    }
                    (key.clone(), (id, bytes))
                })
                .collect()
        });
        all.get(key).map(|(id, b)| (id.as_str(), b.as_slice()))
    }

    /// Stamps `group_id, k, n0, n1, reward_mean, reward_std` when some task repeats.
    fn stamp(&self, row: &Map<String, Value>, out: &mut Map<String, Value>) {
        for (k, v) in self.fields(&task_key(row)) {
            out.insert(k.into(), v);
        }
    }

    /// The group fields of task `key`, when some task repeats.
    pub(crate) fn fields(&self, key: &str) -> Vec<(&'static str, Value)> {
        if !self.repeats {
            return Vec::new();
        }
        let Some(&(k, n0, n1, sum, sq, n)) = self.stats.get(key) else {
            return Vec::new();
        };
        let (mean, std) = if n > 0 {
            let mean = sum / n as f64;
            let var = (sq / n as f64 - mean * mean).max(0.0);
            (json!(mean), json!(var.sqrt()))
        } else {
            (Value::Null, Value::Null)
        };
        vec![
            ("group_id", Value::String(group_id(key))),
            ("k", json!(k)),
            ("n0", json!(n0)),
            ("n1", json!(n1)),
            ("reward_mean", mean),
            ("reward_std", std),
        ]
    }
}

/// One row into its training row(s), with the facts the report sums.
pub fn training_rows(
    row: &Map<String, Value>,
    opts: &Options,
    groups: &Groups,
) -> (Vec<Map<String, Value>>, RowFacts) {
    let mut facts = RowFacts::default();
    let source = &*messages_of(row);
    let needles = row_needles(row);
    facts.privileged = needles.is_some();
    facts.truncated = row.get("finish_reason").and_then(Value::as_str) == Some("length");
    // Convert.
    let mut messages: Vec<Value> = Vec::with_capacity(source.len() + 1);
    if let Some(sys) = opts.system_prompt.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": sys}));
    }
    let mut pending: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let mut call_index = 0usize;
    for m in source {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "assistant" => {
                let mut content = content_text(m.get("content"));
                if opts.strip_think {
                    content = THINK.replace_all(&content, "").trim().to_owned();
                }
                let mut out = Map::new();
                out.insert("role".into(), json!("assistant"));
                out.insert("content".into(), Value::String(content));
                if let Some(calls) = m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .filter(|c| !c.is_empty())
                {
                    let mut wire = Vec::with_capacity(calls.len());
                    for c in calls {
                        let f = c.get("function").unwrap_or(c);
                        let name = f
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned();
                        let id = c
                            .get("id")
                            .and_then(Value::as_str)
                            .filter(|s| !s.is_empty())
                            .map_or_else(|| format!("call_{call_index:04}"), str::to_owned);
                        call_index += 1;
                        pending.push_back(id.clone());
                        let args = decode_args(f.get("arguments").unwrap_or(&Value::Null));
                        facts.calls += 1;
                        let args = match opts.format {
                            Format::Openai => {
                                if !args.is_object() {
                                    facts.invalid_calls += 1;
                                }
                                match &args {
                                    Value::String(s) => Value::String(s.clone()),
                                    other => Value::String(other.to_string()),
                                }
                            }
                            Format::Trl => {
                                if !args.is_object() {
                                    facts.invalid_calls += 1;
                                }
                                args
                            }
                        };
                        wire.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}));
                    }
                    out.insert("tool_calls".into(), Value::Array(wire));
                }
                messages.push(Value::Object(out));
            }
            "tool" => {
                let mut content = content_text(m.get("content"));
                if let Some(cap) = opts.max_tool_output_chars
                    && content.chars().count() > cap
                {
                    let cut = content.chars().count() - cap;
                    content = format!(
                        "{}\n[... {cut} chars of tool output truncated]",
                        content.chars().take(cap).collect::<String>()
                    );
                    facts.outputs_cut += 1;
                    facts.chars_cut += cut as u64;
                }
                let mut out = Map::new();
                out.insert("role".into(), json!("tool"));
                out.insert("content".into(), Value::String(content));
                // OpenAI's tool messages hold `role`, `content` and `tool_call_id` only.
                if let Some(n) = m.get("name").filter(|n| !n.is_null())
                    && opts.format != Format::Openai
                {
                    out.insert("name".into(), n.clone());
                }
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(id) = &id {
                    pending.retain(|p| p != id);
                }
                if let Some(id) = id.or_else(|| pending.pop_front()) {
                    out.insert("tool_call_id".into(), Value::String(id));
                }
                messages.push(Value::Object(out));
            }
            "user" | "system" => {
                messages.push(json!({"role": role, "content": content_text(m.get("content"))}))
            }
            _ => {}
        }
    }
    // A training conversation ends on what the policy wrote: turns after the last assistant turn
    // (a tool result the agent never answered, a user turn) are cut.
    let Some(last) = messages.iter().rposition(|m| m["role"] == "assistant") else {
        facts.no_completion = true;
        return (Vec::new(), facts);
    };
    let answer = content_text(messages[last].get("content"));
    facts.trailing_cut = (messages.len() - last - 1) as u64;
    messages.truncate(last + 1);
    let assistant: Vec<usize> = (0..messages.len())
        .filter(|&i| messages[i]["role"] == "assistant")
        .collect();
    let carry = |out: &mut Map<String, Value>| {
        if let Some(t) = opts.tools.as_ref().filter(|t| !t.is_empty()) {
            out.insert("tools".into(), Value::Array(t.clone()));
        }
        for k in CARRY {
            if let Some(v) = row.get(k).filter(|v| !v.is_null()) {
                out.insert(k.to_owned(), v.clone());
            }
        }
        out.insert("schema_version".into(), json!("1"));
    };
    // Each sample: its messages and which of them the loss covers (the last assistant turn
    // of an unrolled sample; every assistant turn, or the last, of a whole one).
    let mut samples: Vec<(Vec<Value>, Vec<bool>, Map<String, Value>)> = Vec::new();
    if opts.unroll {
        for (turn, &at) in assistant.iter().enumerate() {
            let mut out = Map::new();
            let trained: Vec<bool> = (0..=at).map(|i| i == at).collect();
            carry(&mut out);
            out.insert(
                "unroll".into(),
                json!({"turn": turn + 1, "turns": assistant.len()}),
            );
            if !out.get("lineage").is_some_and(Value::is_object) {
                out.insert("lineage".into(), json!({}));
            }
            if let Some(Value::Object(l)) = out.get_mut("lineage") {
                let prompt = row.get("prompt").and_then(Value::as_str).unwrap_or("");
                let mut from = Map::new();
                from.insert("prompt_sha1".into(), Value::String(group_id(prompt)));
                from.insert(
                    "rollout_index".into(),
                    row.get("rollout_index").cloned().unwrap_or(Value::Null),
                );
                if let Some(s) = row.get("scenario_id") {
                    from.insert("scenario_id".into(), s.clone());
                }
                l.insert("unrolled_from".into(), Value::Object(from));
            }
            samples.push((messages[..=at].to_vec(), trained, out));
        }
    } else {
        let trained: Vec<bool> = (0..messages.len())
            .map(|i| match opts.mask_mode {
                MaskMode::Final => i == last,
                MaskMode::Assistant => messages[i]["role"] == "assistant",
            })
            .collect();
        let mut out = Map::new();
        if facts.outputs_cut > 0 {
            out.insert("tool_output_truncated".into(), json!(facts.outputs_cut));
            out.insert("tool_output_chars_cut".into(), json!(facts.chars_cut));
        }
        carry(&mut out);
        groups.stamp(row, &mut out);
        samples.push((messages, trained, out));
    }
    let is_assistant = |m: &Value| m["role"] == "assistant";
    let split = opts.unroll || opts.mask_mode == MaskMode::Final;
    let mut rows = Vec::with_capacity(samples.len());
    for (mut msgs, trained, mut out) in samples {
        let turns = msgs.iter().filter(|m| is_assistant(m)).count() as u64;
        let on = trained.iter().filter(|t| **t).count() as u64;
        match opts.format {
            // OpenAI fine-tuning trains the assistant messages whose `weight` is 1, and reads
            // nothing else of the row: the carried fields are the row's metadata
            // ([`split_openai`] writes them beside it).
            Format::Openai => {
                for (m, t) in msgs.iter_mut().zip(&trained) {
                    if let Some(m) = m.as_object_mut().filter(|m| m["role"] == "assistant") {
                        m.insert("weight".into(), json!(u8::from(*t)));
                    }
                }
                facts.trained += on;
                facts.masked += turns - on;
                // TRL reads no `weight`: it trains every assistant turn.
                facts.trl_trained += turns;
                let mut line = Map::new();
                line.insert("messages".into(), Value::Array(msgs));
                line.extend(out);
                rows.push(line);
            }
            // TRL trains the assistant turns of `messages` (with `assistant_only_loss=True`)
            // or the `completion` of a prompt/completion row: a mask that leaves some
            // assistant turns out is a split at the first trained turn, which is the last.
            Format::Trl => {
                let prompt = out.shift_remove("prompt");
                let mut r = Map::new();
                if split {
                    // One trained turn, the last: the completion. Every row of a file has the
                    // same shape, so a final mask splits even a row with one assistant turn.
                    let at = trained.iter().position(|t| *t).unwrap_or(0);
                    if at == 0 {
                        // A turn with nothing before it has no prompt: that sample is left out
                        // (the row counts as dropped only when none is written).
                        continue;
                    }
                    let completion = msgs.split_off(at);
                    r.insert("prompt".into(), Value::Array(msgs));
                    r.insert("completion".into(), Value::Array(completion));
                } else {
                    r.insert("messages".into(), Value::Array(msgs));
                }
                facts.trained += on;
                facts.masked += turns - on;
                facts.trl_trained += on;
                r.extend(out);
                if let Some(p) = prompt {
                    r.insert("prompt_text".into(), p);
                }
                rows.push(r);
            }
        }
    }
    if rows.is_empty() {
        facts.no_completion = true;
    }
    // The leak gate reads what is exported.
    if let Some(needles) = &needles {
        let (mut texts, mut answers) = (Vec::new(), Vec::new());
        for r in &rows {
            exported_texts(r, &mut texts, &mut answers);
        }
        let ask = row.get("prompt").and_then(Value::as_str).unwrap_or("");
        facts.leak = needles.quoted(ask, &answer, &answers, &texts).cloned();
    }
    (rows, facts)
}

/// An OpenAI training row split into what the fine-tuning file holds (`messages` and `tools`:
/// its schema allows nothing else) and the row's metadata (every other field, in order), which
/// `wai export` writes line for line beside it.
pub fn split_openai(row: &Map<String, Value>) -> (Map<String, Value>, Map<String, Value>) {
    let mut line = Map::new();
    let mut meta = Map::new();
    for (k, v) in row {
        if k == "messages" || k == "tools" {
            line.insert(k.clone(), v.clone());
        } else {
            meta.insert(k.clone(), v.clone());
        }
    }
    (line, meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(format: Format) -> Options {
        Options {
            system_prompt: Some("Be brief.".into()),
            tools: Some(vec![
                json!({"type": "function", "function": {"name": "lookup_order"}}),
            ]),
            strip_think: true,
            mask_mode: MaskMode::Assistant,
            unroll: false,
            max_tool_output_chars: None,
            format,
        }
    }

    fn row() -> Map<String, Value> {
        json!({"prompt": "Where is A1002?", "scenario_id": "sc-demo", "rollout_index": 0, "reward": 1, "reason": "ok",
               "steps": [{"tool": "lookup_order", "arguments": {"order_id": "A1002"}, "result": {"status": "ok", "data": {"id": 27111, "status": "open"}}}],
               "final_text": "<think>hm</think> A1002 is open.", "lineage": {"source": "grade"}})
        .as_object()
        .unwrap()
        .clone()
    }

    #[test]
    fn the_reference_wire_row() {
        let (rows, facts) = training_rows(&row(), &opts(Format::Openai), &Groups::default());
        let r = Value::Object(rows[0].clone());
        // OpenAI's per-message switch, on assistant messages only; no mask column.
        let weights: Vec<&Value> = r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["weight"])
            .collect();
        assert_eq!(
            weights,
            [
                &Value::Null,
                &Value::Null,
                &json!(1),
                &Value::Null,
                &json!(1)
            ]
        );
        assert!(
            r["messages"][3].get("name").is_none(),
            "{}",
            r["messages"][3]
        );
        assert_eq!(r["messages"][2]["tool_calls"][0]["id"], "call_0000");
        assert_eq!(
            r["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"order_id\":\"A1002\"}"
        );
        assert_eq!(r["messages"][3]["tool_call_id"], "call_0000");
        assert_eq!(r["messages"][4]["content"], "A1002 is open.");
        let keys: Vec<&String> = rows[0].keys().collect();
        assert_eq!(
            keys,
            [
                "messages",
                "tools",
                "reward",
                "reason",
                "prompt",
                "scenario_id",
                "lineage",
                "schema_version"
            ]
        );
        assert_eq!(
            (
                facts.calls,
                facts.invalid_calls,
                facts.trained,
                facts.masked,
                facts.trl_trained
            ),
            (1, 0, 2, 0, 2)
        );
        // The fine-tuning line holds messages and tools; the rest is metadata, in order.
        let (line, meta) = split_openai(&rows[0]);
        assert_eq!(line.keys().collect::<Vec<_>>(), ["messages", "tools"]);
        assert_eq!(meta.keys().next().map(String::as_str), Some("reward"));
        // A final mask weighs the earlier assistant turn 0; TRL would still train both.
        let mut o = opts(Format::Openai);
        o.mask_mode = MaskMode::Final;
        let (rows, facts) = training_rows(&row(), &o, &Groups::default());
        assert_eq!(rows[0]["messages"][2]["weight"], 0);
        assert_eq!(rows[0]["messages"][4]["weight"], 1);
        assert_eq!((facts.trained, facts.masked, facts.trl_trained), (1, 1, 2));
        let (rows, _) = training_rows(&row(), &opts(Format::Trl), &Groups::default());
        assert_eq!(
            rows[0]["messages"][2]["tool_calls"][0]["function"]["arguments"],
            json!({"order_id": "A1002"})
        );
        assert_eq!(rows[0].keys().last().unwrap(), "prompt_text");
        assert!(rows[0].get("loss_mask").is_none());
        let mut o = opts(Format::Trl);
        o.mask_mode = MaskMode::Final;
        let (rows, facts) = training_rows(&row(), &o, &Groups::default());
        assert_eq!(
            rows[0]["completion"],
            json!([{"role": "assistant", "content": "A1002 is open."}])
        );
        assert_eq!(rows[0]["prompt"].as_array().unwrap().len(), 4);
        assert_eq!((facts.trained, facts.masked, facts.trl_trained), (1, 1, 1));
    }

    #[test]
    fn a_conversation_ends_on_what_the_policy_wrote() {
        // A tool result the agent never answered: cut, and counted; the completion of a final
        // mask is the last assistant turn alone, never a tool turn after it.
        let r = json!({"prompt": "Refund A1", "messages": [
            {"role": "user", "content": "Refund A1"},
            {"role": "assistant", "content": "Looking.", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"id\":\"A1\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"status\":\"ok\"}"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "refund", "arguments": "{\"id\":\"A1\"}"}}]},
            {"role": "tool", "tool_call_id": "c2", "content": "{\"status\":\"error\"}"}]})
        .as_object()
        .unwrap()
        .clone();
        for format in [Format::Openai, Format::Trl] {
            let mut o = opts(format);
            o.mask_mode = MaskMode::Final;
            let (rows, facts) = training_rows(&r, &o, &Groups::default());
            assert_eq!(facts.trailing_cut, 1, "{format:?}");
            let turns = rows[0]
                .get("completion")
                .or_else(|| rows[0].get("messages"))
                .and_then(Value::as_array)
                .unwrap();
            assert_eq!(turns.last().unwrap()["role"], "assistant", "{format:?}");
            assert_eq!(
                turns.last().unwrap()["tool_calls"][0]["id"],
                "c2",
                "{format:?}"
            );
        }
        // No assistant turn: nothing to train, nothing written.
        let bare = json!({"prompt": "hi", "messages": [{"role": "user", "content": "hi"}]})
            .as_object()
            .unwrap()
            .clone();
        let (rows, facts) = training_rows(&bare, &opts(Format::Openai), &Groups::default());
        assert!(rows.is_empty() && facts.no_completion);
    }

    #[test]
    fn normalizing_collapses_space_and_case() {
        assert_eq!(normalize("  A\tb \n\n C  "), "a b c");
        assert_eq!(normalize("Ünïcode  ÉTÉ"), "ünïcode été");
        let mut s = String::from("x");
        push_normalized("  Y z ", &mut s);
        assert_eq!(s, "x y z");
        push_normalized("   ", &mut s);
        assert_eq!(s, "x y z");
        // Already single-spaced: copied and lowercased.
        push_normalized("Ab C", &mut s);
        assert_eq!(s, "x y z ab c");
        assert_eq!(normalize("Ab C"), "ab c");
        // A needle across turns and spacing; none when its longest word is absent.
        let needles = Needles::of(&json!({"reference": "the entity  does not exist"}));
        let texts = ["Sorry: THE ENTITY", "does\nnot exist."];
        assert_eq!(
            needles.quoted("", "", &[], &texts).map(String::as_str),
            Some("the entity does not exist")
        );
        assert_eq!(
            needles.quoted("", "", &[], &["the entity does not exis"]),
            None
        );
    }

    #[test]
    fn every_privileged_string_is_a_needle_and_an_answer_is_not_a_leak() {
        // Any key, any depth, and a plain-string block.
        let block = json!({"rubric": ["the reply names the carrier"], "answer_key": {"deep": "VAULTANSWERSECRET42"}});
        let n = Needles::of(&block);
        assert_eq!(
            n.quoted("", "", &[], &["It went with the reply names the carrier."]),
            Some(&"the reply names the carrier".to_owned())
        );
        assert!(
            n.quoted("", "", &[], &["code vaultanswersecret42"])
                .is_some()
        );
        let plain = Needles::of(&json!("the launch code is 0000-1111"));
        assert!(
            plain
                .quoted("", "", &[], &["The launch code is 0000-1111."])
                .is_some()
        );
        // What the ask says is no secret.
        assert_eq!(
            n.quoted(
                "Does the reply names the carrier?",
                "",
                &[],
                &["yes: the reply names the carrier"]
            ),
            None
        );
        // A reference answer given as the answer is the task; the same reference in an earlier
        // turn, a reason, or inside a longer final sentence is a leak.
        let r = Needles::of(&json!({"reference": "VAULTANSWERSECRET42"}));
        assert_eq!(
            r.quoted(
                "What is the vault code?",
                "VAULTANSWERSECRET42",
                &[0],
                &["VAULTANSWERSECRET42"]
            ),
            None
        );
        assert_eq!(
            r.quoted(
                "q",
                "Checking.\nvaultanswersecret42.",
                &[0],
                &["Checking.\nvaultanswersecret42."]
            ),
            None
        );
        assert!(
            r.quoted(
                "q",
                "VAULTANSWERSECRET42",
                &[1],
                &[
                    "The key says VAULTANSWERSECRET42, let me check",
                    "VAULTANSWERSECRET42"
                ]
            )
            .is_some()
        );
        assert!(
            r.quoted(
                "q",
                "VAULTANSWERSECRET42",
                &[0],
                &["VAULTANSWERSECRET42", "want \"VAULTANSWERSECRET42\""]
            )
            .is_some()
        );
        assert!(
            r.quoted(
                "q",
                "The answer, per the key, is VAULTANSWERSECRET42 sir",
                &[0],
                &["The answer, per the key, is VAULTANSWERSECRET42 sir"]
            )
            .is_some()
        );
        // The same words as the answer in an earlier turn are a leak: only the final reply's
        // place is exempt.
        assert!(
            r.quoted(
                "q",
                "VAULTANSWERSECRET42",
                &[1],
                &["VAULTANSWERSECRET42", "VAULTANSWERSECRET42"]
            )
            .is_some()
        );
        // Not the reference: a hidden state is a leak even as the whole reply.
        let h = Needles::of(&json!({"hidden_state": "entity already acted on"}));
        assert!(
            h.quoted(
                "q",
                "entity already acted on",
                &[0],
                &["entity already acted on"]
            )
            .is_some()
        );
    }

    #[test]
    fn the_export_gate_reads_every_exported_field() {
        // A reason that quotes the reference leaks it, whatever the turns say; a tool result
        // (what the world told the agent) is not read.
        let mut r = row();
        r.insert(
            "privileged".into(),
            json!({"reference": "VAULTANSWERSECRET42", "rubric": "must cite the tracking page"}),
        );
        r.insert(
            "reason".into(),
            json!("no match; want \"VAULTANSWERSECRET42\""),
        );
        for format in [Format::Openai, Format::Trl] {
            let (_, facts) = training_rows(&r, &opts(format), &Groups::default());
            assert_eq!(
                facts.leak.as_deref(),
                Some("vaultanswersecret42"),
                "{format:?}"
            );
        }
        r.insert("reason".into(), json!("ok"));
        r["steps"][0]["result"] = json!({"note": "must cite the tracking page"});
        let (_, facts) = training_rows(&r, &opts(Format::Openai), &Groups::default());
        assert_eq!(facts.leak, None);
        assert!(facts.privileged);
        // The correct answer, given as the final reply, passes.
        r.insert("final_text".into(), json!("VAULTANSWERSECRET42"));
        let (_, facts) = training_rows(&r, &opts(Format::Trl), &Groups::default());
        assert_eq!(facts.leak, None);
    }

    #[test]
    fn leaks_are_found_and_the_final_reply_is_kept() {
        let mut r = row();
        r.insert(
            "privileged".into(),
            json!({"reference": "the entity does not exist: say so"}),
        );
        r.insert(
            "final_text".into(),
            json!("Note: The entity does NOT exist: say so."),
        );
        let (_, facts) = training_rows(&r, &opts(Format::Openai), &Groups::default());
        assert_eq!(
            facts.leak.as_deref(),
            Some("the entity does not exist: say so")
        );
        // A step text then a different final reply: both turns are kept (reference bug 9).
        let r = json!({"prompt": "p", "steps": [{"text": "Let me check."}], "final_text": "Done."})
            .as_object()
            .unwrap()
            .clone();
        let msgs = conversation(&r);
        assert_eq!(msgs.last().unwrap()["content"], "Done.");
        assert_eq!(msgs.len(), 3);
    }

    #[test]
    fn column_rows_equal_the_general_ones_on_every_fixture() {
        use crate::pipeline::row::testing::{ROW_FIXTURES, batch_of, fixture};
        use crate::pipeline::row::{BatchView, encode};
        let option_sets = [
            opts(Format::Openai),
            Options {
                system_prompt: None,
                tools: None,
                strip_think: false,
                mask_mode: MaskMode::Final,
                unroll: false,
                max_tool_output_chars: Some(20),
                format: Format::Openai,
            },
            Options {
                system_prompt: Some(String::new()),
                tools: Some(Vec::new()),
                strip_think: true,
                mask_mode: MaskMode::Assistant,
                unroll: false,
                max_tool_output_chars: Some(0),
                format: Format::Openai,
            },
        ];
        let mut fast_rows = 0;
        let mut stamped = 0;
        let mut seen_eval = false;
        let sets = ROW_FIXTURES.map(|f| (f, fixture(f)));
        for (name, rows) in sets
            .into_iter()
            .chain([("made", crate::stages::select::tests::made_rows())])
        {
            let batch = batch_of(rows);
            let view = BatchView::new(&batch).expect("view");
            // The column path reads text views, as `wai export` reads the rows.
            let views = crate::pipeline::row::testing::with_text_views(&batch);
            let wire = Wire::of(&views).expect("columns");
            let encoded: Vec<Map<String, Value>> = (0..batch.num_rows())
                .map(|i| encode(&view, i).expect("row"))
                .collect();
            let mut groups = Groups::default();
            for r in &encoded {
                groups.add(&task_key(r), r.get("reward").and_then(Value::as_f64));
            }
            for o in &option_sets {
                let mut cache = WireCache::default();
                for (i, row) in encoded.iter().enumerate() {
                    let mut fast = Vec::new();
                    let mut fast_meta = Vec::new();
                    let Some((facts, side)) = wire
                        .write_row(i, o, &groups, &mut cache, &mut fast, &mut fast_meta)
                        .expect("written")
                    else {
                        assert!(fast.is_empty() && fast_meta.is_empty());
                        continue;
                    };
                    fast_rows += 1;
                    let (general, general_facts) = training_rows(row, o, &groups);
                    assert_eq!(general.len(), 1);
                    let (line, meta) = split_openai(&general[0]);
                    let mut bytes = serde_json::to_vec(&line).expect("JSON");
                    bytes.push(b'\n');
                    let mut meta_bytes = serde_json::to_vec(&meta).expect("JSON");
                    meta_bytes.push(b'\n');
                    assert_eq!(
                        String::from_utf8_lossy(&fast),
                        String::from_utf8_lossy(&bytes),
                        "{name} row {i}"
                    );
                    assert_eq!(
                        String::from_utf8_lossy(&fast_meta),
                        String::from_utf8_lossy(&meta_bytes),
                        "{name} row {i}: metadata"
                    );
                    assert_eq!(facts, general_facts, "{name} row {i}");
                    assert_eq!(side.with_tools, line.contains_key("tools"));
                    assert_eq!(
                        side.group.as_deref(),
                        general[0].get("group_id").and_then(Value::as_str)
                    );
                    stamped += usize::from(side.group.is_some());
                    assert_eq!(side.reward, row.get("reward").and_then(Value::as_f64));
                    let lineage = |k: &str| row.get("lineage").and_then(|l| l.get(k)).cloned();
                    assert_eq!(side.eval_sourced, lineage("source") == Some(json!("eval")));
                    assert_eq!(side.has_policy_sha, lineage("system_prompt_sha").is_some());
                    assert_eq!(
                        side.calls_tools,
                        row.get("tools_used")
                            .and_then(Value::as_array)
                            .is_some_and(|a| !a.is_empty())
                            || row
                                .get("steps")
                                .and_then(Value::as_array)
                                .is_some_and(|s| s.iter().any(|x| x.get("tool").is_some()))
                    );
                    assert_eq!(
                        side.with_system,
                        general[0]["messages"][0]["role"] == "system"
                    );
                    seen_eval |= side.eval_sourced && side.has_policy_sha;
                }
            }
        }
        assert!(fast_rows > 1000, "{fast_rows} rows took the column path");
        assert!(stamped > 0);
        assert!(seen_eval);
    }
}
