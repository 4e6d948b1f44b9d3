//! Ranking the features against the noise floor, and naming the regime with its warnings.

use super::{
    COLLINEAR_SHOWN, DEGENERATE_RHO, Entry, FLOOR_COARSE_BELOW, Feature, MIN_DISTINCT_PER_TASK,
    RESCAN_ROLLOUTS, RIVAL_SHARE, Regime, Report, SAT_FLAG,
};
use crate::stats::round_places;
use std::fmt::Write as _;

/// The features, strongest first; in a tie the endorsed feature with a positive rho (the
/// behaviour rather than its complement), then the name.
fn ranked(feats: &[Feature], tau: f64) -> Vec<Entry> {
    let mut order: Vec<&Feature> = feats.iter().collect();
    order.sort_by(|a, b| {
        round_places(b.rho.abs(), 6)
            .total_cmp(&round_places(a.rho.abs(), 6))
            .then_with(|| {
                let first = |f: &Feature| u8::from(!(f.endorsed && f.rho > 0.0));
                first(a).cmp(&first(b))
            })
            .then_with(|| a.name.cmp(&b.name))
    });
    order
        .iter()
        .map(|f| Entry {
            name: f.name.clone(),
            aliases: f.aliases.clone(),
            rho: round_places(f.rho, 4),
            pooled: round_places(f.pooled, 4),
            n_obs: f.n_obs,
            above_floor: f.rho.abs() > tau,
            endorsed: f.endorsed,
        })
        .collect()
}

/// `"a", "b"`.
fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The strongest |rho| of the above-floor features: endorsed with a positive rho (`e`), and
/// not endorsed (`a`).
fn strongest(above: &[&Entry]) -> (f64, f64) {
    let e = above
        .iter()
        .filter(|x| x.endorsed && x.rho > 0.0)
        .map(|x| x.rho)
        .fold(0.0, f64::max);
    let a = above
        .iter()
        .filter(|x| !x.endorsed)
        .map(|x| x.rho.abs())
        .fold(0.0, f64::max);
    (e, a)
}

/// Ranks the features against the floor and names the regime.
pub(super) fn rank(
    report: &mut Report,
    feats: &[Feature],
    (tau, n_nulls): (f64, usize),
    endorsed: &[String],
    cap: usize,
) {
    let listed = ranked(feats, tau);
    let above: Vec<&Entry> = listed.iter().filter(|e| e.above_floor).collect();
    let top = listed.first().cloned();
    let rho_max = top.as_ref().map_or(0.0, |t| t.rho.abs());
    let matched = listed.iter().filter(|e| e.endorsed).count();
    report.tau = Some(round_places(tau, 4));
    report.n_features = listed.len();
    report.n_above_floor = above.len();
    report.features = listed.iter().take(cap).cloned().collect();
    report.top_feature = top.as_ref().map(|t| t.name.clone());
    report.rho_max = round_places(rho_max, 4);
    report.endorsed_matched = matched;

    if !endorsed.is_empty() && matched == 0 {
        report.regime = Regime::Unknown;
        report.warnings.push(format!(
            "`endorsed` {} names none of the {} features; feature names look like \
             tool:NAME, marker:NAME, contains:TERM, or a `features` NAME",
            endorsed.join(","),
            listed.len()
        ));
        return;
    }
    let collinear: Vec<String> = listed
        .iter()
        .filter(|e| e.rho.abs() >= DEGENERATE_RHO)
        .map(|e| e.name.clone())
        .collect();
    let degenerate = collinear.len() >= 2 && report.distinct_per_ask < MIN_DISTINCT_PER_TASK;
    report.degenerate = degenerate;
    report.collinear.clone_from(&collinear);
    let (e, a) = strongest(&above);
    let mut inverted: Vec<&Entry> = if degenerate {
        Vec::new()
    } else {
        above
            .iter()
            .copied()
            .filter(|x| x.endorsed && x.rho < 0.0)
            .collect()
    };
    if !endorsed.is_empty() && !degenerate {
        report.endorsed_on_top = Some(top.as_ref().is_some_and(|t| t.endorsed && t.rho > 0.0));
        report.integrity = Some(if e + a > 0.0 {
            round_places(e / (e + a), 4)
        } else {
            0.0
        });
    }
    let mut inverted_set = false;
    if degenerate {
        degenerate_warnings(report, &listed, &collinear);
    } else if let Some(top) = top.as_ref().filter(|_| !above.is_empty()) {
        inverted_set = with_signal(report, top, endorsed, e, tau, &mut inverted);
    } else {
        report.regime = Regime::NoSignal;
        report.warnings.push(format!(
            "no feature clears the noise floor (strongest |rho| {rho_max:.2}, floor {tau:.2} \
             from {n_nulls} within-task shuffles): the reward does not separate rollouts of one \
             task on anything measured; check the judge (`wai judge-trust`) before training"
        ));
    }
    if !inverted_set {
        report.inverted = inverted.iter().map(|x| x.name.clone()).collect();
    }
    closing_warnings(report, &above, &inverted, endorsed, a);
}

