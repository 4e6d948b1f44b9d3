//! `wai convert`: rows between JSONL and Parquet, streaming, written whole or not at all.

use std::fmt::Write as _;
use std::time::Instant;

use super::{Context, Outcome};
use crate::cli::ConvertArgs;
use crate::error::{ExitStatus, Result};
use crate::pipeline::rows_out::{output_format, stream_rows};
use crate::pipeline::source::{self, Format};
use crate::report::envelope::{Envelope, Output};
use crate::report::plural;

/// What `--json` reports (beside the envelope's inputs and outputs).
#[derive(serde::Serialize)]
struct Report {
    /// The output's format.
    format: Format,
    /// Rows written.
    rows: u64,
    /// Bad lines set aside.
    rejected: u64,
    /// Bytes read.
    bytes_in: u64,
}

/// Runs `wai convert`.
pub(crate) fn run(ctx: &Context, args: &ConvertArgs) -> Result<Outcome> {
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
        let _ = write!(
            text,
            "\n{} set aside in `{}`",
            plural(counts.rejected, "bad line"),
            path.display()
        );
    }
    let report = Report {
        format,
        rows: counts.rows,
        rejected: counts.rejected,
        bytes_in: counts.bytes,
    };
    let mut envelope = Envelope::new("convert", report)
        .inputs(inputs.iter().map(|i| &i.display))
        .output(Output::new(args.output.out.display(), "rows").rows(counts.rows));
    if let Some(path) = &args.output.rejects {
        envelope = envelope.output(Output::new(path.display(), "rejects").rows(counts.rejected));
    }
    let json = envelope.to_json()?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
