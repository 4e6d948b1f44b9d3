//! `wai export`: rows into trainer-ready files, gated.

use std::path::{Path, PathBuf};

use super::{Context, Outcome};
use crate::cli::{ExportArgs, ExportFormat, ExportMask};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::lines_out::LinesOut;
use crate::pipeline::{io::OnBadRow, json_lines, output, read::Reader, session, shards, source};
use crate::report::envelope::{Envelope, Output, Warning};
use crate::stages::export::{self, ExportStage, Format, Groups, Hint, MaskMode, Options, dpo};
use crate::stages::{Session, run as run_stage};

/// Runs `wai export`.
pub fn run(ctx: &Context, args: &ExportArgs) -> Result<Outcome> {
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
    // JSONL inputs are converted to Parquet first: the rows are read from Parquet, their text
    // as views into the decoded pages. The groups are read first, the rows second.
    let scratch = super::scratch()?;
    let inputs = super::as_parquet(ctx, resolved, scratch.path())?;
    let pins = source::pin(&inputs)?;
    let context = session::new_context(None)?;
    ctx.runtime
        .block_on(session::register_parquet(&context, "rows", &inputs))?;
    let mut groups = Groups::default();
    for b in &ctx
        .runtime
        .block_on(session::collect_in_file_order(&context, export::GROUP_KEYS))?
    {
        groups.add_keys(b)?;
    }
    let mut out = if opts.datasets {
        LinesOut::folder(&args.out, "export")?
    } else {
        LinesOut::file(&args.out, meta.as_deref(), "export")?
    };
    source::unchanged(&inputs, &pins, "export")?;
    let (handle, read, views) = (
        ctx.runtime.handle().clone(),
        inputs.clone(),
        export::reads_views(&opts),
    );
    let rows: export::Rows = Box::new(move |each| {
        let mut reader = Reader::new(handle, OnBadRow::Fail, Box::new(|_| {}));
        read.iter().try_for_each(|input| {
            if views {
                reader.read_views(input, each)
            } else {
                reader.read(input, each)
            }
        })
    });
    let stage_inputs = export::Inputs {
        groups,
        rows,
        lines: out.sink(),
    };
    let session = Session::from_context(context);
    let report =
        futures::executor::block_on(run_stage::<ExportStage>(&session, stage_inputs, &opts));
    // The writer's error first: a full disk is the cause, the stopped reading its effect.
    out.finish()?;
    let report = report?;
    source::unchanged(&inputs, &pins, "export")?;
    if let Some(failed) = report.gate_failures(&opts) {
        return Err(Error::Input {
            stage: "export".into(),
            message: format!(
                "{failed}. Fix the rows (wai select drops leaking rows), or pass --no-validate to write them anyway; nothing was written"
            ),
        });
    }
    let mut outputs = Vec::new();
    if opts.datasets {
        let shards = out.commit_folder(&args.out, |jsonl, folder| {
            let (schema, names) =
                shards::write_shards(jsonl, folder, "export", export::datasets::dataset_schema)?;
            let card = export::datasets::card(&schema, names.len(), &args.out);
            shards::write_text(&folder.join("README.md"), &card)?;
            Ok(names)
        })?;
        outputs.push(Output::new(args.out.display(), "folder").rows(report.n));
        outputs.extend(
            shards
                .iter()
                .map(|s| Output::new(args.out.join(s).display(), "rows")),
        );
    } else {
        out.commit()?;
        for path in std::iter::once(&args.out).chain(&meta) {
            outputs.push(Output::new(path.display(), "rows").rows(report.n));
        }
    }
    let warnings: Vec<Warning> = report.warnings.iter().map(warning).collect();
    let text = report.summary(Some(&args.out), meta.as_deref());
    finish(
        "export",
        &report,
        text,
        resolved_names(&inputs),
        outputs,
        warnings,
    )
}

/// The stage's options from the arguments (the system prompt and tool schemas read).
fn options(args: &ExportArgs) -> Result<Options> {
    let system_prompt = match &args.system_prompt {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| Error::read(p, e))?),
        None => None,
    };
    let tools = match &args.tools {
        Some(p) => Some(
            super::simulate::read_tools(p)?
                .into_iter()
                .map(|t| serde_json::json!({"type": "function", "function": t.function}))
                .collect::<Vec<_>>(),
        ),
        None => None,
    };
    Ok(Options {
        system_prompt,
        tools,
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

/// `--format dpo`: pairs (from `wai select --mode preference`) into prompt/chosen/rejected rows.
fn pairs(args: &ExportArgs, opts: &Options) -> Result<Outcome> {
    let mut out = LinesOut::file(&args.out, None, "export")?;
    let mut pairs = Vec::new();
    for input in &args.inputs {
        json_lines::each_line(input, &mut |n, pair| {
            match pair {
            serde_json::Value::Object(pair) if pair.get("chosen").is_some_and(serde_json::Value::is_object)
                && pair.get("rejected").is_some_and(serde_json::Value::is_object) =>
            {
                pairs.push(dpo::Pair { at: format!("{input}:{n}"), pair });
                Ok(())
            }
            _ => Err("a pair needs `chosen` and `rejected` rows: make pairs with wai select --mode preference".into()),
        }
        })?;
    }
    let stage_inputs = dpo::Inputs {
        pairs,
        lines: out.sink(),
    };
    let report = futures::executor::block_on(run_stage::<dpo::DpoStage>(
        &Session::new()?,
        stage_inputs,
        opts,
    ));
    out.finish()?;
    let report = report?;
    if let Some(failed) = report.gate_failures(opts) {
        return Err(Error::Input {
            stage: "export".into(),
            message: format!("{failed}; pass --no-validate to write anyway; nothing was written"),
        });
    }
    out.commit()?;
    let outputs = vec![Output::new(args.out.display(), "rows").rows(report.n)];
    let warnings: Vec<Warning> = report.warnings.iter().map(warning).collect();
    finish(
        "export",
        &report,
        report.summary(Some(&args.out)),
        args.inputs.clone(),
        outputs,
        warnings,
    )
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

/// The outcome: the text with its warnings, and the `--json` envelope.
fn finish(
    command: &str,
    report: &impl serde::Serialize,
    mut text: String,
    inputs: Vec<String>,
    outputs: Vec<Output>,
    warnings: Vec<Warning>,
) -> Result<Outcome> {
    for w in &warnings {
        text.push_str("\nwarning: ");
        text.push_str(&w.message);
    }
    let mut envelope = Envelope::new(command, report)
        .inputs(inputs)
        .warnings(warnings);
    envelope.outputs = outputs;
    let json = serde_json::to_value(envelope)
        .map_err(|e| Error::Internal(format!("a report does not serialize: {e}")))?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}

/// The inputs as the user named them.
fn resolved_names(inputs: &[source::Input]) -> Vec<String> {
    inputs.iter().map(|i| i.display.clone()).collect()
}

/// Where an OpenAI export's metadata goes: `train.jsonl` → `train.meta.jsonl`.
fn meta_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".jsonl")
        .or_else(|| name.strip_suffix(".json"))
        .unwrap_or(&name);
    out.with_file_name(format!("{stem}.meta.jsonl"))
}
