//! One run of a simulation: its asks (the book), where they come from (the feed), how its
//! rollouts are allocated, and how a wave is played and landed.

use std::collections::{HashMap, HashSet};

use rayon::prelude::*;
use serde_json::Value;

use super::PROBE;
use super::agent::{Agent, Job, Trajectory};
use super::alloc::{Alloc, Group, Slot};
use super::grid::Cell;
use super::options::{Options, Pinned, RepeatPolicy};
use super::report::{Report, tally, tally_record, tier_label};
use super::resume::{ResumeKey, Resumed, rollout_id};
use super::rows::{AskRow, RowContext, ask_row, build_row, fixed_dims};
use super::scene::{scene_for, signature, unusable};
use super::schedule::Totals;
use super::setup::Setup;
use super::source::{Feed, Source};
use super::world::{Scene, World};
use super::writer::{Ask, Writer};
use crate::error::{Error, Result};
use crate::pipeline::row::Record;

/// The asks of a run, with what their rollouts share.
#[derive(Default)]
pub(super) struct Book {
    asks: Vec<Ask>,
    /// Each ask's scene and hidden context.
    scenes: Vec<(Scene, Option<Value>)>,
    /// Each ask's fixed row fields, where they do not depend on the rollout.
    rows: Vec<Option<AskRow>>,
    /// The task each ask replays.
    pins: Vec<Option<Pinned>>,
}

/// One run: `eval_run` `run` of the task set.
pub(super) struct Run<'s> {
    opts: &'s Options,
    setup: &'s Setup,
    writer: &'s Writer<'s>,
    rc: RowContext<'s>,
    /// The run's number.
    number: u32,
    /// Rollouts per written ask.
    k: u32,
    pub(super) feed: Feed,
    pub(super) book: Book,
    pub(super) alloc: Alloc,
    pub(super) situations: HashSet<String>,
    /// Asks already asked again after a failed row, by their index in the book.
    mutated: HashSet<usize>,
    /// The book's asks by task and text.
    asked: HashMap<(String, String), usize>,
    /// Every ask's text, lowercased (an ask made from a failed row says something new).
    said: HashSet<String>,
    /// Waves opened so far in this run (the next wave's size follows from it).
    waves: usize,
}

/// The first phrasing number of an ask made from a failed row: past every sweep's.
const MUTATION_PHRASING: u32 = 1 << 24;

/// A wave's rollout, built: its row, its behaviour signature, and whether it is new (not
/// resumed).
type Built = Option<(Record, u64, bool)>;

