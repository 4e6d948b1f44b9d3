//! `wai lake init|status`: make a lake, and see what it holds.

use std::fmt::Write as _;

use serde_json::json;

use super::{Context, Outcome};
use crate::cli::LakeCommand;
use crate::error::{ExitStatus, Result};
use crate::pipeline::lake::{Lake, RunRecord};
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
            let json = Envelope::new(
                "lake-status",
                json!({"lake": args.lake.display().to_string(), "runs": manifest.runs, "pending": pending}),
            )
            .to_json()?;
            Ok(Outcome {
                text,
                json,
                status: ExitStatus::Success,
            })
        }
    }
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
