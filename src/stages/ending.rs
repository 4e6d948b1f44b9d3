//! Where a reply ends: white space and words as Python reads them, and whether a reply reached
//! its own end ([`looks_finished`]). The hack scan's `truncated` feature and selection's
//! truncation marking both read replies this way.

use std::sync::LazyLock;

use regex::Regex;

use crate::stages::terms::is_space_byte;

/// White space as Python's `str.isspace` reads it (Unicode's, and the separators \x1c-\x1f).
pub(crate) fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// Python's `len(text.split())`.
pub(crate) fn words(text: &str) -> usize {
    if !text.is_ascii() {
        return text.split(is_space).filter(|w| !w.is_empty()).count();
    }
    crate::stages::terms::ascii_words(text.as_bytes(), is_space_byte)
}

static ANSWER_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:#{2,4}\s*)?[-+]?\$?\d[\d,]*(?:\.\d+)?%?$")
        .unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

static SIGN_OFF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^(?:--+|—|best|all the best|(?:kind|best|warm) regards|regards|thanks|thank you|many thanks|cheers|sincerely|warmly|yours(?: truly| sincerely)?|take care|talk soon)\b",
    )
    .unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

/// Whether a reply reached its own end as far as its text tells: terminal punctuation, a closed
/// code fence, a last line that is the answer itself (`#### 42`), or a sign-off (`Cheers`, or a
/// short capitalised line after one ending in a comma: `Best,\nAlex`).
pub fn looks_finished(reply: &str) -> bool {
    let text = reply.trim_end_matches(is_space);
    let Some(end) = text.chars().last() else {
        return false;
    };
    if ".!?:)\"']}".contains(end) {
        return true;
    }
    if text.ends_with("```") {
        return text.matches("```").count().is_multiple_of(2);
    }
    // Python's `splitlines()`, then `strip()`.
    let lines: Vec<&str> = text
        .split(|c| {
            matches!(
                c,
                '\n' | '\r'
                    | '\x0b'
                    | '\x0c'
                    | '\x1c'
                    | '\x1d'
                    | '\x1e'
                    | '\u{85}'
                    | '\u{2028}'
                    | '\u{2029}'
            )
        })
        .map(|l| l.trim_matches(is_space))
        .filter(|l| !l.is_empty())
        .collect();
    let Some(last) = lines.last() else {
        return false;
    };
    if ANSWER_LINE.is_match(last) {
        return true;
    }
    let words = words(last);
    if words <= 6 && SIGN_OFF.is_match(last) {
        return true;
    }
    let first = last.chars().next().unwrap_or(' ');
    if lines.len() >= 2 && words <= 5 && (first.is_uppercase() || first == '-' || first == '—') {
        let prev = lines[lines.len() - 2];
        return prev.ends_with(',') || SIGN_OFF.is_match(prev);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_replies_are_told_from_cut_ones() {
        for done in [
            "All set.",
            "Here it is:\n```sql\nSELECT 1\n```",
            "The total is\n#### 42",
            "Thanks for waiting\nCheers",
            "I booked it for you\nBest,\nAlex",
            "see you (soon)",
        ] {
            assert!(looks_finished(done), "{done:?}");
        }
        for cut in [
            "",
            "and then the order was",
            "Here it is:\n```sql\nSELECT 1",
            "first line\nsecond line here and more words",
        ] {
            assert!(!looks_finished(cut), "{cut:?}");
        }
    }

    #[test]
    fn words_split_as_python_does() {
        assert_eq!(words("a\x1cb  c\u{2028}d"), 4);
        assert_eq!(words(""), 0);
        assert!(is_space('\x1f') && is_space('\u{85}') && !is_space('x'));
        // A sign-off after a Unicode line separator is an ending.
        assert!(looks_finished(
            "I booked it for you\u{2028}Best,\u{2028}Alex"
        ));
    }
}
