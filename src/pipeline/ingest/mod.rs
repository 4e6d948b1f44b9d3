//! Foreign traces → rows: OpenAI chat trajectories, τ-bench results, OpenTelemetry GenAI spans,
//! and the reference's own rows.
//!
//! Each format maps a record to a row in the reference's format, which is then read exactly as
//! `convert` reads rows ([`crate::pipeline::row::decode`]): what has no column lands in `extra`,
//! so nothing is lost. JSON Lines stream in parallel chunks; a JSON array file is read whole; an
//! OTLP file is read whole too, since one conversation's spans may be anywhere in it.

pub mod chat;
mod files;
pub mod inspect;
pub mod otel;
mod wire;

use std::io::{Read, Seek};

use serde_json::Value;

use super::io::{self, Accept};
use super::row::{self, FieldError, Record};
use crate::error::{Error, Result};

pub use chat::ChatFields;
pub use files::{Destination, Ingested, ingest_inputs};
pub use otel::OtelFields;

/// A trace format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Pick from the first record, and say which.
    Auto,
    /// The reference's rows (`simulate()` checkpoints, saved runs): what `convert` reads.
    Whileai,
    /// One record per rollout holding an OpenAI `messages` list.
    OpenaiChat,
    /// τ-bench result files (`task_id`, `trial`, `reward`, `traj`, `info`).
    TauBench,
    /// OpenTelemetry GenAI spans as OTLP JSON.
    Otel,
    /// `inspect_ai` evaluation logs (`.eval`, `.json`, or samples one per line).
    Inspect,
}

/// How records map to rows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Options {
    /// The format, or auto.
    pub format: Format,
    /// Field overrides for chat records (`None` keeps the format's defaults).
    pub task_field: Option<String>,
    /// Where the repeat index is.
    pub trial_field: Option<String>,
    /// Where the reward is.
    pub reward_field: Option<String>,
    /// Where the message list is.
    pub messages_field: Option<String>,
    /// Fields moved under `privileged` (added to the format's own).
    pub privileged: Vec<String>,
    /// `OTel` attributes.
    pub otel: OtelFields,
    /// `inspect_ai`: the scorer whose value is the reward.
    pub score: Option<String>,
}

impl Options {
    /// The chat fields for `format`, with the overrides applied.
    pub fn chat_fields(&self, format: Format) -> ChatFields {
        let mut f = if format == Format::TauBench {
            ChatFields::tau_bench()
        } else {
            ChatFields::openai()
        };
        if let Some(v) = &self.task_field {
            f.task.clone_from(v);
        }
        if let Some(v) = &self.trial_field {
            f.trial.clone_from(v);
        }
        if let Some(v) = &self.reward_field {
            f.reward.clone_from(v);
        }
        if let Some(v) = &self.messages_field {
            f.messages.clone_from(v);
        }
        f.privileged.extend(self.privileged.iter().cloned());
        f
    }
}

/// The format one record looks like, if any. A record with a `messages` list and neither
/// `steps` nor `final_text` is an OpenAI chat record, whatever else it carries: the reference's
/// OpenAI export (and `wai export --format openai` joined to its `.meta.jsonl`) keep the row's
/// `prompt`, `scenario_id` and `schema_version` beside the messages.
pub fn detect(record: &Value) -> Option<Format> {
    let obj = record.as_object()?;
    if obj.contains_key("resourceSpans")
        || obj.contains_key("resourceLogs")
        || obj.contains_key("scopeSpans")
        || obj.get("spans").is_some_and(Value::is_array)
        || (obj.contains_key("traceId") && obj.contains_key("spanId"))
    {
        return Some(Format::Otel);
    }
    if obj.get("traj").is_some_and(Value::is_array) {
        return Some(Format::TauBench);
    }
    if inspect::is_sample(obj) || (obj.contains_key("eval") && obj.contains_key("samples")) {
        return Some(Format::Inspect);
    }
    let has_turns = obj.contains_key("steps") || obj.contains_key("final_text");
    if obj.get("messages").is_some_and(Value::is_array) && !has_turns {
        return Some(Format::OpenaiChat);
    }
    let rowish = has_turns
        || ["schema_version", "scenario_id", "prompt"]
            .iter()
            .any(|k| obj.contains_key(*k));
    rowish.then_some(Format::Whileai)
}

