//! `wai select`: the rows worth training on, written in training order.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use rayon::prelude::*;
use serde_json::{Value, json};

use super::{Context, Outcome};
use crate::cli::{SelectArgs, SelectMode, SelectTruncated};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::OnBadRow;
use crate::pipeline::read::Reader;
use crate::pipeline::row::{BatchView, encode};
use crate::pipeline::source;
use crate::schema::col;
use crate::stages::hack_scan;
use crate::stages::select::{self, Options, Truncated};

/// The hack scan of the selected rows, from memory.
fn scan(ctx: &Context, rows: &[RecordBatch], endorsed: &[String]) -> Result<hack_scan::Report> {
    let session = crate::pipeline::session::new_context(None)?;
    let schema = rows
        .first()
        .map_or_else(crate::schema::row_schema, RecordBatch::schema);
    // Contiguous parts, one per core, read in order.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let parts: Vec<Vec<RecordBatch>> = rows
        .chunks(rows.len().div_ceil(cores).max(1))
        .map(<[RecordBatch]>::to_vec)
        .collect();
    let table = datafusion::datasource::MemTable::try_new(schema, parts)?;
    let rows = session.read_table(Arc::new(table))?;
    let opts = hack_scan::Options {
        endorsed: endorsed.to_vec(),
        top_features: Some(5),
        ..hack_scan::Options::default()
    };
    ctx.runtime
        .block_on(crate::stages::run::<hack_scan::HackScanStage>(
            &crate::stages::Session::from_context(session),
            hack_scan::Inputs::new(rows),
            &opts,
        ))
}

/// Rows in chunks per core to put into training order (each chunk one output batch).
const ORDER_CHUNK: usize = 8192;

/// The chosen rows of `taken` (`at[k]` is where `chosen[k]` landed) in training order, a batch
/// per [`ORDER_CHUNK`] rows, the chunks gathered in parallel. Rows in `marked` carry
/// `overlong: true` in `extra`; under `penalize` their reward is 0 and the judge's is kept as
/// `reward_before_penalty`.
fn training_order(
    taken: &[RecordBatch],
    at: &[(usize, usize)],
    chosen: &[usize],
    marked: &std::collections::HashSet<usize>,
    penalize: bool,
) -> Result<Vec<RecordBatch>> {
    let refs: Vec<&RecordBatch> = taken.iter().collect();
    chosen
        .par_chunks(ORDER_CHUNK)
        .zip(at.par_chunks(ORDER_CHUNK))
        .map(|(chunk, idx)| {
            let out = datafusion::arrow::compute::interleave_record_batch(&refs, idx)?;
            if chunk.iter().any(|i| marked.contains(i)) {
                mark_overlong(&out, chunk, marked, penalize)
            } else {
                Ok(out)
            }
        })
        .collect()
}

/// `out` (the rows `chunk` names) with the rows in `marked` marked overlong (see
/// [`training_order`]).
fn mark_overlong(
    out: &RecordBatch,
    chunk: &[usize],
    marked: &std::collections::HashSet<usize>,
    penalize: bool,
) -> Result<RecordBatch> {
    let schema = out.schema();
    let rpos = schema.index_of(col::REWARD)?;
    let epos = schema.index_of(col::EXTRA)?;
    let old = out.column(rpos).as_primitive::<Float64Type>();
    let extra = out.column(epos).as_string::<i32>();
    let mut rewards = Vec::with_capacity(chunk.len());
    let mut extras: Vec<Option<String>> = Vec::with_capacity(chunk.len());
    for (j, i) in chunk.iter().enumerate() {
        let reward = old.is_valid(j).then(|| old.value(j));
        let text = extra.is_valid(j).then(|| extra.value(j).to_owned());
        if marked.contains(i) {
            let mut m: serde_json::Map<String, Value> = text
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or_default();
            m.insert("overlong".into(), Value::Bool(true));
            if penalize {
                m.insert(
                    "reward_before_penalty".into(),
                    reward.map_or(Value::Null, |r| json!(r)),
                );
                rewards.push(Some(0.0));
            } else {
                rewards.push(reward);
            }
            extras.push(Some(Value::Object(m).to_string()));
        } else {
            rewards.push(reward);
            extras.push(text);
        }
    }
    let mut cols: Vec<ArrayRef> = out.columns().to_vec();
    cols[rpos] = Arc::new(Float64Array::from(rewards));
    cols[epos] = Arc::new(datafusion::arrow::array::StringArray::from(extras));
    Ok(RecordBatch::try_new(schema, cols)?)
}

