//! `wai labels attach`: hand labels onto rows as gold.

use super::{Context, Outcome};
use crate::cli::{LabelsAttachArgs, LabelsCommand};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::OnBadRow;
use crate::pipeline::read::Reader;
use crate::pipeline::source;
use crate::report::envelope::{Envelope, Output};
use crate::stages::labels::{self, Index};

/// Runs `wai labels ...`.
pub(crate) fn run(ctx: &Context, command: &LabelsCommand) -> Result<Outcome> {
    match command {
        LabelsCommand::Attach(args) => attach(ctx, args),
    }
}

fn attach(ctx: &Context, args: &LabelsAttachArgs) -> Result<Outcome> {
    let kind = labels::kind(&args.kind)?;
    let format =
        crate::pipeline::rows_out::output_format(&args.output.out, args.output.to.map(Into::into))?;
    let origin = args.labels.display().to_string();
    let text = std::fs::read_to_string(&args.labels).map_err(|e| Error::read(&args.labels, e))?;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let parsed = labels::parse(&text, &origin, &kind, args.annotator.as_deref(), &now)?;
    if parsed.is_empty() {
        return Err(Error::Input {
            stage: "labels attach".into(),
            message: format!(
                "`{origin}` holds no labels: write JSON Lines of {{\"key\": ..., \"label\": 0/1}}, an array of them, or a {{\"KEY\": 0/1}} map"
            ),
        });
    }
    let inputs = ctx
        .runtime
        .block_on(source::resolve(std::slice::from_ref(&args.rows)))?;
    crate::pipeline::output::rows_apart(&args.output.out, args.output.rejects.as_deref(), &inputs)?;

    // First pass: which rows the labels' keys name. Rows are read as the second pass reads them,
    // so derived rollout ids agree.
    let mut index = Index::new(&parsed);
    {
        let mut rejects = Vec::new();
        let on_bad = if args.output.rejects.is_some() {
            OnBadRow::Reject(&mut rejects)
        } else {
            OnBadRow::Fail
        };
        let mut reader = Reader::new(ctx.runtime.handle().clone(), on_bad, Box::new(|_| {}));
        for input in &inputs {
            reader.read(input, &mut |batch| index.add(&batch))?;
        }
    }
    let (plan, mut report) = labels::resolve(parsed, &index).map_err(|e| match e {
        Error::Usage(m) => Error::Usage(format!("{m} (labels from `{origin}`)")),
        other => other,
    })?;

    // Second pass: the rows, written whole or not at all, with the labels attached.
    let counts = crate::pipeline::rows_out::stream_rows(
        ctx,
        &inputs,
        &args.output.out,
        args.output.rejects.as_deref(),
        format,
        "labeling",
        &mut |batch| {
            Ok(vec![labels::apply(
                &batch,
                &plan,
                args.replace,
                &mut report,
            )?])
        },
    )?;
    if report.ties > 0 {
        report.warnings.push(format!(
            "{} row(s) split evenly between annotators; gold_reward left unset there: read extra.gold_labels and decide",
            report.ties
        ));
    }
    let text = format!(
        "{}\nwrote {} rows to `{}`",
        report.to_string().trim_end(),
        counts.rows,
        args.output.out.display()
    );
    let mut envelope = Envelope::new("labels-attach", &report)
        .inputs([args.rows.clone(), origin])
        .output(Output::new(args.output.out.display(), "rows").rows(counts.rows))
        .warnings(report.warnings.iter().map(String::as_str));
    if let Some(path) = &args.output.rejects {
        envelope = envelope.output(Output::new(path.display(), "rejects"));
    }
    let json = serde_json::to_value(envelope)
        .map_err(|e| Error::Internal(format!("a report does not serialize: {e}")))?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
