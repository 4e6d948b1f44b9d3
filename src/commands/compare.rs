//! `wai compare`: before against after, with a noise floor; exits 1 when the gate fails.

use std::collections::BTreeMap;

use super::{Context, Outcome};
use crate::cli::CompareArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::report::envelope::Envelope;
use crate::stages::Session;
use crate::stages::compare::{self, By, CompareStage, Options, RunStd};
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

/// The stage's options from the command line.
fn options(args: &CompareArgs) -> Result<Options> {
    Ok(Options {
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
    })
}

/// The option keys a comparison's warnings name, and the flags that set them.
const FLAGS: &[(&str, &str)] = &[
    ("`changed`", "--changed"),
    ("`must_not_regress`", "--must-not-regress"),
    ("`run_std_runs`", "--run-std-runs"),
    ("`run_std`", "--run-std"),
    ("`target`", "--target"),
];

/// Runs `wai compare`.
pub(crate) fn run(ctx: &Context, args: &CompareArgs) -> Result<Outcome> {
    let opts = options(args)?;
    // `--changed` takes a setting's name: said as the flag's own sentence.
    if let Some(s) = args
        .changed
        .iter()
        .find(|s| !compare::SETTINGS.contains(&s.as_str()))
    {
        return Err(Error::Usage(format!(
            "--changed names one of {}, not `{s}`",
            compare::SETTINGS.join(", ")
        )));
    }
    // Every option is checked before a row is read.
    crate::stages::Options::check(&opts).map_err(|e| super::error_flags_named(e, FLAGS))?;
    let context = session::new_context(None)?;
    let scratch = super::scratch()?;
    for (name, spec) in [("before", &args.before), ("after", &args.after)] {
        super::load_table(
            ctx,
            &context,
            name,
            std::slice::from_ref(spec),
            scratch.path(),
        )?;
    }
    let report = ctx
        .runtime
        .block_on(async {
            let inputs = compare::Inputs::new(
                context.table("before").await?,
                context.table("after").await?,
            );
            let session = Session::from_context(context);
            Box::pin(crate::stages::run::<CompareStage>(&session, inputs, &opts)).await
        })
        .map_err(|e| super::error_flags_named(e, FLAGS))?;
    let envelope = Envelope::new("compare", &report)
        .inputs([&args.before, &args.after])
        .warnings(report.warnings.iter().map(String::as_str));
    let json = envelope.to_json()?;
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json,
        status: if report.ok {
            ExitStatus::Success
        } else {
            ExitStatus::Failure
        },
    }
    .flags_named(FLAGS))
}
