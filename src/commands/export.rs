//! `wai export`: rows into trainer-ready files, gated.

use std::path::Path;

use super::{Context, Outcome};
use crate::cli::{ExportArgs, ExportFormat, ExportMask};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::to_lines::{self, RowTable, Target, Written, meta_path};
use crate::pipeline::{json_lines, output, source};
use crate::report::envelope::{Envelope, Warning};
use crate::stages::export::{self, ExportStage, Format, Groups, Hint, MaskMode, Options};
use crate::stages::export::{datasets, dpo};
use crate::stages::{Session, Stage, run as run_stage};

/// Runs `wai export`.
pub(crate) fn run(ctx: &Context, args: &ExportArgs) -> Result<Outcome> {
    if args.unroll && args.mask_mode == ExportMask::Final {
        return Err(Error::Usage(
            "--unroll and --mask-mode final do not combine: --unroll already trains each assistant turn in a row of its own (the earlier turns as its prompt), and --mask-mode final trains only the last turn of each whole conversation; pick one".into(),
        ));
    }
    // Where the output goes is checked before anything is read.
    if args.format == ExportFormat::Parquet {
        output::folder(&args.out, args.force)?;
    } else {
        output::jsonl_name(&args.out, "this export")?;
    }
    let opts = options(args)?;
    let resolved = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    let meta = (args.format == ExportFormat::Openai).then(|| meta_path(&args.out));
    for out in std::iter::once(&args.out).chain(&meta) {
        output::not_an_input(out, &resolved)?;
    }
    if args.format == ExportFormat::Dpo {
        return pairs(args, &opts);
    }
    // The rows are read from Parquet, the groups first, the rows second.
    let table = RowTable::open(ctx, resolved)?;
    let groups = Groups::of_keys(&table.query(export::GROUP_KEYS)?)?;
    let target = if opts.datasets {
        Target::datasets(&args.out, datasets::dataset_schema, datasets::card)
    } else {
        Target::file(&args.out, meta.as_deref())
    };
    let views = export::reads_views(&opts);
    let written = table.write(target, "export", views, |rows, lines, context| {
        let inputs = export::Inputs {
            groups,
            rows,
            lines,
        };
        block_on::<ExportStage>(&Session::from_context(context), inputs, &opts)
    })?;
    let r = &written.report;
    if let Some(f) = r.gate_failures(&opts) {
        return Err(refused(format!(
            "{f}. Fix the rows (wai select drops leaking rows), or pass --no-validate to write them anyway; nothing was written"
        )));
    }
    let (n, text) = (r.n, r.summary(Some(&args.out), meta.as_deref()));
    let warnings = r.warnings.iter().map(warning).collect();
    let inputs = written.inputs().to_vec();
    finish(written, n, text, inputs, warnings)
}

/// `--format dpo`: pairs (from `wai select --mode preference`) into prompt/chosen/rejected rows.
fn pairs(args: &ExportArgs, opts: &Options) -> Result<Outcome> {
    let written = to_lines::write(Target::file(&args.out, None), "export", |lines| {
        let mut pairs = Vec::new();
        for input in &args.inputs {
            json_lines::each_line(input, &mut |n, v| {
                let pair = dpo::Pair::of(format!("{input}:{n}"), v);
                pairs.push(pair.ok_or("a pair needs `chosen` and `rejected` rows: make pairs with wai select --mode preference")?);
                Ok(())
            })?;
        }
        let inputs = dpo::Inputs { pairs, lines };
        block_on::<dpo::DpoStage>(&Session::new()?, inputs, opts)
    })?;
    let r = &written.report;
    if let Some(f) = r.gate_failures(opts) {
        return Err(refused(format!(
            "{f}; pass --no-validate to write anyway; nothing was written"
        )));
    }
    let (n, text) = (r.n, r.summary(Some(&args.out)));
    let warnings = r.warnings.iter().map(warning).collect();
    finish(written, n, text, args.inputs.clone(), warnings)
}

/// The stage's options from the arguments (the system prompt and tool schemas read).
fn options(args: &ExportArgs) -> Result<Options> {
    let read = crate::pipeline::world_files::read_text;
    let tools = |p: &Path| -> Result<Vec<serde_json::Value>> {
        let tools = crate::pipeline::world_files::read_tools(p)?.into_iter();
        Ok(tools
            .map(|t| serde_json::json!({"type": "function", "function": t.function}))
            .collect())
    };
    Ok(Options {
        system_prompt: args.system_prompt.as_deref().map(read).transpose()?,
        tools: args.tools.as_deref().map(tools).transpose()?,
        strip_think: !args.keep_think,
        mask_mode: match args.mask_mode {
            ExportMask::Assistant => MaskMode::Assistant,
            ExportMask::Final => MaskMode::Final,
        },
        unroll: args.unroll,
        max_tool_output_chars: args.max_tool_output_chars,
        // The Hugging Face deliverables (trl, the datasets folder, dpo) hold TRL rows: arguments
        // as objects, which the chat templates TRL ships render with `tojson`.
        format: if args.format == ExportFormat::Openai {
            Format::Openai
        } else {
            Format::Trl
        },
        datasets: args.format == ExportFormat::Parquet,
        no_validate: args.no_validate,
    })
}

/// Runs stage `S` to its end on this thread.
fn block_on<S: Stage>(
    session: &Session,
    inputs: S::Inputs,
    opts: &S::Options,
) -> Result<S::Report> {
    futures::executor::block_on(run_stage::<S>(session, inputs, opts))
}

/// A stage warning in the command's words: its hint names the flag to pass.
fn warning(w: &export::Warning) -> Warning {
    let (before, after) = match w.hint {
        None => ("", ""),
        Some(Hint::NoValidate) => ("written with --no-validate: ", ""),
        Some(Hint::SelectPasses) => (
            "",
            "; export the passes (wai select --mode sft) unless that is the point",
        ),
        Some(Hint::Tools) => ("", ": pass --tools TOOLS.json"),
        Some(Hint::SystemPrompt) => ("", ": pass --system-prompt FILE"),
        Some(Hint::TrlFormat) => ("", "; export with --format trl for TRL"),
    };
    Warning::coded(w.code, w.sentence(before, after))
}

/// A gate failed: nothing is written.
fn refused(message: String) -> Error {
    let stage = "export".into();
    Error::Input { stage, message }
}

/// Keeps the lines (`n` rows) and makes the outcome: the text with its warnings, and the `--json`
/// envelope.
fn finish<R: serde::Serialize>(
    written: Written<R>,
    n: u64,
    mut text: String,
    inputs: Vec<String>,
    warnings: Vec<Warning>,
) -> Result<Outcome> {
    let (report, outputs) = written.keep(n)?;
    for w in &warnings {
        text.push_str("\nwarning: ");
        text.push_str(&w.message);
    }
    let mut envelope = Envelope::new("export", &report)
        .inputs(inputs)
        .warnings(warnings);
    envelope.outputs = outputs;
    let json = envelope.to_json()?;
    let status = ExitStatus::Success;
    Ok(Outcome { text, json, status })
}
