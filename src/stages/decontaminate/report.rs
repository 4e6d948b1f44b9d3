//! The decontamination report: counts as rows stream past, then the report and its text.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::{EXAMPLES, EvalIndex, Hit, Options, Rule};

/// The decontamination report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Training rows read.
    pub n: u64,
    /// Kept.
    pub n_kept: u64,
    /// Dropped.
    pub n_contaminated: u64,
    /// Dropped share (4 places).
    pub contamination_rate: f64,
    /// Dropped by `same_task`.
    pub n_same_task: u64,
    /// Dropped as exact copies.
    pub n_exact: u64,
    /// Dropped as near copies.
    pub n_near: u64,
    /// Dropped by `semantic`.
    pub n_semantic: u64,
    /// Eval rows read.
    pub n_eval_rows: u64,
    /// Distinct eval texts indexed.
    pub n_eval_texts: u64,
    /// Eval texts (and prompts, for the semantic rule) that some training row hit.
    pub eval_items_touched: u64,
    /// Eval tasks some training row shares (the `same_task` rule's hits).
    pub eval_tasks_touched: u64,
    /// Words per n-gram.
    pub ngram: usize,
    /// The coverage that flags.
    pub overlap: f64,
    /// The similarity that flags (with an embedder).
    pub similarity: Option<f64>,
    /// The compared fields.
    pub fields: Vec<String>,
    /// Dropped by field (`task` for same task).
    pub by_field: BTreeMap<String, u64>,
    /// The first flagged rows.
    pub examples: Vec<Hit>,
    /// Rules that could not run, and why.
    pub rules_skipped: BTreeMap<String, String>,
    /// The 99th percentile of similarity between distinct eval tasks (with an embedder).
    pub calibration_p99: Option<f64>,
    /// What to read.
    pub notes: Vec<String>,
    /// Each note's stable code, in the order of `notes`.
    #[serde(skip)]
    pub note_codes: Vec<&'static str>,
}

/// Counts of training rows as they stream past.
#[derive(Debug, Default)]
pub struct Tally {
    /// Rows read.
    pub n: u64,
    /// Rows with a recorded task id.
    pub with_task: u64,
    /// Hits, by rule.
    pub by_rule: BTreeMap<Rule, u64>,
    /// Hits, by field.
    pub by_field: BTreeMap<String, u64>,
    /// The first hits.
    pub examples: Vec<Hit>,
    /// Eval texts hit.
    pub texts_hit: BTreeSet<u32>,
    /// Eval prompts hit (semantic).
    pub prompts_hit: BTreeSet<usize>,
    /// Eval tasks a training row shares (`same_task`).
    pub tasks_hit: BTreeSet<String>,
}

impl Tally {
    /// Counts `hit`.
    pub fn add(&mut self, hit: Hit) {
        *self.by_rule.entry(hit.rule).or_default() += 1;
        *self.by_field.entry(hit.field.clone()).or_default() += 1;
        if let (Rule::SameTask, Some(task)) = (hit.rule, &hit.task) {
            self.tasks_hit.insert(task.clone());
        }
        match (hit.rule, hit.eval_text) {
            (Rule::Semantic, Some(p)) => {
                self.prompts_hit.insert(p as usize);
            }
            (_, Some(t)) => {
                self.texts_hit.insert(t);
            }
            (_, None) => {}
        }
        if self.examples.len() < EXAMPLES {
            self.examples.push(hit);
        }
    }
}

impl Report {
    /// Adds a note, under a stable `code` (for the `--json` envelope's warnings).
    pub fn note(&mut self, code: &'static str, text: String) {
        self.notes.push(text);
        self.note_codes.push(code);
    }

    /// The notes with their codes.
    pub fn coded_notes(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.note_codes
            .iter()
            .copied()
            .zip(self.notes.iter().map(String::as_str))
    }
}

/// The report of `tally` against `index`. Its notes name options by their keys in backticks
/// (`` `embedder` ``, `` `similarity` ``) and the eval rows as `` `against` ``.
pub fn report(
    index: &EvalIndex,
    opts: &Options,
    tally: Tally,
    embedder: bool,
    calibration: Option<(f64, usize)>,
) -> Report {
    let count = |r: Rule| tally.by_rule.get(&r).copied().unwrap_or(0);
    let dropped: u64 = tally.by_rule.values().sum();
    let mut examples = tally.examples;
    examples.sort_by_key(|h| h.index);
    let mut report = Report {
        n: tally.n,
        n_kept: tally.n - dropped,
        n_contaminated: dropped,
        contamination_rate: if tally.n > 0 {
            crate::stats::round_places(dropped as f64 / tally.n as f64, 4)
        } else {
            0.0
        },
        n_same_task: count(Rule::SameTask),
        n_exact: count(Rule::Exact),
        n_near: count(Rule::Near),
        n_semantic: count(Rule::Semantic),
        n_eval_rows: index.n_rows,
        n_eval_texts: index.texts.len() as u64,
        eval_items_touched: (tally.texts_hit.len() + tally.prompts_hit.len()) as u64,
        eval_tasks_touched: tally.tasks_hit.len() as u64,
        ngram: opts.n,
        overlap: opts.overlap.clamp(0.0, 1.0),
        similarity: opts.similarity,
        fields: opts.fields.clone(),
        by_field: tally.by_field,
        examples,
        rules_skipped: BTreeMap::new(),
        calibration_p99: calibration.map(|c| c.0),
        notes: Vec::new(),
        note_codes: Vec::new(),
    };
    skipped_rules(&mut report, index, tally.with_task, embedder);
    advice(&mut report, opts, embedder, calibration);
    report
}

