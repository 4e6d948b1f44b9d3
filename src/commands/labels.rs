//! `wai labels attach`: hand labels onto rows as gold.

use super::{Context, Outcome};
use crate::cli::{LabelsAttachArgs, LabelsCommand};
use crate::error::{ExitStatus, Result};
use crate::pipeline::io::OnBadRow;
use crate::pipeline::read::Reader;
use crate::pipeline::source;
use crate::report::envelope::{Envelope, Output};
use crate::stages::labels::{self, Matching, Options};

/// Runs `wai labels ...`.
pub(crate) fn run(ctx: &Context, command: &LabelsCommand) -> Result<Outcome> {
    match command {
        LabelsCommand::Attach(args) => attach(ctx, args),
    }
}

/// The stage's options from the command line.
fn options(args: &LabelsAttachArgs) -> Result<Options> {
    Ok(Options {
        kind: labels::kind(&args.kind)?,
        annotator: args.annotator.clone(),
        replace: args.replace,
        now: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

fn attach(ctx: &Context, args: &LabelsAttachArgs) -> Result<Outcome> {
    let opts = options(args)?;
    crate::stages::Options::check(&opts)?;
    let (out, rejects) = (&args.output.out, args.output.rejects.as_deref());
    let format = crate::pipeline::rows_out::output_format(out, args.output.to.map(Into::into))?;
    let origin = args.labels.display().to_string();
    let text = crate::pipeline::world_files::read_text(&args.labels)?;
    let mut matching = Matching::new(&text, &origin, &opts)?;
    let inputs = ctx
        .runtime
        .block_on(source::resolve(std::slice::from_ref(&args.rows)))?;
    crate::pipeline::output::rows_apart(out, rejects, &inputs)?;

    // First pass: which rows the labels' keys name. Rows are read as the second pass reads them,
    // so derived rollout ids agree.
    {
        let mut bad = Vec::new();
        let on_bad = if rejects.is_some() {
            OnBadRow::Reject(&mut bad)
        } else {
            OnBadRow::Fail
        };
        let mut reader = Reader::new(ctx.runtime.handle().clone(), on_bad, Box::new(|_| {}));
        for input in &inputs {
            reader.read(input, &mut |batch| matching.add(&batch))?;
        }
    }
    let mut labeling = matching.finish()?;

    // Second pass: the rows, written whole or not at all, with the labels attached.
    let counts = crate::pipeline::rows_out::stream_rows(
        ctx,
        &inputs,
        out,
        rejects,
        format,
        "labeling",
        &mut |batch| Ok(vec![labeling.apply(&batch)?]),
    )?;
    let report = labeling.report();
    let text = format!(
        "{}\nwrote {} rows to `{}`",
        report.to_string().trim_end(),
        counts.rows,
        out.display()
    );
    let mut envelope = Envelope::new("labels-attach", &report)
        .inputs([args.rows.clone(), origin])
        .output(Output::new(out.display(), "rows").rows(counts.rows))
        .warnings(report.warnings.iter().map(String::as_str));
    if let Some(path) = rejects {
        envelope = envelope.output(Output::new(path.display(), "rejects"));
    }
    let json = envelope.to_json()?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
