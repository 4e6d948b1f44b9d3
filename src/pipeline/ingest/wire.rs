//! The fast path for chat records in the strict OpenAI wire shape.
//!
//! Most chat logs are exactly that shape: messages with string `content` (or `null` beside tool
//! calls), `name`, `tool_call_id`, and calls as `{id, type: "function", function: {name,
//! arguments}}`. Such a record is read straight into typed messages, borrowing its strings,
//! without building a JSON tree of the conversation and then reading it again. Anything else
//! (content parts, unknown keys, dotted field paths, duplicate keys) returns `None`, and the
//! record takes the general path ([`super::chat::to_row`] then [`row::decode`]), which gives the
//! same [`Record`] for every record this path accepts: a test holds them equal.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

use super::chat::{ChatFields, Pending, assemble};
use crate::pipeline::row::{self, FieldError, Message, Record, Step, ToolCall};

/// A present key's value, null included (`Some(None)`); a missing key is `None`.
#[allow(
    clippy::option_option,
    reason = "absent, null and a value are three different things in the wire shape"
)]
fn nullable<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<Cow<'de, str>>>, D::Error> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Some(Option::<Text<'de>>::deserialize(d)?.map(|t| t.0)))
}

/// A present key whose value is not null.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMessage<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    #[allow(
        clippy::option_option,
        reason = "absent, null and a value are three different things in the wire shape"
    )]
    content: Option<Option<Cow<'a, str>>>,
    #[serde(borrow, default, deserialize_with = "present")]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    tool_call_id: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    tool_calls: Option<Vec<WireCall<'a>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireCall<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    function: WireFunction<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireFunction<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    arguments: Cow<'a, str>,
}

/// A chat record read with its message list typed: the other fields in order, and the list
/// (`None` when the record had no field of that name, or had it twice).
struct Top<'a> {
    fields: Vec<(Cow<'a, str>, Value)>,
    messages: Option<Vec<WireMessage<'a>>>,
}

/// Reads a [`Top`], given the name of the message list field.
struct TopSeed<'f>(&'f str);

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = Top<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Top<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_> {
    type Value = Top<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
        let mut top = Top {
            fields: Vec::new(),
            messages: None,
        };
        let mut seen = 0;
        while let Some(k) = map.next_key::<Cow<'de, str>>()? {
            if k == self.0 {
                seen += 1;
                top.messages = Some(map.next_value()?);
            } else {
                top.fields.push((k, map.next_value()?));
            }
        }
        if seen > 1 {
            top.messages = None;
        }
        Ok(top)
    }
}

/// Keys the general path treats specially when they come in a chat record: such a record
/// takes that path.
const RESERVED: [&str; 7] = [
    "schema_version",
    "prompt",
    "steps",
    "final_text",
    "tools_used",
    "messages",
    "privileged",
];

