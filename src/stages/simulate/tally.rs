//! Counting what each rollout did into the run's [`Report`]: its tool calls (declared or not),
//! the faults that fired and the planted mistakes, for a played rollout and a resumed row alike.

use serde_json::Value;

use super::agent::{self, Trajectory};
use super::report::Report;
use super::world::{Fault, Plan, SUCCESS};
use crate::pipeline::row::Record;

/// Counts a played rollout's tool calls, faults and planted mistakes.
pub(super) fn tally(report: &mut Report, t: &Trajectory) {
    let mut called: Vec<&str> = Vec::new();
    let mut undeclared = false;
    for s in t.steps.iter() {
        let Some(tool) = s.tool.as_deref() else {
            continue;
        };
        if let Some(f) = s.injected {
            *report
                .faults_injected
                .entry(f.name().to_owned())
                .or_insert(0) += 1;
        }
        if let Some(c) = report.tools.iter_mut().find(|c| c.name == tool) {
            c.calls += 1;
            let status = s.result.get("status").and_then(Value::as_str).unwrap_or("");
            if s.injected.is_some() {
                c.injected += 1;
            } else if SUCCESS.contains(&status)
                && !s.result.get("data").is_some_and(Value::is_string)
            {
                c.ok += 1;
            }
            if !called.contains(&tool) {
                called.push(tool);
                c.rows += 1;
            }
        } else {
            *report.undeclared_calls.entry(tool.to_owned()).or_insert(0) += 1;
            undeclared = true;
        }
    }
    report.rows_calling_undeclared += u64::from(undeclared);
    for b in &t.seeded {
        *report.seeded.entry(b.clone()).or_insert(0) += 1;
    }
}

/// Counts a resumed row as [`tally`] counts a played one.
pub(super) fn tally_record(report: &mut Report, r: &Record) {
    let extra: Value = r
        .extra
        .as_deref()
        .and_then(|e| serde_json::from_str(e).ok())
        .unwrap_or(Value::Null);
    let injected: Vec<Fault> = extra
        .get("faults_injected")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().and_then(Fault::of_name))
                .collect()
        })
        .unwrap_or_default();
    let mut inj = injected.into_iter();
    let steps: Vec<agent::Step> = r
        .steps
        .iter()
        .flatten()
        .map(|s| {
            let result: Value = s
                .result
                .as_deref()
                .and_then(|x| serde_json::from_str(x).ok())
                .unwrap_or(Value::Null);
            let status = result
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            // A fault fired where the plan's mode shows in the status (order is the call order).
            let injected = s.tool.as_ref().and_then(|_| {
                let hit = extra
                    .get("faults")
                    .and_then(Plan::from_json)
                    .is_some_and(|p| {
                        p.mode.name() == status
                            || (p.mode == Fault::Malformed
                                && result.get("data").is_some_and(Value::is_string))
                            || (p.mode == Fault::Stale && result.get("stale").is_some())
                            || (p.mode == Fault::Partial && status == "partial")
                    });
                if hit { inj.next() } else { None }
            });
            agent::Step {
                tool: s.tool.clone(),
                arguments: Value::Null,
                result,
                text: s.text.clone(),
                injected,
                texts: None,
                ..Default::default()
            }
        })
        .collect();
    let seeded: Vec<String> = extra
        .get("seeded")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let t = Trajectory {
        steps: steps.into(),
        final_text: r.final_text.clone().unwrap_or_default(),
        seeded,
        finish_reason: None,
        error: None,
        ..Default::default()
    };
    tally(report, &t);
}
