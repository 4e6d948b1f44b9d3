//! One shape for every provider's chat: [`ChatRequest`] in, [`Reply`] out, and the two wire
//! protocols they map to (OpenAI's chat completions, which every OpenAI-compatible server
//! speaks, and Anthropic's Messages API).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// A message in a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text, when there is any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The calls an assistant turn makes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A message of `role` saying `text`.
    pub fn new(role: &str, text: impl Into<String>) -> Self {
        Self {
            role: role.to_owned(),
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool call: its id, the tool's name and the arguments as JSON text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id (the provider's, or `call_<i>` when it gave none).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, JSON text as the model wrote them.
    pub arguments: String,
}

/// What to ask.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tool schemas, in OpenAI's function shape (`{"type": "function", "function": {...}}` or a
    /// bare `{name, description, parameters}`).
    pub tools: Vec<Value>,
    /// Sampling temperature.
    pub temperature: f64,
    /// The reply budget in tokens.
    pub max_tokens: u32,
    /// Whether to ask for token log-probabilities (OpenAI-compatible servers only).
    pub logprobs: bool,
}

/// Token counts of a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Reply tokens.
    pub output_tokens: u64,
}

/// What came back, the same for every provider.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Reply {
    /// The reply's text, when there is any.
    pub content: Option<String>,
    /// The tool calls it makes.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped: `stop`, `length`, `tool_calls`, or the provider's own word.
    pub finish_reason: Option<String>,
    /// Token counts, as the server reported them.
    pub usage: Usage,
    /// The sum of the reply tokens' log-probabilities and how many there were.
    pub logprobs: Option<(f64, u64)>,
}

/// A tool schema as OpenAI's function object: `(name, description, parameters)`.
fn function_of(tool: &Value) -> Option<(&str, Option<&Value>, Option<&Value>)> {
    let f = tool.get("function").unwrap_or(tool);
    let name = f.get("name")?.as_str().filter(|n| !n.trim().is_empty())?;
    Some((
        name,
        f.get("description"),
        f.get("parameters").or_else(|| f.get("input_schema")),
    ))
}

/// The OpenAI chat-completions body for `model`.
pub fn openai_body(model: &str, req: &ChatRequest) -> Value {
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| {
            let mut o = Map::new();
            o.insert("role".into(), json!(m.role));
            o.insert("content".into(), m.content.as_ref().map_or(Value::Null, |c| json!(c)));
            if !m.tool_calls.is_empty() {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
                o.insert("tool_calls".into(), Value::Array(calls));
            }
            if let Some(id) = &m.tool_call_id {
                o.insert("tool_call_id".into(), json!(id));
            }
            Value::Object(o)
        })
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("temperature".into(), json!(req.temperature));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    if req.logprobs {
        body.insert("logprobs".into(), json!(true));
    }
    let tools: Vec<Value> = req
        .tools
        .iter()
        .filter_map(function_of)
        .map(|(name, description, parameters)| {
            let mut f = Map::new();
            f.insert("name".into(), json!(name));
            if let Some(d) = description {
                f.insert("description".into(), d.clone());
            }
            f.insert(
                "parameters".into(),
                parameters
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            );
            json!({"type": "function", "function": f})
        })
        .collect();
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    Value::Object(body)
}

