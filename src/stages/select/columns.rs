//! Row summaries read straight from a batch's columns, without making each row a JSON object.
//!
//! A row takes this path unless it needs the general one: a `tool_trace` in place of its steps
//! (the calls are in `extra`), or an `extra` that holds a field this path reads from a column
//! (`extra` wins, so the column would not say what the row says). A row without messages has its
//! conversation rebuilt from its prompt and steps' columns ([`rebuild`]). Those rows are encoded and summarized by
//! [`super::row_info`]. Both paths fill the same [`super::Parts`], and a test holds their
//! summaries equal on every fixture.

use datafusion::arrow::array::{
    Array, BooleanArray, Float64Array, Int32Array, ListArray, RecordBatch,
};
use datafusion::arrow::datatypes::{Float64Type, Int32Type};
use rayon::prelude::*;
use serde_json::Value;

use std::sync::Arc;

use super::summary::{
    NO_FAULT, Parts, RowInfo, planned_fault, prompt_wants_tool, result_fault, row_info,
    side_wants_tool,
};
use crate::error::Result;
use crate::pipeline::row::{
    BatchView, Text, Typed, encode, extra_beside, item_field, item_text, json_at, json_text,
};
use crate::schema::col;
use crate::stages::conversation::{Rebuilt, Role, StepColumns, rebuild, usize_of};
use crate::stages::leak::NeedleCache;
use crate::stages::task_key::column_task_key;

/// The columns this path reads that an `extra` field could override (then the row takes the
/// general path).
const READ: [&str; 11] = [
    col::TASK_ID,
    col::ROLLOUT_INDEX,
    col::PROMPT,
    col::MESSAGES,
    col::STEPS,
    col::FINAL_TEXT,
    col::FINISH_REASON,
    col::REASON,
    col::REWARD,
    col::PRIVILEGED,
    col::LINEAGE,
];

/// A result that is an object with a success `status` and no `data` or `stale` field anywhere,
/// told from its text without parsing it (the usual result; [`result_fault`] reads the rest).
fn plainly_ok(result: &str) -> bool {
    use memchr::memmem::find;
    let b = result.as_bytes();
    if b.first() != Some(&b'{') || find(b, b"\"data\"").is_some() || find(b, b"\"stale\"").is_some()
    {
        return false;
    }
    let Some(at) = find(b, b"\"status\":\"") else {
        return false;
    };
    let rest = &result[at + 10..];
    let Some(end) = rest.find('"') else {
        return false;
    };
    let status = &rest[..end];
    !status.contains('\\')
        && find(&b[at + 10 + end..], b"\"status\"").is_none()
        && crate::stages::simulate::world::SUCCESS.contains(&status.to_lowercase().as_str())
}

/// Typed views of the columns a summary reads (text of either layout: the first reading gives
/// views).
struct Columns<'a> {
    task_id: Text<'a>,
    rollout_index: &'a Int32Array,
    prompt: Text<'a>,
    final_text: Text<'a>,
    finish_reason: Text<'a>,
    reason: Text<'a>,
    reward: &'a Float64Array,
    privileged: Text<'a>,
    lineage: Text<'a>,
    extra: Text<'a>,
    messages: &'a ListArray,
    role: Text<'a>,
    content: Text<'a>,
    calls: &'a ListArray,
    steps: &'a ListArray,
    tool: Text<'a>,
    result: Text<'a>,
    truncated: &'a BooleanArray,
    /// The steps a conversation without messages is rebuilt from.
    step: StepColumns<'a>,
}

impl<'a> Columns<'a> {
    fn of(batch: &'a RecordBatch) -> Result<Self> {
        let t = Typed::new(batch, "select");
        let s = |name: &str| t.text(name);
        let messages = t.list(col::MESSAGES)?;
        let steps = t.list(col::STEPS)?;
        Ok(Self {
            task_id: s(col::TASK_ID)?,
            rollout_index: t.number::<Int32Type>(col::ROLLOUT_INDEX)?,
            prompt: s(col::PROMPT)?,
            final_text: s(col::FINAL_TEXT)?,
            finish_reason: s(col::FINISH_REASON)?,
            reason: s(col::REASON)?,
            reward: t.number::<Float64Type>(col::REWARD)?,
            privileged: s(col::PRIVILEGED)?,
            lineage: s(col::LINEAGE)?,
            extra: s(col::EXTRA)?,
            role: item_text(messages, "role")?,
            content: item_text(messages, "content")?,
            calls: item_field(messages, "tool_calls")?,
            messages,
            tool: item_text(steps, "tool")?,
            result: item_text(steps, "result")?,
            truncated: item_field(steps, "truncated")?,
            step: StepColumns {
                steps,
                user: item_text(steps, "user")?,
                tool: item_text(steps, "tool")?,
                text: item_text(steps, "text")?,
            },
            steps,
        })
    }

