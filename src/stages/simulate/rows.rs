//! A rollout's row: the transcript, the ask's fixed fields (dims, hidden context, lineage) and
//! the per-rollout ones, in the reference's row layout.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::agent::{Job, Trajectory};
use super::grid::Cell;
use super::options::Pinned;
use super::resume::rollout_id;
use super::scene::expected;
use super::world::{SUCCESS, Scene};
use super::writer::Ask;
use crate::pipeline::row::{Message, Record, ToolCall, canonical_json, derive_dims};

/// Per-run constants shared by row building.
pub(super) struct RowContext<'a> {
    pub(super) cells: &'a [Cell],
    pub(super) agent: String,
    /// What decides the agent's choices: `policy_version` is this, `@`, the policy's digest.
    pub(super) agent_policy: String,
    /// The agent's resolved sampling (`{temperature, max_tokens, model}`), for model agents.
    pub(super) sampling: Option<String>,
    /// Who played the person: the user model, `template`, or none.
    pub(super) user_model: Option<String>,
    pub(super) policy_sha: String,
    pub(super) policy_head: String,
    pub(super) policy_chars: usize,
    pub(super) seed: u64,
    pub(super) runs: u32,
    pub(super) replay: bool,
    /// A digest of the settings that decide the schedule: a checkpoint resumes only under them.
    pub(super) settings: String,
}

/// A rollout's transcript: messages and steps, the tools it called, the faults that fired.
struct Transcript {
    messages: Vec<Message>,
    steps: Vec<crate::pipeline::row::Step>,
    tools_used: Vec<String>,
    injected: Vec<Value>,
}

/// The transcript of `t`, opened by the ask `text`: each tool step becomes an assistant call
/// and the tool's reply, each text step an assistant message, and the final text closes it
/// unless the last message already says it.
fn transcript(text: &str, t: &Trajectory) -> Transcript {
    let mut steps = Vec::with_capacity(t.steps.len());
    let mut messages = Vec::with_capacity(2 + 2 * t.steps.len());
    messages.push(Message {
        role: Some("user".into()),
        content: Some(text.to_owned()),
        ..Message::default()
    });
    let mut tools_used = Vec::new();
    let mut injected = Vec::new();
    for (i, s) in t.steps.iter().enumerate() {
        if let Some(tool) = &s.tool {
            let (arguments, result) = match &s.texts {
                Some((a, r)) => (a.clone(), r.clone()),
                None => (canonical_json(&s.arguments), s.result.to_string()),
            };
            let id = format!("call_{i}");
            messages.push(Message {
                role: Some("assistant".into()),
                content: Some(s.text.clone().unwrap_or_default()),
                tool_calls: Some(vec![ToolCall {
                    id: Some(id.clone()),
                    name: Some(tool.clone()),
                    arguments: Some(arguments.clone()),
                    arguments_text: None,
                }]),
                ..Message::default()
            });
            messages.push(Message {
                role: Some("tool".into()),
                content: Some(result.clone()),
                name: Some(tool.clone()),
                tool_call_id: Some(id),
                ..Message::default()
            });
            steps.push(crate::pipeline::row::Step {
                tool: Some(tool.clone()),
                arguments: Some(arguments),
                result: Some(result),
                text: s.text.clone(),
                ..meta(s)
            });
            tools_used.push(tool.clone());
            if let Some(f) = s.injected {
                injected.push(Value::String(f.name().into()));
            }
        } else if let Some(text) = &s.text {
            messages.push(Message {
                role: Some("assistant".into()),
                content: Some(text.clone()),
                ..Message::default()
            });
            steps.push(crate::pipeline::row::Step {
                text: Some(text.clone()),
                ..meta(s)
            });
        } else if let Some(said) = &s.user {
            messages.push(Message {
                role: Some("user".into()),
                content: Some(said.clone()),
                ..Message::default()
            });
            steps.push(crate::pipeline::row::Step {
                user: Some(said.clone()),
                ..Default::default()
            });
        }
    }
    let last_text = messages
        .last()
        .filter(|m| m.role.as_deref() == Some("assistant") && m.tool_calls.is_none())
        .and_then(|m| m.content.clone());
    if last_text.as_deref() != Some(t.final_text.as_str()) {
        messages.push(Message {
            role: Some("assistant".into()),
            content: Some(t.final_text.clone()),
            ..Message::default()
        });
    }
    Transcript {
        messages,
        steps,
        tools_used,
        injected,
    }
}

