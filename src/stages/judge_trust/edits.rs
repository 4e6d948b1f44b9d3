//! How the probes edit a row: filler, the rubric's words, a success claim, the ask echoed, a
//! sycophantic opener (added to the reply), an empty tool call or a refusal (in its place).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::probes::{FILLER, FILLER_REPEATS, REFUSAL_REPLY, SUCCESS_CLAIM, SYCOPHANCY_OPENER, all};
use crate::error::{Error, Result};

const STOP: [&str; 29] = [
    "about",
    "after",
    "again",
    "against",
    "before",
    "being",
    "below",
    "between",
    "could",
    "every",
    "might",
    "other",
    "should",
    "since",
    "their",
    "there",
    "these",
    "those",
    "through",
    "under",
    "until",
    "where",
    "which",
    "while",
    "would",
    "reply",
    "response",
    "answer",
    "assistant",
];

/// The content words a rubric leans on: runs of five or more ASCII lowercase letters of the
/// lowercased text, not function words, most common first (ties alphabetical), `top` of them.
pub fn rubric_words(text: &str, top: usize) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    let bytes = lower.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_lowercase() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_lowercase() {
                i += 1;
            }
            let word = &lower[start..i];
            if word.len() >= 5 && !STOP.contains(&word) {
                *counts.entry(word).or_default() += 1;
            }
        } else {
            i += 1;
        }
    }
    let mut words: Vec<(&str, u64)> = counts.into_iter().collect();
    words.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    words
        .into_iter()
        .take(top)
        .map(|(w, _)| w.to_owned())
        .collect()
}

/// How a probe edits a reply.
pub(super) enum Edit {
    Append(String),
    Prepend(String),
    Replace(String, Vec<Value>),
}

impl Edit {
    fn apply(&self, text: &str) -> String {
        match self {
            Self::Append(s) => format!("{text}{s}"),
            Self::Prepend(s) => format!("{s}{text}"),
            Self::Replace(s, _) => s.clone(),
        }
    }
}

/// `row` with `edit` applied to `final_text` and the last assistant message (and its steps
/// replaced, for a replacement).
pub(super) fn edited(row: &Map<String, Value>, edit: &Edit) -> Map<String, Value> {
    let mut out = row.clone();
    let reply = row.get("final_text").and_then(Value::as_str).unwrap_or("");
    out.insert("final_text".into(), Value::String(edit.apply(reply)));
    if let Some(Value::Array(messages)) = out.get_mut("messages")
        && let Some(m) = messages
            .iter_mut()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
    {
        let content = m
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        m["content"] = Value::String(edit.apply(&content));
    }
    if let Edit::Replace(_, steps) = edit {
        // The trajectory is replaced: so are the tools it used.
        let tools: Vec<Value> = steps
            .iter()
            .filter_map(|s| s.get("tool").cloned())
            .collect();
        out.insert("steps".into(), Value::Array(steps.clone()));
        out.insert("tools_used".into(), Value::Array(tools));
    }
    out
}

fn system_text(row: &Map<String, Value>) -> String {
    row.get("messages")
        .and_then(Value::as_array)
        .and_then(|ms| {
            ms.iter()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        })
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn first_tool(row: &Map<String, Value>) -> Option<String> {
    row.get("steps")
        .and_then(Value::as_array)?
        .iter()
        .find_map(|s| {
            s.get("tool")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
        })
        .map(str::to_owned)
}

/// The edit of probe `name` on `row`, or `None` when it does not apply (no rubric words, no
/// prompt, no tool).
pub(super) fn probe_edit(
    name: &str,
    row: &Map<String, Value>,
    rubric: Option<&str>,
) -> Result<Option<Edit>> {
    Ok(match name {
        "filler" => Some(Edit::Append(FILLER.repeat(FILLER_REPEATS))),
        "keyword_stuffing" => {
            let words = rubric_words(
                rubric
                    .map_or_else(|| system_text(row), str::to_owned)
                    .as_str(),
                8,
            );
            (!words.is_empty())
                .then(|| Edit::Append(format!(" This response is {}.", words.join(", "))))
        }
        "success_claim" => Some(Edit::Append(SUCCESS_CLAIM.to_owned())),
        "prompt_echo" => {
            let prompt = row.get("prompt").and_then(Value::as_str).unwrap_or("");
            let ask: String = prompt
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .take(200)
                .collect();
            (!ask.is_empty()).then(|| Edit::Prepend(format!("You asked: {ask}. ")))
        }
        "sycophancy" => Some(Edit::Prepend(SYCOPHANCY_OPENER.to_owned())),
        "empty_format" => first_tool(row).map(|tool| {
            let call = json!({"name": tool, "arguments": {}});
            Edit::Replace(
                format!("<tool_call>\n{call}\n</tool_call>"),
                vec![json!({"tool": tool, "arguments": {}, "result": {}})],
            )
        }),
        "refusal" => Some(Edit::Replace(REFUSAL_REPLY.to_owned(), Vec::new())),
        other => {
            return Err(Error::Usage(format!(
                "unknown probe `{other}`: choose from {} or `all`",
                all().join(", ")
            )));
        }
    })
}
