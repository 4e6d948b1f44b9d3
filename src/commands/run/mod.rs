//! `wai run PIPELINE.toml`: the batch job over a lake (`docs/lake.md`).
//!
//! A pipeline file names its inputs, its stages (each a wai command, its options spelled as the
//! command's flags) and its gates. A run reads the input files no committed run of the same
//! pipeline has read, runs the stages in order, each writing under the lake and landing its
//! report as rows in `results/<stage>/`, and commits the run to the manifest last. Data stages
//! (ingest, convert, grade, decontaminate, select, export) and measures (pass-at, markers, gate,
//! variance, judge-trust, hack-scan) work on the new rows, a measure with `over = "all"` on every
//! row the pipeline has taken in so far; compare reads the new rows against a baseline. A killed
//! run resumes at the stage it was in.

mod gates;
mod pipeline;
mod results;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::Path;

use clap::Parser as _;
use serde_json::{Map, Value, json};

use super::{Context, Outcome};
use crate::cli::{Cli, RunArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::pipeline::lake::{self, Lake, RunRecord, SeenFile, StageRecord};
use crate::report::envelope::Envelope;
use crate::report::plural;
use crate::stages::simulate::hash::sha256_hex;
use pipeline::{
    Baseline, KINDS as KIND_ROLES, Over, Pipeline, Role, Stage, command_line, output_of, quoted,
};
use results::rows_of;

/// What an input file is now.
fn seen(path: &str) -> Result<SeenFile> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(Path::new(path), e))?;
    let modified_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| u64::try_from(d.as_nanos()).ok());
    Ok(SeenFile {
        path: path.to_owned(),
        size: meta.len(),
        modified_ns,
    })
}

/// The input files now, and which no committed run of the pipeline has read.
fn new_inputs(
    ctx: &Context,
    pipeline: &Pipeline,
    history: &[&RunRecord],
) -> Result<(Vec<SeenFile>, usize)> {
    let traces = pipeline.stages.first().is_some_and(|s| s.kind == "ingest");
    let found = ctx.runtime.block_on(async {
        if traces {
            crate::pipeline::source::resolve_traces(&pipeline.inputs).await
        } else {
            crate::pipeline::source::resolve(&pipeline.inputs).await
        }
    })?;
    let mut known: BTreeMap<&str, &SeenFile> = BTreeMap::new();
    for run in history {
        for file in &run.inputs {
            known.insert(file.path.as_str(), file);
        }
    }
    let mut new = Vec::new();
    let mut old = 0;
    for input in found {
        let crate::pipeline::source::Location::Local(_) = &input.location else {
            return Err(Error::Usage(format!(
                "`{}`: a pipeline reads local files for now (copy objects into a folder first)",
                input.display
            )));
        };
        let now = seen(&input.display)?;
        match known.get(now.path.as_str()) {
            // Touched or copied without its time, but as long: the rows read before.
            Some(was) if was.size == now.size => {
                if was.modified_ns != now.modified_ns {
                    tracing::info!(file = %now.path, "an input's time changed, not its size: read before, not again");
                }
                old += 1;
            }
            Some(was) => {
                return Err(Error::Input {
                    stage: "run".into(),
                    message: format!(
                        "`{}` changed after a run read it ({} bytes then, {} now): a lake's inputs are added to, never rewritten; add the new rows as a new file",
                        now.path, was.size, now.size
                    ),
                });
            }
            None => new.push(now),
        }
    }
    Ok((new, old))
}

/// A run id: the time and the pipeline's digest.
fn run_id(digest: &str, taken: &[&RunRecord]) -> String {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
    let base = format!("{stamp}-{}", &digest[..8]);
    let mut id = base.clone();
    let mut n = 1;
    while taken.iter().any(|r| r.run_id == id) {
        n += 1;
        id = format!("{base}-{n}");
    }
    id
}

/// Prints a progress event: a line for a person on a terminal, else a JSON line.
fn progress(ctx: &Context, event: &Value, line: &str) {
    if ctx.quiet || ctx.json {
        return;
    }
    let mut err = std::io::stderr().lock();
    if std::io::stderr().is_terminal() {
        let _ = writeln!(err, "{line}");
    } else {
        let _ = writeln!(err, "{event}");
    }
}

