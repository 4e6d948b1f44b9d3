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
//!
//! Inputs: the training rows and the eval rows (`against`), in the row schema (`task_id`,
//! `prompt`, `extra`, and the compared fields); with an embedder, the vectors from each row's
//! `extra.NAME` or from a model the caller started ([`Embedder`]). Outputs: the training rows
//! kept (zero-copy slices of the input batches, in order) and the [`Report`].
//!
//! A [`Screen`] is the streaming form (`wai decontaminate` checks each batch as it is read);
//! [`DecontaminateStage`] runs it over rows in memory.

mod check;
mod cluster;
mod index;
mod report;
mod rows;
mod screen;
mod text;
mod vectors;

use datafusion::arrow::array::RecordBatch;
use serde::{Deserialize, Serialize};

pub use check::*;
pub use cluster::{Contaminated, FUNCTION as CONTAMINATED, Lexical, flagged_keys, row_key};
pub use index::*;
pub use report::*;
pub use rows::kept_runs;
pub use screen::{EvalSide, Screen, Screened};
pub use text::*;
pub use vectors::*;

use crate::error::{Error, Result};
use crate::schema::col;
use crate::stages::Session;
pub use crate::stages::embed::{Embed, Embedder};

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
/// Text fields a training row can be compared on.
pub const TEXT_FIELDS: [&str; 3] = [col::PROMPT, col::FINAL_TEXT, col::REASON];

/// What to check.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// Training-row fields compared with the eval texts, in order (of [`TEXT_FIELDS`]).
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

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        if self.n == 0 {
            return Err(Error::option("n", "must be at least 1"));
        }
        if self.overlap.is_nan() {
            return Err(Error::option("overlap", "must be a number"));
        }
        if let Some(s) = self.similarity.filter(|s| !(0.0..=1.0).contains(s)) {
            return Err(Error::option(
                "similarity",
                format!("must be in [0, 1], not {s}"),
            ));
        }
        if let Some(f) = self
            .fields
            .iter()
            .find(|f| !TEXT_FIELDS.contains(&f.as_str()))
        {
            return Err(Error::option(
                "fields",
                format!(
                    "`{f}` is not a text field a row is compared on ({})",
                    TEXT_FIELDS.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// What decontamination reads: rows in memory, in the row schema.
#[derive(Debug, Default)]
pub struct Inputs {
    /// The training rows, in input order.
    pub train: Vec<RecordBatch>,
    /// The eval rows.
    pub against: Vec<RecordBatch>,
    /// The semantic rule's vectors (none: the rule does not run).
    pub embedder: Option<Embedder>,
}

/// Decontamination of rows in memory: its report, and the training rows kept (not serialized).
#[derive(Debug, Clone, Serialize)]
pub struct Decontamination {
    /// What was dropped, and why.
    #[serde(flatten)]
    pub report: Report,
    /// The kept training rows, in order.
    #[serde(skip)]
    pub kept: Vec<RecordBatch>,
}

impl std::fmt::Display for Decontamination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.report.fmt(f)
    }
}

/// Decontamination over rows in memory (`wai decontaminate` streams the training rows through
/// a [`Screen`] instead). A model embedder is called synchronously: one that blocks on a runtime
/// (an [`crate::stages::embed::EndpointEmbedder`]) must not be that of the task awaiting this.
pub struct DecontaminateStage;

impl crate::stages::Stage for DecontaminateStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Decontamination;
    const NAME: &'static str = "decontaminate";

    async fn run(_session: &Session, inputs: Inputs, opts: &Options) -> Result<Decontamination> {
        let mut eval = EvalSide::new(opts, inputs.embedder);
        for batch in &inputs.against {
            eval.add(batch)?;
        }
        let mut screen = eval.finish()?;
        let mut kept = Vec::new();
        for batch in &inputs.train {
            kept.extend(screen.check(batch, false)?.kept);
        }
        Ok(Decontamination {
            report: screen.report(),
            kept,
        })
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
        let batch = check_batch(&ix, &opts, &rows, 1000, None);
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
        // With a mask (the rows a cluster's workers flagged): a masked row has no verdict, an
        // unmasked one its own, across the chunks' edges and runs of equal rows alike.
        let only: Vec<bool> = (0..rows.len()).map(|i| i % 7 != 3).collect();
        let masked = check_batch(&ix, &opts, &rows, 1000, Some(&only));
        for (i, (got, full)) in masked.iter().zip(&batch).enumerate() {
            let want = if only[i] { full.as_ref() } else { None };
            assert_eq!(
                serde_json::to_value(got).unwrap(),
                serde_json::to_value(want).unwrap(),
                "row {i}"
            );
        }
    }

    #[tokio::test]
    async fn the_stage_over_rows_in_memory_drops_the_eval_set_from_itself() {
        use crate::pipeline::row::testing::{batch_of, fixture};
        use crate::stages::Stage as _;
        let rows = batch_of(fixture("example_rows.jsonl"));
        let n = rows.num_rows() as u64;
        let session = Session::new().unwrap();
        let inputs = Inputs {
            train: vec![rows.clone()],
            against: vec![rows],
            embedder: None,
        };
        let out = crate::stages::run::<DecontaminateStage>(&session, inputs, &Options::default())
            .await
            .unwrap();
        assert_eq!(DecontaminateStage::NAME, "decontaminate");
        assert_eq!((out.report.n, out.report.n_kept), (n, 0));
        assert!(out.kept.is_empty());
        let codes: Vec<&str> = out.report.coded_notes().map(|(c, _)| c).collect();
        assert_eq!(codes, ["no_embedder", "all_dropped"]);
        // Options are checked first, by key.
        let bad = Options {
            fields: vec!["messages".into()],
            ..Options::default()
        };
        let err = crate::stages::run::<DecontaminateStage>(&session, Inputs::default(), &bad)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Option { ref key, .. } if key == "fields"),
            "{err}"
        );
    }

    #[test]
    fn words_and_norms_read_as_the_reference_reads() {
        assert_eq!(words("Héllo, WORLD_42!"), vec!["h", "llo", "world", "42"]);
        assert_eq!(norm("  A\tb\n\nC  "), "a b c");
    }
}
