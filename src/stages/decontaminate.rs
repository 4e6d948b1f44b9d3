//! Decontamination: training rows that overlap the eval set, found by task, by text, by n-gram
//! coverage and by embedding (the data spec's §5).
//!
//! The eval side is small and indexed once ([`EvalIndex`]): its recorded task ids, the normalised
//! text of each eval text (the prompt, plus a top-level `answer` and `reference` when present),
//! and a hash set of every word n-gram of those texts pointing at the texts that hold it. The
//! training side streams past the index batch by batch, each batch's rows checked in parallel
//! ([`check_batch`]), so the cost is linear in the training rows. Rules run in order and a row is
//! counted under the first that fires:
//!
//! 1. `same_task`: the row's task id is an eval task id (ids derived from a prompt hash are not
//!    recorded ids, on either side);
//! 2. per field, in order: `exact` (the normalised texts are equal), then near copy (one eval text
//!    covers at least `overlap` of the row's words with shared n-grams; under `n` words a row can
//!    only match exactly);
//! 3. `semantic` (with an embedder): the best cosine against eval prompts of another task is at
//!    least `similarity`.
//!
//! Text is read as the reference reads it: `norm` lowercases and collapses white space; words are
//! the runs of `[a-z0-9]` in the lowercased text. N-grams are compared by a 64-bit hash of their
//! words (a false match needs a 64-bit collision).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher;

use rayon::prelude::*;
use serde::Serialize;

/// Default n-gram length.
pub const NGRAM: usize = 8;
/// Default share of a row's words an eval text must cover.
pub const OVERLAP: f64 = 0.8;
/// Default cosine similarity that flags.
pub const SIMILARITY: f64 = 0.85;
/// Flagged rows kept as examples.
pub const EXAMPLES: usize = 20;
/// Characters of a matched n-gram or eval prompt kept in an example.
pub const MATCH_CHARS: usize = 120;

/// What to check.
#[derive(Debug, Clone, Serialize)]
pub struct Options {
    /// Training-row fields compared with the eval texts, in order.
    pub fields: Vec<String>,
    /// Words per n-gram.
    pub n: usize,
    /// Coverage that flags a near copy (0 flags any shared n-gram).
    pub overlap: f64,
    /// Cosine similarity that flags (with an embedder).
    pub similarity: Option<f64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            fields: vec!["prompt".to_owned()],
            n: NGRAM,
            overlap: OVERLAP,
            similarity: None,
        }
    }
}

/// Lowercased, white space collapsed to single spaces, trimmed.
pub fn norm(text: &str) -> String {
    norm_of(&text.to_lowercase())
}

