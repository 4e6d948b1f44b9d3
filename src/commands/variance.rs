//! `wai variance`: how much a metric moves when the same tasks are run again.

use super::{Context, Outcome};
use crate::cli::VarianceArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::report::envelope::Envelope;
use crate::stages::Session;
use crate::stages::variance::{self, Options, VarianceStage};

/// Runs `wai variance`.
pub(crate) fn run(ctx: &Context, args: &VarianceArgs) -> Result<Outcome> {
    if args.metric != "pass_at_1" && !args.metric.starts_with("marker:") {
        return Err(Error::Usage(format!(
            "--metric is `pass_at_1` or `marker:NAME`, not `{}`",
            args.metric
        )));
    }
    let opts = Options {
        metric: args.metric.clone(),
        by: args.by.clone(),
    };
    // Every option is checked before a row is read.
    crate::stages::Options::check(&opts).map_err(|e| super::error_flags_named(e, FLAGS))?;
    let context = session::new_context(None)?;
    let scratch = super::scratch()?;
    // One table is split by its run key; several are a run each.
    let names: Vec<String> = if args.inputs.len() == 1 {
        super::load_table(ctx, &context, "rows", &args.inputs, scratch.path())?;
        vec!["rows".into()]
    } else {
        let names: Vec<String> = (1..=args.inputs.len())
            .map(|i| format!("run_{i}"))
            .collect();
        for (table, input) in names.iter().zip(&args.inputs) {
            let input = std::slice::from_ref(input);
            super::load_table(ctx, &context, table, input, scratch.path())?;
        }
        names
    };
    let report = ctx.runtime.block_on(async {
        let mut runs = Vec::new();
        for name in &names {
            runs.push(context.table(name.as_str()).await?);
        }
        let session = Session::from_context(context);
        crate::stages::run::<VarianceStage>(&session, variance::Inputs { runs }, &opts).await
    })?;
    let json = (Envelope::new("variance", &report).inputs(&args.inputs)).to_json()?;
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json,
        status: ExitStatus::Success,
    }
    .flags_named(FLAGS))
}

/// The option keys the variance's notes and text name (its own and `wai compare`'s), and the
/// flags that set them.
const FLAGS: &[(&str, &str)] = &[
    ("`by`", "--by"),
    ("`run_std_runs`", "--run-std-runs"),
    ("`run_std`", "--run-std"),
];
