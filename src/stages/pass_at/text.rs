//! The printed line, exactly as the reference prints it (measure spec §2.6).

use std::fmt::Write as _;

use super::PassAt;
use crate::report::percent;

fn number(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.2}"))
}

fn interval(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(String::new, |[lo, hi]| format!(" [{lo:.2}..{hi:.2}]"))
}

impl std::fmt::Display for PassAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = self.k;
        let mut tail = String::new();
        if let Some(t) = self.config.truncated_share.filter(|t| *t != 0.0) {
            write!(tail, "; {} of rows cut by the token cap", percent(t))?;
        }
        if let Some(a) = self.config.answered_share.filter(|a| *a < 1.0) {
            write!(tail, "; {} of rows have no spoken reply", percent(1.0 - a))?;
        }
        if !self.note.is_empty() {
            tail.push_str("; ");
            tail.push_str(&self.note);
        }
        write!(
            f,
            "pass@1 {}{} | pass^{k} (pass_pow_k) {}{} | pass@{k} {}{} | headroom {} ({} groups, k={k}{tail})",
            number(self.pass_at_1),
            interval(self.ci95),
            number(self.pass_pow_k),
            interval(self.pass_pow_k_ci95),
            number(self.pass_at_k),
            interval(self.pass_at_k_ci95),
            number(self.headroom),
            self.n_groups,
        )
    }
}
