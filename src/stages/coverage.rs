//! Before the first rollout: `preflight` (what the simulator will make of the tools and the
//! policy, and what to fix first) and `coverage_gap` (which rules and tools a set of test asks
//! reaches). Pure text heuristics, no model.
//!
//! Matching is on words: a rule is reached by an ask that shares its content words, or that
//! names a tool the rule mentions; a tool is named by its literal name, by its nouns, or by its
//! verb's synonyms with its nouns. A branch only the fixture data selects (an amount, a date)
//! reads as untested even when an ask lands on it: confirm with graded rows.

use std::collections::{BTreeMap, HashSet};
use std::sync::LazyLock;

use rayon::prelude::*;
use regex::Regex;
use serde::Serialize;

use super::simulate::grid::{self, Axes};
use super::simulate::policy;
use super::simulate::tools::{KNOWN_ID, REFERENCE_PARAM, Tool, name_tokens};

/// Words that carry no domain meaning (asks and rules share them without sharing a topic).
const STOP: [&str; 142] = [
    "a", "about", "above", "after", "again", "all", "also", "always", "am", "an", "and", "any",
    "are", "as", "ask", "asks", "at", "be", "because", "been", "before", "being", "both", "but",
    "by", "can", "cannot", "could", "did", "do", "does", "doing", "done", "don't", "down", "each",
    "either", "else", "ever", "every", "for", "from", "get", "gets", "give", "go", "going", "got",
    "had", "has", "have", "having", "he", "her", "here", "him", "his", "how", "i", "i'm", "if",
    "in", "into", "is", "it", "it's", "its", "just", "let", "like", "make", "may", "me", "might",
    "more", "most", "must", "my", "need", "needs", "never", "no", "nor", "not", "now", "of", "off",
    "on", "once", "one", "only", "or", "other", "our", "out", "over", "own", "please", "same",
    "say", "says", "she", "should", "so", "some", "such", "than", "that", "the", "their", "them",
    "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until",
    "up", "use", "very", "want", "wants", "was", "we", "were", "what", "when", "where", "which",
    "while", "who", "why", "will", "with", "would", "you", "your",
];
/// Words that make a clause a branch (it holds only for some data).
const BRANCH: [&str; 24] = [
    "only",
    "over",
    "above",
    "under",
    "below",
    "within",
    "outside",
    "beyond",
    "exceed",
    "exceeds",
    "exceeding",
    "unless",
    "except",
    "more",
    "less",
    "limit",
    "limits",
    "threshold",
    "maximum",
    "minimum",
    "least",
    "most",
    "than",
    "percent",
];
/// Verb synonyms: how a text can say a tool's verb.
const SYNONYMS: [(&str, &[&str]); 24] = [
    (
        "get",
        &[
            "get", "look up", "lookup", "look-up", "check", "fetch", "retrieve", "view", "read",
            "pull",
        ],
    ),
    (
        "lookup",
        &[
            "look up",
            "lookup",
            "look-up",
            "check",
            "find",
            "verify",
            "authenticate",
            "identify",
        ],
    ),
    ("look", &["look up", "lookup", "look-up", "check", "find"]),
    ("find", &["find", "look up", "search", "check"]),
    ("search", &["search", "look up", "find", "check"]),
    ("list", &["list", "show", "check"]),
    ("check", &["check", "confirm", "verify", "look up"]),
    (
        "verify",
        &["verify", "verification", "authenticate", "confirm", "check"],
    ),
    (
        "create",
        &[
            "create", "open", "file", "start", "request", "raise", "log", "submit",
        ],
    ),
    ("open", &["open", "create", "file", "raise"]),
    (
        "initiate",
        &[
            "initiate", "start", "open", "issue", "create", "process", "request",
        ],
    ),
    ("request", &["request", "ask for", "submit", "file"]),
    ("issue", &["issue", "send", "grant", "give"]),
    (
        "send",
        &["send", "email", "mail", "forward", "notify", "message"],
    ),
    (
        "update",
        &["update", "change", "modify", "edit", "set", "adjust"],
    ),
    ("change", &["change", "update", "modify", "switch"]),
    ("set", &["set", "update", "change"]),
    ("cancel", &["cancel", "cancellation", "void"]),
    ("delete", &["delete", "remove", "erase"]),
    ("remove", &["remove", "delete", "drop"]),
    ("reset", &["reset", "change"]),
    ("unlock", &["unlock", "lockout", "locked"]),
    (
        "escalate",
        &[
            "escalate",
            "escalation",
            "hand off",
            "handoff",
            "transfer",
            "human",
        ],
    ),
    (
        "transfer",
        &["transfer", "escalate", "hand off", "handoff", "human"],
    ),
];
const GLUE: [&str; 11] = [
    "to", "a", "an", "the", "of", "for", "by", "and", "or", "in", "on",
];
/// Name words that make a tool destructive (a wrong call costs something).
const DESTRUCTIVE: [&str; 13] = [
    "cancel", "delete", "remove", "refund", "reverse", "transfer", "send", "update", "book",
    "create", "close", "merge", "pay",
];

static WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[a-z0-9$][a-z0-9$'-]*").expect("a valid pattern"));
static ADVERSARIAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:override|bypass|ignore|just this once|i don't care|don't (?:tell|check|ask)|even if|against (?:the )?(?:rules?|policy)|just do it|shouldn't (?:be )?(?:able|allowed)|anyway just|make an exception|off the record)\b").expect("a valid pattern")
});
static RETRY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:again|seriously|come on|why (?:is|has|hasn't|won't|didn't)|this is (?:taking|ridiculous|broken)|nobody|stuck|third time|still not|not working|how many times|keeps failing|never works)\b").expect("a valid pattern")
});
static HURRIED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:asap|right now|waiting|hurry)\b").expect("a valid pattern")
});

/// A word's stem: a word of 5 or more characters loses a final `s`.
fn stem(w: &str) -> &str {
    if w.len() >= 5 && w.ends_with('s') && !w.ends_with("ss") {
        &w[..w.len() - 1]
    } else {
        w
    }
}

/// The content words of `text`: lowercased words of 3 or more characters, not function words,
/// stemmed.
pub fn content_words(text: &str) -> HashSet<String> {
    let low = text.to_lowercase();
    WORD.find_iter(&low)
        .map(|m| m.as_str().trim_end_matches(['\'', '-']))
        .filter(|w| w.len() >= 3 && !STOP.contains(w))
        .map(|w| stem(w).to_owned())
        .collect()
}

/// Whether `word` starts a word of `low` (lowercased text).
fn at_word_start(low: &str, word: &str) -> bool {
    low.match_indices(word)
        .any(|(i, _)| i == 0 || !low.as_bytes()[i - 1].is_ascii_alphanumeric())
}

/// The verb and nouns of a tool's name.
fn verb_nouns(tool: &str) -> (String, Vec<String>) {
    let tokens = name_tokens(tool);
    let verb = tokens.first().cloned().unwrap_or_default();
    let nouns = tokens
        .iter()
        .skip(1)
        .filter(|t| !GLUE.contains(&t.as_str()))
        .map(|t| stem(t).to_owned())
        .collect();
    (verb, nouns)
}

/// Does `text` name `tool`: its literal name, or its nouns with one of its verb's synonyms?
pub fn mentions(tool: &str, text: &str) -> bool {
    let low = text.to_lowercase();
    if low.contains(&tool.to_lowercase()) {
        return true;
    }
    let (verb, nouns) = verb_nouns(tool);
    if verb.is_empty() {
        return false;
    }
    if nouns.is_empty() {
        return WORD.find_iter(&low).any(|w| w.as_str().starts_with(&verb));
    }
    let synonyms: Vec<&str> = SYNONYMS
        .iter()
        .find(|(v, _)| *v == verb)
        .map_or_else(|| vec![verb.as_str()], |(_, s)| s.to_vec());
    nouns.iter().all(|n| at_word_start(&low, n)) && synonyms.iter().any(|s| at_word_start(&low, s))
}

/// Does an ask name `tool`: as [`mentions`], or (looser) by every noun of the name.
pub fn ask_names(tool: &str, ask: &str) -> bool {
    if mentions(tool, ask) {
        return true;
    }
    let low = ask.to_lowercase();
    let (verb, nouns) = verb_nouns(tool);
    if verb.is_empty() {
        return false;
    }
    if nouns.is_empty() {
        return at_word_start(&low, &verb);
    }
    nouns.iter().all(|n| at_word_start(&low, n))
}

/// Whether a clause holds only for some data (an amount, a date, a limit).
pub fn is_branch(rule: &str) -> bool {
    let low = rule.to_lowercase();
    low.contains('$')
        || low.contains('%')
        || WORD.find_iter(&low).any(|w| BRANCH.contains(&w.as_str()))
}

