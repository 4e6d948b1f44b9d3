//! Running the checks on a row: each kind's score and reason.

use regex::Regex;
use serde_json::Value;

use super::{Check, Outcome, math};
use crate::pipeline::row::json_eq;

/// What a check sees of a row.
pub(super) struct Row<'a> {
    /// The reply.
    pub(super) reply: &'a str,
    /// Tool calls: name and canonical JSON arguments.
    pub(super) calls: Vec<(&'a str, Option<&'a str>)>,
    /// Reference answers (alternatives), when there are any.
    pub(super) reference: Option<Vec<String>>,
}

/// ASCII punctuation out, lowercase, white space collapsed.
/// `s` as the exact-match check compares it: lowercased, ASCII punctuation dropped, spacing
/// collapsed.
pub(crate) fn normalize(s: &str) -> String {
    s.to_lowercase()
        .chars()
        .filter(|c| !c.is_ascii_punctuation())
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote(s: &str) -> String {
    let head: String = s.chars().take(60).collect();
    format!("{head:?}")
}

/// The JSON a reply holds: all of it, else a fenced `json` block, else the outermost braces.
fn reply_json(reply: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str(reply.trim()) {
        return Some(v);
    }
    if let Some(start) = reply.find("```json") {
        let body = &reply[start + 7..];
        if let Some(end) = body.find("```")
            && let Ok(v) = serde_json::from_str(body[..end].trim())
        {
            return Some(v);
        }
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(a), Some(b)) = (reply.find(open), reply.rfind(close))
            && a < b
            && let Ok(v) = serde_json::from_str(&reply[a..=b])
        {
            return Some(v);
        }
    }
    None
}

/// Whether `got` has every key of `want` with an equal value (numbers compare as numbers).
fn args_match(got: &Value, want: &serde_json::Map<String, Value>) -> bool {
    want.iter()
        .all(|(k, w)| got.get(k).is_some_and(|g| json_eq(g, w)))
}

impl Check {
    pub(super) fn run(&self, row: &Row<'_>) -> Outcome {
        match self {
            Self::Exact { whole } => exact(*whole, row),
            Self::Regex { re, group } => regex(re, *group, row),
            Self::Math { tol, rel } => math_check(*tol, *rel, row),
            Self::JsonSchema(validator) => json_schema(validator, row),
            Self::ToolCalled { tool, args } => tool_called(tool, args.as_ref(), row),
            Self::ToolNotCalled(tool) => tool_not_called(tool, row),
            Self::Sequence { tools, exact } => sequence(tools, *exact, row),
            Self::Length { min, max } => length(*min, *max, row),
            Self::All(parts) => all(parts, row),
            Self::Any(parts) => any(parts, row),
            Self::Not(part) => {
                let (s, why) = part.run(row)?;
                Ok((1.0 - s, format!("not ({why})")))
            }
            Self::Weighted(parts) => weighted(parts, row),
        }
    }

    pub(super) fn needs_reference(&self) -> bool {
        match self {
            Self::Exact { .. } | Self::Math { .. } => true,
            Self::Regex { group, .. } => group.is_some(),
            Self::All(p) | Self::Any(p) => p.iter().any(Self::needs_reference),
            Self::Not(p) => p.needs_reference(),
            Self::Weighted(p) => p.iter().any(|(_, c)| c.needs_reference()),
            _ => false,
        }
    }
}

/// The outcome of a check that needs a reference the row lacks.
fn no_reference(check: &str) -> Outcome {
    Err(format!("{check}: no reference to check against"))
}

/// A pass (1) with reason `yes` or a fail (0) with reason `no`.
#[allow(clippy::unnecessary_wraps, reason = "every check returns an outcome")]
fn pass(ok: bool, yes: String, no: String) -> Outcome {
    Ok(if ok { (1.0, yes) } else { (0.0, no) })
}

/// `exact`: the reply's last line, else the whole reply, normalised, is a reference.
fn exact(whole: bool, row: &Row<'_>) -> Outcome {
    let Some(refs) = &row.reference else {
        return no_reference("exact");
    };
    let wants: Vec<String> = refs.iter().map(|r| normalize(r)).collect();
    if !whole
        && let Some(last) = row
            .reply
            .trim()
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
    {
        let got = normalize(last);
        // Reasons never quote the reference: they are exported beside the reply, and
        // the reference is teacher-only.
        if wants.contains(&got) {
            return Ok((1.0, "exact match (last line)".into()));
        }
    }
    let got = normalize(row.reply);
    if wants.contains(&got) {
        return Ok((1.0, "exact match (full text)".into()));
    }
    Ok((
        0.0,
        format!(
            "no match with the reference; got {}",
            quote(row.reply.trim())
        ),
    ))
}