/// What auto-detection looks for, for the error when nothing matches.
pub const DETECTION: &str = "OTLP spans or logs (`resourceSpans`, `resourceLogs`, `spans`, or `traceId` + `spanId`), a τ-bench result (`traj`), \
an inspect_ai log (a zip archive, or an object with `eval` and `samples`) or sample (`epoch`, `input`, `messages`), \
an OpenAI chat record (`messages` without `steps`/`final_text`), or a row (`prompt`, `steps`, `final_text`, `scenario_id` or `schema_version`)";

/// The first JSON record of a file's first bytes (after a byte-order mark): the first line, or
/// the first element of an array.
pub fn first_record(head: &[u8]) -> Option<Value> {
    first_parsed(head)?.ok()
}

/// Whether `head` ends inside its first record: it holds the start of one and no error but the
/// end of the text stops it, so more of the file would finish it.
pub fn first_record_cut(head: &[u8]) -> bool {
    matches!(first_parsed(head), Some(Err(e)) if e.is_eof())
}

fn first_parsed(head: &[u8]) -> Option<serde_json::Result<Value>> {
    let head = io::strip_bom(head);
    let start = head.iter().position(|b| !b.is_ascii_whitespace())?;
    let body = if head[start] == b'[' {
        &head[start + 1..]
    } else {
        &head[start..]
    };
    serde_json::Deserializer::from_slice(body)
        .into_iter::<Value>()
        .next()
}

/// Decodes a chat or τ-bench record into a row.
fn chat_record(bytes: &[u8], fields: &ChatFields) -> std::result::Result<Record, FieldError> {
    if let Some(record) = wire::record(bytes, fields) {
        return record;
    }
    let value = io::parse_json(bytes)?;
    row::decode(chat::to_row(value, fields)?)
}

/// The line a record starts on, given the offset where the reader stood before it (white space
/// before the record is skipped).
fn line_at(text: &[u8], offset: usize) -> u64 {
    let offset = offset.min(text.len());
    let start = offset
        + text[offset..]
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
    1 + memchr::memchr_iter(b'\n', &text[..start]).count() as u64
}

/// What a read set aside or marked beyond rows and rejects, for the report's warnings.
#[derive(Debug, Clone, Default)]
pub struct Notes {
    /// `OTel` conversations that carried no message content (rows marked `no_content`).
    pub no_content: u64,
    /// `OTel` traces with no GenAI span (not rollouts: no row).
    pub not_genai: u64,
    /// Records that are no rollout and no error (they never stop a run), by kind:
    /// `not_genai` (a trace without a GenAI span), `no_spans` (an OTLP document holding no
    /// span or log record).
    pub skipped: std::collections::BTreeMap<&'static str, u64>,
    /// When the run keeps rejects: those records, with their kind, for the rejects file.
    pub kept: Option<Vec<io::Reject>>,
}

impl Notes {
    /// Counts a record that gives no row, and keeps it when the run keeps rejects.
    fn skip(
        &mut self,
        kind: &'static str,
        file: &str,
        line: u64,
        reason: String,
        text: impl FnOnce() -> String,
    ) {
        *self.skipped.entry(kind).or_default() += 1;
        if let Some(kept) = &mut self.kept {
            kept.push(io::Reject {
                file: file.to_owned(),
                line,
                field: None,
                reason,
                kind: Some(kind),
                text: text(),
            });
        }
    }
}

/// The kind of a record set aside as bad (for the report's count by reason).
pub fn reject_kind(r: &io::Reject) -> &'static str {
    if r.reason.starts_with("not valid JSON") || r.reason.contains("not valid JSON") {
        "not_json"
    } else if r.reason.contains("duplicate rollout_id") {
        "duplicate_rollout_id"
    } else if r.field.is_some() {
        "bad_field"
    } else {
        "bad_record"
    }
}