/// The runs of `[a-z0-9]` in the lowercased text.
pub fn words(text: &str) -> Vec<String> {
    words_of(&text.to_lowercase())
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// [`norm`] of an already lowercased text.
fn norm_of(lower: &str) -> String {
    lower.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// [`words`] of an already lowercased text, borrowed from it.
fn words_of(lower: &str) -> Vec<&str> {
    lower
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Hashes of words and of word windows, the same on both sides and in every run.
#[derive(Clone)]
struct Hasher(foldhash::fast::FixedState);

impl Hasher {
    fn new() -> Self {
        Self(foldhash::fast::FixedState::with_seed(0x5eed_0f_de_c0))
    }

    /// The hash of each window of `n` words (none under `n` words).
    fn windows(&self, words: &[&str], n: usize) -> Vec<u64> {
        if n == 0 || words.len() < n {
            return Vec::new();
        }
        let each: Vec<u64> = words.iter().map(|w| self.0.hash_one(*w)).collect();
        each.windows(n)
            .map(|w| {
                w.iter().fold(0x9e37_79b9_7f4a_7c15_u64, |h, x| {
                    (h.rotate_left(23) ^ x).wrapping_mul(0x2545_f491_4f6c_dd1d)
                })
            })
            .collect()
    }
}

/// The eval side, indexed.
pub struct EvalIndex {
    n: usize,
    hasher: Hasher,
    /// Eval rows read.
    pub n_rows: u64,
    /// Eval rows with a recorded task id.
    pub n_with_task: u64,
    /// Recorded eval task ids.
    pub tasks: foldhash::HashSet<String>,
    /// Normalised eval texts, by text id.
    norms: foldhash::HashMap<String, u32>,
    /// The texts, by id (normalised).
    pub texts: Vec<String>,
    /// N-gram hash → the text ids holding it (ascending, no repeats).
    ngrams: foldhash::HashMap<u64, Vec<u32>>,
    /// Eval prompts for the semantic rule: (prompt, its task id), one per normalised prompt.
    pub prompts: Vec<(String, Option<String>)>,
    prompt_norms: foldhash::HashSet<String>,
}

impl EvalIndex {
    /// An empty index of `n`-grams.
    pub fn new(n: usize) -> Self {
        Self {
            n,
            hasher: Hasher::new(),
            n_rows: 0,
            n_with_task: 0,
            tasks: foldhash::HashSet::default(),
            norms: foldhash::HashMap::default(),
            texts: Vec::new(),
            ngrams: foldhash::HashMap::default(),
            prompts: Vec::new(),
            prompt_norms: foldhash::HashSet::default(),
        }
    }

    /// Adds one eval row: its recorded task id, its prompt and any further texts (answer,
    /// reference). Returns whether its prompt is new to the semantic rule's prompts.
    pub fn add(&mut self, task: Option<&str>, prompt: &str, more: &[String]) -> bool {
        let mut new_prompt = false;
        self.n_rows += 1;
        if let Some(t) = task {
            self.n_with_task += 1;
            self.tasks.insert(t.to_owned());
        }
        if !prompt.trim().is_empty() {
            let key = norm(prompt);
            if self.prompt_norms.insert(key) {
                self.prompts
                    .push((prompt.to_owned(), task.map(str::to_owned)));
                new_prompt = true;
            }
        }
        for text in std::iter::once(prompt).chain(more.iter().map(String::as_str)) {
            let lower = text.to_lowercase();
            let w = words_of(&lower);
            if w.is_empty() {
                continue;
            }
            let key = norm_of(&lower);
            if self.norms.contains_key(&key) {
                continue;
            }
            let id = u32::try_from(self.texts.len()).unwrap_or(u32::MAX);
            self.norms.insert(key.clone(), id);
            self.texts.push(key);
            for h in self.hasher.windows(&w, self.n) {
                let ids = self.ngrams.entry(h).or_default();
                if ids.last() != Some(&id) {
                    ids.push(id);
                }
            }
        }
        new_prompt
    }
}

/// Why a row was dropped.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    /// The row's position in the training input.
    pub index: u64,
    /// `task`, or the field that matched.
    pub field: String,
    /// `same_task`, `exact`, `semantic`, or the first shared n-gram of a near copy.
    #[serde(rename = "match")]
    pub matched: String,
    /// Share of the row's words covered (1 for same task and exact).
    pub coverage: Option<f64>,
    /// Cosine similarity (semantic).
    pub similarity: Option<f64>,
    /// The task id (same task).
    pub task: Option<String>,
    /// The eval prompt (semantic), first 120 characters.
    pub eval_prompt: Option<String>,
    /// The eval text hit (exact and near) or the eval prompt (semantic), for the eval-side
    /// count.
    #[serde(skip)]
    pub eval_text: Option<u32>,
    /// The rule.
    #[serde(skip)]
    pub rule: Rule,
}

/// The rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The task id is an eval task.
    #[default]
    SameTask,
    /// The normalised text is an eval text.
    Exact,
    /// An eval text covers enough of the row's words.
    Near,
    /// An embedding is close to an eval prompt of another task.
    Semantic,
}

/// One training row, as the lexical rules read it.
pub struct Row<'a> {
    /// The recorded task id (not one derived from the prompt).
    pub task: Option<&'a str>,
    /// The texts of the compared fields, in field order.
    pub texts: Vec<&'a str>,
}

