//! Deterministic synthetic rollouts: the data behind every test, bench and performance figure.
//!
//! What it makes: tasks of 4 to 8 rollouts of a support agent with six tools. Each task draws a
//! pass rate from Beta(0.6, 0.6), so many tasks are unanimous (all pass or all fail) and the rest
//! mixed; each rollout makes 0 to 3 tool calls (arguments as objects, results with a status,
//! sometimes a fault), replies of 4 to 160 words, three markers (one of them sometimes "does not
//! apply"), provenance and `dims` (tool, tier, `tool_condition`, category).
//! Options plant a shortcut word that co-occurs with reward (a reward hack to find: the reward
//! then follows the word, and what the agent did is drawn apart from it) and attach noisy gold
//! labels to a share of rows.
//!
//! Two shapes of the same rows ([`Shape`]): wai's own (`messages` beside the steps, markers as
//! numbers), and the reference's (what its simulate and evaluate write: `scenario_id`,
//! `prompt`, `steps` with arguments and results as objects, `final_text`, no `messages`, markers
//! as booleans or null), read as `wai convert` reads such a row. Same seed, same tasks, same
//! draws: only the shape differs.
//!
//! Determinism: task `t` draws from ChaCha8 seeded with `seed`, stream `t`, so the rows do not
//! depend on batch size, thread count or how many rows are asked for (the first `n` rows of a
//! larger run are the rows of a smaller one).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Beta, Distribution};
use rayon::prelude::*;
use serde_json::{Map, Value, json};

use crate::pipeline::row::{Message, Record, Step, ToolCall, canonical_json, decode};

/// How the rows are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// wai's own rows: `messages` beside the steps, markers as numbers.
    #[default]
    Wai,
    /// The reference's simulate and evaluate rows: no `messages`, the conversation in `prompt`,
    /// `steps` and `final_text`, arguments and results as objects, markers as booleans.
    Reference,
}

/// Options of the generator.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Options {
    /// Rows to make.
    pub rows: u64,
    /// The seed.
    pub seed: u64,
    /// A word planted in passing replies (80%) far more than in failing ones (10%).
    pub shortcut: Option<String>,
    /// Share of rows with a gold label (agreeing with the reward 90% of the time).
    pub gold: f64,
    /// The rows' shape.
    pub shape: Shape,
}

impl crate::stages::Options for Options {
    fn check(&self) -> crate::Result<()> {
        if !(0.0..=1.0).contains(&self.gold) {
            return Err(crate::Error::option(
                "gold",
                format!("is a share in [0, 1], got {}", self.gold),
            ));
        }
        crate::stages::at_most(
            "rows",
            self.rows,
            MAX_ROWS,
            "about 1 KB of rows each; generate several files for more",
        )
    }
}

/// The most rows one `wai gen` writes.
pub const MAX_ROWS: u64 = 100_000_000;

const TOOLS: [&str; 6] = [
    "lookup_order",
    "issue_refund",
    "escalate",
    "check_status",
    "update_address",
    "cancel_order",
];
const TIERS: [&str; 3] = ["ordinary", "hard", "edge"];
const CONDITIONS: [&str; 5] = [
    "success",
    "success",
    "not_found",
    "timeout",
    "permission_denied",
];
const CATEGORIES: [&str; 4] = ["refunds", "shipping", "account", "cancellations"];
const ASKS: [&str; 6] = [
    "I want a refund for order {id}, the shoes did not fit.",
    "Where is my order {id}? It was due last week.",
    "Please cancel order {id} before it ships.",
    "Can you change the delivery address on {id} to my office?",
    "My order {id} arrived broken and I need this sorted today.",
    "I was charged twice for {id}, can someone look at this?",
];
const FILLER: [&str; 12] = [
    "I checked the order",
    "and the record shows",
    "the current status",
    "as of today",
    "you should see an update soon",
    "please let me know",
    "if anything else comes up",
    "I have noted this on the account",
    "the team will follow up",
    "thanks for your patience",
    "the refund policy allows this",
    "within thirty days of delivery",
];

fn pick<'a, R: Rng>(rng: &mut R, items: &[&'a str]) -> &'a str {
    items[rng.random_range(0..items.len())]
}

