//! `wai decontaminate`: training rows that overlap the eval set are dropped; the rest are written.

use std::io::Write as _;
use std::time::Duration;

use super::{Context, Outcome};
use crate::cli::DecontaminateArgs;
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::io::{AtomicFile, OnBadRow};
use crate::pipeline::read::Reader;
use crate::pipeline::source;
use crate::report::envelope::{Envelope, Output, Warning};
use crate::stages::decontaminate::{EvalSide, Options, Report, Screen};
use crate::stages::embed::{CommandEmbedder, Embedder, EndpointEmbedder, Spec};

/// The stage's options from the command line.
fn options(args: &DecontaminateArgs) -> Options {
    Options {
        fields: args.fields.clone(),
        n: args.n,
        // As the reference: a threshold over 1 reads as 1 (fully covered), under 0 as 0.
        overlap: args.overlap.clamp(0.0, 1.0),
        similarity: args.embedder.as_ref().map(|_| args.similarity),
    }
}

/// The embedder `--embedder` names: a column, or a model started here.
fn embedder(ctx: &Context, args: &DecontaminateArgs) -> Result<Option<Embedder>> {
    let timeout = Duration::from_secs_f64(args.timeout.max(0.001));
    Ok(
        match args.embedder.as_deref().map(Spec::parse).transpose()? {
            None => None,
            Some(Spec::Column(name)) => Some(Embedder::Column(name)),
            Some(Spec::Command(command)) => Some(Embedder::Model(Box::new(
                CommandEmbedder::start(&command, timeout)?,
            ))),
            Some(Spec::OpenAi { model, url }) => {
                Some(Embedder::Model(Box::new(EndpointEmbedder::new(
                    &model,
                    &url,
                    crate::models::Settings {
                        timeout,
                        concurrency: 1,
                        allow_http: args.allow_http,
                        cache: (!args.no_cache).then(|| {
                            args.cache
                                .clone()
                                .unwrap_or_else(crate::models::cache::default_dir)
                        }),
                        ..crate::models::Settings::default()
                    },
                    ctx.runtime.handle().clone(),
                )?)))
            }
        },
    )
}

/// The report's words for the eval rows and the options, as the command line spells them.
fn flags_named(report: &mut Report) {
    const FLAGS: &[(&str, &str)] = &[
        ("`embedder`", "--embedder"),
        ("`similarity`", "--similarity"),
        ("`against`", "--against"),
    ];
    let named = |s: &str| super::flags_named(s, FLAGS);
    for note in &mut report.notes {
        *note = named(note);
    }
    for why in report.rules_skipped.values_mut() {
        *why = named(why);
    }
}

/// The keys of the rows of the Parquet `inputs` that the cluster's workers flag under `screen`'s
/// lexical rules.
fn flagged_on_cluster(
    ctx: &Context,
    inputs: &[source::Input],
    screen: &Screen,
) -> Result<foldhash::HashSet<u64>> {
    let session = crate::pipeline::session::new_context(None)?;
    ctx.runtime.block_on(async {
        crate::pipeline::session::register_parquet(&session, "train", inputs).await?;
        crate::stages::decontaminate::flagged_keys(&session, "train", &screen.lexical()).await
    })
}

