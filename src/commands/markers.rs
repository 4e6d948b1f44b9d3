//! `wai markers`: per-marker means with task-bootstrap intervals and never-varied warnings.

use serde_json::json;

use super::{Context, Outcome};
use crate::cli::MarkersArgs;
use crate::error::{ExitStatus, Result};
use crate::stages::markers::{self, Options};

/// Runs `wai markers`.
pub fn run(ctx: &Context, args: &MarkersArgs) -> Result<Outcome> {
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let opts = Options {
        names: args.names.clone(),
        seed: args.seed,
        draws: args.draws,
        interval: args.interval.into(),
    };
    let report = ctx.runtime.block_on(async {
        let rows = context.table("rows").await?;
        markers::run(&context, rows, &opts).await
    })?;
    let mut json = json!({"version": 1, "command": "markers", "seed": report.seed, "draws": report.draws,
            "interval": report.interval});
    if let Some(obj) = json.as_object_mut() {
        let by_name: serde_json::Map<String, serde_json::Value> = report
            .markers
            .iter()
            .map(|(n, s)| (n.clone(), serde_json::to_value(s).unwrap_or_default()))
            .collect();
        obj.insert("markers".into(), serde_json::Value::Object(by_name));
    }
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json,
        status: ExitStatus::Success,
    })
}