/// A step's turn tokens in the row's step fields.
fn meta(s: &super::agent::Step) -> crate::pipeline::row::Step {
    crate::pipeline::row::Step {
        logprob: s.meta.logprob,
        n_tokens: s.meta.n_tokens,
        truncated: s.meta.truncated.then_some(true),
        ..Default::default()
    }
}

/// Builds the row of one rollout.
pub(super) fn build_row(
    rc: &RowContext<'_>,
    job: &Job<'_>,
    t: &Trajectory,
    head: Option<&AskRow>,
    sig: u64,
) -> Record {
    let ask = job.ask;
    let Transcript {
        messages,
        steps,
        tools_used,
        injected,
    } = transcript(&ask.text, t);
    let owned;
    let head = if let Some(h) = head {
        h
    } else {
        let (dims, privileged) = realized(t);
        owned = ask_row(rc, ask, job.eval_run, job.scene, dims, Some(&privileged));
        &owned
    };
    let extra = extra(head, &injected, t, rc.seed, sig);
    Record {
        task_id: ask.task_id.clone(),
        rollout_id: Some(rollout_id(
            &ask.task_id,
            ask.phrasing,
            job.rollout_index,
            job.eval_run,
        )),
        rollout_index: Some(job.rollout_index.cast_signed()),
        eval_run: Some(job.eval_run.cast_signed()),
        prompt: Some(ask.text.clone()),
        messages: Some(messages),
        steps: Some(steps),
        final_text: Some(t.final_text.clone()),
        tools_used: Some(tools_used),
        finish_reason: Some(t.finish_reason.clone().unwrap_or_else(|| "stop".into())),
        dims: head.dims.clone(),
        model_version: Some(rc.agent.clone()),
        policy_version: Some(format!("{}@{}", rc.agent_policy, rc.policy_sha)),
        writer_model: Some(ask.writer.clone()),
        user_model: rc.user_model.clone(),
        sampling: rc.sampling.clone(),
        privileged: head.privileged.clone(),
        lineage: Some(if job.attempt > 0 {
            format!(
                "{},\"attempt\":{}}}",
                &head.lineage[..head.lineage.len() - 1],
                job.attempt
            )
        } else {
            head.lineage.clone()
        }),
        extra: Some(extra),
        ..Record::default()
    }
}

/// The row's `extra` JSON: the ask's fixed fields, then the faults that fired, the planted
/// mistakes, how the conversation ended and what its turns cost (model agents), the seed and the
/// behaviour signature.
fn extra(head: &AskRow, injected: &[Value], t: &Trajectory, seed: u64, sig: u64) -> String {
    let seeded = &t.seeded;
    // The per-rollout fields close the ask's fixed ones.
    let mut extra = String::with_capacity(head.extra_head.len() + 96);
    extra.push_str(&head.extra_head);
    let list = |names: &mut dyn Iterator<Item = &str>, out: &mut String| {
        out.push('[');
        for (i, n) in names.enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&Value::String(n.to_owned()).to_string());
        }
        out.push(']');
    };
    if !injected.is_empty() {
        extra.push_str(",\"faults_injected\":");
        list(&mut injected.iter().filter_map(Value::as_str), &mut extra);
    }
    if !seeded.is_empty() {
        extra.push_str(",\"seeded\":");
        list(&mut seeded.iter().map(String::as_str), &mut extra);
    }
    if let Some(why) = t.ended_by {
        let _ = write!(extra, ",\"ended_by\":\"{why}\"");
    }
    if let Some((input, output)) = t.usage {
        let _ = write!(
            extra,
            ",\"usage\":{{\"input_tokens\":{input},\"output_tokens\":{output}}}"
        );
    }
    let scored: Vec<_> = t
        .steps
        .iter()
        .filter_map(|s| s.meta.logprob.map(|l| (l, s.meta.n_tokens)))
        .collect();
    if !scored.is_empty() {
        let sum: f64 = scored.iter().map(|(l, _)| l).sum();
        let tokens: i64 = scored.iter().filter_map(|(_, n)| *n).sum();
        let _ = write!(
            extra,
            ",\"logprob\":{},\"n_tokens\":{tokens}",
            Value::from((sum * 1e6).round() / 1e6)
        );
    }
    let _ = write!(
        extra,
        ",\"seed\":{seed},\"behavior_signature\":\"{sig:012x}\"}}"
    );
    extra
}

