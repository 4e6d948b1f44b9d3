//! The checks around the verdict: the proxy, whether the arms are comparable (task sets,
//! settings, graded and answered shares), the ceiling, the sizing line, and the family error.
//! Each adds its warnings, in the report's order, to a [`Gate`].

use std::fmt::Write as _;

use super::measure::{Basis, Readings, fmt_ci, fmt_delta, pairs, word};
use super::{
    CEILING_MIN_TASKS_WITH_ROOM, CEILING_ROOM_SHARE, FAMILY_ERROR_MIN_METRICS, GRADED_SHARE_WARN,
    Metric, PASS_AT_1, TRUNCATED_SHARE_GAP,
};
use crate::stages::holdout;
use crate::stats::paired::{self, Comparison, Direction};
use crate::stats::{round_places, sizing};

/// The gate as the checks leave it: `ok`, the warnings in order, and why the arms are not
/// comparable.
#[derive(Debug, Default)]
pub(super) struct Gate {
    /// True while nothing failed the gate.
    pub ok: bool,
    /// What to read before trusting the verdict.
    pub warnings: Vec<String>,
    /// Why the arms cannot be compared.
    pub not_comparable: Vec<String>,
}

impl Gate {
    fn warn(&mut self, w: String) {
        self.warnings.push(w);
    }

    /// Not comparable for `why`, with the warning.
    fn not_comparable(&mut self, why: &str, w: String) {
        self.not_comparable.push(why.to_owned());
        self.warnings.push(w);
    }
}

/// The proxy's reading.
#[derive(Debug, Default)]
pub(super) struct Proxy {
    /// Its verdict word.
    pub verdict: Option<&'static str>,
    /// Its delta.
    pub delta: Option<f64>,
    /// Its interval.
    pub ci95: Option<[f64; 2]>,
    /// It rose without the target.
    pub over_optimized: bool,
}

/// Reads the proxy `key` against the headline: over-optimised when it rose past the noise and the
/// headline did not rise (or rose less than the proxy's interval's low end).
pub(super) fn proxy(
    key: Option<&str>,
    metrics: &std::collections::BTreeMap<String, Metric>,
    headline: &str,
    gate: &mut Gate,
) -> Proxy {
    let mut out = Proxy::default();
    let Some(p) = key else { return out };
    if !metrics.contains_key(p) {
        out.verdict = Some("proxy_not_measured");
        gate.warn(format!("the proxy {p} is not measured on both sides"));
        return out;
    }
    if p == headline {
        out.verdict = Some("proxy_is_target");
        gate.warn(format!(
            "the proxy {p} is the headline metric; name the metric the proxy stands in for as `target`"
        ));
        return out;
    }
    let (pm, head) = (&metrics[p], &metrics[headline]);
    out.verdict = Some(word(pm.gain_verdict));
    out.delta = pm.comparison.delta;
    out.ci95 = pm.comparison.ci95;
    let up = |m: &Metric| m.gain_verdict == Direction::BBetter && !m.within_noise;
    let gain_ci = |m: &Metric| {
        m.comparison.ci95.map(|[lo, hi]| {
            if m.lower_is_better {
                [-hi, -lo]
            } else {
                [lo, hi]
            }
        })
    };
    let beyond =
        matches!((gain_ci(pm), gain_ci(head)), (Some([plo, _]), Some([_, thi])) if plo > thi);
    if up(pm) && (!up(head) || beyond) {
        out.over_optimized = true;
        gate.ok = false;
        gate.warn(format!(
            "OVER-OPTIMIZED: the proxy {p} rose {} ({}) while {headline} {}; the policy is learning the proxy, not the goal",
            fmt_delta(pm.comparison.delta),
            fmt_ci(pm.comparison.ci95),
            if up(head) { "rose less" } else { "did not rise" }
        ));
    }
    out
}

