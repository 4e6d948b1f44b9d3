//! The privileged-context leak check: a row's privileged block as needles, and whether what a
//! row exports quotes one (select's leak gate reads the same needles).

use serde_json::{Map, Value};

use super::messages::content_text;

/// `s` with white space collapsed to single spaces, trimmed, and lowercased, in one pass.
pub(crate) fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_normalized(s, &mut out);
    out
}

/// Appends `s` normalized as [`normalize`] does (a separating space first when `out` is not
/// empty and `s` has a word).
pub(crate) fn push_normalized(s: &str, out: &mut String) {
    if s.is_ascii() {
        // Already single-spaced and trimmed (the common case): a copy, lowercased.
        let b = s.as_bytes();
        if !b.is_empty()
            && b[0] != b' '
            && b[b.len() - 1] != b' '
            && memchr::memchr3(b'\t', b'\n', b'\r', b).is_none()
            && memchr::memchr(0x0c, b).is_none()
            && memchr::memmem::find(b, b"  ").is_none()
        {
            if !out.is_empty() {
                out.push(' ');
            }
            let at = out.len();
            out.push_str(s);
            out[at..].make_ascii_lowercase();
            return;
        }
        // Byte by byte.
        out.reserve(s.len() + 1);
        let mut space = !out.is_empty();
        for &b in s.as_bytes() {
            if b.is_ascii_whitespace() {
                space = !out.is_empty();
            } else {
                if space {
                    out.push(' ');
                    space = false;
                }
                out.push(char::from(b.to_ascii_lowercase()));
            }
        }
        return;
    }
    let mut space = !out.is_empty();
    let mut started = false;
    for c in s.chars() {
        if c.is_whitespace() {
            space = started || space;
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        started = true;
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            out.extend(c.to_lowercase());
        }
    }
}

/// The needles of a row's privileged block, when it has one.
pub(super) fn row_needles(row: &Map<String, Value>) -> Option<Needles> {
    row.get("privileged")
        .filter(|p| !p.is_null() && p.as_str() != Some(""))
        .map(Needles::of)
}

/// The privileged text a reply quotes, if any: the final reply and the assistant turns against
/// every string of 12 characters or more in the row's privileged block ([`Needles::quoted`]
/// says which quotes are not leaks). The first value says whether the row had a block.
pub fn leak(row: &Map<String, Value>, messages: &[Value]) -> (bool, Option<String>) {
    let Some(needles) = row_needles(row) else {
        return (false, None);
    };
    let assistant: Vec<String> = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .map(|m| match m.get("content") {
            Some(Value::String(c)) => c.clone(),
            other => content_text(other),
        })
        .collect();
    let final_text = row.get("final_text").and_then(Value::as_str).unwrap_or("");
    let texts: Vec<&str> = std::iter::once(final_text)
        .chain(assistant.iter().map(String::as_str))
        .collect();
    let ask = row.get("prompt").and_then(Value::as_str).unwrap_or("");
    // The final reply, and the last assistant turn when it says the same.
    let mut at = vec![0];
    if assistant.last().is_some_and(|a| a == final_text) {
        at.push(texts.len() - 1);
    }
    (true, needles.quoted(ask, final_text, &at, &texts).cloned())
}

/// Keys of a training row that hold no text of the row's: the tool schemas (given with
/// `--tools`), the ask (never secret), and wai's own stamps.
const NOT_CHECKED: [&str; 5] = [
    "tools",
    "prompt_text",
    "schema_version",
    "group_id",
    "unroll",
];

/// Every text a training row exports, in order, for the leak gate: each turn's text but the
/// tool results (what the world told the agent) and the system prompt (given with
/// `--system-prompt`, not the row's), each call's arguments, and every string of every other
/// field but [`NOT_CHECKED`] ones. The position of each message list's last assistant text goes
/// to `answers` (where the final reply is said).
pub(crate) fn exported_texts<'a>(
    row: &'a Map<String, Value>,
    out: &mut Vec<&'a str>,
    answers: &mut Vec<usize>,
) {
    fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            Value::Object(m) => m.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    for (k, v) in row {
        match (k.as_str(), v) {
            ("messages" | "prompt" | "completion" | "chosen" | "rejected", Value::Array(turns)) => {
                let last = turns.iter().rposition(|m| m["role"] == "assistant");
                for (j, m) in turns.iter().enumerate() {
                    if m["role"] == "tool" || m["role"] == "system" {
                        continue;
                    }
                    if let Some(c) = m.get("content") {
                        if Some(j) == last && c.is_string() {
                            answers.push(out.len());
                        }
                        strings(c, out);
                    }
                    for call in m
                        .get("tool_calls")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        strings(&call["function"]["arguments"], out);
                    }
                }
            }
            (k, _) if NOT_CHECKED.contains(&k) || k == "prompt" => {}
            (_, v) => strings(v, out),
        }
    }
}

/// The needles of a privileged block (its `reference`, `principle` and `hidden_state` strings,
/// normalized, of 12 characters or more), each with a finder for its longest word.
#[derive(Debug, Default)]
pub(crate) struct Needles {
    texts: Vec<String>,
    /// Whether each needle is a reference answer (a string under `privileged.reference`).
    reference: Vec<bool>,
    longest: Vec<memchr::memmem::Finder<'static>>,
}