/// A reply in OpenAI's shape, read.
///
/// # Errors
/// The body is not a chat completion (no choices, no message), as a sentence.
pub fn openai_reply(body: &Value) -> Result<Reply, String> {
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or("the reply has no choices")?;
    let message = choice
        .get("message")
        .ok_or("the reply's choice has no message")?;
    let tool_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let f = c.get("function")?;
                    Some(ToolCall {
                        id: c
                            .get("id")
                            .and_then(Value::as_str)
                            .map_or_else(|| format!("call_{i}"), str::to_owned),
                        name: f.get("name")?.as_str()?.to_owned(),
                        arguments: match f.get("arguments") {
                            Some(Value::String(s)) => s.clone(),
                            Some(other) => other.to_string(),
                            None => "{}".to_owned(),
                        },
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let usage = body.get("usage").map_or_else(Usage::default, |u| Usage {
        input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    });
    let logprobs = choice
        .get("logprobs")
        .and_then(|l| l.get("content"))
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .map(|c| {
            let xs: Vec<f64> = c
                .iter()
                .filter_map(|t| t.get("logprob").and_then(Value::as_f64))
                .collect();
            (xs.iter().sum(), xs.len() as u64)
        });
    Ok(Reply {
        content: message
            .get("content")
            .and_then(Value::as_str)
            .map(str::to_owned),
        tool_calls,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned),
        usage,
        logprobs,
    })
}

/// The Anthropic Messages body for `model`: system messages joined into `system`, tool results
/// gathered into one user turn, calls as `tool_use` blocks, temperature clamped to [0, 1].
pub fn anthropic_body(model: &str, req: &ChatRequest) -> Value {
    let system: Vec<&str> = req
        .messages
        .iter()
        .filter(|m| m.role == "system")
        .filter_map(|m| m.content.as_deref())
        .filter(|t| !t.trim().is_empty())
        .collect();
    let mut messages: Vec<Value> = Vec::new();
    for m in req.messages.iter().filter(|m| m.role != "system") {
        let text_block = |t: &str| json!({"type": "text", "text": t});
        match m.role.as_str() {
            "tool" => {
                let block = json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content.clone().unwrap_or_default(),
                });
                // Consecutive tool results go in one user turn.
                let joined = messages.last_mut().filter(|last| {
                    last["role"] == "user"
                        && last["content"]
                            .as_array()
                            .is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result"))
                });
                match joined {
                    Some(last) => last["content"]
                        .as_array_mut()
                        .into_iter()
                        .for_each(|c| c.push(block.clone())),
                    None => messages.push(json!({"role": "user", "content": [block]})),
                }
            }
            role => {
                let mut blocks: Vec<Value> = m
                    .content
                    .as_deref()
                    .filter(|t| !t.trim().is_empty())
                    .map(text_block)
                    .into_iter()
                    .collect();
                for c in &m.tool_calls {
                    let input: Value =
                        serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                if !blocks.is_empty() {
                    let role = if role == "assistant" {
                        "assistant"
                    } else {
                        "user"
                    };
                    messages.push(json!({"role": role, "content": blocks}));
                }
            }
        }
    }
    if messages.first().is_some_and(|m| m["role"] == "assistant") {
        messages.insert(
            0,
            json!({"role": "user", "content": [{"type": "text", "text": "(hi)"}]}),
        );
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("max_tokens".into(), json!(req.max_tokens.max(1)));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("temperature".into(), json!(req.temperature.clamp(0.0, 1.0)));
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    let tools: Vec<Value> = req
        .tools
        .iter()
        .filter_map(function_of)
        .map(|(name, description, parameters)| {
            let schema = parameters
                .filter(|p| p.as_object().is_some_and(|o| !o.is_empty()))
                .cloned()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            let mut t = json!({"name": name, "input_schema": schema});
            if let Some(d) = description
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
            {
                t["description"] = json!(d);
            }
            t
        })
        .collect();
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    Value::Object(body)
}

/// A reply in Anthropic's shape, read: text blocks joined, `tool_use` blocks as calls, the stop
/// reason in OpenAI's words.
///
/// # Errors
/// The body is not a message (no content list), as a sentence.
pub fn anthropic_reply(body: &Value) -> Result<Reply, String> {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or("the reply has no content blocks")?;
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    let tool_calls = blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .enumerate()
        .filter_map(|(i, b)| {
            Some(ToolCall {
                id: b["id"]
                    .as_str()
                    .map_or_else(|| format!("toolu_{i}"), str::to_owned),
                name: b["name"].as_str()?.to_owned(),
                arguments: b
                    .get("input")
                    .map_or_else(|| "{}".to_owned(), Value::to_string),
            })
        })
        .collect();
    let finish_reason = body.get("stop_reason").and_then(Value::as_str).map(|r| {
        match r {
            "tool_use" => "tool_calls",
            "max_tokens" => "length",
            "end_turn" | "stop_sequence" | "pause_turn" => "stop",
            other => other,
        }
        .to_owned()
    });
    let usage = body.get("usage").map_or_else(Usage::default, |u| Usage {
        input_tokens: u.get("input_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
    });
    Ok(Reply {
        content: (!texts.is_empty()).then(|| texts.join("\n\n")),
        tool_calls,
        finish_reason,
        usage,
        logprobs: None,
    })
}

/// The vectors of an embeddings reply, in input order.
///
/// # Errors
/// The body has no `data` list, or an entry is not a list of numbers, as a sentence.
pub fn embeddings_reply(body: &Value, n: usize) -> Result<Vec<Vec<f32>>, String> {
    let data = body
        .get("data")
        .and_then(Value::as_array)
        .ok_or("the reply has no `data` list")?;
    if data.len() != n {
        return Err(format!(
            "the reply has {} vectors for {n} texts",
            data.len()
        ));
    }
    let mut out: Vec<(u64, Vec<f32>)> = Vec::with_capacity(n);
    for (i, d) in data.iter().enumerate() {
        let index = d.get("index").and_then(Value::as_u64).unwrap_or(i as u64);
        let xs = d
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or("a vector is not a list")?;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "embeddings are stored as f32"
        )]
        let v: Option<Vec<f32>> = xs.iter().map(|x| x.as_f64().map(|x| x as f32)).collect();
        out.push((index, v.ok_or("a vector is not a list of numbers")?));
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, v)| v).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ChatRequest {
        ChatRequest {
            messages: vec![
                Message::new("system", "S"),
                Message::new("user", "U"),
                Message {
                    role: "assistant".into(),
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "t".into(),
                        arguments: "{\"a\":1}".into(),
                    }],
                    tool_call_id: None,
                },
                Message {
                    role: "tool".into(),
                    content: Some("r1".into()),
                    tool_calls: vec![],
                    tool_call_id: Some("c1".into()),
                },
                Message {
                    role: "tool".into(),
                    content: Some("r2".into()),
                    tool_calls: vec![],
                    tool_call_id: Some("c2".into()),
                },
            ],
            tools: vec![
                json!({"name": "t", "description": "d", "parameters": {"type": "object"}, "returns": "x"}),
            ],
            temperature: 1.5,
            max_tokens: 120,
            logprobs: true,
        }
    }

    #[test]
    fn openai_body_keeps_the_calls_and_wraps_bare_tools() {
        let b = openai_body("m", &request());
        assert_eq!(b["max_tokens"], 120, "no floor: what is asked is sent");
        assert_eq!(
            b["tools"][0],
            json!({"type": "function", "function": {"name": "t", "description": "d", "parameters": {"type": "object"}}})
        );
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1}"
        );
        assert_eq!(b["messages"][3]["tool_call_id"], "c1");
        assert_eq!(b["logprobs"], true);
    }

    #[test]
    fn anthropic_body_gathers_results_and_splits_system() {
        let b = anthropic_body("m", &request());
        assert_eq!(b["system"], "S");
        assert_eq!(b["temperature"], 1.0);
        let msgs = b["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        assert_eq!(
            msgs[1]["content"][0],
            json!({"type": "tool_use", "id": "c1", "name": "t", "input": {"a": 1}})
        );
        assert_eq!(
            msgs[2]["content"].as_array().unwrap().len(),
            2,
            "both results in one user turn"
        );
        assert_eq!(b["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn replies_map_to_one_shape() {
        let o = openai_reply(&json!({"choices": [{"message": {"content": "hi", "tool_calls": [{"id": "x", "function": {"name": "t", "arguments": "{}"}}]}, "finish_reason": "tool_calls", "logprobs": {"content": [{"logprob": -0.5}, {"logprob": -0.25}]}}], "usage": {"prompt_tokens": 12, "completion_tokens": 3}})).unwrap();
        let a = anthropic_reply(&json!({"content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "x", "name": "t", "input": {}}], "stop_reason": "tool_use", "usage": {"input_tokens": 12, "output_tokens": 3}})).unwrap();
        assert_eq!(o.content, a.content);
        assert_eq!(o.tool_calls, a.tool_calls);
        assert_eq!(o.finish_reason, a.finish_reason);
        assert_eq!(o.usage, a.usage);
        assert_eq!(o.logprobs, Some((-0.75, 2)));
        assert!(openai_reply(&json!({"choices": []})).is_err());
    }

    #[test]
    fn embeddings_come_back_in_input_order() {
        let v = embeddings_reply(
            &json!({"data": [{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}]}),
            2,
        )
        .unwrap();
        assert_eq!(v, vec![vec![1.0], vec![2.0]]);
        assert!(embeddings_reply(&json!({"data": []}), 1).is_err());
    }
}
