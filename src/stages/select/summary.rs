//! What selection needs of one row ([`RowInfo`]), made from the row in the reference's format:
//! its key and prompt, its label, the gates it meets (junk, do-nothing, a privileged leak,
//! truncation), its behaviour signature and the fault it met.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::stages::leak::leak;
use crate::stages::messages::messages_of;
use crate::stages::task_key::key_text;

/// Harness text that must never reach a training row.
pub(super) const HARNESS: [&str; 6] = [
    "<USER_TURN>",
    "scene brief",
    "scenario_dimensions",
    "world_state",
    "situation card",
    "region_id",
];
static RETURNED: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"returned [45]\d\d\b").expect("a valid pattern")
});
pub(super) const INTENT_WORDS: [&str; 7] = [
    "merge", "refund", "schedule", "commit", "deploy", "rebase", "checkout",
];

/// What selection needs of one row.
///
/// A million of these are held at once, so the texts rows share (the key, the prompt, the
/// fault) are shared, one allocation for a run of rows of one task, and the rest are boxed.
#[derive(Debug, Clone, Default, PartialEq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "a row's flags, a million summaries held at once: one byte each"
)]
pub struct RowInfo {
    /// The group key: `scenario_id`, else `task_id`, else the prompt.
    pub key: Arc<str>,
    /// The prompt as written.
    pub prompt: Arc<str>,
    /// A numeric reward.
    pub reward: Option<f64>,
    /// The reward when it is exactly 0 or 1.
    pub label: Option<u8>,
    /// Who labelled it.
    pub label_source: Box<str>,
    /// The behaviour signature.
    pub signature: Box<str>,
    /// A hash of the final reply, whitespace collapsed and lowercased.
    pub final_norm: u64,
    /// Some trainable content: a tool call, a reply, an assistant message.
    pub trainable: bool,
    /// A tool call.
    pub tool_call: bool,
    /// Why the row is incomplete junk, if it is.
    pub junk: Option<&'static str>,
    /// The situation wants a tool.
    pub wants_tool: bool,
    /// Cut by the token cap.
    pub truncated: bool,
    /// The privileged field and text the reply quotes.
    pub leak: Option<Box<str>>,
    /// The row had a privileged block.
    pub privileged: bool,
    /// The first fault the rollout met.
    pub fault_kind: Arc<str>,
    /// `lineage.source == "eval"`.
    pub eval_sourced: bool,
    /// For the leak report.
    pub scenario_id: Box<str>,
    /// For the leak report.
    pub rollout_index: Option<i64>,
}

/// A hash of `s` with white space collapsed and letters lowercased.
pub(super) fn norm_hash(s: &str) -> u64 {
    use std::hash::BuildHasher;
    thread_local! {
        static BUF: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    BUF.with_borrow_mut(|buf| {
        buf.clear();
        crate::stages::normalize::push_normalized(s, buf);
        foldhash::fast::FixedState::with_seed(0x5eed).hash_one(buf.as_bytes())
    })
}

/// An ASCII byte `str::split_whitespace` splits on: space, and tab to carriage return (9 to 13).
/// Compared, not looked up, so that the loops over a text run on vector registers.
pub(super) fn white(b: u8) -> bool {
    (b == b' ') | (b.wrapping_sub(b'\t') < 5)
}

/// Words split on white space (`str::split_whitespace`), counted.
pub(super) fn word_count(s: &str) -> usize {
    if !s.is_ascii() {
        return s.split_whitespace().count();
    }
    crate::stages::terms::ascii_words(s.as_bytes(), white)
}

/// The signature of a row without one: the first 12 hex digits of the SHA-256 of its calls
/// joined by commas, a bar, and its reply's length in dozens of words
/// (`sha256_hex("check,refund|3")[..12]`), hashed in pieces and only the 6 bytes kept encoded
/// (the joined text and the whole hex were built per row before).
pub(super) fn stand_in_signature(tools: &[&str], dozens: usize) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (k, t) in tools.iter().enumerate() {
        if k > 0 {
            h.update(b",");
        }
        h.update(t.as_bytes());
    }
    h.update(b"|");
    h.update(dozens.to_string().as_bytes());
    crate::stages::simulate::hash::hex(&h.finalize()[..6])
}

