//! The scan's report for people.

use std::fmt;

use super::Report;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |x: f64| format!("{:.0}%", x * 100.0);
        writeln!(f, "{}", self.regime)?;
        writeln!(
            f,
            "{} graded rollouts, {} tasks, {} per task; mixed {}, all-pass {}, all-fail {}, \
             capacity {:.2}",
            self.n_graded,
            self.n_groups,
            self.rollouts_per_group,
            pct(self.support.mixed),
            pct(self.support.sat),
            pct(self.support.dead),
            self.support.capacity
        )?;
        if let Some(tau) = self.tau {
            writeln!(
                f,
                "noise floor tau {tau:.3} ({} of {} features above, {} within-task shuffles)",
                self.n_above_floor, self.n_features, self.n_perm
            )?;
            writeln!(
                f,
                "   {:<43}{:>8}{:>8}{:>9}",
                "feature", "within", "pooled", "n"
            )?;
            for x in self.features.iter().take(12) {
                let name: String = x.name.chars().take(42).collect();
                writeln!(
                    f,
                    "{}{} {name:<43}{:>+8.3}{:>+8.3}{:>9}",
                    if x.above_floor { '*' } else { ' ' },
                    if x.endorsed { 'e' } else { ' ' },
                    x.rho,
                    x.pooled,
                    x.n_obs
                )?;
            }
            // Other names of the features shown (columns with the same entries).
            for x in self
                .features
                .iter()
                .take(12)
                .filter(|x| !x.aliases.is_empty())
            {
                let shown: Vec<String> = x
                    .aliases
                    .iter()
                    .take(4)
                    .map(|a| format!("\"{a}\""))
                    .collect();
                let more = x.aliases.len().saturating_sub(shown.len());
                writeln!(
                    f,
                    "   \"{}\" is also {}{}",
                    x.name,
                    shown.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )?;
            }
        }
        if let Some(i) = self.integrity {
            writeln!(f, "integrity {i:.2} (share of above-floor signal endorsed)")?;
        }
        for w in &self.warnings {
            writeln!(f, "! {w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::stages::hack_scan::{Entry, Regime, Report};
    use crate::stats::within::Support;

    #[test]
    fn the_report_shows_the_regime_the_ranking_and_the_warnings() {
        let report = Report {
            regime: Regime::RewardHack,
            n_rows: 8,
            n_graded: 8,
            n_groups: 2,
            n_groups_multi: 2,
            rollouts_per_group: 4,
            effective_rollouts: 8,
            support: Support {
                sat: 0.0,
                dead: 0.5,
                mixed: 0.5,
                capacity: 0.25,
            },
            tau: Some(0.3),
            n_perm: 100,
            n_features: 1,
            n_above_floor: 1,
            features: vec![Entry {
                name: "contains:sorry".into(),
                aliases: vec!["n:words".into()],
                rho: 0.8,
                pooled: 0.5,
                n_obs: 4,
                above_floor: true,
                endorsed: false,
            }],
            top_feature: Some("contains:sorry".into()),
            rho_max: 0.8,
            endorsed: vec!["tool:".into()],
            endorsed_matched: 0,
            endorsed_on_top: Some(false),
            integrity: Some(0.0),
            inverted: Vec::new(),
            continuous_reward: false,
            degenerate: false,
            collinear: Vec::new(),
            distinct_per_ask: 4,
            warnings: vec!["look here".into()],
        };
        let text = report.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "REWARD HACK");
        assert_eq!(
            lines[1],
            "8 graded rollouts, 2 tasks, 4 per task; mixed 50%, all-pass 0%, all-fail 50%, capacity 0.25"
        );
        assert!(lines[2].starts_with("noise floor tau 0.300 (1 of 1 features above"));
        assert!(lines[4].starts_with("*  contains:sorry"), "{}", lines[4]);
        assert_eq!(lines[5], "   \"contains:sorry\" is also \"n:words\"");
        assert_eq!(
            lines[6],
            "integrity 0.00 (share of above-floor signal endorsed)"
        );
        assert_eq!(lines[7], "! look here");
    }
}
