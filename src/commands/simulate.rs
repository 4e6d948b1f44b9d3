//! `wai simulate`: asks from the grid, played by an agent against the mock world, landed as rows.

use std::io::Write;
use std::path::Path;

use serde_json::Value;

use super::{Context, Outcome};
use crate::cli::{SimMode, SimRepeat, SimulateArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::{decode_line, render_jsonl};
use crate::pipeline::row::{AXES, BatchView, Record, encode};
use crate::stages::simulate::agent::{Agent, DEFAULT_RATE, SeededAgent};
use crate::stages::simulate::command::CommandAgent;
use crate::stages::simulate::tools::{Tool, parse_tools};
use crate::stages::simulate::world::Plan;
use crate::stages::simulate::{self, Mode, Options, Pinned, Progress, RepeatPolicy};

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::read(path, e))
}

/// Reads a tool file.
pub fn read_tools(path: &Path) -> Result<Vec<Tool>> {
    let text = read_text(path)?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Error::Usage(format!("`{}` is not JSON: {e}", path.display())))?;
    parse_tools(&value, &path.display().to_string())
}

/// Reads asks: one per line of a text file (lines starting with `#` are comments), or the
/// `prompt` of each JSONL record.
pub fn read_asks(path: &Path) -> Result<Vec<String>> {
    let text = read_text(path)?;
    let jsonl = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("ndjson"));
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || (!jsonl && line.trim_start().starts_with('#')) {
            continue;
        }
        if jsonl {
            let v: Value = serde_json::from_str(line).map_err(|e| Error::BadRow {
                file: path.display().to_string(),
                line: i as u64 + 1,
                field: None,
                message: format!("not JSON: {e}"),
            })?;
            let Some(p) = v.get("prompt").and_then(Value::as_str) else {
                return Err(Error::BadRow {
                    file: path.display().to_string(),
                    line: i as u64 + 1,
                    field: Some("prompt".into()),
                    message: "missing or not a string".into(),
                });
            };
            out.push(p.to_owned());
        } else {
            out.push(line.trim().to_owned());
        }
    }
    Ok(out)
}

/// The agent a spec names.
pub(crate) fn agent(
    spec: &str,
    behaviors: &[String],
    workers: &crate::pipeline::judges::Workers,
) -> Result<Box<dyn Agent>> {
    if let Some(command) = spec.strip_prefix("cmd:") {
        return Ok(Box::new(CommandAgent::start(
            workers.options(command.to_owned(), "agent"),
        )?));
    }
    let rate = match spec.strip_prefix("seeded") {
        Some("") => DEFAULT_RATE,
        Some(r) => r
            .strip_prefix(':')
            .and_then(|r| r.parse::<f64>().ok())
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or_else(|| {
                Error::Usage(format!(
                    "--agent `{spec}`: the rate is a share in [0, 1], as in `seeded:0.2`"
                ))
            })?,
        None => {
            return Err(Error::Usage(format!(
                "--agent `{spec}`: use `seeded`, `seeded:RATE` or `cmd:COMMAND`"
            )));
        }
    };
    Ok(Box::new(
        SeededAgent::new(rate, behaviors).map_err(Error::Usage)?,
    ))
}

/// Opens `path` for appending and takes its advisory lock, or says which run holds it.
///
/// # Errors
/// Another process holds the lock (a usage error: two runs on one checkpoint), or the file
/// cannot be opened.
pub fn lock_checkpoint(path: &Path) -> Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Usage(format!(
            "the checkpoint `{}` is in use by another run; wait for it to end, or give this run its own --checkpoint",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
    }
}

