//! `wai holdout-size`: tasks needed to detect a gain, and the gain a task count detects.

use super::{Context, Outcome};
use crate::cli::HoldoutArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::report::envelope::Envelope;
use crate::stages::holdout::{self, HoldoutStage};
use crate::stages::{Session, compare};

/// Runs `wai holdout-size`.
pub(crate) fn run(ctx: &Context, args: &HoldoutArgs) -> Result<Outcome> {
    let opts = holdout::Options {
        effect: args.effect.unwrap_or(0.05),
        base: args.base,
        k: args.k,
        power: args.power,
        alpha: args.alpha,
        task_std: args.task_std,
        seed: args.seed,
        ..holdout::Options::default()
    };
    if args.after.is_some() && args.before.is_none() {
        return Err(Error::Usage(
            "--after needs --before (the sd is of paired differences)".into(),
        ));
    }
    // Every option is checked before a row is read.
    crate::stages::Options::check(&opts)?;
    let session = Session::from_context(session::new_context(None)?);
    let scratch = super::scratch()?;
    let mut inputs = holdout::Inputs {
        tasks: args.tasks,
        size: args.effect.is_some(),
        ..holdout::Inputs::default()
    };
    let mut named = Vec::new();
    for (name, spec) in [("before", &args.before), ("after", &args.after)] {
        if let Some(spec) = spec {
            let specs = std::slice::from_ref(spec);
            super::load_table(ctx, session.context(), name, specs, scratch.path())?;
            named.push(spec);
        }
    }
    let report = ctx.runtime.block_on(async {
        if args.before.is_some() {
            let table = |t: &'static str| session.context().table(t);
            let after = match &args.after {
                Some(_) => Some(table("after").await?),
                None => None,
            };
            let (rb, ra) = compare::pass_rates(&session, table("before").await?, after).await?;
            (inputs.before, inputs.after) = (Some(rb), ra);
        }
        crate::stages::run::<HoldoutStage>(&session, inputs, &opts).await
    })?;
    let warnings = report.size.iter().flat_map(|r| r.warnings.iter());
    let envelope = Envelope::new("holdout-size", &report)
        .inputs(named)
        .warnings(warnings.map(String::as_str));
    let json = envelope.to_json()?;
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json,
        status: ExitStatus::Success,
    })
}
