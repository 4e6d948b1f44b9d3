//! The scheduler: each run is a series of waves; a wave is decided from what the earlier waves
//! returned (retries, then groups waiting on a decision, then new asks), played (what the
//! checkpoint does not hold already), and landed in order. One run's state is [`super::run`].

use std::collections::HashSet;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;

use super::Inputs;
use super::alloc::Slot;
use super::grid::HARD_TIERS;
use super::options::{Options, Pinned};
use super::report::{Progress, Report, RunSummary, finish_warnings};
use super::resume;
use super::run::Run;
use super::setup::Setup;
use super::world::World;
use super::writer::Writer;
use crate::error::Result;
use crate::pipeline::row::{Builder, Record};

/// Rows per batch handed to `land`.
const LAND_ROWS: usize = 512;
/// Within a wave, a progress line after this many more finished rollouts ...
const PROGRESS_EVERY: usize = 10;
/// ... or this long since the last line.
const PROGRESS_EVERY_S: std::time::Duration = std::time::Duration::from_secs(10);

/// What the runs share: counts over every run.
#[derive(Default)]
pub(super) struct Totals {
    /// Fault-cell asks, and those whose plan was kept.
    pub(super) fault_cells: (u64, u64),
    /// Distinct tasks landed.
    pub(super) tasks: HashSet<String>,
    /// Distinct asks landed.
    pub(super) asks: HashSet<(String, String)>,
}

