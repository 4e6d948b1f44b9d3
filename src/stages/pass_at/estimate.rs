//! The numerics of pass@k on per-task counts: the three numbers, their intervals, notes, config.

use crate::stats::interval::{self, Method};
use crate::stats::{bootstrap, passk, sum};

/// One task's graded binary rollouts `n` and passes `c`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskCounts {
    /// The task.
    pub task_id: String,
    /// Graded binary rollouts.
    pub n: u64,
    /// Passes.
    pub c: u64,
}

/// Row-level facts of one slice, for notes and the run config.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Facts {
    /// Rows.
    pub rows: u64,
    /// Rows with a reward (binary or partial).
    pub graded: u64,
    /// Smallest reward.
    #[serde(with = "float_text")]
    pub reward_min: Option<f64>,
    /// Largest reward.
    #[serde(with = "float_text")]
    pub reward_max: Option<f64>,
    /// Rows with a non-empty `judge_status`.
    pub status_rows: u64,
    /// Of those, rows whose status is not `ok`.
    pub failed_rows: u64,
    /// The distinct failing statuses, sorted.
    pub failed_statuses: Vec<String>,
    /// A failing row's reason (the smallest, for determinism).
    pub failed_reason: Option<String>,
    /// Rows with a `finish_reason`.
    pub finish_rows: u64,
    /// Rows cut by the token cap.
    pub truncated_rows: u64,
    /// Rows whose spoken reply is known.
    pub spoken_known: u64,
    /// Rows with a non-blank spoken reply.
    pub spoken_answered: u64,
    /// Rows with an unclosed `<think>`.
    pub spoken_unclosed: u64,
    /// (distinct values, the value) of each config field.
    pub temperature: (u64, Option<f64>),
    #[allow(missing_docs)]
    pub max_tokens: (u64, Option<i64>),
    #[allow(missing_docs)]
    pub policy_version: (u64, Option<String>),
    #[allow(missing_docs)]
    pub judge_version: (u64, Option<String>),
    #[allow(missing_docs)]
    pub prompt_hash: (u64, Option<String>),
    #[allow(missing_docs)]
    pub user_model: (u64, Option<String>),
    #[allow(missing_docs)]
    pub writer_model: (u64, Option<String>),
}

/// A reward as JSON keeps it: a number, or `"NaN"` and `"inf"`/`"-inf"` as text (JSON has no
/// such number, and a NaN reward read back as none would change a merged count's notes).
mod float_text {
    use serde::{Deserialize, Deserializer, Serializer};

    #[allow(
        clippy::ref_option,
        reason = "serde's `with` passes the field by reference"
    )]
    pub(super) fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(x) if x.is_finite() => s.serialize_some(x),
            Some(x) => s.serialize_some(&x.to_string()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Num {
            Number(f64),
            Text(String),
        }
        Ok(match Option::<Num>::deserialize(d)? {
            None => None,
            Some(Num::Number(x)) => Some(x),
            Some(Num::Text(t)) => Some(t.parse().map_err(serde::de::Error::custom)?),
        })
    }
}

/// How the rows were made: each field is the one value every row that has it agrees on; fields
/// the rows disagree on are null and listed in `mixed`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[allow(missing_docs)]
pub struct RunConfig {
    pub n_tasks: u64,
    pub k: u32,
    pub temperature: Option<f64>,
    pub max_tokens: Option<i64>,
    pub policy_version: Option<String>,
    pub judge_version: Option<String>,
    pub prompt_hash: Option<String>,
    pub user_model: Option<String>,
    pub writer_model: Option<String>,
    pub mixed: Vec<String>,
    /// Share of rows with a `finish_reason` that were cut by the token cap.
    pub truncated_share: Option<f64>,
    /// Share of rows with a known reply that have a spoken reply.
    pub answered_share: Option<f64>,
    /// Share of rows with a known reply that have an unclosed `<think>`.
    pub unclosed_think_share: Option<f64>,
    /// Share of rows with a reward.
    pub graded_share: Option<f64>,
}

