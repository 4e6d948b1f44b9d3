//! JSON object → [`Record`].

use serde_json::Value;

use super::Record;
use crate::schema::SCHEMA_VERSION;

mod canonical;
mod fields;
mod json;
mod nested;
pub mod wide;

use canonical::expected;
pub use canonical::{canonical_json, json_eq, kind, prompt_task_id};
use fields::{check_share, dims_of, eval_run_of, int32, key_text, number, string};
pub use fields::{derive_dims, derive_eval_run};
use json::{Json, Listed, Members, Node};
pub use nested::content_of;
use nested::{markers, messages, steps, tools_used};

/// The conversation labels the reference carries as top-level keys; they feed `dims`.
pub const AXES: [&str; 15] = [
    "tier",
    "ask_family",
    "intent_known",
    "tool_known",
    "stance",
    "tone",
    "length",
    "ask",
    "vagueness",
    "phrasing",
    "pressure",
    "user",
    "texture",
    "history",
    "world_state",
];

/// Why one record could not be read: the field (dotted path) and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The field, e.g. `steps[1].n_tokens`; `None` when the record as a whole is wrong.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    fn at(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    fn whole(message: impl Into<String>) -> Self {
        Self {
            field: None,
            message: message.into(),
        }
    }
}

pub(super) type Res<T> = Result<T, FieldError>;

/// Decodes one JSON row. `rollout_id` stays `None` when the row has none: the reader derives it
/// from the rows seen before.
#[allow(
    clippy::needless_pass_by_value,
    reason = "callers hand their row over, as they did when it was taken apart in place"
)]
pub fn decode(value: Value) -> Res<Record> {
    decode_json(&value)
}

/// [`decode`], of a row the caller keeps.
pub fn decode_value(value: &Value) -> Res<Record> {
    decode_json(value)
}

/// [`decode`], from either parser's value.
fn decode_json<J: Json>(value: &J) -> Res<Record> {
    let Node::Object(obj) = value.node() else {
        return Err(FieldError::whole(format!(
            "expected a JSON object, found {}",
            kind(value)
        )));
    };
    let obj = &Listed::of(obj);
    if obj.count() == 0 {
        return Err(FieldError::whole("empty row"));
    }
    let mut r = Record::default();
    // The fields kept in `extra`, in the row's order.
    let mut extra: Vec<(&str, &J)> = Vec::new();
    let mut scenario_key = None;
    let mut task_key = None;
    let mut given_task_id: Option<&J> = None;
    let mut stamped = false;
    for key in ["dims", "scenario_dimensions"] {
        if let Some(v) = obj.member(key).filter(|v| !v.is_null() && !v.is_object()) {
            return Err(expected(key, "an object of dimension names to values", v));
        }
    }
    let dims = dims_of(obj);
    let eval_run = eval_run_of(obj);

    for (k, v) in obj.members() {
        // Each arm either moves the value into a column (faithfully) or leaves it for `extra`.
        let keep: bool = match k {
            "task_id" => {
                task_key = key_text("task_id", v)?;
                given_task_id = Some(v);
                continue;
            }
            "scenario_id" => {
                scenario_key = key_text("scenario_id", v)?;
                true
            }
            "schema_version" => {
                match v.node() {
                    Node::String(s) if s == SCHEMA_VERSION => stamped = true,
                    Node::String("0") => {}
                    _ => {
                        return Err(FieldError::at(
                            "schema_version",
                            format!("unknown schema version {}; known: \"0\", \"1\"", v.text()),
                        ));
                    }
                }
                true
            }
            "eval_run" => {
                if !v.is_null() {
                    int32("eval_run", v)?;
                }
                true
            }
            _ if v.is_null() => {
                // An explicit null comes back as an explicit null, from `extra`.
                true
            }
            _ => take_column(&mut r, k, v)?,
        };
        if keep {
            extra.push((k, v));
        }
    }

    if stamped {
        check_stamped(&r, &extra)?;
    }
    derive_missing(&mut r);

    r.task_id = match (scenario_key, task_key, r.prompt.as_deref()) {
        (Some(s), _, _) => s,
        (None, Some(t), _) => t,
        (None, None, Some(p)) if !p.is_empty() => prompt_task_id(p),
        _ => {
            return Err(FieldError::at(
                "prompt",
                "missing: a row needs `scenario_id`, `task_id` or `prompt` to be grouped by task",
            ));
        }
    };
    if let Some(given) = given_task_id
        && given.as_str() != Some(r.task_id.as_str())
    {
        extra.push(("task_id", given));
    }

    r.eval_run = Some(eval_run);
    r.dims = dims;
    r.extra = (!extra.is_empty()).then(|| object_text(&extra));
    Ok(r)
}

