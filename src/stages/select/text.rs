//! The selection report for people.

use super::Report;

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} selection: kept {} of {} rows",
            self.mode, self.n_selected, self.n
        )?;
        if self.mode == "rl" {
            writeln!(
                f,
                "  band {:.0}%..{:.0}% pass rate: {} asks dropped ({} too easy, {} too hard)",
                self.band.0 * 100.0,
                self.band.1 * 100.0,
                self.band_dropped.values().sum::<usize>(),
                self.band_dropped.get("too_easy").copied().unwrap_or(0),
                self.band_dropped.get("too_hard").copied().unwrap_or(0)
            )?;
            writeln!(
                f,
                "  unanimous groups dropped: {} ({} collapsed by duplicates); duplicates dropped: {}; truncated drop: {}",
                self.unanimous_groups_dropped,
                self.collapsed_groups_dropped,
                self.duplicates_dropped,
                self.truncated.get("dropped").copied().unwrap_or(0)
            )?;
            let gated: usize = self.gates.values().sum();
            if gated > 0 {
                let g: Vec<String> = self
                    .gates
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect();
                writeln!(f, "  row gates: {}", g.join(", "))?;
            }
            writeln!(
                f,
                "  privileged leaks dropped: {}",
                self.privileged_leaks_dropped
            )?;
            writeln!(f, "  groups kept: {}", self.groups_selected)?;
        } else {
            writeln!(
                f,
                "  eligible {} (reward >= {}), junk {}, not passing {}",
                self.n_eligible, self.min_reward, self.n_junk, self.n_not_pass
            )?;
            writeln!(
                f,
                "  privileged leaks dropped: {}",
                self.privileged_leaks_dropped
            )?;
            writeln!(
                f,
                "  distinct behaviors: {}, covered: {}",
                self.behaviors.0, self.behaviors.1
            )?;
        }
        for w in &self.warnings {
            writeln!(f, "  warning: {w}")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for super::Streamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.report.to_string().trim_end())?;
        if let Some(scan) = &self.hack_scan {
            write!(
                f,
                "\n  hack scan: {} (wai hack-scan {} for the ranking)",
                scan.regime.replace('_', " "),
                self.output
            )?;
        } else if let Some(e) = &self.scan_error {
            write!(f, "\n  hack scan: did not run ({e})")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for super::StreamedPairs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.report.to_string().trim_end())?;
        if let Some(p) = &self.pairwise {
            write!(f, "\n{}", p.to_string().trim_end())?;
        }
        Ok(())
    }
}
