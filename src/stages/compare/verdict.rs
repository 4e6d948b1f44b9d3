//! The report, assembled in the spec's order: the measurements, the verdict words and the gate,
//! the checks, the slices and repeats, then the warnings on the verdict.

use super::checks::{self, Gate, Proxy, Sizing};
use super::measure::{
    Basis, Noise, Readings, fmt_ci, fmt_delta, read_metrics, seed_counts, train_seeds,
};
use super::slices::{self, Slices};
use super::{Arms, DeltaReport, MIN_RERUNS, Options, PASS_AT_1, Sides, TrainSeeds, metric_key};
use crate::error::Result;

/// The verdict words, read off the metrics and the training seeds.
struct Verdicts {
    /// The target metric (normalised).
    target: Option<String>,
    /// Whether both arms measure it.
    target_measured: bool,
    /// The metric the gate reads: the target when measured, else pass@1.
    headline: String,
    /// The target's verdict word.
    target_verdict: Option<&'static str>,
    /// The headline's verdict word, after the training seeds.
    headline_verdict: &'static str,
}

impl Verdicts {
    /// The headline of `opts` among the measured `names`.
    fn headline(opts: &Options, names: &[String]) -> (Option<String>, bool, String) {
        let target = opts.target.as_deref().map(metric_key);
        let measured = target.as_ref().is_some_and(|t| names.contains(t));
        let headline = target
            .clone()
            .filter(|_| measured)
            .unwrap_or_else(|| PASS_AT_1.to_owned());
        (target, measured, headline)
    }

    /// The words, and the gate on them: a headline that moved the wrong way fails it, and so does
    /// a target that was not measured (the reference read only a target, so a significant pass@1
    /// drop passed without one).
    fn new(b: &Basis, r: &Readings, train: Option<&TrainSeeds>, gate: &mut Gate) -> Self {
        let (target, target_measured, headline) = Self::headline(b.opts, &b.names);
        let word_of = |m: &str| r.metrics[m].word;
        let target_verdict = target.as_ref().map(|t| {
            if target_measured {
                word_of(t)
            } else {
                "target_not_measured"
            }
        });
        let gate_word = word_of(&headline);
        let mut headline_verdict = gate_word;
        if let Some(t) = train {
            if t.unresolved && headline_verdict.starts_with("moved") {
                headline_verdict = "unresolved";
            } else if t.covers_zero && matches!(headline_verdict, "moved" | "moved_unreplicated") {
                headline_verdict = "no_change_detected";
            }
        }
        if gate_word == "moved_the_wrong_way" {
            gate.ok = false;
        }
        if target.is_some() && !target_measured {
            gate.ok = false;
            gate.warnings.push(format!(
                "the target {} is not measured on both sides (measured: {}); the gate cannot pass on a metric it never saw",
                target.as_deref().unwrap_or_default(),
                b.names.join(", ")
            ));
        }
        Self {
            target,
            target_measured,
            headline,
            target_verdict,
            headline_verdict,
        }
    }

    /// The target's comparison, when measured.
    fn target_metric<'r>(&self, r: &'r Readings) -> Option<&'r super::Metric> {
        self.target
            .as_ref()
            .filter(|_| self.target_measured)
            .map(|t| &r.metrics[t])
    }
}

