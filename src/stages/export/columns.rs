//! OpenAI training rows written straight from a batch's columns, without making each row a JSON
//! object first: the fast path of [`super::training_rows`] for `--format openai` without
//! `--unroll`.
//!
//! A row takes this path when it has messages and its `extra` holds no field that a column read
//! here also holds (`extra` wins over its column); other rows, and other formats, are encoded and
//! converted the general way. A test holds the two paths' bytes, facts and side facts equal on
//! every fixture under several option sets.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::Write;

use datafusion::arrow::array::{Array, Float64Array, ListArray, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use serde_json::Value;

use super::{
    CARRY, Format, Groups, MaskMode, NeedleCache, Options, RowFacts, THINK, column_task_key,
    decode_args,
};
use crate::error::{Error, Result};
use crate::pipeline::row::{Text, Typed, extra_beside, item_field, item_text, json_text, score};
use crate::schema::col;
use crate::stages::conversation::usize_of;

/// What the command's report needs of a row besides its facts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Side {
    /// The first message is a system prompt.
    pub with_system: bool,
    /// The row carries tool schemas.
    pub with_tools: bool,
    /// Its group id, when stamped.
    pub group: Option<String>,
    /// Its reward.
    pub reward: Option<f64>,
    /// `lineage.source == "eval"`.
    pub eval_sourced: bool,
    /// It calls tools.
    pub calls_tools: bool,
    /// `lineage.system_prompt_sha` is set.
    pub has_policy_sha: bool,
}

/// Columns read here for more than carrying, which an `extra` field could override (then the
/// row goes the general way; carried columns are read `extra` first, as the row reads them).
const READ: [&str; 12] = [
    col::MESSAGES,
    col::STEPS,
    col::FINAL_TEXT,
    col::PRIVILEGED,
    col::FINISH_REASON,
    col::ROLLOUT_ID,
    col::ROLLOUT_INDEX,
    col::TOOLS_USED,
    col::TASK_ID,
    col::LINEAGE,
    col::REWARD,
    col::PROMPT,
];

/// Carried keys that are plain text columns.
const TEXT_CARRY: [&str; 7] = [
    col::REASON,
    col::JUDGE_STATUS,
    col::JUDGE_NAME,
    col::POLICY_VERSION,
    col::WRITER_MODEL,
    col::USER_MODEL,
    col::PROMPT,
];

/// What the last rows gave, for a reader that goes through rows in order (rows of a task sit
/// together and share their privileged context, lineage and often their call arguments).
#[derive(Default)]
pub struct WireCache {
    needles: NeedleCache,
    /// The last lineage and sampling texts, parsed and written.
    lineage: LastJson,
    sampling: LastJson,
    /// Call arguments to their wire string and whether they are an object, from
    /// `arguments_text` (0) and from `arguments` (1); cleared when one grows past
    /// [`WireCache::ARGS`].
    args: [foldhash::HashMap<String, (String, bool)>; 2],
}

impl WireCache {
    const ARGS: usize = 4096;

    /// The wire string of a call's arguments and whether they are an object.
    fn args(&mut self, from_text: bool, raw: Option<&str>) -> Result<(String, bool)> {
        let Some(raw) = raw else {
            let v = decode_args(&Value::Null);
            return Ok((v.to_string(), v.is_object()));
        };
        let seen = &mut self.args[usize::from(!from_text)];
        if let Some((wire, object)) = seen.get(raw) {
            return Ok((wire.clone(), *object));
        }
        let v = if from_text {
            decode_args(&Value::String(raw.to_owned()))
        } else {
            decode_args(&json_text(raw, "tool_calls.arguments")?)
        };
        let object = v.is_object();
        let wire = match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        if seen.len() >= Self::ARGS {
            seen.clear();
        }
        seen.insert(raw.to_owned(), (wire.clone(), object));
        Ok((wire, object))
    }
}

