//! `wai holdout-size`: tasks needed to detect a gain, and the gain a task count detects.

use super::{Context, Outcome};
use crate::cli::HoldoutArgs;
use crate::error::{ExitStatus, Result};
use crate::pipeline::session;
use crate::stages::{Session, compare, holdout};

/// Runs `wai holdout-size`.
pub fn run(ctx: &Context, args: &HoldoutArgs) -> Result<Outcome> {
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
    let (mut before, mut after) = (None, None);
    let _scratch = if let Some(b) = &args.before {
        let context = session::new_context(None)?;
        let scratch = super::scratch()?;
        super::load_table(
            ctx,
            &context,
            "before",
            std::slice::from_ref(b),
            scratch.path(),
        )?;
        if let Some(a) = &args.after {
            super::load_table(
                ctx,
                &context,
                "after",
                std::slice::from_ref(a),
                scratch.path(),
            )?;
        }
        let (rb, ra) = ctx.runtime.block_on(async {
            let after = match &args.after {
                Some(_) => Some(context.table("after").await?),
                None => None,
            };
            let before = context.table("before").await?;
            compare::pass_rates(&Session::from_context(context), before, after).await
        })?;
        before = Some(rb);
        after = ra;
        Some(scratch)
    } else {
        None
    };
    let detectable = args
        .tasks
        .map(|n| holdout::detectable(n, &opts, before.as_deref()))
        .transpose()?;
    let report = args
        .effect
        .map(|_| holdout::size(&opts, before.as_deref(), after.as_deref()))
        .transpose()?;
    let mut doc = super::document("holdout-size", &report);
    let mut text = String::new();
    if let Some(d) = &detectable {
        text.push_str(&d.to_string());
        doc["detectable_effect"] = serde_json::to_value(d).unwrap_or_default();
    }
    if let Some(r) = &report {
        text.push_str(&r.to_string());
    }
    Ok(Outcome {
        text: text.trim_end().to_owned(),
        json: doc,
        status: ExitStatus::Success,
    })
}
