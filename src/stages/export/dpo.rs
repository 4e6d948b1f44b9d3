//! Preference pairs (from select's preference mode) into DPO prompt/chosen/rejected rows:
//! `prompt` is the conversation the two sides share, `chosen` and `rejected` what each said from
//! where they part (arguments as objects, as TRL's chat templates render them).
//!
//! A pair is kept only when the sides part on an assistant turn after a shared prompt, and hold
//! nothing but assistant turns from there: DPO scores every token of both sides, so a tool result
//! there (which differs between the sides by the mock world's ids and draws) would make part of
//! the margin environment noise.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::report::{Failure, RoundTrip, Warning, kept_failures};
use super::{Groups, Lines, MaskMode, Options, RowFacts, training_rows};
use crate::error::{Error, Result};

/// Pair fields carried onto the DPO row, in this order.
const PAIR_CARRY: [&str; 12] = [
    "chosen_score",
    "rejected_score",
    "margin",
    "chosen_model",
    "rejected_model",
    "same_policy",
    "length_delta",
    "first_turn_differs",
    "chosen_reason",
    "rejected_reason",
    "rejected_failure_class",
    "lineage",
];

/// A preference pair: its `chosen` and `rejected` rows (objects) and its fields.
#[derive(Debug, Clone)]
pub struct Pair {
    /// Where it was read (`file:line`), for the report's first dropped pair.
    pub at: String,
    /// The pair.
    pub pair: Map<String, Value>,
}

impl Pair {
    /// The pair `value` read at `at`, when it is one: an object whose `chosen` and `rejected`
    /// are objects.
    pub fn of(at: String, value: Value) -> Option<Self> {
        match value {
            Value::Object(pair)
                if pair.get("chosen").is_some_and(Value::is_object)
                    && pair.get("rejected").is_some_and(Value::is_object) =>
            {
                Some(Self { at, pair })
            }
            _ => None,
        }
    }
}

/// What the DPO stage reads: the pairs, and where their lines go.
pub struct Inputs {
    /// The pairs, in order.
    pub pairs: Vec<Pair>,
    /// Where each DPO row's line goes (the metadata half is always empty).
    pub lines: Lines,
}

/// Who reads the file.
#[derive(Debug, Clone, Serialize)]
pub struct Trainer {
    /// The trainer and what it trains.
    pub reads: &'static str,
}

/// What an export of pairs reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Share of rows whose chosen side is the longer.
    pub chosen_longer_frac: f64,
    /// Pairs read.
    pub pairs: u64,
    /// DPO rows written.
    pub n: u64,
    /// Always `dpo`.
    pub format: &'static str,
    /// Pairs that share no prompt or part on a turn that is not the assistant's.
    pub no_completion_dropped: u64,
    /// Pairs with a tool result after the sides part.
    pub tool_result_in_side_dropped: u64,
    /// Who reads the file.
    pub trainer: Trainer,
    /// The round-trip gate.
    pub tool_call_roundtrip: RoundTrip,
    /// Rows whose chosen side is the longer.
    #[serde(skip)]
    pub chosen_longer: u64,
    /// The gates that failed.
    #[serde(skip)]
    pub failures: Vec<Failure>,
    /// The warnings.
    #[serde(skip)]
    pub warnings: Vec<Warning>,
}