/// A JSON text column's value in the last row read, parsed and written once for a run of rows
/// with the same text (rows of a task share their lineage and sampling): parsing and writing
/// them for each row was 2.5% of an export's instructions.
#[derive(Default)]
struct LastJson {
    text: Option<String>,
    value: Value,
    /// `value` as JSON (`serde_json`'s bytes, as the row would write it).
    written: Vec<u8>,
    /// Lineage only: `source` is `"eval"`, `system_prompt_sha` is set.
    eval_sourced: bool,
    policy_sha: bool,
}

impl LastJson {
    /// Row `i` of the JSON text column `what` (`None` when null).
    fn at(&mut self, a: Text<'_>, i: usize, what: &str) -> Result<Option<&Self>> {
        let Some(t) = a.get(i) else {
            return Ok(None);
        };
        if self.text.as_deref() != Some(t) {
            let value = json_text(t, what)?;
            self.written = serde_json::to_vec(&value)
                .map_err(|e| Error::Internal(format!("writing a row: {e}")))?;
            self.eval_sourced = value.get("source").and_then(Value::as_str) == Some("eval");
            self.policy_sha = value.get("system_prompt_sha").is_some();
            self.value = value;
            self.text = Some(t.to_owned());
        }
        Ok(Some(self))
    }

    /// The value, unless it is JSON `null`.
    fn non_null(this: Option<&Self>) -> Option<&Self> {
        this.filter(|j| !j.value.is_null())
    }
}

/// Where a carried key's value comes from when `extra` does not hold it.
enum Carried<'a> {
    Reward,
    Lineage,
    Sampling,
    Text(Text<'a>),
    /// Only from `extra`.
    Extra,
}

/// Typed views of the columns a training row is written from.
pub struct Wire<'a> {
    task_id: Text<'a>,
    prompt: Text<'a>,
    finish_reason: Text<'a>,
    reward: &'a Float64Array,
    privileged: Text<'a>,
    lineage: Text<'a>,
    sampling: Text<'a>,
    extra: Text<'a>,
    carry: Vec<(&'static str, Carried<'a>)>,
    tools_used: &'a ListArray,
    steps: &'a ListArray,
    step_tool: Text<'a>,
    messages: &'a ListArray,
    role: Text<'a>,
    content: Text<'a>,
    tool_call_id: Text<'a>,
    calls: &'a ListArray,
    call_id: Text<'a>,
    call_name: Text<'a>,
    call_arguments: Text<'a>,
    call_arguments_text: Text<'a>,
}

impl<'a> Wire<'a> {
    /// The columns of `batch`.
    pub fn of(batch: &'a RecordBatch) -> Result<Self> {
        let t = Typed::new(batch, "export");
        let s = |name: &str| t.text(name);
        let messages = t.list(col::MESSAGES)?;
        let calls: &ListArray = item_field(messages, "tool_calls")?;
        let field = |list: &'a ListArray, name: &str| item_text(list, name);
        let steps = t.list(col::STEPS)?;
        Ok(Self {
            task_id: s(col::TASK_ID)?,
            prompt: s(col::PROMPT)?,
            finish_reason: s(col::FINISH_REASON)?,
            reward: t.number::<Float64Type>(col::REWARD)?,
            privileged: s(col::PRIVILEGED)?,
            lineage: s(col::LINEAGE)?,
            sampling: s(col::SAMPLING)?,
            extra: s(col::EXTRA)?,
            carry: CARRY
                .iter()
                .map(|&k| {
                    Ok((
                        k,
                        match k {
                            col::REWARD => Carried::Reward,
                            col::LINEAGE => Carried::Lineage,
                            col::SAMPLING => Carried::Sampling,
                            k if TEXT_CARRY.contains(&k) => Carried::Text(s(k)?),
                            _ => Carried::Extra,
                        },
                    ))
                })
                .collect::<Result<_>>()?,
            tools_used: t.list(col::TOOLS_USED)?,
            step_tool: field(steps, "tool")?,
            steps,
            role: field(messages, "role")?,
            content: field(messages, "content")?,
            tool_call_id: field(messages, "tool_call_id")?,
            messages,
            call_id: field(calls, "id")?,
            call_name: field(calls, "name")?,
            call_arguments: field(calls, "arguments")?,
            call_arguments_text: field(calls, "arguments_text")?,
            calls,
        })
    }