/// Runs `wai decontaminate`.
pub(crate) fn run(ctx: &Context, args: &DecontaminateArgs) -> Result<Outcome> {
    let opts = options(args);
    crate::stages::Options::check(&opts)?;
    let out = &args.output.out;
    let format = crate::pipeline::rows_out::output_format(out, args.output.to.map(Into::into))?;
    // Both sides resolved, and every output checked against them, before the eval side is
    // indexed (which may call an embedding model): a refused run has done no work.
    let against = ctx.runtime.block_on(source::resolve(&args.against))?;
    let inputs = ctx.runtime.block_on(source::resolve(&args.inputs))?;
    crate::pipeline::output::not_an_input(out, &against)?;
    crate::pipeline::output::rows_apart(out, args.output.rejects.as_deref(), &inputs)?;
    if let Some(path) = &args.dropped {
        crate::pipeline::output::not_an_input(path, &inputs)?;
        crate::pipeline::output::not_an_input(path, &against)?;
    }
    let mut eval = EvalSide::new(&opts, embedder(ctx, args)?);
    // The eval side, indexed once.
    let mut reader = Reader::new(
        ctx.runtime.handle().clone(),
        OnBadRow::Fail,
        Box::new(|_| {}),
    );
    for input in &against {
        reader.read(input, &mut |batch| eval.add(&batch))?;
    }
    drop(reader);
    let mut screen = eval.finish()?;
    // On a cluster, the workers run the lexical rules over the Parquet inputs and name the rows
    // they flag; of those inputs, only the rows named are checked again here. JSONL inputs are
    // screened here as they are read: a second reading of them elsewhere could set aside other
    // bad lines than this one. The Parquet files are pinned, so rows the workers did not see
    // are never written.
    let on_workers: Vec<bool> = inputs
        .iter()
        .map(|i| {
            crate::pipeline::cluster::current().is_some() && i.format == source::Format::Parquet
        })
        .collect();
    let worker_inputs: Vec<source::Input> = (inputs.iter().zip(&on_workers))
        .filter(|(_, w)| **w)
        .map(|(i, _)| i.clone())
        .collect();
    let pins = source::pin(&worker_inputs)?;
    if !worker_inputs.is_empty() {
        let keys = flagged_on_cluster(ctx, &worker_inputs, &screen)?;
        tracing::info!(
            keys = keys.len(),
            inputs = worker_inputs.len(),
            "the workers flagged these rows' keys"
        );
        screen.only_flagged(keys);
    }
    // The training side, streamed.
    // The dropped list streams to a temporary file beside its path, renamed when complete.
    let mut dropped = match &args.dropped {
        Some(path) => {
            let file = AtomicFile::create(path)?;
            let writer = std::io::BufWriter::new(file.handle()?);
            Some((path, file, writer))
        }
        None => None,
    };
    let counts = crate::pipeline::rows_out::stream_rows_with(
        ctx,
        &inputs,
        out,
        args.output.rejects.as_deref(),
        format,
        "decontaminating",
        &mut |input, batch| {
            screen.screened_by_workers(on_workers[input]);
            let screened = screen.check(&batch, dropped.is_some())?;
            if let Some((path, _, writer)) = &mut dropped {
                for line in &screened.dropped {
                    writeln!(writer, "{line}").map_err(|e| Error::io(path.as_path(), e))?;
                }
            }
            Ok(screened.kept)
        },
        &|| source::unchanged(&worker_inputs, &pins, "decontaminate"),
    )?;
    if let Some((path, file, writer)) = dropped {
        writer
            .into_inner()
            .map_err(|e| Error::io(path.as_path(), e.into_error()))?;
        file.commit()?;
    }
    let mut report = screen.report();
    flags_named(&mut report);
    let kept = counts.rows - report.n_contaminated;
    let text = format!(
        "{}\nwrote {kept} rows to `{}`",
        report.to_string().trim_end(),
        out.display()
    );
    let mut envelope = Envelope::new("decontaminate", &report)
        .inputs(args.inputs.iter().chain(&args.against))
        .output(Output::new(out.display(), "rows").rows(kept));
    if let Some(path) = &args.output.rejects {
        envelope = envelope.output(Output::new(path.display(), "rejects").rows(counts.rejected));
    }
    if let Some(path) = &args.dropped {
        envelope = envelope.output(Output::new(path.display(), "file").rows(report.n_contaminated));
    }
    let warnings = report
        .coded_notes()
        .map(|(code, n)| Warning::coded(code, n));
    let json = serde_json::to_value(envelope.warnings(warnings)).map_err(|e| {
        Error::Internal(format!("the decontaminate report does not serialize: {e}"))
    })?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}