/// The lexical verdict on one row (`index` is its position in the input).
pub fn check(index: &EvalIndex, opts: &Options, row: &Row<'_>, at: u64) -> Option<Hit> {
    if let Some(t) = row.task.filter(|t| index.tasks.contains(*t)) {
        return Some(Hit {
            index: at,
            field: "task".into(),
            matched: "same_task".into(),
            coverage: Some(1.0),
            similarity: None,
            task: Some(t.to_owned()),
            eval_prompt: None,
            eval_text: None,
            rule: Rule::SameTask,
        });
    }
    for (field, text) in opts.fields.iter().zip(&row.texts) {
        // One lowercasing serves both rules.
        let lower = text.to_lowercase();
        let w = words_of(&lower);
        if w.is_empty() {
            continue;
        }
        if let Some(id) = index.norms.get(&norm_of(&lower)) {
            return Some(Hit {
                index: at,
                field: field.clone(),
                matched: "exact".into(),
                coverage: Some(1.0),
                similarity: None,
                task: None,
                eval_prompt: None,
                eval_text: Some(*id),
                rule: Rule::Exact,
            });
        }
        if w.len() < index.n {
            continue;
        }
        let hashes = index.hasher.windows(&w, index.n);
        // Per eval text hit: (the last shared window's start, positions covered so far, the
        // first shared window). Windows come in ascending order, so each adds the positions past
        // the previous one's end: min(n, i − last). No position vector per text.
        let mut covered: foldhash::HashMap<u32, (usize, usize, usize)> =
            foldhash::HashMap::default();
        for (i, h) in hashes.iter().enumerate() {
            if let Some(ids) = index.ngrams.get(h) {
                for id in ids {
                    covered
                        .entry(*id)
                        .and_modify(|(last, count, _)| {
                            *count += index.n.min(i - *last);
                            *last = i;
                        })
                        .or_insert((i, index.n, i));
                }
            }
        }
        // The text covering most positions, ties to the lowest id.
        let best = covered
            .iter()
            .map(|(id, (_, count, first))| (*id, *count, *first))
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)));
        if let Some((id, count, first)) = best {
            #[allow(clippy::cast_precision_loss, reason = "word counts")]
            let coverage = count as f64 / w.len() as f64;
            if opts.overlap <= 0.0 || coverage >= opts.overlap {
                let gram: String = w[first..first + index.n].join(" ");
                return Some(Hit {
                    index: at,
                    field: field.clone(),
                    matched: gram.chars().take(MATCH_CHARS).collect(),
                    coverage: Some(crate::stats::round_places(coverage, 3)),
                    similarity: None,
                    task: None,
                    eval_prompt: None,
                    eval_text: Some(id),
                    rule: Rule::Near,
                });
            }
        }
    }
    None
}

/// The lexical verdicts on `rows` (the first at input position `start`), checked in parallel;
/// the same at any thread count. A row with the task and texts of the row before it (a task's
/// rollouts usually sit together) takes that row's verdict at its own position, unchecked.
pub fn check_batch(
    index: &EvalIndex,
    opts: &Options,
    rows: &[Row<'_>],
    start: u64,
) -> Vec<Option<Hit>> {
    const CHUNK: usize = 256;
    let chunks: Vec<Vec<Option<Hit>>> = rows
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(c, chunk)| {
            let mut out: Vec<Option<Hit>> = Vec::with_capacity(chunk.len());
            for (j, r) in chunk.iter().enumerate() {
                let at = start + (c * CHUNK + j) as u64;
                let same = j > 0 && chunk[j - 1].task == r.task && chunk[j - 1].texts == r.texts;
                let hit = if same {
                    out[j - 1].clone().map(|h| Hit { index: at, ..h })
                } else {
                    check(index, opts, r, at)
                };
                out.push(hit);
            }
            out
        })
        .collect();
    chunks.into_iter().flatten().collect()
}

