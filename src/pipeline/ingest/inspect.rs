//! `inspect_ai` evaluation logs → rows: one row per sample (a task's epoch).
//!
//! Input: a `.eval` log (a zip archive whose members are JSON, compressed with zstd or deflate:
//! `header.json` holds the eval, `samples/<id>_epoch_<n>.json` one sample each), read member by
//! member from the file (its central directory, then the samples in order, a batch at a time:
//! never the whole archive in memory); a `.json` log (one object with `eval` and
//! `samples`), read whole; or samples one per line.
//!
//! Mapping: `id` → `task_id`, `epoch` → `rollout_index` (inspect counts epochs from 1, rows
//! count repeats from 0: epoch 1 is index 0), `uuid` → `rollout_id`, `input` → `prompt` (a
//! message list gives its first user turn), `messages` → `messages` and `steps` (each tool call
//! with its name and object arguments, paired by `tool_call_id` with its result; a result with an
//! `error` becomes `{status: "error", error, output}`), `output.completion` → `final_text`,
//! `output.stop_reason` → `finish_reason`, `scores[NAME].value` → `reward` (the scorer named by
//! `--score`, else the first the eval lists); `target` → `privileged.reference`, `metadata`,
//! every score and the usage ride in `extra`; the eval's model → `model_version`, its task →
//! `category`. `events` are not read: their long texts are attachments, and `messages` already
//! holds the conversation.
//!
//! Score values read as inspect's `value_to_float` reads them: numbers as they are, booleans
//! 1/0, `C`/`I`/`P`/`N` as 1/0/0.5/0, `yes`/`true` 1 and `no`/`false` 0, numeric strings as
//! numbers; any other string is an error naming the scorer.

use std::io::{Read, Seek};

use serde_json::{Map, Value, json};

use super::chat;
use crate::pipeline::row::{self, FieldError, Record, content_of};

/// What the inspect reader takes from the eval as a whole.
#[derive(Debug, Clone, Default)]
pub struct EvalInfo {
    /// `eval.model`.
    pub model: Option<String>,
    /// `eval.task`.
    pub task: Option<String>,
    /// The scorers `eval.scorers` lists, in order.
    pub scorers: Vec<String>,
}

