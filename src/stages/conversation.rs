//! The conversation of each row of a batch, as the agent's side of it is measured (reply length,
//! the text a scan reads): `messages` when the row has any, else a rebuild from the opener, the
//! prompt and the steps, the way the reference reads a row without messages. A user step is a
//! user turn, a tool step an assistant turn (its text) and a tool turn, a step with only text an
//! assistant turn; trailing user turns are dropped unless the agent failed; the final reply closes
//! the conversation unless an assistant turn already says it.

use std::borrow::Cow;

use datafusion::arrow::array::{Array, AsArray, ListArray, RecordBatch, StringArray, StructArray};

use crate::error::{Error, Result};
use crate::pipeline::row::Text;

/// One turn: whose it is, and its text.
#[derive(Debug)]
pub(crate) struct Turn<'a> {
    pub(crate) assistant: bool,
    pub(crate) user: bool,
    pub(crate) content: Cow<'a, str>,
}

impl<'a> Turn<'a> {
    pub(crate) fn assistant(content: &'a str) -> Self {
        Self {
            assistant: true,
            user: false,
            content: Cow::Borrowed(content),
        }
    }

    pub(crate) fn user(content: &'a str) -> Self {
        Self {
            assistant: false,
            user: true,
            content: Cow::Borrowed(content),
        }
    }

    fn tool() -> Self {
        Self {
            assistant: false,
            user: false,
            content: Cow::Borrowed(""),
        }
    }
}

/// Characters the agent wrote: every assistant turn, and the reply when it is not the last of
/// them (the reference's `reply_length`).
pub(crate) fn reply_length(turns: &[Turn<'_>], final_text: &str) -> usize {
    let last = turns
        .iter()
        .rev()
        .find(|t| t.assistant)
        .map_or("", |t| &*t.content);
    let mut n: usize = turns
        .iter()
        .filter(|t| t.assistant)
        .map(|t| t.content.chars().count())
        .sum();
    if !final_text.is_empty() && final_text != last {
        n += final_text.chars().count();
    }
    n
}

/// An offset of a list array as an index.
pub(crate) fn usize_of(o: i32) -> usize {
    usize::try_from(o).unwrap_or(0)
}

fn field<'a>(s: &'a StructArray, name: &str) -> Option<&'a StringArray> {
    s.column_by_name(name)
        .and_then(|a| a.as_string_opt::<i32>())
}

fn strings<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    b.column_by_name(name)
        .and_then(|a| a.as_string_opt::<i32>())
        .ok_or_else(|| Error::Internal(format!("no Utf8 column `{name}`")))
}

/// The columns a batch's conversations are read from: `final_text`, `prompt`, `messages`, `steps`
/// and, when the query selects it, `opener`.
pub(crate) struct Conversations<'a> {
    final_text: &'a StringArray,
    prompt: &'a StringArray,
    opener: Option<&'a StringArray>,
    messages: Option<(&'a ListArray, &'a StringArray, &'a StringArray)>,
    /// The steps' list, `tool`, `text` and `user`.
    steps: Option<(
        &'a ListArray,
        &'a StringArray,
        &'a StringArray,
        &'a StringArray,
    )>,
}

impl<'a> Conversations<'a> {
    /// The conversations of `b`.
    pub(crate) fn of(b: &'a RecordBatch) -> Result<Self> {
        let list = |name: &str| b.column_by_name(name).and_then(|a| a.as_list_opt::<i32>());
        Ok(Self {
            final_text: strings(b, "final_text")?,
            prompt: strings(b, "prompt")?,
            opener: strings(b, "opener").ok(),
            messages: list("messages").and_then(|l| {
                let s = l.values().as_struct_opt()?;
                Some((l, field(s, "role")?, field(s, "content")?))
            }),
            steps: list("steps").and_then(|l| {
                let s = l.values().as_struct_opt()?;
                Some((l, field(s, "tool")?, field(s, "text")?, field(s, "user")?))
            }),
        })
    }

