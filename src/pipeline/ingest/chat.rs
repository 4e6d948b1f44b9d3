//! OpenAI chat trajectories (and τ-bench results, a preset of them) → rows.
//!
//! A record holds a message list (system, user, assistant with `tool_calls` whose `arguments`
//! are JSON strings, tool results with `tool_call_id`). The row gets:
//! - `prompt`: the first user turn (text parts joined by newlines); system turns never enter it;
//! - `steps`: each tool call, paired with its result by `tool_call_id` (else by tool name, else
//!   the first call still waiting), arguments and results parsed when they are JSON; assistant
//!   texts become text steps, in order; user turns after the first become user steps;
//! - `final_text`: the last assistant text (taken out of the steps), unless a tool call came after
//!   it; `tools_used`: call names in order;
//! - `messages`: the list as given (kept verbatim for the way back);
//! - `task_id`, `rollout_index`, `reward` from the fields the options name (dotted paths into
//!   nested objects); the fields named privileged move under `privileged`, never exported.
//!
//! Every other field of the record is kept, so it lands in `extra`.

use serde_json::{Map, Value};

use crate::pipeline::row::{FieldError, content_of};

/// Where a chat record keeps what the row needs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ChatFields {
    /// The message list.
    pub messages: String,
    /// The task id (dotted path).
    pub task: String,
    /// The repeat index (dotted path).
    pub trial: String,
    /// The reward (dotted path).
    pub reward: String,
    /// Fields (dotted paths) moved under `privileged`.
    pub privileged: Vec<String>,
}

impl ChatFields {
    /// OpenAI chat defaults: `messages`, `task_id`, `trial`, `reward`, nothing privileged.
    pub fn openai() -> Self {
        Self {
            messages: "messages".into(),
            task: "task_id".into(),
            trial: "trial".into(),
            reward: "reward".into(),
            privileged: Vec::new(),
        }
    }

    /// τ-bench result files: `traj` holds the messages; `info` (the task's instruction for the
    /// simulated user, the expected actions, the reward breakdown) is privileged.
    pub fn tau_bench() -> Self {
        Self {
            messages: "traj".into(),
            privileged: vec!["info".into()],
            ..Self::openai()
        }
    }
}

fn get<'a>(obj: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut cur = obj.get(parts.next()?)?;
    for p in parts {
        cur = cur.as_object()?.get(p)?;
    }
    Some(cur)
}

/// Removes the value at a dotted path.
fn take(obj: &mut Map<String, Value>, path: &str) -> Option<Value> {
    match path.rsplit_once('.') {
        None => obj.shift_remove(path),
        Some((parent, last)) => {
            let mut cur = obj;
            for p in parent.split('.') {
                cur = cur.get_mut(p)?.as_object_mut()?;
            }
            cur.shift_remove(last)
        }
    }
}

