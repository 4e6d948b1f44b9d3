//! The privileged-context leak check: a row's privileged block as needles (every string of 12
//! characters or more, normalised), and whether a reply quotes one. Export's gate and select's
//! leak filter read the same needles.

use serde_json::{Map, Value};

use crate::stages::messages::content_text;
use crate::stages::normalize::{normalize, push_normalized};

/// The needles of a row's privileged block, when it has one.
pub(crate) fn row_needles(row: &Map<String, Value>) -> Option<Needles> {
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
fn gives_the_answer(reply: &str, reference: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_needle_is_found_across_turns_and_spacing() {
        // A needle across turns and spacing; none when its longest word is absent.
        let needles = Needles::of(&json!({"reference": "the entity  does not exist"}));
        let texts = ["Sorry: THE ENTITY", "does\nnot exist."];
        assert_eq!(
            needles.quoted("", "", &[], &texts).map(String::as_str),
            Some("the entity does not exist")
        );
        assert_eq!(
            needles.quoted("", "", &[], &["the entity does not exis"]),
            None
        );
    }

    #[test]
    fn every_privileged_string_is_a_needle_and_an_answer_is_not_a_leak() {
        // Any key, any depth, and a plain-string block.
        let block = json!({"rubric": ["the reply names the carrier"], "answer_key": {"deep": "VAULTANSWERSECRET42"}});
        let n = Needles::of(&block);
        assert_eq!(
            n.quoted("", "", &[], &["It went with the reply names the carrier."]),
            Some(&"the reply names the carrier".to_owned())
        );
        assert!(
            n.quoted("", "", &[], &["code vaultanswersecret42"])
                .is_some()
        );
        let plain = Needles::of(&json!("the launch code is 0000-1111"));
        assert!(
            plain
                .quoted("", "", &[], &["The launch code is 0000-1111."])
                .is_some()
        );
        // What the ask says is no secret.
        assert_eq!(
            n.quoted(
                "Does the reply names the carrier?",
                "",
                &[],
                &["yes: the reply names the carrier"]
            ),
            None
        );
        // A reference answer given as the answer is the task; the same reference in an earlier
        // turn, a reason, or inside a longer final sentence is a leak.
        let r = Needles::of(&json!({"reference": "VAULTANSWERSECRET42"}));
        assert_eq!(
            r.quoted(
                "What is the vault code?",
                "VAULTANSWERSECRET42",
                &[0],
                &["VAULTANSWERSECRET42"]
            ),
            None
        );
        assert_eq!(
            r.quoted(
                "q",
                "Checking.\nvaultanswersecret42.",
                &[0],
                &["Checking.\nvaultanswersecret42."]
            ),
            None
        );
        assert!(
            r.quoted(
                "q",
                "VAULTANSWERSECRET42",
                &[1],
                &[
                    "The key says VAULTANSWERSECRET42, let me check",
                    "VAULTANSWERSECRET42"
                ]
            )
            .is_some()
        );
        assert!(
            r.quoted(
                "q",
                "VAULTANSWERSECRET42",
                &[0],
                &["VAULTANSWERSECRET42", "want \"VAULTANSWERSECRET42\""]
            )
            .is_some()
        );
        assert!(
            r.quoted(
                "q",
                "The answer, per the key, is VAULTANSWERSECRET42 sir",
                &[0],
                &["The answer, per the key, is VAULTANSWERSECRET42 sir"]
            )
            .is_some()
        );
        // The same words as the answer in an earlier turn are a leak: only the final reply's
        // place is exempt.
        assert!(
            r.quoted(
                "q",
                "VAULTANSWERSECRET42",
                &[1],
                &["VAULTANSWERSECRET42", "VAULTANSWERSECRET42"]
            )
            .is_some()
        );
        // Not the reference: a hidden state is a leak even as the whole reply.
        let h = Needles::of(&json!({"hidden_state": "entity already acted on"}));
        assert!(
            h.quoted(
                "q",
                "entity already acted on",
                &[0],
                &["entity already acted on"]
            )
            .is_some()
        );
    }
}
