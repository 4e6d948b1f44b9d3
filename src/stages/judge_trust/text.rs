//! The report for people.

use super::{Report, probes};
use crate::report::percent;

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
            let kappa = match (a.kappa, a.kappa_ci95) {
                (Some(k), Some([lo, hi])) => format!(", kappa {k:.2} (95% {lo:.2}..{hi:.2})"),
                (Some(k), None) => format!(", kappa {k:.2}"),
                (None, _) => ", kappa undefined (one gold value)".to_owned(),
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
            probe_lines(f, probed)?;
        }
        writeln!(f, "disagreements to review: {}", self.disagreements.len())?;
        for w in &self.warnings {
            writeln!(f, "! {w}")?;
        }
        Ok(())
    }
}

/// The probes' table, in probe order (the JSON map is sorted by name).
fn probe_lines(f: &mut std::fmt::Formatter<'_>, probed: &probes::Probes) -> std::fmt::Result {
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
    Ok(())
}
