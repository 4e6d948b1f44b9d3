//! `wai gate`: the CI check on scored rows. Also the report `wai grade` prints after grading.

use datafusion::execution::context::SessionContext;

use super::{Context, Outcome};
use crate::cli::{GateArgs, HollowArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::report::envelope::{Envelope, Warning};
use crate::stages::Session;
use crate::stages::grade::gate::{self, GateStage, Report};
use crate::stages::grade::warnings;

/// Checks the gate's options and reads `--tools`, before any row is read: a bad option fails
/// at once, not after the grade.
///
/// # Errors
/// A share outside [0, 1], a floor outside [0, 1], an unreadable tools file.
pub(crate) fn validate(args: &HollowArgs, floor: Option<f64>) -> Result<gate::Options> {
    let share = |flag: &str, x: f64| {
        if x.is_finite() && (0.0..=1.0).contains(&x) {
            Ok(())
        } else {
            Err(Error::Usage(format!(
                "{flag} must be a share in [0, 1], not {x}"
            )))
        }
    };
    share("--max-judge-failures", args.max_judge_failures)?;
    share("--min-graded", args.min_graded)?;
    if let Some(f) = floor
        && !(f.is_finite() && (0.0..=1.0).contains(&f))
    {
        return Err(Error::Usage(format!(
            "the floor must be a pass rate in [0, 1], not {f}"
        )));
    }
    if args.k.contains(&0) {
        return Err(Error::Usage("--k must be at least 1".into()));
    }
    Ok(gate::Options {
        k: args.k.clone(),
        seed: args.seed,
        warnings: warnings::Options {
            declared: match &args.tools {
                Some(path) => declared_tools(path)?,
                None => Vec::new(),
            },
            no_tools: args.no_tools,
            failure_share: args.max_judge_failures,
            min_graded: args.min_graded,
        },
        floor,
    })
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

/// The gate's report as `wai grade` and `wai demo` print it after their own: text, the report's
/// JSON keys, and the status.
pub(crate) struct Check {
    /// The pass@k report, the warnings and the gate line.
    pub text: String,
    /// The report as JSON.
    pub json: serde_json::Value,
    /// Success, below the floor, or hollow.
    pub status: ExitStatus,
}

/// [`report`] at `floor` (over the floor of `opts`), as a [`Check`].
pub(crate) fn check(
    ctx: &Context,
    context: &SessionContext,
    _args: &HollowArgs,
    opts: &gate::Options,
    floor: Option<f64>,
) -> Result<Check> {
    let opts = gate::Options {
        floor,
        ..opts.clone()
    };
    let report = report(ctx, context, &opts)?;
    Ok(Check {
        text: report.to_string(),
        json: serde_json::to_value(&report)
            .map_err(|e| Error::Internal(format!("a report does not serialize: {e}")))?,
        status: status(&report),
    })
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

/// Reads `--tools`: an OpenAI function-schema list (`[{"type": "function", "function": {"name":
/// ...}}]`, or `{"name": ...}` objects, or plain names), or an object with a `tools` list.
fn declared_tools(path: &std::path::Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::read(path, e))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "the tools file `{}` is not JSON: {e}",
            path.display()
        ))
    })?;
    let list = match &value {
        serde_json::Value::Array(items) => items.as_slice(),
        serde_json::Value::Object(o) => o
            .get("tools")
            .and_then(serde_json::Value::as_array)
            .map_or(&[][..], Vec::as_slice),
        _ => &[],
    };
    let mut names = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let name = match item {
            serde_json::Value::String(s) => Some(s.as_str()),
            serde_json::Value::Object(o) => o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(serde_json::Value::as_str),
            _ => None,
        };
        match name {
            Some(n) => names.push(n.to_owned()),
            None => {
                return Err(Error::Usage(format!(
                    "the tools file `{}`: tool {i} has no `function.name` or `name`",
                    path.display()
                )));
            }
        }
    }
    if names.is_empty() {
        return Err(Error::Usage(format!(
            "the tools file `{}` lists no tools (expected a list of OpenAI function schemas)",
            path.display()
        )));
    }
    Ok(names)
}
