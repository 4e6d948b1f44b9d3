//! `wai grade`: judges score rows, streaming; then the pass@k line and the warnings.
//!
//! Every verdict goes to a verdict log ([`crate::pipeline::verdict_log`]) as it lands, so a grade that is killed or fails
//! (a full disk, a judge that stops) resumes: the same command again judges only the rows
//! without a verdict, and writes the output an uninterrupted run writes.

use std::fmt::Write as _;
use std::time::Instant;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::{Context, Outcome};
use crate::cli::GradeArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::judges::{self, Workers, pool};
use crate::pipeline::source;
use crate::pipeline::verdict_log::{self, Found, VerdictLog};
use crate::report::envelope::{Envelope, Output};
use crate::report::plural;
use crate::stages::grade::{self, Judge as _, Panel, Stamp, Status, Tally};

/// What decides the verdicts of a grade: the judges (specs and the text they name), the inputs
/// (names and sizes), the timeout and the variables passed to command judges. A verdict log is
/// resumed only under the same digest.
fn digest(
    args: &GradeArgs,
    texts: &[String],
    inputs: &[source::Input],
    workers: &Workers,
) -> String {
    let mut h = Sha256::new();
    let mut part = |t: &str| {
        h.update(t.as_bytes());
        h.update([0]);
    };
    part("wai grade verdicts 1");
    for (spec, text) in args.judges.iter().zip(texts) {
        part(spec);
        part(text);
    }
    for input in inputs {
        part(&input.display);
        part(&input.size.map_or_else(String::new, |s| s.to_string()));
    }
    part(&workers.timeout.as_secs_f64().to_string());
    part(&workers.forward.join(","));
    part(if args.output.rejects.is_some() {
        "rejects"
    } else {
        ""
    });
    hex(&h.finalize())
}

/// `bytes` in lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The default scoring run id: the same judges on the same inputs give the same id.
fn run_id(args: &GradeArgs, texts: &[String]) -> String {
    let mut h = Sha256::new();
    for t in texts.iter().chain(&args.inputs) {
        h.update(t.as_bytes());
        h.update([0]);
    }
    format!("score_{}", hex(&h.finalize()[..6]))
}

/// The notes of a grade: the judges', then what the verdict log held.
fn notes(
    mut notes: Vec<String>,
    found: &Found,
    log: &std::path::Path,
    resumed: u64,
    judged: u64,
) -> Vec<String> {
    if found.started_over {
        notes.push(format!(
            "the verdict log `{}` was left by a grade with other judges, inputs or options; it was started over",
            log.display()
        ));
    }
    if found.resumed > 0 {
        notes.push(format!(
            "resumed: {} from the verdict log of an interrupted grade, {} judged now",
            plural(resumed, "verdict"),
            plural(judged, "row")
        ));
    }
    if found.torn {
        notes.push("the verdict log's last line was cut off by the interrupted grade; that row was judged again".into());
    }
    notes
}

/// The grade's lines: the tally, each failing status, the notes, the rejects.
fn text(
    args: &GradeArgs,
    stamp: &Stamp,
    tally: &Tally,
    notes: &[String],
    rejected: u64,
    elapsed: std::time::Duration,
) -> String {
    let mut text = format!(
        "graded {} with `{}` into `{}` in {:.1} s: {} passed, {} failed, {} partial, {} unjudged",
        plural(tally.rows, "row"),
        stamp.judge,
        args.output.out.display(),
        elapsed.as_secs_f64(),
        tally.passed,
        tally.failed,
        tally.partial,
        tally.unjudged(),
    );
    for status in Status::ALL.iter().skip(1) {
        if let Some(n) = tally.by_status.get(status.as_str()) {
            let first = tally
                .first_reason
                .get(status.as_str())
                .map(|r| format!(" (first: {r})"))
                .unwrap_or_default();
            let _ = write!(text, "\n  {n} {}{first}", status.as_str());
        }
    }
    for note in notes {
        let _ = write!(text, "\nnote: {note}");
    }
    if let Some(path) = &args.output.rejects {
        let _ = write!(
            text,
            "\n{} set aside in `{}`",
            plural(rejected, "bad line"),
            path.display()
        );
    }
    text.push('\n');
    text
}

