//! The report of the labeled rows: the skipped rows, agreement overall and on the halves, the
//! length check, what re-judging found, then the flags, `ok` and the headline.

use std::collections::BTreeMap;

use super::measure::{
    MODEL_GOLD_REASON, UNKNOWN_GOLD_REASON, agreement, half, is_binary, labels_needed, length,
    missing_side_note, trusted_kind,
};
use super::{
    Agreement, Disagreement, Flags, GUESSING_KAPPA, HALVES_GAP_FLAG, HALVES_MIN_ROWS,
    LEAK_THRESHOLD, Labeled, MAX_GOLD_ASK, MIN_GOLD, Options, REVIEW_CHARS, Rejudged, Report,
    Skipped,
};
use crate::report::percent;
use crate::stats::round_places;

/// The labeled rows the judge could not be scored on: a fractional reward, or none.
fn skipped(gold_rows: &[&Labeled], n_used: u64, opts: &Options) -> Skipped {
    let n_gold = gold_rows.len() as u64;
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
    Skipped {
        n_gold,
        n_used,
        fractional: n_fractional,
        unscored: n_gold - n_used - n_fractional,
        share,
        floor: opts.max_skipped_share,
        over_floor: n_fractional > 0 && share > opts.max_skipped_share,
        examples: fractional,
    }
}

/// Agreement on each half of the tasks (`a`, `b`).
fn halves(pairs: &[&Labeled]) -> BTreeMap<&'static str, Agreement> {
    [("a", 0_u8), ("b", 1_u8)]
        .into_iter()
        .map(|(name, h)| {
            let side: Vec<&Labeled> = pairs
                .iter()
                .copied()
                .filter(|r| half(&r.task) == h)
                .collect();
            (name, agreement(&side, side.len() as u64))
        })
        .collect()
}

/// The pairs where the judge and the label disagree, their texts cut for review.
fn disagreements(pairs: &[&Labeled]) -> Vec<Disagreement> {
    pairs
        .iter()
        .filter(|r| r.reward != Some(r.gold))
        .map(|r| Disagreement {
            task: r.task.clone(),
            gold: u8::from(r.gold == 1.0),
            judge: u8::from(r.reward == Some(1.0)),
            reason: r.reason.chars().take(REVIEW_CHARS).collect(),
            final_text: r.final_text.chars().take(REVIEW_CHARS).collect(),
        })
        .collect()
}

/// The flags and warnings as they are found, in the report's order.
struct Findings {
    flags: Flags,
    warnings: Vec<String>,
}