/// The rules that could not run, and why (a zero under them is not a clearance).
fn skipped_rules(report: &mut Report, index: &EvalIndex, with_task: u64, embedder: bool) {
    let skip = |report: &mut Report, rule: &str, why: String| {
        report.rules_skipped.insert(rule.to_owned(), why);
    };
    if index.n_with_task == 0 {
        let why = format!(
            "0 of {} evaluation rows carried a scenario_id or task_id",
            index.n_rows
        );
        report.note("same_task_skipped", format!("same_task did not run: {why}, so a zero there is not a clearance; give eval rows their task ids to compare by task."));
        skip(report, "same_task", why);
    } else if with_task == 0 {
        let why = format!(
            "0 of {} training rows carried a scenario_id or task_id",
            report.n
        );
        report.note(
            "same_task_skipped",
            format!("same_task did not run: {why}, so a zero there is not a clearance."),
        );
        skip(report, "same_task", why);
    }
    if index.texts.is_empty() {
        let why = format!(
            "none of the {} evaluation rows carried text to compare",
            index.n_rows
        );
        report.note(
            "text_rules_skipped",
            format!("exact and near-copy did not run: {why}."),
        );
        skip(report, "exact", why.clone());
        skip(report, "near", why);
    }
    if embedder {
        if index.prompts.is_empty() {
            let why = format!(
                "none of the {} evaluation rows carried a prompt to embed",
                index.n_rows
            );
            report.note("semantic_skipped", format!("semantic did not run: {why}."));
            skip(report, "semantic", why);
        }
    } else {
        skip(
            report,
            "semantic",
            "no embedder (`embedder` column:NAME, cmd:COMMAND or openai:MODEL@URL)".to_owned(),
        );
        report.note("no_embedder", "the text rules catch exact and lightly edited copies of eval questions, not reworded ones; pass `embedder` to also catch paraphrases.".to_owned());
    }
}

/// What to read into the numbers: the calibration, an empty eval set, a total drop, semantic
/// flags.
fn advice(report: &mut Report, opts: &Options, embedder: bool, calibration: Option<(f64, usize)>) {
    if let Some((p99, m)) = calibration {
        let mut line = format!(
            "with this embedder, distinct tasks read up to {p99:.2} alike (99th percentile over {m} eval prompts, pairs with different task ids); a threshold below that flags tasks that merely share a domain"
        );
        if opts.similarity.is_some_and(|s| s <= p99) {
            let _ = write!(
                line,
                ". `similarity` {:.2} is at or below it: raise it above {p99:.2}",
                opts.similarity.unwrap_or(0.0)
            );
        }
        report.note("calibration", line);
    }
    if report.n_eval_rows == 0 {
        report.note("empty_eval", "the eval set holds no rows: nothing was compared, and nothing could be dropped; check `against`".to_owned());
    }
    if report.n > 0 && report.n_contaminated == report.n {
        let text = format!(
            "every training row was dropped ({} of {}): check that `against` is the eval set and not the training rows themselves",
            report.n_contaminated, report.n
        );
        report.note("all_dropped", text);
    }
    if embedder && report.n_semantic > 0 {
        report.note("semantic_review", "semantic flags are a question, not a verdict: read the examples before trusting the drop.".to_owned());
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "decontaminate: kept {} of {} training rows, dropped {} ({:.2}%): same_task {}, exact {}, near {}, semantic {}",
            self.n_kept,
            self.n,
            self.n_contaminated,
            self.contamination_rate * 100.0,
            self.n_same_task,
            self.n_exact,
            self.n_near,
            self.n_semantic
        )?;
        writeln!(
            f,
            "eval: {} rows, {} texts; {} eval texts and {} eval tasks touched by a training row; n={} overlap={}{}",
            self.n_eval_rows,
            self.n_eval_texts,
            self.eval_items_touched,
            self.eval_tasks_touched,
            self.ngram,
            self.overlap,
            self.similarity
                .map(|s| format!(" similarity={s}"))
                .unwrap_or_default()
        )?;
        for h in self.examples.iter().take(5) {
            let what = match h.rule {
                Rule::SameTask => format!("same task `{}`", h.task.as_deref().unwrap_or("")),
                Rule::Exact => format!("{}: exact copy", h.field),
                Rule::Near => format!(
                    "{}: near copy, coverage {:.3} (\"{}\")",
                    h.field,
                    h.coverage.unwrap_or(0.0),
                    h.matched
                ),
                Rule::Semantic => format!(
                    "{}: similar to \"{}\" ({:.4})",
                    h.field,
                    h.eval_prompt.as_deref().unwrap_or(""),
                    h.similarity.unwrap_or(0.0)
                ),
            };
            writeln!(f, "  row {}: {what}", h.index)?;
        }
        for (rule, why) in &self.rules_skipped {
            writeln!(f, "skipped {rule}: {why}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}
