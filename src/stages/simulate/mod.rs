//! Simulate offline: write asks from a covering grid over the agent's tools and policy, play them
//! against an agent and a mock tool world with scheduled faults, and land one row per rollout.
//!
//! - [`grid`]: the axes and the covering array (cells, tiers, stable ids).
//! - [`writer`]: the template writer (asks that name the tool's intent and an id the world knows).
//! - [`world`]: the mock world (records, world states, scheduled faults).
//! - [`agent`]: the agent contract and the seeded demo agent; [`command`]: command agents.
//! - [`demo`]: the built-in refund-support world and its program judge (`wai demo`).
//! - [`SimulateStage`]: the stage; `options` (what to play), `setup` (what a run fixes first),
//!   `schedule` and `alloc` (the waves and the groups), `source` (where asks come from),
//!   `scene` and `rows` (a rollout's world and its row), `resume` (checkpoints), `report`.
//!
//! The scheduler works in waves: each wave is a list of rollouts decided from what the earlier
//! waves returned, in a fixed order, played in parallel, and landed in order. Every draw is a
//! hash of the seed and fixed strings (cell ids, ask texts, indices), and the wave size is a
//! constant, so the same seed gives the same rows at any thread count. A checkpoint holds every
//! landed row; a resumed run replays the same schedule and skips the rollouts already on disk, so
//! it lands exactly the rows an uninterrupted run would.

pub mod agent;
pub mod asks;
pub mod command;
pub mod demo;
pub mod execute;
pub mod grid;
pub mod hash;
pub mod llm_writer;
pub mod model;
pub mod policy;
pub mod tools;
pub mod user;
pub mod world;
pub mod writer;

mod alloc;
mod answer;
mod faults;
mod mutate;
mod options;
mod phrases;
mod report;
mod resume;
mod rows;
mod run;
mod scene;
mod schedule;
mod setup;
mod source;
mod tally;
mod tasks;

use datafusion::arrow::array::RecordBatch;

pub use self::options::{MAX_BUDGET, MAX_RUNS, Mode, Options, Pinned, RepeatPolicy};
pub use self::report::{
    GridSummary, Progress, Report, RunSummary, TierMix, ToolCoverage, run_notes,
};
pub use self::resume::{ResumeKey, resume_key, rollout_id};
pub use self::tasks::pinned_tasks;
use crate::error::Result;
use crate::pipeline::row::Record;
use crate::stages::{Session, Stage};

/// Rollouts per wave: fixed, so the schedule does not depend on the machine.
pub const WAVE: usize = 2048;
/// Rollouts per wave of a command agent: small, so a slow agent's checkpoint keeps up with it,
/// and fixed, so its schedule does not depend on `--workers`.
pub const COMMAND_WAVE: usize = 64;
/// Rollouts of a new ask under the successive policy before the group is judged mixed or not.
pub const PROBE: u32 = 2;
/// Default mistake-free share of fault cells kept as faults when not in rl mode.
pub const DEFAULT_FAULT_RATE: f64 = 0.5;
/// Default fault rate in rl mode.
pub const RL_FAULT_RATE: f64 = 0.8;
/// Default share of hard-tier asks.
pub const DEFAULT_HARD_SHARE: f64 = 0.40;
/// One open-ended probe per this many asks.
const PROBE_EVERY: usize = 10;
/// Distinct open-ended probes (eleven families, three texts each).
const PROBES: u32 = 33;

/// Where a simulation's rows go: each wave's batch and, per row, whether it is new rather than
/// resumed.
pub type Land<'a> = Box<dyn FnMut(RecordBatch, &[bool]) -> Result<()> + 'a>;

/// Grades a batch of rows as it lands (`--grade`): the rows with their verdicts, and which of
/// them failed.
pub type Grade<'a> = Box<dyn FnMut(RecordBatch) -> Result<(RecordBatch, Vec<bool>)> + 'a>;

/// A grader in the loop: rows are graded as they land and, with `mutate`, each failed row's
/// situation is asked again in new words, so the budget moves toward what the grader catches.
pub struct Steer<'a> {
    /// The judge, as the settings digest names it.
    pub name: String,
    /// Grades a batch.
    pub grade: Grade<'a>,
    /// Whether a failed row's situation is asked again.
    pub mutate: bool,
}

/// What a simulation plays with, and where its rows go.
pub struct Inputs<'a> {
    /// Who plays the asks.
    pub agent: &'a mut dyn agent::Agent,
    /// Rows of an earlier, interrupted run with the same settings (a checkpoint): their
    /// rollouts are not played again.
    pub resumed: Vec<Record>,
    /// Takes each wave's rows: a batch and, per row, whether it is new rather than resumed.
    pub land: Land<'a>,
    /// Hears how the run stands after each wave.
    pub progress: Box<dyn FnMut(&Progress) + 'a>,
    /// A model that words the templated asks (`--writer`), or none (the template's words).
    pub writer: Option<&'a llm_writer::ModelWriter>,
    /// A grader in the loop (`--grade`), or none.
    pub steer: Option<Steer<'a>>,
}

/// The simulate stage: plays asks written from the grid (or replayed tasks) with an agent
/// against the mock world, and lands one row per rollout. It is not relational: it runs on
/// rows in memory, and its session is not used.
pub struct SimulateStage<'a>(std::marker::PhantomData<&'a ()>);

impl<'a> Stage for SimulateStage<'a> {
    type Inputs = Inputs<'a>;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "simulate";

    fn run(
        _session: &Session,
        inputs: Self::Inputs,
        options: &Self::Options,
    ) -> impl Future<Output = Result<Self::Report>> {
        std::future::ready(schedule::simulate(options, inputs))
    }
}