/// The fault a step's result shows, if any (a result held as JSON text is read as JSON).
pub(super) fn result_fault(result: &Value) -> Option<String> {
    let parsed;
    let result = match result {
        Value::String(t) => match serde_json::from_str::<Value>(t) {
            Ok(v) => {
                parsed = v;
                &parsed
            }
            Err(_) => result,
        },
        v => v,
    };
    if result.get("data").is_some_and(Value::is_string) {
        return Some("malformed".into());
    }
    if result
        .get("stale")
        .is_some_and(|v| v.as_bool() == Some(true))
    {
        return Some("stale".into());
    }
    let status = result
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_lowercase();
    match status.as_str() {
        s if s.is_empty() || crate::stages::simulate::world::SUCCESS.contains(&s) => None,
        s if ["permission", "denied", "unauthorized", "blocked"]
            .iter()
            .any(|w| s.contains(w)) =>
        {
            Some("deny".into())
        }
        s => Some(s.to_owned()),
    }
}

/// The first fault mode of a row's planned faults (`faults: {tool: {mode}}`).
pub(super) fn planned_fault(faults: Option<&Value>) -> Option<String> {
    faults.and_then(Value::as_object).and_then(|f| {
        f.values()
            .find_map(|v| v.get("mode").and_then(Value::as_str))
            .map(str::to_owned)
    })
}

/// Whether a row's side fields say the situation wants a tool: `tool_known`, a tool ask, planned
/// faults, a world state, a tool dimension.
pub(super) fn side_wants_tool<'v>(get: impl Fn(&str) -> Option<&'v Value>) -> bool {
    get("tool_known").and_then(Value::as_bool) == Some(true)
        || get("ask_family").and_then(Value::as_str) == Some("tool")
        || get("faults").is_some_and(|f| f.as_object().is_some_and(|o| !o.is_empty()))
        || get("world_state")
            .and_then(Value::as_str)
            .is_some_and(|w| !matches!(w, "" | "unspecified" | "unknown"))
        || get("scenario_dimensions")
            .and_then(|d| d.get("tool"))
            .and_then(Value::as_str)
            .is_some_and(|t| !matches!(t, "unrelated" | "multi_tool"))
}

/// Whether a prompt names an intent to act or a record id.
pub(super) fn prompt_wants_tool(prompt: &str) -> bool {
    let low = prompt.to_lowercase();
    INTENT_WORDS.iter().any(|w| low.contains(w))
        || crate::stages::simulate::tools::KNOWN_ID.is_match(prompt)
}

/// What a row summary is made of, borrowed from wherever the row is read: a JSON object
/// ([`row_info`]) or a batch's columns ([`columns`]).
#[allow(
    clippy::struct_excessive_bools,
    reason = "the flags a summary is made of, as the row gives them"
)]
pub(super) struct Parts<'a> {
    pub(super) key: Arc<str>,
    pub(super) prompt: &'a str,
    /// `prompt`, shared with the rows of its task the reader has seen.
    pub(super) shared_prompt: Arc<str>,
    pub(super) reward: Option<f64>,
    pub(super) label_source: &'a str,
    pub(super) final_text: &'a str,
    pub(super) finish_reason: &'a str,
    pub(super) reason: &'a str,
    /// A step has a tool.
    pub(super) step_call: bool,
    /// The steps' tool names.
    pub(super) step_tools: Vec<&'a str>,
    pub(super) step_truncated: bool,
    /// A message has tool calls.
    pub(super) message_calls: bool,
    /// Assistant turns' text (`""` when it is not a string).
    pub(super) assistant: Vec<&'a str>,
    /// The role of the last turn.
    pub(super) last_role: &'a str,
    /// The row has messages, steps or a reply.
    pub(super) has_messages: bool,
    pub(super) overlong: bool,
    pub(super) side_wants_tool: bool,
    /// [`prompt_wants_tool`], when the reader has it at hand.
    pub(super) prompt_wants_tool: Option<bool>,
    pub(super) signature: Option<&'a str>,
    pub(super) leak: (bool, Option<String>),
    pub(super) fault_kind: Arc<str>,
    pub(super) eval_sourced: bool,
    pub(super) scenario_id: &'a str,
    pub(super) rollout_index: Option<i64>,
}

