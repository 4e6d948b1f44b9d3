//! An OpenAI training row's line written from its converted turns, and the small writers the
//! column path shares.

use std::borrow::Cow;

use serde_json::Value;

use super::{MaskMode, Options, RowFacts};
use crate::error::{Error, Result};
use crate::stages::json_string::push_json_string;

/// A converted message.
pub(super) struct Turn<'t> {
    pub(super) role: &'static str,
    pub(super) content: Cow<'t, str>,
    pub(super) tool_call_id: Option<Cow<'t, str>>,
    /// Each call's id, name and arguments (JSON text).
    pub(super) calls: Vec<(Cow<'t, str>, &'t str, String)>,
}

impl<'t> Turn<'t> {
    pub(super) fn new(role: &'static str, content: Cow<'t, str>) -> Self {
        Self {
            role,
            content,
            tool_call_id: None,
            calls: Vec::new(),
        }
    }
}

/// A tool output, cut to `max_tool_output_chars` (counted in `facts`).
pub(super) fn cut<'t>(content: &'t str, opts: &Options, facts: &mut RowFacts) -> Cow<'t, str> {
    if let Some(cap) = opts.max_tool_output_chars {
        let n = content.chars().count();
        if n > cap {
            let cut = n - cap;
            facts.outputs_cut += 1;
            facts.chars_cut += cut as u64;
            return Cow::Owned(format!(
                "{}\n[... {cut} chars of tool output truncated]",
                content.chars().take(cap).collect::<String>()
            ));
        }
    }
    Cow::Borrowed(content)
}

pub(super) fn put(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(b);
}

pub(super) fn json(out: &mut Vec<u8>, v: &Value) -> Result<()> {
    serde_json::to_writer(out, v).map_err(|e| Error::Internal(format!("writing a row: {e}")))
}

/// `,"key":` before a carried value.
pub(super) fn member(out: &mut Vec<u8>, k: &str) {
    put(out, b",");
    push_json_string(out, k);
    put(out, b":");
}

/// Writes the training row's line: its messages (assistant turns weighted by the mask) and the
/// tool schemas; says whether it holds them.
pub(super) fn write_messages(
    out: &mut Vec<u8>,
    turns: &[Turn<'_>],
    last_assistant: usize,
    opts: &Options,
) -> Result<bool> {
    let weight = |k: usize| match opts.mask_mode {
        MaskMode::Final => k == last_assistant,
        MaskMode::Assistant => true,
    };
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
    let with_tools = if let Some(t) = opts.tools.as_ref().filter(|t| !t.is_empty()) {
        put(out, b",\"tools\":");
        serde_json::to_writer(&mut *out, t)
            .map_err(|e| Error::Internal(format!("writing a row: {e}")))?;
        true
    } else {
        false
    };
    put(out, b"}\n");
    Ok(with_tools)
}
