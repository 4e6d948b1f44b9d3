//! The gate on scored rows: pass@k, the warnings that make a run hollow, and, with a floor, the
//! decision (`wai gate`, and the report `wai grade` prints after grading).

use std::fmt::{self, Write as _};

use datafusion::prelude::DataFrame;

use super::warnings::{self, Warning};
use crate::error::{Error, Result};
use crate::stages::Session;
use crate::stages::pass_at::{self, PassAtStage};

/// Options of the gate.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The k values of the pass@k report; empty = the default.
    pub k: Vec<u32>,
    /// Bootstrap seed of the pass@k report.
    pub seed: u64,
    /// What makes a run hollow.
    pub warnings: warnings::Options,
    /// The pass@1 the run must reach; none = report only (a hollow run still fails).
    pub floor: Option<f64>,
    /// Slices of the pass@k report (`wai report` draws them); empty = none.
    pub by: Vec<pass_at::Slice>,
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        let share = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        if !share(self.warnings.max_judge_failures) {
            return Err(Error::option(
                "max_judge_failures",
                "must be a share in [0, 1]",
            ));
        }
        if !share(self.warnings.min_graded) {
            return Err(Error::option("min_graded", "must be a share in [0, 1]"));
        }
        if self.floor.is_some_and(|f| !share(f)) {
            return Err(Error::option("floor", "must be a pass rate in [0, 1]"));
        }
        if self.k.contains(&0) {
            return Err(Error::option("k", "must be at least 1"));
        }
        Ok(())
    }
}

/// What the gate reads: scored rows.
pub struct Inputs {
    /// The rows (`reward`, `judge_status`, `tools_used`, `markers`, ...).
    pub rows: DataFrame,
}

/// The floor's decision.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Decision {
    /// The floor.
    pub floor: f64,
    /// `pass`, `fail` or `hollow`.
    pub verdict: &'static str,
    /// The pass@1 it read.
    pub pass_at_1: Option<f64>,
}

/// The gate's report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The pass@k report.
    pub pass_at: pass_at::Report,
    /// The warnings, hollow ones marked.
    pub warnings: Vec<Warning>,
    /// Whether any warning makes the run hollow.
    pub hollow: bool,
    /// The decision, when there is a floor.
    pub gate: Option<Decision>,
}

impl Report {
    /// Whether the floor was asked for and not reached (a hollow run is not a fail: it was not
    /// evaluated).
    pub fn failed(&self) -> bool {
        self.gate.as_ref().is_some_and(|g| g.verdict == "fail")
    }
}

/// The columns the gate's warnings read.
pub const GATE_COLUMNS: &[&str] = &[
    crate::schema::col::TASK_ID,
    crate::schema::col::PROMPT,
    crate::schema::col::REWARD,
    crate::schema::col::JUDGE_STATUS,
    crate::schema::col::TOOLS_USED,
    crate::schema::col::MARKERS,
];

/// The gate.
pub struct GateStage;

impl crate::stages::Stage for GateStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "gate";

    async fn run(session: &Session, inputs: Inputs, options: &Options) -> Result<Report> {
        // The warnings read these: a file without one is named as such (a data error), not
        // left to fail inside a query.
        crate::schema::check_columns(inputs.rows.schema().as_arrow(), GATE_COLUMNS, "gate")?;
        let pass_opts = pass_at::Options {
            k: options.k.clone(),
            seed: options.seed,
            by: options.by.clone(),
            ..pass_at::Options::default()
        };
        let scope = session.scope_with(&[("rows", inputs.rows.clone())])?;
        let report = crate::stages::run::<PassAtStage>(
            session,
            pass_at::Inputs::new(inputs.rows),
            &pass_opts,
        )
        .await?;
        let found = warnings::check(&scope, &options.warnings).await?;
        Ok(decide(report, found, options.floor))
    }
}