/// pass@1, pass^k and pass@k of one set of rows, with intervals, notes and run config.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PassAt {
    /// The k of pass^k and pass@k.
    pub k: u32,
    /// Mean per-task pass rate.
    pub pass_at_1: Option<f64>,
    /// Mean per-task C(c,k)/C(n,k).
    pub pass_pow_k: Option<f64>,
    /// Mean per-task 1 − C(n−c,k)/C(n,k).
    pub pass_at_k: Option<f64>,
    /// pass@k − pass@1.
    pub headroom: Option<f64>,
    /// Tasks with at least one binary verdict.
    pub n_groups: u64,
    /// Tasks that count toward pass^k and pass@k.
    pub n_groups_at_k: u64,
    /// Of those, short unanimous tasks counted at their unanimous value.
    pub n_groups_imputed: u64,
    /// Rows with a partial reward (not in the numbers).
    pub n_partial: u64,
    /// Rows with a binary verdict.
    pub n_rows: u64,
    /// Rows without a reward.
    pub n_unjudged: u64,
    /// What to know before reading the numbers.
    pub note: String,
    /// 95% interval of pass@1 over tasks.
    pub ci95: Option<[f64; 2]>,
    /// How the intervals were made (`wilson`, `t`, `percentile`).
    pub interval: Method,
    /// The task count is under [`interval::RELIABLE_TASKS`]: the intervals are approximate
    /// (the coverage study finds under 93% in some cells there).
    pub interval_approximate: bool,
    /// The numbers (`pass_at_1`, `pass_pow_k`, `pass_at_k`) whose interval sits within
    /// [`interval::NEAR_END_TASKS`] tasks of 0% or 100%, from [`interval::RELIABLE_TASKS`] tasks
    /// up: approximate there (see [`interval::near_end`]).
    pub interval_near_end: Vec<&'static str>,
    /// Interval of pass^k.
    pub pass_pow_k_ci95: Option<[f64; 2]>,
    /// Interval of pass@k.
    pub pass_at_k_ci95: Option<[f64; 2]>,
    /// How the rows were made.
    pub config: RunConfig,
    /// Per-task pass rates, by task id (not serialised: it has one entry per task).
    #[serde(skip)]
    pub per_task: Vec<(String, f64)>,
    /// "every row scored v (n of n); ...", when every graded row scored one value (also in
    /// `note`; kept apart for the grade warnings).
    #[serde(skip)]
    pub unanimous: Option<String>,
}

/// Python's `round(x, 4)`.
fn round4(x: f64) -> f64 {
    crate::stats::round_places(x, 4)
}

#[allow(clippy::cast_precision_loss)]
fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| round4(part as f64 / whole as f64))
}

fn agreed<T: Clone>(
    name: &str,
    (distinct, value): &(u64, Option<T>),
    mixed: &mut Vec<String>,
) -> Option<T> {
    match distinct {
        1 => value.clone(),
        0 => None,
        _ => {
            mixed.push(name.to_owned());
            None
        }
    }
}

/// The run config of rows with `facts`, `n_tasks` tasks and k `k`.
pub fn run_config(facts: &Facts, n_tasks: u64, k: u32) -> RunConfig {
    let mut mixed = Vec::new();
    RunConfig {
        n_tasks,
        k,
        temperature: agreed("temperature", &facts.temperature, &mut mixed),
        max_tokens: agreed("max_tokens", &facts.max_tokens, &mut mixed),
        policy_version: agreed("policy_version", &facts.policy_version, &mut mixed),
        judge_version: agreed("judge_version", &facts.judge_version, &mut mixed),
        prompt_hash: agreed("prompt_hash", &facts.prompt_hash, &mut mixed),
        user_model: agreed("user_model", &facts.user_model, &mut mixed),
        writer_model: agreed("writer_model", &facts.writer_model, &mut mixed),
        mixed,
        truncated_share: share(facts.truncated_rows, facts.finish_rows),
        answered_share: share(facts.spoken_answered, facts.spoken_known),
        unclosed_think_share: share(facts.spoken_unclosed, facts.spoken_known),
        graded_share: share(facts.graded, facts.rows),
    }
}

