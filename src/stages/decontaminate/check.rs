//! The lexical rules, row by row and a batch at a time.

use rayon::prelude::*;
use serde::Serialize;

use super::{EvalIndex, MATCH_CHARS, Options, norm_of, words_of};

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
/// rollouts usually sit together) takes that row's verdict at its own position, unchecked. With
/// `only`, a row it marks false is not checked (no verdict): the rows a cluster's workers cleared.
pub fn check_batch(
    index: &EvalIndex,
    opts: &Options,
    rows: &[Row<'_>],
    start: u64,
    only: Option<&[bool]>,
) -> Vec<Option<Hit>> {
    const CHUNK: usize = 256;
    let chunks: Vec<Vec<Option<Hit>>> = rows
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(c, chunk)| {
            let mut out: Vec<Option<Hit>> = Vec::with_capacity(chunk.len());
            for (j, r) in chunk.iter().enumerate() {
                let at = start + (c * CHUNK + j) as u64;
                if only.is_some_and(|o| !o[c * CHUNK + j]) {
                    out.push(None);
                    continue;
                }
                // The row before must have been checked, not masked, to lend its verdict.
                let same = j > 0
                    && only.is_none_or(|o| o[c * CHUNK + j - 1])
                    && chunk[j - 1].task == r.task
                    && chunk[j - 1].texts == r.texts;
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
