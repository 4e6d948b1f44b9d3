//! Select the rows worth training on.
//!
//! - **RL** keeps whole mixed groups. The gates run in the reference's code order, each
//!   reporting what it dropped: privileged leaks, truncation marking, row gates (incomplete
//!   junk, do-nothing, unusable labels; a verified zero is always kept), duplicates within a
//!   prompt, truncated rows, unanimous and collapsed groups, the difficulty band. Then groups are
//!   ordered (bucketed by the fault they met, one ask per distinct pass rate in turn) and taken
//!   whole until the target.
//! - **SFT** keeps passing demonstrations: one per prompt, then one of each distinct behaviour
//!   before any repeat.
//!
//! Selection works on a compact summary of each row ([`RowInfo`]), made from the row in the
//! reference's format; the caller writes the chosen rows.

use std::collections::BTreeMap;
use std::sync::Arc;

use foldhash::HashMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::export::{key_text, leak, messages_of, normalize};
#[cfg(test)]
use columns::row_infos;
pub use columns::{LEAVES, read_summaries};

mod columns;
use super::simulate::hash::sha256_hex;

/// Harness text that must never reach a training row.
const HARNESS: [&str; 6] = [
    "<USER_TURN>",
    "scene brief",
    "scenario_dimensions",
    "world_state",
    "situation card",
    "region_id",
];
static RETURNED: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"returned [45]\d\d\b").expect("a valid pattern")
});
const INTENT_WORDS: [&str; 7] = [
    "merge", "refund", "schedule", "commit", "deploy", "rebase", "checkout",
];

/// What selection needs of one row.
///
/// A million of these are held at once, so the texts rows share (the key, the prompt, the
/// fault) are shared, one allocation for a run of rows of one task, and the rest are boxed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowInfo {
    /// The group key: `scenario_id`, else `task_id`, else the prompt.
    pub key: Arc<str>,
    /// The prompt as written.
    pub prompt: Arc<str>,
    /// A numeric reward.
    pub reward: Option<f64>,
    /// The reward when it is exactly 0 or 1.
    pub label: Option<u8>,
    /// Who labelled it.
    pub label_source: Box<str>,
    /// The behaviour signature.
    pub signature: Box<str>,
    /// A hash of the final reply, whitespace collapsed and lowercased.
    pub final_norm: u64,
    /// Some trainable content: a tool call, a reply, an assistant message.
    pub trainable: bool,
    /// A tool call.
    pub tool_call: bool,
    /// Why the row is incomplete junk, if it is.
    pub junk: Option<&'static str>,
    /// The situation wants a tool.
    pub wants_tool: bool,
    /// Cut by the token cap.
    pub truncated: bool,
    /// The privileged field and text the reply quotes.
    pub leak: Option<Box<str>>,
    /// The row had a privileged block.
    pub privileged: bool,
    /// The first fault the rollout met.
    pub fault_kind: Arc<str>,
    /// `lineage.source == "eval"`.
    pub eval_sourced: bool,
    /// For the leak report.
    pub scenario_id: Box<str>,
    /// For the leak report.
    pub rollout_index: Option<i64>,
}

/// A hash of `s` with white space collapsed and letters lowercased.
fn norm_hash(s: &str) -> u64 {
    use std::hash::BuildHasher;
    thread_local! {
        static BUF: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    BUF.with_borrow_mut(|buf| {
        buf.clear();
        super::export::push_normalized(s, buf);
        foldhash::fast::FixedState::with_seed(0x5eed).hash_one(buf.as_bytes())
    })
}

/// An ASCII byte `str::split_whitespace` splits on: space, and tab to carriage return (9 to 13).
/// Compared, not looked up, so that the loops over a text run on vector registers.
fn white(b: u8) -> bool {
    (b == b' ') | (b.wrapping_sub(b'\t') < 5)
}

/// Words split on white space (`str::split_whitespace`), counted.
fn word_count(s: &str) -> usize {
    if !s.is_ascii() {
        return s.split_whitespace().count();
    }
    super::terms::ascii_words(s.as_bytes(), white)
}

/// The signature of a row without one: the first 12 hex digits of the SHA-256 of its calls
/// joined by commas, a bar, and its reply's length in dozens of words
/// (`sha256_hex("check,refund|3")[..12]`), hashed in pieces and only the 6 bytes kept encoded
/// (the joined text and the whole hex were built per row before).
fn stand_in_signature(tools: &[&str], dozens: usize) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (k, t) in tools.iter().enumerate() {
        if k > 0 {
            h.update(b",");
        }
        h.update(t.as_bytes());
    }
    h.update(b"|");
    h.update(dozens.to_string().as_bytes());
    super::simulate::hash::hex(&h.finalize()[..6])
}

/// The fault a step's result shows, if any (a result held as JSON text is read as JSON).
fn result_fault(result: &Value) -> Option<String> {
    let parsed;
    let result = match result {
        Value::String(t) => match serde_json::from_str::<Value>(t) {
            Ok(v) => {
                parsed = v;
                &parsed
            }
            Err(_) => result,
        },
        v => v,
    };
    if result.get("data").is_some_and(Value::is_string) {
        return Some("malformed".into());
    }
    if result
        .get("stale")
        .is_some_and(|v| v.as_bool() == Some(true))
    {
        return Some("stale".into());
    }
    let status = result
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_lowercase();
    match status.as_str() {
        s if s.is_empty() || super::simulate::world::SUCCESS.contains(&s) => None,
        s if ["permission", "denied", "unauthorized", "blocked"]
            .iter()
            .any(|w| s.contains(w)) =>
        {
            Some("deny".into())
        }
        s => Some(s.to_owned()),
    }
}

/// The first fault mode of a row's planned faults (`faults: {tool: {mode}}`).
fn planned_fault(faults: Option<&Value>) -> Option<String> {
    faults.and_then(Value::as_object).and_then(|f| {
        f.values()
            .find_map(|v| v.get("mode").and_then(Value::as_str))
            .map(str::to_owned)
    })
}

/// Whether a row's side fields say the situation wants a tool: `tool_known`, a tool ask, planned
/// faults, a world state, a tool dimension.
fn side_wants_tool<'v>(get: impl Fn(&str) -> Option<&'v Value>) -> bool {
    get("tool_known").and_then(Value::as_bool) == Some(true)
        || get("ask_family").and_then(Value::as_str) == Some("tool")
        || get("faults").is_some_and(|f| f.as_object().is_some_and(|o| !o.is_empty()))
        || get("world_state")
            .and_then(Value::as_str)
            .is_some_and(|w| !matches!(w, "" | "unspecified" | "unknown"))
        || get("scenario_dimensions")
            .and_then(|d| d.get("tool"))
            .and_then(Value::as_str)
            .is_some_and(|t| !matches!(t, "unrelated" | "multi_tool"))
}

/// Whether a prompt names an intent to act or a record id.
fn prompt_wants_tool(prompt: &str) -> bool {
    let low = prompt.to_lowercase();
    INTENT_WORDS.iter().any(|w| low.contains(w))
        || super::simulate::tools::KNOWN_ID.is_match(prompt)
}

/// What a row summary is made of, borrowed from wherever the row is read: a JSON object
/// ([`row_info`]) or a batch's columns ([`columns`]).
struct Parts<'a> {
    key: Arc<str>,
    prompt: &'a str,
    /// `prompt`, shared with the rows of its task the reader has seen.
    shared_prompt: Arc<str>,
    reward: Option<f64>,
    label_source: &'a str,
    final_text: &'a str,
    finish_reason: &'a str,
    reason: &'a str,
    /// A step has a tool.
    step_call: bool,
    /// The steps' tool names.
    step_tools: Vec<&'a str>,
    step_truncated: bool,
    /// A message has tool calls.
    message_calls: bool,
    /// Assistant turns' text (`""` when it is not a string).
    assistant: Vec<&'a str>,
    /// The role of the last turn.
    last_role: &'a str,
    /// The row has messages, steps or a reply.
    has_messages: bool,
    overlong: bool,
    side_wants_tool: bool,
    /// [`prompt_wants_tool`], when the reader has it at hand.
    prompt_wants_tool: Option<bool>,
    signature: Option<&'a str>,
    leak: (bool, Option<String>),
    fault_kind: Arc<str>,
    eval_sourced: bool,
    scenario_id: &'a str,
    rollout_index: Option<i64>,
}

