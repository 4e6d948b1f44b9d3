//! Judge trust: how often the judge agrees with hand labels, and whether that number can be
//! believed.
//!
//! Reads the rows that carry a gold label (`gold_reward` 0/1) beside the judge's `reward` and
//! reports agreement with its Wilson interval, Cohen's kappa, the confusion table, agreement on
//! two held-out halves of the tasks (a task's half is the parity of the 8th hex digit of the
//! SHA-256 of its id, so all its rollouts land together), the judge's pass rate on short and long
//! replies of one gold label (length bias), and the disagreements to review. The measure spec's
//! §6 is the reference; where it passes a judge it has not measured, this stage does not:
//!
//! - gold labels all one value give an undefined kappa (not 1.0), and the judge is not measured
//!   until the labels carry both passes and failures;
//! - a gap of 0.15 or more between the halves (each with 10 rows or more) fails `ok`;
//! - `ok` is computed from explicit flags ([`Flags`]), never by matching warning text;
//! - human and program labels together are trusted gold (the reference calls that mix "mixed"
//!   and distrusts it).
//!
//! Gold and reward are numbers in the row store, so the reference's string-reward case (agreement
//! on zero rows that passes) cannot arise: without a comparable pair nothing passes.

pub mod compare;
pub mod probes;

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::prelude::SessionContext;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::report::percent;
use crate::stats::{kappa::kappa, round_places, wilson};

/// Labels under which the estimate is coarse.
pub const MIN_GOLD: u64 = 50;
/// The most labels the report asks for before it says the judge must change instead.
pub const MAX_GOLD_ASK: u64 = 200;
/// How far the label search runs.
pub const LABEL_SEARCH_MAX: u64 = 1000;
/// A judge that passes this share of gold failures is called leaky.
pub const LEAK_THRESHOLD: f64 = 0.1;
/// Agreement gap between halves that fails the check.
pub const HALVES_GAP_FLAG: f64 = 0.15;
/// Rows each half needs before its gap counts.
pub const HALVES_MIN_ROWS: u64 = 10;
/// Rows of one gold label the length check needs.
pub const LENGTH_MIN_ROWS_PER_LABEL: usize = 6;
/// Kappa under which the judge is said to be guessing.
pub const GUESSING_KAPPA: f64 = 0.2;
/// The length check's significance level (0.05 split over the two gold labels).
pub const LENGTH_ALPHA: f64 = 0.025;
/// Characters of a disagreement's texts kept for review.
pub const REVIEW_CHARS: usize = 200;

/// What `judge-trust` checks against.
#[derive(Debug, Clone, Serialize)]
pub struct Options {
    /// The floor on agreement's Wilson lower bound.
    pub min_agreement: f64,
    /// The floor on kappa.
    pub min_kappa: f64,
    /// Trust labels from a model (or of unknown origin) as gold.
    pub allow_model_gold: bool,
    /// The pass-rate gap between short and long replies that flags length bias.
    pub length_gap_flag: f64,
    /// The share of labeled rows the judge may leave fractional before the check is void.
    pub max_skipped_share: f64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            min_agreement: 0.8,
            min_kappa: 0.6,
            allow_model_gold: false,
            length_gap_flag: 0.15,
            max_skipped_share: 0.10,
        }
    }
}

/// One labeled row, as the checks read it.
#[derive(Debug, Clone)]
pub struct Labeled {
    /// Task id.
    pub task: String,
    /// The judge's reward (null = unjudged).
    pub reward: Option<f64>,
    /// The gold label.
    pub gold: f64,
    /// Who wrote the label.
    pub kind: Option<String>,
    /// The judge's reason.
    pub reason: String,
    /// The agent's final reply.
    pub final_text: String,
    /// Characters the agent wrote in the conversation (the measure spec's `reply_length`).
    pub reply_chars: usize,
    /// The judge that graded the row (`judge_name`).
    pub judge_name: Option<String>,
}

/// Judge × gold counts, pass = 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Confusion {
    /// Judge pass, gold pass.
    pub tp: u64,
    /// Judge pass, gold fail.
    pub fp: u64,
    /// Judge fail, gold pass.
    #[serde(rename = "fn")]
    pub fn_: u64,
    /// Judge fail, gold fail.
    pub tn: u64,
}

impl Confusion {
    fn n(self) -> u64 {
        self.tp + self.fp + self.fn_ + self.tn
    }

    /// Whether the gold labels of some pairs are all one value.
    pub fn one_valued_gold(self) -> bool {
        let n = self.n();
        n > 0 && (self.tp + self.fn_ == n || self.fp + self.tn == n)
    }
}

