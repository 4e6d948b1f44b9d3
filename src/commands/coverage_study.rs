//! `wai coverage-study`: the coverage of every interval wai prints, as Markdown tables.

use std::io::Write;

use super::Outcome;
use crate::cli::CoverageStudyArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::report::envelope::{Envelope, Output};
use crate::study;

/// The most simulated runs a cell.
const MAX_RUNS: u64 = 100_000;

/// Runs `wai coverage-study`.
pub(crate) fn run(args: &CoverageStudyArgs) -> Result<Outcome> {
    if args.runs == 0 || args.draws == 0 {
        return Err(Error::Usage(
            "`--runs` and `--draws` must be at least 1".into(),
        ));
    }
    // Each run of each cell holds its draws: a billion of either does not fit in memory.
    let why = "each run of each cell is simulated and bootstrapped in memory";
    crate::stages::at_most(
        "draws",
        u64::from(args.draws),
        u64::from(crate::stages::MAX_DRAWS),
        why,
    )?;
    for runs in std::iter::once(args.runs).chain(args.runs_largest) {
        crate::stages::at_most("runs", u64::from(runs), MAX_RUNS, why)?;
    }
    let opts = study::Options {
        runs: args.runs,
        runs_largest: args.runs_largest,
        draws: args.draws,
        seed: args.seed,
        cells: args.cells.clone(),
    };
    let start = std::time::Instant::now();
    let rows = study::run(&opts, |cell, _| {
        tracing::info!(cell = %cell.key(), elapsed_s = start.elapsed().as_secs(), "cell done");
    });
    if let Some(path) = &args.out {
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        for r in &rows {
            let line = serde_json::to_string(r).map_err(|e| Error::Internal(e.to_string()))?;
            writeln!(file, "{line}").map_err(io)?;
        }
        file.flush().map_err(io)?;
    }
    let text = format!(
        "{}\n{} rows in {:.0} s (runs {}, draws {}, seed {})",
        study::markdown(&rows),
        rows.len(),
        start.elapsed().as_secs_f64(),
        args.runs,
        args.draws,
        args.seed
    );
    let mut envelope = Envelope::new("coverage-study", serde_json::json!({ "rows": rows }));
    if let Some(path) = &args.out {
        envelope = envelope.output(Output::new(path.display(), "rows").rows(rows.len() as u64));
    }
    Ok(Outcome {
        text,
        json: envelope.to_json()?,
        status: ExitStatus::Success,
    })
}