/// The degenerate regime: no top feature, and why.
fn degenerate_warnings(report: &mut Report, listed: &[Entry], collinear: &[String]) {
    report.regime = Regime::Degenerate;
    report.top_feature = None;
    let mut shown = quoted(&collinear[..collinear.len().min(COLLINEAR_SHOWN)]);
    if collinear.len() > COLLINEAR_SHOWN {
        let _ = write!(shown, " and {} more", collinear.len() - COLLINEAR_SHOWN);
    }
    report.warnings.push(format!(
        "only {} distinct rollout(s) per task at the median, so {} features move exactly \
         with the reward within tasks (|rho| >= {DEGENERATE_RHO}): {shown}. The data cannot \
         tell them apart, so no top feature is named and no hack is claimed. Re-scan on \
         rollouts that differ in more ways (more repeats, a higher temperature), and scan \
         before `select` in `rl` mode, which drops duplicate rollouts",
        report.distinct_per_ask,
        collinear.len()
    ));
    let tied: Vec<String> = listed
        .iter()
        .filter(|x| x.endorsed && collinear.contains(&x.name))
        .map(|x| x.name.clone())
        .take(3)
        .collect();
    if !tied.is_empty() {
        report.warnings.push(format!(
            "the endorsed {} is in that tie: its sign says only which of the few distinct \
             rollouts passed, not whether the reward pays for the behaviour or punishes it",
            quoted(&tied)
        ));
    }
}

/// The regime when `top` clears the floor: a hack (something not endorsed on top, or the
/// endorsed top punished), an exhausted pool, or train. Returns whether `report.inverted` is
/// already set (the punished top is kept there and dropped from `inverted`).
fn with_signal(
    report: &mut Report,
    top: &Entry,
    endorsed: &[String],
    e: f64,
    tau: f64,
    inverted: &mut Vec<&Entry>,
) -> bool {
    if !endorsed.is_empty() && !top.endorsed {
        report.regime = Regime::RewardHack;
        let best = if e > 0.0 {
            format!(" (the best endorsed feature reaches {e:.2})")
        } else {
            " (no endorsed feature clears the floor)".into()
        };
        report.warnings.push(format!(
            "the reward follows \"{}\" (within-task rho {:+.2}, floor {tau:.2}) rather than \
             anything endorsed{best}; a policy trained on it learns \"{}\"",
            top.name, top.rho, top.name
        ));
    } else if !endorsed.is_empty() && top.rho < 0.0 {
        report.regime = Regime::RewardHack;
        report.warnings.push(format!(
            "the reward punishes the endorsed \"{}\" (within-task rho {:+.2}, floor \
             {tau:.2}); a policy trained on it does less of that behaviour",
            top.name, top.rho
        ));
        // The field keeps it (as the reference's does); the warning above already says it.
        report.inverted = inverted.iter().map(|x| x.name.clone()).collect();
        inverted.retain(|x| x.name != top.name);
        return true;
    } else if report.support.sat > SAT_FLAG {
        report.regime = Regime::PoolExhausted;
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a share of a task count, rounded back to a count"
        )]
        let all_pass = (report.support.sat * report.n_groups as f64).round() as usize;
        report.warnings.push(format!(
            "{all_pass} of {} tasks are already all-pass ({:.0}%): they carry no gradient; \
             add harder tasks or drop them (`select` in `rl` mode does)",
            report.n_groups,
            report.support.sat * 100.0
        ));
    } else {
        report.regime = Regime::Train;
    }
    false
}

