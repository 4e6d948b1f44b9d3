//! Reading numbers out of answers: the last `\boxed{}`, else what follows "the answer is",
//! else the last line; then the first number there, with fractions, percent, thousands
//! separators, `$` and units read as a person would.

use std::sync::LazyLock;

use regex::Regex;

/// A number read from text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Number {
    /// The value.
    pub value: f64,
    /// Written with `%`.
    pub percent: bool,
}

static ANSWER_IS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:answer|result|solution)\s*(?:is|=|:)\s*([^\n]+)")
        .unwrap_or_else(|_| unreachable!())
});
static FRAC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\\[dt]?frac\s*\{\s*(-?[\d.]+)\s*\}\s*\{\s*(-?[\d.]+)\s*\}")
        .unwrap_or_else(|_| unreachable!())
});
static SLASH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(-?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)").unwrap_or_else(|_| unreachable!())
});
static NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(\s*%)?")
        .unwrap_or_else(|_| unreachable!())
});

/// The contents of the last `\boxed{...}` (braces balanced).
fn boxed(text: &str) -> Option<&str> {
    let start = text.rfind("\\boxed{")? + "\\boxed{".len();
    let mut depth = 1;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..start + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// The part of a reply that holds the answer.
pub fn answer(reply: &str) -> String {
    if let Some(b) = boxed(reply) {
        return b.to_owned();
    }
    if let Some(c) = ANSWER_IS.captures_iter(reply).last().and_then(|c| c.get(1)) {
        // A full stop ends the sentence; a decimal point does not.
        let text = c.as_str().trim();
        return text.strip_suffix('.').unwrap_or(text).to_owned();
    }
    reply
        .trim()
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_owned()
}

/// The number `text` states, if any.
pub fn number(text: &str) -> Option<Number> {
    let mut text: String = text.chars().filter(|c| *c != '$').collect();
    // `\%` is a percent sign; spacing and sizing commands say nothing.
    text = text.replace("\\%", "%");
    for latex in ["\\!", "\\,", "\\left", "\\right"] {
        text = text.replace(latex, "");
    }
    let text = text.as_str();
    for re in [&*FRAC, &*SLASH] {
        if let Some(c) = re.captures(text) {
            let a: f64 = c[1].parse().ok()?;
            let b: f64 = c[2].parse().ok()?;
            if b != 0.0 {
                return Some(Number {
                    value: a / b,
                    percent: false,
                });
            }
        }
    }
    let m = NUMBER.captures(text)?;
    let digits = m
        .get(0)?
        .as_str()
        .trim_end_matches([' ', '%'])
        .replace(',', "");
    Some(Number {
        value: digits.parse().ok()?,
        percent: m.get(1).is_some(),
    })
}
