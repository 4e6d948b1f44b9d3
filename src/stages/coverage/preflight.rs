//! `preflight`: what the simulator will make of the tools and the policy (the rules, the grid,
//! each tool's problems), and what to fix before generating thousands of rows.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use super::words::{content_words, cut, mentions};
use crate::error::Result;
use crate::stages::simulate::grid::{self, Axes};
use crate::stages::simulate::policy;
use crate::stages::simulate::tools::{KNOWN_ID, REFERENCE_PARAM, Tool, described_ids};
use crate::stages::{Session, Stage};

/// Options of the stage.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Rules on the grid.
    pub rule_cap: usize,
    /// The rows you mean to simulate: warns when the grid does not fit.
    pub budget: Option<u64>,
    /// Rollouts per ask you mean to run.
    pub repeats: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            rule_cap: policy::RULE_CAP,
            budget: None,
            repeats: 1,
        }
    }
}

impl crate::stages::Options for Options {}

/// What the stage reads: the tools and the policy text.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The agent's tools.
    pub tools: Vec<Tool>,
    /// The policy (system prompt) text; empty when there is none.
    pub policy: String,
}

/// The preflight stage (not relational: it reads the tools and the policy).
pub struct PreflightStage;

impl Stage for PreflightStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Preflight;
    const NAME: &'static str = "preflight";

    fn run(
        _session: &Session,
        inputs: Inputs,
        options: &Options,
    ) -> impl Future<Output = Result<Preflight>> {
        std::future::ready(Ok(preflight(&inputs.tools, &inputs.policy, options)))
    }
}

/// Name words that make a tool destructive (a wrong call costs something).
const DESTRUCTIVE: [&str; 13] = [
    "cancel", "delete", "remove", "refund", "reverse", "transfer", "send", "update", "book",
    "create", "close", "merge", "pay",
];

/// One tool's problems.
#[derive(Debug, Clone, Serialize)]
pub struct ToolIssues {
    /// The tool.
    pub name: String,
    /// `no_description`, `no_parameters`, `no_required_fields`, `params_without_description`,
    /// `no_ids_in_description`.
    pub issues: Vec<String>,
}

/// What `wai preflight` finds.
#[derive(Debug, Clone, Serialize)]
pub struct Preflight {
    /// Tools declared.
    pub n_tools: usize,
    /// Characters of policy.
    pub policy_chars: usize,
    /// Every rule the policy splits into.
    pub rules: Vec<String>,
    /// Rules in the policy.
    pub n_rules_total: usize,
    /// Rules past the cap (not on the grid).
    pub rules_truncated: usize,
    /// The rule cap.
    pub rule_cap: usize,
    /// Values per axis.
    pub axes: BTreeMap<String, usize>,
    /// Grid cells `wai simulate` uses in explore mode (most fault cells made success cells).
    pub cells: usize,
    /// Grid cells in rl mode (every fault cell kept).
    pub cells_rl: usize,
    /// Per tool.
    pub tools: Vec<ToolIssues>,
    /// Tools whose wrong call costs something.
    pub destructive_tools: Vec<String>,
    /// Tools the policy never mentions.
    pub tools_not_mentioned_in_policy: Vec<String>,
    /// Rules that mention no tool and share no word with any tool.
    pub rules_no_tool_acts_on: Vec<String>,
    /// Ids the tool descriptions name (the world knows them).
    pub known_ids: Vec<String>,
    /// What to fix before generating thousands of rows.
    pub warnings: Vec<String>,
    /// No warnings.
    pub ok: bool,
}

