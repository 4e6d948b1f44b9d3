//! `wai variance`: how much a metric moves when the same tasks are run again.

use std::collections::BTreeMap;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use serde_json::{Value, json};

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
        let columns: Vec<String> = ctx.runtime.block_on(async {
            Ok::<_, Error>(
                context
                    .table("rows")
                    .await?
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect(),
            )
        })?;
        let key = variance::run_key(args.by.as_deref(), &columns);
        let found = ctx.runtime.block_on(async {
            let batches = context
                .sql(&format!(
                    "SELECT DISTINCT {key} AS run FROM rows WHERE {key} IS NOT NULL AND {key} <> ''"
                ))
                .await?
                .collect()
                .await?;
            let mut out = Vec::new();
            for b in &batches {
                let c = cast(b.column(0), &DataType::Utf8)?;
                let c = c.as_string::<i32>();
                out.extend((0..b.num_rows()).map(|i| c.value(i).to_owned()));
            }
            unkeyed = variance::task_means(&context, "rows", &key, &mut means).await?;
            Ok::<_, Error>(out)
        })?;
        labels = found;
        // Run numbers in numeric order, other labels in text order.
        labels.sort_by(|a, b| match (a.parse::<i64>(), b.parse::<i64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            _ => a.cmp(b),
        });
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
    let mut json = json!({"version": 1, "command": "variance"});
    if let (Some(obj), Ok(Value::Object(r))) = (json.as_object_mut(), serde_json::to_value(&report))
    {
        obj.extend(r);
    }
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json,
        status: ExitStatus::Success,
    })
}
