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
mod edits;
mod measure;
pub mod probes;
mod report;
mod text;
mod verdict;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::prelude::{DataFrame, SessionContext};
use serde::Serialize;

pub use measure::{
    agreement, gold_kind_of, half, labels_needed, length, missing_side_note, trusted_kind,
};
pub(crate) use measure::{binary, is_binary};
pub use report::{
    Agreement, Confusion, Disagreement, Flags, Labeled, Length, LengthSide, Rejudged, Report,
    Skipped,
};
pub use verdict::report;

use crate::error::{Error, Result};
use crate::stages::Session;

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

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        for (key, x) in [
            ("min_agreement", self.min_agreement),
            ("min_kappa", self.min_kappa),
            ("length_gap_flag", self.length_gap_flag),
            ("max_skipped_share", self.max_skipped_share),
        ] {
            if !(0.0..=1.0).contains(&x) {
                return Err(Error::option(key, format!("must be in [0, 1], not {x}")));
            }
        }
        Ok(())
    }
}

/// What the stage reads: the rows (those with a gold label are the sample), and what re-judging
/// a sample of them found (empty without a judge).
pub struct Inputs {
    /// The rows.
    pub rows: DataFrame,
    /// The perturbation and probes of a re-judged sample.
    pub rejudged: Rejudged,
}

/// The stage: the judge against hand labels.
pub struct JudgeTrustStage;

impl crate::stages::Stage for JudgeTrustStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "judge-trust";

    async fn run(session: &Session, inputs: Inputs, options: &Options) -> Result<Report> {
        let scope = session.scope_with(&[("rows", inputs.rows)])?;
        let (labeled, n_rows, n_reward) = read(&scope, "rows").await?;
        Ok(report(&labeled, n_rows, n_reward, options, inputs.rejudged))
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

    use crate::stats::wilson;

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