/// The fault kind of a rollout that met none.
pub(super) static NO_FAULT: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| Arc::from("no fault"));

/// Harness text in a reply.
static HARNESS_TEXT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        &HARNESS
            .iter()
            .map(|h| regex::escape(h))
            .collect::<Vec<_>>()
            .join("|"),
    )
    .expect("a valid pattern")
});

/// Raw tool-call markup in a reply.
pub(super) fn markup(s: &str) -> bool {
    use memchr::memmem::Finder;
    static FINDERS: std::sync::LazyLock<[Finder<'static>; 4]> = std::sync::LazyLock::new(|| {
        [
            Finder::new("<tool_call>"),
            Finder::new("</tool_call>"),
            Finder::new("\"name\":"),
            Finder::new("\"parameters\":"),
        ]
    });
    let has = |k: usize| FINDERS[k].find(s.as_bytes()).is_some();
    has(0) || has(1) || (has(2) && has(3))
}

/// The longest run of one character is 30 or more.
pub(super) fn repeats_30(s: &str) -> bool {
    if s.is_ascii() {
        // A run of 30 covers a whole window of 15 starting at a multiple of 15: look there
        // first, then measure the run around it.
        let b = s.as_bytes();
        let mut i = 0;
        while i + 15 <= b.len() {
            let c = b[i];
            if b[i + 14] == c && b[i..i + 15].iter().all(|&x| x == c) {
                let before = b[..i].iter().rev().take_while(|&&x| x == c).count();
                let after = b[i + 15..].iter().take_while(|&&x| x == c).count();
                if before + 15 + after >= 30 {
                    return true;
                }
            }
            i += 15;
        }
        return false;
    }
    let mut run = 0usize;
    let mut prev = None;
    for c in s.chars() {
        if Some(c) == prev {
            run += 1;
            if run >= 30 {
                return true;
            }
        } else {
            run = 1;
            prev = Some(c);
        }
    }
    false
}

impl Parts<'_> {
    pub(super) fn summarize(self) -> RowInfo {
        let final_text = self.final_text;
        let tool_call = self.step_call || self.message_calls;
        let trainable = tool_call || !final_text.trim().is_empty() || !self.assistant.is_empty();
        let chars = final_text.chars().count();
        let truncated = self.finish_reason == "length"
            || self.step_truncated
            || {
                let reason = self.reason.to_lowercase();
                ["truncat", "cut off"].iter().any(|w| reason.contains(w))
            }
            || (chars >= 200 && !crate::stages::ending::looks_finished(final_text));
        let prompt = self.prompt;
        // Incomplete junk: the first that applies.
        let trimmed = final_text.trim();
        let stub = !tool_call
            && (trimmed.starts_with("<agent error:") || RETURNED.is_match(trimmed) || {
                let t = trimmed.split_whitespace().take(3).collect::<Vec<_>>();
                t.len() <= 2
                    && t.iter().any(|w| {
                        w.len() == 3
                            && (w.starts_with('4') || w.starts_with('5'))
                            && w.chars().all(|c| c.is_ascii_digit())
                    })
            });
        // A turn that says what the reply says is checked once.
        let others = || self.assistant.iter().filter(|a| **a != final_text);
        let junk = if trimmed.is_empty() {
            Some("empty final reply")
        } else if trimmed.starts_with("<agent error") {
            Some("agent error")
        } else if stub {
            Some("infrastructure stub")
        } else if repeats_30(final_text) {
            Some("a character repeated 30 times")
        } else if HARNESS_TEXT.is_match(final_text) || others().any(|a| HARNESS_TEXT.is_match(a)) {
            Some("harness text")
        } else if markup(final_text) || others().any(|a| markup(a)) {
            Some("raw tool markup")
        } else if chars > 600
            && !self.overlong
            && !crate::stages::ending::looks_finished(final_text)
        {
            Some("long unfinished reply")
        } else if !self.has_messages && !tool_call {
            Some("no conversation")
        } else if matches!(self.last_role, "user" | "tool") {
            Some("ends on a user or tool turn")
        } else if !tool_call && trimmed.ends_with('?') && prompt.split_whitespace().count() <= 2 {
            Some("a question back to a bare prompt")
        } else {
            None
        };
        let wants_tool = self.side_wants_tool
            || self
                .prompt_wants_tool
                .unwrap_or_else(|| prompt_wants_tool(prompt));
        let signature = self.signature.map_or_else(
            || {
                // No signature: the calls and the reply's length stand in.
                stand_in_signature(&self.step_tools, word_count(final_text) / 12).into()
            },
            Box::from,
        );
        let label = self
            .reward
            .filter(|r| *r == 0.0 || *r == 1.0)
            .map(|r| u8::from(r == 1.0));
        RowInfo {
            key: self.key,
            reward: self.reward,
            label,
            label_source: self.label_source.into(),
            signature,
            final_norm: norm_hash(final_text),
            trainable,
            tool_call,
            junk,
            wants_tool,
            truncated,
            leak: self.leak.1.map(String::into_boxed_str),
            privileged: self.leak.0,
            fault_kind: self.fault_kind,
            eval_sourced: self.eval_sourced,
            scenario_id: self.scenario_id.into(),
            rollout_index: self.rollout_index,
            prompt: self.shared_prompt,
        }
    }
}

