//! Gates: `STAGE.FIELD [OP VALUE]`, read from a stage's report, and the run's verdict.

use serde_json::{Value, json};

use super::pipeline::{Pipeline, Stage};
use crate::error::ExitStatus;
use crate::pipeline::lake::{GateRecord, RunRecord};

/// A gate, parsed.
#[derive(Debug, Clone)]
pub(super) struct Gate {
    pub(super) text: String,
    stage: String,
    pub(super) path: Vec<String>,
    test: Option<(String, Value)>,
}

/// The comparison operators a gate takes, longest first.
const OPS: &[&str] = &[">=", "<=", "==", "!=", ">", "<"];

/// Parses `STAGE.PATH [OP VALUE]`.
pub(super) fn parse_gate(text: &str, stages: &[Stage]) -> std::result::Result<Gate, String> {
    let (left, check) = match OPS.iter().find_map(|op| text.find(op).map(|i| (i, *op))) {
        Some((i, op)) => {
            let rhs = text[i + op.len()..].trim();
            if rhs.is_empty() {
                return Err(format!("nothing after `{op}`"));
            }
            let value = if let Ok(n) = rhs.parse::<f64>() {
                json!(n)
            } else if rhs == "true" || rhs == "false" {
                json!(rhs == "true")
            } else {
                let unquoted = rhs
                    .strip_prefix('"')
                    .and_then(|r| r.strip_suffix('"'))
                    .or_else(|| rhs.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
                    .unwrap_or(rhs);
                json!(unquoted)
            };
            if value.is_string() && !matches!(op, "==" | "!=") {
                return Err(format!("`{op}` compares numbers; `{rhs}` is not one"));
            }
            (text[..i].trim(), Some((op.to_owned(), value)))
        }
        None => (text.trim(), None),
    };
    let mut parts = left.split('.');
    let stage = parts.next().unwrap_or_default().to_owned();
    let path: Vec<String> = parts.map(str::to_owned).collect();
    if !stages.iter().any(|s| s.name == stage) {
        let names: Vec<String> = stages.iter().map(|s| format!("`{}`", s.name)).collect();
        return Err(format!(
            "no stage `{stage}` (the stages are {}; a gate reads `STAGE.FIELD`)",
            names.join(", ")
        ));
    }
    if path.is_empty() || path.iter().any(String::is_empty) {
        return Err("a gate reads `STAGE.FIELD`, e.g. `pass_at.pass_at_1 >= 0.8`".into());
    }
    Ok(Gate {
        text: text.to_owned(),
        stage,
        path,
        test: check,
    })
}

/// The value `path` names in `report`: looked up from the top, else (for a report of results,
/// as pass-at's) in its first, overall result.
pub(super) fn lookup<'a>(report: &'a Value, path: &[String]) -> Option<&'a Value> {
    let walk = |from: &'a Value| {
        path.iter().try_fold(from, |at, key| match at {
            Value::Object(map) => map.get(key),
            Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
    };
    walk(report).or_else(|| report.get("results").and_then(|r| r.get(0)).and_then(walk))
}

/// Whether `gate` holds on `value`.
pub(super) fn holds(gate: &Gate, value: &Value) -> bool {
    let Some((op, want)) = &gate.test else {
        return value.as_bool().unwrap_or(false);
    };
    if let (Some(v), Some(w)) = (value.as_f64(), want.as_f64()) {
        return match op.as_str() {
            ">=" => v >= w,
            "<=" => v <= w,
            ">" => v > w,
            "<" => v < w,
            "==" => (v - w).abs() == 0.0,
            _ => (v - w).abs() != 0.0,
        };
    }
    let equal = value == want
        || (value.as_str())
            .zip(want.as_str())
            .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b));
    // A value the report does not have never passes: `!=` on nothing is no evidence.
    match op.as_str() {
        "==" => equal,
        "!=" => !equal && !value.is_null(),
        _ => false,
    }
}

/// Evaluates the gates into `record` and returns the run's exit status: 1 when a gate fails or a
/// stage's own check did (compare's gate, hack-scan's reward hack), else 2 when a stage was
/// hollow, else 0. A gate on a skipped stage (a compare with no earlier run) is skipped, not
/// failed.
pub(super) fn verdict(record: &mut RunRecord, pipeline: &Pipeline) -> ExitStatus {
    record.gates = (pipeline.gates.iter())
        .map(|gate| {
            let at = (pipeline.stages.iter())
                .position(|s| s.name == gate.stage)
                .unwrap_or(0);
            let stage = record.stages.get(at);
            let report = stage.and_then(|s| s.report.clone()).unwrap_or(Value::Null);
            if stage.is_some_and(|s| s.skipped.is_some()) {
                return GateRecord {
                    gate: gate.text.clone(),
                    value: json!("skipped"),
                    passed: true,
                };
            }
            let value = lookup(&report, &gate.path).cloned().unwrap_or(Value::Null);
            GateRecord {
                gate: gate.text.clone(),
                passed: holds(gate, &value),
                value,
            }
        })
        .collect();
    let stage_failed = record.stages.iter().any(|s| s.status == 1);
    let hollow = record.stages.iter().any(|s| s.status == 2);
    if stage_failed || record.gates.iter().any(|g| !g.passed) {
        ExitStatus::Failure
    } else if hollow {
        ExitStatus::Hollow
    } else {
        ExitStatus::Success
    }
}
