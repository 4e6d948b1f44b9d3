//! `wai holdout-size`: tasks needed to detect a gain, and the gain a task count detects.

use serde_json::{Value, json};

use super::{Context, Outcome};
use crate::cli::HoldoutArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::stages::{compare, holdout};
use crate::stats::sizing;

/// Runs `wai holdout-size`.
pub fn run(ctx: &Context, args: &HoldoutArgs) -> Result<Outcome> {
    let mut opts = holdout::Options {
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
        let (rb, ra) = ctx.runtime.block_on(compare::pass_rates(
            &context,
            "before",
            args.after.as_ref().map(|_| "after"),
        ))?;
        before = Some(rb);
        after = ra;
        Some(scratch)
    } else {
        None
    };
    let mut doc = json!({"version": 1, "command": "holdout-size"});
    let mut text = String::new();
    if let Some(n) = args.tasks {
        // The base and k a detectable effect is read at: from the rows when given.
        if let Some(b) = before.as_ref().filter(|b| !b.is_empty()) {
            let rates: Vec<f64> = b.iter().map(|t| t.rate).collect();
            opts.base = crate::stats::sum::mean(&rates).unwrap_or(opts.base);
            opts.k = u32::try_from(b.iter().map(|t| t.n).min().unwrap_or(1)).unwrap_or(u32::MAX);
        }
        if !(opts.power > 0.0 && opts.power < 1.0) || !(opts.alpha > 0.0 && opts.alpha < 1.0) {
            return Err(Error::Usage("--power and --alpha are in (0, 1)".into()));
        }
        let effect = sizing::detectable_effect(n, opts.base, opts.k, opts.power, opts.alpha);
        text.push_str(&match effect {
            Some(e) => format!(
                "{n} tasks at k={} and base {:.3} can detect a gain of about {e:+.4} at {:.0}% power, alpha {} (binomial model)\n",
                opts.k,
                opts.base,
                opts.power * 100.0,
                opts.alpha
            ),
            None => format!("{n} task(s): a comparison needs 2 or more tasks\n"),
        });
        if let Some(obj) = doc.as_object_mut() {
            obj.insert(
                "detectable_effect".into(),
                json!({"n_tasks": n, "base": opts.base, "k": opts.k, "power": opts.power, "alpha": opts.alpha, "effect": effect}),
            );
        }
    }
    if args.effect.is_some() {
        let report = holdout::size(&opts, before.as_deref(), after.as_deref())?;
        text.push_str(&report.to_string());
        if let (Some(obj), Ok(Value::Object(r))) =
            (doc.as_object_mut(), serde_json::to_value(&report))
        {
            obj.extend(r);
        }
    }
    Ok(Outcome {
        text: text.trim_end().to_owned(),
        json: doc,
        status: ExitStatus::Success,
    })
}
