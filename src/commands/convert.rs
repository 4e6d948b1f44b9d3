//! `wai convert`: rows between JSONL and Parquet, streaming, written whole or not at all.

use std::time::Instant;

use serde_json::json;

use super::{Context, Outcome};
use crate::cli::ConvertArgs;
use crate::error::{ExitStatus, Result};
use crate::pipeline::rows_out::{output_format, stream_rows};
use crate::pipeline::source::{self, Format};
use crate::report::plural;

/// Runs `wai convert`.
pub fn run(ctx: &Context, args: &ConvertArgs) -> Result<Outcome> {
    let started = Instant::now();
    let format = output_format(&args.output.out, args.output.to.map(Into::into))?;
    let inputs = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    crate::pipeline::output::rows_apart(&args.output.out, args.output.rejects.as_deref(), &inputs)?;
    tracing::info!(inputs = inputs.len(), output = %args.output.out.display(), "converting");
    let counts = stream_rows(
        ctx,
        &inputs,
        &args.output.out,
        args.output.rejects.as_deref(),
        format,
        "converting",
        &mut |batch| Ok(vec![batch]),
    )?;
    let elapsed = started.elapsed();
    let mut text = format!(
        "wrote {} to `{}` ({}) from {} in {:.1} s",
        plural(counts.rows, "row"),
        args.output.out.display(),
        match format {
            Format::Parquet => "parquet",
            Format::Jsonl => "jsonl",
        },
        plural(inputs.len() as u64, "input"),
        elapsed.as_secs_f64(),
    );
    if let Some(path) = &args.output.rejects {
        text.push_str(&format!(
            "\n{} set aside in `{}`",
            plural(counts.rejected, "bad line"),
            path.display()
        ));
    }
    let json = json!({
        "version": 1,
        "command": "convert",
        "inputs": inputs.iter().map(|i| i.display.clone()).collect::<Vec<_>>(),
        "output": args.output.out.display().to_string(),
        "format": format,
        "rows": counts.rows,
        "rejected": counts.rejected,
        "rejects_file": args.output.rejects.as_ref().map(|p| p.display().to_string()),
        "bytes_in": counts.bytes,
        "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    });
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
