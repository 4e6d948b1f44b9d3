//! `wai variance`: how much a metric moves when the same tasks are run again.

use std::collections::BTreeMap;

use super::{Context, Outcome};
use crate::cli::VarianceArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::stages::variance;

/// Runs `wai variance`.
pub fn run(ctx: &Context, args: &VarianceArgs) -> Result<Outcome> {
    if args.metric != "pass_at_1" && !args.metric.starts_with("marker:") {
        return Err(Error::Usage(format!(
            "--metric is `pass_at_1` or `marker:NAME`, not `{}`",
            args.metric
        )));
    }
    let context = session::new_context(None)?;
    let scratch = super::scratch()?;
    let mut means = BTreeMap::new();
    let mut labels = Vec::new();
    let mut unkeyed = 0;
    if args.inputs.len() == 1 {
        super::load_table(ctx, &context, "rows", &args.inputs, scratch.path())?;
        let key = variance::run_key(args.by.as_deref());
        labels = ctx.runtime.block_on(async {
            unkeyed = variance::task_means(&context, "rows", &key, &mut means).await?;
            variance::run_labels(&context, "rows", &key).await
        })?;
    } else {
        for (i, input) in args.inputs.iter().enumerate() {
            let table = format!("run_{}", i + 1);
            super::load_table(
                ctx,
                &context,
                &table,
                std::slice::from_ref(input),
                scratch.path(),
            )?;
            let key = format!("'{table}'");
            ctx.runtime
                .block_on(variance::task_means(&context, &table, &key, &mut means))?;
            labels.push(table);
        }
    }
    let report = variance::report(&args.metric, &labels, &means, unkeyed)?;
    let json = super::document("variance", &report);
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json,
        status: ExitStatus::Success,
    })
}
