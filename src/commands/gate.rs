//! `wai gate`: the CI check on scored rows. Also the report `wai grade` prints after grading.

use datafusion::execution::context::SessionContext;

use super::{Context, Outcome};
use crate::cli::{GateArgs, HollowArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::world_files::read_tool_names;
use crate::report::envelope::{Envelope, Warning};
use crate::stages::Session;
use crate::stages::grade::gate::{self, GateStage, Report};
use crate::stages::grade::warnings;

/// The gate's options from the command line, checked before any row is read (a bad option
/// fails at once, not after the grade); `--tools` is read after the checks.
///
/// # Errors
/// A share outside [0, 1], a floor outside [0, 1], a k of 0, an unreadable tools file.
pub(crate) fn validate(args: &HollowArgs, floor: Option<f64>) -> Result<gate::Options> {
    let mut opts = gate::Options {
        k: args.k.clone(),
        seed: args.seed,
        warnings: warnings::Options {
            declared: Vec::new(),
            no_tools: args.no_tools,
            max_judge_failures: args.max_judge_failures,
            min_graded: args.min_graded,
        },
        floor,
        by: Vec::new(),
    };
    crate::stages::Options::check(&opts).map_err(|e| match e {
        // The messages these flags have always had, with the value given.
        Error::Option { key, message } => Error::Usage(match key.as_str() {
            "max_judge_failures" => format!(
                "--max-judge-failures {message}, not {}",
                args.max_judge_failures
            ),
            "min_graded" => format!("--min-graded {message}, not {}", args.min_graded),
            "floor" => format!("the floor {message}, not {}", floor.unwrap_or_default()),
            _ => format!("--{} {message}", key.replace('_', "-")),
        }),
        e => e,
    })?;
    if let Some(path) = &args.tools {
        opts.warnings.declared = read_tool_names(path)?;
    }
    Ok(opts)
}

/// Runs the gate on table `rows` of `context`; `opts` come from [`validate`].
pub(crate) fn report(
    ctx: &Context,
    context: &SessionContext,
    opts: &gate::Options,
) -> Result<Report> {
    ctx.runtime
        .block_on(async {
            let rows = context.table("rows").await?;
            let session = Session::from_context(context.clone());
            crate::stages::run::<GateStage>(&session, gate::Inputs { rows }, opts).await
        })
        .map(flags_named)
}

/// The option keys the gate's warnings name, and the flags that set them.
const FLAGS: &[(&str, &str)] = &[
    ("`min_graded`", "--min-graded"),
    ("`no_tools`", "--no-tools"),
];

/// The report's words for the options, as the command line spells them.
fn flags_named(mut report: Report) -> Report {
    for w in &mut report.warnings {
        w.text = super::flags_named(&w.text, FLAGS);
    }
    report
}

/// How the gate ends the process: hollow whether or not a floor was asked for (`wai grade`
/// without `--gate`), failure under the floor.
pub(crate) fn status(report: &Report) -> ExitStatus {
    if report.hollow {
        ExitStatus::Hollow
    } else if report.failed() {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    }
}

/// The gate's warnings as the envelope's.
pub(crate) fn warnings_of(report: &Report) -> impl Iterator<Item = Warning> + '_ {
    report
        .warnings
        .iter()
        .map(|w| Warning::coded(w.kind, w.text.clone()))
}

/// Runs `wai gate`.
pub(crate) fn run(ctx: &Context, args: &GateArgs) -> Result<Outcome> {
    let opts = validate(&args.hollow, Some(args.floor))?;
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let report = report(ctx, &context, &opts)?;
    let envelope = Envelope::new("gate", &report)
        .inputs(&args.inputs)
        .warnings(warnings_of(&report));
    let json = envelope.to_json()?;
    Ok(Outcome {
        text: report.to_string(),
        json,
        status: status(&report),
    })
}
