//! One conversation into one row: prompt, steps, final text, usage, reward, model and the
//! other fields its spans carry.

use serde_json::{Map, Value, json};

use super::group::{
    Conversation, has_content, is_genai, is_tool, message_text, normalise, score_value, unit_score,
};
use super::spans::{first, text_field};
use super::steps::{Steps, calls_in, results_in};
use super::{
    INPUT, OUTPUT, OtelFields, Span, TOOL_ARGS, TOOL_NAME, TOOL_RESULT, USAGE_IN, USAGE_OUT,
};

/// The row of one conversation, or `None` when no span of it speaks the GenAI conventions
/// (a trace of other work). A conversation without message content still gives a row, marked
/// `no_content: true`.
pub fn to_row(conv: &Conversation, fields: &OtelFields) -> Option<Value> {
    if !conv.spans.iter().any(|s| is_genai(s, fields)) {
        return None;
    }
    let mut fold = Fold::default();
    for s in &conv.spans {
        fold.facts(s, fields);
        if is_tool(s) {
            fold.tool_span(s);
            continue;
        }
        fold.messages(s);
    }
    Some(fold.into_row(conv))
}

/// What a conversation's spans add up to, in start-time order.
#[derive(Default)]
struct Fold {
    prompt: Option<String>,
    /// The user messages seen (normalised), so a repeated history adds nothing.
    seen: Vec<String>,
    final_text: Option<String>,
    steps: Steps,
    definitions: Option<Value>,
    /// Whether `agent` comes from the agent's own span.
    agent_named: bool,
    usage_in: u64,
    usage_out: u64,
    any_usage: bool,
    reward: Option<f64>,
    reason: Option<String>,
    model: Option<String>,
    task: Option<Value>,
    agent: Option<String>,
    /// The earliest start time (0: none).
    ts: u64,
    finish: Option<String>,
    index: Option<i64>,
}

impl Fold {
    /// Takes the facts of span `s` beyond its messages and tool call: start time, usage,
    /// reward, model, finish reason, index, task, tool definitions and agent name.
    fn facts(&mut self, s: &Span, fields: &OtelFields) {
        if s.start > 0 && (self.ts == 0 || s.start < self.ts) {
            self.ts = s.start;
        }
        let count = |keys: &[&str]| {
            first(&s.attrs, keys).and_then(|v| match v {
                Value::Number(n) => n.as_u64(),
                Value::String(t) => t.parse().ok(),
                _ => None,
            })
        };
        if let Some(n) = count(&USAGE_IN) {
            self.usage_in += n;
            self.any_usage = true;
        }
        if let Some(n) = count(&USAGE_OUT) {
            self.usage_out += n;
            self.any_usage = true;
        }
        self.score(s, fields);
        if self.model.is_none() {
            self.model = text_field(&s.attrs, &["gen_ai.response.model", "gen_ai.request.model"]);
        }
        if let Some(Value::Array(reasons)) = s.attrs.get("gen_ai.response.finish_reasons")
            && let Some(Value::String(r)) = reasons.last()
        {
            self.finish = Some(r.clone());
        }
        if self.index.is_none() {
            self.index = s
                .attrs
                .get(&fields.index_attr)
                .and_then(|v| v.as_i64().or_else(|| v.as_str()?.parse().ok()));
        }
        if self.task.is_none() {
            self.task = s
                .attrs
                .get(&fields.task_attr)
                .filter(|v| !v.is_null())
                .cloned();
        }
        if self.definitions.is_none() {
            self.definitions = s
                .attrs
                .get("gen_ai.tool.definitions")
                .filter(|d| d.as_array().is_some_and(|l| !l.is_empty()))
                .cloned();
        }
        // The agent's own span names it (the Agents SDK's bridge gives its client spans a
        // default name).
        let op = s.attrs.get("gen_ai.operation.name").and_then(Value::as_str);
        if (self.agent.is_none()
            || matches!(op, Some("invoke_agent" | "create_agent")) && !self.agent_named)
            && let Some(a) = text_field(&s.attrs, &["gen_ai.agent.name"])
        {
            self.agent_named = matches!(op, Some("invoke_agent" | "create_agent"));
            self.agent = Some(a);
        }
    }

