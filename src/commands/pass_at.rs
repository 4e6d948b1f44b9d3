//! `wai pass-at`: pass@1, pass^k and pass@k with task-bootstrap intervals, overall and by slice.

use super::{Context, Outcome};
use crate::cli::PassAtArgs;
use crate::error::{ExitStatus, Result};
use crate::stages::pass_at::{self, Options, Slice};

/// Runs `wai pass-at`.
pub fn run(ctx: &Context, args: &PassAtArgs) -> Result<Outcome> {
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let opts = Options {
        k: args.k.clone(),
        min_k: args.min_k,
        unanimous_short: args.unanimous_short,
        seed: args.seed,
        draws: args.draws,
        interval: args.interval.into(),
    };
    let by: Vec<Slice> = args.by.iter().map(|b| Slice::parse(b)).collect();
    let report = ctx.runtime.block_on(async {
        let rows = context.table("rows").await?;
        pass_at::run(&context, rows, &by, &opts).await
    })?;
    // No binary verdict at all: the run is hollow (exit 2), as DESIGN §9 says.
    let hollow = report.results.first().is_none_or(|r| r.n_groups == 0);
    let json = super::document("pass-at", &report);
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json,
        status: if hollow {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}
