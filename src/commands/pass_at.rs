//! `wai pass-at`: pass@1, pass^k and pass@k with task-bootstrap intervals, overall and by slice.

use std::fmt::Write as _;

use super::{Context, Outcome};
use crate::cli::PassAtArgs;
use crate::error::{ExitStatus, Result};
use crate::report::envelope::Envelope;
use crate::stages::Session;
use crate::stages::pass_at::{self, Options, PassAtStage, Slice};

/// Runs `wai pass-at`.
pub(crate) fn run(ctx: &Context, args: &PassAtArgs) -> Result<Outcome> {
    let opts = Options {
        by: args.by.iter().map(|b| Slice::parse(b)).collect(),
        k: args.k.clone(),
        min_k: args.min_k,
        unanimous_short: args.unanimous_short,
        seed: args.seed,
        draws: args.draws,
        interval: args.interval.into(),
    };
    // Every option is checked before a row is read.
    crate::stages::Options::check(&opts)?;
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let report = ctx.runtime.block_on(async {
        let rows = context.table("rows").await?;
        crate::stages::run::<PassAtStage>(
            &Session::from_context(context),
            pass_at::Inputs::new(rows),
            &opts,
        )
        .await
    })?;
    // No binary verdict at all: the run is hollow (exit 2), as DESIGN §9 says.
    let hollow = report.results.first().is_none_or(|r| r.n_groups == 0);
    let json = (Envelope::new("pass-at", &report).inputs(&args.inputs)).to_json()?;
    let mut text = report.to_string().trim_end().to_owned();
    // The note is the reference's ("set repeats>=4"); a k the user named below the floor is
    // more often a floor to lower than repeats to add, so say how.
    for r in &report.results {
        if r.k < args.min_k && args.k.contains(&r.k) && r.note.starts_with("set repeats") {
            let _ = write!(
                text,
                "\nhint: k={k} is below `--min-k` ({m}); pass `--min-k {k}` to estimate pass^{k} and pass@{k} from groups of {k} or more repeats",
                k = r.k,
                m = args.min_k
            );
        }
    }
    Ok(Outcome {
        text,
        json,
        status: if hollow {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}