/// The warnings on the verdict: the target inside its noise band, the regressions and slips, the
/// headline's note (first of all), the floors and their re-runs, and the training seeds.
fn verdict_warnings(
    b: &Basis,
    r: &Readings,
    v: &Verdicts,
    noise: &Noise,
    train: Option<&TrainSeeds>,
    gate: &mut Gate,
) {
    let warnings = &mut gate.warnings;
    if let (Some(t), Some(tm)) = (&v.target, v.target_metric(r))
        && tm.within_noise
    {
        warnings.push(format!(
            "{t}: {} is inside the eval's own re-run band ({} = {:.3}); re-running the eval moves it that much",
            fmt_delta(tm.comparison.delta),
            noise.rule,
            tm.noise_band.unwrap_or(0.0)
        ));
    }
    for m in &r.regressions {
        let c = &r.metrics[m].comparison;
        warnings.push(format!(
            "REGRESSION {m}: {} ({}), named in `must_not_regress`",
            fmt_delta(c.delta),
            fmt_ci(c.ci95)
        ));
    }
    for m in &r.slipped {
        let c = &r.metrics[m].comparison;
        let (verb, tail) = if r.metrics[m].lower_is_better {
            ("rose", " (lower is better)")
        } else {
            ("dropped", "")
        };
        warnings.push(format!(
            "{m} {verb} {} ({}){tail}",
            fmt_delta(c.delta),
            fmt_ci(c.ci95)
        ));
    }
    let head_c = &r.metrics[&v.headline].comparison;
    if !head_c.note.is_empty() {
        warnings.insert(0, format!("{}: {}", v.headline, head_c.note));
    }
    let source = noise.source;
    if source.is_none() && v.target_verdict == Some("moved_unreplicated") {
        warnings.push(
            "One eval run on each side, so this could be noise. Run each side three times (lineage.eval_run 0, 1, 2) and the report will say.".into(),
        );
    }
    let missing: Vec<&str> = b
        .names
        .iter()
        .filter(|m| source.is_some() && noise.floors[*m].is_none())
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        warnings.push(format!(
            "no re-run floor for {}: their verdicts ignore eval noise",
            missing.join(", ")
        ));
    }
    let runs = &noise.eval_runs;
    match (source, b.opts.run_std_runs) {
        (Some("given"), None) => warnings.push(
            "`run_std` was given without `run_std_runs`, so the band uses 1.96 and reads it as the eval's exact spread. If it came from re-runs, pass `run_std_runs` N (the n_runs of wai variance) so the band uses the t quantile at df = N - 1: 3 re-runs is 4.30, not 1.96.".into(),
        ),
        (Some("given"), Some(n)) if n < MIN_RERUNS => warnings.push(format!(
            "run_std comes from {n} re-runs: a difference, not a distribution; 3 or more give a sd worth reading"
        )),
        (Some("eval_run"), _) if runs.before.min(runs.after) < MIN_RERUNS => warnings.push(format!(
            "the floor comes from {} eval runs before and {} after; 3 or more a side give a sd worth reading",
            runs.before, runs.after
        )),
        _ => {}
    }
    if let Some(t) = train {
        if t.unresolved {
            warnings.push(
                "a trained arm has one training seed, so seed-to-seed variance is unknown; train 2 or more seeds per arm".into(),
            );
        } else if t.covers_zero {
            warnings.push(format!(
                "with the seed-to-seed variance added, the interval {} covers zero: the gain does not survive a re-train",
                fmt_ci(t.ci95)
            ));
        }
    }
}

/// Compares the arms.
///
/// # Errors
/// A `lower_is_better` name that is not a measured metric, or a level without a quantile.
pub fn report(arms: &Arms, opts: &Options) -> Result<DeltaReport> {
    let b = Basis::new(arms, opts)?;
    let comparisons = b.comparisons();
    let (_, _, headline) = Verdicts::headline(opts, &b.names);
    let seeds = seed_counts(arms);
    let noise = Noise::new(&b, &seeds)?;
    let replicated = noise.floor(&headline).is_some();
    let guarded: Vec<String> = opts
        .must_not_regress
        .iter()
        .map(|m| metric_key(m))
        .collect();
    let r = read_metrics(&b, &comparisons, &noise, &guarded, replicated)?;
    let mut gate = Gate {
        ok: r.regressions.is_empty(),
        ..Gate::default()
    };
    let head = &r.metrics[&headline];
    let train = train_seeds(&b, &headline, &head.comparison, &seeds);
    let v = Verdicts::new(&b, &r, train.as_ref(), &mut gate);
    let proxy_key = opts.proxy.as_deref().map(metric_key);
    let proxy = checks::proxy(proxy_key.as_deref(), &r.metrics, &headline, &mut gate);
    checks::comparability(&b, &r, &headline, &mut gate);
    let pass = &r.metrics[PASS_AT_1].comparison;
    let ceiling = checks::ceiling(&b, pass, &mut gate);
    let no_change = v.headline_verdict == "no_change_detected";
    let sizing = checks::sizing(&b, head, pass, no_change, &mut gate);
    let family_error = checks::family_error(&b, &r, &mut gate);
    let degenerate_guards = checks::degenerate_guards(&b, &guarded, &mut gate);
    verdict_warnings(&b, &r, &v, &noise, train.as_ref(), &mut gate);
    let slices = slices::slices(&b, head, &headline, &mut gate);
    let repeats = slices::repeats(&b, head, &headline, noise.source);
    let parts = Parts {
        verdicts: v,
        noise,
        replicated,
        train,
        ceiling,
        sizing,
        family_error,
        degenerate_guards,
        proxy_key,
        proxy,
        slices,
        repeats,
    };
    let mut report = assemble(&b, r, gate, parts);
    report.headline_word = super::text::headline_word(&report);
    Ok(report)
}

/// What the parts of the report found, beside the readings and the gate.
struct Parts {
    verdicts: Verdicts,
    noise: Noise,
    replicated: bool,
    train: Option<TrainSeeds>,
    ceiling: bool,
    sizing: Sizing,
    family_error: f64,
    degenerate_guards: Vec<String>,
    proxy_key: Option<String>,
    proxy: Proxy,
    slices: Slices,
    repeats: super::Repeats,
}

