//! `wai judge-trust`: the judge against hand labels; exits 1 unless it passes.

use super::{Context, Outcome};
use crate::cli::{JudgeTrustArgs, TrustFloors};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::report::envelope::Envelope;
use crate::stages::Session;
use crate::stages::grade::{Judge, Panel};
use crate::stages::judge_trust::{self, JudgeTrustStage, Options, Rejudged, probes};

/// Runs `wai judge-trust`.
pub(crate) fn run(ctx: &Context, args: &JudgeTrustArgs) -> Result<Outcome> {
    let opts = Options {
        length_gap_flag: share("--length-gap-flag", args.length_gap_flag)?,
        max_skipped_share: share("--max-skipped-share", args.max_skipped_share)?,
        ..options(&args.floors)?
    };
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let rejudged = if args.judges.is_empty() {
        Rejudged::default()
    } else {
        rejudge(ctx, &context, args)?
    };
    let report = ctx.runtime.block_on(async {
        let inputs = judge_trust::Inputs {
            rows: context.table("rows").await?,
            rejudged,
        };
        crate::stages::run::<JudgeTrustStage>(&Session::from_context(context), inputs, &opts).await
    })?;
    let envelope = Envelope::new("judge-trust", &report)
        .inputs(&args.inputs)
        .warnings(report.warnings.iter().map(String::as_str));
    let json = envelope.to_json()?;
    Ok(Outcome {
        text: report.to_string().trim_end().to_owned(),
        json,
        status: if report.ok {
            ExitStatus::Success
        } else {
            ExitStatus::Failure
        },
    }
    .flags_named(FLAGS))
}

/// The option keys (of judge-trust, `wai grade` and `wai labels attach`) the audit's text and
/// warnings name, and the flags that set them. `judge` and `kind` are named in their phrases
/// only: a judge may be called `judge`.
pub(super) const FLAGS: &[(&str, &str)] = &[
    ("`allow_model_gold`", "--allow-model-gold"),
    ("`max_skipped_share`", "--max-skipped-share"),
    ("`rubric`", "--rubric"),
    ("ROWS `judge` SPEC", "ROWS --judge SPEC"),
    ("`judge` on judge-trust", "--judge on judge-trust"),
    ("`judge` SPEC `probes` all", "--judge SPEC --probes all"),
    ("attach `kind`", "attach --kind"),
    ("LABELS `kind`", "LABELS --kind"),
];

/// `x` when it is a share in [0, 1].
pub(super) fn share(flag: &str, x: f64) -> Result<f64> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(Error::Usage(format!("{flag} must be in [0, 1], not {x}")))
    }
}

/// The judge-trust options of `floors` (the other checks at their defaults), checked.
pub(super) fn options(floors: &TrustFloors) -> Result<Options> {
    Ok(Options {
        min_agreement: share("--min-agreement", floors.min_agreement)?,
        min_kappa: share("--min-kappa", floors.min_kappa)?,
        allow_model_gold: floors.allow_model_gold,
        ..Options::default()
    })
}

/// The probes `--probes` names (`all` for every one), checked.
fn probe_names(asked: &[String]) -> Result<Vec<String>> {
    let known = probes::all();
    if asked.iter().any(|p| p == "all") {
        return Ok(known);
    }
    if let Some(p) = asked.iter().find(|p| !known.contains(p)) {
        return Err(Error::Usage(format!(
            "--probes: unknown probe `{p}`: choose from {} or `all`",
            known.join(", ")
        )));
    }
    Ok(asked.to_vec())
}

/// The most rows `--sample` re-judges.
const MAX_SAMPLE: usize = 100_000;

/// Re-judges a seeded sample of graded rows with `--judge`: as-is and with filler, then the
/// probes asked for.
fn rejudge(
    ctx: &Context,
    context: &datafusion::prelude::SessionContext,
    args: &JudgeTrustArgs,
) -> Result<Rejudged> {
    let flip_flag = share("--flip-flag", args.flip_flag)?;
    if args.sample > MAX_SAMPLE {
        return Err(Error::Usage(format!(
            "--sample must be at most {}, not {}: the sample is held in memory and judged several times",
            crate::stages::grouped(MAX_SAMPLE as u64),
            crate::stages::grouped(args.sample as u64)
        )));
    }
    let mut workers = crate::pipeline::judges::pool(&args.pool)?;
    // An LLM judge under audit grades by the same rubric the keyword probe draws from.
    workers.models = workers.models.with_rubric(args.rubric.as_deref())?;
    let names = probe_names(&args.probes)?;
    let rubric = match &args.rubric {
        Some(r) if std::path::Path::new(r).is_file() => Some(
            crate::pipeline::world_files::read_text(std::path::Path::new(r))?,
        ),
        other => other.clone(),
    };
    let judges = args
        .judges
        .iter()
        .map(|spec| crate::pipeline::judges::row_judge(spec, &workers))
        .collect::<Result<Vec<Box<dyn Judge>>>>()?;
    let mut panel = Panel::new(judges);
    // The sample: graded rows in the order of a seeded hash of their id, so the choice is the
    // same at any partitioning.
    let picked = ctx.runtime.block_on(session::one_batch(
        context,
        &format!(
            "SELECT * FROM rows WHERE reward = 0 OR reward = 1 \
             ORDER BY stable_hash(concat('{}:', rollout_id)) LIMIT {}",
            args.seed, args.sample
        ),
    ))?;
    probes::rejudge(&picked, &mut panel, &names, rubric.as_deref(), flip_flag)
}
