//! The counts an export's report is made of, summed row by row in file order (the first row to
//! fail a gate or cut a turn is named).

use std::collections::HashSet;

use super::{RowFacts, RowMeta};

/// Sums of every row's facts, and the first row of each kind of trouble.
#[derive(Debug, Default)]
pub struct Tally {
    /// Rows read.
    pub rows: u64,
    /// Training rows written.
    pub written: u64,
    /// Training rows with a system prompt.
    pub with_system: u64,
    /// Training rows with tool schemas.
    pub with_tools: u64,
    /// Tool calls checked.
    pub calls: u64,
    /// Tool calls whose arguments do not round-trip.
    pub invalid_calls: u64,
    /// The first row with such a call.
    pub first_invalid: Option<String>,
    /// Tool outputs cut.
    pub outputs_cut: u64,
    /// Characters cut from them.
    pub chars_cut: u64,
    /// Assistant turns trained.
    pub trained: u64,
    /// Assistant turns masked.
    pub masked: u64,
    /// Assistant turns TRL would train.
    pub trl_trained: u64,
    /// Rows with turns cut after their last assistant turn.
    pub trailing_rows: u64,
    /// The turns cut.
    pub trailing_turns: u64,
    /// The first row with turns cut.
    pub first_trailing: Option<String>,
    /// The first row with nothing to train.
    pub first_no_completion: Option<String>,
    /// Rows with a privileged block (checked for leaks).
    pub privileged_checked: u64,
    /// Rows that leak it.
    pub leaks: u64,
    /// The first leaking row and (the start of) what it quotes.
    pub first_leak: Option<(String, String)>,
    /// Rows that ended on the token cap.
    pub truncated: u64,
    /// Rows with a reward of 0.5 or more.
    pub pass: u64,
    /// Rows with a reward below 0.5.
    pub fail: u64,
    /// Rows without a reward.
    pub ungraded: u64,
    /// Rows whose reward came from an eval.
    pub eval_sourced: u64,
    /// Rows that call tools.
    pub calls_tools: u64,
    /// Rows made under a system prompt.
    pub has_policy_sha: u64,
    /// Rows with nothing to train (not written).
    pub no_completion: u64,
    /// The group ids written.
    pub group_ids: HashSet<String>,
}

impl Tally {
    /// Adds one row.
    pub fn add(&mut self, f: &RowFacts, m: RowMeta) {
        let (s, written) = (&m.side, m.written);
        self.rows += 1;
        self.written += written;
        self.with_system += u64::from(s.with_system) * written;
        self.with_tools += u64::from(s.with_tools) * written;
        self.calls += f.calls;
        self.invalid_calls += f.invalid_calls;
        if f.invalid_calls > 0 && self.first_invalid.is_none() {
            self.first_invalid = Some(m.where_.clone());
        }
        self.outputs_cut += f.outputs_cut;
        self.chars_cut += f.chars_cut;
        self.trained += f.trained;
        self.masked += f.masked;
        self.trl_trained += f.trl_trained;
        if f.trailing_cut > 0 {
            self.trailing_rows += 1;
            self.trailing_turns += f.trailing_cut;
            if self.first_trailing.is_none() {
                self.first_trailing = Some(m.where_.clone());
            }
        }
        if f.no_completion && self.first_no_completion.is_none() {
            self.first_no_completion = Some(m.where_.clone());
        }
        self.privileged_checked += u64::from(f.privileged);
        if let Some(l) = &f.leak {
            self.leaks += 1;
            if self.first_leak.is_none() {
                self.first_leak = Some((m.where_.clone(), l.chars().take(80).collect()));
            }
        }
        self.truncated += u64::from(f.truncated);
        match s.reward {
            Some(r) if r >= 0.5 => self.pass += 1,
            Some(_) => self.fail += 1,
            None => self.ungraded += 1,
        }
        self.eval_sourced += u64::from(s.eval_sourced);
        self.calls_tools += u64::from(s.calls_tools);
        self.has_policy_sha += u64::from(s.has_policy_sha);
        self.no_completion += u64::from(f.no_completion);
        if let Some(g) = m.side.group {
            self.group_ids.insert(g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::export::Side;

    #[test]
    fn the_first_row_of_each_trouble_is_named() {
        let mut t = Tally::default();
        let meta = |where_: &str, reward: Option<f64>| RowMeta {
            written: 1,
            side: Side {
                reward,
                group: Some("g1".into()),
                ..Side::default()
            },
            where_: where_.into(),
        };
        t.add(&RowFacts::default(), meta("", Some(1.0)));
        let bad = RowFacts {
            calls: 2,
            invalid_calls: 1,
            trailing_cut: 2,
            leak: Some("x".repeat(100)),
            privileged: true,
            ..RowFacts::default()
        };
        t.add(&bad, meta("r2", Some(0.0)));
        t.add(&bad, meta("r3", None));
        assert_eq!((t.rows, t.written, t.calls, t.invalid_calls), (3, 3, 4, 2));
        assert_eq!(t.first_invalid.as_deref(), Some("r2"));
        assert_eq!((t.trailing_rows, t.trailing_turns), (2, 4));
        assert_eq!(
            t.first_leak.as_ref().map(|l| (l.0.as_str(), l.1.len())),
            Some(("r2", 80))
        );
        assert_eq!((t.pass, t.fail, t.ungraded), (1, 1, 1));
        assert_eq!(t.group_ids.len(), 1);
    }
}