impl<'s> Run<'s> {
    /// Run `run`: the replayed tasks, run 0's asks (`first_run`), or asks from the writer.
    pub(super) fn new(
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
            mutated: HashSet::new(),
            asked: HashMap::new(),
            said: HashSet::new(),
            waves: 0,
        }
    }

    /// The in-loop grader failed `record`: its ask is changed into a new one (a mutator of
    /// [`super::mutate`], a different one for each failure in turn), asked next under the same
    /// situation and task (arm `failure_mutation`), once per written ask, when the run writes
    /// its asks from the grid. The aim, counted in the report, is `world_fault` when a fault
    /// fired on the row, else `graded_failure`.
    pub(super) fn mutate(&mut self, record: &Record) {
        let Feed::Written(source) = &mut self.feed else {
            return;
        };
        let Some(prompt) = record.prompt.as_deref() else {
            return;
        };
        let Some(&a) = self.asked.get(&(record.task_id.clone(), prompt.to_owned())) else {
            return;
        };
        let parent = &self.book.asks[a];
        if parent.cell.is_none() || parent.arm == "failure_mutation" || !self.mutated.insert(a) {
            return;
        }
        let n = self.mutated.len();
        let said = &self.said;
        let Some((mutator, text)) =
            super::mutate::mutate(&parent.text, n - 1, &|low: &str| said.contains(low))
        else {
            return;
        };
        self.said.insert(text.trim().to_lowercase());
        let fired = record
            .extra
            .as_deref()
            .is_some_and(|e| e.contains("\"faults_injected\""));
        let aim = if fired {
            "world_fault"
        } else {
            "graded_failure"
        };
        let mut labels: Vec<(&'static str, String)> = parent
            .labels
            .iter()
            .filter(|(name, _)| *name == "tier")
            .cloned()
            .collect();
        labels.push(("length", super::writer::length_label(&text).to_owned()));
        labels.push(("mutator", mutator.to_owned()));
        labels.push(("mutation_aim", aim.to_owned()));
        labels.push(("parent_failure_id", parent.text.chars().take(80).collect()));
        let phrasing = MUTATION_PHRASING.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        source.ask_next(Ask {
            text,
            phrasing,
            arm: "failure_mutation",
            writer: "template".to_owned(),
            labels,
            ..parent.clone()
        });
    }

    /// Waves opened so far in this run.
    pub(super) fn waves(&self) -> usize {
        self.waves
    }

    /// Opens new asks into `wave` while it has room, the budget lasts and asks are left.
    pub(super) fn open(
        &mut self,
        wave: &mut Vec<Slot>,
        budget_left: &mut u64,
        report: &mut Report,
    ) {
        let opts = self.opts;
        let size = self.setup.wave.size(self.waves);
        self.waves += 1;
        // The asks chosen for the wave, in order, and their pins.
        let mut chosen: Vec<(Ask, Option<Pinned>)> = Vec::new();
        // Asks made from failed rows are asked after the sweeps are used up too (without
        // telling the allocation that asks are left: its end-of-run growth goes on).
        while wave.len() < size
            && *budget_left > 0
            && (!self.alloc.exhausted || self.feed.has_queued())
        {
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
            let index = self.book.asks.len() + chosen.len();
            for i in 0..first {
                wave.push((index, i));
            }
            self.alloc.groups.push(Group::new(index, k_ask, first));
            *budget_left -= u64::from(first);
            chosen.push((ask, pin));
        }
        // Worded by the writer model only once they are sure to be asked (a call each, the
        // wave's calls together).
        if let Some(m) = self.writer.model {
            let worded = |(ask, pin): &(Ask, Option<Pinned>)| {
                // A mutation's form is its point: it is not worded again.
                pin.is_none()
                    && ask.arm != "seed"
                    && ask.arm != "failure_mutation"
                    && ask.cell.is_some()
            };
            let to_word: Vec<(Ask, &Cell)> = chosen
                .iter()
                .filter(|c| worded(c))
                .filter_map(|(ask, _)| Some((ask.clone(), &self.writer.cells[ask.cell?])))
                .collect();
            let mut words = m.rewrite(to_word).into_iter();
            for c in &mut chosen {
                if worded(c)
                    && let Some(w) = words.next()
                {
                    c.0 = w;
                }
            }
        }
        for (ask, pin) in chosen {
            // An ask made from a failed row counts, by its aim, once it is asked.
            if let Some((_, aim)) = ask.labels.iter().find(|(n, _)| *n == "mutation_aim") {
                *report.mutations.entry(aim.clone()).or_insert(0) += 1;
            }
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
            self.said.insert(ask.text.trim().to_lowercase());
            self.asked
                .entry((ask.task_id.clone(), ask.text.clone()))
                .or_insert(self.book.asks.len());
            self.book.asks.push(ask);
            self.book.pins.push(pin);
        }
    }

    /// Plays what of `wave` the checkpoint does not hold, and lands the wave in order: the rows
    /// and, per row, whether it is new. Unusable rollouts are re-rolled, then lost. `finished`
    /// hears how many of the wave's played rollouts have finished, as the agent tells it.
    #[allow(
        clippy::too_many_arguments,
        reason = "one wave's inputs and the run's counts"
    )]
    pub(super) fn play(
        &mut self,
        wave: &[Slot],
        agent: &mut dyn Agent,
        world: &World<'_>,
        resumed: &HashMap<ResumeKey, Resumed>,
        report: &mut Report,
        totals: &mut Totals,
        finished: &mut dyn FnMut(usize),
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
        let by_job = play_fresh(
            agent,
            world,
            &jobs,
            |j| keys.is_empty() || !resumed.contains_key(&keys[j]),
            finished,
        )?;
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
    pub(super) fn first_run(&self) -> (Vec<Pinned>, u32) {
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
    finished: &mut dyn FnMut(usize),
) -> Result<Vec<Option<Trajectory>>> {
    let fresh: Vec<usize> = (0..jobs.len()).filter(|&j| fresh(j)).collect();
    let fresh_jobs: Vec<Job<'_>> = fresh.iter().map(|&j| jobs[j]).collect();
    let played = if fresh_jobs.is_empty() {
        Vec::new()
    } else {
        agent.play(&fresh_jobs, world, finished)?
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
