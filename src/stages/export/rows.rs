//! One row into its training row(s): the conversation converted to the wire shape, cut to end on
//! what the policy wrote, split by the mask, carried fields and group fields stamped, and the
//! leak gate read over what is exported.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value, json};

use super::arguments::decode_args;
use super::exported::exported_texts;
use super::groups::group_id;
use super::{Format, Groups, MaskMode, Options};
use crate::stages::leak::row_needles;
use crate::stages::messages::{content_text, messages_of};

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

pub(super) static THINK: LazyLock<Regex> =
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
    let mut messages = convert_messages(source, opts, &mut facts);
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
    let samples = samples(row, messages, last, &assistant, opts, groups, &facts);
    let rows = shape(samples, opts, &mut facts);
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

/// The row's messages in the wire shape: the system prompt first, calls with ids and arguments
/// (counted by the round-trip gate), tool outputs cut, tool turns matched to their calls.
fn convert_messages(source: &[Value], opts: &Options, facts: &mut RowFacts) -> Vec<Value> {
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
                    content = String::from(THINK.replace_all(&content, "").trim());
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
                messages.push(json!({"role": role, "content": content_text(m.get("content"))}));
            }
            _ => {}
        }
    }
    messages
}

/// A sample: its messages, which of them the loss covers, and its other fields.
type Sample = (Vec<Value>, Vec<bool>, Map<String, Value>);

/// Each sample of a row: its messages and which of them the loss covers (the last assistant
/// turn of an unrolled sample; every assistant turn, or the last, of a whole one), with the
/// carried fields (and, for a whole row, the group fields).
fn samples(
    row: &Map<String, Value>,
    messages: Vec<Value>,
    last: usize,
    assistant: &[usize],
    opts: &Options,
    groups: &Groups,
    facts: &RowFacts,
) -> Vec<Sample> {
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
    let mut samples: Vec<Sample> = Vec::new();
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
    samples
}

/// The samples as the format's rows (OpenAI weights, TRL messages or prompt/completion),
/// counting the turns trained and masked.
fn shape(samples: Vec<Sample>, opts: &Options, facts: &mut RowFacts) -> Vec<Map<String, Value>> {
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
    rows
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