/// "every row scored 1 (10 of 10); check the judge before reading this number", when at least
/// two rows carry a reward and they are all equal.
fn degenerate_note(facts: &Facts) -> Option<String> {
    let (lo, hi) = (facts.reward_min?, facts.reward_max?);
    if facts.graded < 2 || lo != hi {
        return None;
    }
    let v = crate::report::score_text(lo);
    Some(format!(
        "every row scored {v} ({n} of {n}); check the judge before reading this number",
        n = facts.graded
    ))
}

fn nothing_to_score(facts: &Facts) -> String {
    if facts.status_rows == 0 || facts.failed_rows < facts.status_rows {
        return "no binary rewards; grade first".to_owned();
    }
    let tail = facts
        .failed_reason
        .as_deref()
        .filter(|r| !r.is_empty())
        .map(|r| format!(": {}", r.chars().take(120).collect::<String>()))
        .unwrap_or_default();
    format!(
        "the judge failed on all {} rows ({}){tail}; re-run the judge",
        facts.status_rows,
        facts.failed_statuses.join("/")
    )
}

/// The reference's note when an interval cannot be had.
pub fn no_interval_note(n_tasks: usize, quantity: &str) -> String {
    let tasks = if n_tasks == 1 {
        "1 task".to_owned()
    } else {
        format!("{n_tasks} tasks")
    };
    format!(
        "no interval on {quantity}: {tasks}, and a bootstrap needs 3; it resamples tasks, so run more tasks, or give each row its own task_id when the rows are separate items"
    )
}

fn ci(values: &[f64], opts: &super::Options) -> Option<[f64; 2]> {
    interval::of_shares(
        values,
        opts.interval,
        opts.draws,
        opts.seed,
        bootstrap::LEVEL,
    )
    .map(|(lo, hi)| [lo, hi])
}

