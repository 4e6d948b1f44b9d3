//! The grade as a stage: a [`Grader`] the caller feeds batch by batch (a streaming grade writes
//! each graded batch as it comes), and [`GradeStage`] over rows in memory. Either way the report
//! is the judges' stamp, the [`Tally`], the judges' notes and the gate on the graded rows.

use std::fmt::{self, Write as _};

use datafusion::arrow::array::RecordBatch;

use super::gate::{self, GateStage};
use super::{Judge as _, Panel, Stamp, Status, Tally, Verdict, apply};
use crate::error::Result;
use crate::report::plural;
use crate::stages::Session;

/// Options of a grade.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The version stamped into `lineage` when the judges give none.
    pub judge_version: Option<String>,
    /// The scoring run id stamped into `lineage`.
    pub run_id: String,
    /// The gate on the graded rows (its floor decides; none = report only).
    pub gate: gate::Options,
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        crate::stages::Options::check(&self.gate)
    }
}

/// What a grade reads: rows in memory and the judges that score them.
pub struct Inputs {
    /// The rows, in order.
    pub rows: Vec<RecordBatch>,
    /// The judges (a panel when there are several: the worst verdict of a row counts).
    pub judges: Vec<Box<dyn super::Judge>>,
}

/// The report of a grade.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The judge's name, as stamped.
    pub judge: String,
    /// Its version, as stamped.
    pub judge_version: Option<String>,
    /// The scoring run.
    pub scoring_run_id: String,
    /// Counts by status.
    pub tally: Tally,
    /// What the judges (and a resumed verdict log) noticed.
    pub notes: Vec<String>,
    /// Bad input lines set aside.
    pub rejected: u64,
    /// Verdicts taken from an interrupted grade's log rather than judged now.
    pub resumed: u64,
    /// The gate on the graded rows.
    #[serde(flatten)]
    pub gate: gate::Report,
    /// The graded rows (in memory; a streaming grade has written them).
    #[serde(skip)]
    pub rows: Vec<RecordBatch>,
}

impl Report {
    /// The tally's line for the rows graded `into` a place, taking `seconds`: what a command
    /// prints first.
    pub fn headline(&self, into: &str, seconds: f64) -> String {
        let t = &self.tally;
        format!(
            "graded {} with `{}` into `{into}` in {seconds:.1} s: {} passed, {} failed, {} partial, {} unjudged",
            plural(t.rows, "row"),
            self.judge,
            t.passed,
            t.failed,
            t.partial,
            t.unjudged(),
        )
    }

    /// The lines under the headline: each failing status (with its first reason), then the
    /// notes; each line starts with a newline.
    pub fn details(&self) -> String {
        let mut text = String::new();
        for status in Status::ALL.iter().skip(1) {
            if let Some(n) = self.tally.by_status.get(status.as_str()) {
                let first = self
                    .tally
                    .first_reason
                    .get(status.as_str())
                    .map(|r| format!(" (first: {r})"))
                    .unwrap_or_default();
                let _ = write!(text, "\n  {n} {}{first}", status.as_str());
            }
        }
        for note in &self.notes {
            let _ = write!(text, "\nnote: {note}");
        }
        text
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.tally;
        writeln!(
            f,
            "graded {} with `{}`: {} passed, {} failed, {} partial, {} unjudged{}",
            plural(t.rows, "row"),
            self.judge,
            t.passed,
            t.failed,
            t.partial,
            t.unjudged(),
            self.details()
        )?;
        write!(f, "{}", self.gate)
    }
}

/// Where a batch's verdicts come from: given the panel, the batch and the index of its first row
/// in the run.
pub type VerdictsOf<'a> = dyn FnMut(&mut Panel, &RecordBatch, u64) -> Result<Vec<Verdict>> + 'a;

/// A grade under way: the judges, the stamp, and the counts of the batches graded so far.
pub struct Grader {
    panel: Panel,
    stamp: Stamp,
    tally: Tally,
    /// Rows seen so far (the index of the next batch's first row).
    seen: u64,
}

impl Grader {
    /// A grade by `judges` (one, or several as a panel), stamped as `opts` says.
    pub fn new(judges: Vec<Box<dyn super::Judge>>, opts: &Options) -> Self {
        let panel = Panel::new(judges);
        let stamp = Stamp {
            judge: panel.name().to_owned(),
            version: panel
                .version()
                .map(str::to_owned)
                .or_else(|| opts.judge_version.clone()),
            run_id: opts.run_id.clone(),
            source: "grade",
        };
        Self {
            panel,
            stamp,
            tally: Tally::default(),
            seen: 0,
        }
    }

    /// The columns the judges read, when they read only some (see [`super::Judge::reads`]).
    pub fn reads(&self) -> Option<Vec<String>> {
        self.panel.reads()
    }

    /// How the rows are stamped.
    pub fn stamp(&self) -> &Stamp {
        &self.stamp
    }

    /// `batch` graded by the judges.
    ///
    /// # Errors
    /// A judge failed as a whole, or the batch lacks the verdict columns.
    pub fn grade(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        self.grade_with(batch, &mut |panel, batch, _| panel.judge(batch))
    }

