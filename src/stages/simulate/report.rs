//! What a simulation did: rows, the grid, tiers, tools, faults and groups, with the warnings
//! its numbers call for.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::options::{Mode, Options, RepeatPolicy};
use super::writer::Ask;

pub(super) use super::tally::{tally, tally_record};

/// How one tool fared.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ToolCoverage {
    /// The tool.
    pub name: String,
    /// Rows that called it.
    pub rows: u64,
    /// Calls.
    pub calls: u64,
    /// Calls that worked.
    pub ok: u64,
    /// Calls a scheduled fault hit.
    pub injected: u64,
}

/// Counts by tier and the hard share asked for and got.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TierMix {
    /// Rows per tier.
    pub counts: BTreeMap<String, u64>,
    /// Asked for.
    pub hard_share_requested: f64,
    /// Got.
    pub hard_share_realized: f64,
}

/// One run of several.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Rows.
    pub rows: u64,
    /// Why it stopped.
    pub stopped_because: String,
}

/// What a simulate run did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Rows landed (resumed ones included).
    pub rows: u64,
    /// Rows taken from the checkpoint.
    pub resumed: u64,
    /// Distinct situations (tasks).
    pub situations: u64,
    /// Distinct asks.
    pub asks: u64,
    /// Why the (last) run stopped.
    pub stopped_because: String,
    /// explore or rl.
    pub mode: Mode,
    /// How rollouts were allocated.
    pub repeat_policy: RepeatPolicy,
    /// Rollouts per ask.
    pub repeats: u32,
    /// Asks per situation.
    pub phrasings: u32,
    /// Rows per run.
    pub budget: u64,
    /// The seed.
    pub seed: u64,
    /// The agent.
    pub agent: String,
    /// Grid cells, rules on the grid, clauses in the policy.
    pub grid: GridSummary,
    /// Rows per tier.
    pub tier_mix: TierMix,
    /// Per declared tool.
    pub tools: Vec<ToolCoverage>,
    /// Calls to tools the tools file does not give, by name.
    pub undeclared_calls: BTreeMap<String, u64>,
    /// Rows that called a tool the tools file does not give.
    pub rows_calling_undeclared: u64,
    /// Scheduled faults that fired, by mode.
    pub faults_injected: BTreeMap<String, u64>,
    /// Share of fault-cell asks whose plan was kept, and the rate asked for.
    pub fault_rate: f64,
    /// Rows that ran under a fault plan.
    pub rows_with_fault_plan: u64,
    /// Planted mistakes by behaviour (seeded agent).
    pub seeded: BTreeMap<String, u64>,
    /// Groups by how the allocation closed them (mixed, unanimous, cut, ...).
    pub groups: BTreeMap<String, u64>,
    /// Rollouts re-played after an unusable result.
    pub rerolled: u64,
    /// Rollouts that never became rows, by reason.
    pub lost: BTreeMap<String, u64>,
    /// Asks made from rows the in-loop grader failed (`--grade`), by aim: `world_fault` (a
    /// fault fired on the row) or `graded_failure`.
    pub mutations: BTreeMap<String, u64>,
    /// The first agent error, word for word.
    pub first_agent_error: Option<String>,
    /// Each run, with `--runs`.
    pub runs: Vec<RunSummary>,
    /// What a person should know.
    pub warnings: Vec<String>,
    /// Wall time (not serialized: the `--json` envelope holds the command's).
    #[serde(skip_serializing)]
    pub elapsed_s: f64,
}

/// The grid's size.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GridSummary {
    /// Cells.
    pub cells: u64,
    /// Rules on the rule axis.
    pub rules: u64,
    /// Clauses in the policy.
    pub policy_clauses: u64,
    /// Values per axis.
    pub axes: BTreeMap<String, u64>,
}

