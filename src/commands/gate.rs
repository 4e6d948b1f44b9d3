//! `wai gate`: the CI check on scored rows. Also the report `wai grade` prints after grading.

use datafusion::execution::context::SessionContext;
use serde_json::{Value, json};

use super::{Context, Outcome};
use crate::cli::{GateArgs, HollowArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::stages::grade::warnings::{self, Warning};
use crate::stages::pass_at::{self, Options};

/// The pass@k lines, the warnings, and the gate's decision on table `rows` of `context`.
pub struct Check {
    /// The pass@k report, as `wai pass-at` prints it.
    pub text: String,
    /// The report and warnings as JSON.
    pub json: Value,
    /// Success, below the floor, or hollow.
    pub status: ExitStatus,
}

/// Checks the gate's options and reads `--tools`, before any row is read: a bad option fails
/// at once, not after the grade.
///
/// # Errors
/// A share outside [0, 1], a floor outside [0, 1], an unreadable tools file.
pub fn validate(args: &HollowArgs, floor: Option<f64>) -> Result<warnings::Options> {
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
    Ok(warnings::Options {
        declared: match &args.tools {
            Some(path) => warnings::declared_tools(path)?,
            None => Vec::new(),
        },
        no_tools: args.no_tools,
        failure_share: args.max_judge_failures,
        min_graded: args.min_graded,
    })
}

/// Reads the scored rows in `context` (table `rows`) and decides, with `floor` when gating;
/// `opts` come from [`validate`].
pub fn check(
    ctx: &Context,
    context: &SessionContext,
    args: &HollowArgs,
    opts: &warnings::Options,
    floor: Option<f64>,
) -> Result<Check> {
    let pass_opts = Options {
        k: args.k.clone(),
        seed: args.seed,
        ..Options::default()
    };
    let (report, mut found) = ctx.runtime.block_on(async {
        let rows = context.table("rows").await?;
        let session = crate::stages::Session::from_context(context.clone());
        let report = crate::stages::run::<pass_at::PassAtStage>(
            &session,
            pass_at::Inputs::new(rows),
            &pass_opts,
        )
        .await?;
        let found = warnings::check(context, opts).await?;
        Ok::<_, Error>((report, found))
    })?;
    let pass_at_1 = report.results.first().and_then(|r| r.pass_at_1);
    if let Some(note) = report.results.first().and_then(|r| r.unanimous.clone()) {
        found.push(Warning {
            kind: "unanimous",
            text: note,
            hollow: false,
        });
    }
    if pass_at_1.is_none() && !found.iter().any(|w| w.hollow) {
        found.push(Warning {
            kind: "no_binary_reward",
            text: "no row has a reward of 0 or 1, so there is no pass@1. Grade with a judge that decides pass or fail.".into(),
            hollow: true,
        });
    }
    let hollow = found.iter().any(|w| w.hollow);
    let mut text = report.to_string().trim_end().to_owned();
    // The pass@k line already says when every row scored one value.
    let shown: Vec<&Warning> = found.iter().filter(|w| w.kind != "unanimous").collect();
    if !shown.is_empty() {
        text.push_str("\n== warnings (fix these before you report the number)");
        for w in shown {
            text.push_str(&format!(
                "\n  {} {}",
                if w.hollow { "!!" } else { "!" },
                w.text
            ));
        }
    }
    // Hollow is hollow whether or not a floor was asked for (`wai grade` without `--gate`).
    let mut status = if hollow {
        ExitStatus::Hollow
    } else {
        ExitStatus::Success
    };
    let mut gate = Value::Null;
    if let Some(floor) = floor {
        let rate = pass_at_1.unwrap_or(0.0);
        let (verdict, line) = if hollow {
            status = ExitStatus::Hollow;
            (
                "hollow",
                "GATE: not evaluated; the run is hollow (see the warnings marked !!)".to_owned(),
            )
        } else if rate < floor {
            status = ExitStatus::Failure;
            ("fail", format!("GATE: FAIL pass@1 {rate:.2} < {floor:.2}"))
        } else {
            ("pass", format!("GATE: pass pass@1 {rate:.2} >= {floor:.2}"))
        };
        text.push_str(&format!("\n{line}"));
        gate = json!({"floor": floor, "verdict": verdict, "pass_at_1": pass_at_1});
    }
    let json = json!({
        "pass_at": report,
        "warnings": found,
        "hollow": hollow,
        "gate": gate,
    });
    Ok(Check { text, json, status })
}

/// Runs `wai gate`.
pub fn run(ctx: &Context, args: &GateArgs) -> Result<Outcome> {
    let opts = validate(&args.hollow, Some(args.floor))?;
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let check = check(ctx, &context, &args.hollow, &opts, Some(args.floor))?;
    let mut json = json!({"version": 1, "command": "gate"});
    if let (Some(obj), Value::Object(more)) = (json.as_object_mut(), check.json) {
        obj.extend(more);
    }
    Ok(Outcome {
        text: check.text,
        json,
        status: check.status,
    })
}
