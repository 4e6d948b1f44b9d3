//! `wai select`: the rows worth training on, written in training order.

use serde_json::Value;

use super::{Context, Outcome, flags_named};
use crate::cli::{SelectArgs, SelectMode, SelectTruncated};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::select_run::{TwoPass, Written};
use crate::report::envelope::{Envelope, Output};
use crate::stages::select::{self, Mode, Options, Truncated};

/// The `--json` envelope of a selection: its report, the output and how many records it holds,
/// the report's warnings.
fn envelope(
    args: &SelectArgs,
    report: &impl serde::Serialize,
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
    let written = if args.mode == SelectMode::Preference {
        crate::pipeline::output::jsonl_name(&args.out, "`--mode preference` writes pairs, which")?;
        Written::Lines
    } else {
        Written::Rows(crate::pipeline::rows_out::output_format(&args.out, None)?)
    };
    let mut readings = TwoPass::open(ctx, &args.inputs, &args.out, written)?;
    let mode = match args.mode {
        SelectMode::Rl => Mode::Rl,
        SelectMode::Sft => Mode::Sft,
        SelectMode::Preference => return preference(args, &mut readings, started),
    };
    let output = args.out.display().to_string();
    let mut done = select::select_streamed(&mut readings, mode, &opts, &args.endorsed, output)?;
    drop(readings);
    for w in &mut done.report.warnings {
        *w = flags_named(w, FLAGS);
    }
    for w in done.hack_scan.iter_mut().flat_map(|s| &mut s.warnings) {
        *w = flags_named(w, FLAGS);
    }
    let text = format!(
        "{done}\nwrote {} rows to `{}` in {:.1} s",
        done.written,
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    let json = envelope(args, &done, done.written, &done.report.warnings)?;
    Ok(outcome(text, json, done.written))
}

/// `--mode preference`: pairs of replies to the same ask, as JSONL.
fn preference(
    args: &SelectArgs,
    readings: &mut TwoPass<'_>,
    started: std::time::Instant,
) -> Result<Outcome> {
    let opts = select::PairOptions {
        min_margin: args.min_margin,
        max_pairs_per_prompt: args.max_pairs_per_prompt,
        length_match: args.length_match,
    };
    crate::stages::Options::check(&opts)?;
    let mut done = select::pairs_streamed(readings, &opts)?;
    for w in &mut done.report.warnings {
        *w = flags_named(w, FLAGS);
    }
    let text = format!(
        "{done}\nwrote {} pairs to `{}` in {:.1} s",
        done.written,
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    let json = envelope(args, &done, done.written, &done.report.warnings)?;
    Ok(outcome(text, json, done.written))
}

/// The outcome of a selection that wrote `written` records (none: hollow).
fn outcome(text: String, json: Value, written: usize) -> Outcome {
    Outcome {
        text,
        json,
        status: if written == 0 {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    }
}