/// Reads one input of a known `format` into `accept`.
pub fn read(
    name: &str,
    reader: impl Read + Send,
    format: Format,
    opts: &Options,
    accept: &mut Accept<'_, '_>,
    progress: &dyn Fn(u64),
    notes: &mut Notes,
) -> Result<()> {
    match format {
        Format::Whileai | Format::Auto => {
            io::read_records(name, reader, &io::decode_line, accept, progress)
        }
        Format::OpenaiChat | Format::TauBench => {
            let fields = opts.chat_fields(format);
            io::read_records(
                name,
                reader,
                &|b: &[u8]| chat_record(b, &fields),
                accept,
                progress,
            )
        }
        Format::Inspect => read_inspect(name, reader, opts, accept, progress),
        Format::Otel => {
            let mut read = OtelSpans::new(notes.kept.is_some());
            read.read(name, reader, progress)?;
            read_otel(name, read, opts, accept, notes)
        }
    }
}

/// The spans of each line of `text` when every non-blank line is one JSON value (the
/// collector's file exporter writes one batch a line), parsed in parallel, with the lines'
/// documents that hold no span; `None` when some line is not (a document over many lines, or
/// broken JSON), for the sequential reading.
/// One line of OTLP text read: its number, its spans, and the documents in it that hold none.
type OtelLine = (u64, Vec<otel::Span>, Vec<String>);

fn otel_lines(text: &[u8], keep: bool) -> Option<Vec<OtelLine>> {
    use rayon::prelude::*;
    let mut lines = Vec::new();
    let mut start = 0usize;
    for (n, end) in memchr::memchr_iter(b'\n', text)
        .chain(std::iter::once(text.len()))
        .enumerate()
    {
        if start <= end && !text[start..end].trim_ascii().is_empty() {
            lines.push((n as u64 + 1, start, end));
        }
        start = end + 1;
    }
    lines
        .into_par_iter()
        .map(|(line, start, end)| {
            let text = &text[start..end];
            let mut order = 0usize;
            if let Some(spans) = otel::line_spans(text, line, &mut order) {
                return Some((line, spans, Vec::new()));
            }
            let record: Value = serde_json::from_slice(text).ok()?;
            let items = match record {
                Value::Array(items) => items,
                other => vec![other],
            };
            let (mut spans, mut empty) = (Vec::new(), Vec::new());
            for item in items {
                match otel::spans(item, line, &mut order) {
                    Ok(found) => spans.extend(found),
                    Err(item) => empty.push(if keep {
                        item.to_string()
                    } else {
                        String::new()
                    }),
                }
            }
            Some((line, spans, empty))
        })
        .collect()
}

/// OTLP JSON read a piece at a time, every input of a run numbered as if joined (a newline after
/// each): the spans and the documents that hold none, the text let go as its spans are read.
/// While every line is one JSON value (the collector's file exporter writes one batch a line),
/// pieces of whole lines are parsed a line at a time in parallel; from the first piece with a
/// line that is not (a document over many lines, or broken JSON), the rest of the text is kept
/// and read at the end as a stream of values, as a file of such documents must be.
pub struct OtelSpans {
    spans: Vec<otel::Span>,
    /// Documents that hold no span or log record: their line and (when kept) their text.
    empty: Vec<(u64, String)>,
    /// Whether the documents' texts are kept (for the rejects file).
    keep: bool,
    /// Lines of the joined text before the next piece.
    lines: u64,
    /// From the first piece not read a line at a time: the line it starts on, and the text.
    rest: Option<(u64, Vec<u8>)>,
    /// Bytes of a piece.
    piece: usize,
}

/// A record that could not be framed, set aside with the rest of its file: its line, its text
/// and why.
type Broken = (u64, Vec<u8>, String);

/// Bytes of OTLP JSON parsed a line at a time per piece.
const OTEL_PIECE: usize = 16 << 20;

impl OtelSpans {
    /// Starts a read; `keep` keeps the text of documents that hold no span.
    pub fn new(keep: bool) -> Self {
        Self {
            spans: Vec::new(),
            empty: Vec::new(),
            keep,
            lines: 0,
            rest: None,
            piece: OTEL_PIECE,
        }
    }

