//! `wai judge-trust`: the judge against hand labels; exits 1 unless it passes.

use super::{Context, Outcome};
use crate::cli::JudgeTrustArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::stages::grade::{Judge, Panel};
use crate::stages::judge_trust::{self, Options, Rejudged, probes};

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
    let rejudged = if args.judges.is_empty() {
        Rejudged::default()
    } else {
        rejudge(ctx, &context, args)?
    };
    let report = judge_trust::report(&labeled, n_rows, n_reward, &opts, rejudged);
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

/// Re-judges a seeded sample of graded rows with `--judge`: as-is and with filler, then the
/// probes asked for.
fn rejudge(
    ctx: &Context,
    context: &datafusion::prelude::SessionContext,
    args: &JudgeTrustArgs,
) -> Result<Rejudged> {
    if !(0.0..=1.0).contains(&args.flip_flag) {
        return Err(Error::Usage(format!(
            "--flip-flag must be in [0, 1], not {}",
            args.flip_flag
        )));
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) || args.workers == 0 {
        return Err(Error::Usage(
            "--timeout must be above 0 seconds and --workers at least 1".into(),
        ));
    }
    let names = if args.probes.iter().any(|p| p == "all") {
        probes::all()
    } else {
        let known = probes::all();
        for p in &args.probes {
            if !known.contains(p) {
                return Err(Error::Usage(format!(
                    "--probes: unknown probe `{p}`: choose from {} or `all`",
                    known.join(", ")
                )));
            }
        }
        args.probes.clone()
    };
    let rubric = match &args.rubric {
        Some(r) if std::path::Path::new(r).is_file() => {
            Some(std::fs::read_to_string(r).map_err(|e| Error::io(r, e))?)
        }
        other => other.clone(),
    };
    let timeout = std::time::Duration::from_secs_f64(args.timeout);
    let judges = args
        .judges
        .iter()
        .map(|spec| super::grade::row_judge(spec, args.workers, timeout))
        .collect::<Result<Vec<Box<dyn Judge>>>>()?;
    let mut panel = Panel::new(judges);
    let judge_name = Some(panel.name().to_owned());
    // The sample: graded rows in the order of a seeded hash of their id, so the choice is the
    // same at any partitioning.
    let picked = ctx.runtime.block_on(async {
        let df = context
            .sql(&format!(
                "SELECT * FROM rows WHERE reward = 0 OR reward = 1 \
                 ORDER BY stable_hash(concat('{}:', rollout_id)) LIMIT {}",
                args.seed, args.sample
            ))
            .await?;
        let schema = df.schema().as_arrow().clone();
        let batches = df.collect().await?;
        Ok::<_, Error>(datafusion::arrow::compute::concat_batches(
            &std::sync::Arc::new(schema),
            &batches,
        )?)
    })?;
    if picked.num_rows() == 0 {
        return Ok(Rejudged {
            judge_name,
            ..Rejudged::default()
        });
    }
    let perturbation = probes::perturbation(&picked, &mut panel, args.flip_flag)?;
    let probed = if names.is_empty() {
        None
    } else {
        Some(probes::probes(
            &picked,
            &mut panel,
            &names,
            rubric.as_deref(),
            args.flip_flag,
        )?)
    };
    Ok(Rejudged {
        perturbation: Some(perturbation),
        probes: probed,
        judge_name,
    })
}
