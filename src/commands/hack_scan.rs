//! `wai hack-scan`: what a policy trained on the reward would learn; exits 1 on a reward hack.

use super::{Context, Outcome};
use crate::cli::HackScanArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::stages::hack_scan::{self, Options, Regime};

/// Runs `wai hack-scan`.
pub fn run(ctx: &Context, args: &HackScanArgs) -> Result<Outcome> {
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        return Err(Error::Usage(format!(
            "--alpha must be between 0 and 1, not {}",
            args.alpha
        )));
    }
    let features = args
        .features
        .iter()
        .map(|f| {
            f.split_once('=')
                .map(|(n, e)| (n.trim().to_owned(), e.trim().to_owned()))
                .filter(|(n, e)| !n.is_empty() && !e.is_empty())
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "--feature `{f}`: write NAME=SQL_EXPR, e.g. \
                         `apology=final_text ILIKE '%sorry%'`"
                    ))
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let opts = Options {
        endorsed: args.endorsed.clone(),
        features,
        auto: !args.no_auto,
        top_k: args.top_k,
        perms: args.perms,
        min_obs: args.min_obs,
        seeds: args.seeds,
        alpha: args.alpha,
        seed: args.seed,
        top_features: (args.top > 0).then_some(args.top),
    };
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let report = ctx
        .runtime
        .block_on(hack_scan::scan(&context, "rows", &opts))?;
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json: super::document("hack-scan", &report),
        status: if report.regime == Regime::RewardHack {
            ExitStatus::Failure
        } else {
            ExitStatus::Success
        },
    })
}
