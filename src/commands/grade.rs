//! `wai grade`: judges score rows, streaming; then the pass@k line and the warnings.
//!
//! Every verdict goes to a verdict log ([`crate::pipeline::verdict_log`]) as it lands, so a grade that is killed or fails
//! (a full disk, a judge that stops) resumes: the same command again judges only the rows
//! without a verdict, and writes the output an uninterrupted run writes.
//!
//! SQL judges over Parquet rows wai wrote take [`crate::pipeline::rows_out::splice_rows`]: only
//! the columns read are decoded, only the verdict columns encoded, the rest copied.

use std::fmt::Write as _;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;

use super::{Context, Outcome};
use crate::cli::GradeArgs;
use crate::error::{ExitStatus, Result};
use crate::pipeline::judges::{self, pool};
use crate::pipeline::source;
use crate::pipeline::verdict_key;
use crate::pipeline::verdict_log::{self, VerdictLog};
use crate::report::envelope::{Envelope, Output};
use crate::report::plural;
use crate::schema::col;
use crate::stages::grade::{APPLY_READS, Grader, Options, WRITES, gate};

/// The stage's options from the command line.
fn options(args: &GradeArgs, texts: &[String], gate: gate::Options) -> Options {
    Options {
        judge_version: args.judge_version.clone(),
        run_id: args
            .run_id
            .clone()
            .unwrap_or_else(|| verdict_key::run_id(args, texts)),
        gate: gate::Options {
            floor: args.gate,
            ..gate
        },
    }
}

/// Runs `wai grade`.
pub(crate) fn run(ctx: &Context, args: &GradeArgs) -> Result<Outcome> {
    let started = Instant::now();
    let out = &args.output.out;
    let format = crate::pipeline::rows_out::output_format(out, args.output.to.map(Into::into))?;
    let mut workers = pool(&args.pool)?;
    workers.models = workers
        .models
        .with_rubric(args.rubric.as_deref())?
        .with_tools(args.hollow.tools.as_deref())?;
    // Every option is checked before a row is read: a bad floor fails now, not after the grade.
    let gate_opts = super::gate::validate(&args.hollow, args.gate)?;
    let inputs = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    crate::pipeline::output::rows_apart(out, args.output.rejects.as_deref(), &inputs)?;
    let limits = super::limits(&args.limits)?;
    let (panel, texts) = judges::panel(ctx, &args.judges, &args.inputs, &workers, &limits)?;
    let opts = options(args, &texts, gate_opts);
    let mut grader = Grader::new(panel, &opts);
    tracing::info!(judge = %grader.stamp().judge, inputs = inputs.len(), "grading");

    let (mut verdict_log, found) =
        VerdictLog::open(out, &verdict_key::digest(args, &texts, &inputs, &workers))?;
    let mut judged = 0u64;
    // Judges that read a few columns of a row (SQL judges) leave every other column as it was:
    // over files of rows laid out as the output, those columns' chunks are copied, not decoded
    // and encoded again.
    let judges_read = grader.reads();
    let reads: Option<Vec<&str>> = judges_read.as_ref().map(|judges| {
        // The rewards are read too, so a file's out-of-range reward is refused as before.
        (APPLY_READS.iter().copied())
            .chain([col::REWARD, col::GOLD_REWARD])
            .chain(judges.iter().map(String::as_str))
            .collect()
    });
    let mut each = |batch: RecordBatch| -> Result<Vec<RecordBatch>> {
        Ok(vec![grader.grade_with(
            &batch,
            &mut |panel, batch, first| {
                verdict_log::judge_missing(panel, &mut verdict_log, batch, first, &mut judged)
            },
        )?])
    };
    let counts = crate::pipeline::rows_out::splice_rows(
        ctx,
        &inputs,
        out,
        args.output.rejects.as_deref(),
        format,
        "grading",
        reads.as_deref(),
        &WRITES,
        &mut each,
    )?;
    // The output is in place: the log has served.
    let log_path = verdict_log.path().to_path_buf();
    verdict_log.remove()?;
    let mut done = grader.finish();
    let resumed = done.tally.rows - judged;
    done.notes
        .extend(verdict_key::notes(&found, &log_path, resumed, judged));
    let elapsed = started.elapsed();

    // What the scored rows say.
    let (context, _scratch) = super::rows_session(ctx, &[out.display().to_string()])?;
    let gate = super::gate::report(ctx, &context, &opts.gate)?;
    let mut report = done.report(gate);
    (report.rejected, report.resumed) = (counts.rejected, resumed);
    let mut text = report.headline(&out.display().to_string(), elapsed.as_secs_f64());
    text.push_str(&report.details());
    if let Some(path) = &args.output.rejects {
        let _ = write!(
            text,
            "\n{} set aside in `{}`",
            plural(counts.rejected, "bad line"),
            path.display()
        );
    }
    text.push('\n');
    text.push_str(&report.gate.to_string());
    let mut envelope = Envelope::new("grade", &report)
        .inputs(inputs.iter().map(|i| &i.display))
        .output(Output::new(out.display(), "rows"))
        .warnings(super::gate::warnings_of(&report.gate));
    if let Some(path) = &args.output.rejects {
        envelope = envelope.output(Output::new(path.display(), "rejects"));
    }
    let json = envelope.to_json()?;
    // Without `--gate`, only a hollow run fails the command.
    let status = match (args.gate, super::gate::status(&report.gate)) {
        (None, ExitStatus::Hollow) => ExitStatus::Hollow,
        (None, _) => ExitStatus::Success,
        (Some(_), s) => s,
    };
    Ok(Outcome { text, json, status })
}
