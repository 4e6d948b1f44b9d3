//! `wai demo`: the whole loop on built-in data, offline: simulate, grade, measure, and leave a
//! folder of Parquet files to query.

use std::path::Path;

use super::{Context, Outcome};
use crate::cli::{DemoArgs, HollowArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::AtomicFile;
use crate::pipeline::rows_out::{output_format, sink};
use crate::report::envelope::{Envelope, Output};
use crate::stages::Session;
use crate::stages::grade::warnings::{JUDGE_FAILURE_SHARE, MIN_GRADED_SHARE};
use crate::stages::simulate::demo::{self as world, DemoStage, Table};

fn write_file(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let file = AtomicFile::create(path)?;
    file.handle()?
        .write_all(text.as_bytes())
        .map_err(|e| Error::io(path, e))?;
    file.commit()
}

/// Runs `wai demo`.
pub(crate) fn run(ctx: &Context, args: &DemoArgs) -> Result<Outcome> {
    let opts = world::Options {
        seed: args.seed,
        budget: args.budget,
        rate: args.rate,
    };
    // Options are checked before the folder is made: a refused demo writes nothing.
    crate::stages::Options::check(&opts)?;
    let dir = &args.dir;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tools_path = dir.join("tools.json");
    let (rows_path, scored_path) = (dir.join("rows.parquet"), dir.join("scored.parquet"));
    let tools = serde_json::to_string_pretty(&world::tools_json()).unwrap_or_default();
    write_file(&tools_path, &tools)?;
    write_file(&dir.join("policy.md"), world::POLICY)?;
    write_file(&dir.join("seeds.txt"), &(world::SEEDS.join("\n") + "\n"))?;

    // Simulate a few thousand rollouts, graded as they land.
    let mut rows_sink = sink(&rows_path, output_format(&rows_path, None)?)?;
    let mut scored_sink = sink(&scored_path, output_format(&scored_path, None)?)?;
    let inputs = world::Inputs {
        rows: Box::new(|batch| rows_sink.write(batch)),
        scored: Box::new(|batch| scored_sink.write(batch)),
    };
    let session = Session::from_context(datafusion::prelude::SessionContext::new());
    let mut played =
        futures::executor::block_on(crate::stages::run::<DemoStage<'_>>(&session, inputs, &opts))
            .map_err(|e| super::error_flags_named(e, super::simulate::FLAGS))?;
    super::flags_named_each(&mut played.simulate.warnings, super::simulate::FLAGS);
    rows_sink.finish()?;
    scored_sink.finish()?;

    // Measure the scored rows: the gate as `wai grade` runs it, then two canned queries.
    let (context, _scratch) = super::rows_session(ctx, &[scored_path.display().to_string()])?;
    let hollow = HollowArgs {
        tools: Some(tools_path),
        no_tools: false,
        max_judge_failures: JUDGE_FAILURE_SHARE,
        min_graded: MIN_GRADED_SHARE,
        k: Vec::new(),
        seed: args.seed,
    };
    let check = super::gate::report(ctx, &context, &super::gate::validate(&hollow, None)?)?;
    let failures = ctx
        .runtime
        .block_on(Table::of(&context, "failures_by_tool_tier"))?;
    let markers = ctx.runtime.block_on(Table::of(&context, "marker_rates"))?;
    let status = match super::gate::status(&check) {
        ExitStatus::Hollow => ExitStatus::Hollow,
        _ => ExitStatus::Success,
    };
    let warnings: Vec<_> = super::gate::warnings_of(&check).collect();
    // The page to look at, drawn from the scored rows as `wai report` draws it.
    let page_path = dir.join("report.html");
    let mut page = crate::report::page::Page::new(
        "wai demo: a refund-support agent graded by a program judge of its policy".into(),
        vec![scored_path.display().to_string()],
    );
    super::report::add_rows(
        ctx,
        &mut page,
        &[scored_path.display().to_string()],
        &super::report::Settings::demo(args.seed),
    )?;
    page.finish()?;
    super::report::write(&page, &page_path)?;
    let report = world::Report {
        rate: args.rate,
        played,
        check,
        failures,
        markers,
        dir: dir.display().to_string(),
    };
    let json = Envelope::new("demo", &report)
        .output(Output::new(dir.display(), "folder"))
        .output(Output::new(page_path.display(), "file"))
        .warnings(warnings)
        .to_json()?;
    Ok(Outcome {
        text: report.to_string(),
        json,
        status,
    })
}
