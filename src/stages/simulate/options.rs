//! A simulation's options: what to play and how to allocate rollouts, checked before a run.

use serde::Serialize;
use serde_json::Value;

use super::policy;
use super::tools::Tool;
use super::world::Plan;
use super::{DEFAULT_FAULT_RATE, DEFAULT_HARD_SHARE, RL_FAULT_RATE};
use crate::error::{Error, Result};

/// What the run is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Broad coverage: one rollout per situation.
    Explore,
    /// Groups for RL: 8 rollouts per ask, allocated successively.
    Rl,
}

/// How rollouts are allocated to an ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepeatPolicy {
    /// Every situation once per phrasing, `repeats` rollouts at once.
    None,
    /// All `repeats` rollouts at once.
    Fixed,
    /// Two first; a mixed group is filled to `repeats`, a unanimous one stops early unless the
    /// run's own record says another rollout is likely to split it.
    Successive,
}

/// A task replayed from an earlier run (`--tasks`).
#[derive(Debug, Clone, PartialEq)]
pub struct Pinned {
    /// The ask.
    pub prompt: String,
    /// Its task id.
    pub task_id: String,
    /// The scenario dimensions it ran under.
    pub dims: Vec<(String, String)>,
    /// The labels it carried (tier, texture, ...).
    pub labels: Vec<(String, String)>,
    /// The fault plan it ran under.
    pub plan: Option<Plan>,
    /// The world state it ran under.
    pub world_state: Option<String>,
    /// Who wrote it.
    pub writer: String,
    /// Its hidden context.
    pub privileged: Option<Value>,
    /// Rows it had.
    pub rows: u32,
}

/// A simulate run's settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// The agent's tools.
    pub tools: Vec<Tool>,
    /// The policy (system prompt) text.
    pub policy: String,
    /// Literal asks, run first.
    pub seeds: Vec<String>,
    /// Every draw's seed.
    pub seed: u64,
    /// Rows per run.
    pub budget: u64,
    /// explore or rl.
    pub mode: Mode,
    /// The repeat policy (resolved from the mode when not given).
    pub repeat_policy: Option<RepeatPolicy>,
    /// Rollouts per ask (`k`).
    pub repeats: Option<u32>,
    /// Asks per situation (`n`).
    pub phrasings: Option<u32>,
    /// At most this many distinct situations.
    pub situations: Option<u64>,
    /// Share of fault cells whose faults are kept (default 0.5, 0.8 in rl).
    pub fault_rate: Option<f64>,
    /// Share of hard-tier asks in each sweep.
    pub hard_share: Option<f64>,
    /// Rules on the grid.
    pub rule_cap: usize,
    /// Axes pinned by the caller.
    pub axes: Vec<(String, Vec<String>)>,
    /// Turn most fault cells into success cells (default: on, off in rl).
    pub prefer_success: Option<bool>,
    /// Open-ended probes (off-topic, injection, ...) between the grid's asks.
    pub probes: bool,
    /// Replay these tasks instead of writing asks.
    pub tasks: Option<Vec<Pinned>>,
    /// Runs of the same task set (`eval_run` 0..N).
    pub runs: u32,
    /// Rollouts per wave, the schedule's unit (`None`: the agent's own, [`super::agent::Agent::wave`]).
    pub wave: Option<usize>,
}

impl Options {
    /// Settings with the defaults for `tools` and `policy`.
    pub fn new(tools: Vec<Tool>, policy: String) -> Self {
        Self {
            tools,
            policy,
            seeds: Vec::new(),
            seed: 0,
            budget: 1000,
            mode: Mode::Explore,
            repeat_policy: None,
            repeats: None,
            phrasings: None,
            situations: None,
            fault_rate: None,
            hard_share: None,
            rule_cap: policy::RULE_CAP,
            axes: Vec::new(),
            prefer_success: None,
            probes: true,
            tasks: None,
            runs: 1,
            wave: None,
        }
    }
}

impl Options {
    /// The resolved topology: `(policy, k, n)`.
    pub(super) fn topology(&self) -> (RepeatPolicy, u32, u32) {
        let policy = self.repeat_policy.unwrap_or(match self.mode {
            Mode::Explore => RepeatPolicy::None,
            Mode::Rl => RepeatPolicy::Successive,
        });
        let k = self.repeats.unwrap_or(match self.mode {
            Mode::Rl => 8,
            Mode::Explore if policy == RepeatPolicy::None => 1,
            Mode::Explore => 4,
        });
        (policy, k.max(1), self.phrasings.unwrap_or(1).max(1))
    }

    /// The share of hard-tier asks, resolved.
    pub(super) fn resolved_hard_share(&self) -> f64 {
        self.hard_share.unwrap_or(DEFAULT_HARD_SHARE)
    }