/// L2-normalised `v` (zero stays zero).
pub fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if n > 0.0 {
        #[allow(clippy::cast_possible_truncation)]
        let inv = (1.0 / n) as f32;
        for x in &mut v {
            *x *= inv;
        }
    }
    v
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

/// The best cosine of `v` (unit) over the eval prompt vectors whose task differs from `task`,
/// with that prompt's index.
pub fn best_other(
    v: &[f32],
    task: Option<&str>,
    eval: &[Vec<f32>],
    prompts: &[(String, Option<String>)],
) -> Option<(f64, usize)> {
    eval.iter()
        .enumerate()
        .filter(|(i, _)| match (task, prompts[*i].1.as_deref()) {
            (Some(a), Some(b)) => a != b,
            _ => true,
        })
        .map(|(i, e)| (dot(v, e), i))
        .fold(None, |best: Option<(f64, usize)>, x| match best {
            Some(b) if b.0 >= x.0 => Some(b),
            _ => Some(x),
        })
}

/// The 99th percentile of cosine between eval prompts of different recorded tasks (the
/// reference's rank: the sorted value at `round(0.99·(k−1))` of k pairs, capped at 1), and how
/// many eval prompts there are; `None` under two such pairs. Only the top 1% of the pairs is
/// held in memory.
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
pub fn calibrate(eval: &[Vec<f32>], prompts: &[(String, Option<String>)]) -> Option<(f64, usize)> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let with_task: Vec<usize> = (0..eval.len())
        .filter(|i| prompts[*i].1.is_some())
        .collect();
    // Pairs of different recorded tasks: all pairs less those within one task.
    let mut per_task: HashMap<&str, u64> = HashMap::new();
    for &i in &with_task {
        *per_task
            .entry(prompts[i].1.as_deref().unwrap_or(""))
            .or_default() += 1;
    }
    let m = with_task.len() as u64;
    let k = m * m.saturating_sub(1) / 2 - per_task.values().map(|c| c * (c - 1) / 2).sum::<u64>();
    if k < 2 {
        return None;
    }
    // Python's round: half to even.
    let rank = (0.99 * (k - 1) as f64).round_ties_even() as u64;
    let keep = usize::try_from(k - rank).unwrap_or(usize::MAX);
    #[derive(PartialEq)]
    struct Sim(f64);
    impl Eq for Sim {}
    impl PartialOrd for Sim {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Sim {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&other.0)
        }
    }
    let push = |mut heap: BinaryHeap<Reverse<Sim>>, s: f64| {
        if heap.len() < keep {
            heap.push(Reverse(Sim(s)));
        } else if heap.peek().is_some_and(|Reverse(Sim(low))| s > *low) {
            heap.pop();
            heap.push(Reverse(Sim(s)));
        }
        heap
    };
    let top = with_task
        .par_iter()
        .enumerate()
        .fold(BinaryHeap::new, |heap, (a, &i)| {
            with_task[a + 1..]
                .iter()
                .filter(|&&j| prompts[i].1 != prompts[j].1)
                .fold(heap, |h, &j| push(h, dot(&eval[i], &eval[j])))
        })
        .reduce(BinaryHeap::new, |a, b| {
            b.into_iter().fold(a, |h, Reverse(Sim(s))| push(h, s))
        });
    // The smallest of the `k − rank` largest is the value at `rank` in ascending order.
    let p = top.peek().map(|Reverse(Sim(s))| *s)?;
    Some((p.min(1.0), prompts.len()))
}

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
    /// Dropped by rule.
    pub n_same_task: u64,
    #[allow(missing_docs)]
    pub n_exact: u64,
    #[allow(missing_docs)]
    pub n_near: u64,
    #[allow(missing_docs)]
    pub n_semantic: u64,
    /// Eval rows read.
    pub n_eval_rows: u64,
    /// Distinct eval texts indexed.
    pub n_eval_texts: u64,
    /// Eval texts (and prompts, for the semantic rule) that some training row hit.
    pub eval_items_touched: u64,
    /// Eval tasks some training row shares (the same_task rule's hits).
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
    /// Eval tasks a training row shares (same_task).
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

