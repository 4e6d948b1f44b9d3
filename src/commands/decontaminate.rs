//! `wai decontaminate`: training rows that overlap the eval set are dropped; the rest are written.

use std::time::Duration;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch, StringArray};
use serde_json::Value;

use super::{Context, Outcome};
use crate::cli::DecontaminateArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::OnBadRow;
use crate::pipeline::read::Reader;
use crate::pipeline::row::prompt_task_id;
use crate::pipeline::source;
use crate::schema::col;
use crate::stages::decontaminate::{
    self, EvalIndex, Hit, Options, Row, Rule, Tally, best_other, unit,
};
use crate::stages::embed::{self, CommandEmbedder, EndpointEmbedder, Spec};

/// Text columns a row can be compared on.
const TEXT_FIELDS: [&str; 3] = [col::PROMPT, col::FINAL_TEXT, col::REASON];

fn text_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    Ok(batch
        .column_by_name(name)
        .ok_or_else(|| Error::missing_column("decontaminate", name, &batch.schema()))?
        .as_string::<i32>())
}

fn cell(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

/// The task id a row recorded: its `task_id`, unless that was derived from the prompt.
fn recorded<'a>(task: Option<&'a str>, prompt: Option<&str>) -> Option<&'a str> {
    let t = task.filter(|t| !t.is_empty())?;
    let derived =
        t.len() == 17 && t.starts_with("task_") && prompt.is_some_and(|p| prompt_task_id(p) == t);
    (!derived).then_some(t)
}