/// The warnings every regime may add: endorsed features punished, rivals of the endorsed, a
/// coarse floor.
fn closing_warnings(
    report: &mut Report,
    above: &[&Entry],
    inverted: &[&Entry],
    endorsed: &[String],
    a: f64,
) {
    if !inverted.is_empty() {
        let names: Vec<String> = inverted
            .iter()
            .take(3)
            .map(|x| format!("\"{}\" ({:+.2})", x.name, x.rho))
            .collect();
        report.warnings.push(format!(
            "the reward also punishes the endorsed {}",
            names.join(", ")
        ));
    }
    if !endorsed.is_empty()
        && matches!(report.regime, Regime::Train | Regime::PoolExhausted)
        && a > 0.0
        && report.integrity.is_some_and(|i| i < 1.0 - RIVAL_SHARE)
    {
        let rivals: Vec<String> = above
            .iter()
            .filter(|x| !x.endorsed)
            .take(3)
            .map(|x| x.name.clone())
            .collect();
        report.warnings.push(format!(
            "also above the floor and not endorsed: {} (integrity {:.2})",
            quoted(&rivals),
            report.integrity.unwrap_or(0.0)
        ));
    }
    if report.rollouts_per_group < FLOOR_COARSE_BELOW {
        report.warnings.push(format!(
            "{} rollouts per task at the median: the floor is coarse below {FLOOR_COARSE_BELOW}; \
             re-scan with {RESCAN_ROLLOUTS} or more before acting on a close call",
            report.rollouts_per_group
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::within::{Column, Support};

    fn feature(name: &str, rho: f64, endorsed: bool) -> Feature {
        Feature {
            name: name.into(),
            aliases: Vec::new(),
            column: Column::Dense(vec![1.0]),
            n_obs: 10,
            endorsed,
            sd_within: 1.0,
            sd_pooled: 1.0,
            rho,
            pooled: rho / 2.0,
        }
    }

    fn report() -> Report {
        Report {
            regime: Regime::Unknown,
            n_rows: 40,
            n_graded: 40,
            n_groups: 10,
            n_groups_multi: 10,
            rollouts_per_group: 4,
            effective_rollouts: 40,
            support: Support {
                sat: 0.0,
                dead: 0.0,
                mixed: 1.0,
                capacity: 1.0,
            },
            tau: None,
            n_perm: 100,
            n_features: 0,
            n_above_floor: 0,
            features: Vec::new(),
            top_feature: None,
            rho_max: 0.0,
            endorsed: Vec::new(),
            endorsed_matched: 0,
            endorsed_on_top: None,
            integrity: None,
            inverted: Vec::new(),
            continuous_reward: false,
            degenerate: false,
            collinear: Vec::new(),
            distinct_per_ask: 4,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn ties_put_the_endorsed_positive_feature_first_then_the_name() {
        let feats = [
            feature("b", -0.5, false),
            feature("a", 0.5, false),
            feature("c", 0.5, true),
            feature("d", 0.9, false),
        ];
        let names: Vec<String> = ranked(&feats, 0.6).into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["d", "c", "a", "b"]);
        assert!(ranked(&feats, 0.6)[0].above_floor);
        assert!(!ranked(&feats, 0.6)[1].above_floor);
    }

    #[test]
    fn an_unendorsed_top_above_the_floor_is_a_hack() {
        let mut r = report();
        let endorsed = vec!["good".to_owned()];
        let feats = [feature("shortcut", 0.8, false), feature("good", 0.4, true)];
        rank(&mut r, &feats, (0.3, 100), &endorsed, 10);
        assert_eq!(r.regime, Regime::RewardHack);
        assert_eq!(r.top_feature.as_deref(), Some("shortcut"));
        assert_eq!(r.integrity, Some(round_places(0.4 / 1.2, 4)));
        assert_eq!(r.endorsed_on_top, Some(false));
        assert!(r.warnings[0].contains("the reward follows \"shortcut\""));
    }

    #[test]
    fn nothing_above_the_floor_is_no_signal_and_unmatched_patterns_unknown() {
        let mut r = report();
        rank(&mut r, &[feature("x", 0.1, false)], (0.3, 100), &[], 10);
        assert_eq!(r.regime, Regime::NoSignal);
        assert_eq!(r.n_above_floor, 0);
        let mut r = report();
        let endorsed = vec!["nothing".to_owned()];
        rank(
            &mut r,
            &[feature("x", 0.9, false)],
            (0.3, 100),
            &endorsed,
            10,
        );
        assert_eq!(r.regime, Regime::Unknown);
        assert!(r.warnings[0].contains("names none of the 1 features"));
    }

    #[test]
    fn collinear_features_with_few_distinct_rollouts_are_degenerate() {
        let mut r = report();
        r.distinct_per_ask = 2;
        r.rollouts_per_group = 2;
        let feats = [feature("a", 1.0, false), feature("b", -1.0, true)];
        rank(&mut r, &feats, (0.3, 100), &["b".to_owned()], 10);
        assert_eq!(r.regime, Regime::Degenerate);
        assert!(r.top_feature.is_none() && r.degenerate);
        assert_eq!(r.collinear, ["a", "b"]);
        assert!(r.inverted.is_empty());
        // The tie, the endorsed in it, and the coarse floor.
        assert_eq!(r.warnings.len(), 3, "{:?}", r.warnings);
    }

    #[test]
    fn quoted_names_are_joined() {
        assert_eq!(quoted(&["a".into(), "b".into()]), "\"a\", \"b\"");
        assert_eq!(strongest(&[]), (0.0, 0.0));
    }
}