/// The fault kind of a rollout that met none.
static NO_FAULT: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from("no fault"));

/// Harness text in a reply.
static HARNESS_TEXT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        &HARNESS
            .iter()
            .map(|h| regex::escape(h))
            .collect::<Vec<_>>()
            .join("|"),
    )
    .expect("a valid pattern")
});

/// Raw tool-call markup in a reply.
fn markup(s: &str) -> bool {
    use memchr::memmem::Finder;
    static FINDERS: std::sync::LazyLock<[Finder<'static>; 4]> = std::sync::LazyLock::new(|| {
        [
            Finder::new("<tool_call>"),
            Finder::new("</tool_call>"),
            Finder::new("\"name\":"),
            Finder::new("\"parameters\":"),
        ]
    });
    let has = |k: usize| FINDERS[k].find(s.as_bytes()).is_some();
    has(0) || has(1) || (has(2) && has(3))
}

/// The longest run of one character is 30 or more.
fn repeats_30(s: &str) -> bool {
    if s.is_ascii() {
        // A run of 30 covers a whole window of 15 starting at a multiple of 15: look there
        // first, then measure the run around it.
        let b = s.as_bytes();
        let mut i = 0;
        while i + 15 <= b.len() {
            let c = b[i];
            if b[i + 14] == c && b[i..i + 15].iter().all(|&x| x == c) {
                let before = b[..i].iter().rev().take_while(|&&x| x == c).count();
                let after = b[i + 15..].iter().take_while(|&&x| x == c).count();
                if before + 15 + after >= 30 {
                    return true;
                }
            }
            i += 15;
        }
        return false;
    }
    let mut run = 0usize;
    let mut prev = None;
    for c in s.chars() {
        if Some(c) == prev {
            run += 1;
            if run >= 30 {
                return true;
            }
        } else {
            run = 1;
            prev = Some(c);
        }
    }
    false
}

impl Parts<'_> {
    fn summarize(self) -> RowInfo {
        let final_text = self.final_text;
        let tool_call = self.step_call || self.message_calls;
        let trainable = tool_call || !final_text.trim().is_empty() || !self.assistant.is_empty();
        let chars = final_text.chars().count();
        let truncated = self.finish_reason == "length"
            || self.step_truncated
            || {
                let reason = self.reason.to_lowercase();
                ["truncat", "cut off"].iter().any(|w| reason.contains(w))
            }
            || (chars >= 200 && !super::hack_scan::looks_finished(final_text));
        let prompt = self.prompt;
        // Incomplete junk: the first that applies.
        let trimmed = final_text.trim();
        let stub = !tool_call
            && (trimmed.starts_with("<agent error:") || RETURNED.is_match(trimmed) || {
                let t = trimmed.split_whitespace().take(3).collect::<Vec<_>>();
                t.len() <= 2
                    && t.iter().any(|w| {
                        w.len() == 3
                            && (w.starts_with('4') || w.starts_with('5'))
                            && w.chars().all(|c| c.is_ascii_digit())
                    })
            });
        // A turn that says what the reply says is checked once.
        let others = || self.assistant.iter().filter(|a| **a != final_text);
        let junk = if trimmed.is_empty() {
            Some("empty final reply")
        } else if trimmed.starts_with("<agent error") {
            Some("agent error")
        } else if stub {
            Some("infrastructure stub")
        } else if repeats_30(final_text) {
            Some("a character repeated 30 times")
        } else if HARNESS_TEXT.is_match(final_text) || others().any(|a| HARNESS_TEXT.is_match(a)) {
            Some("harness text")
        } else if markup(final_text) || others().any(|a| markup(a)) {
            Some("raw tool markup")
        } else if chars > 600 && !self.overlong && !super::hack_scan::looks_finished(final_text) {
            Some("long unfinished reply")
        } else if !self.has_messages && !tool_call {
            Some("no conversation")
        } else if matches!(self.last_role, "user" | "tool") {
            Some("ends on a user or tool turn")
        } else if !tool_call && trimmed.ends_with('?') && prompt.split_whitespace().count() <= 2 {
            Some("a question back to a bare prompt")
        } else {
            None
        };
        let wants_tool = self.side_wants_tool
            || self
                .prompt_wants_tool
                .unwrap_or_else(|| prompt_wants_tool(prompt));
        let signature = self.signature.map_or_else(
            || {
                // No signature: the calls and the reply's length stand in.
                stand_in_signature(&self.step_tools, word_count(final_text) / 12).into()
            },
            Box::from,
        );
        let label = self
            .reward
            .filter(|r| *r == 0.0 || *r == 1.0)
            .map(|r| r as u8);
        RowInfo {
            key: self.key,
            reward: self.reward,
            label,
            label_source: self.label_source.into(),
            signature,
            final_norm: norm_hash(final_text),
            trainable,
            tool_call,
            junk,
            wants_tool,
            truncated,
            leak: self.leak.1.map(String::into_boxed_str),
            privileged: self.leak.0,
            fault_kind: self.fault_kind,
            eval_sourced: self.eval_sourced,
            scenario_id: self.scenario_id.into(),
            rollout_index: self.rollout_index,
            prompt: self.shared_prompt,
        }
    }
}

/// The summary of one row in the reference's format.
pub fn row_info(row: &Map<String, Value>) -> RowInfo {
    let text = |k: &str| row.get(k).and_then(Value::as_str).unwrap_or("");
    let key = ["scenario_id", "task_id", "prompt"]
        .iter()
        .find_map(|k| key_text(row.get(*k)))
        .unwrap_or_default();
    // One reward reader, as everywhere in wai: `reward` (not `qwen_reward`).
    let reward = row
        .get("reward")
        .filter(|v| !v.is_boolean())
        .and_then(Value::as_f64);
    let steps: &[Value] = row
        .get("steps")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let messages = &*messages_of(row);
    let fault_kind = steps
        .iter()
        .filter_map(|s| s.get("result"))
        .find_map(result_fault)
        .or_else(|| planned_fault(row.get("faults")))
        .map_or_else(|| NO_FAULT.clone(), Arc::from);
    Parts {
        key: key.into(),
        prompt: text("prompt"),
        shared_prompt: text("prompt").into(),
        reward,
        label_source: text("label_source"),
        final_text: text("final_text"),
        finish_reason: text("finish_reason"),
        reason: text("reason"),
        step_call: steps
            .iter()
            .any(|s| s.get("tool").is_some_and(|t| !t.is_null())),
        step_tools: steps
            .iter()
            .filter_map(|s| s.get("tool").and_then(Value::as_str))
            .collect(),
        step_truncated: steps
            .iter()
            .any(|s| s.get("truncated").and_then(Value::as_bool) == Some(true)),
        message_calls: messages.iter().any(|m| {
            m.get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty())
        }),
        assistant: messages
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            .map(|m| m.get("content").and_then(Value::as_str).unwrap_or(""))
            .collect(),
        last_role: messages
            .last()
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
            .unwrap_or(""),
        has_messages: row
            .get("messages")
            .and_then(Value::as_array)
            .is_some_and(|m| !m.is_empty())
            || !steps.is_empty()
            || row
                .get("final_text")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty()),
        overlong: row.get("overlong").and_then(Value::as_bool) == Some(true),
        side_wants_tool: side_wants_tool(|k| row.get(k)),
        prompt_wants_tool: None,
        signature: row.get("behavior_signature").and_then(Value::as_str),
        leak: leak(row, messages),
        fault_kind,
        eval_sourced: row
            .get("lineage")
            .and_then(|l| l.get("source"))
            .and_then(Value::as_str)
            == Some("eval"),
        scenario_id: text("scenario_id"),
        rollout_index: row.get("rollout_index").and_then(Value::as_i64),
    }
    .summarize()
}

