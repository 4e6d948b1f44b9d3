//! Ingesting resolved inputs into one rows output: each file's format recognised (or named),
//! `.eval` archives read member by member, OTLP files read together after the others, bad
//! records set aside or fatal, and the output written whole or not at all.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use datafusion::arrow::array::RecordBatch;

use super::{Format, Notes, Options};
use crate::error::{Error, Result};
use crate::pipeline::context::Context;
use crate::pipeline::io::{self, Accept, Identity, OnBadRow, ReadCounts, Reject, Sink};
use crate::pipeline::source::{self, Input};

/// Bytes read to recognise a file's format.
const HEAD_BYTES: u64 = 1 << 20;

/// Where the rows go.
pub struct Destination<'a> {
    /// The rows file.
    pub out: &'a Path,
    /// Its format.
    pub format: source::Format,
    /// The rejects file, when bad records are set aside rather than fatal.
    pub rejects: Option<&'a Path>,
}

/// What an ingest read and wrote.
#[derive(Debug, Default)]
pub struct Ingested {
    /// Rows kept, records set aside, bytes read.
    pub counts: ReadCounts,
    /// Each input (as named) and the format it was read as.
    pub formats: Vec<(String, Format)>,
    /// Every record that gave no row, by reason: the bad ones set aside, and those that are no
    /// rollout (they never stop a run).
    pub not_rows: BTreeMap<&'static str, u64>,
    /// How many rows carry each field kept in `extra`.
    pub extra_fields: BTreeMap<String, u64>,
    /// Conversations without message content.
    pub no_content: u64,
    /// Traces without a GenAI span.
    pub not_genai: u64,
}

/// The state of one ingest: where batches go, and what was seen.
struct Run<'a, 'b> {
    sink: Box<dyn Sink>,
    identity: Identity,
    counts: ReadCounts,
    extra_fields: BTreeMap<String, u64>,
    on_bad: OnBadRow<'b>,
    opts: &'a Options,
    progress: &'a dyn Fn(u64),
}

impl Run<'_, '_> {
    /// Runs `read` with an [`Accept`] over this run's sink, counts and identities.
    fn accept(&mut self, read: impl FnOnce(&mut Accept<'_, '_>) -> Result<()>) -> Result<()> {
        let sink = &mut self.sink;
        let mut emit = |batch: RecordBatch| sink.write(&batch);
        let mut accept = Accept::new(
            &mut self.identity,
            &mut self.on_bad,
            &mut self.counts,
            &mut emit,
        );
        accept.extra_fields = Some(std::mem::take(&mut self.extra_fields));
        read(&mut accept)?;
        self.extra_fields = accept.extra_fields.take().unwrap_or_default();
        accept.finish()
    }
}

/// Ingests `inputs` into `to`, reading them as `opts` says; `progress` is told of the bytes
/// read as they are.
pub fn ingest_inputs(
    ctx: &Context,
    inputs: &[Input],
    opts: &Options,
    to: &Destination<'_>,
    progress: &dyn Fn(u64),
) -> Result<Ingested> {
    let sink = crate::pipeline::rows_out::sink(to.out, to.format)?;
    let rejects_file = to.rejects.map(io::AtomicFile::create).transpose()?;
    let mut rejects = Vec::new();
    let mut notes = Notes {
        kept: to.rejects.is_some().then(Vec::new),
        ..Notes::default()
    };
    let mut run = Run {
        sink,
        identity: Identity::default(),
        counts: ReadCounts::default(),
        extra_fields: BTreeMap::new(),
        on_bad: if to.rejects.is_some() {
            OnBadRow::Reject(&mut rejects)
        } else {
            OnBadRow::Fail
        },
        opts,
        progress,
    };
    let formats = read_all(ctx, inputs, &mut run, &mut notes)?;
    let Run {
        sink,
        counts,
        extra_fields,
        ..
    } = run;
    let not_rows = not_rows(&mut rejects, &notes);
    rejects.extend(notes.kept.take().unwrap_or_default());
    io::finish_with_rejects(sink, rejects_file.map(|f| (f, rejects.as_slice())))?;
    Ok(Ingested {
        counts,
        formats,
        not_rows,
        extra_fields,
        no_content: notes.no_content,
        not_genai: notes.not_genai,
    })
}