/// Runs `wai select`.
pub fn run(ctx: &Context, args: &SelectArgs) -> Result<Outcome> {
    let started = std::time::Instant::now();
    let [lo, hi] = args.band[..] else {
        return Err(Error::Usage(format!(
            "--band takes two pass rates, LO,HI (as in 0.2,0.8), not {} value(s)",
            args.band.len()
        )));
    };
    if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&hi) || lo > hi {
        return Err(Error::Usage(format!(
            "--band LO,HI are pass rates with LO <= HI, not {lo},{hi}"
        )));
    }
    let opts = Options {
        target: args.target,
        band: (lo, hi),
        truncated: match args.truncated {
            SelectTruncated::Drop => Truncated::Drop,
            SelectTruncated::Keep => Truncated::Keep,
            SelectTruncated::Penalize => Truncated::Penalize,
        },
        has_tools: !args.no_tools,
        min_reward: args.min_reward,
    };
    // Where the output goes is checked before anything is read: pairs are JSON Lines, rows
    // take their format from the name.
    let format = if args.mode == SelectMode::Preference {
        crate::pipeline::output::jsonl_name(&args.out, "`--mode preference` writes pairs, which")?;
        None
    } else {
        Some(crate::pipeline::rows_out::output_format(&args.out, None)?)
    };
    // Pass 1: every row's summary, in the inputs' order; the rows themselves are not kept.
    // JSONL inputs are converted to Parquet first, so the passes can pick columns and rows.
    let resolved = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    crate::pipeline::output::not_an_input(&args.out, &resolved)?;
    let scratch = super::scratch()?;
    let inputs = super::as_parquet(ctx, resolved, scratch.path())?;
    // Both readings must read the same files.
    let pins = source::pin(&inputs)?;
    let mut reader = Reader::new(
        ctx.runtime.handle().clone(),
        OnBadRow::Fail,
        Box::new(|_| {}),
    );
    if args.mode == SelectMode::Preference {
        return preference(args, &mut reader, &inputs, &pins, started);
    }
    let (infos, file_rows) = select::read_summaries(&mut reader, &inputs)?;
    tracing::debug!(rows = infos.len(), elapsed = ?started.elapsed(), "select: summaries read");
    let (chosen, marked, report) = match args.mode {
        SelectMode::Rl => select::rl(&infos, &opts),
        SelectMode::Sft | SelectMode::Preference => {
            let (c, r) = select::sft(&infos, &opts);
            (c, Vec::new(), r)
        }
    };
    // Pass 2: only the chosen rows are decoded (memory follows the selection, not the input),
    // then written in training order.
    // A million summaries take a while to free: off the critical path.
    let freed = std::thread::spawn(move || drop(infos));
    tracing::debug!(chosen = chosen.len(), elapsed = ?started.elapsed(), "select: rows chosen");
    source::unchanged(&inputs, &pins, "select")?;
    let (taken, at) = reader.read_positions(&inputs, &file_rows, &chosen)?;
    source::unchanged(&inputs, &pins, "select")?;
    tracing::debug!(batches = taken.len(), elapsed = ?started.elapsed(), "select: chosen rows read");
    drop(reader);
    // Rows the truncation marking touched carry `overlong: true`; under `penalize` their reward
    // is 0 and the judge's is kept as `reward_before_penalty`.
    let marked: std::collections::HashSet<usize> = marked.into_iter().collect();
    let penalize = args.truncated == SelectTruncated::Penalize;
    let format =
        format.ok_or_else(|| Error::Internal("select: rows without an output format".into()))?;
    let mut sink = crate::pipeline::rows_out::sink(&args.out, format)?;
    let ordered = training_order(&taken, &at, &chosen, &marked, penalize)?;
    drop(taken);
    tracing::debug!(elapsed = ?started.elapsed(), "select: rows in training order");
    // RL: what the selection's reward teaches, scanned from the rows in memory while they are
    // written.
    let scan_rows = args.mode == SelectMode::Rl && !chosen.is_empty();
    let (written, scanned) = std::thread::scope(|scope| {
        let rows = &ordered;
        let writer = scope.spawn(move || -> Result<()> {
            for out in rows {
                sink.write(out)?;
            }
            let finished = sink.finish();
            tracing::debug!(elapsed = ?started.elapsed(), "select: rows written");
            finished
        });
        let scanned = scan_rows.then(|| scan(ctx, &ordered, &args.endorsed));
        tracing::debug!(elapsed = ?started.elapsed(), "select: selection scanned");
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the select writer panicked".into())));
        (written, scanned)
    });
    written?;
    let _ = freed.join();
    let mut scan_line = None;
    let mut scan_json = Value::Null;
    if let Some(scanned) = scanned {
        match scanned {
            Ok(scan) => {
                let regime = serde_json::to_value(scan.regime)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                scan_line = Some(format!(
                    "  hack scan: {} (wai hack-scan {} for the ranking)",
                    regime.replace('_', " "),
                    args.out.display()
                ));
                scan_json = json!({"regime": regime, "warnings": scan.warnings});
            }
            Err(e) => scan_line = Some(format!("  hack scan: did not run ({e})")),
        }
    }
    let mut text = report.to_string().trim_end().to_owned();
    if let Some(l) = scan_line {
        text.push('\n');
        text.push_str(&l);
    }
    text.push_str(&format!(
        "\nwrote {} rows to `{}` in {:.1} s",
        chosen.len(),
        args.out.display(),
        started.elapsed().as_secs_f64()
    ));
    let mut doc = super::document("select", &report);
    if let Some(o) = doc.as_object_mut() {
        o.insert("hack_scan".into(), scan_json);
        o.insert(
            "output".into(),
            Value::String(args.out.display().to_string()),
        );
    }
    Ok(Outcome {
        text,
        json: doc,
        status: if chosen.is_empty() {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}

/// `--mode preference`: pairs of replies to the same ask, as JSONL. Two readings, as RL and SFT:
/// what pairing needs of every row, then the paired rows whole.
fn preference(
    args: &SelectArgs,
    reader: &mut Reader<'_>,
    inputs: &[source::Input],
    pins: &[Option<source::Pin>],
    started: std::time::Instant,
) -> Result<Outcome> {
    use std::io::Write;
    if !(args.min_margin > 0.0) {
        return Err(Error::Usage(format!(
            "--min-margin must be above 0, not {}",
            args.min_margin
        )));
    }
    let opts = select::PairOptions {
        min_margin: args.min_margin,
        max_pairs_per_prompt: args.max_pairs_per_prompt,
        length_match: args.length_match,
    };
    let mut infos: Vec<select::PairRow> = Vec::new();
    let mut file_rows = Vec::with_capacity(inputs.len());
    for input in inputs {
        let before = infos.len();
        reader.read(input, &mut |batch| {
            let view = BatchView::new(&batch)?;
            let part: Vec<select::PairRow> = (0..batch.num_rows())
                .into_par_iter()
                .map(|i| Ok(select::pair_row(&encode(&view, i)?, opts.length_match)))
                .collect::<Result<_>>()?;
            infos.extend(part);
            Ok(())
        })?;
        file_rows.push(infos.len() - before);
    }
    let (plan, report) = select::plan_pairs(&infos, &opts);
    // The paired rows, read whole, as JSON objects.
    let mut needed: Vec<usize> = plan.iter().flat_map(|p| [p.chosen, p.rejected]).collect();
    needed.sort_unstable();
    needed.dedup();
    source::unchanged(inputs, pins, "select")?;
    let (taken, at) = reader.read_positions(inputs, &file_rows, &needed)?;
    source::unchanged(inputs, pins, "select")?;
    drop(infos);
    let views = taken
        .iter()
        .map(BatchView::new)
        .collect::<Result<Vec<_>>>()?;
    let objects: Vec<serde_json::Map<String, Value>> = at
        .par_iter()
        .map(|&(b, j)| encode(&views[b], j))
        .collect::<Result<_>>()?;
    let row = |i: usize| {
        let k = needed.binary_search(&i).expect("a planned row was read");
        &objects[k]
    };
    let (pairs, report) = select::build_pairs(&plan, row, report);
    let file = crate::pipeline::io::AtomicFile::create(&args.out)?;
    let mut w = std::io::BufWriter::new(file.writer()?);
    for p in &pairs {
        serde_json::to_writer(&mut w, p)
            .map_err(|e| Error::Internal(format!("writing a pair: {e}")))?;
        w.write_all(b"\n").map_err(|e| Error::io(&args.out, e))?;
    }
    w.flush().map_err(|e| Error::io(&args.out, e))?;
    drop(w);
    file.commit()?;
    let text = format!(
        "{}\nwrote {} pairs to `{}` in {:.1} s",
        report.to_string().trim_end(),
        pairs.len(),
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    let mut doc = super::document("select", &report);
    if let Some(o) = doc.as_object_mut() {
        o.insert("mode".into(), json!("preference"));
        o.insert(
            "output".into(),
            Value::String(args.out.display().to_string()),
        );
    }
    Ok(Outcome {
        text,
        json: doc,
        status: if pairs.is_empty() {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;

    /// Batches of rows `from..to` with an id, a reward (the id's parity) and an `extra`.
    fn taken(cuts: &[usize]) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new(col::REWARD, DataType::Float64, true),
            Field::new(col::EXTRA, DataType::Utf8, true),
        ]));
        cuts.windows(2)
            .map(|w| {
                let ids: Vec<i64> = (w[0]..w[1])
                    .map(|i| i64::try_from(i).expect("a small id"))
                    .collect();
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(Int64Array::from(ids.clone())),
                    Arc::new(
                        ids.iter()
                            .map(|i| Some(f64::from(u8::from(i % 2 == 1))))
                            .collect::<Float64Array>(),
                    ),
                    Arc::new(
                        ids.iter()
                            .map(|i| (i % 3 == 0).then(|| format!(r#"{{"n":{i}}}"#)))
                            .collect::<StringArray>(),
                    ),
                ];
                RecordBatch::try_new(schema.clone(), columns).expect("a batch")
            })
            .collect()
    }

    /// Rows over several chunks come out in the order chosen, whatever batch they were read
    /// into; marked rows, and only they, say `overlong`, and under `penalize` their reward is
    /// 0 with the judge's kept.
    #[test]
    fn training_order_follows_the_choice_across_chunks() {
        let cuts: [usize; 5] = [0, 7_000, 7_001, 19_000, 25_000];
        let batches = taken(&cuts);
        let n = 25_000usize;
        // A fixed shuffle of every row: position k takes row (k * 7919) mod n.
        let chosen: Vec<usize> = (0..n).map(|k| k * 7919 % n).collect();
        let at: Vec<(usize, usize)> = chosen
            .iter()
            .map(|&r| {
                let b = cuts.iter().rposition(|&c| c <= r).expect("a batch");
                (b, r - cuts[b])
            })
            .collect();
        let marked: HashSet<usize> = chosen.iter().copied().filter(|r| r % 97 == 0).collect();
        for penalize in [false, true] {
            let outs = training_order(&batches, &at, &chosen, &marked, penalize).expect("ordered");
            assert_eq!(outs.len(), n.div_ceil(ORDER_CHUNK));
            let mut k = 0;
            for out in &outs {
                let ids = out.column(0).as_primitive::<Int64Type>();
                let rewards = out.column(1).as_primitive::<Float64Type>();
                let extras = out.column(2).as_string::<i32>();
                for j in 0..out.num_rows() {
                    let row = chosen[k];
                    assert_eq!(
                        usize::try_from(ids.value(j)).ok(),
                        Some(row),
                        "position {k}"
                    );
                    let extra: Option<Value> = extras
                        .is_valid(j)
                        .then(|| serde_json::from_str(extras.value(j)).expect("JSON"));
                    let judged = f64::from(u8::from(row % 2 == 1));
                    if marked.contains(&row) {
                        let extra = extra.expect("a marked row has an extra");
                        assert_eq!(extra["overlong"], true);
                        if row.is_multiple_of(3) {
                            assert_eq!(extra["n"], row, "the row's own extra is kept");
                        }
                        if penalize {
                            assert_eq!(rewards.value(j), 0.0);
                            assert_eq!(extra["reward_before_penalty"], judged);
                        } else {
                            assert_eq!(rewards.value(j), judged);
                            assert!(extra.get("reward_before_penalty").is_none());
                        }
                    } else {
                        assert_eq!(rewards.value(j), judged);
                        assert_eq!(extra.is_some(), row.is_multiple_of(3));
                        assert!(extra.is_none_or(|e| e.get("overlong").is_none()));
                    }
                    k += 1;
                }
            }
            assert_eq!(k, n);
        }
    }
}