/// Compact JSON text of an object of these members, as `serde_json` writes one.
fn object_text<J: Json>(members: &[(&str, &J)]) -> String {
    let mut out = Vec::with_capacity(128);
    canonical::write_object(members.iter().copied(), false, &mut out);
    canonical::utf8(out)
}

/// Decodes one row from its JSON text. A number no 64-bit type holds (see [`wide`]) is kept
/// verbatim in `extra` when its field has no column, and refused, naming the field, when it has.
///
/// The text is parsed with `sonic-rs`; what it may not read as `serde_json` does (a key twice,
/// `-0`, literals of hundreds of digits, deep nesting), and any text it refuses, is parsed again
/// by `serde_json`, whose reading and messages are the rule.
pub fn decode_text(text: &[u8]) -> Res<Record> {
    if let Ok(v) = sonic_rs::from_slice::<sonic_rs::Value>(text)
        && json::plain(&v, text)
    {
        return decode_json(&v);
    }
    decode_text_serde(text)
}

/// [`decode_text`] with `serde_json` alone: the reading the fast path is held to (by the tests
/// and the `jsonl_rows` fuzz target).
pub fn decode_text_serde(text: &[u8]) -> Res<Record> {
    let not_json = |e: serde_json::Error| FieldError::whole(format!("not valid JSON: {e}"));
    let parsed = serde_json::from_slice::<Value>(text);
    let found = match &parsed {
        Ok(v) if !wide::suspicious(v) => Vec::new(),
        _ => wide::scan(text),
    };
    if found.is_empty() {
        return decode(parsed.map_err(not_json)?);
    }
    if let Some(w) = found
        .iter()
        .find(|w| w.key.as_deref().is_some_and(has_column))
    {
        return Err(FieldError::at(
            w.path.clone(),
            format!(
                "`{}` is beyond a 64-bit number (an integer past the range of i64 and u64, or a \
                 float that overflows or underflows): wai keeps such a number verbatim only in a \
                 field without a column; here write it as a string",
                String::from_utf8_lossy(&text[w.literal.clone()])
            ),
        ));
    }
    let mut r = decode(serde_json::from_slice(&wide::blanked(text, &found)).map_err(not_json)?)?;
    let verbatim = wide::verbatim_members(text, &found);
    if let Some(extra) = &r.extra
        && let Ok(Value::Object(map)) = serde_json::from_str::<Value>(extra)
    {
        r.extra = Some(wide::object_text(&map, &verbatim));
    }
    Ok(r)
}

/// Whether a top-level key feeds a column (so a wide number in it cannot be kept verbatim).
fn has_column(key: &str) -> bool {
    AXES.contains(&key)
        || matches!(
            key,
            "task_id"
                | "scenario_id"
                | "schema_version"
                | "eval_run"
                | "dims"
                | "scenario_dimensions"
                | "rollout_id"
                | "rollout_index"
                | "prompt"
                | "final_text"
                | "finish_reason"
                | "reason"
                | "judge_name"
                | "judge_status"
                | "gold_kind"
                | "category"
                | "model_version"
                | "policy_version"
                | "writer_model"
                | "user_model"
                | "reward"
                | "gold_reward"
                | "markers"
                | "messages"
                | "steps"
                | "tools_used"
                | "privileged"
                | "judge_meta"
                | "lineage"
                | "sampling"
        )
}

