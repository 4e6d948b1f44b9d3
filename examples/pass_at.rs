//! Read rows and estimate pass@1, pass^k and pass@k with task-bootstrap intervals, overall and by
//! a slice: the library under `wai pass-at`.
//!
//! ```sh
//! cargo run --example pass_at                       # 20,000 synthetic rows
//! cargo run --example pass_at -- runs/scored.parquet
//! ```

#![allow(clippy::print_stdout, reason = "an example prints what it found")]

use wai::stages::pass_at::{self, PassAtStage, Slice};
use wai::stages::{Session, run};

#[tokio::main]
async fn main() -> wai::Result<()> {
    let session = Session::new()?;
    // Rows from a Parquet file in the row schema, or made in memory as `wai gen` makes them.
    let rows = match std::env::args().nth(1) {
        Some(path) => {
            session
                .context()
                .read_parquet(path, datafusion::prelude::ParquetReadOptions::default())
                .await?
        }
        None => wai::testing::frame(&session, wai::testing::generated(20_000, 7)?)?,
    };
    let options = pass_at::Options {
        k: vec![4],
        by: vec![Slice::parse("dims.tier")],
        seed: 0,
        ..pass_at::Options::default()
    };
    // `run` checks the options before it reads a row, then runs the stage in its own scope.
    let report = run::<PassAtStage>(&session, pass_at::Inputs::new(rows), &options).await?;
    print!("{report}");
    let overall = &report.results[0];
    println!(
        "pass@1 = {:?} over {} tasks, 95% interval {:?}",
        overall.pass_at_1, overall.n_groups, overall.ci95
    );
    Ok(())
}