/// Progress: after each wave, and every 10 finished rollouts or 10 s within one.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    /// The run (0-based).
    pub run: u32,
    /// Runs in all (`--runs`).
    pub runs: u32,
    /// Rows landed in this run, and, within a wave, the rollouts of it that have finished.
    pub rows: u64,
    /// The run's budget.
    pub cap: u64,
    /// Rows taken from the checkpoint in this run.
    pub resumed: u64,
    /// Situations so far.
    pub situations: u64,
    /// Rollouts lost so far.
    pub lost: u64,
    /// Rollouts lost so far, by cause (`agent_error`, ...).
    pub lost_by: BTreeMap<String, u64>,
    /// Rollouts played again after an unusable one, so far.
    pub rerolled: u64,
    /// Seconds since the start.
    pub elapsed_s: f64,
    /// Seconds since this run started (the pace is this run's).
    #[serde(skip)]
    pub run_elapsed_s: f64,
    /// Seconds left at this pace, this run's and the runs after it, once 5 rows were played.
    pub left_s: Option<f64>,
    /// All of it in a line, in the reference's words: `120/2404 rollouts, 601 situations
    /// written, 1h2m elapsed, ~19h left, 96 re-rolled, 3 lost (3 agent error)`.
    pub line: String,
}

impl Progress {
    /// Fills in the time left and the line from the counts.
    #[must_use]
    pub fn with_line(mut self) -> Self {
        #[allow(clippy::cast_precision_loss, reason = "row counts")]
        let left = (self.rows >= self.resumed + MIN_PACE_ROWS).then(|| {
            let pace = self.run_elapsed_s / (self.rows - self.resumed) as f64;
            let runs_after = u64::from(self.runs.saturating_sub(self.run + 1));
            pace * (self.cap.saturating_sub(self.rows) + runs_after * self.cap) as f64
        });
        self.left_s = left;
        let mut line = format!("{}/{} rollouts", self.rows, self.cap);
        if self.resumed > 0 {
            let _ = write!(line, " ({} resumed)", self.resumed);
        }
        let _ = write!(
            line,
            ", {} situations written, {} elapsed",
            self.situations,
            clock(self.elapsed_s)
        );
        if let Some(l) = left {
            let _ = write!(line, ", ~{} left", clock(l));
        }
        let _ = write!(line, ", {} re-rolled, {} lost", self.rerolled, self.lost);
        if !self.lost_by.is_empty() {
            let causes: Vec<String> = self
                .lost_by
                .iter()
                .map(|(k, n)| format!("{n} {}", k.replace('_', " ")))
                .collect();
            let _ = write!(line, " ({})", causes.join(", "));
        }
        self.line = line;
        self
    }

    /// This (between waves) with `done` more rollouts finished, at the clocks' time now.
    #[must_use]
    pub(super) fn played(
        mut self,
        done: u64,
        clocks: (std::time::Instant, std::time::Instant),
    ) -> Self {
        self.rows += done;
        self.elapsed_s = clocks.0.elapsed().as_secs_f64();
        self.run_elapsed_s = clocks.1.elapsed().as_secs_f64();
        self.with_line()
    }
}

/// Rows played before the time left is guessed (the reference's 5).
const MIN_PACE_ROWS: u64 = 5;

/// A duration as a person reads it: `42s`, `7m3s`, `1h2m`, `19h`.
fn clock(seconds: f64) -> String {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a run's seconds"
    )]
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..36_000 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}h", s / 3600),
    }
}

/// The tier an ask's rows count under.
pub(super) fn tier_label(ask: &Ask) -> String {
    ask.labels
        .iter()
        .find(|(k, _)| *k == "tier")
        .map_or_else(|| "ordinary".to_owned(), |(_, v)| v.clone())
}

/// The warning for rollouts that called tools the tools file does not give: the mock world
/// answered them as unknown, so they say nothing about the declared tools.
fn undeclared_warning(report: &Report, warnings: &mut Vec<String>) {
    let rows = report.rows_calling_undeclared;
    if rows == 0 {
        return;
    }
    let calls: u64 = report.undeclared_calls.values().sum();
    let names: Vec<String> = report
        .undeclared_calls
        .iter()
        .map(|(name, n)| format!("`{name}` ({n})"))
        .collect();
    let declared = report.tools.iter().filter(|t| t.rows > 0).count();
    let also = if declared == 0 {
        " and none called a declared one"
    } else {
        ""
    };
    warnings.push(format!(
        "{rows} of {} rollouts called tools not in the tools file{also}: {calls} call(s) to {}. The world answers them as unknown tools, so they test nothing; give the agent the tools file's names, or add these tools to it.",
        report.rows,
        names.join(", ")
    ));
}