/// `regex`: the reply matches; with a group, the captured text is a reference.
fn regex(re: &Regex, group: Option<usize>, row: &Row<'_>) -> Outcome {
    let Some(caps) = re.captures(row.reply) else {
        return Ok((0.0, format!("/{}/ did not match", re.as_str())));
    };
    let Some(g) = group else {
        return Ok((1.0, format!("/{}/ matched", re.as_str())));
    };
    let Some(refs) = &row.reference else {
        return no_reference("regex");
    };
    let got = caps.get(g).map_or("", |m| m.as_str()).trim().to_lowercase();
    let ok = refs.iter().any(|r| r.trim().to_lowercase() == got);
    pass(
        ok,
        "captured the reference".into(),
        format!("captured {got:?}, not the reference"),
    )
}

/// `math`: the answer's number is the reference's, within the tolerance.
fn math_check(tol: f64, rel: Option<f64>, row: &Row<'_>) -> Outcome {
    let Some(refs) = &row.reference else {
        return no_reference("math");
    };
    let Some(want) = refs.iter().find_map(|r| math::number(r)) else {
        return Err("math: the reference is not a number".into());
    };
    let answer = math::answer(row.reply);
    let Some(got) = math::number(&answer) else {
        return Ok((0.0, "no number in the answer".into()));
    };
    let tol = rel.map_or(tol, |r| tol.max(r * want.value.abs()));
    let close = |x: f64| (x - want.value).abs() <= tol;
    // `50%` answers 50 and 0.5 alike.
    let ok = close(got.value) || (got.percent && close(got.value / 100.0));
    pass(
        ok,
        format!("got {}, the reference within tolerance", got.value),
        format!("got {}, not the reference within tolerance", got.value),
    )
}

/// `json_schema`: the reply holds JSON valid against the schema.
#[allow(clippy::unnecessary_wraps, reason = "every check returns an outcome")]
fn json_schema(validator: &jsonschema::Validator, row: &Row<'_>) -> Outcome {
    match reply_json(row.reply) {
        None => Ok((0.0, "the reply holds no JSON".into())),
        Some(v) => match validator.validate(&v) {
            Ok(()) => Ok((1.0, "valid against the schema".into())),
            Err(e) => Ok((
                0.0,
                format!(
                    "schema: {}",
                    e.to_string().chars().take(200).collect::<String>()
                ),
            )),
        },
    }
}

/// `tool_called`: the tool was called (with these arguments, when given).
fn tool_called(
    tool: &str,
    args: Option<&serde_json::Map<String, Value>>,
    row: &Row<'_>,
) -> Outcome {
    let named: Vec<_> = row.calls.iter().filter(|(n, _)| *n == tool).collect();
    if named.is_empty() {
        return Ok((0.0, format!("`{tool}` was never called")));
    }
    let Some(want) = args else {
        return Ok((1.0, format!("`{tool}` was called")));
    };
    let ok = named.iter().any(|(_, a)| {
        a.and_then(|a| serde_json::from_str::<Value>(a).ok())
            .is_some_and(|got| args_match(&got, want))
    });
    pass(
        ok,
        format!("`{tool}` was called with {}", Value::Object(want.clone())),
        format!(
            "`{tool}` was called, never with {}",
            Value::Object(want.clone())
        ),
    )
}

/// `tool_not_called`: the tool was never called.
fn tool_not_called(tool: &str, row: &Row<'_>) -> Outcome {
    let n = row.calls.iter().filter(|(t, _)| *t == tool).count();
    pass(
        n == 0,
        format!("`{tool}` was not called"),
        format!(
            "`{tool}` was called {n} time{}",
            if n == 1 { "" } else { "s" }
        ),
    )
}

/// `sequence`: the tools were called in this order (exactly these, with `exact`).
fn sequence(tools: &[String], exact: bool, row: &Row<'_>) -> Outcome {
    let got: Vec<&str> = row.calls.iter().map(|(t, _)| *t).collect();
    let ok = if exact {
        got.len() == tools.len() && got.iter().zip(tools).all(|(a, b)| a == b)
    } else {
        let mut want = tools.iter().peekable();
        for t in &got {
            if want.peek().is_some_and(|w| w == t) {
                want.next();
            }
        }
        want.peek().is_none()
    };
    pass(
        ok,
        format!("calls in order: {}", tools.join(" → ")),
        format!(
            "calls were [{}], want {}[{}]",
            got.join(", "),
            if exact { "exactly " } else { "in order " },
            tools.join(", ")
        ),
    )
}

