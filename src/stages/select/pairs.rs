//! Preference pairs: replies to the same ask, at least a margin apart in reward, each row used
//! once.

use foldhash::HashMap;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::stages::leak::leak;
use crate::stages::messages::{chosen_longer, messages_of, reply_chars};
use crate::stages::normalize::normalize;

/// Preference-pair settings.
#[derive(Debug, Clone)]
pub struct PairOptions {
    /// Smallest reward gap between the chosen and the rejected reply.
    pub min_margin: f64,
    /// Pairs per ask at most.
    pub max_pairs_per_prompt: usize,
    /// Pick the rejected reply closest in length to the chosen one.
    pub length_match: bool,
}

impl crate::stages::Options for PairOptions {
    fn check(&self) -> crate::Result<()> {
        if self.min_margin.is_nan() || self.min_margin <= 0.0 {
            return Err(crate::Error::option(
                "min_margin",
                format!("must be above 0, not {}", self.min_margin),
            ));
        }
        Ok(())
    }
}

/// What pair building did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PairReport {
    /// Pairs made.
    pub pairs: usize,
    /// Asks seen (task and prompt).
    pub prompts_seen: usize,
    /// Asks with replies far enough apart.
    pub prompts_with_contrast: usize,
    /// The margin asked for.
    pub min_margin: f64,
    /// Mean reward gap.
    pub mean_margin: f64,
    /// Pairs where a side has a partial score.
    pub partial_score_pairs: usize,
    /// Pairs whose first turn is the same (the difference comes later).
    pub first_turn_identical: usize,
    /// Pairs whose chosen reply is the longer.
    pub chosen_longer: usize,
    /// Rows skipped: not judged ok, or no reward in [0, 1].
    pub skipped: usize,
    /// Rows left out for quoting their privileged context.
    pub leaks_dropped: usize,
    /// Pairs with an eval-sourced side.
    pub eval_sourced: usize,
    /// What a person should know (an option named by its key in backticks: `` `length_match` ``).
    pub warnings: Vec<String>,
}

