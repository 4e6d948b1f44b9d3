//! Grade rows with a verifier judge, then gate them: the library under `wai grade --judge
//! verify:FILE` and `wai gate --floor F`.
//!
//! ```sh
//! cargo run --example grade_then_gate
//! ```

#![allow(clippy::print_stdout, reason = "an example prints what it found")]

use wai::stages::grade::gate::{self, GateStage};
use wai::stages::grade::verify::VerifierJudge;
use wai::stages::grade::{Judge, Stamp, apply, warnings};
use wai::stages::{Session, run};

/// A verifier file: the reply mentions a refund or an apology, the agent looked the order up,
/// and the reply is not a wall of text. Every check must hold.
const JUDGE: &str = r#"
name = "refund_policy"
[check]
all = [
  { regex = "refund(ed)?|sorry" },
  { tool_called = "lookup_order" },
  { length = { max = 600 } },
]
"#;

#[tokio::main]
async fn main() -> wai::Result<()> {
    let session = Session::new()?;
    // 5,000 rows as `wai gen` makes them (a support agent with six tools).
    let rows = wai::testing::generated(5_000, 3)?;

    // Grade: one verdict per row, written into the rows' reward, status and lineage columns.
    let mut judge = VerifierJudge::parse(JUDGE, "example", "refund_policy")?;
    let stamp = Stamp {
        judge: judge.name().to_owned(),
        version: judge.version().map(str::to_owned),
        run_id: "example".into(),
        source: "grade",
    };
    let mut graded = Vec::with_capacity(rows.len());
    for batch in &rows {
        let verdicts = judge.judge(batch)?;
        graded.push(apply(batch, &verdicts, &stamp)?);
    }

    // Gate: the pass@k line, the warnings that make a run hollow, and the floor's decision.
    let options = gate::Options {
        k: Vec::new(),
        seed: 0,
        warnings: warnings::Options {
            max_judge_failures: 0.1,
            min_graded: 0.9,
            ..warnings::Options::default()
        },
        floor: Some(0.2),
        by: Vec::new(),
    };
    let frame = wai::testing::frame(&session, graded)?;
    let report = run::<GateStage>(&session, gate::Inputs { rows: frame }, &options).await?;
    println!("{report}");
    let decision = report.gate.as_ref().map_or("report only", |g| g.verdict);
    println!("gate: {decision} (hollow: {})", report.hollow);
    Ok(())
}