/// Runs `wai run`.
pub(crate) fn run(ctx: &Context, args: &RunArgs) -> Result<Outcome> {
    let text = std::fs::read_to_string(&args.pipeline).map_err(|e| Error::io(&args.pipeline, e))?;
    let pipeline = pipeline::parse(&args.pipeline, &text)?;
    let lake = if args.dry_run {
        // A dry run makes nothing: a lake that is not there yet has no history.
        if pipeline.lake.join("_wai").join("lake.json").exists() {
            Some(Lake::open(&pipeline.lake)?)
        } else {
            None
        }
    } else {
        Some(Lake::init(&pipeline.lake)?.0)
    };
    let _lock = match (&lake, args.dry_run) {
        (Some(l), false) => {
            let lock = l.lock()?;
            // Rows a killed run copied out of compacted files.
            l.clear_extracted()?;
            Some(lock)
        }
        _ => None,
    };
    let manifest = match &lake {
        Some(l) => l.manifest()?,
        None => lake::Manifest::default(),
    };
    let history: Vec<&RunRecord> = manifest
        .runs
        .iter()
        .filter(|r| r.pipeline_digest == pipeline.digest)
        .collect();
    let pending = match &lake {
        Some(l) if args.restart && !args.dry_run => {
            l.drop_pending(&pipeline.digest)?;
            None
        }
        Some(l) => l.pending(&pipeline.digest)?,
        None => None,
    };
    let resumed = pending.is_some();
    let record = if let Some(p) = pending {
        p
    } else {
        let (new, old) = new_inputs(ctx, &pipeline, &history)?;
        if new.is_empty() && !args.again {
            return up_to_date(&pipeline, &history, old);
        }
        let taken: Vec<&RunRecord> = manifest.runs.iter().collect();
        RunRecord {
            run_id: run_id(&pipeline.digest, &taken),
            pipeline: args.pipeline.display().to_string(),
            pipeline_digest: pipeline.digest.clone(),
            started: lake::now(),
            finished: None,
            inputs: new,
            stages: Vec::new(),
            gates: Vec::new(),
            exit: 0,
        }
    };
    if args.dry_run {
        return Ok(plan(&pipeline, &record, &history, resumed, lake.is_some()));
    }
    let Some(lake) = lake else {
        return Err(Error::Internal("the lake was not opened".into()));
    };
    check_compares(&pipeline, &args.pipeline, record.inputs.len())?;
    lake.save_pending(&record)?;
    // The measures' reads of the same rows share one scan (`pipeline::shared_scan`).
    let scope = crate::pipeline::shared_scan::Scope::open(
        (pipeline.shared_scan).unwrap_or_else(crate::pipeline::shared_scan::budget),
    )?;
    let mut runner = Runner::new(ctx, args, &pipeline, &lake, &manifest, &history, record);
    runner.scope = Some(&scope);
    // The stages after the last measure stream their files whole: the columns kept are let go.
    let last_measure =
        (pipeline.stages.iter()).rposition(|s| matches!(s.role, Role::Measure | Role::Compare));
    for i in 0..pipeline.stages.len() {
        if last_measure.is_none_or(|last| i > last) {
            let freed = scope.release();
            if freed > 0 {
                tracing::debug!(
                    freed,
                    stage = pipeline.stages[i].name,
                    "shared scan: columns let go, no measure is left"
                );
            }
        }
        runner.stage(i).inspect_err(|_| {
            let line = format!(
                "stage `{}` stopped the run; it is kept: run again to resume at this stage, or `wai run --restart` to start over",
                pipeline.stages[i].name
            );
            progress(ctx, &json!({"stage": pipeline.stages[i].name, "event": "failed", "message": line}), &line);
        })?;
    }
    let mut record = runner.record;
    drop(scope);
    let status = gates::verdict(&mut record, &pipeline);
    record.exit = i32::from(status.code());
    record.finished = Some(lake::now());
    let summary = summary(&record, &pipeline, resumed);
    let report = json!({
        "up_to_date": false,
        "run_id": record.run_id,
        "lake": pipeline.lake.display().to_string(),
        "resumed": resumed,
        "new_files": record.inputs.len(),
        "stages": record.stages.iter().map(|s| json!({"name": s.name, "kind": s.kind,
            "exit": s.status, "elapsed_s": s.elapsed_s, "rows": s.rows,
            "bytes_read": s.bytes_read, "scans": s.scans, "outputs": s.outputs, "results": s.results,
            "headline": s.headline})).collect::<Vec<_>>(),
        "gates": record.gates,
    });
    lake.commit(record)?;
    let json = Envelope::new("run", report)
        .inputs(&pipeline.inputs)
        .to_json()?;
    Ok(Outcome {
        text: summary,
        json,
        status,
    })
}

