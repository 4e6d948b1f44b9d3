//! `wai hack-scan`: what a policy trained on the reward would learn; exits 1 on a reward hack.

use super::{Context, Outcome};
use crate::cli::HackScanArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::report::envelope::Envelope;
use crate::stages::Session;
use crate::stages::hack_scan::{self, HackScanStage, Options, Regime};

/// The scan's options from the command line.
fn options(args: &HackScanArgs) -> Result<Options> {
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
    Ok(Options {
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
    })
}

/// The stage names a user feature by the option key `features`; the flag is `--feature`.
fn name_the_feature_flag(e: Error) -> Error {
    match e {
        Error::Option { key, message } if key == "features" => {
            Error::Usage(format!("--feature {message}"))
        }
        e => e,
    }
}

/// The option keys a warning of the scan names, and the flags that set them.
const FLAGS: &[(&str, &str)] = &[
    ("`endorsed`", "--endorsed"),
    ("`features`", "--feature"),
    ("`select` in `rl` mode", "`wai select --mode rl`"),
];

/// Runs `wai hack-scan`.
pub(crate) fn run(ctx: &Context, args: &HackScanArgs) -> Result<Outcome> {
    let opts = options(args)?;
    // Every option is checked before a row is read.
    crate::stages::Options::check(&opts).map_err(|e| super::error_flags_named(e, FLAGS))?;
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let mut report = ctx
        .runtime
        .block_on(async {
            let rows = context.table("rows").await?;
            crate::stages::run::<HackScanStage>(
                &Session::from_context(context),
                hack_scan::Inputs::new(rows),
                &opts,
            )
            .await
        })
        .map_err(name_the_feature_flag)?;
    for w in &mut report.warnings {
        *w = super::flags_named(w, FLAGS);
    }
    let status = if report.regime == Regime::RewardHack {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    };
    let text = report.to_string().trim_end().to_owned();
    let json = (Envelope::new("hack-scan", &report)
        .inputs(&args.inputs)
        .warnings(report.warnings.iter().map(String::as_str)))
    .to_json()?;
    Ok(Outcome { text, json, status })
}
