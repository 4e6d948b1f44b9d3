//! `wai ingest`: foreign traces to rows, written whole or not at all.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use serde_json::json;

use super::{Context, Outcome};
use crate::cli::IngestArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::ingest::{self, Format, Options, OtelFields};
use crate::pipeline::io::{self, Accept, Identity, OnBadRow, ReadCounts};
use crate::pipeline::source::{self, Input};
use crate::report::plural;

/// Bytes read to recognise a file's format.
const HEAD_BYTES: u64 = 1 << 20;

/// Recognises `input`'s format from `head`, its first bytes.
fn detect(input: &Input, head: &[u8]) -> Result<Format> {
    if ingest::inspect::is_zip(head) || ingest::inspect::is_json_log(head) {
        return Ok(Format::Inspect);
    }
    let by_record = ingest::first_record(&head).and_then(|r| ingest::detect(&r));
    let by_text = || {
        let has = |needle: &[u8]| memchr::memmem::find(head, needle).is_some();
        if has(b"\"resourceSpans\"") || has(b"\"resourceLogs\"") {
            Some(Format::Otel)
        } else if has(b"\"traj\"") {
            Some(Format::TauBench)
        } else {
            None
        }
    };
    by_record.or_else(by_text).ok_or_else(|| Error::Input {
        stage: "ingest".into(),
        message: format!(
            "cannot tell the format of `{}`: looked for {}; name it with `--format`",
            input.display,
            ingest::DETECTION
        ),
    })
}

/// A seekable file holding an `.eval` archive: the local file, or a remote object copied to a
/// temporary file.
fn eval_file(input: &Input, ctx: &Context) -> Result<std::fs::File> {
    if let source::Location::Local(path) = &input.location {
        return std::fs::File::open(path).map_err(|e| Error::io(path, e));
    }
    let mut temp = tempfile::tempfile().map_err(|e| Error::io(&input.display, e))?;
    let mut reader = source::open(input, ctx.runtime.handle())?;
    std::io::copy(&mut reader, &mut temp).map_err(|e| Error::io(&input.display, e))?;
    std::io::Seek::rewind(&mut temp).map_err(|e| Error::io(&input.display, e))?;
    Ok(temp)
}

