//! `wai preflight` and `wai coverage-gap`: what the simulator will make of the tools and policy,
//! and which rules and tools a set of test asks reaches.

use serde::Serialize;

use super::{Context, Outcome};
use crate::cli::{CoverageGapArgs, PreflightArgs};
use crate::error::{ExitStatus, Result};
use crate::pipeline::world_files::{asks_of, read_policy, read_tools};
use crate::report::envelope::Envelope;
use crate::stages::coverage::preflight as pre;
use crate::stages::coverage::{CoverageGap, CoverageGapStage, PreflightStage, gap};
use crate::stages::{Session, run};

/// The per-ask detail of a big set stays out of the JSON document past this many asks.
const PER_ASK_JSON: usize = 1000;

/// The option keys a preflight's warnings and text name, and the flags that set them.
const PREFLIGHT_FLAGS: &[(&str, &str)] = &[
    ("`axes`", "--axis"),
    ("`budget`", "--budget"),
    ("`policy`", "--policy"),
    ("`repeats`", "--repeats"),
    ("`rule_cap`", "--rule-cap"),
];

/// The option keys (and the `wai simulate` lines) a coverage gap's notes and text name, spelled
/// as on the command line.
const GAP_FLAGS: &[(&str, &str)] = &[
    (
        "`simulate` with the asks as `seeds` covers",
        "wai simulate --seeds ASKS covers",
    ),
    (
        "`simulate` with the asks as `seeds` (and `tools`, `policy`)",
        "`wai simulate --seeds ASKS --tools ... --policy ...`",
    ),
    (
        "`simulate` with a fixed `repeat_policy` of K `repeats`",
        "wai simulate --repeat-policy fixed --repeats K",
    ),
    ("`rule_cap`", "--rule-cap"),
    ("`rows`", "--rows"),
];

/// Runs `wai preflight`.
pub(crate) fn preflight(args: &PreflightArgs) -> Result<Outcome> {
    let inputs = pre::Inputs {
        tools: read_tools(&args.tools)?,
        policy: read_policy(args.policy.as_deref())?,
    };
    let opts = pre::Options {
        rule_cap: args.rule_cap,
        budget: args.budget,
        repeats: args.repeats,
    };
    let session = Session::from_context(datafusion::prelude::SessionContext::new());
    // Not relational: nothing to await but the stage itself.
    let report = futures::executor::block_on(run::<PreflightStage>(&session, inputs, &opts))?;
    let envelope =
        Envelope::new("preflight", &report).warnings(report.warnings.iter().map(String::as_str));
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json: envelope.to_json()?,
        status: ExitStatus::Success,
    }
    .flags_named(PREFLIGHT_FLAGS)
    .phrases_named(&[("(past `rule_cap`)", "(past --rule-cap)")]))
}

/// The `--json` report of `wai coverage-gap`: the stage's (its per-ask detail cut to
/// [`PER_ASK_JSON`]), with the number of asks it had.
#[derive(Serialize)]
struct GapDoc<'a> {
    #[serde(flatten)]
    report: &'a CoverageGap,
    per_ask_total: usize,
}

/// Runs `wai coverage-gap`.
pub(crate) fn coverage_gap(ctx: &Context, args: &CoverageGapArgs) -> Result<Outcome> {
    let tools = read_tools(&args.tools)?;
    let policy = read_policy(args.policy.as_deref())?;
    let asks = asks_of(ctx, &args.asks)?;
    let (session, _scratch) = match &args.rows {
        Some(spec) => {
            let (context, scratch) = super::rows_session(ctx, std::slice::from_ref(spec))?;
            (Session::from_context(context), Some(scratch))
        }
        None => (
            Session::from_context(datafusion::prelude::SessionContext::new()),
            None,
        ),
    };
    let mut report = ctx.runtime.block_on(async {
        let rows = match &args.rows {
            Some(_) => Some(session.context().table("rows").await?),
            None => None,
        };
        let inputs = gap::Inputs {
            asks,
            tools,
            policy,
            rows,
        };
        let opts = gap::Options {
            rule_cap: args.rule_cap,
        };
        run::<CoverageGapStage>(&session, inputs, &opts).await
    })?;
    let text = report.to_string().trim_end().to_owned();
    let per_ask_total = report.per_ask.len();
    report.per_ask.truncate(PER_ASK_JSON);
    let doc = GapDoc {
        report: &report,
        per_ask_total,
    };
    Ok(Outcome {
        text,
        json: Envelope::new("coverage-gap", doc).to_json()?,
        status: ExitStatus::Success,
    }
    .flags_named(GAP_FLAGS)
    .phrases_named(&[("rows per rule (from `rows`)", "rows per rule (from --rows)")]))
}