    /// Reads one input (named `name` in errors), after those read before.
    ///
    /// # Errors
    /// The input cannot be read.
    pub fn read(
        &mut self,
        name: &str,
        mut reader: impl Read,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        let io_err = |e| Error::io(name, e);
        let mut buf: Vec<u8> = Vec::new();
        let mut first = true;
        loop {
            if let Some((_, rest)) = &mut self.rest {
                let start = rest.len();
                rest.extend_from_slice(&buf);
                reader.read_to_end(rest).map_err(io_err)?;
                if first && rest[start..].starts_with(io::BOM) {
                    rest.drain(start..start + io::BOM.len());
                }
                progress((rest.len() - start) as u64);
                rest.push(b'\n');
                return Ok(());
            }
            // Fill to a piece's size, then cut after the last newline (a line longer than a
            // piece grows it).
            let mut eof = false;
            let target = (buf.len() * 2).max(self.piece).max(io::BOM.len());
            while buf.len() < target {
                let n = (&mut reader)
                    .take((target - buf.len()) as u64)
                    .read_to_end(&mut buf)
                    .map_err(io_err)?;
                if n == 0 {
                    eof = true;
                    break;
                }
            }
            if first && buf.starts_with(io::BOM) {
                buf.drain(..io::BOM.len());
            }
            let cut = if eof {
                buf.len()
            } else if let Some(i) = memchr::memrchr(b'\n', &buf) {
                i + 1
            } else {
                first = false;
                continue;
            };
            let next = buf.split_off(cut);
            progress(buf.len() as u64);
            let piece = std::mem::replace(&mut buf, next);
            let Some(lines) = otel_lines(&piece, self.keep) else {
                // This piece and all that follows is read as a stream of values.
                self.rest = Some((self.lines, piece));
                first = false;
                continue;
            };
            let base = self.lines;
            for (line, found, empty) in lines {
                let line = base + line;
                self.empty.extend(empty.into_iter().map(|t| (line, t)));
                self.spans.extend(found.into_iter().map(|mut s| {
                    s.line += base;
                    s
                }));
            }
            self.lines += memchr::memchr_iter(b'\n', &piece).count() as u64;
            first = false;
            if eof {
                // The newline the joined text has after each input.
                self.lines += 1;
                return Ok(());
            }
        }
    }
}

impl OtelSpans {
    /// The spans, the documents that hold none (line, text), and a record that could not be
    /// framed (line, text, why), once the rest, if any, is read as a stream of values.
    fn finish(mut self) -> (Vec<otel::Span>, Vec<(u64, String)>, Option<Broken>) {
        let mut broken = None;
        if let Some((base, text)) = self.rest.take() {
            let mut order = 0usize;
            let mut stream = serde_json::Deserializer::from_slice(&text).into_iter::<Value>();
            loop {
                let offset = stream.byte_offset();
                let record = match stream.next() {
                    None => break,
                    Some(Ok(Value::Array(items))) => items,
                    Some(Ok(record)) => vec![record],
                    Some(Err(e)) => {
                        // The rest cannot be framed: it is set aside as one bad record.
                        broken = Some((
                            base + line_at(&text, offset),
                            text[offset..].trim_ascii().to_vec(),
                            format!("not valid JSON: {e}; the rest of the file is not read"),
                        ));
                        break;
                    }
                };
                let line = base + line_at(&text, offset);
                for item in record {
                    match otel::spans(item, line, &mut order) {
                        Ok(found) => self.spans.extend(found),
                        Err(item) => self.empty.push((
                            line,
                            if self.keep {
                                item.to_string()
                            } else {
                                String::new()
                            },
                        )),
                    }
                }
            }
        }
        (self.spans, self.empty, broken)
    }
}

