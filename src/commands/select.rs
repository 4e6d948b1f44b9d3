//! `wai select`: the rows worth training on, written in training order.

use super::{Context, Outcome, flags_named};
use crate::cli::{SelectArgs, SelectMode, SelectTruncated};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::select_run::{TwoPass, Written};
use crate::report::envelope::{Envelope, Output};
use crate::stages::select::{self, Mode, Options, Truncated};

/// The option keys a warning of the selection or of its scan names, and the flags that set them.
const FLAGS: &[(&str, &str)] = &[
    ("`repeats`", "--repeats"),
    ("`band`", "--band"),
    ("`length_match`", "--length-match"),
    ("`endorsed`", "--endorsed"),
    ("`keep_agreed`", "--keep-agreed"),
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
    // The pairwise judge is made (its spec, its options, its key) before anything is read.
    let judge = match (&args.judge, args.mode) {
        (None, _) => None,
        (Some(spec), SelectMode::Preference) => Some(crate::pipeline::judges::pairwise_judge(
            spec,
            &crate::pipeline::judges::models(&args.models)?,
            !args.no_swap,
            args.keep_agreed,
        )?),
        (Some(_), _) => {
            return Err(Error::Usage(
                "--judge asks a pairwise judge about preference pairs: it needs `--mode preference`"
                    .into(),
            ));
        }
    };
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
        SelectMode::Preference => {
            let opts = select::PairOptions {
                min_margin: args.min_margin,
                max_pairs_per_prompt: args.max_pairs_per_prompt,
                length_match: args.length_match,
            };
            crate::stages::Options::check(&opts)?;
            let mut done = select::pairs_streamed(&mut readings, &opts, judge.as_ref())?;
            drop(readings);
            name_flags(&mut done.report.warnings);
            let mut warnings = done.report.warnings.clone();
            if let Some(p) = &mut done.pairwise {
                name_flags(&mut p.warnings);
                warnings.extend(p.warnings.iter().cloned());
            }
            return render(args, &done, done.written, "pairs", &warnings, started);
        }
    };
    let output = args.out.display().to_string();
    let mut done = select::select_streamed(&mut readings, mode, &opts, &args.endorsed, output)?;
    drop(readings);
    name_flags(&mut done.report.warnings);
    if let Some(scan) = &mut done.hack_scan {
        name_flags(&mut scan.warnings);
    }
    render(
        args,
        &done,
        done.written,
        "rows",
        &done.report.warnings,
        started,
    )
}

/// The option keys `warnings` name, as the flags that set them.
fn name_flags(warnings: &mut [String]) {
    for w in warnings {
        *w = flags_named(w, FLAGS);
    }
}

/// The text and the `--json` envelope of a selection that wrote `written` records (`what`:
/// rows or pairs) to the output; none written is hollow.
fn render(
    args: &SelectArgs,
    done: &(impl serde::Serialize + std::fmt::Display),
    written: usize,
    what: &str,
    warnings: &[String],
    started: std::time::Instant,
) -> Result<Outcome> {
    let text = format!(
        "{done}\nwrote {written} {what} to `{}` in {:.1} s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    // Rows are rows (with their count); preference pairs are a JSON Lines file of pairs.
    let output = if what == "pairs" {
        Output::new(args.out.display(), "file")
    } else {
        Output::new(args.out.display(), "rows").rows(written as u64)
    };
    let json = Envelope::new("select", done)
        .inputs(&args.inputs)
        .output(output)
        .warnings(warnings.iter().map(String::as_str))
        .to_json()?;
    Ok(Outcome {
        text,
        json,
        status: if written == 0 {
            ExitStatus::Hollow
        } else {
            ExitStatus::Success
        },
    })
}
