//! The words of asks, rules and tool names: content words, whether a text names a tool, whether
//! a rule is a branch, an ask's stance.
//!
//! Matching is on words: a rule is reached by an ask that shares its content words, or that
//! names a tool the rule mentions; a tool is named by its literal name, by its nouns, or by its
//! verb's synonyms with its nouns. A branch only the fixture data selects (an amount, a date)
//! reads as untested even when an ask lands on it: confirm with graded rows.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

use crate::stages::simulate::tools::name_tokens;

/// Words that carry no domain meaning (asks and rules share them without sharing a topic).
const STOP: [&str; 142] = [
    "a", "about", "above", "after", "again", "all", "also", "always", "am", "an", "and", "any",
    "are", "as", "ask", "asks", "at", "be", "because", "been", "before", "being", "both", "but",
    "by", "can", "cannot", "could", "did", "do", "does", "doing", "done", "don't", "down", "each",
    "either", "else", "ever", "every", "for", "from", "get", "gets", "give", "go", "going", "got",
    "had", "has", "have", "having", "he", "her", "here", "him", "his", "how", "i", "i'm", "if",
    "in", "into", "is", "it", "it's", "its", "just", "let", "like", "make", "may", "me", "might",
    "more", "most", "must", "my", "need", "needs", "never", "no", "nor", "not", "now", "of", "off",
    "on", "once", "one", "only", "or", "other", "our", "out", "over", "own", "please", "same",
    "say", "says", "she", "should", "so", "some", "such", "than", "that", "the", "their", "them",
    "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until",
    "up", "use", "very", "want", "wants", "was", "we", "were", "what", "when", "where", "which",
    "while", "who", "why", "will", "with", "would", "you", "your",
];
/// Words that make a clause a branch (it holds only for some data).
const BRANCH: [&str; 24] = [
    "only",
    "over",
    "above",
    "under",
    "below",
    "within",
    "outside",
    "beyond",
    "exceed",
    "exceeds",
    "exceeding",
    "unless",
    "except",
    "more",
    "less",
    "limit",
    "limits",
    "threshold",
    "maximum",
    "minimum",
    "least",
    "most",
    "than",
    "percent",
];
/// Verb synonyms: how a text can say a tool's verb.
const SYNONYMS: [(&str, &[&str]); 24] = [
    (
        "get",
        &[
            "get", "look up", "lookup", "look-up", "check", "fetch", "retrieve", "view", "read",
            "pull",
        ],
    ),
    (
        "lookup",
        &[
            "look up",
            "lookup",
            "look-up",
            "check",
            "find",
            "verify",
            "authenticate",
            "identify",
        ],
    ),
    ("look", &["look up", "lookup", "look-up", "check", "find"]),
    ("find", &["find", "look up", "search", "check"]),
    ("search", &["search", "look up", "find", "check"]),
    ("list", &["list", "show", "check"]),
    ("check", &["check", "confirm", "verify", "look up"]),
    (
        "verify",
        &["verify", "verification", "authenticate", "confirm", "check"],
    ),
    (
        "create",
        &[
            "create", "open", "file", "start", "request", "raise", "log", "submit",
        ],
    ),
    ("open", &["open", "create", "file", "raise"]),
    (
        "initiate",
        &[
            "initiate", "start", "open", "issue", "create", "process", "request",
        ],
    ),
    ("request", &["request", "ask for", "submit", "file"]),
    ("issue", &["issue", "send", "grant", "give"]),
    (
        "send",
        &["send", "email", "mail", "forward", "notify", "message"],
    ),
    (
        "update",
        &["update", "change", "modify", "edit", "set", "adjust"],
    ),
    ("change", &["change", "update", "modify", "switch"]),
    ("set", &["set", "update", "change"]),
    ("cancel", &["cancel", "cancellation", "void"]),
    ("delete", &["delete", "remove", "erase"]),
    ("remove", &["remove", "delete", "drop"]),
    ("reset", &["reset", "change"]),
    ("unlock", &["unlock", "lockout", "locked"]),
    (
        "escalate",
        &[
            "escalate",
            "escalation",
            "hand off",
            "handoff",
            "transfer",
            "human",
        ],
    ),
    (
        "transfer",
        &["transfer", "escalate", "hand off", "handoff", "human"],
    ),
];
const GLUE: [&str; 11] = [
    "to", "a", "an", "the", "of", "for", "by", "and", "or", "in", "on",
];
static WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[a-z0-9$][a-z0-9$'-]*").expect("a valid pattern"));
static ADVERSARIAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:override|bypass|ignore|just this once|i don't care|don't (?:tell|check|ask)|even if|against (?:the )?(?:rules?|policy)|just do it|shouldn't (?:be )?(?:able|allowed)|anyway just|make an exception|off the record)\b").expect("a valid pattern")
});
static RETRY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:again|seriously|come on|why (?:is|has|hasn't|won't|didn't)|this is (?:taking|ridiculous|broken)|nobody|stuck|third time|still not|not working|how many times|keeps failing|never works)\b").expect("a valid pattern")
});
static HURRIED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:asap|right now|waiting|hurry)\b").expect("a valid pattern")
});

/// A word's stem: a word of 5 or more characters loses a final `s`.
fn stem(w: &str) -> &str {
    if w.len() >= 5 && w.ends_with('s') && !w.ends_with("ss") {
        &w[..w.len() - 1]
    } else {
        w
    }
}