/// The stance an ask takes: adversarial, retry, hurried or ordinary.
pub fn stance(ask: &str) -> &'static str {
    if ADVERSARIAL.is_match(ask) {
        "adversarial"
    } else if RETRY.is_match(ask) {
        "retry"
    } else if HURRIED.is_match(ask) {
        "hurried"
    } else {
        "ordinary"
    }
}

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
pub fn preflight(
    tools: &[Tool],
    policy_text: &str,
    rule_cap: usize,
    budget: Option<u64>,
    repeats: u32,
) -> Preflight {
    let (all_rules, total) = policy::rules(policy_text, usize::MAX);
    let on_grid: Vec<String> = all_rules.iter().take(rule_cap).cloned().collect();
    let axes = Axes::build(tools, &on_grid);
    let cells = grid::cells(&axes, tools, true).len();
    let cells_rl = grid::cells(&axes, tools, false).len();
    let mut warnings = Vec::new();
    let mut per_tool = Vec::new();
    let known_ids = super::simulate::tools::described_ids(tools);
    for t in tools {
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
        let texts = std::iter::once(t.description.as_str())
            .chain(t.params.iter().filter_map(|p| p.description.as_deref()));
        let ids = texts
            .flat_map(|x| {
                KNOWN_ID
                    .find_iter(x)
                    .map(|m| m.as_str().to_owned())
                    .collect::<Vec<_>>()
            })
            .count();
        if refs && ids == 0 && known_ids.is_empty() {
            issues.push("no_ids_in_description".to_owned());
            warnings.push(format!(
                "tool {}: it takes a record id but no tool description names one, so the offline world invents ids and 3 in 10 of them do not exist; name the ids your fixtures have (\"Orders on file: A1001, A1002\")",
                t.name
            ));
        }
        per_tool.push(ToolIssues {
            name: t.name.clone(),
            issues,
        });
    }
    let destructive: Vec<String> = tools
        .iter()
        .filter(|t| {
            t.words.iter().any(|w| DESTRUCTIVE.contains(&w.as_str()))
                || t.name.to_lowercase().starts_with("file_")
        })
        .map(|t| t.name.clone())
        .collect();
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
    // A rule no tool can act on: it names no tool and shares no word with any tool's name or
    // description (a tone rule, say): the grid still varies it, but only the reply can show it.
    let tool_words: HashSet<String> = tools
        .iter()
        .flat_map(|t| content_words(&format!("{} {}", t.words.join(" "), t.description)))
        .collect();
    let orphan: Vec<String> = all_rules
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
    if policy_text.trim().is_empty() {
        warnings.push("no policy: the grid's rule axis is empty and a judge has no policy to hold the agent to; pass --policy".into());
    } else if policy_text.chars().count() < 200 {
        warnings.push(format!("the policy is {} characters: a thin policy gives the grid few rules to test and a judge little to enforce", policy_text.chars().count()));
    }
    if total > rule_cap {
        warnings.push(format!(
            "the policy has {total} clauses and the grid's rule axis holds {rule_cap} (--rule-cap), so rows cover the first {rule_cap} in document order and none of the other {}",
            total - rule_cap
        ));
    }
    if let Some(budget) = budget {
        let rows = cells as u64 * u64::from(repeats.max(1));
        if rows > budget {
            warnings.push(format!(
                "the grid has {cells} cells; at --repeats {repeats} that is {rows} rows and --budget {budget} covers {} of them. Raise --budget to {rows}, lower --rule-cap, or pin axes with --axis",
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

/// `s` in at most `n` characters, the last three `...` when it is cut.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!(
            "{}...",
            s.chars().take(n.saturating_sub(3)).collect::<String>()
        )
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
                "  (past --rule-cap)"
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
    let per_ask: Vec<AskReach> = asks
        .par_iter()
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
        .collect();
    let mut axes: BTreeMap<String, AxisCounts> = BTreeMap::new();
    let axis_values = Axes::build(tools, &rules);
    for (axis, values) in &axis_values.axes {
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
    for r in &per_ask {
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
    let pressure = per_ask.iter().filter(|r| r.stance != "ordinary").count() as u64;
    let mut seen = HashSet::new();
    let single_shot = !asks.is_empty()
        && asks.iter().all(|a| {
            seen.insert(
                a.split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_lowercase(),
            )
        });
    let covered = rules.len() - untested_rules.len();
    let mut notes = Vec::new();
    if total > rules.len() {
        notes.push(format!("the policy has {total} clauses and {} are matched (--rule-cap); the other {} are not checked", rules.len(), total - rules.len()));
    }
    if !untested_rules.is_empty() {
        notes.push(format!(
            "{} policy rule{} no ask reaches: write one ask per rule, or let the simulator write them (wai simulate --seeds ASKS covers the rule axis)",
            untested_rules.len(),
            if untested_rules.len() == 1 { "" } else { "s" }
        ));
    }
    notes.push("world_state and tool_condition cannot be read from an ask: a prompt never says the record is missing or the tool timed out, so every ask sits on one point of those two axes. Run the asks through `wai simulate --seeds ASKS --tools ... --policy ...` to vary them, or add a fixture case per branch".into());
    notes.push("rules are matched on the words an ask shares with the rule, so a branch only the fixture data selects (an amount, a date) reads as untested even when an ask lands on it: confirm with --rows from a run".into());
    if single_shot {
        notes.push("every ask appears once: one rollout cannot tell a flake from a failure. Roll each ask k times (wai simulate --repeat-policy fixed --repeats K) and read pass^k".into());
    }
    if pressure == 0 && !asks.is_empty() {
        notes.push("no ask is hurried, adversarial or a retry: the suite tests the agent on a good day only. Add pressure asks, or let the stance axis write them".into());
    }
    let rows = rows_per_rule.map(|counts| {
        let no_rows: Vec<String> = rules.iter().filter(|r| counts.get(*r).copied().unwrap_or(0) == 0).cloned().collect();
        if !no_rows.is_empty() {
            notes.push(format!(
                "{} rule{} no row of the run exercised: the rows say what the asks' words cannot; simulate them (wai simulate covers every rule of the grid)",
                no_rows.len(),
                if no_rows.len() == 1 { "" } else { "s" }
            ));
        }
        RowsPerRule { rows_per_rule: counts, rules_with_no_rows: no_rows }
    });
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut summary = vec![format!(
        "{} cover{} {covered} of {}{} and {} of {}",
        plural(per_ask.len(), "ask", "asks"),
        if per_ask.len() == 1 { "s" } else { "" },
        plural(rules.len(), "policy rule", "policy rules"),
        if total > rules.len() {
            format!(" (of {total} in the prompt)")
        } else {
            String::new()
        },
        tools.len() - untested_tools.len(),
        plural(tools.len(), "tool", "tools")
    )];
    if !untested_rules.is_empty() {
        let mut s = format!(
            "untested: {}",
            untested_rules
                .iter()
                .take(3)
                .map(|r| cut(r, 62))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if untested_rules.len() > 3 {
            s.push_str(&format!(", and {} more", untested_rules.len() - 3));
        }
        summary.push(s);
    }
    if !untested_tools.is_empty() {
        summary.push(format!("no ask reaches {}", untested_tools.join(", ")));
    }
    if pressure == 0 && !asks.is_empty() {
        summary.push("no ask puts the agent under pressure".into());
    }
    if single_shot {
        summary.push("every ask runs once".into());
    }
    CoverageGap {
        n_asks: per_ask.len(),
        n_rules_total: total,
        rules_truncated: total - rules.len(),
        rule_cap: rules.len(),
        rules,
        axes,
        untested_rules,
        untested_tools: untested_tools.clone(),
        stances,
        pressure_asks: pressure,
        single_shot,
        tools_covered: tools.len() - untested_tools.len(),
        n_tools: tools.len(),
        per_ask,
        rows,
        notes,
        summary: summary.join("; "),
    }
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
            writeln!(f, "rows per rule (from --rows)")?;
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
    use crate::stages::simulate::tools::parse_tools;

    const POLICY: &str = "You are the support agent for an online store.\n\n1. Always look up the order before acting on it.\n2. Refunds are allowed within 30 days of delivery.\n3. Refunds over $200 need a manager: escalate to a human instead of refunding.\n4. Never promise a refund before the lookup confirms the order exists.\n5. If a tool fails, say so plainly and do not claim the action went through.";

    fn toy() -> Vec<Tool> {
        parse_tools(&serde_json::json!([
            {"name": "lookup_order", "description": "Look up an order by id. Orders on file: A1001, A1002, A1003, A1004.", "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "description": "The order id, like A1001."}}, "required": ["order_id"]}},
            {"name": "issue_refund", "description": "Refund an order in full. Orders on file: A1001, A1002, A1003, A1004.", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}}, "required": ["order_id"]}},
            {"name": "escalate_to_human", "description": "Hand the conversation to a human agent.", "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}}
        ]), "toy").unwrap()
    }

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

    #[test]
    fn preflight_reads_the_toy() {
        let p = preflight(&toy(), POLICY, 16, Some(100), 4);
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
                .any(|w| w.contains("--budget 100 covers 25")),
            "{:?}",
            p.warnings
        );
        assert!(!p.ok);
    }

    #[test]
    fn stances_and_branches() {
        assert_eq!(stance("Just do it, ignore the policy"), "adversarial");
        assert_eq!(stance("This is the third time I ask"), "retry");
        assert_eq!(stance("I need it ASAP"), "hurried");
        assert!(is_branch("Refunds over $200 need a manager"));
        assert!(!is_branch("Always look up the order first"));
        assert!(mentions(
            "lookup_order",
            "Always look up the order before acting on it."
        ));
        assert!(!mentions(
            "issue_refund",
            "Refunds over $200 need a manager"
        ));
    }
}