impl EvalInfo {
    /// Reads the eval object of a log or of its `header.json`.
    pub fn of(eval: &Value) -> Self {
        let text = |k: &str| eval.get(k).and_then(Value::as_str).map(str::to_owned);
        Self {
            model: text("model"),
            task: text("task"),
            scorers: eval
                .get("scorers")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(|s| s.get("name").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// Whether `head` starts a zip archive (a `.eval` log).
pub fn is_zip(head: &[u8]) -> bool {
    head.starts_with(b"PK\x03\x04")
}

/// Whether `head` looks like the start of an inspect `.json` log: an object whose first keys
/// include `eval` (inspect writes `version`, `status`, `eval`, ... , `samples`).
pub fn is_json_log(head: &[u8]) -> bool {
    let start = head.iter().position(|b| !b.is_ascii_whitespace());
    start.is_some_and(|i| head[i] == b'{')
        && memchr::memmem::find(head, b"\"eval\":").is_some()
        && memchr::memmem::find(head, b"\"version\":").is_some()
        && (memchr::memmem::find(head, b"\"task\":").is_some()
            || memchr::memmem::find(head, b"\"samples\":").is_some())
}

/// Whether one record is an inspect sample (`epoch`, `input` and `messages`).
pub fn is_sample(obj: &Map<String, Value>) -> bool {
    obj.contains_key("epoch")
        && obj.contains_key("input")
        && obj.get("messages").is_some_and(Value::is_array)
}

/// A score value as inspect's `value_to_float` reads it, or why not.
pub fn score_to_float(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| format!("{n} is not a number")),
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        Value::String(s) => match s.as_str() {
            "C" => Ok(1.0),
            "I" | "N" => Ok(0.0),
            "P" => Ok(0.5),
            other => match other.to_lowercase().as_str() {
                "yes" | "true" => Ok(1.0),
                "no" | "false" => Ok(0.0),
                t => t.trim().parse::<f64>().ok().filter(|x| x.is_finite()).ok_or_else(|| {
                    format!(
                        "`{other}` is neither a number nor a letter inspect scores with (C, I, P, N)"
                    )
                }),
            },
        },
        other => Err(format!(
            "expected a number or a letter (C, I, P, N), found {}",
            match other {
                Value::Null => "null",
                Value::Array(_) => "a list",
                _ => "an object",
            }
        )),
    }
}

/// One inspect message in the OpenAI wire shape (text content; calls with JSON-string arguments).
fn openai_message(m: &Value) -> Value {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
    let text = m.get("content").and_then(content_of).unwrap_or_default();
    let mut out = Map::new();
    out.insert("role".into(), Value::from(role));
    let calls: Vec<Value> = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let arguments = c.get("arguments").cloned().unwrap_or_else(|| json!({}));
                    json!({
                        "id": c.get("id").cloned().unwrap_or(Value::Null),
                        "type": "function",
                        "function": {
                            "name": c.get("function").cloned().unwrap_or_else(|| Value::from("tool")),
                            "arguments": serde_json::to_string(&arguments).unwrap_or_default(),
                        },
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if calls.is_empty() {
        out.insert("content".into(), Value::from(text));
    } else {
        out.insert(
            "content".into(),
            if text.is_empty() {
                Value::Null
            } else {
                Value::from(text)
            },
        );
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if role == "tool" {
        if let Some(id) = m.get("tool_call_id") {
            out.insert("tool_call_id".into(), id.clone());
        }
        if let Some(f) = m.get("function") {
            out.insert("name".into(), f.clone());
        }
    }
    Value::Object(out)
}

/// The message list the steps are made from: as [`openai_message`], but a failed tool's result
/// is `{status: "error", error, output}`.
fn step_message(m: &Value, plain: &Value) -> Value {
    let Some(error) = m.get("error").filter(|e| !e.is_null()) else {
        return plain.clone();
    };
    let message = error
        .get("message")
        .cloned()
        .unwrap_or_else(|| error.clone());
    let mut out = plain.clone();
    let output = plain.get("content").cloned().unwrap_or(Value::Null);
    out["content"] = json!({"status": "error", "error": message, "output": output});
    out
}

/// Which score is the reward: `--score NAME`, else the eval's first scorer, else the first key.
fn pick_score<'a>(
    scores: &'a Map<String, Value>,
    wanted: Option<&str>,
    info: &EvalInfo,
) -> Result<Option<(&'a String, &'a Value)>, FieldError> {
    if let Some(name) = wanted {
        return match scores.get_key_value(name) {
            Some(kv) => Ok(Some(kv)),
            None => Err(FieldError {
                field: Some(format!("scores.{name}")),
                message: format!(
                    "no scorer `{name}` here; this sample has {}",
                    if scores.is_empty() {
                        "none".to_owned()
                    } else {
                        scores
                            .keys()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            }),
        };
    }
    Ok(info
        .scorers
        .iter()
        .find_map(|n| scores.get_key_value(n.as_str()))
        .or_else(|| scores.iter().next()))
}

/// Turns one inspect sample into a row in the reference's format.
pub fn to_row(sample: Value, info: &EvalInfo, score: Option<&str>) -> Result<Value, FieldError> {
    let Value::Object(mut s) = sample else {
        return Err(FieldError {
            field: None,
            message: "expected an inspect sample (a JSON object)".into(),
        });
    };
    let Some(Value::Array(messages)) = s.shift_remove("messages") else {
        return Err(FieldError {
            field: Some("messages".into()),
            message: "missing: an inspect sample holds its conversation in `messages`".into(),
        });
    };
    let plain: Vec<Value> = messages.iter().map(openai_message).collect();
    let rich: Vec<Value> = messages
        .iter()
        .zip(&plain)
        .map(|(m, p)| step_message(m, p))
        .collect();
    let mut row = chat::conversation(&rich)?;
    row.insert("messages".into(), Value::Array(plain));
    // The prompt is the sample's input (its first user turn when it is a message list).
    match s.shift_remove("input") {
        Some(Value::String(t)) => {
            row.insert("prompt".into(), Value::from(t));
        }
        Some(Value::Array(list)) => {
            if let Some(t) = list
                .iter()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .find_map(|m| m.get("content").and_then(content_of))
            {
                row.insert("prompt".into(), Value::from(t));
            }
        }
        _ => {}
    }
    if let Some(id) = s.shift_remove("id") {
        row.insert("task_id".into(), id);
    }
    if let Some(epoch) = s.shift_remove("epoch") {
        let index = epoch.as_i64().map_or(epoch, |e| Value::from(e - 1));
        row.insert("rollout_index".into(), index);
    }
    if let Some(uuid) = s.shift_remove("uuid") {
        row.insert("rollout_id".into(), uuid);
    }
    if let Some(Value::Object(output)) = s.shift_remove("output") {
        if let Some(t) = output
            .get("completion")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            row.insert("final_text".into(), Value::from(t));
        }
        let stop = output.get("stop_reason").cloned().or_else(|| {
            output
                .get("choices")
                .and_then(|c| c.get(0))
                .and_then(|c| c.get("stop_reason"))
                .cloned()
        });
        if let Some(stop) = stop.filter(Value::is_string) {
            row.insert("finish_reason".into(), stop);
        }
        if let Some(usage) = output.get("usage") {
            row.insert("usage".into(), usage.clone());
        }
        if info.model.is_none()
            && let Some(m) = output.get("model").filter(|m| m.is_string())
        {
            row.insert("model_version".into(), m.clone());
        }
    }
    if let Some(Value::Object(scores)) = s.get("scores")
        && let Some((name, sc)) = pick_score(scores, score, info)?
    {
        let value = sc.get("value").unwrap_or(&Value::Null);
        let x = score_to_float(value).map_err(|message| FieldError {
            field: Some(format!("scores.{name}.value")),
            message,
        })?;
        row.insert("reward".into(), Value::from(x));
        if let Some(why) = sc.get("explanation").and_then(Value::as_str) {
            row.insert("reason".into(), Value::from(why));
        }
        row.insert("judge_name".into(), Value::from(name.clone()));
    } else if let Some(name) = score {
        return Err(FieldError {
            field: Some(format!("scores.{name}")),
            message: format!("no scorer `{name}` here: this sample has no scores"),
        });
    }
    if let Some(m) = &info.model {
        row.insert("model_version".into(), Value::from(m.clone()));
    }
    if let Some(t) = &info.task {
        row.insert("category".into(), Value::from(t.clone()));
    }
    let mut privileged = Map::new();
    if let Some(target) = s.shift_remove("target") {
        privileged.insert("reference".into(), target);
    }
    // Inspect's long texts live in `events` and `attachments`; the conversation is in
    // `messages`, so they are left out rather than carried in `extra`.
    s.shift_remove("events");
    s.shift_remove("attachments");
    s.shift_remove("events_data");
    for (k, v) in s {
        row.entry(k).or_insert(v);
    }
    if !privileged.is_empty() {
        row.insert("privileged".into(), Value::Object(privileged));
    }
    row.insert("schema_version".into(), Value::from("1"));
    Ok(Value::Object(row))
}

/// Decodes one sample's JSON text into a record.
pub fn decode(bytes: &[u8], info: &EvalInfo, score: Option<&str>) -> Result<Record, FieldError> {
    let value = crate::pipeline::io::parse_json(bytes)?;
    row::decode(to_row(value, info, score)?)
}

/// A `.eval` archive's members: the eval's info and, one by one, each sample's name and text,
/// read from `R` (a file) as they are asked for.
pub struct Archive<R> {
    zip: zip::ZipArchive<R>,
    /// The samples' member indices, in archive order.
    samples: Vec<usize>,
    /// The eval (from `header.json`, else `_journal/start.json`).
    pub info: EvalInfo,
}

impl<R: Read + Seek> Archive<R> {
    /// Opens an archive: reads its central directory and its header, nothing else.
    pub fn open(reader: R) -> Result<Self, String> {
        let mut zip = zip::ZipArchive::new(reader).map_err(|e| e.to_string())?;
        let mut samples = Vec::new();
        for i in 0..zip.len() {
            let name = zip.name_for_index(i).unwrap_or_default();
            #[allow(
                clippy::case_sensitive_file_extension_comparisons,
                reason = "inspect names its sample members in lower case"
            )]
            let sample = name.starts_with("samples/") && name.ends_with(".json");
            if sample {
                samples.push(i);
            }
        }
        let mut info = EvalInfo::default();
        for head in ["header.json", "_journal/start.json"] {
            if let Ok(text) = read_member(&mut zip, head)
                && let Ok(v) = serde_json::from_slice::<Value>(&text)
                && let Some(eval) = v.get("eval")
            {
                info = EvalInfo::of(eval);
                break;
            }
        }
        Ok(Self { zip, samples, info })
    }

    /// How many samples it holds.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether it holds no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The `n`th sample's member name and decompressed text.
    pub fn sample(&mut self, n: usize) -> Result<(String, Vec<u8>), String> {
        let mut file = self
            .zip
            .by_index(self.samples[n])
            .map_err(|e| e.to_string())?;
        let name = file.name().to_owned();
        let mut text = Vec::with_capacity(usize::try_from(file.size()).unwrap_or(0));
        file.read_to_end(&mut text)
            .map_err(|e| format!("`{name}`: {e}"))?;
        Ok((name, text))
    }
}

fn read_member<R: Read + Seek>(
    zip: &mut zip::ZipArchive<R>,
    name: &str,
) -> Result<Vec<u8>, String> {
    let mut file = zip.by_name(name).map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    file.read_to_end(&mut text).map_err(|e| e.to_string())?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_letters_read_as_inspect_reads_them() {
        for (v, x) in [
            (json!("C"), 1.0),
            (json!("I"), 0.0),
            (json!("P"), 0.5),
            (json!("N"), 0.0),
            (json!("yes"), 1.0),
            (json!("False"), 0.0),
            (json!("0.25"), 0.25),
            (json!(true), 1.0),
            (json!(3), 3.0),
        ] {
            assert_eq!(score_to_float(&v), Ok(x), "{v}");
        }
        let err = score_to_float(&json!("maybe")).unwrap_err();
        assert!(
            err.contains("`maybe`") && err.contains("C, I, P, N"),
            "{err}"
        );
        assert!(score_to_float(&Value::Null).is_err());
    }

    #[test]
    fn a_sample_with_a_failed_tool() {
        let sample = json!({
            "id": "A1", "epoch": 2, "uuid": "u-1", "input": "Where is A1?", "target": "shipped",
            "messages": [
                {"role": "user", "content": "Where is A1?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": "lookup_order", "arguments": {"order_id": "A1"}, "type": "function"}]},
                {"role": "tool", "content": "", "tool_call_id": "c1", "function": "lookup_order", "error": {"type": "unknown", "message": "database timeout"}},
                {"role": "assistant", "content": "Sorry, the lookup failed."}
            ],
            "output": {"completion": "Sorry, the lookup failed.", "stop_reason": "stop"},
            "scores": {"includes": {"value": "I"}, "graded": {"value": "P", "explanation": "apologised"}},
            "metadata": {"tier": "easy"},
            "events": [{"event": "model"}]
        });
        let info = EvalInfo {
            model: Some("openai/fake".into()),
            task: Some("orders".into()),
            scorers: vec!["includes".into(), "graded".into()],
        };
        let row = to_row(sample.clone(), &info, None).unwrap();
        assert_eq!(
            row["steps"],
            json!([{"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"status": "error", "error": "database timeout", "output": ""}}])
        );
        assert_eq!(
            (
                &row["task_id"],
                &row["rollout_index"],
                &row["rollout_id"],
                &row["reward"]
            ),
            (&json!("A1"), &json!(1), &json!("u-1"), &json!(0.0))
        );
        assert_eq!(row["privileged"], json!({"reference": "shipped"}));
        assert_eq!(row["final_text"], "Sorry, the lookup failed.");
        assert!(row.get("events").is_none());
        let graded = to_row(sample.clone(), &info, Some("graded")).unwrap();
        assert_eq!(
            (&graded["reward"], &graded["reason"]),
            (&json!(0.5), &json!("apologised"))
        );
        let missing = to_row(sample, &info, Some("nope")).unwrap_err();
        assert!(
            missing.message.contains("`includes`, `graded`"),
            "{}",
            missing.message
        );
    }
}