/// Whether the arms are comparable: the same tasks, the same settings (or declared `changed`),
/// rewards and replies on both sides. Any reason fails the gate.
pub(super) fn comparability(b: &Basis, metrics: &Readings, headline: &str, gate: &mut Gate) {
    let pass = &metrics.metrics[PASS_AT_1].comparison;
    if pass
        .paired_share
        .is_some_and(|s| s < paired::UNPAIRED_MAJORITY_SHARE)
        && pass.n_only_a + pass.n_only_b > 0
    {
        gate.not_comparable("situations", format!(
            "NOT COMPARABLE: the two arms ran different task sets; {} of {} tasks are on both sides ({} only before, {} only after), so the delta is between two evals, not two policies. Re-run the after side on the before side's tasks.",
            pass.n_paired,
            pass.n_paired + pass.n_only_a + pass.n_only_b,
            pass.n_only_a,
            pass.n_only_b
        ));
    }
    let head = &metrics.metrics[headline];
    let moved = settings(b, gate);
    shares(b, head, headline, moved, gate);
    answered(b, head, gate);
    if !gate.not_comparable.is_empty() {
        gate.ok = false;
    }
}

/// The settings of the two run configs: each that differs is not comparable unless `changed`.
/// Returns whether any differs.
fn settings(b: &Basis, gate: &mut Gate) -> bool {
    let (cb, ca) = (&b.arms.before.config, &b.arms.after.config);
    let offline = |w: &Option<String>| {
        w.as_deref().map(|v| {
            if matches!(v, "seed" | "template" | "pinned" | "callable-writer") {
                "offline".to_owned()
            } else {
                v.to_owned()
            }
        })
    };
    let settings: [(&str, Option<String>, Option<String>, &str); 6] = [
        (
            "prompt_hash",
            cb.prompt_hash.clone(),
            ca.prompt_hash.clone(),
            "the system prompt differs (lineage.system_prompt_sha); if the prompt is the change under test, pass `changed` prompt_hash",
        ),
        (
            "judge_version",
            cb.judge_version.clone(),
            ca.judge_version.clone(),
            "the arms were graded by different judge versions, so the delta mixes the policy with the ruler; re-grade both with one judge (wai grade)",
        ),
        (
            "temperature",
            cb.temperature.map(|t| format!("{t}")),
            ca.temperature.map(|t| format!("{t}")),
            "sampling temperature differs; pin it, or pass `changed` temperature if it is the change under test",
        ),
        (
            "max_tokens",
            cb.max_tokens.map(|t| t.to_string()),
            ca.max_tokens.map(|t| t.to_string()),
            "the token cap differs, which moves truncation; pin it, or pass `changed` max_tokens if it is the change under test",
        ),
        (
            "user_model",
            cb.user_model.clone(),
            ca.user_model.clone(),
            "the simulated user moved with the policy, so the delta measures the pair; pin one user model on both arms",
        ),
        (
            "writer_model",
            offline(&cb.writer_model),
            offline(&ca.writer_model),
            "the environment (the ask writer) moved with the weights, so this delta measures the pair, not the policy; pin one writer on both arms",
        ),
    ];
    let mut moved = false;
    for (name, before, after, why) in settings {
        let (Some(x), Some(y)) = (&before, &after) else {
            continue;
        };
        if x == y {
            continue;
        }
        moved = true;
        if b.opts.changed.iter().any(|c| c == name) {
            gate.warn(format!(
                "{name} was {x:?} before and {y:?} after, declared the change under test (`changed`)"
            ));
        } else {
            gate.not_comparable(
                name,
                format!("NOT COMPARABLE: {name} was {x:?} before and {y:?} after; {why}"),
            );
        }
    }
    moved
}

