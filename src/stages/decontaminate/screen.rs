//! The screen: the eval side read and indexed once ([`EvalSide`]), then training batches checked
//! one at a time ([`Screen::check`]), the counts kept as they pass, and the report at the end.

use datafusion::arrow::array::{BooleanArray, RecordBatch, StringArray};
use serde_json::Value;

use super::cluster::{Lexical, key_of, rows_of};
use super::rows::{cell, eval_extras, kept_runs, recorded, text_column};
use super::{
    EvalIndex, Hit, MATCH_CHARS, Options, Report, Row, Rule, SIMILARITY, Tally, best_other,
    calibrate, check_batch, report, unit,
};
use crate::error::{Error, Result};
use crate::schema::col;
use crate::stages::embed::{self, Embedder};

/// Texts a model embeds per request.
const EMBED_BATCH: usize = 256;

/// The eval side as it is read: the index, and the prompts' vectors under `column:`.
pub struct EvalSide {
    opts: Options,
    embedder: Option<Embedder>,
    index: EvalIndex,
    /// One per semantic prompt, under `column:` (the row's own vector, if it has one).
    vectors: Vec<Option<Vec<f32>>>,
}

impl EvalSide {
    /// An empty eval side for `opts`, its prompts to be embedded by `embedder`.
    pub fn new(opts: &Options, embedder: Option<Embedder>) -> Self {
        Self {
            opts: opts.clone(),
            embedder,
            index: EvalIndex::new(opts.n),
            vectors: Vec::new(),
        }
    }

    /// Indexes the eval rows of `batch` (`task_id`, `prompt`, `extra`).
    ///
    /// # Errors
    /// A column is missing.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        let (task, prompt, extra) = (
            text_column(batch, col::TASK_ID)?,
            text_column(batch, col::PROMPT)?,
            text_column(batch, col::EXTRA)?,
        );
        for i in 0..batch.num_rows() {
            let p = cell(prompt, i);
            let new = self.index.add(
                recorded(cell(task, i), p),
                p.unwrap_or(""),
                &eval_extras(cell(extra, i)),
            );
            if new {
                self.vectors.push(match &self.embedder {
                    Some(Embedder::Column(name)) => {
                        embed::vector_of(cell(extra, i), name).map(unit)
                    }
                    _ => None,
                });
            }
        }
        Ok(())
    }

    /// The screen: the eval prompts' vectors (read, or embedded by the model) and the
    /// calibration.
    ///
    /// # Errors
    /// Under `column:`, an eval prompt has no vector (an error of the option `embedder`); or the
    /// model failed.
    pub fn finish(self) -> Result<Screen> {
        let Self {
            opts,
            mut embedder,
            index,
            vectors,
        } = self;
        let matrix: Vec<Vec<f32>> = match &mut embedder {
            None => Vec::new(),
            Some(Embedder::Column(name)) => {
                let missing = vectors.iter().filter(|v| v.is_none()).count();
                if missing > 0 {
                    return Err(Error::option(
                        "embedder",
                        format!(
                            "column:{name}: {missing} of {} eval prompts have no vector in extra.{name}",
                            vectors.len()
                        ),
                    ));
                }
                vectors.into_iter().flatten().collect()
            }
            Some(Embedder::Model(model)) => {
                let texts: Vec<String> = index.prompts.iter().map(|p| p.0.clone()).collect();
                let mut out = Vec::with_capacity(texts.len());
                for chunk in texts.chunks(EMBED_BATCH) {
                    out.extend(model.embed(chunk)?);
                }
                out
            }
        };
        let calibration = if embedder.is_some() {
            calibrate(&matrix, &index.prompts)
        } else {
            None
        };
        Ok(Screen {
            opts,
            embedder,
            index,
            matrix,
            calibration,
            tally: Tally::default(),
            no_vector: 0,
            flagged: None,
            screened: false,
        })
    }
}

/// The eval side indexed, checking training batches as they pass.
pub struct Screen {
    opts: Options,
    embedder: Option<Embedder>,
    index: EvalIndex,
    /// The eval prompts' unit vectors (with an embedder).
    matrix: Vec<Vec<f32>>,
    calibration: Option<(f64, usize)>,
    tally: Tally,
    /// Training rows the semantic rule saw no vector for (`column:`).
    no_vector: u64,
    /// The keys of the rows a cluster's workers flagged: only those are checked here.
    flagged: Option<foldhash::HashSet<u64>>,
    /// Whether the rows now checked are rows the workers screened.
    screened: bool,
}