/// Runs `wai ingest`.
pub fn run(ctx: &Context, args: &IngestArgs) -> Result<Outcome> {
    let started = Instant::now();
    let out_format =
        crate::pipeline::rows_out::output_format(&args.output.out, args.output.to.map(Into::into))?;
    let inputs = ctx.runtime.block_on(source::resolve_traces(&args.inputs))?;
    crate::pipeline::output::rows_apart(&args.output.out, args.output.rejects.as_deref(), &inputs)?;
    if let Some(p) = inputs.iter().find(|i| i.format == source::Format::Parquet) {
        return Err(Error::Usage(format!(
            "`{}` is Parquet, already rows: read it with `wai convert`",
            p.display
        )));
    }
    let opts = Options {
        format: args.format,
        task_field: args.task_field.clone(),
        trial_field: args.trial_field.clone(),
        reward_field: args.reward_field.clone(),
        messages_field: args.messages_field.clone(),
        privileged: args.privileged.clone(),
        otel: OtelFields {
            reward_attr: args.reward_attr.clone(),
            task_attr: args.task_attr.clone(),
            ..OtelFields::default()
        },
        score: args.score.clone(),
    };
    let total = inputs.iter().map(|i| i.size).sum::<Option<u64>>();
    let bar = ctx.bytes_bar(total, "ingesting");
    let mut sink = crate::pipeline::rows_out::sink(&args.output.out, out_format)?;
    let rejects_file = args
        .output
        .rejects
        .as_deref()
        .map(io::AtomicFile::create)
        .transpose()?;
    let mut rejects = Vec::new();
    let mut on_bad = if args.output.rejects.is_some() {
        OnBadRow::Reject(&mut rejects)
    } else {
        OnBadRow::Fail
    };
    let mut identity = Identity::default();
    let mut counts = ReadCounts::default();
    let mut extra_fields: BTreeMap<String, u64> = BTreeMap::new();
    let mut formats = Vec::new();
    let mut notes = ingest::Notes {
        kept: args.output.rejects.is_some().then(Vec::new),
        ..ingest::Notes::default()
    };
    let (mut otel_text, mut otel_names) = (Vec::new(), Vec::<String>::new());
    for input in &inputs {
        // Open once: the first bytes serve detection and are then read again from memory.
        let mut reader = source::open(input, ctx.runtime.handle())?;
        let mut head = Vec::new();
        (&mut reader)
            .take(HEAD_BYTES)
            .read_to_end(&mut head)
            .map_err(|e| Error::io(&input.display, e))?;
        let format = if args.format == Format::Auto {
            detect(input, &head)?
        } else {
            args.format
        };
        tracing::info!(input = %input.display, ?format, "ingesting");
        formats.push(json!({"input": input.display, "format": format}));
        if format == Format::Inspect && ingest::inspect::is_zip(&head) {
            // A `.eval` archive is read from its file member by member (a remote one is
            // first copied to a temporary file): memory holds a batch of samples, never the archive.
            drop(reader);
            let file = eval_file(input, ctx)?;
            let mut emit = |batch: RecordBatch| sink.write(&batch);
            let mut accept = Accept::new(&mut identity, &mut on_bad, &mut counts, &mut emit);
            accept.extra_fields = Some(std::mem::take(&mut extra_fields));
            ingest::read_eval(&input.display, file, &opts, &mut accept, &|n| bar.inc(n))?;
            extra_fields = accept.extra_fields.take().unwrap_or_default();
            accept.finish()?;
            continue;
        }
        let mut reader = std::io::Cursor::new(head).chain(reader);
        if format == Format::Otel {
            // A conversation's spans and the log records beside them may be in any of the
            // OTLP files given: they are read together, after the others.
            reader
                .read_to_end(&mut otel_text)
                .map_err(|e| Error::io(&input.display, e))?;
            otel_text.push(b'\n');
            otel_names.push(input.display.clone());
            continue;
        }
        let mut emit = |batch: RecordBatch| sink.write(&batch);
        let mut accept = Accept::new(&mut identity, &mut on_bad, &mut counts, &mut emit);
        accept.extra_fields = Some(std::mem::take(&mut extra_fields));
        ingest::read(
            &input.display,
            reader,
            format,
            &opts,
            &mut accept,
            &|n| bar.inc(n),
            &mut notes,
        )?;
        extra_fields = accept.extra_fields.take().unwrap_or_default();
        accept.finish()?;
    }
    if !otel_names.is_empty() {
        let name = otel_names.join(" + ");
        let mut emit = |batch: RecordBatch| sink.write(&batch);
        let mut accept = Accept::new(&mut identity, &mut on_bad, &mut counts, &mut emit);
        accept.extra_fields = Some(std::mem::take(&mut extra_fields));
        ingest::read_otel(
            &name,
            &otel_text,
            &opts,
            &mut accept,
            &|n| bar.inc(n),
            &mut notes,
        )?;
        extra_fields = accept.extra_fields.take().unwrap_or_default();
        accept.finish()?;
    }
    drop(on_bad);
    // Every record that gave no row, by reason: the bad ones set aside, and those that are no
    // rollout (they never stop a run).
    let mut not_rows: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &mut rejects {
        let kind = ingest::reject_kind(r);
        r.kind = Some(kind);
        *not_rows.entry(kind).or_default() += 1;
    }
    for (kind, n) in &notes.skipped {
        *not_rows.entry(kind).or_default() += n;
    }
    rejects.extend(notes.kept.take().unwrap_or_default());
    io::finish_with_rejects(sink, rejects_file.map(|f| (f, rejects.as_slice())))?;
    bar.finish_and_clear();
    let mut text = String::new();
    for f in &formats {
        text.push_str(&format!(
            "`{}`: {}\n",
            f["input"].as_str().unwrap_or(""),
            f["format"].as_str().unwrap_or("")
        ));
    }
    text.push_str(&format!(
        "wrote {} to `{}` in {:.1} s; {}",
        plural(counts.rows, "row"),
        args.output.out.display(),
        started.elapsed().as_secs_f64(),
        plural(counts.rejected, "reject")
    ));
    if let Some(path) = &args.output.rejects {
        text.push_str(&format!(" (in `{}`)", path.display()));
    }
    if !not_rows.is_empty() {
        let list: Vec<String> = not_rows.iter().map(|(k, n)| format!("{k} {n}")).collect();
        text.push_str(&format!(
            "\nrecords that gave no row, by reason: {}{}",
            list.join(", "),
            if args.output.rejects.is_some() {
                " (all in the rejects file)"
            } else {
                " (`--rejects FILE` keeps them)"
            }
        ));
    }
    if !extra_fields.is_empty() {
        let list: Vec<String> = extra_fields
            .iter()
            .map(|(k, n)| format!("{k} ({n})"))
            .collect();
        text.push_str(&format!("\nfields carried in `extra`: {}", list.join(", ")));
    }
    let mut warnings = Vec::new();
    if notes.no_content > 0 {
        warnings.push(format!(
            "{} carried no message content (rows marked `no_content`: reward, task, tools and usage only); turn content capture on in the instrumentation (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`) for prompts and replies",
            plural(notes.no_content, "conversation")
        ));
    }
    if notes.not_genai > 0 {
        warnings.push(format!(
            "{} had no GenAI span and gave no row",
            plural(notes.not_genai, "trace")
        ));
    }
    let hollow = counts.rows == 0;
    if hollow {
        warnings.push(
            "no row was written: nothing in the input became a rollout (a hollow run, exit 2)"
                .to_owned(),
        );
    }
    for w in &warnings {
        text.push_str(&format!("\nwarning: {w}"));
    }
    let json = json!({
        "version": 1,
        "command": "ingest",
        "warnings": warnings,
        "no_content": notes.no_content,
        "not_genai": notes.not_genai,
        "inputs": formats,
        "output": args.output.out.display().to_string(),
        "rows": counts.rows,
        "rejected": counts.rejected,
        "not_rows": not_rows,
        "rejects_file": args.output.rejects.as_ref().map(|p| p.display().to_string()),
        "extra_fields": extra_fields,
        "bytes_in": counts.bytes,
        "elapsed_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    });
    Ok(Outcome {
        text,
        json,
        status: if hollow {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}
