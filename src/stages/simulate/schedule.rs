//! The scheduler: each run is a series of waves; a wave is decided from what the earlier waves
//! returned (retries, then groups waiting on a decision, then new asks), played (what the
//! checkpoint does not hold already), and landed in order.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;
use serde_json::Value;

use super::agent::{Agent, Job, Trajectory};
use super::alloc::{Alloc, Group, Slot};
use super::grid::{Cell, HARD_TIERS};
use super::options::{Options, Pinned, RepeatPolicy};
use super::report::{
    Progress, Report, RunSummary, finish_warnings, tally, tally_record, tier_label,
};
use super::resume::{self, ResumeKey, Resumed, rollout_id};
use super::rows::{AskRow, RowContext, ask_row, build_row, fixed_dims};
use super::scene::{scene_for, signature, unusable};
use super::setup::Setup;
use super::source::{Feed, Source};
use super::world::{Scene, World};
use super::writer::{Ask, Writer};
use super::{Inputs, PROBE};
use crate::error::{Error, Result};
use crate::pipeline::row::{Builder, Record};

/// Rows per batch handed to `land`.
const LAND_ROWS: usize = 512;

/// What the runs share: counts over every run.
#[derive(Default)]
struct Totals {
    /// Fault-cell asks, and those whose plan was kept.
    fault_cells: (u64, u64),
    /// Distinct tasks landed.
    tasks: HashSet<String>,
    /// Distinct asks landed.
    asks: HashSet<(String, String)>,
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
    } = inputs;
    let started = Instant::now();
    let setup = Setup::new(opts, agent)?;
    let resumed = resume::index(resumed, &setup.settings)?;
    let world = World::new(&opts.tools, &setup.known_ids, opts.seed);
    let writer = Writer {
        tools: &opts.tools,
        cells: &setup.cells,
        ids: &setup.known_ids,
        seed: opts.seed,
    };
    let mut report = setup.report(opts);
    let mut totals = Totals::default();
    // Run 0's asks, replayed by later runs.
    let mut first_run: Option<(Vec<Pinned>, u32)> = None;
    for run in 0..opts.runs {
        let mut r = Run::new(opts, &setup, &writer, run, first_run.as_ref());
        let stopped = loop {
            let mut wave: Vec<Slot> = std::mem::take(&mut r.alloc.retry);
            let mut budget_left = r.alloc.room.saturating_sub(wave.len() as u64);
            r.alloc.decide(&mut wave, &mut budget_left);
            r.open(&mut wave, &mut budget_left);
            if wave.is_empty() {
                break r.alloc.stop_reason(
                    opts.budget,
                    budget_left,
                    r.feed.is_pinned(),
                    opts.situations.map(|c| (c, r.situations.len())),
                );
            }
            let (records, fresh) =
                r.play(&wave, agent, &world, &resumed, &mut report, &mut totals)?;
            r.alloc.rows += records.len() as u64;
            r.alloc.room = opts.budget.saturating_sub(r.alloc.rows);
            emit(&records, &fresh, &mut land)?;
            if let Some(why) = r.alloc.dead() {
                break why;
            }
            progress(&Progress {
                run,
                rows: r.alloc.rows,
                cap: opts.budget,
                resumed: report.resumed,
                situations: r.situations.len() as u64,
                lost: r.alloc.lost,
                elapsed_s: started.elapsed().as_secs_f64(),
            });
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

/// Hands `records` to `land` in batches of [`LAND_ROWS`], built in parallel and landed in order.
fn emit(
    records: &[Record],
    fresh: &[bool],
    land: &mut impl FnMut(RecordBatch, &[bool]) -> Result<()>,
) -> Result<()> {
    if records.is_empty() {
        return Ok(());
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
    for (batch, mask) in batches.into_iter().zip(fresh.chunks(LAND_ROWS)) {
        land(batch, mask)?;
    }
    Ok(())
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

/// The asks of a run, with what their rollouts share.
#[derive(Default)]
struct Book {
    asks: Vec<Ask>,
    /// Each ask's scene and hidden context.
    scenes: Vec<(Scene, Option<Value>)>,
    /// Each ask's fixed row fields, where they do not depend on the rollout.
    rows: Vec<Option<AskRow>>,
    /// The task each ask replays.
    pins: Vec<Option<Pinned>>,
}

/// One run: `eval_run` `run` of the task set.
struct Run<'s> {
    opts: &'s Options,
    setup: &'s Setup,
    writer: &'s Writer<'s>,
    rc: RowContext<'s>,
    /// The run's number.
    number: u32,
    /// Rollouts per written ask.
    k: u32,
    feed: Feed,
    book: Book,
    alloc: Alloc,
    situations: HashSet<String>,
}

/// A wave's rollout, built: its row, its behaviour signature, and whether it is new (not
/// resumed).
type Built = Option<(Record, u64, bool)>;

impl<'s> Run<'s> {
    /// Run `run`: the replayed tasks, run 0's asks (`first_run`), or asks from the writer.
    fn new(
        opts: &'s Options,
        setup: &'s Setup,
        writer: &'s Writer<'s>,
        run: u32,
        first_run: Option<&(Vec<Pinned>, u32)>,
    ) -> Self {
        let (feed, k) = if let Some(tasks) = &opts.tasks {
            let k = opts
                .repeats
                .unwrap_or_else(|| tasks.iter().map(|t| t.rows).max().unwrap_or(1).max(1));
            (Feed::pinned(tasks.clone()), k)
        } else if let Some((pins, k)) = first_run {
            (Feed::pinned(pins.clone()), *k)
        } else {
            let source = Source::new(&setup.seeds, setup.phrasings, opts.probes);
            (Feed::Written(source), setup.k)
        };
        let policy = if feed.is_pinned() {
            RepeatPolicy::Fixed
        } else {
            setup.policy
        };
        Self {
            opts,
            setup,
            writer,
            rc: setup.row_context(opts),
            number: run,
            k,
            feed,
            book: Book::default(),
            alloc: Alloc::new(policy, opts.budget),
            situations: HashSet::new(),
        }
    }

    /// Opens new asks into `wave` while it has room, the budget lasts and asks are left.
    fn open(&mut self, wave: &mut Vec<Slot>, budget_left: &mut u64) {
        let opts = self.opts;
        while wave.len() < self.setup.wave && *budget_left > 0 && !self.alloc.exhausted {
            let Some((ask, pin)) = self.feed.next(self.writer, self.setup.hard_share) else {
                self.alloc.exhausted = true;
                break;
            };
            // The situations quota: seeds always fit.
            if let Some(cap) = opts.situations
                && !self.situations.contains(&ask.task_id)
                && self.situations.len() as u64 >= cap
                && ask.arm != "seed"
                && ask.arm != "pinned"
            {
                continue;
            }
            // A replayed ask keeps its own count of rows.
            let k_ask = pin
                .as_ref()
                .map_or(self.k, |p| opts.repeats.unwrap_or(p.rows).max(1));
            let first = match self.alloc.policy {
                RepeatPolicy::Fixed | RepeatPolicy::None => k_ask,
                RepeatPolicy::Successive => PROBE.min(k_ask),
            };
            if u64::from(first) > *budget_left && !self.alloc.groups.is_empty() {
                // A whole group does not fit: leave the budget to the open groups.
                self.alloc.exhausted = true;
                self.alloc.budget_cut = true;
                break;
            }
            let first = first.min(u32::try_from(*budget_left).unwrap_or(u32::MAX));
            self.situations.insert(ask.task_id.clone());
            let index = self.book.asks.len();
            let (scene, privileged) = scene_for(
                &ask,
                &self.setup.cells,
                pin.as_ref(),
                self.setup.fault_rate,
                opts.seed,
            );
            self.book.rows.push(
                fixed_dims(&self.rc, &ask, pin.as_ref())
                    .map(|d| ask_row(&self.rc, &ask, self.number, &scene, d, privileged.as_ref())),
            );
            self.book.scenes.push((scene, privileged));
            self.book.asks.push(ask);
            self.book.pins.push(pin);
            for i in 0..first {
                wave.push((index, i));
            }
            self.alloc.groups.push(Group::new(index, k_ask, first));
            *budget_left -= u64::from(first);
        }
    }

    /// Plays what of `wave` the checkpoint does not hold, and lands the wave in order: the rows
    /// and, per row, whether it is new. Unusable rollouts are re-rolled, then lost.
    fn play(
        &mut self,
        wave: &[Slot],
        agent: &mut dyn Agent,
        world: &World<'_>,
        resumed: &HashMap<ResumeKey, Resumed>,
        report: &mut Report,
        totals: &mut Totals,
    ) -> Result<(Vec<Record>, Vec<bool>)> {
        // Keys to look rows up in the checkpoint by (none without one).
        let keys: Vec<ResumeKey> = if resumed.is_empty() {
            Vec::new()
        } else {
            let asks = &self.book.asks;
            wave.iter()
                .map(|&(a, i)| rollout_id(&asks[a].task_id, asks[a].phrasing, i, self.number))
                .collect()
        };
        let jobs = jobs(&self.book, &self.alloc, wave, self.number, self.opts.seed);
        let by_job = play_fresh(agent, world, &jobs, |j| {
            keys.is_empty() || !resumed.contains_key(&keys[j])
        })?;
        let built = build(&self.rc, &self.book, wave, &jobs, &by_job, &keys, resumed);
        let mut records = Vec::with_capacity(wave.len());
        let mut fresh = Vec::with_capacity(wave.len());
        for (j, b) in built.into_iter().enumerate() {
            let (a, i) = wave[j];
            let Some((record, sig, is_new)) = b else {
                let t = by_job[j].as_ref();
                let why = t.and_then(unusable).unwrap_or("agent_error");
                if report.first_agent_error.is_none() {
                    report.first_agent_error = t.and_then(|t| t.error.clone());
                }
                self.alloc.unusable((a, i), why, report);
                continue;
            };
            self.alloc.landed(a, sig);
            match by_job[j].as_ref() {
                Some(t) => tally(report, t),
                None => tally_record(report, &record),
            }
            count(
                report,
                totals,
                &self.book,
                &self.setup.cells,
                (a, i),
                &jobs[j],
            );
            if !is_new {
                report.resumed += 1;
            }
            fresh.push(is_new);
            records.push(record);
        }
        Ok((records, fresh))
    }

    /// Run 0's asks that landed rows, as tasks for the later runs to replay, with the most rows
    /// any of them landed.
    fn first_run(&self) -> (Vec<Pinned>, u32) {
        let cells = &self.setup.cells;
        let mut per_ask: Vec<u32> = vec![0; self.book.asks.len()];
        for g in &self.alloc.groups {
            per_ask[g.ask] = g.landed;
        }
        let k = per_ask.iter().copied().max().unwrap_or(1).max(1);
        let pins = self
            .book
            .asks
            .iter()
            .enumerate()
            .filter(|(i, _)| per_ask[*i] > 0)
            .map(|(i, a)| {
                let (scene, privileged) =
                    scene_for(a, cells, None, self.setup.fault_rate, self.opts.seed);
                Pinned {
                    prompt: a.text.clone(),
                    task_id: a.task_id.clone(),
                    dims: a
                        .cell
                        .map(|c| {
                            cells[c]
                                .pairs()
                                .map(|(x, y)| (x.to_owned(), y.to_owned()))
                                .collect()
                        })
                        .unwrap_or_default(),
                    labels: a
                        .labels
                        .iter()
                        .map(|(x, y)| ((*x).to_owned(), y.clone()))
                        .collect(),
                    plan: scene.plan,
                    world_state: scene.world_state,
                    writer: a.writer.clone(),
                    privileged,
                    rows: per_ask[i],
                }
            })
            .collect();
        (pins, k)
    }
}

/// The jobs of `wave`.
fn jobs<'b>(book: &'b Book, alloc: &Alloc, wave: &[Slot], run: u32, seed: u64) -> Vec<Job<'b>> {
    wave.iter()
        .map(|&(a, i)| {
            let (scene, privileged) = &book.scenes[a];
            Job {
                ask: &book.asks[a],
                scene,
                privileged: privileged.as_ref(),
                rollout_index: i,
                eval_run: run,
                seed,
                attempt: alloc.attempts.get(&(a, i)).copied().unwrap_or(0),
            }
        })
        .collect()
}

/// Plays the jobs `fresh` picks (by index) with `agent`: each job's trajectory, `None` for
/// those not played.
///
/// # Errors
/// The agent failed, or returned another number of trajectories than it was given jobs.
fn play_fresh(
    agent: &mut dyn Agent,
    world: &World<'_>,
    jobs: &[Job<'_>],
    fresh: impl Fn(usize) -> bool,
) -> Result<Vec<Option<Trajectory>>> {
    let fresh: Vec<usize> = (0..jobs.len()).filter(|&j| fresh(j)).collect();
    let fresh_jobs: Vec<Job<'_>> = fresh.iter().map(|&j| jobs[j]).collect();
    let played = if fresh_jobs.is_empty() {
        Vec::new()
    } else {
        agent.play(&fresh_jobs, world)?
    };
    if played.len() != fresh_jobs.len() {
        return Err(Error::Internal(format!(
            "the agent returned {} trajectories for {} asks",
            played.len(),
            fresh_jobs.len()
        )));
    }
    let mut by_job: Vec<Option<Trajectory>> = vec![None; jobs.len()];
    for (j, t) in fresh.into_iter().zip(played) {
        by_job[j] = Some(t);
    }
    Ok(by_job)
}

/// The rows of a wave, built in parallel: a resumed row as the checkpoint holds it, a played
/// one from its trajectory, `None` for an unusable one (or one the interrupted run re-rolled).
fn build(
    rc: &RowContext<'_>,
    book: &Book,
    wave: &[Slot],
    jobs: &[Job<'_>],
    by_job: &[Option<Trajectory>],
    keys: &[ResumeKey],
    resumed: &HashMap<ResumeKey, Resumed>,
) -> Vec<Built> {
    (0..wave.len())
        .into_par_iter()
        .map(|j| {
            if let Some(r) = keys.get(j).and_then(|k| resumed.get(k)) {
                if r.attempt > jobs[j].attempt {
                    // The interrupted run re-rolled this rollout first: so does this one.
                    return None;
                }
                return Some((r.record.clone(), r.signature, false));
            }
            let t = by_job[j].as_ref()?;
            if unusable(t).is_some() {
                return None;
            }
            let sig = signature(t);
            Some((
                build_row(rc, &jobs[j], t, book.rows[wave[j].0].as_ref(), sig),
                sig,
                true,
            ))
        })
        .collect()
}

/// Counts a landed row of rollout `slot` in the report and the totals: its fault plan, its
/// tier, its task and ask.
fn count(
    report: &mut Report,
    totals: &mut Totals,
    book: &Book,
    cells: &[Cell],
    (a, i): Slot,
    job: &Job<'_>,
) {
    if job.scene.plan.is_some() {
        report.rows_with_fault_plan += 1;
    }
    let ask = &book.asks[a];
    if let Some(c) = ask.cell.map(|c| &cells[c])
        && c.get("tool_condition") != "success"
        && i == 0
        && book.pins[a].is_none()
    {
        totals.fault_cells.0 += 1;
        totals.fault_cells.1 += u64::from(job.scene.plan.is_some());
    }
    *report.tier_mix.counts.entry(tier_label(ask)).or_insert(0) += 1;
    totals.tasks.insert(ask.task_id.clone());
    totals.asks.insert((ask.task_id.clone(), ask.text.clone()));
}

#[cfg(test)]
mod tests {
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
                v["eval_run"].as_i64(),
            )
        };
        let rows: Vec<(String, Option<i64>)> = lines.iter().map(prompt).collect();
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
        emit(&records, &fresh, &mut |b: RecordBatch, m: &[bool]| {
            assert_eq!(b.num_rows(), m.len());
            sizes.push(b.num_rows());
            Ok(())
        })
        .unwrap();
        assert_eq!(sizes, [LAND_ROWS, 3]);
    }
}
