//! `wai demo`: the whole loop on built-in data, offline: simulate, grade, measure, and leave a
//! folder of Parquet files to query.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::{Context, Outcome};
use crate::cli::{DemoArgs, HollowArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::AtomicFile;
use crate::report::envelope::{Envelope, Output, Warning};
use crate::report::table;
use crate::stages::Session;
use crate::stages::grade::{self, Judge, Stamp, Tally};
use crate::stages::simulate::agent::SeededAgent;
use crate::stages::simulate::demo::{self as world, DemoJudge};
use crate::stages::simulate::{self, Mode, Options, RepeatPolicy, SimulateStage};

/// The `--json` report: the simulation, the grading tally, and the gate's check.
#[derive(Serialize)]
struct Doc<'a> {
    simulate: &'a simulate::Report,
    tally: &'a Tally,
    #[serde(flatten)]
    check: Value,
}

/// A warning of the gate's check (`{kind, text}`) for the envelope.
fn warning(v: &Value) -> Option<Warning> {
    let message = v
        .as_str()
        .or_else(|| v.get("text").and_then(Value::as_str))?;
    Some(match v.get("kind").and_then(Value::as_str) {
        Some(kind) => Warning::coded(kind, message),
        None => Warning::from(message),
    })
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let file = AtomicFile::create(path)?;
    file.handle()?
        .write_all(text.as_bytes())
        .map_err(|e| Error::io(path, e))?;
    file.commit()
}

