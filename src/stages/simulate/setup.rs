//! What a simulation fixes before its first wave: the resolved options, the grid, the seeds,
//! the ids the world knows, and the digest of the settings a checkpoint must match.

use std::collections::BTreeMap;

use serde_json::Value;

use super::agent::Agent;
use super::grid::{self, Axes, Cell};
use super::hash::sha256_hex;
use super::options::{Mode, Options, RepeatPolicy};
use super::report::{GridSummary, Report, TierMix, ToolCoverage};
use super::rows::RowContext;
use super::{policy, tools};
use crate::error::{Error, Result};

/// The constants of a simulation.
pub(super) struct Setup {
    /// How rollouts are allocated to a written ask.
    pub(super) policy: RepeatPolicy,
    /// Rollouts per ask.
    pub(super) k: u32,
    /// Asks per situation (sweeps over the grid).
    pub(super) phrasings: u32,
    /// Share of hard-tier asks.
    pub(super) hard_share: f64,
    /// Share of fault cells whose faults are kept.
    pub(super) fault_rate: f64,
    /// Rules on the grid's rule axis.
    rules: usize,
    /// Clauses in the policy.
    clauses: usize,
    /// The grid's axes.
    axes: Axes,
    /// The grid.
    pub(super) cells: Vec<Cell>,
    /// The seeds the budget covers, trimmed and without repeats.
    pub(super) seeds: Vec<String>,
    /// The ids the world knows: the tools' own, then those the seeds and tasks name.
    pub(super) known_ids: Vec<String>,
    /// Warnings found before any rollout.
    pub(super) warnings: Vec<String>,
    /// The agent's name.
    pub(super) agent: String,
    /// What decides the agent's choices ([`Agent::policy`]).
    agent_policy: String,
    /// The rows' `sampling` ([`Agent::sampling`]).
    sampling: Option<String>,
    /// The rows' `user_model` ([`Agent::user_model`]).
    user_model: Option<String>,
    /// The sizes of the run's waves: the agent's own, or one size from `--wave`.
    pub(super) wave: Waves,
    /// The digest of the settings that decide the schedule.
    pub(super) settings: String,
    /// The first 16 hex digits of the policy's SHA-256.
    policy_sha: String,
}

impl Setup {
    /// Resolves `opts` (checked already) for `agent`.
    ///
    /// # Errors
    /// A pinned axis is not on the grid or has no values.
    pub(super) fn new(opts: &Options, agent: &dyn Agent, writer: Option<&str>) -> Result<Self> {
        let (policy, k, phrasings) = opts.topology();
        let (rules, clauses) = policy::rules(&opts.policy, opts.rule_cap);
        let mut axes = Axes::build(&opts.tools, &rules);
        let mut rule_pinned = false;
        for (axis, values) in &opts.axes {
            axes.pin(axis, values.clone()).map_err(Error::Usage)?;
            rule_pinned |= axis == "rule";
        }
        let prefer_success = opts.prefer_success.unwrap_or(opts.mode != Mode::Rl);
        let cells = grid::cells(&axes, &opts.tools, prefer_success);
        let mut warnings = Vec::new();
        if clauses > rules.len() && !rule_pinned {
            warnings.push(format!(
                "The policy has {clauses} clauses and the grid's rule axis holds {}, so the rows cover the first {} in document order and none of the other {}. Pin the clauses that matter with `axes` rule=..., raise `rule_cap`, or split the policy and run each part.",
                rules.len(), rules.len(), clauses - rules.len()
            ));
        }
        let seeds = seeds(opts, k, &mut warnings);
        let known_ids = known_ids(opts, &seeds);
        let agent_name = agent.name().to_owned();
        let own = Waves::new(agent.first_wave(), agent.wave());
        let wave = opts.wave.map_or(own, |n| Waves::new(n, n));
        // The agent's policy, not only its name: a checkpoint of `seeded:0.35` must not resume
        // under `seeded:0.10` and mix two policies in one file.
        // The writer too: asks in a model's words are other asks.
        let decides = match writer {
            Some(w) => format!("{} writer={w}", agent.policy()),
            None => agent.policy(),
        };
        let settings = digest(opts, &seeds, &decides, wave, own);
        Ok(Self {
            policy,
            k,
            phrasings,
            hard_share: opts.resolved_hard_share(),
            fault_rate: opts.resolved_fault_rate(),
            rules: rules.len(),
            clauses,
            axes,
            cells,
            seeds,
            known_ids,
            warnings,
            agent: agent_name,
            agent_policy: agent.policy(),
            sampling: agent.sampling(),
            user_model: agent.user_model(),
            wave,
            settings,
            policy_sha: sha256_hex(&opts.policy)[..16].to_owned(),
        })
    }