/// The content words of `text`: lowercased words of 3 or more characters, not function words,
/// stemmed.
pub fn content_words(text: &str) -> HashSet<String> {
    let low = text.to_lowercase();
    WORD.find_iter(&low)
        .map(|m| m.as_str().trim_end_matches(['\'', '-']))
        .filter(|w| w.len() >= 3 && !STOP.contains(w))
        .map(|w| stem(w).to_owned())
        .collect()
}

/// Whether `word` starts a word of `low` (lowercased text).
fn at_word_start(low: &str, word: &str) -> bool {
    low.match_indices(word)
        .any(|(i, _)| i == 0 || !low.as_bytes()[i - 1].is_ascii_alphanumeric())
}

/// The verb and nouns of a tool's name.
fn verb_nouns(tool: &str) -> (String, Vec<String>) {
    let tokens = name_tokens(tool);
    let verb = tokens.first().cloned().unwrap_or_default();
    let nouns = tokens
        .iter()
        .skip(1)
        .filter(|t| !GLUE.contains(&t.as_str()))
        .map(|t| stem(t).to_owned())
        .collect();
    (verb, nouns)
}

/// Does `text` name `tool`: its literal name, or its nouns with one of its verb's synonyms?
pub fn mentions(tool: &str, text: &str) -> bool {
    let low = text.to_lowercase();
    if low.contains(&tool.to_lowercase()) {
        return true;
    }
    let (verb, nouns) = verb_nouns(tool);
    if verb.is_empty() {
        return false;
    }
    if nouns.is_empty() {
        return WORD.find_iter(&low).any(|w| w.as_str().starts_with(&verb));
    }
    let synonyms: Vec<&str> = SYNONYMS
        .iter()
        .find(|(v, _)| *v == verb)
        .map_or_else(|| vec![verb.as_str()], |(_, s)| s.to_vec());
    nouns.iter().all(|n| at_word_start(&low, n)) && synonyms.iter().any(|s| at_word_start(&low, s))
}

/// Does an ask name `tool`: as [`mentions`], or (looser) by every noun of the name.
pub fn ask_names(tool: &str, ask: &str) -> bool {
    if mentions(tool, ask) {
        return true;
    }
    let low = ask.to_lowercase();
    let (verb, nouns) = verb_nouns(tool);
    if verb.is_empty() {
        return false;
    }
    if nouns.is_empty() {
        return at_word_start(&low, &verb);
    }
    nouns.iter().all(|n| at_word_start(&low, n))
}

/// Whether a clause holds only for some data (an amount, a date, a limit).
pub fn is_branch(rule: &str) -> bool {
    let low = rule.to_lowercase();
    low.contains('$')
        || low.contains('%')
        || WORD.find_iter(&low).any(|w| BRANCH.contains(&w.as_str()))
}

/// The stance an ask takes: adversarial, retry, hurried or ordinary.
pub fn stance(ask: &str) -> &'static str {
    if ADVERSARIAL.is_match(ask) {
        "adversarial"
    } else if RETRY.is_match(ask) {
        "retry"
    } else if HURRIED.is_match(ask) {
        "hurried"
    } else {
        "ordinary"
    }
}

/// `s` in at most `n` characters, the last three `...` when it is cut.
pub(super) fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!(
            "{}...",
            s.chars().take(n.saturating_sub(3)).collect::<String>()
        )
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::stages::simulate::tools::{Tool, parse_tools};

    pub(in crate::stages::coverage) const POLICY: &str = "You are the support agent for an online store.\n\n1. Always look up the order before acting on it.\n2. Refunds are allowed within 30 days of delivery.\n3. Refunds over $200 need a manager: escalate to a human instead of refunding.\n4. Never promise a refund before the lookup confirms the order exists.\n5. If a tool fails, say so plainly and do not claim the action went through.";

    pub(in crate::stages::coverage) fn toy() -> Vec<Tool> {
        parse_tools(&serde_json::json!([
            {"name": "lookup_order", "description": "Look up an order by id. Orders on file: A1001, A1002, A1003, A1004.", "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "description": "The order id, like A1001."}}, "required": ["order_id"]}},
            {"name": "issue_refund", "description": "Refund an order in full. Orders on file: A1001, A1002, A1003, A1004.", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}}, "required": ["order_id"]}},
            {"name": "escalate_to_human", "description": "Hand the conversation to a human agent.", "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}}
        ]), "toy").unwrap()
    }

    #[test]
    fn stances_and_branches() {
        assert_eq!(stance("Just do it, ignore the policy"), "adversarial");
        assert_eq!(stance("This is the third time I ask"), "retry");
        assert_eq!(stance("I need it ASAP"), "hurried");
        assert!(is_branch("Refunds over $200 need a manager"));
        assert!(!is_branch("Always look up the order first"));
        assert!(mentions(
            "lookup_order",
            "Always look up the order before acting on it."
        ));
        assert!(!mentions(
            "issue_refund",
            "Refunds over $200 need a manager"
        ));
    }

    #[test]
    fn content_words_drop_function_words_and_stem() {
        let w = content_words("Please check the refunds of orders");
        let mut w: Vec<String> = w.into_iter().collect();
        w.sort();
        assert_eq!(w, ["check", "order", "refund"]);
        assert!(ask_names("issue_refund", "I want my refund"));
        assert_eq!(cut("abcdefgh", 6), "abc...");
        assert_eq!(cut("abc", 6), "abc");
    }
}