/// Makes the rows of OTLP JSON read (every OTLP input of a run, together): spans and log records
/// grouped into conversations, one row each, made in parallel a chunk of conversations at a time
/// and taken in order.
pub fn read_otel(
    name: &str,
    read: OtelSpans,
    opts: &Options,
    accept: &mut Accept<'_, '_>,
    notes: &mut Notes,
) -> Result<()> {
    use rayon::prelude::*;
    const NO_SPANS: &str = "an OTLP document holding no span or log record (`resourceSpans`, `resourceLogs`, `spans`, or a span)";
    let (mut spans, empty, broken) = read.finish();
    for (line, item) in empty {
        notes.skip("no_spans", name, line, NO_SPANS.into(), || item);
    }
    if let Some((line, text, message)) = broken {
        let err = FieldError {
            field: None,
            message,
        };
        accept.take(name, line, &text, Err(err))?;
    }
    otel::renumber(&mut spans);
    let mut convs = otel::group(spans).into_iter();
    loop {
        let chunk: Vec<otel::Conversation> = convs.by_ref().take(4096).collect();
        if chunk.is_empty() {
            break;
        }
        let made: Vec<_> = chunk
            .par_iter()
            .map(|conv| {
                let line = conv.spans.first().map_or(1, |s| s.line);
                let row = otel::to_row(conv, &opts.otel)?;
                let no_content = row.get("no_content").is_some();
                let first_span = conv
                    .spans
                    .first()
                    .and_then(|s| s.id.clone())
                    .unwrap_or_default();
                let result = row::decode_value(&row).map_err(|e| FieldError {
                    field: e.field,
                    message: format!(
                        "conversation `{}` (first span `{first_span}`): {}",
                        conv.id, e.message
                    ),
                });
                Some((line, no_content, row, result))
            })
            .collect();
        let mut rows = Vec::with_capacity(chunk.len());
        for (conv, made) in chunk.iter().zip(made) {
            let Some((line, no_content, row, result)) = made else {
                notes.not_genai += 1;
                notes.skip(
                    "not_genai",
                    name,
                    conv.spans.first().map_or(1, |s| s.line),
                    format!(
                        "trace `{}`: no span speaks the GenAI conventions (`gen_ai.*`), so it is no rollout",
                        conv.id
                    ),
                    || otel::summary(conv).to_string(),
                );
                continue;
            };
            if no_content {
                notes.no_content += 1;
            }
            // The row's text is made only for the rejects file.
            let text = || serde_json::to_vec(&row).unwrap_or_default();
            accept.take_made(name, line, &text, result)?;
            rows.push(row);
        }
        // Spans and rows were made on the workers: they are let go there too, not one by one
        // here.
        rayon::join(
            || chunk.into_par_iter().for_each(drop),
            || rows.into_par_iter().for_each(drop),
        );
    }
    Ok(())
}

/// Reads an `inspect_ai` `.eval` archive from `file`, member by member: a batch of 256 samples in
/// memory at a time, decoded in parallel.
pub fn read_eval(
    name: &str,
    file: impl Read + Seek,
    opts: &Options,
    accept: &mut Accept<'_, '_>,
    progress: &dyn Fn(u64),
) -> Result<()> {
    use rayon::prelude::*;
    // Members are read in order, a batch at a time, and decoded in parallel: memory holds one
    // batch of samples.
    const BATCH: usize = 256;
    let score = opts.score.as_deref();
    let bad = |message: String| Error::BadRow {
        file: name.to_owned(),
        line: 1,
        field: None,
        message,
    };
    let mut archive = inspect::Archive::open(file)
        .map_err(|e| bad(format!("not a readable inspect `.eval` archive: {e}")))?;
    let mut batch = Vec::with_capacity(BATCH);
    let mut n = 0;
    while n < archive.len() {
        batch.clear();
        while batch.len() < BATCH && n < archive.len() {
            batch.push(archive.sample(n).map_err(bad)?);
            n += 1;
        }
        let info = &archive.info;
        let decoded: Vec<_> = batch
            .par_iter()
            .map(|(_, sample)| inspect::decode(sample, info, score))
            .collect();
        for ((member, sample), result) in batch.iter().zip(decoded) {
            progress(sample.len() as u64);
            accept.take(&format!("{name}:{member}"), 1, sample, result)?;
        }
    }
    Ok(())
}