    /// `batch` graded with its verdicts from `verdicts` (given the panel, the batch and the
    /// index of its first row in the run): a caller that keeps verdicts elsewhere (a verdict
    /// log) takes those it has and asks the panel for the rest.
    ///
    /// # Errors
    /// `verdicts` failed, or the batch lacks the verdict columns.
    pub fn grade_with(
        &mut self,
        batch: &RecordBatch,
        verdicts: &mut VerdictsOf<'_>,
    ) -> Result<RecordBatch> {
        let verdicts = verdicts(&mut self.panel, batch, self.seen)?;
        self.seen += batch.num_rows() as u64;
        self.tally.add(&verdicts);
        apply(batch, &verdicts, &self.stamp)
    }

    /// What the batches graded so far came to; the judges are stopped.
    pub fn finish(self) -> Graded {
        let notes = self.panel.notes();
        Graded {
            stamp: self.stamp,
            tally: self.tally,
            notes,
        }
    }
}

/// A finished grade, before the gate: the stamp, the counts and the judges' notes.
#[derive(Debug, Clone)]
pub struct Graded {
    /// How the rows were stamped.
    pub stamp: Stamp,
    /// Counts by status.
    pub tally: Tally,
    /// What the judges noticed.
    pub notes: Vec<String>,
}

impl Graded {
    /// The report, with the gate's report on the graded rows.
    pub fn report(self, gate: gate::Report) -> Report {
        Report {
            judge: self.stamp.judge,
            judge_version: self.stamp.version,
            scoring_run_id: self.stamp.run_id,
            tally: self.tally,
            notes: self.notes,
            rejected: 0,
            resumed: 0,
            gate,
            rows: Vec::new(),
        }
    }
}

/// The grade over rows in memory: each batch judged and stamped, then the gate on the graded
/// rows.
pub struct GradeStage;

impl crate::stages::Stage for GradeStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "grade";

    async fn run(session: &Session, inputs: Inputs, opts: &Options) -> Result<Report> {
        let mut grader = Grader::new(inputs.judges, opts);
        let scored = inputs
            .rows
            .iter()
            .map(|b| grader.grade(b))
            .collect::<Result<Vec<_>>>()?;
        let done = grader.finish();
        let rows = session.scope()?.read_batches(scored.clone())?;
        let gate =
            crate::stages::run::<GateStage>(session, gate::Inputs { rows }, &opts.gate).await?;
        let mut report = done.report(gate);
        report.rows = scored;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::grade::sql::ExpressionJudge;
    use serde_json::json;

    fn rows() -> RecordBatch {
        crate::testing::batch(&[
            json!({"task_id": "a", "prompt": "p", "final_text": "yes", "rollout_index": 0}),
            json!({"task_id": "b", "prompt": "q", "final_text": "no", "rollout_index": 0}),
        ])
        .unwrap()
    }

    fn judge() -> Box<dyn super::super::Judge> {
        Box::new(
            ExpressionJudge::new(
                "sql:yes".into(),
                "CASE WHEN final_text = 'yes' THEN 1 ELSE 0 END",
            )
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn a_grade_in_memory_scores_stamps_and_gates() {
        let session = Session::new().unwrap();
        let opts = Options {
            run_id: "run-1".into(),
            judge_version: Some("7".into()),
            ..Options::default()
        };
        let inputs = Inputs {
            rows: vec![rows()],
            judges: vec![judge()],
        };
        let report = crate::stages::run::<GradeStage>(&session, inputs, &opts)
            .await
            .unwrap();
        assert_eq!(
            (report.judge.as_str(), report.scoring_run_id.as_str()),
            ("sql:yes", "run-1")
        );
        assert_eq!(report.judge_version.as_deref(), Some("7"));
        assert_eq!(
            (report.tally.rows, report.tally.passed, report.tally.failed),
            (2, 1, 1)
        );
        assert_eq!(report.rows[0].num_rows(), 2);
        assert!(
            report
                .to_string()
                .starts_with("graded 2 rows with `sql:yes`: 1 passed, 1 failed")
        );
        assert_eq!(
            report.headline("out.jsonl", 1.0),
            "graded 2 rows with `sql:yes` into `out.jsonl` in 1.0 s: 1 passed, 1 failed, 0 partial, 0 unjudged"
        );
        assert_eq!(report.details(), "");
        let json = serde_json::to_value(&report).unwrap();
        assert!(
            json.get("pass_at").is_some() && json.get("rows").is_none(),
            "{json}"
        );
    }

    #[test]
    fn a_grader_counts_each_batch_from_where_the_last_ended() {
        let mut grader = Grader::new(vec![judge()], &Options::default());
        let mut firsts = Vec::new();
        for _ in 0..2 {
            grader
                .grade_with(&rows(), &mut |panel, batch, first| {
                    firsts.push(first);
                    panel.judge(batch)
                })
                .unwrap();
        }
        assert_eq!(firsts, [0, 2]);
        let done = grader.finish();
        assert_eq!((done.tally.rows, done.stamp.source), (4, "grade"));
    }
}