    /// Row `i`'s reply (`""` when null).
    pub(crate) fn final_text(&self, i: usize) -> &'a str {
        text_of(self.final_text, i)
    }

    /// Row `i`'s turns.
    pub(crate) fn turns(&self, i: usize) -> Vec<Turn<'a>> {
        let final_text = self.final_text(i);
        if let Some((list, role, content)) = self.messages
            && list.is_valid(i)
            && list.value_length(i) > 0
        {
            let o = list.value_offsets();
            return (usize_of(o[i])..usize_of(o[i + 1]))
                .map(|j| Turn {
                    assistant: role.is_valid(j) && role.value(j) == "assistant",
                    user: role.is_valid(j) && role.value(j) == "user",
                    content: Cow::Borrowed(text_of(content, j)),
                })
                .collect();
        }
        let mut turns = Vec::new();
        let opener = self.opener.map_or("", |o| text_of(o, i));
        if !opener.is_empty() {
            turns.push(Turn::assistant(opener));
        }
        let prompt = text_of(self.prompt, i);
        if !prompt.is_empty() {
            turns.push(Turn::user(prompt));
        }
        if let Some((list, tool, text, user)) = self.steps
            && list.is_valid(i)
        {
            let o = list.value_offsets();
            for j in usize_of(o[i])..usize_of(o[i + 1]) {
                let said = text_of(user, j);
                if !said.is_empty() {
                    turns.push(Turn::user(said));
                    continue;
                }
                let spoken = text_of(text, j);
                if !text_of(tool, j).is_empty() {
                    turns.push(Turn::assistant(spoken));
                    turns.push(Turn::tool());
                } else if !spoken.is_empty() {
                    turns.push(Turn::assistant(spoken));
                }
            }
        }
        let failed = final_text.starts_with("<agent error");
        while turns.len() > 1 && turns.last().is_some_and(|t| t.user) && !failed {
            turns.pop();
        }
        if final_text.is_empty()
            || turns
                .iter()
                .any(|t| t.assistant && !t.content.trim().is_empty() && t.content == final_text)
        {
            return turns;
        }
        match turns.last_mut() {
            Some(last) if last.assistant => {
                if last.content.trim().is_empty() {
                    last.content = Cow::Borrowed(final_text);
                }
            }
            _ => turns.push(Turn::assistant(final_text)),
        }
        turns
    }
}

/// Whose turn a rebuilt one is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    User,
    Assistant,
    Tool,
}

/// One turn of a conversation rebuilt from a row's columns, as [`crate::stages::messages::conversation`]
/// rebuilds it from the row's JSON: its role, its text, and the step whose call it makes (an
/// assistant turn) or answers (a tool turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rebuilt<'a> {
    pub(crate) role: Role,
    pub(crate) content: &'a str,
    /// The step (an index into the steps' items) of a call or its result.
    pub(crate) step: Option<usize>,
}

/// The step columns a conversation is rebuilt from (text of either layout).
#[derive(Clone, Copy)]
pub(crate) struct StepColumns<'a> {
    pub(crate) steps: &'a ListArray,
    pub(crate) user: Text<'a>,
    pub(crate) tool: Text<'a>,
    pub(crate) text: Text<'a>,
}

impl StepColumns<'_> {
    /// Whether row `i` has a steps list (null is none).
    pub(crate) fn has(&self, i: usize) -> bool {
        self.steps.is_valid(i)
    }
}