fn first_turn(row: &Map<String, Value>) -> String {
    if row
        .get("steps")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
        && let Some(msgs) = row.get("messages").and_then(Value::as_array)
    {
        for m in msgs
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        {
            if let Some(c) = m
                .get("tool_calls")
                .and_then(Value::as_array)
                .and_then(|c| c.first())
            {
                let f = c.get("function").unwrap_or(c);
                return format!(
                    "{}:{}",
                    f.get("name").and_then(Value::as_str).unwrap_or(""),
                    crate::pipeline::row::canonical_json(
                        f.get("arguments").unwrap_or(&Value::Null)
                    )
                );
            }
            if let Some(t) = m
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                return t.to_owned();
            }
        }
    }
    for s in row
        .get("steps")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(t) = s.get("tool").and_then(Value::as_str) {
            return format!(
                "{t}:{}",
                crate::pipeline::row::canonical_json(s.get("arguments").unwrap_or(&Value::Null))
            );
        }
        if let Some(t) = s
            .get("text")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            return t.to_owned();
        }
    }
    row.get("final_text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// What pairing needs of one row.
#[derive(Debug, Clone, PartialEq)]
pub enum PairRow {
    /// Not judged ok, or no reward in [0, 1].
    Skipped,
    /// A reply that quotes its privileged context: no side of a pair.
    Leak,
    /// A candidate side.
    Candidate {
        /// The ask: task (or scenario) and normalized prompt.
        key: String,
        /// Its reward, in [0, 1].
        reward: f64,
        /// Its reply's characters, when pairs are length-matched.
        chars: Option<usize>,
    },
}

/// Row `r` as pairing reads it (`chars` counted when `length_match`).
pub fn pair_row(r: &Map<String, Value>, length_match: bool) -> PairRow {
    let ok = r
        .get("judge_status")
        .and_then(Value::as_str)
        .is_none_or(|s| s == "ok");
    let reward = r
        .get("reward")
        .filter(|v| !v.is_boolean())
        .and_then(Value::as_f64)
        .filter(|x| (0.0..=1.0).contains(x));
    let Some(reward) = reward.filter(|_| ok) else {
        return PairRow::Skipped;
    };
    if leak(r, &messages_of(r)).1.is_some() {
        return PairRow::Leak;
    }
    let key = format!(
        "{}\u{1f}{}",
        ["scenario_id", "task_id"]
            .iter()
            .find_map(|k| r
                .get(*k)
                .filter(|v| !v.is_null())
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
            .unwrap_or_default(),
        normalize(r.get("prompt").and_then(Value::as_str).unwrap_or(""))
    );
    PairRow::Candidate {
        key,
        reward,
        chars: length_match.then(|| reply_chars(r)),
    }
}

/// One planned pair: the chosen and rejected rows (positions in the input) and their scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pairing {
    /// The chosen row.
    pub chosen: usize,
    /// The rejected row.
    pub rejected: usize,
    /// The chosen row's reward.
    pub chosen_score: f64,
    /// The rejected row's reward.
    pub rejected_score: f64,
}

/// The pairs to make from `rows` (as [`pair_row`] read them), in output order: replies to the
/// same ask, at least `min_margin` apart in reward, each row used once. The report holds what
/// the rows alone say; [`build_pairs`] adds what the paired rows say.
pub fn plan_pairs(rows: &[PairRow], opts: &PairOptions) -> (Vec<Pairing>, PairReport) {
    let mut report = PairReport {
        min_margin: opts.min_margin,
        ..PairReport::default()
    };
    let mut groups: Vec<Vec<(usize, f64, Option<usize>)>> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::default();
    for (i, r) in rows.iter().enumerate() {
        match r {
            PairRow::Skipped => report.skipped += 1,
            PairRow::Leak => report.leaks_dropped += 1,
            PairRow::Candidate { key, reward, chars } => {
                let g = *index.entry(key.as_str()).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[g].push((i, *reward, *chars));
            }
        }
    }
    report.prompts_seen = groups.len();
    let mut plan = Vec::new();
    for mut members in groups {
        // Best first; ties in file order.
        members.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut used = vec![false; members.len()];
        #[allow(
            clippy::cast_possible_wrap,
            reason = "reply lengths in characters are far below 2^63"
        )]
        let length = |j: usize| members[j].2.unwrap_or(0) as i64;
        let mut made = 0;
        for c in 0..members.len() {
            if made >= opts.max_pairs_per_prompt || used[c] {
                continue;
            }
            let (ci, cs, _) = members[c];
            let candidates = (0..members.len())
                .filter(|&j| j != c && !used[j] && cs - members[j].1 >= opts.min_margin - 1e-12);
            let pick = if opts.length_match {
                let len = length(c);
                candidates.min_by_key(|&j| (length(j) - len).abs())
            } else {
                candidates.into_iter().next()
            };
            let Some(j) = pick else { continue };
            used[c] = true;
            used[j] = true;
            made += 1;
            plan.push(Pairing {
                chosen: ci,
                rejected: members[j].0,
                chosen_score: cs,
                rejected_score: members[j].1,
            });
        }
        if made > 0 {
            report.prompts_with_contrast += 1;
        }
    }
    (plan, report)
}

