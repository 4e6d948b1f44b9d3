//! `wai compare`: before against after, with a noise floor; exits 1 when the gate fails.

use std::collections::BTreeMap;

use super::{Context, Outcome};
use crate::cli::CompareArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::stages::compare::{self, By, Options, RunStd};
use crate::stages::pass_at::Slice;

/// Parses `--run-std`: one number, or `METRIC=X,...`.
fn run_std(text: &str) -> Result<RunStd> {
    let number = |s: &str| -> Result<f64> {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| Error::Usage(format!("--run-std: `{s}` is not a non-negative number")))
    };
    if !text.contains('=') {
        return Ok(RunStd::All(number(text)?));
    }
    let mut each = BTreeMap::new();
    for part in text.split(',') {
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| Error::Usage(format!("--run-std: `{part}` is not METRIC=X")))?;
        each.insert(compare::metric_key(name.trim()), number(value)?);
    }
    Ok(RunStd::Each(each))
}

/// Runs `wai compare`.
pub fn run(ctx: &Context, args: &CompareArgs) -> Result<Outcome> {
    let opts = Options {
        target: args.target.clone(),
        must_not_regress: args.must_not_regress.clone(),
        lower_is_better: args.lower_is_better.clone(),
        by: match args.by.as_deref() {
            None => By::Auto,
            Some("none") => By::Off,
            Some(s) => By::Slice(Slice::parse(s)),
        },
        proxy: args.proxy.clone(),
        run_std: args.run_std.as_deref().map(run_std).transpose()?,
        run_std_runs: args.run_std_runs,
        train_runs: args.train_runs.clone(),
        balance_rollouts: args.balance_rollouts,
        changed: args.changed.clone(),
        alpha: args.alpha,
        power: args.power,
        draws: args.draws,
        seed: args.seed,
        interval: args.interval.into(),
        ..Options::default()
    };
    let context = session::new_context(None)?;
    let scratch = super::scratch()?;
    super::load_table(
        ctx,
        &context,
        "before",
        std::slice::from_ref(&args.before),
        scratch.path(),
    )?;
    super::load_table(
        ctx,
        &context,
        "after",
        std::slice::from_ref(&args.after),
        scratch.path(),
    )?;
    let started = std::time::Instant::now();
    let arms = ctx.runtime.block_on(compare::read(&context, &opts))?;
    tracing::debug!(
        seconds = started.elapsed().as_secs_f64(),
        "compare: arms read"
    );
    let started = std::time::Instant::now();
    let report = compare::report(&arms, &opts)?;
    tracing::debug!(
        seconds = started.elapsed().as_secs_f64(),
        "compare: report drawn"
    );
    let doc = super::document("compare", &report);
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json: doc,
        status: if report.ok {
            ExitStatus::Success
        } else {
            ExitStatus::Failure
        },
    })
}