/// Refuses, before any work, a compare that would read the new input files themselves when
/// there are several (it reads one file of rows a side).
fn check_compares(pipeline: &Pipeline, file: &Path, new_files: usize) -> Result<()> {
    for (i, stage) in pipeline.stages.iter().enumerate() {
        let rows_before = (pipeline.stages[..i].iter())
            .any(|s| output_of(s, "").is_some() && s.role != Role::Export);
        if stage.role == Role::Compare && !rows_before && new_files > 1 {
            return Err(pipeline::at(
                file,
                stage.line,
                format!(
                    "stage `{}`: compare reads one file of this run's rows and {new_files} input files are new: put a convert or grade stage before it (nothing was run)",
                    stage.name
                ),
            ));
        }
    }
    Ok(())
}

/// The outcome of a run with no new input file: nothing ran.
fn up_to_date(pipeline: &Pipeline, history: &[&RunRecord], old: usize) -> Result<Outcome> {
    let last = history
        .last()
        .map_or(String::new(), |r| format!(" (last run `{}`)", r.run_id));
    let text = format!(
        "up to date: no input file is new ({} read before){last}; nothing ran (`--again` runs the measures anyway)",
        plural(old as u64, "file")
    );
    let json = Envelope::new(
        "run",
        json!({"up_to_date": true, "run_id": null, "new_files": 0, "stages": [], "gates": []}),
    )
    .inputs(&pipeline.inputs)
    .to_json()?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}

/// A run under way: its record, and the rows the next stage reads.
struct Runner<'a> {
    ctx: &'a Context,
    args: &'a RunArgs,
    pipeline: &'a Pipeline,
    lake: &'a Lake,
    manifest: &'a lake::Manifest,
    history: &'a [&'a RunRecord],
    record: RunRecord,
    /// This run's rows: the new input files, then the last data stage's output.
    current_new: Vec<String>,
    /// What the committed runs had at the same point, each file with the run that took it in:
    /// with `current_new`, every row so far.
    history_rows: Vec<(String, String)>,
    /// The digest of the new input files.
    input_digest: String,
    /// The run's shared scan.
    scope: Option<&'a crate::pipeline::shared_scan::Scope>,
    /// The last committed run's pace: each stage's seconds, by name, and the scales to this
    /// run: its new input bytes over that run's, and every input byte so far over that run's.
    pace: Option<(BTreeMap<String, f64>, f64, f64)>,
    /// Where rows of compacted files that a stage reads apart from their fellows are copied
    /// out to (`_wai/extracted/`), made when first needed and removed with the run.
    extracted: std::cell::OnceCell<tempfile::TempDir>,
}