fn join(parts: impl IntoIterator<Item = String>) -> String {
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The default k: the smallest group of two or more graded rollouts, else 1.
pub fn default_k(group_sizes: impl IntoIterator<Item = u64>) -> u32 {
    group_sizes
        .into_iter()
        .filter(|n| *n >= 2)
        .min()
        .map_or(1, |m| u32::try_from(m).unwrap_or(u32::MAX))
}

/// The numbers when no task has a graded rollout: nothing to estimate, and notes saying why.
fn no_tasks(
    n_partial: u64,
    n_unjudged: u64,
    facts: &Facts,
    k: Option<u32>,
    opts: &super::Options,
) -> PassAt {
    let k = k.unwrap_or(1);
    PassAt {
        k,
        pass_at_1: None,
        pass_pow_k: None,
        pass_at_k: None,
        headroom: None,
        n_groups: 0,
        n_groups_at_k: 0,
        n_groups_imputed: 0,
        n_partial,
        n_rows: 0,
        n_unjudged,
        note: join([
            degenerate_note(facts).unwrap_or_default(),
            nothing_to_score(facts),
        ]),
        unanimous: degenerate_note(facts),
        ci95: None,
        interval: opts.interval,
        interval_approximate: false,
        interval_near_end: Vec::new(),
        pass_pow_k_ci95: None,
        pass_at_k_ci95: None,
        config: run_config(facts, 0, k),
        per_task: Vec::new(),
    }
}

/// pass^k and pass@k over the tasks that reached k (and, with `unanimous_short`, the short
/// unanimous ones at their value), or the note saying why there are none.
#[derive(Default)]
struct AtK {
    /// Mean of per-task pass^k.
    pow: Option<f64>,
    /// Mean of per-task pass@k.
    at: Option<f64>,
    /// Tasks counted.
    counted: u64,
    /// Of them, short unanimous tasks counted at their value.
    imputed: u64,
    /// Per-task pass^k, for the interval.
    pow_vals: Vec<f64>,
    /// Per-task pass@k, for the interval.
    at_vals: Vec<f64>,
    /// Why k is what it is, or why there is no number.
    note: String,
}

/// [`AtK`] for `tasks` at `k`; `sizes` are the distinct group sizes of two or more, sorted, and
/// `uneven` says k was defaulted over groups of several sizes.
fn at_k(tasks: &[TaskCounts], k: u32, sizes: &[u64], uneven: bool, opts: &super::Options) -> AtK {
    let k64 = u64::from(k);
    if k < opts.min_k.max(1) {
        let note = if uneven {
            let (lo, hi) = (sizes[0], sizes[sizes.len() - 1]);
            let reached = tasks.iter().filter(|t| t.n >= 2 && t.n >= hi).count();
            format!(
                "groups are uneven ({lo} to {hi} repeats); k defaults to the smallest, so pass k={hi} to score the {reached} group(s) that reached it, or finish the cut groups"
            )
        } else {
            format!("set repeats>={} for pass^k and pass@k", opts.min_k)
        };
        return AtK {
            note,
            ..AtK::default()
        };
    }
    let eligible: Vec<&TaskCounts> = tasks.iter().filter(|t| t.n >= k64).collect();
    let imputed: Vec<&TaskCounts> = if opts.unanimous_short {
        tasks
            .iter()
            .filter(|t| t.n < k64 && (t.c == 0 || t.c == t.n))
            .collect()
    } else {
        Vec::new()
    };
    if eligible.is_empty() && imputed.is_empty() {
        return AtK {
            note: format!("no group has {k} graded repeats"),
            ..AtK::default()
        };
    }
    let mut out = AtK::default();
    for t in &eligible {
        out.pow_vals
            .push(passk::pass_pow_k(t.n, t.c, k64).unwrap_or(f64::NAN));
        out.at_vals
            .push(passk::pass_at_k(t.n, t.c, k64).unwrap_or(f64::NAN));
    }
    for t in &imputed {
        let v = if t.c == t.n { 1.0 } else { 0.0 };
        out.pow_vals.push(v);
        out.at_vals.push(v);
    }
    out.pow = sum::mean(&out.pow_vals);
    out.at = sum::mean(&out.at_vals);
    out.counted = (eligible.len() + imputed.len()) as u64;
    out.imputed = imputed.len() as u64;
    if uneven {
        out.note = format!(
            "groups are uneven ({} to {} repeats); k is the smallest",
            sizes[0],
            sizes[sizes.len() - 1]
        );
    }
    out
}

/// Computes the numbers for `tasks` (ordered by task id, each with `n > 0`) at `k` (`None` =
/// the default), as measure spec §2 describes.
pub fn estimate(
    tasks: &[TaskCounts],
    n_partial: u64,
    n_unjudged: u64,
    facts: &Facts,
    k: Option<u32>,
    opts: &super::Options,
) -> PassAt {
    if tasks.is_empty() {
        return no_tasks(n_partial, n_unjudged, facts, k, opts);
    }
    let n_rows: u64 = tasks.iter().map(|t| t.n).sum();
    #[allow(clippy::cast_precision_loss, reason = "pass and rollout counts")]
    let per_task: Vec<(String, f64)> = tasks
        .iter()
        .map(|t| (t.task_id.clone(), t.c as f64 / t.n as f64))
        .collect();
    let rates: Vec<f64> = per_task.iter().map(|(_, r)| *r).collect();
    let pass_at_1 = sum::mean(&rates);
    let k_given = k.is_some();
    let k = k.unwrap_or_else(|| default_k(tasks.iter().map(|t| t.n)));
    let mut sizes: Vec<u64> = tasks.iter().map(|t| t.n).filter(|n| *n >= 2).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let uneven = !k_given && sizes.len() > 1;
    let numbers = at_k(tasks, k, &sizes, uneven, opts);

    let ci95 = ci(&rates, opts);
    let mut parts = vec![numbers.note];
    if ci95.is_none() {
        parts.push(no_interval_note(tasks.len(), "pass@1"));
    }
    // The warning is the new intervals' own: `percentile` prints the reference's line as it is.
    let approximate = ci95.and(interval::approximate_note(tasks.len()));
    let interval_approximate = approximate.is_some();
    parts.extend(approximate.filter(|_| opts.interval != Method::Percentile));
    let (pow, at) = (numbers.pow, numbers.at);
    let pass_pow_k_ci95 = pow.and_then(|_| ci(&numbers.pow_vals, opts));
    let pass_at_k_ci95 = at.and_then(|_| ci(&numbers.at_vals, opts));
    let mut interval_near_end = Vec::new();
    let mut described = Vec::new();
    for (key, what, values, printed) in [
        ("pass_at_1", "pass@1".to_owned(), &rates, ci95.is_some()),
        (
            "pass_pow_k",
            format!("pass^{k}"),
            &numbers.pow_vals,
            pass_pow_k_ci95.is_some(),
        ),
        (
            "pass_at_k",
            format!("pass@{k}"),
            &numbers.at_vals,
            pass_at_k_ci95.is_some(),
        ),
    ] {
        // At k = 1, pass^1 and pass@1 are pass@1 again.
        let again = k == 1 && key != "pass_at_1";
        if let Some(end) = interval::near_end(values).filter(|_| printed && !again) {
            interval_near_end.push(key);
            described.push(end.describe(&what, ("failed", "passed")));
        }
    }
    let unanimous = degenerate_note(facts);
    // A unanimous run's note already says every number sits at an end.
    if opts.interval != Method::Percentile && unanimous.is_none() {
        parts.extend(interval::near_end_note(&described));
    }
    if n_partial > 0 {
        parts.push(format!(
            "{n_partial} row(s) carried a reward that is not 0 or 1 and are not in this number; give each Criterion kind='hard' for a 0/1 verdict"
        ));
    }
    if let Some(d) = &unanimous {
        parts.insert(0, d.clone());
    }
    PassAt {
        k,
        pass_at_1,
        pass_pow_k: pow,
        pass_at_k: at,
        headroom: at.zip(pass_at_1).map(|(a, p)| a - p),
        n_groups: tasks.len() as u64,
        n_groups_at_k: numbers.counted,
        n_groups_imputed: numbers.imputed,
        n_partial,
        n_rows,
        n_unjudged,
        note: join(parts),
        ci95,
        interval: opts.interval,
        interval_approximate,
        interval_near_end,
        pass_pow_k_ci95,
        pass_at_k_ci95,
        config: run_config(facts, tasks.len() as u64, k),
        per_task,
        unanimous,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn tasks_with_at_least(k: u64) -> impl Strategy<Value = Vec<TaskCounts>> {
        prop::collection::vec((k..k + 8).prop_flat_map(|n| (Just(n), 0..=n)), 3..40).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (n, c))| TaskCounts {
                    task_id: format!("t{i:03}"),
                    n,
                    c,
                })
                .collect()
        })
    }

    fn inside(x: Option<f64>, ci: Option<[f64; 2]>) -> bool {
        match (x, ci) {
            (Some(x), Some([lo, hi])) => lo <= x + 1e-12 && x <= hi + 1e-12,
            _ => false,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn pass_pow_k_le_pass_at_1_le_pass_at_k_and_intervals_hold_them(k in 1u32..5, tasks in (1u64..5).prop_flat_map(tasks_with_at_least)) {
            let k = k.min(u32::try_from(tasks.iter().map(|t| t.n).min().unwrap()).unwrap());
            let opts = crate::stages::pass_at::Options { k: vec![k], min_k: 1, draws: 300, ..Default::default() };
            let r = estimate(&tasks, 0, 0, &Facts::default(), Some(k), &opts);
            let (pow, p1, at) = (r.pass_pow_k.unwrap(), r.pass_at_1.unwrap(), r.pass_at_k.unwrap());
            prop_assert!(pow <= p1 + 1e-12 && p1 <= at + 1e-12, "{pow} {p1} {at}");
            prop_assert!(inside(r.pass_at_1, r.ci95));
            prop_assert!(inside(r.pass_pow_k, r.pass_pow_k_ci95));
            prop_assert!(inside(r.pass_at_k, r.pass_at_k_ci95));
            prop_assert_eq!(r.n_groups_at_k, tasks.len() as u64);
        }

        #[test]
        fn point_estimates_do_not_depend_on_task_order(tasks in (4u64..5).prop_flat_map(tasks_with_at_least)) {
            let opts = crate::stages::pass_at::Options::default();
            let a = estimate(&tasks, 0, 0, &Facts::default(), None, &opts);
            let mut rev = tasks.clone();
            rev.reverse();
            let b = estimate(&rev, 0, 0, &Facts::default(), None, &opts);
            prop_assert_eq!((a.pass_at_1, a.pass_pow_k, a.pass_at_k), (b.pass_at_1, b.pass_pow_k, b.pass_at_k));
        }
    }

    #[test]
    fn under_three_tasks_there_is_no_interval_and_the_note_says_why() {
        let tasks = vec![
            TaskCounts {
                task_id: "a".into(),
                n: 4,
                c: 3,
            },
            TaskCounts {
                task_id: "b".into(),
                n: 4,
                c: 3,
            },
        ];
        let r = estimate(
            &tasks,
            0,
            0,
            &Facts::default(),
            None,
            &crate::stages::pass_at::Options::default(),
        );
        assert_eq!(r.ci95, None);
        assert!(
            r.note
                .starts_with("no interval on pass@1: 2 tasks, and a bootstrap needs 3"),
            "{}",
            r.note
        );
    }

    #[test]
    fn a_number_within_three_tasks_of_an_end_says_its_interval_is_approximate() {
        // 100 tasks of 8 rollouts: every task passes at least once but one. pass@8 = 0.99 is 1
        // task from 100%; pass@1 and pass^8 are far from both ends.
        let tasks: Vec<TaskCounts> = (0..100)
            .map(|i| TaskCounts {
                task_id: format!("t{i:03}"),
                n: 8,
                c: if i == 0 { 0 } else { 1 + i % 8 },
            })
            .collect();
        let opts = crate::stages::pass_at::Options::default();
        let r = estimate(&tasks, 0, 0, &Facts::default(), Some(8), &opts);
        assert_eq!(r.pass_at_k, Some(0.99));
        assert_eq!(r.interval_near_end, ["pass_at_k"]);
        assert!(!r.interval_approximate);
        assert!(
            r.note
                .ends_with("interval approximate near an end: pass@8 (1 of 100 tasks failed)"),
            "{}",
            r.note
        );
        // pass^8 is 12 tasks from 0% (those that passed all 8): not near an end.
        assert_eq!(r.pass_pow_k, Some(0.12));
        // The reference's interval prints the reference's line, and the JSON still says it.
        let p = estimate(
            &tasks,
            0,
            0,
            &Facts::default(),
            Some(8),
            &crate::stages::pass_at::Options {
                interval: Method::Percentile,
                ..opts.clone()
            },
        );
        assert_eq!(p.interval_near_end, ["pass_at_k"]);
        assert!(!p.note.contains("near an end"), "{}", p.note);
        // Four failing tasks of 100 are not near the end.
        let far: Vec<TaskCounts> = (0..100)
            .map(|i| TaskCounts {
                task_id: format!("t{i:03}"),
                n: 8,
                c: if i < 4 { 0 } else { 1 + i % 8 },
            })
            .collect();
        let f = estimate(&far, 0, 0, &Facts::default(), Some(8), &opts);
        assert!(
            !f.interval_near_end.contains(&"pass_at_k"),
            "{:?}",
            f.interval_near_end
        );
    }
}
