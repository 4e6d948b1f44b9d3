//! `wai markers`: per-marker means with task-bootstrap intervals and never-varied warnings.

use super::{Context, Outcome};
use crate::cli::MarkersArgs;
use crate::error::{ExitStatus, Result};
use crate::report::envelope::Envelope;
use crate::stages::Session;
use crate::stages::markers::{self, MarkersStage, Options};

/// Runs `wai markers`.
pub(crate) fn run(ctx: &Context, args: &MarkersArgs) -> Result<Outcome> {
    let opts = Options {
        names: args.names.clone(),
        seed: args.seed,
        draws: args.draws,
        interval: args.interval.into(),
    };
    // Every option is checked before a row is read.
    crate::stages::Options::check(&opts)?;
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let report = ctx.runtime.block_on(async {
        let rows = context.table("rows").await?;
        let session = Session::from_context(context);
        crate::stages::run::<MarkersStage>(&session, markers::Inputs { rows }, &opts).await
    })?;
    let envelope = Envelope::new("markers", &report).inputs(&args.inputs);
    let json = envelope.to_json()?;
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json,
        status: ExitStatus::Success,
    })
}