/// The report of `tally` against `index`.
#[allow(clippy::cast_precision_loss)]
pub fn report(
    index: &EvalIndex,
    opts: &Options,
    tally: Tally,
    embedder: bool,
    calibration: Option<(f64, usize)>,
) -> Report {
    let count = |r: Rule| tally.by_rule.get(&r).copied().unwrap_or(0);
    let dropped: u64 = tally.by_rule.values().sum();
    let mut rules_skipped = BTreeMap::new();
    let mut notes = Vec::new();
    if index.n_with_task == 0 {
        let why = format!(
            "0 of {} evaluation rows carried a scenario_id or task_id",
            index.n_rows
        );
        notes.push(format!("same_task did not run: {why}, so a zero there is not a clearance; give eval rows their task ids to compare by task."));
        rules_skipped.insert("same_task".to_owned(), why);
    } else if tally.with_task == 0 {
        let why = format!(
            "0 of {} training rows carried a scenario_id or task_id",
            tally.n
        );
        notes.push(format!(
            "same_task did not run: {why}, so a zero there is not a clearance."
        ));
        rules_skipped.insert("same_task".to_owned(), why);
    }
    if index.texts.is_empty() {
        let why = format!(
            "none of the {} evaluation rows carried text to compare",
            index.n_rows
        );
        notes.push(format!("exact and near-copy did not run: {why}."));
        rules_skipped.insert("exact".to_owned(), why.clone());
        rules_skipped.insert("near".to_owned(), why);
    }
    if embedder {
        if index.prompts.is_empty() {
            let why = format!(
                "none of the {} evaluation rows carried a prompt to embed",
                index.n_rows
            );
            notes.push(format!("semantic did not run: {why}."));
            rules_skipped.insert("semantic".to_owned(), why);
        }
    } else {
        rules_skipped.insert(
            "semantic".to_owned(),
            "no embedder (--embedder column:NAME, cmd:COMMAND or openai:MODEL@URL)".to_owned(),
        );
        notes.push("the text rules catch exact and lightly edited copies of eval questions, not reworded ones; pass --embedder to also catch paraphrases.".to_owned());
    }
    if let Some((p99, m)) = calibration {
        let mut line = format!(
            "with this embedder, distinct tasks read up to {p99:.2} alike (99th percentile over {m} eval prompts, pairs with different task ids); a threshold below that flags tasks that merely share a domain"
        );
        if opts.similarity.is_some_and(|s| s <= p99) {
            line.push_str(&format!(
                ". --similarity {:.2} is at or below it: raise it above {p99:.2}",
                opts.similarity.unwrap_or(0.0)
            ));
        }
        notes.push(line);
    }
    if index.n_rows == 0 {
        notes.push("the eval set holds no rows: nothing was compared, and nothing could be dropped; check --against".to_owned());
    }
    if tally.n > 0 && dropped == tally.n {
        notes.push(format!(
            "every training row was dropped ({dropped} of {}): check that --against is the eval set and not the training rows themselves",
            tally.n
        ));
    }
    if embedder && count(Rule::Semantic) > 0 {
        notes.push("semantic flags are a question, not a verdict: read the examples before trusting the drop.".to_owned());
    }
    let mut examples = tally.examples;
    examples.sort_by_key(|h| h.index);
    Report {
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
        rules_skipped,
        calibration_p99: calibration.map(|c| c.0),
        notes,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> EvalIndex {
        let mut ix = EvalIndex::new(8);
        let _ = ix.add(Some("e1"), "Cancel order 9911.", &[]);
        let _ = ix.add(
            None,
            "cancel my order 9911 today because the shoes did not fit me",
            &["done".to_owned()],
        );
        ix
    }

    fn verdict(ix: &EvalIndex, prompt: &str, task: Option<&str>, overlap: f64) -> Option<Hit> {
        let opts = Options {
            overlap,
            ..Options::default()
        };
        check(
            ix,
            &opts,
            &Row {
                task,
                texts: vec![prompt],
            },
            0,
        )
    }

    #[test]
    fn the_reference_examples() {
        let ix = index();
        assert_eq!(ix.texts.len(), 3);
        assert!(verdict(&ix, "Where is order 4473?", None, 0.8).is_none());
        assert_eq!(
            verdict(&ix, "Cancel order 9911.", None, 0.8).unwrap().rule,
            Rule::Exact
        );
        assert_eq!(
            verdict(&ix, "  CANCEL   order 9911.  ", None, 0.8)
                .unwrap()
                .rule,
            Rule::Exact
        );
        let long = "Please cancel my order 9911 today because the shoes did not fit me well at all";
        assert!(verdict(&ix, long, Some("s2"), 0.8).is_none());
        let hit = verdict(&ix, long, Some("s2"), 0.0).unwrap();
        assert_eq!((hit.rule, hit.coverage), (Rule::Near, Some(0.75)));
        let near = "I would like to cancel my order 9911 today because the shoes did not fit me";
        assert!(verdict(&ix, near, None, 0.8).is_none());
        assert_eq!(
            verdict(&ix, "anything", Some("e1"), 0.8).unwrap().rule,
            Rule::SameTask
        );
    }

    #[test]
    fn the_calibration_is_the_references_rank_over_distinct_task_pairs() {
        // Four prompts, three tasks: pairs (a,b) (a,c) (a,d) (b,c) (b,d) (c,d) less the
        // same-task pair (c,d): five similarities; rank round(0.99·4) = 4, the largest.
        let v = |x: f32, y: f32| unit(vec![x, y]);
        let eval = vec![v(1.0, 0.0), v(0.0, 1.0), v(1.0, 1.0), v(1.0, 0.9)];
        let task = |t: &str| (String::new(), Some(t.to_owned()));
        let prompts = vec![task("a"), task("b"), task("c"), task("c")];
        let (p99, m) = calibrate(&eval, &prompts).unwrap();
        let mut sims: Vec<f64> = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
            .iter()
            .map(|&(i, j)| dot(&eval[i], &eval[j]))
            .collect();
        sims.sort_by(f64::total_cmp);
        assert_eq!(p99, sims[4].min(1.0));
        assert_eq!(m, 4);
        // One pair is not a distribution.
        assert!(calibrate(&eval[..2], &prompts[..2]).is_none());
    }

    #[test]
    fn a_batch_gives_each_row_its_own_verdict_at_its_own_position() {
        let ix = index();
        let opts = Options {
            overlap: 0.5,
            ..Options::default()
        };
        let prompts = [
            "Cancel order 9911.",
            "Where is order 4473?",
            "Please cancel my order 9911 today because the shoes did not fit me well at all",
        ];
        let tasks = [None, Some("e1"), Some("s2")];
        // Runs of one to five equal rows, some runs differing only in their task, across the
        // parallel chunks' edges.
        let mut rows = Vec::new();
        for k in 0..300_usize {
            for _ in 0..=(k % 5) {
                rows.push(Row {
                    task: tasks[(k / 3) % 3],
                    texts: vec![prompts[k % 3]],
                });
            }
        }
        let batch = check_batch(&ix, &opts, &rows, 1000);
        assert_eq!(batch.len(), rows.len());
        let mut hits = 0;
        for (i, (got, row)) in batch.iter().zip(&rows).enumerate() {
            let want = check(&ix, &opts, row, 1000 + i as u64);
            assert_eq!(
                serde_json::to_value(got).unwrap(),
                serde_json::to_value(&want).unwrap(),
                "row {i}"
            );
            assert_eq!(got.as_ref().map(|h| h.rule), want.map(|h| h.rule));
            hits += usize::from(got.is_some());
        }
        assert!(hits > 0 && hits < rows.len());
    }

    #[test]
    fn words_and_norms_read_as_the_reference_reads() {
        assert_eq!(words("Héllo, WORLD_42!"), vec!["h", "llo", "world", "42"]);
        assert_eq!(norm("  A\tb\n\nC  "), "a b c");
    }
}
