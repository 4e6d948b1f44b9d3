//! `wai judge-trust`: the judge against hand labels; exits 1 unless it passes.

use super::{Context, Outcome};
use crate::cli::JudgeTrustArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::stages::judge_trust::{self, Options};

/// Runs `wai judge-trust`.
pub fn run(ctx: &Context, args: &JudgeTrustArgs) -> Result<Outcome> {
    for (name, x) in [
        ("--min-agreement", args.min_agreement),
        ("--min-kappa", args.min_kappa),
        ("--length-gap-flag", args.length_gap_flag),
        ("--max-skipped-share", args.max_skipped_share),
    ] {
        if !(0.0..=1.0).contains(&x) {
            return Err(Error::Usage(format!("{name} must be in [0, 1], not {x}")));
        }
    }
    let opts = Options {
        min_agreement: args.min_agreement,
        min_kappa: args.min_kappa,
        allow_model_gold: args.allow_model_gold,
        length_gap_flag: args.length_gap_flag,
        max_skipped_share: args.max_skipped_share,
    };
    let context = session::new_context(None)?;
    let scratch = super::scratch()?;
    super::load_table(ctx, &context, "rows", &args.inputs, scratch.path())?;
    let (labeled, n_rows, n_reward) = ctx.runtime.block_on(judge_trust::read(&context, "rows"))?;
    let report = judge_trust::report(&labeled, n_rows, n_reward, &opts);
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json: super::document("judge-trust", &report),
        status: if report.ok {
            ExitStatus::Success
        } else {
            ExitStatus::Failure
        },
    })
}