/// Moves field `k` of a row into its column of `r`. Returns whether the value must also be kept
/// in `extra` (a column that cannot give it back exactly, or a field without a column).
fn take_column<J: Json>(r: &mut Record, k: &str, v: &J) -> Res<bool> {
    Ok(match k {
        "rollout_id" => {
            r.rollout_id = key_text("rollout_id", v)?;
            !matches!(v.node(), Node::String(_))
        }
        "rollout_index" => {
            r.rollout_index = int32("rollout_index", v)?;
            false
        }
        "prompt" => {
            r.prompt = string("prompt", v)?;
            false
        }
        "final_text" => {
            r.final_text = string("final_text", v)?;
            false
        }
        "finish_reason" => {
            r.finish_reason = string("finish_reason", v)?;
            false
        }
        "reason" => {
            r.reason = string("reason", v)?;
            false
        }
        "judge_name" => {
            r.judge_name = string("judge_name", v)?;
            false
        }
        "judge_status" => {
            r.judge_status = string("judge_status", v)?;
            false
        }
        "gold_kind" => {
            r.gold_kind = string("gold_kind", v)?;
            false
        }
        "category" => {
            r.category = string("category", v)?;
            false
        }
        "model_version" => {
            r.model_version = string("model_version", v)?;
            false
        }
        "policy_version" => {
            r.policy_version = string("policy_version", v)?;
            false
        }
        "writer_model" => {
            r.writer_model = string("writer_model", v)?;
            false
        }
        "user_model" => {
            r.user_model = string("user_model", v)?;
            false
        }
        "reward" => {
            if v.is_boolean() {
                return Err(FieldError::at(
                    "reward",
                    "expected a number or null, found a boolean (write 1 or 0)",
                ));
            }
            r.reward = number("reward", v)?;
            check_share("reward", r.reward)?;
            false
        }
        "gold_reward" => {
            if v.is_boolean() {
                return Err(FieldError::at(
                    "gold_reward",
                    "expected a number or null, found a boolean (write 1 or 0)",
                ));
            }
            r.gold_reward = number("gold_reward", v)?;
            check_share("gold_reward", r.gold_reward)?;
            false
        }
        "markers" => {
            let (m, faithful) = markers(v)?;
            r.markers = Some(m);
            !faithful
        }
        "messages" => {
            let (m, faithful) = messages(v)?;
            r.messages = Some(m);
            !faithful
        }
        "steps" => {
            let (s, faithful) = steps(v)?;
            r.steps = Some(s);
            !faithful
        }
        "tools_used" => {
            r.tools_used = Some(tools_used(v)?);
            false
        }
        "privileged" => {
            r.privileged = Some(v.text());
            false
        }
        "judge_meta" => {
            r.judge_meta = Some(v.text());
            false
        }
        "lineage" => {
            r.lineage = Some(v.text());
            false
        }
        "sampling" => {
            r.sampling = Some(v.text());
            false
        }
        _ => true,
    })
}

/// A row stamped `schema_version` "1" must have `prompt`, `steps` and `final_text`.
fn check_stamped<J>(r: &Record, extra: &[(&str, &J)]) -> Res<()> {
    let kept = |key: &str| extra.iter().any(|(k, _)| *k == key);
    for (field, present) in [
        ("prompt", r.prompt.is_some() || kept("prompt")),
        ("steps", r.steps.is_some() || kept("steps")),
        ("final_text", r.final_text.is_some() || kept("final_text")),
    ] {
        if !present {
            return Err(FieldError::at(
                field,
                "missing (required on schema_version \"1\" rows)",
            ));
        }
    }
    Ok(())
}

