//! `wai lake init|status|compact`: make a lake, see what it holds, pack its small files.

use std::fmt::Write as _;

use serde_json::json;

use super::{Context, Outcome};
use crate::cli::{LakeCommand, LakeCompactArgs};
use crate::error::{ExitStatus, Result};
use crate::pipeline::lake::{Lake, RunRecord};
use crate::pipeline::limits::human;
use crate::report::envelope::Envelope;
use crate::report::plural;

/// The runs `status` prints, newest last.
const SHOWN: usize = 20;

/// Runs `wai lake`.
pub(crate) fn run(_ctx: &Context, command: &LakeCommand) -> Result<Outcome> {
    match command {
        LakeCommand::Init(args) => {
            let (lake, made) = Lake::init(&args.lake)?;
            let text = if made {
                format!("made the lake `{}`", lake.root().display())
            } else {
                format!(
                    "`{}` is a lake already: left as it is",
                    lake.root().display()
                )
            };
            let json = Envelope::new(
                "lake-init",
                json!({"lake": args.lake.display().to_string(), "made": made}),
            )
            .to_json()?;
            Ok(Outcome {
                text,
                json,
                status: ExitStatus::Success,
            })
        }
        LakeCommand::Status(args) => {
            let lake = Lake::open(&args.lake)?;
            let manifest = lake.manifest()?;
            let pending = lake.pending_runs();
            let mut text = format!(
                "lake `{}`: {} committed",
                lake.root().display(),
                plural(manifest.runs.len() as u64, "run")
            );
            let skip = manifest.runs.len().saturating_sub(SHOWN);
            if skip > 0 {
                let _ = write!(text, " ({skip} older not shown)");
            }
            for run in &manifest.runs[skip..] {
                describe(&mut text, run, "");
            }
            for run in &pending {
                describe(&mut text, run, " PENDING (stopped; `wai run` resumes it)");
            }
            if !manifest.compacted.is_empty() {
                let parts: usize = manifest.compacted.iter().map(|c| c.parts.len()).sum();
                let _ = write!(
                    text,
                    "\n{} (`wai lake compact`) hold the rows of {} the runs wrote",
                    plural(manifest.compacted.len() as u64, "compacted file"),
                    plural(parts as u64, "file")
                );
            }
            let json = Envelope::new(
                "lake-status",
                json!({"lake": args.lake.display().to_string(), "runs": manifest.runs, "pending": pending,
                       "compacted": manifest.compacted}),
            )
            .to_json()?;
            Ok(Outcome {
                text,
                json,
                status: ExitStatus::Success,
            })
        }
        LakeCommand::Compact(args) => compact(args),
    }
}

/// `wai lake compact`.
fn compact(args: &LakeCompactArgs) -> Result<Outcome> {
    let lake = Lake::open(&args.lake)?;
    let target = args.target_mib << 20;
    let done = lake.compact(target, args.dry_run)?;
    let files: usize = done.made.iter().map(|m| m.files).sum();
    let before: u64 = done.made.iter().map(|m| m.bytes_before).sum();
    let after: u64 = done.made.iter().map(|m| m.bytes).sum();
    let mut text = if done.made.is_empty() {
        format!(
            "`{}`: nothing to compact (no two files in a row under {}, half the target)",
            args.lake.display(),
            human(target / 2)
        )
    } else if args.dry_run {
        format!(
            "`{}`: would pack {} ({}) into {}; nothing was changed",
            args.lake.display(),
            plural(files as u64, "file"),
            human(before),
            done.made.len()
        )
    } else {
        format!(
            "`{}`: packed {} ({}) into {} ({})",
            args.lake.display(),
            plural(files as u64, "file"),
            human(before),
            done.made.len(),
            human(after)
        )
    };
    for made in &done.made {
        let _ = write!(
            text,
            "\n  {}: {}, {}",
            made.path,
            plural(made.files as u64, "file"),
            plural(made.rows, "row")
        );
    }
    if done.swept > 0 {
        let _ = write!(
            text,
            "\nremoved {} a stopped compaction left",
            plural(done.swept as u64, "file")
        );
    }
    let json = Envelope::new(
        "lake-compact",
        json!({"lake": args.lake.display().to_string(), "dry_run": args.dry_run,
               "target_mib": args.target_mib, "made": done.made, "replaced": done.replaced,
               "swept": done.swept}),
    )
    .to_json()?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}

/// One run's lines.
fn describe(text: &mut String, run: &RunRecord, tag: &str) {
    let gates_failed = run.gates.iter().filter(|g| !g.passed).count();
    let _ = write!(
        text,
        "\n{}{tag}  {}: {} new, {}, exit {}{}",
        run.run_id,
        run.pipeline,
        plural(run.inputs.len() as u64, "file"),
        plural(run.stages.len() as u64, "stage"),
        run.exit,
        if run.gates.is_empty() {
            String::new()
        } else {
            format!(
                ", gates {}/{} passed",
                run.gates.len() - gates_failed,
                run.gates.len()
            )
        }
    );
    for stage in &run.stages {
        let _ = write!(
            text,
            "\n    {}  exit {}  {}",
            stage.name, stage.status, stage.headline
        );
    }
}