/// Agreement of one set of pairs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Agreement {
    /// Pairs compared.
    pub n: u64,
    /// Rows considered that gave no 0/1 pair.
    pub n_skipped: u64,
    /// Labels that matched no row (labels are read off the rows here, so 0).
    pub n_unmatched: u64,
    /// Share of pairs that agree (4 places).
    pub agreement: Option<f64>,
    /// Cohen's kappa (4 places); null when undefined (a one-valued gold set) or without pairs.
    pub kappa: Option<f64>,
    /// The confusion table.
    pub confusion: Confusion,
    /// fp / (fp + tn): gold failures the judge passed.
    pub pass_when_gold_fail: Option<f64>,
    /// fn / (fn + tp): gold passes the judge failed.
    pub fail_when_gold_pass: Option<f64>,
    /// The judge's pass rate over the pairs.
    pub judge_pass_rate: Option<f64>,
    /// The gold pass rate over the pairs.
    pub gold_pass_rate: Option<f64>,
    /// Who wrote the labels: human, program, model, unknown, or mixed.
    pub gold_kind: Option<String>,
    /// Wilson 95% interval of the agreement.
    pub ci95: Option<[f64; 2]>,
}

/// Gold rows left out of the agreement.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Skipped {
    /// Rows with a 0/1 gold label.
    pub n_gold: u64,
    /// Of those, rows with a 0/1 reward (the pairs).
    pub n_used: u64,
    /// Rows whose reward is fractional.
    pub fractional: u64,
    /// Rows without a reward.
    pub unscored: u64,
    /// fractional / n_gold (4 places).
    pub share: f64,
    /// The floor on that share.
    pub floor: f64,
    /// Whether the share is over the floor (the check is void).
    pub over_floor: bool,
    /// The first five distinct fractional rewards.
    pub examples: Vec<f64>,
}

/// The judge's pass rate on short and long replies of one gold label.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum LengthSide {
    /// Measured.
    Measured {
        /// Rows.
        n: u64,
        /// The median reply length in characters (upper median).
        median_chars: usize,
        /// Pass rate of replies shorter than the median.
        judge_pass_short: f64,
        /// Pass rate of the others.
        judge_pass_long: f64,
        /// long − short.
        gap_long_minus_short: f64,
        /// Two-sided two-proportion z test.
        p_value: f64,
    },
    /// Not measured, and why.
    Unmeasured {
        /// Rows.
        n: u64,
        /// Why.
        note: &'static str,
    },
}

/// Length sensitivity.
#[derive(Debug, Clone, Serialize)]
pub struct Length {
    /// Rows with gold 1.
    pub gold_1: LengthSide,
    /// Rows with gold 0.
    pub gold_0: LengthSide,
    /// The largest |gap|.
    pub max_gap: f64,
    /// Whether a gap is large and significant.
    pub flagged: bool,
}

/// A row where judge and gold disagree.
#[derive(Debug, Clone, Serialize)]
pub struct Disagreement {
    /// Task id.
    pub task: String,
    /// Gold.
    pub gold: u8,
    /// Judge.
    pub judge: u8,
    /// The judge's reason (first 200 characters).
    pub reason: String,
    /// The reply (first 200 characters).
    pub final_text: String,
}

/// The checks that decide `ok`, each an explicit flag.
#[derive(Debug, Clone, Default, Serialize)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one flag per check, by design"
)]
pub struct Flags {
    /// No comparable pair: nothing was measured.
    pub unmeasured: bool,
    /// The labels are not a person's or a program's (and model gold is not allowed).
    pub untrusted_gold: bool,
    /// Gold labels are all one value: kappa is undefined and failures (or passes) untested.
    pub degenerate_gold: bool,
    /// Too many fractional rewards: the pairs kept are the judge's own selection.
    pub skipped_over_floor: bool,
    /// Agreement's lower bound is under the floor.
    pub agreement_floor: bool,
    /// Kappa is under the floor.
    pub kappa_floor: bool,
    /// The judge passes gold failures at the leak threshold or more.
    pub leaky: bool,
    /// The halves disagree by the gap flag or more.
    pub halves_gap: bool,
    /// Length bias.
    pub length_bias: bool,
    /// Verdicts flip on an identical re-judge.
    pub inconsistent: bool,
    /// Verdicts move one way when neutral filler is appended.
    pub reads_filler: bool,
    /// An exploit probe flagged.
    pub exploitable: bool,
    /// Labeled rows were graded by another judge than the one under audit.
    pub foreign_judge: bool,
}

/// What re-judging a sample with the judge found (`--judge`).
#[derive(Debug, Clone, Default)]
pub struct Rejudged {
    /// Consistency and filler flips.
    pub perturbation: Option<probes::Perturbation>,
    /// The exploit probes.
    pub probes: Option<probes::Probes>,
    /// The name of the judge under audit.
    pub judge_name: Option<String>,
}

