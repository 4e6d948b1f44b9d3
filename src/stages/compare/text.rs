//! The printed comparison: the headline word first (after the target line), then the lines that
//! qualify it, one line per metric, the slice table and the warnings (measure spec §4.9).

use std::fmt::{self, Write as _};

use super::{DeltaReport, Group, Metric};
use crate::stats::paired::Direction;

/// The first word a person reads: PASS, NO DIFFERENCE, INCONCLUSIVE (...), FAIL, NOT
/// COMPARABLE (...).
pub(super) fn headline_word(r: &DeltaReport) -> String {
    if !r.not_comparable.is_empty() {
        let prefix = if r.ok { "" } else { "FAIL: " };
        return format!("{prefix}NOT COMPARABLE ({})", r.not_comparable.join(", "));
    }
    if r.target_verdict == Some("target_not_measured") {
        return "FAIL: TARGET NOT MEASURED".into();
    }
    if !r.ok {
        return "FAIL".into();
    }
    match r.headline_verdict {
        "moved_unreplicated" => {
            let why = match (r.eval_runs.before <= 1, r.eval_runs.after <= 1) {
                (true, true) => "1 eval run a side",
                (true, false) => "1 eval run before",
                (false, true) => "1 eval run after",
                (false, false) => "no re-run floor",
            };
            format!("INCONCLUSIVE ({why}, rerun to confirm)")
        }
        "within_eval_noise" => "NO DIFFERENCE (within eval noise)".into(),
        "no_change_detected" => "NO DIFFERENCE".into(),
        "insufficient_data" => "INSUFFICIENT DATA".into(),
        "moved_the_wrong_way" => "FAIL".into(),
        "unresolved" => "UNRESOLVED (one training seed per arm)".into(),
        _ => "PASS".into(),
    }
}

fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |v| format!("{v:.3}"))
}

fn signed(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |v| format!("{v:+.3}"))
}

fn interval(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(
        || "no interval".into(),
        |[lo, hi]| format!("{lo:+.3}..{hi:+.3}"),
    )
}

/// The tag of a metric line: `up`/`DOWN` (`UP`/`down` where lower is better), `flat`, `n/a`,
/// `noise`.
fn tag(verdict: Direction, lower: bool, within_noise: bool) -> &'static str {
    if within_noise {
        return "noise";
    }
    match (verdict, lower) {
        (Direction::BBetter, false) => "up",
        (Direction::BBetter, true) => "UP",
        (Direction::ABetter, false) => "DOWN",
        (Direction::ABetter, true) => "down",
        (Direction::NoDifference, _) => "flat",
        (Direction::Insufficient, _) => "n/a",
    }
}

fn metric_line(name: &str, m: &Metric) -> String {
    let c = &m.comparison;
    let mut line = format!(
        "  {name:<28} {} -> {}  {} [{}]  {}  ({} {})",
        num(c.mean_a),
        num(c.mean_b),
        signed(c.delta),
        interval(c.ci95),
        tag(c.verdict, m.lower_is_better, m.within_noise),
        c.n_used,
        if c.paired { "paired" } else { "unpaired" }
    );
    if let Some(b) = m.noise_band {
        let _ = write!(line, "  noise<{b:.3}");
    } else if let Some(n) = m.noise_note {
        let _ = write!(line, "  {n}");
    }
    if m.lower_is_better {
        line.push_str("  lower is better");
    }
    line
}

fn group_line(name: &str, g: &Group) -> String {
    let c = &g.comparison;
    let mut line = format!(
        "  {name:<28} {} -> {}  {} [{}]  {}  (n={} tasks, {}/{} rows)",
        num(c.mean_a),
        num(c.mean_b),
        signed(c.delta),
        interval(c.ci95),
        tag(c.verdict, g.lower_is_better, false),
        c.n_paired,
        g.rows_a,
        g.rows_b
    );
    if g.low_n {
        line.push_str("  low n");
    }
    if g.weak {
        let _ = write!(line, "  WEAK ({})", g.weak_reasons.join(", "));
    }
    line
}

impl DeltaReport {
    /// The target, proxy, headline word and noise lines.
    fn fmt_head(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = &self.target {
            match (self.metrics.get(t), self.target_verdict) {
                (Some(m), Some(v))
                    if m.comparison.delta.is_some() && m.comparison.ci95.is_some() =>
                {
                    writeln!(
                        f,
                        "{t}: {v} ({}, {:.0}% {}, {} paired tasks)",
                        signed(m.comparison.delta),
                        self.level * 100.0,
                        interval(m.comparison.ci95),
                        m.comparison.n_paired
                    )?;
                }
                (_, v) => writeln!(f, "{t}: {}", v.unwrap_or("n/a"))?,
            }
        }
        if let (Some(p), Some(v)) = (&self.proxy, self.proxy_verdict) {
            writeln!(
                f,
                "proxy {p}: {v} ({}, {})",
                signed(self.proxy_delta),
                interval(self.proxy_ci95)
            )?;
        }
        writeln!(f, "{}", self.headline_word)?;
        if let (Some(rs), Some(band)) = (self.run_std, self.noise_band) {
            let src = match (self.run_std_source, self.run_std_runs) {
                (Some("eval_run"), _) => format!(
                    "{} eval runs before, {} after",
                    self.eval_runs.before, self.eval_runs.after
                ),
                (_, Some(r)) => format!("run_std given from {r} re-runs"),
                _ => "run_std given".into(),
            };
            writeln!(
                f,
                "eval noise: run_std {rs:.3}, a delta under {band:.3} is noise ({}; {src})",
                self.noise_rule
            )?;
        }
        Ok(())
    }

