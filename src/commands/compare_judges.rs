//! `wai compare-judges`: several judges on the same labeled rows; exits 1 when none clears the
//! floors.

use std::time::Instant;

use super::{Context, Outcome};
use crate::cli::CompareJudgesArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::session;
use crate::report::envelope::Envelope;
use crate::stages::judge_trust;
use crate::stages::judge_trust::compare::{self, Graded};

/// Runs `wai compare-judges`.
pub(crate) fn run(ctx: &Context, args: &CompareJudgesArgs) -> Result<Outcome> {
    let opts = super::judge_trust::options(&args.floors)?;
    let mut workers = crate::pipeline::judges::pool(&args.pool)?;
    workers.models = workers.models.with_rubric(args.rubric.as_deref())?;
    let mut named = Vec::new();
    for j in &args.judges {
        let (name, spec) = j
            .split_once('=')
            .filter(|(n, s)| !n.trim().is_empty() && !s.trim().is_empty())
            .ok_or_else(|| {
                Error::Usage(format!(
                    "--judge `{j}`: write NAME=SPEC, e.g. `rules=verify:checks.toml` or `len=sql:length(final_text) > 40`"
                ))
            })?;
        if named.iter().any(|(n, _)| n == name.trim()) {
            return Err(Error::Usage(format!(
                "--judge: the name `{name}` is given twice"
            )));
        }
        named.push((name.trim().to_owned(), spec.trim().to_owned()));
    }
    let context = session::new_context(None)?;
    let scratch = super::scratch()?;
    super::load_table(ctx, &context, "rows", &args.inputs, scratch.path())?;
    let batch = ctx.runtime.block_on(async {
        session::late_materialization(&context).await?;
        session::one_batch(
            &context,
            "SELECT * FROM rows WHERE gold_reward = 0 OR gold_reward = 1",
        )
        .await
    })?;
    if batch.num_rows() == 0 {
        return Err(Error::Input {
            stage: "compare-judges".into(),
            message: format!(
                "no row of {} has a 0/1 gold label: attach hand labels first (wai labels attach ROWS LABELS --kind human --out LABELED)",
                args.inputs.join(", ")
            ),
        });
    }
    let mut rows = Vec::new();
    judge_trust::labeled_rows(&batch, &mut rows)?;
    let mut verdicts = Vec::new();
    for (_, spec) in &named {
        let mut judge = crate::pipeline::judges::row_judge(spec, &workers)?;
        let started = Instant::now();
        let v = judge.judge(&batch)?;
        if v.len() != rows.len() {
            return Err(Error::Internal(format!(
                "a judge gave {} verdicts for {} rows",
                v.len(),
                rows.len()
            )));
        }
        verdicts.push((v, started.elapsed().as_secs_f64()));
    }
    let graded: Vec<Graded<'_>> = named
        .iter()
        .zip(&verdicts)
        .map(|((name, spec), (v, seconds))| Graded {
            name,
            spec,
            verdicts: v,
            seconds: *seconds,
        })
        .collect();
    let table = compare::compare(&rows, &graded, &opts);
    let json = (Envelope::new("compare-judges", &table)
        .inputs(&args.inputs)
        .warnings(table.warnings.iter().map(String::as_str)))
    .to_json()?;
    Ok(Outcome {
        text: table.to_string().trim_end().to_owned(),
        json,
        status: if table.ok {
            ExitStatus::Success
        } else {
            ExitStatus::Failure
        },
    }
    .flags_named(super::judge_trust::FLAGS))
}
