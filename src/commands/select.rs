//! `wai select`: the rows worth training on, written in training order.

use std::fmt::Write as _;

use rayon::prelude::*;
use serde_json::{Value, json};

use super::{Context, Outcome, flags_named};
use crate::cli::{SelectArgs, SelectMode, SelectTruncated};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::OnBadRow;
use crate::pipeline::read::Reader;
use crate::pipeline::row::{BatchView, encode};
use crate::pipeline::source;
use crate::report::envelope::{Envelope, Output};
use crate::stages::select::{self, Options, Truncated};

/// The `--json` envelope of a selection: its report, the output and how many records it holds,
/// the report's warnings.
fn envelope(
    args: &SelectArgs,
    report: Value,
    records: usize,
    warnings: &[String],
) -> Result<Value> {
    serde_json::to_value(
        Envelope::new("select", report)
            .inputs(&args.inputs)
            .output(Output::new(args.out.display(), "rows").rows(records as u64))
            .warnings(warnings.iter().map(String::as_str)),
    )
    .map_err(|e| Error::Internal(format!("the select report does not serialize: {e}")))
}

/// The option keys a warning of the selection or of its scan names, and the flags that set them.
const FLAGS: &[(&str, &str)] = &[
    ("`repeats`", "--repeats"),
    ("`band`", "--band"),
    ("`length_match`", "--length-match"),
    ("`endorsed`", "--endorsed"),
    ("`features`", "--feature"),
    ("`select` in `rl` mode", "`wai select --mode rl`"),
];

/// The selection's options from the command line.
fn options(args: &SelectArgs) -> Result<Options> {
    let [lo, hi] = args.band[..] else {
        return Err(Error::Usage(format!(
            "--band takes two pass rates, LO,HI (as in 0.2,0.8), not {} value(s)",
            args.band.len()
        )));
    };
    Ok(Options {
        target: args.target,
        band: (lo, hi),
        truncated: match args.truncated {
            SelectTruncated::Drop => Truncated::Drop,
            SelectTruncated::Keep => Truncated::Keep,
            SelectTruncated::Penalize => Truncated::Penalize,
        },
        has_tools: !args.no_tools,
        min_reward: args.min_reward,
    })
}

/// Runs `wai select`.
pub(crate) fn run(ctx: &Context, args: &SelectArgs) -> Result<Outcome> {
    let started = std::time::Instant::now();
    let opts = options(args)?;
    crate::stages::Options::check(&opts)?;
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
    let (infos, file_rows) = crate::pipeline::summaries::read_summaries(
        &mut reader,
        &inputs,
        &select::LEAVES,
        &select::fill_summaries,
        &select::general_summary,
    )?;
    tracing::debug!(rows = infos.len(), elapsed = ?started.elapsed(), "select: summaries read");
    let (chosen, marked, mut report) = match args.mode {
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
    let ordered = select::training_order(&taken, &at, &chosen, &marked, penalize)?;
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
        let scanned = scan_rows.then(|| {
            let session = crate::stages::Session::new()?;
            ctx.runtime
                .block_on(select::scan_selection(&session, &ordered, &args.endorsed))
        });
        tracing::debug!(elapsed = ?started.elapsed(), "select: selection scanned");
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the select writer panicked".into())));
        (written, scanned)
    });
    written?;
    let _ = freed.join();
    for w in &mut report.warnings {
        *w = flags_named(w, FLAGS);
    }
    render(args, &report, chosen.len(), scanned, started)
}

/// The text and the envelope of an RL or SFT selection of `chosen` rows, with the hack scan of
/// the selection when it ran.
fn render(
    args: &SelectArgs,
    report: &select::Report,
    chosen: usize,
    scanned: Option<Result<crate::stages::hack_scan::Report>>,
    started: std::time::Instant,
) -> Result<Outcome> {
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
                let warnings: Vec<String> = scan
                    .warnings
                    .iter()
                    .map(|w| flags_named(w, FLAGS))
                    .collect();
                scan_json = json!({"regime": regime, "warnings": warnings});
            }
            Err(e) => scan_line = Some(format!("  hack scan: did not run ({e})")),
        }
    }
    let mut text = report.to_string().trim_end().to_owned();
    if let Some(l) = scan_line {
        text.push('\n');
        text.push_str(&l);
    }
    let _ = write!(
        text,
        "\nwrote {chosen} rows to `{}` in {:.1} s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    let mut doc = serde_json::to_value(report).unwrap_or_default();
    if let Some(o) = doc.as_object_mut() {
        o.insert("hack_scan".into(), scan_json);
    }
    let json = envelope(args, doc, chosen, &report.warnings)?;
    Ok(Outcome {
        text,
        json,
        status: if chosen == 0 {
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
    let opts = select::PairOptions {
        min_margin: args.min_margin,
        max_pairs_per_prompt: args.max_pairs_per_prompt,
        length_match: args.length_match,
    };
    crate::stages::Options::check(&opts)?;
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
    let (pairs, mut report) = select::build_pairs(&plan, row, report);
    for w in &mut report.warnings {
        *w = flags_named(w, FLAGS);
    }
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
    let mut doc = serde_json::to_value(&report).unwrap_or_default();
    if let Some(o) = doc.as_object_mut() {
        o.insert("mode".into(), json!("preference"));
    }
    let json = envelope(args, doc, pairs.len(), &report.warnings)?;
    Ok(Outcome {
        text,
        json,
        status: if pairs.is_empty() {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}