/// The rows already in a checkpoint; a torn last line (the run was killed while writing it) is
/// cut off so the file can be appended to.
pub fn read_checkpoint(path: &Path) -> Result<(Vec<Record>, bool)> {
    if !path.exists() {
        return Ok((Vec::new(), false));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let mut records = Vec::new();
    let mut good_end = 0usize;
    let mut torn = false;
    let mut start = 0usize;
    let mut line_no = 0u64;
    while start < bytes.len() {
        line_no += 1;
        let end = memchr::memchr(b'\n', &bytes[start..]).map(|i| start + i);
        let line = &bytes[start..end.unwrap_or(bytes.len())];
        if !line.iter().all(u8::is_ascii_whitespace) {
            match decode_line(line) {
                Ok(r) => records.push(r),
                Err(_) if end.is_none() => {
                    torn = true;
                    break;
                }
                Err(e) => {
                    return Err(Error::BadRow {
                        file: path.display().to_string(),
                        line: line_no,
                        field: e.field,
                        message: e.message,
                    });
                }
            }
        }
        match end {
            Some(e) => {
                start = e + 1;
                good_end = start;
            }
            None => {
                // A whole last line without its newline: keep it and add the newline.
                good_end = bytes.len();
                start = bytes.len();
            }
        }
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    if torn {
        file.set_len(good_end as u64)
            .map_err(|e| Error::io(path, e))?;
    } else if good_end > 0 && bytes.last() != Some(&b'\n') {
        drop(file);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        f.write_all(b"\n").map_err(|e| Error::io(path, e))?;
    }
    Ok((records, torn))
}

/// The tasks of earlier rows, one per distinct prompt in first-seen order.
pub fn read_tasks(ctx: &Context, spec: &str) -> Result<Vec<Pinned>> {
    let batches = super::all_rows(ctx, &[spec.to_owned()])?;
    let mut out: Vec<Pinned> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut per_run: std::collections::HashMap<(String, i64), u32> =
        std::collections::HashMap::new();
    for batch in &batches {
        let view = BatchView::new(batch)?;
        for i in 0..batch.num_rows() {
            let row = encode(&view, i)?;
            let Some(prompt) = row
                .get("prompt")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
            else {
                continue;
            };
            // k: the most rows the prompt had in any one run.
            let run = row
                .get("eval_run")
                .and_then(Value::as_i64)
                .or_else(|| {
                    row.get("lineage")
                        .and_then(|l| l.get("eval_run"))
                        .and_then(Value::as_i64)
                })
                .unwrap_or(0);
            let n = per_run.entry((prompt.to_owned(), run)).or_insert(0u32);
            *n += 1;
            if let Some(&j) = index.get(prompt) {
                out[j].rows = out[j].rows.max(*n);
                continue;
            }
            let strings = |v: Option<&Value>| -> Vec<(String, String)> {
                v.and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let dims = strings(row.get("scenario_dimensions").or_else(|| row.get("dims")));
            let labels = AXES
                .iter()
                .filter(|a| **a != "world_state")
                .filter_map(|a| {
                    row.get(*a)
                        .and_then(Value::as_str)
                        .map(|v| ((*a).to_owned(), v.to_owned()))
                })
                .collect();
            let world_state = row
                .get("world_state")
                .and_then(Value::as_str)
                .or_else(|| {
                    dims.iter()
                        .find(|(k, _)| k == "world_state")
                        .map(|(_, v)| v.as_str())
                })
                .filter(|w| !matches!(*w, "unspecified" | "unknown" | ""))
                .map(str::to_owned);
            index.insert(prompt.to_owned(), out.len());
            out.push(Pinned {
                prompt: prompt.to_owned(),
                task_id: row
                    .get("task_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                dims,
                labels,
                plan: row.get("faults").and_then(Plan::from_json),
                world_state,
                writer: row
                    .get("writer_model")
                    .and_then(Value::as_str)
                    .unwrap_or("pinned")
                    .to_owned(),
                privileged: row.get("privileged").cloned(),
                rows: 1,
            });
        }
    }
    if out.is_empty() {
        return Err(Error::Input {
            stage: "simulate".into(),
            message: format!("--tasks `{spec}` has no rows with a prompt"),
        });
    }
    Ok(out)
}

/// Runs `wai simulate`.
pub fn run(ctx: &Context, args: &SimulateArgs) -> Result<Outcome> {
    let tools = match &args.tools {
        Some(p) => read_tools(p)?,
        None => Vec::new(),
    };
    let policy = match &args.policy {
        Some(p) => read_text(p)?,
        None => String::new(),
    };
    let mut opts = Options::new(tools, policy);
    if let Some(p) = &args.seeds {
        opts.seeds = read_asks(p)?;
    }
    opts.seed = args.seed;
    opts.budget = args.budget;
    opts.mode = match args.mode {
        SimMode::Explore => Mode::Explore,
        SimMode::Rl => Mode::Rl,
    };
    opts.repeat_policy = args.repeat_policy.map(|p| match p {
        SimRepeat::None => RepeatPolicy::None,
        SimRepeat::Fixed => RepeatPolicy::Fixed,
        SimRepeat::Successive => RepeatPolicy::Successive,
    });
    opts.repeats = args.repeats;
    opts.phrasings = args.phrasings;
    opts.situations = args.situations;
    opts.fault_rate = args.fault_rate;
    opts.hard_share = args.hard_share;
    opts.rule_cap = args.rule_cap;
    opts.prefer_success = args.all_faults.then_some(false);
    opts.probes = !args.no_probes;
    opts.runs = args.runs;
    opts.wave = args.wave.map(|w| usize::try_from(w).unwrap_or(usize::MAX));
    for a in &args.axes {
        let (name, values) = a
            .split_once('=')
            .ok_or_else(|| Error::Usage(format!("--axis `{a}`: write NAME=V1,V2")))?;
        let values: Vec<String> = values
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect();
        opts.axes.push((name.trim().to_owned(), values));
    }
    if let Some(spec) = &args.tasks {
        opts.tasks = Some(read_tasks(ctx, spec)?);
    }
    let workers = crate::pipeline::judges::pool(&args.pool)?;
    let format = crate::pipeline::rows_out::output_format(&args.out, None)?;
    // The checkpoint is locked before it is read and held to the end: a second run on it would
    // play the same rollouts again.
    let mut checkpoint = match &args.checkpoint {
        Some(p) => Some((lock_checkpoint(p)?, p.clone())),
        None => None,
    };
    let mut agent = agent(&args.agent, &args.behaviors, &workers)?;
    let (resumed, torn) = match &args.checkpoint {
        Some(p) => read_checkpoint(p)?,
        None => (Vec::new(), false),
    };
    let mut sink = crate::pipeline::rows_out::sink(&args.out, format)?;
    let bar = ctx.count_bar(args.budget * u64::from(args.runs.max(1)), "rollouts");
    let progress_json = args.progress_json;
    let report = simulate::simulate(
        &opts,
        agent.as_mut(),
        resumed,
        |batch, fresh| {
            sink.write(&batch)?;
            if let Some((file, path)) = checkpoint.as_mut()
                && fresh.iter().any(|f| *f)
            {
                let lines = render_jsonl(&batch)?;
                let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
                for (line, new) in lines.iter().zip(fresh) {
                    if *new {
                        buf.extend_from_slice(line.as_bytes());
                        buf.push(b'\n');
                    }
                }
                // One write per wave: a kill leaves at most one torn line, cut on resume.
                file.write_all(&buf)
                    .map_err(|e| Error::io(path.as_path(), e))?;
            }
            Ok(())
        },
        |p: &Progress| {
            bar.set_position(u64::from(p.run) * args.budget + p.rows);
            if progress_json {
                // A closed stderr stops the lines, not the run.
                let _ = writeln!(
                    std::io::stderr(),
                    "{}",
                    serde_json::to_string(p).unwrap_or_default()
                );
            }
        },
    )?;
    bar.finish_and_clear();
    sink.finish()?;
    let mut notes = agent.notes();
    // The wave is a constant of the run (so rows do not follow the worker count); few
    // rollouts per worker in a wave leave workers waiting at each wave's end.
    let wave = opts.wave.unwrap_or_else(|| agent.wave());
    if args.agent.starts_with("cmd:") && workers.workers * 4 > wave {
        notes.push(format!(
            "waves of {wave} rollouts over {} workers give each fewer than 4 between decisions, so workers wait at each wave's end; pass --wave {} or more to keep them busy (the wave, not --workers, decides which rollouts are played)",
            workers.workers,
            workers.workers * 8
        ));
    }
    if torn {
        notes.push("the checkpoint's last line was cut off by the interrupted run; it was dropped and that rollout played again".into());
    }
    let mut text = report.to_string().trim_end().to_owned();
    text.push_str(&format!(
        "\nwrote {} rows to `{}`",
        report.rows,
        args.out.display()
    ));
    if let Some(p) = &args.checkpoint {
        text.push_str(&format!(" (checkpoint `{}`)", p.display()));
    }
    for n in &notes {
        text.push_str(&format!("\nnote: {n}"));
    }
    let mut json = super::document("simulate", &report);
    if let Some(obj) = json.as_object_mut() {
        obj.insert(
            "output".into(),
            Value::String(args.out.display().to_string()),
        );
        obj.insert("notes".into(), serde_json::json!(notes));
    }
    Ok(Outcome {
        text,
        json,
        status: if report.rows == 0 {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}