    /// Row `i`'s assistant turns, whether a turn calls a tool, and the last turn's role: from
    /// `messages`, or from the conversation rebuilt from the prompt and steps.
    fn turns(
        &self,
        i: usize,
        has_messages: bool,
        opener: Option<&'a str>,
        prompt: Option<&'a str>,
        final_text: &'a str,
    ) -> (Vec<&'a str>, bool, &'a str) {
        if has_messages {
            let o = self.messages.value_offsets();
            let turns = usize_of(o[i])..usize_of(o[i + 1]);
            let role = |j: usize| self.role.get(j);
            let assistant: Vec<&str> = turns
                .clone()
                .filter(|&j| role(j) == Some("assistant"))
                .map(|j| self.content.value(j))
                .collect();
            let message_calls = turns
                .clone()
                .any(|j| self.calls.is_valid(j) && self.calls.value_length(j) > 0);
            (assistant, message_calls, role(turns.end - 1).unwrap_or(""))
        } else {
            let mut turns: Vec<Rebuilt<'_>> = Vec::with_capacity(8);
            rebuild(opener, prompt, &self.step, final_text, i, &mut turns);
            let assistant: Vec<&str> = turns
                .iter()
                .filter(|t| t.role == Role::Assistant)
                .map(|t| t.content)
                .collect();
            let message_calls = turns
                .iter()
                .any(|t| t.role == Role::Assistant && t.step.is_some());
            let last_role = turns.last().map_or("", |t| match t.role {
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool",
            });
            (assistant, message_calls, last_role)
        }
    }