/// One training batch, screened.
#[derive(Debug, Default)]
pub struct Screened {
    /// The kept rows, as slices of the batch, in order.
    pub kept: Vec<RecordBatch>,
    /// With `list_dropped`, one JSON line per dropped row: the hit, its `rule`, `rollout_id` and
    /// `task_id`.
    pub dropped: Vec<Value>,
}

/// A semantic candidate: the row, the field (or `extra.NAME`) and its unit vector.
type Candidate = (usize, String, Vec<f32>);

impl Screen {
    /// Checks the training rows of `batch` (`task_id`, `prompt`, the compared fields; `extra`
    /// under `column:`; `rollout_id` with `list_dropped`), counting them in the report.
    ///
    /// # Errors
    /// A column is missing, or the model failed.
    pub fn check(&mut self, batch: &RecordBatch, list_dropped: bool) -> Result<Screened> {
        let task = text_column(batch, col::TASK_ID)?;
        let prompt = text_column(batch, col::PROMPT)?;
        let fields: Vec<&StringArray> = self
            .opts
            .fields
            .iter()
            .map(|f| text_column(batch, f))
            .collect::<Result<_>>()?;
        let rows = rows_of(task, prompt, &fields);
        let only: Option<Vec<bool>> = self.flagged.as_ref().filter(|_| self.screened).map(|keys| {
            (0..rows.len())
                .map(|i| keys.contains(&key_of(task, prompt, &fields, i)))
                .collect()
        });
        let start = self.tally.n;
        let mut hits = check_batch(&self.index, &self.opts, &rows, start, only.as_deref());
        self.tally.n += batch.num_rows() as u64;
        self.tally.with_task += rows.iter().filter(|r| r.task.is_some()).count() as u64;
        if let (Some(embedder), false) = (&mut self.embedder, self.matrix.is_empty()) {
            let open: Vec<usize> = (0..rows.len()).filter(|i| hits[*i].is_none()).collect();
            let (candidates, missing) =
                candidates(embedder, batch, &rows, &self.opts.fields, &open)?;
            self.no_vector += missing;
            self.flag_semantic(candidates, &rows, &mut hits, start);
        }
        let keep: BooleanArray = hits.iter().map(|h| Some(h.is_none())).collect();
        let dropped = if list_dropped {
            dropped_lines(batch, task, &hits)?
        } else {
            Vec::new()
        };
        for h in hits.into_iter().flatten() {
            self.tally.add(h);
        }
        Ok(Screened {
            kept: kept_runs(batch, &keep),
            dropped,
        })
    }

    /// The lexical index and options, as a cluster's workers receive them.
    pub fn lexical(&self) -> Lexical {
        Lexical::of(&self.index, &self.opts)
    }

    /// Takes the keys ([`super::row_key`]) of the rows a cluster's workers flagged under
    /// [`Self::lexical`]: of the rows they screened ([`Self::screened_by_workers`]), only those
    /// are checked here; the others pass the lexical rules unchecked.
    pub fn only_flagged(&mut self, keys: foldhash::HashSet<u64>) {
        self.flagged = Some(keys);
    }

    /// Says whether the batches checked next are rows the workers screened (every row of them:
    /// the workers may have read more, never fewer) or rows only this process reads.
    pub fn screened_by_workers(&mut self, screened: bool) {
        self.screened = screened;
    }