    /// The repeats line: the headline per eval run, or how to get one.
    fn fmt_repeats(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rep = &self.repeats;
        if let Some(agree) = rep.agree {
            let mut line = format!(
                "repeated: {agree}/{} runs agree on {} (each run alone: {}; pooled: {})",
                rep.n,
                rep.metric,
                rep.run_tags.join(", "),
                rep.pooled_tag
            );
            let mut ranges = Vec::new();
            for (side, spread, range, n) in [
                (
                    "before",
                    rep.spread.before,
                    rep.range.before,
                    rep.n_runs.before,
                ),
                ("after", rep.spread.after, rep.range.after, rep.n_runs.after),
            ] {
                if let (Some(s), Some([lo, hi])) = (spread, range) {
                    ranges.push(format!("{s:.3} {side} ({n} runs, {lo:.3}..{hi:.3})"));
                }
            }
            if !ranges.is_empty() {
                let _ = write!(line, "; run-to-run range {}", ranges.join(", "));
            }
            writeln!(f, "{line}")?;
        } else {
            let pooled = if self.target.is_none() {
                let m = &self.metrics[&self.headline_metric].comparison;
                format!(
                    "{} {}, 95% {}; ",
                    self.headline_metric,
                    signed(m.delta),
                    interval(m.ci95)
                )
            } else {
                String::new()
            };
            writeln!(
                f,
                "repeated: {} ({pooled}run each side 3 times, lineage.eval_run 0, 1, 2, to see whether the verdict repeats)",
                rep.note
            )?;
        }
        Ok(())
    }

    /// The training seeds, family error, ceiling and direction lines.
    fn fmt_notes(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = &self.train {
            if t.unresolved {
                writeln!(
                    f,
                    "training seeds: {} before, {} after; UNRESOLVED (a trained arm needs 2 or more seeds)",
                    t.seeds.before, t.seeds.after
                )?;
            } else {
                writeln!(
                    f,
                    "training seeds: {} before, {} after; delta {}, 95% {} with seed variance ({})",
                    t.seeds.before,
                    t.seeds.after,
                    signed(t.delta),
                    interval(t.ci95),
                    t.rule
                )?;
            }
        }
        if self.n_metrics >= 2 {
            writeln!(
                f,
                "family error: {} metrics at {:.0}%, up to {:.0}% chance that one clears zero on luck alone (upper bound, independent metrics)",
                self.n_metrics,
                self.level * 100.0,
                self.family_error * 100.0
            )?;
        }
        if self.ceiling {
            writeln!(
                f,
                "CEILING: the before run already passes most tasks; use harder situations"
            )?;
        }
        if !self.lower_is_better.is_empty() {
            writeln!(
                f,
                "lower is better: {} (a drop is the win; the delta and interval printed are still the raw change)",
                self.lower_is_better.join(", ")
            )?;
        }
        Ok(())
    }

    /// The slice table, weakest first.
    fn fmt_slices(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(by), Some(groups)) = (&self.by, &self.groups) {
            writeln!(f, "by {by}: {} slices", groups.len())?;
            writeln!(
                f,
                "  (WEAK = after under 0.50 or no gain the 95% interval supports; low n = under {} paired tasks, too few for any delta to be read)",
                self.slice_min_tasks.unwrap_or(0)
            )?;
            let mut rows: Vec<(&String, &Group)> = groups.iter().collect();
            rows.sort_by(|(na, a), (nb, b)| {
                let key = |g: &Group| {
                    let sign = if g.lower_is_better { -1.0 } else { 1.0 };
                    sign * g.comparison.mean_b.unwrap_or(0.0)
                };
                b.weak
                    .cmp(&a.weak)
                    .then(key(a).total_cmp(&key(b)))
                    .then(
                        a.comparison
                            .delta
                            .unwrap_or(0.0)
                            .total_cmp(&b.comparison.delta.unwrap_or(0.0)),
                    )
                    .then(na.cmp(nb))
            });
            for (name, g) in rows {
                writeln!(f, "{}", group_line(name, g))?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for DeltaReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_head(f)?;
        self.fmt_repeats(f)?;
        self.fmt_notes(f)?;
        // pass@1 first, then the markers by name.
        let mut names: Vec<&String> = self.metrics.keys().collect();
        names.sort_by_key(|n| (n.as_str() != super::PASS_AT_1, n.as_str()));
        for name in names {
            writeln!(f, "{}", metric_line(name, &self.metrics[name]))?;
        }
        if let Some(b) = &self.balanced {
            writeln!(
                f,
                "balanced: {} rows dropped before and {} after, {} tasks trimmed to the same rollouts a side",
                b.rows_dropped.before, b.rows_dropped.after, b.tasks_trimmed
            )?;
        }
        self.fmt_slices(f)?;
        for w in &self.warnings {
            writeln!(f, "! {w}")?;
        }
        Ok(())
    }
}