/// The report of the pass@k numbers and the warnings found, decided at `floor`.
pub fn decide(pass_at: pass_at::Report, mut found: Vec<Warning>, floor: Option<f64>) -> Report {
    let pass_at_1 = pass_at.results.first().and_then(|r| r.pass_at_1);
    if let Some(note) = pass_at.results.first().and_then(|r| r.unanimous.clone()) {
        found.push(Warning {
            kind: "unanimous",
            text: note,
            hollow: false,
        });
    }
    if pass_at_1.is_none() && !found.iter().any(|w| w.hollow) {
        found.push(Warning {
            kind: "no_binary_reward",
            text: "no row has a reward of 0 or 1, so there is no pass@1. Grade with a judge that decides pass or fail.".into(),
            hollow: true,
        });
    }
    let hollow = found.iter().any(|w| w.hollow);
    let gate = floor.map(|floor| {
        let rate = pass_at_1.unwrap_or(0.0);
        let verdict = if hollow {
            "hollow"
        } else if rate < floor {
            "fail"
        } else {
            "pass"
        };
        Decision {
            floor,
            verdict,
            pass_at_1,
        }
    });
    Report {
        pass_at,
        warnings: found,
        hollow,
        gate,
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = self.pass_at.to_string().trim_end().to_owned();
        // The pass@k line already says when every row scored one value.
        let shown: Vec<&Warning> = self
            .warnings
            .iter()
            .filter(|w| w.kind != "unanimous")
            .collect();
        if !shown.is_empty() {
            text.push_str("\n== warnings (fix these before you report the number)");
            for w in shown {
                let _ = write!(text, "\n  {} {}", if w.hollow { "!!" } else { "!" }, w.text);
            }
        }
        if let Some(g) = &self.gate {
            let rate = g.pass_at_1.unwrap_or(0.0);
            let floor = g.floor;
            let line = match g.verdict {
                "hollow" => {
                    "GATE: not evaluated; the run is hollow (see the warnings marked !!)".to_owned()
                }
                "fail" => format!("GATE: FAIL pass@1 {rate:.2} < {floor:.2}"),
                _ => format!("GATE: pass pass@1 {rate:.2} >= {floor:.2}"),
            };
            let _ = write!(text, "\n{line}");
        }
        f.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::Options as _;

    fn pass_at_of(rewards: &[f64]) -> pass_at::Report {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let session = Session::new().unwrap();
            let rows = rewards.iter().enumerate().map(|(i, r)| {
                serde_json::json!({"task_id": format!("t{}", i / 4), "rollout_index": i % 4,
                    "final_text": "done", "reward": r})
            });
            let batch = crate::pipeline::row::testing::batch_of(rows);
            let rows = session.context().read_batch(batch).unwrap();
            crate::stages::run::<PassAtStage>(
                &session,
                pass_at::Inputs::new(rows),
                &pass_at::Options::default(),
            )
            .await
            .unwrap()
        })
    }

    #[test]
    fn the_floor_decides_pass_or_fail_and_a_hollow_run_is_not_evaluated() {
        let report = pass_at_of(&[1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
        let pass = decide(report.clone(), Vec::new(), Some(0.4));
        assert_eq!(pass.gate.as_ref().unwrap().verdict, "pass");
        assert!(!pass.failed() && !pass.hollow);
        assert!(pass.to_string().ends_with("GATE: pass pass@1 0.50 >= 0.40"));
        let fail = decide(report.clone(), Vec::new(), Some(0.6));
        assert!(fail.failed());
        let hollow = Warning {
            kind: "few_graded",
            text: "few".into(),
            hollow: true,
        };
        let hollow = decide(report, vec![hollow], Some(0.6));
        assert!(hollow.hollow && !hollow.failed());
        assert!(
            hollow
                .to_string()
                .contains("\n  !! few\nGATE: not evaluated")
        );
    }

    #[test]
    fn no_binary_reward_is_hollow() {
        let report = decide(pass_at_of(&[0.5, 0.25]), Vec::new(), None);
        assert!(report.hollow && report.gate.is_none());
        assert_eq!(report.warnings[0].kind, "no_binary_reward");
    }

    #[test]
    fn options_are_checked_by_key() {
        let bad = Options {
            floor: Some(1.5),
            ..Options::default()
        };
        assert!(matches!(bad.check(), Err(Error::Option { key, .. }) if key == "floor"));
        let bad = Options {
            k: vec![0],
            ..Options::default()
        };
        assert!(matches!(bad.check(), Err(Error::Option { key, .. }) if key == "k"));
    }
}