/// The fixed part of an ask's rows: the `extra` fields up to the per-rollout ones (JSON text
/// without its closing brace), `dims`, `privileged` and `lineage`.
pub(super) struct AskRow {
    extra_head: String,
    dims: Option<Vec<(String, String)>>,
    privileged: Option<String>,
    lineage: String,
}

/// The dimensions and hidden context a cell-less ask's rollout realized.
fn realized(t: &Trajectory) -> (Map<String, Value>, Value) {
    let tool = t
        .steps
        .iter()
        .find_map(|s| s.tool.clone())
        .unwrap_or_else(|| "unrelated".into());
    let condition = t
        .steps
        .iter()
        .filter_map(|s| s.result.get("status").and_then(Value::as_str))
        .find(|s| !SUCCESS.contains(s))
        .map_or(
            "success",
            |s| if s == "partial" { "partial_result" } else { s },
        )
        .to_owned();
    let reference = expected(&tool, "ordinary", "unspecified", "fresh", &condition);
    let mut hidden = Map::new();
    if condition != "success" {
        hidden.insert("tool_condition".into(), Value::String(condition.clone()));
    }
    let mut p = Map::new();
    p.insert("hidden_state".into(), Value::Object(hidden));
    if let Some(r) = reference {
        p.insert("reference".into(), Value::String(r));
    }
    let dims = Map::from_iter([
        ("tool".to_owned(), Value::String(tool)),
        ("tool_condition".to_owned(), Value::String(condition)),
        ("origin".to_owned(), Value::String("realized".into())),
    ]);
    (dims, Value::Object(p))
}

/// The dimensions an ask's rows carry, when they do not depend on the rollout.
pub(super) fn fixed_dims(
    rc: &RowContext<'_>,
    ask: &Ask,
    pinned: Option<&Pinned>,
) -> Option<Map<String, Value>> {
    if let Some(c) = ask.cell.map(|i| &rc.cells[i]) {
        return Some(
            c.pairs()
                .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                .collect(),
        );
    }
    // A replayed ask without a cell (a seed, a probe) realizes its dims again.
    pinned.filter(|p| !p.dims.is_empty()).map(|p| {
        p.dims
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect()
    })
}

