//! `coverage_gap`: which policy rules and tools a set of test asks reaches, per axis, and what
//! the asks cannot say (with graded rows: which rules no row exercised).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, UInt64Type};
use datafusion::prelude::DataFrame;
use rayon::prelude::*;
use serde::Serialize;

use super::words::{ask_names, content_words, cut, is_branch, mentions, stance};
use crate::error::Result;
use crate::stages::simulate::grid::Axes;
use crate::stages::simulate::policy;
use crate::stages::simulate::tools::Tool;
use crate::stages::{Session, Stage};

/// Options of the stage.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Match only the first N rules.
    pub rule_cap: Option<usize>,
}

impl crate::stages::Options for Options {}

/// What the stage reads.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The test asks.
    pub asks: Vec<String>,
    /// The agent's tools.
    pub tools: Vec<Tool>,
    /// The policy (system prompt) text; empty when there is none.
    pub policy: String,
    /// Graded rows of a run, to count rows per rule (`dims['rule']`).
    pub rows: Option<DataFrame>,
}

/// The coverage-gap stage: word matching over the asks, plus a group-by over the rows.
pub struct CoverageGapStage;

impl Stage for CoverageGapStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = CoverageGap;
    const NAME: &'static str = "coverage-gap";

    async fn run(session: &Session, inputs: Inputs, options: &Options) -> Result<CoverageGap> {
        let rows = match inputs.rows {
            Some(rows) => Some(rows_per_rule(session, rows).await?),
            None => None,
        };
        Ok(coverage_gap(
            &inputs.asks,
            &inputs.tools,
            &inputs.policy,
            options.rule_cap,
            rows,
        ))
    }
}

/// One ask's reach.
#[derive(Debug, Clone, Serialize)]
pub struct AskReach {
    /// The ask.
    pub ask: String,
    /// Tools it names.
    pub tools: Vec<String>,
    /// Rules it reaches (indices into `rules`).
    pub rules: Vec<usize>,
    /// Its stance.
    pub stance: &'static str,
}

/// One axis: how often each value was reached, and the values never reached.
#[derive(Debug, Clone, Serialize)]
pub struct AxisCounts {
    /// Value → asks.
    pub counts: BTreeMap<String, u64>,
    /// Values no ask reached.
    pub untouched: Vec<String>,
}

/// Rows of graded runs per rule (`--rows`).
#[derive(Debug, Clone, Serialize)]
pub struct RowsPerRule {
    /// Rule → rows that ran under it.
    pub rows_per_rule: BTreeMap<String, u64>,
    /// Rules with no row.
    pub rules_with_no_rows: Vec<String>,
}

/// What `wai coverage-gap` finds.
#[derive(Debug, Clone, Serialize)]
pub struct CoverageGap {
    /// Asks read (blank ones dropped).
    pub n_asks: usize,
    /// The rules matched against.
    pub rules: Vec<String>,
    /// Rules in the policy.
    pub n_rules_total: usize,
    /// Rules past the cap.
    pub rules_truncated: usize,
    /// The rule cap.
    pub rule_cap: usize,
    /// Per axis.
    pub axes: BTreeMap<String, AxisCounts>,
    /// Rules no ask reaches.
    pub untested_rules: Vec<String>,
    /// Declared tools no ask names.
    pub untested_tools: Vec<String>,
    /// Asks per stance.
    pub stances: BTreeMap<String, u64>,
    /// Asks that are not ordinary.
    pub pressure_asks: u64,
    /// Every ask appears once.
    pub single_shot: bool,
    /// Tools covered, of the declared tools.
    pub tools_covered: usize,
    /// Declared tools.
    pub n_tools: usize,
    /// Per ask (the first 1,000 in `--json`).
    pub per_ask: Vec<AskReach>,
    /// With `--rows`: rows per rule.
    pub rows: Option<RowsPerRule>,
    /// What to do about it.
    pub notes: Vec<String>,
    /// One line.
    pub summary: String,
}

