//! `wai preflight` and `wai coverage-gap`: what the simulator will make of the tools and policy,
//! and which rules and tools a set of test asks reaches.

use std::collections::BTreeMap;
use std::path::Path;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use serde_json::Value;

use super::{Context, Outcome};
use crate::cli::{CoverageGapArgs, PreflightArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::world_files::{read_asks, read_tools};
use crate::stages::coverage;

fn policy_text(path: Option<&Path>) -> Result<String> {
    match path {
        Some(p) => std::fs::read_to_string(p).map_err(|e| Error::read(p, e)),
        None => Ok(String::new()),
    }
}

/// Runs `wai preflight`.
pub fn preflight(args: &PreflightArgs) -> Result<Outcome> {
    let tools = read_tools(&args.tools)?;
    let policy = policy_text(args.policy.as_deref())?;
    let report = coverage::preflight(&tools, &policy, args.rule_cap, args.budget, args.repeats);
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json: super::document("preflight", &report),
        status: ExitStatus::Success,
    })
}

/// Reads asks from a text file, JSONL, or rows (Parquet, a folder, a URL).
fn asks(ctx: &Context, spec: &str) -> Result<Vec<String>> {
    let path = Path::new(spec);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_lowercase();
    let local = path.is_file();
    if local && ext == "json" {
        // A JSON array of asks: strings, or objects with a `prompt`.
        let text = std::fs::read_to_string(path).map_err(|e| Error::read(path, e))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| Error::Usage(format!("`{spec}` is not JSON: {e}")))?;
        let Value::Array(items) = v else {
            return Err(Error::Usage(format!(
                "`{spec}`: expected a JSON array of asks (strings or objects with a `prompt`)"
            )));
        };
        return Ok(items
            .iter()
            .filter_map(|i| {
                i.as_str()
                    .or_else(|| i.get("prompt").and_then(Value::as_str))
                    .map(str::to_owned)
            })
            .collect());
    }
    if local && ext != "parquet" {
        return read_asks(path);
    }
    let (context, _scratch) = super::rows_session(ctx, &[spec.to_owned()])?;
    let batches = ctx
        .runtime
        .block_on(crate::pipeline::session::collect_in_file_order(
            &context,
            "SELECT prompt FROM rows WHERE prompt IS NOT NULL",
        ))?;
    let mut out = Vec::new();
    for b in &batches {
        out.extend(
            text(b.column(0))?
                .as_string::<i32>()
                .iter()
                .flatten()
                .map(str::to_owned),
        );
    }
    Ok(out)
}

/// A column as `Utf8`, whatever string type the session read it as.
fn text(column: &ArrayRef) -> Result<ArrayRef> {
    Ok(datafusion::arrow::compute::cast(
        column,
        &datafusion::arrow::datatypes::DataType::Utf8,
    )?)
}

/// Runs `wai coverage-gap`.
pub fn coverage_gap(ctx: &Context, args: &CoverageGapArgs) -> Result<Outcome> {
    let tools = read_tools(&args.tools)?;
    let policy = policy_text(args.policy.as_deref())?;
    let asks = asks(ctx, &args.asks)?;
    let rows = match &args.rows {
        Some(spec) => {
            let (context, _scratch) = super::rows_session(ctx, &[spec.clone()])?;
            let frame = ctx.runtime.block_on(context.sql("SELECT dims['rule'] AS rule, count(*) AS n FROM rows WHERE dims['rule'] IS NOT NULL GROUP BY 1"))?;
            let batches = ctx.runtime.block_on(frame.collect())?;
            let mut counts = BTreeMap::new();
            for b in &batches {
                let rules = text(b.column(0))?;
                let rules = rules.as_string::<i32>();
                let n = datafusion::arrow::compute::cast(
                    b.column(1),
                    &datafusion::arrow::datatypes::DataType::UInt64,
                )?;
                let n = n.as_primitive::<datafusion::arrow::datatypes::UInt64Type>();
                for i in 0..b.num_rows() {
                    if rules.is_valid(i) {
                        counts.insert(rules.value(i).to_owned(), n.value(i));
                    }
                }
            }
            Some(counts)
        }
        None => None,
    };
    let mut report = coverage::coverage_gap(&asks, &tools, &policy, args.rule_cap, rows);
    let text = report.to_string().trim_end().to_owned();
    // The per-ask detail of a big set stays out of the JSON document past 1,000 asks.
    let n = report.per_ask.len();
    report.per_ask.truncate(1000);
    let mut json = super::document("coverage-gap", &report);
    if let Some(obj) = json.as_object_mut() {
        obj.insert("per_ask_total".into(), Value::from(n));
    }
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