/// Fills `prompt` from the first user message and `tools_used` from the steps, when the row has
/// neither.
fn derive_missing(r: &mut Record) {
    if r.prompt.is_none() {
        r.prompt = r.messages.as_ref().and_then(|ms| {
            ms.iter()
                .find(|m| m.role.as_deref() == Some("user"))
                .and_then(|m| m.content.clone())
        });
    }
    if r.tools_used.is_none() {
        r.tools_used = r
            .steps
            .as_ref()
            .map(|steps| steps.iter().filter_map(|s| s.tool.clone()).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn task_key_follows_scenario_then_task_then_prompt() {
        let r = decode(json!({"scenario_id": "s1", "task_id": "t1", "prompt": "p"})).unwrap();
        assert_eq!(r.task_id, "s1");
        // The differing task_id is kept so it comes back.
        assert_eq!(
            r.extra.as_deref(),
            Some(r#"{"scenario_id":"s1","task_id":"t1"}"#)
        );
        let r = decode(json!({"scenario_id": "", "task_id": "t1", "prompt": "p"})).unwrap();
        assert_eq!(r.task_id, "t1");
        assert_eq!(r.extra.as_deref(), Some(r#"{"scenario_id":""}"#));
        let r = decode(json!({"prompt": "What is 2 + 3?"})).unwrap();
        assert_eq!(r.task_id, "task_1ea26256ebae");
    }

    #[test]
    fn arguments_are_canonical_whatever_their_shape() {
        let as_string = decode(json!({"prompt": "p", "steps": [
            {"tool": "t", "arguments": "{\"b\": 1, \"a\": \"x\"}", "result": "ok"}]}))
        .unwrap();
        let as_object = decode(json!({"prompt": "p", "steps": [
            {"tool": "t", "arguments": {"a": "x", "b": 1}, "result": "ok"}]}))
        .unwrap();
        let flat_call = decode(json!({"prompt": "p", "messages": [{"role": "assistant",
            "tool_calls": [{"function": {"name": "t", "arguments": "{\"a\":\"x\",\"b\":1}"}}]}]}))
        .unwrap();
        let want = r#"{"a":"x","b":1}"#;
        assert_eq!(as_string.steps.unwrap()[0].arguments.as_deref(), Some(want));
        assert_eq!(as_object.steps.unwrap()[0].arguments.as_deref(), Some(want));
        let msgs = flat_call.messages.unwrap();
        let call = &msgs[0].tool_calls.as_ref().unwrap()[0];
        assert_eq!(call.arguments.as_deref(), Some(want));
        assert_eq!(call.name.as_deref(), Some("t"));
        // The string and nested shapes are kept verbatim for the way back.
        assert!(as_string.extra.unwrap().contains("\"steps\""));
        assert!(flat_call.extra.unwrap().contains("\"messages\""));
        assert!(as_object.extra.is_none());
    }

    #[test]
    fn only_the_exact_wire_shape_is_kept_in_columns_alone() {
        let call = |c: Value| {
            decode(json!({"prompt": "p", "messages": [
                {"role": "assistant", "content": null, "tool_calls": [c]}]}))
            .unwrap()
        };
        let wire = call(json!({"id": "c", "type": "function",
            "function": {"name": "t", "arguments": "{\"b\": 1, \"a\": 2}"}}));
        assert!(wire.extra.is_none());
        let c = &wire.messages.unwrap()[0].tool_calls.clone().unwrap()[0];
        assert_eq!(c.arguments.as_deref(), Some(r#"{"a":2,"b":1}"#));
        assert_eq!(c.arguments_text.as_deref(), Some(r#"{"b": 1, "a": 2}"#));
        for odd in [
            json!({"type": "custom", "function": {"name": "t", "arguments": "{}"}}),
            json!({"type": "function", "name": "t", "arguments": {}}),
            json!({"type": "function", "function": {"name": "t", "arguments": {}}}),
            json!({"type": "function", "function": {"name": "t", "arguments": "{}", "x": 1}}),
            json!({"type": "function", "function": {"arguments": "{}"}}),
        ] {
            assert!(
                call(odd.clone()).extra.is_some(),
                "{odd} must stay whole in extra"
            );
        }
        // `content: null` comes back beside tool calls only; missing content beside them would
        // come back as null.
        let missing = decode(json!({"prompt": "p", "messages": [{"role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}]}))
        .unwrap();
        assert!(missing.extra.is_some());
        let null_alone =
            decode(json!({"prompt": "p", "messages": [{"role": "user", "content": null}]}))
                .unwrap();
        assert!(null_alone.extra.is_some());
    }

    #[test]
    fn wrong_types_name_the_field() {
        let e = decode(json!({"prompt": "p", "reward": "1"})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("reward"));
        let e = decode(json!({"prompt": "p", "reward": true})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("reward"));
        let e =
            decode(json!({"prompt": "p", "steps": [{"tool": "t", "n_tokens": "x"}]})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("steps[0].n_tokens"));
        let e = decode(json!({"schema_version": "1", "prompt": "p", "steps": []})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("final_text"));
        let e = decode(json!({"final_text": "x"})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("prompt"));
        let e = decode(json!([1])).unwrap_err();
        assert_eq!(e.field, None);
    }

    #[test]
    fn dims_gather_axes_and_scenario_dimensions() {
        let r = decode(
            json!({"prompt": "p", "tier": "ordinary", "intent_known": true,
            "scenario_dimensions": {"tool": "lookup_order", "tier": "hard"}}),
        )
        .unwrap();
        assert_eq!(
            r.dims.unwrap(),
            vec![
                ("tier".to_owned(), "hard".to_owned()),
                ("intent_known".to_owned(), "true".to_owned()),
                ("tool".to_owned(), "lookup_order".to_owned()),
            ]
        );
    }

    #[test]
    fn explicit_nulls_are_kept() {
        let r = decode(json!({"prompt": "p", "user_model": null, "reward": null})).unwrap();
        assert_eq!(r.user_model, None);
        assert_eq!(
            r.extra.as_deref(),
            Some(r#"{"user_model":null,"reward":null}"#)
        );
    }
}