    /// Row `i`'s summary from the columns, or `None` when the row needs the general path.
    fn info(&self, i: usize, cache: &mut Cache) -> Result<Option<RowInfo>> {
        let Some(extra) = extra_beside(self.extra, i, &READ)? else {
            return Ok(None);
        };
        let has_messages = self.messages.is_valid(i) && self.messages.value_length(i) > 0;
        // A row without steps whose calls are a `tool_trace` (in `extra`) is rebuilt from it,
        // the general way.
        if !has_messages && !self.step.has(i) && extra.contains_key("tool_trace") {
            return Ok(None);
        }
        let side = |k: &str| extra.get(k);
        let side_text = |k: &str| side(k).and_then(Value::as_str).unwrap_or("");
        let prompt = self.prompt.get(i);
        let (key, _) = shared(
            &mut cache.key,
            &column_task_key(side("scenario_id"), self.task_id.value(i), prompt),
        );
        let final_text = self.final_text.value(i);
        // Messages, or the conversation rebuilt from the prompt and steps.
        let (assistant, message_calls, last_role) = self.turns(
            i,
            has_messages,
            side("opener").and_then(Value::as_str),
            prompt,
            final_text,
        );
        let has_conversation = has_messages
            || (self.steps.is_valid(i) && self.steps.value_length(i) > 0)
            || !final_text.is_empty();
        // Steps.
        let (mut step_call, mut step_tools, mut step_truncated) = (false, Vec::new(), false);
        let mut fault = None;
        if self.steps.is_valid(i) {
            let o = self.steps.value_offsets();
            for j in usize_of(o[i])..usize_of(o[i + 1]) {
                if let Some(t) = self.tool.get(j) {
                    step_call = true;
                    step_tools.push(t);
                }
                step_truncated |= self.truncated.is_valid(j) && self.truncated.value(j);
                if fault.is_none()
                    && let Some(r) = self.result.get(j)
                    && !plainly_ok(r)
                {
                    fault = result_fault(&json_text(r, "steps.result")?);
                }
            }
        }
        let fault_kind = cache.fault(fault.or_else(|| planned_fault(side("faults"))));
        // The privileged context an assistant turn quotes.
        let leak = match self.privileged.get(i) {
            Some(p) => {
                let needles = cache.needles.needles(p)?;
                match needles {
                    None => (false, None),
                    Some(n) => {
                        let texts: Vec<&str> = std::iter::once(final_text)
                            .chain(assistant.iter().copied())
                            .collect();
                        // The final reply, and the last assistant turn when it says the same.
                        let mut at = vec![0];
                        if assistant.last() == Some(&final_text) {
                            at.push(texts.len() - 1);
                        }
                        (
                            true,
                            n.quoted(prompt.unwrap_or(""), final_text, &at, &texts)
                                .cloned(),
                        )
                    }
                }
            }
            None => (false, None),
        };
        // Only a lineage that says "eval" somewhere is parsed.
        let eval_sourced = self.lineage.get(i).is_some_and(|l| l.contains("eval"))
            && json_at(self.lineage, i, col::LINEAGE)?.and_then(|l| l.get("source").cloned())
                == Some(Value::String("eval".into()));
        let reward = self.reward.is_valid(i).then(|| self.reward.value(i));
        let (shared_prompt, new) = shared(&mut cache.prompt, prompt.unwrap_or(""));
        if new {
            cache.wants_tool = prompt_wants_tool(&shared_prompt);
        }
        Ok(Some(
            Parts {
                key,
                prompt: prompt.unwrap_or(""),
                shared_prompt,
                // A reward that is not a number (NaN) reads as none, as in JSON.
                reward: reward.filter(|r| r.is_finite()),
                label_source: side_text("label_source"),
                final_text,
                finish_reason: self.finish_reason.value(i),
                reason: self.reason.value(i),
                step_call,
                step_tools,
                step_truncated,
                message_calls,
                assistant,
                last_role,
                has_messages: has_conversation,
                overlong: side("overlong").and_then(Value::as_bool) == Some(true),
                side_wants_tool: side_wants_tool(side),
                prompt_wants_tool: Some(cache.wants_tool),
                signature: side("behavior_signature").and_then(Value::as_str),
                leak,
                fault_kind,
                eval_sourced,
                scenario_id: side_text("scenario_id"),
                rollout_index: self
                    .rollout_index
                    .is_valid(i)
                    .then(|| i64::from(self.rollout_index.value(i))),
            }
            .summarize(),
        ))
    }
}

/// Row `i`'s summary, by the general path.
fn general(view: &BatchView<'_>, i: usize) -> Result<RowInfo> {
    Ok(row_info(&encode(view, i)?))
}

/// What the last row's privileged text, key and prompt gave (rows of a task share them), and
/// the fault kinds seen: a run of rows of one task shares one key and one prompt allocation.
#[derive(Default)]
struct Cache {
    needles: NeedleCache,
    key: Option<Arc<str>>,
    prompt: Option<Arc<str>>,
    /// Whether `prompt` wants a tool.
    wants_tool: bool,
    faults: Vec<Arc<str>>,
}

/// `text`, shared with `last` when it is the same, else made and kept there (then `true`).
fn shared(last: &mut Option<Arc<str>>, text: &str) -> (Arc<str>, bool) {
    match last {
        Some(l) if **l == *text => (Arc::clone(l), false),
        _ => (Arc::clone(last.insert(text.into())), true),
    }
}

/// Fault kinds a [`Cache`] keeps at most (a few in practice: the kinds of a tool world).
const FAULT_KINDS: usize = 64;

impl Cache {
    /// The fault kind `fault` names (`no fault` for none), shared with the rows that met it.
    fn fault(&mut self, fault: Option<String>) -> Arc<str> {
        let Some(fault) = fault else {
            return NO_FAULT.clone();
        };
        if let Some(f) = self.faults.iter().find(|f| ***f == *fault) {
            return Arc::clone(f);
        }
        let f: Arc<str> = fault.into();
        if self.faults.len() < FAULT_KINDS {
            self.faults.push(Arc::clone(&f));
        }
        f
    }
}

/// Rows per task of the parallel pass (a run of rows shares one needle cache).
const CHUNK: usize = 256;