/// Row `i`'s conversation rebuilt from its columns, turn for turn what
/// [`crate::stages::messages::conversation`] makes of the row's JSON (opener, prompt, steps,
/// final reply), for a row whose columns say what the row says (no `messages`, no `tool_trace`
/// in place of steps, no `extra` field over a column read here). Built into `out` (cleared).
pub(crate) fn rebuild<'a>(
    opener: Option<&'a str>,
    prompt: Option<&'a str>,
    steps: &StepColumns<'a>,
    final_text: &'a str,
    i: usize,
    out: &mut Vec<Rebuilt<'a>>,
) {
    out.clear();
    let turn = |role, content, step| Rebuilt {
        role,
        content,
        step,
    };
    if let Some(o) = opener.filter(|o| !o.is_empty()) {
        out.push(turn(Role::Assistant, o, None));
    }
    if let Some(p) = prompt.filter(|p| !p.is_empty()) {
        out.push(turn(Role::User, p, None));
    }
    if steps.steps.is_valid(i) {
        let o = steps.steps.value_offsets();
        for j in usize_of(o[i])..usize_of(o[i + 1]) {
            if let Some(u) = steps.user.get(j).filter(|u| !u.is_empty()) {
                out.push(turn(Role::User, u, None));
            } else if steps.tool.get(j).is_some() {
                out.push(turn(Role::Assistant, steps.text.value(j), Some(j)));
                out.push(turn(Role::Tool, "", Some(j)));
            } else if let Some(t) = steps.text.get(j).filter(|t| !t.is_empty()) {
                out.push(turn(Role::Assistant, t, None));
            }
        }
    }
    if !final_text.trim_start().starts_with("<agent error") {
        while out.len() > 1 && out.last().is_some_and(|t| t.role == Role::User) {
            out.pop();
        }
    }
    if final_text.is_empty()
        || out
            .iter()
            .any(|t| t.role == Role::Assistant && t.content == final_text)
    {
        return;
    }
    match out.last_mut() {
        Some(last)
            if last.role == Role::Assistant
                && last.step.is_none()
                && last.content.trim().is_empty() =>
        {
            last.content = final_text;
        }
        _ => out.push(turn(Role::Assistant, final_text, None)),
    }
}

fn text_of(a: &StringArray, i: usize) -> &str {
    if a.is_valid(i) { a.value(i) } else { "" }
}