/// The judge-trust report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Trusted: measured, on trusted gold, and nothing flagged.
    pub ok: bool,
    /// The first printed word: PASS, FAIL, NOT MEASURED, INCONCLUSIVE.
    pub headline: String,
    /// Rows read.
    pub n_rows: u64,
    /// Rows with a 0/1 gold label and a 0/1 reward.
    pub n_labeled: u64,
    /// Who wrote the labels.
    pub gold_kind: Option<String>,
    /// Whether every label is one value.
    pub gold_degenerate: bool,
    /// The options.
    pub floors: Options,
    /// Gold rows left out.
    pub skipped: Skipped,
    /// Agreement over all pairs.
    pub agreement: Agreement,
    /// Agreement on each half of the tasks.
    pub held_out_halves: BTreeMap<&'static str, Agreement>,
    /// Length sensitivity.
    pub length_sensitivity: Length,
    /// Re-judged as-is and with filler (with `--judge`).
    pub perturbation: Option<probes::Perturbation>,
    /// The exploit probes (with `--judge` and `--probes`).
    pub probes: Option<probes::Probes>,
    /// The probes that flagged.
    pub exploitable_by: Vec<String>,
    /// Rows where judge and gold disagree.
    pub disagreements: Vec<Disagreement>,
    /// More labels needed for agreement's lower bound to clear its floor, at this agreement.
    pub labels_needed: Option<u64>,
    /// The flags behind `ok`.
    pub flags: Flags,
    /// What to read, each naming its fix.
    pub warnings: Vec<String>,
}

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

#[allow(clippy::cast_precision_loss, reason = "counts")]
fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| round_places(a as f64 / b as f64, 4))
}

/// Agreement of the 0/1 pairs among `rows` (`considered` rows in all, for `n_skipped`).
#[allow(clippy::cast_precision_loss, reason = "counts")]
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
    Agreement {
        n,
        n_skipped: considered.saturating_sub(n),
        n_unmatched: 0,
        agreement: ratio(c.tp + c.tn, n),
        kappa,
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
#[allow(clippy::cast_precision_loss, reason = "counts")]
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

/// The length check of the rows of one gold label.
#[allow(clippy::cast_precision_loss, reason = "counts")]
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
    let (short, long): (Vec<&(usize, f64)>, Vec<&(usize, f64)>) =
        rows.iter().partition(|r| r.0 < median);
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
        (0, 0) => "no row has a reward and no row has a gold label: grade the rows first (wai grade ROWS --judge SPEC), then hand-label a sample (wai labels attach SCORED LABELS --kind human), which writes gold_reward".to_owned(),
        (0, _) => "no row has a 0/1 reward: grade the rows first (wai grade ROWS --judge SPEC), which writes reward. --judge on judge-trust re-judges a sample for its probes; it does not score the rows".to_owned(),
        (_, 0) => format!("no row has a gold label: wai labels attach SCORED LABELS --kind human writes gold_reward (0/1) and marks it as a person's, and {MIN_GOLD} labeled rows is the sample to aim for"),
        _ => format!("{n_reward} row(s) have a reward and {n_gold} have a gold label, but no row has both: label the rows that were graded (labels match on rollout_id or task_id#rollout_index)"),
    }
}

const UNKNOWN_GOLD_REASON: &str = "These rows carry gold_reward with no record of who wrote it, so it does not measure the judge. If you labeled them yourself, attach the labels with wai labels attach --kind human, which marks them as a person's; a model's labels stay model gold (or pass --allow-model-gold).";
const MODEL_GOLD_REASON: &str = "The gold labels came from a model, not a person, so this does not measure the judge. Label 50 rows with wai labels attach --kind human and run again (or pass --allow-model-gold).";