/// What to do with truncated rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Truncated {
    /// Drop them.
    Drop,
    /// Keep them as riders that do not vote.
    Keep,
    /// Keep them with reward 0.
    Penalize,
}

/// Selection settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Rows wanted.
    pub target: usize,
    /// The difficulty band on per-task pass rate (RL).
    pub band: (f64, f64),
    /// Truncated rows (RL).
    pub truncated: Truncated,
    /// The agent has tools (the do-nothing gate).
    pub has_tools: bool,
    /// Lowest reward of a demonstration (SFT).
    pub min_reward: f64,
}

/// A leaked row in the report.
#[derive(Debug, Clone, Serialize)]
pub struct Leak {
    /// Its scenario.
    pub scenario_id: String,
    /// Its rollout.
    pub rollout_index: Option<i64>,
    /// The quoted text (80 characters).
    pub needle: String,
}

/// What selection did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// rl or sft.
    pub mode: &'static str,
    /// Rows read.
    pub n: usize,
    /// Rows dropped for quoting their privileged context.
    pub privileged_leaks_dropped: usize,
    /// The first leaks.
    pub leaks: Vec<Leak>,
    /// Rows dropped by each row gate.
    pub gates: BTreeMap<String, usize>,
    /// Rows after the row gates.
    pub n_after_gates: usize,
    /// Duplicates dropped, and the asks they came from.
    pub duplicates_dropped: usize,
    /// Asks with a duplicate.
    pub duplicate_asks: usize,
    /// Identical trajectories with different rewards (judge noise).
    pub conflicting_rewards: usize,
    /// Truncated rows dropped / kept / penalized.
    pub truncated: BTreeMap<String, usize>,
    /// Groups dropped as unanimous (collapsed ones included).
    pub unanimous_groups_dropped: usize,
    /// Groups that only became unanimous after duplicates and truncation went.
    pub collapsed_groups_dropped: usize,
    /// Tasks dropped by the band: too easy, too hard.
    pub band_dropped: BTreeMap<String, usize>,
    /// The band.
    pub band: (f64, f64),
    /// Groups selected, by the fault their first row met.
    pub fault_kinds: BTreeMap<String, usize>,
    /// Rows selected.
    pub n_selected: usize,
    /// Groups selected.
    pub groups_selected: usize,
    /// SFT: rows that did not pass.
    pub n_not_pass: usize,
    /// SFT: junk among the passes.
    pub n_junk: usize,
    /// SFT: one per prompt.
    pub n_eligible: usize,
    /// SFT: distinct behaviours among the eligible rows, and among the selected.
    pub behaviors: (usize, usize),
    /// SFT: completions per prompt (max, mean, median) and prompts with one.
    pub completions_per_prompt: (usize, f64, f64, usize),
    /// The target.
    pub target: usize,
    /// SFT: the lowest reward of a demonstration.
    pub min_reward: f64,
    /// Selected rows with eval-sourced rewards.
    pub eval_sourced: usize,
    /// What a person should know.
    pub warnings: Vec<String>,
}

fn empty_report(mode: &'static str, n: usize, opts: &Options) -> Report {
    Report {
        min_reward: opts.min_reward,
        mode,
        n,
        privileged_leaks_dropped: 0,
        leaks: Vec::new(),
        gates: BTreeMap::new(),
        n_after_gates: 0,
        duplicates_dropped: 0,
        duplicate_asks: 0,
        conflicting_rewards: 0,
        truncated: BTreeMap::new(),
        unanimous_groups_dropped: 0,
        collapsed_groups_dropped: 0,
        band_dropped: BTreeMap::new(),
        band: opts.band,
        fault_kinds: BTreeMap::new(),
        n_selected: 0,
        groups_selected: 0,
        n_not_pass: 0,
        n_junk: 0,
        n_eligible: 0,
        behaviors: (0, 0),
        completions_per_prompt: (0, 0.0, 0.0, 0),
        target: opts.target,
        eval_sourced: 0,
        warnings: Vec::new(),
    }
}

/// A row's part in choosing: gated out by the row gates; past them, as a duplicate, or dropped
/// as truncated (it still counts toward its key's rows after the gates); voting; or riding
/// along with its group.
const GATED: u8 = 0;
const PASSED: u8 = 1;
const DUPLICATE: u8 = 2;
const VOTING: u8 = 3;
const RIDER: u8 = 4;

/// What became of a key's rows.
enum Fate {
    /// No voting row.
    Empty,
    Unanimous,
    Collapsed,
    /// Kept: the key, its voting rows, their labels, its riders.
    Kept(Arc<str>, Vec<usize>, Vec<u8>, Vec<usize>),
}

/// A group of rows: its key, its rows, its pass rate.
type Group = (Arc<str>, Vec<usize>, f64);

/// A hash of `text` after `seed`.
fn text_hash(text: &str, seed: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = foldhash::fast::FixedState::with_seed(0x5e1e_c7ed).build_hasher();
    h.write_u64(seed);
    h.write(text.as_bytes());
    h.finish()
}

/// Rows in runs: the rows of a run are the same under some comparison, in row order.
struct Runs {
    rows: Vec<usize>,
    /// Where each run ends in `rows`.
    ends: Vec<usize>,
}

impl Runs {
    /// The rows `of` in runs of rows the same under `same`, found by sorting their `hash`es in
    /// parallel: rows with one hash are one run, unless `same` tells them apart (a collision),
    /// when they are sorted by `same` and split.
    fn of(
        of: &[usize],
        hash: impl Fn(usize) -> u64 + Sync,
        same: impl Fn(usize, usize) -> std::cmp::Ordering,
    ) -> Self {
        use rayon::prelude::*;
        let mut v: Vec<(u64, usize)> = of.par_iter().map(|&i| (hash(i), i)).collect();
        v.par_sort_unstable();
        let mut rows = Vec::with_capacity(v.len());
        let mut ends = Vec::new();
        for run in v.chunk_by_mut(|a, b| a.0 == b.0) {
            let first = run[0].1;
            if run[1..].iter().all(|p| same(first, p.1).is_eq()) {
                rows.extend(run.iter().map(|p| p.1));
                ends.push(rows.len());
                continue;
            }
            run.sort_by(|a, b| same(a.1, b.1).then(a.1.cmp(&b.1)));
            for sub in run.chunk_by(|a, b| same(a.1, b.1).is_eq()) {
                rows.extend(sub.iter().map(|p| p.1));
                ends.push(rows.len());
            }
        }
        Self { rows, ends }
    }

    /// Run `r`.
    fn run(&self, r: usize) -> &[usize] {
        let start = if r == 0 { 0 } else { self.ends[r - 1] };
        &self.rows[start..self.ends[r]]
    }

    fn iter(&self) -> impl Iterator<Item = &[usize]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let run = &self.rows[start..end];
            start = end;
            run
        })
    }
}

fn leak_gate(rows: &[RowInfo], report: &mut Report) -> Vec<usize> {
    let mut kept = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        if let Some(n) = &r.leak {
            report.privileged_leaks_dropped += 1;
            if report.leaks.len() < 20 {
                report.leaks.push(Leak {
                    scenario_id: r.scenario_id.to_string(),
                    rollout_index: r.rollout_index,
                    needle: n.chars().take(80).collect(),
                });
            }
        } else {
            kept.push(i);
        }
    }
    kept
}

