//! What a training row exports, as the leak gate reads it: every text but the tool results, the
//! system prompt and wai's own stamps.

use serde_json::{Map, Value};

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