/// Reads every input into `run`; OTLP files last, together (a conversation's spans and the log
/// records beside them may be in any of them). Returns each input's format.
fn read_all(
    ctx: &Context,
    inputs: &[Input],
    run: &mut Run<'_, '_>,
    notes: &mut Notes,
) -> Result<Vec<(String, Format)>> {
    let mut formats = Vec::new();
    // OTLP inputs are read as they come, their spans kept until all are read.
    let (mut otel, mut otel_names) = (None::<super::OtelSpans>, Vec::<String>::new());
    for input in inputs {
        // Open once: the first bytes serve detection and are then read again from memory.
        let mut reader = source::open(input, ctx.runtime.handle())?;
        let mut head = Vec::new();
        (&mut reader)
            .take(HEAD_BYTES)
            .read_to_end(&mut head)
            .map_err(|e| Error::io(&input.display, e))?;
        let format = if run.opts.format == Format::Auto {
            sniff(input, &mut reader, &mut head)?
        } else {
            run.opts.format
        };
        tracing::info!(input = %input.display, ?format, "ingesting");
        formats.push((input.display.clone(), format));
        if format == Format::Inspect && super::inspect::is_zip(io::strip_bom(&head)) {
            // A `.eval` archive is read from its file member by member (a remote one is
            // first copied to a temporary file): memory holds a batch of samples, never the archive.
            drop(reader);
            let file = eval_file(input, ctx)?;
            let (opts, progress) = (run.opts, run.progress);
            run.accept(|accept| super::read_eval(&input.display, file, opts, accept, progress))?;
            continue;
        }
        let reader = std::io::Cursor::new(head).chain(reader);
        if format == Format::Otel {
            otel.get_or_insert_with(|| super::OtelSpans::new(notes.kept.is_some()))
                .read(&input.display, reader, run.progress)?;
            otel_names.push(input.display.clone());
            continue;
        }
        let (opts, progress) = (run.opts, run.progress);
        run.accept(|accept| {
            super::read(
                &input.display,
                reader,
                format,
                opts,
                accept,
                progress,
                notes,
            )
        })?;
    }
    if let Some(otel) = otel {
        let name = otel_names.join(" + ");
        let opts = run.opts;
        run.accept(|accept| super::read_otel(&name, otel, opts, accept, notes))?;
    }
    Ok(formats)
}

/// Every record that gave no row, by reason; each reject is given its kind.
fn not_rows(rejects: &mut [Reject], notes: &Notes) -> BTreeMap<&'static str, u64> {
    let mut not_rows: BTreeMap<&'static str, u64> = BTreeMap::new();
    for r in rejects {
        let kind = super::reject_kind(r);
        r.kind = Some(kind);
        *not_rows.entry(kind).or_default() += 1;
    }
    for (kind, n) in &notes.skipped {
        *not_rows.entry(kind).or_default() += n;
    }
    not_rows
}

/// Recognises `input`'s format from `head`, its first bytes, reading more of `reader` onto
/// `head` while the first record is cut off by its end (a first record may be any size).
fn sniff(input: &Input, reader: &mut impl Read, head: &mut Vec<u8>) -> Result<Format> {
    loop {
        let detected = detect(input, head);
        if detected.is_ok() || !super::first_record_cut(head) {
            return detected;
        }
        // Read as much again: the first record ends somewhere after the head.
        let more = head.len().max(1) as u64;
        let before = head.len();
        reader
            .take(more)
            .read_to_end(head)
            .map_err(|e| Error::io(&input.display, e))?;
        if head.len() == before {
            return detected;
        }
    }
}

/// Recognises `input`'s format from `head`, its first bytes (after a byte-order mark).
fn detect(input: &Input, head: &[u8]) -> Result<Format> {
    let head = io::strip_bom(head);
    if super::inspect::is_zip(head) || super::inspect::is_json_log(head) {
        return Ok(Format::Inspect);
    }
    let by_record = super::first_record(head).and_then(|r| super::detect(&r));
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
            super::DETECTION
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_get_their_kind_and_skipped_records_add_up() {
        let mut rejects = vec![Reject {
            file: "a.jsonl".into(),
            line: 1,
            field: None,
            reason: "not valid JSON: x".into(),
            kind: None,
            text: "x".into(),
        }];
        let mut notes = Notes::default();
        notes.skipped.insert("not_a_rollout", 2);
        let counted = not_rows(&mut rejects, &notes);
        assert_eq!(rejects[0].kind, Some("not_json"));
        assert_eq!(counted.get("not_json"), Some(&1));
        assert_eq!(counted.get("not_a_rollout"), Some(&2));
    }
}