/// `length`: the reply's length in characters is within the bounds.
fn length(min: Option<usize>, max: Option<usize>, row: &Row<'_>) -> Outcome {
    let n = row.reply.chars().count();
    let ok = min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m);
    let bounds = match (min, max) {
        (Some(a), Some(b)) => format!("{a} to {b}"),
        (Some(a), None) => format!("at least {a}"),
        (None, Some(b)) => format!("at most {b}"),
        (None, None) => "any".into(),
    };
    pass(
        ok,
        format!("reply of {n} characters"),
        format!("reply of {n} characters, want {bounds}"),
    )
}

/// `all`: the worst part's score and reason.
fn all(parts: &[Check], row: &Row<'_>) -> Outcome {
    if parts.is_empty() {
        return Ok((0.0, "all: no checks".into()));
    }
    let mut worst: Option<(f64, String)> = None;
    for p in parts {
        let (s, why) = p.run(row)?;
        if worst.as_ref().is_none_or(|(w, _)| s < *w) {
            worst = Some((s, why));
        }
    }
    Ok(worst.unwrap_or_default())
}

/// `any`: the best part's score and reason; an error only when no part runs.
fn any(parts: &[Check], row: &Row<'_>) -> Outcome {
    let mut best: Option<(f64, String)> = None;
    let mut why_not = None;
    for p in parts {
        match p.run(row) {
            Ok((s, why)) => {
                if best.as_ref().is_none_or(|(b, _)| s > *b) {
                    best = Some((s, why));
                }
            }
            Err(e) => {
                why_not.get_or_insert(e);
            }
        }
    }
    best.ok_or_else(|| why_not.unwrap_or_else(|| "any: no checks".into()))
}

/// `weighted`: the weighted mean of the parts' scores (4 places).
fn weighted(parts: &[(f64, Check)], row: &Row<'_>) -> Outcome {
    let mut sum = 0.0;
    let mut weights = 0.0;
    for (w, p) in parts {
        let (s, _) = p.run(row)?;
        sum += w * s;
        weights += w;
    }
    let score = if weights > 0.0 {
        (sum / weights * 1e4).round() / 1e4
    } else {
        1.0
    };
    Ok((score, format!("weighted: {score}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(reply: &'a str, calls: &[&'a str], reference: Option<&str>) -> Row<'a> {
        Row {
            reply,
            calls: calls.iter().map(|c| (*c, None)).collect(),
            reference: reference.map(|r| vec![r.to_owned()]),
        }
    }

    #[test]
    fn exact_reads_the_last_line_then_the_whole_reply() {
        let r = row("thinking...\nParis.", &[], Some("paris"));
        assert_eq!(
            exact(false, &r),
            Ok((1.0, "exact match (last line)".into()))
        );
        assert_eq!(exact(true, &r).unwrap().0, 0.0);
        assert!(exact(false, &row("Paris", &[], None)).is_err());
    }

    #[test]
    fn sequences_are_in_order_or_exact() {
        let tools = ["a".to_owned(), "c".to_owned()];
        let r = row("", &["a", "b", "c"], None);
        assert_eq!(sequence(&tools, false, &r).unwrap().0, 1.0);
        assert_eq!(sequence(&tools, true, &r).unwrap().0, 0.0);
        assert_eq!(tool_not_called("b", &r).unwrap().1, "`b` was called 1 time");
    }

    #[test]
    fn parts_combine_as_worst_best_and_weighted_mean() {
        let r = row("hello", &[], None);
        let short = || Check::Length {
            min: None,
            max: Some(3),
        };
        let any_length = || Check::Length {
            min: Some(1),
            max: None,
        };
        assert_eq!(all(&[short(), any_length()], &r).unwrap().0, 0.0);
        assert_eq!(any(&[short(), any_length()], &r).unwrap().0, 1.0);
        let w = weighted(&[(3.0, short()), (1.0, any_length())], &r).unwrap();
        assert_eq!(w, (0.25, "weighted: 0.25".into()));
        assert_eq!(
            length(Some(1), Some(3), &r).unwrap().1,
            "reply of 5 characters, want 1 to 3"
        );
    }
}
