//! The measures the report is made of: the task halves, the gold kinds, agreement with its
//! interval and kappa, the labels a floor needs, the length check.

use sha2::{Digest, Sha256};

use super::{
    Agreement, Confusion, LABEL_SEARCH_MAX, LENGTH_ALPHA, LENGTH_MIN_ROWS_PER_LABEL, Labeled,
    Length, LengthSide, MIN_GOLD,
};
use crate::stats::kappa::{kappa, kappa_interval};
use crate::stats::{round_places, wilson};

/// The half of task `task`: the parity of the 8th hex digit of its SHA-256.
pub fn half(task: &str) -> u8 {
    Sha256::digest(task.as_bytes())[3] & 1
}

/// A 0/1 label or reward as 0 or 1; anything else is not one.
pub(crate) fn binary(x: f64) -> Option<u8> {
    if x == 0.0 {
        Some(0)
    } else if x == 1.0 {
        Some(1)
    } else {
        None
    }
}

pub(crate) fn is_binary(x: f64) -> bool {
    binary(x).is_some()
}

/// One word for the kinds of a set of labels: the kind when all share it (`verifier` reads as
/// `program`); a trusted mix (human and program) is `human+program`; otherwise the one untrusted
/// kind, or `mixed` when there are several.
pub fn gold_kind_of<'a>(kinds: impl Iterator<Item = Option<&'a str>>) -> Option<String> {
    let mut names: Vec<String> = kinds
        .map(|k| match k.filter(|k| !k.is_empty()).unwrap_or("unknown") {
            "verifier" => "program".to_owned(),
            k => k.to_owned(),
        })
        .collect();
    names.sort();
    names.dedup();
    match names.len() {
        0 => None,
        1 => names.pop(),
        _ => {
            let others: Vec<&String> = names.iter().filter(|k| !trusted_kind(k)).collect();
            Some(match others.len() {
                0 => "human+program".to_owned(),
                1 => others[0].clone(),
                _ => "mixed".to_owned(),
            })
        }
    }
}

/// Whether labels of `kind` measure a judge: a person's or a program's.
pub fn trusted_kind(kind: &str) -> bool {
    matches!(kind, "human" | "program" | "human+program")
}

pub(super) fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| round_places(a as f64 / b as f64, 4))
}

/// Agreement of the 0/1 pairs among `rows` (`considered` rows in all, for `n_skipped`).
pub fn agreement(rows: &[&Labeled], considered: u64) -> Agreement {
    let mut c = Confusion::default();
    let mut kinds = Vec::new();
    for r in rows {
        let Some(reward) = r.reward.filter(|x| is_binary(*x)) else {
            continue;
        };
        if !is_binary(r.gold) {
            continue;
        }
        match (reward == 1.0, r.gold == 1.0) {
            (true, true) => c.tp += 1,
            (true, false) => c.fp += 1,
            (false, true) => c.fn_ += 1,
            (false, false) => c.tn += 1,
        }
        kinds.push(r.kind.as_deref());
    }
    let n = c.n();
    let kappa = if c.one_valued_gold() && (c.fp + c.fn_ == 0) {
        // Both raters gave one value throughout: chance explains all agreement, kappa is 0/0.
        None
    } else {
        kappa(c.tp, c.fp, c.fn_, c.tn)
    };
    let kappa_ci95 = kappa.and_then(|_| kappa_interval(c.tp, c.fp, c.fn_, c.tn, wilson::Z_95));
    Agreement {
        n,
        n_skipped: considered.saturating_sub(n),
        n_unmatched: 0,
        agreement: ratio(c.tp + c.tn, n),
        kappa,
        kappa_ci95,
        confusion: c,
        pass_when_gold_fail: ratio(c.fp, c.fp + c.tn),
        fail_when_gold_pass: ratio(c.fn_, c.fn_ + c.tp),
        judge_pass_rate: ratio(c.tp + c.fp, n),
        gold_pass_rate: ratio(c.tp + c.fn_, n),
        gold_kind: if n > 0 {
            gold_kind_of(kinds.into_iter())
        } else {
            None
        },
        ci95: wilson::interval((c.tp + c.tn) as f64, n as f64, wilson::Z_95).map(|(l, h)| [l, h]),
    }
}