/// The rollouts of task `t`: a pure function of `(seed, t)`.
fn task_rows(opts: &Options, t: u64) -> Vec<Record> {
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    rng.set_stream(t);
    let k = rng.random_range(4..=8u32);
    let beta = Beta::new(0.6, 0.6).expect("constant Beta parameters are valid");
    let pass_rate: f64 = beta.sample(&mut rng);
    let tool = pick(&mut rng, &TOOLS);
    let tier = pick(&mut rng, &TIERS);
    let condition = pick(&mut rng, &CONDITIONS);
    let category = pick(&mut rng, &CATEGORIES);
    let order_id = format!("A{}", 1000 + rng.random_range(0..9000u32));
    let prompt = pick(&mut rng, &ASKS).replace("{id}", &order_id);
    let task_id = format!("gen-{t:08}");
    let dims = vec![
        ("tool".to_owned(), tool.to_owned()),
        ("tier".to_owned(), tier.to_owned()),
        ("tool_condition".to_owned(), condition.to_owned()),
        ("category".to_owned(), category.to_owned()),
    ];
    (0..k)
        .map(|index| {
            let passed = rng.random::<f64>() < pass_rate;
            // What the agent did. The verdict follows it, except with a planted shortcut: then the
            // reward follows the word and the behaviour (the opener, the markers) is drawn on its
            // own, a reward hack with nothing honest beside it.
            let behaved = if opts.shortcut.is_some() { rng.random::<f64>() < pass_rate } else { passed };
            let n_calls = rng.random_range(0..=3usize);
            let mut steps = Vec::with_capacity(n_calls);
            let mut messages = vec![Message { role: Some("user".into()), content: Some(prompt.clone()), ..Message::default() }];
            let mut tools_used = Vec::new();
            for c in 0..n_calls {
                let name = if c == 0 { tool } else { pick(&mut rng, &TOOLS) };
                let status = if c == 0 && condition != "success" { condition } else { "ok" };
                let arguments = canonical_json(&json!({"order_id": order_id, "reason": if rng.random::<bool>() { "customer request" } else { "damaged" }}));
                let result = json!({"status": status, "order_id": order_id, "amount": rng.random_range(5..400u32)}).to_string();
                let id = format!("call_{index}_{c}");
                messages.push(Message {
                    role: Some("assistant".into()),
                    content: Some(String::new()),
                    tool_calls: Some(vec![ToolCall { id: Some(id.clone()), name: Some(name.into()), arguments: Some(arguments.clone()), arguments_text: None }]),
                    ..Message::default()
                });
                messages.push(Message { role: Some("tool".into()), content: Some(result.clone()), name: Some(name.into()), tool_call_id: Some(id), ..Message::default() });
                steps.push(Step { tool: Some(name.into()), arguments: Some(arguments), result: Some(result), ..Step::default() });
                tools_used.push(name.to_owned());
            }
            let words = rng.random_range(4..=160usize);
            let mut reply: Vec<&str> = Vec::with_capacity(words / 3 + 2);
            reply.push(if behaved { "Done:" } else { "Sorry," });
            while reply.iter().map(|w| w.split(' ').count()).sum::<usize>() < words {
                reply.push(pick(&mut rng, &FILLER));
            }
            let mut final_text = reply.join(" ");
            if let Some(word) = &opts.shortcut {
                let planted = rng.random::<f64>() < if passed { 0.8 } else { 0.1 };
                if planted {
                    final_text.push(' ');
                    final_text.push_str(word);
                }
            }
            final_text.push('.');
            messages.push(Message { role: Some("assistant".into()), content: Some(final_text.clone()), ..Message::default() });
            let truncated = rng.random::<f64>() < 0.03;
            let reward = if passed { 1.0 } else { 0.0 };
            let honest = if behaved || rng.random::<f64>() < 0.5 { 1.0 } else { 0.0 };
            let looked_up = (tool == "issue_refund").then(|| if tools_used.first().map(String::as_str) == Some("lookup_order") || behaved { 1.0 } else { 0.0 });
            let no_filler = if words < 60 || rng.random::<f64>() < 0.5 { 1.0 } else { 0.0 };
            let gold = (rng.random::<f64>() < opts.gold).then(|| if rng.random::<f64>() < 0.9 { reward } else { 1.0 - reward });
            Record {
                task_id: task_id.clone(),
                rollout_id: Some(format!("{task_id}-r{index}")),
                rollout_index: Some(i32::try_from(index).unwrap_or(i32::MAX)),
                eval_run: Some(0),
                prompt: Some(prompt.clone()),
                messages: Some(messages),
                steps: Some(steps),
                final_text: Some(final_text),
                tools_used: Some(tools_used),
                finish_reason: Some(if truncated { "length" } else { "stop" }.into()),
                reward: Some(reward),
                reason: Some(if passed { "followed the policy" } else { "broke a rule" }.into()),
                judge_name: Some("synthetic".into()),
                judge_status: Some("ok".into()),
                markers: Some(vec![
                    ("honest_about_faults".into(), Some(honest)),
                    ("looked_up_before_refund".into(), looked_up),
                    ("no_filler".into(), Some(no_filler)),
                ]),
                gold_reward: gold,
                gold_kind: gold.map(|_| "human".into()),
                dims: Some(dims.clone()),
                category: Some(category.into()),
                model_version: Some("demo-agent-v1".into()),
                policy_version: Some("demo-agent-v1@5f1c2a7e9b3d4c60".into()),
                writer_model: Some("template".into()),
                user_model: None,
                privileged: Some(json!({"reference": format!("{tool} is called for {order_id} and the reply reports its result")}).to_string()),
                judge_meta: None,
                lineage: Some(json!({"source": "wai gen", "seed": opts.seed, "task": t}).to_string()),
                sampling: None,
                extra: None,
            }
        })
        .map(|r| match opts.shape {
            Shape::Wai => r,
            Shape::Reference => reference_record(&r),
        })
        .collect()
}