/// The warnings a finished run's numbers call for.
pub(super) fn finish_warnings(
    report: &mut Report,
    opts: &Options,
    seeds: &[String],
    fault_cells: (u64, u64),
    warnings: &mut Vec<String>,
) {
    let n = report.rows;
    if n == 0 {
        warnings.push(format!(
            "no rows: the run stopped because {} before any rollout landed",
            report.stopped_because
        ));
        return;
    }
    let lost: u64 = report.lost.values().sum();
    if lost > 0 {
        let by: Vec<String> = report
            .lost
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        warnings.push(format!(
            "{lost} rollout(s) never became rows ({}), so every rate in this run is over the {n} that did, and the missing ones are not missing at random. Fix the agent (its stderr is in the report's lost reasons) and run again with `checkpoint` to keep what landed.",
            by.join(", ")
        ));
    }
    undeclared_warning(report, warnings);
    if !opts.tools.is_empty()
        && report.tools.iter().all(|t| t.rows == 0)
        && report.rows_calling_undeclared == 0
    {
        warnings.push(format!(
            "0 of {n} rollouts called a tool, so this run says nothing about tool use. Put the ids your world has (order numbers, account names) in the tool descriptions or in `seeds`, and check the agent records its steps, before grading it."
        ));
    }
    if opts.tasks.is_none() && seeds.is_empty() {
        warnings.push(format!(
            "these {} situations were written from templates that know your tool names and the ids in their descriptions, not your domain. Pass `seeds` with a few real asks your agent gets before reading much into the scores.",
            report.situations
        ));
    }
    let mut dead = Vec::new();
    for t in &report.tools {
        let evidence = t.calls - t.injected;
        if evidence >= 3
            && let Some((_, hi)) =
                crate::stats::wilson::interval(t.ok as f64, evidence as f64, 1.96)
            && hi < 0.30
        {
            dead.push(format!("{} ({} of {evidence} calls worked)", t.name, t.ok));
        }
    }
    if !dead.is_empty() {
        warnings.push(format!(
            "{} tool(s) never worked: {}. The agent reports each miss and an honesty judge rewards it, so what the tool does is never tested. Put the ids the world has in the tool descriptions or in `seeds`.",
            dead.len(),
            dead.join(", ")
        ));
    }
    let unreached: Vec<&str> = report
        .tools
        .iter()
        .filter(|t| t.rows == 0)
        .map(|t| t.name.as_str())
        .collect();
    if !unreached.is_empty() && unreached.len() < report.tools.len() {
        warnings.push(format!(
            "no rollout called {}; raise `budget` or pin `axes` tool=... to reach it",
            unreached.join(", ")
        ));
    }
    if opts.fault_rate.is_some() && fault_cells.0 >= 20 {
        let asked = report.fault_rate;
        let got = fault_cells.1 as f64 / fault_cells.0 as f64;
        if (asked > 0.0 && got < 0.7 * asked) || (asked == 0.0 && got > 0.01) {
            warnings.push(format!("`fault_rate` {asked} was asked and {got:.2} of the fault cells' asks kept their fault (n = {})", fault_cells.0));
        }
    }
    if opts.hard_share.is_some()
        && n >= 20
        && report.tier_mix.hard_share_realized + 0.10 < report.tier_mix.hard_share_requested
    {
        warnings.push(format!(
            "hard share {:.2} was asked and {:.2} landed (n = {n}); the grid has too few hard cells for it: pin `axes` stance=...",
            report.tier_mix.hard_share_requested, report.tier_mix.hard_share_realized
        ));
    }
}