    /// This path writes rows under `opts`: OpenAI chat rows, not unrolled.
    pub fn serves(opts: &Options) -> bool {
        opts.format == Format::Openai && !opts.unroll
    }

    /// Writes row `i`'s training row (one JSON line) to `out` and its metadata (one JSON line,
    /// [`super::split_openai`]) to `meta`, or returns `None` (writing nothing) when the row
    /// needs the general path.
    ///
    /// # Errors
    /// A JSON text column that does not parse.
    pub fn write_row(
        &self,
        i: usize,
        opts: &Options,
        groups: &Groups,
        cache: &mut WireCache,
        out: &mut Vec<u8>,
        meta: &mut Vec<u8>,
    ) -> Result<Option<(RowFacts, Side)>> {
        if !Self::serves(opts) || !self.messages.is_valid(i) || self.messages.value_length(i) == 0 {
            return Ok(None);
        }
        let Some(extra) = extra_beside(self.extra, i, &READ)? else {
            return Ok(None);
        };
        let side_field = |k: &str| extra.get(k);
        let mut facts = RowFacts::default();
        let mut side = Side::default();
        // Messages, converted.
        struct Turn<'t> {
            role: &'static str,
            content: Cow<'t, str>,
            tool_call_id: Option<Cow<'t, str>>,
            calls: Vec<(Cow<'t, str>, &'t str, String)>,
        }
        let o = self.messages.value_offsets();
        let source = usize_of(o[i])..usize_of(o[i + 1]);
        let mut turns: Vec<Turn> = Vec::with_capacity(source.len() + 1);
        if let Some(sys) = opts.system_prompt.as_deref().filter(|s| !s.is_empty()) {
            turns.push(Turn {
                role: "system",
                content: Cow::Borrowed(sys),
                tool_call_id: None,
                calls: Vec::new(),
            });
        }
        let mut pending: VecDeque<Cow<'_, str>> = VecDeque::new();
        let mut call_index = 0usize;
        for j in source {
            let content = self.content.value(j);
            match self.role.value(j) {
                "assistant" => {
                    let content = if opts.strip_think {
                        Cow::Owned(THINK.replace_all(content, "").trim().to_owned())
                    } else {
                        Cow::Borrowed(content)
                    };
                    let mut calls = Vec::new();
                    if self.calls.is_valid(j) {
                        let co = self.calls.value_offsets();
                        for c in usize_of(co[j])..usize_of(co[j + 1]) {
                            let id = self.call_id.get(c).filter(|s| !s.is_empty()).map_or_else(
                                || Cow::Owned(format!("call_{call_index:04}")),
                                Cow::Borrowed,
                            );
                            call_index += 1;
                            pending.push_back(id.clone());
                            let (args, object) =
                                match (self.call_arguments_text.get(c), self.call_arguments.get(c))
                                {
                                    (Some(t), _) => cache.args(true, Some(t))?,
                                    (None, a) => cache.args(false, a)?,
                                };
                            facts.calls += 1;
                            if !object {
                                facts.invalid_calls += 1;
                            }
                            let name = self.call_name.value(c);
                            calls.push((id, name, args));
                        }
                    }
                    turns.push(Turn {
                        role: "assistant",
                        content,
                        tool_call_id: None,
                        calls,
                    });
                }
                "tool" => {
                    let mut content = Cow::Borrowed(content);
                    if let Some(cap) = opts.max_tool_output_chars {
                        let n = content.chars().count();
                        if n > cap {
                            let cut = n - cap;
                            content = Cow::Owned(format!(
                                "{}\n[... {cut} chars of tool output truncated]",
                                content.chars().take(cap).collect::<String>()
                            ));
                            facts.outputs_cut += 1;
                            facts.chars_cut += cut as u64;
                        }
                    }
                    let id = self.tool_call_id.get(j).map(Cow::Borrowed);
                    if let Some(id) = &id {
                        pending.retain(|p| p != id);
                    }
                    // OpenAI's tool messages hold `role`, `content` and `tool_call_id` only.
                    turns.push(Turn {
                        role: "tool",
                        content,
                        tool_call_id: id.or_else(|| pending.pop_front()),
                        calls: Vec::new(),
                    });
                }
                role @ ("user" | "system") => turns.push(Turn {
                    role: if role == "user" { "user" } else { "system" },
                    content: Cow::Borrowed(content),
                    tool_call_id: None,
                    calls: Vec::new(),
                }),
                _ => {}
            }
        }
        facts.truncated = self.finish_reason.get(i) == Some("length");
        // A row with nothing to train takes the general path, which counts and drops it; turns
        // after the last assistant turn are cut, as there.
        let Some(last_assistant) = turns.iter().rposition(|t| t.role == "assistant") else {
            return Ok(None);
        };
        facts.trailing_cut = (turns.len() - last_assistant - 1) as u64;
        turns.truncate(last_assistant + 1);
        // The weights.
        let weight = |k: usize| match opts.mask_mode {
            MaskMode::Final => k == last_assistant,
            MaskMode::Assistant => true,
        };
        let assistant_turns = turns.iter().filter(|t| t.role == "assistant").count() as u64;
        facts.trained += match opts.mask_mode {
            MaskMode::Final => 1,
            MaskMode::Assistant => assistant_turns,
        };
        facts.masked += assistant_turns - facts.trained;
        facts.trl_trained += assistant_turns;
        side.with_system = turns.first().is_some_and(|t| t.role == "system");
        // Write.
        let json = |out: &mut Vec<u8>, v: &Value| -> Result<()> {
            serde_json::to_writer(out, v)
                .map_err(|e| Error::Internal(format!("writing a row: {e}")))
        };
        let put = |out: &mut Vec<u8>, b: &[u8]| out.extend_from_slice(b);
        put(out, b"{\"messages\":[");
        for (k, t) in turns.iter().enumerate() {
            if k > 0 {
                put(out, b",");
            }
            put(out, b"{\"role\":");
            push_json_string(out, t.role);
            put(out, b",\"content\":");
            push_json_string(out, &t.content);
            if !t.calls.is_empty() {
                put(out, b",\"tool_calls\":[");
                for (c, (id, name, args)) in t.calls.iter().enumerate() {
                    if c > 0 {
                        put(out, b",");
                    }
                    put(out, b"{\"id\":");
                    push_json_string(out, id);
                    put(out, b",\"type\":\"function\",\"function\":{\"name\":");
                    push_json_string(out, name);
                    put(out, b",\"arguments\":");
                    push_json_string(out, args);
                    put(out, b"}}");
                }
                put(out, b"]");
            }
            if let Some(id) = &t.tool_call_id {
                put(out, b",\"tool_call_id\":");
                push_json_string(out, id);
            }
            if t.role == "assistant" {
                put(
                    out,
                    if weight(k) {
                        b",\"weight\":1"
                    } else {
                        b",\"weight\":0"
                    },
                );
            }
            put(out, b"}");
        }
        put(out, b"]");
        if let Some(t) = opts.tools.as_ref().filter(|t| !t.is_empty()) {
            put(out, b",\"tools\":");
            serde_json::to_writer(&mut *out, t)
                .map_err(|e| Error::Internal(format!("writing a row: {e}")))?;
            side.with_tools = true;
        }
        put(out, b"}\n");
        // The metadata: members written each after a comma, the first comma made the brace.
        let out = meta;
        let opened = out.len();
        if facts.outputs_cut > 0 {
            let _ = write!(
                out,
                ",\"tool_output_truncated\":{},\"tool_output_chars_cut\":{}",
                facts.outputs_cut, facts.chars_cut
            );
        }
        let reward = self.reward.is_valid(i).then(|| self.reward.value(i));
        let lineage = cache.lineage.at(self.lineage, i, col::LINEAGE)?;
        // `,"key":` before a carried value.
        let member = |out: &mut Vec<u8>, k: &str| {
            put(out, b",");
            push_json_string(out, k);
            put(out, b":");
        };
        for (k, source) in &self.carry {
            if let Some(v) = side_field(k) {
                if !v.is_null() {
                    member(out, k);
                    json(out, v)?;
                }
                continue;
            }
            let written = match source {
                // Plain text needs no JSON value.
                Carried::Text(a) => {
                    if let Some(t) = a.get(i) {
                        member(out, k);
                        push_json_string(out, t);
                    }
                    continue;
                }
                Carried::Lineage => LastJson::non_null(lineage),
                Carried::Sampling => {
                    LastJson::non_null(cache.sampling.at(self.sampling, i, col::SAMPLING)?)
                }
                Carried::Reward => {
                    if let Some(v) = reward.map(score).filter(|v| !v.is_null()) {
                        member(out, k);
                        json(out, &v)?;
                    }
                    continue;
                }
                Carried::Extra => None,
            };
            if let Some(j) = written {
                member(out, k);
                put(out, &j.written);
            }
        }
        put(out, b",\"schema_version\":\"1\"");
        // The leak gate reads what is exported, as the general path does
        // ([`super::exported_texts`]): the turns but tool results, the calls' arguments, then
        // the carried fields' strings.
        if let Some(p) = self.privileged.get(i)
            && let Some(n) = cache.needles.needles(p)?
        {
            facts.privileged = true;
            let mut texts: Vec<&str> = Vec::new();
            let mut answer_at = Vec::new();
            for (k, t) in turns.iter().enumerate() {
                if t.role == "tool" || t.role == "system" {
                    continue;
                }
                if k == last_assistant {
                    answer_at.push(texts.len());
                }
                texts.push(&t.content);
                texts.extend(t.calls.iter().map(|(_, _, args)| args.as_str()));
            }
            let lineage_value = lineage.map(|l| &l.value);
            // The carry loop above left this row's sampling in the cache, when it has one.
            let sampling_value = self.sampling.get(i).map(|_| &cache.sampling.value);
            for (k, source) in &self.carry {
                if *k == col::PROMPT {
                    continue;
                }
                if let Some(v) = side_field(k) {
                    strings(v, &mut texts);
                    continue;
                }
                match source {
                    Carried::Text(a) => texts.extend(a.get(i)),
                    Carried::Lineage => strings_of(lineage_value, &mut texts),
                    Carried::Sampling => strings_of(sampling_value, &mut texts),
                    Carried::Reward | Carried::Extra => {}
                }
            }
            let answer = turns[last_assistant].content.as_ref();
            facts.leak = n
                .quoted(self.prompt.get(i).unwrap_or(""), answer, &answer_at, &texts)
                .cloned();
        }
        // Group fields.
        let key = column_task_key(
            side_field("scenario_id"),
            self.task_id.value(i),
            self.prompt.get(i),
        );
        if let Some((id, fields)) = groups.written(&key) {
            side.group = Some(id.to_owned());
            put(out, fields);
        }
        // `schema_version` is always there, so the first member's comma is.
        out[opened] = b'{';
        put(out, b"}\n");
        side.reward = reward.map(score).as_ref().and_then(Value::as_f64);
        side.eval_sourced = lineage.is_some_and(|l| l.eval_sourced);
        side.has_policy_sha = lineage.is_some_and(|l| l.policy_sha);
        side.calls_tools = (self.tools_used.is_valid(i) && self.tools_used.value_length(i) > 0)
            || (self.steps.is_valid(i) && {
                let so = self.steps.value_offsets();
                (usize_of(so[i])..usize_of(so[i + 1])).any(|j| self.step_tool.is_valid(j))
            });
        Ok(Some((facts, side)))
    }
}