/// The summaries of every row of `batch`, in order, made in parallel; also how many took the
/// general path (for the tests that hold both paths equal).
#[cfg(test)]
pub(super) fn row_infos(batch: &RecordBatch) -> Result<(Vec<RowInfo>, usize)> {
    // The column path reads views, as the first reading gives them.
    let views = crate::pipeline::row::testing::with_text_views(batch);
    let infos = column_infos(&Columns::of(&views)?, batch.num_rows())?;
    let general_rows = infos.iter().filter(|i| i.is_none()).count();
    let view = BatchView::new(batch)?;
    let infos = infos
        .into_iter()
        .enumerate()
        .map(|(i, info)| info.map_or_else(|| general(&view, i), Ok))
        .collect::<Result<_>>()?;
    Ok((infos, general_rows))
}

/// The column path's summaries of the rows of `cols`, made in parallel: `None` for a row that
/// needs the general path.
#[cfg(test)]
fn column_infos(cols: &Columns<'_>, n: usize) -> Result<Vec<Option<RowInfo>>> {
    let mut infos = Vec::with_capacity(n);
    infos.resize_with(n, || None);
    fill_column_infos(cols, &mut infos)?;
    Ok(infos)
}

/// The column path's summaries of the first `slots.len()` rows of `cols`, written into
/// `slots` in parallel.
fn fill_column_infos(cols: &Columns<'_>, slots: &mut [Option<RowInfo>]) -> Result<()> {
    slots
        .par_chunks_mut(CHUNK)
        .enumerate()
        .try_for_each(|(c, slots)| {
            let mut cache = Cache::default();
            for (k, slot) in slots.iter_mut().enumerate() {
                *slot = cols.info(c * CHUNK + k, &mut cache)?;
            }
            Ok(())
        })
}

/// The leaf columns the column path reads (field paths, lists looked through), and the row ids
/// every row has.
pub const LEAVES: [&str; 19] = [
    "task_id",
    "rollout_id",
    "rollout_index",
    "prompt",
    "final_text",
    "finish_reason",
    "reason",
    "reward",
    "privileged",
    "lineage",
    "extra",
    "messages.role",
    "messages.content",
    "messages.tool_calls.name",
    "steps.tool",
    "steps.result",
    "steps.truncated",
    "steps.user",
    "steps.text",
];

/// Fills `slots` with the summaries of the rows of `batch` (read as [`LEAVES`]) by the column
/// path, in parallel: `None` for a row that needs the general path ([`general_summary`]).
///
/// # Errors
/// A column of the wrong type.
pub fn fill_summaries(batch: &RecordBatch, slots: &mut [Option<RowInfo>]) -> Result<()> {
    fill_column_infos(&Columns::of(batch)?, slots)
}

/// Row `i`'s summary by the general path (the row whole, encoded in the reference's format).
///
/// # Errors
/// The row does not encode.
pub fn general_summary(view: &BatchView<'_>, i: usize) -> Result<RowInfo> {
    general(view, i)
}

#[cfg(test)]
#[test]
fn plainly_ok_results_are_the_ones_without_a_fault() {
    for (text, ok) in [
        (r#"{"status":"ok","order_id":"A1"}"#, true),
        (r#"{"order_id":"A1","status":"OK"}"#, true),
        (r#"{"status":"ok","data":"<html>"}"#, false),
        (r#"{"status":"ok","stale":true}"#, false),
        (r#"{"status":"timeout"}"#, false),
        (r#"{"status":"o\"k"}"#, false),
        (r#"{"order_id":"A1"}"#, false),
        (r#""{\"status\":\"ok\"}""#, false),
    ] {
        assert_eq!(plainly_ok(text), ok, "{text}");
        if ok {
            assert_eq!(
                result_fault(&serde_json::from_str(text).expect("JSON")),
                None
            );
        }
    }
}

/// Every row of `batch` summarized by the general path (for the test that holds both equal).
#[cfg(test)]
pub(super) fn general_infos(batch: &RecordBatch) -> Result<Vec<RowInfo>> {
    let view = BatchView::new(batch)?;
    (0..batch.num_rows()).map(|i| general(&view, i)).collect()
}
