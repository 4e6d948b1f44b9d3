//! `wai grade`: judges score rows, streaming; then the pass@k line and the warnings.
//!
//! Every verdict goes to a verdict log ([`log`]) as it lands, so a grade that is killed or fails
//! (a full disk, a judge that stops) resumes: the same command again judges only the rows
//! without a verdict, and writes the output an uninterrupted run writes.

mod log;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use datafusion::arrow::array::{Array, AsArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take_record_batch;

use super::{Context, Outcome};
use crate::cli::{GradeArgs, JudgePool};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::source;
use crate::report::plural;
use crate::schema::col;
use crate::stages::grade::command::{self, CommandJudge};
use crate::stages::grade::sql::{self as sql_judge, ExpressionJudge, QueryJudge};
use crate::stages::grade::verify::VerifierJudge;
use crate::stages::grade::{self, Judge, Panel, Stamp, Status, Tally, Verdict};

/// A judge spec's kind and text, the text read from a file when it names one.
fn parse_spec(spec: &str) -> Result<(&str, String, Option<String>)> {
    let (kind, body) = spec.split_once(':').ok_or_else(|| {
        Error::Usage(format!(
            "the judge `{spec}` has no kind: write `verify:FILE.toml`, `sql:EXPR`, `sql:FILE.sql` or `cmd:COMMAND`"
        ))
    })?;
    let body = body.trim();
    let file = match kind {
        "verify" => Some(body.to_owned()),
        "sql"
            if Path::new(body)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("sql"))
                && Path::new(body).is_file() =>
        {
            Some(body.to_owned())
        }
        "sql" | "cmd" => None,
        other => {
            return Err(Error::Usage(format!(
                "unknown judge kind `{other}` in `{spec}`: use `verify:`, `sql:` or `cmd:`"
            )));
        }
    };
    let text = match &file {
        Some(path) => std::fs::read_to_string(path).map_err(|e| Error::read(path, e))?,
        None => body.to_owned(),
    };
    Ok((kind, text, file))
}

/// How command judges and agents run, checked: workers, the per-row timeout and the variables
/// passed on to them.
#[derive(Debug, Clone)]
pub(crate) struct Workers {
    pub(crate) workers: usize,
    pub(crate) timeout: Duration,
    pub(crate) forward: Vec<String>,
}

impl Workers {
    /// The pool options for `command` in `role`.
    pub(crate) fn options(&self, command: String, role: &'static str) -> command::Options {
        command::Options {
            command,
            workers: self.workers,
            timeout: self.timeout,
            role,
            forward: self.forward.clone(),
        }
    }
}

/// The worker settings of `pool`, checked.
///
/// # Errors
/// No workers, a timeout that is not a number of seconds above 0, a bad `--env` name.
pub(crate) fn pool(pool: &JudgePool) -> Result<Workers> {
    if !(pool.timeout.is_finite() && pool.timeout > 0.0) {
        return Err(Error::Usage(format!(
            "--timeout must be a number of seconds above 0, not {}",
            pool.timeout
        )));
    }
    if pool.workers == 0 {
        return Err(Error::Usage("--workers must be at least 1".into()));
    }
    crate::pipeline::pipe::check_forward(&pool.env)?;
    Ok(Workers {
        workers: pool.workers,
        timeout: Duration::from_secs_f64(pool.timeout),
        forward: pool.env.iter().filter(|n| !n.is_empty()).cloned().collect(),
    })
}

/// A judge from `spec` that grades rows batch by row batch: a verifier file, a SQL expression or
/// a command. A SQL query judge reads a whole table at once, so it is refused here with the kinds
/// that work.
///
/// # Errors
/// A bad spec, an unreadable file, or a judge that does not start.
pub(crate) fn row_judge(spec: &str, workers: &Workers) -> Result<Box<dyn Judge>> {
    let (kind, text, file) = parse_spec(spec)?;
    let stem = |fallback: &str| {
        file.as_ref()
            .and_then(|p| Path::new(p).file_stem())
            .map_or(fallback.to_owned(), |s| s.to_string_lossy().into_owned())
    };
    Ok(match kind {
        "verify" => {
            let origin = file.clone().unwrap_or_default();
            Box::new(VerifierJudge::parse(&text, &origin, &stem("verify"))?)
        }
        "sql" if sql_judge::is_query(&text) => {
            return Err(Error::Usage(format!(
                "the judge `{spec}` is a SQL query, which grades a whole table at once and cannot re-judge edited rows: use `sql:EXPR`, `verify:FILE.toml` or `cmd:COMMAND`"
            )));
        }
        "sql" => Box::new(ExpressionJudge::new(
            format!("sql:{}", stem("expr")),
            &text,
        )?),
        _ => Box::new(CommandJudge::start(workers.options(text, "judge"))?),
    })
}

