//! `wai export`: rows into trainer-ready files, gated.

use std::collections::HashSet;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use rayon::prelude::*;
use serde_json::{Value, json};

use super::{Context, Outcome};
use crate::cli::{ExportArgs, ExportFormat, ExportMask};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::{self, AtomicFile, OnBadRow};
use crate::pipeline::output;
use crate::pipeline::read::Reader;
use crate::pipeline::row::{BatchView, Text, encode};
use crate::pipeline::{session, source};
use crate::stages::export::{self, Format, Groups, MaskMode, Options};

/// Largest Parquet shard of a datasets folder.
const SHARD_BYTES: u64 = 500 * 1024 * 1024;

/// Runs `wai export`.
pub fn run(ctx: &Context, args: &ExportArgs) -> Result<Outcome> {
    let started = std::time::Instant::now();
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
    let system_prompt = match &args.system_prompt {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| Error::read(p, e))?),
        None => None,
    };
    let tools = match &args.tools {
        Some(p) => Some(
            super::simulate::read_tools(p)?
                .into_iter()
                .map(|t| json!({"type": "function", "function": t.function}))
                .collect::<Vec<_>>(),
        ),
        None => None,
    };
    let opts = Options {
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
    };
    let resolved = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    output::not_an_input(&args.out, &resolved)?;
    if args.format == ExportFormat::Openai {
        output::not_an_input(&meta_path(&args.out), &resolved)?;
    }
    if args.format == ExportFormat::Dpo {
        return dpo(args, &opts, started);
    }
    // JSONL inputs are converted to Parquet first: the rows are read from Parquet, their text
    // as views into the decoded pages.
    let scratch = super::scratch()?;
    let inputs = super::as_parquet(ctx, resolved, scratch.path())?;
    // The groups are read first, the rows second: both from the same files.
    let pins = source::pin(&inputs)?;
    let context = session::new_context(None)?;
    ctx.runtime
        .block_on(session::register_parquet(&context, "rows", &inputs))?;
    // Pass 1: the groups (task key and reward of every row), read from two columns.
    let mut groups = Groups::default();
    let keys = ctx.runtime.block_on(crate::pipeline::session::collect_in_file_order(
        &context,
        "SELECT coalesce(nullif(json_get_str(extra, 'scenario_id'), ''), task_id) AS key, reward FROM rows",
    ))?;
    for b in &keys {
        let key = datafusion::arrow::compute::cast(
            b.column(0),
            &datafusion::arrow::datatypes::DataType::Utf8,
        )?;
        let key = key.as_string::<i32>();
        let reward = b
            .column(1)
            .as_primitive::<datafusion::arrow::datatypes::Float64Type>();
        for i in 0..b.num_rows() {
            groups.add(key.value(i), reward.is_valid(i).then(|| reward.value(i)));
        }
    }
    // Pass 2: the rows, converted in parallel and written in order.
    // JSONL goes straight to its file; a datasets folder is made from a temporary JSONL file.
    let parquet = args.format == ExportFormat::Parquet;
    let mut staging: Option<tempfile::TempDir> = None;
    let (file, temp) = match args.format {
        ExportFormat::Parquet => {
            // The folder is built beside its destination and renamed into place whole.
            let parent = match args.out.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => std::path::PathBuf::from("."),
            };
            let name = args
                .out
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            // Staging folders of killed runs, older than a day, go first.
            io::remove_stale(&parent, &format!(".{name}."));
            let building = tempfile::Builder::new()
                .prefix(&format!(".{name}."))
                .tempdir_in(&parent)
                .map_err(|e| Error::io(&parent, e))?;
            let temp = tempfile::Builder::new()
                .prefix(".rows.")
                .suffix(".jsonl")
                .tempfile_in(building.path())
                .map_err(|e| Error::io(&args.out, e))?;
            staging = Some(building);
            (None, Some(temp))
        }
        _ => (Some(AtomicFile::create(&args.out)?), None),
    };
    // An OpenAI fine-tuning file holds `messages` and `tools` only; each row's metadata (its
    // reward, reason, provenance and group fields) goes line for line to a file beside it.
    let meta_file = match args.format {
        ExportFormat::Openai => Some(AtomicFile::create(&meta_path(&args.out))?),
        _ => None,
    };
    let jsonl_path = temp
        .as_ref()
        .map_or_else(|| args.out.clone(), |t| t.path().to_path_buf());
    // The output's pages go to the disk as they are written; the scratch JSONL of a datasets
    // folder is read back and deleted, so it is not written out.
    let mut handle: Box<dyn Write + Send> = match (&file, &temp) {
        (Some(f), _) => Box::new(f.writer()?),
        (None, Some(t)) => Box::new(
            t.as_file()
                .try_clone()
                .map_err(|e| Error::io(&jsonl_path, e))?,
        ),
        (None, None) => return Err(Error::Internal("no export destination".into())),
    };
    // The lines are written on their own thread, a chunk of rows at a time, while the next
    // chunks are converted (the copy into the page cache is a fifth of an export's time).
    let mut meta_handle: Option<Box<dyn Write + Send>> = match &meta_file {
        Some(f) => Some(Box::new(f.writer()?)),
        None => None,
    };
    let (lines, written_lines) = std::sync::mpsc::sync_channel::<(Vec<u8>, Vec<u8>)>(16);
    let writer = {
        let path = jsonl_path.clone();
        let meta_path = meta_file.as_ref().map(|f| f.path().to_path_buf());
        std::thread::spawn(move || -> Result<()> {
            for (chunk, meta) in written_lines {
                handle.write_all(&chunk).map_err(|e| Error::io(&path, e))?;
                if let (Some(h), Some(p)) = (meta_handle.as_mut(), meta_path.as_ref()) {
                    h.write_all(&meta).map_err(|e| Error::io(p, e))?;
                }
            }
            handle.flush().map_err(|e| Error::io(&path, e))?;
            if let (Some(h), Some(p)) = (meta_handle.as_mut(), meta_path.as_ref()) {
                h.flush().map_err(|e| Error::io(p, e))?;
            }
            Ok(())
        })
    };
    let mut t = Tally::default();
    let mut group_ids: HashSet<String> = HashSet::new();
    let mut reader = Reader::new(
        ctx.runtime.handle().clone(),
        OnBadRow::Fail,
        Box::new(|_| {}),
    );
    // Openai rows are written straight from text views; the other formats, and unrolled rows,
    // take the general way for every row, so they read plain strings.
    let views = export::Wire::serves(&opts) && !parquet;
    let mut convert = |batch: RecordBatch| -> Result<()> {
        let wire = export::Wire::of(&batch)?;
        let rollout = batch
            .column_by_name(crate::schema::col::ROLLOUT_ID)
            .and_then(|a| Text::of(a.as_ref()));
        let n = batch.num_rows();
        // The general path reads plain text: a batch of views (whose rows take it rarely) is
        // copied out once, when a row first needs it.
        let plain = if views {
            None
        } else {
            Some(BatchView::new(&batch)?)
        };
        let copied: OnceLock<Result<RecordBatch>> = OnceLock::new();
        // The general path: the row as a JSON object, converted; its lines go to `bytes`.
        let general = |i: usize,
                       bytes: &mut Vec<u8>,
                       meta: &mut Vec<u8>|
         -> Result<(export::RowFacts, u64, export::Side)> {
            let copied_view;
            let view = match &plain {
                Some(view) => view,
                None => {
                    let b = copied
                        .get_or_init(|| io::conform(&batch, "export"))
                        .as_ref()
                        .map_err(again)?;
                    copied_view = BatchView::new(b)?;
                    &copied_view
                }
            };
            let row = encode(view, i)?;
            let (rows, facts) = export::training_rows(&row, &opts, &groups);
            let mut side = export::Side::default();
            for r in &rows {
                side.with_system |= r
                    .get("messages")
                    .or_else(|| r.get("prompt"))
                    .and_then(Value::as_array)
                    .and_then(|m| m.first())
                    .is_some_and(|m| m["role"] == "system");
                side.with_tools |= r.get("tools").is_some();
                if let Some(g) = r.get("group_id").and_then(Value::as_str) {
                    side.group = Some(g.to_owned());
                }
                let failed = |e: serde_json::Error| Error::Internal(format!("writing a row: {e}"));
                if parquet {
                    serde_json::to_writer(&mut *bytes, &for_parquet(r)).map_err(failed)?;
                } else if opts.format == Format::Openai {
                    let (line, row_meta) = export::split_openai(r);
                    serde_json::to_writer(&mut *bytes, &line).map_err(failed)?;
                    serde_json::to_writer(&mut *meta, &row_meta).map_err(failed)?;
                    meta.push(b'\n');
                } else {
                    serde_json::to_writer(&mut *bytes, r).map_err(failed)?;
                }
                bytes.push(b'\n');
            }
            side.reward = row.get("reward").and_then(Value::as_f64);
            side.eval_sourced = row
                .get("lineage")
                .and_then(|l| l.get("source"))
                .and_then(Value::as_str)
                == Some("eval");
            side.calls_tools = row
                .get("tools_used")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
                || row
                    .get("steps")
                    .and_then(Value::as_array)
                    .is_some_and(|s| s.iter().any(|x| x.get("tool").is_some()));
            side.has_policy_sha = row
                .get("lineage")
                .and_then(|l| l.get("system_prompt_sha"))
                .is_some();
            Ok((facts, rows.len() as u64, side))
        };
        // Chunks of rows: the lines of a chunk in one buffer, and each row's facts.
        type Chunk = (Vec<u8>, Vec<u8>, Vec<(export::RowFacts, RowMeta)>);
        let chunks: Vec<Chunk> = (0..n.div_ceil(256))
            .into_par_iter()
            .map(|c| {
                let mut cache = export::WireCache::default();
                let mut bytes = Vec::with_capacity(256 * 2048);
                let mut meta = Vec::with_capacity(if views { 256 * 1024 } else { 0 });
                let facts = (c * 256..((c + 1) * 256).min(n))
                    .map(|i| {
                        let fast = if views {
                            wire.write_row(i, &opts, &groups, &mut cache, &mut bytes, &mut meta)?
                        } else {
                            None
                        };
                        let (facts, written, side) = match fast {
                            Some((facts, side)) => (facts, 1, side),
                            None => general(i, &mut bytes, &mut meta)?,
                        };
                        // Which row: only for the report's first failure or warning.
                        let where_ = if facts.invalid_calls > 0
                            || facts.leak.is_some()
                            || facts.trailing_cut > 0
                            || facts.no_completion
                        {
                            rollout.and_then(|r| r.get(i)).unwrap_or("?").to_owned()
                        } else {
                            String::new()
                        };
                        Ok((
                            facts,
                            RowMeta {
                                written,
                                side,
                                where_,
                            },
                        ))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok((bytes, meta, facts))
            })
            .collect::<Result<_>>()?;
        for (bytes, meta, facts) in chunks {
            for (facts, meta) in facts {
                t.add(&facts, &meta);
                if let Some(g) = meta.side.group {
                    group_ids.insert(g);
                }
            }
            if lines.send((bytes, meta)).is_err() {
                // The writer stopped on an error: joining it below says which.
                return Err(Error::Internal("the export writer stopped".into()));
            }
        }
        Ok(())
    };
    source::unchanged(&inputs, &pins, "export")?;
    let converted = inputs.iter().try_for_each(|input| {
        if views {
            reader.read_views(input, &mut convert)
        } else {
            reader.read(input, &mut convert)
        }
    });
    drop(lines);
    let wrote = writer
        .join()
        .unwrap_or_else(|_| Err(Error::Internal("the export writer panicked".into())));
    // The writer's error first: a full disk is the cause, the stopped reading its effect.
    wrote?;
    converted?;
    source::unchanged(&inputs, &pins, "export")?;
    // The gates.
    let validate = !args.no_validate;
    let encoding = if opts.format == Format::Trl {
        "dict"
    } else {
        "json_string"
    };
    let mut failures = Vec::new();
    if t.invalid_calls > 0 {
        failures.push(format!(
            "tool_call_roundtrip_invalid: {} of {} tool calls do not parse back to structured arguments (first: row `{}`); training on them teaches string-wrapped arguments",
            t.invalid_calls, t.calls, t.first_invalid.as_deref().unwrap_or("?")
        ));
    }
    if t.leaks > 0 {
        failures.push(format!(
            "privileged_leak: {} of {} rows quote their own privileged context in what is exported (a turn, a call, the reason or a field; first: row `{}`: \"{}\"); training on them teaches the answer key",
            t.leaks, t.privileged_checked, t.first_leak.as_ref().map_or("?", |l| l.0.as_str()), t.first_leak.as_ref().map_or("", |l| l.1.as_str())
        ));
    }
    if validate && !failures.is_empty() {
        return Err(Error::Input {
            stage: "export".into(),
            message: format!(
                "{}. Fix the rows (wai select drops leaking rows), or pass --no-validate to write them anyway; nothing was written",
                failures.join("; ")
            ),
        });
    }
    let mut warnings: Vec<String> = failures
        .iter()
        .map(|f| format!("written with --no-validate: {f}"))
        .collect();
    if t.truncated > 0 {
        warnings.push(format!(
            "{} row(s) ended on the token cap (finish_reason length) and are exported as targets",
            t.truncated
        ));
    }
    if t.fail > 0 && !args.unroll {
        warnings.push(format!(
            "{} of {} rows have a reward below 0.5 and are exported as SFT targets; export the passes (wai select --mode sft) unless that is the point",
            t.fail, t.rows
        ));
    }
    if t.eval_sourced > 0 {
        warnings.push(format!(
            "{} row(s) carry rewards from an eval (lineage.source == \"eval\"); training on them turns the held-out scorer into the reward model",
            t.eval_sourced
        ));
    }
    if t.calls_tools > 0 && opts.tools.is_none() {
        warnings.push(format!(
            "{} row(s) call tools but the file has no tool schemas: pass --tools TOOLS.json",
            t.calls_tools
        ));
    }
    if t.has_policy_sha > 0 && opts.system_prompt.is_none() {
        warnings.push(format!("{} row(s) were made under a system prompt (lineage.system_prompt_sha) and the file has none: pass --system-prompt FILE", t.has_policy_sha));
    }
    if t.no_completion > 0 {
        warnings.push(format!(
            "{} row(s) have no assistant turn to train (after the prompt) and were not written (no_completion_dropped; first: row `{}`)",
            t.no_completion,
            t.first_no_completion.as_deref().unwrap_or("?")
        ));
    }
    if t.trailing_rows > 0 {
        warnings.push(format!(
            "{} row(s) ended on a tool or user turn after the last assistant turn: those {} turn(s) were cut, so each conversation ends on what the policy wrote (first: row `{}`)",
            t.trailing_rows,
            t.trailing_turns,
            t.first_trailing.as_deref().unwrap_or("?")
        ));
    }
    if opts.format == Format::Openai && t.trl_trained != t.trained {
        warnings.push(format!(
            "TRL reads no `weight`: loaded into TRL's SFTTrainer this file trains all {} assistant turns, not the {} the weights select; export with --format trl for TRL",
            t.trl_trained, t.trained
        ));
    }
    // Write.
    let mut shards = Vec::new();
    if let Some(f) = file {
        if let Some(m) = meta_file {
            m.commit()?;
        }
        f.commit()?;
    } else {
        let building = staging.ok_or_else(|| Error::Internal("no staging folder".into()))?;
        shards = write_dataset(&jsonl_path, building.path(), &args.out)?;
        drop(temp);
        // Into place: the old folder (if any) moves aside first and goes once the new one is in.
        let built = building.keep();
        let old = args.out.with_file_name(format!(
            ".{}.old",
            args.out
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        let _ = std::fs::remove_dir_all(&old);
        if args.out.exists() {
            std::fs::rename(&args.out, &old).map_err(|e| Error::io(&args.out, e))?;
        }
        std::fs::rename(&built, &args.out).map_err(|e| Error::io(&args.out, e))?;
        let _ = std::fs::remove_dir_all(&old);
    }
    let groups_n = group_ids.len();
    let mask_text = match (opts.format, opts.unroll, opts.mask_mode) {
        (Format::Trl, true, _) => "unrolled: each row trains its completion, one assistant turn",
        (Format::Trl, false, MaskMode::Final) => {
            "final: each row trains its completion, the last assistant turn"
        }
        (Format::Trl, false, MaskMode::Assistant) => "assistant: every assistant turn",
        (Format::Openai, true, _) => "unrolled: each row trains its last assistant turn (weight 1)",
        (Format::Openai, false, MaskMode::Final) => "final: the last assistant turn (weight 1)",
        (Format::Openai, false, MaskMode::Assistant) => {
            "assistant: every assistant turn (weight 1)"
        }
    };
    // Who reads the file, and how it must be told to train what the counts say.
    let trainer = match (
        opts.format,
        opts.unroll || opts.mask_mode == MaskMode::Final,
    ) {
        (Format::Openai, _) => {
            json!({"reads": "OpenAI chat fine-tuning: the assistant messages whose weight is 1",
            "trl": "TRL's SFTTrainer reads no weight: with assistant_only_loss=True it trains every assistant turn (trl_trained_messages)"})
        }
        (Format::Trl, true) => {
            json!({"reads": "TRL SFTTrainer, conversational prompt/completion rows: the completion (completion_only_loss, its default)",
            "config": {"completion_only_loss": true}})
        }
        (Format::Trl, false) => {
            json!({"reads": "TRL SFTTrainer, conversational messages rows: the assistant turns, with assistant_only_loss=True and a chat template that marks them with {% generation %}; without it every token trains",
            "config": {"assistant_only_loss": true}})
        }
    };
    let report = json!({
        "n": t.written, "rows_read": t.rows, "format": match args.format { ExportFormat::Openai => "openai", ExportFormat::Trl => "trl", ExportFormat::Parquet => "parquet", ExportFormat::Dpo => "dpo" },
        "with_system": t.with_system, "with_tools": t.with_tools, "groups": groups_n,
        "tool_call_roundtrip": {"checked": t.calls, "invalid": t.invalid_calls, "encoding": encoding},
        "mask_mode": mask_text, "unrolled": args.unroll, "max_tool_output_chars": args.max_tool_output_chars,
        "tool_output_truncated": t.outputs_cut, "tool_output_chars_cut": t.chars_cut,
        "trained_messages": t.trained, "masked_messages": t.masked, "trl_trained_messages": t.trl_trained,
        "trainer": trainer, "trailing_turns_cut": {"rows": t.trailing_rows, "turns": t.trailing_turns},
        "privileged_leaks": {"checked": t.privileged_checked > 0, "n_checked": t.privileged_checked, "n_leaked": t.leaks},
        "rewards": {"n_pass": t.pass, "n_fail": t.fail, "n_ungraded": t.ungraded},
        "no_completion_dropped": t.no_completion,
        "warnings": warnings, "path": args.out.display().to_string(), "shards": shards,
        "meta_path": (args.format == ExportFormat::Openai).then(|| meta_path(&args.out).display().to_string()),
        "elapsed_s": started.elapsed().as_secs_f64(),
    });
    let mut text = format!(
        "exported {} rows ({} read) to `{}` as {}: {} with a system prompt, {} with tools, {} groups; {} tool calls round-trip ({} invalid); {} assistant turns trained and {} masked; leaks {} of {} checked; rewards: {} pass, {} fail, {} ungraded",
        t.written,
        t.rows,
        args.out.display(),
        report["format"].as_str().unwrap_or(""),
        t.with_system,
        t.with_tools,
        groups_n,
        t.calls,
        t.invalid_calls,
        t.trained,
        t.masked,
        t.leaks,
        t.privileged_checked,
        t.pass,
        t.fail,
        t.ungraded
    );
    if args.format == ExportFormat::Openai {
        text.push_str(&format!(
            "\n  each row's reward, reason and provenance: `{}`, line for line",
            meta_path(&args.out).display()
        ));
    }
    if t.outputs_cut > 0 {
        text.push_str(&format!(
            "\n  {} tool outputs cut ({} characters)",
            t.outputs_cut, t.chars_cut
        ));
    }
    for w in report["warnings"].as_array().into_iter().flatten() {
        text.push_str(&format!("\nwarning: {}", w.as_str().unwrap_or("")));
    }
    let mut doc = super::document("export", &report);
    if let Some(o) = doc.as_object_mut() {
        o.insert("version".into(), json!(1));
    }
    Ok(Outcome {
        text,
        json: doc,
        status: ExitStatus::Success,
    })
}

/// Where an OpenAI export's metadata goes: `train.jsonl` → `train.meta.jsonl`.
fn meta_path(out: &Path) -> std::path::PathBuf {
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

/// What the report needs of a row besides its facts.
struct RowMeta {
    /// Training rows written.
    written: u64,
    side: export::Side,
    /// Its rollout id, when it failed a gate.
    where_: String,
}

#[derive(Default)]
struct Tally {
    rows: u64,
    written: u64,
    with_system: u64,
    with_tools: u64,
    calls: u64,
    invalid_calls: u64,
    first_invalid: Option<String>,
    outputs_cut: u64,
    chars_cut: u64,
    trained: u64,
    masked: u64,
    trl_trained: u64,
    trailing_rows: u64,
    trailing_turns: u64,
    first_trailing: Option<String>,
    first_no_completion: Option<String>,
    privileged_checked: u64,
    leaks: u64,
    first_leak: Option<(String, String)>,
    truncated: u64,
    pass: u64,
    fail: u64,
    ungraded: u64,
    eval_sourced: u64,
    calls_tools: u64,
    has_policy_sha: u64,
    no_completion: u64,
}

impl Tally {
    fn add(&mut self, f: &export::RowFacts, m: &RowMeta) {
        let (s, written) = (&m.side, m.written);
        self.rows += 1;
        self.written += written;
        self.with_system += u64::from(s.with_system) * written;
        self.with_tools += u64::from(s.with_tools) * written;
        self.calls += f.calls;
        self.invalid_calls += f.invalid_calls;
        if f.invalid_calls > 0 && self.first_invalid.is_none() {
            self.first_invalid = Some(m.where_.clone());
        }
        self.outputs_cut += f.outputs_cut;
        self.chars_cut += f.chars_cut;
        self.trained += f.trained;
        self.masked += f.masked;
        self.trl_trained += f.trl_trained;
        if f.trailing_cut > 0 {
            self.trailing_rows += 1;
            self.trailing_turns += f.trailing_cut;
            if self.first_trailing.is_none() {
                self.first_trailing = Some(m.where_.clone());
            }
        }
        if f.no_completion && self.first_no_completion.is_none() {
            self.first_no_completion = Some(m.where_.clone());
        }
        self.privileged_checked += u64::from(f.privileged);
        if let Some(l) = &f.leak {
            self.leaks += 1;
            if self.first_leak.is_none() {
                self.first_leak = Some((m.where_.clone(), l.chars().take(80).collect()));
            }
        }
        self.truncated += u64::from(f.truncated);
        match s.reward {
            Some(r) if r >= 0.5 => self.pass += 1,
            Some(_) => self.fail += 1,
            None => self.ungraded += 1,
        }
        self.eval_sourced += u64::from(s.eval_sourced);
        self.calls_tools += u64::from(s.calls_tools);
        self.has_policy_sha += u64::from(s.has_policy_sha);
        self.no_completion += u64::from(f.no_completion);
    }
}

/// Writes a Hugging Face datasets folder from the JSONL rows: `data/train-0000i-of-0000N.parquet`
/// (shards of at most 500 MB of input) and a `README.md` dataset card; returns the shard names.
fn write_dataset(jsonl: &Path, out: &Path, shown: &Path) -> Result<Vec<String>> {
    use datafusion::arrow::json::ReaderBuilder;
    use datafusion::arrow::json::reader::infer_json_schema;
    let open = || std::fs::File::open(jsonl).map_err(|e| Error::io(jsonl, e));
    let (schema, _) =
        infer_json_schema(std::io::BufReader::new(open()?), None).map_err(|e| Error::Input {
            stage: "export".into(),
            message: format!("the rows do not share one Parquet schema: {e}"),
        })?;
    let schema = Arc::new(dataset_schema(&schema));
    // Shard boundaries by input bytes.
    let total = std::fs::metadata(jsonl)
        .map_err(|e| Error::io(jsonl, e))?
        .len();
    let n_shards = total.div_ceil(SHARD_BYTES).max(1);
    let per_shard = total.div_ceil(n_shards);
    let data = out.join("data");
    std::fs::create_dir_all(&data).map_err(|e| Error::io(&data, e))?;
    let mut names = Vec::new();
    let mut reader = std::io::BufReader::new(open()?);
    let mut line = Vec::new();
    for s in 0..n_shards {
        let name = format!("train-{s:05}-of-{n_shards:05}.parquet");
        let path = data.join(&name);
        let mut chunk = Vec::new();
        while (chunk.len() as u64) < per_shard {
            line.clear();
            if reader
                .read_until(b'\n', &mut line)
                .map_err(|e| Error::io(jsonl, e))?
                == 0
            {
                break;
            }
            chunk.extend_from_slice(&line);
        }
        let file = AtomicFile::create(&path)?;
        let on_disk = |e: parquet::errors::ParquetError| io::written_to(&path, e.into());
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(file.writer()?, Arc::clone(&schema), None)
                .map_err(on_disk)?;
        let decoder = ReaderBuilder::new(Arc::clone(&schema))
            .with_batch_size(4096)
            .build(std::io::Cursor::new(chunk))?;
        for batch in decoder {
            writer.write(&batch?).map_err(on_disk)?;
        }
        writer.close().map_err(on_disk)?;
        file.commit()?;
        names.push(format!("data/{name}"));
    }
    // The features are read from the Parquet schema by `datasets`; the card names the columns
    // and says how to train on them.
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("`{}` ({})", f.name(), hf_type(f)))
        .collect();
    let (shape, trainer) = if schema.field_with_name("completion").is_ok() {
        (
            "conversational prompt/completion rows (`prompt` and `completion` are lists of chat messages; the completion is the one assistant turn trained)",
            "`SFTTrainer` trains the completion (its default `completion_only_loss`)",
        )
    } else {
        (
            "conversational rows (`messages` is a list of chat messages)",
            "`SFTTrainer` with `SFTConfig(assistant_only_loss=True)` trains the assistant turns (the chat template must mark them with `{% generation %}`); without it every token trains",
        )
    };
    let card = format!(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n---\n\n# Training rows exported by wai\n\nTRL {shape}, with their reward and provenance, in {} shard(s). Tool calls are `{{id, type: \"function\", function: {{name, arguments}}}}` with `arguments` as objects, as chat templates render them; `tools` is a list of `{{type: \"function\", function: {{name, description, parameters}}}}` to pass as `apply_chat_template(messages, tools=row[\"tools\"])`.\n\nMessages, tools and the free-form columns are typed JSON (Arrow's `arrow.json`), so each loads as the object it was: `datasets` 4.8.0 or later is needed (older versions refuse the type).\n\nColumns: {}.\n\nLoad with `datasets.load_dataset(\"{}\", split=\"train\")`; {trainer}.\n",
        names.len(),
        columns.join(", "),
        shown.display()
    );
    let readme = out.join("README.md");
    let f = AtomicFile::create(&readme)?;
    f.handle()?
        .write_all(card.as_bytes())
        .map_err(|e| Error::io(&readme, e))?;
    f.commit()?;
    Ok(names)
}

fn hf_type(f: &datafusion::arrow::datatypes::Field) -> String {
    use datafusion::arrow::datatypes::DataType as D;
    let is_json = |f: &datafusion::arrow::datatypes::Field| {
        f.metadata().get("ARROW:extension:name").map(String::as_str) == Some("arrow.json")
    };
    if is_json(f) {
        return "json".into();
    }
    match f.data_type() {
        D::List(item) if is_json(item) => "list of json".into(),
        D::Utf8 | D::LargeUtf8 => "string".into(),
        D::Int64 => "int64".into(),
        D::Float64 => "float64".into(),
        D::Boolean => "bool".into(),
        D::List(_) | D::LargeList(_) => "list".into(),
        D::Struct(_) => "struct".into(),
        other => format!("{other}").to_lowercase(),
    }
}

/// `--format dpo`: pairs (from `wai select --mode preference`) into prompt/chosen/rejected rows:
/// `prompt` is the conversation the two sides share, `chosen` and `rejected` what each said from
/// where they part (arguments as objects, as TRL's chat templates render them).
fn dpo(args: &ExportArgs, opts: &Options, started: std::time::Instant) -> Result<Outcome> {
    // A pair is two whole conversations: the mask and unroll settings do not apply.
    let opts = &Options {
        mask_mode: MaskMode::Assistant,
        unroll: false,
        ..opts.clone()
    };
    let groups = Groups::default();
    let file = AtomicFile::create(&args.out)?;
    let mut w = BufWriter::new(file.writer()?);
    let (mut pairs, mut written, mut dropped, mut calls, mut invalid, mut leaks, mut longer) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    // Pairs whose sides hold a tool result after they part, and the first one's line.
    let (mut with_env, mut first_env): (u64, Option<String>) = (0, None);
    for input in &args.inputs {
        let path = Path::new(input);
        let text = std::fs::read_to_string(path).map_err(|e| Error::read(path, e))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = |m: &str| Error::BadRow {
                file: input.clone(),
                line: n as u64 + 1,
                field: None,
                message: m.to_owned(),
            };
            let pair: Value =
                serde_json::from_str(line).map_err(|e| bad(&format!("not JSON: {e}")))?;
            let (Some(Value::Object(c)), Some(Value::Object(r))) =
                (pair.get("chosen"), pair.get("rejected"))
            else {
                return Err(bad(
                    "a pair needs `chosen` and `rejected` rows: make pairs with wai select --mode preference",
                ));
            };
            pairs += 1;
            let side = |row: &serde_json::Map<String, Value>| -> (Vec<Value>, export::RowFacts) {
                let (rows, facts) = export::training_rows(row, opts, &groups);
                let msgs = rows
                    .first()
                    .and_then(|r| r.get("messages"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                (msgs, facts)
            };
            let (cm, cf) = side(c);
            let (rm, rf) = side(r);
            calls += cf.calls + rf.calls;
            invalid += cf.invalid_calls + rf.invalid_calls;
            leaks += u64::from(cf.leak.is_some()) + u64::from(rf.leak.is_some());
            let shared = cm
                .iter()
                .zip(&rm)
                .take_while(|(a, b)| same_turn(a, b))
                .count();
            let parts_on_assistant = cm.get(shared).is_some_and(|m| m["role"] == "assistant")
                && rm.get(shared).is_some_and(|m| m["role"] == "assistant");
            if shared == 0 || !parts_on_assistant {
                dropped += 1;
                continue;
            }
            // DPO scores every token of both sides: a tool result there (which differs between
            // the sides by the mock world's ids and draws) would make part of the margin
            // environment noise, so a pair must differ only in what the policy wrote.
            let environment = |m: &[Value]| m.iter().any(|x| x["role"] != "assistant");
            if environment(&cm[shared..]) || environment(&rm[shared..]) {
                with_env += 1;
                first_env.get_or_insert_with(|| format!("{input}:{}", n + 1));
                continue;
            }
            let len = |m: &[Value]| {
                m.iter()
                    .map(|x| x["content"].as_str().map_or(0, str::len))
                    .sum::<usize>()
            };
            longer += u64::from(len(&cm[shared..]) > len(&rm[shared..]));
            let mut out = serde_json::Map::new();
            out.insert("prompt".into(), Value::Array(cm[..shared].to_vec()));
            out.insert("chosen".into(), Value::Array(cm[shared..].to_vec()));
            out.insert("rejected".into(), Value::Array(rm[shared..].to_vec()));
            if let Some(t) = &opts.tools {
                out.insert("tools".into(), Value::Array(t.clone()));
            }
            for k in [
                "chosen_score",
                "rejected_score",
                "margin",
                "chosen_model",
                "rejected_model",
                "same_policy",
                "length_delta",
                "first_turn_differs",
                "chosen_reason",
                "rejected_reason",
                "rejected_failure_class",
                "lineage",
            ] {
                if let Some(v) = pair.get(k).filter(|v| !v.is_null()) {
                    out.insert(k.to_owned(), v.clone());
                }
            }
            out.insert(
                "prompt_text".into(),
                pair.get("prompt").cloned().unwrap_or(Value::Null),
            );
            out.insert("schema_version".into(), json!("1"));
            serde_json::to_writer(&mut w, &out)
                .map_err(|e| Error::Internal(format!("writing a pair: {e}")))?;
            w.write_all(b"\n").map_err(|e| Error::io(&args.out, e))?;
            written += 1;
        }
    }
    w.flush().map_err(|e| Error::io(&args.out, e))?;
    drop(w);
    let mut failures = Vec::new();
    if invalid > 0 {
        failures.push(format!("tool_call_roundtrip_invalid: {invalid} of {calls} tool calls do not parse back to structured arguments"));
    }
    if leaks > 0 {
        failures.push(format!("privileged_leak: {leaks} side(s) quote their own privileged context in what is exported"));
    }
    if written == 0 && !args.no_validate {
        failures.push(
            "no_preference_pairs: no pair parts on an assistant turn after a shared prompt".into(),
        );
    }
    if !args.no_validate && !failures.is_empty() {
        return Err(Error::Input {
            stage: "export".into(),
            message: format!(
                "{}; pass --no-validate to write anyway; nothing was written",
                failures.join("; ")
            ),
        });
    }
    file.commit()?;
    let mut warnings: Vec<String> = failures
        .iter()
        .map(|f| format!("written with --no-validate: {f}"))
        .collect();
    if dropped > 0 {
        warnings.push(format!("{dropped} pair(s) share no prompt or part on a turn that is not the assistant's, and were dropped (no_completion_dropped)"));
    }
    if with_env > 0 {
        warnings.push(format!(
            "{with_env} pair(s) hold a tool result after the two sides part, which DPO would score as if the policy wrote it, and were dropped (tool_result_in_side_dropped; first: `{}`)",
            first_env.as_deref().unwrap_or("?")
        ));
    }
    let report = json!({"pairs": pairs, "n": written, "format": "dpo", "no_completion_dropped": dropped,
        "tool_result_in_side_dropped": with_env,
        "trainer": {"reads": "TRL DPOTrainer, conversational prompt/chosen/rejected rows: every token of chosen and rejected, none of prompt"},
        "tool_call_roundtrip": {"checked": calls, "invalid": invalid, "encoding": "dict"},
        "chosen_longer_frac": if written == 0 { 0.0 } else { longer as f64 / written as f64 },
        "warnings": warnings, "path": args.out.display().to_string(), "elapsed_s": started.elapsed().as_secs_f64()});
    let mut text = format!(
        "exported {written} of {pairs} pairs to `{}` as dpo (prompt, chosen, rejected); {calls} tool calls round-trip ({invalid} invalid); chosen longer in {longer}",
        args.out.display()
    );
    for w in report["warnings"].as_array().into_iter().flatten() {
        text.push_str(&format!("\nwarning: {}", w.as_str().unwrap_or("")));
    }
    Ok(Outcome {
        text,
        json: super::document("export", &report),
        status: ExitStatus::Success,
    })
}

/// Two turns say the same thing: equal once call ids are set aside (each side numbers its own).
fn same_turn(a: &Value, b: &Value) -> bool {
    fn blind(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.shift_remove("tool_call_id");
            if let Some(calls) = o.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for c in calls {
                    if let Some(c) = c.as_object_mut() {
                        c.shift_remove("id");
                    }
                }
            }
        }
        v
    }
    a == b || blind(a) == blind(b)
}

/// Columns of a datasets folder that hold lists of chat messages or tool schemas: each item is
/// one JSON object, typed `arrow.json` so `datasets` (4.7.0 and later) decodes it into the
/// object it was, keys and all (a struct column would give every message every key seen in the
/// file, as nulls, which chat templates render and trainers train).
const JSON_LISTS: [&str; 6] = [
    "messages",
    "prompt",
    "completion",
    "chosen",
    "rejected",
    "tools",
];

/// Columns of a datasets folder that are numbers.
const FLOATS: [&str; 5] = [
    "reward",
    "reward_mean",
    "reward_std",
    "qwen_reward",
    "logprob",
];
const INTEGERS: [&str; 4] = ["k", "n0", "n1", "n_tokens"];

/// Columns of a datasets folder that are plain text; every other column is free-form (lineage,
/// faults, world state, ...) and holds one JSON value, typed `arrow.json`.
const TEXTS: [&str; 22] = [
    "reason",
    "prompt_text",
    "scenario_id",
    "label_source",
    "failure_class",
    "judge_status",
    "judge_name",
    "policy_version",
    "writer_model",
    "user_model",
    "tier",
    "ask_family",
    "ask",
    "stance",
    "tone",
    "texture",
    "vagueness",
    "phrasing",
    "pressure",
    "length",
    "schema_version",
    "group_id",
];

/// A training row as a datasets folder holds it (see [`JSON_LISTS`], [`TEXTS`]): message and
/// tool lists as lists of JSON texts, numbers as numbers, plain text as text, and every
/// free-form value as its JSON text, so rows of different shapes share one schema and load as
/// they were.
fn for_parquet(row: &serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
    row.iter()
        .map(|(k, v)| {
            let key = k.as_str();
            let v = match v {
                Value::Array(items) if JSON_LISTS.contains(&key) => {
                    Value::Array(items.iter().map(|m| Value::String(m.to_string())).collect())
                }
                Value::Number(n) if FLOATS.contains(&key) => json!(n.as_f64()),
                Value::Number(_) if INTEGERS.contains(&key) => v.clone(),
                Value::Null => Value::Null,
                Value::String(_) if TEXTS.contains(&key) => v.clone(),
                // Free-form values, and a plain-text field that is not text, as JSON text.
                other => Value::String(other.to_string()),
            };
            (k.clone(), v)
        })
        .collect()
}

/// `field` marked as Arrow's canonical JSON extension type (its text is one JSON value).
fn json_typed(field: &datafusion::arrow::datatypes::Field) -> datafusion::arrow::datatypes::Field {
    let mut meta = field.metadata().clone();
    meta.insert("ARROW:extension:name".into(), "arrow.json".into());
    field.clone().with_metadata(meta)
}

/// The datasets folder's schema: the inferred one with the message lists' items and the
/// free-form columns typed `arrow.json`.
fn dataset_schema(
    inferred: &datafusion::arrow::datatypes::Schema,
) -> datafusion::arrow::datatypes::Schema {
    use datafusion::arrow::datatypes::{DataType, Field};
    let fields: Vec<Field> = inferred
        .fields()
        .iter()
        .map(|f| {
            let name = f.name().as_str();
            match f.data_type() {
                DataType::List(item) if JSON_LISTS.contains(&name) => {
                    Field::new(name, DataType::List(Arc::new(json_typed(item))), true)
                }
                DataType::Utf8
                    if !TEXTS.contains(&name)
                        && !FLOATS.contains(&name)
                        && !INTEGERS.contains(&name) =>
                {
                    json_typed(f)
                }
                _ => f.as_ref().clone(),
            }
        })
        .collect();
    datafusion::arrow::datatypes::Schema::new(fields)
}

/// An error a batch's rows share, given again to each row that meets it: an input's fault stays
/// one (its exit status), anything else is internal.
fn again(e: &Error) -> Error {
    match e {
        Error::Input { stage, message } => Error::Input {
            stage: stage.clone(),
            message: message.clone(),
        },
        Error::MissingColumn {
            stage,
            column,
            found,
        } => Error::MissingColumn {
            stage: stage.clone(),
            column: column.clone(),
            found: found.clone(),
        },
        other => Error::Internal(other.to_string()),
    }
}

#[cfg(test)]
#[test]
fn a_shared_error_keeps_its_kind_for_every_row() {
    let input = Error::Input {
        stage: "export".into(),
        message: "column `prompt` cannot be read as Utf8".into(),
    };
    let again_input = again(&input);
    assert!(matches!(&again_input, Error::Input { stage, .. } if stage == "export"));
    assert_eq!(again_input.to_string(), input.to_string());
    let missing = Error::missing_column("export", "prompt", &crate::schema::row_schema());
    let again_missing = again(&missing);
    assert!(matches!(&again_missing, Error::MissingColumn { column, .. } if column == "prompt"));
    assert_eq!(again_missing.to_string(), missing.to_string());
    let io = Error::io("x.parquet", std::io::Error::other("gone"));
    assert!(matches!(again(&io), Error::Internal(ref m) if m == &io.to_string()));
}