/// The pair records of `plan`, with `row(i)` the input's row `i` (every row `plan` names), and
/// the report completed with what the paired rows say, and its warnings.
pub fn build_pairs<'r>(
    plan: &[Pairing],
    row: impl Fn(usize) -> &'r Map<String, Value>,
    mut report: PairReport,
) -> (Vec<Value>, PairReport) {
    let mut out = Vec::with_capacity(plan.len());
    let mut margins = 0.0;
    for p in plan {
        let (chosen, rejected) = (row(p.chosen), row(p.rejected));
        let (cs, rs) = (p.chosen_score, p.rejected_score);
        let margin = ((cs - rs) * 1e6).round() / 1e6;
        margins += margin;
        let model = |r: &Map<String, Value>| r.get("model_version").cloned().unwrap_or(Value::Null);
        let same_policy = match (chosen.get("model_version"), rejected.get("model_version")) {
            (Some(a), Some(b)) => Value::Bool(a == b),
            _ => Value::Null,
        };
        let (lc, lr) = (reply_chars(chosen), reply_chars(rejected));
        report.chosen_longer += usize::from(chosen_longer(chosen, rejected));
        let differs = first_turn(chosen) != first_turn(rejected);
        report.first_turn_identical += usize::from(!differs);
        report.partial_score_pairs +=
            usize::from(![0.0, 1.0].contains(&cs) || ![0.0, 1.0].contains(&rs));
        let eval = |r: &Map<String, Value>| {
            r.get("lineage")
                .and_then(|l| l.get("source"))
                .and_then(Value::as_str)
                == Some("eval")
        };
        report.eval_sourced += usize::from(eval(chosen) || eval(rejected));
        let failure = rejected
            .get("failure_class")
            .or_else(|| {
                rejected
                    .get("judge_meta")
                    .and_then(|m| m.get("failure_class"))
            })
            .cloned()
            .unwrap_or(Value::Null);
        #[allow(
            clippy::cast_possible_wrap,
            reason = "reply lengths in characters are far below 2^63"
        )]
        let length_delta = lc as i64 - lr as i64;
        out.push(serde_json::json!({
            "prompt": chosen.get("prompt").cloned().unwrap_or(Value::Null),
            "chosen": Value::Object(chosen.clone()),
            "rejected": Value::Object(rejected.clone()),
            "chosen_score": cs, "rejected_score": rs, "margin": margin,
            "chosen_model": model(chosen), "rejected_model": model(rejected), "same_policy": same_policy,
            "length_delta": length_delta, "first_turn_differs": differs,
            "chosen_reason": chosen.get("reason").cloned().unwrap_or(Value::Null),
            "rejected_reason": rejected.get("reason").cloned().unwrap_or(Value::Null),
            "rejected_failure_class": failure,
            "lineage": {"chosen": chosen.get("lineage").cloned().unwrap_or(Value::Null), "rejected": rejected.get("lineage").cloned().unwrap_or(Value::Null)},
        }));
    }
    report.pairs = out.len();
    report.mean_margin = if out.is_empty() {
        0.0
    } else {
        margins / out.len() as f64
    };
    let n = out.len();
    if (n >= 8 && report.chosen_longer * 4 >= n * 3) || (n >= 3 && report.chosen_longer == n) {
        report.warnings.push(format!(
            "the chosen reply is the longer one in {} of {n} pairs: a preference trainer will learn length; pass `length_match`",
            report.chosen_longer
        ));
    }
    if report.eval_sourced > 0 {
        report.warnings.push(format!("{} pair(s) hold rewards from an eval (lineage.source == \"eval\"); training on them turns the held-out scorer into the reward model", report.eval_sourced));
    }
    if n == 0 {
        report.warnings.push(format!(
            "no pairs: no ask has two judged replies at least {} apart in reward",
            report.min_margin
        ));
    }
    (out, report)
}

impl std::fmt::Display for PairReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "preference pairs: {} from {} of {} asks (margin >= {}, mean {:.2}); first turn identical in {}; chosen longer in {}; {} rows skipped (not judged ok), {} for privileged leaks",
            self.pairs,
            self.prompts_with_contrast,
            self.prompts_seen,
            self.min_margin,
            self.mean_margin,
            self.first_turn_identical,
            self.chosen_longer,
            self.skipped,
            self.leaks_dropped
        )?;
        for w in &self.warnings {
            writeln!(f, "  warning: {w}")?;
        }
        Ok(())
    }
}