    /// The report before any rollout: the settings, the grid, no counts.
    pub(super) fn report(&self, opts: &Options) -> Report {
        Report {
            rows: 0,
            resumed: 0,
            situations: 0,
            asks: 0,
            stopped_because: String::new(),
            mode: opts.mode,
            repeat_policy: if opts.tasks.is_some() {
                RepeatPolicy::Fixed
            } else {
                self.policy
            },
            repeats: self.k,
            phrasings: self.phrasings,
            budget: opts.budget,
            seed: opts.seed,
            agent: self.agent.clone(),
            grid: GridSummary {
                cells: self.cells.len() as u64,
                rules: self.rules as u64,
                policy_clauses: self.clauses as u64,
                axes: self
                    .axes
                    .axes
                    .iter()
                    .map(|(a, v)| (a.clone(), v.len() as u64))
                    .collect(),
            },
            tier_mix: TierMix {
                hard_share_requested: self.hard_share,
                ..TierMix::default()
            },
            tools: opts
                .tools
                .iter()
                .map(|t| ToolCoverage {
                    name: t.name.clone(),
                    ..ToolCoverage::default()
                })
                .collect(),
            undeclared_calls: BTreeMap::new(),
            rows_calling_undeclared: 0,
            faults_injected: BTreeMap::new(),
            fault_rate: self.fault_rate,
            rows_with_fault_plan: 0,
            seeded: BTreeMap::new(),
            groups: BTreeMap::new(),
            rerolled: 0,
            mutations: BTreeMap::new(),
            lost: BTreeMap::new(),
            first_agent_error: None,
            runs: Vec::new(),
            warnings: Vec::new(),
            elapsed_s: 0.0,
        }
    }

    /// The constants row building shares.
    pub(super) fn row_context(&self, opts: &Options) -> RowContext<'_> {
        RowContext {
            cells: &self.cells,
            agent: self.agent.clone(),
            agent_policy: self.agent_policy.clone(),
            sampling: self.sampling.clone(),
            user_model: self.user_model.clone(),
            policy_sha: self.policy_sha.clone(),
            policy_head: opts.policy.chars().take(120).collect(),
            policy_chars: opts.policy.chars().count(),
            seed: opts.seed,
            runs: opts.runs,
            replay: opts.tasks.is_some(),
            settings: self.settings.clone(),
        }
    }
}

/// The seeds, trimmed and without repeats, first in the schedule; what the budget cannot cover
/// at `k` rollouts each is dropped, and said in `warnings`.
fn seeds(opts: &Options, k: u32, warnings: &mut Vec<String>) -> Vec<String> {
    let mut seeds: Vec<String> = Vec::new();
    for s in &opts.seeds {
        let s = s.trim();
        if !s.is_empty() && !seeds.iter().any(|x| x == s) {
            seeds.push(s.to_owned());
        }
    }
    let covered = usize::try_from((opts.budget / u64::from(k)).max(1)).unwrap_or(usize::MAX);
    if seeds.len() > covered {
        warnings.push(format!(
            "`budget` {} covers {covered} of {} seeds at `repeats` {k}; raise `budget` to {}+ or drop seeds",
            opts.budget,
            seeds.len(),
            seeds.len() as u64 * u64::from(k)
        ));
        seeds.truncate(covered);
    }
    seeds
}

/// The ids the world knows: those the tool descriptions name, then those in the seeds and the
/// replayed tasks, in first-seen order.
fn known_ids(opts: &Options, seeds: &[String]) -> Vec<String> {
    let mut known = tools::described_ids(&opts.tools);
    let asks = seeds
        .iter()
        .map(String::as_str)
        .chain(opts.tasks.iter().flatten().map(|t| t.prompt.as_str()));
    for ask in asks {
        for id in tools::ids_in(ask) {
            if !known.contains(&id) {
                known.push(id);
            }
        }
    }
    known
}

/// The sizes of a run's waves: `first`, doubling each wave up to `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Waves {
    first: usize,
    cap: usize,
}

impl Waves {
    /// Waves from `first` (at least 1) up to `cap` (at least `first`).
    pub(super) fn new(first: usize, cap: usize) -> Self {
        let first = first.max(1);
        Self {
            first,
            cap: cap.max(first),
        }
    }

    /// The size of a run's wave number `n` (from 0).
    pub(super) fn size(self, n: usize) -> usize {
        let mut size = self.first;
        for _ in 0..n {
            if size >= self.cap {
                break;
            }
            size = size.saturating_mul(2);
        }
        size.min(self.cap)
    }
}

impl std::fmt::Display for Waves {
    /// `wave=N` for one size (as `--wave N` was always written), `waves=FIRST..CAP` otherwise.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.first == self.cap {
            write!(f, "wave={}", self.cap)
        } else {
            write!(f, "waves={}..{}", self.first, self.cap)
        }
    }
}

