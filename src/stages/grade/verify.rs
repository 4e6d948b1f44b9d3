//! Built-in verifiers, configured in a TOML judge file and run on each batch in parallel.
//!
//! ```toml
//! name = "refund-policy"             # judge_name (default: the file's stem)
//! version = "3"                      # lineage.judge_version
//! reference = "privileged.reference" # where reference answers are (the default)
//!
//! [check]
//! all = [
//!   { regex = "refund(ed)?" },
//!   { tool_called = { tool = "issue_refund", args = { order_id = "A1" } } },
//!   { not = { tool_called = "delete_account" } },
//!   { length = { max = 800 } },
//! ]
//! ```
//!
//! A check scores a row in [0, 1], or cannot run (no reference to compare with): then the row is
//! `missing_reward`, never 0.

use std::path::Path;

use datafusion::arrow::array::{Array, AsArray, ListArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::ArrowNativeType;
use rayon::prelude::*;
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use serde_json::Value;

use super::{Judge, Status, Verdict};
use crate::error::{Error, Result};
use crate::pipeline::row::json_eq;
use crate::schema::col;

/// A verifier judge file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: Option<String>,
    version: Option<String>,
    reference: Option<String>,
    check: Spec,
}

/// A string, or the full table form.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OrStr<T> {
    Str(String),
    Full(T),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Spec {
    Exact(ExactSpec),
    Regex(OrStr<RegexSpec>),
    Math(MathSpec),
    JsonSchema(toml::Value),
    ToolCalled(OrStr<ToolSpec>),
    ToolNotCalled(String),
    Sequence(SequenceSpec),
    Length(LengthSpec),
    All(Vec<Spec>),
    Any(Vec<Spec>),
    Not(Box<Spec>),
    Weighted(Vec<WeightedSpec>),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExactSpec {
    /// Compare the whole reply, not its last line.
    #[serde(default)]
    whole: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegexSpec {
    pattern: String,
    #[serde(default)]
    case_sensitive: bool,
    /// Compare this capture group with the reference.
    group: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MathSpec {
    tol: Option<f64>,
    rel: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolSpec {
    tool: String,
    /// Arguments the call must have (others may be there too).
    args: Option<toml::Table>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SequenceSpec {
    tools: Vec<String>,
    /// The calls must be exactly these, not just contain them in order.
    #[serde(default)]
    exact: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LengthSpec {
    min: Option<usize>,
    max: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightedSpec {
    weight: f64,
    check: Spec,
}

/// A compiled check.
enum Check {
    Exact {
        whole: bool,
    },
    Regex {
        re: Regex,
        group: Option<usize>,
    },
    Math {
        tol: f64,
        rel: Option<f64>,
    },
    JsonSchema(Box<jsonschema::Validator>),
    ToolCalled {
        tool: String,
        args: Option<serde_json::Map<String, Value>>,
    },
    ToolNotCalled(String),
    Sequence {
        tools: Vec<String>,
        exact: bool,
    },
    Length {
        min: Option<usize>,
        max: Option<usize>,
    },
    All(Vec<Check>),
    Any(Vec<Check>),
    Not(Box<Check>),
    Weighted(Vec<(f64, Check)>),
}

/// What a check says about a row: a score and why, or that it cannot run, and why.
type Outcome = std::result::Result<(f64, String), String>;

fn compile(spec: Spec, at: &str) -> Result<Check> {
    let bad = |m: String| Error::Usage(format!("the verifier at `{at}`: {m}"));
    Ok(match spec {
        Spec::Exact(e) => Check::Exact { whole: e.whole },
        Spec::Regex(r) => {
            let r = match r {
                OrStr::Str(pattern) => RegexSpec {
                    pattern,
                    case_sensitive: false,
                    group: None,
                },
                OrStr::Full(r) => r,
            };
            let re = RegexBuilder::new(&r.pattern)
                .case_insensitive(!r.case_sensitive)
                .build()
                .map_err(|e| bad(format!("bad regex: {e}")))?;
            if let Some(g) = r.group
                && g >= re.captures_len()
            {
                return Err(bad(format!("the pattern has no group {g}")));
            }
            Check::Regex { re, group: r.group }
        }
        Spec::Math(m) => Check::Math {
            tol: m.tol.unwrap_or(1e-6),
            rel: m.rel,
        },
        Spec::JsonSchema(schema) => {
            let schema = serde_json::to_value(schema).map_err(|e| bad(e.to_string()))?;
            let validator =
                jsonschema::validator_for(&schema).map_err(|e| bad(format!("bad schema: {e}")))?;
            Check::JsonSchema(Box::new(validator))
        }
        Spec::ToolCalled(OrStr::Str(tool)) => Check::ToolCalled { tool, args: None },
        Spec::ToolCalled(OrStr::Full(t)) => Check::ToolCalled {
            tool: t.tool,
            args: match t.args {
                None => None,
                Some(a) => match serde_json::to_value(a).map_err(|e| bad(e.to_string()))? {
                    Value::Object(m) => Some(m),
                    _ => return Err(bad("`args` must be a table".into())),
                },
            },
        },
        Spec::ToolNotCalled(tool) => Check::ToolNotCalled(tool),
        Spec::Sequence(s) => Check::Sequence {
            tools: s.tools,
            exact: s.exact,
        },
        Spec::Length(l) => Check::Length {
            min: l.min,
            max: l.max,
        },
        Spec::All(parts) | Spec::Any(parts) if parts.is_empty() => {
            return Err(bad("an empty list checks nothing".into()));
        }
        Spec::Weighted(parts) if parts.iter().all(|p| p.weight == 0.0) => {
            return Err(bad("weights that are all 0 (or none) check nothing".into()));
        }
        Spec::All(parts) => Check::All(compile_all(parts, at, "all")?),
        Spec::Any(parts) => Check::Any(compile_all(parts, at, "any")?),
        Spec::Not(part) => Check::Not(Box::new(compile(*part, &format!("{at}.not"))?)),
        Spec::Weighted(parts) => Check::Weighted(
            parts
                .into_iter()
                .enumerate()
                .map(|(i, p)| {
                    if !(p.weight.is_finite() && p.weight >= 0.0) {
                        return Err(bad(format!("weight {} must be a number >= 0", p.weight)));
                    }
                    Ok((p.weight, compile(p.check, &format!("{at}.weighted[{i}]"))?))
                })
                .collect::<Result<_>>()?,
        ),
    })
}

fn compile_all(parts: Vec<Spec>, at: &str, kind: &str) -> Result<Vec<Check>> {
    parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| compile(p, &format!("{at}.{kind}[{i}]")))
        .collect()
}

/// What a check sees of a row.
struct Row<'a> {
    reply: &'a str,
    /// Tool calls: name and canonical JSON arguments.
    calls: Vec<(&'a str, Option<&'a str>)>,
    /// Reference answers (alternatives), when there are any.
    reference: Option<Vec<String>>,
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
    fn name(&self) -> &'static str {
        match self {
            Self::Exact { .. } => "exact",
            Self::Regex { .. } => "regex",
            Self::Math { .. } => "math",
            Self::JsonSchema(_) => "json_schema",
            Self::ToolCalled { .. } => "tool_called",
            Self::ToolNotCalled(_) => "tool_not_called",
            Self::Sequence { .. } => "sequence",
            Self::Length { .. } => "length",
            Self::All(_) => "all",
            Self::Any(_) => "any",
            Self::Not(_) => "not",
            Self::Weighted(_) => "weighted",
        }
    }

    fn run(&self, row: &Row<'_>) -> Outcome {
        let no_reference = || Err(format!("{}: no reference to check against", self.name()));
        let pass = |ok: bool, yes: String, no: String| Ok(if ok { (1.0, yes) } else { (0.0, no) });
        match self {
            Self::Exact { whole } => {
                let Some(refs) = &row.reference else {
                    return no_reference();
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
            Self::Regex { re, group } => {
                let Some(caps) = re.captures(row.reply) else {
                    return Ok((0.0, format!("/{}/ did not match", re.as_str())));
                };
                let Some(g) = group else {
                    return Ok((1.0, format!("/{}/ matched", re.as_str())));
                };
                let Some(refs) = &row.reference else {
                    return no_reference();
                };
                let got = caps
                    .get(*g)
                    .map_or("", |m| m.as_str())
                    .trim()
                    .to_lowercase();
                let ok = refs.iter().any(|r| r.trim().to_lowercase() == got);
                pass(
                    ok,
                    "captured the reference".into(),
                    format!("captured {got:?}, not the reference"),
                )
            }
            Self::Math { tol, rel } => {
                let Some(refs) = &row.reference else {
                    return no_reference();
                };
                let Some(want) = refs.iter().find_map(|r| math::number(r)) else {
                    return Err("math: the reference is not a number".into());
                };
                let answer = math::answer(row.reply);
                let Some(got) = math::number(&answer) else {
                    return Ok((0.0, "no number in the answer".into()));
                };
                let tol = rel.map_or(*tol, |r| tol.max(r * want.value.abs()));
                let close = |x: f64| (x - want.value).abs() <= tol;
                // `50%` answers 50 and 0.5 alike.
                let ok = close(got.value) || (got.percent && close(got.value / 100.0));
                pass(
                    ok,
                    format!("got {}, the reference within tolerance", got.value),
                    format!("got {}, not the reference within tolerance", got.value),
                )
            }
            Self::JsonSchema(validator) => match reply_json(row.reply) {
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
            },
            Self::ToolCalled { tool, args } => {
                let named: Vec<_> = row.calls.iter().filter(|(n, _)| n == tool).collect();
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
            Self::ToolNotCalled(tool) => {
                let n = row.calls.iter().filter(|(t, _)| t == tool).count();
                pass(
                    n == 0,
                    format!("`{tool}` was not called"),
                    format!(
                        "`{tool}` was called {n} time{}",
                        if n == 1 { "" } else { "s" }
                    ),
                )
            }
            Self::Sequence { tools, exact } => {
                let got: Vec<&str> = row.calls.iter().map(|(t, _)| *t).collect();
                let ok = if *exact {
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
                        if *exact { "exactly " } else { "in order " },
                        tools.join(", ")
                    ),
                )
            }
            Self::Length { min, max } => {
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
            Self::All(parts) => {
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
            Self::Any(parts) => {
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
            Self::Not(part) => {
                let (s, why) = part.run(row)?;
                Ok((1.0 - s, format!("not ({why})")))
            }
            Self::Weighted(parts) => {
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
        }
    }

    fn needs_reference(&self) -> bool {
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

/// Reading numbers out of answers: the last `\boxed{}`, else what follows "the answer is",
/// else the last line; then the first number there, with fractions, percent, thousands
/// separators, `$` and units read as a person would.
pub mod math {
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
}

/// A stack of verifiers from a judge file.
pub struct VerifierJudge {
    name: String,
    version: Option<String>,
    reference: String,
    check: Check,
}

impl VerifierJudge {
    /// Reads a judge file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::read(path, e))?;
        let stem = path
            .file_stem()
            .map_or("verify".into(), |s| s.to_string_lossy().into_owned());
        Self::parse(&text, &path.display().to_string(), &stem)
    }

    /// Reads a judge file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str, default_name: &str) -> Result<Self> {
        let file: File = toml::from_str(text)
            .map_err(|e| Error::Usage(format!("the judge file `{origin}`: {e}")))?;
        let check = compile(file.check, "check")
            .map_err(|e| Error::Usage(format!("the judge file `{origin}`: {e}")))?;
        Ok(Self {
            name: file.name.unwrap_or_else(|| default_name.to_owned()),
            version: file.version,
            reference: file
                .reference
                .unwrap_or_else(|| "privileged.reference".into()),
            check,
        })
    }
}

/// The column a reference path starts with, as text, for a whole batch.
fn reference_column(batch: &RecordBatch, path: &str) -> Result<StringArray> {
    let column = path.split_once('.').map_or(path, |(c, _)| c);
    let array = batch.column_by_name(column).ok_or_else(|| {
        Error::Usage(format!(
            "the verifier's reference `{path}`: the rows have no column `{column}`"
        ))
    })?;
    let text =
        datafusion::arrow::compute::cast(array, &datafusion::arrow::datatypes::DataType::Utf8)
            .map_err(|e| Error::Usage(format!("the verifier's reference `{path}`: {e}")))?;
    Ok(text.as_string::<i32>().clone())
}

/// The reference answers at `path` (`column` or `column.json.path`) of row `i`, given the
/// path's column as text.
fn reference_at(text: &StringArray, path: &str, i: usize) -> Option<Vec<String>> {
    let rest = path.split_once('.').map(|(_, r)| r);
    if text.is_null(i) {
        return None;
    }
    let raw = text.value(i);
    let value = match rest {
        None => return Some(vec![raw.to_owned()]),
        Some(rest) => {
            let mut v: Value = serde_json::from_str(raw).ok()?;
            for part in rest.split('.') {
                v = match v {
                    Value::Object(mut o) => o.shift_remove(part)?,
                    Value::Array(mut a) => {
                        let i: usize = part.parse().ok()?;
                        (i < a.len()).then(|| a.swap_remove(i))?
                    }
                    _ => return None,
                };
            }
            v
        }
    };
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    };
    let out: Vec<String> = match &value {
        Value::Array(items) => items.iter().filter_map(text).collect(),
        other => text(other).into_iter().collect(),
    };
    (!out.is_empty()).then_some(out)
}

impl Judge for VerifierJudge {
    fn name(&self) -> &str {
        &self.name
    }

    fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    fn judge(&mut self, batch: &RecordBatch) -> Result<Vec<Verdict>> {
        let reply: &StringArray = batch
            .column_by_name(col::FINAL_TEXT)
            .ok_or_else(|| Error::missing_column("grade", col::FINAL_TEXT, &batch.schema()))?
            .as_string();
        let steps: &ListArray = batch
            .column_by_name(col::STEPS)
            .ok_or_else(|| Error::missing_column("grade", col::STEPS, &batch.schema()))?
            .as_list();
        let step_items = steps.values().as_struct();
        let tools = step_items.column(0).as_string::<i32>();
        let args = step_items.column(1).as_string::<i32>();
        let offsets = steps.value_offsets();
        let references = if self.check.needs_reference() {
            Some(reference_column(batch, &self.reference)?)
        } else {
            None
        };
        let check = &self.check;
        let reference = &self.reference;
        Ok((0..batch.num_rows())
            .into_par_iter()
            .with_min_len(256)
            .map(|i| {
                let (start, end) = (offsets[i].as_usize(), offsets[i + 1].as_usize());
                let row = Row {
                    reply: if reply.is_valid(i) {
                        reply.value(i)
                    } else {
                        ""
                    },
                    calls: (start..end)
                        .filter(|&s| tools.is_valid(s))
                        .map(|s| (tools.value(s), args.is_valid(s).then(|| args.value(s))))
                        .collect(),
                    reference: references
                        .as_ref()
                        .and_then(|text| reference_at(text, reference, i)),
                };
                match check.run(&row) {
                    Ok((score, reason)) => Verdict::ok(score, reason),
                    Err(why) => Verdict::failed(
                        Status::MissingReward,
                        format!("{why} (looked in `{reference}`)"),
                    ),
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::math::{answer, number};

    fn read(reply: &str) -> Option<f64> {
        number(&answer(reply)).map(|n| n.value)
    }

    #[test]
    #[allow(
        clippy::approx_constant,
        reason = "3.14 is the reference's test answer, not pi"
    )]
    fn numbers_read_as_a_person_would() {
        // The reference's own vectors, and where it misreads (it reads 3.0, 1234.0, 2.0, 2.0).
        let cases = [
            ("The answer is 5", Some(5.0)),
            ("so \\boxed{\\frac{1}{2}}", Some(0.5)),
            ("answer: 3/4", Some(0.75)),
            ("x = -1/2", Some(-0.5)),
            ("answer: \\frac{-3}{4}", Some(-0.75)),
            ("I think\n42 apples", Some(42.0)),
            ("no idea", None),
            ("The answer is 3.14.", Some(3.14)),
            ("answer = $1,234.50", Some(1234.5)),
            ("\\boxed{\\dfrac{1}{2}}", Some(0.5)),
            ("the area is 12 km^2", Some(12.0)),
            ("The result is 50%", Some(50.0)),
            ("Result: 1.5e3 ms", Some(1500.0)),
        ];
        for (reply, want) in cases {
            assert_eq!(read(reply), want, "{reply}");
        }
        assert!(number("50\\%").is_some_and(|n| n.percent));
    }
}
