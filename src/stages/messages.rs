//! A row's conversation as JSON messages: its `messages`, or the turns rebuilt from its prompt
//! and steps, and the text of a message's content. Export converts these messages and select
//! reads them for its leak filter and summaries (`stages::conversation` is the same
//! rebuild over a batch's columns).

use serde_json::{Map, Value, json};

/// The text of a message's content (a string, or a list of text parts).
pub(crate) fn content_text(v: Option<&Value>) -> String {
    v.and_then(crate::pipeline::row::content_of)
        .unwrap_or_default()
}

/// The length of a row's reply in characters (not bytes): every assistant turn's text, plus the
/// final reply when it is not the last turn's text.
pub fn reply_chars(row: &Map<String, Value>) -> usize {
    let mut n = 0;
    let mut last = String::new();
    for m in messages_of(row).iter() {
        if m.get("role").and_then(Value::as_str) == Some("assistant") {
            last = content_text(m.get("content"));
            n += last.chars().count();
        }
    }
    let f = row.get("final_text").and_then(Value::as_str).unwrap_or("");
    if f != last {
        n += f.chars().count();
    }
    n
}

/// Whether a preference pair's chosen reply is the longer ([`reply_chars`]): the one definition
/// of "chosen longer" that `wai select` and `wai export --format dpo` both count.
pub fn chosen_longer(chosen: &Map<String, Value>, rejected: &Map<String, Value>) -> bool {
    reply_chars(chosen) > reply_chars(rejected)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_the_rows_own_or_rebuilt_from_its_steps() {
        let row = |v: Value| v.as_object().unwrap().clone();
        let own = row(json!({"messages": [{"role": "user", "content": "hi"}], "prompt": "other"}));
        assert!(matches!(messages_of(&own), std::borrow::Cow::Borrowed(_)));
        let rebuilt = row(
            json!({"prompt": "p", "tool_trace": [{"tool": "t", "input": {"a": 1}, "output": "ok"}], "final_text": "Done."}),
        );
        let turns = messages_of(&rebuilt);
        let roles: Vec<&str> = turns.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
        assert_eq!(turns[1]["tool_calls"][0]["arguments"], json!({"a": 1}));
        assert_eq!(turns[3]["content"], "Done.");
        assert_eq!(
            content_text(Some(&json!([{"type": "text", "text": "a"}]))),
            "a"
        );
        assert_eq!(content_text(None), "");
    }
}