/// Runs `wai grade`.
pub(crate) fn run(ctx: &Context, args: &GradeArgs) -> Result<Outcome> {
    let started = Instant::now();
    let format =
        crate::pipeline::rows_out::output_format(&args.output.out, args.output.to.map(Into::into))?;
    let workers = pool(&args.pool)?;
    // Every option is checked before a row is read: a bad floor fails now, not after the grade.
    let gate_opts = super::gate::validate(&args.hollow, args.gate)?;
    let inputs = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    crate::pipeline::output::rows_apart(&args.output.out, args.output.rejects.as_deref(), &inputs)?;
    let (panel, texts) = judges::panel(ctx, &args.judges, &args.inputs, &workers)?;
    let mut panel = Panel::new(panel);
    let stamp = Stamp {
        judge: panel.name().to_owned(),
        version: panel
            .version()
            .map(str::to_owned)
            .or_else(|| args.judge_version.clone()),
        run_id: args.run_id.clone().unwrap_or_else(|| run_id(args, &texts)),
        source: "grade",
    };
    tracing::info!(judge = %stamp.judge, inputs = inputs.len(), "grading");

    let digest = digest(args, &texts, &inputs, &workers);
    let (mut verdict_log, found) = VerdictLog::open(&args.output.out, &digest)?;
    let (mut tally, mut seen, mut judged) = (Tally::default(), 0u64, 0u64);
    let counts = crate::pipeline::rows_out::stream_rows(
        ctx,
        &inputs,
        &args.output.out,
        args.output.rejects.as_deref(),
        format,
        "grading",
        &mut |batch| {
            let verdicts = verdict_log::judge_missing(
                &mut panel,
                &mut verdict_log,
                &batch,
                seen,
                &mut judged,
            )?;
            seen += batch.num_rows() as u64;
            tally.add(&verdicts);
            Ok(vec![grade::apply(&batch, &verdicts, &stamp)?])
        },
    )?;
    // The output is in place: the log has served.
    let log_path = verdict_log.path().to_path_buf();
    verdict_log.remove()?;
    let resumed = tally.rows - judged;
    let notes = notes(panel.notes(), &found, &log_path, resumed, judged);
    drop(panel);
    let elapsed = started.elapsed();

    // What the scored rows say.
    let scored = vec![args.output.out.display().to_string()];
    let (context, _scratch) = super::rows_session(ctx, &scored)?;
    let gate_opts = crate::stages::grade::gate::Options {
        floor: args.gate,
        ..gate_opts
    };
    let gate = super::gate::report(ctx, &context, &gate_opts)?;
    let mut text = text(args, &stamp, &tally, &notes, counts.rejected, elapsed);
    text.push_str(&gate.to_string());
    let mut report = json!({
        "judge": stamp.judge,
        "judge_version": stamp.version,
        "scoring_run_id": stamp.run_id,
        "tally": tally,
        "notes": notes,
        "rejected": counts.rejected,
        "resumed": resumed,
    });
    if let (Some(obj), Ok(serde_json::Value::Object(more))) =
        (report.as_object_mut(), serde_json::to_value(&gate))
    {
        obj.extend(more);
    }
    let mut envelope = Envelope::new("grade", report)
        .inputs(inputs.iter().map(|i| &i.display))
        .output(Output::new(args.output.out.display(), "rows"))
        .warnings(super::gate::warnings_of(&gate));
    if let Some(path) = &args.output.rejects {
        envelope = envelope.output(Output::new(path.display(), "rejects"));
    }
    let json = serde_json::to_value(envelope)
        .map_err(|e| Error::Internal(format!("a report does not serialize: {e}")))?;
    // Without `--gate`, only a hollow run fails the command.
    let status = match (args.gate, super::gate::status(&gate)) {
        (None, ExitStatus::Hollow) => ExitStatus::Hollow,
        (None, _) => ExitStatus::Success,
        (Some(_), s) => s,
    };
    Ok(Outcome { text, json, status })
}