/// The smallest label count, from `n` up, at which `point` agreement has a Wilson lower bound of
/// at least `floor` (Python's half-to-even rounding of `point·need` successes), if under
/// [`LABEL_SEARCH_MAX`].
pub fn labels_needed(point: f64, n: u64, floor: f64) -> u64 {
    let mut need = n;
    while need < LABEL_SEARCH_MAX {
        let successes = (point * need as f64).round_ties_even();
        if wilson::interval(successes, need as f64, wilson::Z_95).is_some_and(|(lo, _)| lo >= floor)
        {
            break;
        }
        need += 1;
    }
    need
}

/// One side of the length split: (reply length, judge verdict) rows.
type Side<'a> = Vec<&'a (usize, f64)>;

/// The length check of the rows of one gold label.
fn length_side(
    rows: &[(usize, f64)],
    flag: f64,
    flagged: &mut bool,
    max_gap: &mut f64,
) -> LengthSide {
    let n = rows.len() as u64;
    if rows.len() < LENGTH_MIN_ROWS_PER_LABEL {
        return LengthSide::Unmeasured {
            n,
            note: "too few rows",
        };
    }
    let mut lengths: Vec<usize> = rows.iter().map(|r| r.0).collect();
    lengths.sort_unstable();
    let median = lengths[lengths.len() / 2];
    let (short, long): (Side<'_>, Side<'_>) = rows.iter().partition(|r| r.0 < median);
    if short.is_empty() || long.is_empty() {
        return LengthSide::Unmeasured {
            n,
            note: "no length spread",
        };
    }
    let rate = |v: &[&(usize, f64)]| v.iter().map(|r| r.1).sum::<f64>() / v.len() as f64;
    let (ns, nl) = (short.len() as f64, long.len() as f64);
    let (rs, rl) = (rate(&short), rate(&long));
    let gap = rl - rs;
    let pooled = (rs * ns + rl * nl) / n as f64;
    let se = (pooled * (1.0 - pooled) * (1.0 / ns + 1.0 / nl)).sqrt();
    let p = if se > 0.0 {
        2.0 * (1.0 - crate::stats::sizing::cdf(gap.abs() / se))
    } else if gap != 0.0 {
        0.0
    } else {
        1.0
    };
    if gap.abs() >= flag && p < LENGTH_ALPHA {
        *flagged = true;
    }
    *max_gap = max_gap.max(gap.abs());
    LengthSide::Measured {
        n,
        median_chars: median,
        judge_pass_short: rs,
        judge_pass_long: rl,
        gap_long_minus_short: gap,
        p_value: p,
    }
}

/// Length sensitivity over the pairs.
pub fn length(pairs: &[&Labeled], flag: f64) -> Length {
    let (mut flagged, mut max_gap) = (false, 0.0_f64);
    let mut side = |g: f64| {
        let rows: Vec<(usize, f64)> = pairs
            .iter()
            .filter(|r| r.gold == g)
            .map(|r| (r.reply_chars, r.reward.unwrap_or(0.0)))
            .collect();
        length_side(&rows, flag, &mut flagged, &mut max_gap)
    };
    let gold_1 = side(1.0);
    let gold_0 = side(0.0);
    Length {
        gold_1,
        gold_0,
        max_gap,
        flagged,
    }
}

/// What to do when no pair exists, said for the side that is missing.
pub fn missing_side_note(n_reward: u64, n_gold: u64) -> String {
    match (n_reward, n_gold) {
        (0, 0) => "no row has a reward and no row has a gold label: grade the rows first (wai grade ROWS `judge` SPEC), then hand-label a sample (wai labels attach SCORED LABELS `kind` human), which writes gold_reward".to_owned(),
        (0, _) => "no row has a 0/1 reward: grade the rows first (wai grade ROWS `judge` SPEC), which writes reward. `judge` on judge-trust re-judges a sample for its probes; it does not score the rows".to_owned(),
        (_, 0) => format!("no row has a gold label: wai labels attach SCORED LABELS `kind` human writes gold_reward (0/1) and marks it as a person's, and {MIN_GOLD} labeled rows is the sample to aim for"),
        _ => format!("{n_reward} row(s) have a reward and {n_gold} have a gold label, but no row has both: label the rows that were graded (labels match on rollout_id or task_id#rollout_index)"),
    }
}

pub(super) const UNKNOWN_GOLD_REASON: &str = "These rows carry gold_reward with no record of who wrote it, so it does not measure the judge. If you labeled them yourself, attach the labels with wai labels attach `kind` human, which marks them as a person's; a model's labels stay model gold (or pass `allow_model_gold`).";
pub(super) const MODEL_GOLD_REASON: &str = "The gold labels came from a model, not a person, so this does not measure the judge. Label 50 rows with wai labels attach `kind` human and run again (or pass `allow_model_gold`).";
