//! `wai select`: the rows worth training on, written in training order.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use rayon::prelude::*;
use serde_json::{Value, json};

use super::{Context, Outcome};
use crate::cli::{SelectArgs, SelectMode, SelectTruncated};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::row::{BatchView, encode};
use crate::schema::col;
use crate::stages::hack_scan;
use crate::stages::select::{self, Options, RowInfo, Truncated};

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
    let batches = super::all_rows(ctx, &args.inputs)?;
    // Every row's summary, in file order.
    let mut infos: Vec<RowInfo> = Vec::new();
    let mut at: Vec<(usize, usize)> = Vec::new();
    for (b, batch) in batches.iter().enumerate() {
        let view = BatchView::new(batch)?;
        let part: Vec<RowInfo> = (0..batch.num_rows())
            .into_par_iter()
            .map(|i| encode(&view, i).map(|row| select::row_info(&row)))
            .collect::<Result<_>>()?;
        at.extend((0..batch.num_rows()).map(|i| (b, i)));
        infos.extend(part);
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
        return preference(args, &batches, started);
    }
    let (chosen, marked, report) = match args.mode {
        SelectMode::Rl => select::rl(&infos, &opts),
        SelectMode::Sft | SelectMode::Preference => {
            let (c, r) = select::sft(&infos, &opts);
            (c, Vec::new(), r)
        }
    };
    // Write the chosen rows in order. Rows the truncation marking touched carry `overlong:
    // true`; under `penalize` their reward is 0 and the judge's is kept as
    // `reward_before_penalty`.
    let marked: std::collections::HashSet<usize> = marked.into_iter().collect();
    let penalize = args.truncated == SelectTruncated::Penalize;
    let format = super::convert::output_format(&args.out, None)?;
    let mut sink = super::convert::sink(&args.out, format)?;
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    for chunk in chosen.chunks(8192) {
        let idx: Vec<(usize, usize)> = chunk.iter().map(|&i| at[i]).collect();
        let mut out = datafusion::arrow::compute::interleave_record_batch(&refs, &idx)?;
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