/// Sets the value at a dotted path, making the objects on the way (`meta.gold` is `gold` inside
/// `meta`, as it was in the record).
fn put(obj: &mut Map<String, Value>, path: &str, value: Value) {
    match path.split_once('.') {
        None => {
            obj.insert(path.to_owned(), value);
        }
        Some((first, rest)) => {
            let next = obj
                .entry(first.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !next.is_object() {
                *next = Value::Object(Map::new());
            }
            if let Value::Object(inner) = next {
                put(inner, rest, value);
            }
        }
    }
}

/// A JSON value from text that may hold JSON (tool arguments and results usually do).
fn maybe_json(v: &Value) -> Value {
    if let Value::String(s) = v {
        let t = s.trim_start();
        if (t.starts_with('{') || t.starts_with('['))
            && let Ok(parsed) = serde_json::from_str::<Value>(s)
        {
            return parsed;
        }
    }
    v.clone()
}

struct Call {
    id: Option<String>,
    name: String,
    step: usize,
    answered: bool,
}

/// Tool calls waiting for their results, in the order they were made (both readers of chat
/// records pair results the same way).
#[derive(Default)]
pub(super) struct Pending(Vec<Call>);

impl Pending {
    /// A call made at `step`.
    pub(super) fn call(&mut self, id: Option<&str>, name: &str, step: usize) {
        self.0.push(Call {
            id: id.map(str::to_owned),
            name: name.to_owned(),
            step,
            answered: false,
        });
    }

    /// The step a tool result answers, which it closes: the open call with the result's id,
    /// else with its tool name, else the first open call.
    pub(super) fn answer(&mut self, id: Option<&str>, name: Option<&str>) -> Option<usize> {
        let calls = &mut self.0;
        let open = || (0..calls.len()).filter(|&i| !calls[i].answered);
        let pick = open()
            .find(|&i| id.is_some() && calls[i].id.as_deref() == id)
            .or_else(|| open().find(|&i| name.is_some() && Some(calls[i].name.as_str()) == name))
            .or_else(|| open().next())?;
        calls[pick].answered = true;
        Some(calls[pick].step)
    }
}

/// Builds `prompt`, `steps`, `final_text` and `tools_used` from an OpenAI message list.
pub(super) fn conversation(messages: &[Value]) -> Result<Map<String, Value>, FieldError> {
    let mut prompt: Option<String> = None;
    let mut steps: Vec<Map<String, Value>> = Vec::new();
    let mut calls = Pending::default();
    let mut tools_used: Vec<Value> = Vec::new();
    // Where the last assistant text step is: it becomes the final reply.
    let mut last_text: Option<usize> = None;
    for (i, m) in messages.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(FieldError {
                field: Some(format!("messages[{i}]")),
                message: "expected an object".into(),
            });
        };
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let text = m
            .get("content")
            .and_then(content_of)
            .filter(|t| !t.trim().is_empty());
        match role {
            "user" => match (&prompt, text) {
                (None, Some(t)) => prompt = Some(t),
                (Some(_), Some(t)) => {
                    let mut s = Map::new();
                    s.insert("user".into(), Value::String(t));
                    steps.push(s);
                }
                _ => {}
            },
            "assistant" => {
                let tool_calls = m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .filter(|c| !c.is_empty());
                match tool_calls {
                    Some(tool_calls) => {
                        for (j, call) in tool_calls.iter().enumerate() {
                            let function = call.get("function").unwrap_or(call);
                            let name = function
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or("tool")
                                .to_owned();
                            let mut s = Map::new();
                            if j == 0
                                && let Some(t) = &text
                            {
                                s.insert("text".into(), Value::String(t.clone()));
                            }
                            s.insert("tool".into(), Value::String(name.clone()));
                            s.insert(
                                "arguments".into(),
                                function
                                    .get("arguments")
                                    .map_or(Value::Object(Map::new()), maybe_json),
                            );
                            s.insert("result".into(), Value::Null);
                            calls.call(call.get("id").and_then(Value::as_str), &name, steps.len());
                            tools_used.push(Value::String(name));
                            steps.push(s);
                        }
                    }
                    None => {
                        if let Some(t) = text {
                            let mut s = Map::new();
                            s.insert("text".into(), Value::String(t));
                            last_text = Some(steps.len());
                            steps.push(s);
                        }
                    }
                }
            }
            "tool" | "function" => {
                let id = m.get("tool_call_id").and_then(Value::as_str);
                let name = m.get("name").and_then(Value::as_str);
                if let Some(step) = calls.answer(id, name) {
                    let content = m.get("content").cloned().unwrap_or(Value::Null);
                    steps[step].insert("result".into(), maybe_json(&content));
                }
            }
            _ => {}
        }
    }
    // The last assistant text is the reply, unless a tool call came after it: then the
    // conversation ended on a call and the reply is empty.
    let mut final_text = String::new();
    if let Some(at) = last_text {
        let tool_after = steps[at + 1..].iter().any(|s| s.contains_key("tool"));
        if !tool_after && let Some(Value::String(t)) = steps.remove(at).remove("text") {
            final_text = t;
        }
    }
    let mut out = Map::new();
    if let Some(p) = prompt {
        out.insert("prompt".into(), Value::String(p));
    }
    out.insert(
        "steps".into(),
        Value::Array(steps.into_iter().map(Value::Object).collect()),
    );
    out.insert("final_text".into(), Value::String(final_text));
    out.insert("tools_used".into(), Value::Array(tools_used));
    Ok(out)
}

/// Turns one chat record into a row in the reference's format (then read as any row is).
pub fn to_row(record: Value, fields: &ChatFields) -> Result<Value, FieldError> {
    let Value::Object(mut rec) = record else {
        return Err(FieldError {
            field: None,
            message: "expected a JSON object".into(),
        });
    };
    let messages = match take(&mut rec, &fields.messages) {
        Some(Value::Array(m)) => m,
        Some(_) => {
            return Err(FieldError {
                field: Some(fields.messages.clone()),
                message: "expected an array of messages".into(),
            });
        }
        None => {
            return Err(FieldError {
                field: Some(fields.messages.clone()),
                message: "missing: no message list".into(),
            });
        }
    };
    let mut row = conversation(&messages)?;
    row.insert("messages".into(), Value::Array(messages));
    Ok(assemble(row, rec, fields))
}

