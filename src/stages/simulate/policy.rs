//! A policy text split into rules: one clause each, the grid's rule axis.

use std::sync::LazyLock;

use regex::Regex;

/// Clauses kept on the grid's rule axis by default.
pub const RULE_CAP: usize = 16;
/// Shortest clause kept.
const MIN_CHARS: usize = 8;
/// Longest clause kept (cut at the last space before it).
const MAX_CHARS: usize = 120;

static BREAK: LazyLock<Regex> = LazyLock::new(|| {
    // A line that opens a new part: a heading, a numbered item, a bullet, or a short label.
    Regex::new(r"^\s*(?:#{1,6}\s|\d+[.)]\s|[-*•]\s|[A-Z][^:\n]{0,40}:\s)").expect("a valid pattern")
});
static PREAMBLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:you are|you're|your role(?: is)?|you act as|act as)\b")
        .expect("a valid pattern")
});
static MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:#{1,6}\s+|\d+[.)]\s+|[-*•]\s+)").expect("a valid pattern")
});

/// Splits a sentence-ish chunk after `.`, `!` or `?` followed by white space.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for w in chars.windows(2) {
        let ((_, a), (j, b)) = (w[0], w[1]);
        if matches!(a, '.' | '!' | '?') && b.is_whitespace() {
            out.push(text[start..j].trim().to_owned());
            start = j;
        }
    }
    out.push(text[start..].trim().to_owned());
    out.retain(|s| !s.is_empty());
    out
}

/// Splits `part` into `pieces` when there are at least two and each is long enough to stand alone.
fn split_if_clauses(part: &str, pieces: Vec<String>) -> Vec<String> {
    if pieces.len() >= 2 && pieces.iter().all(|s| s.chars().count() >= MIN_CHARS) {
        pieces
    } else {
        vec![part.to_owned()]
    }
}

/// Cleans one clause; `None` when it is not a rule.
fn clean(clause: &str) -> Option<String> {
    let collapsed = clause.split_whitespace().collect::<Vec<_>>().join(" ");
    let stripped = MARKER.replace(&collapsed, "").trim().to_owned();
    if PREAMBLE.is_match(&stripped) || stripped.chars().count() < MIN_CHARS {
        return None;
    }
    if stripped.chars().count() <= MAX_CHARS {
        return Some(stripped);
    }
    let head: String = stripped.chars().take(MAX_CHARS).collect();
    let cut = head.rfind(' ').map_or(head.as_str(), |i| &head[..i]);
    let cut = cut.trim_end_matches([' ', ',', ';', ':']);
    (cut.chars().count() >= MIN_CHARS).then(|| cut.to_owned())
}

/// The policy's rules in document order, at most `cap`; also the total before the cap.
pub fn rules(policy: &str, cap: usize) -> (Vec<String>, usize) {
    let mut parts: Vec<String> = Vec::new();
    for block in policy.split("\n\n").flat_map(|b| b.split("\r\n\r\n")) {
        let mut current = String::new();
        for line in block.lines() {
            if line.trim().is_empty() {
                continue;
            }
            if BREAK.is_match(line) && !current.trim().is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            if !current.is_empty() {
                current.push('\n');
            }
            current.push_str(line);
        }
        if !current.trim().is_empty() {
            parts.push(current);
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for part in parts {
        let mut part = part.trim().to_owned();
        if PREAMBLE.is_match(&MARKER.replace(&part, "")) {
            // Drop the role sentence; what follows it may still hold rules.
            let cut = part
                .char_indices()
                .find(|(_, c)| matches!(c, '.' | '!' | ';'))
                .map_or(part.len(), |(i, c)| i + c.len_utf8());
            part = part[cut..].trim().to_owned();
            if part.is_empty() {
                continue;
            }
        }
        for chunk in split_if_clauses(&part, sentences(&part)) {
            let pieces: Vec<String> = chunk.split("; ").map(|s| s.trim().to_owned()).collect();
            for clause in split_if_clauses(&chunk, pieces) {
                if let Some(rule) = clean(&clause) {
                    let key = rule.to_lowercase();
                    if !seen.contains(&key) {
                        seen.push(key);
                        out.push(rule);
                    }
                }
            }
        }
    }
    let total = out.len();
    out.truncate(cap);
    (out, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    const POLICY: &str = "You are the support agent for an online store.\n\n1. Always look up the order before acting on it.\n2. Refunds are allowed within 30 days of delivery.\n3. Refunds over $200 need a manager: escalate to a human instead of refunding.\n4. Never promise a refund before the lookup confirms the order exists.\n5. If a tool fails, say so plainly and do not claim the action went through.";

    #[test]
    fn numbered_policy_gives_one_rule_per_item() {
        let (rules, total) = rules(POLICY, RULE_CAP);
        assert_eq!(total, 5);
        assert_eq!(rules[0], "Always look up the order before acting on it.");
        assert_eq!(
            rules[2],
            "Refunds over $200 need a manager: escalate to a human instead of refunding."
        );
        assert!(rules.iter().all(|r| !r.starts_with("You are")));
    }

    #[test]
    fn prose_splits_into_sentences_and_caps() {
        let text = "Be kind to customers. Never share card numbers; always mask them. Short.";
        let (r, _) = rules(text, 16);
        // "Short." is under 8 characters, so the sentences stay whole; the "; " split still runs.
        assert_eq!(
            r,
            [
                "Be kind to customers. Never share card numbers",
                "always mask them. Short."
            ]
        );
        let text = "Be kind to customers always. Never share card numbers; always mask them.";
        let (r, _) = rules(text, 16);
        assert_eq!(
            r,
            [
                "Be kind to customers always.",
                "Never share card numbers",
                "always mask them."
            ]
        );
        let long = format!("Rule {}", "word ".repeat(40));
        let (r, _) = rules(&long, 16);
        assert!(r[0].chars().count() <= MAX_CHARS);
        let many: String = (1..=20).fold(String::new(), |mut s, i| {
            let _ = writeln!(s, "{i}. Rule number {i} applies here.");
            s
        });
        let (r, total) = rules(&many, 16);
        assert_eq!((r.len(), total), (16, 20));
    }
}