/// Which rules and tools `asks` reach. `rows_per_rule` holds rule → rows of graded runs, when
/// given.
pub fn coverage_gap(
    asks: &[String],
    tools: &[Tool],
    policy_text: &str,
    rule_cap: Option<usize>,
    rows_per_rule: Option<BTreeMap<String, u64>>,
) -> CoverageGap {
    let (all, total) = policy::rules(policy_text, usize::MAX);
    let cap = rule_cap.unwrap_or(usize::MAX);
    let rules: Vec<String> = all.iter().take(cap).cloned().collect();
    let asks: Vec<&str> = asks
        .iter()
        .map(|a| a.trim())
        .filter(|a| !a.is_empty())
        .collect();
    let per_ask = reach(&asks, tools, &rules);
    let (axes, stances) = axis_counts(tools, &rules, &per_ask);
    let mut reached = vec![false; rules.len()];
    for r in &per_ask {
        for &i in &r.rules {
            reached[i] = true;
        }
    }
    let untested_rules: Vec<String> = rules
        .iter()
        .zip(&reached)
        .filter(|(_, r)| !**r)
        .map(|(x, _)| x.clone())
        .collect();
    let named: HashSet<&str> = per_ask
        .iter()
        .flat_map(|r| r.tools.iter().map(String::as_str))
        .collect();
    let untested_tools: Vec<String> = tools
        .iter()
        .filter(|t| !named.contains(t.name.as_str()))
        .map(|t| t.name.clone())
        .collect();
    let mut gap = CoverageGap {
        n_asks: per_ask.len(),
        n_rules_total: total,
        rules_truncated: total - rules.len(),
        rule_cap: rules.len(),
        rules,
        axes,
        untested_rules,
        tools_covered: tools.len() - untested_tools.len(),
        untested_tools,
        stances,
        pressure_asks: per_ask.iter().filter(|r| r.stance != "ordinary").count() as u64,
        single_shot: single_shot(&asks),
        n_tools: tools.len(),
        per_ask,
        rows: None,
        notes: Vec::new(),
        summary: String::new(),
    };
    gap.notes = notes(&gap);
    gap.rows = rows_per_rule.map(|counts| {
        let no_rows: Vec<String> = gap
            .rules
            .iter()
            .filter(|r| counts.get(*r).copied().unwrap_or(0) == 0)
            .cloned()
            .collect();
        if !no_rows.is_empty() {
            gap.notes.push(format!(
                "{} rule{} no row of the run exercised: the rows say what the asks' words cannot; simulate them (wai simulate covers every rule of the grid)",
                no_rows.len(),
                if no_rows.len() == 1 { "" } else { "s" }
            ));
        }
        RowsPerRule {
            rows_per_rule: counts,
            rules_with_no_rows: no_rows,
        }
    });
    gap.summary = summary(&gap);
    gap
}

/// Each ask's reach: the tools it names, and the rules it reaches (a branch by two shared
/// words, a rule that mentions tools by naming one of them, any other by one shared word).
fn reach(asks: &[&str], tools: &[Tool], rules: &[String]) -> Vec<AskReach> {
    // Per rule, once: its words, whether it is a branch, the tools it mentions.
    let rule_words: Vec<HashSet<String>> = rules.iter().map(|r| content_words(r)).collect();
    let branch: Vec<bool> = rules.iter().map(|r| is_branch(r)).collect();
    let rule_tools: Vec<Vec<usize>> = rules
        .iter()
        .map(|r| {
            (0..tools.len())
                .filter(|&t| mentions(&tools[t].name, r))
                .collect()
        })
        .collect();
    asks.par_iter()
        .map(|ask| {
            let words = content_words(ask);
            let hit: Vec<usize> = (0..tools.len())
                .filter(|&t| ask_names(&tools[t].name, ask))
                .collect();
            let reached: Vec<usize> = (0..rules.len())
                .filter(|&r| {
                    let shared = rule_words[r].iter().filter(|w| words.contains(*w)).count();
                    if branch[r] {
                        shared >= 2
                    } else if !rule_tools[r].is_empty() {
                        rule_tools[r].iter().any(|t| hit.contains(t))
                    } else {
                        shared >= 1
                    }
                })
                .collect();
            AskReach {
                ask: (*ask).to_owned(),
                tools: hit.iter().map(|&t| tools[t].name.clone()).collect(),
                rules: reached,
                stance: stance(ask),
            }
        })
        .collect()
}