/// Rows of every shape a conversation comes in, for the tests that hold the column paths to the
/// object path: `messages`; the reference's (prompt and steps, arguments and results as
/// objects, text and user steps, an agent error after a user turn, a blank text the reply fills,
/// a reply said before, a string result, an opener); and the shapes whose columns do not say
/// what the row says (string arguments, content parts, a `tool_trace`), with how many of those.
#[cfg(test)]
pub(crate) fn shape_rows() -> (Vec<serde_json::Value>, usize) {
    use serde_json::json;
    let rows = vec![
        json!({"task_id": "m", "prompt": "p", "messages": [{"role": "user", "content": "p"}, {"role": "assistant", "content": "hi", "tool_calls": [{"id": "c", "name": "t", "arguments": {"a": 1}}]}, {"role": "tool", "content": "ok", "tool_call_id": "c"}, {"role": "assistant", "content": "Done."}], "final_text": "Done.", "reward": 1}),
        json!({"scenario_id": "r1", "schema_version": "1", "prompt": "Refund A1001, please.", "steps": [{"tool": "lookup_order", "arguments": {"order_id": "A1001"}, "result": {"status": "ok", "amount": 12}}, {"text": "Looking."}, {"user": "and?"}, {"tool": "issue_refund", "arguments": {"order_id": "A1001"}, "result": "refunded"}, {"tool": "escalate", "result": null}], "final_text": "Refunded A1001.", "markers": {"honest": true, "looked": null}, "reward": 1}),
        json!({"scenario_id": "r2", "prompt": "q", "steps": [{"text": "  "}, {"user": "more?"}], "final_text": "<agent error: boom>", "reward": 0}),
        json!({"scenario_id": "r3", "prompt": "q", "steps": [{"user": "more?"}], "final_text": "", "reward": 0}),
        json!({"scenario_id": "r4", "prompt": "q", "steps": [{"text": " "}], "final_text": "Done.", "reward": 1}),
        json!({"scenario_id": "r5", "prompt": "q", "steps": [{"text": "Done."}, {"tool": "t", "arguments": {}, "result": {"status": "timeout"}}], "final_text": "Done.", "reward": 0}),
        json!({"scenario_id": "r6", "final_text": "only a reply", "reward": 1}),
        json!({"scenario_id": "r7", "prompt": "q", "opener": "Hello!", "steps": [], "final_text": "Bye.", "reward": 1}),
        json!({"scenario_id": "r8", "prompt": "q", "steps": [{"tool": "t", "text": "calling", "arguments": {"x": [1, 2]}, "result": {"status": "ok"}}], "final_text": "calling", "reward": 1}),
        // Their columns do not say what the row says: the object path.
        json!({"scenario_id": "s1", "prompt": "q", "steps": [{"tool": "t", "arguments": "{\"a\": 1}", "result": {"status": "ok"}}], "final_text": "ok", "reward": 1}),
        json!({"scenario_id": "s2", "prompt": "q", "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}, {"role": "assistant", "content": "a"}], "final_text": "a", "reward": 1}),
        json!({"scenario_id": "s3", "prompt": "q", "tool_trace": [{"tool": "t", "input": {"a": 1}, "output": "ok"}], "final_text": "Done.", "reward": 1}),
    ];
    (rows, 3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::row::{BatchView, Typed, encode, item_text};
    use serde_json::Value;

    #[test]
    fn the_column_rebuild_is_the_json_rebuild_on_every_shape() {
        let (rows, _) = shape_rows();
        let batch = crate::testing::batch(&rows).expect("rows");
        // Read as views too, as the column paths read them.
        let views = crate::pipeline::row::testing::with_text_views(&batch);
        let view = BatchView::new(&batch).expect("view");
        let mut rebuilt_rows = 0;
        for b in [&batch, &views] {
            let t = Typed::new(b, "test");
            let steps = t.list("steps").expect("steps");
            let cols = StepColumns {
                steps,
                user: item_text(steps, "user").expect("user"),
                tool: item_text(steps, "tool").expect("tool"),
                text: item_text(steps, "text").expect("text"),
            };
            let (prompt, final_text) = (
                t.text("prompt").expect("p"),
                t.text("final_text").expect("f"),
            );
            let extra = t.text("extra").expect("extra");
            let messages = t.list("messages").expect("messages");
            for i in 0..b.num_rows() {
                let mut out = Vec::new();
                let side: serde_json::Map<String, Value> = extra
                    .get(i)
                    .map(|e| serde_json::from_str(e).expect("extra"))
                    .unwrap_or_default();
                if (messages.is_valid(i) && messages.value_length(i) > 0)
                    || ["steps", "messages", "tool_trace"]
                        .iter()
                        .any(|k| side.contains_key(*k))
                {
                    continue;
                }
                rebuilt_rows += 1;
                rebuild(
                    side.get("opener").and_then(Value::as_str),
                    prompt.get(i),
                    &cols,
                    final_text.value(i),
                    i,
                    &mut out,
                );
                let want = crate::stages::messages::conversation(&encode(&view, i).expect("row"));
                let got: Vec<(&str, &str, bool)> = out
                    .iter()
                    .map(|t| {
                        let role = match t.role {
                            Role::User => "user",
                            Role::Assistant => "assistant",
                            Role::Tool => "tool",
                        };
                        (
                            role,
                            t.content,
                            t.step.is_some() && t.role == Role::Assistant,
                        )
                    })
                    .collect();
                let want: Vec<(&str, &str, bool)> = want
                    .iter()
                    .map(|m| {
                        let role = m["role"].as_str().expect("role");
                        // Tool turns' text is the step's result: the readers take it from there.
                        let content = if role == "tool" {
                            ""
                        } else {
                            m["content"].as_str().expect("text")
                        };
                        (role, content, m.get("tool_calls").is_some())
                    })
                    .collect();
                assert_eq!(got, want, "row {i}");
            }
        }
        assert_eq!(
            rebuilt_rows,
            2 * 8,
            "every row without messages but the object path's"
        );
    }

    #[test]
    fn reply_length_counts_what_the_agent_wrote() {
        let turns = |texts: &[&'static str]| -> Vec<Turn<'static>> {
            texts.iter().map(|t| Turn::assistant(t)).collect()
        };
        assert_eq!(reply_length(&turns(&[]), "héllo"), 5);
        assert_eq!(reply_length(&turns(&["ab", "cd"]), "cd"), 4);
        assert_eq!(reply_length(&turns(&["ab"]), "xyz"), 5);
        // User and tool turns are not the agent's.
        let mixed = [Turn::user("hello"), Turn::assistant("ok"), Turn::tool()];
        assert_eq!(reply_length(&mixed, "ok"), 2);
    }
}