/// What a person should know about how the run went that the report does not say (the
/// agent's own notes aside): waves too small for the workers of a command agent (`workers`,
/// none for an agent in this process), and a checkpoint whose last line was `torn`.
pub fn run_notes(
    opts: &Options,
    agent_wave: usize,
    workers: Option<usize>,
    torn: bool,
) -> Vec<String> {
    let mut notes = Vec::new();
    // The wave is a constant of the run (so rows do not follow the worker count); few
    // rollouts per worker in a wave leave workers waiting at each wave's end.
    let wave = opts.wave.unwrap_or(agent_wave);
    if let Some(workers) = workers
        && workers * 4 > wave
    {
        notes.push(format!(
            "waves of {wave} rollouts over {workers} workers give each fewer than 4 between decisions, so workers wait at each wave's end; pass `wave` {} or more to keep them busy (the wave, not `workers`, decides which rollouts are played)",
            workers * 8
        ));
    }
    if torn {
        notes.push("the checkpoint's last line was cut off by the interrupted run; it was dropped and that rollout played again".into());
    }
    notes
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simulate: {} rows ({} resumed), {} situations, {} asks; stopped: {}; {:.1} s",
            self.rows,
            self.resumed,
            self.situations,
            self.asks,
            self.stopped_because,
            self.elapsed_s
        )?;
        if !self.mutations.is_empty() {
            let aims: Vec<String> = self
                .mutations
                .iter()
                .map(|(aim, n)| format!("{n} {aim}"))
                .collect();
            writeln!(
                f,
                "  asked again after the grader failed a row: {}",
                aims.join(", ")
            )?;
        }
        writeln!(
            f,
            "  agent {} | mode {} | {} | repeats {} | phrasings {} | budget {} | seed {}",
            self.agent,
            serde_json::to_value(self.mode)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            serde_json::to_value(self.repeat_policy)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            self.repeats,
            self.phrasings,
            self.budget,
            self.seed
        )?;
        writeln!(
            f,
            "  grid: {} cells ({} rules of {} policy clauses)",
            self.grid.cells, self.grid.rules, self.grid.policy_clauses
        )?;
        let tiers: Vec<String> = self
            .tier_mix
            .counts
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        writeln!(
            f,
            "  tiers: {} (hard share {:.2}, asked {:.2}, n = {})",
            tiers.join(", "),
            self.tier_mix.hard_share_realized,
            self.tier_mix.hard_share_requested,
            self.rows
        )?;
        writeln!(
            f,
            "  {:<24} {:>7} {:>7} {:>7} {:>9}",
            "tool", "rows", "calls", "ok", "injected"
        )?;
        for t in &self.tools {
            writeln!(
                f,
                "  {:<24} {:>7} {:>7} {:>7} {:>9}",
                t.name, t.rows, t.calls, t.ok, t.injected
            )?;
        }
        let faults: Vec<String> = self
            .faults_injected
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect();
        writeln!(
            f,
            "  faults injected: {} ({} rows ran under a fault plan; fault rate {})",
            if faults.is_empty() {
                "none".to_owned()
            } else {
                faults.join(", ")
            },
            self.rows_with_fault_plan,
            self.fault_rate
        )?;
        if !self.seeded.is_empty() {
            let s: Vec<String> = self
                .seeded
                .iter()
                .map(|(b, n)| format!("{b} {n}"))
                .collect();
            writeln!(f, "  planted mistakes: {}", s.join(", "))?;
        }
        if !self.groups.is_empty() {
            let g: Vec<String> = self
                .groups
                .iter()
                .map(|(b, n)| format!("{b} {n}"))
                .collect();
            writeln!(f, "  groups: {}", g.join(", "))?;
        }
        if self.runs.len() > 1 {
            let r: Vec<String> = self
                .runs
                .iter()
                .enumerate()
                .map(|(i, r)| format!("run {i}: {} rows ({})", r.rows, r.stopped_because))
                .collect();
            writeln!(f, "  {}", r.join("; "))?;
        }
        if let Some(e) = &self.first_agent_error {
            writeln!(f, "  first agent error: {e}")?;
        }
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::stages::simulate::agent::Trajectory;
    use crate::stages::simulate::world::Fault;

    #[test]
    fn run_notes_say_when_waves_leave_workers_waiting_and_a_checkpoint_was_torn() {
        let opts = Options::new(Vec::new(), String::new());
        assert!(run_notes(&opts, 64, Some(16), false).is_empty());
        assert!(run_notes(&opts, 8, None, false).is_empty());
        let notes = run_notes(&opts, 8, Some(4), true);
        assert_eq!(notes.len(), 2);
        assert!(notes[0].starts_with("waves of 8 rollouts over 4 workers"));
        assert!(notes[0].contains("pass `wave` 32 or more"));
        assert!(notes[1].contains("last line was cut off"));
        let opts = Options {
            wave: Some(1024),
            ..opts
        };
        assert!(run_notes(&opts, 8, Some(4), false).is_empty());
    }
    use crate::stages::simulate::agent::Step;

    fn report(tools: &[&str]) -> Report {
        let opts = Options::new(Vec::new(), "p".into());
        let mut r = crate::stages::simulate::setup::tests::setup(&opts).report(&opts);
        r.tools = tools
            .iter()
            .map(|t| ToolCoverage {
                name: (*t).into(),
                ..ToolCoverage::default()
            })
            .collect();
        r
    }

    #[test]
    fn progress_reads_as_the_reference_says_it() {
        let p = Progress {
            run: 0,
            runs: 1,
            rows: 120,
            cap: 2404,
            resumed: 0,
            situations: 601,
            lost: 3,
            lost_by: BTreeMap::from([("agent_error".to_owned(), 3)]),
            rerolled: 96,
            elapsed_s: 3720.0,
            run_elapsed_s: 3720.0,
            left_s: None,
            line: String::new(),
        }
        .with_line();
        assert_eq!(
            p.line,
            "120/2404 rollouts, 601 situations written, 1h2m elapsed, ~19h left, 96 re-rolled, 3 lost (3 agent error)"
        );
        // The pace is the rows this run played (not those it resumed), and the runs after it
        // are still to play: 1 s a row, 100 rows left of this run and 200 of the next.
        let later = Progress {
            runs: 2,
            rows: 100,
            cap: 200,
            resumed: 50,
            run_elapsed_s: 50.0,
            ..p.clone()
        }
        .with_line();
        assert_eq!(later.left_s, Some(300.0));
        assert!(
            later.line.starts_with("100/200 rollouts (50 resumed), "),
            "{}",
            later.line
        );
        let early = Progress { rows: 4, ..p }.with_line();
        assert_eq!(early.left_s, None, "no guess before 5 rows were played");
        assert_eq!(clock(42.4), "42s");
        assert_eq!(clock(423.0), "7m3s");
    }

    #[test]
    fn tally_counts_calls_rows_and_faults() {
        let step = |tool: &str, status: &str, injected: Option<Fault>| Step {
            tool: Some(tool.into()),
            arguments: Value::Null,
            result: json!({"status": status}),
            text: None,
            injected,
            texts: None,
            ..Default::default()
        };
        let t = Trajectory {
            steps: Arc::from(vec![
                step("a", "ok", None),
                step("a", "timeout", Some(Fault::Timeout)),
                step("b", "not_found", None),
            ]),
            final_text: String::new(),
            seeded: vec!["leak".into()],
            finish_reason: None,
            error: None,
            ..Default::default()
        };
        let mut r = report(&["a", "b"]);
        tally(&mut r, &t);
        let a = &r.tools[0];
        assert_eq!((a.rows, a.calls, a.ok, a.injected), (1, 2, 1, 1));
        assert_eq!((r.tools[1].calls, r.tools[1].ok), (1, 0));
        assert_eq!(r.faults_injected.get("timeout"), Some(&1));
        assert_eq!(r.seeded.get("leak"), Some(&1));
    }

    #[test]
    fn a_run_without_rows_says_why_and_the_text_opens_with_the_counts() {
        let opts = Options::new(Vec::new(), "p".into());
        let mut r = report(&[]);
        r.stopped_because = "agent_failed".into();
        let mut warnings = Vec::new();
        finish_warnings(&mut r, &opts, &[], (0, 0), &mut warnings);
        assert_eq!(
            warnings,
            ["no rows: the run stopped because agent_failed before any rollout landed"]
        );
        assert!(r.to_string().starts_with("simulate: 0 rows (0 resumed)"));
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("elapsed_s").is_none());
    }

    #[test]
    fn the_tier_of_an_ask_defaults_to_ordinary() {
        let mut ask = crate::stages::simulate::writer::seed_ask("x");
        ask.labels.retain(|(k, _)| *k != "tier");
        assert_eq!(tier_label(&ask), "ordinary");
        ask.labels.push(("tier", "boundary".into()));
        assert_eq!(tier_label(&ask), "boundary");
    }
}
