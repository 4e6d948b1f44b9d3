//! `wai gen`: deterministic synthetic rows to a file.

use std::time::Instant;

use serde_json::json;

use super::{Context, Outcome};
use crate::cli::GenArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::row::{BATCH_ROWS, Builder};
use crate::report::plural;
use crate::synth;

/// Runs `wai gen`.
pub fn run(_ctx: &Context, args: &GenArgs) -> Result<Outcome> {
    let started = Instant::now();
    if !(0.0..=1.0).contains(&args.gold) {
        return Err(Error::Usage(format!(
            "`--gold` is a share in [0, 1], got {}",
            args.gold
        )));
    }
    let format = crate::pipeline::rows_out::output_format(&args.out, None)?;
    let mut sink = crate::pipeline::rows_out::sink(&args.out, format)?;
    let opts = synth::Options {
        rows: args.rows,
        seed: args.seed,
        shortcut: args.shortcut.clone(),
        gold: args.gold,
    };
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
    let json = json!({
        "version": 1, "command": "gen", "output": args.out.display().to_string(), "rows": args.rows,
        "tasks": tasks, "seed": args.seed, "shortcut": args.shortcut, "gold": args.gold,
    });
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
