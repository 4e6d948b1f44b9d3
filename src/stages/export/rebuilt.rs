//! The wire turns of a row without messages, from its columns: the conversation rebuilt from
//! its opener, prompt and steps ([`crate::stages::conversation::rebuild`]), converted as the
//! general path converts the rebuilt JSON messages (calls numbered `call_0000` on, as they have
//! no ids; each tool turn answers the oldest call still open; results as text).

use std::borrow::Cow;
use std::collections::VecDeque;

use super::rows::THINK;
use super::wire_line::{Turn, cut};
use super::{Options, RowFacts, Wire, WireCache};
use crate::error::Result;
use crate::pipeline::row::json_text;
use crate::stages::conversation::{Role, rebuild};

/// Row `i`'s turns, rebuilt from its columns.
pub(super) fn turns<'a>(
    wire: &Wire<'a>,
    i: usize,
    opts: &'a Options,
    cache: &mut WireCache,
    facts: &mut RowFacts,
) -> Result<Vec<Turn<'a>>> {
    let mut rebuilt = Vec::with_capacity(8);
    rebuild(
        None,
        wire.prompt.get(i),
        &wire.step,
        wire.final_text.value(i),
        i,
        &mut rebuilt,
    );
    let mut turns: Vec<Turn<'a>> = Vec::with_capacity(rebuilt.len() + 2);
    if let Some(sys) = opts.system_prompt.as_deref().filter(|s| !s.is_empty()) {
        turns.push(Turn::new("system", Cow::Borrowed(sys)));
    }
    let mut pending: VecDeque<Cow<'a, str>> = VecDeque::new();
    let mut call_index = 0usize;
    for t in rebuilt {
        match (t.role, t.step) {
            (Role::User, _) => turns.push(Turn::new("user", Cow::Borrowed(t.content))),
            (Role::Assistant, None) => {
                turns.push(Turn::new(
                    "assistant",
                    think(Cow::Borrowed(t.content), opts),
                ));
            }
            (Role::Assistant, Some(j)) => {
                let mut turn = Turn::new("assistant", think(Cow::Borrowed(t.content), opts));
                let id: Cow<'a, str> = Cow::Owned(format!("call_{call_index:04}"));
                call_index += 1;
                pending.push_back(id.clone());
                // A step without arguments is called with `{}`, as the rebuild writes it.
                let raw = wire.step_arguments.get(j).unwrap_or("{}");
                let (args, object) = cache.args(false, Some(raw))?;
                facts.calls += 1;
                if !object {
                    facts.invalid_calls += 1;
                }
                turn.calls.push((id, wire.step.tool.value(j), args));
                turns.push(turn);
            }
            (Role::Tool, step) => {
                let result = step.and_then(|j| wire.step_result.get(j));
                let content = match result {
                    None => Cow::Borrowed(""),
                    // A result that is a JSON string is its text; any other is its JSON.
                    Some(r) if r.starts_with('"') => match json_text(r, "steps.result")? {
                        serde_json::Value::String(text) => {
                            Cow::Owned(cut(&text, opts, facts).into_owned())
                        }
                        _ => cut(r, opts, facts),
                    },
                    Some(r) => cut(r, opts, facts),
                };
                let mut turn = Turn::new("tool", content);
                turn.tool_call_id = pending.pop_front();
                turns.push(turn);
            }
        }
    }
    Ok(turns)
}

/// An assistant turn's text with its thinking cut out, when the options say so.
fn think<'a>(content: Cow<'a, str>, opts: &Options) -> Cow<'a, str> {
    if opts.strip_think {
        Cow::Owned(THINK.replace_all(&content, "").trim().to_owned())
    } else {
        content
    }
}