/// Reads the tools and policy as the simulator will, and says what to fix first. `budget` (rows
/// per run) and `repeats` say whether the grid fits.
pub fn preflight(tools: &[Tool], policy_text: &str, opts: &Options) -> Preflight {
    let rule_cap = opts.rule_cap;
    let (all_rules, total) = policy::rules(policy_text, usize::MAX);
    let on_grid: Vec<String> = all_rules.iter().take(rule_cap).cloned().collect();
    let axes = Axes::build(tools, &on_grid);
    let cells = grid::cells(&axes, tools, true).len();
    let cells_rl = grid::cells(&axes, tools, false).len();
    let mut warnings = Vec::new();
    let known_ids = described_ids(tools);
    let per_tool: Vec<ToolIssues> = tools
        .iter()
        .map(|t| tool_issues(t, &known_ids, &mut warnings))
        .collect();
    let destructive = destructive(tools);
    if !destructive.is_empty() {
        warnings.push(format!(
            "destructive tools present ({}): write-discipline situations (look up before writing, confirm before a destructive call) deserve explicit asks and judge markers",
            destructive.iter().take(6).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    let not_mentioned: Vec<String> = tools
        .iter()
        .filter(|t| !mentions(&t.name, policy_text))
        .map(|t| t.name.to_lowercase())
        .collect();
    if !not_mentioned.is_empty() && !policy_text.trim().is_empty() {
        warnings.push(format!(
            "the policy never mentions {}: no rule says when the agent may call {}, so a judge has nothing to hold those calls against",
            not_mentioned.join(", "),
            if not_mentioned.len() == 1 { "it" } else { "them" }
        ));
    }
    let orphan = orphan_rules(tools, &all_rules, &mut warnings);
    policy_warnings(policy_text, total, rule_cap, &mut warnings);
    if let Some(budget) = opts.budget {
        let repeats = opts.repeats;
        let rows = cells as u64 * u64::from(repeats.max(1));
        if rows > budget {
            warnings.push(format!(
                "the grid has {cells} cells; at `repeats` {repeats} that is {rows} rows and `budget` {budget} covers {} of them. Raise `budget` to {rows}, lower `rule_cap`, or pin axes with `axes`",
                budget / u64::from(repeats.max(1))
            ));
        }
    }
    Preflight {
        n_tools: tools.len(),
        policy_chars: policy_text.chars().count(),
        n_rules_total: total,
        rules_truncated: total.saturating_sub(rule_cap),
        rule_cap,
        axes: axes
            .axes
            .iter()
            .map(|(a, v)| (a.clone(), v.len()))
            .collect(),
        rules: all_rules,
        cells,
        cells_rl,
        tools: per_tool,
        destructive_tools: destructive,
        tools_not_mentioned_in_policy: not_mentioned,
        rules_no_tool_acts_on: orphan,
        known_ids,
        ok: warnings.is_empty(),
        warnings,
    }
}

/// One tool's problems, each also said in `warnings` where it is worth a sentence.
fn tool_issues(t: &Tool, known_ids: &[String], warnings: &mut Vec<String>) -> ToolIssues {
    let mut issues = Vec::new();
    if t.description.trim().is_empty() {
        issues.push("no_description".to_owned());
        warnings.push(format!(
            "tool {}: no description; the agent and the writer only have its name to go on",
            t.name
        ));
    }
    let has_schema = t.declared_schema
        && t.function
            .get("parameters")
            .and_then(|p| p.get("properties"))
            .is_some_and(serde_json::Value::is_object);
    if !has_schema {
        issues.push("no_parameters".to_owned());
        warnings.push(format!("tool {}: no parameter schema (`parameters.properties`); the world cannot check its arguments", t.name));
    } else if !t.params.is_empty() && !t.params.iter().any(|p| p.required) {
        issues.push("no_required_fields".to_owned());
    }
    let bare: Vec<&str> = t
        .params
        .iter()
        .filter(|p| p.description.as_deref().is_none_or(|d| d.trim().is_empty()))
        .map(|p| p.name.as_str())
        .collect();
    if !bare.is_empty() {
        issues.push("params_without_description".to_owned());
        warnings.push(format!("tool {}: parameter{} {} {} no description; say what a valid value looks like (an id's shape, a unit)", t.name, if bare.len() == 1 { "" } else { "s" }, bare.join(", "), if bare.len() == 1 { "has" } else { "have" }));
    }
    let refs = t
        .params
        .iter()
        .any(|p| REFERENCE_PARAM.is_match(p.name.rsplit('.').next().unwrap_or(&p.name)));
    let ids = std::iter::once(t.description.as_str())
        .chain(t.params.iter().filter_map(|p| p.description.as_deref()))
        .map(|x| KNOWN_ID.find_iter(x).count())
        .sum::<usize>();
    if refs && ids == 0 && known_ids.is_empty() {
        issues.push("no_ids_in_description".to_owned());
        warnings.push(format!(
            "tool {}: it takes a record id but no tool description names one, so the offline world invents ids and 3 in 10 of them do not exist; name the ids your fixtures have (\"Orders on file: A1001, A1002\")",
            t.name
        ));
    }
    ToolIssues {
        name: t.name.clone(),
        issues,
    }
}

/// The tools whose wrong call costs something.
fn destructive(tools: &[Tool]) -> Vec<String> {
    tools
        .iter()
        .filter(|t| {
            t.words.iter().any(|w| DESTRUCTIVE.contains(&w.as_str()))
                || t.name.to_lowercase().starts_with("file_")
        })
        .map(|t| t.name.clone())
        .collect()
}

/// Rules no tool can act on: a rule that names no tool and shares no word with any tool's name
/// or description (a tone rule, say). The grid still varies it, but only the reply can show it.
fn orphan_rules(tools: &[Tool], rules: &[String], warnings: &mut Vec<String>) -> Vec<String> {
    let tool_words: HashSet<String> = tools
        .iter()
        .flat_map(|t| content_words(&format!("{} {}", t.words.join(" "), t.description)))
        .collect();
    let orphan: Vec<String> = rules
        .iter()
        .filter(|r| {
            !tools.iter().any(|t| mentions(&t.name, r)) && content_words(r).is_disjoint(&tool_words)
        })
        .cloned()
        .collect();
    if !orphan.is_empty() && !tools.is_empty() {
        warnings.push(format!(
            "{} rule{} no tool acts on (only the reply can show {}): {}; judge {} with a marker on the reply",
            orphan.len(),
            if orphan.len() == 1 { "" } else { "s" },
            if orphan.len() == 1 { "it" } else { "them" },
            orphan.iter().take(3).map(|r| cut(r, 62)).collect::<Vec<_>>().join("; "),
            if orphan.len() == 1 { "it" } else { "them" }
        ));
    }
    orphan
}

/// What a missing, thin or over-long policy means for the grid.
fn policy_warnings(policy_text: &str, total: usize, rule_cap: usize, warnings: &mut Vec<String>) {
    if policy_text.trim().is_empty() {
        warnings.push("no policy: the grid's rule axis is empty and a judge has no policy to hold the agent to; pass `policy`".into());
    } else if policy_text.chars().count() < 200 {
        warnings.push(format!("the policy is {} characters: a thin policy gives the grid few rules to test and a judge little to enforce", policy_text.chars().count()));
    }
    if total > rule_cap {
        warnings.push(format!(
            "the policy has {total} clauses and the grid's rule axis holds {rule_cap} (`rule_cap`), so rows cover the first {rule_cap} in document order and none of the other {}",
            total - rule_cap
        ));
    }
}

impl std::fmt::Display for Preflight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "preflight: {} tools, a {}-character policy, {} rules ({} on the grid)",
            self.n_tools,
            self.policy_chars,
            self.n_rules_total,
            self.n_rules_total.min(self.rule_cap)
        )?;
        let axes: Vec<String> = self.axes.iter().map(|(a, n)| format!("{a} {n}")).collect();
        writeln!(f, "  axes: {}", axes.join(", "))?;
        writeln!(
            f,
            "  grid: {} cells (explore), {} (rl, every fault cell kept)",
            self.cells, self.cells_rl
        )?;
        writeln!(f, "  rules:")?;
        for (i, r) in self.rules.iter().enumerate() {
            let off = if i >= self.rule_cap {
                "  (past `rule_cap`)"
            } else {
                ""
            };
            writeln!(f, "    {}. {}{off}", i + 1, r)?;
        }
        for t in &self.tools {
            writeln!(
                f,
                "  tool {:<24} {}",
                t.name,
                if t.issues.is_empty() {
                    "ok".to_owned()
                } else {
                    t.issues.join(", ")
                }
            )?;
        }
        if !self.known_ids.is_empty() {
            writeln!(f, "  ids the world knows: {}", self.known_ids.join(", "))?;
        }
        if self.ok {
            writeln!(f, "ok: nothing to fix before simulating")?;
        }
        for w in &self.warnings {
            writeln!(f, "! {w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::coverage::words::tests::{POLICY, toy};

    #[test]
    fn preflight_reads_the_toy() {
        let p = preflight(
            &toy(),
            POLICY,
            &Options {
                rule_cap: 16,
                budget: Some(100),
                repeats: 4,
            },
        );
        assert_eq!(p.rules.len(), 5);
        assert_eq!(p.destructive_tools, ["issue_refund"]);
        assert_eq!(p.tools_not_mentioned_in_policy, ["issue_refund"]);
        assert!(
            p.warnings.iter().any(
                |w| w.contains("issue_refund: parameters order_id, reason have no description")
            ),
            "{:?}",
            p.warnings
        );
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("`budget` 100 covers 25")),
            "{:?}",
            p.warnings
        );
        assert!(!p.ok);
    }

    #[tokio::test]
    async fn the_stage_reads_its_inputs() {
        let session = Session::from_context(datafusion::prelude::SessionContext::new());
        let inputs = Inputs {
            tools: toy(),
            policy: String::new(),
        };
        let p = crate::stages::run::<PreflightStage>(&session, inputs, &Options::default())
            .await
            .unwrap();
        assert_eq!(p.n_tools, 3);
        assert!(
            p.warnings.iter().any(|w| w.starts_with("no policy")),
            "{:?}",
            p.warnings
        );
        assert_eq!(p.rule_cap, policy::RULE_CAP);
    }
}