/// The top-level `answer` and `reference` of an eval row (kept in `extra`), when they are text or
/// numbers.
fn eval_extras(extra: Option<&str>) -> Vec<String> {
    let Some(Ok(Value::Object(obj))) = extra.map(serde_json::from_str::<Value>) else {
        return Vec::new();
    };
    ["answer", "reference"]
        .iter()
        .filter_map(|k| match obj.get(*k)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            // A zero is falsy to the reference, so it is no text.
            Value::Number(n) if n.as_f64() != Some(0.0) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

enum Embedder {
    Column(String),
    Command(CommandEmbedder),
    Endpoint(EndpointEmbedder),
}

impl Embedder {
    /// Unit vectors of `texts` (not for `column:`, which reads rows).
    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        match self {
            Self::Column(_) => Err(Error::Internal("a column embedder embeds no text".into())),
            Self::Command(e) => e.embed(texts),
            Self::Endpoint(e) => e.embed(texts),
        }
    }
}

/// The kept rows of `batch` as zero-copy slices, one per run of kept rows, in order: the
/// writer encodes them where a filter would first copy every column of the batch.
fn kept_runs(batch: &RecordBatch, keep: &BooleanArray) -> Vec<RecordBatch> {
    let mut runs = Vec::new();
    let mut start = None;
    for (i, k) in keep.values().iter().enumerate() {
        match (k, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                runs.push(batch.slice(s, i - s));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        runs.push(batch.slice(s, batch.num_rows() - s));
    }
    runs
}

/// Runs `wai decontaminate`.
#[allow(clippy::too_many_lines)]
pub fn run(ctx: &Context, args: &DecontaminateArgs) -> Result<Outcome> {
    if args.n == 0 {
        return Err(Error::Usage("--n must be at least 1".into()));
    }
    if args.overlap.is_nan() {
        return Err(Error::Usage("--overlap must be a number".into()));
    }
    if !(0.0..=1.0).contains(&args.similarity) {
        return Err(Error::Usage(format!(
            "--similarity must be in [0, 1], not {}",
            args.similarity
        )));
    }
    for f in &args.fields {
        if !TEXT_FIELDS.contains(&f.as_str()) {
            return Err(Error::Usage(format!(
                "--fields: `{f}` is not a text field a row is compared on ({})",
                TEXT_FIELDS.join(", ")
            )));
        }
    }
    let format =
        crate::pipeline::rows_out::output_format(&args.output.out, args.output.to.map(Into::into))?;
    let spec = args.embedder.as_deref().map(Spec::parse).transpose()?;
    let opts = Options {
        fields: args.fields.clone(),
        n: args.n,
        // As the reference: a threshold over 1 reads as 1 (fully covered), under 0 as 0.
        overlap: args.overlap.clamp(0.0, 1.0),
        similarity: spec.as_ref().map(|_| args.similarity),
    };
    let timeout = Duration::from_secs_f64(args.timeout.max(0.001));
    let mut embedder = match &spec {
        None => None,
        Some(Spec::Column(name)) => Some(Embedder::Column(name.clone())),
        Some(Spec::Command(command)) => {
            Some(Embedder::Command(CommandEmbedder::start(command, timeout)?))
        }
        Some(Spec::OpenAi { model, url }) => Some(Embedder::Endpoint(EndpointEmbedder::new(
            model,
            url,
            timeout,
            ctx.runtime.handle().clone(),
        )?)),
    };

    // The eval side, indexed once.
    let eval_inputs = ctx.runtime.block_on(source::resolve(&args.against))?;
    let mut index = EvalIndex::new(args.n);
    let mut eval_vectors: Vec<Option<Vec<f32>>> = Vec::new();
    {
        let mut reader = Reader::new(
            ctx.runtime.handle().clone(),
            OnBadRow::Fail,
            Box::new(|_| {}),
        );
        for input in &eval_inputs {
            reader.read(input, &mut |batch| {
                let (task, prompt, extra) = (
                    text_column(&batch, col::TASK_ID)?,
                    text_column(&batch, col::PROMPT)?,
                    text_column(&batch, col::EXTRA)?,
                );
                for i in 0..batch.num_rows() {
                    let p = cell(prompt, i);
                    let new = index.add(
                        recorded(cell(task, i), p),
                        p.unwrap_or(""),
                        &eval_extras(cell(extra, i)),
                    );
                    if new {
                        eval_vectors.push(match &embedder {
                            Some(Embedder::Column(name)) => {
                                embed::vector_of(cell(extra, i), name).map(unit)
                            }
                            _ => None,
                        });
                    }
                }
                Ok(())
            })?;
        }
    }
    // Eval prompt vectors for the semantic rule, and the calibration.
    let eval_matrix: Vec<Vec<f32>> = match &mut embedder {
        None => Vec::new(),
        Some(Embedder::Column(name)) => {
            let missing = eval_vectors.iter().filter(|v| v.is_none()).count();
            if missing > 0 {
                return Err(Error::Usage(format!(
                    "--embedder column:{name}: {missing} of {} eval prompts have no vector in extra.{name}",
                    eval_vectors.len()
                )));
            }
            eval_vectors.into_iter().flatten().collect()
        }
        Some(e) => {
            let texts: Vec<String> = index.prompts.iter().map(|p| p.0.clone()).collect();
            let mut out = Vec::with_capacity(texts.len());
            for chunk in texts.chunks(256) {
                out.extend(e.embed(chunk)?);
            }
            out
        }
    };
    let calibration = if embedder.is_some() {
        decontaminate::calibrate(&eval_matrix, &index.prompts)
    } else {
        None
    };

    // The training side, streamed.
    let inputs = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    crate::pipeline::output::not_an_input(&args.output.out, &eval_inputs)?;
    crate::pipeline::output::rows_apart(&args.output.out, args.output.rejects.as_deref(), &inputs)?;
    let mut tally = Tally::default();
    let mut no_vector = 0_u64;
    // The dropped list streams to a temporary file beside its path, renamed when complete.
    let mut dropped = match &args.dropped {
        Some(path) => {
            let file = crate::pipeline::io::AtomicFile::create(path)?;
            let writer = std::io::BufWriter::new(file.handle()?);
            Some((path.clone(), file, writer))
        }
        None => None,
    };
    let counts = crate::pipeline::rows_out::stream_rows(
        ctx,
        &inputs,
        &args.output.out,
        args.output.rejects.as_deref(),
        format,
        "decontaminating",
        &mut |batch| {
            let task = text_column(&batch, col::TASK_ID)?;
            let prompt = text_column(&batch, col::PROMPT)?;
            let fields: Vec<&StringArray> = opts
                .fields
                .iter()
                .map(|f| text_column(&batch, f))
                .collect::<Result<_>>()?;
            let rows: Vec<Row<'_>> = (0..batch.num_rows())
                .map(|i| Row {
                    task: recorded(cell(task, i), cell(prompt, i)),
                    texts: fields.iter().map(|a| cell(a, i).unwrap_or("")).collect(),
                })
                .collect();
            let start = tally.n;
            let mut hits = decontaminate::check_batch(&index, &opts, &rows, start);
            tally.n += batch.num_rows() as u64;
            tally.with_task += rows.iter().filter(|r| r.task.is_some()).count() as u64;
            if let (Some(e), false) = (&mut embedder, eval_matrix.is_empty()) {
                no_vector += semantic(
                    e,
                    &batch,
                    &rows,
                    &opts,
                    &index,
                    &eval_matrix,
                    &mut hits,
                    start,
                )?;
            }
            let keep: BooleanArray = hits.iter().map(|h| Some(h.is_none())).collect();
            if let Some((path, _, writer)) = &mut dropped {
                use std::io::Write;
                let rollout = text_column(&batch, col::ROLLOUT_ID)?;
                for (i, h) in hits.iter().enumerate() {
                    if let Some(h) = h {
                        let mut line = serde_json::to_value(h)
                            .map_err(|e| Error::Internal(format!("a hit as JSON: {e}")))?;
                        if let Value::Object(o) = &mut line {
                            o.insert(
                                "rule".into(),
                                serde_json::to_value(h.rule).unwrap_or(Value::Null),
                            );
                            o.insert(
                                "rollout_id".into(),
                                cell(rollout, i)
                                    .map_or(Value::Null, |r| Value::String(r.to_owned())),
                            );
                            o.insert(
                                "task_id".into(),
                                cell(task, i).map_or(Value::Null, |t| Value::String(t.to_owned())),
                            );
                        }
                        writeln!(writer, "{line}").map_err(|e| Error::io(path.as_path(), e))?;
                    }
                }
            }
            for h in hits.into_iter().flatten() {
                tally.add(h);
            }
            Ok(kept_runs(&batch, &keep))
        },
    )?;
    if let Some((path, file, writer)) = dropped {
        writer
            .into_inner()
            .map_err(|e| Error::io(path.as_path(), e.into_error()))?;
        file.commit()?;
    }
    let n_train = tally.n;
    let mut report = decontaminate::report(&index, &opts, tally, embedder.is_some(), calibration);
    if no_vector > 0 {
        let name = match &spec {
            Some(Spec::Column(name)) => name.as_str(),
            _ => "",
        };
        let why = format!(
            "{no_vector} of {n_train} training rows have no vector in extra.{name}, so the semantic rule did not see them"
        );
        if no_vector == n_train {
            report
                .rules_skipped
                .insert("semantic".to_owned(), why.clone());
        }
        report.notes.push(format!(
            "{why}: a zero there is not a clearance for those rows."
        ));
    }
    let mut text = report.to_string().trim_end().to_owned();
    text.push_str(&format!(
        "\nwrote {} rows to `{}`",
        counts.rows - report.n_contaminated,
        args.output.out.display()
    ));
    Ok(Outcome {
        text,
        json: super::document("decontaminate", &report),
        status: ExitStatus::Success,
    })
}

/// Flags the rows of `batch` no lexical rule flagged whose embedding (of a field, in order; or
/// the row's own vector) is at least `similarity` from an eval prompt of another task. Returns
/// how many open rows had no vector (`column:` only).
#[allow(clippy::too_many_arguments)]
fn semantic(
    embedder: &mut Embedder,
    batch: &RecordBatch,
    rows: &[Row<'_>],
    opts: &Options,
    index: &EvalIndex,
    eval: &[Vec<f32>],
    hits: &mut [Option<Hit>],
    start: u64,
) -> Result<u64> {
    let threshold = opts.similarity.unwrap_or(decontaminate::SIMILARITY);
    let mut missing = 0;
    let open: Vec<usize> = (0..rows.len()).filter(|i| hits[*i].is_none()).collect();
    // (row, field name, vector) candidates, in row then field order.
    let mut candidates: Vec<(usize, String, Vec<f32>)> = Vec::new();
    match embedder {
        Embedder::Column(name) => {
            let extra = text_column(batch, col::EXTRA)?;
            for &i in &open {
                match embed::vector_of(cell(extra, i), name) {
                    Some(v) => candidates.push((i, format!("extra.{name}"), unit(v))),
                    None => missing += 1,
                }
            }
        }
        Embedder::Command(_) | Embedder::Endpoint(_) => {
            for (f, field) in opts.fields.iter().enumerate() {
                let (which, texts): (Vec<usize>, Vec<String>) = open
                    .iter()
                    .filter(|&&i| !rows[i].texts[f].trim().is_empty())
                    .map(|&i| (i, rows[i].texts[f].to_owned()))
                    .unzip();
                let mut vectors = Vec::with_capacity(texts.len());
                for chunk in texts.chunks(256) {
                    vectors.extend(embedder.embed(chunk)?);
                }
                for (i, v) in which.into_iter().zip(vectors) {
                    candidates.push((i, field.clone(), v));
                }
            }
            candidates.sort_by_key(|c| c.0);
        }
    }
    for (i, field, v) in candidates {
        if hits[i].is_some() {
            continue;
        }
        if let Some((s, p)) = best_other(&v, rows[i].task, eval, &index.prompts) {
            if s >= threshold {
                hits[i] = Some(Hit {
                    index: start + i as u64,
                    field,
                    matched: "semantic".into(),
                    coverage: None,
                    similarity: Some(crate::stats::round_places(s.min(1.0), 4)),
                    task: None,
                    eval_prompt: Some(
                        index.prompts[p]
                            .0
                            .chars()
                            .take(decontaminate::MATCH_CHARS)
                            .collect(),
                    ),
                    eval_text: u32::try_from(p).ok(),
                    rule: Rule::Semantic,
                });
            }
        }
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int32Array, RecordBatch};
    use datafusion::arrow::compute::{concat_batches, filter_record_batch};

    use super::{BooleanArray, kept_runs};

    #[test]
    fn kept_runs_are_the_filtered_rows_in_order() {
        let values: Vec<i32> = (0..50).collect();
        let batch = RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int32Array::from(values)) as datafusion::arrow::array::ArrayRef,
        )])
        .unwrap();
        for pattern in [
            vec![true; 50],
            vec![false; 50],
            (0..50).map(|i| i % 7 != 0).collect(),
            (0..50).map(|i| i % 2 == 0).collect(),
            (0..50).map(|i| i < 3 || i > 45).collect(),
            (0..50)
                .map(|i| (10..20).contains(&i))
                .collect::<Vec<bool>>(),
        ] {
            let keep = BooleanArray::from(pattern.clone());
            let runs = kept_runs(&batch, &keep);
            assert!(runs.iter().all(|r| r.num_rows() > 0));
            let want = filter_record_batch(&batch, &keep).unwrap();
            let got = concat_batches(&batch.schema(), &runs).unwrap();
            assert_eq!(got, want, "{pattern:?}");
        }
    }
}
