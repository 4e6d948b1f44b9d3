//! `wai ingest`: foreign traces to rows, written whole or not at all.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use super::{Context, Outcome};
use crate::cli::IngestArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::ingest::{self, Destination, Format, Ingested, Options, OtelFields};
use crate::pipeline::source;
use crate::report::envelope::{Envelope, Output, Warning};
use crate::report::plural;

/// What `--json` reports (beside the envelope's inputs, outputs and warnings).
#[derive(serde::Serialize)]
struct Report<'a> {
    warnings: Vec<&'a str>,
    no_content: u64,
    not_genai: u64,
    /// Each input and the format it was read as.
    inputs: Vec<InputFormat<'a>>,
    rows: u64,
    rejected: u64,
    not_rows: &'a BTreeMap<&'static str, u64>,
    extra_fields: &'a BTreeMap<String, u64>,
    bytes_in: u64,
}

#[derive(serde::Serialize)]
struct InputFormat<'a> {
    input: &'a str,
    format: Format,
}

/// The reader's options from the command line.
fn options(args: &IngestArgs) -> Options {
    Options {
        format: args.format,
        task_field: args.task_field.clone(),
        trial_field: args.trial_field.clone(),
        reward_field: args.reward_field.clone(),
        messages_field: args.messages_field.clone(),
        privileged: args.privileged.clone(),
        otel: OtelFields {
            reward_attr: args.reward_attr.clone(),
            task_attr: args.task_attr.clone(),
            ..OtelFields::default()
        },
        score: args.score.clone(),
    }
}

/// Runs `wai ingest`.
pub(crate) fn run(ctx: &Context, args: &IngestArgs) -> Result<Outcome> {
    let started = Instant::now();
    let (out, rejects) = (&args.output.out, args.output.rejects.as_deref());
    let format = crate::pipeline::rows_out::output_format(out, args.output.to.map(Into::into))?;
    let inputs = ctx.runtime.block_on(source::resolve_traces(&args.inputs))?;
    crate::pipeline::output::rows_apart(out, rejects, &inputs)?;
    if let Some(p) = inputs.iter().find(|i| i.format == source::Format::Parquet) {
        return Err(Error::Usage(format!(
            "`{}` is Parquet, already rows: read it with `wai convert`",
            p.display
        )));
    }
    let total = inputs.iter().map(|i| i.size).sum::<Option<u64>>();
    let bar = ctx.bytes_bar(total, "ingesting");
    let to = Destination {
        out,
        format,
        rejects,
    };
    let got = ingest::ingest_inputs(ctx, &inputs, &options(args), &to, &|n| bar.inc(n))?;
    bar.finish_and_clear();
    let warnings = warnings(&got);
    let text = text(args, &got, &warnings, started.elapsed().as_secs_f64());
    let report = Report {
        warnings: warnings.iter().map(|w| w.message.as_str()).collect(),
        no_content: got.no_content,
        not_genai: got.not_genai,
        inputs: (got.formats.iter())
            .map(|(input, format)| InputFormat {
                input,
                format: *format,
            })
            .collect(),
        rows: got.counts.rows,
        rejected: got.counts.rejected,
        not_rows: &got.not_rows,
        extra_fields: &got.extra_fields,
        bytes_in: got.counts.bytes,
    };
    let mut envelope = Envelope::new("ingest", &report)
        .inputs(inputs.iter().map(|i| &i.display))
        .output(Output::new(out.display(), "rows").rows(got.counts.rows));
    if let Some(path) = rejects {
        envelope = envelope.output(Output::new(path.display(), "rejects"));
    }
    let json = (envelope.warnings(warnings.clone())).to_json()?;
    let status = if got.counts.rows == 0 {
        ExitStatus::Hollow
    } else {
        ExitStatus::Success
    };
    Ok(Outcome { text, json, status })
}

/// The run's warnings: conversations without content, traces without GenAI spans, no row.
fn warnings(got: &Ingested) -> Vec<Warning> {
    let mut warnings = Vec::new();
    if got.no_content > 0 {
        warnings.push(Warning::coded("no_content", format!(
            "{} carried no message content (rows marked `no_content`: reward, task, tools and usage only); turn content capture on in the instrumentation (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`) for prompts and replies",
            plural(got.no_content, "conversation")
        )));
    }
    if got.not_genai > 0 {
        warnings.push(Warning::coded(
            "not_genai",
            format!(
                "{} had no GenAI span and gave no row",
                plural(got.not_genai, "trace")
            ),
        ));
    }
    if got.counts.rows == 0 {
        warnings.push(Warning::coded(
            "hollow",
            "no row was written: nothing in the input became a rollout (a hollow run, exit 2)",
        ));
    }
    warnings
}

/// The text report: each input's format, what was written, what gave no row, what rides in
/// `extra`, and the warnings.
fn text(args: &IngestArgs, got: &Ingested, warnings: &[Warning], elapsed_s: f64) -> String {
    let mut text = String::new();
    for (input, format) in &got.formats {
        let format = serde_json::to_value(format).unwrap_or_default();
        let _ = writeln!(text, "`{input}`: {}", format.as_str().unwrap_or(""));
    }
    let _ = write!(
        text,
        "wrote {} to `{}` in {elapsed_s:.1} s; {}",
        plural(got.counts.rows, "row"),
        args.output.out.display(),
        plural(got.counts.rejected, "reject")
    );
    if let Some(path) = &args.output.rejects {
        let _ = write!(text, " (in `{}`)", path.display());
    }
    if !got.not_rows.is_empty() {
        let list: Vec<String> = got
            .not_rows
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = write!(
            text,
            "\nrecords that gave no row, by reason: {}{}",
            list.join(", "),
            if args.output.rejects.is_some() {
                " (all in the rejects file)"
            } else {
                " (`--rejects FILE` keeps them)"
            }
        );
    }
    if !got.extra_fields.is_empty() {
        let list: Vec<String> = (got.extra_fields.iter())
            .map(|(k, n)| format!("{k} ({n})"))
            .collect();
        let _ = write!(text, "\nfields carried in `extra`: {}", list.join(", "));
    }
    for w in warnings {
        let _ = write!(text, "\nwarning: {}", w.message);
    }
    text
}