/// The summary of one row in the reference's format.
pub fn row_info(row: &Map<String, Value>) -> RowInfo {
    let text = |k: &str| row.get(k).and_then(Value::as_str).unwrap_or("");
    let key = ["scenario_id", "task_id", "prompt"]
        .iter()
        .find_map(|k| key_text(row.get(*k)))
        .unwrap_or_default();
    // One reward reader, as everywhere in wai: `reward` (not `qwen_reward`).
    let reward = row
        .get("reward")
        .filter(|v| !v.is_boolean())
        .and_then(Value::as_f64);
    let steps: &[Value] = row
        .get("steps")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let messages = &*messages_of(row);
    let fault_kind = steps
        .iter()
        .filter_map(|s| s.get("result"))
        .find_map(result_fault)
        .or_else(|| planned_fault(row.get("faults")))
        .map_or_else(|| NO_FAULT.clone(), Arc::from);
    Parts {
        key: key.into(),
        prompt: text("prompt"),
        shared_prompt: text("prompt").into(),
        reward,
        label_source: text("label_source"),
        final_text: text("final_text"),
        finish_reason: text("finish_reason"),
        reason: text("reason"),
        step_call: steps
            .iter()
            .any(|s| s.get("tool").is_some_and(|t| !t.is_null())),
        step_tools: steps
            .iter()
            .filter_map(|s| s.get("tool").and_then(Value::as_str))
            .collect(),
        step_truncated: steps
            .iter()
            .any(|s| s.get("truncated").and_then(Value::as_bool) == Some(true)),
        message_calls: messages.iter().any(|m| {
            m.get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty())
        }),
        assistant: messages
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            .map(|m| m.get("content").and_then(Value::as_str).unwrap_or(""))
            .collect(),
        last_role: messages
            .last()
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
            .unwrap_or(""),
        has_messages: row
            .get("messages")
            .and_then(Value::as_array)
            .is_some_and(|m| !m.is_empty())
            || !steps.is_empty()
            || row
                .get("final_text")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty()),
        overlong: row.get("overlong").and_then(Value::as_bool) == Some(true),
        side_wants_tool: side_wants_tool(|k| row.get(k)),
        prompt_wants_tool: None,
        signature: row.get("behavior_signature").and_then(Value::as_str),
        leak: leak(row, messages),
        fault_kind,
        eval_sourced: row
            .get("lineage")
            .and_then(|l| l.get("source"))
            .and_then(Value::as_str)
            == Some("eval"),
        scenario_id: text("scenario_id"),
        rollout_index: row.get("rollout_index").and_then(Value::as_i64),
    }
    .summarize()
}