/// Appends every string in `v`, in order.
fn strings<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

fn strings_of<'v>(v: Option<&'v Value>, out: &mut Vec<&'v str>) {
    if let Some(v) = v {
        strings(v, out);
    }
}

/// The first of the eight bytes of `w` (little end first) that needs escaping in a JSON
/// string: a control character (below 0x20), `"` or `\`. The bit tricks "has a byte less than
/// n" and "has a zero byte" can mark a byte above the first one wrongly (a borrow runs up), never
/// one below it, so the lowest mark is exact; bytes of 0x80 and over are never marked.
fn first_escape(w: u64) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let marks = control | zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
    (marks != 0).then(|| marks.trailing_zeros() as usize / 8)
}

/// Appends `s` as a JSON string, byte for byte as `serde_json` writes it: `"` and `\`
/// escaped, the control characters below 0x20 as `\b \t \n \f \r` or `\u00xx`
/// (lowercase hex), everything else (DEL and non-ASCII included) as it is. Text is read eight
/// bytes at a time, going straight to the next byte to escape: `serde_json`'s byte-at-a-time
/// loop was about a quarter of an export's instructions.
fn push_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        match b.get(i..i + 8) {
            Some(word) => match first_escape(u64::from_le_bytes(word.try_into().unwrap_or([0; 8])))
            {
                None => {
                    i += 8;
                    continue;
                }
                Some(k) => i += k,
            },
            // The last bytes, one at a time.
            None => {
                if !matches!(b[i], 0..=0x1f | b'"' | b'\\') {
                    i += 1;
                    continue;
                }
            }
        }
        let c = b[i];
        out.extend_from_slice(&b[start..i]);
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(c >> 4)]);
                out.push(HEX[usize::from(c & 0xf)]);
            }
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&b[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{LastJson, push_json_string};
    use crate::pipeline::row::Text;
    use datafusion::arrow::array::{StringArray, StringViewArray};

    #[test]
    fn last_json_follows_the_text_row_by_row() {
        let texts = vec![
            Some(r#"{"source":"eval","system_prompt_sha":"ab"}"#),
            Some(r#"{"source":"eval","system_prompt_sha":"ab"}"#),
            Some(r#"{ "source" : "sim" }"#),
            None,
            Some("null"),
            Some(r#"{"source":"eval","system_prompt_sha":"ab"}"#),
        ];
        let eval = Some((
            r#"{"source":"eval","system_prompt_sha":"ab"}"#.to_owned(),
            true,
            true,
            true,
        ));
        let want = vec![
            eval.clone(),
            eval.clone(),
            // Written as serde_json writes the value, not as the text was.
            Some((r#"{"source":"sim"}"#.to_owned(), false, false, true)),
            None,
            Some(("null".to_owned(), false, false, false)),
            eval,
        ];
        let plain = StringArray::from(texts.clone());
        let views = StringViewArray::from(texts.clone());
        for column in [Text::Plain(&plain), Text::View(&views)] {
            let mut last = LastJson::default();
            let mut seen = Vec::new();
            for i in 0..texts.len() {
                let j = last.at(column, i, "lineage").expect("JSON");
                seen.push(j.map(|j| {
                    (
                        String::from_utf8(j.written.clone()).expect("UTF-8"),
                        j.eval_sourced,
                        j.policy_sha,
                        LastJson::non_null(Some(j)).is_some(),
                    )
                }));
            }
            assert_eq!(seen, want);
            let bad = StringArray::from(vec!["{"]);
            assert!(last.at(Text::Plain(&bad), 0, "lineage").is_err());
        }
    }

    fn ours(s: &str) -> String {
        let mut out = Vec::new();
        push_json_string(&mut out, s);
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let mut every_byte = String::new();
        for c in 0u8..=0x7f {
            every_byte.push(char::from(c));
        }
        for s in [
            String::new(),
            every_byte.clone(),
            format!("{every_byte}{every_byte}"),
            "plain text that runs past eight bytes".into(),
            "é\"ü\\\u{1f}\u{7f}\u{2028}日本".into(),
            "1234567\"".into(),
            "12345678\n".into(),
            "\u{0}".repeat(17),
        ] {
            assert_eq!(ours(&s), serde_json::to_string(&s).expect("JSON"), "{s:?}");
        }
    }

    proptest! {
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(s in "(\\PC|[\\x00-\\x1f\"\\\\\\x7f])*") {
            prop_assert_eq!(ours(&s), serde_json::to_string(&s).expect("JSON"));
        }
    }
}