impl<'a> Runner<'a> {
    fn new(
        ctx: &'a Context,
        args: &'a RunArgs,
        pipeline: &'a Pipeline,
        lake: &'a Lake,
        manifest: &'a lake::Manifest,
        history: &'a [&'a RunRecord],
        record: RunRecord,
    ) -> Self {
        let current_new: Vec<String> = record.inputs.iter().map(|f| f.path.clone()).collect();
        let history_rows: Vec<(String, String)> = (history.iter())
            .flat_map(|r| (r.inputs.iter()).map(|f| (r.run_id.clone(), f.path.clone())))
            .collect();
        let input_digest = sha256_hex(&serde_json::to_string(&record.inputs).unwrap_or_default());
        let bytes = |r: &RunRecord| r.inputs.iter().map(|f| f.size).sum::<u64>();
        let pace = (history.iter().enumerate().rev())
            .find(|(_, r)| bytes(r) > 0 && r.stages.iter().any(|s| s.skipped.is_none()))
            .map(|(at, last)| {
                let so_far = |runs: &[&RunRecord]| runs.iter().map(|r| bytes(r)).sum::<u64>();
                #[allow(clippy::cast_precision_loss, reason = "ratios of byte counts")]
                let (new, all) = (
                    bytes(&record) as f64 / bytes(last) as f64,
                    (so_far(history) + bytes(&record)) as f64 / so_far(&history[..=at]) as f64,
                );
                let seconds = (last.stages.iter())
                    .filter(|s| s.skipped.is_none())
                    .map(|s| (s.name.clone(), s.elapsed_s))
                    .collect();
                (seconds, new, all)
            });
        Self {
            ctx,
            args,
            pipeline,
            lake,
            manifest,
            history,
            record,
            current_new,
            history_rows,
            input_digest,
            scope: None,
            pace,
            extracted: std::cell::OnceCell::new(),
        }
    }

    /// The files holding the rows of `files` now: files the runs wrote that `wai lake compact`
    /// packed are read from the compacted files (whole when every part is read, else the
    /// parts' rows copied out).
    fn physical(&self, files: &[String]) -> Result<Vec<String>> {
        let pieces = self.lake.locate(self.manifest, files);
        if !pieces.iter().any(|p| matches!(p, lake::Piece::Rows { .. })) {
            return lake::readable(pieces, None);
        }
        if self.extracted.get().is_none() {
            let parent = self.lake.path("_wai/extracted");
            std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
            let dir = tempfile::Builder::new()
                .prefix("run-")
                .tempdir_in(&parent)
                .map_err(|e| Error::io(&parent, e))?;
            let _ = self.extracted.set(dir);
        }
        let dir = (self.extracted.get())
            .ok_or_else(|| Error::Internal("no folder for rows copied out".into()))?;
        lake::readable(pieces, Some(dir.path()))
    }

    /// `rel` under the lake, as a path the commands take.
    fn in_lake(&self, rel: &str) -> String {
        self.lake.path(rel).display().to_string()
    }

    /// The rows stage `i` of this run wrote at `out`: they are what the next stages read.
    fn wrote(&mut self, i: usize, out: &str) {
        self.history_rows = (self.history.iter())
            .filter_map(|r| Some((r.run_id.clone(), r.stages.get(i)?.outputs.first()?)))
            .map(|(id, o)| (id, self.in_lake(o)))
            .collect();
        self.current_new = vec![self.in_lake(out)];
    }

    /// Every row so far: the committed runs' files at this point, then this run's.
    fn current_all(&self) -> Vec<String> {
        (self.history_rows.iter().map(|(_, p)| p.clone()))
            .chain(self.current_new.iter().cloned())
            .collect()
    }

    /// For a pass-at over every row so far: tonight's rows, the rows of earlier runs no stored
    /// counts cover, and the flags that add the stored counts and save tonight's (covering this
    /// run and those earlier runs). `None` (read every row) when there are no new rows, or the
    /// stored counts overlap.
    fn counted(&self, stage: &Stage) -> Option<(Vec<String>, Vec<String>)> {
        if stage.kind != "pass-at" || stage.over != Over::All || self.current_new.is_empty() {
            return None;
        }
        let mut flags = Vec::new();
        let mut covered: Vec<String> = Vec::new();
        for run in self.history {
            let Some(done) = (run.stages.iter())
                .find(|s| s.name == stage.name && s.kind == stage.kind && s.skipped.is_none())
            else {
                continue;
            };
            for file in done.outputs.iter().filter(|o| o.starts_with("counts/")) {
                let path = self.lake.path(file);
                if !path.exists() {
                    // Gone: the runs it counted are read again, and tonight's file counts them.
                    tracing::warn!(file = %path.display(), "stored counts are gone: their runs' rows are read again");
                    continue;
                }
                // There but unreadable: every row is read (and nothing is saved).
                let covers = crate::stages::pass_at::Counts::covers(&path)?;
                if covers.iter().any(|c| covered.contains(c)) {
                    tracing::warn!(file = %path.display(), "stored counts overlap: every row is read again");
                    return None;
                }
                covered.extend(covers);
                flags.push(format!("--add-counts={}", path.display()));
            }
        }
        let mut inputs = Vec::new();
        let mut covers = vec![self.record.run_id.clone()];
        for (run, path) in &self.history_rows {
            if !covered.contains(run) {
                inputs.push(path.clone());
                if !covers.contains(run) {
                    covers.push(run.clone());
                }
            }
        }
        inputs.extend(self.current_new.iter().cloned());
        let save = self.lake.path(&format!(
            "counts/{}/run={}.json",
            stage.name, self.record.run_id
        ));
        flags.push(format!("--save-counts={}", save.display()));
        flags.extend(covers.iter().map(|c| format!("--counts-cover={c}")));
        Some((inputs, flags))
    }

    /// A compare stage's before arm, or why it is skipped.
    fn before_arm(&self, i: usize) -> Result<std::result::Result<String, String>> {
        let stage = &self.pipeline.stages[i];
        if self.current_new.len() != 1 {
            return Err(pipeline::at(
                &self.args.pipeline,
                stage.line,
                format!(
                    "stage `{}`: compare reads one file of this run's rows and there are {}: put a grade or convert stage before it",
                    stage.name,
                    self.current_new.len()
                ),
            ));
        }
        // The same rows of the baseline run: the output of the last data stage before this one.
        let data_before = self.pipeline.stages[..i]
            .iter()
            .rposition(|s| output_of(s, "").is_some() && s.role != Role::Export);
        let arm_of = |run: &RunRecord| -> Option<String> {
            match data_before {
                // The baseline run's stage of the same name and command (its pipeline may
                // differ from this one).
                Some(j) => (run.stages.iter())
                    .find(|s| {
                        s.name == self.pipeline.stages[j].name
                            && s.kind == self.pipeline.stages[j].kind
                            && s.skipped.is_none()
                    })
                    .and_then(|s| s.outputs.first())
                    .map(|o| self.in_lake(o)),
                None if run.inputs.len() == 1 => Some(run.inputs[0].path.clone()),
                None => None,
            }
        };
        let refused = |why: String| {
            pipeline::at(
                &self.args.pipeline,
                stage.line,
                format!("stage `{}`: {why}", stage.name),
            )
        };
        Ok(match stage.baseline.as_ref() {
            Some(Baseline::Path(p)) => Ok(p.clone()),
            // The last earlier run with rows there (a run with nothing new has none).
            Some(Baseline::Previous) => match self.history.iter().rev().find_map(|r| arm_of(r)) {
                Some(arm) => Ok(arm),
                None => Err("no earlier run of this pipeline with rows to compare against".into()),
            },
            Some(Baseline::Run(id)) => {
                let run = (self.manifest.runs.iter())
                    .find(|r| &r.run_id == id)
                    .ok_or_else(|| refused(format!("no committed run `{id}` in the lake")))?;
                Ok(arm_of(run).ok_or_else(|| {
                    refused(format!("run `{id}` has no single file of rows to compare"))
                })?)
            }
            None => Err("no baseline".into()),
        })
    }

    /// What stage `i` reads: its files, the flags that add stored counts, and a compare's
    /// before arm (or why the stage is skipped).
    #[allow(clippy::type_complexity, reason = "three values for one call")]
    fn reads(
        &self,
        i: usize,
    ) -> Result<(
        Vec<String>,
        Vec<String>,
        Option<std::result::Result<String, String>>,
    )> {
        let stage = &self.pipeline.stages[i];
        // A pass-at over every row so far reads tonight's rows and adds the earlier runs' stored
        // counts; other measures over every row read every row.
        let (inputs, extra) = match (self.counted(stage), stage.role) {
            (Some((inputs, flags)), _) => (inputs, flags),
            (None, Role::Measure) if stage.over == Over::All => (self.current_all(), Vec::new()),
            _ => (self.current_new.clone(), Vec::new()),
        };
        let inputs = self.physical(&inputs)?;
        // A stage with no rows to read (an `--again` run with nothing new) is skipped, as a
        // compare with no earlier run is: its report says why.
        if inputs.is_empty() {
            return Ok((
                inputs,
                extra,
                Some(Err("no new rows in this run".to_owned())),
            ));
        }
        let before = match stage.role {
            Role::Compare => Some(match self.before_arm(i)? {
                Ok(arm) => Ok(self
                    .physical(&[arm])?
                    .pop()
                    .ok_or_else(|| Error::Internal("a compare's arm located as no file".into()))?),
                Err(why) => Err(why),
            }),
            _ => None,
        };
        Ok((inputs, extra, before))
    }

    /// Runs stage `i`, or takes its outputs when a killed run committed it before.
    fn stage(&mut self, i: usize) -> Result<()> {
        let stage = &self.pipeline.stages[i];
        let total = self.pipeline.stages.len();
        let position = format!("[{}/{total}] {}", i + 1, stage.name);
        let out_rel = output_of(stage, &self.record.run_id);
        if let Some(done) = self.record.stages.get(i) {
            if let (Some(out), Some(_), None) =
                (done.outputs.first().cloned(), &out_rel, &done.skipped)
                && stage.role != Role::Export
            {
                self.wrote(i, &out);
            }
            progress(
                self.ctx,
                &json!({"stage": stage.name, "index": i + 1, "of": total, "event": "done_before"}),
                &format!("{position}: done before the run was stopped"),
            );
            return Ok(());
        }
        let (inputs, extra, before) = self.reads(i)?;
        let eta = self.eta(i);
        progress(
            self.ctx,
            &json!({"stage": stage.name, "index": i + 1, "of": total, "event": "start",
                    "files": inputs.len(), "eta_s": eta}),
            &format!(
                "{position}: reading {}{}",
                plural(inputs.len() as u64, "file"),
                eta.map_or(String::new(), |s| format!(
                    "; about {} left in the run, at the last run's pace",
                    seconds(s)
                ))
            ),
        );
        let started = std::time::Instant::now();
        let files_read: u64 = (inputs.iter())
            .chain(before.iter().filter_map(|b| b.as_ref().ok()))
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        let read_before = self.scope.map(crate::pipeline::shared_scan::Scope::read);
        let (status, doc, headline) = match &before {
            Some(Err(why)) => (
                ExitStatus::Success,
                // The columns a compare's history is read by, null: its table keeps them.
                json!({"report": {"skipped": why, "ok": null, "headline_word": "SKIPPED",
                    "headline_metric": null, "target_delta": null, "target_ci95": null,
                    "n_paired_tasks": null}}),
                format!("skipped: {why}"),
            ),
            _ => self.command(stage, &inputs, &extra, out_rel.as_deref(), before.as_ref())?,
        };
        let elapsed = started.elapsed().as_secs_f64();
        // A measure reads only through tables: what its scans read is what it read. A data
        // stage streams its files whole.
        let scans = self.scanned(stage.role, read_before);
        let bytes_read = scans.map_or(files_read, |(bytes, _)| bytes);
        let results_rel = self.land_results(stage, status, &doc, bytes_read, elapsed)?;
        let ran = !matches!(before, Some(Err(_)));
        let mut outputs: Vec<String> = out_rel.iter().filter(|_| ran).cloned().collect();
        for extra in doc["outputs"].as_array().into_iter().flatten() {
            let Some(p) = extra["path"].as_str() else {
                continue;
            };
            if let Ok(rel) = Path::new(p).strip_prefix(self.lake.root()) {
                let rel = rel.display().to_string();
                if !outputs.contains(&rel) {
                    outputs.push(rel);
                }
            }
        }
        let skipped = match &before {
            Some(Err(why)) => Some(why.clone()),
            _ => None,
        };
        if skipped.is_none()
            && stage.role != Role::Export
            && let Some(out) = &out_rel
        {
            self.wrote(i, out);
        }
        progress(
            self.ctx,
            &json!({"stage": stage.name, "index": i + 1, "of": total, "event": "done",
                    "elapsed_s": elapsed, "rows": rows_of(&doc), "bytes_read": bytes_read,
                    "exit": status.code()}),
            &format!(
                "{position}: {headline} ({})",
                pace_of(elapsed, rows_of(&doc))
            ),
        );
        self.record.stages.push(StageRecord {
            name: stage.name.clone(),
            kind: stage.kind.to_owned(),
            status: i32::from(status.code()),
            elapsed_s: elapsed,
            rows: rows_of(&doc),
            bytes_read,
            scans: scans.map(|(_, s)| s),
            outputs,
            results: results_rel,
            headline,
            skipped,
            report: Some(doc["report"].clone()),
        });
        self.lake.save_pending(&self.record)
    }

    /// What a measure's or compare's scans read since `before` (bytes, scans); `None` for a
    /// data stage.
    fn scanned(
        &self,
        role: Role,
        before: Option<crate::pipeline::shared_scan::Read>,
    ) -> Option<(u64, lake::Scans)> {
        match (before, self.scope, role) {
            (Some(b), Some(scope), Role::Measure | Role::Compare) => {
                let now = scope.read();
                Some((
                    now.bytes - b.bytes,
                    lake::Scans {
                        scans: now.scans - b.scans,
                        from_memory: now.from_memory - b.from_memory,
                    },
                ))
            }
            _ => None,
        }
    }

    /// The seconds the run has left from stage `i` on, at the last committed run's pace (its
    /// stages of the same names, scaled by input bytes); `None` without such a run.
    fn eta(&self, i: usize) -> Option<f64> {
        let (seconds, new, all) = self.pace.as_ref()?;
        // A measure over every row so far reads more each night; the rest read tonight's rows
        // (none on an `--again` run: they are skipped).
        let left: f64 = (self.pipeline.stages[i..].iter())
            .filter_map(|s| {
                let scale = if s.role == Role::Measure && s.over == Over::All {
                    all
                } else {
                    new
                };
                seconds.get(&s.name).map(|t| t * scale)
            })
            .sum();
        Some(left)
    }

    /// Writes stage `stage`'s report as rows of its results table; returns the file, relative
    /// to the lake.
    fn land_results(
        &self,
        stage: &Stage,
        status: ExitStatus,
        doc: &Value,
        bytes_read: u64,
        elapsed: f64,
    ) -> Result<String> {
        let mut common = Map::new();
        common.insert("run_id".into(), json!(self.record.run_id));
        common.insert("run_time".into(), json!(self.record.started));
        common.insert("pipeline".into(), json!(self.record.pipeline));
        common.insert("stage".into(), json!(stage.name));
        common.insert("status".into(), json!(status.code()));
        common.insert("input_digest".into(), json!(self.input_digest));
        common.insert(
            "settings_digest".into(),
            json!(sha256_hex(&format!(
                "{}\u{1f}{:?}\u{1f}{:?}",
                stage.flags.join("\u{1f}"),
                stage.over,
                stage.baseline
            ))),
        );
        common.insert("rows_read".into(), json!(rows_of(doc)));
        common.insert("bytes_read".into(), json!(bytes_read));
        common.insert("elapsed_s".into(), json!(elapsed));
        let mut rows = results::rows(stage.kind, &doc["report"], &common);
        if rows.is_empty() {
            rows.push(common);
        }
        let results_rel = format!(
            "{}/run={}-{}.parquet",
            lake::results_folder(stage.kind),
            self.record.run_id,
            stage.name
        );
        lake::write_parquet(&self.lake.path(&results_rel), &lake::results_batch(&rows)?)?;
        Ok(results_rel)
    }

    /// Runs `stage`'s command in this process: its status, `--json` document and first line.
    fn command(
        &self,
        stage: &Stage,
        inputs: &[String],
        extra: &[String],
        out_rel: Option<&str>,
        before: Option<&std::result::Result<String, String>>,
    ) -> Result<(ExitStatus, Value, String)> {
        let out = out_rel.map(|o| {
            let path = self.lake.path(o);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            Ok::<_, Error>(path.display().to_string())
        });
        let out = out.transpose()?;
        let before = before.and_then(|b| b.as_ref().ok()).map(String::as_str);
        let words = command_line(stage, extra, inputs, out.as_deref(), before);
        let cli = Cli::try_parse_from(&words).map_err(|e| {
            let first = e.to_string();
            pipeline::at(
                &self.args.pipeline,
                stage.line,
                format!(
                    "stage `{}`: {}",
                    stage.name,
                    first.lines().next().unwrap_or("")
                ),
            )
        })?;
        let mut sink = std::io::sink();
        let outcome = super::dispatch(cli.command, self.ctx, &mut sink)
            .map_err(|e| stage_error(e, &stage.name))?;
        let headline = results::headline(stage.kind, &outcome.json["report"], &outcome.text);
        Ok((outcome.status, outcome.json, headline))
    }
}

