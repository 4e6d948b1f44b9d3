//! `wai select`: the rows worth training on, written in training order.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::Float64Type;
use rayon::prelude::*;
use serde_json::{Value, json};

use super::{Context, Outcome};
use crate::cli::{SelectArgs, SelectMode, SelectTruncated};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::row::{BatchView, encode};
use crate::pipeline::session::for_each_by_partition;
use crate::schema::col;
use crate::stages::hack_scan;
use crate::stages::select::{self, Options, RowInfo, Truncated};

/// The second pass did not see the rows the first did.
fn changed() -> Error {
    Error::Input {
        stage: "select".into(),
        message: "the input changed while it was read (the second pass saw other rows)".into(),
    }
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
    if args.mode == SelectMode::Preference {
        let batches = super::all_rows(ctx, &args.inputs)?;
        return preference(args, &batches, started);
    }
    // Pass 1: every row's summary, in file order; the rows themselves are not kept.
    let (context, _scratch) = super::rows_session(ctx, &args.inputs)?;
    let mut parts: Vec<Vec<RowInfo>> = Vec::new();
    ctx.runtime.block_on(for_each_by_partition(
        &context,
        "SELECT * FROM rows",
        |p, batch| {
            if parts.len() <= p {
                parts.resize_with(p + 1, Vec::new);
            }
            parts[p].extend(select::row_infos(&batch)?.0);
            Ok(())
        },
    ))?;
    // Where each partition starts, for the second pass.
    let starts: Vec<usize> = parts
        .iter()
        .scan(0, |at, p| {
            let start = *at;
            *at += p.len();
            Some(start)
        })
        .collect();
    let infos: Vec<RowInfo> = parts.into_iter().flatten().collect();
    let (chosen, marked, report) = match args.mode {
        SelectMode::Rl => select::rl(&infos, &opts),
        SelectMode::Sft | SelectMode::Preference => {
            let (c, r) = select::sft(&infos, &opts);
            (c, Vec::new(), r)
        }
    };
    // Pass 2: the chosen rows, taken as they stream by (memory follows the selection, not the
    // input), then written in training order.
    let mut slot = vec![u32::MAX; infos.len()];
    for (k, &i) in chosen.iter().enumerate() {
        slot[i] = u32::try_from(k).map_err(|_| Error::Internal("too many rows chosen".into()))?;
    }
    let mut taken: Vec<RecordBatch> = Vec::new();
    let mut at = vec![(0usize, 0usize); chosen.len()];
    if !chosen.is_empty() {
        let mut next = starts.clone();
        ctx.runtime.block_on(for_each_by_partition(
            &context,
            "SELECT * FROM rows",
            |p, batch| {
                let n = batch.num_rows();
                let Some(offset) = next.get_mut(p) else {
                    return Err(changed());
                };
                if *offset + n > starts.get(p + 1).copied().unwrap_or(slot.len()) {
                    return Err(changed());
                }
                let mut take = Vec::new();
                for (j, k) in slot[*offset..*offset + n].iter().enumerate() {
                    if *k != u32::MAX {
                        at[*k as usize] = (taken.len(), take.len());
                        take.push(j as u32);
                    }
                }
                if !take.is_empty() {
                    taken.push(take_record_batch(&batch, &UInt32Array::from(take))?);
                }
                *offset += n;
                Ok(())
            },
        ))?;
        let ends = starts.iter().skip(1).copied().chain([slot.len()]);
        if next.iter().zip(ends).any(|(a, b)| *a != b) {
            return Err(changed());
        }
    }
    // Rows the truncation marking touched carry `overlong: true`; under `penalize` their reward
    // is 0 and the judge's is kept as `reward_before_penalty`.
    let marked: std::collections::HashSet<usize> = marked.into_iter().collect();
    let penalize = args.truncated == SelectTruncated::Penalize;
    let format = super::convert::output_format(&args.out, None)?;
    let mut sink = super::convert::sink(&args.out, format)?;
    let refs: Vec<&RecordBatch> = taken.iter().collect();
    for (c, chunk) in chosen.chunks(8192).enumerate() {
        let idx = &at[c * 8192..c * 8192 + chunk.len()];
        let mut out = datafusion::arrow::compute::interleave_record_batch(&refs, idx)?;
        if chunk.iter().any(|i| marked.contains(i)) {
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
            out = RecordBatch::try_new(schema, cols)?;
        }
        sink.write(&out)?;
    }
    sink.finish()?;
    // RL: what the selection's reward teaches.
    let mut scan_line = None;
    let mut scan_json = Value::Null;
    if args.mode == SelectMode::Rl && !chosen.is_empty() {
        let (sel_ctx, _s) = super::rows_session(ctx, &[args.out.display().to_string()])?;
        let opts = hack_scan::Options {
            endorsed: args.endorsed.clone(),
            top_features: Some(5),
            ..hack_scan::Options::default()
        };
        match ctx
            .runtime
            .block_on(hack_scan::scan(&sel_ctx, "rows", &opts))
        {
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

/// `--mode preference`: pairs of replies to the same ask, as JSONL.
fn preference(
    args: &SelectArgs,
    batches: &[RecordBatch],
    started: std::time::Instant,
) -> Result<Outcome> {
    use std::io::Write;
    if !(args.min_margin > 0.0) {
        return Err(Error::Usage(format!(
            "--min-margin must be above 0, not {}",
            args.min_margin
        )));
    }
    let mut rows = Vec::new();
    for batch in batches {
        let view = BatchView::new(batch)?;
        let part: Vec<serde_json::Map<String, Value>> = (0..batch.num_rows())
            .into_par_iter()
            .map(|i| encode(&view, i))
            .collect::<Result<_>>()?;
        rows.extend(part);
    }
    let opts = select::PairOptions {
        min_margin: args.min_margin,
        max_pairs_per_prompt: args.max_pairs_per_prompt.max(1),
        length_match: args.length_match,
    };
    let (pairs, report) = select::pairs(&rows, &opts);
    let file = crate::pipeline::io::AtomicFile::create(&args.out)?;
    let mut w = std::io::BufWriter::new(file.handle()?);
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