/// The truncated share, the policy versions, and the graded share: rows without a reward can
/// bias the pass rate by up to d/(1 − d) a side. One policy version on both arms means one policy
/// only when no setting moved between them (`moved`: then the delta is not noise).
fn shares(b: &Basis, head: &Metric, headline: &str, moved: bool, gate: &mut Gate) {
    let (cb, ca) = (&b.arms.before.config, &b.arms.after.config);
    if let (Some(x), Some(y)) = (cb.truncated_share, ca.truncated_share)
        && (x - y).abs() > TRUNCATED_SHARE_GAP
    {
        gate.warn(format!(
            "the share of replies cut by the token cap moved from {x:.2} to {y:.2}; part of the delta may be truncation"
        ));
    }
    if let (Some(x), Some(y)) = (&cb.policy_version, &ca.policy_version)
        && x == y
        && !moved
    {
        gate.warn(format!(
            "both arms carry policy_version {x:?}: this compares a policy to itself, so any delta is eval noise"
        ));
    }
    let head_c = &head.comparison;
    let bar = head
        .noise_band
        .or_else(|| head_c.ci95.map(|[lo, hi]| (hi - lo) / 2.0));
    let (Some(gb), Some(ga), Some(bar)) = (cb.graded_share, ca.graded_share, bar) else {
        return;
    };
    let term = |g: f64| {
        let d = 1.0 - g;
        if d >= 1.0 { 1.0 } else { d / (1.0 - d) }
    };
    let bias = term(gb) + term(ga);
    if bias > bar && bias > 0.0 {
        let delta = head_c.delta.unwrap_or(0.0).abs();
        if bias >= delta {
            gate.not_comparable("graded_share", format!(
                "NOT COMPARABLE: {:.0}% of rows before and {:.0}% after carry a reward; the ungraded rows could move {headline} by up to {bias:.3}, which covers the whole delta. Grade them (wai grade) or find why the judge skipped them.",
                gb * 100.0,
                ga * 100.0
            ));
        } else {
            gate.warn(format!(
                "ungraded rows could move {headline} by up to {bias:.3} (graded share {gb:.2} before, {ga:.2} after)"
            ));
        }
    } else if gb.min(ga) < GRADED_SHARE_WARN {
        gate.warn(format!(
            "graded share {gb:.2} before, {ga:.2} after: some rows carry no reward"
        ));
    }
}

/// The answered share: a two-proportion z test on the rows with a spoken reply; a gap past the
/// headline's band (else `answered_gap_points`) is not comparable.
fn answered(b: &Basis, head: &Metric, gate: &mut Gate) {
    let (fb, fa) = (&b.arms.before.facts, &b.arms.after.facts);
    if fb.spoken_known == 0 || fa.spoken_known == 0 {
        return;
    }
    let (xb, nb, xa, na) = (
        fb.spoken_answered as f64,
        fb.spoken_known as f64,
        fa.spoken_answered as f64,
        fa.spoken_known as f64,
    );
    let pooled = (xb + xa) / (nb + na);
    if pooled <= 0.0 || pooled >= 1.0 {
        return;
    }
    let se = (pooled * (1.0 - pooled) * (1.0 / nb + 1.0 / na)).sqrt();
    let gap = (xb / nb - xa / na).abs();
    let p = 2.0 * (1.0 - sizing::cdf(gap / se));
    if p >= b.opts.answered_alpha {
        return;
    }
    let mechanism = if fb.spoken_unclosed + fa.spoken_unclosed > 0 {
        "an unclosed <think> block ate the reply"
    } else if fb.truncated_rows + fa.truncated_rows > 0 {
        "the token cap cut replies off"
    } else {
        "check finish_reason on the rows without a reply"
    };
    gate.warn(format!(
        "the share of rows with a spoken reply moved from {:.2} to {:.2} (p {p:.2e}); likely mechanism: {mechanism}",
        xb / nb,
        xa / na
    ));
    if gap > head.noise_band.unwrap_or(b.opts.answered_gap_points) {
        gate.not_comparable("answered", format!(
            "NOT COMPARABLE: the answered share moved by {gap:.2}, more than the bar; the delta is about replying at all, not replying well"
        ));
    }
}

/// Whether the before arm leaves little room to improve: its pass rate is at the ceiling, or few
/// shared tasks are below 1.
pub(super) fn ceiling(b: &Basis, pass: &Comparison, gate: &mut Gate) -> bool {
    if pass.mean_a.is_some_and(|m| m >= b.opts.ceiling_pass_rate) {
        gate.warn(format!(
            "The before run already passes {:.2} of tasks, so there is little room to measure improvement; use harder situations.",
            pass.mean_a.unwrap_or(0.0)
        ));
        return true;
    }
    let p = &b.pooled[PASS_AT_1];
    let shared = paired::join(&pairs(&p.before), &pairs(&p.after)).0;
    let with_room = shared.iter().filter(|(b, _)| *b < 1.0).count();
    if !shared.is_empty()
        && with_room < CEILING_MIN_TASKS_WITH_ROOM
        && (with_room as f64) < CEILING_ROOM_SHARE * shared.len() as f64
    {
        gate.warn(format!(
            "only {with_room} of {} shared tasks leave the before run room to improve; use harder situations",
            shared.len()
        ));
        return true;
    }
    false
}