/// How often the asks reach each value of each axis, and the asks per stance.
fn axis_counts(
    tools: &[Tool],
    rules: &[String],
    per_ask: &[AskReach],
) -> (BTreeMap<String, AxisCounts>, BTreeMap<String, u64>) {
    let mut axes: BTreeMap<String, AxisCounts> = BTreeMap::new();
    for (axis, values) in &Axes::build(tools, rules).axes {
        axes.insert(
            axis.clone(),
            AxisCounts {
                counts: values.iter().map(|v| (v.clone(), 0)).collect(),
                untouched: Vec::new(),
            },
        );
    }
    let bump = |axes: &mut BTreeMap<String, AxisCounts>, axis: &str, value: &str| {
        if let Some(a) = axes.get_mut(axis) {
            *a.counts.entry(value.to_owned()).or_insert(0) += 1;
        }
    };
    let mut stances: BTreeMap<String, u64> = BTreeMap::new();
    for r in per_ask {
        if r.tools.is_empty() {
            bump(&mut axes, "tool", "unrelated");
        }
        for t in &r.tools {
            bump(&mut axes, "tool", t);
        }
        if r.tools.len() > 1 {
            bump(&mut axes, "tool", "multi_tool");
        }
        for &i in &r.rules {
            bump(&mut axes, "rule", &rules[i]);
        }
        bump(&mut axes, "stance", r.stance);
        bump(&mut axes, "history", "fresh");
        *stances.entry(r.stance.to_owned()).or_insert(0) += 1;
    }
    for a in axes.values_mut() {
        a.untouched = a
            .counts
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(v, _)| v.clone())
            .collect();
    }
    (axes, stances)
}

/// Whether every ask appears once (after folding case and spaces).
fn single_shot(asks: &[&str]) -> bool {
    let mut seen = HashSet::new();
    !asks.is_empty()
        && asks.iter().all(|a| {
            seen.insert(
                a.split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_lowercase(),
            )
        })
}

/// What to do about the gaps.
fn notes(gap: &CoverageGap) -> Vec<String> {
    let (total, rules) = (gap.n_rules_total, gap.rules.len());
    let mut notes = Vec::new();
    if total > rules {
        notes.push(format!("the policy has {total} clauses and {rules} are matched (`rule_cap`); the other {} are not checked", total - rules));
    }
    if !gap.untested_rules.is_empty() {
        notes.push(format!(
            "{} policy rule{} no ask reaches: write one ask per rule, or let the simulator write them (`simulate` with the asks as `seeds` covers the rule axis)",
            gap.untested_rules.len(),
            if gap.untested_rules.len() == 1 { "" } else { "s" }
        ));
    }
    notes.push("world_state and tool_condition cannot be read from an ask: a prompt never says the record is missing or the tool timed out, so every ask sits on one point of those two axes. Run the asks through `simulate` with the asks as `seeds` (and `tools`, `policy`) to vary them, or add a fixture case per branch".into());
    notes.push("rules are matched on the words an ask shares with the rule, so a branch only the fixture data selects (an amount, a date) reads as untested even when an ask lands on it: confirm with `rows` from a run".into());
    if gap.single_shot {
        notes.push("every ask appears once: one rollout cannot tell a flake from a failure. Roll each ask k times (`simulate` with a fixed `repeat_policy` of K `repeats`) and read pass^k".into());
    }
    if gap.pressure_asks == 0 && gap.n_asks > 0 {
        notes.push("no ask is hurried, adversarial or a retry: the suite tests the agent on a good day only. Add pressure asks, or let the stance axis write them".into());
    }
    notes
}

