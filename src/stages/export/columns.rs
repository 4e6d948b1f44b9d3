//! OpenAI training rows written straight from a batch's columns, without making each row a JSON
//! object first: the fast path of [`super::training_rows`] for `--format openai` without
//! `--unroll`.
//!
//! A row takes this path when its `extra` holds no field that a column read here also holds
//! (`extra` wins over its column) and, without messages, no `tool_trace` stands in for its steps
//! and no `opener` comes before its prompt; a row without
//! messages has its conversation rebuilt from its columns ([`super::rebuilt`]). Other rows, and
//! other formats, are encoded and converted the general way. A test holds the two paths' bytes, facts and side facts equal on
//! every fixture under several option sets.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::Write;

use datafusion::arrow::array::{Array, Float64Array, ListArray, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use serde_json::Value;

use super::rows::THINK;
use super::wire_cache::LastJson;
pub use super::wire_cache::WireCache;
use super::wire_line::{Turn, cut, json, member, put, write_messages};
use super::{CARRY, Format, Groups, MaskMode, Options, RowFacts};
use crate::error::Result;
use crate::pipeline::row::{Text, Typed, extra_beside, item_field, item_text, score};
use crate::schema::col;
use crate::stages::conversation::{StepColumns, usize_of};
use crate::stages::json_string::push_json_string;
use crate::stages::task_key::column_task_key;

/// What the report needs of a row besides its facts.
#[derive(Debug, Clone, Default, PartialEq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts of a row, each summed on its own"
)]
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
    pub(super) prompt: Text<'a>,
    pub(super) final_text: Text<'a>,
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
    /// The steps a conversation without messages is rebuilt from, their arguments and results.
    pub(super) step: StepColumns<'a>,
    pub(super) step_arguments: Text<'a>,
    pub(super) step_result: Text<'a>,
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
            final_text: s(col::FINAL_TEXT)?,
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
            step: StepColumns {
                steps,
                user: field(steps, "user")?,
                tool: field(steps, "tool")?,
                text: field(steps, "text")?,
            },
            step_arguments: field(steps, "arguments")?,
            step_result: field(steps, "result")?,
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
        if !Self::serves(opts) {
            return Ok(None);
        }
        let Some(extra) = extra_beside(self.extra, i, &READ)? else {
            return Ok(None);
        };
        let has_messages = self.messages.is_valid(i) && self.messages.value_length(i) > 0;
        // A row without steps whose calls are a `tool_trace` (in `extra`) is rebuilt from it,
        // the general way.
        // So is a row with an opener (a turn before the prompt, in `extra`).
        if !has_messages
            && ((!self.step.has(i) && extra.contains_key("tool_trace"))
                || extra.contains_key("opener"))
        {
            return Ok(None);
        }
        let mut facts = RowFacts::default();
        let mut side = Side::default();
        let mut turns = if has_messages {
            self.turns(i, opts, cache, &mut facts)?
        } else {
            super::rebuilt::turns(self, i, opts, cache, &mut facts)?
        };
        facts.truncated = self.finish_reason.get(i) == Some("length");
        // A row with nothing to train takes the general path, which counts and drops it; turns
        // after the last assistant turn are cut, as there.
        let Some(last_assistant) = turns.iter().rposition(|t| t.role == "assistant") else {
            return Ok(None);
        };
        facts.trailing_cut = (turns.len() - last_assistant - 1) as u64;
        turns.truncate(last_assistant + 1);
        let assistant_turns = turns.iter().filter(|t| t.role == "assistant").count() as u64;
        facts.trained += match opts.mask_mode {
            MaskMode::Final => 1,
            MaskMode::Assistant => assistant_turns,
        };
        facts.masked += assistant_turns - facts.trained;
        facts.trl_trained += assistant_turns;
        side.with_system = turns.first().is_some_and(|t| t.role == "system");
        side.with_tools = write_messages(out, &turns, last_assistant, opts)?;
        // The metadata: members written each after a comma, the first comma made the brace.
        let opened = meta.len();
        if facts.outputs_cut > 0 {
            let _ = write!(
                meta,
                ",\"tool_output_truncated\":{},\"tool_output_chars_cut\":{}",
                facts.outputs_cut, facts.chars_cut
            );
        }
        let reward = self.reward.is_valid(i).then(|| self.reward.value(i));
        self.write_carried(i, &extra, reward, cache, meta)?;
        put(meta, b",\"schema_version\":\"1\"");
        facts.leak = self.leak(i, &extra, &turns, last_assistant, cache, &mut facts)?;
        // Group fields.
        let key = column_task_key(
            extra.get("scenario_id"),
            self.task_id.value(i),
            self.prompt.get(i),
        );
        if let Some((id, fields)) = groups.written(&key) {
            side.group = Some(id.to_owned());
            put(meta, fields);
        }
        // `schema_version` is always there, so the first member's comma is.
        meta[opened] = b'{';
        put(meta, b"}\n");
        let lineage = self.lineage.get(i).map(|_| &cache.lineage);
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

    /// Row `i`'s messages, converted (the system prompt first, calls with ids and arguments,
    /// tool outputs cut, tool turns matched to their calls).
    fn turns(
        &self,
        i: usize,
        opts: &'a Options,
        cache: &mut WireCache,
        facts: &mut RowFacts,
    ) -> Result<Vec<Turn<'a>>> {
        let o = self.messages.value_offsets();
        let source = usize_of(o[i])..usize_of(o[i + 1]);
        let mut turns: Vec<Turn> = Vec::with_capacity(source.len() + 1);
        if let Some(sys) = opts.system_prompt.as_deref().filter(|s| !s.is_empty()) {
            turns.push(Turn::new("system", Cow::Borrowed(sys)));
        }
        let mut pending: VecDeque<Cow<'a, str>> = VecDeque::new();
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
                    let mut turn = Turn::new("assistant", content);
                    if self.calls.is_valid(j) {
                        let co = self.calls.value_offsets();
                        for c in usize_of(co[j])..usize_of(co[j + 1]) {
                            let id = self.call_id.get(c).filter(|s| !s.is_empty()).map_or_else(
                                || Cow::Owned(format!("call_{call_index:04}")),
                                Cow::Borrowed,
                            );
                            call_index += 1;
                            pending.push_back(id.clone());
                            turn.calls.push(self.call(c, id, cache, facts)?);
                        }
                    }
                    turns.push(turn);
                }
                "tool" => {
                    let mut turn = Turn::new("tool", cut(content, opts, facts));
                    let id = self.tool_call_id.get(j).map(Cow::Borrowed);
                    if let Some(id) = &id {
                        pending.retain(|p| p != id);
                    }
                    // OpenAI's tool messages hold `role`, `content` and `tool_call_id` only.
                    turn.tool_call_id = id.or_else(|| pending.pop_front());
                    turns.push(turn);
                }
                role @ ("user" | "system") => turns.push(Turn::new(
                    if role == "user" { "user" } else { "system" },
                    Cow::Borrowed(content),
                )),
                _ => {}
            }
        }
        Ok(turns)
    }

    /// Call `c`: its id, name and arguments as JSON text (counted by the round-trip gate).
    fn call(
        &self,
        c: usize,
        id: Cow<'a, str>,
        cache: &mut WireCache,
        facts: &mut RowFacts,
    ) -> Result<(Cow<'a, str>, &'a str, String)> {
        let (args, object) = match (self.call_arguments_text.get(c), self.call_arguments.get(c)) {
            (Some(t), _) => cache.args(true, Some(t))?,
            (None, a) => cache.args(false, a)?,
        };
        facts.calls += 1;
        if !object {
            facts.invalid_calls += 1;
        }
        Ok((id, self.call_name.value(c), args))
    }

    /// Writes row `i`'s carried fields, each `,"key":value` (`extra` first, as the row reads
    /// them); the row's lineage and sampling stay in `cache` for the leak gate.
    fn write_carried(
        &self,
        i: usize,
        extra: &serde_json::Map<String, Value>,
        reward: Option<f64>,
        cache: &mut WireCache,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let lineage = cache.lineage.at(self.lineage, i, col::LINEAGE)?.is_some();
        for (k, source) in &self.carry {
            if let Some(v) = extra.get(*k) {
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
                Carried::Lineage => LastJson::non_null(lineage.then_some(&cache.lineage)),
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
        Ok(())
    }

    /// The leak gate over what is exported, as the general path reads it
    /// ([`super::exported::exported_texts`]): the turns but tool results, the calls' arguments, then
    /// the carried fields' strings.
    fn leak(
        &self,
        i: usize,
        extra: &serde_json::Map<String, Value>,
        turns: &[Turn<'_>],
        last_assistant: usize,
        cache: &mut WireCache,
        facts: &mut RowFacts,
    ) -> Result<Option<String>> {
        let Some(p) = self.privileged.get(i) else {
            return Ok(None);
        };
        let WireCache {
            needles,
            lineage,
            sampling,
            ..
        } = cache;
        let Some(n) = needles.needles(p)? else {
            return Ok(None);
        };
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
        // The carry loop left this row's lineage and sampling in the cache, when it has them.
        let lineage_value = self.lineage.get(i).map(|_| &lineage.value);
        let sampling_value = self.sampling.get(i).map(|_| &sampling.value);
        for (k, source) in &self.carry {
            if *k == col::PROMPT {
                continue;
            }
            if let Some(v) = extra.get(*k) {
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
        Ok(
            n.quoted(self.prompt.get(i).unwrap_or(""), answer, &answer_at, &texts)
                .cloned(),
        )
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