/// The sizing line: the smallest gain the paired tasks can detect, and the tasks the observed
/// gain would need.
#[derive(Debug, Default)]
pub(super) struct Sizing {
    /// The smallest gain the paired tasks can detect.
    pub detectable: Option<f64>,
    /// Tasks the observed gain would need.
    pub tasks_needed: Option<u64>,
    /// `rows` or `model`.
    pub tasks_needed_source: Option<&'static str>,
}

/// Sizes the headline (`no_change`: the headline verdict is `no_change_detected`, so the sizing
/// line is a warning).
pub(super) fn sizing(
    b: &Basis,
    head: &Metric,
    pass: &Comparison,
    no_change: bool,
    gate: &mut Gate,
) -> Sizing {
    let opts = b.opts;
    let (cb, ca) = (&b.arms.before.config, &b.arms.after.config);
    let k_eval = cb.k;
    let n_paired = head.comparison.n_paired;
    let base = pass.mean_a.unwrap_or(holdout::BASE_PASS_RATE);
    // The binomial model sizes pass rates: its base is pass@1 before, whatever the headline.
    let detectable = (n_paired >= 2)
        .then(|| sizing::detectable_effect(n_paired, base, k_eval, opts.power, opts.alpha))
        .flatten();
    let signed_gain = head
        .comparison
        .delta
        .map(|d| if head.lower_is_better { -d } else { d });
    let mut out = Sizing {
        detectable,
        ..Sizing::default()
    };
    if let Some(g) = signed_gain.filter(|g| *g > 0.0 && *g < 1.0) {
        let hopts = holdout::Options {
            effect: g,
            base,
            k: k_eval,
            power: opts.power,
            alpha: opts.alpha,
            ceiling: opts.ceiling_pass_rate,
            seed: opts.seed,
            range: false,
            ..holdout::Options::default()
        };
        let rates = |t: &[(u32, f64, u64)]| -> Vec<holdout::TaskRate> {
            t.iter()
                .map(|&(task, rate, n)| holdout::TaskRate { task, rate, n })
                .collect()
        };
        let p = &b.pooled[PASS_AT_1];
        let (rb, ra) = (rates(&p.before), rates(&p.after));
        let sized = holdout::size(&hopts, Some(&rb), Some(&ra))
            .or_else(|_| holdout::size(&hopts, None, None));
        if let Ok(r) = sized {
            out.tasks_needed = Some(r.n_tasks);
            out.tasks_needed_source = Some(if r.sd_source == "rows" {
                "rows"
            } else {
                "model"
            });
        }
    }
    if no_change && let Some(e) = detectable {
        let mut w = format!(
            "{n_paired} paired tasks at k={k_eval} can prove a gain of about {} at {:.0}% power (wai holdout-size).",
            // Two places as the reference prints it; four when that would read +0.00.
            if e >= 0.005 {
                format!("{e:+.2}")
            } else {
                format!("{e:+.4}")
            },
            opts.power * 100.0
        );
        if let (Some(n), Some(d)) = (out.tasks_needed, signed_gain) {
            let _ = write!(w, " The observed {d:+.3} would need about {n} tasks.");
        }
        gate.warn(w);
    }
    if ca.k != k_eval && ca.n_tasks > 0 && cb.n_tasks > 0 {
        gate.warn(format!(
            "k differs: {k_eval} rollouts a task before, {} after; pass@1 is comparable, pass^k is not",
            ca.k
        ));
    }
    out
}

/// The chance at least one of the metrics clears zero on luck alone (4 places), with a warning
/// when several metrics moved.
pub(super) fn family_error(b: &Basis, r: &Readings, gate: &mut Gate) -> f64 {
    let n = b.names.len();
    let family_error = round_places(1.0 - b.level.powi(i32::try_from(n).unwrap_or(i32::MAX)), 4);
    if n >= FAMILY_ERROR_MIN_METRICS
        && !(r.improved.is_empty() && r.slipped.is_empty() && r.regressions.is_empty())
    {
        gate.warn(format!(
            "{n} metrics at {:.0}%: up to {:.0}% chance that one of them clears zero on luck alone; read a single moved marker with care",
            b.level * 100.0,
            family_error * 100.0
        ));
    }
    family_error
}