/// RL selection: the indices of the chosen rows, in training order, the chosen rows that were
/// truncated (kept as riders or penalized, by `opts.truncated`), and the report.
pub fn rl(rows: &[RowInfo], opts: &Options) -> (Vec<usize>, Vec<usize>, Report) {
    let mut report = empty_report("rl", rows.len(), opts);
    let live = leak_gate(rows, &mut report);
    // Truncation marking: under `penalize` a truncated row's label is 0 from here on.
    let mut penalized = vec![false; rows.len()];
    if opts.truncated == Truncated::Penalize {
        for &i in &live {
            penalized[i] = rows[i].truncated;
        }
    }
    let label_of = |i: usize| {
        if penalized[i] { Some(0) } else { rows[i].label }
    };
    let text_gates = rows.iter().any(|r| r.trainable);
    // Row gates.
    let mut after = Vec::with_capacity(live.len());
    for &i in &live {
        let r = &rows[i];
        let verified_zero = label_of(i) == Some(0)
            && (r.label_source.starts_with("claude") || r.label_source.starts_with("gold"))
            && r.trainable;
        let gate = if verified_zero {
            None
        } else if text_gates
            && r.junk.is_some()
            && !(r.truncated
                && opts.truncated != Truncated::Drop
                && r.junk == Some("long unfinished reply"))
        {
            Some("incomplete_junk")
        } else if text_gates
            && label_of(i).is_none()
            && opts.has_tools
            && r.wants_tool
            && !r.tool_call
        {
            Some("do_nothing")
        } else if label_of(i).is_none() {
            Some("unusable_label")
        } else {
            None
        };
        match gate {
            Some(g) => *report.gates.entry(g.to_owned()).or_insert(0) += 1,
            None => after.push(i),
        }
    }
    for g in ["do_nothing", "incomplete_junk", "unusable_label"] {
        report.gates.entry(g.to_owned()).or_insert(0);
    }
    report.n_after_gates = after.len();
    // Rows of one key, and rows that say the same thing, are found by sorting their hashes in
    // parallel: hash maps over a million rows, on one core, were three quarters of choosing.
    // Every row is sorted by key (the median rollouts per task counts them all).
    let all: Vec<usize> = (0..rows.len()).collect();
    // Rows of a task read together share their key's allocation.
    let same_key = |a: usize, b: usize| {
        let (a, b) = (&rows[a].key, &rows[b].key);
        if Arc::ptr_eq(a, b) {
            std::cmp::Ordering::Equal
        } else {
            a.cmp(b)
        }
    };
    let by_key = Runs::of(&all, |i| text_hash(&rows[i].key, 0), same_key);
    drop(all);
    let mut role = vec![GATED; rows.len()];
    for &i in &after {
        role[i] = PASSED;
    }
    // Duplicates within a prompt (with the text gates): the first row of each run is kept.
    if text_gates {
        let says = |i: usize| (&*rows[i].prompt, &*rows[i].signature, rows[i].final_norm);
        let same = |a: usize, b: usize| says(a).cmp(&says(b));
        let hash = |i: usize| {
            text_hash(
                &rows[i].signature,
                text_hash(&rows[i].prompt, rows[i].final_norm),
            )
        };
        let by_says = Runs::of(&after, hash, same);
        let mut dup_asks: foldhash::HashSet<&str> = foldhash::HashSet::default();
        for run in by_says.iter() {
            let first = run[0];
            for &i in &run[1..] {
                report.duplicates_dropped += 1;
                dup_asks.insert(&*rows[i].prompt);
                if label_of(first) != label_of(i) {
                    report.conflicting_rewards += 1;
                }
                role[i] = DUPLICATE;
            }
        }
        report.duplicate_asks = dup_asks.len();
    }
    // Truncated rows: riders do not vote.
    for &i in &after {
        if role[i] != PASSED {
            continue;
        }
        if rows[i].truncated {
            match opts.truncated {
                Truncated::Drop => {
                    *report.truncated.entry("dropped".into()).or_insert(0) += 1;
                    continue;
                }
                Truncated::Keep => {
                    *report.truncated.entry("kept".into()).or_insert(0) += 1;
                    role[i] = RIDER;
                    continue;
                }
                Truncated::Penalize => {
                    *report.truncated.entry("penalized".into()).or_insert(0) += 1;
                }
            }
        }
        role[i] = VOTING;
    }
    // Groups (a key's voting rows in row order, and its riders): unanimous, then collapsed.
    // Their order here does not matter: they are ordered below by fault, pass rate and a hash
    // of the key.
    let per_task: Vec<usize> = by_key.iter().map(<[usize]>::len).collect();
    let fates: Vec<Fate> = {
        use rayon::prelude::*;
        (0..by_key.ends.len())
            .into_par_iter()
            .map(|r| {
                let run = by_key.run(r);
                let in_role = |k: u8| -> Vec<usize> {
                    run.iter().copied().filter(|&i| role[i] == k).collect()
                };
                let members = in_role(VOTING);
                if members.is_empty() {
                    return Fate::Empty;
                }
                let rows_after_gates = run.iter().filter(|&&i| role[i] != GATED).count();
                let labels: Vec<u8> = members.iter().filter_map(|&i| label_of(i)).collect();
                let unanimous = labels.len() >= 2 && labels.iter().all(|l| *l == labels[0]);
                if unanimous {
                    Fate::Unanimous
                } else if labels.len() < 2 && rows_after_gates >= 2 {
                    Fate::Collapsed
                } else {
                    let key = Arc::clone(&rows[members[0]].key);
                    Fate::Kept(key, members, labels, in_role(RIDER))
                }
            })
            .collect()
    };
    drop(by_key);
    // The band, on the groups kept.
    let (lo, hi) = opts.band;
    let mut banded = Vec::new();
    for fate in fates {
        let (key, mut members, labels, riders) = match fate {
            Fate::Empty => continue,
            Fate::Unanimous => {
                report.unanimous_groups_dropped += 1;
                continue;
            }
            Fate::Collapsed => {
                report.collapsed_groups_dropped += 1;
                report.unanimous_groups_dropped += 1;
                continue;
            }
            Fate::Kept(key, members, labels, riders) => (key, members, labels, riders),
        };
        let n = labels.len();
        let p = if n == 0 {
            f64::NAN
        } else {
            labels.iter().map(|l| f64::from(*l)).sum::<f64>() / n as f64
        };
        if n >= 2 && p > 0.0 && p < 1.0 {
            if p > hi {
                *report.band_dropped.entry("too_easy".into()).or_insert(0) += 1;
                continue;
            }
            if p < lo {
                *report.band_dropped.entry("too_hard".into()).or_insert(0) += 1;
                continue;
            }
        }
        // Riders rejoin their groups.
        members.extend(riders);
        banded.push((key, members, p));
    }
    report.band_dropped.entry("too_easy".into()).or_insert(0);
    report.band_dropped.entry("too_hard".into()).or_insert(0);
    // Order: buckets by fault kind; within one, spread over pass rates; round-robin buckets.
    let mut buckets: BTreeMap<Arc<str>, Vec<Group>> = BTreeMap::new();
    for g in banded {
        buckets
            .entry(Arc::clone(&rows[g.1[0]].fault_kind))
            .or_default()
            .push(g);
    }
    let mut ordered_buckets: Vec<(Arc<str>, Vec<Group>)> = buckets
        .into_iter()
        .map(|(kind, gs)| {
            // In-band asks (mixed, inside the band) before the rest; within each, one ask per
            // distinct pass rate in turn, rates ascending; ties by a hash of the key.
            let in_band = |p: f64| !p.is_nan() && p > 0.0 && p < 1.0 && p >= lo && p <= hi;
            let (inside, outside): (Vec<_>, Vec<_>) = gs.into_iter().partition(|g| in_band(g.2));
            let mut spread = spread_rates(inside);
            spread.extend(spread_rates(outside));
            (kind, spread)
        })
        .collect();
    fn spread_rates(gs: Vec<Group>) -> Vec<Group> {
        {
            let mut by_rate: BTreeMap<i64, Vec<Group>> = BTreeMap::new();
            for g in gs {
                by_rate
                    .entry(if g.2.is_nan() {
                        i64::MAX
                    } else {
                        (g.2 * 1e6).round() as i64
                    })
                    .or_default()
                    .push(g);
            }
            for v in by_rate.values_mut() {
                // By a hash of the key, made in parallel; reversed, to pop from the end.
                use rayon::prelude::*;
                let mut keyed: Vec<(String, Group)> = std::mem::take(v)
                    .into_par_iter()
                    .map(|g| (sha256_hex(&format!(":{}", g.0)), g))
                    .collect();
                keyed.sort_by(|a, b| a.0.cmp(&b.0));
                *v = keyed.into_iter().rev().map(|(_, g)| g).collect();
            }
            let mut spread = Vec::new();
            loop {
                let mut any = false;
                for v in by_rate.values_mut() {
                    if let Some(g) = v.pop() {
                        spread.push(g);
                        any = true;
                    }
                }
                if !any {
                    break;
                }
            }
            spread
        }
    }
    ordered_buckets.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    let mut chosen = Vec::new();
    let mut cursors = vec![0usize; ordered_buckets.len()];
    'fill: loop {
        let mut any = false;
        for (b, (kind, gs)) in ordered_buckets.iter().enumerate() {
            if chosen.len() >= opts.target {
                break 'fill;
            }
            if let Some(g) = gs.get(cursors[b]) {
                cursors[b] += 1;
                any = true;
                *report.fault_kinds.entry(kind.to_string()).or_insert(0) += 1;
                report.groups_selected += 1;
                chosen.extend(g.1.iter().copied());
            }
        }
        if !any {
            break;
        }
    }
    report.n_selected = chosen.len();
    report.eval_sourced = chosen.iter().filter(|&&i| rows[i].eval_sourced).count();
    // The chosen rows the truncation marking touched (stamped `overlong` on output).
    let marked: Vec<usize> = chosen
        .iter()
        .copied()
        .filter(|&i| rows[i].truncated && opts.truncated != Truncated::Drop)
        .collect();
    // Warnings.
    if report.duplicates_dropped > 0 {
        let mut w = format!(
            "{} duplicate rollout(s) within {} ask(s) dropped",
            report.duplicates_dropped, report.duplicate_asks
        );
        if report.conflicting_rewards > 0 {
            w.push_str(&format!(
                "; {} identical trajectories got different rewards, which is judge noise",
                report.conflicting_rewards
            ));
        }
        report.warnings.push(w);
    }
    let mut counts = per_task;
    counts.sort_unstable();
    let median = counts.get(counts.len() / 2).copied().unwrap_or(0);
    if median > 0 && median < 16 {
        report.warnings.push(format!(
            "difficulty was measured from {median} rollouts per task, so a task's band assignment can be off by about ±{:.1}; simulate with --repeats 16 for a firmer band",
            1.0 / (median as f64).sqrt() / 2.0 * 1.2
        ));
    }
    if report.eval_sourced > 0 {
        report.warnings.push(format!(
            "{} selected row(s) carry rewards from an eval (lineage.source == \"eval\"); training on them turns the held-out scorer into the reward model",
            report.eval_sourced
        ));
    }
    if chosen.is_empty() {
        report.warnings.push("nothing selected: no task has both a pass and a fail among its kept rows; simulate more rollouts per ask (--repeats 8) or widen --band".into());
    }
    (chosen, marked, report)
}

