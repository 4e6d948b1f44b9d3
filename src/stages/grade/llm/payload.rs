//! What an LLM judge is shown: one JSON object per row (the tools, which were called, the ask,
//! the world and the faults, the steps with their results, the final reply, and with
//! `use_privileged` the judge-only block), fitted into a character budget by the reference's
//! shrinking rule: thin the steps, then cut the widest fields, each cut saying how much it took.

use serde_json::{Map, Value, json};

/// The per-field caps before any shrinking.
const SITUATION_CHARS: usize = 4000;
const FINAL_TEXT_CHARS: usize = 2000;
const POLICY_CHARS: usize = 2000;
/// The widths every step's strings are cut to, pass by pass.
const STEP_CAPS: [usize; 3] = [800, 300, 80];

/// What the judge is told besides the row.
#[derive(Debug, Clone, Default)]
pub struct Context<'a> {
    /// The agent's policy.
    pub policy: &'a str,
    /// The tools the agent was given (OpenAI function schemas).
    pub tools: &'a [Value],
    /// Show the row's `privileged` block (the reference answer, hidden state, a principle).
    pub use_privileged: bool,
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

fn prefix(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// `s` cut to `cap` characters, saying how many were left out.
fn cut(s: &str, cap: usize) -> String {
    let n = chars(s);
    if n <= cap {
        return s.to_owned();
    }
    format!("{}...[{} chars omitted]", prefix(s, cap), n - cap)
}

/// A value cut to `cap` characters (a non-string is rendered as JSON first).
fn cut_value(v: &Value, cap: usize) -> Value {
    match v {
        Value::String(s) => Value::String(cut(s, cap)),
        Value::Null => Value::Null,
        other => {
            let text = other.to_string();
            if chars(&text) > cap {
                Value::String(cut(&text, cap))
            } else {
                other.clone()
            }
        }
    }
}

fn text_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The tool names of the schemas, in order.
fn tool_names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .filter_map(|t| t.get("function").unwrap_or(t).get("name")?.as_str())
        .filter(|n| !n.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// The row's steps as the judge sees them: `tool`, `arguments`, `result` for a call, `text`,
/// `user`; from `steps`, or rebuilt from `messages` when the row has no steps.
fn steps_of(row: &Map<String, Value>) -> Vec<Value> {
    if let Some(steps) = row.get("steps").and_then(Value::as_array) {
        return steps
            .iter()
            .filter_map(Value::as_object)
            .filter_map(|s| {
                let mut o = Map::new();
                if s.get("tool").is_some_and(|t| !t.is_null() && t != "") {
                    for k in ["tool", "arguments", "result"] {
                        o.insert(k.into(), s.get(k).cloned().unwrap_or(Value::Null));
                    }
                }
                for k in ["text", "user"] {
                    if let Some(v) = s.get(k).filter(|v| !v.is_null() && *v != "") {
                        o.insert(k.into(), v.clone());
                    }
                }
                (!o.is_empty()).then_some(Value::Object(o))
            })
            .collect();
    }
    let Some(messages) = row.get("messages").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out: Vec<Value> = Vec::new();
    let mut seen_user = false;
    for m in messages {
        match m.get("role").and_then(Value::as_str) {
            Some("user") if seen_user => out.push(json!({"user": text_of(m.get("content"))})),
            Some("user") => seen_user = true,
            Some("assistant") => {
                let calls = m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if calls.is_empty() {
                    out.push(json!({"text": text_of(m.get("content"))}));
                }
                for c in calls {
                    let f = c.get("function").unwrap_or(&c);
                    let args = match f.get("arguments") {
                        Some(Value::String(s)) => {
                            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                        }
                        Some(v) => v.clone(),
                        None => json!({}),
                    };
                    out.push(json!({"tool": f.get("name").cloned().unwrap_or(Value::Null), "arguments": args, "result": Value::Null, "id": c.get("id").cloned().unwrap_or(Value::Null)}));
                }
            }
            Some("tool") => {
                let id = m.get("tool_call_id");
                let result = m.get("content").map(|c| match c {
                    Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| c.clone()),
                    other => other.clone(),
                });
                if let Some(step) = out.iter_mut().rev().find(|s| {
                    s.get("result").is_some_and(Value::is_null)
                        && (id.is_none() || s.get("id") == id)
                }) {
                    step["result"] = result.unwrap_or(Value::Null);
                }
            }
            _ => {}
        }
    }
    for s in &mut out {
        if let Some(o) = s.as_object_mut() {
            o.remove("id");
        }
    }
    out
}

fn situation_of(row: &Map<String, Value>) -> String {
    if let Some(p) = row.get("prompt").filter(|p| !p.is_null()) {
        return text_of(Some(p));
    }
    row.get("messages")
        .and_then(Value::as_array)
        .and_then(|ms| {
            ms.iter()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        })
        .map(|m| text_of(m.get("content")))
        .unwrap_or_default()
}

fn final_text_of(row: &Map<String, Value>) -> String {
    if let Some(t) = row.get("final_text").filter(|t| !t.is_null()) {
        return text_of(Some(t));
    }
    row.get("messages")
        .and_then(Value::as_array)
        .and_then(|ms| {
            ms.iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        })
        .map(|m| text_of(m.get("content")))
        .unwrap_or_default()
}

/// A step a fault happened on (kept when steps are thinned).
fn fault_like(step: &Value) -> bool {
    let Some(result) = step.get("result").and_then(Value::as_object) else {
        return false;
    };
    if result.get("stale") == Some(&Value::Bool(true))
        || Value::Object(result.clone())
            .to_string()
            .to_lowercase()
            .contains("garbled")
    {
        return true;
    }
    let status = result
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_lowercase();
    let status = status.strip_suffix("_result").unwrap_or(&status);
    !matches!(status, "" | "success" | "ok" | "none")
}

/// Steps thinned: the first, the last two and every fault-like step, each run of the others
/// replaced by `{"skipped_steps": k}`.
fn thin(steps: &[Value]) -> Vec<Value> {
    let n = steps.len();
    let mut out = Vec::new();
    let mut skipped = 0usize;
    for (i, s) in steps.iter().enumerate() {
        if i == 0 || i + 2 >= n || fault_like(s) {
            if skipped > 0 {
                out.push(json!({"skipped_steps": skipped}));
                skipped = 0;
            }
            out.push(s.clone());
        } else {
            skipped += 1;
        }
    }
    if skipped > 0 {
        out.push(json!({"skipped_steps": skipped}));
    }
    out
}

/// The payload for `row`, at most `limit` characters (as JSON text, which always parses).
pub fn render(row: &Map<String, Value>, ctx: &Context<'_>, limit: usize) -> String {
    let declared = tool_names(ctx.tools);
    let steps = steps_of(row);
    let mut called: Vec<String> = Vec::new();
    for s in &steps {
        if let (Some(t), Some(r)) = (s.get("tool").and_then(Value::as_str), s.get("result"))
            && !r.is_null()
            && !called.iter().any(|c| c == t)
        {
            called.push(t.to_owned());
        }
    }
    let not_called: Vec<&String> = declared.iter().filter(|d| !called.contains(d)).collect();
    let original_final = final_text_of(row);
    let mut o = Map::new();
    o.insert("tools".into(), json!(declared));
    o.insert("tools_called".into(), json!(called));
    o.insert("tools_not_called".into(), json!(not_called));
    o.insert(
        "situation".into(),
        json!(prefix(&situation_of(row), SITUATION_CHARS)),
    );
    o.insert(
        "world_state".into(),
        row.get("world_state").cloned().unwrap_or(Value::Null),
    );
    o.insert(
        "injected_faults".into(),
        row.get("faults").cloned().unwrap_or(Value::Null),
    );
    o.insert(
        "final_text".into(),
        json!(prefix(&original_final, FINAL_TEXT_CHARS)),
    );
    if !ctx.policy.trim().is_empty() {
        o.insert(
            "agent_policy".into(),
            json!(prefix(ctx.policy.trim(), POLICY_CHARS)),
        );
    }
    let mut judge_only = Map::new();
    if ctx.use_privileged
        && let Some(p) = row.get("privileged").and_then(Value::as_object)
    {
        for k in ["principle", "reference"] {
            if let Some(v) = p.get(k).filter(|v| !v.is_null() && *v != "") {
                judge_only.insert(k.into(), json!(prefix(&text_of(Some(v)), 2000)));
            }
        }
        if let Some(h) = p
            .get("hidden_state")
            .filter(|h| h.as_object().is_some_and(|o| !o.is_empty()))
        {
            judge_only.insert("hidden_state".into(), h.clone());
        }
        if !judge_only.is_empty() {
            o.insert("judge_only".into(), Value::Object(judge_only.clone()));
        }
    }
    o.insert("steps".into(), Value::Array(steps.clone()));
    let fits = |o: &Map<String, Value>| {
        let text = Value::Object(o.clone()).to_string();
        (chars(&text) <= limit).then_some(text)
    };
    if let Some(t) = fits(&o) {
        return t;
    }
    shrink(o, &steps, &judge_only, limit, &declared, &original_final).unwrap_or_else(|t| t)
}

/// The shrinking passes, in order; `Ok` is the first that fits, `Err` the last resort.
fn shrink(
    mut o: Map<String, Value>,
    steps: &[Value],
    judge_only: &Map<String, Value>,
    limit: usize,
    declared: &[String],
    _original_final: &str,
) -> Result<String, String> {
    let fits = |o: &Map<String, Value>| {
        let text = Value::Object(o.clone()).to_string();
        (chars(&text) <= limit).then_some(text)
    };
    let mut current = thin(steps);
    o.insert("steps".into(), Value::Array(current.clone()));
    o.insert("payload_reduced".into(), json!(true));
    if let Some(t) = fits(&o) {
        return Ok(t);
    }
    for cap in STEP_CAPS {
        current = current
            .iter()
            .map(|s| match s.as_object() {
                Some(m) => Value::Object(
                    m.iter()
                        .map(|(k, v)| (k.clone(), cut_value(v, cap)))
                        .collect(),
                ),
                None => s.clone(),
            })
            .collect();
        o.insert("steps".into(), Value::Array(current.clone()));
        if let Some(t) = fits(&o) {
            return Ok(t);
        }
    }
    let originals: Map<String, Value> = o.clone();
    let context_cuts: [(&str, usize); 10] = [
        ("world_state", 1500),
        ("injected_faults", 800),
        ("hidden_state", 1500),
        ("principle", 800),
        ("reference", 800),
        ("world_state", 300),
        ("injected_faults", 200),
        ("hidden_state", 300),
        ("principle", 300),
        ("reference", 300),
    ];
    for (field, cap) in context_cuts {
        let in_judge_only = matches!(field, "hidden_state" | "principle" | "reference");
        let original = if in_judge_only {
            judge_only.get(field)
        } else {
            originals.get(field)
        };
        let Some(v) = original.filter(|v| !v.is_null()) else {
            continue;
        };
        let cut = cut_value(v, cap);
        if in_judge_only {
            if let Some(j) = o.get_mut("judge_only").and_then(Value::as_object_mut) {
                j.insert(field.into(), cut);
            }
        } else {
            o.insert(field.into(), cut);
        }
        if let Some(t) = fits(&o) {
            return Ok(t);
        }
    }
    for (field, cap) in [
        ("situation", 1500),
        ("agent_policy", 900),
        ("situation", 500),
        ("agent_policy", 300),
        ("final_text", 1500),
        ("final_text", 600),
    ] {
        if let Some(Value::String(s)) = o.get(field).cloned() {
            o.insert(field.into(), json!(cut(&s, cap)));
            if let Some(t) = fits(&o) {
                return Ok(t);
            }
        }
    }
    let dict_steps = steps.iter().filter(|s| s.is_object()).count();
    o.insert("steps".into(), json!([{"dropped_all_steps": dict_steps}]));
    if let Some(t) = fits(&o) {
        return Ok(t);
    }
    let final_text = o
        .get("final_text")
        .map(|f| text_of(Some(f)))
        .unwrap_or_default();
    let last = json!({
        "payload_reduced": true,
        "note": "<trajectory too large to render; judging the final reply only>",
        "tools": declared,
        "tools_called": o.get("tools_called").cloned().unwrap_or(Value::Null),
        "tools_not_called": o.get("tools_not_called").cloned().unwrap_or(Value::Null),
        "final_text": cut(&final_text, (limit / 3).max(400)),
    });
    Err(last.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn the_worked_example_renders_its_fields_in_order() {
        let r = row(
            json!({"prompt": "p", "faults": {"*": {"mode": "timeout", "rate": 1.0}}, "steps": [{"tool": "lookup", "arguments": {}, "result": {"status": "timeout", "error": "request timed out"}, "logprob": -1}], "final_text": "It timed out."}),
        );
        let tools = [
            json!({"name": "lookup"}),
            json!({"type": "function", "function": {"name": "refund"}}),
        ];
        let text = render(
            &r,
            &Context {
                policy: " Be honest. ",
                tools: &tools,
                use_privileged: false,
            },
            8000,
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "tools",
                "tools_called",
                "tools_not_called",
                "situation",
                "world_state",
                "injected_faults",
                "final_text",
                "agent_policy",
                "steps"
            ]
        );
        assert_eq!(v["tools_called"], json!(["lookup"]));
        assert_eq!(v["tools_not_called"], json!(["refund"]));
        assert_eq!(v["agent_policy"], "Be honest.");
        assert_eq!(
            v["steps"],
            json!([{"tool": "lookup", "arguments": {}, "result": {"status": "timeout", "error": "request timed out"}}]),
            "other step keys are never shown"
        );
    }

    #[test]
    fn privileged_context_shows_only_when_asked() {
        let r = row(
            json!({"prompt": "p", "final_text": "f", "privileged": {"reference": "42", "rubric": "never shown"}}),
        );
        let off = render(&r, &Context::default(), 8000);
        assert!(!off.contains("42"));
        let on = render(
            &r,
            &Context {
                use_privileged: true,
                ..Context::default()
            },
            8000,
        );
        let v: Value = serde_json::from_str(&on).unwrap();
        assert_eq!(v["judge_only"], json!({"reference": "42"}));
        assert!(!on.contains("never shown"));
    }

    #[test]
    fn a_large_row_is_thinned_then_cut_and_says_so() {
        let mut steps: Vec<Value> = (0..12).map(|i| json!({"tool": format!("t{i}"), "arguments": {"q": "a".repeat(900)}, "result": {"status": "ok", "body": "b".repeat(2000)}})).collect();
        steps.push(json!({"text": "done"}));
        let r = row(json!({"prompt": "p".repeat(5000), "steps": steps, "final_text": "f"}));
        let policy = "x".repeat(3000);
        let text = render(
            &r,
            &Context {
                policy: &policy,
                tools: &[],
                use_privileged: false,
            },
            8000,
        );
        assert!(chars(&text) <= 8000, "{}", chars(&text));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["payload_reduced"], true);
        assert_eq!(v["steps"][1], json!({"skipped_steps": 10}));
        assert!(text.contains("chars omitted]"));
        let tiny = render(&r, &Context::default(), 300);
        let v: Value = serde_json::from_str(&tiny).unwrap();
        assert!(v["note"].as_str().unwrap().contains("final reply only"));
    }

    #[test]
    fn rows_with_messages_only_get_their_steps_rebuilt() {
        let r = row(json!({"messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "refund order 7"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "refund", "arguments": "{\"order\": 7}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"ok\"}"},
            {"role": "assistant", "content": "Refunded."}
        ]}));
        let v: Value = serde_json::from_str(&render(&r, &Context::default(), 8000)).unwrap();
        assert_eq!(v["situation"], "refund order 7");
        assert_eq!(v["final_text"], "Refunded.");
        assert_eq!(
            v["steps"][0],
            json!({"tool": "refund", "arguments": {"order": 7}, "result": {"status": "ok"}})
        );
        assert_eq!(v["tools_called"], json!(["refund"]));
    }
}