/// The guards that take one value on every row of both arms (they cannot fail).
pub(super) fn degenerate_guards(b: &Basis, guarded: &[String], gate: &mut Gate) -> Vec<String> {
    let mut out = Vec::new();
    for g in guarded {
        if let Some(mid) = b.id(g) {
            if super::arm::degenerate(&b.arms.before.cells, mid)
                && super::arm::degenerate(&b.arms.after.cells, mid)
            {
                out.push(g.clone());
                gate.warn(format!(
                    "the guard {g} takes one value on every row of both arms, so it cannot fail; check that it fires at all (a key-name mismatch looks the same)"
                ));
            }
        } else {
            gate.warn(format!("the guard {g} is not measured on either side"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::{pass_arms, pass_rows};
    use super::super::{Options, measure};
    use super::*;

    fn readings(b: &Basis) -> Readings {
        let noise = measure::Noise::new(b, &measure::seed_counts(b.arms)).unwrap();
        measure::read_metrics(b, &b.comparisons(), &noise, &[], false).unwrap()
    }

    #[test]
    fn a_before_arm_at_its_ceiling_leaves_no_room() {
        let (all, most) = (pass_rows(30, |_| 4), pass_rows(30, |i| 4 - i % 2));
        let a = pass_arms(&all, &most);
        let opts = Options::default();
        let b = Basis::new(&a, &opts).unwrap();
        let r = readings(&b);
        let mut gate = Gate::default();
        assert!(ceiling(&b, &r.metrics[PASS_AT_1].comparison, &mut gate));
        assert!(gate.warnings[0].starts_with("The before run already passes 1.00"));
        let a = pass_arms(&pass_rows(30, |_| 1), &most);
        let b = Basis::new(&a, &opts).unwrap();
        let r = readings(&b);
        let mut gate = Gate::default();
        assert!(!ceiling(&b, &r.metrics[PASS_AT_1].comparison, &mut gate));
        assert!(gate.warnings.is_empty());
    }

    #[test]
    fn a_setting_that_differs_is_not_comparable_unless_declared_the_change() {
        let rows = pass_rows(20, |i| i % 5);
        let mut a = pass_arms(&rows, &rows);
        a.before.config.judge_version = Some("v1".into());
        a.after.config.judge_version = Some("v2".into());
        let opts = Options::default();
        let b = Basis::new(&a, &opts).unwrap();
        let r = readings(&b);
        let mut gate = Gate {
            ok: true,
            ..Gate::default()
        };
        comparability(&b, &r, PASS_AT_1, &mut gate);
        assert_eq!(gate.not_comparable, ["judge_version"]);
        assert!(!gate.ok);
        let opts = Options {
            changed: vec!["judge_version".into()],
            ..Options::default()
        };
        let b = Basis::new(&a, &opts).unwrap();
        let mut gate = Gate {
            ok: true,
            ..Gate::default()
        };
        comparability(&b, &r, PASS_AT_1, &mut gate);
        assert!(gate.ok && gate.not_comparable.is_empty());
        assert!(gate.warnings[0].contains("declared the change under test"));
    }

    #[test]
    fn a_proxy_that_is_not_measured_or_is_the_headline_says_so() {
        let rows = pass_rows(10, |i| i % 4);
        let a = pass_arms(&rows, &rows);
        let opts = Options::default();
        let b = Basis::new(&a, &opts).unwrap();
        let r = readings(&b);
        let mut gate = Gate::default();
        let p = proxy(Some("marker:polite"), &r.metrics, PASS_AT_1, &mut gate);
        assert_eq!(p.verdict, Some("proxy_not_measured"));
        let p = proxy(Some(PASS_AT_1), &r.metrics, PASS_AT_1, &mut gate);
        assert_eq!(p.verdict, Some("proxy_is_target"));
        assert_eq!(gate.warnings.len(), 2);
        assert!(!p.over_optimized);
        assert!((family_error(&b, &r, &mut gate) - 0.05).abs() < 1e-12);
    }
}