/// SFT selection: the indices of the chosen rows, in order, and the report.
pub fn sft(rows: &[RowInfo], opts: &Options) -> (Vec<usize>, Report) {
    let mut report = empty_report("sft", rows.len(), opts);
    let live = leak_gate(rows, &mut report);
    // Completions per prompt, over the input.
    let mut per_prompt: HashMap<String, usize> = HashMap::default();
    for r in rows {
        *per_prompt.entry(normalize(&r.prompt)).or_insert(0) += 1;
    }
    let mut c: Vec<usize> = per_prompt.values().copied().collect();
    c.sort_unstable();
    let mean = if c.is_empty() {
        0.0
    } else {
        c.iter().sum::<usize>() as f64 / c.len() as f64
    };
    let median = if c.is_empty() {
        0.0
    } else if c.len() % 2 == 1 {
        c[c.len() / 2] as f64
    } else {
        (c[c.len() / 2 - 1] + c[c.len() / 2]) as f64 / 2.0
    };
    report.completions_per_prompt = (
        c.last().copied().unwrap_or(0),
        mean,
        median,
        c.iter().filter(|n| **n == 1).count(),
    );
    // Eligible: passing, not junk.
    let mut eligible = Vec::new();
    for &i in &live {
        let r = &rows[i];
        if r.reward.is_none_or(|x| x < opts.min_reward) {
            report.n_not_pass += 1;
        } else if r.junk.is_some() {
            report.n_junk += 1;
        } else {
            eligible.push(i);
        }
    }
    // One per prompt: the highest reward, ties by a hash of the signature and the prompt.
    let mut best: HashMap<String, usize> = HashMap::default();
    let mut order: Vec<String> = Vec::new();
    for &i in &eligible {
        let p = normalize(&rows[i].prompt);
        let tie = |j: usize| sha256_hex(&format!("{}:{}", rows[j].signature, p));
        match best.get(&p).copied() {
            None => {
                order.push(p.clone());
                best.insert(p, i);
            }
            Some(j) => {
                let (ri, rj) = (rows[i].reward.unwrap_or(0.0), rows[j].reward.unwrap_or(0.0));
                if ri > rj || (ri == rj && tie(i) < tie(j)) {
                    best.insert(p, i);
                }
            }
        }
    }
    let picked: Vec<usize> = order.iter().map(|p| best[p]).collect();
    report.n_eligible = picked.len();
    // Every distinct way of being right before any repeat.
    let mut buckets: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for &i in &picked {
        buckets
            .entry(rows[i].signature.to_string())
            .or_default()
            .push(i);
    }
    for (sig, v) in &mut buckets {
        v.sort_by_cached_key(|&i| sha256_hex(&format!("{sig}:{}", rows[i].prompt)));
        v.reverse();
    }
    let mut ordered: Vec<(String, Vec<usize>)> = buckets.into_iter().collect();
    ordered.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    report.behaviors.0 = ordered.len();
    let mut chosen = Vec::new();
    'fill: loop {
        let mut any = false;
        for (_, v) in &mut ordered {
            if chosen.len() >= opts.target {
                break 'fill;
            }
            if let Some(i) = v.pop() {
                chosen.push(i);
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    let covered: std::collections::HashSet<&str> =
        chosen.iter().map(|&i| &*rows[i].signature).collect();
    report.behaviors.1 = covered.len();
    report.n_selected = chosen.len();
    report.eval_sourced = chosen.iter().filter(|&&i| rows[i].eval_sourced).count();
    if report.eval_sourced > 0 {
        report.warnings.push(format!(
            "{} selected row(s) carry rewards from an eval (lineage.source == \"eval\"); training on them turns the held-out scorer into the reward model",
            report.eval_sourced
        ));
    }
    if mean < 10.0 && !c.is_empty() {
        report.warnings.push(format!(
            "completions per prompt: mean {mean:.1}, median {median}, max {}; {} of {} prompts have one. Choosing among completions wants 10 to 30 per prompt so the pick is not biased; simulate more (--repeats) if you mean to choose rather than filter",
            report.completions_per_prompt.0,
            report.completions_per_prompt.3,
            c.len()
        ));
    }
    if chosen.is_empty() {
        report.warnings.push(format!(
            "nothing selected: no row reaches reward {}",
            opts.min_reward
        ));
    }
    (chosen, report)
}

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

/// Preference-pair settings.
#[derive(Debug, Clone)]
pub struct PairOptions {
    /// Smallest reward gap between the chosen and the rejected reply.
    pub min_margin: f64,
    /// Pairs per ask at most.
    pub max_pairs_per_prompt: usize,
    /// Pick the rejected reply closest in length to the chosen one.
    pub length_match: bool,
}

/// What pair building did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PairReport {
    /// Pairs made.
    pub pairs: usize,
    /// Asks seen (task and prompt).
    pub prompts_seen: usize,
    /// Asks with replies far enough apart.
    pub prompts_with_contrast: usize,
    /// The margin asked for.
    pub min_margin: f64,
    /// Mean reward gap.
    pub mean_margin: f64,
    /// Pairs where a side has a partial score.
    pub partial_score_pairs: usize,
    /// Pairs whose first turn is the same (the difference comes later).
    pub first_turn_identical: usize,
    /// Pairs whose chosen reply is the longer.
    pub chosen_longer: usize,
    /// Rows skipped: not judged ok, or no reward in [0, 1].
    pub skipped: usize,
    /// Rows left out for quoting their privileged context.
    pub leaks_dropped: usize,
    /// Pairs with an eval-sourced side.
    pub eval_sourced: usize,
    /// What a person should know.
    pub warnings: Vec<String>,
}

/// Characters of every assistant turn, plus the final reply when it is not the last turn.
fn reply_chars(row: &Map<String, Value>) -> usize {
    let msgs = messages_of(row);
    let mut n = 0;
    let mut last = String::new();
    for m in msgs.iter() {
        if m.get("role").and_then(Value::as_str) == Some("assistant") {
            let c = m.get("content").and_then(Value::as_str).unwrap_or("");
            n += c.chars().count();
            last = c.to_owned();
        }
    }
    let f = row.get("final_text").and_then(Value::as_str).unwrap_or("");
    if f != last {
        n += f.chars().count();
    }
    n
}

fn first_turn(row: &Map<String, Value>) -> String {
    if row
        .get("steps")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
        && let Some(msgs) = row.get("messages").and_then(Value::as_array)
    {
        for m in msgs
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        {
            if let Some(c) = m
                .get("tool_calls")
                .and_then(Value::as_array)
                .and_then(|c| c.first())
            {
                let f = c.get("function").unwrap_or(c);
                return format!(
                    "{}:{}",
                    f.get("name").and_then(Value::as_str).unwrap_or(""),
                    crate::pipeline::row::canonical_json(
                        f.get("arguments").unwrap_or(&Value::Null)
                    )
                );
            }
            if let Some(t) = m
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                return t.to_owned();
            }
        }
    }
    for s in row
        .get("steps")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(t) = s.get("tool").and_then(Value::as_str) {
            return format!(
                "{t}:{}",
                crate::pipeline::row::canonical_json(s.get("arguments").unwrap_or(&Value::Null))
            );
        }
        if let Some(t) = s
            .get("text")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            return t.to_owned();
        }
    }
    row.get("final_text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// What pairing needs of one row.
#[derive(Debug, Clone, PartialEq)]
pub enum PairRow {
    /// Not judged ok, or no reward in [0, 1].
    Skipped,
    /// A reply that quotes its privileged context: no side of a pair.
    Leak,
    /// A candidate side.
    Candidate {
        /// The ask: task (or scenario) and normalized prompt.
        key: String,
        /// Its reward, in [0, 1].
        reward: f64,
        /// Its reply's characters, when pairs are length-matched.
        chars: Option<usize>,
    },
}

/// Row `r` as pairing reads it (`chars` counted when `length_match`).
pub fn pair_row(r: &Map<String, Value>, length_match: bool) -> PairRow {
    let ok = r
        .get("judge_status")
        .and_then(Value::as_str)
        .is_none_or(|s| s == "ok");
    let reward = r
        .get("reward")
        .filter(|v| !v.is_boolean())
        .and_then(Value::as_f64)
        .filter(|x| (0.0..=1.0).contains(x));
    let Some(reward) = reward.filter(|_| ok) else {
        return PairRow::Skipped;
    };
    if leak(r, &messages_of(r)).1.is_some() {
        return PairRow::Leak;
    }
    let key = format!(
        "{}\u{1f}{}",
        ["scenario_id", "task_id"]
            .iter()
            .find_map(|k| r
                .get(*k)
                .filter(|v| !v.is_null())
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
            .unwrap_or_default(),
        normalize(r.get("prompt").and_then(Value::as_str).unwrap_or(""))
    );
    PairRow::Candidate {
        key,
        reward,
        chars: length_match.then(|| reply_chars(r)),
    }
}

/// One planned pair: the chosen and rejected rows (positions in the input) and their scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pairing {
    /// The chosen row.
    pub chosen: usize,
    /// The rejected row.
    pub rejected: usize,
    /// The chosen row's reward.
    pub chosen_score: f64,
    /// The rejected row's reward.
    pub rejected_score: f64,
}

/// The pairs to make from `rows` (as [`pair_row`] read them), in output order: replies to the
/// same ask, at least `min_margin` apart in reward, each row used once. The report holds what
/// the rows alone say; [`build_pairs`] adds what the paired rows say.
pub fn plan_pairs(rows: &[PairRow], opts: &PairOptions) -> (Vec<Pairing>, PairReport) {
    let mut report = PairReport {
        min_margin: opts.min_margin,
        ..PairReport::default()
    };
    let mut groups: Vec<Vec<(usize, f64, Option<usize>)>> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::default();
    for (i, r) in rows.iter().enumerate() {
        match r {
            PairRow::Skipped => report.skipped += 1,
            PairRow::Leak => report.leaks_dropped += 1,
            PairRow::Candidate { key, reward, chars } => {
                let g = *index.entry(key.as_str()).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[g].push((i, *reward, *chars));
            }
        }
    }
    report.prompts_seen = groups.len();
    let mut plan = Vec::new();
    for mut members in groups {
        // Best first; ties in file order.
        members.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut used = vec![false; members.len()];
        let length = |j: usize| members[j].2.unwrap_or(0) as i64;
        let mut made = 0;
        for c in 0..members.len() {
            if made >= opts.max_pairs_per_prompt || used[c] {
                continue;
            }
            let (ci, cs, _) = members[c];
            let candidates = (0..members.len())
                .filter(|&j| j != c && !used[j] && cs - members[j].1 >= opts.min_margin - 1e-12);
            let pick = if opts.length_match {
                let len = length(c);
                candidates.min_by_key(|&j| (length(j) - len).abs())
            } else {
                candidates.into_iter().next()
            };
            let Some(j) = pick else { continue };
            used[c] = true;
            used[j] = true;
            made += 1;
            plan.push(Pairing {
                chosen: ci,
                rejected: members[j].0,
                chosen_score: cs,
                rejected_score: members[j].1,
            });
        }
        if made > 0 {
            report.prompts_with_contrast += 1;
        }
    }
    (plan, report)
}

/// The pair records of `plan`, with `row(i)` the input's row `i` (every row `plan` names), and
/// the report completed with what the paired rows say, and its warnings.
pub fn build_pairs<'r>(
    plan: &[Pairing],
    row: impl Fn(usize) -> &'r Map<String, Value>,
    mut report: PairReport,
) -> (Vec<Value>, PairReport) {
    let mut out = Vec::with_capacity(plan.len());
    let mut margins = 0.0;
    for p in plan {
        let (chosen, rejected) = (row(p.chosen), row(p.rejected));
        let (cs, rs) = (p.chosen_score, p.rejected_score);
        let margin = ((cs - rs) * 1e6).round() / 1e6;
        margins += margin;
        let model = |r: &Map<String, Value>| r.get("model_version").cloned().unwrap_or(Value::Null);
        let same_policy = match (chosen.get("model_version"), rejected.get("model_version")) {
            (Some(a), Some(b)) => Value::Bool(a == b),
            _ => Value::Null,
        };
        let (lc, lr) = (reply_chars(chosen), reply_chars(rejected));
        report.chosen_longer += usize::from(lc > lr);
        let differs = first_turn(chosen) != first_turn(rejected);
        report.first_turn_identical += usize::from(!differs);
        report.partial_score_pairs +=
            usize::from(![0.0, 1.0].contains(&cs) || ![0.0, 1.0].contains(&rs));
        let eval = |r: &Map<String, Value>| {
            r.get("lineage")
                .and_then(|l| l.get("source"))
                .and_then(Value::as_str)
                == Some("eval")
        };
        report.eval_sourced += usize::from(eval(chosen) || eval(rejected));
        let failure = rejected
            .get("failure_class")
            .or_else(|| {
                rejected
                    .get("judge_meta")
                    .and_then(|m| m.get("failure_class"))
            })
            .cloned()
            .unwrap_or(Value::Null);
        out.push(serde_json::json!({
            "prompt": chosen.get("prompt").cloned().unwrap_or(Value::Null),
            "chosen": Value::Object(chosen.clone()),
            "rejected": Value::Object(rejected.clone()),
            "chosen_score": cs, "rejected_score": rs, "margin": margin,
            "chosen_model": model(chosen), "rejected_model": model(rejected), "same_policy": same_policy,
            "length_delta": lc as i64 - lr as i64, "first_turn_differs": differs,
            "chosen_reason": chosen.get("reason").cloned().unwrap_or(Value::Null),
            "rejected_reason": rejected.get("reason").cloned().unwrap_or(Value::Null),
            "rejected_failure_class": failure,
            "lineage": {"chosen": chosen.get("lineage").cloned().unwrap_or(Value::Null), "rejected": rejected.get("lineage").cloned().unwrap_or(Value::Null)},
        }));
    }
    report.pairs = out.len();
    report.mean_margin = if out.is_empty() {
        0.0
    } else {
        margins / out.len() as f64
    };
    let n = out.len();
    if (n >= 8 && report.chosen_longer * 4 >= n * 3) || (n >= 3 && report.chosen_longer == n) {
        report.warnings.push(format!(
            "the chosen reply is the longer one in {} of {n} pairs: a preference trainer will learn length; pass --length-match",
            report.chosen_longer
        ));
    }
    if report.eval_sourced > 0 {
        report.warnings.push(format!("{} pair(s) hold rewards from an eval (lineage.source == \"eval\"); training on them turns the held-out scorer into the reward model", report.eval_sourced));
    }
    if n == 0 {
        report.warnings.push(format!(
            "no pairs: no ask has two judged replies at least {} apart in reward",
            report.min_margin
        ));
    }
    (out, report)
}