    /// The fault rate, resolved from the mode when not given.
    pub(super) fn resolved_fault_rate(&self) -> f64 {
        self.fault_rate.unwrap_or(if self.mode == Mode::Rl {
            RL_FAULT_RATE
        } else {
            DEFAULT_FAULT_RATE
        })
    }
}

/// The most runs of one task set.
pub const MAX_RUNS: u64 = 1000;
/// The most rollouts one simulation plans.
pub const MAX_BUDGET: u64 = 10_000_000;

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        if self.tools.is_empty()
            && self.policy.trim().is_empty()
            && self.tasks.is_none()
            && self.seeds.is_empty()
        {
            return Err(Error::option(
                "tools",
                "is needed (or a policy, seeds or tasks): simulate writes its asks from them",
            ));
        }
        if self.runs == 0 {
            return Err(Error::option("runs", "must be at least 1"));
        }
        crate::stages::at_most(
            "runs",
            u64::from(self.runs),
            MAX_RUNS,
            "each run replays every ask; 30 runs measure run-to-run noise closely",
        )?;
        if self.budget == 0 {
            return Err(Error::option("budget", "must be at least 1"));
        }
        crate::stages::at_most(
            "budget",
            self.budget,
            MAX_BUDGET,
            "split a larger study into runs or shards of this size",
        )?;
        // Zero rollouts per ask, or zero phrasings of a situation, would ask for nothing: not a
        // run to fall back from quietly (#30 item 10).
        if self.repeats == Some(0) {
            return Err(Error::option(
                "repeats",
                "must be at least 1 (rollouts per ask)",
            ));
        }
        if self.phrasings == Some(0) {
            return Err(Error::option(
                "phrasings",
                "must be at least 1 (asks per situation)",
            ));
        }
        let hard_share = self.resolved_hard_share();
        if !(0.0..=1.0).contains(&hard_share) {
            return Err(Error::option(
                "hard_share",
                format!("is a share in [0, 1], got {hard_share}"),
            ));
        }
        let fault_rate = self.resolved_fault_rate();
        if !(0.0..=1.0).contains(&fault_rate) {
            return Err(Error::option(
                "fault_rate",
                format!("is a share in [0, 1], got {fault_rate}"),
            ));
        }
        if self.tasks.is_some() && self.seeds.iter().any(|s| !s.trim().is_empty()) {
            return Err(Error::option(
                "seeds",
                "cannot be given with tasks: a replay writes no new asks",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::Options as _;

    fn key(o: &Options) -> Option<String> {
        match o.check() {
            Err(Error::Option { key, .. }) => Some(key),
            _ => None,
        }
    }

    #[test]
    fn check_names_the_option() {
        let ok = Options::new(Vec::new(), "a policy".into());
        assert_eq!(key(&ok), None);
        assert_eq!(
            key(&Options::new(Vec::new(), " ".into())).as_deref(),
            Some("tools")
        );
        let with = |f: fn(&mut Options)| {
            let mut o = ok.clone();
            f(&mut o);
            key(&o)
        };
        assert_eq!(with(|o| o.runs = 0).as_deref(), Some("runs"));
        assert_eq!(with(|o| o.budget = 0).as_deref(), Some("budget"));
        assert_eq!(with(|o| o.repeats = Some(0)).as_deref(), Some("repeats"));
        assert_eq!(
            with(|o| o.phrasings = Some(0)).as_deref(),
            Some("phrasings")
        );
        assert_eq!(with(|o| o.repeats = Some(1)).as_deref(), None);
        assert_eq!(
            with(|o| o.hard_share = Some(1.5)).as_deref(),
            Some("hard_share")
        );
        assert_eq!(
            with(|o| o.fault_rate = Some(-0.1)).as_deref(),
            Some("fault_rate")
        );
        assert_eq!(
            with(|o| {
                o.tasks = Some(Vec::new());
                o.seeds = vec!["x".into()];
            })
            .as_deref(),
            Some("seeds")
        );
        assert_eq!(
            with(|o| {
                o.tasks = Some(Vec::new());
                o.seeds = vec![" ".into()];
            }),
            None
        );
    }

    #[test]
    fn the_topology_follows_the_mode() {
        let mut o = Options::new(Vec::new(), "p".into());
        assert_eq!(o.topology(), (RepeatPolicy::None, 1, 1));
        assert_eq!(o.resolved_fault_rate(), DEFAULT_FAULT_RATE);
        o.repeat_policy = Some(RepeatPolicy::Fixed);
        assert_eq!(o.topology(), (RepeatPolicy::Fixed, 4, 1));
        o.mode = Mode::Rl;
        o.repeat_policy = None;
        o.phrasings = Some(0);
        assert_eq!(o.topology(), (RepeatPolicy::Successive, 8, 1));
        assert_eq!(o.resolved_fault_rate(), RL_FAULT_RATE);
        assert_eq!(o.resolved_hard_share(), DEFAULT_HARD_SHARE);
    }
}
