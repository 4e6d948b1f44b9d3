//! Attaching labels as a stage: the labels read and matched against the rows in a first pass
//! ([`Matching`]), then the rows labeled in a second ([`Labeling`]), each fed batch by batch (a
//! command streams both passes from its files); and [`LabelsStage`] over rows in memory.

use datafusion::arrow::array::RecordBatch;

use super::{Index, Label, Plan, Report, apply, parse, resolve};
use crate::error::{Error, Result};
use crate::stages::Session;

/// Options of attaching labels.
#[derive(Debug, Clone)]
pub struct Options {
    /// The kind of a label that names none (one of [`super::KINDS`]).
    pub kind: String,
    /// The annotator of a label that names none.
    pub annotator: Option<String>,
    /// Clear the labels a row already carries before attaching.
    pub replace: bool,
    /// When a label that gives no time was written (RFC 3339).
    pub now: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            kind: "human".into(),
            annotator: None,
            replace: false,
            now: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        if !super::KINDS.contains(&self.kind.as_str()) {
            return Err(Error::option(
                "kind",
                "must be one of human, program, model",
            ));
        }
        Ok(())
    }
}

/// What attaching reads: the rows, and the labels' text with where it came from (for errors).
pub struct Inputs {
    /// The rows, in order.
    pub rows: Vec<RecordBatch>,
    /// The labels: JSON Lines, an array of objects, or a `{key: 0/1}` map.
    pub labels: String,
    /// Where the labels came from, as errors and reports name it.
    pub origin: String,
}

/// The first pass: the labels read, and the rows their keys name, batch by batch.
pub struct Matching {
    labels: Vec<Label>,
    index: Index,
    origin: String,
    replace: bool,
}

impl Matching {
    /// The labels of `text` (from `origin`), to be matched.
    ///
    /// # Errors
    /// Unreadable labels, or none at all.
    pub fn new(text: &str, origin: &str, opts: &Options) -> Result<Self> {
        let labels = parse(
            text,
            origin,
            &opts.kind,
            opts.annotator.as_deref(),
            &opts.now,
        )?;
        if labels.is_empty() {
            return Err(Error::Input {
                stage: "labels attach".into(),
                message: format!(
                    "`{origin}` holds no labels: write JSON Lines of {{\"key\": ..., \"label\": 0/1}}, an array of them, or a {{\"KEY\": 0/1}} map"
                ),
            });
        }
        Ok(Self {
            index: Index::new(&labels),
            labels,
            origin: origin.to_owned(),
            replace: opts.replace,
        })
    }

    /// Notes which rows of `batch` the labels' keys name. The rows must be read as the second
    /// pass reads them, so derived rollout ids agree.
    ///
    /// # Errors
    /// A batch without the row columns.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        self.index.add(batch)
    }

    /// The second pass: each label matched to its row.
    ///
    /// # Errors
    /// A key that names several rows, or labels of which none names a row (naming the labels'
    /// origin).
    pub fn finish(self) -> Result<Labeling> {
        let origin = self.origin;
        let (plan, report) = resolve(self.labels, &self.index).map_err(|e| match e {
            Error::Usage(m) => Error::Usage(format!("{m} (labels from `{origin}`)")),
            other => other,
        })?;
        Ok(Labeling {
            plan,
            report,
            replace: self.replace,
        })
    }
}

/// The second pass: rows labeled batch by batch, counted into the report.
pub struct Labeling {
    plan: Plan,
    report: Report,
    replace: bool,
}

impl Labeling {
    /// `batch` with its labels attached.
    ///
    /// # Errors
    /// A batch without the row columns.
    pub fn apply(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        apply(batch, &self.plan, self.replace, &mut self.report)
    }

    /// The report of every batch labeled.
    pub fn report(self) -> Report {
        let mut report = self.report;
        if report.ties > 0 {
            report.warnings.push(format!(
                "{} row(s) split evenly between annotators; gold_reward left unset there: read extra.gold_labels and decide",
                report.ties
            ));
        }
        report
    }
}

/// The report of attaching labels to rows in memory, with the labeled rows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Labeled {
    /// What attaching did.
    #[serde(flatten)]
    pub report: Report,
    /// The rows, labeled.
    #[serde(skip)]
    pub rows: Vec<RecordBatch>,
}

impl std::fmt::Display for Labeled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.report.fmt(f)
    }
}

/// Attaching labels to rows in memory: both passes over the same batches.
pub struct LabelsStage;

impl crate::stages::Stage for LabelsStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Labeled;
    const NAME: &'static str = "labels-attach";

    async fn run(_session: &Session, inputs: Inputs, opts: &Options) -> Result<Labeled> {
        let mut matching = Matching::new(&inputs.labels, &inputs.origin, opts)?;
        for batch in &inputs.rows {
            matching.add(batch)?;
        }
        let mut labeling = matching.finish()?;
        let rows = inputs
            .rows
            .iter()
            .map(|b| labeling.apply(b))
            .collect::<Result<Vec<_>>>()?;
        Ok(Labeled {
            report: labeling.report(),
            rows,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::Float64Type;
    use serde_json::json;

    fn rows() -> Vec<RecordBatch> {
        let row = |task: &str, index: i32| json!({"task_id": task, "prompt": "p", "final_text": "r", "rollout_index": index});
        vec![
            crate::testing::batch(&[row("a", 0), row("a", 1)]).unwrap(),
            crate::testing::batch(&[row("b", 0)]).unwrap(),
        ]
    }

    fn attach(labels: &str) -> Result<Labeled> {
        let inputs = Inputs {
            rows: rows(),
            labels: labels.into(),
            origin: "labels.jsonl".into(),
        };
        let opts = Options {
            now: "2026-01-01T00:00:00Z".into(),
            annotator: Some("ann".into()),
            ..Options::default()
        };
        futures::executor::block_on(crate::stages::run::<LabelsStage>(
            &Session::new()?,
            inputs,
            &opts,
        ))
    }

    #[test]
    fn labels_reach_their_rows_across_batches() {
        let done = attach("{\"a#1\": 1, \"b\": 0, \"zzz\": 1}").unwrap();
        let r = &done.report;
        assert_eq!(
            (r.labels, r.matched, r.unmatched, r.rows_labeled),
            (3, 2, 1, 2)
        );
        assert_eq!(r.annotators, ["ann"]);
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        let gold = |b: usize| -> Vec<Option<f64>> {
            let a = done.rows[b]
                .column_by_name("gold_reward")
                .unwrap()
                .as_primitive::<Float64Type>();
            (0..a.len())
                .map(|i| a.is_valid(i).then(|| a.value(i)))
                .collect()
        };
        assert_eq!((gold(0), gold(1)), (vec![None, Some(1.0)], vec![Some(0.0)]));
        let json = serde_json::to_value(&done).unwrap();
        assert!(
            json.get("matched").is_some() && json.get("rows").is_none(),
            "{json}"
        );
    }

    #[test]
    fn a_tie_is_a_warning_and_nothing_or_an_ambiguous_key_is_an_error() {
        let tie =
            "{\"key\": \"b\", \"label\": 1}\n{\"key\": \"b\", \"label\": 0, \"annotator\": \"x\"}";
        let done = attach(tie).unwrap();
        assert_eq!(done.report.ties, 1);
        assert!(done.report.warnings[0].contains("split evenly"));
        let empty = attach("").unwrap_err().to_string();
        assert!(empty.contains("`labels.jsonl` holds no labels"), "{empty}");
        let many = attach("{\"a\": 1}").unwrap_err().to_string();
        assert!(many.contains("name more than one row"), "{many}");
    }
}