/// What decides the verdicts of a grade: the judges (specs and the text they name), the inputs
/// (names and sizes), the timeout and the variables passed to command judges. A verdict log is
/// resumed only under the same digest.
fn digest(
    args: &GradeArgs,
    texts: &[String],
    inputs: &[source::Input],
    workers: &Workers,
) -> String {
    let mut h = Sha256::new();
    let mut part = |t: &str| {
        h.update(t.as_bytes());
        h.update([0]);
    };
    part("wai grade verdicts 1");
    for (spec, text) in args.judges.iter().zip(texts) {
        part(spec);
        part(text);
    }
    for input in inputs {
        part(&input.display);
        part(&input.size.map_or_else(String::new, |s| s.to_string()));
    }
    part(&workers.timeout.as_secs_f64().to_string());
    part(&workers.forward.join(","));
    part(if args.output.rejects.is_some() {
        "rejects"
    } else {
        ""
    });
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The verdicts of `batch` (whose first row is row `first` of the run): those in the log are
/// taken from it, the rest judged, each appended to the log as it lands. `judged` counts the
/// rows judged now.
fn judge_missing(
    panel: &mut Panel,
    verdict_log: &mut log::VerdictLog,
    batch: &RecordBatch,
    first: u64,
    judged: &mut u64,
) -> Result<Vec<Verdict>> {
    let ids = batch
        .column_by_name(col::ROLLOUT_ID)
        .ok_or_else(|| Error::missing_column("grade", col::ROLLOUT_ID, &batch.schema()))?
        .as_string::<i32>();
    let id = |i: usize| if ids.is_valid(i) { ids.value(i) } else { "" };
    let n = batch.num_rows();
    let mut verdicts: Vec<Option<Verdict>> = (0..n)
        .map(|i| verdict_log.take(first + i as u64, id(i)))
        .collect();
    let missing: Vec<u32> = (0..n)
        .filter(|i| verdicts[*i].is_none())
        .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
        .collect();
    if !missing.is_empty() {
        let part = if missing.len() == n {
            batch.clone()
        } else {
            take_record_batch(batch, &UInt32Array::from(missing.clone()))?
        };
        let mut failed = None;
        let fresh = panel.judge_landing(&part, &mut |i, v| {
            let row = missing[i] as usize;
            if failed.is_none()
                && let Err(e) = verdict_log.append(first + row as u64, id(row), v)
            {
                failed = Some(e);
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        verdict_log.sync()?;
        *judged += fresh.len() as u64;
        for (i, v) in fresh.into_iter().enumerate() {
            verdicts[missing[i] as usize] = Some(v);
        }
    }
    verdicts
        .into_iter()
        .map(|v| v.ok_or_else(|| Error::Internal("a row was left without a verdict".into())))
        .collect()
}

/// The default scoring run id: the same judges on the same inputs give the same id.
fn run_id(args: &GradeArgs, texts: &[String]) -> String {
    let mut h = Sha256::new();
    for t in texts.iter().chain(&args.inputs) {
        h.update(t.as_bytes());
        h.update([0]);
    }
    let hex: String = h
        .finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("score_{hex}")
}

/// Runs `wai grade`.
pub fn run(ctx: &Context, args: &GradeArgs) -> Result<Outcome> {
    let started = Instant::now();
    let format =
        crate::pipeline::rows_out::output_format(&args.output.out, args.output.to.map(Into::into))?;
    let workers = pool(&args.pool)?;
    // Every option is checked before a row is read: a bad floor fails now, not after the grade.
    let gate_opts = super::gate::validate(&args.hollow, args.gate)?;
    let inputs = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    crate::pipeline::output::rows_apart(&args.output.out, args.output.rejects.as_deref(), &inputs)?;

    // The judges; a query judge runs first, over every row.
    let mut judges: Vec<Box<dyn Judge>> = Vec::new();
    let mut texts = Vec::new();
    let mut query_session = None;
    for spec in &args.judges {
        let (kind, text, file) = parse_spec(spec)?;
        let stem = |f: &Option<String>, fallback: &str| {
            f.as_ref()
                .and_then(|p| Path::new(p).file_stem())
                .map_or(fallback.to_owned(), |s| s.to_string_lossy().into_owned())
        };
        texts.push(text.clone());
        let judge: Box<dyn Judge> = match kind {
            "sql" if sql_judge::is_query(&text) => {
                if query_session.is_none() {
                    query_session = Some(super::rows_session(ctx, &args.inputs)?);
                }
                let (context, _) = query_session
                    .as_ref()
                    .ok_or_else(|| Error::Internal("no query session".into()))?;
                let name = format!("sql:{}", stem(&file, "query"));
                Box::new(
                    ctx.runtime
                        .block_on(QueryJudge::run(name, &text, context))?,
                )
            }
            _ => row_judge(spec, &workers)?,
        };
        judges.push(judge);
    }
    drop(query_session);
    let mut panel = Panel::new(judges);
    let stamp = Stamp {
        judge: panel.name().to_owned(),
        version: panel
            .version()
            .map(str::to_owned)
            .or_else(|| args.judge_version.clone()),
        run_id: args.run_id.clone().unwrap_or_else(|| run_id(args, &texts)),
        source: "grade",
    };
    tracing::info!(judge = %stamp.judge, inputs = inputs.len(), "grading");

    let digest = digest(args, &texts, &inputs, &workers);
    let (mut verdict_log, found) = log::VerdictLog::open(&args.output.out, &digest)?;
    let mut tally = Tally::default();
    let mut seen: u64 = 0;
    let mut judged: u64 = 0;
    let counts = crate::pipeline::rows_out::stream_rows(
        ctx,
        &inputs,
        &args.output.out,
        args.output.rejects.as_deref(),
        format,
        "grading",
        &mut |batch| {
            let verdicts = judge_missing(&mut panel, &mut verdict_log, &batch, seen, &mut judged)?;
            seen += batch.num_rows() as u64;
            tally.add(&verdicts);
            Ok(vec![grade::apply(&batch, &verdicts, &stamp)?])
        },
    )?;
    // The output is in place: the log has served.
    let log_path = verdict_log.path().to_path_buf();
    verdict_log.remove()?;
    let mut notes = panel.notes();
    drop(panel);
    if found.started_over {
        notes.push(format!(
            "the verdict log `{}` was left by a grade with other judges, inputs or options; it was started over",
            log_path.display()
        ));
    }
    if found.resumed > 0 {
        notes.push(format!(
            "resumed: {} from the verdict log of an interrupted grade, {} judged now",
            plural(tally.rows - judged, "verdict"),
            plural(judged, "row")
        ));
    }
    if found.torn {
        notes.push("the verdict log's last line was cut off by the interrupted grade; that row was judged again".into());
    }
    let elapsed = started.elapsed();

    // What the scored rows say.
    let scored = vec![args.output.out.display().to_string()];
    let (context, _scratch) = super::rows_session(ctx, &scored)?;
    let check = super::gate::check(ctx, &context, &args.hollow, &gate_opts, args.gate)?;

    let mut text = format!(
        "graded {} with `{}` into `{}` in {:.1} s: {} passed, {} failed, {} partial, {} unjudged",
        plural(tally.rows, "row"),
        stamp.judge,
        args.output.out.display(),
        elapsed.as_secs_f64(),
        tally.passed,
        tally.failed,
        tally.partial,
        tally.unjudged(),
    );
    for status in Status::ALL.iter().skip(1) {
        if let Some(n) = tally.by_status.get(status.as_str()) {
            text.push_str(&format!(
                "\n  {n} {}{}",
                status.as_str(),
                tally
                    .first_reason
                    .get(status.as_str())
                    .map(|r| format!(" (first: {r})"))
                    .unwrap_or_default()
            ));
        }
    }
    for note in &notes {
        text.push_str(&format!("\nnote: {note}"));
    }
    if let Some(path) = &args.output.rejects {
        text.push_str(&format!(
            "\n{} set aside in `{}`",
            plural(counts.rejected, "bad line"),
            path.display()
        ));
    }
    text.push('\n');
    text.push_str(&check.text);
    let mut json = json!({
        "version": 1,
        "command": "grade",
        "inputs": inputs.iter().map(|i| i.display.clone()).collect::<Vec<_>>(),
        "output": args.output.out.display().to_string(),
        "judge": stamp.judge,
        "judge_version": stamp.version,
        "scoring_run_id": stamp.run_id,
        "tally": tally,
        "notes": notes,
        "rejected": counts.rejected,
        "resumed": tally.rows - judged,
        "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    });
    if let (Some(obj), Value::Object(more)) = (json.as_object_mut(), check.json) {
        obj.extend(more);
    }
    Ok(Outcome {
        text,
        json,
        // Without `--gate`, only a hollow run fails the command.
        status: match (args.gate, check.status) {
            (None, ExitStatus::Hollow) => ExitStatus::Hollow,
            (None, _) => ExitStatus::Success,
            (Some(_), s) => s,
        },
    })
}