    /// Takes the first reward of span `s`: its reward attribute, else a
    /// `gen_ai.evaluation.result` event's score (with its explanation as the reason).
    fn score(&mut self, s: &Span, fields: &OtelFields) {
        if self.reward.is_none() {
            self.reward = s.attrs.get(&fields.reward_attr).and_then(unit_score);
        }
        for (name, attrs) in &s.events {
            if name == "gen_ai.evaluation.result"
                && self.reward.is_none()
                && let Some(x) = attrs
                    .get("gen_ai.evaluation.score.value")
                    .or_else(|| attrs.get("gen_ai.evaluation.score"))
                    .and_then(unit_score)
            {
                self.reward = Some(x);
                self.reason = attrs
                    .get("gen_ai.evaluation.explanation")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
        }
    }

    /// Takes tool span `s` as the step of its call; a failed tool whose result is not an
    /// object with a `status` gets `{status: "error", output, error}`.
    fn tool_span(&mut self, s: &Span) {
        let name = text_field(&s.attrs, &TOOL_NAME)
            .or_else(|| s.name.clone())
            .unwrap_or_else(|| "tool".into());
        let arguments = first(&s.attrs, &TOOL_ARGS).cloned();
        let mut result = first(&s.attrs, &TOOL_RESULT)
            .cloned()
            .unwrap_or(Value::Null);
        let failed = s.status_error
            || s.attrs
                .get("gen_ai.tool.status")
                .and_then(Value::as_str)
                .is_some_and(|t| {
                    matches!(t.to_lowercase().as_str(), "error" | "failed" | "failure")
                });
        if failed && result.get("status").is_none() {
            let mut wrapped = Map::new();
            wrapped.insert("status".into(), Value::from("error"));
            wrapped.insert("output".into(), result);
            let error = s
                .events
                .iter()
                .find_map(|(_, a)| a.get("exception.message").and_then(Value::as_str))
                .or(s.status_message.as_deref());
            if let Some(e) = error {
                wrapped.insert("error".into(), Value::from(e));
            }
            result = Value::Object(wrapped);
        }
        let id = text_field(&s.attrs, &["gen_ai.tool.call.id"]);
        self.steps.span_call(id, name, arguments, result);
    }

    /// Takes the input and output messages of span `s`: their tool calls and results become
    /// steps, the first distinct user message the prompt (later ones user steps), the last
    /// assistant message the final text.
    fn messages(&mut self, s: &Span) {
        for (key, default_role) in [(&INPUT, "user"), (&OUTPUT, "assistant")] {
            let Some(list) = first(&s.attrs, key) else {
                continue;
            };
            let one;
            let list: &[Value] = match list {
                Value::Array(l) => l,
                other => {
                    one = [other.clone()];
                    &one
                }
            };
            for m in list {
                self.message(m, default_role);
            }
        }
    }

    /// Takes one message `m` of a list whose messages are `default_role` unless they say.
    fn message(&mut self, m: &Value, default_role: &str) {
        for c in calls_in(m) {
            self.steps.message_call(c);
        }
        for (id, result) in results_in(m) {
            self.steps.message_result(id.as_deref(), result);
        }
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or(default_role);
        let Some(text) = message_text(m).filter(|t| !t.trim().is_empty()) else {
            return;
        };
        if role == "user" && default_role == "user" {
            let key = normalise(&text);
            if self.seen.contains(&key) {
                return;
            }
            self.seen.push(key);
            if self.prompt.is_none() {
                self.prompt = Some(text);
            } else {
                self.steps.user(&text);
            }
        } else if role == "assistant" && default_role == "assistant" {
            self.final_text = Some(text);
        }
    }

    /// The row. A conversation without content (the instrumentation's default) still is a
    /// rollout: its task, reward, model, usage and tools make a row, marked so.
    fn into_row(self, conv: &Conversation) -> Value {
        let mut row = Map::new();
        if !has_content(conv) {
            row.insert("no_content".into(), Value::Bool(true));
        }
        row.insert(
            "prompt".into(),
            Value::from(self.prompt.unwrap_or_default()),
        );
        row.insert("steps".into(), Value::Array(self.steps.list));
        row.insert(
            "final_text".into(),
            Value::from(self.final_text.unwrap_or_default()),
        );
        row.insert("tools_used".into(), Value::Array(self.steps.tools_used));
        if let Some(d) = self.definitions {
            row.insert("tool_definitions".into(), d);
        }
        if let Some(t) = self.task {
            row.insert("task_id".into(), t);
        }
        row.insert("rollout_id".into(), Value::from(conv.id.clone()));
        row.insert("conversation_id".into(), Value::from(conv.id.clone()));
        if self.ts > 0 {
            row.insert("ts".into(), Value::from(self.ts));
        }
        if let Some(r) = self.reward {
            row.insert("reward".into(), score_value(r));
        }
        let texts = [
            ("reason", self.reason),
            ("model_version", self.model),
            ("agent_name", self.agent),
            ("finish_reason", self.finish),
        ];
        for (key, value) in texts {
            if let Some(v) = value {
                row.insert(key.into(), Value::from(v));
            }
        }
        if let Some(i) = self.index {
            row.insert("rollout_index".into(), Value::from(i));
        }
        if self.any_usage {
            row.insert(
                "usage".into(),
                json!({"input_tokens": self.usage_in, "output_tokens": self.usage_out}),
            );
        }
        row.insert("schema_version".into(), Value::from("1"));
        Value::Object(row)
    }
}