impl std::fmt::Display for PairReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "preference pairs: {} from {} of {} asks (margin >= {}, mean {:.2}); first turn identical in {}; chosen longer in {}; {} rows skipped (not judged ok), {} for privileged leaks",
            self.pairs,
            self.prompts_with_contrast,
            self.prompts_seen,
            self.min_margin,
            self.mean_margin,
            self.first_turn_identical,
            self.chosen_longer,
            self.skipped,
            self.leaks_dropped
        )?;
        for w in &self.warnings {
            writeln!(f, "  warning: {w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pipeline::row::testing::{ROW_FIXTURES, batch_of, fixture};

    /// Rows are put in runs by what they say, in row order, whether their hashes are the texts'
    /// own or all collide (then the texts tell them apart).
    #[test]
    fn runs_hold_the_rows_that_say_the_same_in_row_order() {
        let texts = ["b", "a", "b", "c", "a", "b", "d"];
        let of: Vec<usize> = (0..texts.len()).collect();
        let same = |a: usize, b: usize| texts[a].cmp(texts[b]);
        let runs_of = |runs: &Runs| {
            let mut r: Vec<Vec<usize>> = runs.iter().map(<[usize]>::to_vec).collect();
            r.sort();
            r
        };
        let want = vec![vec![0, 2, 5], vec![1, 4], vec![3], vec![6]];
        let own = Runs::of(&of, |i| text_hash(texts[i], 0), same);
        assert_eq!(runs_of(&own), want);
        let colliding = Runs::of(&of, |_| 7, same);
        assert_eq!(runs_of(&colliding), want);
        // Some collide, some do not.
        let some = Runs::of(&of, |i| u64::from(texts[i] > "a"), same);
        assert_eq!(runs_of(&some), want);
        // Only the rows asked for.
        let part = Runs::of(&[2, 3, 5], |_| 1, same);
        assert_eq!(runs_of(&part), vec![vec![2, 5], vec![3]]);
        // A run by its number is the run the iterator gives.
        for (r, run) in own.iter().enumerate() {
            assert_eq!(own.run(r), run);
        }
    }

    /// A row without a signature gets the reference's stand-in, `sha256_hex("calls|dozens")`
    /// cut to 12 digits, whatever its calls and length.
    #[test]
    fn stand_in_signatures_are_the_hash_of_calls_and_length() {
        for (tools, dozens) in [
            (vec![], 0),
            (vec!["check_status"], 3),
            (vec!["lookup_order", "issue_refund", "lookup_order"], 12_345),
            (vec!["", "ünïcode"], usize::MAX),
        ] {
            let want = sha256_hex(&format!("{}|{}", tools.join(","), dozens))[..12].to_owned();
            assert_eq!(
                stand_in_signature(&tools, dozens),
                want,
                "{tools:?} {dozens}"
            );
        }
    }

    /// The two readings of `read_summaries` (a few columns of every row, then the rows the
    /// column path leaves over, whole) give every row of every fixture file its general summary.
    fn summaries_read_from_files_equal_the_general_ones() {
        use crate::pipeline::io::{OnBadRow, ParquetSink, Sink};
        use crate::pipeline::source::{Format, Input, Location};
        let dir = tempfile::tempdir().expect("temp dir");
        let mut inputs = Vec::new();
        let mut want = Vec::new();
        let mut general = 0;
        for (k, (name, rows)) in [("made", made_rows())]
            .into_iter()
            .chain(ROW_FIXTURES.into_iter().map(|f| (f, fixture(f))))
            .enumerate()
        {
            let batch = batch_of(rows);
            general += row_infos(&batch).expect("summaries").1;
            want.extend(columns::general_infos(&batch).expect("summaries"));
            let path = dir.path().join(format!("{k}.parquet"));
            // The first file also has a column of its own that cannot hold nulls (as files
            // from other writers may): it cannot be left out, so that file is read whole.
            let batch = if k == 0 {
                use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
                use datafusion::arrow::datatypes::{DataType, Field, Schema};
                let mut fields: Vec<Field> = batch
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone())
                    .collect();
                fields.push(Field::new("id", DataType::Int64, false));
                let mut columns = batch.columns().to_vec();
                let n = i64::try_from(batch.num_rows()).expect("small");
                columns.push(std::sync::Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef);
                RecordBatch::try_new(std::sync::Arc::new(Schema::new(fields)), columns)
                    .expect("batch")
            } else {
                batch
            };
            if k % 2 == 0 {
                let mut sink = Box::new(ParquetSink::create(&path, batch.schema()).expect("sink"));
                sink.write(&batch).expect("written");
                sink.finish().expect("finished");
            } else {
                // Row groups of 7 rows, in batches of 3: several groups are summarized at once,
                // on the decoding threads, each batch in its place.
                let props = datafusion::parquet::file::properties::WriterProperties::builder()
                    .set_max_row_group_row_count(Some(7))
                    .build();
                let file = std::fs::File::create(&path).expect("file");
                let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
                    file,
                    batch.schema(),
                    Some(props),
                )
                .expect("writer");
                for at in (0..batch.num_rows()).step_by(3) {
                    w.write(&batch.slice(at, 3.min(batch.num_rows() - at)))
                        .expect("written");
                }
                w.close().expect("closed");
            }
            inputs.push(Input {
                display: name.to_owned(),
                location: Location::Local(path),
                format: Format::Parquet,
                size: None,
            });
        }
        // Some rows need the second, whole reading.
        assert!(general > 0);
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let mut reader = crate::pipeline::read::Reader::new(
            runtime.handle().clone(),
            OnBadRow::Fail,
            Box::new(|_| {}),
        );
        let (got, counts) = read_summaries(&mut reader, &inputs).expect("read");
        assert_eq!(counts.len(), inputs.len());
        assert_eq!(counts.iter().sum::<usize>(), want.len());
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a, b, "row {i}");
        }
    }

    /// Rows made to reach every gate the fixtures do not: truncation four ways, harness text,
    /// markup, a long unfinished reply with and without `overlong`, an eval source, a leak in a
    /// middle turn, a planned fault, a bare question back.
    pub(crate) fn made_rows() -> Vec<Value> {
        let long = "word ".repeat(130);
        let msgs = |reply: &str| {
            serde_json::json!([{"role": "user", "content": "Refund A1001 please"},
                {"role": "assistant", "content": "Let me check The Entity Does Not Exist here.", "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"id": "A1001"}}]},
                {"role": "tool", "content": "{\"status\": \"timeout\"}", "tool_call_id": "c1"},
                {"role": "assistant", "content": reply}])
        };
        let base = |i: usize, reply: &str| {
            serde_json::json!({"task_id": format!("t{}", i % 3), "prompt": "Refund A1001 please", "messages": msgs(reply),
                "steps": [{"tool": "lookup", "arguments": {"id": "A1001"}, "result": {"status": "timeout"}}],
                "final_text": reply, "reward": (i % 2) as f64, "finish_reason": "stop",
                "privileged": {"reference": "the entity does not exist here", "hidden_state": ["x"]}})
        };
        let mut rows = Vec::new();
        for (i, reply) in [
            "Done.",
            &long,
            "see the scene brief",
            "<tool_call>{}</tool_call>",
            "Why?",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "",
        ]
        .into_iter()
        .enumerate()
        {
            rows.push(base(i, reply));
        }
        let mut r = base(7, &long);
        r["overlong"] = Value::Bool(true);
        rows.push(r);
        let mut r = base(8, "Done.");
        r["finish_reason"] = "length".into();
        rows.push(r);
        let mut r = base(9, "Done.");
        r["reason"] = "Reply was CUT OFF".into();
        r["lineage"] = serde_json::json!({"source": "eval"});
        rows.push(r);
        let mut r = base(10, "Done.");
        r["steps"][0]["truncated"] = Value::Bool(true);
        r["faults"] = serde_json::json!({"lookup": {"mode": "stale"}});
        r["steps"][0]["result"] = serde_json::json!({"status": "ok"});
        r["scenario_id"] = serde_json::json!(42);
        rows.push(r);
        let mut r = base(11, "Done.");
        r["privileged"] = serde_json::json!("not an object");
        r["reward"] = serde_json::json!(0.5);
        r["label_source"] = "gold".into();
        rows.push(r);
        // A thinking block, a call without an id and with string arguments, a tool turn that
        // names no call, a system turn.
        rows.push(serde_json::json!({"task_id": "t0", "prompt": "Where is A1?", "final_text": "<think>plan</think> It shipped.",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is A1?"},
                {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": "{\"id\": \"A1\"}"}}]},
                {"role": "tool", "content": "{\"status\": \"ok\", \"data\": \"shipped on Monday\"}"},
                {"role": "assistant", "content": "<think>plan</think> It shipped."}],
            "reward": 1, "lineage": {"source": "eval", "system_prompt_sha": "abc"}, "tools_used": ["lookup"]}));
        rows
    }

    #[test]
    fn fast_text_helpers_agree_with_their_plain_forms() {
        let plain_repeat = |s: &str| {
            let mut best = 0;
            let mut run = 0;
            let mut prev = None;
            for c in s.chars() {
                run = if Some(c) == prev { run + 1 } else { 1 };
                prev = Some(c);
                best = best.max(run);
            }
            best >= 30
        };
        for s in [
            String::new(),
            "a".repeat(29),
            "a".repeat(30),
            format!("b{}b", "a".repeat(29)),
            format!("{}{}", "x".repeat(17), "y".repeat(30)),
            format!("{}{}z", "x".repeat(14), "y".repeat(31)),
            format!("é{}", "a".repeat(30)),
            " a\tb\x0bc \x0cd\r\n e  ".into(),
            "\u{2003}two\u{a0}words\u{85}".into(),
            // Separators Python splits on but `split_whitespace` does not.
            "\x1ca\x1fb c".into(),
            "   ".into(),
            "x".into(),
            "\x08tab\x0e".into(),
        ] {
            assert_eq!(repeats_30(&s), plain_repeat(&s), "{s:?}");
            assert_eq!(word_count(&s), s.split_whitespace().count(), "{s:?}");
        }
        // Longer texts of every kind of white space, and a separator it does not split on.
        let mut state = 7u64;
        for len in 0..300 {
            let text: String = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    [' ', '\t', '\n', 'a', 'b', '\x0b', '\x0c', '\r', 'c', '\x1c']
                        [(state >> 60) as usize % 10]
                })
                .collect();
            assert_eq!(
                word_count(&text),
                text.split_whitespace().count(),
                "{text:?}"
            );
        }
        // Every ASCII byte is white space exactly when its character is.
        for b in 0..128u8 {
            assert_eq!(white(b), char::from(b).is_whitespace(), "{b:#x}");
        }
        assert_eq!(norm_hash("A  b\tC"), norm_hash("a b c"));
        assert_ne!(norm_hash("a b c"), norm_hash("a bc"));
    }

    #[test]
    fn column_summaries_equal_the_general_ones_on_every_fixture() {
        let mut fast_rows = 0;
        let mut seen = std::collections::BTreeSet::new();
        for (fixture, rows) in [("made", made_rows())]
            .into_iter()
            .chain(ROW_FIXTURES.into_iter().map(|f| (f, fixture(f))))
        {
            let batch = batch_of(rows);
            let (fast, general) = row_infos(&batch).expect("summaries");
            let slow = columns::general_infos(&batch).expect("summaries");
            assert_eq!(fast.len(), slow.len());
            for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
                assert_eq!(a, b, "{fixture} row {i}");
            }
            fast_rows += batch.num_rows() - general;
            for r in &fast {
                seen.extend(r.junk);
                seen.extend(r.leak.as_ref().map(|_| "leak"));
                seen.extend(r.truncated.then_some("truncated"));
                seen.extend(r.eval_sourced.then_some("eval"));
            }
        }
        // The column path is the one taken, not only the fallback.
        assert!(fast_rows > 400, "{fast_rows} rows took the column path");
        summaries_read_from_files_equal_the_general_ones();
        // What the rows reach, so the equality above covers it.
        for what in [
            "leak",
            "truncated",
            "eval",
            "harness text",
            "raw tool markup",
            "long unfinished reply",
            "a character repeated 30 times",
            "empty final reply",
        ] {
            assert!(seen.contains(what), "no row reached {what}: {seen:?}");
        }
    }
}