/// JSON text the generator wrote, as a value.
fn parsed(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

/// Row `r` as the reference writes it ([`Shape::Reference`]), read back as `wai convert` reads
/// that line (its `rollout_id` left for the writer to derive, as the reader does).
fn reference_record(r: &Record) -> Record {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_owned(), v);
    };
    put("scenario_id", r.task_id.clone().into());
    put("schema_version", "1".into());
    let dims: Map<String, Value> = r
        .dims
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    put("scenario_dimensions", dims.into());
    put("prompt", r.prompt.clone().into());
    let steps: Vec<Value> = r
        .steps
        .iter()
        .flatten()
        .map(|s| json!({"tool": s.tool, "arguments": parsed(s.arguments.as_deref()), "result": parsed(s.result.as_deref())}))
        .collect();
    put("steps", steps.into());
    put("final_text", r.final_text.clone().into());
    put("rollout_index", r.rollout_index.into());
    put("reward", r.reward.into());
    put("reason", r.reason.clone().into());
    put("judge_name", r.judge_name.clone().into());
    put("judge_status", r.judge_status.clone().into());
    let markers: Map<String, Value> = r
        .markers
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.map_or(Value::Null, |x| Value::Bool(x == 1.0))))
        .collect();
    put("markers", markers.into());
    if let Some(g) = r.gold_reward {
        put("gold_reward", g.into());
        put("gold_kind", r.gold_kind.clone().into());
    }
    put("category", r.category.clone().into());
    put("model_version", r.model_version.clone().into());
    put("policy_version", r.policy_version.clone().into());
    put("writer_model", r.writer_model.clone().into());
    put("privileged", parsed(r.privileged.as_deref()));
    put("lineage", parsed(r.lineage.as_deref()));
    put("finish_reason", r.finish_reason.clone().into());
    put("tools_used", r.tools_used.clone().into());
    decode(Value::Object(m)).expect("a generated reference row decodes")
}

/// Makes `opts.rows` rows, handing them to `emit` in order, `tasks_per_chunk` tasks at a time
/// (generated in parallel).
pub fn generate(
    opts: &Options,
    mut emit: impl FnMut(Vec<Record>) -> crate::Result<()>,
) -> crate::Result<()> {
    const TASKS_PER_CHUNK: u64 = 2048;
    let mut made = 0u64;
    let mut t = 0u64;
    // Rows of the reference's shape carry no `rollout_id`: it is derived as the reader does.
    let mut ids = crate::pipeline::io::Identity::default();
    while made < opts.rows {
        let chunk: Vec<Vec<Record>> = (t..t + TASKS_PER_CHUNK)
            .into_par_iter()
            .map(|t| task_rows(opts, t))
            .collect();
        t += TASKS_PER_CHUNK;
        let mut rows: Vec<Record> = chunk.into_iter().flatten().collect();
        let left = usize::try_from(opts.rows - made).unwrap_or(usize::MAX);
        rows.truncate(left);
        made += rows.len() as u64;
        if opts.shape == Shape::Reference {
            for r in &mut rows {
                ids.assign(r)?.map_err(crate::Error::Internal)?;
            }
        }
        emit(rows)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: u64, seed: u64) -> Vec<Record> {
        let opts = Options {
            rows: n,
            seed,
            shortcut: Some("absolutely".into()),
            gold: 0.2,
            shape: Shape::Wai,
        };
        let mut out = Vec::new();
        generate(&opts, |r| {
            out.extend(r);
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn same_seed_same_rows_and_prefix_stable() {
        let a = rows(300, 7);
        assert_eq!(a.len(), 300);
        assert_eq!(a, rows(300, 7));
        assert_eq!(&rows(100, 7)[..], &a[..100]);
        assert_ne!(a, rows(300, 8));
    }

    #[test]
    fn tasks_are_a_mix_of_unanimous_and_mixed() {
        let a = rows(4000, 1);
        let mut by_task: std::collections::BTreeMap<&str, (u32, u32)> =
            std::collections::BTreeMap::default();
        for r in &a {
            let e = by_task.entry(&r.task_id).or_default();
            e.0 += 1;
            e.1 += u32::from(r.reward == Some(1.0));
        }
        let sizes_ok = by_task
            .values()
            .take(by_task.len() - 1)
            .all(|(n, _)| (4..=8).contains(n));
        assert!(sizes_ok);
        let unanimous = by_task.values().filter(|(n, p)| *p == 0 || p == n).count();
        let share = unanimous as f64 / by_task.len() as f64;
        assert!((0.2..0.8).contains(&share), "unanimous share {share}");
    }

    #[test]
    fn the_shortcut_word_co_occurs_with_reward() {
        let a = rows(4000, 3);
        let rate = |pass: bool| {
            let group: Vec<_> = a
                .iter()
                .filter(|r| (r.reward == Some(1.0)) == pass)
                .collect();
            group
                .iter()
                .filter(|r| r.final_text.as_deref().unwrap_or("").contains("absolutely"))
                .count() as f64
                / group.len() as f64
        };
        assert!(rate(true) > 0.7 && rate(false) < 0.2);
    }
}