/// Reads a chat record in the strict wire shape; `None` when it is not one.
pub(super) fn record(bytes: &[u8], fields: &ChatFields) -> Option<Result<Record, FieldError>> {
    let dotted = |p: &str| p.contains('.');
    if dotted(&fields.messages)
        || dotted(&fields.task)
        || dotted(&fields.trial)
        || dotted(&fields.reward)
        || fields.privileged.iter().any(|p| dotted(p))
    {
        return None;
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let top = TopSeed(&fields.messages).deserialize(&mut de).ok()?;
    de.end().ok()?;
    let mut rec = Map::new();
    for (k, v) in top.fields {
        if RESERVED.contains(&k.as_ref()) && !fields.privileged.iter().any(|p| *p == k) {
            return None;
        }
        if rec.insert(k.into_owned(), v).is_some() {
            return None;
        }
    }
    let conv = conversation(&top.messages?)?;
    let mut row = Map::new();
    row.insert("prompt".into(), Value::String(conv.prompt));
    row.insert("final_text".into(), Value::String(conv.final_text));
    Some(row::decode(assemble(row, rec, fields)).map(|mut r| {
        r.messages = Some(conv.messages);
        r.steps = Some(conv.steps);
        r.tools_used = Some(conv.tools_used);
        r
    }))
}

struct Conversation {
    prompt: String,
    final_text: String,
    messages: Vec<Message>,
    steps: Vec<Step>,
    tools_used: Vec<String>,
}

/// The JSON an argument or result string holds, when it holds an object or an array.
fn held_json(s: &str) -> Option<Value> {
    let t = s.trim_start();
    if t.starts_with('{') || t.starts_with('[') {
        serde_json::from_str(s).ok()
    } else {
        None
    }
}

/// A tool result string as JSON text: the JSON it holds, else the string.
fn result_text(s: &str) -> String {
    held_json(s)
        .unwrap_or_else(|| Value::String(s.to_owned()))
        .to_string()
}

/// A call's arguments string as canonical JSON text, for the message (an object it holds, else
/// the string) and for the step (an object or array it holds, else the string).
fn arguments_text(s: &str) -> (String, String) {
    match held_json(s) {
        Some(v) if v.is_object() => {
            let t = row::canonical_json(&v);
            (t.clone(), t)
        }
        held => {
            let own = row::canonical_json(&Value::String(s.to_owned()));
            let step = held.map_or_else(|| own.clone(), |v| row::canonical_json(&v));
            (own, step)
        }
    }
}

/// The typed messages and the steps they pair into, by the rules of the general path
/// ([`super::chat`]); `None` for what the typed columns cannot carry exactly.
fn conversation(wire: &[WireMessage<'_>]) -> Option<Conversation> {
    let mut prompt: Option<String> = None;
    let mut messages = Vec::with_capacity(wire.len());
    let mut steps: Vec<Step> = Vec::new();
    let mut calls = Pending::default();
    let mut tools_used = Vec::new();
    let mut last_text: Option<usize> = None;
    for m in wire {
        let content = match &m.content {
            None => None,
            Some(None) => {
                // `null` content comes back only beside tool calls.
                m.tool_calls.as_ref()?;
                None
            }
            Some(Some(c)) => Some(c.as_ref()),
        };
        if m.tool_calls.is_some() && m.content.is_none() {
            return None;
        }
        let text = content.filter(|t| !t.trim().is_empty());
        let role = m.role.as_deref().unwrap_or("");
        let mut message = Message {
            role: m.role.as_deref().map(str::to_owned),
            content: content.map(str::to_owned),
            name: m.name.as_deref().map(str::to_owned),
            tool_call_id: m.tool_call_id.as_deref().map(str::to_owned),
            tool_calls: None,
        };
        // Each call's arguments, canonical for the step.
        let mut step_args = Vec::new();
        if let Some(wire_calls) = &m.tool_calls {
            let mut typed = Vec::with_capacity(wire_calls.len());
            for c in wire_calls {
                if c.kind != "function" {
                    return None;
                }
                let args = c.function.arguments.as_ref();
                let (own, step) = arguments_text(args);
                step_args.push(step);
                typed.push(ToolCall {
                    id: c.id.as_deref().map(str::to_owned),
                    name: Some(c.function.name.to_string()),
                    arguments: Some(own),
                    arguments_text: Some(args.to_owned()),
                });
            }
            message.tool_calls = Some(typed);
        }
        match role {
            "user" => match (&prompt, text) {
                (None, Some(t)) => prompt = Some(t.to_owned()),
                (Some(_), Some(t)) => steps.push(Step {
                    user: Some(t.to_owned()),
                    ..Step::default()
                }),
                _ => {}
            },
            "assistant" => match m.tool_calls.as_deref().filter(|c| !c.is_empty()) {
                Some(wire_calls) => {
                    for (j, (c, args)) in wire_calls.iter().zip(step_args).enumerate() {
                        let name = c.function.name.to_string();
                        calls.call(c.id.as_deref(), &name, steps.len());
                        tools_used.push(name.clone());
                        steps.push(Step {
                            text: if j == 0 {
                                text.map(str::to_owned)
                            } else {
                                None
                            },
                            tool: Some(name),
                            arguments: Some(args),
                            result: Some("null".into()),
                            ..Step::default()
                        });
                    }
                }
                None => {
                    if let Some(t) = text {
                        last_text = Some(steps.len());
                        steps.push(Step {
                            text: Some(t.to_owned()),
                            ..Step::default()
                        });
                    }
                }
            },
            "tool" | "function" => {
                let id = m.tool_call_id.as_deref();
                let name = m.name.as_deref();
                if let Some(step) = calls.answer(id, name) {
                    steps[step].result = Some(match content {
                        Some(c) => result_text(c),
                        None => "null".into(),
                    });
                }
            }
            _ => {}
        }
        messages.push(message);
    }
    let mut final_text = String::new();
    if let Some(at) = last_text
        && !steps[at + 1..].iter().any(|s| s.tool.is_some())
    {
        final_text = steps.remove(at).text.unwrap_or_default();
    }
    Some(Conversation {
        // Without a user turn the general path derives the prompt differently: it takes that.
        prompt: prompt?,
        final_text,
        messages,
        steps,
        tools_used,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::pipeline::ingest::chat;

    /// The general path's record.
    fn general(bytes: &[u8], fields: &ChatFields) -> Result<Record, FieldError> {
        row::decode(chat::to_row(
            serde_json::from_slice(bytes).unwrap(),
            fields,
        )?)
    }

    #[test]
    fn the_fast_path_gives_the_general_paths_record() {
        let mut records: Vec<Vec<u8>> = include_str!("../../../tests/fixtures/chat_rollouts.jsonl")
            .lines()
            .map(|l| l.as_bytes().to_vec())
            .collect();
        for v in [
            // Calls answered out of order, by name, and never; a JSON array result; an
            // argument string that is not JSON; escapes in strings; a later user turn.
            json!({"task_id": 1, "trial": 0, "reward": 0.5, "messages": [
                {"role": "system", "content": "S"},
                {"role": "user", "content": "Do \"it\"\n"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": [2]}"}},
                    {"id": "b", "type": "function", "function": {"name": "g", "arguments": "not json"}},
                    {"id": "c", "type": "function", "function": {"name": "h", "arguments": "[1, 2]"}}]},
                {"role": "tool", "tool_call_id": "b", "content": "[1, {\"k\": 2}]"},
                {"role": "tool", "name": "f", "content": "plain"},
                {"role": "assistant", "content": "  "},
                {"role": "user", "content": "and then?"},
                {"role": "assistant", "content": "Done ✓"}]}),
            // Ends on a call; reward missing; other fields ride along.
            json!({"messages": [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "let me see", "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
                "model": "m", "meta": {"x": [1, null]}}),
            // Text, then a call with no result.
            json!({"task_id": "t", "messages": [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "first"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}]}),
        ] {
            records.push(serde_json::to_vec(&v).unwrap());
        }
        let fields = ChatFields::openai();
        let mut fast = 0;
        for bytes in &records {
            let Some(got) = record(bytes, &fields) else {
                continue;
            };
            fast += 1;
            assert_eq!(
                got,
                general(bytes, &fields),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        assert!(fast >= records.len() - 2, "only {fast} took the fast path");
    }

    #[test]
    fn other_shapes_take_the_general_path() {
        let fields = ChatFields::openai();
        for v in [
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]}),
            json!({"messages": [{"role": "user", "content": "q", "extra_key": 1}]}),
            json!({"messages": [{"role": "user", "content": null}]}),
            json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null,
                "tool_calls": [{"type": "custom", "function": {"name": "f", "arguments": "{}"}}]}]}),
            json!({"messages": [{"role": "system", "content": "no user turn"}]}),
            json!({"messages": [{"role": "user", "content": "q"}], "steps": []}),
            json!({"messages": [{"role": "user", "content": "q"}], "schema_version": "1"}),
            json!({"prompt": "no messages"}),
            json!([1]),
        ] {
            assert!(
                record(&serde_json::to_vec(&v).unwrap(), &fields).is_none(),
                "{v}"
            );
        }
        let dotted = ChatFields {
            task: "meta.task".into(),
            ..ChatFields::openai()
        };
        assert!(
            record(
                br#"{"messages": [{"role": "user", "content": "q"}]}"#,
                &dotted
            )
            .is_none()
        );
        assert!(
            record(
                br#"{"messages": [], "messages": [{"role": "user", "content": "q"}]}"#,
                &fields
            )
            .is_none()
        );
    }
}
