//! Cohen's kappa for two raters on a binary label.

use super::round_places;

/// Kappa from a confusion table (judge × gold: true/false positives and negatives), rounded to
/// 4 places as the reference reports it; `None` with no pairs. When chance agreement is certain
/// (both raters gave one value throughout) it is 1 if they agree, else 0: a degenerate table
/// says nothing about skill, which callers must flag themselves.
#[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
pub fn kappa(tp: u64, fp: u64, fn_: u64, tn: u64) -> Option<f64> {
    let n = tp + fp + fn_ + tn;
    if n == 0 {
        return None;
    }
    let n = n as f64;
    let po = (tp + tn) as f64 / n;
    let judge_yes = (tp + fp) as f64 / n;
    let gold_yes = (tp + fn_) as f64 / n;
    let pe = judge_yes * gold_yes + (1.0 - judge_yes) * (1.0 - gold_yes);
    if pe == 1.0 {
        return Some(if po == 1.0 { 1.0 } else { 0.0 });
    }
    Some(round_places((po - pe) / (1.0 - pe), 4))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    #[test]
    fn kappa_matches_the_reference() {
        let v: Value =
            serde_json::from_str(include_str!("../../tests/fixtures/vectors_measure.json"))
                .expect("vectors");
        for case in v["kappa"].as_array().expect("cases") {
            let n = |k: &str| case[k].as_u64().expect("count");
            assert_eq!(
                kappa(n("tp"), n("fp"), n("fn"), n("tn")),
                case["kappa"].as_f64(),
                "{case}"
            );
        }
    }

    proptest! {
        /// Against the textbook formula on the full table.
        #[test]
        fn kappa_is_cohens(tp in 0u64..50, fp in 0u64..50, fn_ in 0u64..50, tn in 0u64..50) {
            let n = (tp + fp + fn_ + tn) as f64;
            prop_assume!(n > 0.0);
            let po = (tp + tn) as f64 / n;
            let pe = ((tp + fp) as f64 * (tp + fn_) as f64 + (fn_ + tn) as f64 * (fp + tn) as f64) / (n * n);
            prop_assume!((1.0 - pe).abs() > 1e-9);
            let naive = (po - pe) / (1.0 - pe);
            let got = kappa(tp, fp, fn_, tn).unwrap();
            prop_assert!((got - naive).abs() <= 5e-5 + 1e-12, "{} vs {}", got, naive);
        }
    }
}