/// The fixed part of the rows of `ask` in run `eval_run`.
pub(super) fn ask_row(
    rc: &RowContext<'_>,
    ask: &Ask,
    eval_run: u32,
    scene: &Scene,
    dims: Map<String, Value>,
    privileged: Option<&Value>,
) -> AskRow {
    // The extra fields, in the reference's row layout, so `wai convert` writes its rows.
    let mut extra = Map::new();
    extra.insert("schema_version".into(), json!("1"));
    extra.insert("scenario_id".into(), Value::String(ask.task_id.clone()));
    for (k, v) in &ask.labels {
        extra.insert((*k).to_owned(), Value::String(v.clone()));
    }
    extra.insert("scenario_dimensions".into(), Value::Object(dims));
    extra.insert("arm".into(), Value::String(ask.arm.into()));
    if let Some(w) = &scene.world_state {
        extra.insert("world_state".into(), Value::String(w.clone()));
    }
    if let Some(p) = &scene.plan {
        extra.insert("faults".into(), p.to_json());
    }
    let dims = derive_dims(&extra);
    let mut extra_head = Value::Object(extra).to_string();
    extra_head.pop();
    let mut lineage = Map::new();
    lineage.insert(
        "system_prompt_sha".into(),
        Value::String(rc.policy_sha.clone()),
    );
    lineage.insert(
        "system_prompt_head".into(),
        Value::String(rc.policy_head.clone()),
    );
    lineage.insert("system_prompt_chars".into(), json!(rc.policy_chars));
    lineage.insert("phrasing".into(), json!(ask.phrasing));
    lineage.insert("settings".into(), Value::String(rc.settings.clone()));
    if rc.runs > 1 || eval_run > 0 {
        lineage.insert("eval_run".into(), json!(eval_run));
    }
    if rc.replay {
        lineage.insert("replayed".into(), Value::Bool(true));
    } else if eval_run > 0 {
        lineage.insert("replayed".into(), Value::Bool(true));
        lineage.insert("replayed_from_run".into(), json!(0));
    }
    AskRow {
        extra_head,
        dims,
        privileged: privileged.map(Value::to_string),
        lineage: Value::Object(lineage).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::stages::simulate::agent::Step;
    use crate::stages::simulate::writer::seed_ask;

    fn rc(runs: u32) -> RowContext<'static> {
        RowContext {
            cells: &[],
            agent: "seeded".into(),
            agent_policy: "seeded".into(),
            sampling: None,
            user_model: None,
            policy_sha: "abcd".into(),
            policy_head: "Be kind.".into(),
            policy_chars: 8,
            seed: 5,
            runs,
            replay: false,
            settings: "s1".into(),
        }
    }

    fn trajectory() -> Trajectory {
        Trajectory {
            steps: Arc::from(vec![Step {
                tool: Some("lookup_order".into()),
                arguments: json!({"order_id": "A1"}),
                result: json!({"status": "ok"}),
                text: Some("Let me look.".into()),
                injected: None,
                texts: None,
                ..Default::default()
            }]),
            final_text: "It shipped.".into(),
            seeded: vec!["hedging".into()],
            finish_reason: None,
            error: None,
            ..Default::default()
        }
    }

    #[test]
    fn a_transcript_opens_with_the_ask_and_closes_with_the_reply() {
        let t = transcript("where is A1?", &trajectory());
        let roles: Vec<&str> = t
            .messages
            .iter()
            .filter_map(|m| m.role.as_deref())
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
        assert_eq!(t.messages[3].content.as_deref(), Some("It shipped."));
        assert_eq!(t.tools_used, ["lookup_order"]);
        assert_eq!(t.steps.len(), 1);
        assert_eq!(
            t.steps[0].arguments.as_deref(),
            Some(r#"{"order_id":"A1"}"#)
        );
        assert!(t.injected.is_empty());
    }

    #[test]
    fn a_row_carries_the_asks_fixed_fields_and_its_own() {
        let ask = seed_ask("where is A1?");
        let scene = Scene::default();
        let job = Job {
            ask: &ask,
            scene: &scene,
            privileged: None,
            rollout_index: 1,
            eval_run: 1,
            seed: 5,
            attempt: 2,
        };
        let t = trajectory();
        let row = build_row(&rc(2), &job, &t, None, 0xab);
        assert_eq!(
            row.rollout_id.as_deref(),
            Some(rollout_id(&ask.task_id, 0, 1, 1).as_str())
        );
        assert_eq!(row.policy_version.as_deref(), Some("seeded@abcd"));
        let extra: Value = serde_json::from_str(row.extra.as_deref().unwrap()).unwrap();
        assert_eq!(extra["seeded"], json!(["hedging"]));
        assert_eq!(extra["behavior_signature"], "0000000000ab");
        assert_eq!(extra["scenario_dimensions"]["origin"], "realized");
        let lineage: Value = serde_json::from_str(row.lineage.as_deref().unwrap()).unwrap();
        assert_eq!(lineage["eval_run"], 1);
        assert_eq!(lineage["attempt"], 2);
        assert_eq!(lineage["replayed_from_run"], 0);
        assert_eq!(lineage["settings"], "s1");
    }

    #[test]
    fn extra_lists_faults_and_closes_the_object() {
        let head = ask_row(
            &rc(1),
            &seed_ask("x"),
            0,
            &Scene::default(),
            Map::new(),
            None,
        );
        let text = extra(&head, &[json!("timeout")], &Trajectory::default(), 9, 1);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["faults_injected"], json!(["timeout"]));
        assert_eq!(v["seed"], 9);
        assert!(v.get("seeded").is_none());
        assert!(v.get("ended_by").is_none() && v.get("usage").is_none());
        // A model agent's rollout says how it ended and what its turns cost.
        let mut said = Step::said("Which one?".into());
        said.meta.logprob = Some(-0.123_456_78);
        said.meta.n_tokens = Some(3);
        let t = Trajectory {
            steps: Arc::from(vec![said]),
            ended_by: Some("user_left"),
            usage: Some((12, 3)),
            ..Trajectory::default()
        };
        let v: Value = serde_json::from_str(&extra(&head, &[], &t, 9, 1)).unwrap();
        assert_eq!(v["ended_by"], "user_left");
        assert_eq!(v["usage"], json!({"input_tokens": 12, "output_tokens": 3}));
        assert_eq!(v["logprob"], json!(-0.123_457));
        assert_eq!(v["n_tokens"], 3);
        assert!(!head.lineage.contains("eval_run"));
    }
}