/// A time for a person: seconds under two minutes, else minutes.
fn seconds(s: f64) -> String {
    if s < 1.0 {
        "under 1 s".to_owned()
    } else if s < 120.0 {
        format!("{s:.0} s")
    } else {
        format!("{:.0} min", s / 60.0)
    }
}

/// A finished stage's time, and its rows and their rate when its report counts them.
fn pace_of(elapsed: f64, rows: Option<u64>) -> String {
    match rows {
        #[allow(clippy::cast_precision_loss, reason = "a rate for a person")]
        Some(n) if elapsed > 0.0 => format!(
            "{elapsed:.1} s, {}, {:.0} rows/s",
            plural(n, "row"),
            n as f64 / elapsed
        ),
        _ => format!("{elapsed:.1} s"),
    }
}

/// A stage's error, naming the stage (the run stays pending: run again to resume).
fn stage_error(e: Error, stage: &str) -> Error {
    match e {
        Error::Usage(m) => Error::Usage(format!("stage `{stage}`: {m}")),
        Error::Input { stage: s, message } => Error::Input {
            stage: s,
            message: format!(
                "stage `{stage}`: {message} (the run is kept: run again to resume at this stage)"
            ),
        },
        e => e,
    }
}

/// The summary a person reads.
fn summary(record: &RunRecord, pipeline: &Pipeline, resumed: bool) -> String {
    let mut text = format!(
        "run `{}` on `{}`{}: {} new",
        record.run_id,
        pipeline.lake.display(),
        if resumed { " (resumed)" } else { "" },
        plural(record.inputs.len() as u64, "file")
    );
    let width = record
        .stages
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0);
    for s in &record.stages {
        let _ = write!(
            text,
            "\n  {:width$}  exit {}  {:>6.1} s  {}",
            s.name, s.status, s.elapsed_s, s.headline
        );
    }
    if !record.gates.is_empty() {
        text.push_str("\ngates:");
        for g in &record.gates {
            let word = match (g.passed, g.value.as_str()) {
                (true, Some("skipped")) => "SKIP",
                (true, _) => "PASS",
                (false, _) => "FAIL",
            };
            let _ = write!(text, "\n  {word} {} (read {})", g.gate, g.value);
        }
    }
    // A stage's own check counts as a gate: say which failed, so exit 1 is never unexplained.
    for s in record
        .stages
        .iter()
        .filter(|s| s.status == 1 || s.status == 2)
    {
        let word = if s.status == 1 {
            "failed its check"
        } else {
            "is hollow"
        };
        let _ = write!(
            text,
            "\nstage `{}` {word} (exit {}): {}",
            s.name, s.status, s.headline
        );
    }
    let _ = write!(
        text,
        "\ncommitted; query the results with `wai sql --lake {} \"SELECT * FROM results_{}\"`",
        pipeline.lake.display(),
        // The table people ask first: pass@k's if the pipeline measures it, else the first
        // measure's, else the first stage's.
        (record.stages.iter())
            .find(|s| s.kind == "pass-at")
            .or_else(|| (record.stages.iter()).find(|s| {
                KIND_ROLES
                    .iter()
                    .any(|(k, r)| *k == s.kind && matches!(r, Role::Measure | Role::Compare))
            }))
            .or_else(|| record.stages.first())
            .map_or("pass_at".into(), |s| s.kind.replace('-', "_"))
    );
    text
}