/// Adds to `row` (what the conversation gave) the record's other fields: the task id, repeat
/// index and reward from where `fields` say, the privileged ones under `privileged`, and the
/// rest as they are (they land in `extra`).
pub(super) fn assemble(
    mut row: Map<String, Value>,
    mut rec: Map<String, Value>,
    fields: &ChatFields,
) -> Value {
    let mut privileged = Map::new();
    for path in &fields.privileged {
        if let Some(v) = take(&mut rec, path) {
            put(&mut privileged, path, v);
        }
    }
    if let Some(task) = get(&rec, &fields.task).cloned()
        && fields.task != "task_id"
    {
        row.insert("task_id".into(), task);
    }
    if let Some(trial) = get(&rec, &fields.trial).cloned()
        && !trial.is_null()
    {
        row.insert("rollout_index".into(), trial);
        if !fields.trial.contains('.') {
            rec.shift_remove(&fields.trial);
        }
    }
    if fields.reward != "reward"
        && let Some(reward) = get(&rec, &fields.reward).cloned()
    {
        row.insert("reward".into(), reward);
    }
    // The rest of the record rides along (into `extra`), after what the row needs.
    for (k, v) in rec {
        row.entry(k).or_insert(v);
    }
    if !privileged.is_empty() {
        row.insert("privileged".into(), Value::Object(privileged));
    }
    Value::Object(row)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tool_calls_pair_with_results_and_turns_become_steps() {
        let rec = json!({"id": "r1", "task_id": 7, "trial": 2, "reward": 1.0, "messages": [
            {"role": "system", "content": "Policy: be careful."},
            {"role": "user", "content": "Refund A1"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"id\": \"A1\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "policy", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c2", "content": "30 days"},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"error\", \"error\": \"db down\"}"},
            {"role": "assistant", "content": "The lookup failed."},
            {"role": "user", "content": [{"type": "text", "text": "try again"}]},
            {"role": "assistant", "content": "Refunded."}]});
        let row = to_row(rec, &ChatFields::openai()).unwrap();
        assert_eq!(row["prompt"], "Refund A1");
        assert_eq!(row["final_text"], "Refunded.");
        assert_eq!(row["tools_used"], json!(["lookup", "policy"]));
        assert_eq!(row["rollout_index"], 2);
        assert_eq!(row["task_id"], 7);
        assert_eq!(
            row["steps"],
            json!([
                {"text": "Checking.", "tool": "lookup", "arguments": {"id": "A1"}, "result": {"status": "error", "error": "db down"}},
                {"tool": "policy", "arguments": {}, "result": "30 days"},
                {"text": "The lookup failed."},
                {"user": "try again"}
            ])
        );
        assert_eq!(row["id"], "r1", "other fields ride along");
    }

    #[test]
    fn tau_bench_keeps_info_privileged_and_the_policy_out_of_the_prompt() {
        let rec = json!({"task_id": 3, "trial": 0, "reward": 0.0, "info": {"task": {"actions": []}},
            "traj": [{"role": "system", "content": "# Airline Agent Policy"}, {"role": "user", "content": "Hi"}]});
        let row = to_row(rec, &ChatFields::tau_bench()).unwrap();
        assert_eq!(row["prompt"], "Hi");
        assert_eq!(
            row["privileged"],
            json!({"info": {"task": {"actions": []}}})
        );
        assert!(row.get("info").is_none());
        assert_eq!(row["final_text"], "");
    }

    #[test]
    fn nested_field_paths_and_missing_messages() {
        let rec = json!({"meta": {"task": "t-9", "score": 0.0}, "messages": [{"role": "user", "content": "q"}]});
        let fields = ChatFields {
            task: "meta.task".into(),
            reward: "meta.score".into(),
            ..ChatFields::openai()
        };
        let row = to_row(rec, &fields).unwrap();
        assert_eq!(
            (row["task_id"].clone(), row["reward"].clone()),
            (json!("t-9"), json!(0.0))
        );
        let e = to_row(json!({"prompt": "x"}), &ChatFields::openai()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("messages"));
    }

    #[test]
    fn a_dotted_privileged_path_moves_the_nested_field() {
        let rec = json!({"meta": {"gold": "A1", "src": "s"}, "notes": {"key": 1},
            "messages": [{"role": "user", "content": "q"}]});
        let fields = ChatFields {
            privileged: vec!["meta.gold".into(), "notes".into(), "meta.absent".into()],
            ..ChatFields::openai()
        };
        let row = to_row(rec, &fields).unwrap();
        assert_eq!(
            row["privileged"],
            json!({"meta": {"gold": "A1"}, "notes": {"key": 1}})
        );
        assert_eq!(row["meta"], json!({"src": "s"}), "the rest of `meta` stays");
    }
}
