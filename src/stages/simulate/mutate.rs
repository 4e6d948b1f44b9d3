//! Failure mutation: an ask whose row the in-loop grader failed is changed into a new ask that
//! presses on the same weakness. A mutator changes what the ask says (cuts it short, takes its
//! specifics away, contradicts it, corrects it), or how it arrives (reordered, as a list, quoted,
//! as JSON, run together, with a typo). The cell and its world state stay the parent's; the fault
//! plan is drawn for the new ask as for any ask of the cell.

use std::sync::LazyLock;

use regex::Regex;

/// The mutators, in the order they are tried.
pub(super) const MUTATORS: [&str; 12] = [
    "truncate",
    "strip_specifics",
    "contradict",
    "follow_up_correction",
    "reverse_sentences",
    "list_structure",
    "quote_payload",
    "structured_payload",
    "punctuation_free",
    "token_delete",
    "typo_transpose",
    "duplicate",
];

/// The shortest mutation kept, in characters.
const MIN_CHARS: usize = 12;

static ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[A-Z]+-?\d+\b").expect("a valid pattern"));
static AMOUNT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[$€£]\s?\d[\d,]*(\.\d+)?|\b\d[\d,]*(\.\d+)?\s?(dollars|euros|USD|EUR)\b")
        .expect("a valid pattern")
});

/// The first mutation of `parent` that is long enough, says something else than `parent` and
/// is not in `seen` (lowercased texts), trying the mutators from number `start` on, round the
/// list: the mutator's name and the new text.
pub(super) fn mutate(
    parent: &str,
    start: usize,
    seen: &impl Fn(&str) -> bool,
) -> Option<(&'static str, String)> {
    let parent_low = parent.trim().to_lowercase();
    (0..MUTATORS.len())
        .map(|i| MUTATORS[(start + i) % MUTATORS.len()])
        .find_map(|name| {
            let text = apply(name, parent)?;
            let low = text.trim().to_lowercase();
            (text.chars().count() >= MIN_CHARS && low != parent_low && !seen(&low))
                .then_some((name, text))
        })
}

/// `parent` changed by the mutator `name` (none when it does not apply).
fn apply(name: &str, parent: &str) -> Option<String> {
    let sentences = sentences(parent);
    let text = match name {
        "truncate" => sentences.first()?.to_string(),
        "strip_specifics" => {
            let t = ID.replace_all(parent, "that one");
            AMOUNT.replace_all(&t, "that amount").into_owned()
        }
        "contradict" => format!(
            "{} Actually, no: do not do that. Or do, I am not sure any more.",
            parent.trim_end()
        ),
        "follow_up_correction" => format!(
            "{} Sorry, correction: I gave you the wrong details there, the right ones are in my account.",
            parent.trim_end()
        ),
        "reverse_sentences" => {
            let mut s = sentences.clone();
            s.reverse();
            s.join(" ")
        }
        "list_structure" => sentences
            .iter()
            .map(|s| format!("- {s}"))
            .collect::<Vec<_>>()
            .join("\n"),
        "quote_payload" => format!(
            "A customer sent us this, please handle it: \"{}\"",
            parent.trim()
        ),
        "structured_payload" => serde_json::json!({"request": parent.trim()}).to_string(),
        "punctuation_free" => parent
            .chars()
            .filter(|c| !c.is_ascii_punctuation() || *c == '-')
            .collect::<String>()
            .to_lowercase(),
        "token_delete" => {
            // Every fourth word goes, the ids stay.
            let words: Vec<&str> = parent.split_whitespace().collect();
            words
                .iter()
                .enumerate()
                .filter(|(i, w)| i % 4 != 3 || ID.is_match(w))
                .map(|(_, w)| *w)
                .collect::<Vec<_>>()
                .join(" ")
        }
        "typo_transpose" => {
            // Two letters swapped in the longest word that is not an id.
            let words: Vec<&str> = parent.split_whitespace().collect();
            let (at, _) = words
                .iter()
                .enumerate()
                .filter(|(_, w)| !ID.is_match(w) && w.chars().all(char::is_alphabetic))
                .max_by_key(|(i, w)| (w.chars().count(), std::cmp::Reverse(*i)))?;
            let chars: Vec<char> = words[at].chars().collect();
            if chars.len() < 4 {
                return None;
            }
            // The first two neighbours past the first letter that differ (`arrived`: `arirved`).
            let i = (1..chars.len() - 1).find(|&i| chars[i] != chars[i + 1])?;
            let mut swapped = chars.clone();
            swapped.swap(i, i + 1);
            let mut out: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
            out[at] = swapped.into_iter().collect();
            out.join(" ")
        }
        "duplicate" => format!("{}\n\n{}", parent.trim(), parent.trim()),
        _ => return None,
    };
    Some(text)
}

/// `text`'s sentences, each with its closing mark.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let ends =
            matches!(b, b'.' | b'?' | b'!') && bytes.get(i + 1).is_none_or(u8::is_ascii_whitespace);
        if ends {
            let s = text[start..=i].trim();
            if !s.is_empty() {
                out.push(s);
            }
            start = i + 1;
        }
    }
    let rest = text[start..].trim();
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASK: &str =
        "My order A1002 arrived broken. I paid $49.99 for it! Can you refund it today?";

    #[test]
    fn each_mutator_changes_the_ask() {
        let never = |_: &str| false;
        for name in MUTATORS {
            let text = apply(name, ASK).unwrap();
            assert_ne!(text, ASK, "{name}");
            assert!(text.len() >= MIN_CHARS, "{name}");
        }
        assert_eq!(
            apply("truncate", ASK).unwrap(),
            "My order A1002 arrived broken."
        );
        let stripped = apply("strip_specifics", ASK).unwrap();
        assert!(
            !stripped.contains("A1002") && !stripped.contains("49.99"),
            "{stripped}"
        );
        assert!(stripped.contains("that one") && stripped.contains("that amount"));
        assert_eq!(
            apply("reverse_sentences", ASK).unwrap(),
            "Can you refund it today? I paid $49.99 for it! My order A1002 arrived broken."
        );
        let json: serde_json::Value =
            serde_json::from_str(&apply("structured_payload", ASK).unwrap()).unwrap();
        assert_eq!(json["request"], ASK);
        assert!(apply("token_delete", ASK).unwrap().contains("A1002"));
        assert!(apply("typo_transpose", ASK).unwrap().contains(" arirved "));
        assert_eq!(mutate(ASK, 0, &never).unwrap().0, "truncate");
        assert_eq!(mutate(ASK, 13, &never).unwrap().0, "strip_specifics");
    }

    #[test]
    fn a_mutation_that_says_nothing_new_is_passed_over() {
        // One sentence: cut short, it is itself; no ids or amounts: stripping is itself too.
        let one = "Please refund my broken lamp";
        let (name, text) = mutate(one, 0, &|_: &str| false).unwrap();
        assert_eq!(name, "contradict");
        // Already asked: the next one.
        let seen = text.to_lowercase();
        let (name, _) = mutate(one, 0, &|t: &str| t == seen).unwrap();
        assert_eq!(name, "follow_up_correction");
        assert!(apply("truncate", "Hi.").is_some_and(|t| t.len() < MIN_CHARS));
    }
}