/// `--dry-run`: what would be read and written, and the command each stage runs.
fn plan(
    pipeline: &Pipeline,
    record: &RunRecord,
    history: &[&RunRecord],
    resumed: bool,
    lake_exists: bool,
) -> Outcome {
    let mut text = format!(
        "lake `{}`{}; pipeline {} ({} earlier {})",
        pipeline.lake.display(),
        if lake_exists { "" } else { " (not made yet)" },
        &pipeline.digest[..12],
        history.len(),
        if history.len() == 1 { "run" } else { "runs" }
    );
    if resumed {
        let _ = write!(
            text,
            "\nresumes run `{}` after its stage {}",
            record.run_id,
            record.stages.len()
        );
    }
    let bytes: u64 = record.inputs.iter().map(|f| f.size).sum();
    let _ = write!(
        text,
        "\nnew: {} ({bytes} bytes)",
        plural(record.inputs.len() as u64, "file")
    );
    for f in record.inputs.iter().take(10) {
        let _ = write!(text, "\n  {}", f.path);
    }
    if record.inputs.len() > 10 {
        let _ = write!(text, "\n  ... and {} more", record.inputs.len() - 10);
    }
    let mut stages = Vec::new();
    for (i, stage) in pipeline.stages.iter().enumerate() {
        let reads = match (stage.role, stage.over) {
            (Role::Intake, _) => "the new input files",
            (Role::Measure, Over::All) => "every row so far",
            (Role::Compare, _) => "the baseline and this run's rows",
            _ => "this run's rows",
        };
        let writes = output_of(stage, &record.run_id).unwrap_or_else(|| "its report only".into());
        let done = if i < record.stages.len() {
            " (done)"
        } else {
            ""
        };
        let argv = command_line(
            stage,
            &[],
            &["ROWS".into()],
            output_of(stage, "RUN").as_deref(),
            (stage.role == Role::Compare).then_some("BEFORE"),
        );
        let _ = write!(
            text,
            "\n[{}] {}{done}: reads {reads}; writes {writes} and {}/\n    {}",
            i + 1,
            stage.name,
            lake::results_folder(stage.kind),
            argv.iter().map(|w| quoted(w)).collect::<Vec<_>>().join(" ")
        );
        stages.push(json!({"name": stage.name, "kind": stage.kind, "reads": reads, "writes": writes, "command": argv, "done": i < record.stages.len()}));
    }
    for gate in &pipeline.gates {
        let _ = write!(text, "\ngate: {}", gate.text);
    }
    let json = Envelope::new("run", json!({"dry_run": true, "run_id": record.run_id, "new_files": record.inputs, "stages": stages,
        "gates": pipeline.gates.iter().map(|g| g.text.clone()).collect::<Vec<_>>()}))
        .inputs(&pipeline.inputs)
        .to_json()
        .unwrap_or(Value::Null);
    Outcome {
        text,
        json,
        status: ExitStatus::Success,
    }
}
