//! `OpenLLMetry`'s indexed attributes folded into the message lists and tool definitions the other
//! shapes carry.

use serde_json::{Map, Value};

/// Folds `OpenLLMetry`'s indexed attributes into the message lists the other shapes carry:
/// `gen_ai.prompt.N.{role,content,tool_call_id}` and `gen_ai.prompt.N.tool_calls.M.{id,name,
/// arguments}` become `gen_ai.prompt` (OpenAI-style messages), `gen_ai.completion.N.*` becomes
/// `gen_ai.completion` (its `finish_reason`s `gen_ai.response.finish_reasons` when that is
/// missing), and `llm.request.functions.N.{name,description,parameters}` becomes
/// `gen_ai.tool.definitions`. The indexed keys are removed.
pub(super) fn fold_indexed(attrs: &mut Map<String, Value>) {
    use std::collections::BTreeMap;
    type Indexed = BTreeMap<usize, (Map<String, Value>, BTreeMap<usize, Map<String, Value>>)>;
    if !attrs.keys().any(|k| {
        k.starts_with("gen_ai.prompt.")
            || k.starts_with("gen_ai.completion.")
            || k.starts_with("llm.request.functions.")
    }) {
        return;
    }
    let mut lists: [Indexed; 3] = Default::default();
    let prefixes = [
        "gen_ai.prompt.",
        "gen_ai.completion.",
        "llm.request.functions.",
    ];
    let keys: Vec<String> = attrs.keys().cloned().collect();
    for key in keys {
        let Some((which, rest)) = prefixes
            .iter()
            .enumerate()
            .find_map(|(i, p)| Some((i, key.strip_prefix(p)?)))
        else {
            continue;
        };
        let Some((n, field)) = rest
            .split_once('.')
            .and_then(|(n, f)| Some((n.parse::<usize>().ok()?, f.to_owned())))
        else {
            continue;
        };
        let Some(value) = attrs.shift_remove(&key) else {
            continue;
        };
        let entry = lists[which].entry(n).or_default();
        match field
            .strip_prefix("tool_calls.")
            .and_then(|r| r.split_once('.'))
            .and_then(|(m, f)| Some((m.parse::<usize>().ok()?, f)))
        {
            Some((m, f)) => {
                entry.1.entry(m).or_default().insert(f.to_owned(), value);
            }
            None => {
                entry.0.insert(field, value);
            }
        }
    }
    let [prompt, completion, functions] = lists;
    let messages = |list: Indexed| -> Vec<Value> {
        list.into_values()
            .map(|(mut m, calls)| {
                if !calls.is_empty() {
                    m.insert(
                        "tool_calls".into(),
                        Value::Array(calls.into_values().map(Value::Object).collect()),
                    );
                }
                Value::Object(m)
            })
            .collect()
    };
    if !prompt.is_empty() {
        let list = messages(prompt);
        attrs.entry("gen_ai.prompt").or_insert(Value::Array(list));
    }
    if !completion.is_empty() {
        let list = messages(completion);
        let reasons: Vec<Value> = list
            .iter()
            .filter_map(|m| m.get("finish_reason").filter(|r| r.is_string()).cloned())
            .collect();
        if !reasons.is_empty() {
            attrs
                .entry("gen_ai.response.finish_reasons")
                .or_insert(Value::Array(reasons));
        }
        attrs
            .entry("gen_ai.completion")
            .or_insert(Value::Array(list));
    }
    if !functions.is_empty() {
        let defs = functions
            .into_values()
            .map(|(mut f, _)| {
                f.insert("type".into(), Value::from("function"));
                Value::Object(f)
            })
            .collect();
        attrs
            .entry("gen_ai.tool.definitions")
            .or_insert(Value::Array(defs));
    }
}