/// A canned query over the scored rows, as an aligned table.
fn table_of(
    ctx: &Context,
    context: &datafusion::prelude::SessionContext,
    name: &str,
) -> Result<String> {
    let q = crate::queries::find(name)
        .ok_or_else(|| Error::Internal(format!("no canned query `{name}`")))?;
    let frame = ctx.runtime.block_on(context.sql(q.sql))?;
    let schema = std::sync::Arc::new(frame.schema().as_arrow().clone());
    let batches = ctx.runtime.block_on(frame.collect())?;
    let mut buf = Vec::new();
    table::write(table::Format::Table, &schema, &batches, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Runs `wai demo`.
pub(crate) fn run(ctx: &Context, args: &DemoArgs) -> Result<Outcome> {
    let dir = &args.dir;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tools_path = dir.join("tools.json");
    let policy_path = dir.join("policy.md");
    let seeds_path = dir.join("seeds.txt");
    let rows_path = dir.join("rows.parquet");
    let scored_path = dir.join("scored.parquet");
    write_file(
        &tools_path,
        &serde_json::to_string_pretty(&world::tools_json()).unwrap_or_default(),
    )?;
    write_file(&policy_path, world::POLICY)?;
    write_file(&seeds_path, &(world::SEEDS.join("\n") + "\n"))?;

    // Simulate: a few thousand rollouts of the seeded agent, 4 per ask.
    let mut opts = Options::new(world::tools(), world::POLICY.to_owned());
    opts.seeds = world::SEEDS.iter().map(|s| (*s).to_owned()).collect();
    opts.seed = args.seed;
    opts.budget = args.budget;
    opts.mode = Mode::Explore;
    opts.repeat_policy = Some(RepeatPolicy::Fixed);
    opts.repeats = Some(4);
    opts.phrasings = Some(8);
    let mut agent = SeededAgent::new(args.rate, &[]).map_err(Error::Usage)?;
    let mut rows_sink = crate::pipeline::rows_out::sink(
        &rows_path,
        crate::pipeline::rows_out::output_format(&rows_path, None)?,
    )?;
    let mut scored_sink = crate::pipeline::rows_out::sink(
        &scored_path,
        crate::pipeline::rows_out::output_format(&scored_path, None)?,
    )?;
    // Grade as the rows land: the built-in program judge of the policy.
    let mut judge = DemoJudge;
    let stamp = Stamp {
        judge: judge.name().to_owned(),
        version: judge.version().map(str::to_owned),
        run_id: format!("score_demo_{}", args.seed),
        source: "grade",
    };
    let mut tally = Tally::default();
    let inputs = simulate::Inputs {
        agent: &mut agent,
        resumed: Vec::new(),
        land: Box::new(|batch, _| {
            rows_sink.write(&batch)?;
            let verdicts = judge.judge(&batch)?;
            tally.add(&verdicts);
            scored_sink.write(&grade::apply(&batch, &verdicts, &stamp)?)?;
            Ok(())
        }),
        progress: Box::new(|_| {}),
    };
    let session = Session::from_context(datafusion::prelude::SessionContext::new());
    let mut sim = futures::executor::block_on(crate::stages::run::<SimulateStage<'_>>(
        &session, inputs, &opts,
    ))
    .map_err(|e| super::error_flags_named(e, super::simulate::FLAGS))?;
    super::flags_named_each(&mut sim.warnings, super::simulate::FLAGS);
    rows_sink.finish()?;
    scored_sink.finish()?;

    // Measure: the pass@k line and the warnings, then failures by tool and tier.
    let scored = vec![scored_path.display().to_string()];
    let (context, _scratch) = super::rows_session(ctx, &scored)?;
    let hollow = HollowArgs {
        tools: Some(tools_path.clone()),
        no_tools: false,
        max_judge_failures: crate::stages::grade::warnings::JUDGE_FAILURE_SHARE,
        min_graded: crate::stages::grade::warnings::MIN_GRADED_SHARE,
        k: Vec::new(),
        seed: args.seed,
    };
    let opts = super::gate::validate(&hollow, None)?;
    let check = super::gate::check(ctx, &context, &hollow, &opts, None)?;
    let failures = table_of(ctx, &context, "failures_by_tool_tier")?;
    let markers = table_of(ctx, &context, "marker_rates")?;

    let mut text = format!(
        "wai demo: a refund-support agent (3 tools, a 5-rule policy) played by the seeded agent (mistake rate {}), graded by a program judge of the policy\n\n",
        args.rate
    );
    text.push_str(sim.to_string().trim_end());
    let _ = write!(
        text,
        "\n\ngraded {} rows with `{}`: {} passed, {} failed\n\n",
        tally.rows, stamp.judge, tally.passed, tally.failed
    );
    text.push_str(check.text.trim_end());
    text.push_str("\n\nfailures by tool and tier (fail rate with a 95% Wilson interval; `tasks` is how many situations stand behind it):\n");
    text.push_str(failures.trim_end());
    text.push_str("\n\npolicy rules (markers, 1 = kept):\n");
    text.push_str(markers.trim_end());
    let _ = write!(
        text,
        "\n\noutputs in `{d}`: rows.parquet (simulated), scored.parquet (graded), tools.json, policy.md, seeds.txt\nnext:\n  wai sql --query failures_by_tool_tier --table {d}/scored.parquet\n  wai sql \"SELECT reason, count(*) AS n FROM rows WHERE reward < 1 GROUP BY reason ORDER BY n DESC\" --table {d}/scored.parquet\n  wai pass-at {d}/scored.parquet --by dims.tier\n  wai simulate --tools {d}/tools.json --policy {d}/policy.md --seeds {d}/seeds.txt --agent 'cmd:python3 my_agent.py' --out mine.parquet",
        d = dir.display()
    );
    let warnings: Vec<Warning> = check
        .json
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| w.iter().filter_map(warning).collect())
        .unwrap_or_default();
    let report = Doc {
        simulate: &sim,
        tally: &tally,
        check: check.json,
    };
    let json = serde_json::to_value(
        Envelope::new("demo", report)
            .output(Output::new(dir.display(), "folder"))
            .warnings(warnings),
    )
    .unwrap_or_default();
    Ok(Outcome {
        text,
        json,
        status: if check.status == ExitStatus::Hollow {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}
