//! The report's types: a labeled row, the confusion table and agreement, the skipped rows, the
//! length check, the flags behind `ok`, what re-judging found, and the whole [`Report`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Options, probes};

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
    pub(super) fn n(self) -> u64 {
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
    /// Its 95% interval (Fleiss, Cohen and Everitt's large-sample variance); null with kappa, or
    /// when every pair agrees.
    pub kappa_ci95: Option<[f64; 2]>,
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
    /// `fractional / n_gold` (4 places).
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