/// The one-line summary.
fn summary(gap: &CoverageGap) -> String {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let (total, rules) = (gap.n_rules_total, gap.rules.len());
    let covered = rules - gap.untested_rules.len();
    let mut summary = vec![format!(
        "{} cover{} {covered} of {}{} and {} of {}",
        plural(gap.n_asks, "ask", "asks"),
        if gap.n_asks == 1 { "s" } else { "" },
        plural(rules, "policy rule", "policy rules"),
        if total > rules {
            format!(" (of {total} in the prompt)")
        } else {
            String::new()
        },
        gap.tools_covered,
        plural(gap.n_tools, "tool", "tools")
    )];
    if !gap.untested_rules.is_empty() {
        let mut s = format!(
            "untested: {}",
            gap.untested_rules
                .iter()
                .take(3)
                .map(|r| cut(r, 62))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if gap.untested_rules.len() > 3 {
            let _ = write!(s, ", and {} more", gap.untested_rules.len() - 3);
        }
        summary.push(s);
    }
    if !gap.untested_tools.is_empty() {
        summary.push(format!("no ask reaches {}", gap.untested_tools.join(", ")));
    }
    if gap.pressure_asks == 0 && gap.n_asks > 0 {
        summary.push("no ask puts the agent under pressure".into());
    }
    if gap.single_shot {
        summary.push("every ask runs once".into());
    }
    summary.join("; ")
}

/// Rows per rule of `rows` (`dims['rule']`), in a scope of `session`.
///
/// # Errors
/// The rows have no `dims` map, or the query failed.
pub async fn rows_per_rule(session: &Session, rows: DataFrame) -> Result<BTreeMap<String, u64>> {
    let scope = session.scope_with(&[("rows", rows)])?;
    let batches = scope
        .sql("SELECT dims['rule'] AS rule, count(*) AS n FROM rows WHERE dims['rule'] IS NOT NULL GROUP BY 1")
        .await?
        .collect()
        .await?;
    let mut counts = BTreeMap::new();
    for b in &batches {
        let rules = cast(b.column(0), &DataType::Utf8)?;
        let rules = rules.as_string::<i32>();
        let n = cast(b.column(1), &DataType::UInt64)?;
        let n = n.as_primitive::<UInt64Type>();
        for i in 0..b.num_rows() {
            if rules.is_valid(i) {
                counts.insert(rules.value(i).to_owned(), n.value(i));
            }
        }
    }
    Ok(counts)
}

impl std::fmt::Display for CoverageGap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.summary)?;
        writeln!(f)?;
        writeln!(
            f,
            "{:<21} {}{}",
            "asks",
            self.n_asks,
            if self.single_shot {
                "  (each one once)"
            } else {
                ""
            }
        )?;
        writeln!(
            f,
            "{:<21} {} of {}",
            "policy rules covered",
            self.rules.len() - self.untested_rules.len(),
            self.rules.len()
        )?;
        writeln!(
            f,
            "{:<21} {} of {}",
            "tools covered", self.tools_covered, self.n_tools
        )?;
        let stances: Vec<String> = self
            .stances
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        writeln!(f, "{:<21} {}", "stance", stances.join(", "))?;
        if !self.untested_rules.is_empty() {
            writeln!(f, "untested rules")?;
            for r in &self.untested_rules {
                writeln!(f, "  - {}", cut(r, 72))?;
            }
        }
        if !self.untested_tools.is_empty() {
            writeln!(
                f,
                "{:<21} {}",
                "untested tools",
                self.untested_tools.join(", ")
            )?;
        }
        if let Some(rows) = &self.rows {
            writeln!(f, "rows per rule (from `rows`)")?;
            for r in &self.rules {
                writeln!(
                    f,
                    "  {:>6}  {}",
                    rows.rows_per_rule.get(r).copied().unwrap_or(0),
                    cut(r, 72)
                )?;
            }
        }
        for n in &self.notes {
            writeln!(f, "! {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::coverage::words::tests::{POLICY, toy};

    #[test]
    fn the_toy_seeds_cover_three_of_five_rules_as_the_reference_reads_them() {
        let seeds: Vec<String> = [
            "I want a refund for order A1001, the shoes did not fit.",
            "What is the status of order A1002?",
            "Can you refund order A1003? It arrived broken.",
            "I need to talk to a human about order A1004, please escalate.",
        ]
        .map(str::to_owned)
        .to_vec();
        let gap = coverage_gap(&seeds, &toy(), POLICY, None, None);
        assert_eq!(gap.rules.len(), 5);
        assert_eq!(
            gap.untested_rules,
            [
                "Refunds are allowed within 30 days of delivery.",
                "If a tool fails, say so plainly and do not claim the action went through."
            ]
        );
        assert!(gap.untested_tools.is_empty());
        assert_eq!(gap.stances.get("ordinary"), Some(&4));
        assert!(gap.single_shot);
        assert!(gap.summary.starts_with("4 asks cover 3 of 5 policy rules and 3 of 3 tools; untested: Refunds are allowed within 30 days of delivery., If a tool fails, say so plainly and do not claim the action..."), "{}", gap.summary);
        assert_eq!(gap.notes.len(), 5);
    }

    #[tokio::test]
    async fn rows_per_rule_counts_dims_rule() {
        let session = Session::new().unwrap();
        let rows = session
            .context()
            .sql("SELECT map(['rule'], [r]) AS dims FROM (VALUES ('a'), ('a'), ('b')) AS t(r)")
            .await
            .unwrap();
        let inputs = Inputs {
            asks: vec!["Can you refund order A1003?".into()],
            tools: toy(),
            policy: POLICY.into(),
            rows: Some(rows),
        };
        let gap = crate::stages::run::<CoverageGapStage>(&session, inputs, &Options::default())
            .await
            .unwrap();
        let rows = gap.rows.unwrap();
        assert_eq!(
            rows.rows_per_rule,
            BTreeMap::from([("a".into(), 2), ("b".into(), 1)])
        );
        assert_eq!(rows.rules_with_no_rows.len(), 5);
        assert!(gap.notes.last().unwrap().starts_with("5 rules no row"));
        assert!(!gap.single_shot || gap.n_asks == 1);
    }
}