/// Runs the simulation: plays asks with the agent, hands each wave's rows to `land` (a batch
/// and, per row, whether it is new rather than resumed), and reports.
///
/// `inputs.resumed` holds rows of an earlier, interrupted run with the same settings (a
/// checkpoint): their rollouts are not played again.
///
/// # Errors
/// A pinned axis is wrong, the checkpoint was written under other settings, the agent cannot
/// run, or `land` failed.
pub(super) fn simulate(opts: &Options, inputs: Inputs<'_>) -> Result<Report> {
    let Inputs {
        agent,
        resumed,
        mut land,
        mut progress,
        writer: model_writer,
        mut steer,
    } = inputs;
    let started = Instant::now();
    // What beside the agent decides the asks: the writer, and a grader that steers.
    let mut decides: Vec<String> = Vec::new();
    if let Some(w) = model_writer {
        decides.push(w.name().to_owned());
    }
    if let Some(s) = steer.as_ref().filter(|s| s.mutate) {
        decides.push(format!("grade={}", s.name));
    }
    let decides = (!decides.is_empty()).then(|| decides.join(" "));
    let setup = Setup::new(opts, agent, decides.as_deref())?;
    let resumed = resume::index(resumed, &setup.settings)?;
    let world = World::new(&opts.tools, &setup.known_ids, opts.seed);
    let writer = Writer {
        tools: &opts.tools,
        cells: &setup.cells,
        ids: &setup.known_ids,
        seed: opts.seed,
        model: model_writer,
    };
    let mut report = setup.report(opts);
    let mut totals = Totals::default();
    // Run 0's asks, replayed by later runs.
    let mut first_run: Option<(Vec<Pinned>, u32)> = None;
    for run in 0..opts.runs {
        let mut r = Run::new(opts, &setup, &writer, run, first_run.as_ref());
        // The progress line's resumed count is this run's, as its rows are.
        let since = Since {
            job: started,
            run: Instant::now(),
            resumed: report.resumed,
        };
        let stopped = loop {
            let planning = Instant::now();
            let mut wave: Vec<Slot> = std::mem::take(&mut r.alloc.retry);
            let mut budget_left = r.alloc.room.saturating_sub(wave.len() as u64);
            r.alloc.decide(&mut wave, &mut budget_left);
            r.open(&mut wave, &mut budget_left, &mut report);
            if wave.is_empty() {
                break r.alloc.stop_reason(
                    opts.budget,
                    budget_left,
                    r.feed.is_pinned(),
                    opts.situations.map(|c| (c, r.situations.len())),
                );
            }
            // Within the wave, a line every 10 finished rollouts or 10 s (a model agent's wave
            // can take minutes).
            let at = progress_at(run, &r, opts, &report, since);
            let mut said = (0, Instant::now());
            let mut finished = |done: usize| {
                if done >= said.0 + PROGRESS_EVERY || said.1.elapsed() >= PROGRESS_EVERY_S {
                    said = (done, Instant::now());
                    progress(&at.clone().played(done as u64, (since.job, since.run)));
                }
            };
            let wave_started = Instant::now();
            let (records, fresh) = r.play(
                &wave,
                agent,
                &world,
                &resumed,
                &mut report,
                &mut totals,
                &mut finished,
            )?;
            r.alloc.rows += records.len() as u64;
            r.alloc.room = opts.budget.saturating_sub(r.alloc.rows);
            let played = wave_started.elapsed();
            let failed = emit(&records, &fresh, &mut land, steer.as_mut())?;
            tracing::debug!(
                run,
                wave = r.waves(),
                rollouts = wave.len(),
                plan_ms = wave_started.saturating_duration_since(planning).as_millis(),
                play_ms = played.as_millis(),
                land_ms = wave_started.elapsed().saturating_sub(played).as_millis(),
                "wave"
            );
            if steer.as_ref().is_some_and(|s| s.mutate) {
                for i in failed {
                    r.mutate(&records[i]);
                }
            }
            if let Some(why) = r.alloc.dead() {
                break why;
            }
            progress(&progress_at(run, &r, opts, &report, since));
        };
        r.alloc.close(&mut report);
        report.rows += r.alloc.rows;
        stopped.clone_into(&mut report.stopped_because);
        report.runs.push(RunSummary {
            rows: r.alloc.rows,
            stopped_because: stopped.to_owned(),
        });
        if run == 0 && opts.tasks.is_none() {
            first_run = Some(r.first_run());
        }
    }
    finish(&mut report, opts, &setup, &totals);
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Where a run's progress counts from: the start of the whole job and of this run, and the
/// job's resumed rows when the run started.
#[derive(Debug, Clone, Copy)]
struct Since {
    job: Instant,
    run: Instant,
    resumed: u64,
}

/// Where run `run` stands, landed waves only, its line written.
fn progress_at(run: u32, r: &Run<'_>, opts: &Options, report: &Report, since: Since) -> Progress {
    Progress {
        run,
        runs: opts.runs,
        rows: r.alloc.rows,
        cap: opts.budget,
        resumed: report.resumed - since.resumed,
        situations: r.situations.len() as u64,
        lost: r.alloc.lost,
        lost_by: report.lost.clone(),
        rerolled: report.rerolled,
        elapsed_s: since.job.elapsed().as_secs_f64(),
        run_elapsed_s: since.run.elapsed().as_secs_f64(),
        left_s: None,
        line: String::new(),
    }
    .with_line()
}

/// Hands `records` to `land` in batches of [`LAND_ROWS`], built in parallel and landed in order.
///
/// With a grader, each batch is graded first and lands with its verdicts; the indices (into
/// `records`) of the rows it failed come back.
fn emit(
    records: &[Record],
    fresh: &[bool],
    land: &mut impl FnMut(RecordBatch, &[bool]) -> Result<()>,
    mut steer: Option<&mut super::Steer<'_>>,
) -> Result<Vec<usize>> {
    let mut failed = Vec::new();
    if records.is_empty() {
        return Ok(failed);
    }
    let batches: Vec<RecordBatch> = records
        .par_chunks(LAND_ROWS)
        .map(|chunk| {
            let mut builder = Builder::new();
            for r in chunk {
                builder.push(r)?;
            }
            builder.finish()
        })
        .collect::<Result<_>>()?;
    for (n, (batch, mask)) in batches.into_iter().zip(fresh.chunks(LAND_ROWS)).enumerate() {
        let batch = match steer.as_deref_mut() {
            Some(s) => {
                let (graded, fails) = (s.grade)(batch)?;
                let first = n * LAND_ROWS;
                failed.extend(
                    fails
                        .iter()
                        .enumerate()
                        .filter(|(_, f)| **f)
                        .map(|(i, _)| first + i),
                );
                graded
            }
            None => batch,
        };
        land(batch, mask)?;
    }
    Ok(failed)
}

/// The counts over every run, the realized hard share, and the warnings.
fn finish(report: &mut Report, opts: &Options, setup: &Setup, totals: &Totals) {
    report.situations = totals.tasks.len() as u64;
    report.asks = totals.asks.len() as u64;
    let hard: u64 = report
        .tier_mix
        .counts
        .iter()
        .filter(|(t, _)| HARD_TIERS.contains(&t.as_str()))
        .map(|(_, n)| n)
        .sum();
    report.tier_mix.hard_share_realized = if report.rows == 0 {
        0.0
    } else {
        hard as f64 / report.rows as f64
    };
    let mut warnings = setup.warnings.clone();
    finish_warnings(
        report,
        opts,
        &setup.seeds,
        totals.fault_cells,
        &mut warnings,
    );
    report.warnings = warnings;
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::pipeline::io::{decode_line, render_jsonl};
    use crate::stages::simulate::agent::SeededAgent;
    use crate::stages::simulate::{Mode, demo};

    fn demo_options(budget: u64) -> Options {
        let mut opts = Options::new(demo::tools(), demo::POLICY.to_owned());
        opts.seeds = demo::SEEDS.iter().map(|s| (*s).to_owned()).collect();
        opts.seed = 7;
        opts.budget = budget;
        opts
    }

    /// The rows of a run as JSONL lines, with each row's freshness.
    fn play(opts: &Options, resumed: Vec<Record>) -> (Report, Vec<String>, Vec<bool>) {
        let mut agent = SeededAgent::new(0.3, &[]).unwrap();
        let mut lines = Vec::new();
        let mut fresh = Vec::new();
        let inputs = Inputs {
            agent: &mut agent,
            resumed,
            land: Box::new(|batch, mask| {
                lines.extend(render_jsonl(&batch)?);
                fresh.extend_from_slice(mask);
                Ok(())
            }),
            progress: Box::new(|_| {}),
            writer: None,
            steer: None,
        };
        let report = simulate(opts, inputs).unwrap();
        (report, lines, fresh)
    }

    #[test]
    fn the_same_seed_lands_the_same_rows_within_the_budget() {
        let opts = demo_options(60);
        let (report, lines, fresh) = play(&opts, Vec::new());
        let (_, again, _) = play(&opts, Vec::new());
        assert_eq!(lines, again);
        assert_eq!(report.rows, lines.len() as u64);
        assert!(report.rows <= 60 && report.rows > 0, "{}", report.rows);
        assert!(fresh.iter().all(|f| *f));
        assert_eq!(report.stopped_because, "budget");
        assert_eq!(report.runs.len(), 1);
    }

    #[test]
    fn a_resumed_run_lands_the_same_rows_and_plays_only_the_rest() {
        let opts = demo_options(50);
        let (_, lines, _) = play(&opts, Vec::new());
        let kept: Vec<Record> = lines[..20]
            .iter()
            .map(|l| decode_line(l.as_bytes()).unwrap())
            .collect();
        let (report, again, fresh) = play(&opts, kept);
        assert_eq!(report.resumed, 20);
        assert_eq!(fresh.iter().filter(|f| !**f).count(), 20);
        // The resumed rows carry `resumed` in their lineage; otherwise the rows are the same.
        let strip = |l: &str| l.replace(",\"resumed\":true", "");
        let again: Vec<String> = again.iter().map(|l| strip(l)).collect();
        assert_eq!(lines, again);
    }

    #[test]
    fn each_run_of_a_resumed_job_counts_its_own_resumed_rows() {
        let mut opts = demo_options(30);
        opts.runs = 2;
        let (report, lines, _) = play(&opts, Vec::new());
        let run_of = |l: &String| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["lineage"]["eval_run"].as_i64()
        };
        // Every row of run 0 and 4 of run 1 survive the kill.
        let zero = lines.iter().filter(|l| run_of(l) == Some(0)).count();
        let mut kept: Vec<&String> = lines.iter().filter(|l| run_of(l) == Some(0)).collect();
        kept.extend(lines.iter().filter(|l| run_of(l) == Some(1)).take(4));
        let kept: Vec<Record> = kept
            .iter()
            .map(|l| decode_line(l.as_bytes()).unwrap())
            .collect();
        let mut agent = SeededAgent::new(0.3, &[]).unwrap();
        let mut seen: Vec<(u32, u64, String)> = Vec::new();
        let inputs = Inputs {
            agent: &mut agent,
            resumed: kept,
            land: Box::new(|_, _| Ok(())),
            progress: Box::new(|p| seen.push((p.run, p.resumed, p.line.clone()))),
            writer: None,
            steer: None,
        };
        let again = simulate(&opts, inputs).unwrap();
        assert_eq!((again.resumed, again.rows), (zero as u64 + 4, report.rows));
        let last = |run: u32| seen.iter().rev().find(|s| s.0 == run).unwrap().clone();
        assert_eq!(last(0).1, zero as u64);
        let (_, one, line) = last(1);
        assert_eq!(one, 4, "{line}");
        assert!(line.contains("(4 resumed)"), "{line}");
    }

    #[test]
    fn rows_from_other_settings_do_not_resume() {
        let opts = demo_options(20);
        let (_, lines, _) = play(&opts, Vec::new());
        let mut other = demo_options(20);
        other.seed = 8;
        let kept = vec![decode_line(lines[0].as_bytes()).unwrap()];
        let mut agent = SeededAgent::new(0.3, &[]).unwrap();
        let inputs = Inputs {
            agent: &mut agent,
            resumed: kept,
            land: Box::new(|_, _| Ok(())),
            progress: Box::new(|_| {}),
            writer: None,
            steer: None,
        };
        let e = simulate(&other, inputs).unwrap_err();
        assert!(e.to_string().contains("other settings"), "{e}");
    }

    #[test]
    fn later_runs_replay_the_first_runs_asks() {
        let mut opts = demo_options(40);
        opts.runs = 2;
        opts.mode = Mode::Explore;
        let (report, lines, _) = play(&opts, Vec::new());
        assert_eq!(report.runs.len(), 2);
        assert_eq!(report.rows, report.runs[0].rows + report.runs[1].rows);
        let prompt = |l: &String| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["prompt"].as_str().unwrap().to_owned(),
                v["lineage"]["eval_run"].as_i64(),
            )
        };
        let rows: Vec<(String, Option<i64>)> = lines.iter().map(prompt).collect();
        assert!(rows.iter().any(|r| r.1 == Some(1)), "run 1 landed rows");
        let first: HashSet<&String> = rows
            .iter()
            .filter(|r| r.1 == Some(0))
            .map(|r| &r.0)
            .collect();
        assert!(
            rows.iter()
                .filter(|r| r.1 == Some(1))
                .all(|r| first.contains(&r.0))
        );
    }

    #[test]
    fn emit_lands_in_chunks_of_land_rows_in_order() {
        let opts = demo_options(1);
        let (_, lines, _) = play(&opts, Vec::new());
        let record = decode_line(lines[0].as_bytes()).unwrap();
        let records = vec![record; LAND_ROWS + 3];
        let fresh = vec![true; LAND_ROWS + 3];
        let mut sizes = Vec::new();
        emit(
            &records,
            &fresh,
            &mut |b: RecordBatch, m: &[bool]| {
                assert_eq!(b.num_rows(), m.len());
                sizes.push(b.num_rows());
                Ok(())
            },
            None,
        )
        .unwrap();
        assert_eq!(sizes, [LAND_ROWS, 3]);
    }
}