/// The report of `labeled` rows (every row with a gold label) out of `n_rows`, of which
/// `n_reward` carry a 0/1 reward and `n_gold` a 0/1 gold label.
#[allow(clippy::too_many_lines, clippy::cast_precision_loss)]
pub fn report(
    labeled: &[Labeled],
    n_rows: u64,
    n_reward: u64,
    opts: &Options,
    rejudged: Rejudged,
) -> Report {
    let gold_rows: Vec<&Labeled> = labeled.iter().filter(|r| is_binary(r.gold)).collect();
    let pairs: Vec<&Labeled> = gold_rows
        .iter()
        .copied()
        .filter(|r| r.reward.is_some_and(is_binary))
        .collect();
    let n_gold = gold_rows.len() as u64;
    let n_used = pairs.len() as u64;
    let mut fractional: Vec<f64> = gold_rows
        .iter()
        .filter_map(|r| r.reward.filter(|x| !is_binary(*x)))
        .collect();
    let n_fractional = fractional.len() as u64;
    let share = if n_gold > 0 {
        round_places(n_fractional as f64 / n_gold as f64, 4)
    } else {
        0.0
    };
    fractional = fractional.into_iter().map(|x| round_places(x, 4)).collect();
    fractional.sort_by(f64::total_cmp);
    fractional.dedup();
    fractional.truncate(5);
    let skipped = Skipped {
        n_gold,
        n_used,
        fractional: n_fractional,
        unscored: n_gold - n_used - n_fractional,
        share,
        floor: opts.max_skipped_share,
        over_floor: n_fractional > 0 && share > opts.max_skipped_share,
        examples: fractional,
    };

    let agree = agreement(&pairs, n_rows);
    let gold_kind = agree.gold_kind.clone();
    let trusted = opts.allow_model_gold || gold_kind.as_deref().is_some_and(trusted_kind);
    let halves: BTreeMap<&'static str, Agreement> = [("a", 0_u8), ("b", 1_u8)]
        .into_iter()
        .map(|(name, h)| {
            let side: Vec<&Labeled> = pairs
                .iter()
                .copied()
                .filter(|r| half(&r.task) == h)
                .collect();
            (name, agreement(&side, side.len() as u64))
        })
        .collect();
    let length = length(&pairs, opts.length_gap_flag);
    let disagreements: Vec<Disagreement> = pairs
        .iter()
        .filter(|r| r.reward != Some(r.gold))
        .map(|r| Disagreement {
            task: r.task.clone(),
            gold: u8::from(r.gold == 1.0),
            judge: u8::from(r.reward == Some(1.0)),
            reason: r.reason.chars().take(REVIEW_CHARS).collect(),
            final_text: r.final_text.chars().take(REVIEW_CHARS).collect(),
        })
        .collect();
    let degenerate_gold = agree.confusion.one_valued_gold();

    let mut flags = Flags {
        unmeasured: agree.n == 0,
        untrusted_gold: agree.n > 0 && !trusted,
        degenerate_gold,
        skipped_over_floor: skipped.over_floor,
        ..Flags::default()
    };
    let mut warnings = Vec::new();
    let c = agree.confusion;
    if agree.n > 0 && agree.n < MIN_GOLD {
        warnings.push(format!(
            "{} gold rows; the accuracy estimate is coarse below {MIN_GOLD} (Lambert 2025, chapter Reward Modeling, suggests 50-200)",
            agree.n
        ));
    }
    if c.fp > 0
        && agree
            .pass_when_gold_fail
            .is_some_and(|x| x >= LEAK_THRESHOLD)
    {
        flags.leaky = true;
        warnings.push(format!(
            "judge passed {} of {} gold failures ({}); those rows train the failure, not the behavior",
            c.fp,
            c.fp + c.tn,
            percent(c.fp as f64 / (c.fp + c.tn) as f64)
        ));
    }
    if flags.untrusted_gold {
        warnings.push(
            if gold_kind.as_deref() == Some("unknown") {
                UNKNOWN_GOLD_REASON
            } else {
                MODEL_GOLD_REASON
            }
            .to_owned(),
        );
    }
    if skipped.fractional > 0 {
        let examples: Vec<String> = skipped.examples.iter().map(|x| format!("{x}")).collect();
        if skipped.over_floor {
            warnings.push(format!(
                "Judge agreement skipped {} of {} labeled rows: the judge gave them a fractional reward ({}) and agreement counts exact 0/1 only. That is {} of the sample, over the {} floor (--max-skipped-share), and the {} rows kept are the ones the judge was sure about, so the agreement above reads high by construction; `ok` is false. Make the judge give a 0/1 verdict (or threshold the reward before judge-trust), then run it again.",
                skipped.fractional, skipped.n_gold, examples.join(", "), percent(skipped.share), percent(skipped.floor), skipped.n_used
            ));
        } else {
            warnings.push(format!(
                "skipped {} of {} labeled rows with a fractional reward ({}); under the {} --max-skipped-share floor, so `ok` stands. Make the judge give a 0/1 verdict (or threshold the reward before judge-trust) to count them.",
                skipped.fractional, skipped.n_gold, examples.join(", "), percent(skipped.floor)
            ));
        }
    }
    let mut labels_needed_out = None;
    if degenerate_gold {
        let only = if c.tp + c.fn_ == agree.n { 1 } else { 0 };
        warnings.push(format!(
            "gold labels are all {only}: kappa is undefined and the judge is untested on {}; label some {} and run again",
            if only == 1 { "failures" } else { "passes" },
            if only == 1 { "failures" } else { "passes" },
        ));
    }
    let labels_word = format!("{} labels", gold_kind.as_deref().unwrap_or("gold"));
    if trusted && agree.n > 0 {
        let [low, _] = agree.ci95.unwrap_or([0.0, 1.0]);
        if low < opts.min_agreement {
            flags.agreement_floor = true;
            let point = agree.agreement.unwrap_or(0.0);
            let need = if point > opts.min_agreement {
                labels_needed(point, agree.n, opts.min_agreement)
            } else {
                agree.n
            };
            if point > opts.min_agreement && need <= MAX_GOLD_ASK {
                labels_needed_out = Some(need.saturating_sub(agree.n));
                warnings.push(format!(
                    "Judge agreement with {labels_word} is {point:.2} on {} labels, but the lower bound is {low:.2}, under the {:.2} floor. The judge is not the problem; the sample is. Label about {need} rows ({} more, wai labels attach --kind {}) and run judge-trust again.",
                    agree.n,
                    opts.min_agreement,
                    need - agree.n,
                    gold_kind
                        .as_deref()
                        .filter(|k| matches!(*k, "human" | "program"))
                        .unwrap_or("human")
                ));
            } else {
                warnings.push(format!(
                    "Judge agreement with {labels_word} is {low:.2} (lower bound), under the {:.2} floor. Change the judge prompt or the judge model, then run judge-trust again.",
                    opts.min_agreement
                ));
            }
        }
        if let Some(k) = agree
            .kappa
            .filter(|k| !degenerate_gold && *k < opts.min_kappa)
        {
            flags.kappa_floor = true;
            let guessing = if k < GUESSING_KAPPA {
                format!(
                    "; under {GUESSING_KAPPA:.1} its verdicts match the labels about as often as a coin flip would: the judge is guessing, so fix what it is asked before reading any bias check"
                )
            } else {
                String::new()
            };
            warnings.push(format!(
                "Judge agreement with {labels_word} beyond chance (kappa) is {k:.2}, under the {:.2} floor{guessing}. Change the judge prompt or the judge model, then run judge-trust again.",
                opts.min_kappa
            ));
        }
    }
    if let (Some(a), Some(b)) = (halves["a"].agreement, halves["b"].agreement) {
        let gap = (a - b).abs();
        if gap >= HALVES_GAP_FLAG && halves["a"].n.min(halves["b"].n) >= HALVES_MIN_ROWS {
            flags.halves_gap = true;
            warnings.push(format!(
                "agreement differs by {} between task halves; the rubric may be fit to the examples it was tuned on (label more tasks, or rewrite the rubric against the worse half)",
                percent(gap)
            ));
        }
    }
    if length.flagged && !degenerate_gold {
        flags.length_bias = true;
        warnings.push(format!(
            "judge pass rate differs by {} between short and long replies with the same gold label: length bias",
            percent(length.max_gap)
        ));
    }
    if let Some(audited) = &rejudged.judge_name {
        let foreign: Vec<&str> = pairs
            .iter()
            .filter_map(|r| r.judge_name.as_deref())
            .filter(|j| !j.is_empty() && j != audited)
            .collect();
        if !foreign.is_empty() {
            flags.foreign_judge = true;
            let mut names: Vec<&str> = foreign.clone();
            names.sort_unstable();
            names.dedup();
            warnings.push(format!(
                "Judge under audit is `{audited}`, but {} of {} labeled rows were graded by {}: their agreement measures that judge, not this one. Grade the rows with it first (wai grade ROWS --judge SPEC), then run judge-trust again.",
                foreign.len(),
                pairs.len(),
                names.iter().take(3).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    if let Some(p) = &rejudged.perturbation {
        if p.flagged_consistency {
            flags.inconsistent = true;
            warnings.push(format!(
                "{} of verdicts flip on an identical re-judge; set temperature 0 or add a second sample",
                percent(p.consistency_flip_rate.unwrap_or(0.0))
            ));
        }
        if p.flagged_length {
            flags.reads_filler = true;
            warnings.push(format!(
                "{} of verdicts flip when neutral filler is appended ({} up, {} down): the judge reads length",
                percent(p.filler_flip_rate.unwrap_or(0.0)),
                p.filler_flips_up,
                p.filler_flips_down
            ));
        }
    }
    let exploitable_by = rejudged
        .probes
        .as_ref()
        .map(|p| p.exploitable_by.clone())
        .unwrap_or_default();
    if let Some(p) = &rejudged.probes {
        flags.exploitable = !p.exploitable_by.is_empty();
        warnings.extend(p.warnings.iter().cloned());
    }
    let finding = flags.inconsistent || flags.reads_filler || flags.exploitable;
    if agree.n == 0 && !finding {
        let mut line = format!(
            "judge trust is unmeasured: `ok` is false for want of evidence, not for a failed check. {}",
            missing_side_note(n_reward, n_gold)
        );
        if n_reward > 0 && n_gold == 0 && rejudged.probes.is_none() {
            line.push_str(
                " --judge SPEC --probes all tries the shortcuts a policy would find, labels or not.",
            );
        }
        warnings.insert(0, line);
    }
    let failed = flags.foreign_judge
        || flags.inconsistent
        || flags.reads_filler
        || flags.exploitable
        || flags.untrusted_gold
        || flags.skipped_over_floor
        || flags.agreement_floor
        || flags.kappa_floor
        || flags.leaky
        || flags.halves_gap
        || flags.length_bias;
    let ok = !flags.unmeasured && !flags.degenerate_gold && trusted && !failed;
    let headline = if skipped.over_floor {
        format!(
            "INCONCLUSIVE: {} of {} labeled rows skipped ({}, over --max-skipped-share {}); usable n={}",
            skipped.fractional,
            skipped.n_gold,
            percent(skipped.share),
            percent(skipped.floor),
            skipped.n_used
        )
    } else if ok {
        "PASS".to_owned()
    } else if !(flags.agreement_floor
        || flags.kappa_floor
        || flags.leaky
        || flags.halves_gap
        || flags.length_bias
        || flags.inconsistent
        || flags.reads_filler
        || flags.exploitable
        || flags.foreign_judge)
        && (flags.unmeasured || flags.untrusted_gold || flags.degenerate_gold)
    {
        "NOT MEASURED".to_owned()
    } else {
        "FAIL".to_owned()
    };
    Report {
        ok,
        headline,
        n_rows,
        n_labeled: n_used,
        gold_kind,
        gold_degenerate: degenerate_gold,
        floors: opts.clone(),
        skipped,
        agreement: agree,
        held_out_halves: halves,
        length_sensitivity: length,
        perturbation: rejudged.perturbation,
        probes: rejudged.probes,
        exploitable_by,
        disagreements,
        labels_needed: labels_needed_out,
        flags,
        warnings,
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.headline)?;
        let a = &self.agreement;
        if a.n > 0 {
            let [lo, hi] = a.ci95.unwrap_or([0.0, 1.0]);
            let left_out = if self.skipped.fractional > 0 {
                format!(
                    ", {} of {} labeled rows skipped",
                    self.skipped.fractional, self.skipped.n_gold
                )
            } else {
                String::new()
            };
            let kappa = match a.kappa {
                Some(k) => format!(", kappa {k:.2}"),
                None => ", kappa undefined (one gold value)".to_owned(),
            };
            writeln!(
                f,
                "agreement {} (95% {}..{}, n={}{left_out}){kappa}",
                percent(a.agreement.unwrap_or(0.0)),
                percent(lo),
                percent(hi),
                a.n
            )?;
            let c = a.confusion;
            writeln!(
                f,
                "  confusion tp={} fp={} fn={} tn={}",
                c.tp, c.fp, c.fn_, c.tn
            )?;
            for (name, h) in &self.held_out_halves {
                if h.n > 0 {
                    let [lo, hi] = h.ci95.unwrap_or([0.0, 1.0]);
                    writeln!(
                        f,
                        "  half {name}: {} (95% {}..{}, n={})",
                        percent(h.agreement.unwrap_or(0.0)),
                        percent(lo),
                        percent(hi),
                        h.n
                    )?;
                }
            }
        }
        let l = &self.length_sensitivity;
        writeln!(
            f,
            "length gap {}{}",
            percent(l.max_gap),
            if l.flagged { "  FLAG" } else { "" }
        )?;
        if let Some(p) = self.perturbation.as_ref().filter(|p| p.n > 0) {
            writeln!(
                f,
                "re-judge flips {}, filler flips {} (+{}/-{}, sign test p={:.2e}; n={})",
                percent(p.consistency_flip_rate.unwrap_or(0.0)),
                percent(p.filler_flip_rate.unwrap_or(0.0)),
                p.filler_flips_up,
                p.filler_flips_down,
                p.filler_sign_p,
                p.n
            )?;
        }
        if let Some(probed) = self.probes.as_ref().filter(|p| p.n > 0) {
            writeln!(f, "probes (n={}):", probed.n)?;
            // In probe order (the JSON map is sorted by name).
            let ordered = probes::all()
                .into_iter()
                .filter_map(|name| probed.probes.get(&name).map(|r| (name, r)));
            for (name, r) in ordered {
                match r {
                    probes::Probe::Skipped { skipped, .. } => {
                        writeln!(f, "  {name:<18} skipped: {skipped}")?;
                    }
                    probes::Probe::Ran {
                        kind,
                        pass_before,
                        pass_after,
                        flips_up,
                        flips_down,
                        denominator,
                        exploit_rate,
                        ci95,
                        low_power,
                        resolves,
                        flagged,
                        ..
                    } => {
                        let rate = exploit_rate.map_or_else(|| "n/a".to_owned(), percent);
                        let band = ci95.map_or_else(String::new, |[l, h]| {
                            format!(" [{}..{}]", percent(l), percent(h))
                        });
                        let flips = if *kind == "additive" {
                            format!("  +{flips_up}/-{flips_down}")
                        } else {
                            String::new()
                        };
                        let tail = if *flagged {
                            "  EXPLOITABLE".to_owned()
                        } else if *low_power {
                            format!(
                                "  low power (n={denominator}; resolves about {:.1} at 80% power)",
                                resolves.unwrap_or(1.0)
                            )
                        } else {
                            String::new()
                        };
                        writeln!(
                            f,
                            "  {name:<18} {rate:>5}{band:<12}  pass {} -> {}{flips}{tail}",
                            percent(pass_before.unwrap_or(0.0)),
                            percent(pass_after.unwrap_or(0.0))
                        )?;
                    }
                }
            }
        }
        writeln!(f, "disagreements to review: {}", self.disagreements.len())?;
        for w in &self.warnings {
            writeln!(f, "! {w}")?;
        }
        Ok(())
    }
}

/// The rows of table `table` that carry a gold label, and the counts of all rows and of rows with
/// a 0/1 reward.
///
/// # Errors
/// A query failure, or a table without the row columns.
pub async fn read(ctx: &SessionContext, table: &str) -> Result<(Vec<Labeled>, u64, u64)> {
    let counts = ctx
        .sql(&format!(
            "SELECT count(*) AS n, count(CASE WHEN reward = 0 OR reward = 1 THEN 1 END) AS scored \
             FROM {table}"
        ))
        .await?
        .collect()
        .await?;
    let (mut n_rows, mut n_reward) = (0, 0);
    if let Some(b) = counts.first() {
        let c = super::cells::Cells(b);
        n_rows = c.count("n", 0)?;
        n_reward = c.count("scored", 0)?;
    }
    // Labeled rows are few: filter on the (small) gold column before decoding the conversations,
    // so the text of unlabeled rows is never read.
    crate::pipeline::session::late_materialization(ctx).await?;
    // In file order, so the disagreements list the same way at any core count.
    let batches = crate::pipeline::session::collect_in_file_order(
        ctx,
        &format!(
            "SELECT task_id, reward, gold_reward, gold_kind, judge_name, reason, final_text, \
             prompt, json_get_str(extra, 'opener') AS opener, messages, steps FROM {table} \
             WHERE gold_reward IS NOT NULL"
        ),
    )
    .await?;
    let mut out = Vec::new();
    for b in &batches {
        labeled_rows(b, &mut out)?;
    }
    Ok((out, n_rows, n_reward))
}

/// Appends the rows of `b` that carry a gold label to `out`.
///
/// # Errors
/// A batch without the row columns.
pub fn labeled_rows(b: &RecordBatch, out: &mut Vec<Labeled>) -> Result<()> {
    let c = super::cells::Cells(b);
    let text = |name: &str| c.column(name, &DataType::Utf8);
    let (task, kind, reason, final_text, judge) = (
        text("task_id")?,
        text("gold_kind")?,
        text("reason")?,
        text("final_text")?,
        text("judge_name")?,
    );
    let judge = judge.as_string::<i32>();
    let (task, kind, reason, final_text) = (
        task.as_string::<i32>(),
        kind.as_string::<i32>(),
        reason.as_string::<i32>(),
        final_text.as_string::<i32>(),
    );
    let reward = c.column("reward", &DataType::Float64)?;
    let gold = c.column("gold_reward", &DataType::Float64)?;
    let (reward, gold) = (
        reward.as_primitive::<Float64Type>(),
        gold.as_primitive::<Float64Type>(),
    );
    let conversations = super::conversation::Conversations::of(b)?;
    let opt = |a: &datafusion::arrow::array::StringArray, i: usize| {
        a.is_valid(i).then(|| a.value(i).to_owned())
    };
    for i in 0..b.num_rows() {
        if gold.is_null(i) {
            continue;
        }
        let reply = if final_text.is_valid(i) {
            final_text.value(i)
        } else {
            ""
        };
        out.push(Labeled {
            task: opt(task, i).unwrap_or_default(),
            reward: reward.is_valid(i).then(|| reward.value(i)),
            gold: gold.value(i),
            kind: opt(kind, i),
            reason: opt(reason, i).unwrap_or_default(),
            final_text: reply.to_owned(),
            reply_chars: super::conversation::reply_length(&conversations.turns(i), reply),
            judge_name: opt(judge, i),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn halves_are_the_parity_of_the_eighth_hex_digit() {
        // 512f26ad: d is odd; cece8a9c: c is even.
        assert_eq!(half("t0"), 1);
        assert_eq!(half("t3"), 0);
        assert_eq!(half(""), 0);
    }

    #[test]
    fn sixteen_perfect_labels_clear_the_floor_and_fifteen_do_not() {
        let lo = |n: u64| {
            wilson::interval(n as f64, n as f64, wilson::Z_95)
                .unwrap()
                .0
        };
        assert!(lo(16) >= 0.8, "{}", lo(16));
        assert!(lo(15) < 0.8, "{}", lo(15));
        assert_eq!(labels_needed(1.0, 14, 0.8), 16);
        assert_eq!(labels_needed(1.0, 15, 0.8), 16);
    }

    #[test]
    fn kinds_name_their_mix() {
        let kinds = |k: &[Option<&str>]| gold_kind_of(k.iter().copied());
        assert_eq!(
            kinds(&[Some("human"), Some("human")]).as_deref(),
            Some("human")
        );
        assert_eq!(kinds(&[Some("verifier")]).as_deref(), Some("program"));
        assert_eq!(kinds(&[None]).as_deref(), Some("unknown"));
        assert_eq!(
            kinds(&[Some("human"), Some("model")]).as_deref(),
            Some("model")
        );
        assert_eq!(
            kinds(&[Some("model"), Some("unknown")]).as_deref(),
            Some("mixed")
        );
        assert_eq!(
            kinds(&[Some("human"), Some("program")]).as_deref(),
            Some("human+program")
        );
        assert_eq!(kinds(&[]), None);
    }

    #[test]
    fn a_one_valued_gold_set_has_no_kappa() {
        let row = |gold: f64, reward: f64| Labeled {
            task: "t".into(),
            reward: Some(reward),
            gold,
            kind: Some("human".into()),
            reason: String::new(),
            final_text: String::new(),
            reply_chars: 0,
            judge_name: None,
        };
        let rows: Vec<Labeled> = (0..20).map(|_| row(1.0, 1.0)).collect();
        let refs: Vec<&Labeled> = rows.iter().collect();
        assert_eq!(agreement(&refs, 20).kappa, None);
        let r = report(&rows, 20, 20, &Options::default(), Rejudged::default());
        assert!(!r.ok && r.flags.degenerate_gold, "{r}");
        // One judge miss on the same gold set: kappa is defined (0), but a one-valued gold set
        // cannot say whether the judge guesses: no kappa floor, still not measured.
        let mut rows = rows;
        rows[0].reward = Some(0.0);
        let refs: Vec<&Labeled> = rows.iter().collect();
        assert_eq!(agreement(&refs, 20).kappa, Some(0.0));
        let r = report(&rows, 20, 20, &Options::default(), Rejudged::default());
        assert!(!r.flags.kappa_floor && r.flags.degenerate_gold, "{r}");
        // 19 of 20 has a lower bound under 0.8: that floor still speaks.
        assert!(r.flags.agreement_floor && !r.ok, "{r}");
        assert!(!r.warnings.iter().any(|w| w.contains("kappa) is")), "{r}");
    }

    proptest! {
        /// Agreement and its interval against the naive formulas on the pairs.
        #[test]
        fn agreement_is_the_share_of_matching_pairs(pairs in prop::collection::vec((0u8..2, 0u8..2), 1..80)) {
            let rows: Vec<Labeled> = pairs.iter().enumerate().map(|(i, (g, j))| Labeled {
                task: format!("t{i}"),
                reward: Some(f64::from(*j)),
                gold: f64::from(*g),
                kind: Some("human".into()),
                reason: String::new(),
                final_text: String::new(),
                reply_chars: 0,
                judge_name: None,
            }).collect();
            let refs: Vec<&Labeled> = rows.iter().collect();
            let a = agreement(&refs, rows.len() as u64);
            let same = pairs.iter().filter(|(g, j)| g == j).count() as f64;
            let n = pairs.len() as f64;
            prop_assert_eq!(a.n, pairs.len() as u64);
            // Four places, as the reference rounds it.
            prop_assert!((a.agreement.unwrap() - same / n).abs() <= 5e-5 + 1e-12);
            let p = same / n;
            let z = 1.96_f64;
            let center = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
            let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
            let [lo, hi] = a.ci95.unwrap();
            prop_assert!((lo - (center - half).max(0.0)).abs() < 1e-12);
            prop_assert!((hi - (center + half).min(1.0)).abs() < 1e-12);
        }
    }
}