impl Report {
    /// The gates that failed, joined, when they stop the run (`no_validate` unset).
    pub fn gate_failures(&self, opts: &Options) -> Option<String> {
        (!opts.no_validate && !self.failures.is_empty()).then(|| {
            self.failures
                .iter()
                .map(|f| f.message.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// The summary for a person, naming `out` when given.
    pub fn summary(&self, out: Option<&std::path::Path>) -> String {
        let to = out
            .map(|o| format!(" to `{}`", o.display()))
            .unwrap_or_default();
        format!(
            "exported {} of {} pairs{to} as dpo (prompt, chosen, rejected); {} tool calls round-trip ({} invalid); chosen longer in {}",
            self.n,
            self.pairs,
            self.tool_call_roundtrip.checked,
            self.tool_call_roundtrip.invalid,
            self.chosen_longer
        )
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary(None))
    }
}

/// The counts over the pairs.
#[derive(Debug, Default)]
struct Counts {
    pairs: u64,
    written: u64,
    dropped: u64,
    calls: u64,
    invalid: u64,
    leaks: u64,
    longer: u64,
    with_env: u64,
    first_env: Option<String>,
}

/// The stage: pairs into DPO rows.
pub struct DpoStage;

impl crate::stages::Stage for DpoStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "export-dpo";

    async fn run(
        _session: &crate::stages::Session,
        inputs: Inputs,
        options: &Options,
    ) -> Result<Report> {
        // A pair is two whole conversations: the mask and unroll settings do not apply.
        let opts = &Options {
            mask_mode: MaskMode::Assistant,
            unroll: false,
            ..options.clone()
        };
        let Inputs { pairs, mut lines } = inputs;
        let mut c = Counts::default();
        for pair in &pairs {
            c.pairs += 1;
            if let Some(row) = dpo_row(pair, opts, &mut c) {
                let mut line = serde_json::to_vec(&row)
                    .map_err(|e| Error::Internal(format!("writing a pair: {e}")))?;
                line.push(b'\n');
                lines(line, Vec::new())?;
                c.written += 1;
            }
        }
        Ok(report(&c, opts))
    }
}

/// A side's messages (its first training row's) and facts.
fn side(row: &Map<String, Value>, opts: &Options) -> (Vec<Value>, RowFacts) {
    let (rows, facts) = training_rows(row, opts, &Groups::default());
    let msgs = rows
        .first()
        .and_then(|r| r.get("messages"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    (msgs, facts)
}

/// The DPO row of a pair, or `None` when it is dropped (counted in `c`).
fn dpo_row(p: &Pair, opts: &Options, c: &mut Counts) -> Option<Map<String, Value>> {
    let pair = &p.pair;
    let (Some(Value::Object(chosen)), Some(Value::Object(rejected))) =
        (pair.get("chosen"), pair.get("rejected"))
    else {
        c.dropped += 1;
        return None;
    };
    let (cm, cf) = side(chosen, opts);
    let (rm, rf) = side(rejected, opts);
    c.calls += cf.calls + rf.calls;
    c.invalid += cf.invalid_calls + rf.invalid_calls;
    c.leaks += u64::from(cf.leak.is_some()) + u64::from(rf.leak.is_some());
    let shared = cm
        .iter()
        .zip(&rm)
        .take_while(|(a, b)| same_turn(a, b))
        .count();
    let parts_on_assistant = cm.get(shared).is_some_and(|m| m["role"] == "assistant")
        && rm.get(shared).is_some_and(|m| m["role"] == "assistant");
    if shared == 0 || !parts_on_assistant {
        c.dropped += 1;
        return None;
    }
    let environment = |m: &[Value]| m.iter().any(|x| x["role"] != "assistant");
    if environment(&cm[shared..]) || environment(&rm[shared..]) {
        c.with_env += 1;
        c.first_env.get_or_insert_with(|| p.at.clone());
        return None;
    }
    c.longer += u64::from(crate::stages::messages::chosen_longer(chosen, rejected));
    let mut out = Map::new();
    out.insert("prompt".into(), Value::Array(cm[..shared].to_vec()));
    out.insert("chosen".into(), Value::Array(cm[shared..].to_vec()));
    out.insert("rejected".into(), Value::Array(rm[shared..].to_vec()));
    if let Some(t) = &opts.tools {
        out.insert("tools".into(), Value::Array(t.clone()));
    }
    for k in PAIR_CARRY {
        if let Some(v) = pair.get(k).filter(|v| !v.is_null()) {
            out.insert(k.to_owned(), v.clone());
        }
    }
    out.insert(
        "prompt_text".into(),
        pair.get("prompt").cloned().unwrap_or(Value::Null),
    );
    out.insert("schema_version".into(), json!("1"));
    Some(out)
}

/// The report of the counts: gates, warnings, numbers.
fn report(c: &Counts, opts: &Options) -> Report {
    let mut failures = Vec::new();
    if c.invalid > 0 {
        failures.push(Failure {
            code: "tool_call_roundtrip_invalid",
            message: format!(
                "tool_call_roundtrip_invalid: {} of {} tool calls do not parse back to structured arguments",
                c.invalid, c.calls
            ),
        });
    }
    if c.leaks > 0 {
        failures.push(Failure {
            code: "privileged_leak",
            message: format!(
                "privileged_leak: {} side(s) quote their own privileged context in what is exported",
                c.leaks
            ),
        });
    }
    if c.written == 0 && !opts.no_validate {
        failures.push(Failure {
            code: "no_preference_pairs",
            message:
                "no_preference_pairs: no pair parts on an assistant turn after a shared prompt"
                    .into(),
        });
    }
    let mut warnings = kept_failures(&failures, opts);
    if c.dropped > 0 {
        warnings.push(Warning {
            code: "no_completion_dropped",
            message: format!(
                "{} pair(s) share no prompt or part on a turn that is not the assistant's, and were dropped (no_completion_dropped)",
                c.dropped
            ),
            hint: None,
        });
    }
    if c.with_env > 0 {
        warnings.push(Warning {
            code: "tool_result_in_side_dropped",
            message: format!(
                "{} pair(s) hold a tool result after the two sides part, which DPO would score as if the policy wrote it, and were dropped (tool_result_in_side_dropped; first: `{}`)",
                c.with_env,
                c.first_env.as_deref().unwrap_or("?")
            ),
            hint: None,
        });
    }
    Report {
        pairs: c.pairs,
        n: c.written,
        format: "dpo",
        no_completion_dropped: c.dropped,
        tool_result_in_side_dropped: c.with_env,
        trainer: Trainer {
            reads: "TRL DPOTrainer, conversational prompt/chosen/rejected rows: every token of chosen and rejected, none of prompt",
        },
        tool_call_roundtrip: RoundTrip {
            checked: c.calls,
            invalid: c.invalid,
            encoding: "dict",
        },
        chosen_longer_frac: if c.written == 0 {
            0.0
        } else {
            c.longer as f64 / c.written as f64
        },
        chosen_longer: c.longer,
        failures,
        warnings,
    }
}

/// Two turns say the same thing: equal once call ids are set aside (each side numbers its own).
fn same_turn(a: &Value, b: &Value) -> bool {
    fn blind(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.shift_remove("tool_call_id");
            if let Some(calls) = o.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for c in calls {
                    if let Some(c) = c.as_object_mut() {
                        c.shift_remove("id");
                    }
                }
            }
        }
        v
    }
    a == b || blind(a) == blind(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(reply: &str) -> Value {
        json!({"prompt": "p", "messages": [{"role": "user", "content": "p"},
            {"role": "assistant", "content": reply}], "final_text": reply})
    }

    #[test]
    fn pairs_part_on_an_assistant_turn_or_are_dropped() {
        let opts = Options::default();
        let mut c = Counts::default();
        let pair = |c: Value, r: Value| Pair {
            at: "pairs.jsonl:1".into(),
            pair: json!({"chosen": c, "rejected": r, "prompt": "p", "margin": 1.0})
                .as_object()
                .unwrap()
                .clone(),
        };
        let kept = dpo_row(&pair(row("longer answer"), row("no")), &opts, &mut c).unwrap();
        assert_eq!(kept["prompt"], json!([{"role": "user", "content": "p"}]));
        assert_eq!(kept["chosen"][0]["content"], "longer answer");
        assert_eq!(kept["margin"], 1.0);
        assert_eq!(c.longer, 1);
        assert!(dpo_row(&pair(row("same"), row("same")), &opts, &mut c).is_none());
        assert_eq!(c.dropped, 1);
        c.written = 1;
        let r = report(&c, &opts);
        assert!(r.failures.is_empty());
        assert_eq!(r.warnings[0].code, "no_completion_dropped");
        assert!(same_turn(
            &json!({"role": "tool", "tool_call_id": "a", "content": "x"}),
            &json!({"role": "tool", "tool_call_id": "b", "content": "x"})
        ));
    }

    #[test]
    fn a_pair_is_an_object_with_chosen_and_rejected_rows() {
        let pair = Pair::of(
            "f:1".into(),
            json!({"chosen": row("a"), "rejected": row("b")}),
        );
        assert_eq!(pair.map(|p| p.at).as_deref(), Some("f:1"));
        for not in [
            json!([1]),
            json!({"chosen": row("a")}),
            json!({"chosen": row("a"), "rejected": "b"}),
        ] {
            assert!(Pair::of("f:2".into(), not).is_none());
        }
    }
}
