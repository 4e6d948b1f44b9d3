//! `wai gen`: deterministic synthetic rows to a file.

use std::time::Instant;

use serde::Serialize;

use super::{Context, Outcome};
use crate::cli::GenArgs;
use crate::error::{ExitStatus, Result};
use crate::pipeline::row::{BATCH_ROWS, Builder};
use crate::report::envelope::{Envelope, Output};
use crate::report::plural;
use crate::stages::Options as _;
use crate::synth;

/// What `wai gen` made.
#[derive(Serialize)]
struct Report<'a> {
    rows: u64,
    tasks: u64,
    seed: u64,
    shortcut: &'a Option<String>,
    gold: f64,
    shape: synth::Shape,
}

/// Runs `wai gen`.
pub(crate) fn run(_ctx: &Context, args: &GenArgs) -> Result<Outcome> {
    let started = Instant::now();
    let opts = synth::Options {
        rows: args.rows,
        seed: args.seed,
        shortcut: args.shortcut.clone(),
        gold: args.gold,
        shape: args.shape,
    };
    opts.check()?;
    let format = crate::pipeline::rows_out::output_format(&args.out, None)?;
    let mut sink = crate::pipeline::rows_out::sink(&args.out, format)?;
    let mut builder = Builder::new();
    let mut tasks = 0u64;
    let mut last_task = String::new();
    synth::generate(&opts, |records| {
        for r in &records {
            if r.task_id != last_task {
                tasks += 1;
                last_task.clone_from(&r.task_id);
            }
            builder.push(r)?;
            if builder.len() >= BATCH_ROWS {
                sink.write(&builder.finish()?)?;
            }
        }
        Ok(())
    })?;
    if !builder.is_empty() {
        sink.write(&builder.finish()?)?;
    }
    sink.finish()?;
    let text = format!(
        "wrote {} in {} to `{}` (seed {}) in {:.1} s",
        plural(args.rows, "row"),
        plural(tasks, "task"),
        args.out.display(),
        args.seed,
        started.elapsed().as_secs_f64()
    );
    let report = Report {
        rows: args.rows,
        tasks,
        seed: args.seed,
        shortcut: &args.shortcut,
        gold: args.gold,
        shape: args.shape,
    };
    let envelope = Envelope::new("gen", report)
        .output(Output::new(args.out.display(), "rows").rows(args.rows));
    Ok(Outcome {
        text,
        json: envelope.to_json()?,
        status: ExitStatus::Success,
    })
}