impl Needles {
    /// Every string anywhere in a privileged block (the block itself when it is a string), of 12
    /// characters or more once normalized.
    pub(crate) fn of(privileged: &Value) -> Self {
        fn walk(v: &Value, reference: bool, out: &mut Vec<(String, bool)>) {
            match v {
                Value::String(s) => {
                    let n = normalize(s);
                    if n.chars().count() >= 12 {
                        out.push((n, reference));
                    }
                }
                Value::Array(a) => a.iter().for_each(|x| walk(x, reference, out)),
                Value::Object(m) => m.values().for_each(|x| walk(x, reference, out)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        match privileged {
            Value::Object(m) => {
                for (k, v) in m {
                    walk(v, k == "reference", &mut found);
                }
            }
            other => walk(other, false, &mut found),
        }
        let (texts, reference): (Vec<String>, Vec<bool>) = found.into_iter().unzip();
        let longest = texts
            .iter()
            .map(|n| {
                let w = n.split(' ').max_by_key(|w| w.len()).unwrap_or("");
                memchr::memmem::Finder::new(w).into_owned()
            })
            .collect();
        Self {
            texts,
            reference,
            longest,
        }
    }

    /// The first needle `texts` quote (all normalized and joined by spaces), where quoting it
    /// leaks it. Two quotes are not leaks:
    /// - a needle the ask itself says (`ask`) is no secret;
    /// - a reference answer in the final reply (`answer`) when the reply gives that answer: its
    ///   last non-empty line, or all of it, equals the reference once case, ASCII punctuation
    ///   and spacing are set aside (what the exact-match verifier passes). That is the task, not
    ///   a leak; the same reference anywhere else (an earlier turn, a reason, a field) is one.
    ///
    /// When every text is ASCII, a needle can only be found if its longest word occurs in the
    /// texts with ASCII case folded, so rows no needle could match are cleared without
    /// normalizing.
    pub(crate) fn quoted(
        &self,
        ask: &str,
        answer: &str,
        answer_at: &[usize],
        texts: &[&str],
    ) -> Option<&String> {
        if self.texts.is_empty() {
            return None;
        }
        if texts.iter().all(|t| t.is_ascii()) {
            thread_local! {
                static FOLDED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
            }
            let possible = FOLDED.with_borrow_mut(|folded| {
                folded.clear();
                for (k, t) in texts.iter().enumerate() {
                    // The reply said twice (as `final_text` and the last turn) is searched once.
                    if k == 0 || *t != texts[0] {
                        folded.extend_from_slice(t.as_bytes());
                        folded.push(b' ');
                    }
                }
                folded.make_ascii_lowercase();
                self.longest.iter().any(|f| f.find(folded).is_some())
            });
            if !possible {
                return None;
            }
        }
        let mut hay = String::new();
        for t in texts {
            push_normalized(t, &mut hay);
        }
        let mut public = String::new();
        push_normalized(ask, &mut public);
        // The texts without the answer, made only when a reference is the answer.
        let mut without_answer: Option<String> = None;
        self.texts
            .iter()
            .zip(&self.reference)
            .find(|(n, is_reference)| {
                let n = n.as_str();
                if !hay.contains(n) || public.contains(n) {
                    return false;
                }
                if **is_reference && gives_the_answer(answer, n) {
                    let rest = without_answer.get_or_insert_with(|| {
                        // Only where the final reply is said: the same words in an earlier turn
                        // or a field are still a leak.
                        let mut rest = String::new();
                        for (k, t) in texts.iter().enumerate() {
                            if !(answer_at.contains(&k) && *t == answer) {
                                push_normalized(t, &mut rest);
                            }
                        }
                        rest
                    });
                    return rest.contains(n);
                }
                true
            })
            .map(|(n, _)| n)
    }
}

/// Whether `reply` gives `reference` as its answer: its last non-empty line, or all of it,
/// equals the reference with case, ASCII punctuation and spacing set aside.
pub(super) fn gives_the_answer(reply: &str, reference: &str) -> bool {
    let plain = crate::stages::grade::verify::normalize;
    let want = plain(reference);
    !want.is_empty()
        && (reply
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| plain(l) == want)
            || plain(reply) == want)
}

/// The needles of the last privileged text seen (rows of a task share it), for readers that
/// go through rows in order.
#[derive(Default)]
pub struct NeedleCache {
    privileged: String,
    /// `None`: the text is not a JSON object.
    needles: Option<Needles>,
}

impl NeedleCache {
    /// The needles of `privileged` (JSON text), `None` when it is null or empty.
    pub(crate) fn needles(&mut self, privileged: &str) -> crate::error::Result<Option<&Needles>> {
        if self.privileged != privileged || self.privileged.is_empty() {
            let v = crate::pipeline::row::json_text(privileged, "privileged")?;
            self.needles = (!v.is_null() && v.as_str() != Some("")).then(|| Needles::of(&v));
            privileged.clone_into(&mut self.privileged);
        }
        Ok(self.needles.as_ref())
    }
}
