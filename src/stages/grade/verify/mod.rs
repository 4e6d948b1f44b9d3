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

mod checks;
pub mod math;

use datafusion::arrow::array::{Array, AsArray, ListArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::ArrowNativeType;
use rayon::prelude::*;
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use serde_json::Value;

use super::{Judge, Status, Verdict};
use crate::error::{Error, Result};
use crate::schema::col;
use checks::Row;
pub(crate) use checks::normalize;

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

/// A stack of verifiers from a judge file.
pub struct VerifierJudge {
    name: String,
    version: Option<String>,
    reference: String,
    check: Check,
}

impl VerifierJudge {
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