/// Reads an `inspect_ai` log: a `.eval` archive member by member (in memory, when it comes as a
/// stream; [`read_eval`] reads one from its file), a `.json` log whole, or
/// samples one per line.
fn read_inspect(
    name: &str,
    mut reader: impl Read + Send,
    opts: &Options,
    accept: &mut Accept<'_, '_>,
    progress: &dyn Fn(u64),
) -> Result<()> {
    let score = opts.score.as_deref();
    let mut text = Vec::new();
    reader
        .read_to_end(&mut text)
        .map_err(|e| Error::io(name, e))?;
    if text.starts_with(io::BOM) {
        text.drain(..io::BOM.len());
    }
    let bad = |message: String| Error::BadRow {
        file: name.to_owned(),
        line: 1,
        field: None,
        message,
    };
    if inspect::is_zip(&text) {
        return read_eval(name, std::io::Cursor::new(text), opts, accept, progress);
    }
    progress(text.len() as u64);
    if inspect::is_json_log(&text) {
        let log = io::parse_json(&text).map_err(|e| bad(e.message))?;
        let info = log
            .get("eval")
            .map(inspect::EvalInfo::of)
            .unwrap_or_default();
        let samples = match log {
            Value::Object(mut o) => match o.shift_remove("samples") {
                Some(Value::Array(list)) => list,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        for (i, sample) in samples.into_iter().enumerate() {
            let bytes = serde_json::to_vec(&sample).unwrap_or_default();
            let result = inspect::to_row(sample, &info, score).and_then(row::decode);
            accept.take(&format!("{name}:samples[{i}]"), 1, &bytes, result)?;
        }
        return Ok(());
    }
    let info = inspect::EvalInfo::default();
    io::read_records(
        name,
        std::io::Cursor::new(text),
        &|b: &[u8]| inspect::decode(b, &info, score),
        accept,
        &|_| {},
    )
}

#[cfg(test)]
mod otel_pieces {
    use super::*;

    /// What reading `inputs` in pieces of `piece` bytes gives, spans by their debug text.
    fn read(inputs: &[&[u8]], piece: usize) -> (String, Vec<(u64, String)>, Option<Broken>) {
        let mut r = OtelSpans::new(true);
        r.piece = piece;
        for text in inputs {
            r.read("in", *text, &|_| {}).unwrap();
        }
        let (mut spans, empty, broken) = r.finish();
        // Numbered in reading order, as the reader numbers them before grouping.
        otel::renumber(&mut spans);
        (format!("{spans:?}"), empty, broken)
    }

    #[test]
    fn pieces_read_as_the_whole_text_does() {
        let fixture = |name: &str| {
            std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/ingest/otel")
                    .join(name),
            )
            .unwrap()
        };
        let traces = fixture("openai_v2_event_only.traces.jsonl");
        let logs = fixture("openai_v2_event_only.logs.jsonl");
        let spans = fixture("openai_v2_span_only.traces.jsonl");
        let mut bom = io::BOM.to_vec();
        bom.extend_from_slice(&spans);
        let empty_doc = b"{\"resourceSpans\": []}\n\n".to_vec();
        let pretty =
            b"{\n  \"spans\": [{\"traceId\": \"t\", \"spanId\": \"s\",\n \"name\": \"chat\"}]\n}\n"
                .to_vec();
        let mut broken = spans.clone();
        broken.extend_from_slice(b"{\"resourceSpans\": [oops\n");
        broken.extend_from_slice(&logs);
        let runs: [Vec<&[u8]>; 5] = [
            vec![&traces, &logs],
            vec![&bom, &empty_doc, &traces],
            vec![&traces, &pretty, &logs],
            vec![&broken, &traces],
            vec![&logs, &spans[..spans.len() - 1], &traces],
        ];
        for inputs in runs {
            // As the inputs were read before: joined (each without its byte-order mark, a
            // newline after it), then parsed a line at a time or, failing that, as a stream.
            let mut joined = Vec::new();
            for text in &inputs {
                joined.extend_from_slice(io::strip_bom(text));
                joined.push(b'\n');
            }
            let whole = read(&[&joined], usize::MAX / 4);
            for piece in [1, 64, 5000, usize::MAX / 4] {
                assert_eq!(read(&inputs, piece), whole, "pieces of {piece} bytes");
            }
        }
        // The broken line is set aside with the rest, the other input's spans too.
        let (_, _, set_aside) = read(&[&broken, &traces], 64);
        let (line, text, why) = set_aside.unwrap();
        assert_eq!(line, 2);
        // The rest of the file and the inputs after it, as when the inputs were joined.
        assert!(text.starts_with(b"{\"resourceSpans\": [oops\n"), "{why}");
        assert!(text.ends_with(traces.trim_ascii_end()), "{why}");
        assert!(why.contains("the rest of the file is not read"), "{why}");
    }
}