impl Findings {
    /// The sample: coarse under [`MIN_GOLD`], leaky, untrusted gold, skipped rows, one-valued
    /// gold.
    fn sample(&mut self, agree: &Agreement, skipped: &Skipped, gold_kind: Option<&str>) {
        let c = agree.confusion;
        let warnings = &mut self.warnings;
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
            self.flags.leaky = true;
            warnings.push(format!(
                "judge passed {} of {} gold failures ({}); those rows train the failure, not the behavior",
                c.fp,
                c.fp + c.tn,
                percent(c.fp as f64 / (c.fp + c.tn) as f64)
            ));
        }
        if self.flags.untrusted_gold {
            warnings.push(
                if gold_kind == Some("unknown") {
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
                    "Judge agreement skipped {} of {} labeled rows: the judge gave them a fractional reward ({}) and agreement counts exact 0/1 only. That is {} of the sample, over the {} floor (`max_skipped_share`), and the {} rows kept are the ones the judge was sure about, so the agreement above reads high by construction; `ok` is false. Make the judge give a 0/1 verdict (or threshold the reward before judge-trust), then run it again.",
                    skipped.fractional, skipped.n_gold, examples.join(", "), percent(skipped.share), percent(skipped.floor), skipped.n_used
                ));
            } else {
                warnings.push(format!(
                    "skipped {} of {} labeled rows with a fractional reward ({}); under the {} `max_skipped_share` floor, so `ok` stands. Make the judge give a 0/1 verdict (or threshold the reward before judge-trust) to count them.",
                    skipped.fractional, skipped.n_gold, examples.join(", "), percent(skipped.floor)
                ));
            }
        }
        if self.flags.degenerate_gold {
            let only = u8::from(c.tp + c.fn_ == agree.n);
            warnings.push(format!(
                "gold labels are all {only}: kappa is undefined and the judge is untested on {}; label some {} and run again",
                if only == 1 { "failures" } else { "passes" },
                if only == 1 { "failures" } else { "passes" },
            ));
        }
    }

    /// The floors on agreement's lower bound and on kappa (trusted gold only); returns the
    /// labels still to add when more labels would settle the agreement floor.
    fn floors(
        &mut self,
        agree: &Agreement,
        opts: &Options,
        gold_kind: Option<&str>,
    ) -> Option<u64> {
        let labels_word = format!("{} labels", gold_kind.unwrap_or("gold"));
        let mut labels_needed_out = None;
        let [low, _] = agree.ci95.unwrap_or([0.0, 1.0]);
        if low < opts.min_agreement {
            self.flags.agreement_floor = true;
            let point = agree.agreement.unwrap_or(0.0);
            let need = if point > opts.min_agreement {
                labels_needed(point, agree.n, opts.min_agreement)
            } else {
                agree.n
            };
            if point > opts.min_agreement && need <= MAX_GOLD_ASK {
                labels_needed_out = Some(need.saturating_sub(agree.n));
                self.warnings.push(format!(
                    "Judge agreement with {labels_word} is {point:.2} on {} labels, but the lower bound is {low:.2}, under the {:.2} floor. The judge is not the problem; the sample is. Label about {need} rows ({} more, wai labels attach `kind` {}) and run judge-trust again.",
                    agree.n,
                    opts.min_agreement,
                    need - agree.n,
                    gold_kind
                        .filter(|k| matches!(*k, "human" | "program"))
                        .unwrap_or("human")
                ));
            } else {
                self.warnings.push(format!(
                    "Judge agreement with {labels_word} is {low:.2} (lower bound), under the {:.2} floor. Change the judge prompt or the judge model, then run judge-trust again.",
                    opts.min_agreement
                ));
            }
        }
        let degenerate = self.flags.degenerate_gold;
        if let Some(k) = agree.kappa.filter(|k| !degenerate && *k < opts.min_kappa) {
            self.flags.kappa_floor = true;
            let guessing = if k < GUESSING_KAPPA {
                format!(
                    "; under {GUESSING_KAPPA:.1} its verdicts match the labels about as often as a coin flip would: the judge is guessing, so fix what it is asked before reading any bias check"
                )
            } else {
                String::new()
            };
            self.warnings.push(format!(
                "Judge agreement with {labels_word} beyond chance (kappa) is {k:.2}, under the {:.2} floor{guessing}. Change the judge prompt or the judge model, then run judge-trust again.",
                opts.min_kappa
            ));
        }
        labels_needed_out
    }

    /// The halves gap and the length bias.
    fn biases(&mut self, halves: &BTreeMap<&'static str, Agreement>, length: &super::Length) {
        if let (Some(a), Some(b)) = (halves["a"].agreement, halves["b"].agreement) {
            let gap = (a - b).abs();
            if gap >= HALVES_GAP_FLAG && halves["a"].n.min(halves["b"].n) >= HALVES_MIN_ROWS {
                self.flags.halves_gap = true;
                self.warnings.push(format!(
                    "agreement differs by {} between task halves; the rubric may be fit to the examples it was tuned on (label more tasks, or rewrite the rubric against the worse half)",
                    percent(gap)
                ));
            }
        }
        if length.flagged && !self.flags.degenerate_gold {
            self.flags.length_bias = true;
            self.warnings.push(format!(
                "judge pass rate differs by {} between short and long replies with the same gold label: length bias",
                percent(length.max_gap)
            ));
        }
    }

    /// What re-judging found: rows graded by another judge, flips on a re-judge or on filler,
    /// and the probes' findings.
    fn rejudged(&mut self, pairs: &[&Labeled], rejudged: &Rejudged) {
        if let Some(audited) = &rejudged.judge_name {
            let foreign: Vec<&str> = pairs
                .iter()
                .filter_map(|r| r.judge_name.as_deref())
                .filter(|j| !j.is_empty() && j != audited)
                .collect();
            if !foreign.is_empty() {
                self.flags.foreign_judge = true;
                let mut names: Vec<&str> = foreign.clone();
                names.sort_unstable();
                names.dedup();
                self.warnings.push(format!(
                    "Judge under audit is `{audited}`, but {} of {} labeled rows were graded by {}: their agreement measures that judge, not this one. Grade the rows with it first (wai grade ROWS `judge` SPEC), then run judge-trust again.",
                    foreign.len(),
                    pairs.len(),
                    names.iter().take(3).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        if let Some(p) = &rejudged.perturbation {
            if p.flagged_consistency {
                self.flags.inconsistent = true;
                self.warnings.push(format!(
                    "{} of verdicts flip on an identical re-judge; set temperature 0 or add a second sample",
                    percent(p.consistency_flip_rate.unwrap_or(0.0))
                ));
            }
            if p.flagged_length {
                self.flags.reads_filler = true;
                self.warnings.push(format!(
                    "{} of verdicts flip when neutral filler is appended ({} up, {} down): the judge reads length",
                    percent(p.filler_flip_rate.unwrap_or(0.0)),
                    p.filler_flips_up,
                    p.filler_flips_down
                ));
            }
        }
        if let Some(p) = &rejudged.probes {
            self.flags.exploitable = !p.exploitable_by.is_empty();
            self.warnings.extend(p.warnings.iter().cloned());
        }
    }
}

/// Whether any check failed.
fn failed(flags: &Flags) -> bool {
    flags.foreign_judge
        || flags.inconsistent
        || flags.reads_filler
        || flags.exploitable
        || flags.untrusted_gold
        || flags.skipped_over_floor
        || flags.agreement_floor
        || flags.kappa_floor
        || flags.leaky
        || flags.halves_gap
        || flags.length_bias
}

/// The first line: INCONCLUSIVE (too many rows skipped), PASS, NOT MEASURED (nothing failed,
/// but nothing was measured), or FAIL.
fn headline(flags: &Flags, skipped: &Skipped, ok: bool) -> String {
    if skipped.over_floor {
        format!(
            "INCONCLUSIVE: {} of {} labeled rows skipped ({}, over `max_skipped_share` {}); usable n={}",
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
    }
}

/// The report of `labeled` rows (every row with a gold label) out of `n_rows`, of which
/// `n_reward` carry a 0/1 reward and `n_gold` a 0/1 gold label.
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
    let skipped = skipped(&gold_rows, n_used, opts);
    let agree = agreement(&pairs, n_rows);
    let gold_kind = agree.gold_kind.clone();
    let trusted = opts.allow_model_gold || gold_kind.as_deref().is_some_and(trusted_kind);
    let halves = halves(&pairs);
    let length = length(&pairs, opts.length_gap_flag);
    let degenerate_gold = agree.confusion.one_valued_gold();
    let mut found = Findings {
        flags: Flags {
            unmeasured: agree.n == 0,
            untrusted_gold: agree.n > 0 && !trusted,
            degenerate_gold,
            skipped_over_floor: skipped.over_floor,
            ..Flags::default()
        },
        warnings: Vec::new(),
    };
    found.sample(&agree, &skipped, gold_kind.as_deref());
    let labels_needed = if trusted && agree.n > 0 {
        found.floors(&agree, opts, gold_kind.as_deref())
    } else {
        None
    };
    found.biases(&halves, &length);
    found.rejudged(&pairs, &rejudged);
    let Findings {
        flags,
        mut warnings,
    } = found;
    let exploitable_by = rejudged
        .probes
        .as_ref()
        .map(|p| p.exploitable_by.clone())
        .unwrap_or_default();
    let finding = flags.inconsistent || flags.reads_filler || flags.exploitable;
    if agree.n == 0 && !finding {
        let mut line = format!(
            "judge trust is unmeasured: `ok` is false for want of evidence, not for a failed check. {}",
            missing_side_note(n_reward, n_gold)
        );
        if n_reward > 0 && n_gold == 0 && rejudged.probes.is_none() {
            line.push_str(
                " `judge` SPEC `probes` all tries the shortcuts a policy would find, labels or not.",
            );
        }
        warnings.insert(0, line);
    }
    let ok = !flags.unmeasured && !flags.degenerate_gold && trusted && !failed(&flags);
    Report {
        ok,
        headline: headline(&flags, &skipped, ok),
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
        disagreements: disagreements(&pairs),
        labels_needed,
        flags,
        warnings,
    }
}