/// The digest of what decides the schedule and the rows (not the budget: a resumed run may go
/// further): 12 hex digits of a SHA-256.
fn digest(opts: &Options, seeds: &[String], agent: &str, wave: Waves, own: Waves) -> String {
    let tools: Vec<&Value> = opts.tools.iter().map(|t| &t.function).collect();
    let pinned: Vec<&str> = opts
        .tasks
        .iter()
        .flatten()
        .map(|t| t.prompt.as_str())
        .collect();
    let text = format!(
        "{}|{}|{:?}|{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}|{:?}|{}|{:?}|{}|{}{}",
        serde_json::to_string(&tools).unwrap_or_default(),
        opts.policy,
        seeds,
        opts.seed,
        opts.mode,
        opts.repeat_policy,
        opts.repeats,
        opts.phrasings,
        opts.situations,
        opts.fault_rate,
        opts.hard_share,
        opts.rule_cap,
        opts.axes,
        opts.prefer_success,
        opts.probes,
        pinned,
        opts.runs,
        agent,
        // Only a wave other than the agent's own is written in, so checkpoints from before
        // `--wave` existed resume; so is a growing schedule, so a checkpoint of a model agent's
        // waves of 256 (before they grew) is refused, not replayed under another schedule.
        if wave == own && wave.first == wave.cap {
            String::new()
        } else {
            format!("|{wave}")
        }
    );
    sha256_hex(&text)[..12].to_owned()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::stages::simulate::agent::SeededAgent;
    use crate::stages::simulate::demo;

    /// The setup of `opts` with the seeded agent.
    pub(in crate::stages::simulate) fn setup(opts: &Options) -> Setup {
        Setup::new(opts, &SeededAgent::new(0.0, &[]).unwrap(), None).unwrap()
    }

    #[test]
    fn seeds_are_trimmed_deduplicated_and_cut_to_the_budget() {
        let mut opts = Options::new(demo::tools(), String::new());
        opts.seeds = vec![
            " a ".into(),
            "a".into(),
            String::new(),
            "b".into(),
            "c".into(),
        ];
        opts.budget = 8;
        opts.repeats = Some(4);
        opts.repeat_policy = Some(RepeatPolicy::Fixed);
        let s = setup(&opts);
        assert_eq!(s.seeds, ["a", "b"]);
        assert!(
            s.warnings[0].contains("covers 2 of 3 seeds"),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn known_ids_add_those_the_seeds_name() {
        let mut opts = Options::new(demo::tools(), String::new());
        let described = tools::described_ids(&opts.tools);
        opts.seeds = vec!["where is ZX9001?".into()];
        let known = known_ids(&opts, &opts.seeds.clone());
        assert_eq!(&known[..described.len()], &described[..]);
        assert!(known.iter().any(|k| k == "ZX9001"), "{known:?}");
    }

    #[test]
    fn the_digest_names_a_wave_only_when_it_is_not_the_agents_or_grows() {
        let opts = Options::new(demo::tools(), "p".into());
        let one = |n| Waves::new(n, n);
        let own = digest(&opts, &[], "a", one(64), one(64));
        assert_eq!(own.len(), 12);
        assert_ne!(own, digest(&opts, &[], "a", one(32), one(64)));
        assert_ne!(own, digest(&opts, &[], "b", one(64), one(64)));
        let mut budget = opts.clone();
        budget.budget += 1;
        assert_eq!(own, digest(&budget, &[], "a", one(64), one(64)));
        // A growing schedule is always written in: a checkpoint made under one size is refused.
        let growing = Waves::new(64, 1024);
        let of_growing = digest(&opts, &[], "a", growing, growing);
        assert_ne!(of_growing, digest(&opts, &[], "a", one(256), one(256)));
        assert_ne!(of_growing, digest(&opts, &[], "a", one(1024), growing));
        assert_ne!(of_growing, own);
    }

    #[test]
    fn waves_double_from_the_first_to_the_cap() {
        let sizes = |w: Waves| (0..7).map(|n| w.size(n)).collect::<Vec<_>>();
        assert_eq!(
            sizes(Waves::new(64, 1024)),
            [64, 128, 256, 512, 1024, 1024, 1024]
        );
        // A cap that is no power of two of the first is reached, not passed.
        assert_eq!(sizes(Waves::new(3, 20)), [3, 6, 12, 20, 20, 20, 20]);
        assert_eq!(sizes(Waves::new(8, 8)), [8; 7]);
        assert_eq!(Waves::new(0, 0).size(0), 1);
        assert_eq!(Waves::new(64, 1024).size(usize::MAX), 1024);
        assert_eq!(
            (
                Waves::new(8, 8).to_string(),
                Waves::new(64, 1024).to_string()
            ),
            ("wave=8".to_owned(), "waves=64..1024".to_owned())
        );
    }

    #[test]
    fn a_pinned_axis_that_is_not_on_the_grid_is_an_error() {
        let mut opts = Options::new(demo::tools(), String::new());
        opts.axes = vec![("tool".into(), Vec::new())];
        assert!(Setup::new(&opts, &SeededAgent::new(0.0, &[]).unwrap(), None).is_err());
        opts.axes = vec![("tool".into(), vec!["lookup_order".into()])];
        let s = setup(&opts);
        assert!(s.cells.iter().all(|c| c.get("tool") == "lookup_order"));
        let r = s.report(&opts);
        assert_eq!(r.grid.cells, s.cells.len() as u64);
        assert_eq!(r.tools.len(), opts.tools.len());
    }
}