/// The report of the parts (its headline word still empty).
fn assemble(b: &Basis, r: Readings, gate: Gate, p: Parts) -> DeltaReport {
    let (opts, arms) = (b.opts, b.arms);
    let v = p.verdicts;
    let head = &r.metrics[&v.headline];
    let target = v.target_metric(&r).map(|m| &m.comparison);
    let pass = &r.metrics[PASS_AT_1].comparison;
    DeltaReport {
        ok: gate.ok,
        headline_word: String::new(),
        not_comparable: gate.not_comparable,
        target_delta: target.and_then(|c| c.delta),
        target_ci95: target.and_then(|c| c.ci95),
        target: v.target.clone(),
        target_verdict: v.target_verdict,
        headline_verdict: v.headline_verdict,
        n_metrics: b.names.len(),
        alpha: opts.alpha,
        level: b.level,
        family_error: p.family_error,
        n_paired_tasks: pass.n_paired,
        n_unpaired_tasks: pass.n_only_a + pass.n_only_b,
        lower_is_better: b.names.iter().filter(|m| b.lower[*m]).cloned().collect(),
        run_std: p.noise.floor(&v.headline),
        noise_band: head.noise_band,
        headline_metric: v.headline,
        improved: r.improved,
        regressions: r.regressions,
        slipped: r.slipped,
        within_noise: r.within,
        run_std_by_metric: p.noise.floors,
        run_std_source: p.noise.source,
        run_std_runs: opts.run_std_runs,
        run_std_df: p.noise.df,
        noise_rule: p.noise.rule,
        eval_runs: p.noise.eval_runs,
        replicated: p.replicated,
        train: p.train,
        ceiling: p.ceiling,
        detectable_effect: p.sizing.detectable,
        tasks_needed: p.sizing.tasks_needed,
        tasks_needed_source: p.sizing.tasks_needed_source,
        degenerate_guards: p.degenerate_guards,
        proxy: p.proxy_key,
        proxy_verdict: p.proxy.verdict,
        proxy_delta: p.proxy.delta,
        proxy_ci95: p.proxy.ci95,
        over_optimized: p.proxy.over_optimized,
        metrics: r.metrics,
        warnings: gate.warnings,
        config: Sides {
            before: arms.before.config.clone(),
            after: arms.after.config.clone(),
        },
        balanced: arms.balanced.clone(),
        by: p.slices.by,
        by_source: p.slices.by_source,
        groups: p.slices.groups,
        groups_down: p.slices.down,
        groups_weak: p.slices.weak,
        slice_min_tasks: arms
            .groups
            .as_ref()
            .map(|_| slices::slice_min_tasks(opts.alpha)),
        repeats: p.repeats,
        seed: opts.seed,
        draws: opts.draws,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{pass_arms, pass_rows};
    use super::*;

    #[test]
    fn a_planted_gain_passes_and_a_drop_fails_the_gate() {
        let (low, high) = (pass_rows(40, |_| 1), pass_rows(40, |_| 3));
        let opts = Options::default();
        let gain = report(&pass_arms(&low, &high), &opts).unwrap();
        assert!(gain.ok);
        assert_eq!(gain.headline_metric, PASS_AT_1);
        assert_eq!(gain.headline_verdict, "moved_unreplicated");
        assert_eq!(gain.improved, [PASS_AT_1]);
        assert_eq!((gain.n_paired_tasks, gain.n_unpaired_tasks), (40, 0));
        assert_eq!(gain.repeats.note, "1 run, noise unknown");
        let drop = report(&pass_arms(&high, &low), &opts).unwrap();
        assert!(!drop.ok);
        assert_eq!(drop.headline_verdict, "moved_the_wrong_way");
        assert_eq!(drop.slipped, [PASS_AT_1]);
        assert!(
            drop.headline_word.starts_with("FAIL"),
            "{}",
            drop.headline_word
        );
    }

    #[test]
    fn a_target_not_measured_fails_the_gate() {
        let rows = pass_rows(12, |i| i % 4);
        let opts = Options {
            target: Some("polite".into()),
            ..Options::default()
        };
        let r = report(&pass_arms(&rows, &rows), &opts).unwrap();
        assert!(!r.ok);
        assert_eq!(r.target.as_deref(), Some("marker:polite"));
        assert_eq!(r.target_verdict, Some("target_not_measured"));
        assert_eq!(r.headline_metric, PASS_AT_1);
        assert!(
            r.warnings
                .iter()
                .any(|w| w.starts_with("the target marker:polite is not measured"))
        );
    }

    #[test]
    fn disjoint_task_sets_are_not_comparable() {
        let before = pass_rows(10, |_| 2);
        let after: Vec<_> = pass_rows(20, |_| 2).split_off(10);
        let r = report(&pass_arms(&before, &after), &Options::default()).unwrap();
        assert!(!r.ok);
        assert_eq!(r.not_comparable, ["situations"]);
        assert_eq!(r.n_unpaired_tasks, 20);
    }
}