    /// Flags the candidates (in row order) whose row no rule has flagged yet and whose best
    /// cosine against an eval prompt of another task is at least the similarity.
    fn flag_semantic(
        &self,
        candidates: Vec<Candidate>,
        rows: &[Row<'_>],
        hits: &mut [Option<Hit>],
        start: u64,
    ) {
        let threshold = self.opts.similarity.unwrap_or(SIMILARITY);
        let prompts = &self.index.prompts;
        for (i, field, v) in candidates {
            if hits[i].is_some() {
                continue;
            }
            let Some((s, p)) = best_other(&v, rows[i].task, &self.matrix, prompts) else {
                continue;
            };
            if s >= threshold {
                hits[i] = Some(Hit {
                    index: start + i as u64,
                    field,
                    matched: "semantic".into(),
                    coverage: None,
                    similarity: Some(crate::stats::round_places(s.min(1.0), 4)),
                    task: None,
                    eval_prompt: Some(prompts[p].0.chars().take(MATCH_CHARS).collect()),
                    eval_text: u32::try_from(p).ok(),
                    rule: Rule::Semantic,
                });
            }
        }
    }

    /// The report of every batch checked.
    pub fn report(self) -> Report {
        let n_train = self.tally.n;
        let mut report = report(
            &self.index,
            &self.opts,
            self.tally,
            self.embedder.is_some(),
            self.calibration,
        );
        if self.no_vector > 0 {
            let name = match &self.embedder {
                Some(Embedder::Column(name)) => name.as_str(),
                _ => "",
            };
            let why = format!(
                "{} of {n_train} training rows have no vector in extra.{name}, so the semantic rule did not see them",
                self.no_vector
            );
            if self.no_vector == n_train {
                report
                    .rules_skipped
                    .insert("semantic".to_owned(), why.clone());
            }
            report.note(
                "no_vector",
                format!("{why}: a zero there is not a clearance for those rows."),
            );
        }
        report
    }
}

/// The semantic candidates among the `open` rows (no lexical rule flagged them), in row then
/// field order: each row's own vector under `column:` (with how many open rows had none), else
/// each non-blank compared field embedded by the model.
fn candidates(
    embedder: &mut Embedder,
    batch: &RecordBatch,
    rows: &[Row<'_>],
    fields: &[String],
    open: &[usize],
) -> Result<(Vec<Candidate>, u64)> {
    let mut out: Vec<Candidate> = Vec::new();
    let mut missing = 0;
    match embedder {
        Embedder::Column(name) => {
            let extra = text_column(batch, col::EXTRA)?;
            for &i in open {
                match embed::vector_of(cell(extra, i), name) {
                    Some(v) => out.push((i, format!("extra.{name}"), unit(v))),
                    None => missing += 1,
                }
            }
        }
        Embedder::Model(model) => {
            for (f, field) in fields.iter().enumerate() {
                let (which, texts): (Vec<usize>, Vec<String>) = open
                    .iter()
                    .filter(|&&i| !rows[i].texts[f].trim().is_empty())
                    .map(|&i| (i, rows[i].texts[f].to_owned()))
                    .unzip();
                let mut vectors = Vec::with_capacity(texts.len());
                for chunk in texts.chunks(EMBED_BATCH) {
                    vectors.extend(model.embed(chunk)?);
                }
                for (i, v) in which.into_iter().zip(vectors) {
                    out.push((i, field.clone(), v));
                }
            }
            out.sort_by_key(|c| c.0);
        }
    }
    Ok((out, missing))
}

/// The dropped list's lines for the `hits` of `batch`.
fn dropped_lines(
    batch: &RecordBatch,
    task: &StringArray,
    hits: &[Option<Hit>],
) -> Result<Vec<Value>> {
    let rollout = text_column(batch, col::ROLLOUT_ID)?;
    let mut lines = Vec::new();
    for (i, h) in hits.iter().enumerate() {
        let Some(h) = h else { continue };
        let mut line =
            serde_json::to_value(h).map_err(|e| Error::Internal(format!("a hit as JSON: {e}")))?;
        if let Value::Object(o) = &mut line {
            o.insert(
                "rule".into(),
                serde_json::to_value(h.rule).unwrap_or(Value::Null),
            );
            o.insert(
                "rollout_id".into(),
                cell(rollout, i).map_or(Value::Null, |r| Value::String(r.to_owned())),
            );
            o.insert(
                "task_id".into(),
                cell(task, i).map_or(Value::Null, |t| Value::String(t.to_owned())),
            );
        }
        lines.push(line);
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, StringArray};

    use super::*;
    use crate::stages::embed::Embed;

    /// A batch of the columns the screen reads.
    fn batch(rows: &[(&str, &str, &str)]) -> RecordBatch {
        let column = |k: usize| -> ArrayRef {
            Arc::new(StringArray::from(
                rows.iter()
                    .map(|r| {
                        let v = [r.0, r.1, r.2][k];
                        (!v.is_empty()).then_some(v)
                    })
                    .collect::<Vec<_>>(),
            ))
        };
        let ids: ArrayRef = Arc::new(StringArray::from(
            (0..rows.len()).map(|i| format!("r{i}")).collect::<Vec<_>>(),
        ));
        RecordBatch::try_from_iter([
            (col::TASK_ID, column(0)),
            (col::PROMPT, column(1)),
            (col::EXTRA, column(2)),
            (col::ROLLOUT_ID, ids),
        ])
        .unwrap()
    }

    fn screen(opts: &Options, embedder: Option<Embedder>, eval: &RecordBatch) -> Result<Screen> {
        let mut side = EvalSide::new(opts, embedder);
        side.add(eval)?;
        side.finish()
    }

    #[test]
    fn batches_are_screened_at_their_positions_and_the_dropped_listed() {
        let eval = batch(&[
            ("e1", "Cancel order 9911.", ""),
            ("", "Where is my parcel?", ""),
        ]);
        let mut s = screen(&Options::default(), None, &eval).unwrap();
        let first = s
            .check(
                &batch(&[("t1", "Hello", ""), ("t2", "cancel ORDER 9911.", "")]),
                true,
            )
            .unwrap();
        assert_eq!(
            first.kept.iter().map(RecordBatch::num_rows).sum::<usize>(),
            1
        );
        assert_eq!(first.dropped.len(), 1);
        assert_eq!(first.dropped[0]["index"], 1);
        assert_eq!(first.dropped[0]["rule"], "exact");
        assert_eq!(first.dropped[0]["rollout_id"], "r1");
        let second = s
            .check(&batch(&[("e1", "anything", ""), ("t3", "Hi", "")]), false)
            .unwrap();
        assert!(second.dropped.is_empty());
        let report = s.report();
        assert_eq!((report.n, report.n_exact, report.n_same_task), (4, 1, 1));
        assert_eq!(report.examples[1].index, 2);
    }

    #[test]
    fn a_column_embedder_needs_a_vector_for_every_eval_prompt() {
        let opts = Options {
            similarity: Some(0.9),
            ..Options::default()
        };
        let eval = batch(&[("e1", "alpha", r#"{"emb": [1, 0]}"#), ("e2", "beta", "{}")]);
        let column = || Some(Embedder::Column("emb".into()));
        let err = screen(&opts, column(), &eval).err().unwrap();
        assert!(
            matches!(&err, Error::Option { key, message } if key == "embedder" && message.contains("1 of 2 eval prompts")),
            "{err}"
        );
        let eval = batch(&[
            ("e1", "alpha", r#"{"emb": [1, 0]}"#),
            ("e2", "beta", r#"{"emb": [0, 1]}"#),
        ]);
        let mut s = screen(&opts, column(), &eval).unwrap();
        let out = s
            .check(
                &batch(&[
                    ("t1", "gamma", r#"{"emb": [0.99, 0.05]}"#),
                    ("t2", "delta", ""),
                ]),
                false,
            )
            .unwrap();
        assert_eq!(out.kept.iter().map(RecordBatch::num_rows).sum::<usize>(), 1);
        let report = s.report();
        assert_eq!(report.n_semantic, 1);
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.starts_with("1 of 2 training rows have no vector"))
        );
    }

    /// A model whose vector is the count of `a`s and of `b`s.
    struct Letters;

    impl Embed for Letters {
        fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
            #[allow(clippy::cast_precision_loss, reason = "short test texts")]
            let count = |t: &str, c: char| t.matches(c).count() as f32;
            Ok(texts
                .iter()
                .map(|t| unit(vec![count(t, 'a'), count(t, 'b')]))
                .collect())
        }
    }

    #[test]
    fn a_model_embeds_the_eval_prompts_and_the_open_rows() {
        let eval = batch(&[("e1", "aaaa", ""), ("e2", "bbbb", ""), ("e3", "ab", "")]);
        let opts = Options {
            similarity: Some(0.95),
            ..Options::default()
        };
        let mut s = screen(&opts, Some(Embedder::Model(Box::new(Letters))), &eval).unwrap();
        let out = s
            .check(
                &batch(&[("t1", "aaa", ""), ("t2", "aab", ""), ("e2", "bb", "")]),
                false,
            )
            .unwrap();
        assert_eq!(out.kept.iter().map(RecordBatch::num_rows).sum::<usize>(), 1);
        let report = s.report();
        assert_eq!((report.n_semantic, report.n_same_task), (1, 1));
        assert!(report.calibration_p99.is_some());
    }
}
