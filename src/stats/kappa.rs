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

/// The 95% interval of kappa (4 places, within [-1, 1]): kappa ± z·se, with the large-sample
/// variance of Fleiss, Cohen and Everitt (1969), the one `statsmodels`' `cohens_kappa` reports as
/// `std_kappa`. Rows are the judge (pass, fail), columns the gold label. `None` where kappa is
/// undefined or the variance is zero (every pair agrees: no interval of width zero is claimed).
/// Like the agreement's Wilson interval, it treats pairs as independent.
#[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
pub fn kappa_interval(tp: u64, fp: u64, fn_: u64, tn: u64, z: f64) -> Option<[f64; 2]> {
    let n = (tp + fp + fn_ + tn) as f64;
    if n == 0.0 {
        return None;
    }
    let (p11, p12, p21, p22) = (tp as f64 / n, fp as f64 / n, fn_ as f64 / n, tn as f64 / n);
    let (r1, r2) = (p11 + p12, p21 + p22); // the judge's pass and fail shares
    let (c1, c2) = (p11 + p21, p12 + p22); // the gold label's
    let po = p11 + p22;
    let pe = r1 * c1 + r2 * c2;
    if pe >= 1.0 {
        return None;
    }
    let k = (po - pe) / (1.0 - pe);
    let agree =
        p11 * (1.0 - (r1 + c1) * (1.0 - k)).powi(2) + p22 * (1.0 - (r2 + c2) * (1.0 - k)).powi(2);
    let disagree = (1.0 - k).powi(2) * (p12 * (c1 + r2).powi(2) + p21 * (c2 + r1).powi(2));
    let chance = (k - pe * (1.0 - k)).powi(2);
    let var = (agree + disagree - chance) / (n * (1.0 - pe).powi(2));
    if var.is_nan() || var <= 1e-15 {
        return None;
    }
    let half = z * var.sqrt();
    Some([
        round_places((k - half).max(-1.0), 4),
        round_places((k + half).min(1.0), 4),
    ])
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

    #[test]
    fn kappas_interval_is_statsmodels_cohens_kappa() {
        // statsmodels 0.14 `cohens_kappa(table)` (rows: judge, columns: gold): kappa_low,
        // kappa_upp at z = 1.959964; ours at 1.96, to 4 places.
        let z = crate::stats::wilson::Z_95;
        let close = |got: Option<[f64; 2]>, want: [f64; 2]| {
            let got = got.expect("an interval");
            assert!(
                (got[0] - want[0]).abs() < 2e-4 && (got[1] - want[1]).abs() < 2e-4,
                "{got:?} against {want:?}"
            );
        };
        close(kappa_interval(20, 5, 10, 15, z), [0.151_092, 0.648_908]);
        close(kappa_interval(181, 22, 23, 191, z), [0.724_458, 0.843_642]);
        close(kappa_interval(40, 1, 3, 6, z), [0.432_134, 0.974_394]);
        // Every pair agrees: no interval of width zero.
        assert_eq!(kappa_interval(7, 0, 0, 9, z), None);
        // One value throughout from both: kappa is undefined.
        assert_eq!(kappa_interval(10, 0, 0, 0, z), None);
        assert_eq!(kappa_interval(0, 0, 0, 0, z), None);
    }
}
